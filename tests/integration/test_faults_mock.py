"""The Producer's fault tests on the embedded MockCluster (issue 4, "done when").

Each test produces a known set of records through one fault and then asserts exactly what the cluster
stored (``cluster.records``: values, order, producer id and sequences) and which futures and callbacks
succeeded or failed with which error type. Every callback must run exactly once, and ``close()`` must
return within a bound (every test also has a pytest-timeout).

Faults: injected retriable errors (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS),
non-retriable errors (INVALID_RECORD, MESSAGE_TOO_LARGE on one record), KIP-126 splitting, latency beyond
request.timeout.ms (with and without a delivery.timeout.ms that expires), dropped connections, lost
responses, a leader move, a broker stop and start, acks=0 and acks=1, idempotence off, and the broker
losing the producer's state (UNKNOWN_PRODUCER_ID) or answering OUT_OF_ORDER_SEQUENCE_NUMBER.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from kproducer import Producer
from kproducer.errors import (
    InvalidRecordError,
    KafkaTimeoutError,
    MessageTooLargeError,
    ProducerClosedError,
    RequestTimedOutError,
)
from kproducer.mock import MockCluster
from tests.sent_records import Sent

pytestmark = [pytest.mark.timeout(90)]

TOPIC = "t"
PARTITIONS = 6
CLOSE_TIMEOUT = 10.0  # seconds close() may take when everything was delivered
WAIT = 30.0  # generous bound for event-driven waits on a loaded machine


# --------------------------------------------------------------------------------------------
# helpers


def stored(cluster: MockCluster, topic: str = TOPIC) -> Dict[int, List[Any]]:
    return {p: cluster.records(topic, p) for p in range(cluster.partition_count(topic))}


def stored_values(cluster: MockCluster, topic: str = TOPIC) -> Dict[int, List[bytes]]:
    return {p: [r.value for r in recs] for p, recs in stored(cluster, topic).items()}


def assert_exactly_once(cluster: MockCluster, sent: Sent, indices: Optional[List[int]] = None) -> None:
    """The log holds exactly these records (all of ``sent`` by default), each once, in send order per
    partition; every successful future's offset is where its record is stored."""
    indices = list(range(len(sent.values))) if indices is None else indices
    expected = sent.by_partition(indices)
    logs = stored(cluster)
    for p in range(PARTITIONS):
        values = [r.value for r in logs[p]]
        dupes = [v for v, n in Counter(values).items() if n > 1]
        assert not dupes, f"partition {p}: duplicates {dupes[:5]}"
        assert values == expected[p], f"partition {p}: stored {len(values)} records, expected {len(expected[p])}"
    offsets = {r.value: (p, r.offset) for p, recs in logs.items() for r in recs}
    for i in indices:
        md, exc = sent.results[i]
        if exc is None:
            assert (md.partition, md.offset) == offsets[sent.values[i]], f"record {i}: future offset differs"


def assert_idempotent_sequences(cluster: MockCluster, topic: str = TOPIC) -> None:
    """Within each producer id, a partition's records carry the sequences 0, 1, 2... in offset order."""
    for p, recs in stored(cluster, topic).items():
        by_pid: Dict[int, List[int]] = {}
        for r in recs:
            assert r.producer_id >= 0, f"partition {p}: record without a producer id"
            by_pid.setdefault(r.producer_id, []).append(r.sequence)
        for pid, seqs in by_pid.items():
            assert seqs == list(range(len(seqs))), f"partition {p} producer {pid}: sequences {seqs[:20]}"


def close_bounded(producer: Producer, timeout: float = CLOSE_TIMEOUT, slack: float = 10.0) -> float:
    start = time.monotonic()
    producer.close(timeout)
    elapsed = time.monotonic() - start
    assert elapsed < timeout + slack, f"close({timeout}) took {elapsed:.1f} s"
    assert not producer._sender.is_alive(), "the sender thread outlived close()"
    return elapsed


@contextlib.contextmanager
def producing(cluster: MockCluster, **config: Any) -> Iterator[Producer]:
    config.setdefault("linger_ms", 5)
    config.setdefault("retry_backoff_ms", 20)
    config.setdefault("retry_backoff_max_ms", 200)
    config.setdefault("reconnect_backoff_ms", 20)
    config.setdefault("reconnect_backoff_max_ms", 200)
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, **config)
    try:
        yield producer
    except BaseException:
        producer.close(5)
        raise
    close_bounded(producer)


def warm_up(producer: Producer, sent: Sent) -> List[int]:
    """One record per partition, acknowledged: the producer is connected and every partition holds state
    for its producer id. (Faults before that can hit a known bug: see
    test_first_batch_of_a_partition_failing_keeps_the_order.)"""
    indices = [sent.send(producer, b"warm-up-%d" % p, partition=p) for p in range(PARTITIONS)]
    producer.flush(WAIT)
    assert all(sent.futures[i].exception(0) is None for i in indices)
    return indices


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def metric(producer: Producer, name: str) -> float:
    return producer.metrics()[name]


def produce_requests_to(cluster: MockCluster, broker_id: int) -> int:
    return sum(1 for e in cluster.request_log if e.api == "produce" and e.broker_id == broker_id)



@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as c:
        c.create_topic(TOPIC, PARTITIONS)  # leaders 1, 2, 3, 1, 2, 3
        yield c


# --------------------------------------------------------------------------------------------
# injected retriable errors


@pytest.mark.parametrize("codes", [[6] * 4, [7] * 4, [19] * 4, [6, 7, 19, 0, 19, 6, 7]],
                         ids=["NOT_LEADER", "REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS", "mixed"])
def test_retriable_errors_are_retried_and_delivered_exactly_once(cluster: MockCluster, codes: List[int]) -> None:
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster) as producer:
        warm_up(producer, sent)
        cluster.inject_errors("produce", codes)
        sent.send_many(producer, "r", 300)
        producer.flush(WAIT)
        assert cluster.pending_errors("produce") == [], "every injected error was answered"
        assert metric(producer, "record-retry-total") >= sum(1 for c in codes if c)
        assert metric(producer, "record-error-total") == 0
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent)
    assert_idempotent_sequences(cluster)
    # one producer id for everything: no reset was needed
    assert len({r.producer_id for recs in stored(cluster).values() for r in recs}) == 1


def test_first_batch_of_a_partition_failing_keeps_the_order() -> None:
    """A broker with no state for a producer accepts any sequence (Kafka 2.5+; the mock does the same).
    The first batch A of a partition fails retriably (nothing written) while B waits behind it: B must
    not be written before A (and A's retry must not be refused as out of order): the log is [A, B]."""
    with MockCluster(1) as cluster:
        cluster.create_topic(TOPIC, 2)
        sent = Sent(TOPIC, PARTITIONS, WAIT)
        with producing(cluster, linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=2000) as producer:
            sent.send(producer, b"warm", partition=1)  # connected, producer id known; partition 0 untouched
            producer.flush(WAIT)
            cluster.set_latency(1, 300)
            cluster.inject_errors("produce", [19])  # NOT_ENOUGH_REPLICAS for A
            a = sent.send(producer, b"A", partition=0)
            wait_until(lambda: cluster.request_counts["produce"] >= 2, what="A to reach the broker")
            b = sent.send(producer, b"B", partition=0)
            assert sent.futures[a].exception(WAIT) is None
            assert sent.futures[b].exception(WAIT) is None
            cluster.set_latency(1, 0)
        sent.wait_callbacks()
        sent.check_callbacks_once()
        recs = cluster.records(TOPIC, 0)
        assert [(r.value, r.sequence) for r in recs] == [(b"A", 0), (b"B", 1)]
        assert sent.results[a][0].offset == 0 and sent.results[b][0].offset == 1


def test_pipelined_batch_failing_for_good_leaves_the_later_batches_delivered_once() -> None:
    """tansu's quirk under load: a pipelined batch A is answered UNKNOWN_SERVER_ERROR (not retriable, nothing
    written) while B and C of the same partition are in flight; the broker refuses them as
    OUT_OF_ORDER_SEQUENCE_NUMBER (A's sequences are missing). A's record fails; B and C take A's sequences
    (Java's adjustSequencesDueToFailedBatch) and are stored exactly once, in order, under the same producer
    id, well before delivery.timeout.ms (no retry loop). Read back with kafka-python."""
    from kproducer.errors import UnknownServerError
    from tests.readback import consume

    with MockCluster(1) as cluster:
        cluster.create_topic(TOPIC, 1)
        sent = Sent(TOPIC, 1, WAIT)
        with producing(cluster, linger_ms=0, request_timeout_ms=10000, delivery_timeout_ms=20000) as producer:
            w = sent.send(producer, b"W", partition=0)  # acknowledged: the partition's batches are pipelined
            producer.flush(WAIT)
            cluster.set_latency(1, 300)
            cluster.inject_errors("produce", [UnknownServerError.code])  # for A
            a = sent.send(producer, b"A", partition=0)
            wait_until(lambda: cluster.request_counts["produce"] >= 2, what="A to reach the broker")
            b = sent.send(producer, b"B", partition=0)
            wait_until(lambda: cluster.request_counts["produce"] >= 3, what="B to reach the broker")
            c = sent.send(producer, b"C", partition=0)
            wait_until(lambda: cluster.request_counts["produce"] >= 4, what="C to reach the broker")
            assert isinstance(sent.futures[a].exception(WAIT), UnknownServerError)
            assert sent.futures[b].exception(WAIT) is None
            assert sent.futures[c].exception(WAIT) is None
            cluster.set_latency(1, 0)
        sent.wait_callbacks()
        sent.check_callbacks_once()
        assert [(r.value, r.sequence) for r in cluster.records(TOPIC, 0)] == [(b"W", 0), (b"B", 1), (b"C", 2)]
        assert len({r.producer_id for r in cluster.records(TOPIC, 0)}) == 1
        assert [sent.results[i][0].offset for i in (w, b, c)] == [0, 1, 2]
        # B and C were retried once each (their first answer was OUT_OF_ORDER), not in a loop
        assert cluster.request_counts["produce"] <= 8
        assert [r.value for r in consume(cluster.bootstrap_servers, TOPIC, [0], 3)] == [b"W", b"B", b"C"]


def test_out_of_order_sequence_resets_the_producer_id_and_delivers(cluster: MockCluster) -> None:
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster) as producer:
        first = sent.send_many(producer, "a", 12)
        producer.flush(WAIT)
        cluster.inject_errors("produce", [45])  # OUT_OF_ORDER_SEQUENCE_NUMBER for the next expected batch
        second = sent.send_many(producer, "b", 12)
        producer.flush(WAIT)
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent, first + second)
    assert_idempotent_sequences(cluster)
    pids = {r.producer_id for recs in stored(cluster).values() for r in recs}
    assert len(pids) == 2, "the producer id was renewed after OUT_OF_ORDER_SEQUENCE_NUMBER"


# --------------------------------------------------------------------------------------------
# non-retriable errors


def test_non_retriable_error_fails_only_its_batch(cluster: MockCluster) -> None:
    """INVALID_RECORD (87) on one partition of a request: that batch's records fail with
    InvalidRecordError, every other partition's records are delivered, and the producer goes on."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    # a long linger so that each partition's 10 records form one batch, sent when flush() asks
    with producing(cluster, linger_ms=10000) as producer:
        round1 = sent.send_many(producer, "r1", 60)
        cluster.inject_errors("produce", [87])
        producer.flush(WAIT)
        sent.wait_callbacks()
        failed = sent.failed()
        failed_partitions = {sent.partitions[i] for i in failed}
        assert len(failed_partitions) == 1, f"one batch fails: {failed_partitions}"
        bad = failed_partitions.pop()
        assert sorted(failed) == [i for i in round1 if sent.partitions[i] == bad]
        for exc in failed.values():
            assert isinstance(exc, InvalidRecordError), repr(exc)
            assert exc.code == 87 and not exc.retriable
            assert "injected error" in str(exc)
        # the producer is still usable, also for the partition that failed
        round2 = sent.send_many(producer, "r2", 60)
        producer.flush(WAIT)
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sorted(sent.failed()) == sorted(failed)
    delivered = [i for i in round1 if i not in failed] + round2
    assert_exactly_once(cluster, sent, delivered)
    assert stored_values(cluster)[bad] == [sent.values[i] for i in round2 if sent.partitions[i] == bad]


def test_message_too_large_single_record_fails_others_delivered() -> None:
    """A one-record batch over the broker's max.message.bytes cannot be split: MessageTooLargeError."""
    with MockCluster(3, max_message_bytes=2000) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        sent = Sent(TOPIC, PARTITIONS, WAIT)
        with producing(cluster, linger_ms=10000) as producer:
            big = sent.send(producer, b"x" * 5000, partition=0)
            small = sent.send_many(producer, "s", 30)
            producer.flush(WAIT)
        sent.wait_callbacks()
        sent.check_callbacks_once()
        failed = sent.failed()
        assert list(failed) == [big]
        exc = failed[big]
        assert isinstance(exc, MessageTooLargeError) and exc.code == 10
        assert "max_message_bytes" in str(exc)
        assert_exactly_once(cluster, sent, small)


def test_message_too_large_batch_is_split_and_delivered() -> None:
    """KIP-126: a multi-record batch refused with MESSAGE_TOO_LARGE is split until the parts fit; the
    records arrive once, in order, with contiguous sequences, and each future gets its stored offset."""
    with MockCluster(3, max_message_bytes=4096) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        sent = Sent(TOPIC, PARTITIONS, WAIT)
        with producing(cluster, linger_ms=10000, batch_size=65536) as producer:
            sent.send_many(producer, "big", 200, partitions=2, size=200)  # ~22 KB per partition batch
            producer.flush(WAIT)
            assert metric(producer, "batch-split-total") >= 2
        sent.wait_callbacks()
        sent.check_callbacks_once()
        assert sent.failed() == {}
        assert_exactly_once(cluster, sent)
        assert_idempotent_sequences(cluster)
        for p in (0, 1):
            assert cluster.batch_count(TOPIC, p) >= 6, "the 22 KB batch was stored as several parts under 4 KB"


# --------------------------------------------------------------------------------------------
# latency beyond request.timeout.ms


def test_request_timeout_closes_connection_and_retry_is_deduplicated(cluster: MockCluster) -> None:
    """The broker appends the batch but answers after request.timeout.ms: the producer closes the
    connection and retries; the retry carries the same sequence, so the broker answers it as a duplicate
    with the original offset: exactly once."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    leader = cluster.leader(TOPIC, 0)
    with producing(cluster, request_timeout_ms=500) as producer:
        warm = sent.send(producer, b"warm-up", partition=0)
        producer.flush(WAIT)  # the connection to the leader is up, so the next produce reaches it
        before = produce_requests_to(cluster, leader)
        cluster.set_latency(leader, 1500)
        started = time.monotonic()
        batch = [sent.send(producer, b"slow-%d" % i, partition=0) for i in range(10)]
        # the request times out, its connection is closed and the batch is re-enqueued: then answer again
        wait_until(lambda: metric(producer, "record-retry-total") >= 1, what="a retry after request.timeout.ms")
        assert time.monotonic() - started >= 0.4
        cluster.set_latency(leader, 0)
        producer.flush(WAIT)
        assert produce_requests_to(cluster, leader) >= before + 2, "the batch was sent twice"
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent, [warm] + batch)
    assert_idempotent_sequences(cluster)


def test_delivery_timeout_with_unresponsive_broker_fails_with_kafka_timeout(cluster: MockCluster) -> None:
    """A broker that never answers in time: its partition's records fail with KafkaTimeoutError after
    delivery.timeout.ms; records for other brokers are delivered. The broker did append the first attempt
    (the answer was what got lost), so a timeout does not mean "not written": here the records are in
    the log once. Once the broker answers again, the producer (with a new producer id) delivers."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    leader = cluster.leader(TOPIC, 0)
    with producing(cluster, request_timeout_ms=300, delivery_timeout_ms=1000) as producer:
        warm = sent.send(producer, b"warm-up", partition=0)
        producer.flush(WAIT)
        cluster.set_latency(leader, 20000)
        start = time.monotonic()
        slow = [sent.send(producer, b"slow-%d" % i, partition=0) for i in range(5)]
        others = [sent.send(producer, b"other-%d" % i, partition=1 + i % 2) for i in range(10)]
        for i in slow:
            exc = sent.futures[i].exception(WAIT)
            assert isinstance(exc, KafkaTimeoutError), repr(exc)
            assert "delivery.timeout.ms" in str(exc)
        elapsed = time.monotonic() - start
        assert 0.9 <= elapsed < 15, f"failed after {elapsed:.1f} s (delivery.timeout.ms=1000)"
        for i in others:
            assert sent.futures[i].exception(WAIT) is None
        cluster.set_latency(leader, 0)
        after = sent.send(producer, b"after", partition=0)
        producer.flush(WAIT)
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sorted(sent.failed()) == slow
    logs = stored(cluster)
    assert [r.value for r in logs[0]] == [sent.values[i] for i in [warm] + slow + [after]]
    assert logs[0][-1].producer_id != logs[0][0].producer_id, "a new producer id after the in-flight expiry"
    assert_exactly_once(cluster, sent, [warm] + slow + [after] + others)


def test_request_timeout_with_retries_exhausted_fails_with_request_timed_out(cluster: MockCluster) -> None:
    """retries=0 (idempotence then defaults off): the first request timeout fails the batch with the typed
    RequestTimedOutError (code 7); the broker had appended it, once."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    leader = cluster.leader(TOPIC, 0)
    with producing(cluster, request_timeout_ms=300, retries=0) as producer:
        assert producer.config.enable_idempotence is False
        warm = sent.send(producer, b"warm-up", partition=0)
        producer.flush(WAIT)
        cluster.set_latency(leader, 20000)
        slow = [sent.send(producer, b"slow-%d" % i, partition=0) for i in range(3)]
        for i in slow:
            exc = sent.futures[i].exception(WAIT)
            assert isinstance(exc, RequestTimedOutError), repr(exc)
            assert "request.timeout.ms" in str(exc)
        assert metric(producer, "record-retry-total") == 0
        cluster.set_latency(leader, 0)
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sorted(sent.failed()) == slow
    assert stored_values(cluster)[0] == [sent.values[i] for i in [warm] + slow]


def test_close_is_bounded_when_the_broker_does_not_answer(cluster: MockCluster) -> None:
    """close(timeout) with a request hanging on a silent broker returns in about ``timeout`` and fails
    the pending records with ProducerClosedError."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    leader = cluster.leader(TOPIC, 0)
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5, request_timeout_ms=20000)
    try:
        sent.send(producer, b"warm-up", partition=0)
        producer.flush(WAIT)
        cluster.set_latency(leader, 60000)
        pending = [sent.send(producer, b"p-%d" % i, partition=0) for i in range(5)]
        wait_until(lambda: produce_requests_to(cluster, leader) >= 2, what="the produce request to arrive")
        elapsed = close_bounded(producer, timeout=1.0, slack=5.0)
        assert elapsed >= 0.9
    finally:
        cluster.set_latency(leader, 0)
        producer.close(1)
    sent.wait_callbacks(5)
    sent.check_callbacks_once()
    failed = sent.failed()
    assert sorted(failed) == pending
    for exc in failed.values():
        assert isinstance(exc, ProducerClosedError), repr(exc)


# --------------------------------------------------------------------------------------------
# connections dropped, responses lost


class FaultLoop(threading.Thread):
    """Applies ``fault()`` each time the cluster has received ``every`` more produce requests, at most
    ``limit`` times, until stopped (a bounded, event-driven background fault injector)."""

    def __init__(self, cluster: MockCluster, fault: Callable[[int], None], every: int = 5, limit: int = 20) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.fault = fault
        self.every = every
        self.limit = limit
        self.applied = 0
        self.stopped = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            seen = self.cluster.request_counts["produce"]
            while self.applied < self.limit and not self.stopped.is_set():
                now = self.cluster.request_counts["produce"]
                if now - seen >= self.every:
                    seen = now
                    self.fault(self.applied)
                    self.applied += 1
                self.stopped.wait(0.002)
        except BaseException as e:  # surfaced by stop()
            self.error = e

    def stop(self) -> None:
        self.stopped.set()
        self.join(WAIT)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error


def produce_in_rounds(producer: Producer, sent: Sent, rounds: int, per_round: int, tag: str = "m",
                      until: Optional[Callable[[], bool]] = None, max_rounds: int = 500) -> None:
    """``rounds`` rounds of ``per_round`` records; with ``until``, more rounds (at most ``max_rounds``)
    until it holds (e.g. until enough faults happened while producing)."""
    r = 0
    while r < rounds or (until is not None and not until() and r < max_rounds):
        sent.send_many(producer, f"{tag}{r:03d}", per_round)
        time.sleep(0.002)  # let the sender interleave requests with the faults
        r += 1


def test_dropped_connections_mid_stream(cluster: MockCluster) -> None:
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster) as producer:
        warm_up(producer, sent)
        loop = FaultLoop(cluster, lambda n: cluster.drop_connections(), every=4, limit=15)
        loop.start()
        produce_in_rounds(producer, sent, 60, 60, until=lambda: loop.applied >= 5)
        producer.flush(WAIT)
        loop.stop()
        assert loop.applied >= 5, f"only {loop.applied} drops happened"
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent)
    assert_idempotent_sequences(cluster)


def test_lost_responses_are_retried_and_deduplicated(cluster: MockCluster) -> None:
    """drop_responses: the broker appends the batch and closes the connection instead of answering; the
    retry has the same sequence, the broker answers it as a duplicate with the original offset."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster) as producer:
        warm_up(producer, sent)
        before = cluster.request_counts["produce"]
        cluster.drop_responses("produce", 3)
        sent.send_many(producer, "d", 120)
        producer.flush(WAIT)
        assert cluster.request_counts["produce"] >= before + 4
        assert metric(producer, "record-retry-total") >= 1
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent)
    assert_idempotent_sequences(cluster)


# --------------------------------------------------------------------------------------------
# leader moves, broker stop/start


def test_leader_move_is_followed(cluster: MockCluster) -> None:
    """After move_leader the old leader answers NOT_LEADER_OR_FOLLOWER; the producer refreshes metadata,
    retries on the new leader, and nothing is lost or duplicated."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster) as producer:
        first = sent.send_many(producer, "before", 30)
        producer.flush(WAIT)
        old = cluster.leader(TOPIC, 0)
        new = old % 3 + 1
        cluster.move_leader(TOPIC, 0, new)
        before_new = produce_requests_to(cluster, new)
        second = [sent.send(producer, b"after-%d" % i, partition=0) for i in range(20)]
        producer.flush(WAIT)
        assert metric(producer, "record-retry-total") >= 1, "the old leader refused the batch"
        assert produce_requests_to(cluster, new) > before_new
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent, first + second)
    assert_idempotent_sequences(cluster)


def test_leader_move_keeps_unacknowledged_batches_in_the_duplicate_window(cluster: MockCluster) -> None:
    """A batch X written by the old leader but not yet answered; the leader moves and later batches go to
    the new leader. A broker recognises duplicates only among a producer's last 5 batches, so the producer
    must not let 5 later batches through while X is unresolved: when X's answer is lost and X is retried on
    the new leader, it is acknowledged as a duplicate (exactly once), not refused as OUT_OF_ORDER_SEQUENCE
    until delivery.timeout.ms."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster, linger_ms=0, request_timeout_ms=10000, delivery_timeout_ms=15000,
                   metadata_max_age_ms=100) as producer:
        for p in range(3):  # connections to every broker
            sent.send(producer, b"warm-%d" % p, partition=p)
        producer.flush(WAIT)
        cluster.set_latency(1, 8000)  # broker 1 (partition 0's leader) writes at once, answers 8 s later
        x = sent.send(producer, b"X", partition=0)
        wait_until(lambda: cluster.high_watermark(TOPIC, 0) == 2, what="X to be written")
        cluster.move_leader(TOPIC, 0, 2)
        wait_until(lambda: producer.partitions_for(TOPIC)[0].leader == 2, what="the producer to see the move")
        later = []
        for i in range(4):  # four later batches, one at a time, acknowledged by broker 2
            later.append(sent.send(producer, b"later-%d" % i, partition=0))
            assert sent.futures[later[-1]].exception(WAIT) is None
        later += [sent.send(producer, b"later-%d" % i, partition=0) for i in (4, 5)]
        # the sender has had its chances to send them: it refreshed metadata (every 100 ms) three more times
        seen = cluster.request_counts["metadata"]
        wait_until(lambda: cluster.request_counts["metadata"] >= seen + 3, what="three metadata refreshes")
        assert cluster.high_watermark(TOPIC, 0) == 6, "only warm-0, X and the four later batches were written"
        assert not sent.futures[x].done()
        assert not sent.futures[later[4]].done(), "a 5th later batch would push X out of the window"
        cluster.drop_connections(1)  # X's answer is lost; X is retried on broker 2
        cluster.set_latency(1, 0)
        assert sent.futures[x].exception(WAIT) is None
        producer.flush(WAIT)
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    recs = stored(cluster)[0]
    assert [r.value for r in recs] == [b"warm-0", b"X"] + [b"later-%d" % i for i in range(6)]
    assert len({r.producer_id for r in recs}) == 1, "no producer id reset was needed"
    assert_idempotent_sequences(cluster)


def test_leader_moves_mid_stream(cluster: MockCluster) -> None:
    sent = Sent(TOPIC, PARTITIONS, WAIT)

    def move(n: int) -> None:
        p = n % PARTITIONS
        cluster.move_leader(TOPIC, p, cluster.leader(TOPIC, p) % 3 + 1)

    with producing(cluster) as producer:
        warm_up(producer, sent)
        loop = FaultLoop(cluster, move, every=3, limit=18)
        loop.start()
        produce_in_rounds(producer, sent, 60, 60, until=lambda: loop.applied >= 6)
        producer.flush(WAIT)
        loop.stop()
        assert loop.applied >= 6
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent)
    assert_idempotent_sequences(cluster)


def test_broker_stop_and_start_mid_stream(cluster: MockCluster) -> None:
    """Broker 2 stops (its partitions move to live brokers, as with replication) and comes back."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster) as producer:
        warm_up(producer, sent)
        produce_in_rounds(producer, sent, 10, 60, "a")
        wait_until(lambda: cluster.request_counts["produce"] >= 3, what="produce traffic")
        cluster.stop_broker(2)
        assert all(cluster.leader(TOPIC, p) != 2 for p in range(PARTITIONS))
        produce_in_rounds(producer, sent, 10, 60, "b")
        producer.flush(WAIT)
        cluster.start_broker(2)
        cluster.move_leader(TOPIC, 1, 2)
        cluster.move_leader(TOPIC, 4, 2)
        to_2 = produce_requests_to(cluster, 2)
        produce_in_rounds(producer, sent, 10, 60, "c")
        producer.flush(WAIT)
        assert produce_requests_to(cluster, 2) > to_2, "the restarted broker leads again and gets records"
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent)
    assert_idempotent_sequences(cluster)


def test_leaderless_partitions_wait_for_the_broker_to_return() -> None:
    """Without leader moves on stop, the stopped broker's partitions have no leader: their records wait
    (the others are delivered) and go out once the broker is back, before delivery.timeout.ms."""
    with MockCluster(3, move_leaders_on_stop=False) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        sent = Sent(TOPIC, PARTITIONS, WAIT)
        with producing(cluster) as producer:
            first = sent.send_many(producer, "a", 60)
            producer.flush(WAIT)
            cluster.stop_broker(2)
            second = sent.send_many(producer, "b", 60)
            on_live = [i for i in second if cluster.leader(TOPIC, sent.partitions[i]) != 2]
            on_stopped = [i for i in second if i not in on_live]
            for i in on_live:
                assert sent.futures[i].exception(WAIT) is None
            # once the producer's metadata shows those partitions without a leader, their records can only wait
            stopped = {sent.partitions[i] for i in on_stopped}
            wait_until(lambda: all(p.leader == -1 for p in producer.partitions_for(TOPIC) if p.partition in stopped),
                       what="the producer to see the stopped broker's partitions without a leader")
            assert not any(sent.futures[i].done() for i in on_stopped), "no leader: they wait"
            cluster.start_broker(2)
            producer.flush(WAIT)
        sent.wait_callbacks()
        sent.check_callbacks_once()
        assert sent.failed() == {}
        assert_exactly_once(cluster, sent, first + second)


def test_leaderless_partitions_expire_with_kafka_timeout() -> None:
    """A stopped broker that does not come back within delivery.timeout.ms: its partitions' records
    fail with KafkaTimeoutError (never sent), the other partitions' records are delivered."""
    with MockCluster(3, move_leaders_on_stop=False) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        sent = Sent(TOPIC, PARTITIONS, WAIT)
        with producing(cluster, request_timeout_ms=300, delivery_timeout_ms=1200) as producer:
            first = sent.send_many(producer, "a", 12)
            producer.flush(WAIT)
            cluster.stop_broker(2)
            second = sent.send_many(producer, "b", 60)
            producer.flush(WAIT)
            failed = sent.failed()
            assert failed and all(isinstance(e, KafkaTimeoutError) for e in failed.values()), failed
            assert {sent.partitions[i] for i in failed} == {1, 4}  # broker 2's partitions
        cluster.start_broker(2)
        sent.wait_callbacks()
        sent.check_callbacks_once()
        assert sorted(failed) == [i for i in second if sent.partitions[i] in (1, 4)]
        assert_exactly_once(cluster, sent, first + [i for i in second if i not in failed])


# --------------------------------------------------------------------------------------------
# acks=0, acks=1, idempotence off


def test_acks_0_futures_succeed_without_offsets(cluster: MockCluster) -> None:
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster, acks=0) as producer:
        assert producer.config.enable_idempotence is False
        sent.send_many(producer, "z", 60)
        producer.flush(WAIT)
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert all(md.offset == -1 for md, _e in sent.results.values())
    expected = sent.by_partition(list(range(60)))
    wait_until(lambda: stored_values(cluster) == expected, what="acks=0 records to be stored")
    assert all(r.producer_id == -1 for recs in stored(cluster).values() for r in recs)


def test_acks_0_error_loses_the_batch_silently(cluster: MockCluster) -> None:
    """With acks=0 a broker error closes the connection and the records are lost, yet their futures
    succeed (offset -1): acks=0 is at-most-once. Exactly one partition's batch is missing."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster, acks=0, linger_ms=10000) as producer:
        sent.send_many(producer, "z", 60)
        cluster.inject_errors("produce", [87])
        producer.flush(WAIT)
        expected = sent.by_partition(list(range(60)))
        # the broker appends acks=0 records after the futures completed: wait for the five other batches
        wait_until(lambda: sum(v == expected[p] for p, v in stored_values(cluster).items()) == PARTITIONS - 1,
                   what="the other partitions' batches to be stored")
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert cluster.pending_errors("produce") == []
    values = stored_values(cluster)
    missing = [p for p in range(PARTITIONS) if values[p] != expected[p]]
    assert len(missing) == 1 and values[missing[0]] == [], values
    # whatever was stored, was stored once
    assert all(len(set(v)) == len(v) for v in values.values())


def test_acks_1_retries_and_delivers(cluster: MockCluster) -> None:
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster, acks=1) as producer:
        assert producer.config.enable_idempotence is False
        cluster.inject_errors("produce", [6, 19, 7])
        sent.send_many(producer, "one", 120)
        producer.flush(WAIT)
        assert metric(producer, "record-retry-total") >= 3
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert all(md.offset >= 0 for md, _e in sent.results.values())
    assert_exactly_once(cluster, sent)  # injected errors append nothing: no duplicates to make


def test_without_idempotence_a_lost_response_duplicates(cluster: MockCluster) -> None:
    """enable_idempotence=False with retries: a batch whose response was lost is written again by the
    retry. This is at-least-once: every record is stored, the retried batch twice."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster, enable_idempotence=False, linger_ms=10000) as producer:
        sent.send(producer, b"warm-up", partition=0)
        producer.flush(WAIT)
        cluster.drop_responses("produce", 1)
        batch = [sent.send(producer, b"dup-%d" % i, partition=0) for i in range(10)]
        producer.flush(WAIT)
        assert metric(producer, "record-retry-total") >= 1
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    recs = stored(cluster)[0]
    counts = Counter(r.value for r in recs)
    assert counts[b"warm-up"] == 1
    assert all(counts[sent.values[i]] == 2 for i in batch), counts
    assert all(r.producer_id == -1 for r in recs)
    # the futures point at the second copy, the one acknowledged
    for i in batch:
        md = sent.results[i][0]
        assert recs[md.offset].value == sent.values[i]
        assert md.offset >= 11


# --------------------------------------------------------------------------------------------
# the broker loses the producer's state


def test_unknown_producer_id_after_expired_state_is_recovered(cluster: MockCluster) -> None:
    """The broker forgets the producer's state on partition 0 (as retention would): the next batch (sequence
    > 0) gets UNKNOWN_PRODUCER_ID; the producer renews its id and resends from sequence 0, exactly once."""
    sent = Sent(TOPIC, PARTITIONS, WAIT)
    with producing(cluster) as producer:
        first = [sent.send(producer, b"a-%d" % i, partition=0) for i in range(10)]
        producer.flush(WAIT)
        pid = stored(cluster)[0][0].producer_id
        cluster.expire_producer_state(TOPIC, 0)
        assert cluster.producer_state(TOPIC, 0) == {}
        second = [sent.send(producer, b"b-%d" % i, partition=0) for i in range(10)]
        producer.flush(WAIT)
        assert metric(producer, "record-retry-total") >= 1
    sent.wait_callbacks()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert_exactly_once(cluster, sent, first + second)
    recs = stored(cluster)[0]
    assert {r.producer_id for r in recs[:10]} == {pid}
    new_pids = {r.producer_id for r in recs[10:]}
    assert len(new_pids) == 1 and pid not in new_pids
    assert [r.sequence for r in recs[10:]] == list(range(10))
    assert_idempotent_sequences(cluster)
