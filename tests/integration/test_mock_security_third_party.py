"""Third-party clients against the MockCluster's secured listeners: an independent check of the mock's
TLS and SASL server side. kafka-python and confluent-kafka (librdkafka) each produce and consume back
byte-exact over SSL, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER with unsecured
tokens) and SASL_SSL; a wrong password fails for both; a plaintext client to the TLS port fails.
Certificates are made at run time by the mock (``cryptography``)."""
from __future__ import annotations

import os
import ssl
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

pytest.importorskip("cryptography")

from kproducer.mock import MockCluster  # noqa: E402
from kproducer.protocol.sasl import unsecured_jwt  # noqa: E402
from tests.third_party_clients import (  # noqa: E402
    Message,
    client_or_skip,
    consume_confluent,
    consume_kafka_python,
    expected_reads,
    produce_confluent,
    produce_kafka_python,
)

PASSWORD = "Pa55-w0rd \"quoted\" \\ back"
USERS = {"alice": PASSWORD, "bob": "bobs-secret"}
TS = 1_700_000_000_000

CASES: List[Tuple[str, Optional[str]]] = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_PLAINTEXT", "OAUTHBEARER"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "OAUTHBEARER"),
]
IDS = [f"{p}-{m}" if m else p for p, m in CASES]


def messages(count: int = 60) -> List[Message]:
    special: List[Message] = [
        (b"k-first", b"v-first", [("h1", b"x")], TS),
        (None, b"no key", [], TS + 1),
        (b"tombstone", None, [], TS + 2),
        (b"binary", bytes(range(256)) * 4, [("dup", b"1"), ("dup", b"2")], TS + 3),
        (b"big", os.urandom(120_000), [], TS + 4),  # many TLS records in one frame
    ]
    return special + [(b"key-%d" % i, b"value-%d" % i, [("i", b"%d" % i)], TS + 100 + i) for i in range(count)]


def secured_cluster(protocol: str, mechanism: Optional[str]) -> MockCluster:
    if mechanism is None:
        return MockCluster(2, security_protocol=protocol)
    return MockCluster(2, security_protocol=protocol, sasl_mechanisms=[mechanism], users=USERS)


@pytest.fixture
def ca_file(tmp_path: Any) -> Callable[[MockCluster], str]:
    def write(cluster: MockCluster) -> str:
        path = tmp_path / "ca.pem"
        path.write_text(cluster.ca_pem)
        return str(path)
    return write


# ----------------------------------------------------------------------------------- kafka-python


def kafka_python_token_provider(subject: str) -> Any:
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider  # type: ignore[import-untyped]
    except ImportError:  # older kafka-python
        from kafka.sasl.oauth import AbstractTokenProvider  # type: ignore[import-untyped,no-redef]

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return unsecured_jwt(subject, 3600)

    return Provider()


def kafka_python_config(cluster: MockCluster, mechanism: Optional[str], cafile: Optional[str],
                        password: str = PASSWORD) -> Dict[str, Any]:
    config: Dict[str, Any] = {"bootstrap_servers": cluster.bootstrap_servers,
                              "security_protocol": cluster.security_protocol}
    if cafile is not None:
        config["ssl_cafile"] = cafile  # certificate and host name (IP SAN 127.0.0.1) are verified
    if mechanism is not None:
        config["sasl_mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            config["sasl_oauth_token_provider"] = kafka_python_token_provider("alice")
        else:
            config.update(sasl_plain_username="alice", sasl_plain_password=password)
    return config


# -------------------------------------------------------------------------------- confluent-kafka


def confluent_config(cluster: MockCluster, mechanism: Optional[str], cafile: Optional[str],
                     password: str = PASSWORD) -> Dict[str, Any]:
    config: Dict[str, Any] = {"bootstrap.servers": cluster.bootstrap_servers,
                              "security.protocol": cluster.security_protocol}
    if cafile is not None:
        config["ssl.ca.location"] = cafile
        config["ssl.endpoint.identification.algorithm"] = "https"
    if mechanism is not None:
        config["sasl.mechanisms"] = mechanism
        if mechanism == "OAUTHBEARER":
            config["enable.sasl.oauthbearer.unsecure.jwt"] = True
            config["sasl.oauthbearer.config"] = "principal=alice"
        else:
            config.update({"sasl.username": "alice", "sasl.password": password})
    return config


CLIENTS = {
    "kafka-python": (kafka_python_config, produce_kafka_python, consume_kafka_python),
    "confluent": (confluent_config, produce_confluent, consume_confluent),
}


# ---------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("protocol,mechanism", CASES, ids=IDS)
def test_produce_and_consume_byte_exact(client: str, protocol: str, mechanism: Optional[str],
                                        ca_file: Callable[[MockCluster], str]) -> None:
    client_or_skip(client)
    make_config, produce, consume = CLIENTS[client]
    with secured_cluster(protocol, mechanism) as cluster:
        cluster.create_topic("t", 4)
        cafile = ca_file(cluster) if protocol.endswith("SSL") else None
        config = make_config(cluster, mechanism, cafile)
        msgs = messages()
        positions = produce(config, "t", msgs)
        assert len(set(positions)) == len(msgs)
        got = consume(config, "t", 4, len(msgs))
        assert sorted(got) == expected_reads(msgs, positions)
        stored = {(p, r.offset): r for p in range(4) for r in cluster.records("t", p)}
        for (k, v, _h, _ts), pos in zip(msgs, positions):
            assert (stored[pos].key, stored[pos].value) == (k, v)
        stats = cluster.auth_stats
        if mechanism is not None:
            assert stats["successes"] >= 2 and stats["failures"] == 0
        else:
            assert stats["attempts"] == 0


def test_confluent_renews_sessions_on_the_same_connection() -> None:
    """KIP-368 with librdkafka (which re-authenticates since 2.2): sessions renewed, nothing closed."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["SCRAM-SHA-256"], users=USERS,
                     session_lifetime_ms=1500) as cluster:
        cluster.create_topic("t", 1)
        config = confluent_config(cluster, "SCRAM-SHA-256", None)
        producer = confluent_kafka.Producer({**config, "linger.ms": 1})
        delivered: List[Any] = []
        deadline = time.monotonic() + 30
        i = 0
        while cluster.auth_stats["reauthentications"] < 1 and time.monotonic() < deadline:
            producer.produce("t", b"v%d" % i, on_delivery=lambda err, msg: delivered.append(err))
            i += 1
            producer.flush(10)
            time.sleep(0.1)
        assert producer.flush(10) == 0
        assert cluster.auth_stats["reauthentications"] >= 1
        assert cluster.auth_stats["expired_connections"] == 0
        assert delivered and all(err is None for err in delivered)
        assert len(cluster.records("t", 0)) == i


def test_kafka_python_renews_sessions_on_the_same_connection() -> None:
    """KIP-368 with kafka-python (re-authenticates before session_lifetime_ms from SaslAuthenticate v1+)."""
    pytest.importorskip("kafka")
    from kafka import KafkaProducer

    with MockCluster(1, security_protocol="SASL_SSL", sasl_mechanisms=["SCRAM-SHA-512"], users=USERS,
                     session_lifetime_ms=1500) as cluster:
        cluster.create_topic("t", 1)
        context = ssl.create_default_context(cadata=cluster.ca_pem)
        config = kafka_python_config(cluster, "SCRAM-SHA-512", None)
        producer = KafkaProducer(ssl_context=context, linger_ms=1, **config)
        try:
            sent = 0
            deadline = time.monotonic() + 30
            while cluster.auth_stats["reauthentications"] < 1 and time.monotonic() < deadline:
                producer.send("t", b"v%d" % sent).get(timeout=10)
                sent += 1
                time.sleep(0.1)
            producer.send("t", b"last").get(timeout=10)
            sent += 1
        finally:
            producer.close(5)
        assert cluster.auth_stats["reauthentications"] >= 1
        assert cluster.auth_stats["expired_connections"] == 0
        assert len(cluster.records("t", 0)) == sent


# --------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_fails_for_kafka_python(mechanism: str) -> None:
    pytest.importorskip("kafka")
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    with secured_cluster("SASL_PLAINTEXT", mechanism) as cluster:
        cluster.create_topic("t", 1)
        config = kafka_python_config(cluster, mechanism, None, password="wrong")
        with pytest.raises(KafkaError):
            producer = KafkaProducer(max_block_ms=3000, request_timeout_ms=3000, bootstrap_timeout_ms=3000,
                                     **config)
            try:
                producer.send("t", b"never").get(timeout=5)
            finally:
                producer.close(1)
        assert cluster.auth_stats["failures"] >= 1
        assert cluster.auth_stats["successes"] == 0
        assert cluster.records("t", 0) == []
        # (Whether kafka-python logs the SaslAuthenticate error itself depends on timing: the mock, as Apache
        # Kafka, holds the answer back 100 ms and sends it with the end of the stream right behind it, and
        # kafka-python drops an answer that arrives in the same read as the end of the stream, as it does
        # against Apache Kafka on a busy machine. That the answer comes before the close is checked with
        # kproducer, which reads it: tests/apache_kafka/test_security_ak.py::test_wrong_password_over_tls_on_the_mock_cluster_too.)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_fails_for_confluent(mechanism: str, ca_file: Callable[[MockCluster], str]) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with secured_cluster("SASL_SSL", mechanism) as cluster:
        cluster.create_topic("t", 1)
        cafile = ca_file(cluster)
        errors: List[Any] = []
        config = confluent_config(cluster, mechanism, cafile, password="wrong")
        producer = confluent_kafka.Producer({**config, "error_cb": errors.append, "message.timeout.ms": 1000})
        producer.produce("t", b"never")
        deadline = time.monotonic() + 15
        while not any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors) \
                and time.monotonic() < deadline:
            producer.poll(0.1)
        producer.flush(5)
        auth_errors = [e for e in errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION]
        assert auth_errors, errors
        assert "invalid credentials" in auth_errors[0].str()
        assert cluster.auth_stats["failures"] >= 1
        assert cluster.auth_stats["successes"] == 0
        assert cluster.records("t", 0) == []


def test_unsupported_mechanism_is_refused_for_confluent() -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["SCRAM-SHA-512"], users=USERS) as c:
        errors: List[Any] = []
        config = confluent_config(c, "PLAIN", None)
        producer = confluent_kafka.Producer({**config, "error_cb": errors.append})
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            producer.poll(0.1)
        assert errors and any("SCRAM-SHA-512" in e.str() for e in errors), errors
        assert c.auth_stats["failures"] >= 1


def test_plaintext_clients_to_the_tls_port_fail() -> None:
    pytest.importorskip("kafka")
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    with MockCluster(1, security_protocol="SSL") as cluster:
        cluster.create_topic("t", 1)
        with pytest.raises(KafkaError):
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=2000,
                                     request_timeout_ms=2000, bootstrap_timeout_ms=2000)
            try:
                producer.send("t", b"never").get(timeout=3)
            finally:
                producer.close(1)
        errors: List[Any] = []
        producer2 = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                              "error_cb": errors.append, "message.timeout.ms": 1000})
        producer2.produce("t", b"never")
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            producer2.poll(0.1)
        assert producer2.flush(5) == 0  # the message timed out
        assert errors
        assert cluster.records("t", 0) == []
        assert cluster.connection_count_total >= 2


def test_kafka_python_with_an_ssl_context_and_mutual_tls(tmp_path: Any) -> None:
    pytest.importorskip("kafka")
    with MockCluster(1, security_protocol="SSL", ssl_client_auth="required") as cluster:
        cluster.create_topic("t", 1)
        cert, key = cluster.issue_client_certificate("producer-1")
        (tmp_path / "client.pem").write_text(cert)
        (tmp_path / "client.key").write_text(key)
        context = ssl.create_default_context(cadata=cluster.ca_pem)
        context.load_cert_chain(str(tmp_path / "client.pem"), str(tmp_path / "client.key"))
        config = {"bootstrap_servers": cluster.bootstrap_servers, "security_protocol": "SSL",
                  "ssl_context": context}
        msgs = messages(5)
        positions = produce_kafka_python(config, "t", msgs)
        assert sorted(consume_kafka_python(config, "t", 1, len(msgs))) == expected_reads(msgs, positions)
