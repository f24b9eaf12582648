"""What a broker's frame may make the client buffer (issue 28 item 18), over real sockets on 127.0.0.1.

Before a connection is set up (its ApiVersions answer, and SASL's, all small) the producer takes response frames
of at most 512 KiB (``SETUP_MAX_RECEIVE_SIZE``): a bigger size prefix is refused as soon as its 4 bytes are in,
before anything proportional to it is buffered, and the connection fails with a typed
:class:`~kproducer.errors.FrameTooLargeError` naming the size and the limit, which ``send()`` / ``flush()``
raise at once (a peer that answers so is not a Kafka listener for these settings: retrying cannot fix it). Once
the connection is set up, the limit is ``max(max.request.size, 100 MiB)``: a bigger frame closes the connection
with that reason and is retried, as Java does. A 100 MiB frame used to raise the client's RSS by ~300 MiB and
surface only as NoBrokersAvailableError after max.block.ms."""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from kproducer import Producer
from kproducer.errors import AuthenticationError, FrameTooLargeError, NoBrokersAvailableError
from kproducer.network.selector import SETUP_MAX_RECEIVE_SIZE, Selector
from kproducer.protocol import messages as m

REPO = Path(__file__).resolve().parents[2]
HUGE = 100 * 1024 * 1024  # the frame: 100 MiB
WAIT = 30.0  # generous bound for event-driven waits on a loaded machine


class FakeBroker:
    """A TCP listener on 127.0.0.1 that answers each connection's requests with ``answer(api_key, version,
    correlation_id, conn)``, one thread per connection; it counts what it sent."""

    def __init__(self, answer: Callable[[int, int, int, socket.socket], None]) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.sent = 0  # bytes written to clients (the huge frames' prefixes and payloads)
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(WAIT)
        try:
            while not self._stop.is_set():
                head = _recv_exactly(conn, 4)
                if head is None:
                    return
                frame = _recv_exactly(conn, struct.unpack(">i", head)[0])
                if frame is None:
                    return
                header, _api, _pos = m.decode_request_header(frame)
                self.answer(header.api_key, header.api_version, header.correlation_id, conn)
        except OSError:
            return  # (the client closed the connection: what a refused frame does)
        finally:
            conn.close()

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        self._accepter.join(10)
        for t in self._threads:
            t.join(10)


def _recv_exactly(conn: socket.socket, n: int) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def huge_answer(broker: FakeBroker, size: int = HUGE) -> Callable[[int, int, int, socket.socket], None]:
    """Answer the first request (ApiVersions) with a ``size``-byte frame: the prefix, the correlation id, then
    zeros in 1 MiB writes until ``size`` bytes went out or the client closed the connection."""
    chunk = bytes(1024 * 1024)

    def answer(api_key: int, version: int, correlation_id: int, conn: socket.socket) -> None:
        broker.send(conn, struct.pack(">ii", size, correlation_id))
        left = size - 4
        while left > 0:
            broker.send(conn, chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))

    return answer


def api_versions_body(version: int) -> Dict[str, Any]:
    body = m.API_VERSIONS.response_defaults(version)
    body.update(error_code=0, throttle_time_ms=0, api_keys=[
        {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
        for api in m.APIS.values()])
    return body


def metadata_body(version: int, port: int, partitions: int) -> Dict[str, Any]:
    body = m.METADATA.response_defaults(version)
    body.update(brokers=[{"node_id": 0, "host": "127.0.0.1", "port": port, "rack": None}], controller_id=0,
                cluster_id="c", topics=[{
                    "error_code": 0, "name": "t", "is_internal": False, "partitions": [
                        {"error_code": 0, "partition_index": i, "leader_id": 0, "leader_epoch": 0,
                         "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []}
                        for i in range(partitions)]}])
    return body


@pytest.fixture
def brokers() -> Iterator[List[FakeBroker]]:
    made: List[FakeBroker] = []
    yield made
    for b in made:
        b.close()


# -- the producer ----------------------------------------------------------------------------------------------


def test_a_huge_frame_before_the_connection_is_set_up_fails_at_once_naming_its_size(
        brokers: List[FakeBroker]) -> None:
    broker = FakeBroker(lambda *a: None)
    broker.answer = huge_answer(broker)
    brokers.append(broker)
    p = Producer(bootstrap_servers=broker.bootstrap, max_block_ms=20000, linger_ms=0)
    try:
        started = time.monotonic()
        with pytest.raises(FrameTooLargeError) as info:
            p.send("t", b"v")
        waited = time.monotonic() - started
        err = info.value
        assert isinstance(err, AuthenticationError) and not isinstance(err, NoBrokersAvailableError)
        assert (err.size, err.limit) == (HUGE, SETUP_MAX_RECEIVE_SIZE)
        text = str(err)
        assert f"{HUGE} bytes" in text and str(SETUP_MAX_RECEIVE_SIZE) in text and broker.bootstrap in text
        assert waited < 20, "the wait ran to max.block.ms instead of failing with the cause"
        # what was read of it: the limit's worth at most (the rest of the 100 MiB was never taken in)
        assert broker.sent < HUGE * broker.connections
        # flush() and partitions_for() say the same
        with pytest.raises(FrameTooLargeError):
            p.partitions_for("t", timeout=20)
    finally:
        p.close(5)


def test_a_large_answer_after_the_connection_is_set_up_is_taken(brokers: List[FakeBroker]) -> None:
    # the 512 KiB limit is for the setup only: a Metadata answer of a topic with 30,000 partitions (~760 KiB)
    # arrives on a connection that is set up, and is taken
    partitions = 30000
    sizes: List[int] = []

    def answer(api_key: int, version: int, correlation_id: int, conn: socket.socket) -> None:
        if api_key == m.API_VERSIONS.key:
            frame = m.encode_response(m.API_VERSIONS, version, correlation_id, api_versions_body(version))
        elif api_key == m.METADATA.key:
            frame = m.encode_response(m.METADATA, version, correlation_id,
                                      metadata_body(version, broker.port, partitions))
            sizes.append(len(frame))
        else:
            return  # (nothing else is asked for: no idempotence, nothing sent)
        broker.send(conn, struct.pack(">i", len(frame)) + frame)

    broker = FakeBroker(answer)
    brokers.append(broker)
    p = Producer(bootstrap_servers=broker.bootstrap, max_block_ms=20000, enable_idempotence=False, acks=1)
    try:
        assert len(p.partitions_for("t", timeout=WAIT)) == partitions
        assert sizes and min(sizes) > SETUP_MAX_RECEIVE_SIZE
    finally:
        p.close(5)


RSS_SCRIPT = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from tests.unit.test_frame_cap import FakeBroker, huge_answer
from kproducer import Producer
broker = FakeBroker(lambda *a: None)
broker.answer = huge_answer(broker)
p = Producer(bootstrap_servers=broker.bootstrap, max_block_ms=20000, linger_ms=0,
             reconnect_backoff_ms=20, reconnect_backoff_max_ms=50)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
error = None
deadline = time.monotonic() + 60
while time.monotonic() < deadline and broker.connections < 3:  # (a few refused frames, not just one)
    try:
        p.partitions_for("t", timeout=20)
    except Exception as e:
        error = type(e).__name__
p.close(5)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
broker.close()
print(json.dumps({{"before_kib": before, "after_kib": after, "error": error, "connections": broker.connections}}))
"""


def test_the_client_memory_stays_small_while_a_broker_sends_100_mib_frames() -> None:
    # in a process of its own: ru_maxrss is the process's peak resident size (KiB on Linux)
    run = subprocess.run([sys.executable, "-c", RSS_SCRIPT.format(repo=str(REPO))], capture_output=True, text=True,
                         timeout=180, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    grown_mib = (result["after_kib"] - result["before_kib"]) / 1024
    assert result["error"] == "FrameTooLargeError", result
    assert result["connections"] >= 1
    # before: each 100 MiB frame was taken in whole (and copied twice): ~300 MiB more
    assert grown_mib < 64, f"the client's RSS grew by {grown_mib:.0f} MiB: {result}"


# -- the selector ---------------------------------------------------------------------------------------------


def _poll_until(sel: Selector, cond: Callable[[], bool], seen: Dict[str, Any]) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, f"not reached in time: {seen}"
        sel.poll(20)
        seen.setdefault("receives", []).extend(sel.completed_receives)
        seen.setdefault("disconnected", {}).update(sel.disconnected)
        seen.setdefault("failures", {}).update(sel.failures)
        seen.setdefault("connected", []).extend(sel.connected)
        sel.completed_receives, sel.disconnected, sel.failures, sel.connected = [], {}, {}, []


def _accepted(listener: socket.socket, sel: Selector, node: int, seen: Dict[str, Any]) -> socket.socket:
    sel.connect(node, "127.0.0.1", listener.getsockname()[1])
    conn, _ = listener.accept()
    _poll_until(sel, lambda: node in seen.get("connected", []), seen)
    return conn


def _frame(size: int) -> bytes:
    return struct.pack(">i", size) + bytes(size)


@pytest.mark.parametrize("io", ["nogil", "selectors"])
def test_the_setup_limit_until_connection_ready_then_the_generous_one(io: str) -> None:
    sel = Selector(max_receive_size=4 * 1024 * 1024, setup_max_receive_size=64 * 1024)
    if io == "nogil" and not sel._nogil:
        sel.close_all()
        pytest.skip("the compiled socket I/O needs Linux and the compiled accelerator")
    sel._nogil = io == "nogil"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT)
    seen: Dict[str, Any] = {}
    try:
        # before connection_ready(): 64 KiB are taken, one byte more fails the connection with the typed error
        a = _accepted(listener, sel, 1, seen)
        a.sendall(_frame(64 * 1024))
        _poll_until(sel, lambda: len(seen.get("receives", [])) == 1, seen)
        a.sendall(struct.pack(">i", 64 * 1024 + 1) + bytes(100))
        _poll_until(sel, lambda: 1 in seen.get("failures", {}), seen)
        err = seen["failures"][1]
        assert isinstance(err, FrameTooLargeError) and (err.size, err.limit) == (64 * 1024 + 1, 64 * 1024)
        assert str(64 * 1024 + 1) in seen["disconnected"][1] and not sel.has_channel(1)
        a.close()
        # after connection_ready(): up to max_receive_size; above it the connection closes with the reason (not a
        # failure: retried as Java does)
        b = _accepted(listener, sel, 2, seen)
        sel.connection_ready(2)
        sender = threading.Thread(target=b.sendall, args=(_frame(1024 * 1024) + _frame(4 * 1024 * 1024),),
                                  daemon=True)
        sender.start()
        _poll_until(sel, lambda: len(seen["receives"]) == 3, seen)
        assert [len(f) for _n, f in seen["receives"]] == [64 * 1024, 1024 * 1024, 4 * 1024 * 1024]
        sender.join(WAIT)
        b.sendall(struct.pack(">i", 4 * 1024 * 1024 + 1))
        _poll_until(sel, lambda: 2 in seen["disconnected"], seen)
        assert "4194305" in seen["disconnected"][2] and 2 not in seen["failures"]
        b.close()
    finally:
        listener.close()
        sel.close_all()


def test_a_selector_without_a_setup_limit_takes_frames_up_to_its_maximum() -> None:
    # (the default: a Selector used on its own, as the unit tests and tools do; the producer asks for the limit)
    sel = Selector(max_receive_size=1024 * 1024)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT)
    seen: Dict[str, Any] = {}
    try:
        a = _accepted(listener, sel, 1, seen)
        threading.Thread(target=a.sendall, args=(_frame(1024 * 1024),), daemon=True).start()
        _poll_until(sel, lambda: len(seen.get("receives", [])) == 1, seen)
        a.close()
    finally:
        listener.close()
        sel.close_all()
