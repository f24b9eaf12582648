"""kproducer's TLS and SASL against Apache Kafka's own server side (the session's ``apache_kafka`` cluster:
SSL with client certificates requested, SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER, StandardAuthorizer on): hostname verification, an unknown CA, mutual TLS (the certificate's
principal needs its own ACL), every SASL mechanism on both SASL listeners, Kafka's unsecured JWS tokens, a
wrong password, and KIP-368 re-authentication on a cluster of our own with ``connections.max.reauth.ms``.
Everything produced is read back with kafka-python over PLAINTEXT."""
from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    SaslAuthenticationFailedError,
    SslAuthenticationError,
    TopicAuthorizationFailedError,
)
from tests.conftest import AK_USERS, start_apache_kafka
from tests.readback import consume, fetch_batches
from tests.tansu import topic_name

pytestmark = pytest.mark.apache_kafka

SASL_CASES: List[Tuple[str, str]] = [(listener, mech) for listener in ("SASL_PLAINTEXT", "SASL_SSL")
                                     for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")]
#: partition of the shared SASL topic each case writes to (so each reads back exactly its own records)
OAUTH_PARTITION = len(SASL_CASES)
N = 300


def unsecured_jws(sub: str, lifetime_s: float = 3600.0) -> str:
    """Kafka's unsecured JWS token, made here by hand (not with kproducer's helper): header {"alg":"none"},
    claims sub/iat/exp, base64url without padding, empty signature."""
    def b64(obj: Dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    now = time.time()
    return f'{b64({"alg": "none"})}.{b64({"sub": sub, "iat": int(now), "exp": int(now + lifetime_s)})}.'


def produce(conf: Dict[str, Any], topic: str, n: int, tag: str, partition: Any = None) -> None:
    with Producer(conf, linger_ms=5) as p:
        futures = [p.send(topic, f"{tag}-{i}".encode(), partition=partition) for i in range(n)]
        p.flush(60)
        for f in futures:
            f.get(0)


def assert_read_back(kafka: Any, topic: str, partitions: List[int], tag: str, n: int) -> None:
    got = consume(kafka.bootstrap_servers, topic, partitions, expected=n)
    assert sorted(m.value for m in got) == sorted(f"{tag}-{i}".encode() for i in range(n))


def refused_fast(conf: Dict[str, Any], topic: str) -> BaseException:
    """Send one record with max.block.ms = 60 s; the error it fails with, which must come well before."""
    started = time.monotonic()
    with Producer(conf, max_block_ms=60000, delivery_timeout_ms=120000, request_timeout_ms=30000) as p:
        with pytest.raises(Exception) as info:
            p.send(topic, b"refused").get(90)
    elapsed = time.monotonic() - started
    assert elapsed < 55, f"the error came only after {elapsed:.1f} s: {info.value!r}"
    return info.value


# ------------------------------------------------------------------------------------------------- TLS


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_tls_with_hostname_verification(apache_kafka: Any, ak_topic: Callable[..., str], host: str) -> None:
    topic = ak_topic(partitions=3)
    conf = apache_kafka.producer_config("SSL")
    conf["bootstrap.servers"] = conf["bootstrap.servers"].replace("127.0.0.1", host)
    with Producer(conf) as p:
        assert p.config.ssl_endpoint_identification_algorithm == "https"  # the default: host names checked
    produce(conf, topic, N, "tls")
    assert_read_back(apache_kafka, topic, [0, 1, 2], "tls", N)


def test_tls_with_a_ca_that_did_not_sign_the_broker_fails_fast(apache_kafka: Any, ak_topic: Callable[..., str],
                                                                tmp_path: Any) -> None:
    from kproducer.mock.certs import make_ca

    other = tmp_path / "other-ca.pem"
    other.write_text(make_ca("some other CA").cert_pem)
    conf = apache_kafka.producer_config("SSL")
    conf["ssl.truststore.location"] = str(other)
    error = refused_fast(conf, ak_topic(partitions=1))
    assert isinstance(error, SslAuthenticationError), repr(error)
    assert "certificate verify failed" in str(error).lower() or "unknown ca" in str(error).lower(), str(error)


def test_mutual_tls_the_certificate_is_the_principal(apache_kafka: Any, ak_topic: Callable[..., str]) -> None:
    cn = f"kproducer-mtls-{uuid.uuid4().hex[:8]}"
    cert, key = apache_kafka.client_certificate(cn)
    topic = ak_topic(partitions=2)
    conf = apache_kafka.producer_config("SSL")
    conf.update({"ssl.certificate.location": cert, "ssl.key.location": key})
    # without a client certificate the principal is ANONYMOUS (a super user here); with it, CN=...: refused
    error = refused_fast(conf, topic)
    assert isinstance(error, (TopicAuthorizationFailedError, ClusterAuthorizationFailedError)), repr(error)
    apache_kafka.add_acl(f"User:CN={cn},O=kproducer mock cluster", "Write", topic=topic)
    produce(conf, topic, N, "mtls")
    assert_read_back(apache_kafka, topic, [0, 1], "mtls", N)


# ------------------------------------------------------------------------------------------------ SASL


@pytest.fixture(scope="module")
def alice_topic(apache_kafka: Any) -> str:
    """A topic alice may write to: Write only (Kafka 4.x: Write implies Describe, and Write on any topic
    allows an idempotent producer's InitProducerId, KIP-679; no IdempotentWrite on the cluster)."""
    name = topic_name("alice")
    apache_kafka.create_topic(name, len(SASL_CASES) + 1, 3, None)
    apache_kafka.add_acl("User:alice", "Write", topic=name)
    return name


@pytest.fixture
def no_secret_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="kproducer")
    yield
    for r in caplog.records:
        text = r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "")
        for secret in AK_USERS.values():
            assert secret not in text, f"a password in a log line of {r.name}"


@pytest.mark.usefixtures("no_secret_logged")
@pytest.mark.parametrize("listener,mechanism", SASL_CASES, ids=[f"{a}-{b}" for a, b in SASL_CASES])
def test_sasl_as_alice(apache_kafka: Any, alice_topic: str, listener: str, mechanism: str) -> None:
    partition = SASL_CASES.index((listener, mechanism))
    conf = apache_kafka.producer_config(listener, mechanism, user="alice")
    conf["enable.idempotence"] = True
    produce(conf, alice_topic, N, f"{listener}-{mechanism}", partition=partition)
    assert_read_back(apache_kafka, alice_topic, [partition], f"{listener}-{mechanism}", N)
    # the batches are idempotent ones: the broker granted alice a producer id with Write on a topic alone
    leader = apache_kafka.leader(alice_topic, partition)
    batches, _ = fetch_batches(f"127.0.0.1:{apache_kafka.port(leader)}", alice_topic, partition)
    assert batches and all(b.producer_id >= 0 for b in batches)


def test_oauthbearer_unsecured_token_as_alice(apache_kafka: Any, alice_topic: str) -> None:
    calls: List[float] = []

    def provider() -> Tuple[str, float]:
        calls.append(time.time())
        return unsecured_jws("alice"), time.time() + 3600

    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        conf = apache_kafka.producer_config(listener)
        for k in ("sasl.username", "sasl.password"):
            conf.pop(k)
        conf.update({"sasl.mechanism": "OAUTHBEARER", "sasl.oauth.token.provider": provider})
        produce(conf, alice_topic, N, f"oauth-{listener}", partition=OAUTH_PARTITION)
    assert len(calls) >= 2  # asked at each authentication
    got = consume(apache_kafka.bootstrap_servers, alice_topic, [OAUTH_PARTITION], expected=2 * N)
    assert sorted(m.value for m in got) == sorted(f"oauth-{lst}-{i}".encode() for lst in ("SASL_PLAINTEXT", "SASL_SSL")
                                                  for i in range(N))


def test_oauthbearer_the_token_subject_is_the_principal(apache_kafka: Any, alice_topic: str) -> None:
    """The same token for another subject, without an ACL: authenticated, then refused by the authorizer."""
    conf = apache_kafka.producer_config("SASL_PLAINTEXT")
    for k in ("sasl.username", "sasl.password"):
        conf.pop(k)
    conf.update({"sasl.mechanism": "OAUTHBEARER",
                 "sasl.oauth.token.provider": lambda: (unsecured_jws("mallory"), time.time() + 3600)})
    error = refused_fast(conf, alice_topic)
    assert isinstance(error, (TopicAuthorizationFailedError, ClusterAuthorizationFailedError)), repr(error)


WRONG_PASSWORD_CASES = [("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN"),
                        ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512")]


def assert_refused_on_the_first_connection(conf: Dict[str, Any], topic: str, mechanism: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """A wrong password fails fast with SaslAuthenticationFailedError, from the broker's answer on the first
    connection. Apache Kafka holds the SaslAuthenticate error back for connection.failed.authentication.delay.ms,
    then sends it with the close right behind it; over TLS both arrive in one read, and the answer must not
    be lost to the close (it was: "connection closed by the broker", reconnected and retried for seconds)."""
    caplog.set_level(logging.DEBUG, logger="kproducer.network")
    error = refused_fast(conf, topic)
    assert isinstance(error, SaslAuthenticationFailedError), repr(error)
    assert isinstance(error, AuthenticationError)
    assert mechanism in str(error) and "not-alices-password" not in str(error)
    lost = [r.getMessage() for r in caplog.records if "connection closed by the broker" in r.getMessage()]
    assert not lost, lost
    failures = [r.getMessage() for r in caplog.records if r.getMessage().startswith("authentication with node")]
    assert failures and "SASL_AUTHENTICATION_FAILED" in failures[0]


@pytest.mark.parametrize("listener,mechanism", WRONG_PASSWORD_CASES, ids=[f"{a}-{b}" for a, b in WRONG_PASSWORD_CASES])
def test_wrong_password_fails_fast_with_a_typed_error(apache_kafka: Any, alice_topic: str, listener: str,
                                                      mechanism: str, caplog: pytest.LogCaptureFixture) -> None:
    conf = apache_kafka.producer_config(listener, mechanism, user="alice", password="not-alices-password")
    assert_refused_on_the_first_connection(conf, alice_topic, mechanism, caplog)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_over_tls_on_the_mock_cluster_too(mechanism: str, caplog: pytest.LogCaptureFixture) -> None:
    """The same scenario on the MockCluster, which now answers a failed authentication as Kafka does."""
    pytest.importorskip("cryptography")
    from kproducer.mock import MockCluster

    with MockCluster(1, security_protocol="SASL_SSL", sasl_mechanisms=[mechanism], users=AK_USERS) as cluster:
        cluster.create_topic("t", partitions=1)
        conf = cluster.client_config(user="alice")
        conf.pop("sasl.jaas.config")
        conf.update({"sasl.username": "alice", "sasl.password": "not-alices-password"})
        assert_refused_on_the_first_connection(conf, "t", mechanism, caplog)


# --------------------------------------------------------------------------------- KIP-368 re-authentication


@pytest.fixture(scope="module")
def reauth_kafka() -> Iterator[Any]:
    """One broker whose SASL sessions last 3 s (connections.max.reauth.ms); no authorizer."""
    kafka = start_apache_kafka(brokers=1, listeners=("PLAINTEXT", "SASL_PLAINTEXT"), users=AK_USERS,
                               broker_config={"connections.max.reauth.ms": "3000"})
    try:
        yield kafka
    finally:
        kafka.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
def test_sasl_sessions_are_renewed_on_the_same_connection(reauth_kafka: Any, mechanism: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    topic = f"reauth-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    reauth_kafka.create_topic(topic, 2, 1, None)
    conf = reauth_kafka.producer_config("SASL_PLAINTEXT", mechanism, user="alice")
    tokens: List[float] = []
    if mechanism == "OAUTHBEARER":
        for k in ("sasl.username", "sasl.password"):
            conf.pop(k)

        def provider() -> Tuple[str, float]:
            tokens.append(time.time())
            return unsecured_jws("alice"), time.time() + 3600

        conf["sasl.oauth.token.provider"] = provider
    caplog.set_level(logging.DEBUG, logger="kproducer.network")

    def count(text: str) -> int:
        return sum(1 for r in caplog.records if text in r.getMessage())

    sent = 0
    with Producer(conf, linger_ms=1) as p:
        for part in range(2):  # connected to the leader (and the bootstrap connection) before we count
            p.send(topic, b"warm-up", partition=part).get(30)
        sent += 2
        connects = count("connecting to node")
        assert count("authentication done (session lifetime 3000 ms)") >= 1, "the broker set no session lifetime"
        deadline = time.monotonic() + 45
        # keep producing past the session lifetime until the leader's connection was renewed twice
        while count("re-authenticating") < 2 and time.monotonic() < deadline:
            futures = [p.send(topic, b"v%d" % (sent + i)) for i in range(20)]
            for f in futures:
                f.get(30)
            sent += 20
            time.sleep(0.05)
        assert count("re-authenticating") >= 2, "no re-authentication within 45 s"
        # renewed in place: the broker closed nothing and kproducer opened no connection meanwhile
        assert count("connecting to node") == connects
        assert count("disconnected from node") == 0, [r.getMessage() for r in caplog.records
                                                      if "disconnected" in r.getMessage()]
    if mechanism == "OAUTHBEARER":
        assert len(tokens) >= 3  # a fresh token at every (re-)authentication
    got = consume(reauth_kafka.bootstrap_servers, topic, [0, 1], expected=sent)
    assert len(got) == sent
