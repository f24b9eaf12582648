"""A TLS broker that answers and closes the connection at once (Apache Kafka does exactly that after a
failed SASL authentication: the error response, close_notify and FIN leave together once
connection.failed.authentication.delay.ms is over). The answer must reach the client before the
disconnection does: the Selector reports the frame while the channel is still there and the close at the
next poll, as Java's Selector does. Before, the TLS read loop went on to the EOF in the same poll, closed the
channel, and NetworkClient dropped the frame of a channel already gone (the SaslAuthenticate error was lost,
so a wrong SCRAM password over SASL_SSL showed up as "connection closed by the broker", retried with backoff
for many seconds)."""
from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from typing import Dict, List, Tuple

import pytest

trustme = pytest.importorskip("trustme")

from kproducer.network.selector import Selector  # noqa: E402


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("close_notify", [True, False], ids=["close_notify", "bare-fin"])
def test_a_frame_followed_by_the_peer_close_is_delivered_before_the_disconnection(close_notify: bool) -> None:
    ca = trustme.CA()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(client_ctx)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)
    answered = threading.Event()
    errors: List[BaseException] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            conn.settimeout(10)
            tls = server_ctx.wrap_socket(conn, server_side=True)
            got = b""
            while len(got) < 4 or len(got) < 4 + struct.unpack(">i", got[:4])[0]:
                got += tls.recv(4096)
            # the answer, then the close, in one go
            tls.sendall(_frame(b"answer-" + got[4:]))
            if close_notify:  # sent, without waiting for the client's
                tls.setblocking(False)
                try:
                    tls.unwrap()
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
            tls.close()
        except BaseException as e:  # reported by the test
            errors.append(e)
        finally:
            answered.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    sel = Selector(ssl_context=client_ctx)
    try:
        sel.connect(1, "127.0.0.1", listener.getsockname()[1])
        deadline = time.monotonic() + 20
        while 1 not in sel.connected and time.monotonic() < deadline:
            sel.poll(50)
            assert not sel.disconnected, sel.disconnected
        assert 1 in sel.connected, "no TLS connection"
        sel.send(1, b"question")
        assert answered.wait(20) and not errors, errors
        time.sleep(0.1)  # the answer and the close are both in the client's socket buffer now
        frames: List[bytes] = []
        disconnected: Dict[int, str] = {}
        order: List[Tuple[str, bool]] = []
        while not disconnected and time.monotonic() < deadline:
            sel.poll(50)
            for node, data in sel.completed_receives:
                frames.append(bytes(data))
                # NetworkClient drops the frames of a channel that is gone: it must still be there
                order.append(("frame", sel.has_channel(node)))
            if sel.disconnected:
                disconnected.update(sel.disconnected)
                order.append(("disconnected", sel.has_channel(1)))
        assert frames == [b"answer-question"]
        assert 1 in disconnected, "the peer's close was never reported"
        assert order == [("frame", True), ("disconnected", False)], order
    finally:
        sel.close_all()
        listener.close()
        server.join(10)
