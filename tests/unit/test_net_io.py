"""The compiled socket I/O of the network thread (_netio: epoll_wait_io, sendmsg_nogil, recv_into_nogil) on
real sockets: the bytes, the partial writes, the errors and the events are those of the socket and selectors
modules it stands in for (kproducer/network/selector.py picks it on Linux with the accelerator)."""
from __future__ import annotations

import os
import random
import selectors
import socket
import threading
import time
from typing import Any, Iterator, List, Tuple

import pytest

from kproducer.network.selector import _unwritten
from kproducer.protocol.accel import MODULES, load

netio_c = load(MODULES["network"])

pytestmark = pytest.mark.skipif(netio_c is None or not hasattr(netio_c, "epoll_wait_io"),
                                reason="the compiled socket I/O needs Linux and the compiled accelerator")


@pytest.fixture
def pair() -> Iterator[Tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def _read_all(sock: socket.socket, n: int, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "peer closed"
        out += chunk
    sock.setblocking(False)
    return bytes(out)


def test_sendmsg_nogil_writes_the_buffers_in_order(pair: Tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    assert netio_c is not None
    store = bytearray(b"0123456789")
    parts: List[Any] = [b"head", memoryview(store)[2:6], bytearray(b"-mid-"), memoryview(b"tail").cast("B"), b""]
    n = netio_c.sendmsg_nogil(a.fileno(), parts)
    expected = b"head2345-mid-tail"
    assert n == len(expected)
    assert _read_all(b, n) == expected


def test_partial_writes_continue_where_they_stopped(pair: Tuple[socket.socket, socket.socket]) -> None:
    """A socket that takes only part of the frame (small buffers): the count written lets _unwritten() make
    the rest, and what arrives is the frame, byte for byte; a full socket raises BlockingIOError."""
    a, b = pair
    assert netio_c is not None
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    rng = random.Random(5)
    chunks = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 3000))) for _ in range(300)]
    frame = b"".join(chunks)
    rest: List[memoryview] = [memoryview(c) for c in chunks]
    got = bytearray()
    blocked = partial = 0
    deadline = time.monotonic() + 60
    while rest:
        assert time.monotonic() < deadline, "the frame was not written in time"
        try:
            n = netio_c.sendmsg_nogil(a.fileno(), rest)
        except BlockingIOError:
            blocked += 1
            n = 0
        if 0 < n < sum(v.nbytes for v in rest):
            partial += 1
        rest = _unwritten(rest, n)
        if blocked:  # (the reader starts once the socket was full: the writer has met both cases)
            try:
                got += b.recv(65536)
            except BlockingIOError:
                pass
    got += _read_all(b, len(frame) - len(got))
    assert bytes(got) == frame
    assert partial > 0 and blocked > 0  # (both cases were met, not just the easy one)


def test_more_parts_than_one_call_takes_are_a_partial_write(pair: Tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    assert netio_c is not None
    parts = [bytes([i % 256]) for i in range(600)]
    n = netio_c.sendmsg_nogil(a.fileno(), parts)
    assert n == 512  # (at most 512 buffers per sendmsg; the caller writes the rest next)
    rest = _unwritten([memoryview(p) for p in parts], n)
    assert netio_c.sendmsg_nogil(a.fileno(), rest) == 88
    assert _read_all(b, 600) == b"".join(parts)


def test_sendmsg_nogil_errors_are_the_socket_modules(pair: Tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    assert netio_c is not None
    with pytest.raises(TypeError):
        netio_c.sendmsg_nogil(a.fileno(), [b"ok", "not bytes"])
    with pytest.raises(TypeError):
        netio_c.sendmsg_nogil(a.fileno(), (b"a tuple",))
    with pytest.raises(ValueError, match="file descriptor"):
        netio_c.sendmsg_nogil(-1, [b"x"])
    b.close()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        for _ in range(100):  # (the first write after the peer's close may still be accepted)
            netio_c.sendmsg_nogil(a.fileno(), [b"x" * 1000])
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        netio_c.sendmsg_nogil(w, [b"x"])  # (a closed descriptor: EBADF)


def test_recv_into_nogil(pair: Tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    assert netio_c is not None
    into = memoryview(bytearray(8))
    with pytest.raises(BlockingIOError):
        netio_c.recv_into_nogil(b.fileno(), into)
    a.sendall(b"hello, world")
    assert netio_c.recv_into_nogil(b.fileno(), into) == 8 and bytes(into) == b"hello, w"
    assert netio_c.recv_into_nogil(b.fileno(), into[:3]) == 3 and bytes(into[:3]) == b"orl"
    with pytest.raises(BufferError):
        netio_c.recv_into_nogil(b.fileno(), b"read-only")
    a.close()
    assert netio_c.recv_into_nogil(b.fileno(), into) == 1 and into[0:1] == b"d"
    assert netio_c.recv_into_nogil(b.fileno(), into) == 0  # the peer closed


def _selectors_view(sel: selectors.EpollSelector) -> List[Tuple[int, int]]:
    return sorted((key.fd, mask) for key, mask in sel.select(0))


def _compiled_view(sel: selectors.EpollSelector, timeout_ms: float = 0) -> List[Tuple[int, int]]:
    assert netio_c is not None
    return sorted(netio_c.epoll_wait_io(sel.fileno(), timeout_ms, 16))


def test_epoll_wait_io_reports_what_selectors_reports(pair: Tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sel = selectors.EpollSelector()
    try:
        sel.register(a, selectors.EVENT_READ | selectors.EVENT_WRITE)
        sel.register(b, selectors.EVENT_READ)
        assert _compiled_view(sel) == _selectors_view(sel) == [(a.fileno(), selectors.EVENT_WRITE)]
        a.send(b"x")
        assert _compiled_view(sel) == _selectors_view(sel) == [(a.fileno(), selectors.EVENT_WRITE),
                                                               (b.fileno(), selectors.EVENT_READ)]
        b.send(b"y")
        both = selectors.EVENT_READ | selectors.EVENT_WRITE
        assert _compiled_view(sel) == _selectors_view(sel) == [(a.fileno(), both), (b.fileno(), selectors.EVENT_READ)]
        b.close()  # a hang-up wakes both readers and writers, as selectors maps it
        sel.unregister(b)
        assert _compiled_view(sel) == _selectors_view(sel) == [(a.fileno(), both)]
    finally:
        sel.close()


def test_epoll_wait_io_waits_for_its_timeout_and_lets_other_threads_run(
        pair: Tuple[socket.socket, socket.socket]) -> None:
    """A wait gives the GIL up: another thread runs Python and makes the socket readable while this one waits
    (were the GIL held, that thread could not run and the wait would end empty at its timeout)."""
    a, b = pair
    assert netio_c is not None
    sel = selectors.EpollSelector()
    try:
        sel.register(b, selectors.EVENT_READ)
        start = time.monotonic()
        assert netio_c.epoll_wait_io(sel.fileno(), 30.0, 4) == []
        assert time.monotonic() - start >= 0.029  # (waited; an upper bound would fail on a busy machine)
        writer = threading.Thread(target=lambda: (sum(range(10_000)), a.send(b"z")))
        start = time.monotonic()
        writer.start()
        got = netio_c.epoll_wait_io(sel.fileno(), 60_000.0, 4)
        writer.join()
        assert got == [(b.fileno(), selectors.EVENT_READ)]
        assert time.monotonic() - start < 30  # (woken by the write, long before the timeout)
    finally:
        sel.close()


def test_epoll_wait_io_argument_errors() -> None:
    assert netio_c is not None
    sel = selectors.EpollSelector()
    try:
        with pytest.raises(ValueError):
            netio_c.epoll_wait_io(sel.fileno(), 0, 0)
        with pytest.raises(TypeError):
            netio_c.epoll_wait_io(sel.fileno(), 0)
        assert netio_c.epoll_wait_io(sel.fileno(), float("nan"), 4) == []  # (no wait, nothing registered)
        with pytest.raises(OSError):
            r, w = os.pipe()
            try:
                netio_c.epoll_wait_io(r, 0, 4)  # (not an epoll descriptor: EINVAL)
            finally:
                os.close(r)
                os.close(w)
    finally:
        sel.close()
