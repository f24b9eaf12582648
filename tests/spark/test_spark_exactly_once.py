"""``kproducer.guarantee=exactly_once`` on the MockCluster, read back with kafka-python as a read_committed
consumer. Each task attempt commits its own transaction under ``<prefix>-<Spark partition>`` with the partition's
marker (issue 29): every row exactly once under a task that fails half-way (Spark retries it), a speculative copy
(before, during or after the first attempt's write), a job longer than transaction.timeout.ms, a failed job run
again with the same ``kproducer.write.id``, a driver that fails in a micro-batch's commit (the query restarted
from its checkpoint), and a micro-batch replayed after it was committed. The at-least-once runs of the same faults
(the controls) show the duplicates.

tansu 0.6 does not filter aborted transactions on read (DESIGN.md §4), so it cannot show any of this.
The writer-level tests call the writers' write()/commit()/abort() directly with a task context of our choosing
(two attempts of one partition interleaved in the order we pick): local[N] Spark never runs speculative copies.
The same scenarios on Apache Kafka: test_spark_apache_kafka.py; on a Spark standalone cluster:
test_spark_standalone.py.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Optional

import pyarrow as pa
import pytest

from kproducer.errors import ConfigError
from kproducer.mock import MockCluster
from kproducer.spark import KafkaBatchWriter, SinkCommitMessage, SinkWriteError, check_schema, parse_options
from kproducer.spark._options import DEFAULT_BUFFER_BYTES
from kproducer.spark._sink import KafkaStreamWriter, find_marker, marker_group, transactional_id
from tests.spark.eos_helpers import (
    arrow_batch_rows,
    as_task,
    batch_writer,
    batches_run,
    forget_commit,
    frame_whose_task_1_fails,
    sink_write,
    stream,
    values,
)
from tests.spark.eos_helpers import rows as arrow_rows

pytestmark = [pytest.mark.spark]

PARTITIONS = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(1, num_processors=2, num_handlers=2) as c:
        yield c


def _topic(cluster: MockCluster, prefix: str) -> str:
    name = f"eos-{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=PARTITIONS)
    return name


def _values(consume: Callable[..., Any], cluster: MockCluster, topic: str, expected: int,
            isolation: str = "read_committed") -> Counter:  # type: ignore[type-arg]
    return values(consume, cluster.bootstrap_servers, topic, PARTITIONS, expected, isolation)


def _no_open_transaction(cluster: MockCluster, prefix: str, tasks: int) -> None:
    for p in range(tasks):
        tid = transactional_id(prefix, p)
        assert cluster.transaction_state(tid) != "Ongoing", f"{tid} left open"


# -- options -----------------------------------------------------------------------------------------------

def _eos(**extra: str) -> Dict[str, str]:
    return dict({"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t", "kproducer.guarantee": "exactly_once"},
                **extra)


def test_exactly_once_options() -> None:
    opts = parse_options(_eos(**{"kproducer.transactional.id.prefix": "orders", "kproducer.write.id": "daily-7",
                                 "kproducer.buffer.bytes": "0"}))
    assert opts.exactly_once and opts.transactional_id_prefix == "orders" and opts.write_id == "daily-7"
    assert opts.buffer_bytes == 0 and "write_id='daily-7'" in repr(opts)
    assert parse_options(_eos()).buffer_bytes == DEFAULT_BUFFER_BYTES
    assert not parse_options({"kafka.bootstrap.servers": "h:1"}).exactly_once
    assert parse_options(_eos(**{"kproducer.guarantee": "Exactly-Once"})).exactly_once
    # a job long beside the transaction timeout is no longer refused: no transaction outlives its task
    assert parse_options(_eos(**{"kproducer.trigger.interval.ms": "600000"})).exactly_once


@pytest.mark.parametrize("options, message", [
    (_eos(**{"kproducer.guarantee": "twice"}), "must be one of at_least_once, exactly_once"),
    (_eos(**{"kproducer.guarantees": "exactly_once"}), "did you mean 'kproducer.guarantee'?"),
    (_eos(**{"kproducer.writeid": "x"}), "did you mean 'kproducer.write.id'?"),
    (_eos(**{"kafka.enable.idempotence": "false"}), "exactly_once writes through Kafka transactions"),
    ({"kafka.bootstrap.servers": "h:1", "kproducer.transactional.id.prefix": "x"}, "apply to"),
    ({"kafka.bootstrap.servers": "h:1", "kproducer.write.id": "x"}, "'kproducer.write.id'"),
    (_eos(**{"kproducer.write.id": " "}), "option 'kproducer.write.id' is empty"),
    (_eos(**{"kproducer.buffer.bytes": "-1"}), "must be a non-negative integer"),
    (_eos(**{"kproducer.trigger.interval.ms": "soon"}), "must be a non-negative integer"),
])
def test_exactly_once_option_errors(options: Dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(options)
    assert message in str(info.value), str(info.value)


def test_markers_name_the_write_and_the_micro_batch() -> None:
    batch = {("t", 0): (0, '{"write":"w1","partition":3,"attempt":1,"rows":5}')}
    assert find_marker(batch, "w1", None) == {"write": "w1", "partition": 3, "attempt": 1, "rows": 5}
    assert find_marker(batch, "w2", None) is None  # another write under the same prefix
    assert find_marker({("t", 0): (0, "not json")}, "w1", None) is None
    streams = {("t", 0): (7, '{"write":"q","partition":0,"attempt":0,"rows":5,"batch":7}')}
    assert find_marker(streams, "q", 7) is not None and find_marker(streams, "q", 6) is not None
    assert find_marker(streams, "q", 8) is None and find_marker(streams, "other-query", 7) is None
    assert find_marker(streams, "q", None) is None  # a stream's marker is no batch write's
    assert find_marker({("t", 0): (7, '{"batch":7}')}, "q", 7) is not None  # (written before issue 29)


# -- the writers called directly (no SparkSession): attempts interleaved as we choose ------------------------

def _rows(lo: int, hi: int) -> pa.RecordBatch:
    return arrow_rows(lo, hi, PARTITIONS)


def _batch_writer(cluster: MockCluster, topic: str, prefix: Optional[str] = None, write_id: Optional[str] = None,
                  **options: str) -> KafkaBatchWriter:
    return batch_writer(cluster.bootstrap_servers, topic, prefix, write_id, **options)


def test_speculative_copy_after_the_commit_writes_nothing(cluster: MockCluster, consume: Callable[..., Any],
                                                          monkeypatch: Any) -> None:
    """Attempt 0 of task 0 commits its rows; a speculative copy (attempt 1) that starts later finds the partition's
    marker and writes nothing -- not even an aborted transaction. Task 1 commits its own."""
    topic = _topic(cluster, "spec-after")
    writer = _batch_writer(cluster, topic)
    as_task(monkeypatch, 0, 0)
    first = writer.write(iter([_rows(0, 300)]))
    as_task(monkeypatch, 0, 1)
    second = writer.write(iter([_rows(0, 300)]))
    as_task(monkeypatch, 1, 0)
    other = writer.write(iter([_rows(300, 500)]))
    assert (first.rows, first.skipped, first.transactional_id) == (300, False, transactional_id(writer.prefix, 0))
    assert (second.rows, second.skipped, second.transactional_id) == (0, True, None)
    writer.commit([second, other])  # Spark's commit coordinator may pick either message: nothing depends on it

    assert _values(consume, cluster, topic, 500) == Counter(range(500))
    assert sum(_values(consume, cluster, topic, 500, "read_uncommitted").values()) == 500
    _no_open_transaction(cluster, writer.prefix, 2)
    marker = cluster.committed_offsets(marker_group(writer.prefix, 0))
    assert marker == {(topic, 0): 0}, marker


@pytest.mark.parametrize("buffer_bytes", [0, DEFAULT_BUFFER_BYTES], ids=["no-buffer", "buffered"])
def test_speculative_copy_during_the_write(cluster: MockCluster, consume: Callable[..., Any], monkeypatch: Any,
                                           buffer_bytes: int) -> None:
    """A copy (attempt 1) runs from start to commit while attempt 0 is between its first and second batch.
    Without a buffer attempt 0 had begun its transaction: the copy's InitProducerId aborted it, and attempt 0
    fails naming the copy. With the buffer (the default) attempt 0 had only held its first batch: it begins after
    the copy committed, finds the marker and writes nothing. Either way every row once."""
    topic = _topic(cluster, "spec-during")
    writer = _batch_writer(cluster, topic, **{"kproducer.buffer.bytes": str(buffer_bytes)})
    copy: List[SinkCommitMessage] = []

    def attempt0_input() -> Iterator[pa.RecordBatch]:
        yield _rows(0, 100)
        time.sleep(0.2)  # (attempt 0's first rows on their way: not needed for the outcome)
        as_task(monkeypatch, 0, 1)
        copy.append(writer.write(iter([_rows(0, 100), _rows(100, 200)])))
        as_task(monkeypatch, 0, 0)
        yield _rows(100, 200)

    as_task(monkeypatch, 0, 0)
    if buffer_bytes == 0:
        with pytest.raises(SinkWriteError) as info:
            writer.write(attempt0_input())
        text = str(info.value)
        assert "another attempt of this task (a speculative copy or Spark's retry) began under" in text, text
    else:
        first = writer.write(attempt0_input())
        assert first.skipped and first.rows == 0
    assert copy[0].rows == 200 and not copy[0].skipped

    assert _values(consume, cluster, topic, 200) == Counter(range(200))
    written = sum(_values(consume, cluster, topic, 300 if buffer_bytes == 0 else 200, "read_uncommitted").values())
    assert 200 <= written <= (300 if buffer_bytes == 0 else 200)  # attempt 0's first rows, aborted, if they got out
    _no_open_transaction(cluster, writer.prefix, 1)


@pytest.mark.parametrize("write_id", ["nightly-2026-11-28", None], ids=["same-write-id", "control-new-write-id"])
def test_failed_write_run_again(cluster: MockCluster, consume: Callable[..., Any], monkeypatch: Any,
                                write_id: Optional[str]) -> None:
    """Task 0 commits, task 1's input fails, the write fails (its rows of task 0 stay committed: each task commits
    its own). Run again with the same kproducer.write.id, task 0 finds its marker and writes nothing, task 1
    writes: every row once. The control: without a write id the second run is a new write, and task 0's rows are
    there twice."""
    topic = _topic(cluster, "rerun")

    def failing() -> Iterator[pa.RecordBatch]:
        yield _rows(100, 150)
        raise RuntimeError("the input of task 1 failed")

    first = _batch_writer(cluster, topic, write_id=write_id)
    as_task(monkeypatch, 0, 0)
    done = first.write(iter([_rows(0, 100)]))
    as_task(monkeypatch, 1, 0)
    with pytest.raises(SinkWriteError) as info:
        first.write(failing())
    assert "the input of task 1 failed" in str(info.value) and "nothing was written" in str(info.value)
    first.abort([done, None])
    assert _values(consume, cluster, topic, 100) == Counter(range(100))  # what a failed write leaves

    again = _batch_writer(cluster, topic, write_id=write_id)
    assert (again.write_id == first.write_id) is (write_id is not None)
    as_task(monkeypatch, 0, 0)
    rerun0 = again.write(iter([_rows(0, 100)]))
    as_task(monkeypatch, 1, 0)
    rerun1 = again.write(iter([_rows(100, 200)]))
    again.commit([rerun0, rerun1])
    if write_id is None:
        assert not rerun0.skipped
        assert _values(consume, cluster, topic, 300) == Counter(range(200)) + Counter(range(100))
        return
    assert rerun0.skipped and rerun0.rows == 0 and rerun1.rows == 100
    assert _values(consume, cluster, topic, 200) == Counter(range(200))
    assert sum(_values(consume, cluster, topic, 200, "read_uncommitted").values()) == 200


def test_stream_writer_skips_a_committed_micro_batch(cluster: MockCluster, consume: Callable[..., Any],
                                                     monkeypatch: Any) -> None:
    """The batch id recorded in each task's transaction (a committed offset of the group named after the
    query and partition) makes a replay of a committed micro-batch write nothing; the next micro-batch writes."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    topic = _topic(cluster, "replay")
    opts = parse_options({"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": topic,
                          "kproducer.guarantee": "exactly_once"})
    schema = StructType([StructField("value", StringType()), StructField("partition", IntegerType())])
    writer = KafkaStreamWriter(opts, check_schema(schema, topic), schema)
    query = f"q{uuid.uuid4().hex[:8]}"
    prefix = f"kproducer-{query}"
    for batch, replay, lo in ((7, False, 0), (7, True, 0), (8, False, 50)):
        as_task(monkeypatch, 0, 0, batch_id=batch, query_id=query)
        msg = writer.write(iter([_rows(lo, lo + 50)]))
        assert msg.skipped is replay and (msg.transactional_id is None) is replay
        writer.commit([msg], batch)
    assert cluster.committed_offsets(marker_group(prefix, 0)) == {(topic, 0): 8}
    assert _values(consume, cluster, topic, 100) == Counter(range(100))
    assert sum(_values(consume, cluster, topic, 100, "read_uncommitted").values()) == 100


def _slow(batches: List[pa.RecordBatch], pause: float) -> Iterator[pa.RecordBatch]:
    for b in batches:
        time.sleep(pause)
        yield b


def test_a_task_whose_transaction_outlives_the_timeout_fails_naming_it(cluster: MockCluster,
                                                                       monkeypatch: Any) -> None:
    """kproducer.buffer.bytes=0: the task begins its transaction at its first row, then its input comes slowly,
    past transaction.timeout.ms: the coordinator aborts the transaction and the task fails saying so and what to
    change. With the buffer (the default) the same input is held first: the transaction is short and commits."""
    topic = _topic(cluster, "task-timeout")
    batches = [_rows(0, 10), _rows(10, 20), _rows(20, 30)]
    options = {"kafka.transaction.timeout.ms": "1000"}
    unbuffered = _batch_writer(cluster, topic, **options, **{"kproducer.buffer.bytes": "0"})
    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        unbuffered.write(_slow(batches, 0.8))
    text = str(info.value)
    assert "longer than transaction.timeout.ms=1000: the coordinator aborted it" in text, text
    assert "give the write more Spark partitions" in text, text

    buffered = _batch_writer(cluster, topic, **options)
    msg = buffered.write(_slow(batches, 0.8))
    assert msg.rows == 30 and not msg.skipped
    assert cluster.transaction_state(transactional_id(buffered.prefix, 0)) == "CompleteCommit"


def test_a_refused_transaction_timeout_fails_the_task_before_writing(cluster: MockCluster, monkeypatch: Any) -> None:
    """The broker caps transaction.timeout.ms (transaction.max.timeout.ms): InitProducerId is refused and
    the task fails naming it, with nothing written."""
    topic = _topic(cluster, "timeout")
    opts = parse_options({"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": topic,
                          "kproducer.guarantee": "exactly_once", "kafka.transaction.timeout.ms": "3600000",
                          "kafka.max.block.ms": "5000"})
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("value", StringType())])
    writer = KafkaBatchWriter(opts, check_schema(schema, topic))
    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(iter([pa.record_batch([pa.array(["a"])], names=["value"])]))
    text = str(info.value)
    assert "INVALID_TRANSACTION_TIMEOUT" in text and "nothing was written" in text, text
    assert cluster.high_watermark(topic, 0) == 0 and cluster.high_watermark(topic, 1) == 0


def test_at_least_once_failed_task_delivers_what_it_queued(cluster: MockCluster, monkeypatch: Any) -> None:
    """The at-least-once contract for a failing task: the rows queued before the failing one are
    delivered before the task reports its failure (no timing involved), later ones are not sent."""
    topic = _topic(cluster, "alos-fail")
    # linger.ms: nothing would be sent before the flush; max.block.ms: the bad row's partition 9 (of 2) is
    # waited for in the metadata for max.block.ms, as Java's send() does (the default 60 s made this test a minute)
    opts = parse_options({"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": topic,
                          "kafka.linger.ms": "60000", "kafka.max.block.ms": "1000"})
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    schema = StructType([StructField("value", StringType()), StructField("partition", IntegerType())])
    writer = KafkaBatchWriter(opts, check_schema(schema, topic))
    bad = pa.record_batch([pa.array(["x"]), pa.array([9], pa.int32())], names=["value", "partition"])
    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(iter([_rows(0, 30), bad, _rows(30, 60)]))
    assert "30 rows queued, 30 of them acknowledged before the task failed" in str(info.value)
    assert cluster.high_watermark(topic, 0) + cluster.high_watermark(topic, 1) == 30


# -- Spark: a local session (local[2,2]: a failed task is retried once) ---------------------------------------

def _eos_write(df: Any, cluster: MockCluster, topic: str, **options: str) -> None:
    sink_write(df, cluster.bootstrap_servers, topic, **options)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_spark_task_failing_half_way_is_retried(spark: Any, cluster: MockCluster, consume: Callable[..., Any],
                                                guarantee: str) -> None:
    """Attempt 0 of every task writes (and flushes) a quarter of the rows, then fails; Spark retries the task.
    The control (at_least_once): those rows twice."""
    topic = _topic(cluster, "retry")
    n = 4000
    with arrow_batch_rows(spark, 500):
        df = spark.range(0, n, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
        sink_write(df, cluster.bootstrap_servers, topic, guarantee, **{"kproducer.test.fail.after.rows": str(n // 4)})
    twice = Counter(range(n // 4)) + Counter(range(n // 2, n // 2 + n // 4))
    assert _values(consume, cluster, topic, n + n // 2, "read_uncommitted") == Counter(range(n)) + twice
    committed = _values(consume, cluster, topic, n if guarantee == "exactly_once" else n + n // 2)
    assert committed == (Counter(range(n)) if guarantee == "exactly_once" else Counter(range(n)) + twice)


def test_spark_job_longer_than_the_transaction_timeout(spark: Any, cluster: MockCluster,
                                                       consume: Callable[..., Any]) -> None:
    """Issue 29: 4 tasks on local[2] (two waves), each spending ~4 s in a slow Python UDF over its rows, with
    kafka.transaction.timeout.ms=3000: the job lasts >= 8 s, each task longer than the timeout. Every row is
    read once by a read_committed consumer, nothing is aborted (before: the driver committed the tasks'
    transactions at the end of the job, the coordinator had aborted the old ones, and read_committed saw part
    of the rows)."""
    from pyspark.sql.functions import udf

    topic = _topic(cluster, "long-job")
    n, tasks = 400, 4
    per_task = n // tasks

    def slow(i: int) -> str:
        if i % (per_task // 4) == 0:  # 4 pauses of 1 s per task, from its first row to its last
            time.sleep(1.0)
        return str(i)

    df = spark.range(0, n, numPartitions=tasks).select(udf(slow, "string")("id").alias("value"))
    started = time.monotonic()
    _eos_write(df, cluster, topic, **{"kafka.transaction.timeout.ms": "3000"})
    assert time.monotonic() - started >= 8.0  # two waves of tasks of >= 4 s each (the pauses alone)
    assert _values(consume, cluster, topic, n) == Counter(range(n))
    assert sum(_values(consume, cluster, topic, n, "read_uncommitted").values()) == n


@pytest.mark.parametrize("same_write_id", [True, False], ids=["same-write-id", "control-no-write-id"])
def test_spark_failed_job_run_again(spark: Any, cluster: MockCluster, consume: Callable[..., Any],
                                    same_write_id: bool, tmp_path: Any) -> None:
    """Task 1's input fails in both attempts (a UDF, while a flag file exists, after a pause that lets task 0
    finish): the job fails with task 0's rows committed. The same job run again (the flag gone) with the same
    kproducer.write.id writes task 1's rows only; the control, without a write id, writes task 0's again."""
    topic = _topic(cluster, "rerun-job")
    n = 400
    flag = str(tmp_path / "fail")
    df = frame_whose_task_1_fails(spark, n, flag)
    options = {"kproducer.write.id": f"rerun-{uuid.uuid4().hex[:8]}"} if same_write_id else {}
    with pytest.raises(Exception) as info:
        _eos_write(df, cluster, topic, **options)
    assert "the input of task 1 failed" in str(info.value)
    assert _values(consume, cluster, topic, n // 2) == Counter(range(n // 2))  # task 0 committed its own
    os.remove(flag)
    _eos_write(df, cluster, topic, **options)
    if same_write_id:
        assert _values(consume, cluster, topic, n) == Counter(range(n))
        assert sum(_values(consume, cluster, topic, n, "read_uncommitted").values()) == n
    else:
        assert _values(consume, cluster, topic, n + n // 2) == Counter(range(n)) + Counter(range(n // 2))


def _stream(spark: Any, cluster: MockCluster, topic: str, checkpoint: str, rows: int, guarantee: str = "exactly_once",
            **options: str) -> Any:
    return stream(spark, cluster.bootstrap_servers, topic, checkpoint, rows, guarantee, **options)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_spark_stream_driver_fails_in_the_commit_then_restarted(spark: Any, cluster: MockCluster,
                                                                consume: Callable[..., Any], guarantee: str) -> None:
    """The driver fails in micro-batch 0's commit (fault injection), before Spark records the batch in the
    checkpoint. The query restarted from its checkpoint replays batch 0: exactly_once, both tasks find their
    markers and write nothing (not even an aborted transaction); the control (at_least_once) writes batch 0's
    rows again."""
    topic = _topic(cluster, "crash")
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-eos-crash-")
    try:
        query = _stream(spark, cluster, topic, checkpoint, rows, guarantee, **{"kproducer.test.fail.in.commit": "1"})
        with pytest.raises(Exception) as info:
            query.awaitTermination(120)
        assert "kproducer.test.fail.in.commit" in str(info.value)

        query = _stream(spark, cluster, topic, checkpoint, rows, guarantee)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 0, seen  # the replay of batch 0 (availableNow may run batch 1 too)
        total = rows * (max(seen) + 1)
        if guarantee == "at_least_once":
            assert _values(consume, cluster, topic, total + rows) == Counter(range(total)) + Counter(range(rows))
            return
        assert _values(consume, cluster, topic, total) == Counter(range(total))
        assert sum(_values(consume, cluster, topic, total, "read_uncommitted").values()) == total
        _no_open_transaction(cluster, f"kproducer-{query.id}", 2)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def test_spark_stream_micro_batch_replayed_after_commit_writes_nothing(spark: Any, cluster: MockCluster,
                                                                       consume: Callable[..., Any]) -> None:
    topic = _topic(cluster, "replay")
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-eos-replay-")
    try:
        for _ in range(2):
            query = _stream(spark, cluster, topic, checkpoint, rows)
            query.awaitTermination(120)
            assert query.exception() is None
        forget_commit(checkpoint, 1)  # Spark runs batch 1 again on restart
        query = _stream(spark, cluster, topic, checkpoint, rows)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 1, seen  # the replay (availableNow may run batch 2 after it)
        total = rows * (max(seen) + 1)
        assert _values(consume, cluster, topic, total) == Counter(range(total))
        # the replay wrote nothing, not even into an aborted transaction
        assert sum(_values(consume, cluster, topic, total, "read_uncommitted").values()) == total
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
