"""A pure-Python Kafka sink for PySpark (>= 4.0): ``df.write.format("kproducer")`` and
``df.writeStream.format("kproducer")``, with the contract of Spark's own kafka sink.

>>> import kproducer.spark                                                   # doctest: +SKIP
>>> kproducer.spark.register(spark)                                         # doctest: +SKIP
>>> (df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value")
...    .write.format("kproducer").mode("append")
...    .option("kafka.bootstrap.servers", "broker:9092").option("topic", "events")
...    .save())                                                             # doctest: +SKIP

Columns: ``value`` (required; string or binary), ``key`` (string or binary), ``topic`` (string; the
``topic`` option wins), ``partition`` (int; null lets the partitioner choose), ``headers``
(``array<struct<key:string,value:binary>>``). Options: ``topic`` and ``kafka.<producer setting>``
(``kafka.bootstrap.servers`` is required). Save mode append. At-least-once by default (a retried task
can write its records again); ``.option("kproducer.guarantee", "exactly_once")`` makes each task commit
its rows in a Kafka transaction of its own, with a marker that makes any other attempt of the task (a
retry, a speculative copy, a re-run with the same ``kproducer.write.id``, a replayed micro-batch) write
nothing, so read_committed consumers see every row exactly once. See docs/spark.md.

Needs ``pip install kproducer[spark]`` (pyspark and pyarrow).
"""
from __future__ import annotations

from typing import Any

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(f"kproducer.spark needs pyspark (>= 4.0) and pyarrow: pip install 'kproducer[spark]' ({_e})") \
        from _e

from ._arrow import SinkDataError
from ._options import SinkOptions, parse_options
from ._producers import close_all
from ._schema import ColumnPlan, SinkSchemaError, check_schema
from ._sink import (
    KafkaBatchWriter,
    KafkaSink,
    KafkaStreamWriter,
    SinkCommitMessage,
    SinkWriteError,
    summarize,
)

#: the name PySpark's automatic registration looks for in a top-level ``pyspark_*`` module
DefaultSource = KafkaSink

FORMAT = KafkaSink.name()


def register(spark: Any) -> None:
    """Register the ``kproducer`` data source with a SparkSession (once per session).

    Without this call, PySpark registers it by itself at session start when a top-level module named
    ``pyspark_<something>`` that defines ``DefaultSource`` is importable (see docs/spark.md)."""
    spark.dataSource.register(KafkaSink)


__all__ = [
    "FORMAT",
    "ColumnPlan",
    "DefaultSource",
    "KafkaBatchWriter",
    "KafkaSink",
    "KafkaStreamWriter",
    "SinkCommitMessage",
    "SinkDataError",
    "SinkOptions",
    "SinkSchemaError",
    "SinkWriteError",
    "check_schema",
    "close_all",
    "parse_options",
    "register",
    "summarize",
]
