"""SASL in the NetworkClient, on the scripted transport and the fake clock: the exchange after
ApiVersions, every mechanism, failures that are not retried in a loop, batches failed at once, and
KIP-368 re-authentication on the same connection before the session runs out."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import pytest

from kproducer.errors import SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from kproducer.network.channel_security import ChannelSecurity
from kproducer.network.connection_states import ConnectionState
from kproducer.protocol import messages as m
from kproducer.protocol.errors import AuthenticationError
from kproducer.protocol.sasl import SaslServer, sasl_client, sasl_server, unsecured_jwt
from tests.unit.scripted import Harness, SentRequest

USERS = {"alice": "alice-secret"}


class SaslBroker:
    """SASL handlers for the scripted brokers: one server-side mechanism per connection."""

    def __init__(self, h: Harness, enabled: List[str], users: Mapping[str, str] = USERS,
                 session_lifetime_ms: int = 0) -> None:
        self.enabled = enabled
        self.users = dict(users)
        self.session_lifetime_ms = session_lifetime_ms
        self.servers: Dict[int, SaslServer] = {}
        self.authenticated: List[int] = []
        h.selector.handlers[m.SASL_HANDSHAKE.key] = self.handshake
        h.selector.handlers[m.SASL_AUTHENTICATE.key] = self.authenticate

    def handshake(self, req: SentRequest) -> Dict[str, Any]:
        mech = req.body["mechanism"]
        if mech not in self.enabled:
            return {"error_code": 33, "mechanisms": self.enabled}
        self.servers[req.node_id] = sasl_server(mech, users=self.users)
        return {"error_code": 0, "mechanisms": self.enabled}

    def authenticate(self, req: SentRequest) -> Dict[str, Any]:
        server = self.servers.get(req.node_id)
        if server is None:
            return {"error_code": 34, "error_message": "no handshake", "auth_bytes": b"", "session_lifetime_ms": 0}
        try:
            challenge = server.evaluate_response(req.body["auth_bytes"])
        except AuthenticationError as e:
            return {"error_code": 58, "error_message": str(e), "auth_bytes": b"", "session_lifetime_ms": 0}
        if server.complete:
            self.authenticated.append(req.node_id)
        return {"error_code": 0, "error_message": None, "auth_bytes": challenge,
                "session_lifetime_ms": self.session_lifetime_ms if server.complete else 0}


def secured(h: Harness, mechanism: str, password: str = "alice-secret", token: Optional[str] = None) -> None:
    def factory(host: str) -> Any:
        if mechanism == "OAUTHBEARER":
            return sasl_client(mechanism, token=token or unsecured_jwt("alice"))
        return sasl_client(mechanism, username="alice", password=password)

    h.client.security = ChannelSecurity(sasl_mechanism=mechanism, sasl_client_factory=factory)


def apis_on(h: Harness, node_id: int) -> List[str]:
    return [r.api.name for r in h.selector.sent() if r.node_id == node_id]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_each_mechanism_authenticates_after_api_versions_and_records_flow(mechanism: str) -> None:
    h = Harness()
    broker = SaslBroker(h, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
    secured(h, mechanism)
    h.boot("t")
    fut = h.send("t", b"v1")
    h.run_until(fut.done, what="the record's acknowledgement")
    assert fut.get(0).offset == 0
    bootstrap = apis_on(h, -1)
    rounds = 2 if mechanism.startswith("SCRAM") else 1
    assert bootstrap[:2 + rounds] == ["ApiVersions", "SaslHandshake"] + ["SaslAuthenticate"] * rounds
    assert bootstrap[2 + rounds] == "Metadata"
    assert set(broker.authenticated) >= {-1, 1}  # the bootstrap connection and the leader's


def test_wrong_password_fails_fast_is_not_retried_in_a_loop_and_fails_waiters() -> None:
    h = Harness(reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000)
    SaslBroker(h, ["PLAIN"])
    secured(h, "PLAIN", password="wrong")
    seen = h.metadata.auth_failures
    h.metadata.request_update()
    h.run_until(lambda: h.metadata.auth_failures > seen, what="the authentication failure")
    err = h.metadata.authentication_error_since(seen)
    assert isinstance(err, SaslAuthenticationFailedError)
    assert "wrong" not in str(err) and "alice-secret" not in str(err)
    assert "broker1:9092" in str(err)
    assert h.client.states.state(-1) == ConnectionState.DISCONNECTED
    # time stands still: however often the sender runs, no new connection before the backoff
    attempts = len(h.selector.connect_attempts)
    h.run(50)
    assert len(h.selector.connect_attempts) == attempts
    # the backoff grows with each failed attempt (exponential, capped at reconnect.backoff.max.ms)
    times: List[float] = []
    for _ in range(6):
        before = len(h.selector.connect_attempts)
        h.advance(1000)
        h.run_until(lambda before=before: len(h.selector.connect_attempts) > before, what="the next attempt")
        times.append(h.selector.connect_attempts[-1][0])
        h.run(20)
    assert len(h.selector.connect_attempts) <= attempts + 6 + 1
    assert "wrong credentials" not in h.client.describe_connection_errors()
    assert "SASL" in h.client.describe_connection_errors()


def test_unsupported_mechanism_names_the_enabled_ones() -> None:
    h = Harness()
    SaslBroker(h, ["SCRAM-SHA-512"])
    secured(h, "PLAIN")
    seen = h.metadata.auth_failures
    h.metadata.request_update()
    h.run_until(lambda: h.metadata.auth_failures > seen, what="the failure")
    err = h.metadata.authentication_error_since(seen)
    assert isinstance(err, UnsupportedSaslMechanismError)
    assert "SCRAM-SHA-512" in str(err) and "sasl.mechanism" in str(err)


def test_an_authentication_failure_fails_the_queued_batches_of_that_broker() -> None:
    h = Harness()
    broker = SaslBroker(h, ["PLAIN"])
    secured(h, "PLAIN")
    h.boot("t")
    fut = h.send("t", b"first")
    h.run_until(fut.done, what="the first record")
    # the broker's users change; the connection drops; the next records cannot be delivered
    broker.users["alice"] = "rotated"
    h.selector.kill_connection(1)
    h.run(3)
    futs = [h.send("t", b"v%d" % i) for i in range(3)]
    for _ in range(50):  # past the reconnect backoff, in steps (time stands still inside run_until)
        if all(f.done() for f in futs):
            break
        h.advance(100)
        h.run(5)
    h.run_until(lambda: all(f.done() for f in futs), what="the batches to fail")
    for f in futs:
        with pytest.raises(SaslAuthenticationFailedError):
            f.get(0)
    assert h.sender.authentication_failures >= 1


def test_reauthenticates_on_the_same_connection_before_the_session_expires() -> None:
    h = Harness()
    broker = SaslBroker(h, ["SCRAM-SHA-256"], session_lifetime_ms=10_000)
    secured(h, "SCRAM-SHA-256")
    h.boot("t")
    fut = h.send("t", b"a")
    h.run_until(fut.done, what="the first record")
    connects = len(h.selector.connect_attempts)
    handshakes = len([r for r in h.selector.sent(m.SASL_HANDSHAKE) if r.node_id == 1])
    # the session would end at 10 s: re-authentication happens between 8.5 s and 9.5 s
    h.advance(8_400)
    h.run(5)
    assert len([r for r in h.selector.sent(m.SASL_HANDSHAKE) if r.node_id == 1]) == handshakes
    h.advance(1_200)
    h.run_until(lambda: len([r for r in h.selector.sent(m.SASL_HANDSHAKE) if r.node_id == 1]) > handshakes,
                what="the re-authentication")
    fut2 = h.send("t", b"b")
    h.run_until(fut2.done, what="a record after re-authentication")
    assert fut2.get(0).offset == 1
    assert len(h.selector.connect_attempts) == connects  # the same connection
    assert broker.authenticated.count(1) >= 2
    # no request other than SASL went out between the handshake and its success
    sent = [r.api.name for r in h.selector.sent() if r.node_id == 1]
    i = len(sent) - 1 - sent[::-1].index("SaslHandshake")
    assert sent[i + 1:i + 3] == ["SaslAuthenticate", "SaslAuthenticate"]
