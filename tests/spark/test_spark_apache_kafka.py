"""The ``kproducer`` Spark sink against a real Apache Kafka cluster (the session's ``apache_kafka``: 3 brokers,
PLAINTEXT listener), read back with kafka-python and confluent-kafka -- as read_committed consumers where the
write is exactly-once. Apache Kafka filters aborted transactions on read (tansu 0.6 does not), so this is where
``kproducer.guarantee=exactly_once`` meets the real transaction coordinator: each task attempt commits its own
transaction under ``<prefix>-<Spark partition>`` with the partition's marker (issue 29); a speculative copy
fencing the first attempt mid-write, a task whose transaction outlives transaction.timeout.ms (aborted by the
coordinator), a task failing half-way and retried, a failed job run again with the same ``kproducer.write.id``,
a micro-batch replayed after it was committed, a driver failing in a micro-batch's commit. The at-least-once
runs of the same faults (the controls) show the duplicates.

Transaction states are read from the coordinators with kafka-python's admin client (ListTransactions /
DescribeTransactions), the markers with its OffsetFetch (list_group_offsets), independently of kproducer. Few
rows and two Kafka partitions keep the file short. The same scenarios on a Spark standalone cluster:
test_spark_standalone.py.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from kproducer.producer.partitioner import murmur2
from kproducer.spark import SinkCommitMessage, SinkWriteError
from kproducer.spark._sink import marker_group, transactional_id
from tests.spark.eos_helpers import (
    arrow_batch_rows,
    as_task,
    batch_writer,
    batches_run,
    forget_commit,
    rows,
    sink_write,
    stream,
)

pytestmark = [pytest.mark.spark, pytest.mark.apache_kafka]

PARTITIONS = 2

#: transaction states in which a transaction holds back the last stable offset of its partitions
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
#: the states of a transaction being completed: EndTxn (or a fence) answered, the coordinator writes its markers
COMPLETING = ("PrepareCommit", "PrepareAbort", "PrepareEpochFence")


@pytest.fixture
def topic(ak_topic: Callable[..., str]) -> str:
    return ak_topic(partitions=PARTITIONS, replication_factor=3, prefix="spark")


@pytest.fixture(scope="module")
def admin(apache_kafka: Any) -> Any:
    from kafka import KafkaAdminClient  # type: ignore[import-untyped]

    client = KafkaAdminClient(bootstrap_servers=apache_kafka.bootstrap_servers, client_id="kproducer-spark-ak-admin",
                              request_timeout_ms=30000)
    try:
        yield client
    finally:
        client.close()


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


def log_ends(bootstrap: str, topic: str) -> Dict[str, List[int]]:
    """Per partition, the end of the log for each isolation level (ListOffsets with kafka-python): the high
    watermark for read_uncommitted, the last stable offset for read_committed (lower while a transaction is
    open on the partition)."""
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    out: Dict[str, List[int]] = {}
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                 isolation_level=isolation, request_timeout_ms=15000, client_id="kproducer-spark-ak")
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            ends = consumer.end_offsets(tps)
            out[isolation] = [ends[tp] for tp in tps]
        finally:
            consumer.close()
    return out


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 60.0) -> List[Record]:
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
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
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


def read_values(bootstrap: str, topic: str, isolation: str = "read_committed") -> Counter:  # type: ignore[type-arg]
    """:func:`read_all`'s record values (integers) as a Counter."""
    return Counter(int(v) for _p, _o, _k, v, _h in read_all(bootstrap, topic, isolation) if v is not None)


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


# -- at-least-once ------------------------------------------------------------------------------------------

def test_at_least_once_keys_values_headers(spark: Any, apache_kafka: Any, topic: str) -> None:
    """5,000 rows with key, value and two headers (one with a null value), the partition chosen by the
    partitioner from the key (murmur2, as the Java client): every row is read back once, byte for byte, from
    its key's partition (confluent-kafka)."""
    n = 5000
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "concat('k', id) AS key", "CAST(id AS STRING) AS value",
        "array(named_struct('key', 'id', 'value', CAST(CAST(id AS STRING) AS BINARY)),"
        "      named_struct('key', 'none', 'value', CAST(NULL AS BINARY))) AS headers")
    sink_write(df, apache_kafka.bootstrap_servers, topic, "at_least_once", **{"kafka.linger.ms": "5"})

    got = confluent_read(apache_kafka.bootstrap_servers, topic, "read_uncommitted")
    by_id: Counter = Counter()  # type: ignore[type-arg]
    for partition, _o, key, value, headers in got:
        assert value is not None and key is not None
        assert key == b"k" + value
        assert partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
        assert headers == [("id", value), ("none", None)]
        by_id[int(value)] += 1
    assert by_id == Counter(range(n))


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


# -- exactly-once: the writers called directly (no Spark job): attempts interleaved as we choose ------------------

def test_speculative_copy_fences_the_first_attempt_mid_write(apache_kafka: Any, admin: Any, monkeypatch: Any,
                                                             topic: str) -> None:
    """kproducer.buffer.bytes=0: attempt 0 of task 0 has sent and flushed its first rows in its transaction when a
    copy (attempt 1) runs from start to commit. The copy's InitProducerId (same transactional id) aborts attempt 0's
    transaction; attempt 0's next request is refused and it fails naming the copy. A later copy (attempt 2) finds the
    marker and writes nothing. The coordinator shows one transactional id per Spark partition, committed."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-spec-{uuid.uuid4().hex[:8]}"
    writer = batch_writer(bootstrap, topic, prefix, **{"kproducer.buffer.bytes": "0",
                                                       "kproducer.test.sleep.after.rows": "100",
                                                       "kproducer.test.sleep.ms": "0"})
    copy: List[SinkCommitMessage] = []

    def attempt0_input() -> Any:
        yield rows(0, 100, PARTITIONS)  # (flushed after it: kproducer.test.sleep.after.rows)
        as_task(monkeypatch, 0, 1)
        copy.append(writer.write(iter([rows(0, 200, PARTITIONS)])))
        as_task(monkeypatch, 0, 0)
        yield rows(100, 200, PARTITIONS)

    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(attempt0_input())
    text = str(info.value)
    assert "another attempt of this task (a speculative copy or Spark's retry) began under" in text, text
    as_task(monkeypatch, 0, 2)
    late = writer.write(iter([rows(0, 200, PARTITIONS)]))
    assert (copy[0].rows, copy[0].skipped, late.rows, late.skipped) == (200, False, 0, True)

    assert read_values(bootstrap, topic) == Counter(range(200))
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == 300  # attempt 0's 100, aborted
    assert open_transactions(admin, prefix) == {}
    assert transactions(admin, prefix) == {transactional_id(prefix, 0): "CompleteCommit"}
    assert markers(admin, prefix, 1) == {0: {"write": writer.write_id, "partition": 0, "attempt": 1, "rows": 200}}


def test_task_transaction_outliving_the_timeout_fails_naming_it(apache_kafka: Any, admin: Any, monkeypatch: Any,
                                                                topic: str) -> None:
    """kproducer.buffer.bytes=0 and transaction.timeout.ms=3000: the task's input stops after its first rows until
    the coordinator has aborted the transaction (its periodic scan,
    transaction.abort.timed.out.transaction.cleanup.interval.ms: 10 s by default, with an epoch bump): the task
    fails saying the transaction outlived the timeout and what to change. Nothing is visible."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-timeout-{uuid.uuid4().hex[:8]}"
    writer = batch_writer(bootstrap, topic, prefix, **{"kafka.transaction.timeout.ms": "3000",
                                                       "kproducer.buffer.bytes": "0"})
    tid = transactional_id(prefix, 0)
    states: List[Dict[str, str]] = []

    def stalled() -> Any:
        yield rows(0, 20, PARTITIONS)
        deadline = time.monotonic() + 90  # bounded: the timeout, then the coordinator's next scan
        while time.monotonic() < deadline:
            states.append(transactions(admin, prefix))
            if states[-1].get(tid) in ("CompleteAbort", "Empty"):
                break
            time.sleep(0.5)
        yield rows(20, 40, PARTITIONS)

    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(stalled())
    assert states[-1].get(tid) in ("CompleteAbort", "Empty"), states[-3:]  # the coordinator aborted it
    assert "Ongoing" in [st.get(tid) for st in states], states[:3]
    text = str(info.value)
    assert "longer than transaction.timeout.ms=3000: the coordinator aborted it" in text, text
    assert read_values(bootstrap, topic) == Counter()
    assert open_transactions(admin, prefix, 30.0, ongoing_too=True) == {}


def test_refused_transaction_timeout_fails_the_task_before_writing(apache_kafka: Any, monkeypatch: Any,
                                                                   topic: str) -> None:
    """transaction.timeout.ms above the broker's transaction.max.timeout.ms (15 min): InitProducerId answers
    INVALID_TRANSACTION_TIMEOUT and the task fails before writing anything."""
    bootstrap = apache_kafka.bootstrap_servers
    writer = batch_writer(bootstrap, topic, f"ak-maxto-{uuid.uuid4().hex[:8]}",
                          **{"kafka.transaction.timeout.ms": "3600000", "kafka.max.block.ms": "10000"})
    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(iter([rows(0, 5, PARTITIONS)]))
    text = str(info.value)
    assert "INVALID_TRANSACTION_TIMEOUT" in text and "nothing was written" in text, text
    assert read_values(bootstrap, topic, "read_uncommitted") == Counter()


# -- exactly-once: batch writes -----------------------------------------------------------------------------

def test_exactly_once_batch_write(spark: Any, apache_kafka: Any, admin: Any, topic: str) -> None:
    n = 5000
    prefix = f"ak-eos-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, n, numPartitions=2).selectExpr("concat('k', id) AS key", "CAST(id AS STRING) AS value")
    sink_write(df, apache_kafka.bootstrap_servers, topic, **{"kproducer.transactional.id.prefix": prefix,
                                                              "kproducer.write.id": "ak-eos-write"})

    bootstrap = apache_kafka.bootstrap_servers
    assert read_values(bootstrap, topic) == Counter(range(n))
    committed = confluent_read(bootstrap, topic)
    assert Counter(int(v) for *_x, v, _h in committed if v is not None) == Counter(range(n))
    # nothing else in the log: no aborted attempt, and the tasks' transactions ended committed
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == n
    assert open_transactions(admin, prefix) == {}
    assert transactions(admin, prefix) == {transactional_id(prefix, p): "CompleteCommit" for p in range(2)}
    found = markers(admin, prefix, 2)
    assert {p: (m["write"], m["rows"]) for p, m in found.items()} == {0: ("ak-eos-write", n // 2),
                                                                     1: ("ak-eos-write", n // 2)}


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_task_failing_half_way_is_retried(spark: Any, apache_kafka: Any, admin: Any, topic: str,
                                          guarantee: str) -> None:
    """Attempt 0 of both tasks writes (and flushes: the rows are in the log) its first quarter of the rows,
    then fails; Spark retries each task. exactly_once: read_committed sees every row once, the failed
    attempts' rows are in the log, aborted. at_least_once (the control run: the fault bit): the first
    quarter of each task's rows is there twice."""
    n = 4000
    prefix = f"ak-retry-{uuid.uuid4().hex[:8]}"
    options = {"kproducer.test.fail.after.rows": str(n // 4)}
    if guarantee == "exactly_once":
        options["kproducer.transactional.id.prefix"] = prefix
    with arrow_batch_rows(spark, 500):
        df = spark.range(0, n, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
        sink_write(df, apache_kafka.bootstrap_servers, topic, guarantee, **options)

    bootstrap = apache_kafka.bootstrap_servers
    # the Spark partitions are ids [0, n/2) and [n/2, n): each failed attempt wrote the first n/4 of its own
    written_twice = Counter(range(n // 4)) + Counter(range(n // 2, n // 2 + n // 4))
    everything = read_values(bootstrap, topic, "read_uncommitted")
    assert everything == Counter(range(n)) + written_twice
    if guarantee == "at_least_once":
        assert read_values(bootstrap, topic) == everything  # no transactions to hide
        return
    assert read_values(bootstrap, topic) == Counter(range(n))
    assert open_transactions(admin, prefix) == {}
    # attempt 0 aborted its own transaction when it failed; attempt 1 committed under the same transactional id
    assert transactions(admin, prefix) == {transactional_id(prefix, p): "CompleteCommit" for p in range(2)}
    assert {p: m["attempt"] for p, m in markers(admin, prefix, 2).items()} == {0: 1, 1: 1}


@pytest.mark.parametrize("same_write_id", [True, False], ids=["same-write-id", "control-no-write-id"])
def test_failed_job_run_again(spark: Any, apache_kafka: Any, admin: Any, topic: str, same_write_id: bool,
                              tmp_path: Any) -> None:
    """Task 1's input fails in both attempts (a UDF, while a flag file exists, after a pause that lets task 0
    commit): the job fails, task 0's rows are committed (each task commits its own), nothing holds back the last
    stable offset. Run again (the flag gone) with the same kproducer.write.id, only task 1 writes; the control,
    without a write id, writes task 0's rows again."""
    from pyspark.sql.functions import udf

    bootstrap = apache_kafka.bootstrap_servers
    n = 400
    flag = str(tmp_path / "fail")
    with open(flag, "w") as f:
        f.write("task 1 fails while this file exists")

    def check(i: int) -> str:
        if i == n // 2 and os.path.exists(flag):
            time.sleep(2.0)
            raise ValueError("the input of task 1 failed")
        return str(i)

    df = spark.range(0, n, numPartitions=2).select(udf(check, "string")("id").alias("value"))
    prefix = f"ak-rerun-{uuid.uuid4().hex[:8]}"
    options = {"kproducer.write.id": prefix} if same_write_id else {}
    with pytest.raises(Exception) as info:
        sink_write(df, bootstrap, topic, **options)
    assert "the input of task 1 failed" in str(info.value)
    assert read_values(bootstrap, topic) == Counter(range(n // 2))
    ends = log_ends(bootstrap, topic)
    assert ends["read_committed"] == ends["read_uncommitted"], ends  # no transaction left open
    os.remove(flag)
    sink_write(df, bootstrap, topic, **options)
    if not same_write_id:
        assert read_values(bootstrap, topic) == Counter(range(n)) + Counter(range(n // 2))
        return
    assert read_values(bootstrap, topic) == Counter(range(n))
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == n
    # the default prefix is kproducer-<write id>: task 0 committed in the first run, task 1 in the second
    assert transactions(admin, f"kproducer-{prefix}") == {transactional_id(f"kproducer-{prefix}", p): "CompleteCommit"
                                                           for p in range(2)}


# -- exactly-once: streams ----------------------------------------------------------------------------------

def test_stream_micro_batch_replayed_after_commit_writes_nothing(spark: Any, apache_kafka: Any, admin: Any,
                                                                 topic: str) -> None:
    """Two availableNow runs write micro-batches 0 and 1; the checkpoint then forgets batch 1's commit, so
    the third run replays it: its tasks find batch 1 in their marker groups' committed offsets (written in
    the transactions) and write nothing -- not even an aborted transaction."""
    bootstrap = apache_kafka.bootstrap_servers
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-ak-replay-")
    try:
        for _ in range(2):
            query = stream(spark, bootstrap, topic, checkpoint, rows)
            query.awaitTermination(120)
            assert query.exception() is None
        forget_commit(checkpoint, 1)
        query = stream(spark, bootstrap, topic, checkpoint, rows)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 1, seen  # the replay (availableNow may run batch 2 after it)
        total = rows * (max(seen) + 1)
        assert read_values(bootstrap, topic) == Counter(range(total))
        assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == total
        assert open_transactions(admin, f"kproducer-{query.id}") == {}
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_stream_driver_fails_in_the_commit_then_restarted(spark: Any, apache_kafka: Any, admin: Any, topic: str,
                                                          guarantee: str) -> None:
    """The driver fails in micro-batch 0's commit (fault injection), after both tasks committed their
    transactions, before Spark records the batch in the checkpoint. The query restarted from its checkpoint
    replays batch 0: exactly_once, both tasks find their markers (batch 0, written in their transactions) and
    write nothing; the control (at_least_once) writes batch 0 again."""
    bootstrap = apache_kafka.bootstrap_servers
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-ak-crash-")
    try:
        query = stream(spark, bootstrap, topic, checkpoint, rows, guarantee, **{"kproducer.test.fail.in.commit": "1"})
        with pytest.raises(Exception) as info:
            query.awaitTermination(120)
        assert "kproducer.test.fail.in.commit" in str(info.value)
        prefix = f"kproducer-{query.id}"
        if guarantee == "exactly_once":
            assert {p: m["batch"] for p, m in markers(admin, prefix, 2).items()} == {0: 0, 1: 0}

        query = stream(spark, bootstrap, topic, checkpoint, rows, guarantee)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 0, seen  # the replay of batch 0 (availableNow may run batch 1 too)
        total = rows * (max(seen) + 1)
        if guarantee == "at_least_once":
            assert read_values(bootstrap, topic) == Counter(range(total)) + Counter(range(rows))
            return
        assert read_values(bootstrap, topic) == Counter(range(total))
        assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == total
        assert open_transactions(admin, prefix) == {}
        ends = log_ends(bootstrap, topic)
        assert ends["read_committed"] == ends["read_uncommitted"], ends
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
