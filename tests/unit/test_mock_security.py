"""The mock broker's server-side security: certificates made at run time, the non-blocking TLS handshake
in the processor loop, the SASL gate (nothing but ApiVersions / SaslHandshake / SaslAuthenticate before
authentication), mechanisms, wrong credentials, KIP-368 session expiry and re-authentication, the
client settings the cluster hands out, and the mock-cluster command's security options."""
from __future__ import annotations

import argparse
import os
import socket
import ssl
import stat
import struct
import sys
import threading
from typing import Any, Dict, Iterator, Optional

import pytest

from kproducer.protocol.errors import (
    NO_ERROR,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)

pytest.importorskip("cryptography")

from kproducer.clock import FakeClock  # noqa: E402
from kproducer.mock import MockCluster  # noqa: E402
from kproducer.mock.certs import MissingDependencyError, make_certificates, server_context  # noqa: E402
from kproducer.mock.cli import add_arguments, build_cluster  # noqa: E402
from kproducer.mock.wire_client import WireClient  # noqa: E402
from kproducer.protocol.messages import API_VERSIONS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE  # noqa: E402
from kproducer.protocol.sasl import sasl_client, unsecured_jwt  # noqa: E402
from tests.mock_cli import ServeInBackground  # noqa: E402

PASSWORD = "alice-secret"
USERS = {"alice": PASSWORD, "bob": "bob-secret"}
API_VERSIONS_BODY = {"client_software_name": "t", "client_software_version": "1"}


def tls_context(ca_pem: str) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem)


def connect(cluster: MockCluster, tls: bool = False, broker_id: int = 1) -> WireClient:
    host, port = cluster.broker_address(broker_id)
    return WireClient(host, port, ssl_context=tls_context(cluster.ca_pem) if tls else None)


def metadata(c: WireClient) -> Dict[str, Any]:
    return c.request(METADATA, 12, {"topics": None})


def handshake(c: WireClient, mechanism: str, version: int = 1) -> Dict[str, Any]:
    return c.request(SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(c: WireClient, mechanism: str, user: str = "alice", password: str = PASSWORD,
                 version: int = 2, do_handshake: bool = True) -> Dict[str, Any]:
    """The whole SASL exchange with kproducer's own mechanism clients; the last SaslAuthenticate
    response (an error one if the broker refused)."""
    if do_handshake:
        assert handshake(c, mechanism)["error_code"] == NO_ERROR
    if mechanism == "OAUTHBEARER":
        client = sasl_client(mechanism, token=unsecured_jwt(user, 60))
    else:
        client = sasl_client(mechanism, username=user, password=password)
    token: Optional[bytes] = client.initial_response()
    response: Dict[str, Any] = {}
    while token is not None:
        response = c.request(SASL_AUTHENTICATE, version, {"auth_bytes": token})
        if response["error_code"]:
            return response
        token = client.evaluate_challenge(response["auth_bytes"])
    return response


@pytest.fixture
def sasl_cluster() -> Iterator[MockCluster]:
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", users=USERS) as c:
        c.create_topic("t", 1)
        yield c


# -------------------------------------------------------------------------------- certificates


def test_certificates_verify_for_localhost_and_127_0_0_1_only() -> None:
    certs = make_certificates()
    assert "BEGIN CERTIFICATE" in certs.ca_pem
    assert "PRIVATE KEY" not in repr(certs)
    server = server_context(certs)
    for name in ("localhost", "127.0.0.1"):
        assert _handshake_with(server, tls_context(certs.ca_pem), name) is None
    assert "mismatch" in str(_handshake_with(server, tls_context(certs.ca_pem), "example.com")).lower()
    other = make_certificates()
    assert "certificate verify failed" in str(_handshake_with(server, tls_context(other.ca_pem), "localhost"))


def _handshake_with(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> Optional[Exception]:
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    errors: list = []

    def serve() -> None:
        try:
            with server.wrap_socket(b, server_side=True):
                pass
        except (ssl.SSLError, OSError) as e:
            errors.append(e)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(a, server_hostname=name):
            return None
    except (ssl.SSLError, ssl.CertificateError) as e:
        return e
    finally:
        thread.join(5)
        a.close()
        b.close()


def test_a_missing_cryptography_package_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(MissingDependencyError, match="pip install cryptography"):
        MockCluster(1, security_protocol="SSL")


def test_no_key_material_is_left_on_disk(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with MockCluster(1, security_protocol="SASL_SSL", users=USERS):
        pass
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ TLS


def test_tls_requests_pipelined_are_all_answered() -> None:
    """Several requests in one TLS write: the broker must drain what the SSL object decrypted."""
    with MockCluster(1, security_protocol="SSL") as cluster, connect(cluster, tls=True) as c:
        frames = [c.encode(API_VERSIONS, 3, API_VERSIONS_BODY)[1] for _ in range(5)]
        frames.append(c.encode(METADATA, 12, {"topics": None})[1])
        c.send_raw(b"".join(frames))
        for _ in range(5):
            assert c.receive(API_VERSIONS, 3)[1]["error_code"] == NO_ERROR
        assert c.receive(METADATA, 12)[1]["brokers"][0]["node_id"] == 1
        assert isinstance(c.sock, ssl.SSLSocket) and c.sock.version() in ("TLSv1.2", "TLSv1.3")


def test_a_stalled_tls_handshake_does_not_block_other_connections() -> None:
    with MockCluster(1, security_protocol="SSL", num_processors=1) as cluster:
        host, port = cluster.broker_address(1)
        stalled = socket.create_connection((host, port), timeout=5)
        try:
            stalled.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then nothing
            with connect(cluster, tls=True) as c:
                assert metadata(c)["brokers"]
        finally:
            stalled.close()


def test_plaintext_client_to_the_tls_listener_is_closed() -> None:
    with MockCluster(1, security_protocol="SSL") as cluster, connect(cluster) as c:
        c.send(API_VERSIONS, 3, API_VERSIONS_BODY)
        assert c.is_closed_by_peer(5)
    assert cluster.connection_count_total == 1


def test_tls_client_to_a_plaintext_listener_fails() -> None:
    certs = make_certificates()
    with MockCluster(1) as cluster:
        host, port = cluster.broker_address(1)
        with pytest.raises((ssl.SSLError, OSError)):
            WireClient(host, port, ssl_context=tls_context(certs.ca_pem))


def test_mutual_tls_required(tmp_path: Any) -> None:
    with MockCluster(1, security_protocol="SSL", ssl_client_auth="required") as cluster:
        host, port = cluster.broker_address(1)
        with pytest.raises((ssl.SSLError, OSError, ConnectionError)):
            # TLS 1.3: the refusal may arrive only at the first read
            c = WireClient(host, port, ssl_context=tls_context(cluster.ca_pem))
            metadata(c)
        config = cluster.client_config()
        context = tls_context(cluster.ca_pem)
        key_path = tmp_path / "client.pem"
        key_path.write_text(config["ssl.keystore.key"] + config["ssl.keystore.certificate.chain"])
        context.load_cert_chain(str(key_path))
        with WireClient(host, port, ssl_context=context) as c:
            assert metadata(c)["brokers"]


def test_a_given_ssl_context_is_used() -> None:
    certs = make_certificates()
    with MockCluster(1, security_protocol="SSL", ssl_context=server_context(certs)) as cluster:
        with pytest.raises(RuntimeError, match="ssl_ca_pem"):
            _ = cluster.ca_pem
        host, port = cluster.broker_address(1)
        with WireClient(host, port, ssl_context=tls_context(certs.ca_pem)) as c:
            assert metadata(c)["brokers"]
    with MockCluster(1, security_protocol="SSL", ssl_context=server_context(certs), ssl_ca_pem=certs.ca_pem) as c2:
        assert c2.client_config()["ssl.truststore.certificates"] == certs.ca_pem


# ------------------------------------------------------------------------------------------ SASL


def test_requests_before_authentication_close_the_connection(sasl_cluster: MockCluster) -> None:
    with connect(sasl_cluster) as c:
        versions = c.request(API_VERSIONS, 3, API_VERSIONS_BODY)
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
        assert keys[SASL_HANDSHAKE.key] == (0, 1) and keys[SASL_AUTHENTICATE.key] == (0, 2)
        c.send(METADATA, 12, {"topics": None})
        assert c.is_closed_by_peer()
    with connect(sasl_cluster) as c:  # SaslAuthenticate without a handshake
        c.send(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0" + PASSWORD.encode()})
        assert c.is_closed_by_peer()
    with connect(sasl_cluster) as c:  # another API in the middle of the exchange
        assert handshake(c, "SCRAM-SHA-256")["error_code"] == NO_ERROR
        c.send(METADATA, 12, {"topics": None})
        assert c.is_closed_by_peer()
    assert sasl_cluster.request_counts["metadata"] == 0


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_each_mechanism_authenticates(sasl_cluster: MockCluster, mechanism: str) -> None:
    with connect(sasl_cluster) as c:
        response = authenticate(c, mechanism)
        assert response["error_code"] == NO_ERROR and response["session_lifetime_ms"] == 0
        assert metadata(c)["brokers"]
        # a SaslAuthenticate after success is refused, as Kafka does, without closing
        again = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b""})
        assert again["error_code"] == IllegalSaslStateError.code
        assert metadata(c)["brokers"]
    assert sasl_cluster.auth_stats["successes"] == 1


def test_sasl_over_tls() -> None:
    with MockCluster(1, security_protocol="SASL_SSL", sasl_mechanisms=["SCRAM-SHA-512"], users=USERS) as cluster:
        with connect(cluster, tls=True) as c:
            assert authenticate(c, "SCRAM-SHA-512", "bob", "bob-secret")["error_code"] == NO_ERROR
            assert metadata(c)["brokers"]


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes() -> None:
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["SCRAM-SHA-256", "PLAIN"],
                     users=USERS) as cluster, connect(cluster) as c:
        response = handshake(c, "GSSAPI")
        assert response == (
            {"error_code": UnsupportedSaslMechanismError.code, "mechanisms": ["SCRAM-SHA-256", "PLAIN"]}
        )
        assert c.is_closed_by_peer()
        assert cluster.auth_stats["failures"] == 1


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_answers_58_then_closes(sasl_cluster: MockCluster, mechanism: str) -> None:
    with connect(sasl_cluster) as c:
        response = authenticate(c, mechanism, password="wrong")
        assert response["error_code"] == SaslAuthenticationFailedError.code
        assert response["error_message"] == (
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")
        assert c.is_closed_by_peer()
    with connect(sasl_cluster) as c:  # an unknown user: the same answer
        assert authenticate(c, mechanism, user="mallory")["error_code"] == SaslAuthenticationFailedError.code
    assert sasl_cluster.auth_stats == {"attempts": 2, "successes": 0, "failures": 2, "reauthentications": 0,
                                       "expired_connections": 0}


def test_an_expired_oauth_token_is_refused(sasl_cluster: MockCluster) -> None:
    with connect(sasl_cluster) as c:
        assert handshake(c, "OAUTHBEARER")["error_code"] == NO_ERROR
        client = sasl_client("OAUTHBEARER", token=unsecured_jwt("alice", -10))
        first = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": client.initial_response()})
        assert first["error_code"] == NO_ERROR and b"invalid_token" in first["auth_bytes"]
        second = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"})
        assert second["error_code"] == SaslAuthenticationFailedError.code
        assert c.is_closed_by_peer()


def test_sasl_handshake_v0_is_refused_with_a_reason(sasl_cluster: MockCluster) -> None:
    with connect(sasl_cluster) as c:
        assert handshake(c, "PLAIN", version=0) == (
            {"error_code": UnsupportedSaslMechanismError.code, "mechanisms": []}
        )
        assert c.is_closed_by_peer()


def test_sasl_apis_on_a_listener_without_sasl() -> None:
    with MockCluster(1) as cluster, connect(cluster) as c:
        assert handshake(c, "PLAIN")["error_code"] == IllegalSaslStateError.code
        assert c.request(SASL_AUTHENTICATE, 1, {"auth_bytes": b""})["error_code"] == IllegalSaslStateError.code
        assert metadata(c)["brokers"]


def test_session_expiry_closes_the_connection_at_its_next_request() -> None:
    clock = FakeClock()
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", users=USERS, session_lifetime_ms=300,
                     clock=clock) as cluster:
        with connect(cluster) as c:
            response = authenticate(c, "PLAIN")
            assert response["session_lifetime_ms"] == 300
            clock.advance(299)
            assert metadata(c)["brokers"]
            clock.advance(1)
            c.send(METADATA, 12, {"topics": None})
            assert c.is_closed_by_peer()
        with connect(cluster) as c:  # v0 SaslAuthenticate carries no lifetime, the session still expires
            assert authenticate(c, "SCRAM-SHA-256", version=0).get("session_lifetime_ms", 0) == 0
            clock.advance(300)
            c.send(METADATA, 12, {"topics": None})
            assert c.is_closed_by_peer()
        assert cluster.auth_stats["expired_connections"] == 2


def test_reauthentication_renews_the_session_on_the_same_connection() -> None:
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", users=USERS, session_lifetime_ms=60_000) as cluster:
        with connect(cluster) as c:
            assert authenticate(c, "SCRAM-SHA-512")["error_code"] == NO_ERROR
            assert metadata(c)["brokers"]
            renewed = authenticate(c, "SCRAM-SHA-512")
            assert renewed["error_code"] == NO_ERROR and renewed["session_lifetime_ms"] == 60_000
            assert metadata(c)["brokers"]
        stats = cluster.auth_stats
        assert (stats["attempts"], stats["successes"], stats["reauthentications"]) == (2, 2, 1)
        with connect(cluster) as c:  # another user may not take over the connection
            assert authenticate(c, "PLAIN")["error_code"] == NO_ERROR
            response = authenticate(c, "PLAIN", user="bob", password="bob-secret")
            assert response["error_code"] == SaslAuthenticationFailedError.code
            assert "re-authentication" in response["error_message"]
            assert c.is_closed_by_peer()
        with connect(cluster) as c:  # nor another mechanism
            assert authenticate(c, "PLAIN")["error_code"] == NO_ERROR
            assert handshake(c, "SCRAM-SHA-256")["error_code"] == UnsupportedSaslMechanismError.code
            assert c.is_closed_by_peer()
        assert cluster.connection_count_total == 3


def test_an_expired_session_may_still_reauthenticate() -> None:
    clock = FakeClock()
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", users=USERS, session_lifetime_ms=200,
                     clock=clock) as cluster:
        with connect(cluster) as c:
            assert authenticate(c, "PLAIN")["error_code"] == NO_ERROR
            clock.advance(300)
            assert authenticate(c, "PLAIN")["error_code"] == NO_ERROR
            assert metadata(c)["brokers"]


def test_raw_frames_during_the_exchange_close_only_that_connection(sasl_cluster: MockCluster) -> None:
    with connect(sasl_cluster) as bad, connect(sasl_cluster) as good:
        assert handshake(bad, "PLAIN")["error_code"] == NO_ERROR
        raw = b"\0alice\0" + PASSWORD.encode()
        bad.send_raw(struct.pack(">i", len(raw)) + raw)  # SaslHandshake v0 style: not served
        assert bad.is_closed_by_peer()
        assert authenticate(good, "PLAIN")["error_code"] == NO_ERROR


# ------------------------------------------------------------------------------ client settings


def test_client_config_names_every_setting() -> None:
    users = {"alice": 'pa"ss\\word', "bob": "b"}
    with MockCluster(2, security_protocol="SASL_SSL", users=users) as cluster:
        config = cluster.client_config()
        assert config["bootstrap.servers"] == cluster.bootstrap_servers
        assert config["security.protocol"] == "SASL_SSL"
        assert config["ssl.truststore.type"] == "PEM"
        assert config["ssl.truststore.certificates"] == cluster.ca_pem
        assert config["sasl.mechanism"] == "PLAIN"
        assert config["sasl.jaas.config"] == (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
            'password="pa\\"ss\\\\word";')
        scram = cluster.client_config(user="bob", mechanism="SCRAM-SHA-256")
        assert scram["sasl.jaas.config"] == (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="b";')
        oauth = cluster.client_config(mechanism="OAUTHBEARER")
        assert oauth["sasl.jaas.config"] == (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="alice";')
        assert cluster.sasl_mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    with MockCluster(1) as plain:
        assert plain.client_config() == {"bootstrap.servers": plain.bootstrap_servers,
                                          "security.protocol": "PLAINTEXT"}
        with pytest.raises(RuntimeError):
            _ = plain.ca_pem


def test_invalid_security_options_are_refused() -> None:
    with pytest.raises(ValueError, match="security_protocol"):
        MockCluster(1, security_protocol="TLS")
    with pytest.raises(ValueError, match="SASL"):
        MockCluster(1, users=USERS)
    with pytest.raises(ValueError, match="mechanism"):
        MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["GSSAPI"])
    with pytest.raises(ValueError, match="ssl_client_auth"):
        MockCluster(1, security_protocol="SSL", ssl_client_auth="maybe")
    with pytest.raises(ValueError):
        MockCluster(1, security_protocol="SASL_PLAINTEXT", session_lifetime_ms=-1)


def test_connection_count_total_survives_broker_restarts() -> None:
    with MockCluster(2, security_protocol="SSL") as cluster:
        for broker_id in (1, 2):
            with connect(cluster, tls=True, broker_id=broker_id) as c:
                assert metadata(c)["brokers"]
        cluster.stop_broker(1)
        cluster.start_broker(1)
        with connect(cluster, tls=True) as c:
            assert metadata(c)["brokers"]
        assert cluster.connection_count_total == 3


def test_repr_of_the_security_settings_hides_passwords() -> None:
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", users=USERS) as cluster:
        assert PASSWORD not in repr(cluster._security)


# ---------------------------------------------------------------------------------------- CLI


def _parse(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("argv,protocol", [
    (["--tls"], "SSL"),
    (["--sasl-user", "alice:x"], "SASL_PLAINTEXT"),
    (["--tls", "--sasl-user", "alice:x", "--sasl-mechanism", "scram-sha-512"], "SASL_SSL"),
    ([], "PLAINTEXT"),
])
def test_cli_security_flags(argv: list, protocol: str) -> None:
    cluster = build_cluster(_parse(["--brokers", "1", *argv]))
    assert cluster.security_protocol == protocol
    if "--sasl-mechanism" in argv:
        assert cluster.sasl_mechanisms == ["SCRAM-SHA-512"]


def test_cli_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPRODUCER_MOCK_SASL_PASSWORD", "from-env")
    with build_cluster(_parse(["--brokers", "1", "--sasl-user", "carol"])) as cluster:
        assert "from-env" in cluster.client_config()["sasl.jaas.config"]
    monkeypatch.delenv("KPRODUCER_MOCK_SASL_PASSWORD")
    with pytest.raises(SystemExit):
        _parse(["--sasl-user", "carol"])


def test_cli_prints_how_to_connect_but_never_the_password(tmp_path: Any) -> None:
    from kproducer.cli import read_properties

    ca_file = tmp_path / "ca.pem"
    props = tmp_path / "client.properties"
    secret = "Sup3r-s3cret"
    args = _parse(["--brokers", "1", "--tls", "--sasl-user", f"alice:{secret}", "--sasl-mechanism",
                   "SCRAM-SHA-256", "--ca-file", str(ca_file), "--client-config", str(props), "--topic", "t:1"])
    with ServeInBackground(args) as serving:
        text = serving.wait_for("topic t", timeout=10)
        assert secret not in text
        lines = text.splitlines()
        host, port = lines[0].split(":")
        assert "security.protocol=SASL_SSL" in lines
        assert f"client settings: {props}" in lines
        assert stat.S_IMODE(os.stat(props).st_mode) == 0o600
        settings = read_properties(str(props))
        assert settings["ssl.truststore.location"] == str(ca_file)
        assert settings["sasl.mechanism"] == "SCRAM-SHA-256"
        assert f'password="{secret}"' in settings["sasl.jaas.config"]
        with WireClient(host, int(port), ssl_context=tls_context(ca_file.read_text())) as c:
            assert authenticate(c, "SCRAM-SHA-256", password=secret)["error_code"] == NO_ERROR
            assert metadata(c)["topics"][0]["name"] == "t"
    assert serving.result == [0]
    assert ca_file.exists()  # files the user named are kept


def test_cli_removes_the_files_it_made(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    args = _parse(["--brokers", "1", "--tls"])
    with ServeInBackground(args) as serving:
        text = serving.wait_for("client settings", timeout=10)
        ca_line = next(line for line in text.splitlines() if line.startswith("CA certificate"))
        assert os.path.exists(ca_line.split(": ", 1)[1])
    assert list(tmp_path.iterdir()) == []
