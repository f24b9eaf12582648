"""Rules of the buffer pool and the producer batch that mutation testing (tools/mutation.sh, docs/testing.md
"Mutation testing") found no unit test pinned down: a mutant of each line survived every test of the
producer core. Each test states the rule it holds."""
from __future__ import annotations

import random
import threading
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

from kproducer.producer.batch import ProducerBatch
from kproducer.producer.buffer_pool import BufferPool
from kproducer.producer.partitioner import ClusterView, RoundRobinPartitioner, StickyPartitioner
from kproducer.protocol.records import RecordBatchBuilder, read_batches


def pool(total: int = 1000, batch_size: int = 100) -> BufferPool:
    return BufferPool(total, batch_size)


def test_try_allocate_takes_memory_only_when_it_needs_no_waiting() -> None:
    p = pool()
    assert p.try_allocate(0) and p.available_memory() == 1000  # nothing to reserve: always yes
    assert p.try_allocate(1000) and p.available_memory() == 0  # exactly what is free: yes
    assert not p.try_allocate(1)
    p.deallocate(1000)
    p.close()
    assert p.try_allocate(0)  # (still nothing to reserve)
    assert not p.try_allocate(1)  # closed, with nobody waiting: no


def test_producer_batch_try_append_keeps_the_key_and_the_headers() -> None:
    b = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    fut = b.try_append(1_700_000_000_000, b"key", b"value", [("h", b"1")], None, 5.0)
    assert fut is not None and b.last_append_ms == 5.0
    (rec,) = read_batches(b.builder.build())[0].records
    assert (rec.key, rec.value, rec.headers) == (b"key", b"value", [("h", b"1")])


def test_a_batch_never_sent_is_not_backing_off() -> None:
    b = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    b.retry_backoff_ms = 100.0
    assert not b.is_backing_off(50.0)  # attempts 0: a first send has no backoff
    b.reenqueued(60.0, 100.0)
    assert b.is_backing_off(100.0) and not b.is_backing_off(160.0)
    assert b.in_flight is False and b.attempts == 1


def test_every_thread_waiting_on_a_batch_is_released() -> None:
    """The first waiter makes the batch's event; every later one must wait on that same event (one made for
    itself would replace it, and done() would release only the last waiter)."""
    b = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    assert not b.wait(0)  # not done: times out at once, and leaves the event made
    event = b._event
    assert event is not None
    results = []
    threads = [threading.Thread(target=lambda: results.append(b.wait(30))) for _ in range(2)]
    for t in threads:
        t.start()
    assert not b.wait(0)
    assert b._event is event
    b.done(0, -1, None)
    for t in threads:
        t.join(60)
    assert results == [True, True]
    assert b.wait(0)


def test_a_split_part_takes_over_every_reservation_of_the_batch() -> None:
    big = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0, reserved_bytes=100)
    big.extra_bytes = 40
    part = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    part.take_memory_of(big)
    assert (part.reserved_bytes, part.extra_bytes) == (100, 40)
    assert (big.reserved_bytes, big.extra_bytes) == (0, 0)
    assert big.memory_to_release() == (0, 0)


# -- partitioners ---------------------------------------------------------------------------------------


def view(counts: Dict[str, Optional[int]], available: Dict[str, Tuple[int, ...]]) -> ClusterView:
    leaders = {(t, p): 1 for t, ps in available.items() for p in ps}
    cluster = SimpleNamespace(partition_counts={t: c for t, c in counts.items() if c is not None},
                              available=available, partitions={t: ("info",) for t in available}, leaders=leaders)
    return ClusterView(cluster)  # type: ignore[arg-type]


def round_robin(rr: RoundRobinPartitioner, topic: str, cluster: ClusterView, n: int) -> List[int]:
    return [rr.partition(topic, None, None, b"v", b"v", cluster) for _ in range(n)]


def test_round_robin_counts_each_topic_on_its_own_over_the_partitions_with_a_leader() -> None:
    cluster = view({"a": 3, "b": 3}, {"a": (0, 1, 2), "b": (0, 2)})
    rr = RoundRobinPartitioner()
    got = [(t, rr.partition(t, None, None, b"v", b"v", cluster)) for t in "aabab"]
    assert got == [("a", 0), ("a", 1), ("b", 0), ("a", 2), ("b", 2)]


def test_round_robin_without_leaders_uses_every_partition_and_without_metadata_partition_0() -> None:
    cluster = view({"a": 3, "none": None}, {})
    rr = RoundRobinPartitioner()
    got = round_robin(rr, "a", cluster, 4)
    assert got == [0, 1, 2, 0] and all(type(p) is int for p in got)
    assert round_robin(rr, "none", cluster, 3) == [0, 0, 0]


def test_cluster_view_answers_for_a_topic_it_does_not_know() -> None:
    cluster = view({"a": 2}, {"a": (1,)})
    assert cluster.available_partitions("a") == (1,) and cluster.available_partitions("zz") == ()
    assert cluster.partitions("a") == ("info",) and cluster.partitions("zz") == ()
    assert cluster.leader("a", 1) == 1 and cluster.leader("a", 0) is None
    assert cluster.partition_count("a") == 2 and cluster.partition_count("zz") is None
    assert repr(cluster) == "<ClusterView topics=['a']>"


def test_sticky_partitioner_picks_again_when_the_topic_shrank_below_its_partition() -> None:
    sp = StickyPartitioner(100, rng=random.Random(1))
    sp.state["t"] = [2, 50, 100]
    assert sp.partition("t", (0, 1), 2) in (0, 1)
    assert sp.state["t"][1] == 0


def test_sticky_partitioner_first_pick_is_among_the_available_partitions_and_any_of_them() -> None:
    sp = StickyPartitioner(100, rng=random.Random(7))
    assert sp.partition("only-2", (2,), 4) == 2
    firsts = {sp.partition(f"t{i}", (0, 1), 2) for i in range(100)}
    assert firsts == {0, 1}  # (no partition is excluded from the first pick)
    assert sp.next_partition((3,), 4, 0) == 3
    assert sp.next_partition((), 3, 0) in (1, 2)  # no leader known: any other partition


def test_sticky_partitioner_reads_the_topic_s_batch_worth_again_at_each_switch() -> None:
    worth = {"a": 10}
    sp = StickyPartitioner(100, rng=random.Random(3), batch_bytes=lambda t: worth.get(t, 1000))
    sp.partition("a", (0, 1), 2)
    sp.record_appended("a", 10, (0, 1), 2)  # a batch's worth: switch
    assert sp.state["a"][1:] == [0, 10]
    runs = sp.runs("a", [5] * 6, (0, 1), 2)
    assert [(start, stop) for _p, start, stop in runs] == [(0, 2), (2, 4), (4, 6)]
