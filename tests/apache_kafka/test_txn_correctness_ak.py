"""Issue 28 items 1, 2 and 5 (transactions exactly as Java) against Apache Kafka 4.1 (the session's ``apache_kafka``
cluster: SASL_PLAINTEXT with SCRAM and PLAIN, StandardAuthorizer on). Every scenario uses its own topic and
transactional id (and, for item 1, its own SCRAM user), and is read back with kafka-python over PLAINTEXT.

* 1: a partition leader refuses our credentials mid-transaction (the user's SCRAM password changed; the
  producer's first connection to that broker comes at the commit): its batches fail, and the commit must fail
  with them; the abort leaves nothing visible to read_committed.
* 2: ``commit_transaction(0)`` / ``abort_transaction(0)`` / ``init_transactions(0)`` time out (deterministically)
  and complete in the background; the retry gets the outcome, begin_transaction() is refused until then.
* 5: the principal may Describe the transactional id but not Write it: InitProducerId is refused with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and init_transactions() succeeds once the ACL is added (the same
  scenario runs on the MockCluster with its authorizer).
"""
from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from kproducer import Producer
from kproducer.errors import (
    AuthenticationError,
    IllegalStateError,
    KafkaTimeoutError,
    TransactionalIdAuthorizationFailedError,
    TransactionError,
)
from kproducer.producer.transaction_manager import CoordinatorKey, CoordinatorType, State
from tests.readback import consume

pytestmark = [
    pytest.mark.apache_kafka,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

WAIT = 60.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def txn_producer(config: Dict[str, Any], transactional_id: str, **settings: Any) -> Iterator[Producer]:
    settings.setdefault("linger_ms", 5)
    settings.setdefault("retry_backoff_ms", 20)
    settings.setdefault("max_block_ms", 60000)
    producer = Producer(config, transactional_id=transactional_id, **settings)
    try:
        yield producer
    finally:
        producer.close(30)


def values(bootstrap: str, topic: str, partitions: int, expected: int, committed: bool = True,
           **settings: Any) -> Dict[int, List[bytes]]:
    got = consume(bootstrap, topic, list(range(partitions)), expected, timeout=WAIT,
                  isolation_level="read_committed" if committed else "read_uncommitted", **settings)
    out: Dict[int, List[bytes]] = {p: [] for p in range(partitions)}
    for msg in sorted(got, key=lambda x: (x.partition, x.offset)):
        out[msg.partition].append(msg.value)
    return out


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# item 1


def set_scram_password(kafka: Any, user: str, password: str) -> None:
    kafka.run_tool("kafka.admin.ConfigCommand", "--bootstrap-server", kafka.bootstrap_servers, "--alter",
                   "--add-config", f"SCRAM-SHA-256=[iterations=4096,password={password}]", "--entity-type", "users",
                   "--entity-name", user)


def logs_in(kafka: Any, broker: int, user: str, password: str, topic: str) -> Optional[bool]:
    """Whether ``user`` / ``password`` authenticates with ``broker`` now (SCRAM changes reach the brokers shortly
    after ConfigCommand returns); None when that could not be told in time."""
    config = kafka.producer_config("SASL_PLAINTEXT", "SCRAM-SHA-256", user=user, password=password)
    config["bootstrap.servers"] = f"127.0.0.1:{kafka.port(broker, 'SASL_PLAINTEXT')}"
    with Producer(config, enable_idempotence=False, max_block_ms=10000, reconnect_backoff_ms=50) as probe:
        try:
            probe.partitions_for(topic, timeout=10)
            return True
        except AuthenticationError:
            return False
        except KafkaTimeoutError:  # (NoBrokersAvailableError too)
            return None


def test_a_leader_refusing_our_credentials_mid_transaction_fails_the_commit(apache_kafka: Any,
                                                                          ak_topic: Callable[..., str]) -> None:
    kafka = apache_kafka
    topic = ak_topic(partitions=6, prefix="txauth")
    tid, user = unique("txauth"), unique("scram")
    set_scram_password(kafka, user, "first-secret")
    kafka.run_tool("org.apache.kafka.tools.AclCommand", "--bootstrap-server", kafka.bootstrap_servers, "--add",
                   "--allow-principal", f"User:{user}", "--producer", "--topic", topic, "--transactional-id", tid)
    wait_for(lambda: all(logs_in(kafka, b, user, "first-secret", topic) is True for b in kafka.broker_ids),
             "the new user and its ACLs on every broker")
    config = kafka.producer_config("SASL_PLAINTEXT", "SCRAM-SHA-256", user=user, password="first-secret")
    leaders = {p: kafka.leader(topic, p) for p in range(6)}
    with txn_producer(config, tid, linger_ms=60_000, delivery_timeout_ms=180_000, reconnect_backoff_ms=50,
                      reconnect_backoff_max_ms=200) as producer:
        producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        coordinator = txn.coordinator(CoordinatorKey(CoordinatorType.TRANSACTION, tid))
        producer.begin_transaction()
        futures = {i: producer.send(topic, b"r%d" % i, partition=i % 6) for i in range(36)}  # they linger
        # the producer has connections to the coordinator and (perhaps) one more broker, for metadata; it makes
        # no other before the commit (a new one only when no connection is ready, or for a batch to send)
        connected = {n for n in producer._client.selector.channel_ids() if n >= 0} | {coordinator}
        refused = {p for p, leader in leaders.items() if leader not in connected}
        assert refused and len(refused) < 6, (leaders, connected)  # (3 brokers leading 2 partitions each)
        set_scram_password(kafka, user, "second-secret")
        victims = {leaders[p] for p in refused}
        wait_for(lambda: all(logs_in(kafka, b, user, "first-secret", topic) is False for b in victims),
                 "the old password refused")
        with pytest.raises(TransactionError) as raised:
            producer.commit_transaction(WAIT)  # before the fix: committed the records of the connected leaders
        assert isinstance(raised.value.__cause__, AuthenticationError)
        for i, f in futures.items():
            if i % 6 in refused:
                assert isinstance(f.exception(WAIT), AuthenticationError)
        assert txn.state is State.ABORTABLE_ERROR
        producer.abort_transaction(WAIT)  # over the coordinator's connection, still authenticated
        assert txn.state is State.READY
    assert values(kafka.bootstrap_servers, topic, 6, 0) == {p: [] for p in range(6)}
    written = values(kafka.bootstrap_servers, topic, 6, 36 - 6 * len(refused), committed=False)
    assert {p for p, vs in written.items() if vs} <= set(range(6)) - refused  # written, then aborted


# --------------------------------------------------------------------------------------------
# item 2


@pytest.mark.parametrize("call", ["commit_transaction", "abort_transaction"])
def test_a_timed_out_end_of_transaction_is_returned_to_the_retry(apache_kafka: Any, ak_topic: Callable[..., str],
                                                                call: str) -> None:
    topic = ak_topic(partitions=2, prefix="txretry")
    tid = unique("txretry")
    with txn_producer({"bootstrap.servers": apache_kafka.bootstrap_servers}, tid) as producer:
        producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, b"r%d" % i, partition=i % 2)
        with pytest.raises(KafkaTimeoutError):
            getattr(producer, call)(0)  # (no answer can come within 0 s)
        wait_for(lambda: txn.state is State.READY, "the background completion")
        with pytest.raises(IllegalStateError, match=call):
            producer.begin_transaction()
        getattr(producer, call)(WAIT)  # the outcome of the first call: no error, nothing sent again
        producer.begin_transaction()
        producer.send(topic, b"next", partition=0)
        producer.commit_transaction(WAIT)
    first = [b"r%d" % i for i in range(10)] if call == "commit_transaction" else []
    expected = {p: [v for v in first if int(v[1:]) % 2 == p] for p in range(2)}
    expected[0].append(b"next")
    assert values(apache_kafka.bootstrap_servers, topic, 2, len(first) + 1) == expected


def test_a_timed_out_init_transactions_is_returned_to_the_retry(apache_kafka: Any,
                                                                ak_topic: Callable[..., str]) -> None:
    topic = ak_topic(partitions=1, prefix="txinit")
    with txn_producer({"bootstrap.servers": apache_kafka.bootstrap_servers}, unique("txinit")) as producer:
        with pytest.raises(KafkaTimeoutError):
            producer.init_transactions(0)
        txn = producer._txn
        assert txn is not None
        wait_for(lambda: txn.state is State.READY, "the background completion")
        with pytest.raises(IllegalStateError, match="init_transactions"):
            producer.begin_transaction()
        epoch = txn.producer_id_and_epoch
        producer.init_transactions(WAIT)
        assert txn.producer_id_and_epoch == epoch, "the retry sent no second InitProducerId"
        producer.begin_transaction()
        producer.send(topic, b"v", partition=0)
        producer.commit_transaction(WAIT)
    assert values(apache_kafka.bootstrap_servers, topic, 1, 1) == {0: [b"v"]}


# --------------------------------------------------------------------------------------------
# item 5 (on Apache Kafka and on the MockCluster)


class AclBackend:
    """Where the item-5 scenario runs: the shared Apache Kafka cluster, or a MockCluster with its authorizer."""

    def __init__(self, name: str, config: Dict[str, Any], create_topic: Callable[[str, int], None],
                 add_acl: Callable[..., None], read: Callable[[str, int, int], Dict[int, List[bytes]]]) -> None:
        self.name = name
        self.config = config  # bob's producer settings
        self.create_topic = create_topic
        self.add_acl = add_acl
        self.read = read


@pytest.fixture(params=["mock", "apache_kafka"])
def acl_backend(request: Any) -> Iterator[AclBackend]:
    if request.param == "apache_kafka":
        kafka = request.getfixturevalue("apache_kafka")
        yield AclBackend("apache_kafka", kafka.producer_config("SASL_PLAINTEXT", "PLAIN", user="bob"),
                         lambda name, n: kafka.create_topic(name, n, 3), kafka.add_acl,
                         lambda t, n, expected: values(kafka.bootstrap_servers, t, n, expected))
        return
    from kproducer.testing import MockCluster

    users = {"bob": "bob-secret", "admin": "admin-secret"}
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"], users=users, authorizer=True,
                     super_users=("User:admin",)) as cluster:
        admin = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin",
                 "sasl_plain_password": "admin-secret"}
        yield AclBackend("mock", cluster.client_config("bob", "PLAIN"), lambda name, n: cluster.create_topic(name, n),
                         cluster.add_acl, lambda t, n, expected: _read_mock(cluster.bootstrap_servers, t, n, expected,
                                                                             admin))


def _read_mock(bootstrap: str, topic: str, partitions: int, expected: int, admin: Dict[str, Any]) -> Dict[int, List[bytes]]:
    return values(bootstrap, topic, partitions, expected, **admin)


def refused_init(config: Dict[str, Any], tid: str, timeout: float = WAIT) -> Producer:
    """A producer whose init_transactions() was refused at InitProducerId (TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    the typed error: Java's AuthorizationException, "may retry after fixing the permission"). Until the Describe
    ACL has reached the broker, FindCoordinator is refused instead, which is fatal (as in Java): that producer is
    closed and a new one tries again."""
    deadline = time.monotonic() + timeout
    while True:
        producer = Producer(config, transactional_id=tid, max_block_ms=60000, retry_backoff_ms=20)
        try:
            producer.init_transactions(WAIT)
        except TransactionalIdAuthorizationFailedError:
            txn = producer._txn
            assert txn is not None
            if txn.state is not State.FATAL_ERROR:
                return producer  # refused by InitProducerId
            if txn.coordinator(CoordinatorKey(CoordinatorType.TRANSACTION, tid)) is not None:
                producer.close(10)
                pytest.fail("InitProducerId refused by the authorizer was fatal (Java: init_transactions() may be "
                            "called again once the ACL is fixed)")
        except BaseException:
            producer.close(10)
            raise
        else:
            producer.close(10)
            pytest.fail("InitProducerId was not refused")
        producer.close(10)
        assert time.monotonic() < deadline, "FindCoordinator still refused: the Describe ACL did not arrive"
        time.sleep(0.2)


def init_until_authorized(producer: Producer, timeout: float = WAIT) -> int:
    """init_transactions() again until the new ACL reached the coordinator; returns how many calls were refused."""
    refused = 0
    deadline = time.monotonic() + timeout
    while True:
        try:
            producer.init_transactions(WAIT)
            return refused
        except TransactionalIdAuthorizationFailedError:
            refused += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_init_transactions_refused_by_the_authorizer_succeeds_once_the_acl_is_added(acl_backend: AclBackend) -> None:
    b = acl_backend
    topic, tid = unique("txacl"), unique("txacl")
    b.create_topic(topic, 1)
    b.add_acl("User:bob", "Describe", transactional_id=tid)  # FindCoordinator: yes; InitProducerId: no
    b.add_acl("User:bob", "Write", topic=topic)
    producer = refused_init(b.config, tid)
    try:
        txn = producer._txn
        assert txn is not None and txn.state is State.UNINITIALIZED  # Java: ABORTABLE_ERROR, then UNINITIALIZED
        b.add_acl("User:bob", "Write", transactional_id=tid)
        init_until_authorized(producer)
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"v%d" % i, partition=0)
        producer.commit_transaction(WAIT)
    finally:
        producer.close(30)
    assert b.read(topic, 1, 3) == {0: [b"v0", b"v1", b"v2"]}
