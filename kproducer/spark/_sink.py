"""The ``kproducer`` Python data source: batch and streaming writers with Spark's kafka-sink contract."""
from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..config import ProducerConfig
from ..errors import ProducerFencedError
from ..producer.columnar import columnar_supported, send_columns
from ..producer.consumer_group import OffsetAndMetadata
from ..producer.future import BatchSendFuture
from ..producer.kafka_producer import Producer
from ..producer.transaction_handle import (
    TransactionHandle,
    abort_transaction,
    abort_transactional_id,
    commit_transaction,
    committed_offsets,
    prepare_transaction,
)
from ._arrow import column_groups, groups
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
    #: exactly_once: the task's open transaction (``TransactionHandle.to_dict()``) for the driver to end;
    #: None when the task had nothing to write
    transaction: Optional[Dict[str, Any]] = None
    #: exactly_once streams: the micro-batch the task wrote, and whether it found it committed already
    #: (a replay: the task wrote nothing)
    batch_id: int = -1
    skipped: bool = False
    #: time.time() when the task's transaction began (the driver compares it with transaction.timeout.ms)
    opened_at: float = 0.0


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


class TaskInfo(NamedTuple):
    partition: int
    attempt: int
    #: the micro-batch id (streams only)
    batch_id: Optional[int]
    #: the streaming query's id, stable across restarts from a checkpoint (streams only)
    query_id: Optional[str]


def _task_context() -> TaskInfo:
    """The running task's partition id and attempt number, and for streams the micro-batch id and query
    id (local properties Spark sets on every task of a micro-batch)."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            batch = ctx.getLocalProperty("streaming.sql.batchId")
            query = ctx.getLocalProperty("sql.streaming.queryId")
            return TaskInfo(int(ctx.partitionId()), int(ctx.attemptNumber()), int(batch) if batch else None,
                            query or None)
    except Exception:  # pragma: no cover - outside a task
        pass
    return TaskInfo(-1, 0, None, None)


def transactional_id(prefix: str, partition: int, attempt: int) -> str:
    """The transactional id of one attempt of one Spark partition's task."""
    return f"{prefix}-{partition}-{attempt}"


def marker_group(prefix: str, partition: int) -> str:
    """The consumer group whose committed offset records the last micro-batch a partition committed."""
    return f"{prefix}-{partition}"


class _InjectedFault(RuntimeError):
    """A failure the sink's own tests asked for (kproducer.test.* options)."""


def _drain(batches: Iterable[Any]) -> None:
    for _ in batches:
        pass


class _Task:
    """Writes one task's record batches and tracks their delivery."""

    def __init__(self, opts: SinkOptions, plan: ColumnPlan, what: str, prefix: Optional[str] = None) -> None:
        self.opts = opts
        self.plan = plan
        self.what = what
        self.prefix = prefix
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

    def _count_delivered(self) -> None:
        """After a failure: count the records acknowledged (ignoring the failed ones)."""
        for fut in self.pending:
            if fut.done() and fut.exception(0) is None:
                self.acked += fut.count
        self.pending.clear()

    def _send_all(self, producer: Producer, batches: Iterable[Any], info: TaskInfo) -> None:
        fail_after = self.opts.faults.get("test.fail.after.rows") if info.attempt == 0 else None
        # rows without headers go from the Arrow buffers into the record encoder (no bytes object per row)
        columnar = self.opts.columnar and not self.plan.has_headers and columnar_supported(producer)
        for rb in batches:
            if rb.num_rows == 0:
                continue
            if columnar:
                for c in column_groups(rb, self.plan):
                    self.topic = c.topic
                    self.pending.append(send_columns(producer, c.topic, c.values, c.keys, c.partition))
                    self.rows += c.rows
                    self.bytes += c.nbytes
            else:
                for g in groups(rb, self.plan):
                    self.topic = g.topic
                    fut = producer.send_batch(g.topic, g.values, g.keys, g.headers, partition=g.partition)
                    self.pending.append(fut)
                    self.rows += len(g.values)
                    self.bytes += g.nbytes
            self._reap(block=False)
            if fail_after is not None and self.rows >= fail_after:
                producer.flush()  # the rows are written (in the open transaction, for exactly-once)
                self._reap(block=True)
                raise _InjectedFault(f"kproducer.test.fail.after.rows={fail_after}: attempt 0 fails after writing "
                                     f"{self.rows} rows (fault injection for tests)")

    def _failure(self, e: BaseException, info: TaskInfo, outcome: str) -> SinkWriteError:
        where = f" to topic {self.topic!r}" if self.topic else ""
        return SinkWriteError(
            f"kproducer sink: {self.what} task {info.partition} (attempt {info.attempt}) failed writing{where} "
            f"via bootstrap.servers={self.opts.bootstrap_servers}: {type(e).__name__}: {e} [{outcome}]")

    def run(self, batches: Iterable[Any]) -> SinkCommitMessage:
        info = _task_context()
        if self.opts.exactly_once:
            return self._run_exactly_once(batches, info)
        started = time.monotonic()
        settings = self.opts.settings
        producer: Optional[Producer] = None
        try:
            producer = get_producer(settings)
            self._send_all(producer, batches, info)
            producer.flush()  # at-least-once: nothing is left unacknowledged when the task reports success
            self._reap(block=True)
        except Exception as e:
            # the rows queued before the failure are delivered (or fail) first, within delivery.timeout.ms:
            # what a failed task leaves in Kafka does not depend on timing (see docs/spark.md)
            if producer is not None:
                try:
                    producer.flush(producer.config.delivery_timeout_ms / 1000.0 + 5.0)
                except Exception:
                    log.warning("kproducer sink: flushing after a failed task failed", exc_info=True)
                self._count_delivered()
            discard_producer(settings)
            raise self._failure(e, info, f"{self.rows} rows queued, {self.acked} of them acknowledged before the "
                                "task failed; rows written stay written, and Spark's task retry writes them "
                                "again") from e
        except BaseException:  # interrupted (task killed, worker exiting): drop what is queued, as is
            discard_producer(settings)
            raise
        seconds = time.monotonic() - started
        log.info("kproducer sink: task %d wrote %d rows (%d bytes) in %.2f s (pid %d)", info.partition, self.rows,
                 self.bytes, seconds, os.getpid())
        return SinkCommitMessage(self.rows, self.bytes, self.offsets, info.partition, info.attempt, seconds)

    def _run_exactly_once(self, batches: Iterable[Any], info: TaskInfo) -> SinkCommitMessage:
        """Write the task's rows in a transaction of its own and hand it over to the driver (not committed)."""
        started = time.monotonic()
        prefix = self.prefix or (f"kproducer-{info.query_id}" if info.query_id else None)
        if prefix is None:
            raise SinkWriteError("kproducer sink: exactly_once needs a transactional id prefix: set "
                                 "option 'kproducer.transactional.id.prefix'")
        txn_id = transactional_id(prefix, info.partition, info.attempt)
        producer: Optional[Producer] = None
        opened_at = 0.0
        try:
            producer = Producer(dict(self.opts.settings, **{"transactional.id": txn_id}))
            # fences older producers of this id and aborts what they left open (a crashed run's attempt)
            producer.init_transactions()
            if info.batch_id is not None:
                done = last_committed_batch(producer, marker_group(prefix, info.partition))
                if done >= info.batch_id:
                    _drain(batches)
                    log.info("kproducer sink: micro-batch %d of partition %d was committed before: writing nothing",
                             info.batch_id, info.partition)
                    return SinkCommitMessage(0, 0, {}, info.partition, info.attempt, time.monotonic() - started,
                                             None, info.batch_id, True)
            producer.begin_transaction()
            opened_at = time.time()
            self._send_all(producer, batches, info)
            if self.rows == 0:
                producer.abort_transaction()  # nothing reached the coordinator: ends locally
                return SinkCommitMessage(0, 0, {}, info.partition, info.attempt, time.monotonic() - started,
                                         None, -1 if info.batch_id is None else info.batch_id)
            if info.batch_id is not None and self.topic is not None:
                marker = json.dumps({"batch": info.batch_id, "transactional_id": txn_id})
                producer.send_offsets_to_transaction({(self.topic, 0): OffsetAndMetadata(info.batch_id, marker)},
                                                     marker_group(prefix, info.partition))
            producer.flush()
            self._reap(block=True)
            handle = prepare_transaction(producer)
        except Exception as e:
            if opened_at == 0.0:
                raise self._failure(e, info, f"before a transaction was opened under {txn_id!r}; nothing was "
                                    "written") from e
            aborted = "the transaction is aborted"
            if producer is not None:
                try:
                    producer.abort_transaction(10.0)
                except Exception as abort_error:
                    aborted = (f"aborting the transaction failed ({type(abort_error).__name__}); the coordinator "
                               "aborts it after transaction.timeout.ms, or the next attempt does")
                self._count_delivered()
            raise self._failure(e, info, f"{self.rows} rows written in transaction {txn_id!r}; {aborted}: "
                                "read_committed consumers never see them, Spark's retry writes them again") from e
        finally:
            if producer is not None:
                producer.close(0 if opened_at == 0.0 else 10.0)
        seconds = time.monotonic() - started
        log.info("kproducer sink: task %d wrote %d rows (%d bytes) in %.2f s in transaction %r (pid %d), not "
                 "committed yet", info.partition, self.rows, self.bytes, seconds, txn_id, os.getpid())
        return SinkCommitMessage(self.rows, self.bytes, self.offsets, info.partition, info.attempt, seconds,
                                 handle.to_dict(), -1 if info.batch_id is None else info.batch_id, False, opened_at)


def last_committed_batch(producer: Producer, group: str) -> int:
    """The highest micro-batch id a partition's transactions recorded as committed offsets of ``group``
    (-1: none)."""
    offsets = committed_offsets(producer, group)
    return max((offset for offset, _meta in offsets.values()), default=-1)


#: concurrent EndTxn / InitProducerId calls the driver makes when ending a write's transactions
_DRIVER_PARALLELISM = 8


def _parallel(calls: Sequence[Callable[[], Any]]) -> List[Optional[BaseException]]:
    """Run ``calls`` on a few threads; each one's exception (None: it succeeded)."""
    def run(call: Callable[[], Any]) -> Optional[BaseException]:
        try:
            call()
            return None
        except Exception as e:
            return e

    if len(calls) <= 1:
        return [run(c) for c in calls]
    with ThreadPoolExecutor(min(_DRIVER_PARALLELISM, len(calls))) as pool:
        return list(pool.map(run, calls))


class _Transactions:
    """The driver's side of exactly-once: commit or abort the tasks' transactions."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.timeout_ms = ProducerConfig(opts.settings).transaction_timeout_ms

    def _handles(self, messages: Sequence[Optional[WriterCommitMessage]]) \
            -> List[Tuple[SinkCommitMessage, TransactionHandle]]:
        out = [(m, TransactionHandle.from_dict(m.transaction)) for m in messages
               if isinstance(m, SinkCommitMessage) and m.transaction]
        return sorted(out, key=lambda mh: mh[0].partition_id)

    def _explain(self, m: SinkCommitMessage, h: TransactionHandle, e: BaseException) -> str:
        text = f"task {m.partition_id} (transaction {h.transactional_id!r}): {type(e).__name__}: {e}"
        fenced = isinstance(e, ProducerFencedError) or isinstance(e.__cause__, ProducerFencedError)
        if fenced:
            open_ms = (time.time() - m.opened_at) * 1000.0
            if m.opened_at and open_ms >= self.timeout_ms:
                text += (f" -- the transaction was open {open_ms:.0f} ms, longer than transaction.timeout.ms="
                         f"{self.timeout_ms}: the coordinator aborted it; raise kafka.transaction.timeout.ms")
            else:
                text += " -- another producer of this transactional id (a later run of the query) aborted it"
        return text

    def commit(self, messages: Sequence[Optional[WriterCommitMessage]], what: str) -> None:
        handles = self._handles(messages)
        settings = self.opts.settings
        stop_after = self.opts.faults.get("test.fail.commit.after")
        if stop_after is not None:
            for _m, h in handles[:stop_after]:
                commit_transaction(h, settings)
            raise _InjectedFault(f"kproducer.test.fail.commit.after={stop_after}: the driver stops after committing "
                                 f"{min(stop_after, len(handles))} of {len(handles)} transactions of {what} "
                                 "(fault injection for tests)")
        kill_after = self.opts.faults.get("test.kill.driver.after.commits")
        if kill_after is not None:
            for _m, h in handles[:kill_after]:
                commit_transaction(h, settings)
            log.warning("kproducer sink: kproducer.test.kill.driver.after.commits: killing the driver after %d "
                        "commits", kill_after)
            os.kill(self.opts.faults["test.kill.driver.pid"], signal.SIGKILL)
            os._exit(1)
        # other attempts of these tasks (a speculative copy that lost, a crashed run's attempt) may have left a
        # transaction open under their own transactional ids: InitProducerId aborts it and fences them. Done
        # together with the commits (Spark hands commit() only the winning attempts' messages).
        fence = [transactional_id(h.transactional_id.rsplit("-", 2)[0], m.partition_id, k)
                 for m, h in handles for k in range(m.attempt + 2) if k != m.attempt]
        calls: List[Callable[[], Any]] = [partial(commit_transaction, h, settings) for _m, h in handles]
        calls += [partial(abort_transactional_id, t, settings) for t in fence]
        outcomes = _parallel(calls)
        errors = outcomes[:len(handles)]
        for tid, e in zip(fence, outcomes[len(handles):]):
            if e is not None:
                log.warning("kproducer sink: could not abort what %r may have left open (%s: %s); the coordinator "
                            "aborts it after transaction.timeout.ms", tid, type(e).__name__, e)
        failed = [(m, h, e) for (m, h), e in zip(handles, errors) if e is not None]
        if failed:
            done = sorted(m.partition_id for (m, _h), e in zip(handles, errors) if e is None)
            raise SinkWriteError(
                f"kproducer sink: committing {what} failed for {len(failed)} of {len(handles)} tasks: "
                + "; ".join(self._explain(m, h, e) for m, h, e in failed)
                + f". The transactions of tasks {done} are committed. A streaming query restarted from its "
                "checkpoint replays the micro-batch: those tasks write nothing again, the others write theirs.")

    def abort(self, messages: Sequence[Optional[WriterCommitMessage]]) -> int:
        handles = self._handles(messages)
        if self.opts.faults.get("test.fail.commit.after") is not None:
            # the injected failure stands for a driver that died mid-commit: a dead driver aborts nothing
            log.warning("kproducer sink: kproducer.test.fail.commit.after is set: leaving %d transactions open",
                        len(handles))
            return 0
        settings = self.opts.settings
        errors = _parallel([partial(abort_transaction, h, settings) for _m, h in handles])
        for (m, h), e in zip(handles, errors):
            if e is not None:
                log.warning("kproducer sink: aborting the transaction of task %d (%r) failed (%s: %s); the "
                            "coordinator aborts it after transaction.timeout.ms", m.partition_id,
                            h.transactional_id, type(e).__name__, e)
        return len(handles)


def _format_offsets(offsets: OffsetRanges) -> str:
    return ", ".join(f"{t}-{p}: {lo}..{hi}" for (t, p), (lo, hi) in sorted(offsets.items()))


class KafkaBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("kproducer")``: each task sends its Arrow batches with ``send_batch``, flushes,
    and returns a :class:`SinkCommitMessage`."""

    def __init__(self, opts: SinkOptions, plan: ColumnPlan) -> None:
        self.opts = opts
        self.plan = plan
        #: exactly_once: the prefix of this write's transactional ids (chosen here, on the driver)
        self.prefix = opts.transactional_id_prefix or f"kproducer-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return _Task(self.opts, self.plan, "write", self.prefix).run(iterator)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, nbytes, offsets = summarize(messages)
        if self.opts.exactly_once:
            _Transactions(self.opts).commit(messages, "the write")
        log.info("kproducer sink: wrote %d rows (%d bytes)%s: %s", rows, nbytes,
                 " exactly once" if self.opts.exactly_once else "", _format_offsets(offsets))

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, _nbytes, offsets = summarize(messages)
        if self.opts.exactly_once:
            n = _Transactions(self.opts).abort(messages)
            log.warning("kproducer sink: the write failed; the transactions of %d tasks that succeeded are aborted "
                        "(%d rows that read_committed consumers never see)", n, rows)
            return
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
        return _Task(self.opts, self.plan, "micro-batch", self.opts.transactional_id_prefix).run(batches)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, nbytes, offsets = summarize(messages)
        if self.opts.exactly_once:
            skipped = sum(1 for m in messages if isinstance(m, SinkCommitMessage) and m.skipped)
            _Transactions(self.opts).commit(messages, f"micro-batch {batchId}")
            if skipped:
                log.info("kproducer sink: micro-batch %d was replayed; %d tasks found their rows committed before "
                         "and wrote nothing", batchId, skipped)
        log.info("kproducer sink: micro-batch %d wrote %d rows (%d bytes): %s", batchId, rows, nbytes,
                 _format_offsets(offsets))

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, _nbytes, offsets = summarize(messages)
        if self.opts.exactly_once:
            n = _Transactions(self.opts).abort(messages)
            log.warning("kproducer sink: micro-batch %d failed; the transactions of %d tasks are aborted", batchId, n)
            return
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
    re-sends the whole result table each trigger). At-least-once, or exactly-once with
    ``kproducer.guarantee=exactly_once``. See docs/spark.md.
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


__all__ = ["KafkaBatchWriter", "KafkaSink", "KafkaStreamWriter", "SinkCommitMessage", "SinkWriteError", "TaskInfo",
           "last_committed_batch", "marker_group", "summarize", "transactional_id"]
