"""Third-party clients against a 3-broker MockCluster: kafka-python and confluent-kafka (librdkafka)
produce (acks=all, idempotent as they default to or as configured) and their consumers read back
byte-exact keys, values, headers and timestamps; transactions with read_committed consumers; and
delivery through injected errors and a leader move."""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from kproducer.mock import MockCluster

pytest.importorskip("kafka")

TS = 1_700_000_000_000
Header = Tuple[str, Optional[bytes]]
# (key, value, headers, timestamp ms)
Message = Tuple[Optional[bytes], Optional[bytes], List[Header], int]


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


# A record as read back: (partition, offset, key, value, headers, timestamp)
Read = Tuple[int, int, Optional[bytes], Optional[bytes], List[Header], int]


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as c:
        c.create_topic("t", 6)
        yield c


# ----------------------------------------------------------------------------------- kafka-python


def produce_kafka_python(cluster: MockCluster, topic: str, msgs: List[Message], **config: Any) -> List[Tuple[int, int]]:
    from kafka import KafkaProducer  # type: ignore[import-untyped]

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5,
                             max_request_size=1 << 20, **config)
    try:
        futures = [producer.send(topic, key=k, value=v, headers=h, timestamp_ms=ts) for k, v, h, ts in msgs]
        producer.flush(30)
        metadata = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(10)
    return [(m.partition, m.offset) for m in metadata]


def consume_kafka_python(cluster: MockCluster, topic: str, expected: int, read_committed: bool = False) -> List[Read]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             isolation_level="read_committed" if read_committed else "read_uncommitted")
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(cluster.partition_count(topic))])
        out: List[Read] = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records)
        # nothing more arrives
        for records in consumer.poll(timeout_ms=300).values():
            out.extend((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records)
        return out
    finally:
        consumer.close()


# -------------------------------------------------------------------------------- confluent-kafka


def produce_confluent(cluster: MockCluster, topic: str, msgs: List[Message], **config: Any) -> List[Tuple[int, int]]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                "linger.ms": 5}
    settings.update(config)
    producer = confluent_kafka.Producer(settings)
    results: Dict[int, Tuple[int, int]] = {}
    errors: List[Any] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                results[index] = (msg.partition(), msg.offset())
        return on_delivery

    for i, (k, v, h, ts) in enumerate(msgs):
        producer.produce(topic, key=k, value=v, headers=h, timestamp=ts, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors
    return [results[i] for i in range(len(msgs))]


def consume_confluent(cluster: MockCluster, topic: str, expected: int, read_committed: bool = False) -> List[Read]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": "mock-test", "enable.auto.commit": False,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "fetch.wait.max.ms": 100,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(cluster.partition_count(topic))])
        out: List[Read] = []
        deadline = time.monotonic() + 30
        quiet_until: Optional[float] = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None:
                if len(out) >= expected:
                    quiet_until = quiet_until or time.monotonic() + 0.3
                    if time.monotonic() > quiet_until:
                        break
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), list(msg.headers() or []),
                        msg.timestamp()[1]))
        return out
    finally:
        consumer.close()


PRODUCERS = {"kafka-python": produce_kafka_python, "confluent": produce_confluent}
CONSUMERS = {"kafka-python": consume_kafka_python, "confluent": consume_confluent}


def expected_reads(msgs: List[Message], positions: List[Tuple[int, int]]) -> List[Read]:
    return sorted((p, o, k, v, h, ts) for (k, v, h, ts), (p, o) in zip(msgs, positions))


@pytest.mark.parametrize("producer", list(PRODUCERS))
@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_produce_and_consume_byte_exact(cluster: MockCluster, producer: str, consumer: str) -> None:
    msgs = messages()
    positions = PRODUCERS[producer](cluster, "t", msgs)
    assert len(set(positions)) == len(msgs)
    got = CONSUMERS[consumer](cluster, "t", len(msgs))
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
    positions = produce_confluent(cluster, "t", msgs, **{"compression.type": compression})
    assert sorted(consume_kafka_python(cluster, "t", len(msgs))) == expected_reads(msgs, positions)


def test_delivery_through_injected_errors_and_a_leader_move(cluster: MockCluster) -> None:
    """Retriable errors and a leader move do not lose or duplicate records (idempotent producers)."""
    pytest.importorskip("confluent_kafka")
    cluster.create_topic("one", 1)
    cluster.inject_errors("produce", [6, 7, 6])
    cluster.drop_responses("produce", 1)  # appended, but the answer is lost: the retry is a duplicate
    first = messages(30)
    positions = produce_confluent(cluster, "one", first, **{"retry.backoff.ms": 10})
    cluster.move_leader("one", 0, broker_id=cluster.leader("one", 0) % 3 + 1)
    second = messages(30)
    positions += produce_kafka_python(cluster, "one", second, retry_backoff_ms=10)
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
    for consume in (consume_kafka_python, consume_confluent):
        seen = sorted(r[3] or b"" for r in consume(cluster, "t", len(committed), read_committed=True))
        assert seen == sorted(committed), consume.__name__
        everything = sorted(r[3] or b"" for r in consume(cluster, "t", len(all_values)))
        assert everything == sorted(all_values), consume.__name__
    markers = [r for p in range(6) for r in cluster.records("t", p, include_control=True) if r.is_control]
    assert {m.control_type for m in markers} == {0, 1}
