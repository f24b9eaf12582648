"""A broker that closes the connection during the SASL exchange (issue 28 item 12).

Old brokers (before KIP-152) and some Kafka-protocol servers (tansu with ``--authentication`` and a mechanism it
does not serve) answer bad credentials by closing the connection, not with an error code. kproducer says so at
once, on every connection attempt: ``SaslAuthenticationFailedError`` ("authentication failed: connection closed
during SASL handshake"), logged at ERROR and delivered to the metadata wait of ``send()`` and to the futures of
queued records, instead of a ``NoBrokersAvailableError`` after max.block.ms.

Three server sides: a tiny in-test TCP server (answers ApiVersions, closes at SaslHandshake or at
SaslAuthenticate), the mock cluster's fault injection (``drop_responses``: the request is read and the connection
closed instead of answered), and tansu with ``--authentication`` (skipped where its binary is missing).
"""
from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

import pytest

from kproducer import Producer
from kproducer.errors import AuthenticationError, SaslAuthenticationFailedError
from kproducer.mock import MockCluster
from kproducer.mock.apis import SERVED_VERSIONS
from kproducer.protocol.messages import (
    API_VERSIONS,
    SASL_HANDSHAKE,
    decode_request_header,
    encode_response,
)

MESSAGE = "authentication failed: connection closed during SASL handshake"
#: the failure must come from the closed connection, not from this limit (before the fix: NoBrokersAvailableError
#: after it); the error type tells the two apart, so the test needs no tight time bound
MAX_BLOCK_MS = 20000
#: how long a test waits for a future
WAIT_S = 30.0


class ClosingBroker:
    """Accepts connections on 127.0.0.1, answers ApiVersions (the versions the mock serves), answers
    SaslHandshake (``close_at="authenticate"``) or not, and closes the connection at the next SASL request."""

    def __init__(self, close_at: str = "handshake") -> None:
        assert close_at in ("handshake", "authenticate")
        self.close_at = close_at
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.closed_at: List[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="closing-broker", daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        conn.settimeout(20)
        try:
            while True:
                frame = _read_frame(conn)
                if frame is None:
                    return
                header, api, pos = decode_request_header(frame)
                if api is API_VERSIONS:
                    body = {"error_code": 0, "throttle_time_ms": 0,
                            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                         for k, (lo, hi) in sorted(SERVED_VERSIONS.items())]}
                    _write_frame(conn, encode_response(api, header.api_version, header.correlation_id, body))
                elif api is SASL_HANDSHAKE and self.close_at == "authenticate":
                    body = {"error_code": 0, "mechanisms": ["PLAIN"]}
                    _write_frame(conn, encode_response(api, header.api_version, header.correlation_id, body))
                else:
                    self.closed_at.append(api.name if api is not None else str(header.api_key))
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(5)


def _read_frame(conn: socket.socket) -> Optional[bytes]:
    head = _read_exact(conn, 4)
    if head is None:
        return None
    return _read_exact(conn, struct.unpack(">i", head)[0])


def _read_exact(conn: socket.socket, n: int) -> Optional[bytes]:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _write_frame(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(struct.pack(">i", len(payload)) + payload)


def _sasl_plain(bootstrap: str, **more: Any) -> Dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-secret", "max.block.ms": MAX_BLOCK_MS,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200, **more}


def _expect_authentication_failure(producer: Producer, topic: str = "t") -> BaseException:
    """send() to a topic whose metadata cannot come: it fails with the SASL close, long before max.block.ms
    (a NoBrokersAvailableError after max.block.ms before the fix)."""
    start = time.monotonic()
    error: Optional[BaseException]
    try:  # as for a wrong password: the metadata wait of send() raises it, or the record's future holds it
        error = producer.send(topic, b"v").exception(WAIT_S)
    except AuthenticationError as e:
        error = e
    took = time.monotonic() - start
    assert error is not None, "the record was delivered?"
    assert isinstance(error, SaslAuthenticationFailedError), f"{type(error).__name__}: {error} after {took:.1f} s"
    assert isinstance(error, AuthenticationError)
    assert MESSAGE in str(error), str(error)
    return error


@pytest.fixture(params=["handshake", "authenticate"])
def closing_broker(request: pytest.FixtureRequest) -> Iterator[ClosingBroker]:
    broker = ClosingBroker(request.param)
    try:
        yield broker
    finally:
        broker.close()


def test_a_close_during_the_sasl_exchange_fails_send_at_once(closing_broker: ClosingBroker,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kproducer")
    with Producer(_sasl_plain(closing_broker.bootstrap)) as producer:
        error = _expect_authentication_failure(producer)
        assert closing_broker.bootstrap in str(error)
        assert "PLAIN" in str(error)
        # every later attempt says it again (the next connection closes the same way)
        before = closing_broker.connections
        second = _expect_authentication_failure(producer)
        assert MESSAGE in str(second)
        deadline = time.monotonic() + WAIT_S
        while closing_broker.connections <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert closing_broker.connections > before, "no new connection attempt after the failure"
        producer.close(5)
    expected = "SaslHandshake" if closing_broker.close_at == "handshake" else "SaslAuthenticate"
    assert expected in closing_broker.closed_at
    logged = [r for r in caplog.records if r.name.startswith("kproducer") and r.levelno >= logging.WARNING
              and MESSAGE in r.getMessage()]
    assert logged, "the close during SASL was not logged at WARNING or above"
    assert not any("alice-secret" in r.getMessage() for r in caplog.records)


def test_the_mock_closing_at_sasl_handshake_fails_send_with_the_cause() -> None:
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"],
                     users={"alice": "alice-secret"}) as cluster:
        cluster.create_topic("t", 1)
        cluster.drop_responses("SaslHandshake", 1000)
        with Producer(_sasl_plain(cluster.bootstrap_servers)) as producer:
            _expect_authentication_failure(producer)
            producer.close(5)


def test_a_queued_record_fails_when_a_reconnection_is_closed_during_sasl() -> None:
    """Metadata is known; the leader's connection is closed during SASL: the record queued for it fails with the
    cause (as Java fails the batches of a node whose authentication failed), not at delivery.timeout.ms."""
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"],
                     users={"alice": "alice-secret"}) as cluster:
        cluster.create_topic("t", 1)
        with Producer(_sasl_plain(cluster.bootstrap_servers, **{"delivery.timeout.ms": 120000})) as producer:
            producer.send("t", b"first").get(WAIT_S)
            cluster.drop_responses("SaslHandshake", 1000)
            cluster.drop_connections(1)
            future = producer.send("t", b"second")
            error = future.exception(WAIT_S)
            assert isinstance(error, SaslAuthenticationFailedError), repr(error)
            assert MESSAGE in str(error)
            producer.close(5)


@pytest.mark.broker
def test_tansu_with_authentication_and_plain_fails_send_at_once() -> None:
    """tansu 0.6 with --authentication closes the connection at a PLAIN login (it has no PLAIN)."""
    try:
        from tests.tansu import Tansu, tansu_binary

        tansu_binary()
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"tansu is not available: {e}")
    broker = Tansu(authentication=True).start()
    try:
        with Producer(_sasl_plain(broker.bootstrap)) as producer:
            _expect_authentication_failure(producer)
            producer.close(5)
    finally:
        broker.close()
