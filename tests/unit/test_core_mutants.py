"""Rules of the buffer pool and the producer batch that mutation testing (tools/mutation.sh, docs/testing.md
"Mutation testing") found no unit test pinned down: a mutant of each line survived every test of the
producer core. Each test states the rule it holds."""
from __future__ import annotations

import random
import threading
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from kproducer.errors import KafkaError
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


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(3000):  # (at most 30 s)
        if predicate():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{what}: not reached in 30 s")


def test_a_waiting_allocation_collects_only_what_it_still_needs() -> None:
    p = pool(100, 50)
    waits: List[Tuple[float, bool]] = []
    p.metrics = SimpleNamespace(record_buffer_wait=lambda ms, exhausted: waits.append((ms, exhausted)))  # type: ignore[assignment]
    p.allocate(100, 0)
    got: List[int] = []
    t = threading.Thread(target=lambda: got.append(p.allocate(60, 30_000)))
    t.start()
    wait_for(lambda: bool(p.waiters), "the allocation waits")
    p.deallocate(30)
    wait_for(lambda: p.waiters[0].collected == 30, "the waiter took the 30 bytes freed")
    p.deallocate(70)  # more than it still needs (30)
    t.join(30)
    assert got == [60]
    assert p.available_memory() == 40  # it took 30 more, not all 70
    assert [exhausted for _ms, exhausted in waits] == [False]  # it waited, and was not refused


def test_buffer_pool_tells_on_free_when_memory_comes_back() -> None:
    p = pool()
    calls: List[str] = []
    p.on_free = lambda: calls.append("free")
    p.allocate(100, 0)
    p.deallocate(100)
    assert calls == ["free"]
    p.allocate(100, 0)
    assert p.exchange(100, None, 40) == 40  # a batch keeps 40 of its 100 bytes (no pooled buffer)
    assert calls == ["free", "free"] and p.available_memory() == 960


def test_exchange_wakes_the_allocation_waiting_first() -> None:
    p = pool(100, 50)
    p.allocate(100, 0)
    got: List[int] = []
    t = threading.Thread(target=lambda: got.append(p.allocate(50, 30_000)))
    t.start()
    wait_for(lambda: bool(p.waiters), "the allocation waits")
    assert p.exchange(100, None, 50) == 50
    t.join(30)
    assert got == [50] and p.available_memory() == 0


def test_reservations_of_one_byte_come_back() -> None:
    p = pool()
    p.allocate(1, 0)
    p.deallocate(1)
    assert p.available_memory() == 1000


def test_buffer_pool_counts_its_buffers() -> None:
    p = pool(1000, 100)
    size, buf = p.allocate_buffer(100, 0)
    _, other = p.allocate_buffer(100, 0)
    assert p.buffers_created == 2 and buf is not None and other is not None
    p.deallocate(size, buf)
    p.deallocate(size, other)
    assert p.buffers_returned == 2
    _, again = p.allocate_buffer(100, 0)
    assert again is not None
    with memoryview(again):  # viewed (a request still holds it): dropped, not pooled
        p.deallocate(100, again)
    _, third = p.allocate_buffer(100, 0)
    assert third is not None
    with memoryview(third):
        p.deallocate(100, third)
    assert p.dropped_in_use == 2


def test_a_closed_pool_says_the_producer_is_closed() -> None:
    p = pool(100, 50)
    p.allocate(100, 0)
    errors: List[BaseException] = []

    def waiting() -> None:
        try:
            p.allocate(50, 30_000)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=waiting)
    t.start()
    wait_for(lambda: bool(p.waiters), "the allocation waits")
    p.close()
    t.join(30)
    assert len(errors) == 1 and str(errors[0]) == "the producer was closed while send() waited for buffer memory"
    with pytest.raises(KafkaError, match="^the producer is closed; no memory can be allocated$"):
        p.allocate(10, 0)


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
    assert {sp.partition(f"only-2-{i}", (2,), 4) for i in range(30)} == {2}
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


def test_a_new_batch_starts_unsent_without_producer_state() -> None:
    """What a batch is before anything happened to it: a non-idempotent producer sends it as it is (a batch
    starting as transactional, say, would be written as part of no transaction)."""
    b = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 42.0)
    assert (b.created_ms, b.last_attempt_ms, b.drained_ms, b.attempts, b.retry_backoff_ms) == (42.0, 42.0, 0.0, 0, 0.0)
    assert b.in_flight is False and b.closed is False and b.reopened is False
    assert (b.base_offset, b.log_append_time, b.error, b.reserved_bytes) == (-1, -1, None, 0)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional) == (-1, -1, -1, False)
    assert (b.compression_ratio, b.grown, b.filled, b.extra_bytes) == (0.0, False, False, 0)
    assert b.is_done() is False and b.wait(0) is False
    b.try_append(1_700_000_000_000, None, b"v", None, None, 43.0)
    (decoded,) = read_batches(b.records())
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (-1, -1, -1)
    assert not decoded.is_transactional


def test_a_batch_whose_records_reach_its_capacity_exactly_is_full() -> None:
    from kproducer.protocol.records import RECORD_BATCH_OVERHEAD

    probe = RecordBatchBuilder(1 << 12)
    probe.try_append(1_700_000_000_000, None, b"v" * 10, None)
    size = RECORD_BATCH_OVERHEAD + probe._len
    b = ProducerBatch("t", 0, RecordBatchBuilder(size), 0.0)
    b.try_append(1_700_000_000_000, None, b"v" * 10, None, None, 0.0)
    assert b.is_full()
    roomy = ProducerBatch("t", 0, RecordBatchBuilder(size + 1), 0.0)
    roomy.try_append(1_700_000_000_000, None, b"v" * 10, None, None, 0.0)
    assert not roomy.is_full()


def test_a_compressed_batch_grows_only_open_and_with_the_memory_for_its_new_room() -> None:
    from kproducer.producer.compression_ratio import BatchSizing, CompressionRatioEstimator
    from kproducer.protocol.compression import CODEC_GZIP

    def compressed_batch(grant: bool) -> ProducerBatch:
        estimator = CompressionRatioEstimator()
        estimator.observe("t", CODEC_GZIP, 0.25)  # measured: a batch of 1000 bytes holds ~4x that uncompressed
        sizing = BatchSizing(estimator, CODEC_GZIP, 1000, None, lambda n: grant)
        b = ProducerBatch("t", 0, RecordBatchBuilder(1000, CODEC_GZIP), 0.0, reserved_bytes=1000)
        b.sizing = sizing
        b.try_append(1_700_000_000_000, None, b"x" * 500, None, None, 0.0)
        return b

    b = compressed_batch(grant=True)
    assert b.grow()
    assert b.builder.capacity > 1000 and b.grown
    assert b.reserved_bytes + b.extra_bytes == b.builder.capacity  # exactly the memory of its new room
    assert b.compression_ratio == pytest.approx(0.25)

    refused = compressed_batch(grant=False)  # the pool has no memory free now: full, not grown
    assert not refused.grow()
    assert refused.builder.capacity == 1000 and refused.extra_bytes == 0 and not refused.grown

    closed = compressed_batch(grant=True)
    closed.close_for_appends()
    assert not closed.grow() and closed.builder.capacity == 1000
    plain = ProducerBatch("t", 0, RecordBatchBuilder(1000), 0.0)  # not compressed: never grows
    assert not plain.grow()


def test_a_waiting_allocation_takes_memory_freed_as_pool_buffers() -> None:
    p = pool(200, 100)
    _, b1 = p.allocate_buffer(100, 0)
    _, b2 = p.allocate_buffer(100, 0)
    got: List[int] = []
    t = threading.Thread(target=lambda: got.append(p.allocate(150, 30_000)))
    t.start()
    wait_for(lambda: bool(p.waiters), "the allocation waits")
    p.deallocate(100, b1)  # back as a free buffer: the waiter drops it to take its memory
    wait_for(lambda: p.waiters[0].collected == 100, "the waiter took the freed buffer's memory")
    p.deallocate(100, b2)
    t.join(30)
    assert got == [150] and p.available_memory() == 50


def test_an_allocation_that_times_out_is_counted_as_exhausted_and_says_what_to_do() -> None:
    from kproducer.errors import BufferExhaustedError

    p = pool(100, 50)
    waits: List[Tuple[float, bool]] = []
    p.metrics = SimpleNamespace(record_buffer_wait=lambda ms, exhausted: waits.append((ms, exhausted)))  # type: ignore[assignment]
    p.allocate(100, 0)
    with pytest.raises(BufferExhaustedError, match="Increase buffer.memory or max.block.ms, or produce more slowly$"):
        p.allocate(50, 20)
    with pytest.raises(BufferExhaustedError):
        p.allocate(50, 20)
    assert [exhausted for _ms, exhausted in waits] == [True, True]
    assert p.wait_time_ms_total == pytest.approx(sum(ms for ms, _e in waits)) and p.wait_time_ms_total >= 40
    assert p.available_memory() == 0 and not p.waiters  # nothing collected is kept
