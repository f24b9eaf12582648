"""Issue 28, items 1-6 (transactions exactly as Java) on the MockCluster, through the public Producer; every
scenario is read back with kafka-python's read_committed consumer (and the mock's log with its markers).
Each test failed before its fix. (Without a network: tests/unit/test_txn_correctness.py; on Apache Kafka:
tests/apache_kafka/test_txn_correctness_ak.py.)"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

import pytest

from kproducer import Producer
from kproducer.errors import (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    KafkaTimeoutError,
    NotEnoughReplicasError,
    ProducerClosedError,
    TransactionalIdAuthorizationFailedError,
    TransactionError,
    UnknownProducerIdError,
)
from kproducer.mock import MockCluster
from kproducer.producer.transaction_manager import CoordinatorKey, CoordinatorType, State
from tests.readback import consume

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TOPIC = "tx"
WAIT = 30.0
ABORT, COMMIT = 0, 1  # control record types
#: the scenarios run with the mock's transaction.version at 0 (kproducer speaks transactions v1) and at 2 (v2,
#: KIP-890); those about AddPartitionsToTxn or InitProducerId epoch bumps (v1 only) pin 0
TV = pytest.mark.parametrize("tv", [0, 2], ids=["tv0", "tv2"])


@contextlib.contextmanager
def producer_for(cluster: MockCluster, transactional_id: str, config: Optional[Dict[str, Any]] = None,
                 **settings: Any) -> Iterator[Producer]:
    settings.setdefault("linger_ms", 5)
    settings.setdefault("retry_backoff_ms", 20)
    settings.setdefault("reconnect_backoff_ms", 20)
    settings.setdefault("max_block_ms", 30000)
    producer = Producer(config or {"bootstrap.servers": cluster.bootstrap_servers},
                        transactional_id=transactional_id, **settings)
    try:
        yield producer
    finally:
        producer.close(10)
        assert not producer._sender.is_alive()


def committed_values(cluster: MockCluster, topic: str, partitions: int, expected: int,
                     **settings: Any) -> Dict[int, List[bytes]]:
    """kafka-python with read_committed: the values per partition."""
    got = consume(cluster.bootstrap_servers, topic, list(range(partitions)), expected, timeout=WAIT,
                  isolation_level="read_committed", **settings)
    out: Dict[int, List[bytes]] = {p: [] for p in range(partitions)}
    for msg in sorted(got, key=lambda x: (x.partition, x.offset)):
        out[msg.partition].append(msg.value)
    return out


def markers(cluster: MockCluster, topic: str, partition: int) -> List[Any]:
    return [("COMMIT" if r.control_type == COMMIT else "ABORT") if r.is_control else r.value
            for r in cluster.records(topic, partition, include_control=True)]


def wait_for(predicate: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.01)


# --------------------------------------------------------------------------------------------
# item 1: every failed batch makes the transaction abortable


@TV
def test_a_leaders_authentication_failure_mid_transaction_fails_the_commit(tv: int) -> None:
    """36 records over 6 partitions led by 3 brokers; while they linger, alice's password changes and one
    leader (not the coordinator) drops our connection: reconnecting fails authentication and its queued
    batches fail. The commit must not commit the other brokers' records without them (it did: 24 of 36)."""
    users = {"alice": "alice-secret"}
    with MockCluster(3, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"], users=users,
                     transaction_version=tv) as cluster:
        cluster.create_topic(TOPIC, 6)
        sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                "sasl_plain_password": "alice-secret"}
        with producer_for(cluster, "auth-1", cluster.client_config("alice", "PLAIN"), linger_ms=60_000,
                          delivery_timeout_ms=120_000) as producer:
            producer.init_transactions()
            txn = producer._txn
            assert txn is not None
            coordinator = txn.coordinator(CoordinatorKey(CoordinatorType.TRANSACTION, "auth-1"))
            producer.begin_transaction()
            for p in range(6):  # every leader's connection is made (and authenticated)
                producer.send(TOPIC, b"warm-%d" % p, partition=p)
            producer.commit_transaction(WAIT)
            victim = next(b for b in (1, 2, 3) if b != coordinator)
            lost = [p for p in range(6) if cluster.leader(TOPIC, p) == victim]
            assert lost and len(lost) < 6
            producer.begin_transaction()
            futures = {i: producer.send(TOPIC, b"r%d" % i, partition=i % 6) for i in range(36)}
            cluster._security.users["alice"] = "changed"  # (the mock's users: the next logins fail)
            cluster.drop_connections(victim)
            with pytest.raises(TransactionError) as raised:
                producer.commit_transaction(WAIT)
            assert isinstance(raised.value.__cause__, AuthenticationError)
            for i, f in futures.items():
                if i % 6 in lost:
                    assert isinstance(f.exception(WAIT), AuthenticationError)
            assert txn.state is State.ABORTABLE_ERROR
            producer.abort_transaction(WAIT)
            cluster._security.users["alice"] = "alice-secret"
            producer.begin_transaction()
            for i in range(36):
                producer.send(TOPIC, b"s%d" % i, partition=i % 6)
            producer.commit_transaction(WAIT)
        got = committed_values(cluster, TOPIC, 6, 42, **sasl)
    assert got == {p: [b"warm-%d" % p] + [b"s%d" % i for i in range(36) if i % 6 == p] for p in range(6)}


@TV
def test_send_batch_that_could_not_queue_every_record_makes_the_transaction_abortable(tv: int) -> None:
    """send_batch() raised (buffer memory did not come within max.block.ms) after some of its records were
    queued: the transaction must not commit those without the others (as Java's send() failing makes it
    abortable)."""
    with MockCluster(1, transaction_version=tv) as cluster:
        cluster.create_topic(TOPIC, 2)
        with producer_for(cluster, "batch-1", batch_size=16384, buffer_memory=32768, max_block_ms=300,
                          linger_ms=0) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.partitions_for(TOPIC)  # (metadata known: the wait below is for memory)
            cluster.set_latency(1, 1500)  # the pool's memory is not given back in time
            with pytest.raises(KafkaTimeoutError):
                producer.send_batch(TOPIC, [b"x" * 1000] * 60, partition=[i % 2 for i in range(60)])
            assert producer._txn is not None and producer._txn.state is State.ABORTABLE_ERROR
            with pytest.raises(TransactionError):
                producer.commit_transaction(WAIT)
            cluster.set_latency(1, 0)
            producer.abort_transaction(WAIT)
            producer.begin_transaction()
            producer.send(TOPIC, b"after", partition=0)
            producer.commit_transaction(WAIT)
        assert committed_values(cluster, TOPIC, 2, 1) == {0: [b"after"], 1: []}


# --------------------------------------------------------------------------------------------
# item 2: a timed-out call is retried to its outcome


@pytest.mark.parametrize("call", ["commit_transaction", "abort_transaction"])
@TV
def test_a_timed_out_end_of_transaction_completed_in_the_background_is_returned_to_the_retry(call: str, tv: int) -> None:
    with MockCluster(1, transaction_version=tv) as cluster:
        cluster.create_topic(TOPIC, 2)
        with producer_for(cluster, f"retry-{call}") as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(TOPIC, b"v", partition=0)
            producer.flush(WAIT)
            cluster.set_latency(1, 1000)  # the EndTxn answer comes late
            with pytest.raises(KafkaTimeoutError):
                getattr(producer, call)(0.2)
            txn = producer._txn
            assert txn is not None
            wait_for(lambda: txn.state is State.READY, "the background completion")
            cluster.set_latency(1, 0)
            with pytest.raises(IllegalStateError, match=call):
                producer.begin_transaction()  # Java: refused until the timed-out call was retried
            with pytest.raises(TransactionError, match=call):
                producer.send(TOPIC, b"refused", partition=0)
            getattr(producer, call)(WAIT)  # the cached outcome: no error
            producer.begin_transaction()
            producer.send(TOPIC, b"next", partition=1)
            producer.commit_transaction(WAIT)
        expected = {0: [b"v"] if call == "commit_transaction" else [], 1: [b"next"]}
        assert committed_values(cluster, TOPIC, 2, 2 if call == "commit_transaction" else 1) == expected
        assert markers(cluster, TOPIC, 0) == [b"v", "COMMIT" if call == "commit_transaction" else "ABORT"]


@TV
def test_a_timed_out_init_transactions_completed_in_the_background_is_returned_to_the_retry(tv: int) -> None:
    with MockCluster(1, transaction_version=tv) as cluster:
        cluster.create_topic(TOPIC, 1)
        with producer_for(cluster, "retry-init") as producer:
            cluster.set_latency(1, 1000)
            with pytest.raises(KafkaTimeoutError):
                producer.init_transactions(0.2)
            txn = producer._txn
            assert txn is not None
            wait_for(lambda: txn.state is State.READY, "the background completion")
            cluster.set_latency(1, 0)
            with pytest.raises(IllegalStateError, match="init_transactions"):
                producer.begin_transaction()
            producer.init_transactions(WAIT)  # before the fix: "init_transactions() was already called"
            producer.begin_transaction()
            producer.send(TOPIC, b"v", partition=0)
            producer.commit_transaction(WAIT)
        assert cluster.request_counts["init_producer_id"] == 1
        assert committed_values(cluster, TOPIC, 1, 1) == {0: [b"v"]}


# --------------------------------------------------------------------------------------------
# item 3: UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING on AddPartitionsToTxn


@pytest.mark.parametrize("error", [UnknownProducerIdError, InvalidProducerIdMappingError])
def test_producer_id_errors_on_add_partitions_abort_and_close_at_once(error: Any) -> None:
    with MockCluster(1, transaction_version=0) as cluster:
        cluster.create_topic(TOPIC, 2)
        with producer_for(cluster, f"apt-{error.code}") as producer:
            producer.init_transactions()
            first = producer._txn.producer_id_and_epoch  # type: ignore[union-attr]
            producer.begin_transaction()
            producer.send(TOPIC, b"written", partition=0).get(WAIT)
            cluster.inject_errors("add_partitions_to_txn", [error.code])
            failed = producer.send(TOPIC, b"refused", partition=1)
            assert isinstance(failed.exception(WAIT), error)
            with pytest.raises(TransactionError) as raised:
                producer.commit_transaction(WAIT)
            assert isinstance(raised.value.__cause__, error)
            ends = cluster.request_counts["end_txn"]
            producer.abort_transaction(WAIT)  # before the fix: timed out again and again
            # Java (3.x): INVALID_PRODUCER_ID_MAPPING goes straight to InitProducerId, which ends the transaction
            assert cluster.request_counts["end_txn"] - ends == (0 if error is InvalidProducerIdMappingError else 1)
            assert producer._txn.producer_id_and_epoch != first  # type: ignore[union-attr]
            producer.begin_transaction()
            producer.send(TOPIC, b"next", partition=1)
            producer.commit_transaction(WAIT)
        assert committed_values(cluster, TOPIC, 2, 1) == {0: [], 1: [b"next"]}
        assert markers(cluster, TOPIC, 0) == [b"written", "ABORT"]


# --------------------------------------------------------------------------------------------
# item 4: abort without epoch bump (InitProducerId < v3)


def test_abort_without_epoch_bump_sends_the_batch_awaiting_a_retry_and_the_next_transaction_commits() -> None:
    with MockCluster(1, transaction_version=0, api_versions={"init_producer_id": (0, 2)}) as cluster:
        cluster.create_topic(TOPIC, 1)
        with producer_for(cluster, "nobump", retry_backoff_ms=1500, retry_backoff_max_ms=1500) as producer:
            producer.init_transactions()
            txn = producer._txn
            assert txn is not None and not txn.can_bump_epoch()
            producer.begin_transaction()
            producer.send(TOPIC, b"A", partition=0).get(WAIT)
            cluster.inject_errors("produce", [NotEnoughReplicasError.code])
            b = producer.send(TOPIC, b"B", partition=0)
            acc = producer._accumulator
            wait_for(lambda: any(x.attempts > 0 for x in acc.queued_batches_list()), "B awaiting its retry")
            producer.abort_transaction(WAIT)
            assert b.exception(0) is None, "B was sent again before EndTxn (and is aborted with the transaction)"
            producer.begin_transaction()
            producer.send(TOPIC, b"C", partition=0)
            producer.commit_transaction(WAIT)  # before the fix: OUT_OF_ORDER_SEQUENCE_NUMBER (a gap after A)
        assert markers(cluster, TOPIC, 0) == [b"A", b"B", "ABORT", b"C", "COMMIT"]
        assert committed_values(cluster, TOPIC, 1, 1) == {0: [b"C"]}


# --------------------------------------------------------------------------------------------
# item 5: init_transactions() refused by the authorizer may be called again


@pytest.mark.parametrize("error", [TransactionalIdAuthorizationFailedError, ClusterAuthorizationFailedError])
@TV
def test_init_transactions_refused_by_authorization_may_be_called_again(error: Any, tv: int) -> None:
    with MockCluster(1, transaction_version=tv) as cluster:
        cluster.create_topic(TOPIC, 1)
        with producer_for(cluster, f"auth-init-{error.code}") as producer:
            cluster.inject_errors("init_producer_id", [error.code])
            with pytest.raises(error):
                producer.init_transactions(WAIT)
            assert producer._txn is not None and producer._txn.state is State.UNINITIALIZED
            producer.init_transactions(WAIT)  # before the fix: a fatal error
            producer.begin_transaction()
            producer.send(TOPIC, b"v", partition=0)
            producer.commit_transaction(WAIT)
        assert committed_values(cluster, TOPIC, 1, 1) == {0: [b"v"]}


# --------------------------------------------------------------------------------------------
# item 6: close and send_offsets_to_transaction({})


@TV
def test_close_does_not_wait_for_init_producer_id_retries(tv: int) -> None:
    """The coordinator keeps answering a retriable error: init_transactions() times out, and close() (no
    timeout) returns without waiting for the retries (before the fix it waited for ever); a retry of the
    call then says the producer is closed."""
    with MockCluster(1, transaction_version=tv) as cluster:
        cluster.inject_errors("init_producer_id", [51] * 100_000)  # CONCURRENT_TRANSACTIONS, retriable
        producer = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="closing",
                            retry_backoff_ms=20, retry_backoff_max_ms=50)
        with pytest.raises(KafkaTimeoutError):
            producer.init_transactions(0.5)
        closer = threading.Thread(target=producer.close, daemon=True)
        closer.start()
        closer.join(20)
        assert not closer.is_alive(), "close() waited for InitProducerId retries"
        with pytest.raises(ProducerClosedError):
            producer.init_transactions(1)


@TV
def test_a_forced_close_fails_a_thread_waiting_in_commit_at_once(tv: int) -> None:
    with MockCluster(1, transaction_version=tv) as cluster:
        cluster.create_topic(TOPIC, 1)
        producer = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="forced",
                            max_block_ms=120_000, retry_backoff_ms=20)
        producer.init_transactions(WAIT)
        producer.begin_transaction()
        producer.send(TOPIC, b"v", partition=0).get(WAIT)
        cluster.inject_errors("end_txn", [51] * 100_000)  # the commit cannot complete
        outcome: List[BaseException] = []

        def commit() -> None:
            try:
                producer.commit_transaction()
            except BaseException as e:  # noqa: B902 - what the waiting thread got
                outcome.append(e)

        waiter = threading.Thread(target=commit, daemon=True)
        waiter.start()
        wait_for(lambda: cluster.request_counts["end_txn"] >= 2, "the commit being retried")
        producer.close(0)
        waiter.join(20)  # before the fix: max.block.ms (120 s)
        assert not waiter.is_alive(), "the waiting commit was not failed by the forced close"
        assert len(outcome) == 1 and isinstance(outcome[0], ProducerClosedError), outcome


@TV
def test_send_offsets_to_transaction_with_no_offsets_sends_nothing(tv: int) -> None:
    with MockCluster(1, transaction_version=tv) as cluster:
        cluster.create_topic(TOPIC, 1)
        with producer_for(cluster, "no-offsets") as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(TOPIC, b"v", partition=0)
            producer.send_offsets_to_transaction({}, "group-1")
            producer.commit_transaction(WAIT)
            producer.send_offsets_to_transaction({}, "group-1")  # Java: no state check either
        counts = cluster.request_counts
        assert (counts["add_offsets_to_txn"], counts["txn_offset_commit"]) == (0, 0)
        assert cluster.committed_offsets("group-1") == {}
        assert committed_values(cluster, TOPIC, 1, 1) == {0: [b"v"]}
