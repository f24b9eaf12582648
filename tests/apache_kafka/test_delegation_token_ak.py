"""Delegation tokens (KIP-48) against Apache Kafka, issue 28 item 10.

A token is created with Kafka's own tool (DelegationTokenCommand, as user alice over SCRAM); kproducer then
authenticates with it as Java does: ``ScramLoginModule required username="<token id>" password="<HMAC>"
tokenauth="true";``, which sends the SCRAM extension ``tokenauth=true`` in the client-first message. Before the fix
kproducer dropped the option and the broker looked the token id up as a SCRAM user: refused. The records are read
back with kafka-python over PLAINTEXT. The authorizer is on: only User:alice, the token's owner, may write topics.

A cluster of its own (one broker): ``delegation.token.secret.key`` must be set on the brokers and the controller.
"""
from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Dict, Iterator, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import SaslAuthenticationFailedError
from tests.conftest import start_apache_kafka
from tests.readback import consume
from tests.tansu import topic_name

pytestmark = pytest.mark.apache_kafka

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
TOKEN_KEY = "kproducer-test-delegation-token-secret-key"
USERS = {"alice": "alice-secret"}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def kafka() -> Iterator[Any]:
    cluster = start_apache_kafka(brokers=1, listeners=("PLAINTEXT", "SASL_PLAINTEXT"), users=USERS, authorizer=True,
                                 broker_config={"delegation.token.secret.key": TOKEN_KEY},
                                 controller_config={"delegation.token.secret.key": TOKEN_KEY})
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def token(kafka: Any) -> Tuple[str, str]:
    """(token id, HMAC) of a delegation token of User:alice, made by Kafka's DelegationTokenCommand."""
    fd, path = tempfile.mkstemp(prefix="alice-", suffix=".properties", dir=kafka.directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                f'sasl.jaas.config={SCRAM} required username="alice" password="{USERS["alice"]}";\n')
    proc = kafka.run_tool("org.apache.kafka.tools.DelegationTokenCommand", "--bootstrap-server",
                          kafka.bootstrap_servers_for("SASL_PLAINTEXT"), "--command-config", path, "--create",
                          "--max-life-time-period", "-1", "--renewer-principal", "User:admin")
    match = re.search(r"^(\S+)\s+(\S+)\s+User:alice\s", proc.stdout, re.MULTILINE)
    assert match is not None, proc.stdout
    return match.group(1), match.group(2)


@pytest.fixture(scope="module")
def alice_may_write(kafka: Any) -> None:
    for operation in ("Write", "Describe"):
        kafka.add_acl("User:alice", operation, topic="*")


@pytest.fixture
def topic(kafka: Any, alice_may_write: None) -> str:
    name = topic_name("dt")
    kafka.create_topic(name, partitions=2, replication_factor=1)
    return name


def token_settings(kafka: Any, token_id: str, hmac: str, mechanism: str, tokenauth: bool = True) -> Dict[str, Any]:
    flag = ' tokenauth="true"' if tokenauth else ""
    return {"bootstrap.servers": kafka.bootstrap_servers_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "max.block.ms": 30000,
            "sasl.jaas.config": f'{SCRAM} required username="{token_id}" password="{hmac}"{flag};'}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_produce_with_a_delegation_token(kafka: Any, token: Tuple[str, str], topic: str, mechanism: str) -> None:
    values = [f"{mechanism}-{i}".encode() for i in range(50)]
    with Producer(token_settings(kafka, *token, mechanism)) as producer:
        futures = [producer.send(topic, v, key=b"k%d" % (i % 4)) for i, v in enumerate(values)]
        for f in futures:
            f.get(WAIT_S)
        producer.close(10)
    got = consume(kafka.bootstrap_servers, topic, [0, 1], expected=len(values))
    assert sorted(m.value for m in got) == sorted(values)


def test_without_tokenauth_the_token_id_is_an_unknown_user(kafka: Any, token: Tuple[str, str], topic: str) -> None:
    """What kproducer did before: the broker looks the token id up as a SCRAM user and refuses the login."""
    with Producer(token_settings(kafka, *token, "SCRAM-SHA-256", tokenauth=False)) as producer:
        with pytest.raises(SaslAuthenticationFailedError, match="SCRAM-SHA-256"):
            producer.send(topic, b"v").get(WAIT_S)
        producer.close(5)


def test_a_wrong_hmac_is_refused(kafka: Any, token: Tuple[str, str], topic: str) -> None:
    token_id, hmac = token
    with Producer(token_settings(kafka, token_id, "AAAA" + hmac[4:], "SCRAM-SHA-512")) as producer:
        with pytest.raises(SaslAuthenticationFailedError) as info:
            producer.send(topic, b"v").get(WAIT_S)
        assert hmac not in str(info.value)
        producer.close(5)
