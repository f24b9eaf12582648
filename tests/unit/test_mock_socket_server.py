"""The mock broker's network layer: request order under pipelining (muting), many connections, framing
split across TCP writes, and hostile input that must close only its own connection."""
from __future__ import annotations

import random
import socket
import struct
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from kproducer.clock import FakeClock
from kproducer.mock import MockCluster
from kproducer.mock.apis import SERVED_VERSIONS
from kproducer.mock.request_channel import Request, RequestChannel, Response
from kproducer.mock.request_handler import RequestHandlerPool
from kproducer.mock.socket_server import SocketServer
from kproducer.mock.wire_client import WireClient
from kproducer.protocol.errors import NO_ERROR, UnsupportedVersionError
from kproducer.protocol.messages import API_VERSIONS, FETCH, METADATA, PRODUCE, encode_response
from kproducer.protocol.records import RecordBatchBuilder


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(1, num_handlers=4, max_request_size=64 * 1024) as c:
        c.create_topic("t", 2)
        yield c


def client(cluster: MockCluster, broker_id: int = 1) -> WireClient:
    return WireClient(*cluster.broker_address(broker_id))


def api_versions_ok(c: WireClient) -> bool:
    return c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
        "error_code"] == NO_ERROR


def batch(n: int = 3, value: bytes = b"v") -> bytes:
    b = RecordBatchBuilder(1 << 20)
    for i in range(n):
        b.try_append(1000 + i, None, value + str(i).encode(), None)
    return b.build()


def produce_body(records: bytes, acks: int = 1, partition: int = 0) -> Dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": partition, "records": records}]}]}


def fetch_body(offset: int, max_wait_ms: int = 0, min_bytes: int = 1) -> Dict[str, Any]:
    body = FETCH.request_defaults(12)
    body.update(max_wait_ms=max_wait_ms, min_bytes=min_bytes, topics=[
        {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}])
    return body


# ------------------------------------------------------------------------------------ SocketServer


class _SlowHandlers:
    """Handlers that answer ApiVersions after a random delay: without muting, pipelined requests on
    one connection would be answered out of order."""

    def __init__(self, channel: RequestChannel) -> None:
        self.channel = channel
        self.seen: List[int] = []
        self.lock = threading.Lock()

    def handle(self, request: Request) -> None:
        time.sleep(random.uniform(0, 0.01))
        with self.lock:
            self.seen.append(request.header.correlation_id)
        body = {"error_code": NO_ERROR, "api_keys": [], "throttle_time_ms": request.header.correlation_id}
        data = encode_response(API_VERSIONS, request.version, request.header.correlation_id, body)
        self.channel.send_response(Response(request, data))


@pytest.fixture
def bare_server() -> Iterator[tuple]:
    channel = RequestChannel()
    handlers = _SlowHandlers(channel)
    server = SocketServer(7, "127.0.0.1", 0, channel, SERVED_VERSIONS, num_processors=3)
    server.start()
    pool = RequestHandlerPool(7, channel, handlers.handle, num_threads=6)
    pool.start()
    try:
        yield server, handlers
    finally:
        server.stop()
        pool.stop()


def test_pipelined_requests_keep_order_with_many_handler_threads(bare_server: tuple) -> None:
    server, handlers = bare_server
    with WireClient("127.0.0.1", server.port) as c:
        frames = b"".join(c.encode(API_VERSIONS, 1, {"client_software_name": "t", "client_software_version": "1"})[1] for _ in range(40))
        c.send_raw(frames)
        got = [c.receive(API_VERSIONS, 1) for _ in range(40)]
    assert [cid for cid, _ in got] == list(range(1, 41))
    assert [body["throttle_time_ms"] for _, body in got] == list(range(1, 41))
    # muting: each request reached a handler only after the previous one was answered
    assert handlers.seen == list(range(1, 41))


def test_connections_are_spread_over_processors(bare_server: tuple) -> None:
    server, _ = bare_server
    clients = [WireClient("127.0.0.1", server.port) for _ in range(9)]
    try:
        for c in clients:
            assert c.request(API_VERSIONS, 0, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == NO_ERROR
        assert server.connection_count == 9
        assert [p.connection_count for p in server.processors] == [3, 3, 3]
    finally:
        for c in clients:
            c.close()


def test_server_stop_closes_connections(bare_server: tuple) -> None:
    server, _ = bare_server
    with WireClient("127.0.0.1", server.port) as c:
        assert c.request(API_VERSIONS, 0, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == NO_ERROR
        server.stop()
        assert c.is_closed_by_peer()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


# --------------------------------------------------------------------------------- a whole broker


@pytest.fixture
def stepped() -> Iterator[Tuple[MockCluster, FakeClock]]:
    """A cluster on a fake clock: its waits end only when the test steps the clock."""
    clock = FakeClock()
    with MockCluster(1, clock=clock) as c:
        c.create_topic("t", 2)
        yield c, clock


def parked_fetches(cluster: MockCluster, broker_id: int = 1) -> int:
    apis = cluster._brokers[broker_id]._apis
    assert apis is not None
    return apis.purgatory.parked()


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def test_pipelined_fetch_wait_holds_back_later_responses(stepped: Tuple[MockCluster, FakeClock]) -> None:
    """A Fetch parked for data is answered, at its deadline, before the ApiVersions request sent after it."""
    cluster, clock = stepped
    with client(cluster) as c:
        _, fetch = c.encode(FETCH, 12, fetch_body(0, max_wait_ms=300))
        _, versions = c.encode(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        c.send_raw(fetch + versions)
        wait_until(lambda: parked_fetches(cluster) == 1, "the Fetch to be parked")
        clock.advance(299)
        assert parked_fetches(cluster) == 1
        clock.advance(1)
        cid1, body1 = c.receive(FETCH, 12)
        cid2, body2 = c.receive(API_VERSIONS, 3)
    assert (cid1, cid2) == (1, 2)
    assert body1["responses"][0]["partitions"][0]["records"] == b""
    assert body2["error_code"] == NO_ERROR
    assert parked_fetches(cluster) == 0


def test_fetch_wait_is_cut_short_by_new_data(stepped: Tuple[MockCluster, FakeClock]) -> None:
    cluster, _ = stepped  # the clock never moves: only the new data can answer the Fetch
    with client(cluster) as consumer, client(cluster) as producer:
        consumer.send(FETCH, 12, fetch_body(0, max_wait_ms=5000))
        wait_until(lambda: parked_fetches(cluster) == 1, "the Fetch to be parked")
        assert producer.request(PRODUCE, 9, produce_body(batch()))["responses"][0]["partition_responses"][0][
            "error_code"] == NO_ERROR
        _, body = consumer.receive(FETCH, 12)
    assert len(body["responses"][0]["partitions"][0]["records"]) > 61


def test_acks_zero_sends_nothing_and_unmutes(cluster: MockCluster) -> None:
    with client(cluster) as c:
        c.send(PRODUCE, 9, produce_body(batch(), acks=0))
        c.send(PRODUCE, 9, produce_body(batch(), acks=0))
        cid = c.send(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert cid == 3
        assert c.receive(API_VERSIONS, 3)[0] == 3  # nothing came back for the two acks=0 requests
    assert cluster.high_watermark("t", 0) == 6


def test_many_connections(cluster: MockCluster) -> None:
    clients = [client(cluster) for _ in range(60)]
    try:
        errors: List[BaseException] = []

        def work(c: WireClient) -> None:
            try:
                for _ in range(3):
                    assert api_versions_ok(c)
                    assert c.request(METADATA, 12, {"topics": None})["topics"][0]["name"] == "t"
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert not errors
        assert cluster.connection_count(1) == 60
    finally:
        for c in clients:
            c.close()


def test_frames_split_and_coalesced_across_writes(cluster: MockCluster) -> None:
    with client(cluster) as c:
        frames = b"".join(c.encode(API_VERSIONS, 2, {"client_software_name": "t", "client_software_version": "1"})[1] for _ in range(3))
        big = c.encode(PRODUCE, 9, produce_body(batch(50, b"x" * 200)))[1]
        data = frames + big
        # byte by byte for the first frame, then odd-sized pieces, the last two frames together
        for i in range(12):
            c.send_raw(data[i:i + 1])
            time.sleep(0.002)
        pos = 12
        for size in (5, 1, 17, 3):
            c.send_raw(data[pos:pos + size])
            pos += size
            time.sleep(0.01)
        c.send_raw(data[pos:])
        assert [c.receive(API_VERSIONS, 2)[0] for _ in range(3)] == [1, 2, 3]
        cid, body = c.receive(PRODUCE, 9)
        assert cid == 4 and body["responses"][0]["partition_responses"][0]["error_code"] == NO_ERROR
    assert cluster.high_watermark("t", 0) == 50


HOSTILE = {
    "http garbage": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "negative size": struct.pack(">i", -5) + b"abcde",
    "oversized frame": struct.pack(">i", 64 * 1024 + 1) + b"x" * 100,
    "truncated header": struct.pack(">i", 3) + b"\x00\x12\x00",
    "zero size": struct.pack(">i", 0),
    "unknown api key": struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1),
    "unserved api (JoinGroup)": struct.pack(">i", 10) + struct.pack(">hhih", 11, 5, 1, -1),
    "unsupported produce version": struct.pack(">i", 10) + struct.pack(">hhih", 0, 2, 1, -1),
    "truncated metadata body": struct.pack(">i", 12) + struct.pack(">hhih", 3, 4, 1, -1) + b"\x00\x00",
    "bad string length": struct.pack(">i", 10) + struct.pack(">hhih", 18, 0, 1, 300),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_input_closes_only_that_connection(cluster: MockCluster, name: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with client(cluster) as bystander:
        assert api_versions_ok(bystander)
        with client(cluster) as attacker:
            attacker.send_raw(HOSTILE[name])
            assert attacker.is_closed_by_peer(), name
        # the broker keeps serving the other connection and new ones
        assert api_versions_ok(bystander)
        bystander.send(PRODUCE, 9, produce_body(batch()))
        assert bystander.receive(PRODUCE, 9)[1]["responses"][0]["partition_responses"][0]["error_code"] == NO_ERROR
    with client(cluster) as fresh:
        assert api_versions_ok(fresh)
    assert any("closed connection" in r.getMessage() for r in caplog.records)


def test_peer_closing_mid_frame_is_harmless(cluster: MockCluster) -> None:
    for _ in range(5):
        c = client(cluster)
        frame = c.encode(PRODUCE, 9, produce_body(batch()))[1]
        c.send_raw(frame[: len(frame) // 2])
        c.close()
    with client(cluster) as c:
        assert api_versions_ok(c)
    assert cluster.high_watermark("t", 0) == 0


def test_unknown_api_versions_version_gets_v0_unsupported_answer(cluster: MockCluster) -> None:
    with client(cluster) as c:
        for version in (4, 127):
            # header v2 (flexible), then a body we cannot know
            c.send_raw(struct.pack(">i", 15) + struct.pack(">hhih", 18, version, 9, 1) + b"x" + b"\x00" + b"\xff\xff\xff")
            frame = c.read_frame()
            cid = struct.unpack_from(">i", frame)[0]
            body = API_VERSIONS.decode_response(0, frame, 4)
            assert cid == 9
            assert body["error_code"] == UnsupportedVersionError.code
            assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 3}]
        assert api_versions_ok(c)  # the connection stays open


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_lists_what_is_served(cluster: MockCluster, version: int) -> None:
    with client(cluster) as c:
        body = c.request(API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"})
    got = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert got == SERVED_VERSIONS
    assert got[0] == (3, 12) and got[1] == (4, 12) and got[18] == (0, 3)


def test_drop_connections_and_latency(cluster: MockCluster) -> None:
    with client(cluster) as c:
        assert api_versions_ok(c)
        cluster.drop_connections(1)
        assert c.is_closed_by_peer()
    cluster.set_latency(1, 250)
    with client(cluster) as c:
        start = time.monotonic()
        assert api_versions_ok(c)
        assert time.monotonic() - start >= 0.24
    # set_latency(1, 0) removes the latency: with a minute of it still in force this client (30 s socket
    # timeout) would fail; no wall-clock bound to break on a busy machine
    cluster.set_latency(1, 60_000)
    cluster.set_latency(1, 0)
    with WireClient(*cluster.broker_address(1), timeout=30.0) as c:
        assert api_versions_ok(c)


def test_processor_wakeup_racing_with_the_drain_is_not_lost() -> None:
    """A wakeup() that lands while the processor drains its wakeup socket must not leave the 'woken' flag
    set with no byte pending (every later wakeup would then be skipped, and the processor would answer
    one request per poll timeout)."""
    from kproducer.mock.processor import Processor

    p = Processor(0, 1, RequestChannel(), SERVED_VERSIONS, 1 << 20)
    real = p._wake_r

    class RacingSocket:
        """The wakeup socket, with another thread's wakeup() landing during the first drain read."""

        raced = False

        def recv(self, n: int) -> bytes:
            if not RacingSocket.raced:
                RacingSocket.raced = True
                data = real.recv(n)
                p.wakeup()  # the race: between reading the byte and clearing the flag
                return data
            return real.recv(n)

        def fileno(self) -> int:
            return real.fileno()

    try:
        p.wakeup()
        p._wake_r = RacingSocket()  # type: ignore[assignment]
        p._poll()
        assert RacingSocket.raced
        # either the flag is clear (the next wakeup writes a byte) or a byte is waiting for the next poll
        pending = bool(select_readable(real))
        assert not p._woken or pending
        p.wakeup()
        assert select_readable(real), "a wakeup after the race must reach the processor"
    finally:
        p._wake_r = real
        p._selector.close()
        real.close()
        p._wake_w.close()


def select_readable(sock: socket.socket) -> bool:
    import select

    r, _, _ = select.select([sock], [], [], 0)
    return bool(r)


def test_injected_latency_follows_the_cluster_clock(stepped: Tuple[MockCluster, FakeClock]) -> None:
    cluster, clock = stepped
    cluster.set_latency(1, 200)
    server = cluster._brokers[1]._server
    assert server is not None

    def held() -> int:
        return sum(len(p._delayed) for p in server.processors)

    with client(cluster) as c:
        c.send(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        wait_until(lambda: held() == 1, "the response to be held back")
        clock.advance(199)
        assert held() == 1  # its time has not come on the cluster clock
        clock.advance(1)
        _, body = c.receive(API_VERSIONS, 3)
        assert body["error_code"] == NO_ERROR
        assert held() == 0
