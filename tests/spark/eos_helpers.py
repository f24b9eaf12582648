"""Helpers shared by the Spark sink's exactly-once tests on the MockCluster (test_spark_exactly_once.py) and
on Apache Kafka (test_spark_apache_kafka.py): a write or stream through the sink, a checkpoint made to
forget a committed micro-batch, and read-back as a Counter of the rows' integer values."""
from __future__ import annotations

import contextlib
import os
from collections import Counter
from typing import Any, Callable, Iterator, List, Optional

import pyarrow as pa

from kproducer.spark import KafkaBatchWriter, check_schema, parse_options


def values(consume: Callable[..., Any], bootstrap: str, topic: str, partitions: int, expected: int,
           isolation: str = "read_committed") -> Counter:  # type: ignore[type-arg]
    """The topic's record values (integers) as a Counter, read with kafka-python (the ``consume`` fixture
    of conftest.py) at ``isolation``."""
    got = consume(bootstrap, topic, partitions, expected, isolation_level=isolation)
    return Counter(int(v) for _p, _o, _k, v, _h in got)


def rows(lo: int, hi: int, partitions: int) -> pa.RecordBatch:
    """Rows ``lo`` .. ``hi - 1`` as an Arrow batch of the sink's contract: value = str(i), partition = i % partitions."""
    return pa.record_batch([pa.array([str(i) for i in range(lo, hi)]),
                            pa.array([i % partitions for i in range(lo, hi)], pa.int32())],
                           names=["value", "partition"])


def sink_write(df: Any, bootstrap: str, topic: str, guarantee: str = "exactly_once", **options: str) -> None:
    """``df.write.format("kproducer")`` in append mode with ``kproducer.guarantee=guarantee`` and ``options``."""
    writer = (df.write.format("kproducer").mode("append")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("kproducer.guarantee", guarantee))
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


@contextlib.contextmanager
def arrow_batch_rows(spark: Any, n: int) -> Iterator[None]:
    """Spark hands the writer Arrow batches of at most ``n`` rows (``kproducer.test.fail.after.rows`` counts
    whole batches)."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(n))
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def stream(spark: Any, bootstrap: str, topic: str, checkpoint: str, rows: int, guarantee: str = "exactly_once",
           **options: str) -> Any:
    """An availableNow query from a ``rate-micro-batch`` source (``rows`` per micro-batch, two Spark partitions;
    value = the row number as a string) with ``kproducer.guarantee=guarantee``, started."""
    query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).option("numPartitions", 2)
             .load().selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("kproducer").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", topic).option("kproducer.guarantee", guarantee)
             .option("checkpointLocation", checkpoint))
    for k, v in options.items():
        query = query.option(k, v)
    return query.trigger(availableNow=True).start()


def batches_run(query: Any) -> List[int]:
    """The ids of the micro-batches the query ran that had input rows."""
    return [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]


def forget_commit(checkpoint: str, batch_id: int) -> None:
    """Make the checkpoint forget that ``batch_id`` was committed: Spark runs it again on restart (as after a
    crash right after the sink's commit, before the checkpoint's commit log was written)."""
    for name in (str(batch_id), f".{batch_id}.crc"):
        path = os.path.join(checkpoint, "commits", name)
        if os.path.exists(path):
            os.remove(path)


def frame_whose_task_1_fails(spark: Any, n: int, flag: str) -> Any:
    """``n`` rows in 2 Spark partitions (``value`` = str(id)); task 1's input raises, after a 2 s pause that lets
    task 0 finish, for as long as the file ``flag`` exists (created here): remove it to let a re-run succeed."""
    import time

    from pyspark.sql.functions import udf

    with open(flag, "w") as f:
        f.write("task 1 fails while this file exists")

    def check(i: int) -> str:
        if i == n // 2 and os.path.exists(flag):
            time.sleep(2.0)
            raise ValueError("the input of task 1 failed")
        return str(i)

    return spark.range(0, n, numPartitions=2).select(udf(check, "string")("id").alias("value"))


def batch_writer(bootstrap: str, topic: str, prefix: Optional[str] = None, write_id: Optional[str] = None,
                 **options: str) -> KafkaBatchWriter:
    """A ``KafkaBatchWriter`` (exactly_once, ``kafka.linger.ms=1``) for rows of :func:`rows` (value, partition),
    to call write()/commit()/abort() directly with a task context of the test's choosing (:func:`as_task`). Each
    call stands for one ``save()``: without ``write_id`` each gets a new random write id."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    settings = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "kproducer.guarantee": "exactly_once",
                "kafka.linger.ms": "1"}
    if prefix:
        settings["kproducer.transactional.id.prefix"] = prefix
    if write_id:
        settings["kproducer.write.id"] = write_id
    opts = parse_options(dict(settings, **options))
    schema = StructType([StructField("value", StringType()), StructField("partition", IntegerType())])
    return KafkaBatchWriter(opts, check_schema(schema, opts.topic))


def as_task(monkeypatch: Any, partition: int, attempt: int, batch_id: Optional[int] = None,
            query_id: Optional[str] = None) -> None:
    """Make the writers called in this process believe they run as ``attempt`` of Spark partition ``partition``
    (of micro-batch ``batch_id`` of query ``query_id``)."""
    from kproducer.spark import _sink

    monkeypatch.setattr(_sink, "_task_context", lambda: _sink.TaskInfo(partition, attempt, batch_id, query_id))
