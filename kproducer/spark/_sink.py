"""The ``kproducer`` Python data source: batch and streaming writers with Spark's kafka-sink contract."""
from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..producer.future import BatchSendFuture
from ._arrow import groups
from ._options import SinkOptions, parse_options
from ._producers import discard_producer, get_producer
from ._schema import HEADERS, KEY, PARTITION, TOPIC, VALUE, ColumnPlan, SinkSchemaError, check_schema

try:  # pyspark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
    _STREAM_ARROW = True
except ImportError:  # pragma: no cover - pyspark 4.0: Rows, converted to Arrow below
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]
    _STREAM_ARROW = False

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
OffsetRanges = Dict[TopicPartition, Tuple[int, int]]

#: rows per Arrow batch when Rows have to be converted (pyspark 4.0 streaming)
_ROW_CHUNK = 10_000


class SinkWriteError(RuntimeError):
    """A write task could not deliver its rows; the message names the cause (the producer's error)."""


@dataclass
class SinkCommitMessage(WriterCommitMessage):  # type: ignore[misc]
    """What one write task delivered (every record acknowledged by the broker)."""

    rows: int = 0
    #: bytes of keys, values and headers
    bytes: int = 0
    #: ``{(topic, partition): (first offset, last offset)}`` written by this task (-1 with acks=0)
    offsets: OffsetRanges = field(default_factory=dict)
    partition_id: int = -1
    attempt: int = 0
    seconds: float = 0.0


def _merge(into: OffsetRanges, ranges: OffsetRanges) -> None:
    for tp, (lo, hi) in ranges.items():
        old = into.get(tp)
        into[tp] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))


def _offset_ranges(fut: BatchSendFuture) -> OffsetRanges:
    """``fut.partition_offsets()``, computed per producer batch instead of per record when possible."""
    segments = getattr(fut, "_segments", None)
    if segments is None:
        return fut.partition_offsets()
    out: OffsetRanges = {}
    for batch, first, count, _idx in segments:
        if batch.split_into is not None or batch.base_offset < 0 or batch.error is not None:
            return fut.partition_offsets()  # split batches, acks=0: the general (per-record) way
        lo = batch.base_offset + first
        _merge(out, {(batch.topic, batch.partition): (lo, lo + count - 1)})
    return out


def summarize(messages: Sequence[Optional[WriterCommitMessage]]) -> Tuple[int, int, OffsetRanges]:
    """Total rows, bytes and merged offset ranges of the tasks' commit messages."""
    rows = nbytes = 0
    offsets: OffsetRanges = {}
    for m in messages:
        if isinstance(m, SinkCommitMessage):
            rows += m.rows
            nbytes += m.bytes
            _merge(offsets, m.offsets)
    return rows, nbytes, offsets


def _task_info() -> Tuple[int, int]:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            return int(ctx.partitionId()), int(ctx.attemptNumber())
    except Exception:  # pragma: no cover - outside a task
        pass
    return -1, 0


class _Task:
    """Writes one task's record batches and tracks their delivery."""

    def __init__(self, opts: SinkOptions, plan: ColumnPlan, what: str) -> None:
        self.opts = opts
        self.plan = plan
        self.what = what
        self.rows = 0
        self.bytes = 0
        self.offsets: OffsetRanges = {}
        self.acked = 0
        self.pending: Deque[BatchSendFuture] = deque()
        self.topic: Optional[str] = None

    def _reap(self, block: bool) -> None:
        pending = self.pending
        while pending and (block or pending[0].done()):
            fut = pending[0]
            fut.wait(None)  # raises the first delivery error of these records
            pending.popleft()
            self.acked += fut.count
            _merge(self.offsets, _offset_ranges(fut))

    def run(self, batches: Iterable[Any]) -> SinkCommitMessage:
        started = time.monotonic()
        partition_id, attempt = _task_info()
        settings = self.opts.settings
        try:
            producer = get_producer(settings)
            for rb in batches:
                if rb.num_rows == 0:
                    continue
                for g in groups(rb, self.plan):
                    self.topic = g.topic
                    fut = producer.send_batch(g.topic, g.values, g.keys, g.headers, partition=g.partition)
                    self.pending.append(fut)
                    self.rows += len(g.values)
                    self.bytes += g.nbytes
                self._reap(block=False)
            producer.flush()  # at-least-once: nothing is left unacknowledged when the task reports success
            self._reap(block=True)
        except Exception as e:
            discard_producer(settings)
            where = f" to topic {self.topic!r}" if self.topic else ""
            raise SinkWriteError(
                f"kproducer sink: {self.what} task {partition_id} (attempt {attempt}) failed writing{where} "
                f"via bootstrap.servers={self.opts.bootstrap_servers}: {type(e).__name__}: {e} "
                f"[{self.rows} rows queued, at least {self.acked} acknowledged before the failure; rows already "
                "written stay written, and Spark's task retry writes them again]") from e
        except BaseException:  # interrupted (task killed, worker exiting): drop what is queued, as is
            discard_producer(settings)
            raise
        seconds = time.monotonic() - started
        log.info("kproducer sink: task %d wrote %d rows (%d bytes) in %.2f s (pid %d)", partition_id, self.rows,
                 self.bytes, seconds, os.getpid())
        return SinkCommitMessage(self.rows, self.bytes, self.offsets, partition_id, attempt, seconds)


def _format_offsets(offsets: OffsetRanges) -> str:
    return ", ".join(f"{t}-{p}: {lo}..{hi}" for (t, p), (lo, hi) in sorted(offsets.items()))


class KafkaBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("kproducer")``: each task sends its Arrow batches with ``send_batch``, flushes,
    and returns a :class:`SinkCommitMessage`."""

    def __init__(self, opts: SinkOptions, plan: ColumnPlan) -> None:
        self.opts = opts
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return _Task(self.opts, self.plan, "write").run(iterator)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, nbytes, offsets = summarize(messages)
        log.info("kproducer sink: wrote %d rows (%d bytes): %s", rows, nbytes, _format_offsets(offsets))

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, _nbytes, offsets = summarize(messages)
        log.warning("kproducer sink: the write failed; %d rows of tasks that succeeded stay written (Kafka has no "
                    "rollback): %s", rows, _format_offsets(offsets))


def _rows_to_batches(rows: Iterator[Any], schema: StructType) -> Iterator[Any]:
    """Rows -> Arrow record batches of the contract columns (pyspark 4.0 hands Rows to stream writers)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    wanted = StructType([f for f in schema.fields if f.name in (VALUE, KEY, TOPIC, PARTITION, HEADERS)])
    arrow_schema = to_arrow_schema(wanted)
    names = wanted.names

    def convert(chunk: List[Any]) -> Any:
        data = [{n: r[n] for n in names} for r in chunk]
        if HEADERS in names:
            for d in data:
                h = d[HEADERS]
                if h is not None:
                    d[HEADERS] = [{"key": e["key"], "value": e["value"]} if e is not None else None for e in h]
        return pa.RecordBatch.from_pylist(data, schema=arrow_schema)

    chunk: List[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= _ROW_CHUNK:
            yield convert(chunk)
            chunk = []
    if chunk:
        yield convert(chunk)


class KafkaStreamWriter(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """``df.writeStream.format("kproducer")``: like :class:`KafkaBatchWriter`, per micro-batch."""

    def __init__(self, opts: SinkOptions, plan: ColumnPlan, schema: StructType) -> None:
        self.opts = opts
        self.plan = plan
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        batches = iterator if _STREAM_ARROW else _rows_to_batches(iterator, self.schema)
        return _Task(self.opts, self.plan, "micro-batch").run(batches)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, nbytes, offsets = summarize(messages)
        log.info("kproducer sink: micro-batch %d wrote %d rows (%d bytes): %s", batchId, rows, nbytes,
                 _format_offsets(offsets))

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, _nbytes, offsets = summarize(messages)
        log.warning("kproducer sink: micro-batch %d failed; %d rows of tasks that succeeded stay written: %s",
                    batchId, rows, _format_offsets(offsets))


class KafkaSink(DataSource):  # type: ignore[misc]
    """The ``kproducer`` data source (write only), with Spark's kafka-sink contract.

    Columns: ``value`` (required, string or binary), ``key`` (string or binary), ``topic`` (string;
    the ``topic`` option wins), ``partition`` (int; null means "let the partitioner choose"),
    ``headers`` (``array<struct<key:string,value:binary>>``). Other columns are ignored.
    Options: ``topic``, and ``kafka.<setting>`` for every producer setting (``kafka.bootstrap.servers``
    required). Batch save mode append only (Spark rejects error/ignore for Python data sources by
    itself; overwrite is refused here); streaming output modes append, update and complete (which
    re-sends the whole result table each trigger). At-least-once. See docs/spark.md.
    """

    @classmethod
    def name(cls) -> str:
        return "kproducer"

    def _validate(self, schema: StructType) -> Tuple[SinkOptions, ColumnPlan]:
        opts = parse_options(dict(self.options))
        return opts, check_schema(schema, opts.topic)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        if overwrite:
            raise SinkSchemaError("save mode 'overwrite' is not supported by the kproducer sink: a Kafka topic "
                                  "cannot be truncated; use .mode('append')")
        opts, plan = self._validate(schema)
        return KafkaBatchWriter(opts, plan)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        # overwrite is True for outputMode("complete"): as in Spark's kafka sink, every trigger then
        # appends the whole result table (there is nothing to truncate)
        opts, plan = self._validate(schema)
        return KafkaStreamWriter(opts, plan, schema)


__all__ = ["KafkaBatchWriter", "KafkaSink", "KafkaStreamWriter", "SinkCommitMessage", "SinkWriteError",
           "summarize"]
