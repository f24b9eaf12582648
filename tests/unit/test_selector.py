"""Selector and FrameReader: size-prefixed framing over real sockets on 127.0.0.1 (split and joined TCP
writes, hostile frame sizes, refused connections, peer close, partial writes, wakeup)."""
from __future__ import annotations

import random
import socket
import struct
import threading
import time
from typing import Callable, Dict, Iterator, List, Tuple

import pytest

from kproducer.network.selector import FrameError, FrameReader, Selector, _frame, _unwritten
from kproducer.producer.buffer_pool import in_use


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# -- FrameReader ---------------------------------------------------------------------------------


def test_frame_reader_reassembles_a_frame_split_at_every_byte() -> None:
    data = frame(b"hello") + frame(b"") + frame(b"world!")
    for cut in range(len(data) + 1):
        r = FrameReader(100)
        assert r.feed(data[:cut]) + r.feed(data[cut:]) == [b"hello", b"", b"world!"]
        assert r.buffered == 0


def test_frame_reader_byte_by_byte() -> None:
    r = FrameReader(100)
    data = frame(b"abc") + frame(b"defg")
    out: List[bytes] = []
    for i in range(len(data)):
        got = r.feed(data[i:i + 1])
        out.extend(got)
        if i < 6:
            assert got == []
    assert out == [b"abc", b"defg"]


def test_frame_reader_joined_frames_in_one_chunk() -> None:
    r = FrameReader(100)
    assert r.feed(frame(b"a") + frame(b"bb") + frame(b"ccc") + b"\x00\x00") == [b"a", b"bb", b"ccc"]
    assert r.buffered == 2
    assert r.feed(b"\x00\x01z") == [b"z"]


def test_frame_reader_rejects_negative_and_oversized_sizes() -> None:
    with pytest.raises(FrameError, match="invalid frame size -1"):
        FrameReader(100).feed(struct.pack(">i", -1))
    with pytest.raises(FrameError, match="invalid frame size 101"):
        FrameReader(100).feed(struct.pack(">i", 101))
    # the size is checked as soon as it is known, before the payload arrives
    assert FrameReader(100).feed(struct.pack(">i", 100)) == []
    assert FrameReader(100).feed(frame(b"x" * 100)) == [b"x" * 100]


def test_frame_reader_handles_long_streams() -> None:
    r = FrameReader(10_000)
    payloads = [bytes([i % 256]) * (i * 37 % 5000) for i in range(200)]
    stream = b"".join(frame(p) for p in payloads)
    out: List[bytes] = []
    pos = 0
    step = 1
    while pos < len(stream):
        out.extend(r.feed(stream[pos:pos + step]))
        pos += step
        step = step * 3 % 7919 + 1
    assert out == payloads and r.buffered == 0


# -- real sockets --------------------------------------------------------------------------------


class Server:
    """A one-connection TCP server on 127.0.0.1 driven by the test."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.listener.settimeout(5)
        self.port = self.listener.getsockname()[1]
        self.conn: socket.socket

    def accept(self) -> socket.socket:
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(5)
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.conn

    def recv_exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.conn.recv(n - len(buf))
            if not chunk:
                raise AssertionError("peer closed")
            buf += chunk
        return buf

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exactly(4))
        return self.recv_exactly(size)

    def close(self) -> None:
        for s in (getattr(self, "conn", None), self.listener):
            if s is not None:
                s.close()


class Results:
    """Everything a Selector reported over several polls."""

    def __init__(self) -> None:
        self.connected: List[int] = []
        self.sends: List[int] = []
        self.receives: List[Tuple[int, bytes]] = []
        self.disconnected: Dict[int, str] = {}

    def poll(self, sel: Selector, timeout_ms: float = 20) -> None:
        sel.poll(timeout_ms)
        self.connected += sel.connected
        self.sends += sel.completed_sends
        self.receives += sel.completed_receives
        self.disconnected.update(sel.disconnected)
        sel.connected = []
        sel.disconnected = {}

    def until(self, sel: Selector, cond: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError("selector did not report it in time")
            self.poll(sel)


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


@pytest.fixture(params=["nogil", "selectors"])
def sel(request: pytest.FixtureRequest) -> Iterator[Selector]:
    """Both I/O paths: the compiled one (epoll_wait_io, sendmsg_nogil, recv_into_nogil: Linux with the
    accelerator) and the selectors module with the socket methods (everywhere else)."""
    s = Selector(max_receive_size=1024 * 1024)
    if request.param == "nogil":
        if not s._nogil:
            s.close_all()
            pytest.skip("the compiled socket I/O needs Linux and the compiled accelerator")
    else:
        s._nogil = False
    yield s
    s.close_all()


def connected(sel: Selector, server: Server, node: int = 1) -> Results:
    res = Results()
    sel.connect(node, "127.0.0.1", server.port)
    server.accept()
    res.until(sel, lambda: node in res.connected)
    assert sel.is_connected(node) and sel.has_channel(node)
    return res


def test_connect_and_send_a_frame(sel: Selector, server: Server) -> None:
    res = connected(sel, server)
    sel.send(1, b"request-1")
    sel.send(1, b"request-2")
    res.until(sel, lambda: len(res.sends) == 2)
    assert res.sends == [1, 1]
    assert server.recv_frame() == b"request-1"
    assert server.recv_frame() == b"request-2"


def test_a_frame_split_across_tcp_writes_arrives_once_complete(sel: Selector, server: Server) -> None:
    res = connected(sel, server)
    data = frame(b"0123456789" * 10)
    pieces = (data[:2], data[2:5], data[5:50], data[50:])
    for i, piece in enumerate(pieces):
        server.conn.sendall(piece)
        time.sleep(0.01)  # separate TCP segments
        res.poll(sel)
        if i < len(pieces) - 1:
            assert res.receives == []  # nothing until the last byte is there
    res.until(sel, lambda: len(res.receives) == 1)
    assert res.receives == [(1, b"0123456789" * 10)]


def test_frames_joined_in_one_tcp_write_are_all_delivered_in_order(sel: Selector, server: Server) -> None:
    res = connected(sel, server)
    payloads = [b"first", b"", b"third" * 1000, b"4"]
    server.conn.sendall(b"".join(frame(p) for p in payloads))
    res.until(sel, lambda: len(res.receives) == 4)
    assert [p for _n, p in res.receives] == payloads


def test_large_frames_both_ways(sel: Selector, server: Server) -> None:
    res = connected(sel, server)
    big = bytes(range(256)) * 3000  # 768 kB: many reads and (probably) partial writes
    sel.send(1, big)
    got: List[bytes] = []
    reader = threading.Thread(target=lambda: got.append(server.recv_frame()), daemon=True)
    reader.start()
    res.until(sel, lambda: res.sends == [1], timeout=10)
    reader.join(10)
    assert got == [big]
    server.conn.sendall(frame(big))
    res.until(sel, lambda: len(res.receives) == 1, timeout=10)
    assert res.receives[0][1] == big


def test_frames_spanning_many_reads_into_the_reused_receive_buffer_keep_their_bytes(sel: Selector,
                                                                                     server: Server) -> None:
    """Reads land in one buffer that the next read overwrites: every frame (random bytes, so no period can
    hide a stale piece) is delivered as sent, whether it spans several reads or shares one with others."""
    res = connected(sel, server)
    rng = random.Random(5)
    payloads = [rng.randbytes(n) for n in (700_000, 3, 300_000, 0, 262_140, 262_144, 1, 90_000)]
    stream = b"".join(frame(p) for p in payloads)
    sender = threading.Thread(target=server.conn.sendall, args=(stream,), daemon=True)
    sender.start()
    res.until(sel, lambda: len(res.receives) == len(payloads), timeout=20)
    sender.join(10)
    assert [p for _n, p in res.receives] == payloads
    server.conn.sendall(frame(b"after"))  # the buffer is reused for the next read too
    res.until(sel, lambda: len(res.receives) == len(payloads) + 1)
    assert res.receives[-1][1] == b"after"


def test_frames_in_parts_are_written_in_order_without_joining(sel: Selector, server: Server) -> None:
    """A frame given as buffers (a Produce request's header and batch views) arrives as their concatenation,
    behind one size prefix, also when the socket takes it in several partial sendmsg writes."""
    res = connected(sel, server)
    sel._channels[1].sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # partial writes
    store = bytearray(bytes(range(256)) * 1000)
    parts: List[object] = [b"head", memoryview(store)[10:200_000], bytearray(b"mid"), memoryview(b""),
                           memoryview(store)[200_000:], b"tail"]
    expected = b"".join(bytes(p) for p in parts)  # type: ignore[call-overload]
    sel.send(1, parts)  # type: ignore[arg-type]
    sel.send(1, [b"a", b"b"])
    sel.send(1, b"plain")
    got: List[bytes] = []

    def read() -> None:
        for _ in range(3):
            got.append(server.recv_frame())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # (the selector keeps reporting a completed send until its caller takes it: poll until all is read)
    res.until(sel, lambda: not reader.is_alive(), timeout=20)
    assert got == [expected, b"ab", b"plain"]
    assert sel.completed_sends.count(1) == 3


def test_a_frame_in_parts_keeps_its_bytes_when_the_lent_view_is_released(sel: Selector, server: Server) -> None:
    """docs/design.md, buffer ownership: a batch that finishes while its frame is still being written releases
    the view it lent; the frame holds views of its own, so the release succeeds, the buffer stays exported (the
    BufferPool drops it instead of reusing it) and the frame is written unchanged."""
    res = connected(sel, server)
    sel._channels[1].sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    pool_buffer = bytearray(bytes(range(256)) * 16384)  # 4 MiB: more than the socket takes at once
    expected = bytes(pool_buffer)
    lent = memoryview(pool_buffer)
    sel.send(1, [b"head", lent])
    assert sel._channels[1].has_pending_writes()  # partly written
    lent.release()  # the batch finished (e.g. expired in flight): ProducerBatch.release()
    assert in_use(pool_buffer)  # so BufferPool.deallocate() drops it rather than reusing it
    got: List[bytes] = []
    reader = threading.Thread(target=lambda: got.append(server.recv_frame()), daemon=True)
    reader.start()
    res.until(sel, lambda: not reader.is_alive(), timeout=20)
    assert got == [b"head" + expected]


def test_what_is_left_of_a_frame_in_parts_after_a_partial_write() -> None:
    data = b"0123456789"
    views = [memoryview(data[:3]), memoryview(data[3:4]), memoryview(data[4:])]
    for n in range(len(data) + 1):
        rest = _unwritten(list(views), n)
        assert b"".join(bytes(v) for v in rest) == data[n:]
        assert all(v.nbytes for v in rest)  # no empty view left at the front
    frame_views = _frame([b"ab", memoryview(b"cde")], tls=False)
    assert isinstance(frame_views, list) and b"".join(bytes(v) for v in frame_views) == frame(b"abcde")
    joined = _frame([b"ab", memoryview(b"cde")], tls=True)  # TLS sockets have no sendmsg: one buffer
    assert isinstance(joined, memoryview) and bytes(joined) == frame(b"abcde")


@pytest.mark.parametrize("size", [-1, -2147483648, 1024 * 1024 + 1, 2147483647])
def test_bad_frame_size_closes_the_connection(sel: Selector, server: Server, size: int) -> None:
    res = connected(sel, server)
    server.conn.sendall(struct.pack(">i", size) + b"xxxx")
    res.until(sel, lambda: 1 in res.disconnected)
    assert "invalid frame size" in res.disconnected[1] and str(size) in res.disconnected[1]
    assert res.receives == []
    assert not sel.has_channel(1)


def test_frame_of_exactly_the_maximum_size_is_accepted(server: Server) -> None:
    sel = Selector(max_receive_size=5000)
    try:
        res = connected(sel, server)
        server.conn.sendall(frame(b"m" * 5000))
        res.until(sel, lambda: len(res.receives) == 1)
        assert res.receives == [(1, b"m" * 5000)] and not res.disconnected
    finally:
        sel.close_all()


def test_connect_refused_is_reported_as_a_disconnection(sel: Selector) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    res = Results()
    sel.connect(7, "127.0.0.1", port)
    res.until(sel, lambda: 7 in res.disconnected)
    assert "failed" in res.disconnected[7]
    assert 7 not in res.connected and not sel.has_channel(7)


def test_unresolvable_host_is_reported_as_a_disconnection(sel: Selector) -> None:
    res = Results()
    sel.connect(3, "no-such-host.invalid", 9092)
    res.poll(sel, 0)
    assert "cannot resolve" in res.disconnected[3]


def test_peer_close_is_reported(sel: Selector, server: Server) -> None:
    res = connected(sel, server)
    server.conn.close()
    res.until(sel, lambda: 1 in res.disconnected)
    assert "closed by the broker" in res.disconnected[1]
    with pytest.raises(ConnectionError):
        sel.send(1, b"x")


def test_frames_received_before_the_peer_closes_are_kept(sel: Selector, server: Server) -> None:
    res = connected(sel, server)
    server.conn.sendall(frame(b"last words"))
    server.conn.close()
    res.until(sel, lambda: 1 in res.disconnected)
    assert res.receives == [(1, b"last words")]


def test_send_to_an_unknown_or_connecting_node_raises(sel: Selector, server: Server) -> None:
    with pytest.raises(ConnectionError):
        sel.send(9, b"x")
    sel.connect(1, "127.0.0.1", server.port)
    if not sel.is_connected(1):
        with pytest.raises(ConnectionError):
            sel.send(1, b"x")
    with pytest.raises(ValueError, match="already"):
        sel.connect(1, "127.0.0.1", server.port)


def test_close_by_the_client_is_not_reported_as_a_disconnection(sel: Selector, server: Server) -> None:
    res = connected(sel, server)
    sel.close(1)
    res.poll(sel, 0)
    assert res.disconnected == {} and not sel.has_channel(1)
    assert server.conn.recv(10) == b""  # the socket really closed
    sel.close(1)  # closing again is harmless


def test_two_connections_are_multiplexed(sel: Selector) -> None:
    a, b = Server(), Server()
    try:
        res = Results()
        sel.connect(1, "127.0.0.1", a.port)
        sel.connect(2, "127.0.0.1", b.port)
        a.accept()
        b.accept()
        res.until(sel, lambda: sorted(res.connected) == [1, 2])
        a.conn.sendall(frame(b"from a"))
        b.conn.sendall(frame(b"from b"))
        res.until(sel, lambda: len(res.receives) == 2)
        assert sorted(res.receives) == [(1, b"from a"), (2, b"from b")]
        assert sorted(sel.channel_ids()) == [1, 2]
    finally:
        a.close()
        b.close()


def test_wakeup_interrupts_a_blocked_poll(sel: Selector) -> None:
    t = threading.Timer(0.05, sel.wakeup)
    start = time.monotonic()
    t.start()
    sel.poll(5000)
    elapsed = time.monotonic() - start
    t.join()
    assert elapsed < 2.0
    # the wakeup byte was drained: the next poll waits again
    start = time.monotonic()
    sel.poll(50)
    assert time.monotonic() - start >= 0.03


def test_poll_after_close_all_returns_at_once() -> None:
    sel = Selector()
    sel.close_all()
    start = time.monotonic()
    sel.poll(1000)
    assert time.monotonic() - start < 0.5
    sel.close_all()  # idempotent
    sel.wakeup()  # harmless after close


# -- client.dns.lookup=use_all_dns_ips, SO_KEEPALIVE ---------------------------------------------


class FakeDns:
    """A resolver that answers a fixed list of addresses for every host and counts the look-ups."""

    def __init__(self, *addresses: Tuple[str, int]) -> None:
        self.addresses = list(addresses)
        self.lookups = 0

    def __call__(self, host: str, port: int) -> List[Tuple[int, int, int, str, Tuple[str, int]]]:
        self.lookups += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", addr) for addr in self.addresses]


def test_every_address_of_a_host_is_tried_in_turn(server: Server) -> None:
    """Java's use_all_dns_ips: a connection attempt that fails moves on to the host's next address."""
    dead = ("127.0.0.2", server.port)  # loopback, but nothing listens on that address
    dns = FakeDns(dead, ("127.0.0.1", server.port))
    sel = Selector(resolver=dns)
    try:
        res = Results()
        sel.connect(1, "broker.test", 9092)
        res.until(sel, lambda: 1 in res.disconnected)
        assert "127.0.0.2" in res.disconnected[1]  # the reason names the address that failed
        sel.connect(1, "broker.test", 9092)  # the next attempt takes the next address
        server.accept()
        res.until(sel, lambda: 1 in res.connected)
        assert dns.lookups == 1
        sel.close(1)
        # all addresses were tried: the name is resolved again, and the address tried last is not first
        sel.connect(1, "broker.test", 9092)
        assert dns.lookups == 2
        res.until(sel, lambda: 1 in res.disconnected)
        assert "127.0.0.2" in res.disconnected[1]
    finally:
        sel.close_all()


def test_only_the_first_address_family_is_used() -> None:
    sel = Selector(resolver=lambda h, p: [
        (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::1", p, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", p)),
        (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::2", p, 0, 0)),
    ])
    try:
        # IPv6 first, so IPv4 is left out (Java's ClientUtils.filterPreferredAddresses); after the last
        # address the name is resolved again and the first one comes back
        assert [sel._next_address("h", 1)[4][0] for _ in range(3)] == ["::1", "::2", "::1"]
    finally:
        sel.close_all()


def test_broker_sockets_have_keepalive_and_nodelay(sel: Selector, server: Server) -> None:
    connected(sel, server)
    sock = sel._channels[1].sock
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
