"""The compression ratio estimator, and compressed batches that fill to batch.size estimated compressed bytes
(the accumulator on a FakeClock; the codecs compress for real)."""
from __future__ import annotations

import json
import math
import random
from typing import Iterator, List, Optional

import pytest

from kproducer.clock import FakeClock
from kproducer.network.metadata import Cluster, Node, PartitionInfo
from kproducer.producer.accumulator import RecordAccumulator
from kproducer.producer.buffer_pool import BufferPool
from kproducer.producer.compression_ratio import (
    ESTIMATION_FACTOR,
    GUESSED,
    IMPROVING_FRACTION,
    IMPROVING_STEP,
    INITIAL_RATIO,
    MIN_RATIO,
    OBSERVED,
    SAMPLED,
    CompressionRatioEstimator,
)
from kproducer.producer.partitioner import StickyPartitioner
from kproducer.protocol.compression import CODEC_GZIP, CODEC_NONE, CODEC_ZSTD, is_codec_available
from kproducer.protocol.records import RECORD_BATCH_OVERHEAD, read_batches

GZIP = CODEC_GZIP

# -- the estimator ---------------------------------------------------------------------------------


def test_starts_at_one_and_no_compression_is_always_one() -> None:
    est = CompressionRatioEstimator()
    assert est.estimate("t", GZIP) == INITIAL_RATIO == 1.0
    assert est.state("t", GZIP) == GUESSED
    assert est.observe("t", CODEC_NONE, 0.2) == 1.0
    assert est.estimate("t", CODEC_NONE) == 1.0


def test_the_first_full_batch_replaces_the_guess() -> None:
    est = CompressionRatioEstimator()
    assert est.observe("t", GZIP, 0.2) == pytest.approx(0.2)
    assert est.state("t", GZIP) == OBSERVED


def test_better_ratios_close_a_quarter_of_the_gap_and_at_least_the_minimum_step() -> None:
    est = CompressionRatioEstimator()
    est.observe("t", GZIP, 0.6)
    new = est.observe("t", GZIP, 0.2)
    assert new == pytest.approx(0.6 - (0.6 - 0.2) * IMPROVING_FRACTION)
    # a tiny gap: the minimum step, but never below what was observed
    est.set("t", GZIP, 0.5)
    assert est.observe("t", GZIP, 0.499) == pytest.approx(0.499)
    est.set("t", GZIP, 0.5)
    assert est.observe("t", GZIP, 0.49) == pytest.approx(0.5 - IMPROVING_STEP)


def test_converges_within_twenty_batches() -> None:
    est = CompressionRatioEstimator()
    est.set("t", GZIP, 1.0)  # e.g. after a split
    steps = 0
    while est.estimate("t", GZIP) > 0.2 * 1.02:
        est.observe("t", GZIP, 0.2)
        steps += 1
        assert steps < 20


def test_a_worse_full_batch_raises_the_estimate_at_once() -> None:
    est = CompressionRatioEstimator()
    est.observe("t", GZIP, 0.2)
    assert est.observe("t", GZIP, 0.7) == pytest.approx(0.7)


def test_a_batch_sent_before_it_was_full_only_lowers_the_estimate() -> None:
    est = CompressionRatioEstimator()
    est.observe("t", GZIP, 0.3)
    assert est.observe("t", GZIP, 0.9, full=False) == pytest.approx(0.3)  # small batches compress worse
    assert est.observe("t", GZIP, 0.1, full=False) == pytest.approx(0.3 - 0.2 * IMPROVING_FRACTION)
    # nor does a partial batch count as the first full one
    fresh = CompressionRatioEstimator()
    fresh.observe("t", GZIP, 0.5, full=False)
    assert fresh.state("t", GZIP) == GUESSED
    assert fresh.estimate("t", GZIP) == pytest.approx(1.0 - 0.5 * IMPROVING_FRACTION)


def test_samples_count_only_until_a_full_batch_was_observed() -> None:
    est = CompressionRatioEstimator()
    est.sample("t", GZIP, 0.25)
    assert (est.estimate("t", GZIP), est.state("t", GZIP)) == pytest.approx((0.25, SAMPLED))
    est.sample("t", GZIP, 0.2)  # a later, larger sample replaces it
    assert est.estimate("t", GZIP) == pytest.approx(0.2)
    est.observe("t", GZIP, 0.18)  # the first full batch replaces a sample too
    assert (est.estimate("t", GZIP), est.state("t", GZIP)) == pytest.approx((0.18, OBSERVED))
    est.sample("t", GZIP, 0.5)
    assert est.estimate("t", GZIP) == pytest.approx(0.18)


def test_per_topic_and_codec_reset_and_bad_input() -> None:
    est = CompressionRatioEstimator()
    est.observe("a", GZIP, 0.2)
    est.observe("a", CODEC_ZSTD, 0.3)
    est.observe("b", GZIP, 0.4)
    assert (est.estimate("a", GZIP), est.estimate("a", CODEC_ZSTD), est.estimate("b", GZIP)) == pytest.approx(
        (0.2, 0.3, 0.4))
    for bad in (0.0, -1.0, math.nan):
        assert est.observe("a", GZIP, bad) == pytest.approx(0.2)
    est.set("a", GZIP, 1e-9)
    assert est.estimate("a", GZIP) == MIN_RATIO
    est.reset("a")
    assert est.estimate("a", GZIP) == 1.0 and est.estimate("b", GZIP) == pytest.approx(0.4)
    est.reset()
    assert est.estimate("b", GZIP) == 1.0


def test_batch_limit_and_estimated_size_are_inverse() -> None:
    for ratio in (1.2, 1.0, 0.5, 0.18, 0.05):
        limit = CompressionRatioEstimator.batch_limit(16384, ratio)
        raw = limit - RECORD_BATCH_OVERHEAD
        assert CompressionRatioEstimator.estimated_size(raw, ratio) <= 16384
        assert CompressionRatioEstimator.estimated_size(raw + 2, ratio) >= 16384 - 1
    assert CompressionRatioEstimator.batch_limit(16384, 1.0) < 16384  # the 5% margin, as Java
    assert CompressionRatioEstimator.batch_limit(16384, 0.01, max_size=100_000) == 100_000
    assert CompressionRatioEstimator.batch_limit(16384, 0.0) == CompressionRatioEstimator.batch_limit(16384, MIN_RATIO)


# -- compressed batches in the accumulator ---------------------------------------------------------------


def json_values(n: int, seed: int = 7) -> Iterator[bytes]:
    """JSON-like values of ~120 bytes: compressible about like real events (gzip ~0.18)."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "order", "user", "click", "view", "cart", "pay"]
    for i in range(n):
        yield json.dumps({"id": i, "user": f"user-{rng.randrange(10000)}", "event": rng.choice(words),
                          "ts": 1700000000000 + i * 7, "amount": round(rng.random() * 1000, 2),
                          "tags": [rng.choice(words) for _ in range(rng.randrange(1, 4))]}).encode()


ONE_NODE = Cluster([Node(1, "h1", 9001)], [PartitionInfo("t", 0, 1, 0, (1,), (1,))])


class Env:
    def __init__(self, codec: int = GZIP, batch_size: int = 16384, buffer_memory: int = 1 << 22,
                 max_request_size: Optional[int] = 1 << 20) -> None:
        self.clock = FakeClock()
        self.pool = BufferPool(buffer_memory, batch_size, self.clock)
        self.acc = RecordAccumulator(batch_size, 10_000, 100, 1000, 120_000, self.pool, compression=codec,
                                     clock=self.clock, max_request_size=max_request_size)
        self.batch_size = batch_size

    def append(self, value: bytes) -> None:
        self.acc.append("t", 0, 1, None, value, None, None, 0, self.clock.monotonic_ms())

    def send_all_queued(self) -> List[bytes]:
        """Drain every queued batch, build it as the sender would (which feeds the estimator), complete it;
        returns the batches' bytes."""
        out: List[bytes] = []
        self.acc.close()  # everything is sendable
        while self.acc.has_undrained():
            for batches in self.acc.drain(ONE_NODE, {1}, 1 << 30, self.clock.monotonic_ms()).values():
                for b in batches:
                    out.append(b.records())
                    b.done(0, -1, None)
                    self.acc.deallocate(b)
        return out

    def wire_sizes(self) -> List[int]:
        """Build the full batches (all but the open last one) as they are drained; their sizes on the wire."""
        sizes = []
        for batch in self.acc.queued_batches_list():
            if batch.closed:
                sizes.append(len(batch.records()))
        return sizes


def test_a_burst_fills_compressed_batches_to_batch_size_before_any_was_sent() -> None:
    env = Env()
    for v in json_values(12_000):
        env.append(v)
    sizes = env.wire_sizes()
    assert len(sizes) >= 10
    # the first batch measured itself (twice); all are within 10% of batch.size compressed, not over it
    assert all(0.9 * env.batch_size <= s <= env.batch_size for s in sizes), sizes
    # ... while holding several times batch.size uncompressed
    assert all(b.builder.estimated_size() > 3 * env.batch_size for b in env.acc.queued_batches_list()[:-1])
    assert env.acc.ratio_estimator.state("t", GZIP) == OBSERVED  # built batches were observed


def test_growing_reserves_memory_and_gives_all_of_it_back() -> None:
    env = Env()
    total = env.pool.available_memory()
    for v in json_values(3000):
        env.append(v)
    batches = env.acc.queued_batches_list()
    reserved = sum(b.reserved_bytes + b.extra_bytes for b in batches)
    assert any(b.extra_bytes > 0 for b in batches)
    assert env.pool.available_memory() == total - reserved
    # each grown batch holds memory for what it may hold uncompressed
    for b in batches[:-1]:
        assert b.reserved_bytes + b.extra_bytes >= b.builder.capacity
    env.send_all_queued()
    assert env.pool.available_memory() == total
    assert env.pool.free_blocks >= 1  # the batch.size part went back as a pool block


def test_no_free_memory_to_grow_closes_the_batch_at_batch_size() -> None:
    env = Env(buffer_memory=3 * 16384)
    for v in json_values(300):
        env.append(v)
    first = env.acc.queued_batches_list()[0]
    assert first.closed and first.extra_bytes == 0  # the pool had no room for it to grow, without waiting
    assert first.builder.estimated_size() <= env.batch_size
    assert env.pool.available_memory() >= 0


def test_max_request_size_caps_how_much_a_batch_holds_uncompressed() -> None:
    env = Env(max_request_size=40_000)
    for _ in range(2000):
        env.append(b"\0" * 200)  # compresses ~100x
    for b in env.acc.queued_batches_list():
        assert b.builder.estimated_size() <= 40_000


def test_estimated_size_of_an_unbuilt_compressed_batch_is_the_compressed_estimate() -> None:
    env = Env()
    for v in json_values(3000):
        env.append(v)
    batch = env.acc.queued_batches_list()[0]
    estimate = batch.estimated_size()
    assert estimate <= env.batch_size < batch.builder.estimated_size()
    assert abs(len(batch.records()) - estimate) < 0.1 * env.batch_size
    assert batch.estimated_size() == len(batch.records())  # exact once built


def test_send_batch_path_fills_the_same_way() -> None:
    env = Env()
    values = list(json_values(12_000))
    segments: List[object] = []
    env.acc.append_many("t", 0, 1, None, values, None, range(len(values)), 0, env.clock.monotonic_ms(),
                        segments)  # type: ignore[arg-type]
    sizes = env.wire_sizes()
    assert len(sizes) >= 10 and all(0.9 * env.batch_size <= s <= env.batch_size for s in sizes), sizes
    records = [r.value for b in env.send_all_queued() for r in read_batches(b)[0].records]
    assert records == values


def test_uncompressed_batches_are_unchanged() -> None:
    env = Env(codec=CODEC_NONE)
    for v in json_values(500):
        env.append(v)
    batches = env.acc.queued_batches_list()
    assert all(b.sizing is None and b.extra_bytes == 0 for b in batches)
    assert all(b.builder.estimated_size() <= env.batch_size for b in batches)
    assert env.acc.batch_limit("t") == env.batch_size


def test_split_after_message_too_large_resets_the_estimate() -> None:
    env = Env()
    for v in json_values(3000):
        env.append(v)
    assert env.acc.ratio_estimator.estimate("t", GZIP) < 0.5
    [big] = env.acc.drain(ONE_NODE, {1}, 16384, env.clock.monotonic_ms())[1]
    big.records()
    parts = env.acc.split_and_reenqueue(big, env.clock.monotonic_ms())
    assert parts >= 2
    # as Java: back to max(1.0, the big batch's ratio), so the next batches are cut conservatively
    assert env.acc.ratio_estimator.estimate("t", GZIP) == 1.0
    assert env.acc.batch_limit("t") < env.batch_size


def test_the_sticky_partitioner_moves_on_after_a_compressed_batch_s_worth() -> None:
    env = Env()
    sticky = StickyPartitioner(env.batch_size, random.Random(1), batch_bytes=env.acc.batch_limit)
    assert sticky.limit("t") == env.acc.batch_limit("t") < env.batch_size  # 1.0 and the 5% margin
    env.acc.ratio_estimator.observe("t", GZIP, 0.2)
    assert sticky.limit("t") == CompressionRatioEstimator.batch_limit(env.batch_size, 0.2, 1 << 20)
    first = sticky.partition("t", range(6), 6)
    sticky.record_appended("t", env.batch_size * 3, range(6), 6)
    assert sticky.partition("t", range(6), 6) == first  # 3x batch.size uncompressed is not yet a batch's worth
    sticky.record_appended("t", env.batch_size * 2, range(6), 6)
    assert sticky.partition("t", range(6), 6) != first


@pytest.mark.parametrize("codec_name", ["snappy", "lz4", "zstd"])
def test_other_codecs_fill_too(codec_name: str) -> None:
    from kproducer.protocol.compression import codec_from_name

    codec = codec_from_name(codec_name)
    if not is_codec_available(codec):
        pytest.skip(f"the {codec_name} library is not installed")
    env = Env(codec=codec)
    for v in json_values(8000):
        env.append(v)
    sizes = env.wire_sizes()
    assert len(sizes) >= 4 and all(0.9 * env.batch_size <= s <= env.batch_size for s in sizes), sizes


def test_estimation_factor_is_javas() -> None:
    assert ESTIMATION_FACTOR == 1.05


def test_split_parts_take_the_big_batch_s_place_in_sequence_order() -> None:
    """Two batches in flight both come back too large: the parts of the second must queue behind those of the
    first (the head of the queue waits for the next sequence, so a wrong order never drains)."""
    from kproducer.producer.transaction_manager import TransactionManager

    txn = TransactionManager()
    txn.set_producer_id(7, 0)
    clock = FakeClock()
    pool = BufferPool(1 << 22, 1000, clock)
    acc = RecordAccumulator(1000, 0, 100, 1000, 120_000, pool, clock=clock, transaction_manager=txn)
    for i in range(16):
        acc.append("t", 0, 1, None, bytes([65 + i]) * 300, None, None, 0, clock.monotonic_ms())
    cluster = ONE_NODE
    [b0] = acc.drain(cluster, {1}, 1 << 20, 0)[1]
    txn.handle_completed_batch(b0, 0)
    [b1] = acc.drain(cluster, {1}, 1000, 0)[1]
    [b2] = acc.drain(cluster, {1}, 1000, 0)[1]
    assert b1.base_sequence < b2.base_sequence
    for big in (b1, b2):
        acc.split_and_reenqueue(big, 0)
        txn.add_split_batches(big, list({id(p): p for p, _d in big.split_into or []}.values()))
    queued = acc.queued_batches_list()
    sequences = [b.base_sequence for b in queued if b.has_sequence()]
    assert len(sequences) >= 4 and sequences == sorted(sequences)
    assert sequences[0] == b1.base_sequence
    take = txn.drain_sequencer()  # the head of the queue may go (its retry keeps its sequence)
    assert take is not None and take(queued[0])
    assert queued[0].base_sequence == b1.base_sequence
