"""TLS (and failing SASL) against a server side nobody in this project wrote: the tansu broker behind Debian's
stunnel4 as the TLS terminator (tests/stunnel.py says why tansu cannot serve TLS itself).

First the fixture is proven with independent clients (Python's ssl module, confluent-kafka, kafka-python);
then kproducer: 10,000 records over TLS read back exactly by kafka-python over TLS; the three spellings of
the trust store; and the failures, each fast and named: another CA, a hostname mismatch (and delivery with
hostname checking off), plaintext to the TLS port, TLS to the plaintext port, and SASL logins that tansu
refuses.
"""
from __future__ import annotations

import socket
import ssl
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import KafkaError
from tests.readback import consume
from tests.stunnel import STUNNEL_MISSING, TlsTansu, stunnel_binary
from tests.tansu import Tansu, topic_name

pytestmark = [
    pytest.mark.broker,
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

# only to catch a hang: every failure below is expected within a few seconds (max.block.ms is 60 s)
FAST = 15.0
PASSWORD = "tansu-Pa55word-never-logged"


# --------------------------------------------------------------------------------------------
# fixtures


def _need_stunnel() -> None:
    """Skip the test when the TLS server side (stunnel4) or the certificate maker (trustme) is missing."""
    if stunnel_binary() is None:
        pytest.skip(STUNNEL_MISSING)
    pytest.importorskip("trustme", reason="trustme makes the test certificates: pip install trustme")


@pytest.fixture(scope="module")
def tls() -> Iterator[TlsTansu]:
    """tansu behind stunnel; the server certificate is for "localhost" and 127.0.0.1."""
    _need_stunnel()
    with TlsTansu() as broker:
        yield broker


@pytest.fixture(scope="module")
def tls_localhost_only() -> Iterator[TlsTansu]:
    """tansu behind stunnel; the server certificate is for "localhost" only (not for 127.0.0.1)."""
    _need_stunnel()
    with TlsTansu(names=("localhost",)) as broker:
        yield broker


@pytest.fixture(scope="module")
def sasl_tansu() -> Iterator[Tansu]:
    """tansu with --authentication: every SCRAM login ends in e=unknown-user, OAUTHBEARER in error 58."""
    broker = Tansu(authentication=True).start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def sasl_tls() -> Iterator[TlsTansu]:
    """tansu with --authentication behind stunnel (SASL_SSL)."""
    _need_stunnel()
    with TlsTansu(authentication=True) as broker:
        yield broker


def new_topic(broker: TlsTansu, partitions: int = 3, prefix: str = "tls") -> str:
    name = topic_name(prefix)
    broker.create_topic(name, partitions)
    return name


def kafka_python_tls(ca_file: str, check_hostname: bool = True) -> Dict[str, Any]:
    return {"security_protocol": "SSL", "ssl_cafile": ca_file, "ssl_check_hostname": check_hostname}


def expect_fast_failure(action: Callable[[], Any], kind: type) -> Tuple[BaseException, float]:
    """Run ``action``; it must raise ``kind`` (within FAST seconds). Returns the error and the time taken."""
    start = time.monotonic()
    with pytest.raises(kind) as info:
        action()
    took = time.monotonic() - start
    assert took < FAST, f"took {took:.1f} s: {info.value!r}"
    return info.value, took


# --------------------------------------------------------------------------------------------
# the fixture itself, with independent clients


def _handshake(port: int, ca_file: str, server_hostname: str) -> str:
    ctx = ssl.create_default_context(cafile=ca_file)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_hostname) as tls_sock:
            return str(tls_sock.version())


def test_fixture_stunnel_presents_a_certificate_that_verifies(tls: TlsTansu, tls_localhost_only: TlsTansu) -> None:
    assert _handshake(tls.tls_port, tls.certs.ca_file, "127.0.0.1").startswith("TLSv1.")
    assert _handshake(tls.tls_port, tls.certs.ca_file, "localhost").startswith("TLSv1.")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(tls.tls_port, tls.certs.other_ca_file, "127.0.0.1")
    # the localhost-only certificate: fine by name, refused by IP address
    assert _handshake(tls_localhost_only.tls_port, tls_localhost_only.certs.ca_file, "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        _handshake(tls_localhost_only.tls_port, tls_localhost_only.certs.ca_file, "127.0.0.1")


def test_fixture_metadata_sends_clients_to_the_tls_port(tls: TlsTansu) -> None:
    """tansu advertises stunnel's port, so clients that bootstrap over TLS stay on TLS."""
    from kafka import KafkaConsumer  # type: ignore[import-untyped]

    topic = new_topic(tls, 1)
    consumer = KafkaConsumer(bootstrap_servers=tls.bootstrap, group_id=None, request_timeout_ms=15000,
                             **kafka_python_tls(tls.certs.ca_file))
    try:
        assert consumer.partitions_for_topic(topic) == {0}
        brokers = consumer._client.cluster.brokers()
        assert {(b.host, b.port) for b in brokers} == {("127.0.0.1", tls.tls_port)}
    finally:
        consumer.close()


def test_fixture_confluent_kafka_produces_over_tls_and_kafka_python_reads_back(tls: TlsTansu) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = new_topic(tls, 2)
    n = 500
    errors: List[Any] = []
    p = confluent_kafka.Producer({"bootstrap.servers": tls.bootstrap, "security.protocol": "SSL",
                                  "ssl.ca.location": tls.certs.ca_file, "linger.ms": 5,
                                  "message.timeout.ms": 30000})
    for i in range(n):
        p.produce(topic, b"confluent-%d" % i, partition=i % 2,
                  on_delivery=lambda err, msg: errors.append(err) if err is not None else None)
    assert p.flush(30) == 0
    assert errors == []
    got = consume(tls.bootstrap, topic, [0, 1], n, timeout=30, **kafka_python_tls(tls.certs.ca_file))
    assert sorted(m.value for m in got) == sorted(b"confluent-%d" % i for i in range(n))


def test_fixture_kafka_python_produces_over_tls_and_confluent_kafka_reads_back(tls: TlsTansu) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from kafka import KafkaProducer  # type: ignore[import-untyped]

    topic = new_topic(tls, 2)
    n = 500
    p = KafkaProducer(bootstrap_servers=tls.bootstrap, linger_ms=5, max_in_flight_requests_per_connection=1,
                      **kafka_python_tls(tls.certs.ca_file))
    try:
        futures = [p.send(topic, b"kafka-python-%d" % i, partition=i % 2) for i in range(n)]
        p.flush(30)
        assert all(f.get(0).offset >= 0 for f in futures)
    finally:
        p.close()
    c = confluent_kafka.Consumer({"bootstrap.servers": tls.bootstrap, "security.protocol": "SSL",
                                  "ssl.ca.location": tls.certs.ca_file, "group.id": "tls-readback",
                                  "enable.auto.commit": False})
    values: List[bytes] = []
    try:
        c.assign([confluent_kafka.TopicPartition(topic, part, confluent_kafka.OFFSET_BEGINNING)
                  for part in (0, 1)])
        deadline = time.monotonic() + 30
        while len(values) < n and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        c.close()
    assert sorted(values) == sorted(b"kafka-python-%d" % i for i in range(n))


# --------------------------------------------------------------------------------------------
# kproducer over TLS: delivery


def test_kproducer_delivers_10k_records_over_tls_read_back_exactly(tls: TlsTansu) -> None:
    topic = new_topic(tls, 3)
    n = 10_000
    with Producer(bootstrap_servers=tls.bootstrap, security_protocol="SSL", ssl_cafile=tls.certs.ca_file,
                  linger_ms=5) as p:
        futures = [p.send(topic, b"tls-value-%d" % i, key=b"key-%d" % (i % 37)) for i in range(n)]
        p.flush(60)
        sent = {(md.partition, md.offset): (b"key-%d" % (i % 37), b"tls-value-%d" % i)
                for i, md in enumerate(f.get(0) for f in futures)}
    assert len(sent) == n, "two records were given the same partition and offset"
    got = consume(tls.bootstrap, topic, range(3), n, timeout=60, **kafka_python_tls(tls.certs.ca_file))
    stored = {(m.partition, m.offset): (m.key, m.value) for m in got}
    assert len(stored) == len(got) == n
    assert stored == sent


@pytest.mark.parametrize("spelling", ["java", "librdkafka"])
def test_kproducer_trust_store_spellings(tls: TlsTansu, spelling: str) -> None:
    settings: Dict[str, Any] = {"bootstrap.servers": tls.bootstrap, "security.protocol": "SSL"}
    if spelling == "java":
        settings.update({"ssl.truststore.location": tls.certs.ca_file, "ssl.truststore.type": "PEM"})
    else:
        settings["ssl.ca.location"] = tls.certs.ca_file
    topic = new_topic(tls, 1)
    n = 100
    with Producer(settings) as p:
        futures = [p.send(topic, b"%s-%d" % (spelling.encode(), i)) for i in range(n)]
        p.flush(30)
        offsets = [f.get(0).offset for f in futures]
    assert offsets == list(range(n))
    got = consume(tls.bootstrap, topic, [0], n, timeout=30, **kafka_python_tls(tls.certs.ca_file))
    assert [m.value for m in got] == [b"%s-%d" % (spelling.encode(), i) for i in range(n)]


# --------------------------------------------------------------------------------------------
# kproducer over TLS: failures, fast and named


def _ssl_auth_error() -> type:
    from kproducer.errors import SslAuthenticationError

    return SslAuthenticationError


def test_another_ca_fails_fast_naming_the_broker_and_openssl_reason(tls: TlsTansu) -> None:
    from kproducer.errors import SecurityProtocolMismatchError

    topic = new_topic(tls, 1)
    with Producer(bootstrap_servers=tls.bootstrap, security_protocol="SSL",
                  ssl_cafile=tls.certs.other_ca_file) as p:
        err, _ = expect_fast_failure(lambda: p.send(topic, b"v").get(timeout=30), _ssl_auth_error())
    text = str(err)
    assert tls.bootstrap in text, text  # 127.0.0.1:<stunnel port>
    assert "certificate verify failed" in text, text
    assert not isinstance(err, SecurityProtocolMismatchError), "a CA problem is not a protocol mismatch"


def test_another_ca_partitions_for_and_flush_fail_fast_with_the_same_error(tls: TlsTansu) -> None:
    topic = new_topic(tls, 1)
    kind = _ssl_auth_error()
    cfg = dict(bootstrap_servers=tls.bootstrap, security_protocol="SSL", ssl_cafile=tls.certs.other_ca_file)
    with Producer(**cfg) as p:
        err, _ = expect_fast_failure(lambda: p.partitions_for(topic), kind)
        assert "certificate verify failed" in str(err)
    with Producer(**cfg) as p:
        def send_then_flush() -> None:
            for i in range(3):
                try:
                    p.send(topic, b"v%d" % i)
                except kind:
                    pass  # send() may fail already in its metadata wait; flush() must fail too
            p.flush(30)

        err, _ = expect_fast_failure(send_then_flush, kind)
        assert "certificate verify failed" in str(err)


def test_hostname_mismatch_fails_fast(tls_localhost_only: TlsTansu) -> None:
    broker = tls_localhost_only
    topic = new_topic(broker, 1)
    with Producer(bootstrap_servers=broker.bootstrap, security_protocol="SSL", ssl_cafile=broker.certs.ca_file) as p:
        err, _ = expect_fast_failure(lambda: p.send(topic, b"v").get(timeout=30), _ssl_auth_error())
    text = str(err)
    assert "ip address mismatch" in text.lower() or "hostname mismatch" in text.lower(), text
    assert broker.bootstrap in text, text


def test_hostname_checking_off_delivers_to_a_certificate_for_another_name(tls_localhost_only: TlsTansu) -> None:
    broker = tls_localhost_only
    topic = new_topic(broker, 1)
    n = 100
    with Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
                   "ssl.ca.location": broker.certs.ca_file, "ssl.endpoint.identification.algorithm": ""}) as p:
        futures = [p.send(topic, b"no-hostname-check-%d" % i) for i in range(n)]
        p.flush(30)
        assert [f.get(0).offset for f in futures] == list(range(n))
    got = consume(broker.bootstrap, topic, [0], n, timeout=30,
                  **kafka_python_tls(broker.certs.ca_file, check_hostname=False))
    assert [m.value for m in got] == [b"no-hostname-check-%d" % i for i in range(n)]


def test_plaintext_to_the_tls_port_names_security_protocol(tls: TlsTansu) -> None:
    """stunnel answers a plaintext Kafka request with a TCP reset and no TLS alert ("wrong version number" in
    its log): the client sees its first request (ApiVersions) cut off before any answer."""
    topic = new_topic(tls, 1)
    with Producer(bootstrap_servers=tls.bootstrap) as p:
        err, _ = expect_fast_failure(lambda: p.send(topic, b"v").get(timeout=30), KafkaError)
    assert "security.protocol" in str(err), f"{type(err).__name__}: {err}"


def test_tls_to_the_plaintext_port_names_security_protocol(tls: TlsTansu) -> None:
    """tansu reads the ClientHello as the 4-byte size of a ~370 MB Kafka frame and waits for the rest: it never
    answers and never closes, so only the client's connection setup timeout can end the handshake."""
    topic = new_topic(tls, 1)
    with Producer(bootstrap_servers=tls.plaintext_bootstrap, security_protocol="SSL",
                  ssl_cafile=tls.certs.ca_file, socket_connection_setup_timeout_ms=3000) as p:
        err, _ = expect_fast_failure(lambda: p.send(topic, b"v").get(timeout=30), KafkaError)
    assert "security.protocol" in str(err), f"{type(err).__name__}: {err}"


# --------------------------------------------------------------------------------------------
# SASL against tansu --authentication: every login fails there (tests/stunnel.py); the client must say so,
# and must not carry on producing (tansu would let it: it treats a finished-but-failed exchange as a login)


def _jaas(username: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{username}" ' \
           f'password="{password}";'


@pytest.mark.parametrize("protocol,mechanism", [("SASL_PLAINTEXT", "SCRAM-SHA-256"),
                                                ("SASL_SSL", "SCRAM-SHA-512")])
def test_scram_login_refused_by_tansu_fails_fast(request: pytest.FixtureRequest, protocol: str,
                                                 mechanism: str) -> None:
    """tansu ends the exchange with the server-final message "e=unknown-user" and SaslAuthenticate
    error_code 0: the SCRAM client must read that as a failed login."""
    from kproducer.errors import SaslAuthenticationFailedError

    settings: Dict[str, Any] = {"security.protocol": protocol, "sasl.mechanism": mechanism,
                                "sasl.jaas.config": _jaas("alice", PASSWORD)}
    if protocol == "SASL_SSL":
        sasl_tls: TlsTansu = request.getfixturevalue("sasl_tls")
        settings.update({"bootstrap.servers": sasl_tls.bootstrap, "ssl.ca.location": sasl_tls.certs.ca_file})
    else:
        settings["bootstrap.servers"] = request.getfixturevalue("sasl_tansu").bootstrap
    with Producer(settings) as p:
        err, _ = expect_fast_failure(lambda: p.send("never-created", b"v").get(timeout=30),
                                     SaslAuthenticationFailedError)
    text = str(err)
    assert "unknown-user" in text, text
    assert PASSWORD not in text and PASSWORD not in repr(err)


def test_oauthbearer_login_refused_by_tansu_fails_fast(sasl_tansu: Tansu) -> None:
    """tansu answers an OAUTHBEARER SaslAuthenticate with error_code 58 (SASL_AUTHENTICATION_FAILED)."""
    from kproducer.errors import SaslAuthenticationFailedError
    from kproducer.protocol.sasl import unsecured_jwt

    settings: Dict[str, Any] = {
        "bootstrap.servers": sasl_tansu.bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": lambda: (unsecured_jwt("alice", 3600), time.time() + 3600),
    }
    with Producer(settings) as p:
        expect_fast_failure(lambda: p.send("never-created", b"v").get(timeout=30), SaslAuthenticationFailedError)
