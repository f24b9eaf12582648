"""Third-party clients against a 3-broker MockCluster: kafka-python and confluent-kafka (librdkafka)
produce (acks=all, idempotent as they default to or as configured) and their consumers read back
byte-exact keys, values, headers and timestamps; transactions with read_committed consumers; and
delivery through injected errors and a leader move."""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from kproducer.mock import MockCluster

pytest.importorskip("kafka")

from tests.third_party_clients import CONSUMERS, PRODUCERS, Message, Read, expected_reads  # noqa: E402

TS = 1_700_000_000_000


def messages(count: int = 120) -> List[Message]:
    special: List[Message] = [
        (b"k-first", b"v-first", [("h1", b"x")], TS),
        (None, b"no key", [], TS + 1),
        (b"tombstone", None, [], TS + 2),
        (b"empty", b"", [("a", b""), ("b", b"\x00\xff")], TS + 3),
        (b"binary", bytes(range(256)) * 4, [("dup", b"1"), ("dup", b"2"), ("\u043a\u043b\u044e\u0447", b"\xd0")], TS + 4),
        (b"big", os.urandom(200_000), [], TS + 5),
        (b"\x00\x01", b"old timestamp", [], 1),
    ]
    return special + [(b"key-%d" % i, b"value-%d" % i, [("i", b"%d" % i)], TS + 100 + i) for i in range(count)]


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as c:
        c.create_topic("t", 6)
        yield c


def settings(client: str, cluster: MockCluster) -> Dict[str, Any]:
    """The client's settings for the cluster's plaintext listeners."""
    key = "bootstrap_servers" if client == "kafka-python" else "bootstrap.servers"
    return {key: cluster.bootstrap_servers}


def produce(client: str, cluster: MockCluster, topic: str, msgs: List[Message], **config: Any) -> List[Tuple[int, int]]:
    return PRODUCERS[client](settings(client, cluster), topic, msgs, **config)


def consume(client: str, cluster: MockCluster, topic: str, expected: int, read_committed: bool = False) -> List[Read]:
    """Everything read back, including records beyond ``expected`` that arrive within 0.3 s."""
    return CONSUMERS[client](settings(client, cluster), topic, cluster.partition_count(topic), expected,
                             read_committed=read_committed, settle=0.3)


@pytest.mark.parametrize("producer", list(PRODUCERS))
@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_produce_and_consume_byte_exact(cluster: MockCluster, producer: str, consumer: str) -> None:
    msgs = messages()
    positions = produce(producer, cluster, "t", msgs)
    assert len(set(positions)) == len(msgs)
    got = consume(consumer, cluster, "t", len(msgs))
    assert sorted(got) == expected_reads(msgs, positions)
    # what the brokers stored is the same, and idempotence was used
    stored = {(p, r.offset): r for p in range(6) for r in cluster.records("t", p)}
    assert len(stored) == len(msgs)
    for (k, v, h, ts), pos in zip(msgs, positions):
        record = stored[pos]
        assert (record.key, record.value, record.headers, record.timestamp) == (k, v, h, ts)
        assert record.producer_id >= 0 and record.sequence >= 0
    assert cluster.request_counts["init_producer_id"] >= 1
    # leaders are spread: every broker took produce requests
    assert {e.broker_id for e in cluster.request_log if e.api == "produce"} == {1, 2, 3}


@pytest.mark.parametrize("compression", ["gzip", "lz4", "zstd", "snappy"])
def test_compressed_batches(cluster: MockCluster, compression: str) -> None:
    pytest.importorskip("confluent_kafka")
    msgs = messages(50)
    positions = produce("confluent", cluster, "t", msgs, **{"compression.type": compression})
    assert sorted(consume("kafka-python", cluster, "t", len(msgs))) == expected_reads(msgs, positions)


def test_delivery_through_injected_errors_and_a_leader_move(cluster: MockCluster) -> None:
    """Retriable errors and a leader move do not lose or duplicate records (idempotent producers)."""
    pytest.importorskip("confluent_kafka")
    cluster.create_topic("one", 1)
    cluster.inject_errors("produce", [6, 7, 6])
    cluster.drop_responses("produce", 1)  # appended, but the answer is lost: the retry is a duplicate
    first = messages(30)
    positions = produce("confluent", cluster, "one", first, **{"retry.backoff.ms": 10})
    cluster.move_leader("one", 0, broker_id=cluster.leader("one", 0) % 3 + 1)
    second = messages(30)
    positions += produce("kafka-python", cluster, "one", second, retry_backoff_ms=10)
    assert [o for _, o in positions] == list(range(len(first) + len(second)))
    assert [r.value for r in cluster.records("one", 0)] == [v for _, v, _, _ in first + second]
    assert cluster.pending_errors("produce") == []


def _kafka_python_transactions(cluster: MockCluster) -> Tuple[List[bytes], List[bytes]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="kp-txn", acks="all")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send("t", key=b"%d" % i, value=b"committed-%d" % i)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(10):
            producer.send("t", key=b"%d" % i, value=b"aborted-%d" % i)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("t", key=b"x", value=b"plain")
        producer.commit_transaction()
    finally:
        producer.close(10)
    return [b"committed-%d" % i for i in range(10)] + [b"plain"], [b"aborted-%d" % i for i in range(10)]


def _confluent_transactions(cluster: MockCluster) -> Tuple[List[bytes], List[bytes]]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "ck-txn", "linger.ms": 5})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("t", key=b"%d" % i, value=b"committed-%d" % i)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("t", key=b"%d" % i, value=b"aborted-%d" % i)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("t", key=b"x", value=b"plain")
    producer.commit_transaction(30)
    return [b"committed-%d" % i for i in range(10)] + [b"plain"], [b"aborted-%d" % i for i in range(10)]


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_transactions_and_read_committed(cluster: MockCluster, client: str) -> None:
    run = _kafka_python_transactions if client == "kafka-python" else _confluent_transactions
    committed, aborted = run(cluster)
    all_values = committed + aborted
    for consumer in CONSUMERS:
        seen = sorted(r[3] or b"" for r in consume(consumer, cluster, "t", len(committed), read_committed=True))
        assert seen == sorted(committed), consumer
        everything = sorted(r[3] or b"" for r in consume(consumer, cluster, "t", len(all_values)))
        assert everything == sorted(all_values), consumer
    markers = [r for p in range(6) for r in cluster.records("t", p, include_control=True) if r.is_control]
    assert {m.control_type for m in markers} == {0, 1}
