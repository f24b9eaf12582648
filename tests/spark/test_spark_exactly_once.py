"""``kproducer.guarantee=exactly_once`` (issue 14) on the MockCluster, read back with kafka-python as a
read_committed consumer: every row exactly once under a task that fails half-way (Spark retries it),
a speculative second attempt, a driver that stops after committing some tasks' transactions (the query
restarted from its checkpoint), and a micro-batch replayed after it was committed.

tansu 0.6 does not filter aborted transactions on read (DESIGN.md §4), so it cannot show any of this.
The writer-level tests call the writers' write()/commit() directly with a task context of our choosing
(two attempts of one partition at once, in the order we pick): local[N] Spark never runs speculative
copies, and on one host neither does a standalone cluster (a copy never runs on the host of its original).
"""
from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, Iterator, Optional

import pyarrow as pa
import pytest

from kproducer.errors import ConfigError
from kproducer.mock import MockCluster
from kproducer.spark import KafkaBatchWriter, SinkWriteError, check_schema, parse_options
from kproducer.spark._sink import KafkaStreamWriter, marker_group, transactional_id
from tests.spark.eos_helpers import (
    arrow_batch_rows,
    as_task,
    batch_writer,
    batches_run,
    forget_commit,
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


def _no_open_transaction(cluster: MockCluster, prefix: str, tasks: int, attempts: int = 3) -> None:
    for p in range(tasks):
        for a in range(attempts):
            tid = transactional_id(prefix, p, a)
            assert cluster.transaction_state(tid) != "Ongoing", f"{tid} left open"


# -- options -----------------------------------------------------------------------------------------------

def _eos(**extra: str) -> Dict[str, str]:
    return dict({"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t", "kproducer.guarantee": "exactly_once"},
                **extra)


def test_exactly_once_options() -> None:
    opts = parse_options(_eos(**{"kproducer.transactional.id.prefix": "orders"}))
    assert opts.exactly_once and opts.transactional_id_prefix == "orders"
    assert not parse_options({"kafka.bootstrap.servers": "h:1"}).exactly_once
    assert parse_options(_eos(**{"kproducer.guarantee": "Exactly-Once"})).exactly_once


@pytest.mark.parametrize("options, message", [
    (_eos(**{"kproducer.guarantee": "twice"}), "must be one of at_least_once, exactly_once"),
    (_eos(**{"kproducer.guarantees": "exactly_once"}), "did you mean 'kproducer.guarantee'?"),
    (_eos(**{"kafka.enable.idempotence": "false"}), "exactly_once writes through Kafka transactions"),
    (_eos(**{"kproducer.trigger.interval.ms": "60000"}),
     "kafka.transaction.timeout.ms=60000 is too short for exactly-once writes"),
    (_eos(**{"kafka.transaction.timeout.ms": "20000"}), "plus the commit time (kafka.request.timeout.ms=30000)"),
    ({"kafka.bootstrap.servers": "h:1", "kproducer.transactional.id.prefix": "x"}, "apply to"),
    (_eos(**{"kproducer.trigger.interval.ms": "soon"}), "must be a non-negative integer"),
])
def test_exactly_once_option_errors(options: Dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(options)
    assert message in str(info.value), str(info.value)


def test_timeout_check_passes_when_the_timeout_covers_trigger_and_commit() -> None:
    opts = parse_options(_eos(**{"kproducer.trigger.interval.ms": "60000", "kafka.transaction.timeout.ms": "95000"}))
    assert opts.trigger_interval_ms == 60000


# -- the writers called directly (no SparkSession): speculation, idempotent commits -------------------------

def _rows(lo: int, hi: int) -> pa.RecordBatch:
    return arrow_rows(lo, hi, PARTITIONS)


def _batch_writer(cluster: MockCluster, topic: str, prefix: Optional[str] = None) -> KafkaBatchWriter:
    return batch_writer(cluster.bootstrap_servers, topic, prefix)


@pytest.mark.parametrize("winner", [0, 1], ids=["first-attempt-wins", "speculative-copy-wins"])
def test_speculative_second_attempt(cluster: MockCluster, consume: Callable[..., Any], monkeypatch: Any,
                                    winner: int) -> None:
    """Attempts 0 and 1 of task 0 both write all of its rows (each under its own transactional id, so
    neither aborts the other); Spark's output commit coordinator lets one of them commit. The driver
    commits the winner's transaction and aborts the loser's (InitProducerId on its id)."""
    topic = _topic(cluster, "spec")
    writer = _batch_writer(cluster, topic)
    as_task(monkeypatch, 0, 0)
    first = writer.write(iter([_rows(0, 300)]))
    as_task(monkeypatch, 0, 1)  # the speculative copy starts after the original finished writing
    second = writer.write(iter([_rows(0, 300)]))
    as_task(monkeypatch, 1, 0)
    other = writer.write(iter([_rows(300, 500)]))
    assert first.transaction and second.transaction and other.transaction
    assert first.transaction["transactional_id"] != second.transaction["transactional_id"]
    writer.commit([first if winner == 0 else second, other])

    assert _values(consume, cluster, topic, 500) == Counter(range(500))
    # both attempts wrote: the loser's rows are in the log, aborted
    assert sum(_values(consume, cluster, topic, 800, "read_uncommitted").values()) == 800
    _no_open_transaction(cluster, writer.prefix, 2)


def test_commit_is_idempotent_and_abort_leaves_nothing(cluster: MockCluster, consume: Callable[..., Any],
                                                       monkeypatch: Any) -> None:
    topic = _topic(cluster, "idem")
    writer = _batch_writer(cluster, topic, prefix=f"idem-{uuid.uuid4().hex[:6]}")
    as_task(monkeypatch, 0, 0)
    msg = writer.write(iter([_rows(0, 100)]))
    writer.commit([msg])
    writer.commit([msg])  # a driver retry: the coordinator answers a repeated EndTxn(commit) with success
    assert _values(consume, cluster, topic, 100) == Counter(range(100))

    aborted = _batch_writer(cluster, topic)
    as_task(monkeypatch, 0, 0)
    gone = aborted.write(iter([_rows(100, 200)]))
    aborted.abort([gone, None])
    assert _values(consume, cluster, topic, 100) == Counter(range(100))
    _no_open_transaction(cluster, aborted.prefix, 1)


def test_a_fenced_transaction_fails_the_commit_naming_the_task(cluster: MockCluster, monkeypatch: Any) -> None:
    from kproducer.producer.transaction_handle import abort_transactional_id

    topic = _topic(cluster, "fenced")
    writer = _batch_writer(cluster, topic)
    as_task(monkeypatch, 0, 0)
    msg = writer.write(iter([_rows(0, 10)]))
    abort_transactional_id(msg.transaction["transactional_id"], {"bootstrap.servers": cluster.bootstrap_servers})
    with pytest.raises(SinkWriteError) as info:
        writer.commit([msg])
    text = str(info.value)
    assert "committing the write failed for 1 of 1 tasks: task 0" in text
    assert "another producer of this transactional id" in text


def test_stream_writer_skips_a_committed_micro_batch(cluster: MockCluster, consume: Callable[..., Any],
                                                     monkeypatch: Any) -> None:
    """The batch id recorded in each task's transaction (a committed offset of the group named after the
    query and partition) makes a replay of a committed micro-batch write nothing."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    topic = _topic(cluster, "replay")
    opts = parse_options({"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": topic,
                          "kproducer.guarantee": "exactly_once"})
    schema = StructType([StructField("value", StringType()), StructField("partition", IntegerType())])
    writer = KafkaStreamWriter(opts, check_schema(schema, topic), schema)
    query = f"q{uuid.uuid4().hex[:8]}"
    prefix = f"kproducer-{query}"
    for replay in (False, True):
        as_task(monkeypatch, 0, 0, batch_id=7, query_id=query)
        msg = writer.write(iter([_rows(0, 50)]))
        assert msg.skipped is replay and (msg.transaction is None) is replay
        writer.commit([msg], 7)
    assert cluster.committed_offsets(marker_group(prefix, 0)) == {(topic, 0): 7}
    assert _values(consume, cluster, topic, 50) == Counter(range(50))
    assert sum(_values(consume, cluster, topic, 50, "read_uncommitted").values()) == 50


# -- Spark: a local session (local[2,2]: a failed task is retried once) ---------------------------------------

def _eos_write(df: Any, cluster: MockCluster, topic: str, **options: str) -> None:
    sink_write(df, cluster.bootstrap_servers, topic, **options)


@pytest.mark.integration
def test_spark_task_failing_half_way_is_retried_exactly_once(spark: Any, cluster: MockCluster,
                                                             consume: Callable[..., Any]) -> None:
    """Attempt 0 of every task writes (and flushes) half its rows, then fails; Spark retries the task."""
    topic = _topic(cluster, "retry")
    n = 4000
    with arrow_batch_rows(spark, 500):
        df = spark.range(0, n, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
        _eos_write(df, cluster, topic, **{"kproducer.test.fail.after.rows": str(n // 4)})
    assert _values(consume, cluster, topic, n) == Counter(range(n))
    # the failed attempts' rows are in the log, aborted: n/4 per task
    assert sum(_values(consume, cluster, topic, n + n // 2, "read_uncommitted").values()) == n + n // 2


@pytest.mark.integration
def test_spark_failed_job_leaves_nothing_visible(spark: Any, cluster: MockCluster,
                                                 consume: Callable[..., Any]) -> None:
    """Task 1 fails in both attempts (a partition that does not exist); task 0 succeeded, and the driver's
    abort() aborts its transaction: read_committed consumers see none of the job's rows."""
    topic = _topic(cluster, "failed-job")
    prefix = f"failed-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 400, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(IF(id < 200, id % 2, 9) AS INT) AS partition")
    with pytest.raises(Exception) as info:
        _eos_write(df, cluster, topic, **{"kproducer.transactional.id.prefix": prefix, "kafka.max.block.ms": "3000"})
    # a partition beyond the known count may be new: like send() (and Java), send_batch() waits max.block.ms
    assert "Partition 9 of topic" in str(info.value) and "partition count 2" in str(info.value)
    # task 0's transaction ends aborted: by the driver's abort() when task 0 finished first, else by task 0
    # itself when Spark cancelled it (closing its producer aborts the open transaction)
    ids = [transactional_id(prefix, p, a) for p in range(2) for a in range(2)]
    deadline = time.monotonic() + 30
    while any(cluster.transaction_state(t) == "Ongoing" for t in ids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [t for t in ids if cluster.transaction_state(t) == "Ongoing"] == []
    written = sum(_values(consume, cluster, topic, 200, "read_uncommitted").values())
    assert written <= 200  # task 0's rows may have reached the log ...
    assert _values(consume, cluster, topic, 0) == Counter()  # ... but only in an aborted transaction


def _stream(spark: Any, cluster: MockCluster, topic: str, checkpoint: str, rows: int, **options: str) -> Any:
    return stream(spark, cluster.bootstrap_servers, topic, checkpoint, rows, **options)


@pytest.mark.integration
def test_spark_stream_driver_stopped_mid_commit_then_restarted(spark: Any, cluster: MockCluster,
                                                               consume: Callable[..., Any]) -> None:
    """Micro-batch 0's commit ends task 0's transaction, then the driver stops (the query fails before
    Spark records the batch as committed). The query restarted from its checkpoint replays batch 0: task
    0 finds its rows committed and writes nothing, task 1 writes its rows again (its earlier transaction
    is aborted by the new InitProducerId), then batch 1 runs."""
    topic = _topic(cluster, "crash")
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-eos-crash-")
    try:
        query = _stream(spark, cluster, topic, checkpoint, rows, **{"kproducer.test.fail.commit.after": "1"})
        with pytest.raises(Exception) as info:
            query.awaitTermination(120)
        assert "kproducer.test.fail.commit.after=1" in str(info.value)
        assert cluster.transaction_state(transactional_id(f"kproducer-{query.id}", 1, 0)) == "Ongoing"

        query = _stream(spark, cluster, topic, checkpoint, rows)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 0, seen  # the replay of batch 0 (availableNow may run batch 1 too)
        total = rows * (max(seen) + 1)
        assert _values(consume, cluster, topic, total) == Counter(range(total))
        # task 1's first transaction of batch 0 was written and aborted; task 0's was not written twice
        assert sum(_values(consume, cluster, topic, total + rows // 2, "read_uncommitted").values()) \
            == total + rows // 2
        _no_open_transaction(cluster, f"kproducer-{query.id}", 2)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


@pytest.mark.integration
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
