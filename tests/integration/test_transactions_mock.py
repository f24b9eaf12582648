"""Transactions of our Producer on the embedded MockCluster (issue 5).

Committed and aborted transactions read back three ways: the log with its control records
(``cluster.records(include_control=True)``: markers present, producer id and epoch right), kafka-python with
``isolation_level='read_committed'`` (aborted records hidden), and confluent-kafka's consumer with
``isolation.level=read_committed`` when it is installed. Also: offsets committed through
``send_offsets_to_transaction``, fencing by a second producer with the same transactional id, aborting
with records still queued, misuse errors, retriable coordinator errors, and faults during a transaction.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import (
    InvalidProducerEpochError,
    KafkaTimeoutError,
    ProducerClosedError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionError,
)
from kproducer.mock import MockCluster
from tests.sent_records import Sent as SentRecords

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TOPIC = "tx"
PARTITIONS = 6
WAIT = 30.0
ABORT, COMMIT = 0, 1  # control record types

# a record as a consumer reads it: (partition, offset, value)
Read = Tuple[int, int, Optional[bytes]]


# --------------------------------------------------------------------------------------------
# helpers


class Sent(SentRecords):
    def __init__(self) -> None:
        super().__init__(TOPIC, PARTITIONS, WAIT)



@pytest.fixture(params=[0, 2], ids=["tv0", "tv2"])
def cluster(request: Any) -> Iterator[MockCluster]:
    """A 3-broker MockCluster whose finalized transaction.version is 0 (kproducer speaks transactions v1) or 2
    (transactions v2, KIP-890: the epoch goes up at every EndTxn); a test for one version only parametrizes
    ``transaction_version`` itself."""
    with MockCluster(3, transaction_version=request.param) as c:
        c.create_topic(TOPIC, PARTITIONS)
        c.create_topic("in", 2)
        yield c


def is_v2(cluster: MockCluster) -> bool:
    return cluster.transaction_version >= 2


def close_bounded(producer: Producer, timeout: float = 10.0) -> None:
    start = time.monotonic()
    producer.close(timeout)
    assert time.monotonic() - start < timeout + 10
    assert not producer._sender.is_alive()


@contextlib.contextmanager
def txn_producer(cluster: MockCluster, transactional_id: str = "txn-1", **config: Any) -> Iterator[Producer]:
    config.setdefault("linger_ms", 5)
    config.setdefault("retry_backoff_ms", 20)
    config.setdefault("reconnect_backoff_ms", 20)
    config.setdefault("max_block_ms", 30000)
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=transactional_id, **config)
    try:
        yield producer
    finally:
        close_bounded(producer)


def pid_epoch(producer: Producer) -> Tuple[int, int]:
    """The producer id and epoch the producer got from InitProducerId."""
    txn = producer._txn
    assert txn is not None
    return txn.producer_id, txn.producer_epoch


def log(cluster: MockCluster, p: int, topic: str = TOPIC) -> List[Any]:
    return cluster.records(topic, p, include_control=True)


def shape(records: List[Any]) -> List[Any]:
    """A partition's log as values and markers: [b"v1", b"v2", "COMMIT", b"v3", "ABORT", ...]."""
    return [("COMMIT" if r.control_type == COMMIT else "ABORT") if r.is_control else r.value for r in records]


def read_kafka_python(cluster: MockCluster, read_committed: bool, topic: str = TOPIC,
                      timeout: float = WAIT) -> List[Read]:
    """Everything a kafka-python consumer returns, reading every partition up to its end (the high
    watermark, or the last stable offset with read_committed)."""
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=50, client_id="txn-reader",
        isolation_level="read_committed" if read_committed else "read_uncommitted",
    )
    tps = [TopicPartition(topic, p) for p in range(cluster.partition_count(topic))]
    ends = {tp.partition: (cluster.last_stable_offset(topic, tp.partition) if read_committed
                           else cluster.high_watermark(topic, tp.partition)) for tp in tps}
    out: List[Read] = []
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, "kafka-python did not reach the end of the partitions"
            for msgs in consumer.poll(timeout_ms=100).values():
                out.extend((m.partition, m.offset, m.value) for m in msgs)
        for msgs in consumer.poll(timeout_ms=100).values():  # nothing more may come
            out.extend((m.partition, m.offset, m.value) for m in msgs)
    finally:
        consumer.close()
    return out


def read_confluent(cluster: MockCluster, expected: int, topic: str = TOPIC, timeout: float = WAIT) -> List[Read]:
    """What confluent-kafka's consumer returns with read_committed: ``expected`` records, then a quiet
    period in which nothing more may arrive."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": "txn-reader", "enable.auto.commit": False,
        "isolation.level": "read_committed", "fetch.wait.max.ms": 50,
    })
    out: List[Read] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(cluster.partition_count(topic))])
        deadline = time.monotonic() + timeout
        quiet_until: Optional[float] = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None:
                if len(out) >= expected:
                    quiet_until = quiet_until or time.monotonic() + 0.5
                    if time.monotonic() > quiet_until:
                        break
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def values_by_partition(reads: List[Read]) -> Dict[int, List[Optional[bytes]]]:
    out: Dict[int, List[Optional[bytes]]] = {p: [] for p in range(PARTITIONS)}
    for p, _o, v in sorted(reads):
        out[p].append(v)
    return out


def have_confluent() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# commit and abort, read back


def test_commit_and_abort_read_back(cluster: MockCluster) -> None:
    sent = Sent()
    with txn_producer(cluster) as producer:
        producer.init_transactions()
        pid, epoch = pid_epoch(producer)
        assert pid >= 0 and epoch >= 0
        producer.begin_transaction()
        c1 = sent.send_many(producer, "c1", 30)
        producer.commit_transaction()
        assert cluster.transaction_state("txn-1") == "CompleteCommit"
        producer.begin_transaction()
        a = sent.send_many(producer, "a", 30)
        producer.flush(WAIT)  # written, then aborted
        producer.abort_transaction()
        assert cluster.transaction_state("txn-1") == "CompleteAbort"
        producer.begin_transaction()
        c2 = sent.send_many(producer, "c2", 30)
        producer.commit_transaction()
    sent.check_callbacks_once()
    assert sent.failed() == {}, "every record was written (the aborted ones before the abort)"

    # the log: records and markers, in order, with the producer's id; v1: one epoch for all, and the sequence
    # goes on from one transaction to the next; v2: EndTxn bumps the epoch (its markers carry the new one) and
    # each transaction numbers its records from 0 under its own epoch
    v2 = is_v2(cluster)
    for p in range(PARTITIONS):
        recs = log(cluster, p)
        txns = [sent.by_partition(c1)[p], sent.by_partition(a)[p], sent.by_partition(c2)[p]]
        assert shape(recs) == txns[0] + ["COMMIT"] + txns[1] + ["ABORT"] + txns[2] + ["COMMIT"], p
        assert all(r.producer_id == pid for r in recs)
        if v2:
            assert [r.producer_epoch for r in recs] == [
                e for i, t in enumerate(txns) for e in [epoch + i] * len(t) + [epoch + i + 1]]
            assert [r.sequence for r in recs if not r.is_control] == [s for t in txns for s in range(len(t))]
        else:
            assert all(r.producer_epoch == epoch for r in recs)
            data = [r for r in recs if not r.is_control]
            assert [r.sequence for r in data] == list(range(len(data)))
        assert all(r.is_transactional for r in recs)
        assert cluster.last_stable_offset(TOPIC, p) == cluster.high_watermark(TOPIC, p)
        assert cluster.producer_state(TOPIC, p)[pid][0] == epoch + (3 if v2 else 0)
    assert pid_epoch(producer) == (pid, epoch + (3 if v2 else 0))
    # offsets the futures report are where the records are
    offsets = {(p, r.offset): r.value for p in range(PARTITIONS) for r in log(cluster, p)}
    for i, (md, _e) in sent.results.items():
        assert offsets[(md.partition, md.offset)] == sent.values[i]

    committed = {p: sent.by_partition(c1)[p] + sent.by_partition(c2)[p] for p in range(PARTITIONS)}
    everything = {p: sent.by_partition(c1)[p] + sent.by_partition(a)[p] + sent.by_partition(c2)[p]
                  for p in range(PARTITIONS)}
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == committed
    assert values_by_partition(read_kafka_python(cluster, read_committed=False)) == everything
    if have_confluent():
        assert values_by_partition(read_confluent(cluster, len(c1) + len(c2))) == committed


def test_open_transaction_is_invisible_until_committed(cluster: MockCluster) -> None:
    sent = Sent()
    with txn_producer(cluster) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        batch = sent.send_many(producer, "open", 12)
        producer.flush(WAIT)
        assert cluster.transaction_state("txn-1") == "Ongoing"
        for p in range(PARTITIONS):
            assert cluster.last_stable_offset(TOPIC, p) == 0 < cluster.high_watermark(TOPIC, p)
        assert read_kafka_python(cluster, read_committed=True) == []
        assert len(read_kafka_python(cluster, read_committed=False)) == 12
        producer.commit_transaction()
        assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(batch)
    sent.check_callbacks_once()


def test_close_aborts_an_open_transaction(cluster: MockCluster) -> None:
    sent = Sent()
    with txn_producer(cluster) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sent.send_many(producer, "left-open", 6)
        producer.flush(WAIT)
    sent.check_callbacks_once()
    assert cluster.transaction_state("txn-1") == "CompleteAbort"
    for p in range(PARTITIONS):
        assert shape(log(cluster, p))[-1] == "ABORT"
    assert read_kafka_python(cluster, read_committed=True) == []


# --------------------------------------------------------------------------------------------
# consumer offsets in a transaction


def test_send_offsets_to_transaction(cluster: MockCluster) -> None:
    sent = Sent()
    with txn_producer(cluster) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sent.send_many(producer, "out", 6)
        producer.send_offsets_to_transaction({("in", 0): 42, ("in", 1): 7}, "group-a")
        assert cluster.committed_offsets("group-a") == {}, "not before the commit"
        producer.commit_transaction()
        assert cluster.committed_offsets("group-a") == {("in", 0): 42, ("in", 1): 7}
        # offsets of an aborted transaction are dropped
        producer.begin_transaction()
        sent.send_many(producer, "out2", 6)
        producer.send_offsets_to_transaction({("in", 0): 100}, "group-a")
        producer.abort_transaction()
        assert cluster.committed_offsets("group-a") == {("in", 0): 42, ("in", 1): 7}
        # offsets alone (no records) make a transaction too
        producer.begin_transaction()
        producer.send_offsets_to_transaction({("in", 1): 8}, "group-a")
        producer.commit_transaction()
        assert cluster.committed_offsets("group-a") == {("in", 0): 42, ("in", 1): 8}
    sent.check_callbacks_once()
    assert cluster.request_counts["txn_offset_commit"] == 3
    # (transactions v2: TxnOffsetCommit v5 adds the group to the transaction itself)
    assert cluster.request_counts["add_offsets_to_txn"] == (0 if is_v2(cluster) else 3)


# --------------------------------------------------------------------------------------------
# fencing


def test_second_producer_fences_the_first_at_commit(cluster: MockCluster) -> None:
    """A new producer with the same transactional id aborts the old one's open transaction (its records
    end up aborted) and fences it: the old producer's commit raises ProducerFencedError; afterwards every
    transactional call says the producer must be closed."""
    sent = Sent()
    with txn_producer(cluster, "shared") as first:
        first.init_transactions()
        old_pid, old_epoch = pid_epoch(first)
        first.begin_transaction()
        old = sent.send_many(first, "old", 6)
        first.flush(WAIT)
        with txn_producer(cluster, "shared") as second:
            second.init_transactions()
            # as Apache Kafka: the abort markers carry a fencing epoch, the new producer the one after it
            assert pid_epoch(second) == (old_pid, old_epoch + 2)
            with pytest.raises(ProducerFencedError) as info:
                first.commit_transaction()
            assert "fenced" in str(info.value).lower()
            assert "transactional.id" in str(info.value)
            for call in (first.begin_transaction, first.abort_transaction):
                with pytest.raises(TransactionError, match="fatal error and must be closed"):
                    call()
            with pytest.raises(TransactionError, match="fatal error and must be closed"):
                first.send(TOPIC, b"late", partition=0)
            second.begin_transaction()
            new = sent.send_many(second, "new", 6)
            second.commit_transaction()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    commit_epoch = old_epoch + (3 if is_v2(cluster) else 2)  # (v2: the commit marker carries the bumped epoch)
    for p in range(PARTITIONS):
        recs = log(cluster, p)
        assert shape(recs) == sent.by_partition(old)[p] + ["ABORT"] + sent.by_partition(new)[p] + ["COMMIT"]
        assert [r.producer_epoch for r in recs] == [old_epoch, old_epoch + 1, old_epoch + 2, commit_epoch]
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(new)


def test_fenced_producer_records_fail(cluster: MockCluster) -> None:
    """After being fenced: a record for a new partition fails with ProducerFencedError (AddPartitionsToTxn is
    refused; under transactions v2 the partition's leader asks the coordinator to add it, and the record fails
    with INVALID_PRODUCER_EPOCH, as on Apache Kafka 4.1); a record for a partition already in the transaction is
    refused by the partition (INVALID_PRODUCER_EPOCH, abortable as in Java), and the abort then hits the
    fence."""
    sent = Sent()
    with txn_producer(cluster, "shared") as first:
        first.init_transactions()
        first.begin_transaction()
        sent.send(first, b"in-txn", 0)
        first.flush(WAIT)
        with txn_producer(cluster, "shared") as second:
            second.init_transactions()
            same = sent.send(first, b"same-partition", 0)
            exc = sent.futures[same].exception(WAIT)
            assert isinstance(exc, InvalidProducerEpochError), repr(exc)
            with pytest.raises(TransactionError, match="abort"):
                first.commit_transaction()
            with pytest.raises(ProducerFencedError, match="(?i)fenced"):
                first.abort_transaction()
    sent.check_callbacks_once()
    with txn_producer(cluster, "shared-2") as third:
        third.init_transactions()
        third.begin_transaction()
        sent.send(third, b"x", 0)
        third.flush(WAIT)
        with txn_producer(cluster, "shared-2") as fourth:
            fourth.init_transactions()
            other = sent.send(third, b"new-partition", 3)
            exc = sent.futures[other].exception(WAIT)
            if is_v2(cluster):
                assert isinstance(exc, InvalidProducerEpochError), repr(exc)
                with pytest.raises(ProducerFencedError, match="(?i)fenced"):
                    third.abort_transaction()
            else:
                assert isinstance(exc, ProducerFencedError) and "fenced" in str(exc).lower(), repr(exc)
    sent.check_callbacks_once()
    # nothing the fenced producers wrote is visible to read_committed consumers
    assert read_kafka_python(cluster, read_committed=True) == []
    assert b"same-partition" not in [r.value for r in log(cluster, 0)]


# --------------------------------------------------------------------------------------------
# aborting with records still queued


def test_abort_with_records_still_queued(cluster: MockCluster) -> None:
    sent = Sent()
    with txn_producer(cluster, linger_ms=60000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        queued = sent.send_many(producer, "queued", 24)
        # (a precondition, not a wait: linger.ms of a minute keeps them queued until the abort)
        assert not any(f.done() for f in sent.futures), "linger.ms keeps them queued"
        producer.abort_transaction()
        for i in queued:
            exc = sent.futures[i].exception(WAIT)
            assert isinstance(exc, TransactionAbortedError), repr(exc)
            assert isinstance(exc, TransactionError)
        # the producer goes on with a new transaction
        producer.begin_transaction()
        kept = sent.send_many(producer, "kept", 12)
        producer.commit_transaction()
    sent.check_callbacks_once()
    assert sorted(sent.failed()) == queued
    for p in range(PARTITIONS):
        data = [r.value for r in log(cluster, p) if not r.is_control]
        assert data == sent.by_partition(kept)[p], "no aborted record was written"
        assert shape(log(cluster, p))[-1] == "COMMIT"
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(kept)


# --------------------------------------------------------------------------------------------
# misuse


def test_misuse_errors_are_helpful(cluster: MockCluster) -> None:
    with txn_producer(cluster) as producer:
        with pytest.raises(TransactionError, match=r"init_transactions\(\) before begin_transaction\(\)"):
            producer.begin_transaction()
        with pytest.raises(TransactionError, match=r"begin_transaction\(\)"):
            producer.send(TOPIC, b"too early", partition=0)
        with pytest.raises(TransactionError, match=r"commit_transaction\(\) needs an open transaction"):
            producer.commit_transaction()
        producer.init_transactions()
        with pytest.raises(TransactionError, match="already called"):
            producer.init_transactions()
        with pytest.raises(TransactionError, match=r"needs an open transaction: call begin_transaction\(\) first"):
            producer.send(TOPIC, b"outside", partition=0)
        with pytest.raises(TransactionError, match=r"commit_transaction\(\) needs an open transaction"):
            producer.commit_transaction()
        with pytest.raises(TransactionError, match=r"abort_transaction\(\) needs an open transaction"):
            producer.abort_transaction()
        with pytest.raises(TransactionError, match=r"begin_transaction\(\)"):
            producer.send_offsets_to_transaction({("in", 0): 1}, "g")
        producer.begin_transaction()
        with pytest.raises(TransactionError, match="commit or abort it first"):
            producer.begin_transaction()
        with pytest.raises(ValueError, match="group_id"):
            producer.send_offsets_to_transaction({("in", 0): 1}, "")
        producer.abort_transaction()
    assert cluster.records(TOPIC, 0, include_control=True) == []
    with pytest.raises(ProducerClosedError):
        producer.begin_transaction()

    plain = Producer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        for call in (plain.init_transactions, plain.begin_transaction, plain.commit_transaction,
                     plain.abort_transaction):
            with pytest.raises(TransactionError, match="transactional_id"):
                call()
    finally:
        close_bounded(plain)


# --------------------------------------------------------------------------------------------
# retriable coordinator errors


@pytest.mark.parametrize("api, codes", [
    ("end_txn", [51]),
    ("end_txn", [16]),
    ("end_txn", [51, 16, 51]),
    ("find_coordinator", [15]),
    ("init_producer_id", [51]),
    ("txn_offset_commit", [16]),
])
def test_retriable_coordinator_errors_are_retried(cluster: MockCluster, api: str, codes: List[int]) -> None:
    retriable_coordinator_errors_are_retried(cluster, api, codes)


@pytest.mark.parametrize("cluster", [0], ids=["tv0"], indirect=True)  # (v2 sends neither of these)
@pytest.mark.parametrize("api, codes", [
    ("add_partitions_to_txn", [51]),
    ("add_partitions_to_txn", [16]),
    ("add_partitions_to_txn", [51, 51, 16]),
    ("add_offsets_to_txn", [51, 16]),
])
def test_retriable_add_to_transaction_errors_are_retried(cluster: MockCluster, api: str, codes: List[int]) -> None:
    retriable_coordinator_errors_are_retried(cluster, api, codes)


def retriable_coordinator_errors_are_retried(cluster: MockCluster, api: str, codes: List[int]) -> None:
    sent = Sent()
    with txn_producer(cluster) as producer:
        cluster.inject_errors(api, codes)
        producer.init_transactions()
        producer.begin_transaction()
        batch = sent.send_many(producer, "r", 12)
        producer.send_offsets_to_transaction({("in", 0): 5}, "g")
        producer.commit_transaction()
        assert cluster.pending_errors(api) == [], "every injected error was answered"
        assert cluster.request_counts[api] >= 2
    sent.check_callbacks_once()
    assert sent.failed() == {}
    assert cluster.transaction_state("txn-1") == "CompleteCommit"
    assert cluster.committed_offsets("g") == {("in", 0): 5}
    for p in range(PARTITIONS):
        assert shape(log(cluster, p)) == sent.by_partition(batch)[p] + ["COMMIT"]
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(batch)


# --------------------------------------------------------------------------------------------
# faults during a transaction


def test_transaction_through_produce_faults(cluster: MockCluster) -> None:
    """Retriable produce errors, a lost response, dropped connections and a leader move inside one
    transaction: it commits, and every record is in the log exactly once."""
    sent = Sent()
    with txn_producer(cluster) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        first = sent.send_many(producer, "f", 60)
        producer.flush(WAIT)
        cluster.inject_errors("produce", [6, 7, 19])
        cluster.drop_responses("produce", 1)
        second = sent.send_many(producer, "s", 60)
        producer.flush(WAIT)
        cluster.drop_connections()
        cluster.move_leader(TOPIC, 0, cluster.leader(TOPIC, 0) % 3 + 1)
        third = sent.send_many(producer, "t", 60)
        producer.commit_transaction()
    sent.check_callbacks_once()
    assert sent.failed() == {}
    everything = first + second + third
    for p in range(PARTITIONS):
        assert shape(log(cluster, p)) == sent.by_partition(everything)[p] + ["COMMIT"]
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(everything)


# --------------------------------------------------------------------------------------------
# issue 11: a failed record makes the transaction all-or-nothing


def end_txn_requests(cluster: MockCluster) -> int:
    return sum(1 for e in cluster.request_log if e.api == "end_txn")


def test_record_failing_while_commit_flushes_fails_the_commit(cluster: MockCluster) -> None:
    """Bug 1 of issue 11: a non-retriable produce error while commit_transaction() flushes the records
    makes the transaction abortable: the commit raises (with the record's error as its cause), no
    EndTxn(commit) is sent, and only abort_transaction() ends it."""
    from kproducer.errors import InvalidRecordError

    sent = Sent()
    with txn_producer(cluster, linger_ms=60000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        ok = sent.send_many(producer, "ok", 5)  # one batch per partition...
        producer.flush(WAIT)
        bad = [sent.send(producer, b"bad", partition=0)]  # ...then one that waits for the commit's flush
        cluster.reset_request_log()
        cluster.inject_errors("produce", [InvalidRecordError.code])
        with pytest.raises(TransactionError) as raised:
            producer.commit_transaction()
        assert isinstance(raised.value.__cause__, InvalidRecordError), repr(raised.value.__cause__)
        assert isinstance(sent.futures[bad[0]].exception(WAIT), InvalidRecordError)
        assert end_txn_requests(cluster) == 0, "no EndTxn(commit) for a transaction with a failed record"
        assert cluster.transaction_state("txn-1") not in ("PrepareCommit", "CompleteCommit")
        with pytest.raises(TransactionError):
            producer.commit_transaction()  # still refused: the transaction must be aborted
        producer.abort_transaction()
        # (the abort bumped the epoch afterwards: a new InitProducerId leaves the coordinator Empty)
        assert cluster.transaction_state("txn-1") in ("CompleteAbort", "Empty")
        assert all(shape(log(cluster, p))[-1] == "ABORT" for p in range(5))
        # and the producer goes on
        producer.begin_transaction()
        kept = sent.send_many(producer, "kept", 6)
        producer.commit_transaction()
    assert cluster.transaction_state("txn-1") == "CompleteCommit"
    assert sorted(sent.failed()) == bad
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(kept)
    assert ok  # written, then aborted: invisible to read_committed (checked above)


def test_after_a_failed_record_and_abort_the_next_transaction_is_accepted_at_once(cluster: MockCluster) -> None:
    """Bug 2 of issue 11: a record of a transaction fails, the application aborts and begins the next
    transaction; its first record to that partition is accepted at once (the abort bumped the epoch,
    KIP-360, and reset the sequences) instead of being refused as OUT_OF_ORDER_SEQUENCE_NUMBER."""
    from kproducer.errors import InvalidRecordError

    sent = Sent()
    with txn_producer(cluster, request_timeout_ms=5000, delivery_timeout_ms=10000) as producer:
        producer.init_transactions()
        pid, epoch = pid_epoch(producer)
        producer.begin_transaction()
        first = [sent.send(producer, b"first", partition=0)]
        producer.commit_transaction()
        producer.begin_transaction()
        sent.send(producer, b"before", partition=0)
        producer.flush(WAIT)
        cluster.inject_errors("produce", [InvalidRecordError.code])
        failed = sent.send(producer, b"fails", partition=0)
        assert isinstance(sent.futures[failed].exception(WAIT), InvalidRecordError)
        producer.abort_transaction()
        # v1: the abort bumped the epoch (KIP-360); v2: the commit's EndTxn did, and the abort's
        assert pid_epoch(producer) == (pid, epoch + (2 if is_v2(cluster) else 1)), "the abort bumped the epoch"
        produce_before = cluster.request_counts["produce"]
        producer.begin_transaction()
        nxt = [sent.send(producer, b"next", partition=0)]
        assert sent.futures[nxt[0]].get(WAIT).offset >= 0
        assert cluster.request_counts["produce"] - produce_before == 1, "no OUT_OF_ORDER_SEQUENCE retries"
        producer.commit_transaction()
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(first + nxt)
    assert shape(log(cluster, 0))[-1] == "COMMIT"


def test_abort_while_a_commit_is_pending_is_refused(cluster: MockCluster) -> None:
    """Bug 3 of issue 11: abort_transaction() while commit_transaction() is still pending (it timed out
    on the caller's side but goes on in the background) is refused with IllegalStateError, like Java,
    every time; calling commit_transaction() again finishes the commit."""
    from kproducer.errors import IllegalStateError

    sent = Sent()
    with txn_producer(cluster, request_timeout_ms=3000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        batch = sent.send_many(producer, "c", 6)
        producer.flush(WAIT)
        for broker in cluster.broker_ids:
            cluster.set_latency(broker, 1500)  # the EndTxn answer comes late
        with pytest.raises(KafkaTimeoutError):
            producer.commit_transaction(timeout=0.2)
        for _ in range(2):
            with pytest.raises(IllegalStateError, match=r"commit_transaction\(\) is pending"):
                producer.abort_transaction()
        with pytest.raises(TransactionError, match="commit"):
            producer.begin_transaction()
        cluster.clear_faults()
        producer.commit_transaction(WAIT)
        assert cluster.transaction_state("txn-1") == "CompleteCommit"
    assert sent.failed() == {}
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(batch)


def test_a_record_send_cannot_queue_fails_its_future_and_makes_the_transaction_abortable(
        cluster: MockCluster) -> None:
    """As Java's doSend: a record too large fails through its future and callback (send() does not raise),
    and the open transaction must be aborted; the next transaction commits."""
    from kproducer.errors import MessageTooLargeError

    calls: List[Any] = []
    sent = Sent()
    with txn_producer(cluster, max_request_size=10_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sent.send_many(producer, "before", 3)
        future = producer.send(TOPIC, b"x" * 20_000, partition=0, callback=lambda md, exc: calls.append((md, exc)))
        assert isinstance(future.exception(0), MessageTooLargeError)
        assert calls == [(None, future.exception(0))]
        with pytest.raises(TransactionError, match="abort"):
            producer.send(TOPIC, b"after", partition=0)
        with pytest.raises(TransactionError) as raised:
            producer.commit_transaction()
        assert isinstance(raised.value.__cause__, MessageTooLargeError)
        producer.abort_transaction()
        producer.begin_transaction()
        kept = sent.send_many(producer, "kept", 6)
        producer.commit_transaction()
    assert values_by_partition(read_kafka_python(cluster, read_committed=True)) == sent.by_partition(kept)


def test_send_offsets_with_consumer_group_metadata_and_offset_metadata(cluster: MockCluster) -> None:
    from kproducer import ConsumerGroupMetadata, OffsetAndMetadata

    with txn_producer(cluster) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"v", partition=0)
        producer.send_offsets_to_transaction({("in", 0): OffsetAndMetadata(9, "from-meta"), ("in", 1): 4},
                                             ConsumerGroupMetadata("group-m"))
        producer.commit_transaction()
    assert cluster.committed_offsets("group-m") == {("in", 0): 9, ("in", 1): 4}
