"""The ``kproducer`` Spark sink against a real Apache Kafka cluster (the session's ``apache_kafka``: 3 brokers,
PLAINTEXT listener), read back with kafka-python and confluent-kafka -- as read_committed consumers where the
write is exactly-once. Apache Kafka filters aborted transactions on read (tansu 0.6 does not), so this is where
``kproducer.guarantee=exactly_once`` meets the real transaction coordinator: a task failing half-way and retried,
a failed job, a micro-batch replayed after it was committed, a driver stopped between two tasks' commits.

Transaction states are read from the coordinators with kafka-python's admin client (ListTransactions /
DescribeTransactions), independently of kproducer. Few rows and two Kafka partitions keep the file short.
"""
from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from kproducer.producer.partitioner import murmur2
from kproducer.producer.transaction_handle import abort_transactional_id
from kproducer.spark import SinkWriteError
from kproducer.spark._sink import transactional_id
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


# -- exactly-once: the writers called directly (no Spark job): speculation, fencing, timeouts ------------------

@pytest.mark.parametrize("winner", [0, 1], ids=["first-attempt-wins", "speculative-copy-wins"])
def test_speculative_second_attempt(apache_kafka: Any, admin: Any, monkeypatch: Any, topic: str,
                                    winner: int) -> None:
    """Attempts 0 and 1 of task 0 both write all its rows, each in a transaction under its own id; the
    driver commits the winner's and, by InitProducerId on the loser's id, aborts the loser's."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-spec-{uuid.uuid4().hex[:8]}"
    writer = batch_writer(bootstrap, topic, prefix)
    as_task(monkeypatch, 0, 0)
    first = writer.write(iter([rows(0, 300, PARTITIONS)]))
    as_task(monkeypatch, 0, 1)
    second = writer.write(iter([rows(0, 300, PARTITIONS)]))
    as_task(monkeypatch, 1, 0)
    other = writer.write(iter([rows(300, 500, PARTITIONS)]))
    loser = transactional_id(prefix, 0, 1 - winner)
    assert open_transactions(admin, prefix) == {loser: "Ongoing", transactional_id(prefix, 0, winner): "Ongoing",
                                                transactional_id(prefix, 1, 0): "Ongoing"}
    writer.commit([first if winner == 0 else second, other])

    assert read_values(bootstrap, topic) == Counter(range(500))
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == 800
    assert open_transactions(admin, prefix) == {}
    states = transactions(admin, prefix)
    assert states[transactional_id(prefix, 0, winner)] == "CompleteCommit", states
    # the fenced loser: aborted (CompleteAbort), then Empty once InitProducerId finished bumping its epoch
    assert states[loser] in ("CompleteAbort", "Empty"), states


def test_commit_is_idempotent_and_abort_leaves_nothing(apache_kafka: Any, admin: Any, monkeypatch: Any,
                                                       topic: str) -> None:
    """A driver that commits twice (a retry): the coordinator answers the repeated EndTxn(commit) of a
    committed transaction with success. abort() of another write: nothing of it is visible."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-idem-{uuid.uuid4().hex[:8]}"
    writer = batch_writer(bootstrap, topic, prefix)
    as_task(monkeypatch, 0, 0)
    msg = writer.write(iter([rows(0, 100, PARTITIONS)]))
    writer.commit([msg])
    writer.commit([msg])
    assert read_values(bootstrap, topic) == Counter(range(100))

    aborted_prefix = f"ak-idem-abort-{uuid.uuid4().hex[:8]}"
    aborted = batch_writer(bootstrap, topic, aborted_prefix)
    gone = aborted.write(iter([rows(100, 200, PARTITIONS)]))
    aborted.abort([gone, None])
    assert open_transactions(admin, aborted_prefix) == {}
    assert transactions(admin, aborted_prefix) == {transactional_id(aborted_prefix, 0, 0): "CompleteAbort"}
    assert read_values(bootstrap, topic) == Counter(range(100))
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == 200


def test_fenced_transaction_fails_the_commit_naming_the_task(apache_kafka: Any, admin: Any, monkeypatch: Any,
                                                             topic: str) -> None:
    """Another producer of the task's transactional id (InitProducerId) aborts its open transaction: the
    driver's EndTxn(commit) with the old epoch is refused (PRODUCER_FENCED), and the error names the task."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-fenced-{uuid.uuid4().hex[:8]}"
    writer = batch_writer(bootstrap, topic, prefix)
    as_task(monkeypatch, 0, 0)
    msg = writer.write(iter([rows(0, 10, PARTITIONS)]))
    abort_transactional_id(msg.transaction["transactional_id"], {"bootstrap.servers": bootstrap})
    with pytest.raises(SinkWriteError) as info:
        writer.commit([msg])
    text = str(info.value)
    assert "committing the write failed for 1 of 1 tasks: task 0" in text, text
    assert "another producer of this transactional id" in text, text
    assert read_values(bootstrap, topic) == Counter()
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == 10


def test_transaction_timed_out_on_the_coordinator_fails_the_commit(apache_kafka: Any, admin: Any, monkeypatch: Any,
                                                                   topic: str) -> None:
    """A task's transaction left open longer than transaction.timeout.ms is aborted by the coordinator (its
    periodic scan, transaction.abort.timed.out.transaction.cleanup.interval.ms: 10 s by default), with an
    epoch bump: the driver's commit then fails saying the transaction outlived the timeout."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-timeout-{uuid.uuid4().hex[:8]}"
    # the sink's check: transaction.timeout.ms > trigger interval (0) + request.timeout.ms
    writer = batch_writer(bootstrap, topic, prefix, **{"kafka.transaction.timeout.ms": "5000",
                                                       "kafka.request.timeout.ms": "4000"})
    as_task(monkeypatch, 0, 0)
    msg = writer.write(iter([rows(0, 20, PARTITIONS)]))
    tid = transactional_id(prefix, 0, 0)
    assert transactions(admin, prefix) == {tid: "Ongoing"}
    # bounded wait: the timeout, then the coordinator's next scan
    assert open_transactions(admin, prefix, 90.0, ongoing_too=True) == {}, "the coordinator aborts a timed-out one"
    assert transactions(admin, prefix) == {tid: "CompleteAbort"}
    with pytest.raises(SinkWriteError) as info:
        writer.commit([msg])
    text = str(info.value)
    assert "longer than transaction.timeout.ms=5000: the coordinator aborted it" in text, text
    assert read_values(bootstrap, topic) == Counter()
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == 20


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
    sink_write(df, apache_kafka.bootstrap_servers, topic, **{"kproducer.transactional.id.prefix": prefix})

    bootstrap = apache_kafka.bootstrap_servers
    assert read_values(bootstrap, topic) == Counter(range(n))
    committed = confluent_read(bootstrap, topic)
    assert Counter(int(v) for *_x, v, _h in committed if v is not None) == Counter(range(n))
    # nothing else in the log: no aborted attempt, and the tasks' transactions ended committed
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == n
    assert open_transactions(admin, prefix) == {}
    states = transactions(admin, prefix)
    for p in range(2):
        assert states.get(transactional_id(prefix, p, 0)) == "CompleteCommit", states
        assert states.get(transactional_id(prefix, p, 1)) == "Empty", states  # fenced by the driver


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
    states = transactions(admin, prefix)
    # attempt 0 aborted its own transaction when it failed; attempt 1's was committed by the driver, which
    # then fenced the ids of attempts 0 and 2 (InitProducerId: a completed transaction's id goes to Empty,
    # an unknown id is created Empty)
    for p in range(2):
        assert states.get(transactional_id(prefix, p, 0)) == "Empty", states
        assert states.get(transactional_id(prefix, p, 1)) == "CompleteCommit", states
        assert states.get(transactional_id(prefix, p, 2)) == "Empty", states


def test_failed_job_leaves_nothing_visible(spark: Any, apache_kafka: Any, admin: Any, topic: str) -> None:
    """Task 1 fails in both attempts (partition 9 of 2); task 0's attempt 0 writes and flushes 100 rows,
    then fails (fault injection), its attempt 1 writes all 200. The job fails: read_committed consumers see
    none of its rows, although at least attempt 0's 100 are in the log (read_uncommitted)."""
    prefix = f"ak-failed-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 400, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(IF(id < 200, id % 2, 9) AS INT) AS partition")
    with arrow_batch_rows(spark, 100), pytest.raises(Exception) as info:
        sink_write(df, apache_kafka.bootstrap_servers, topic, **{
            "kproducer.transactional.id.prefix": prefix, "kafka.max.block.ms": "5000",
            "kproducer.test.fail.after.rows": "100"})
    assert "Partition 9 of topic" in str(info.value) and "partition count 2" in str(info.value)
    # task 0's last transaction ends aborted: by the driver's abort() when the task finished first, or by the
    # task itself when Spark cancelled it (closing its producer aborts); bounded wait for the markers
    assert open_transactions(admin, prefix, 90.0, ongoing_too=True) == {}
    states = transactions(admin, prefix)
    assert states.get(transactional_id(prefix, 0, 0)) == "CompleteAbort", states
    assert "CompleteCommit" not in states.values(), states

    bootstrap = apache_kafka.bootstrap_servers
    ends = log_ends(bootstrap, topic)
    assert ends["read_committed"] == ends["read_uncommitted"], ends  # nothing holds back the stable offset
    written = read_values(bootstrap, topic, "read_uncommitted")
    assert Counter(range(100)) <= written and set(written) <= set(range(200)), written
    assert read_values(bootstrap, topic) == Counter()
    assert confluent_read(bootstrap, topic) == []


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


def test_stream_driver_stopped_mid_commit_then_restarted(spark: Any, apache_kafka: Any, admin: Any,
                                                         topic: str) -> None:
    """The driver commits task 0's transaction of micro-batch 0 and stops (fault injection) with task 1's
    left open on the coordinator. The query restarted from its checkpoint replays batch 0: task 0 writes
    nothing, task 1's InitProducerId (same transactional id) aborts the open transaction and writes again."""
    bootstrap = apache_kafka.bootstrap_servers
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-ak-crash-")
    try:
        query = stream(spark, bootstrap, topic, checkpoint, rows, **{"kproducer.test.fail.commit.after": "1"})
        with pytest.raises(Exception) as info:
            query.awaitTermination(120)
        assert "kproducer.test.fail.commit.after=1" in str(info.value)
        prefix = f"kproducer-{query.id}"
        task1 = transactional_id(prefix, 1, 0)
        assert open_transactions(admin, prefix) == {task1: "Ongoing"}
        described = admin.describe_transactions([task1])[task1]
        # the rows' partitions and, for the micro-batch marker (TxnOffsetCommit), a __consumer_offsets partition
        assert {tp.topic for tp in described.topic_partitions} == {topic, "__consumer_offsets"}, described
        # task 0's rows are committed; task 1's hold back the last stable offset of the partitions it wrote to
        ends = log_ends(bootstrap, topic)
        for tp in described.topic_partitions:
            if tp.topic == topic:
                assert ends["read_committed"][tp.partition] < ends["read_uncommitted"][tp.partition], ends
        assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == rows

        query = stream(spark, bootstrap, topic, checkpoint, rows)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 0, seen  # the replay of batch 0 (availableNow may run batch 1 too)
        total = rows * (max(seen) + 1)
        assert read_values(bootstrap, topic) == Counter(range(total))
        # task 1's first transaction of batch 0 was written and aborted; task 0's was not written twice
        assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == total + rows // 2
        assert open_transactions(admin, prefix) == {}
        ends = log_ends(bootstrap, topic)
        assert ends["read_committed"] == ends["read_uncommitted"], ends
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
