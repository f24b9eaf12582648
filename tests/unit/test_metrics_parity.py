"""The metrics of Java's producer that kproducer added later (issue 15, Java parity): record-size-avg/-max (Java's
Sender: each batch records its largest record), and KafkaProducerMetrics' call timers (flush, metadata wait,
transactions). Expected values come from the bytes the scripted broker received and from the times the test
moves its clock by."""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional

import pytest

from kproducer import Producer
from kproducer.clock import FakeClock
from kproducer.mock import MockCluster
from kproducer.producer.metrics import CALL_TIMERS, PRODUCER_METRICS
from kproducer.protocol import messages as m
from kproducer.protocol.accel import records as records_c
from kproducer.protocol.records import RecordBatch, RecordBatchBuilder, _RecordsBufferPy
from tests.unit.scripted import HOLD, Harness, ScriptedSelector, SentRequest

JAVA_TIMERS = {"flush-time-ns-total", "txn-init-time-ns-total", "txn-begin-time-ns-total",
               "txn-send-offsets-time-ns-total", "txn-commit-time-ns-total", "txn-abort-time-ns-total",
               "metadata-wait-time-ns-total"}


def _alone_size(key: Optional[bytes], value: Optional[bytes], headers: List[Any]) -> int:
    """The size of a batch holding just this record: what Java's record-size measures (built independently of
    the batch the producer sent)."""
    b = RecordBatchBuilder(1 << 30)
    assert b.try_append(0, key, value, headers or None) == 0
    return len(b.build())


def _largest(batch: RecordBatch) -> int:
    return max(_alone_size(r.key, r.value, r.headers) for r in batch.records)


# -- the builders keep their largest record's size --------------------------------------------------------


@pytest.mark.parametrize("builder_class", [_RecordsBufferPy, RecordBatchBuilder], ids=["python", "default"])
def test_builders_keep_the_size_of_their_largest_record(builder_class: Any) -> None:
    """As each record is written (one at a time, in bulk, or by the Python encoder the compiled one hands
    unusual records to), the builder's _max_rec is the largest record so far with its length prefix: the size
    of the record in a batch of its own, less the batch header."""
    many_headers = [("h%d" % i, b"x") for i in range(40)]  # more than the compiled encoder takes itself
    records = [(b"k%d" % i, b"v" * n, headers) for i, (n, headers) in enumerate(
        [(0, None), (1, [("h", b"x")]), (63, None), (64, [("h", b"x")]), (100, many_headers), (8191, None),
         (8192, None), (70_000, [("h", b"x")]), (5, None)])]
    lengths = []
    for key, value, headers in records:
        one = RecordBatchBuilder(1 << 30)
        one.try_append(0, key, value, headers)
        lengths.append(len(one.build()) - 61)
    b = builder_class(1 << 30)
    assert b._max_rec == 0
    for i, (key, value, headers) in enumerate(records):
        assert b.try_append(1_700_000_000_000, key, value, headers) == i
        assert b._max_rec == max(lengths[:i + 1])
    bulk = builder_class(1 << 30)
    assert bulk.extend(0, [k for k, _v, _h in records], [v for _k, v, _h in records], [h for _k, _v, h in records],
                       range(len(records)), 0) == len(records)
    assert bulk._max_rec == max(lengths)
    if builder_class is RecordBatchBuilder and records_c is not None:
        assert isinstance(b, records_c.RecordsBuffer)  # the compiled writer's own bookkeeping was checked


# -- record-size-avg / -max ----------------------------------------------------------------------------


def test_record_size_is_each_batchs_largest_record() -> None:
    h = Harness(topics={"t": 2, "u": 1})
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    h.send("t", value=b"a" * 10, partition=0)
    h.send("t", value=b"a" * 300, key=b"key", partition=0)  # the largest of its batch; 2-byte length prefix
    h.send("t", value=b"a" * 20, partition=0)
    h.send("t", value=b"b" * 50, partition=1, headers=[("trace", b"0123456789")])
    h.send("t", value=b"b" * 50, partition=1)
    h.send("u", value=None, key=b"tombstone", partition=0)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    batches = h.selector.held(m.PRODUCE)[0].batches()
    assert len(batches) == 3
    largest = [_largest(b) for b in batches.values()]
    assert largest[0] == _alone_size(b"key", b"a" * 300, [])
    got = h.sender.metrics.snapshot()
    assert got["record-size-max"] == max(largest)
    assert got["record-size-avg"] == sum(largest) / 3  # the average of the batches' largest records, as Java


def test_record_size_is_nan_before_any_batch_and_counts_a_retried_batch_again() -> None:
    h = Harness(topics={"t": 1}, retries=5, retry_backoff_ms=10)
    h.boot()
    got = h.sender.metrics.snapshot()
    assert got["record-size-avg"] != got["record-size-avg"] and got["record-size-max"] != got["record-size-max"]
    h.selector.script(m.PRODUCE, {("t", 0): 6})  # NOT_LEADER_OR_FOLLOWER: retried
    h.send("t", value=b"z" * 77)
    h.send("t", value=b"z" * 7)
    h.run_until(lambda: h.sender.metrics.retries == 2, what="the batch is retried")
    h.advance(50)  # past retry.backoff.ms
    h.run_until(lambda: h.sender.metrics.records_acked == 2, what="the retried batch is acknowledged")
    requests = h.produce_requests()
    assert len(requests) == 2
    expected = _largest(requests[1].batches()[("t", 0)])
    got = h.sender.metrics.snapshot()
    assert got["record-size-max"] == got["record-size-avg"] == expected == _alone_size(None, b"z" * 77, [])
    assert h.sender.metrics._record_size.count == 2  # one value per batch sent, the retry included


def test_record_size_of_a_compressed_batch_is_the_uncompressed_record() -> None:
    h = Harness(topics={"t": 1}, compression_type="gzip")
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    h.send("t", value=b"q" * 1000)
    h.send("t", value=b"q" * 10)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    got = h.sender.metrics.snapshot()
    assert got["record-size-max"] == _alone_size(None, b"q" * 1000, [])


# -- KafkaProducerMetrics' timers --------------------------------------------------------------------------


class FrozenClock(FakeClock):
    """Moves only when the test (its scripted broker) moves it; waits are real and short, so a blocking call
    returns when what it waits for happens, and the time it measured is what the broker added."""

    def wait(self, cond: threading.Condition, timeout_ms: Optional[float]) -> bool:
        return cond.wait(0.005)


def _wants(req: SentRequest, topic: str) -> bool:
    topics: List[Dict[str, Any]] = req.body.get("topics") or []
    return any(t["name"] == topic for t in topics)


def test_flush_and_metadata_wait_timers_are_the_time_spent_waiting() -> None:
    clock = FrozenClock()
    selector = ScriptedSelector(clock, {1: ("broker1", 9092)}, {"t": 2}, real_wait=True)
    metadata_for_t: List[SentRequest] = []

    def metadata(req: SentRequest) -> Any:
        if _wants(req, "t"):
            metadata_for_t.append(req)
            clock.advance(7)  # the broker takes 7 ms to answer about topic t
        return selector._metadata(req)

    def produce(req: SentRequest) -> Any:
        clock.advance(25)
        return selector._produce(req)

    selector.handlers[m.METADATA.key] = metadata
    selector.handlers[m.PRODUCE.key] = produce
    # a long linger: nothing is sent before flush()
    p = Producer(bootstrap_servers="broker1:9092", clock=clock, transport=selector, linger_ms=600_000)
    try:
        deadline = time.monotonic() + 30
        while p._metadata.last_successful_refresh_ms == 0.0 and time.monotonic() < deadline:
            time.sleep(0.005)  # the bootstrap metadata (bounded wait)
        assert p._metadata.last_successful_refresh_ms > 0.0
        clock.advance(1000)  # past metadata.refresh.backoff.ms: the request for t may go at once
        got = p.metrics()
        assert {n: got[n] for n in JAVA_TIMERS} == dict.fromkeys(JAVA_TIMERS, 0)
        fut = p.send("t", value=b"x")  # waits for t's metadata
        assert len(metadata_for_t) >= 1
        assert p.metrics()["metadata-wait-time-ns-total"] == 7 * 1_000_000 * len(metadata_for_t)
        waited = p.metrics()["metadata-wait-time-ns-total"]
        p.send("t", value=b"y")
        assert p.partitions_for("t")  # known: neither waits
        assert p.metrics()["metadata-wait-time-ns-total"] == waited
        p.flush(30)
        assert fut.get(0).offset == 0
        got = p.metrics()
        assert got["flush-time-ns-total"] == 25 * 1_000_000
        p.flush(30)  # nothing to send: no time passes
        assert p.metrics()["flush-time-ns-total"] == 25 * 1_000_000
        assert all(got[n] == 0 for n in JAVA_TIMERS if n.startswith("txn-"))
    finally:
        p.close(timeout=0)


def test_every_timer_is_named_as_java_in_producer_metrics() -> None:
    names = {n for n, _ in PRODUCER_METRICS}
    assert {f"{t}-time-ns-total" for t in CALL_TIMERS} == JAVA_TIMERS <= names
    assert {"record-size-avg", "record-size-max"} <= names
    h = Harness(topics={"t": 1})
    groups = {x.name: x.group for x in h.sender.metrics.metric_list()}
    assert all(groups[n] == "producer-metrics" for n in JAVA_TIMERS | {"record-size-avg", "record-size-max"})


@pytest.mark.timeout(120)
def test_transaction_timers_on_the_mock_cluster() -> None:
    """Each call's timer grows by at most the time the call took (the producer's clock is the system's
    monotonic clock, which the test reads around the call) and by more than nothing for a call that waits for
    a broker."""
    with MockCluster(1) as cluster:
        cluster.create_topic("orders", 1)
        cluster.create_topic("in", 1)  # the consumed topic whose offsets the transaction commits
        with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="timers-1",
                      max_block_ms=30_000) as p:
            spent: Dict[str, float] = dict.fromkeys(JAVA_TIMERS, 0.0)

            def timed(name: str, call: Any, *args: Any) -> None:
                before = p.metrics()[name]
                start = time.monotonic()
                call(*args)
                elapsed_ns = (time.monotonic() - start) * 1e9
                grew = p.metrics()[name] - before
                assert 0 <= grew <= elapsed_ns + 1000, (name, grew, elapsed_ns)  # (+1 µs: float rounding)
                spent[name] += grew

            timed("txn-init-time-ns-total", p.init_transactions)
            timed("txn-begin-time-ns-total", p.begin_transaction)
            p.send("orders", value=b"committed")
            timed("txn-send-offsets-time-ns-total", p.send_offsets_to_transaction, {("in", 0): 5}, "group-1")
            timed("txn-commit-time-ns-total", p.commit_transaction)
            timed("txn-begin-time-ns-total", p.begin_transaction)
            p.send("orders", value=b"aborted")
            timed("flush-time-ns-total", p.flush, 30)
            timed("txn-abort-time-ns-total", p.abort_transaction)
            got = p.metrics()
        assert all(spent[n] > 0 for n in ("txn-init-time-ns-total", "txn-send-offsets-time-ns-total",
                                          "txn-commit-time-ns-total", "txn-abort-time-ns-total",
                                          "flush-time-ns-total"))
        assert all(got[n] == pytest.approx(spent[n]) for n in spent if n != "metadata-wait-time-ns-total")
