"""Issue 28 items 13 and 14 on the MockCluster (real sockets): user callbacks on the network thread.

* Callbacks that raise BaseExceptions (SystemExit, KeyboardInterrupt, an application's own subclass): every
  record is still stored exactly once, every callback runs once, flush() and close() return.
* A callback that waits for another record (``get()``) fails at once instead of deadlocking the producer.
* ``send()`` from a callback to a topic whose metadata is not known fails that record at once.
* A network thread that dies (an error escaping its loop) while records are in flight: every future fails
  with NetworkThreadDiedError, and so do send(), flush() and close(); nothing hangs.

Records are read back from the cluster's log (``cluster.records``), not from kproducer's own futures only."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterator, List, Optional, Tuple

import pytest

from kproducer import Producer, RecordMetadata
from kproducer.errors import NetworkThreadDiedError, NetworkThreadWaitError
from kproducer.mock import MockCluster

pytestmark = [pytest.mark.timeout(180)]

TOPIC = "cb"
PARTITIONS = 3
WAIT = 60.0  # generous bound for event-driven waits on a loaded machine


class AppError(BaseException):
    """An application's own BaseException subclass."""


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(1) as c:
        c.create_topic(TOPIC, PARTITIONS)
        yield c


def producer(cluster: MockCluster, **settings: Any) -> Producer:
    settings.setdefault("linger_ms", 0)
    return Producer(bootstrap_servers=cluster.bootstrap_servers, **settings)


def stored(cluster: MockCluster, topic: str = TOPIC) -> List[bytes]:
    return sorted(r.value for p in range(cluster.partition_count(topic)) for r in cluster.records(topic, p))


@pytest.mark.allow_internal_errors
def test_callbacks_raising_base_exceptions_lose_no_record(cluster: MockCluster,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    kinds = [SystemExit, KeyboardInterrupt, AppError, None]
    calls: List[int] = []
    lock = threading.Lock()
    p = producer(cluster)
    try:
        futures = []
        with caplog.at_level(logging.ERROR, logger="kproducer"):
            for i in range(40):
                kind = kinds[i % len(kinds)]

                def callback(md: Optional[RecordMetadata], exc: Optional[BaseException], i: int = i,
                             kind: Any = kind) -> None:
                    with lock:
                        calls.append(i)
                    if kind is not None:
                        raise kind(f"callback {i}")

                futures.append(p.send(TOPIC, b"r%02d" % i, partition=i % PARTITIONS, callback=callback))
            p.flush(WAIT)
        assert all(f.get(0).offset >= 0 for f in futures)
        assert sorted(calls) == list(range(40))  # each callback once
        assert p._sender.is_alive()
    finally:
        p.close(WAIT)
    assert stored(cluster) == [b"r%02d" % i for i in range(40)]
    logged = [r for r in caplog.records if r.name.startswith("kproducer") and "callback" in r.getMessage()]
    assert len(logged) == 30 and all(r.levelno == logging.ERROR and r.exc_info for r in logged)


def test_get_of_a_pending_record_in_a_callback_does_not_deadlock(cluster: MockCluster) -> None:
    p = producer(cluster)
    try:
        later: List[Any] = []
        outcome: List[Tuple[Any, Optional[BaseException]]] = []
        ran = threading.Event()

        def callback(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
            # another record, queued now: only this thread can send it (before the fix: a 30 s wait for itself)
            later.append(p.send(TOPIC, b"second", partition=1))
            try:
                outcome.append((later[0].get(30), None))
            except BaseException as e:  # noqa: B902
                outcome.append((None, e))
            ran.set()

        p.send(TOPIC, b"first", partition=0, callback=callback)
        assert ran.wait(WAIT)
        assert isinstance(outcome[0][1], NetworkThreadWaitError), outcome
        assert later[0].get(WAIT).offset == 0
    finally:
        p.close(WAIT)
    assert stored(cluster) == [b"first", b"second"]


def test_send_from_a_callback_to_a_topic_without_metadata_fails_at_once(cluster: MockCluster) -> None:
    cluster.create_topic("other", 2)
    p = producer(cluster, max_block_ms=20_000)
    try:
        inner: List[Any] = []
        ran = threading.Event()

        def callback(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
            inner.append(p.send("other", b"from-callback"))
            ran.set()

        p.send(TOPIC, b"outer", partition=0, callback=callback)
        assert ran.wait(WAIT)
        assert isinstance(inner[0].exception(0), NetworkThreadWaitError)
        # the producer goes on; the topic is usable from the application's thread
        assert p.send("other", b"direct", partition=1).get(WAIT).offset == 0
    finally:
        p.close(WAIT)
    assert stored(cluster, "other") == [b"direct"]
    assert stored(cluster) == [b"outer"]


class Escaped(BaseException):
    pass


@pytest.mark.allow_internal_errors
def test_a_dead_network_thread_fails_everything_and_hangs_nothing(cluster: MockCluster,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    p = producer(cluster)
    p.send(TOPIC, b"before", partition=0).get(WAIT)
    cluster.set_latency(1, 10_000)  # no answer comes before the thread dies
    pending = [p.send(TOPIC, b"p%d" % i, partition=i % PARTITIONS) for i in range(6)]
    sender = p._sender

    def dying() -> None:
        raise Escaped("escaped the sender loop")

    monkeypatch.setattr(sender, "run_once", dying)
    sender.wakeup()
    sender.join(WAIT)
    assert not sender.is_alive()
    for f in pending:
        err = f.exception(WAIT)
        assert isinstance(err, NetworkThreadDiedError) and isinstance(err.__cause__, Escaped)
    with pytest.raises(NetworkThreadDiedError):
        p.send(TOPIC, b"after", partition=0)
    with pytest.raises(NetworkThreadDiedError):
        p.flush(WAIT)
    with pytest.raises(NetworkThreadDiedError):
        p.close(WAIT)
    cluster.set_latency(1, 0)
    assert b"after" not in stored(cluster)


@pytest.mark.allow_internal_errors
def test_a_dead_network_thread_ends_a_waiting_commit(cluster: MockCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    p = producer(cluster, transactional_id="cb-txn", request_timeout_ms=60_000, max_block_ms=120_000)
    p.init_transactions(WAIT)
    p.begin_transaction()
    p.send(TOPIC, b"in-txn", partition=0).get(WAIT)
    cluster.set_latency(1, 30_000)  # the commit waits for its answer
    outcome: List[BaseException] = []

    def commit() -> None:
        try:
            p.commit_transaction()
        except BaseException as e:  # noqa: B902
            outcome.append(e)

    committer = threading.Thread(target=commit)
    committer.start()
    for _ in range(int(WAIT / 0.01)):  # until the EndTxn is sent
        if cluster.request_counts["end_txn"]:
            break
        time.sleep(0.01)
    assert cluster.request_counts["end_txn"] == 1

    def dying() -> None:
        raise Escaped("escaped the sender loop")

    monkeypatch.setattr(p._sender, "run_once", dying)
    p._sender.wakeup()
    committer.join(WAIT)  # (well before max.block.ms)
    assert not committer.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], NetworkThreadDiedError)
    with pytest.raises(NetworkThreadDiedError):
        p.close(WAIT)
    cluster.set_latency(1, 0)
