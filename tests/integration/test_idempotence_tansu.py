"""Idempotence and transactions against a real broker (tansu) -- issue 5's tansu part.

Record contents are checked with an independent consumer (kafka-python). kafka-python hides control
batches, so the transaction markers are checked on the raw log: Fetch requests over a plain socket,
parsed with kproducer's record-batch reader.

tansu 0.6.0 facts these tests rely on (measured): it writes COMMIT/ABORT control batches with the
transaction's producer id and epoch; it does not filter aborted records on read (Fetch returns an empty
aborted_transactions list, even for read_committed -- only the last stable offset is honoured); a second
InitProducerId for the same transactional.id bumps the epoch and aborts the first producer's open
transaction (an ABORT marker with the old epoch); a fenced producer gets PRODUCER_FENCED (90) on
AddPartitionsToTxn and Produce, but on EndTxn tansu closes the connection instead of answering.
"""
from __future__ import annotations

import functools
import struct
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import (
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionError,
)
from kproducer.producer.partitioner import partition_for_key
from kproducer.protocol.records import RecordBatch
from tests.readback import consume, fetch_batches

pytestmark = [
    pytest.mark.broker,
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

ABORT, COMMIT = 0, 1


# --------------------------------------------------------------------------------------------
# reading back


def control_type(batch: RecordBatch) -> int:
    """COMMIT (1) or ABORT (0) from a control batch's single record (key: int16 version, int16 type)."""
    assert batch.is_control and batch.is_transactional, batch
    (rec,) = batch.records
    assert rec.key is not None and len(rec.key) == 4
    version, ctype = struct.unpack(">hh", rec.key)
    assert version == 0 and ctype in (ABORT, COMMIT)
    assert rec.value is not None and len(rec.value) >= 6  # int16 version, int32 coordinator epoch
    return int(ctype)


def log_events(batches: Sequence[RecordBatch]) -> List[Tuple[Any, ...]]:
    """The partition's log as [("data", pid, epoch, [values]) | ("marker", pid, epoch, type)], with
    consecutive data batches of one producer epoch merged."""
    events: List[Tuple[Any, ...]] = []
    for b in batches:
        if b.is_control:
            events.append(("marker", b.producer_id, b.producer_epoch, control_type(b)))
        elif events and events[-1][0] == "data" and events[-1][1:3] == (b.producer_id, b.producer_epoch):
            events[-1][3].extend(r.value for r in b.records)
        else:
            events.append(("data", b.producer_id, b.producer_epoch, [r.value for r in b.records]))
    return events


def _topic(tansu: Any, partitions: int) -> str:
    name = f"txn-{uuid.uuid4().hex[:12]}"
    tansu.create_topic(name, partitions)
    return name


# --------------------------------------------------------------------------------------------
# idempotence


def test_idempotent_20k_keyed_exactly_once_in_order(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=6)
    n = 20_000
    records = [(b"key-%d" % (i % 211), b"%d:%d" % (i % 211, i)) for i in range(n)]
    calls = [0] * n
    lock = threading.Lock()

    def on_done(i: int, md: Any, exc: Any) -> None:
        with lock:
            calls[i] += 1

    # small batches and five requests in flight per connection: many batches in the pipe at once
    with Producer(bootstrap_servers=tansu.bootstrap, batch_size=4096, linger_ms=2) as producer:
        assert producer.config.enable_idempotence is True  # the default
        assert producer.config.acks == -1  # "all", implied by idempotence
        futures = [producer.send(topic, value=v, key=k, callback=functools.partial(on_done, i))
                   for i, (k, v) in enumerate(records)]
        producer.flush(timeout=60)
        metas = [f.get(0) for f in futures]
    assert calls == [1] * n
    per_partition: Dict[int, List[bytes]] = {}
    for (k, v), md in zip(records, metas):
        assert md.partition == partition_for_key(k, 6)
        per_partition.setdefault(md.partition, []).append(v)
    consumed = consume(tansu.bootstrap, topic, range(6), n)
    assert len(consumed) == n, f"read {len(consumed)} records, sent {n}"
    assert len({m.value for m in consumed}) == n, "a record was stored twice"
    for p in range(6):
        stored = [m for m in sorted(consumed, key=lambda m: m.offset) if m.partition == p]
        # exactly once, in send order, at the offsets the futures reported
        assert [m.value for m in stored] == per_partition.get(p, [])
        assert [m.offset for m in stored] == list(range(len(stored)))
    assert {(md.partition, md.offset, v) for (_k, v), md in zip(records, metas)} == \
        {(m.partition, m.offset, m.value) for m in consumed}
    # on the wire: one producer id and epoch, sequence numbers dense from 0 in every partition
    pids: Set[Tuple[int, int]] = set()
    for p in range(6):
        batches, _ = fetch_batches(tansu.bootstrap, topic, p)
        expected_seq = 0
        for b in batches:
            assert not b.is_transactional and not b.is_control
            pids.add((b.producer_id, b.producer_epoch))
            assert b.base_sequence == expected_seq, (p, b.base_offset, b.base_sequence, expected_seq)
            expected_seq += b.record_count
        assert expected_seq == len(per_partition.get(p, []))
    assert len(pids) == 1 and next(iter(pids))[0] >= 0, pids


# --------------------------------------------------------------------------------------------
# transactions


def test_committed_and_aborted_transactions_markers(tansu: Any) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = _topic(tansu, 3)
    group = f"group-{uuid.uuid4().hex[:8]}"
    # a long linger: only flush()/commit move records, so "abort before flush" is deterministic
    producer = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}",
                        linger_ms=30_000, max_block_ms=15_000)
    sent: Dict[str, Dict[int, List[bytes]]] = {}
    futures: Dict[str, List[Tuple[bytes, Any]]] = {}

    def send(txn: str, partition: int, count: int) -> None:
        for j in range(count):
            value = b"%s-p%d-%d" % (txn.encode(), partition, j)
            sent.setdefault(txn, {}).setdefault(partition, []).append(value)
            futures.setdefault(txn, []).append(
                (value, producer.send(topic, value=value, key=b"%s" % txn.encode(), partition=partition)))

    try:
        producer.init_transactions()
        # A: committed, with consumer offsets
        producer.begin_transaction()
        send("A", 0, 30)
        send("A", 1, 20)
        producer.send_offsets_to_transaction({(topic, 0): 7, (topic, 1): 3}, group)
        producer.commit_transaction()
        assert all(f.get(0).offset >= 0 for _v, f in futures["A"])
        # B: written (flushed), then aborted
        producer.begin_transaction()
        send("B", 1, 15)
        send("B", 2, 25)
        producer.flush(timeout=10)
        b_metas = [f.get(0) for _v, f in futures["B"]]
        producer.abort_transaction()
        # C: aborted before anything was sent
        producer.begin_transaction()
        send("C", 0, 10)
        send("C", 2, 10)
        producer.abort_transaction()
        for _v, f in futures["C"]:
            assert f.done()
            assert isinstance(f.exception(0), TransactionAbortedError)
            with pytest.raises(TransactionAbortedError):
                f.get(0)
        # D: the producer carries on after aborts
        producer.begin_transaction()
        send("D", 0, 5)
        send("D", 2, 5)
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    assert all(md.offset >= 0 for md in b_metas)

    # kafka-python: every record of A, B (tansu does not filter aborted records) and D; none of C
    written = {txn: parts for txn, parts in sent.items() if txn != "C"}
    expected_values = {v for parts in written.values() for vs in parts.values() for v in vs}
    consumed = consume(tansu.bootstrap, topic, range(3), len(expected_values))
    assert len(consumed) == len(expected_values)
    assert {m.value for m in consumed} == expected_values
    offsets = {v: f.get(0) for txn in ("A", "B", "D") for v, f in futures[txn]}
    for m in consumed:
        md = offsets[m.value]
        assert (m.partition, m.offset) == (md.partition, md.offset)
    # read_committed sees every committed record and nothing of C (tansu hands out B as well)
    committed_view = consume(tansu.bootstrap, topic, range(3), len(expected_values), timeout=10,
                             isolation_level="read_committed")
    committed_values = {m.value for m in committed_view}
    assert {v for txn in ("A", "D") for vs in sent[txn].values() for v in vs} <= committed_values
    assert not committed_values & {v for vs in sent["C"].values() for v in vs}

    # the raw log: data, then a marker of the same producer id and epoch, per partition
    pid_epochs: Set[Tuple[int, int]] = set()
    plan = {0: [("A", COMMIT), ("C", ABORT), ("D", COMMIT)],
            1: [("A", COMMIT), ("B", ABORT)],
            2: [("B", ABORT), ("C", ABORT), ("D", COMMIT)]}
    for p, txns in plan.items():
        batches, _ = fetch_batches(tansu.bootstrap, topic, p)
        assert all(b.is_transactional for b in batches)
        events = log_events(batches)
        pid_epochs.update((e[1], e[2]) for e in events)
        expected: List[Tuple[Any, ...]] = []
        for txn, marker in txns:
            if txn == "C":
                # C's records were never sent; whether an ABORT marker exists depends on whether
                # AddPartitionsToTxn went out before abort_transaction() -- both are correct
                if events[len(expected)][0] == "marker":
                    expected.append(("marker", ABORT))
                continue
            expected.append(("data", sent[txn][p]))
            expected.append(("marker", marker))
        assert [(e[0], e[3]) for e in events] == expected, (p, events)
    assert len(pid_epochs) == 1, f"data and markers must carry one producer id and epoch: {pid_epochs}"
    # the committed offsets of the consumer group
    consumer = KafkaConsumer(bootstrap_servers=tansu.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert consumer.committed(TopicPartition(topic, 0)) == 7
        assert consumer.committed(TopicPartition(topic, 1)) == 3
    finally:
        consumer.close()


def test_abort_after_an_abortable_error_leaves_an_abort_marker_and_the_next_commit_is_readable(tansu: Any) -> None:
    """Issue 11: a record of a transaction fails (here: too large, which send() reports through the record's
    future, as Java does, making the transaction abortable); commit_transaction() refuses, the abort writes
    ABORT markers after the records already written, and the next transaction (under a bumped epoch when the
    broker supports KIP-360) commits and is readable."""
    from kproducer.errors import MessageTooLargeError

    topic = _topic(tansu, 2)
    producer = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}",
                        linger_ms=5, max_block_ms=15_000, max_request_size=20_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        written = [producer.send(topic, b"e-%d" % i, partition=i % 2) for i in range(6)]
        producer.flush(timeout=10)
        assert all(f.get(0).offset >= 0 for f in written)
        too_large = producer.send(topic, b"x" * 30_000, partition=0)
        assert isinstance(too_large.exception(0), MessageTooLargeError)
        with pytest.raises(TransactionError, match="abort"):
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        kept = [producer.send(topic, b"f-%d" % i, partition=i % 2) for i in range(4)]
        producer.commit_transaction()
        assert all(f.get(0).offset >= 0 for f in kept)
    finally:
        producer.close(timeout=5)
    for p in range(2):
        batches, _ = fetch_batches(tansu.bootstrap, topic, p)
        events = log_events(batches)
        assert [(e[0], e[3]) for e in events] == [
            ("data", [b"e-%d" % i for i in range(p, 6, 2)]), ("marker", ABORT),
            ("data", [b"f-%d" % i for i in range(p, 4, 2)]), ("marker", COMMIT)], (p, events)
        (pid,) = {e[1] for e in events}
        # each marker carries its transaction's epoch (the same, or bumped by the abort)
        assert events[0][2] == events[1][2] and events[2][2] == events[3][2] >= events[1][2]
        assert pid >= 0
    committed = consume(tansu.bootstrap, topic, range(2), 4, timeout=10, isolation_level="read_committed")
    assert {b"f-%d" % i for i in range(4)} <= {m.value for m in committed}


def test_fencing_between_transactions(tansu: Any) -> None:
    """A second producer's init_transactions() fences the first: its next record fails with
    ProducerFencedError, every later call raises a TransactionError caused by the fencing, and close()
    returns at once."""
    topic = _topic(tansu, 2)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    first = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=txn_id, max_block_ms=5000)
    second = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=txn_id, max_block_ms=5000)
    try:
        first.init_transactions()
        first.begin_transaction()
        before = first.send(topic, b"first-1", partition=0)
        first.commit_transaction()
        assert before.get(0).offset == 0

        second.init_transactions()  # bumps the epoch: `first` is now a zombie

        first.begin_transaction()  # local: the coordinator is not asked yet
        zombie = first.send(topic, b"zombie", partition=1)
        exc = zombie.exception(timeout=10)
        assert isinstance(exc, ProducerFencedError), repr(exc)
        with pytest.raises(TransactionError, match="PRODUCER_FENCED") as info:
            first.commit_transaction(timeout=5)
        assert isinstance(info.value.__cause__, ProducerFencedError)
        with pytest.raises(TransactionError, match="PRODUCER_FENCED"):
            first.abort_transaction(timeout=5)
        with pytest.raises(TransactionError, match="PRODUCER_FENCED"):
            first.send(topic, b"zombie-2", partition=0)
        t0 = time.monotonic()
        first.close(timeout=5)
        assert time.monotonic() - t0 < 3

        second.begin_transaction()
        ok = second.send(topic, b"second-1", partition=1)
        second.commit_transaction()
        assert ok.get(0).partition == 1
    finally:
        first.close(timeout=1)
        second.close(timeout=5)
    values = {m.value for m in consume(tansu.bootstrap, topic, range(2), 2)}
    assert values == {b"first-1", b"second-1"}
    (b0_data, b0_marker), _ = fetch_batches(tansu.bootstrap, topic, 0)
    (b1_data, b1_marker), _ = fetch_batches(tansu.bootstrap, topic, 1)
    assert control_type(b0_marker) == COMMIT and control_type(b1_marker) == COMMIT
    # the same producer id, the epoch bumped by the second producer's InitProducerId
    assert b1_data.producer_id == b0_data.producer_id == b0_marker.producer_id == b1_marker.producer_id
    assert b1_data.producer_epoch == b1_marker.producer_epoch == b0_data.producer_epoch + 1
    assert [r.value for r in b1_data.records] == [b"second-1"]


def test_fencing_mid_transaction(tansu: Any) -> None:
    """Fenced with records of an open transaction already written: the new producer's InitProducerId
    aborts that transaction (ABORT marker with the old epoch); the zombie's next record fails with
    ProducerFencedError and its commit raises a TransactionError caused by it."""
    topic = _topic(tansu, 1)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    first = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=txn_id, max_block_ms=5000)
    second: Optional[Producer] = None
    try:
        first.init_transactions()
        first.begin_transaction()
        written = first.send(topic, b"open-1", partition=0).get(10)
        second = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=txn_id, max_block_ms=5000)
        second.init_transactions()
        exc = first.send(topic, b"open-2", partition=0).exception(timeout=10)
        assert isinstance(exc, ProducerFencedError), repr(exc)
        t0 = time.monotonic()
        with pytest.raises(TransactionError, match="PRODUCER_FENCED") as info:
            first.commit_transaction(timeout=5)
        assert isinstance(info.value.__cause__, ProducerFencedError)
        assert time.monotonic() - t0 < 2  # at once: the fencing is known, nothing is asked of the broker
        first.close(timeout=5)
        assert time.monotonic() - t0 < 3  # no abort is attempted at close for a fatal error
    finally:
        first.close(timeout=1)
        if second is not None:
            second.close(timeout=5)
    batches, _ = fetch_batches(tansu.bootstrap, topic, 0)
    events = log_events(batches)
    assert [(e[0], e[3]) for e in events] == [("data", [b"open-1"]), ("marker", ABORT)], events
    assert events[0][1:3] == events[1][1:3]  # marked aborted under the zombie's own id and epoch
    assert written.offset == 0


def test_commit_of_a_fenced_transaction_without_new_records_times_out(tansu: Any) -> None:
    """tansu answers a fenced producer's EndTxn by closing the connection (not PRODUCER_FENCED): the
    producer retries it like any request lost to a disconnect, so commit_transaction() raises
    KafkaTimeoutError after its timeout -- and close(timeout) still returns."""
    topic = _topic(tansu, 1)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    first = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=txn_id, max_block_ms=5000)
    second = Producer(bootstrap_servers=tansu.bootstrap, transactional_id=txn_id, max_block_ms=5000)
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"open-1", partition=0).get(10)
        second.init_transactions()
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="commit_transaction"):
            first.commit_transaction(timeout=1.0)
        assert 0.9 <= time.monotonic() - t0 < 3
        t0 = time.monotonic()
        first.close(timeout=1.0)
        assert time.monotonic() - t0 < 3
        # the new owner of the transactional id is unaffected
        second.begin_transaction()
        second.send(topic, b"second-1", partition=0)
        second.commit_transaction()
    finally:
        first.close(timeout=1)
        second.close(timeout=5)
    events = log_events(fetch_batches(tansu.bootstrap, topic, 0)[0])
    assert [(e[0], e[3]) for e in events] == [
        ("data", [b"open-1"]), ("marker", ABORT), ("data", [b"second-1"]), ("marker", COMMIT)], events
