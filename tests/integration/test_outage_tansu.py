"""The broker goes away mid-stream (issue 3): records queued during the outage are delivered after a restart,
or fail with KafkaTimeoutError once delivery.timeout.ms passes while it stays down. Nothing hangs.

Each test runs its own tansu (never the session broker). Two tansu facts shape the set-up:

* memory storage loses every topic on restart, and tansu *accepts* Produce requests for a topic that does
  not exist (error 0), then answers the first Produce after the topic is created with UNKNOWN_SERVER_ERROR
  (-1, not retriable) although it stored the batch. A producer that reconnects in the few milliseconds
  between the restart and ``topic create`` would lose records for reasons that have nothing to do with it.
  So clients reach the broker through a :class:`Gate` on a fixed port: a plain TCP forwarder that is
  closed (connection refused, like a dead broker) from the moment the broker is killed until it runs
  again *and* the topic exists. tansu advertises the gate's port, so every connection goes through it.
* tansu ignores SIGTERM while clients are connected (tests/tansu.py's ``stop()`` then needs its 5 s
  grace period), so the broker is killed with SIGKILL: a crash, which is the point anyway.
"""
from __future__ import annotations

import functools
import os
import selectors
import socket
import subprocess
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import KafkaTimeoutError, ProducerClosedError
from kproducer.producer.partitioner import partition_for_key
from tests.readback import consume
from tests.tansu import Tansu, free_port

pytestmark = [
    pytest.mark.broker,
    # send() reports a metadata timeout through the record's future (as Java), so a producer that lost
    # its metadata no longer stops the streaming loops below by raising: bound each test instead
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

PARTITIONS = 6
TOPIC = "outage"


class Gate:
    """A TCP forwarder ``127.0.0.1:port`` -> ``127.0.0.1:upstream_port`` that can be shut (listener closed,
    every forwarded connection reset) and reopened on the same port."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self.upstream_port = upstream_port
        self._lock = threading.Lock()
        self._listener: Optional[socket.socket] = None
        self._socks: Set[socket.socket] = set()
        self._threads: List[threading.Thread] = []

    def open(self) -> None:
        lsock = socket.socket()
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(("127.0.0.1", self.port))
        lsock.listen(16)
        with self._lock:
            self._listener = lsock
        self._spawn(self._accept, lsock)

    def shut(self) -> None:
        with self._lock:
            lsock, self._listener = self._listener, None
            socks, self._socks = self._socks, set()
        if lsock is not None:
            try:
                lsock.shutdown(socket.SHUT_RDWR)  # wakes the accept() thread
            except OSError:
                pass
            lsock.close()
        for s in socks:
            self._close(s)

    def close(self) -> None:
        self.shut()
        for t in self._threads:
            t.join(5)

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name="test-gate")
        t.start()
        self._threads.append(t)

    @staticmethod
    def _close(s: socket.socket) -> None:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def _accept(self, lsock: socket.socket) -> None:
        while True:
            try:
                client, _ = lsock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
                upstream.settimeout(None)
            except OSError:
                self._close(client)
                continue
            with self._lock:
                if self._listener is not lsock:  # shut meanwhile
                    self._close(client)
                    self._close(upstream)
                    return
                self._socks.update((client, upstream))
            self._spawn(self._pump, client, upstream)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        peer = {a: b, b: a}
        try:
            sel.register(a, selectors.EVENT_READ)
            sel.register(b, selectors.EVENT_READ)
            while a.fileno() >= 0 and b.fileno() >= 0:  # shut() closes them under our feet
                for key, _ in sel.select(timeout=0.1):
                    src = key.fileobj
                    data = src.recv(1 << 16)  # type: ignore[union-attr]
                    if not data:
                        return
                    peer[src].sendall(data)  # type: ignore[index]
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            with self._lock:
                self._socks.discard(a)
                self._socks.discard(b)
            self._close(a)
            self._close(b)


class GatedBroker:
    """tansu on a fixed internal port, advertising the gate's fixed port."""

    def __init__(self) -> None:
        self.tansu = Tansu(free_port())  # binary, log file, create_topic() on the internal port
        self.gate = Gate(free_port(), self.tansu.port)
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.gate.port}"

    def start(self, topic_partitions: Optional[Dict[str, int]] = None, open_gate: bool = True) -> None:
        """Run tansu, create the topics, then open the gate (unless told not to)."""
        t = self.tansu
        env = dict(os.environ, RUST_LOG=os.environ.get("TANSU_LOG", "warn"))
        self.proc = subprocess.Popen(
            [t.binary, "broker", "--listener-url", t.url,
             "--advertised-listener-url", f"tcp://127.0.0.1:{self.gate.port}", "--storage-engine", "memory://tansu/"],
            stdout=t.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 20
        while True:
            assert self.proc.poll() is None, f"tansu exited; log: {t.log.name}"
            try:
                with socket.create_connection(("127.0.0.1", t.port), timeout=0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "tansu did not start"
                time.sleep(0.01)
        for name, partitions in (topic_partitions or {}).items():
            t.create_topic(name, partitions)
        if open_gate:
            self.gate.open()

    def crash(self) -> None:
        """SIGKILL the broker and shut the gate: in-flight requests are lost, new connections refused."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None
        self.gate.shut()

    def close(self) -> None:
        self.crash()
        self.gate.close()
        self.tansu.close()


@pytest.fixture
def broker() -> Iterator[GatedBroker]:
    b = GatedBroker()
    b.start({TOPIC: PARTITIONS})
    try:
        yield b
    finally:
        b.close()


class Tracker:
    """Per-record callback bookkeeping: when (monotonic) and how each record completed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: Dict[int, Tuple[float, Any, Optional[BaseException]]] = {}
        self.duplicates: List[int] = []

    def callback(self, i: int) -> Any:
        return functools.partial(self._on, i)

    def _on(self, i: int, md: Any, exc: Optional[BaseException]) -> None:
        with self.lock:
            if i in self.done:
                self.duplicates.append(i)
            self.done[i] = (time.monotonic(), md, exc)


def _stream(producer: Producer, tracker: Tracker, sent: List[Tuple[bytes, bytes]], until: float,
            futures: List[Any], per_tick: int = 50, keys: int = 40) -> None:
    """Send keyed records with increasing sequence numbers in small bursts until ``until``."""
    while time.monotonic() < until:
        for _ in range(per_tick):
            i = len(sent)
            key = b"key-%d" % (i % keys)
            value = b"%d" % i
            sent.append((key, value))
            futures.append(producer.send(TOPIC, value=value, key=key, callback=tracker.callback(i)))
        time.sleep(0.005)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_records_queued_during_outage_are_delivered_after_restart(broker: GatedBroker, idempotent: bool) -> None:
    t_start = time.monotonic()
    tracker = Tracker()
    sent: List[Tuple[bytes, bytes]] = []
    futures: List[Any] = []
    # without idempotence only one request in flight per connection keeps retried batches in order (as in Java)
    producer = Producer(bootstrap_servers=broker.bootstrap, linger_ms=5, enable_idempotence=idempotent,
                        max_in_flight_requests_per_connection=5 if idempotent else 1,
                        allow_auto_create_topics=False, request_timeout_ms=3000, delivery_timeout_ms=30000,
                        reconnect_backoff_ms=20, reconnect_backoff_max_ms=200, retry_backoff_max_ms=200)
    try:
        _stream(producer, tracker, sent, time.monotonic() + 0.7, futures)
        n_before = len(sent)
        broker.crash()  # mid-stream: some batches are in flight, more are queued
        t_crash = time.monotonic()
        _stream(producer, tracker, sent, time.monotonic() + 1.5, futures)
        n_outage = len(sent) - n_before
        with tracker.lock:
            failed_early = [i for i, (_t, _md, exc) in tracker.done.items() if exc is not None]
        assert not failed_early, f"records failed during a short outage: {tracker.done[failed_early[0]]}"
        broker.start({TOPIC: PARTITIONS}, open_gate=False)
        t_restart = time.monotonic()  # from here on, only the new broker can acknowledge anything
        broker.gate.open()
        _stream(producer, tracker, sent, time.monotonic() + 0.5, futures)
        producer.flush(timeout=20)
        t_flushed = time.monotonic()
    finally:
        producer.close(timeout=5)
    n = len(sent)
    assert n_before > 0 and n_outage > 0 and n > n_before + n_outage
    assert not tracker.duplicates, f"callbacks called twice: {tracker.duplicates[:5]}"
    assert len(tracker.done) == n, f"{n - len(tracker.done)} callbacks never called"
    errors = {i: exc for i, (_t, _md, exc) in tracker.done.items() if exc is not None}
    assert not errors, f"{len(errors)} records failed, e.g. {next(iter(errors.values()))!r}"
    assert t_flushed - t_restart < 15
    assert time.monotonic() - t_start < 40  # a hang detector, not a benchmark: the machine may be busy
    # memory storage lost what the first broker stored: records acknowledged after the restart are the
    # ones in the new log -- every record sent during the outage among them
    after = {i for i, (t, _md, _exc) in tracker.done.items() if t >= t_restart}
    assert set(range(n_before, n_before + n_outage)) <= after
    expected = {}
    for i in after:
        md = tracker.done[i][1]
        assert md == futures[i].get(0)
        expected[(md.partition, md.offset)] = sent[i]
    assert len(expected) == len(after), "two records acknowledged at the same offset"
    consumed = consume(broker.bootstrap, TOPIC, range(PARTITIONS), len(expected), timeout=20)
    got = {(m.partition, m.offset): (m.key, m.value) for m in consumed}
    assert len(got) == len(consumed)
    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    assert not missing and not extra, (len(missing), len(extra), sorted(missing)[:3], sorted(extra)[:3])
    assert got == expected
    # per-key order survives the outage and the retries
    last: Dict[bytes, int] = {}
    for m in sorted(consumed, key=lambda m: (m.partition, m.offset)):
        seq = int(m.value)
        assert seq > last.get(m.key, -1), f"{m.key!r}: {seq} stored after {last[m.key]}"
        last[m.key] = seq
    del t_crash


def test_broker_stays_down_records_expire(broker: GatedBroker) -> None:
    """delivery.timeout.ms bounds every record; flush() and close() return; send() for an unknown topic
    times out after max.block.ms."""
    delivery_ms, request_ms = 1500, 1000
    tracker = Tracker()
    sent: List[Tuple[bytes, bytes]] = []
    futures: List[Any] = []
    producer = Producer(bootstrap_servers=broker.bootstrap, linger_ms=5, request_timeout_ms=request_ms,
                        delivery_timeout_ms=delivery_ms, max_block_ms=800, allow_auto_create_topics=False,
                        reconnect_backoff_ms=20, reconnect_backoff_max_ms=200)
    closed = threading.Event()
    try:
        _stream(producer, tracker, sent, time.monotonic() + 0.5, futures)
        producer.flush(timeout=10)
        n_before = len(sent)
        assert all(exc is None for _t, _md, exc in tracker.done.values())
        _stream(producer, tracker, sent, time.monotonic() + 0.2, futures, per_tick=200)
        broker.crash()  # with batches in flight and queued
        t_crash = time.monotonic()
        _stream(producer, tracker, sent, time.monotonic() + 0.5, futures)
        t_last_send = time.monotonic()
        n = len(sent)

        # every record completes within delivery.timeout.ms of its send (plus scheduling slack)
        for i, f in enumerate(futures):
            exc = f.exception(timeout=max(0.0, t_last_send + delivery_ms / 1000 + 3 - time.monotonic()))
            if i >= n - 10 or exc is not None:
                assert isinstance(exc, KafkaTimeoutError), (i, exc)
        t_all_done = time.monotonic()
        assert t_all_done - t_last_send < delivery_ms / 1000 + 3
        failed = sorted(i for i, f in enumerate(futures) if f.failed())
        assert failed and failed[-1] == n - 1 and failed[0] >= n_before
        # in each partition the failures are a suffix: nothing is stored after a record that failed
        for p in range(PARTITIONS):
            outcomes = [futures[i].failed() for i in range(n) if partition_for_key(sent[i][0], PARTITIONS) == p]
            first = outcomes.index(True) if True in outcomes else len(outcomes)
            assert all(outcomes[first:]), f"partition {p}: a record succeeded after one that failed"
        for i in failed:
            assert "delivery.timeout.ms" in str(futures[i].exception(0))

        # flush() with the broker down returns once the new records expire
        t0 = time.monotonic()
        late = [producer.send(TOPIC, b"late-%d" % i, key=b"late") for i in range(100)]
        producer.flush(timeout=10)
        assert time.monotonic() - t0 < delivery_ms / 1000 + 3
        assert all(isinstance(f.exception(0), KafkaTimeoutError) for f in late)

        # metadata for a topic nobody knows cannot arrive: send() blocks max.block.ms and names it
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="never-created"):
            producer.send("never-created", b"x").get(0)
        assert 0.7 <= time.monotonic() - t0 < 5

        # close() without a timeout: the queued records expire, then it returns
        last = [producer.send(TOPIC, b"at-close-%d" % i, key=b"c") for i in range(50)]
        def close_then_signal() -> None:
            producer.close()
            closed.set()

        closer = threading.Thread(target=close_then_signal, daemon=True)
        t0 = time.monotonic()
        closer.start()
        closer.join(delivery_ms / 1000 + 5)
        assert closed.is_set(), "close() hung with the broker down"
        assert time.monotonic() - t0 < delivery_ms / 1000 + 5
        for f in last:
            assert isinstance(f.exception(0), (KafkaTimeoutError, ProducerClosedError)), f.exception(0)
        with pytest.raises(ProducerClosedError):
            producer.send(TOPIC, b"after close")
    finally:
        if not closed.is_set():
            producer.close(timeout=2)
    assert not tracker.duplicates
    assert len(tracker.done) == n
    del t_crash


def test_close_with_timeout_fails_what_is_left(broker: GatedBroker) -> None:
    """close(timeout) with the broker down and a long delivery.timeout.ms: it returns after about the
    timeout and fails the records it could not send."""
    producer = Producer(bootstrap_servers=broker.bootstrap, linger_ms=5, request_timeout_ms=2000,
                        delivery_timeout_ms=60000, allow_auto_create_topics=False, reconnect_backoff_max_ms=200)
    calls: List[Optional[BaseException]] = []
    lock = threading.Lock()

    def on_done(md: Any, exc: Optional[BaseException]) -> None:
        with lock:
            calls.append(exc)

    assert producer.send(TOPIC, b"warm-up").get(10).offset == 0
    broker.crash()
    futures = [producer.send(TOPIC, b"v%d" % i, key=b"k%d" % (i % 7), callback=on_done) for i in range(2000)]
    t0 = time.monotonic()
    producer.close(timeout=1.0)
    elapsed = time.monotonic() - t0
    assert 0.9 <= elapsed < 5, elapsed
    for f in futures:
        assert f.done()
        assert isinstance(f.exception(0), (ProducerClosedError, KafkaTimeoutError)), f.exception(0)
    with lock:
        assert len(calls) == len(futures) and all(e is not None for e in calls)
