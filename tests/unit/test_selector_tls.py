"""Selector over TLS: the non-blocking handshake, framed traffic both ways, and the failures that
retrying cannot fix (unknown CA, hostname mismatch, TLS on one side only), each reported in
``Selector.failures`` with a typed error that names the broker and the reason."""
from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from typing import Callable, Iterator, List, Optional, Tuple

import pytest

trustme = pytest.importorskip("trustme")

from kproducer.errors import SecurityProtocolMismatchError, SslAuthenticationError  # noqa: E402
from kproducer.network.selector import Selector  # noqa: E402


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.fixture(scope="module")
def ca() -> "trustme.CA":
    return trustme.CA()


def server_context(ca: "trustme.CA", *names: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(*(names or ("localhost", "127.0.0.1"))).configure_cert(ctx)
    return ctx


def client_context(ca: Optional["trustme.CA"], check_hostname: bool = True) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is not None:
        ca.configure_trust(ctx)
    ctx.check_hostname = check_hostname
    return ctx


class EchoServer:
    """Accepts connections on 127.0.0.1; with a context, speaks TLS (a blocking handshake in its own
    thread); echoes every frame back. ``mode="close"`` closes each connection after reading a little,
    ``mode="silent"`` reads and never answers, ``mode="raw-echo"`` sends the first bytes it reads straight back."""

    def __init__(self, context: Optional[ssl.SSLContext] = None, mode: str = "echo") -> None:
        self.context = context
        self.mode = mode
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.listener.settimeout(0.2)  # here, not in the thread: close() may come before it runs
        self.errors: List[str] = []
        self.conns: List[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        self.conns.append(conn)
        try:
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            if self.mode == "close":
                conn.recv(16)
                conn.close()
                return
            if self.mode == "silent":
                while conn.recv(4096):
                    pass
                return
            if self.mode == "raw-echo":  # the first bytes straight back, unframed (a ClientHello is no frame)
                conn.sendall(conn.recv(65536))
                while conn.recv(4096):
                    pass
                return
            buf = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack(">i", buf[:4])
                    if len(buf) < 4 + size:
                        break
                    conn.sendall(buf[:4 + size])
                    buf = buf[4 + size:]
        except (OSError, ssl.SSLError) as e:
            self.errors.append(str(e))
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def servers() -> Iterator[Callable[..., EchoServer]]:
    made: List[EchoServer] = []

    def make(context: Optional[ssl.SSLContext] = None, mode: str = "echo") -> EchoServer:
        s = EchoServer(context, mode)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def poll_until(sel: Selector, done: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        sel.poll(50)


def connect(sel: Selector, host: str, port: int) -> Tuple[List[int], dict, dict]:
    """Connect node 1 and poll until it connects or fails; returns (connected, disconnected, failures)."""
    connected: List[int] = []
    disconnected: dict = {}
    failures: dict = {}
    sel.connect(1, host, port)

    def settled() -> bool:
        connected.extend(sel.connected)
        disconnected.update(sel.disconnected)
        failures.update(sel.failures)
        sel.connected = []
        return bool(connected or disconnected)

    poll_until(sel, settled, "the connection to settle")
    return connected, disconnected, failures


def test_tls_round_trip_of_frames_large_and_small(ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    srv = servers(server_context(ca))
    sel = Selector(ssl_context=client_context(ca))
    try:
        connected, disconnected, _ = connect(sel, "localhost", srv.port)
        assert connected == [1] and not disconnected
        payloads = [b"x" * n for n in (0, 1, 1000, 70_000, 3_000_000)]
        for p in payloads:
            sel.send(1, p)
        got: List[bytes] = []

        def all_back() -> bool:
            got.extend(f for _n, f in sel.completed_receives)
            return len(got) == len(payloads)

        poll_until(sel, all_back, "the echoed frames")
        assert got == payloads  # TLS records buffered inside OpenSSL were all read
    finally:
        sel.close_all()


def test_unknown_ca_fails_with_the_reason_and_the_broker(ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    srv = servers(server_context(ca))
    sel = Selector(ssl_context=client_context(trustme.CA()))  # trusts another CA
    try:
        connected, disconnected, failures = connect(sel, "localhost", srv.port)
        assert not connected and 1 in disconnected
        err = failures[1]
        assert isinstance(err, SslAuthenticationError)
        assert f"localhost:{srv.port}" in str(err)
        assert "certificate verify failed" in str(err) or "unable to get local issuer" in str(err)
    finally:
        sel.close_all()


def test_expired_certificate_fails_naming_the_reason(ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", not_before=now - datetime.timedelta(days=30),
                  not_after=now - datetime.timedelta(days=1)).configure_cert(ctx)
    srv = servers(ctx)
    sel = Selector(ssl_context=client_context(ca))
    try:
        connected, disconnected, failures = connect(sel, "localhost", srv.port)
        assert not connected and 1 in disconnected
        err = failures[1]
        assert isinstance(err, SslAuthenticationError)
        assert "expired" in str(err) and f"localhost:{srv.port}" in str(err)
    finally:
        sel.close_all()


def test_hostname_mismatch_fails_and_an_empty_identification_algorithm_connects(
        ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    srv = servers(server_context(ca, "broker.example"))
    sel = Selector(ssl_context=client_context(ca))
    try:
        _, disconnected, failures = connect(sel, "127.0.0.1", srv.port)
        assert 1 in disconnected
        assert isinstance(failures[1], SslAuthenticationError)
        assert "mismatch" in str(failures[1]).lower()
    finally:
        sel.close_all()
    sel = Selector(ssl_context=client_context(ca, check_hostname=False))
    try:
        connected, _, _ = connect(sel, "127.0.0.1", srv.port)
        assert connected == [1]
    finally:
        sel.close_all()


def test_tls_to_a_plaintext_listener_that_closes_says_check_security_protocol(
        ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    srv = servers(None, mode="close")
    sel = Selector(ssl_context=client_context(ca))
    try:
        _, disconnected, failures = connect(sel, "localhost", srv.port)
        assert 1 in disconnected
        assert isinstance(failures[1], SecurityProtocolMismatchError)
        assert "security.protocol" in str(failures[1])
    finally:
        sel.close_all()


def test_tls_to_a_plaintext_listener_that_answers_garbage(ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    srv = servers(None, mode="raw-echo")  # echoes the ClientHello back: not a TLS answer
    sel = Selector(ssl_context=client_context(ca))
    try:
        _, disconnected, failures = connect(sel, "localhost", srv.port)
        assert 1 in disconnected
        assert isinstance(failures[1], SslAuthenticationError)
        assert "security.protocol" in str(failures[1]) or "TLS handshake" in str(failures[1])
    finally:
        sel.close_all()


def test_a_silent_plaintext_listener_is_named_when_the_setup_times_out(
        ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    srv = servers(None, mode="silent")
    sel = Selector(ssl_context=client_context(ca))
    try:
        sel.connect(1, "localhost", srv.port)
        sel.poll(100)
        # still handshaking: the caller's setup timeout asks why
        err = sel.setup_timeout_error(1)
        assert isinstance(err, SecurityProtocolMismatchError) and "security.protocol" in str(err)
    finally:
        sel.close_all()


def test_plaintext_to_a_tls_listener_is_reported_as_a_protocol_mismatch(
        ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    srv = servers(server_context(ca))
    sel = Selector()
    try:
        connected, _, _ = connect(sel, "127.0.0.1", srv.port)
        assert connected == [1]  # TCP only: nothing is known yet
        sel.send(1, b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")  # a Kafka-like request

        def failed() -> bool:
            return 1 in sel.disconnected

        poll_until(sel, failed, "the TLS listener to refuse")
        err = sel.failures.get(1)
        assert isinstance(err, SecurityProtocolMismatchError), sel.disconnected
        assert "security.protocol" in str(err) and f"127.0.0.1:{srv.port}" in str(err)
    finally:
        sel.close_all()


def test_a_closed_connection_after_success_is_an_ordinary_disconnect(
        ca: "trustme.CA", servers: Callable[..., EchoServer]) -> None:
    """Once a connection was set up, a later broker that closes during the handshake is a transient
    failure (retried), not a misconfiguration."""
    good = servers(server_context(ca))
    closing = servers(None, mode="close")
    sel = Selector(ssl_context=client_context(ca))
    try:
        connected, _, _ = connect(sel, "localhost", good.port)
        assert connected == [1]
        sel.connect(2, "localhost", closing.port)

        def gone() -> bool:
            return 2 in sel.disconnected

        poll_until(sel, gone, "node 2 to close")
        assert 2 not in sel.failures
    finally:
        sel.close_all()
