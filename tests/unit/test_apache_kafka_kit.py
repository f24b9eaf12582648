"""kproducer.testing.ApacheKafka without starting Java: argument checks and the errors that say what to install."""
from __future__ import annotations

import os
from typing import Any

import pytest

from kproducer.testing import ApacheKafka, ApacheKafkaUnavailable
from kproducer.testing import apache_kafka as ak


def test_missing_java_says_what_to_install(monkeypatch: Any) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(ak.shutil, "which", lambda name: None)
    with pytest.raises(ApacheKafkaUnavailable, match="Java 17.*install a JDK"):
        ApacheKafka().start()


def test_missing_maven_without_cached_jars(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setenv("KPRODUCER_KAFKA_CACHE", str(tmp_path))
    monkeypatch.setattr(ak.shutil, "which", lambda name: None)
    with pytest.raises(ApacheKafkaUnavailable, match="Maven \\('mvn'\\) is not on PATH.*KAFKA_HOME"):
        ak.kafka_libs("4.1.0")


def test_cached_jars_need_no_maven(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setenv("KPRODUCER_KAFKA_CACHE", str(tmp_path))
    libs = tmp_path / "apache-kafka-9.9.9" / "libs"
    libs.mkdir(parents=True)
    (libs / ".complete").write_text("")
    (libs / "kafka-clients-9.9.9.jar").write_text("")
    monkeypatch.setattr(ak.shutil, "which", lambda name: None)
    assert ak.kafka_libs("9.9.9") == str(libs)
    assert ak._version_of(str(libs)) == "9.9.9"


def test_kafka_home_without_jars(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path))
    with pytest.raises(ApacheKafkaUnavailable, match="no libs/kafka_2.13"):
        ak.kafka_libs()
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "kafka_2.13-4.0.0.jar").write_text("")
    assert ak.kafka_libs() == os.path.join(str(tmp_path), "libs")


def test_pom_names_the_broker_and_the_tools_of_the_version() -> None:
    pom = ak._pom("4.2.0")
    assert "<artifactId>kafka_2.13</artifactId><version>4.2.0</version>" in pom
    assert "<artifactId>kafka-tools</artifactId><version>4.2.0</version>" in pom


@pytest.mark.parametrize("kwargs, message", [
    ({"brokers": 0}, "brokers must be 1 or more"),
    ({"listeners": ("PLAINTEXT", "HTTP")}, "unknown listener 'HTTP'"),
    ({"ssl_client_auth": "maybe"}, "ssl_client_auth must be"),
])
def test_bad_arguments(kwargs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ApacheKafka(**kwargs)


def test_listener_not_started_is_named() -> None:
    kafka = ApacheKafka(listeners=("PLAINTEXT", "SSL"))
    assert kafka.listeners == ("PLAINTEXT", "SSL")
    with pytest.raises(ValueError, match="no SASL_SSL listener.*PLAINTEXT, SSL"):
        kafka.bootstrap_servers_for("SASL_SSL")


@pytest.mark.needs("cryptography")
def test_configuration_of_every_listener_and_user(tmp_path: Any) -> None:
    """The files a start writes: each broker serves every listener, PLAIN knows every user, the CA signed the
    brokers' keystore, the admin user is always there, and no password sits in a world-readable file."""
    kafka = ApacheKafka(brokers=2, listeners=("SASL_SSL", "PLAINTEXT", "SSL"), users={"alice": 'a"b'},
                        authorizer=True, broker_config={"connections.max.reauth.ms": "5000"},
                        controller_config={"broker.session.timeout.ms": "3000"})
    kafka.directory = str(tmp_path)
    kafka._configure()
    assert kafka.listeners == ("PLAINTEXT", "SSL", "SASL_SSL")
    props = kafka._brokers[2].properties
    assert props["listeners"].count("127.0.0.1") == 3 and props["node.id"] == "2"
    assert props["connections.max.reauth.ms"] == "5000" and "broker.session.timeout.ms" not in props
    assert kafka._controller is not None
    assert kafka._controller.properties["broker.session.timeout.ms"] == "3000"
    assert "connections.max.reauth.ms" not in kafka._controller.properties
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    jaas = props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert 'user_admin="admin-secret"' in jaas and 'user_alice="a\\"b"' in jaas
    assert os.stat(kafka._brokers[2].config_path).st_mode & 0o077 == 0
    with open(props["ssl.keystore.location"]) as f:
        keystore = f.read()
    assert "PRIVATE KEY" in keystore and "CERTIFICATE" in keystore
    assert kafka.ssl_ca_location.endswith("ca.pem")
    assert kafka.bootstrap_servers_for("SSL").count(",") == 1
    conf = kafka.producer_config("SASL_SSL", mechanism="SCRAM-SHA-512", user="alice")
    assert conf["sasl.password"] == 'a"b' and conf["ssl.truststore.location"] == kafka.ssl_ca_location


def test_start_tries_new_ports_when_a_port_was_taken_and_only_then(monkeypatch: Any, tmp_path: Any) -> None:
    """A free port is only free when asked: if a broker then fails to bind it, the start begins again on new
    ports (another failure is raised at once)."""
    from kproducer.testing import ApacheKafkaError

    monkeypatch.setattr(ak, "java_binary", lambda: "java")
    monkeypatch.setattr(ak, "kafka_libs", lambda version=None: str(tmp_path))
    monkeypatch.setattr(ApacheKafka, "_format", lambda self: None)
    monkeypatch.setattr(ApacheKafka, "_launch", lambda self, node: None)
    failures = ["java.net.BindException: Address already in use"]
    ports_seen = []

    def wait(self: ApacheKafka, ids: Any, timeout: float) -> None:
        ports_seen.append(dict(self._ports))
        if failures:
            raise ApacheKafkaError(f"node 1 exited with 1\n{failures.pop(0)}")

    monkeypatch.setattr(ApacheKafka, "wait_for_brokers", wait)
    kafka = ApacheKafka(brokers=2).start()
    try:
        assert len(ports_seen) == 2 and os.path.isdir(kafka.directory)
        assert kafka.bootstrap_servers.count("127.0.0.1") == 2
    finally:
        kafka.close()
    failures[:] = ["java.lang.OutOfMemoryError"]
    ports_seen.clear()
    with pytest.raises(ApacheKafkaError, match="OutOfMemoryError"):
        ApacheKafka().start()
    assert len(ports_seen) == 1


@pytest.mark.needs("cryptography")
def test_start_tries_new_ports_when_two_listeners_got_the_same_port(monkeypatch: Any, tmp_path: Any) -> None:
    """Kafka refuses a node whose listeners share a port ("Each listener must have a different port"): a port
    race like a taken port, so the start begins again on new ports."""
    from kproducer.testing import ApacheKafkaError

    monkeypatch.setattr(ak, "java_binary", lambda: "java")
    monkeypatch.setattr(ak, "kafka_libs", lambda version=None: str(tmp_path))
    monkeypatch.setattr(ApacheKafka, "_format", lambda self: None)
    monkeypatch.setattr(ApacheKafka, "_launch", lambda self, node: None)
    failures = ["java.lang.IllegalArgumentException: requirement failed: Each listener must have a different "
                "port, listeners: PLAINTEXT://127.0.0.1:40001,SSL://127.0.0.1:40001"]
    attempts = []

    def wait(self: ApacheKafka, ids: Any, timeout: float) -> None:
        attempts.append(dict(self._ports))
        if failures:
            raise ApacheKafkaError(f"node 1 exited with 1\n{failures.pop(0)}")

    monkeypatch.setattr(ApacheKafka, "wait_for_brokers", wait)
    kafka = ApacheKafka(brokers=1, listeners=["PLAINTEXT", "SSL"]).start()
    kafka.close()
    assert len(attempts) == 2


def test_free_ports_are_distinct() -> None:
    """The cluster's ports are chosen while all of them are bound, so no two of them are the same port."""
    for _ in range(20):
        ports = ak.free_ports(12)
        assert len(set(ports)) == 12 and all(0 < p < 65536 for p in ports)


def test_cluster_id_never_starts_with_a_dash(monkeypatch: Any) -> None:
    """kafka-storage read an id starting with '-' (1 in 64) as an option and the start failed."""
    import uuid

    ids = iter([uuid.UUID(bytes=b"\xfb" + bytes(15)), uuid.UUID(bytes=bytes(16))])
    monkeypatch.setattr(ak.uuid, "uuid4", lambda: next(ids))
    first = ak._cluster_id()
    assert first == "AAAAAAAAAAAAAAAAAAAAAA" and len(first) == 22
    monkeypatch.undo()
    assert all(not ak._cluster_id().startswith("-") for _ in range(500))


def test_jvm_options_reach_every_node(monkeypatch: Any, tmp_path: Any) -> None:
    """jvm_options (e.g. Kafka 4.x's allowed OAuth URLs, a system property) go on every node's java command line,
    before the main class; listener-level settings are broker_config entries."""
    allowed = "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=http://127.0.0.1:1/jwks"
    commands = []

    class FakePopen:
        def __init__(self, cmd: Any, **kwargs: Any) -> None:
            commands.append(list(cmd))

    monkeypatch.setattr(ak, "java_binary", lambda: "java")
    monkeypatch.setattr(ak.subprocess, "Popen", FakePopen)
    kafka = ApacheKafka(listeners=("SASL_PLAINTEXT",), jvm_options=[allowed], broker_config={
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "x.Handler"})
    kafka.directory = str(tmp_path)
    kafka._configure()
    assert kafka._controller is not None
    for node in [kafka._controller, *kafka._brokers.values()]:
        kafka._launch(node)
    assert len(commands) == 2
    for cmd in commands:
        assert allowed in cmd and cmd.index(allowed) < cmd.index("kafka.Kafka")
    assert kafka._brokers[1].properties[
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"] == "x.Handler"
    assert ApacheKafka().jvm_options == ()
