"""Third-party Kafka clients (kafka-python and confluent-kafka / librdkafka) as independent checks of the
MockCluster: produce a list of messages and read them back byte-exact.

Each helper takes the client's own settings, bootstrap servers included (kafka-python's keyword names,
``bootstrap_servers``; librdkafka's dotted names, ``bootstrap.servers``), so plaintext and secured
listeners are driven by the same code. The clients are imported on use: a test skips a client that is
not installed with :func:`client_or_skip` (or ``pytest.importorskip``)."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

Header = Tuple[str, Optional[bytes]]
# (key, value, headers, timestamp ms)
Message = Tuple[Optional[bytes], Optional[bytes], List[Header], int]
# A record as read back: (partition, offset, key, value, headers, timestamp)
Read = Tuple[int, int, Optional[bytes], Optional[bytes], List[Header], int]


def client_or_skip(name: str) -> None:
    """Skip the test unless the client named "kafka-python" or "confluent" is installed."""
    pytest.importorskip("kafka" if name == "kafka-python" else "confluent_kafka")


def expected_reads(msgs: List[Message], positions: List[Tuple[int, int]]) -> List[Read]:
    """What reading back ``msgs``, produced to ``positions`` ((partition, offset) each), gives, sorted."""
    return sorted((p, o, k, v, h, ts) for (k, v, h, ts), (p, o) in zip(msgs, positions))


# ----------------------------------------------------------------------------------- kafka-python


def produce_kafka_python(config: Dict[str, Any], topic: str, msgs: List[Message],
                         **extra: Any) -> List[Tuple[int, int]]:
    """Send ``msgs`` with acks=all and wait for each; their (partition, offset) in order. ``config`` and
    ``extra`` are KafkaProducer keyword arguments."""
    from kafka import KafkaProducer  # type: ignore[import-untyped]

    producer = KafkaProducer(acks="all", linger_ms=5, max_request_size=1 << 20, **config, **extra)
    try:
        futures = [producer.send(topic, key=k, value=v, headers=h, timestamp_ms=ts) for k, v, h, ts in msgs]
        producer.flush(30)
        metadata = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(10)
    return [(m.partition, m.offset) for m in metadata]


def consume_kafka_python(config: Dict[str, Any], topic: str, partitions: int, expected: int,
                         read_committed: Optional[bool] = None, settle: float = 0.0) -> List[Read]:
    """Read ``topic``'s partitions from the start until ``expected`` records came (or 30 s passed), then,
    when ``settle`` (seconds) is given, poll that long once more so that extra records would show.
    ``read_committed`` None leaves kafka-python's default isolation level (read_uncommitted)."""
    from kafka import KafkaConsumer, TopicPartition

    if read_committed is not None:
        config = {**config, "isolation_level": "read_committed" if read_committed else "read_uncommitted"}
    consumer = KafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100,
                             **config)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: List[Read] = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records)
        if settle:  # nothing more arrives
            for records in consumer.poll(timeout_ms=int(settle * 1000)).values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records)
        return out
    finally:
        consumer.close()


# -------------------------------------------------------------------------------- confluent-kafka


def produce_confluent(config: Dict[str, Any], topic: str, msgs: List[Message],
                      **extra: Any) -> List[Tuple[int, int]]:
    """Send ``msgs`` with acks=all and idempotence, flush, and return their (partition, offset) in order.
    ``config`` and ``extra`` are librdkafka settings; they override those defaults."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                                         **config, **extra})
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


def consume_confluent(config: Dict[str, Any], topic: str, partitions: int, expected: int,
                      read_committed: Optional[bool] = None, settle: float = 0.0) -> List[Read]:
    """Read ``topic``'s partitions from the start until ``expected`` records came (or 30 s passed), then,
    when ``settle`` (seconds) is given, go on reading until a poll finds nothing ``settle`` seconds after
    the first empty one, so that extra records would show. ``read_committed`` None leaves librdkafka's
    default isolation level (read_committed)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    settings = {**config, "group.id": "mock-test", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    if read_committed is not None:
        settings["isolation.level"] = "read_committed" if read_committed else "read_uncommitted"
    # the mock has no consumer groups: assign() and no commits
    consumer = confluent_kafka.Consumer(settings)
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        out: List[Read] = []
        deadline = time.monotonic() + 30
        quiet_until: Optional[float] = None
        while time.monotonic() < deadline:
            if len(out) >= expected and not settle:
                break
            msg = consumer.poll(0.1)
            if msg is None:
                if len(out) >= expected:
                    quiet_until = quiet_until or time.monotonic() + settle
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
