"""Reading an Apache Kafka cluster independently of kproducer, for the Spark sink's tests on Apache Kafka
(test_spark_apache_kafka.py, test_spark_standalone.py): records with kafka-python and confluent-kafka (read to the
end of the log, read_committed or not), the transaction states (ListTransactions) and the sink's markers
(OffsetFetch) with kafka-python's admin client, the log end offsets per isolation level."""
from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import Counter
from typing import Any, Dict, Iterator, List, Optional, Tuple

from kproducer.spark._sink import marker_group

PARTITIONS = 2

#: transaction states in which a transaction holds back the last stable offset of its partitions
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
#: the states of a transaction being completed: EndTxn (or a fence) answered, the coordinator writes its markers
COMPLETING = ("PrepareCommit", "PrepareAbort", "PrepareEpochFence")


def _state(value: Any) -> str:
    return str(getattr(value, "value", value))


def transactions(admin: Any, prefix: str) -> Dict[str, str]:
    """``{transactional id: state}`` of every transactional id the coordinators list (ListTransactions)
    under ``prefix``, whatever the state (Empty, Ongoing, CompleteCommit, ...)."""
    listed = admin.list_transactions()
    return {t.transactional_id: _state(t.state) for batch in listed.values() for t in batch
            if t.transactional_id.startswith(prefix + "-")}


def open_transactions(admin: Any, prefix: str, timeout: float = 30.0, ongoing_too: bool = False) -> Dict[str, str]:
    """The open transactions under ``prefix`` once none of them is completing (the coordinator writes its
    markers after answering EndTxn), and with ``ongoing_too`` once none is open at all; or as they are after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        still = {t: s for t, s in transactions(admin, prefix).items() if s in OPEN_STATES}
        waiting = [s for s in still.values() if s in COMPLETING or ongoing_too]
        if not waiting or time.monotonic() >= deadline:
            return still
        time.sleep(0.2)


Record = Tuple[int, int, Optional[bytes], Optional[bytes], List[Tuple[str, Optional[bytes]]]]


def log_ends(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> Dict[str, List[int]]:
    """Per partition, the end of the log for each isolation level (ListOffsets with kafka-python): the high
    watermark for read_uncommitted, the last stable offset for read_committed (lower while a transaction is
    open on the partition)."""
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    out: Dict[str, List[int]] = {}
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                 isolation_level=isolation, request_timeout_ms=15000, client_id="kproducer-spark-ak")
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            ends = consumer.end_offsets(tps)
            out[isolation] = [ends[tp] for tp in tps]
        finally:
            consumer.close()
    return out


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 60.0,
             partitions: int = PARTITIONS) -> List[Record]:
    """Every record of ``topic`` a kafka-python consumer at ``isolation`` sees, read from the beginning until its
    position reaches the end of every partition (for read_committed the last stable offset, so aborted records
    and transaction markers are read past): an empty result means the consumer read the log through and found
    nothing, not that it gave up waiting. (partition, offset, key, value, headers)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level=isolation, fetch_max_wait_ms=50,
                             request_timeout_ms=15000, client_id="kproducer-spark-ak")
    out: List[Record] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"{isolation}: could not read {topic} to its end {end} in {timeout} s"
            for batch in consumer.poll(timeout_ms=200, max_records=100_000).values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers)) for r in batch)
    finally:
        consumer.close()
    return out


def read_values(bootstrap: str, topic: str, isolation: str = "read_committed",
                partitions: int = PARTITIONS) -> Counter:  # type: ignore[type-arg]
    """:func:`read_all`'s record values (integers) as a Counter."""
    return Counter(int(v) for _p, _o, _k, v, _h in read_all(bootstrap, topic, isolation, partitions=partitions)
                   if v is not None)


def confluent_read(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 60.0) -> List[Record]:
    """Like :func:`read_all`, with confluent-kafka (librdkafka): from the beginning until every partition
    reported its end (partition EOF; for read_committed, the last stable offset)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition  # type: ignore[import-untyped]

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"spark-ak-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                         "client.id": "kproducer-spark-ak", "fetch.wait.max.ms": 50})
    out: List[Record] = []
    at_end = set()
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])  # -2: OFFSET_BEGINNING
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{isolation}: confluent-kafka did not reach the end of {topic}"
            for m in consumer.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    at_end.add(m.partition())
                    continue
                out.append((m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or [])))
    finally:
        consumer.close()
    return out


def markers(admin: Any, prefix: str, partitions: int) -> Dict[int, Dict[str, Any]]:
    """Each Spark partition's marker (the metadata of its marker group's committed offset, read with kafka-python's
    OffsetFetch): ``{partition: {"write", "partition", "attempt", "rows"[, "batch"]}}``."""
    out: Dict[int, Dict[str, Any]] = {}
    for p in range(partitions):
        group = marker_group(prefix, p)
        offsets = admin.list_group_offsets({group: None})[group]
        for om in offsets.values():
            out[p] = json.loads(om.metadata)
    return out


@contextlib.contextmanager
def admin_client(bootstrap: str) -> Iterator[Any]:
    """A kafka-python KafkaAdminClient for ``bootstrap``, closed at the end of the block."""
    from kafka import KafkaAdminClient  # type: ignore[import-untyped]

    client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kproducer-spark-ak-admin",
                              request_timeout_ms=30000)
    try:
        yield client
    finally:
        client.close()
