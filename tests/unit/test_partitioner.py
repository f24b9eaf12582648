"""murmur2 (Java-compatible) and the uniform sticky partitioner."""
from __future__ import annotations

import random
from collections import Counter
from typing import Callable, List

import pytest

from kproducer.producer import partitioner as part
from kproducer.producer.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

IMPLEMENTATIONS: List[Callable[[bytes], int]] = [part._murmur2_py]
if murmur2 is not part._murmur2_py:
    IMPLEMENTATIONS.append(murmur2)  # the compiled accelerator

# docs/design.md (protocol facts): signed 32-bit murmur2 and the partition among 6, as Java computes them
JAVA_VECTORS = [
    (b"21", -973932308, 0),
    (b"foobar", -790332482, 0),
    (b"a-little-bit-long-string", -985981536, 2),
    (b"a-little-bit-longer-string", -1486304829, 5),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 5),
    (b"abc", 479470107, 3),
]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda f: getattr(f, "__name__", "compiled"))
@pytest.mark.parametrize("key,signed,partition", JAVA_VECTORS)
def test_java_vectors(impl: Callable[[bytes], int], key: bytes, signed: int, partition: int) -> None:
    assert impl(key) == signed
    assert (impl(key) & 0x7FFFFFFF) % 6 == partition


@pytest.mark.parametrize("key,signed,partition", JAVA_VECTORS)
def test_partition_for_key(key: bytes, signed: int, partition: int) -> None:
    assert partition_for_key(key, 6) == partition


def test_every_tail_length_agrees_with_an_independent_implementation() -> None:
    kafka_default = pytest.importorskip("kafka.partitioner.default")
    rng = random.Random(42)
    for n in range(0, 70):
        for _ in range(5):
            key = bytes(rng.randrange(256) for _ in range(n))
            expected = kafka_default.murmur2(key) & 0x7FFFFFFF
            for impl in IMPLEMENTATIONS:
                assert impl(key) & 0x7FFFFFFF == expected, (n, key)


def test_implementations_agree_and_results_are_signed_32_bit() -> None:
    rng = random.Random(7)
    for _ in range(500):
        key = rng.randbytes(rng.randrange(0, 300))
        values = {impl(key) for impl in IMPLEMENTATIONS}
        assert len(values) == 1
        v = values.pop()
        assert -(2 ** 31) <= v < 2 ** 31


def test_to_positive() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert to_positive(5) == 5


# -- sticky --------------------------------------------------------------------------------------


def test_sticky_stays_until_batch_size_bytes_then_switches() -> None:
    sp = StickyPartitioner(1000, random.Random(1))
    avail = list(range(6))
    first = sp.partition("t", avail, 6)
    for _ in range(9):
        assert sp.partition("t", avail, 6) == first
        sp.record_appended("t", 100, avail, 6)
    assert sp.partition("t", avail, 6) == first  # 900 bytes so far
    sp.record_appended("t", 100, avail, 6)  # 1000: a batch's worth went there
    second = sp.partition("t", avail, 6)
    assert second != first
    sp.record_appended("t", 999, avail, 6)
    assert sp.partition("t", avail, 6) == second  # the count restarted at the switch


def test_sticky_is_per_topic() -> None:
    sp = StickyPartitioner(100, random.Random(2))
    a = sp.partition("a", range(50), 50)
    b = sp.partition("b", range(50), 50)
    sp.record_appended("a", 100, range(50), 50)
    assert sp.partition("a", range(50), 50) != a
    assert sp.partition("b", range(50), 50) == b


def test_sticky_only_picks_available_partitions() -> None:
    sp = StickyPartitioner(10, random.Random(3))
    avail = [1, 4]
    seen = set()
    for _ in range(50):
        seen.add(sp.partition("t", avail, 6))
        sp.record_appended("t", 10, avail, 6)
    assert seen == {1, 4}


def test_sticky_with_no_available_partition_uses_all() -> None:
    sp = StickyPartitioner(10, random.Random(4))
    seen = set()
    for _ in range(200):
        seen.add(sp.partition("t", (), 3))
        sp.record_appended("t", 10, (), 3)
    assert seen == {0, 1, 2}


def test_sticky_with_a_single_partition() -> None:
    sp = StickyPartitioner(10, random.Random(5))
    for _ in range(5):
        assert sp.partition("t", [2], 3) == 2
        sp.record_appended("t", 10, [2], 3)


def test_sticky_reselects_when_the_partition_count_shrinks() -> None:
    sp = StickyPartitioner(1000, random.Random(6))
    p = sp.partition("t", range(10), 10)
    while p < 5:
        sp.record_appended("t", 1000, range(10), 10)
        p = sp.partition("t", range(10), 10)
    assert sp.partition("t", range(3), 3) in (0, 1, 2)


def test_sticky_spreads_uniformly_over_batches() -> None:
    sp = StickyPartitioner(100, random.Random(8))
    counts: Counter[int] = Counter()
    for _ in range(6000):
        counts[sp.partition("t", range(6), 6)] += 1
        sp.record_appended("t", 100, range(6), 6)
    assert set(counts) == set(range(6))
    assert all(700 <= c <= 1300 for c in counts.values())


def test_next_partition_never_repeats_the_previous_one() -> None:
    sp = StickyPartitioner(100, random.Random(9))
    for prev in range(4):
        for _ in range(50):
            assert sp.next_partition(range(4), 4, prev) != prev


def test_record_appended_for_an_unknown_topic_is_ignored() -> None:
    sp = StickyPartitioner(100)
    sp.record_appended("never-partitioned", 1000, range(3), 3)
    assert 0 <= sp.partition("never-partitioned", range(3), 3) < 3


def test_sticky_runs_choose_what_per_record_calls_would() -> None:
    import random as _random

    from kproducer.producer.partitioner import StickyPartitioner as _Sticky

    rng_sizes = _random.Random(5)
    for batch_size in (1, 100, 1000, 16384):
        sizes = [rng_sizes.choice([1, 10, 110, 1034, 20000]) for _ in range(500)]
        one = _Sticky(batch_size, rng=_random.Random(9))
        per_record = []
        for size in sizes:
            per_record.append(one.partition("t", (), 6))
            one.record_appended("t", size, (), 6)
        bulk = _Sticky(batch_size, rng=_random.Random(9))
        runs = bulk.runs("t", sizes[:200], (), 6) + bulk.runs("t", sizes[200:], (), 6)
        flat = [p for p, a, b in runs for _ in range(a, b)]
        assert flat == per_record
        assert bulk.state == one.state  # the state carries over between calls, as per record
