"""RecordAccumulator on a FakeClock: every branch of ready(), drain(), reenqueue(), expiry, abort, flush
and close bookkeeping."""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest

from kproducer.clock import Clock, ExponentialBackoff, FakeClock
from kproducer.errors import BufferExhaustedError, KafkaError, ProducerClosedError
from kproducer.network.metadata import Cluster, Node, PartitionInfo
from kproducer.producer.accumulator import RecordAccumulator
from kproducer.producer.batch import ProducerBatch
from kproducer.producer.buffer_pool import BufferPool
from kproducer.producer.transaction_manager import State, TransactionManager

TP0 = ("t", 0)
TP1 = ("t", 1)
TP2 = ("t", 2)


def make_cluster(leaders: Dict[Tuple[str, int], int], nodes: Tuple[int, ...] = (1, 2)) -> Cluster:
    return Cluster([Node(n, f"h{n}", 9000 + n) for n in nodes],
                   [PartitionInfo(t, p, leader, 0, (leader,), (leader,)) for (t, p), leader in leaders.items()])


ONE_NODE = make_cluster({TP0: 1, TP1: 1, TP2: 1})


class Env:
    def __init__(self, batch_size: int = 1000, linger_ms: float = 10, retry_backoff_ms: float = 100,
                 retry_backoff_max_ms: float = 1000, delivery_timeout_ms: float = 120_000,
                 buffer_memory: int = 1 << 20, txn: Optional[TransactionManager] = None,
                 pool_clock: Optional[Clock] = None, jitter: float = 0.0) -> None:
        self.clock = FakeClock()
        self.pool = BufferPool(buffer_memory, batch_size, pool_clock or self.clock)
        self.acc = RecordAccumulator(
            batch_size, linger_ms, retry_backoff_ms, retry_backoff_max_ms, delivery_timeout_ms, self.pool,
            clock=self.clock, transaction_manager=txn,
            backoff=ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, jitter))

    @property
    def now(self) -> float:
        return self.clock.monotonic_ms()

    def append(self, tp: Tuple[str, int] = TP0, value: bytes = b"v", callback: Any = None,
               max_block_ms: float = 0) -> Any:
        return self.acc.append(tp[0], tp[1], 1, None, value, None, callback, max_block_ms, self.now)

    def ready(self, cluster: Cluster = ONE_NODE) -> Any:
        return self.acc.ready(cluster, self.now)

    def drain(self, max_size: int = 1 << 20, nodes: Tuple[int, ...] = (1,), cluster: Cluster = ONE_NODE
              ) -> Dict[int, List[ProducerBatch]]:
        return self.acc.drain(cluster, set(nodes), max_size, self.now)

    def queue(self, tp: Tuple[str, int]) -> List[ProducerBatch]:
        return list(self.acc._batches.get(tp, ()))


# -- append --------------------------------------------------------------------------------------


def test_append_fills_a_batch_then_opens_a_new_one() -> None:
    env = Env(batch_size=200)
    r1 = env.append(value=b"a" * 50)
    assert r1.new_batch_created and not r1.batch_is_full
    r2 = env.append(value=b"b" * 50)
    assert not r2.new_batch_created
    r3 = env.append(value=b"c" * 100)  # does not fit: the first batch closes, a second opens
    assert r3.new_batch_created and r3.batch_is_full  # more than one batch queued
    q = env.queue(TP0)
    assert [b.record_count for b in q] == [2, 1]
    assert q[0].closed and not q[1].closed
    assert env.pool.available_memory() == (1 << 20) - 400  # two batch.size reservations


def test_a_record_larger_than_batch_size_gets_its_own_reservation() -> None:
    env = Env(batch_size=100)
    env.append(value=b"x" * 500)
    [batch] = env.queue(TP0)
    assert batch.reserved_bytes > 500
    assert env.pool.available_memory() == (1 << 20) - batch.reserved_bytes


def test_append_blocks_for_memory_then_fails_after_max_block_ms() -> None:
    env = Env(batch_size=100, buffer_memory=100)
    env.append(TP0)
    start = env.now
    with pytest.raises(BufferExhaustedError):
        env.append(TP1, max_block_ms=300)
    assert env.now - start == 300
    assert env.queue(TP1) == []
    assert not env.acc.appends_in_progress()
    env.append(TP0)  # the open batch of TP0 still takes records without memory


def test_append_after_close_raises() -> None:
    env = Env()
    env.append()
    env.acc.close()
    with pytest.raises(ProducerClosedError):
        env.append()


# -- ready ---------------------------------------------------------------------------------------


def test_ready_with_nothing_queued() -> None:
    env = Env()
    r = env.ready()
    assert r.ready_nodes == set() and r.next_ready_check_delay_ms == float("inf")
    assert r.unknown_leader_topics == set()


def test_not_ready_before_linger_and_says_how_long_to_wait() -> None:
    env = Env(linger_ms=10)
    env.append()
    env.clock.advance(4)
    r = env.ready()
    assert r.ready_nodes == set()
    assert r.next_ready_check_delay_ms == 6


def test_ready_once_linger_has_passed() -> None:
    env = Env(linger_ms=10)
    env.append()
    env.clock.advance(9.9)
    assert env.ready().ready_nodes == set()
    env.clock.advance(0.1)
    assert env.ready().ready_nodes == {1}


def test_zero_linger_is_ready_at_once() -> None:
    env = Env(linger_ms=0)
    env.append()
    assert env.ready().ready_nodes == {1}


def test_ready_when_more_than_one_batch_is_queued() -> None:
    env = Env(batch_size=100, linger_ms=10_000)
    env.append(value=b"a" * 30)
    assert env.ready().ready_nodes == set()
    env.append(value=b"b" * 30)  # does not fit in the first
    assert len(env.queue(TP0)) == 2
    assert env.ready().ready_nodes == {1}


def test_ready_when_the_single_batch_is_full() -> None:
    env = Env(batch_size=100, linger_ms=10_000)
    env.append(value=b"a" * 200)  # one record over batch.size fills the batch by itself
    assert len(env.queue(TP0)) == 1
    assert env.ready().ready_nodes == {1}


def test_ready_when_memory_is_exhausted_and_someone_waits() -> None:
    env = Env(batch_size=100, buffer_memory=100, linger_ms=10_000, pool_clock=Clock())
    env.append(TP0)
    assert env.ready().ready_nodes == set()
    errors: List[BaseException] = []

    def blocked() -> None:
        try:
            env.pool.allocate(100, 10_000)
        except BaseException as e:  # noqa: B902
            errors.append(e)

    t = threading.Thread(target=blocked, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while env.pool.queued() == 0:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert env.ready().ready_nodes == {1}  # lingering is pointless when send() is blocked on memory
    env.pool.deallocate(100)
    t.join(5)
    assert not t.is_alive() and not errors


def test_ready_when_closing() -> None:
    env = Env(linger_ms=10_000)
    env.append()
    assert env.ready().ready_nodes == set()
    env.acc.close()
    assert env.ready().ready_nodes == {1}


def test_ready_while_a_flush_is_in_progress() -> None:
    env = Env(linger_ms=10_000)
    env.append()
    env.acc.begin_flush()
    assert env.acc.flush_in_progress()
    assert env.ready().ready_nodes == {1}
    env.acc.end_flush()
    assert not env.acc.flush_in_progress()
    assert env.ready().ready_nodes == set()


def test_ready_while_a_transaction_completes() -> None:
    txn = TransactionManager("tx")
    env = Env(linger_ms=10_000, txn=txn)
    env.append()
    for state in (State.INITIALIZING, State.READY, State.IN_TRANSACTION):
        txn._transition(state)
    assert env.ready().ready_nodes == set()
    txn._transition(State.COMMITTING_TRANSACTION)
    assert env.ready().ready_nodes == {1}


def test_unknown_leader_is_reported_and_not_ready() -> None:
    env = Env(linger_ms=0)
    env.acc.append("other", 0, 1, None, b"v", None, None, 0, env.now)  # no metadata for this topic
    env.append(TP0)
    r = env.ready()
    assert r.unknown_leader_topics == {"other"}
    assert r.ready_nodes == {1}


def test_leader_missing_from_the_broker_list_counts_as_unknown() -> None:
    env = Env(linger_ms=0)
    env.append(TP0)
    cluster = make_cluster({TP0: 7}, nodes=(1,))  # leader 7 is not among the brokers
    r = env.ready(cluster)
    assert r.ready_nodes == set() and r.unknown_leader_topics == {"t"}


def test_muted_partition_is_not_ready() -> None:
    env = Env(linger_ms=0)
    env.append(TP0)
    env.acc.mute(TP0)
    assert env.ready().ready_nodes == set()
    env.acc.unmute(TP0)
    assert env.ready().ready_nodes == {1}


def test_next_check_delay_is_the_soonest_partition() -> None:
    env = Env(linger_ms=10)
    env.append(TP0)
    env.clock.advance(3)
    env.append(TP1)
    env.clock.advance(2)
    r = env.ready()
    assert r.ready_nodes == set()
    assert r.next_ready_check_delay_ms == 5  # TP0 lingers 5 more ms, TP1 8 more


def test_ready_nodes_per_leader() -> None:
    env = Env(linger_ms=0)
    cluster = make_cluster({TP0: 1, TP1: 2, TP2: 2})
    env.append(TP1)
    assert env.ready(cluster).ready_nodes == {2}
    env.append(TP0)
    assert env.ready(cluster).ready_nodes == {1, 2}


def test_retry_backs_off_then_becomes_ready() -> None:
    env = Env(linger_ms=0, retry_backoff_ms=100)
    env.append()
    [batch] = env.drain()[1]
    env.acc.reenqueue(batch, env.now)
    assert batch.attempts == 1 and batch.retry_backoff_ms == 100
    env.clock.advance(40)
    r = env.ready()
    assert r.ready_nodes == set()  # sendable (it is closed, so full) but backing off
    assert r.next_ready_check_delay_ms == 60
    env.clock.advance(60)
    assert env.ready().ready_nodes == {1}


def test_retry_backoff_holds_even_when_closing_or_flushing() -> None:
    env = Env(linger_ms=0, retry_backoff_ms=100)
    env.append()
    [batch] = env.drain()[1]
    env.acc.reenqueue(batch, env.now)
    env.acc.begin_flush()
    env.acc.close()
    r = env.ready()
    assert r.ready_nodes == set() and r.next_ready_check_delay_ms == 100


def test_retry_is_sent_after_backoff_even_with_a_longer_linger() -> None:
    env = Env(linger_ms=5000, retry_backoff_ms=100)
    env.append()
    env.acc.begin_flush()
    [batch] = env.drain()[1]
    env.acc.end_flush()
    env.acc.reenqueue(batch, env.now)
    env.clock.advance(100)
    assert env.ready().ready_nodes == {1}


# -- drain ---------------------------------------------------------------------------------------


def test_drain_takes_the_head_batch_and_closes_it() -> None:
    env = Env(linger_ms=0)
    env.append(TP0, b"a")
    env.clock.advance(7)
    out = env.drain()
    [batch] = out[1]
    assert batch.tp == TP0 and batch.closed and batch.in_flight and batch.drained_ms == env.now
    assert env.queue(TP0) == []
    r = env.append(TP0, b"b")  # later records go to a new batch
    assert r.new_batch_created
    assert batch.record_count == 1


def test_drain_takes_one_batch_per_partition_per_call() -> None:
    env = Env(batch_size=100)
    for _ in range(3):
        env.append(TP0, b"x" * 60)
    env.append(TP1, b"y")
    batches = env.drain()[1]
    assert sorted(b.tp for b in batches) == [TP0, TP1]
    assert len(env.queue(TP0)) == 2


def test_drain_only_visits_the_given_nodes() -> None:
    env = Env(linger_ms=0)
    cluster = make_cluster({TP0: 1, TP1: 2})
    env.append(TP0)
    env.append(TP1)
    out = env.drain(nodes=(2,), cluster=cluster)
    assert list(out) == [2] and [b.tp for b in out[2]] == [TP1]
    assert len(env.queue(TP0)) == 1


def test_drain_stops_at_max_request_size() -> None:
    env = Env(batch_size=1000)
    for tp in (TP0, TP1, TP2):
        env.append(tp, b"x" * 400)
    size = env.queue(TP0)[0].estimated_size()
    out = env.drain(max_size=2 * size + 10)[1]
    assert len(out) == 2
    assert sum(b.estimated_size() for b in out) <= 2 * size + 10


def test_a_batch_larger_than_max_request_size_is_drained_alone() -> None:
    env = Env(batch_size=100)
    env.append(TP0, b"x" * 500)
    env.append(TP1, b"y")
    first = env.drain(max_size=200)[1]
    assert [b.tp for b in first] == [TP0] or [b.tp for b in first] == [TP1]
    # whichever came first, the oversized batch is never combined with another one over the limit
    assert all(len(env.drain(max_size=200).get(1, [])) <= 1 for _ in range(2))
    assert env.queue(TP0) == [] and env.queue(TP1) == []


def test_drain_rotates_the_starting_partition() -> None:
    env = Env(batch_size=1000)
    for _ in range(3):
        for tp in (TP0, TP1, TP2):
            env.append(tp, b"x" * 800)  # one batch per record
    size = env.queue(TP0)[0].estimated_size()
    firsts = [env.drain(max_size=size)[1][0].tp for _ in range(3)]
    assert sorted(firsts) == [TP0, TP1, TP2]


def test_drain_does_not_starve_a_partition_that_did_not_fit() -> None:
    """Two partitions whose head batches never fit together: each must get its turn."""
    env = Env(batch_size=1000)
    for _ in range(4):
        env.append(TP0, b"x" * 700)
        env.append(TP1, b"y" * 700)
    size = env.queue(TP0)[0].estimated_size()
    drained = [b.tp for _ in range(4) for b in env.drain(max_size=size + 100)[1]]
    assert drained.count(TP0) == 2 and drained.count(TP1) == 2


def test_drain_skips_a_batch_that_is_backing_off() -> None:
    env = Env(linger_ms=0, retry_backoff_ms=100)
    env.append(TP0)
    [batch] = env.drain()[1]
    env.acc.reenqueue(batch, env.now)
    env.append(TP1)
    out = env.drain()[1]
    assert [b.tp for b in out] == [TP1]
    env.clock.advance(100)
    assert env.drain()[1] == [batch]


def test_drain_skips_muted_partitions() -> None:
    env = Env(linger_ms=0)
    env.append(TP0)
    env.acc.mute(TP0)
    assert env.drain() == {}
    env.acc.unmute(TP0)
    assert len(env.drain()[1]) == 1


def test_drain_assigns_sequences_with_idempotence() -> None:
    txn = TransactionManager()
    txn.set_producer_id(77, 3)
    env = Env(batch_size=100, txn=txn)
    env.append(TP0, b"a" * 50)
    env.append(TP0, b"b" * 50)
    env.append(TP0, b"c" * 50)
    [b0] = env.drain()[1]
    # the first batch of a partition under a producer id goes alone (a broker without state for the producer
    # would accept a later batch first); the next one follows once it is acknowledged
    assert env.drain() == {}
    txn.handle_completed_batch(b0, 0)
    [b1] = env.drain()[1]
    [b2] = env.drain()[1]  # after that, batches are pipelined
    assert (b0.producer_id, b0.producer_epoch, b0.base_sequence) == (77, 3, 0)
    assert b1.base_sequence == b0.record_count
    assert b2.base_sequence == b1.base_sequence + b1.record_count


def test_drain_waits_for_a_producer_id() -> None:
    txn = TransactionManager()
    env = Env(txn=txn)
    env.append(TP0)
    assert env.drain() == {}
    txn.set_producer_id(1, 0)
    assert len(env.drain()[1]) == 1


def test_drain_says_whether_it_left_a_batch_queued_in_the_drained_nodes_partitions() -> None:
    """``left_behind``: False only when the drain emptied every partition of the nodes it drained (the sender then
    does not ask ready() again after sending); every way a batch can stay queued says True."""
    env = Env(batch_size=100, retry_backoff_ms=100)
    two_nodes = make_cluster({TP0: 1, TP1: 2})
    env.append(TP0)
    env.append(TP1)
    assert len(env.drain(nodes=(1,), cluster=two_nodes)[1]) == 1
    assert env.acc.left_behind is False  # (TP1's batch is node 2's: not drained, not asked about)
    env.drain(nodes=(2,), cluster=two_nodes)
    assert env.acc.left_behind is False and env.queue(TP1) == []

    for _ in range(2):
        env.append(TP0, b"x" * 60)  # two batches: the second stays behind the first
    env.drain()
    assert env.acc.left_behind is True
    env.drain()
    assert env.acc.left_behind is False

    for tp in (TP0, TP1):
        env.append(tp, b"x" * 60)
    size = env.queue(TP0)[0].estimated_size()
    assert len(env.drain(max_size=size)[1]) == 1  # the request is full
    assert env.acc.left_behind is True
    env.drain()

    env.append(TP0)
    env.acc.mute(TP0)
    assert env.drain() == {} and env.acc.left_behind is True
    env.acc.unmute(TP0)
    [batch] = env.drain()[1]
    env.acc.reenqueue(batch, env.now)
    assert env.drain() == {} and env.acc.left_behind is True  # backing off


def test_drain_says_it_left_batches_behind_while_idempotence_holds_them() -> None:
    txn = TransactionManager()
    env = Env(batch_size=100, txn=txn)
    env.append(TP0)
    assert env.drain() == {} and env.acc.left_behind is True  # no producer id yet
    txn.set_producer_id(77, 0)
    env.append(TP1)
    [b0, b1] = env.drain()[1]
    assert env.acc.left_behind is False
    env.append(TP0)
    assert env.drain() == {} and env.acc.left_behind is True  # the first batch of a partition goes alone
    txn.handle_completed_batches([(b0, 0), (b1, 0)])
    assert len(env.drain()[1]) == 1 and env.acc.left_behind is False


# -- reenqueue -----------------------------------------------------------------------------------


def test_reenqueue_puts_the_batch_back_at_the_head() -> None:
    env = Env(batch_size=100, linger_ms=0)
    env.append(TP0, b"first")
    [batch] = env.drain()[1]
    env.append(TP0, b"second")
    env.clock.advance(5)
    env.acc.reenqueue(batch, env.now)
    q = env.queue(TP0)
    assert q[0] is batch and len(q) == 2
    assert batch.attempts == 1 and not batch.in_flight
    assert batch.last_attempt_ms == env.now


def test_retry_backoff_grows_exponentially_to_the_maximum() -> None:
    env = Env(linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    env.append()
    backoffs = []
    for _ in range(6):
        env.clock.advance(10_000)
        [batch] = env.drain()[1]
        env.acc.reenqueue(batch, env.now)
        backoffs.append(batch.retry_backoff_ms)
    assert backoffs == [100, 200, 400, 800, 1000, 1000]


def test_retry_backoff_has_twenty_percent_jitter() -> None:
    env = Env(linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=1000, jitter=0.2)
    seen = set()
    for _ in range(50):
        b = ProducerBatch("t", 0, _builder(), env.now)
        env.acc.reenqueue(b, env.now)
        assert 80 <= b.retry_backoff_ms <= 120
        seen.add(round(b.retry_backoff_ms, 3))
        env.acc._batches.clear()
    assert len(seen) > 10  # it really is randomised


def _builder() -> Any:
    from kproducer.protocol.records import RecordBatchBuilder
    builder = RecordBatchBuilder(1000)
    builder.try_append(1, None, b"v")
    return builder


def test_idempotent_retries_go_back_in_sequence_order() -> None:
    txn = TransactionManager()
    txn.set_producer_id(5, 0)
    env = Env(batch_size=100, linger_ms=0, txn=txn)
    env.append(TP0, b"w" * 60)  # the partition's first batch goes alone: acknowledge it first
    [first] = env.drain()[1]
    txn.handle_completed_batch(first, 0)
    for v in (b"a", b"b", b"c"):
        env.append(TP0, v * 60)
    drained = [env.drain()[1][0] for _ in range(2)]  # sequences 1 and 2 in flight, the third queued
    assert [b.base_sequence for b in drained] == [1, 2]
    # responses fail in reverse order: the later batch is re-enqueued first
    env.acc.reenqueue(drained[1], env.now)
    env.acc.reenqueue(drained[0], env.now)
    q = env.queue(TP0)
    assert [b.base_sequence for b in q] == [1, 2, -1]


# -- expiry --------------------------------------------------------------------------------------


def test_queued_batches_expire_after_delivery_timeout() -> None:
    env = Env(batch_size=100, delivery_timeout_ms=1000)
    env.append(TP0, b"a" * 60)
    env.clock.advance(300)
    env.append(TP0, b"b" * 60)
    env.clock.advance(699)
    assert env.acc.expired_batches(env.now) == []
    assert env.acc.next_batch_expiry_ms == env.now + 1
    env.clock.advance(1)
    [expired] = env.acc.expired_batches(env.now)
    assert expired.record_count == 1 and expired.closed
    assert len(env.queue(TP0)) == 1
    assert env.acc.next_batch_expiry_ms == expired.created_ms + 300 + 1000
    env.clock.advance(300)
    assert len(env.acc.expired_batches(env.now)) == 1
    assert env.acc.next_batch_expiry_ms == float("inf")


def test_a_retried_batch_expires_too() -> None:
    env = Env(linger_ms=0, delivery_timeout_ms=1000)
    env.append()
    [batch] = env.drain()[1]
    env.clock.advance(900)
    env.acc.reenqueue(batch, env.now)
    env.clock.advance(100)
    assert env.acc.expired_batches(env.now) == [batch]


def test_the_queues_are_scanned_for_expiry_only_once_a_batch_may_be_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sender asks for expired batches every iteration; the queues are looked at only from the next expiry
    on: found by the last scan, or lowered by a batch queued since (a new one too: nothing is scanned while
    nothing is queued)."""
    env = Env(batch_size=100, delivery_timeout_ms=1000)
    looked: List[ProducerBatch] = []
    reached = ProducerBatch.has_reached_delivery_timeout

    def counting(self: ProducerBatch, timeout: float, now: float) -> bool:
        looked.append(self)
        return reached(self, timeout, now)

    monkeypatch.setattr(ProducerBatch, "has_reached_delivery_timeout", counting)
    assert env.acc.expired_batches(env.now) == [] and looked == []  # nothing queued
    env.append(TP0, b"a" * 60)
    env.clock.advance(10)
    env.append(TP1, b"b" * 60)
    assert env.acc.next_batch_expiry_ms == env.now - 10 + 1000  # the older new batch's deadline
    for _ in range(5):
        env.clock.advance(197)
        assert env.acc.expired_batches(env.now) == []
    assert looked == []  # not due before 1000 ms
    env.clock.advance(5)  # the first batch's deadline: the queues are scanned
    [first] = env.acc.expired_batches(env.now)
    assert first.tp == TP0 and len(looked) == 2  # (TP1's head looked at, not due yet)
    assert env.acc.next_batch_expiry_ms == env.now + 10
    env.clock.advance(10)
    [second] = env.acc.expired_batches(env.now)
    assert second.tp == TP1
    assert env.acc.next_batch_expiry_ms == float("inf")  # nothing queued
    looked.clear()
    env.clock.advance(5000)
    assert env.acc.expired_batches(env.now) == [] and looked == []


def test_a_retried_batch_put_back_lowers_the_next_expiry() -> None:
    """A retry is older than the batches queued since the last scan: putting it back must bring the next expiry
    forward to its own, or it would outlive delivery.timeout.ms."""
    env = Env(linger_ms=0, delivery_timeout_ms=1000)
    env.append(TP0)
    [retry] = env.drain()[1]
    env.clock.advance(1000)
    assert env.acc.expired_batches(env.now) == []  # a scan: nothing queued (the first is in flight)
    env.append(TP0)
    assert env.acc.next_batch_expiry_ms == retry.created_ms + 2000  # the new batch's
    env.clock.advance(400)
    env.acc.reenqueue(retry, env.now)
    assert env.acc.next_batch_expiry_ms == retry.created_ms + 1000
    assert env.acc.expired_batches(env.now) == [retry]


# -- abort / flush / bookkeeping -------------------------------------------------------------------


def test_abort_undrained_batches_fails_their_records_and_frees_memory() -> None:
    env = Env(linger_ms=0)
    results: List[Tuple[Any, Any]] = []
    env.append(TP0, callback=lambda md, e: results.append((md, e)))
    env.append(TP1, callback=lambda md, e: results.append((md, e)))
    [drained] = env.drain(nodes=(1,), cluster=make_cluster({TP0: 1}))[1]
    err = KafkaError("stop")
    aborted = env.acc.abort_undrained_batches(err)
    assert [b.tp for b in aborted] == [TP1]
    assert results == [(None, err)]
    assert not drained.is_done()
    assert env.pool.available_memory() == (1 << 20) - drained.reserved_bytes


def test_abort_incomplete_batches_fails_in_flight_ones_too() -> None:
    env = Env(linger_ms=0)
    f0 = env.append(TP0).future
    f1 = env.append(TP1).future
    env.drain(cluster=make_cluster({TP0: 1}))
    env.acc.abort_incomplete_batches(ProducerClosedError("closed"))
    for f in (f0, f1):
        assert isinstance(f.exception(0), ProducerClosedError)
    assert env.pool.available_memory() == 1 << 20
    assert not env.acc.has_incomplete()


def test_await_flush_completion_waits_for_existing_batches() -> None:
    env = Env(linger_ms=0)
    env.append(TP0)
    assert env.acc.await_flush_completion(0) is False
    [batch] = env.drain()[1]
    batch.done(5, -1, None)
    env.acc.deallocate(batch)
    assert env.acc.await_flush_completion(0) is True
    assert not env.acc.has_incomplete()


def test_deallocate_returns_memory_once() -> None:
    env = Env(batch_size=100)
    env.append()
    [batch] = env.queue(TP0)
    env.acc.deallocate(batch)
    env.acc.deallocate(batch)
    assert env.pool.available_memory() == 1 << 20


def test_queue_introspection() -> None:
    env = Env(linger_ms=0)
    assert not env.acc.has_undrained() and env.acc.queued_batches() == 0
    env.append(TP0)
    env.append(TP1)
    assert env.acc.has_undrained() and env.acc.queued_batches() == 2
    assert len(env.acc.queued_batches_list()) == 2
    assert len(env.acc.incomplete_batches()) == 2


def test_split_and_reenqueue_moves_records_and_futures() -> None:
    env = Env(batch_size=2000, linger_ms=0)
    futs = [env.append(TP0, bytes([65 + i]) * 300).future for i in range(4)]
    [batch] = env.drain()[1]
    env.append(TP0, b"later")  # a new batch, queued while the first was in flight
    reserved = batch.reserved_bytes
    n = env.acc.split_and_reenqueue(batch, env.now)
    assert n >= 2
    q = env.queue(TP0)
    parts = q[:n]
    assert sum(p.record_count for p in parts) == 4 and all(p.closed for p in parts)
    assert q[n].record_count == 1  # the batch queued after it stays behind the parts
    assert parts[0].reserved_bytes == reserved and batch.reserved_bytes == 0
    for p in parts:
        p.done(100, -1, None)
    offsets = [f.get(0).offset for f in futs]
    assert sorted(offsets) == offsets and all(o >= 100 for o in offsets)


class _CheckingLock:
    """The accumulator's lock, checking at every release that no queued batch is empty: what another thread
    (the sender's ready()/drain()) can see between two critical sections of an append."""

    def __init__(self, acc: RecordAccumulator) -> None:
        self._acc = acc
        self._inner = threading.Lock()
        self.empty_seen: List[Tuple[str, int]] = []

    def acquire(self, *args: Any) -> bool:
        return self._inner.acquire(*args)

    def release(self) -> None:
        for tp, dq in self._acc._batches.items():
            if any(b.record_count == 0 for b in dq):
                self.empty_seen.append(tp)
        self._inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


@pytest.mark.parametrize("how", ["append", "append_many"])
def test_a_new_batch_is_never_visible_before_its_first_record(how: str) -> None:
    # A new batch used to be queued empty (its memory reserved, the lock released) and filled in the next
    # critical section: a sender draining in between sent a batch of no records, which the broker refuses
    # with INVALID_RECORD ("Batch has an invalid offset range"), seen from the Spark sink under load.
    env = Env(batch_size=200)
    lock = _CheckingLock(env.acc)
    env.acc._lock = lock  # type: ignore[assignment]
    for i in range(12):
        if how == "append":
            env.append(value=bytes([i]) * 60)
        else:
            segments: List[Any] = []
            env.acc.append_many(TP0[0], TP0[1], 1, None, [bytes([i]) * 60] * 3, None, [0, 1, 2], 0, env.now,
                                segments)
    assert lock.empty_seen == []
    batches = env.queue(TP0)
    assert len(batches) > 3 and all(b.record_count > 0 for b in batches)


def test_memory_reserved_for_a_batch_another_thread_opened_meanwhile_is_given_back() -> None:
    env = Env(batch_size=200, buffer_memory=2000)
    env.append(value=b"a" * 120)
    acc = env.acc
    reserve = acc._reserve

    def reserve_while_another_thread_opens(*args: Any) -> Any:
        got = reserve(*args)
        acc._reserve = reserve  # type: ignore[method-assign]  # once: the other thread reserves as usual
        other = threading.Thread(target=lambda: env.append(TP0, value=b"b" * 120))
        other.start()
        other.join(10)
        return got

    acc._reserve = reserve_while_another_thread_opens  # type: ignore[method-assign]
    env.append(value=b"c" * 120)  # does not fit: reserves, meanwhile the other thread opened a batch
    batches = env.queue(TP0)
    assert [b.record_count for b in batches] == [1, 1, 1]
    # the unused fourth reservation went back to the pool
    assert env.pool.available_memory() == 2000 - sum(b.reserved_bytes for b in batches) > 2000 - 4 * 200
