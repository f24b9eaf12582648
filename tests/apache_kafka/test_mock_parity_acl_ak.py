"""The same ACL and max.message.bytes scenarios against the MockCluster and Apache Kafka 4.1, checking the
same client outcome on both: the error class kproducer raises, that it comes at once (the broker's answer,
not max.block.ms / delivery.timeout.ms), and that the records sent once the ACL is there are delivered
(read back with kafka-python).

Each scenario uses a principal of its own: a mutual-TLS client certificate with a fresh CN
(``User:CN=<cn>,O=kproducer mock cluster`` on both sides), so ACLs other tests add on the shared Apache
Kafka cluster cannot change the outcome. The Apache Kafka side is the session ``apache_kafka`` cluster
(StandardAuthorizer, ANONYMOUS and admin super users) and is marked ``apache_kafka``; the mock side runs
everywhere (a MockCluster with ``authorizer=True`` and the same super users).
"""
from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

import pytest

from kproducer import Producer
from kproducer.errors import (
    ClusterAuthorizationFailedError,
    MessageTooLargeError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from kproducer.testing import MockCluster
from tests.conftest import AK_USERS
from tests.readback import consume
from tests.tansu import topic_name

SUPER_USERS = ("User:ANONYMOUS", "User:admin")
USERS = dict(AK_USERS, admin="admin-secret")
#: an answer from the broker comes well before max.block.ms (60 s)
AT_ONCE_S = 50.0
PRODUCER = {"max_block_ms": 60000, "delivery_timeout_ms": 120000, "request_timeout_ms": 30000}


class Side:
    """One cluster under test, the same calls for both: ``listener`` is SSL (mutual TLS) or SASL_PLAINTEXT."""

    name = ""

    def config(self, listener: str, user: Optional[str] = None, cert: Optional[Tuple[str, str]] = None
               ) -> Dict[str, Any]:
        raise NotImplementedError

    def certificate(self, cn: str) -> Tuple[str, str]:
        """A client certificate (file, key file) for ``User:CN=<cn>,O=kproducer mock cluster``."""
        raise NotImplementedError

    def create_topic(self, listener: str, partitions: int, config: Optional[Dict[str, str]] = None) -> str:
        raise NotImplementedError

    def add_acl(self, listener: str, principal: str, operation: str, **resource: Any) -> None:
        raise NotImplementedError

    def read(self, listener: str, topic: str, partitions: List[int], expected: int,
             isolation_level: str = "read_uncommitted") -> List[Any]:
        raise NotImplementedError

    def identity(self) -> Tuple[str, Dict[str, Any]]:
        """A fresh mutual-TLS principal and the producer settings that authenticate as it."""
        cn = f"kproducer-parity-{uuid.uuid4().hex[:8]}"
        return f"User:CN={cn},O=kproducer mock cluster", self.config("SSL", cert=self.certificate(cn))


class AkSide(Side):
    name = "apache_kafka"

    def __init__(self, kafka: Any) -> None:
        self.kafka = kafka

    def config(self, listener: str, user: Optional[str] = None, cert: Optional[Tuple[str, str]] = None
               ) -> Dict[str, Any]:
        conf: Dict[str, Any] = self.kafka.producer_config(listener, "PLAIN", user=user or "admin")
        if cert is not None:
            conf.update({"ssl.certificate.location": cert[0], "ssl.key.location": cert[1]})
        return conf

    def certificate(self, cn: str) -> Tuple[str, str]:
        cert: Tuple[str, str] = self.kafka.client_certificate(cn)
        return cert

    def create_topic(self, listener: str, partitions: int, config: Optional[Dict[str, str]] = None) -> str:
        name = topic_name("parity")
        self.kafka.create_topic(name, partitions, 3, config)
        return name

    def add_acl(self, listener: str, principal: str, operation: str, **resource: Any) -> None:
        self.kafka.add_acl(principal, operation, **resource)

    def read(self, listener: str, topic: str, partitions: List[int], expected: int,
             isolation_level: str = "read_uncommitted") -> List[Any]:
        return consume(self.kafka.bootstrap_servers, topic, partitions, expected, isolation_level=isolation_level)


class MockSide(Side):
    name = "mock"

    def __init__(self, tmp_path: Any) -> None:
        self.tmp_path = tmp_path
        self.clusters: Dict[str, MockCluster] = {}

    def cluster(self, listener: str) -> MockCluster:
        if listener not in self.clusters:
            if listener == "SSL":
                cluster = MockCluster(3, security_protocol="SSL", ssl_client_auth="requested", authorizer=True,
                                      super_users=SUPER_USERS)
            else:
                cluster = MockCluster(3, security_protocol=listener, sasl_mechanisms=["PLAIN"], users=USERS,
                                      authorizer=True, super_users=SUPER_USERS)
            self.clusters[listener] = cluster.start()
        return self.clusters[listener]

    def close(self) -> None:
        for cluster in self.clusters.values():
            cluster.close()

    def _file(self, text: str, suffix: str) -> str:
        path = self.tmp_path / f"{uuid.uuid4().hex[:8]}{suffix}"
        path.write_text(text)
        return str(path)

    def ca_file(self) -> str:
        return self._file(self.cluster("SSL").ca_pem, "-ca.pem")

    def config(self, listener: str, user: Optional[str] = None, cert: Optional[Tuple[str, str]] = None
               ) -> Dict[str, Any]:
        cluster = self.cluster(listener)
        conf: Dict[str, Any] = {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": listener}
        if listener == "SSL":
            conf["ssl.truststore.location"] = self.ca_file()
        else:
            conf.update({"sasl.mechanism": "PLAIN", "sasl.username": user or "admin",
                         "sasl.password": USERS[user or "admin"]})
        if cert is not None:
            conf.update({"ssl.certificate.location": cert[0], "ssl.key.location": cert[1]})
        return conf

    def certificate(self, cn: str) -> Tuple[str, str]:
        cert, key = self.cluster("SSL").issue_client_certificate(cn)
        return self._file(cert, ".crt"), self._file(key, ".key")

    def create_topic(self, listener: str, partitions: int, config: Optional[Dict[str, str]] = None) -> str:
        name = topic_name("parity")
        self.cluster(listener).create_topic(name, partitions, config=config)
        return name

    def add_acl(self, listener: str, principal: str, operation: str, **resource: Any) -> None:
        self.cluster(listener).add_acl(principal, operation, **resource)

    def read(self, listener: str, topic: str, partitions: List[int], expected: int,
             isolation_level: str = "read_uncommitted") -> List[Any]:
        cluster = self.cluster(listener)
        if listener == "SSL":  # no client certificate: ANONYMOUS, a super user
            settings: Dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": self.ca_file(),
                                        "ssl_check_hostname": False}
        else:
            settings = {"security_protocol": listener, "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin",
                        "sasl_plain_password": USERS["admin"]}
        return consume(cluster.bootstrap_servers, topic, partitions, expected, isolation_level=isolation_level,
                       **settings)


@pytest.fixture(params=["mock", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def side(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Side]:
    if request.param == "apache_kafka":
        yield AkSide(request.getfixturevalue("apache_kafka"))
        return
    mock = MockSide(tmp_path)
    try:
        yield mock
    finally:
        mock.close()


def refused_at_once(conf: Dict[str, Any], topic: str, producer: Optional[Producer] = None,
                    **settings: Any) -> BaseException:
    """Send three records, one after the other; all fail with the same error (from the future, or from
    send() once the producer has a fatal error), well before max.block.ms. Returns the error. With
    ``producer``: sent by it (left open), else by a producer of its own."""
    started = time.monotonic()
    errors = []
    with contextlib.ExitStack() as stack:
        p = producer if producer is not None else stack.enter_context(Producer(conf, **PRODUCER, **settings))
        for i in range(3):
            with pytest.raises(Exception) as info:
                p.send(topic, b"refused-%d" % i).get(90)
            errors.append(info.value)
    elapsed = time.monotonic() - started
    assert elapsed < AT_ONCE_S, f"refused only after {elapsed:.1f} s: {errors[0]!r}"
    assert len({type(e) for e in errors}) == 1, errors
    return errors[0]


def deliver(conf: Dict[str, Any], topic: str, values: List[bytes], timeout: float = 60.0,
            producer: Optional[Producer] = None, refused: Tuple[Type[BaseException], ...] = (
                TopicAuthorizationFailedError,), **settings: Any) -> None:
    """Send ``values`` once the ACL is there (Apache Kafka: it reaches the brokers shortly after AclCommand):
    a first record again (while it is ``refused``) until it is written, then the rest. With ``producer``: sent
    by it (left open), else by a producer of its own."""
    with contextlib.ExitStack() as stack:
        p = producer if producer is not None else stack.enter_context(Producer(conf, **PRODUCER, **settings))
        deadline = time.monotonic() + timeout
        while True:
            try:
                p.send(topic, values[0]).get(60)
                break
            except refused:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        futures = [p.send(topic, v) for v in values[1:]]
        p.flush(60)
        for f in futures:
            f.get(0)


# ------------------------------------------------------------------------------------------------- ACLs


def test_topic_acls_no_describe_then_describe_then_write(side: Side) -> None:
    """No ACL: refused by the Metadata answer; Describe only: refused in the Produce answer; both
    TopicAuthorizationFailedError at once. With Write the same principal delivers, and nothing refused
    was written."""
    principal, conf = side.identity()
    topic = side.create_topic("SSL", 2)
    no_idempotence = {"enable_idempotence": False}
    assert isinstance(refused_at_once(conf, topic, **no_idempotence), TopicAuthorizationFailedError)
    side.add_acl("SSL", principal, "Describe", topic=topic)
    assert isinstance(refused_at_once(conf, topic, **no_idempotence), TopicAuthorizationFailedError)
    side.add_acl("SSL", principal, "Write", topic=topic)
    values = [b"v%d" % i for i in range(50)]
    deliver(conf, topic, values, **no_idempotence)
    got = side.read("SSL", topic, [0, 1], expected=len(values))
    assert sorted(m.value for m in got) == sorted(values)


def test_idempotent_producer_needs_write_on_some_topic(side: Side) -> None:
    """KIP-679: an idempotent producer whose principal may Write no topic at all is refused a producer id
    (CLUSTER_AUTHORIZATION_FAILED: its records fail at once) even with Describe. It is not fatal (as in Java: the
    producer asks again): the same producer delivers once its principal may Write the topic. Write on the topic
    is enough (no IdempotentWrite on the cluster), and Write implies Describe."""
    principal, conf = side.identity()
    topic = side.create_topic("SSL", 1)
    side.add_acl("SSL", principal, "Describe", topic=topic)
    mine = [b"w%d" % i for i in range(10)]
    with Producer(conf, **PRODUCER) as p:
        assert isinstance(refused_at_once(conf, topic, producer=p), ClusterAuthorizationFailedError)
        side.add_acl("SSL", principal, "Write", topic=topic)
        deliver(conf, topic, mine, producer=p, refused=(ClusterAuthorizationFailedError,))
    other, other_conf = side.identity()
    side.add_acl("SSL", other, "Write", topic=topic)  # Write only: no Describe, no IdempotentWrite
    values = [b"i%d" % i for i in range(30)]
    deliver(other_conf, topic, values)
    got = side.read("SSL", topic, [0], expected=len(mine) + len(values))
    assert [m.value for m in got] == mine + values


def test_sasl_user_is_the_principal(side: Side) -> None:
    """SASL: the principal is User:<name>. bob without an ACL on a fresh topic is refused; with Write
    on it he delivers (idempotent: Write on a topic allows the producer id)."""
    topic = side.create_topic("SASL_PLAINTEXT", 1)
    conf = side.config("SASL_PLAINTEXT", user="bob")
    # idempotence off for the refusal: whether bob may write elsewhere depends on other tests (Apache Kafka)
    assert isinstance(refused_at_once(conf, topic, enable_idempotence=False), TopicAuthorizationFailedError)
    side.add_acl("SASL_PLAINTEXT", "User:bob", "Write", topic=topic)
    values = [b"b%d" % i for i in range(20)]
    deliver(conf, topic, values)
    got = side.read("SASL_PLAINTEXT", topic, [0], expected=len(values))
    assert [m.value for m in got] == values


def test_transactional_producer_needs_write_on_its_transactional_id(side: Side) -> None:
    """Write on the topic but nothing on the transactional id: init_transactions fails with
    TransactionalIdAuthorizationFailedError at once; with Write on the id the transaction commits."""
    principal, conf = side.identity()
    topic = side.create_topic("SSL", 1)
    side.add_acl("SSL", principal, "Write", topic=topic)
    txn_id = f"parity-txn-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with Producer(conf, transactional_id=txn_id, **PRODUCER) as p:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            p.init_transactions(90)
    assert time.monotonic() - started < AT_ONCE_S
    side.add_acl("SSL", principal, "Write", transactional_id=txn_id)
    values = [b"t%d" % i for i in range(10)]
    deadline = time.monotonic() + 60
    while True:  # Apache Kafka: the ACL reaches the coordinator shortly after AclCommand
        with Producer(conf, transactional_id=txn_id, **PRODUCER) as p:
            try:
                p.init_transactions(90)
            except TransactionalIdAuthorizationFailedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                continue
            p.begin_transaction()
            for v in values:
                p.send(topic, v)
            p.commit_transaction(90)
            break
    got = side.read("SSL", topic, [0], expected=len(values), isolation_level="read_committed")
    assert [m.value for m in got] == values


# ------------------------------------------------------------------------------------- max.message.bytes


def test_topic_max_message_bytes(side: Side) -> None:
    """A topic's max.message.bytes (2048) refuses a 6000-byte record's batch with MESSAGE_TOO_LARGE and no
    error message; the records around it are delivered (batches split, KIP-126), in order."""
    topic = side.create_topic("SSL", 1, {"max.message.bytes": "2048"})
    conf = side.config("SSL")  # no client certificate: ANONYMOUS, a super user on both sides
    small = [f"small-{i:03d}-".encode() + b"x" * 80 for i in range(40)]
    with Producer(conf, linger_ms=50, retries=10, **PRODUCER) as p:
        p.send(topic, b"warm-up").get(60)
        before = [p.send(topic, v) for v in small[:20]]
        big = p.send(topic, b"B" * 6000)
        after = [p.send(topic, v) for v in small[20:]]
        p.flush(60)
        err = big.exception(0)
        assert isinstance(err, MessageTooLargeError) and err.code == 10, repr(err)
        assert err.broker_message is None, err.broker_message  # the broker's answer had no error message
        assert [f.get(0).offset for f in before + after] == list(range(1, 41))
    got = side.read("SSL", topic, [0], expected=41)
    assert [m.value for m in got] == [b"warm-up"] + small


def test_max_message_bytes_must_be_a_number(side: Side) -> None:
    with pytest.raises(Exception, match="(?i)max.message.bytes|InvalidConfig"):
        side.create_topic("SSL", 1, {"max.message.bytes": "lots"})
