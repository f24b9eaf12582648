"""Issue 30 on Apache Kafka itself: what a new user sees for a missing topic (item 2: the broker's answer,
not "or no broker is reachable") and for a security.protocol that does not match the listener (item 7)."""
from __future__ import annotations

import time
from typing import Any

import pytest

from kproducer import Producer
from kproducer.errors import (
    AuthenticationError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    SecurityProtocolMismatchError,
)

pytestmark = pytest.mark.apache_kafka


def test_a_missing_topic_names_the_brokers_answer(apache_kafka: Any) -> None:
    # the kit's brokers run with auto.create.topics.enable=false: Kafka answers UNKNOWN_TOPIC_OR_PARTITION
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers, max_block_ms=3000) as p:
        with pytest.raises(KafkaTimeoutError) as info:
            p.send("first-hour-missing", b"v").get(30)
    text = str(info.value)
    assert not isinstance(info.value, NoBrokersAvailableError)
    assert "no broker is reachable" not in text
    assert "answered UNKNOWN_TOPIC_OR_PARTITION" in text and "auto.create.topics.enable=false" in text, text
    ports = {str(apache_kafka.port(b)) for b in apache_kafka.broker_ids}
    assert any(f"(127.0.0.1:{port})" in text for port in ports), text


def test_sasl_plaintext_against_a_plaintext_listener(apache_kafka: Any) -> None:
    conf = apache_kafka.producer_config("SASL_PLAINTEXT", "PLAIN", "alice")
    conf["bootstrap.servers"] = apache_kafka.bootstrap_servers  # the PLAINTEXT listener
    conf["max.block.ms"] = 20000
    with Producer(conf) as p:
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as info:
            p.send("t", b"v").get(30)
        assert time.monotonic() - started < 15  # at the first answer, not after max.block.ms
    text = str(info.value)
    assert "the broker's listener does not speak SASL: check security.protocol" in text, text
    assert "alice-secret" not in text


def test_ssl_against_a_plaintext_listener(apache_kafka: Any) -> None:
    """Item 7's other half: TLS against a PLAINTEXT listener (a regression test; the text was right)."""
    conf = apache_kafka.producer_config("SSL")
    conf["bootstrap.servers"] = apache_kafka.bootstrap_servers
    conf["max.block.ms"] = 20000
    with Producer(conf) as p:
        with pytest.raises(SecurityProtocolMismatchError) as info:
            p.send("t", b"v").get(40)
    # (already so before issue 30: the broker closes the connection at the TLS ClientHello)
    text = str(info.value)
    assert "closed the connection during the TLS handshake" in text, text
    assert "if its listener is PLAINTEXT or SASL_PLAINTEXT, set security.protocol accordingly" in text, text
