"""The ``kproducer`` Python data source: batch and streaming writers with Spark's kafka-sink contract.

Exactly-once (``kproducer.guarantee=exactly_once``): every task attempt writes its rows in a Kafka transaction
of its own under the transactional id ``<prefix>-<Spark partition>`` and commits it itself, with a marker
(write id, Spark partition; for streams the micro-batch id) committed in the same transaction as an offset of
the consumer group ``<prefix>-<Spark partition>``. An attempt first calls InitProducerId (which aborts what an
earlier attempt of the partition left open and fences it), then reads the marker: found, the partition was
committed by another attempt (or an earlier run of the same write id, or before a micro-batch was replayed)
and the attempt writes nothing. See docs/spark.md ("Exactly-once") for the argument."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..errors import InvalidProducerEpochError, ProducerFencedError, TransactionAbortableError
from ..producer.columnar import columnar_supported, send_columns
from ..producer.consumer_group import OffsetAndMetadata
from ..producer.future import BatchSendFuture
from ..producer.kafka_producer import Producer
from ..producer.transaction_handle import committed_offsets
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
    """What one write task delivered (every record acknowledged by the broker; exactly_once: committed)."""

    rows: int = 0
    #: bytes of keys, values and headers
    bytes: int = 0
    #: ``{(topic, partition): (first offset, last offset)}`` written by this task (-1 with acks=0)
    offsets: OffsetRanges = field(default_factory=dict)
    partition_id: int = -1
    attempt: int = 0
    seconds: float = 0.0
    #: exactly_once: the transactional id the task committed its rows under; None: it wrote no transaction
    #: (no rows, or the partition was committed before)
    transactional_id: Optional[str] = None
    #: exactly_once streams: the micro-batch the task wrote
    batch_id: int = -1
    #: exactly_once: the task found its partition's marker, committed before (by another attempt, an earlier
    #: run of the same write id, or before the micro-batch was replayed), and wrote nothing
    skipped: bool = False
    #: exactly_once: milliseconds the task's transaction was open (its first record to its commit)
    transaction_ms: float = 0.0


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


def transactional_id(prefix: str, partition: int) -> str:
    """The transactional id of every attempt of one Spark partition's task (a later attempt fences an earlier)."""
    return f"{prefix}-{partition}"


def marker_group(prefix: str, partition: int) -> str:
    """The consumer group whose committed offset is the marker of a Spark partition's last committed write."""
    return f"{prefix}-{partition}"


def marker_metadata(write_id: str, info: TaskInfo, rows: int) -> str:
    """The marker's offset metadata: the write (the write id, or the query id for streams), the Spark partition,
    the attempt that committed it and its row count; for streams also the micro-batch (also the offset)."""
    data: Dict[str, Any] = {"write": write_id, "partition": info.partition, "attempt": info.attempt, "rows": rows}
    if info.batch_id is not None:
        data["batch"] = info.batch_id
    return json.dumps(data, separators=(",", ":"))


def find_marker(offsets: Mapping[TopicPartition, Tuple[int, Optional[str]]], write_id: str,
                batch_id: Optional[int]) -> Optional[Dict[str, Any]]:
    """The marker (its metadata) among a marker group's committed offsets that says this write -- for streams
    this micro-batch or a later one -- was committed for the partition; None: not committed."""
    for offset, metadata in offsets.values():
        try:
            data = json.loads(metadata or "")
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        if batch_id is None:
            if data.get("write") == write_id and "batch" not in data:
                return data
        elif data.get("write", write_id) == write_id and offset >= batch_id:
            # (markers written before issue 29 carry no "write": their group is named after the query already)
            return data
    return None


class _InjectedFault(RuntimeError):
    """A failure the sink's own tests asked for (kproducer.test.* options)."""


def _drain(batches: Iterable[Any]) -> None:
    for _ in batches:
        pass


def _executor_jvm() -> Optional[int]:
    """The pid of the JVM this Python worker serves (its nearest ``java`` ancestor), from /proc."""
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if name == "java":
            return pid
        if parent <= 1:
            return None
        pid = parent
    return None


class _Faults:
    """``kproducer.test.*`` fault injection in a task (tests only): attempt 0 of every task, or of Spark
    partition ``test.partition`` only, fails / sleeps / SIGKILLs its executor JVM after writing (and flushing)
    the given number of rows."""

    def __init__(self, faults: Mapping[str, int], info: TaskInfo) -> None:
        only = faults.get("test.partition")
        on = info.attempt == 0 and (only is None or only == info.partition)
        self.fail_after = faults.get("test.fail.after.rows") if on else None
        self.sleep_after = faults.get("test.sleep.after.rows") if on else None
        self.sleep_ms = faults.get("test.sleep.ms", 0)
        self.kill_after = faults.get("test.kill.executor.after.rows") if on else None

    @property
    def active(self) -> bool:
        return self.fail_after is not None or self.sleep_after is not None or self.kill_after is not None

    def after_batch(self, task: "_Task", producer: Producer) -> None:
        rows = task.rows
        due = [n for n in (self.fail_after, self.sleep_after, self.kill_after) if n is not None and rows >= n]
        if not due:
            return
        producer.flush()  # the rows are written (in the open transaction, for exactly-once)
        task._reap(block=True)
        if self.sleep_after is not None and rows >= self.sleep_after:
            self.sleep_after = None
            log.warning("kproducer.test.sleep.after.rows: attempt 0 sleeps %d ms after writing %d rows (fault "
                        "injection for tests)", self.sleep_ms, rows)
            time.sleep(self.sleep_ms / 1000.0)
        if self.kill_after is not None and rows >= self.kill_after:
            jvm = _executor_jvm()
            if jvm is None:
                raise _InjectedFault("kproducer.test.kill.executor.after.rows: no executor JVM above this worker")
            log.warning("kproducer.test.kill.executor.after.rows: attempt 0 SIGKILLs its executor (pid %d) after "
                        "writing %d rows (fault injection for tests)", jvm, rows)
            os.kill(jvm, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)  # and this worker: nothing more is sent, nothing is aborted
        if self.fail_after is not None and rows >= self.fail_after:
            raise _InjectedFault(f"kproducer.test.fail.after.rows={self.fail_after}: attempt 0 fails after "
                                 f"writing {rows} rows (fault injection for tests)")


def _driver_faults(opts: SinkOptions, what: str) -> None:
    """``kproducer.test.fail.in.commit`` / ``kproducer.test.kill.driver`` in the driver's commit() (tests only)."""
    pid = opts.faults.get("test.kill.driver")
    if pid:
        log.warning("kproducer.test.kill.driver: SIGKILL to the driver program (pid %d) in the commit of %s", pid,
                    what)
        os.kill(pid, signal.SIGKILL)
        os._exit(1)
    if opts.faults.get("test.fail.in.commit"):
        raise _InjectedFault(f"kproducer.test.fail.in.commit: the driver fails in the commit of {what} (fault "
                             "injection for tests)")


def _fenced(e: BaseException) -> bool:
    """Whether ``e`` (or what caused it) says a newer epoch of the transactional id ended the transaction."""
    seen = 0
    cur: Optional[BaseException] = e
    while cur is not None and seen < 8:
        if isinstance(cur, (ProducerFencedError, InvalidProducerEpochError, TransactionAbortableError)):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


class _Task:
    """Writes one task's record batches and tracks their delivery."""

    def __init__(self, opts: SinkOptions, plan: ColumnPlan, what: str, prefix: Optional[str] = None,
                 write_id: Optional[str] = None) -> None:
        self.opts = opts
        self.plan = plan
        self.what = what
        self.prefix = prefix
        self.write_id = write_id
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

    def _send_all(self, producer: Producer, batches: Iterable[Any], faults: _Faults) -> None:
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
            if faults.active:
                faults.after_batch(self, producer)

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
            self._send_all(producer, batches, _Faults(self.opts.faults, info))
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

    # -- exactly-once ------------------------------------------------------------------------------------

    def _ids(self, info: TaskInfo) -> Tuple[str, str]:
        """(write id, transactional id prefix) of this task: a batch write's from its writer; a stream's from
        its query id (the same after a restart from the checkpoint)."""
        if info.batch_id is not None:
            if info.query_id is None:
                raise SinkWriteError("kproducer sink: exactly_once: Spark gave the micro-batch's task no query id")
            return info.query_id, self.prefix or f"kproducer-{info.query_id}"
        if self.write_id is None or self.prefix is None:
            raise SinkWriteError("kproducer sink: exactly_once: the batch writer gave the task no write id")
        return self.write_id, self.prefix

    @staticmethod
    def _hold(batches: Iterator[Any], limit: int) -> Tuple[Deque[Any], bool]:
        """Up to ``limit`` bytes of the input's non-empty Arrow batches (at least one, when there is one), and
        whether that is all of it."""
        held: Deque[Any] = deque()
        size = 0
        for rb in batches:
            if rb.num_rows == 0:
                continue
            held.append(rb)
            size += rb.nbytes
            if size >= limit:
                return held, False
        return held, True

    def _topics(self, rb: Any) -> List[str]:
        """The topics of an Arrow batch's rows (the topic option, else a few of the topic column's values)."""
        if self.plan.topic is not None:
            return [self.plan.topic]
        if not self.plan.has_topic:
            return []
        return [t for t in pc.unique(rb.column(TOPIC)).to_pylist()[:8] if t]

    def _explain(self, e: BaseException, opened: float, timeout_ms: int, txn_id: str) -> str:
        if not _fenced(e):
            return ""
        open_ms = (time.monotonic() - opened) * 1000.0
        if open_ms >= timeout_ms:
            return (f"; the transaction was open {open_ms:.0f} ms, longer than transaction.timeout.ms={timeout_ms}: "
                    "the coordinator aborted it. A task's transaction lasts from its first record sent to its "
                    "commit: give the write more Spark partitions (each task then writes less), raise "
                    "kproducer.buffer.bytes (a task then holds more of its input before it begins), or raise "
                    "kafka.transaction.timeout.ms (up to the brokers' transaction.max.timeout.ms)")
        return (f"; another attempt of this task (a speculative copy or Spark's retry) began under {txn_id!r} and "
                "aborted this one: that attempt writes the partition's rows")

    def _run_exactly_once(self, batches: Iterable[Any], info: TaskInfo) -> SinkCommitMessage:
        """Write the task's rows in a transaction of its own and commit it, with the partition's marker; or write
        nothing when the marker says another attempt (or an earlier run) committed the partition."""
        started = time.monotonic()
        write_id, prefix = self._ids(info)
        txn_id = transactional_id(prefix, info.partition)
        group = marker_group(prefix, info.partition)
        batch_id = -1 if info.batch_id is None else info.batch_id
        faults = _Faults(self.opts.faults, info)
        source = iter(batches)
        # hold the first part of the input before opening the transaction: a task whose input comes slowly (a slow
        # UDF, a straggling shuffle read) keeps its transaction short (kproducer.buffer.bytes; faults: none)
        try:
            held, complete = self._hold(source, 0 if faults.active else self.opts.buffer_bytes)
        except Exception as e:
            raise self._failure(e, info, f"before a transaction was opened under {txn_id!r}; nothing was "
                                "written") from e
        if not held:
            return SinkCommitMessage(0, 0, {}, info.partition, info.attempt, time.monotonic() - started,
                                     None, batch_id)
        producer: Optional[Producer] = None
        opened = 0.0
        try:
            producer = Producer(dict(self.opts.settings, **{"transactional.id": txn_id}))
            # the topics' metadata first, so that a missing topic fails the task before it fences anyone
            for topic in self._topics(held[0]):
                producer.partitions_for(topic)
            # fences every earlier attempt of this partition (their commit then fails) and aborts what one left open
            producer.init_transactions()
            marker = find_marker(committed_offsets(producer, group), write_id, info.batch_id)
            if marker is not None:
                held.clear()
                _drain(source)
                log.info("kproducer sink: %s task %d (attempt %d): the partition was committed before (by attempt "
                         "%s, %s rows): writing nothing", self.what, info.partition, info.attempt,
                         marker.get("attempt"), marker.get("rows"))
                return SinkCommitMessage(0, 0, {}, info.partition, info.attempt, time.monotonic() - started,
                                         None, batch_id, True)
            producer.begin_transaction()
            opened = time.monotonic()

            def rest() -> Iterator[Any]:
                while held:
                    yield held.popleft()  # (dropping each held batch once it is sent)
                if not complete:
                    yield from source

            self._send_all(producer, rest(), faults)
            topic = self.topic if self.topic is not None else ""
            offset = 0 if info.batch_id is None else info.batch_id
            producer.send_offsets_to_transaction(
                {(topic, 0): OffsetAndMetadata(offset, marker_metadata(write_id, info, self.rows))}, group)
            producer.flush()
            self._reap(block=True)
            producer.commit_transaction()
        except Exception as e:
            if opened == 0.0:
                raise self._failure(e, info, f"before a transaction was opened under {txn_id!r}; nothing was "
                                    "written") from e
            timeout_ms = producer.config.transaction_timeout_ms if producer is not None else 0
            why = self._explain(e, opened, timeout_ms, txn_id)
            aborted = "the transaction is aborted"
            if producer is not None and not why:
                try:
                    producer.abort_transaction(10.0)
                except Exception as abort_error:
                    aborted = (f"aborting the transaction failed ({type(abort_error).__name__}); the next attempt "
                               "aborts it, or the coordinator after transaction.timeout.ms")
            elif why:
                aborted = "the transaction was aborted"
            self._count_delivered()
            raise self._failure(e, info, f"{self.rows} rows written in a transaction under {txn_id!r}; {aborted}"
                                f"{why}: read_committed consumers never see them") from e
        finally:
            if producer is not None:
                try:
                    producer.close(0 if opened == 0.0 else 10.0)
                except Exception:
                    log.warning("kproducer sink: closing the transactional producer failed", exc_info=True)
        open_ms = (time.monotonic() - opened) * 1000.0
        seconds = time.monotonic() - started
        log.info("kproducer sink: %s task %d (attempt %d) wrote %d rows (%d bytes) in %.2f s and committed them "
                 "under %r (the transaction open %.0f ms; pid %d)", self.what, info.partition, info.attempt,
                 self.rows, self.bytes, seconds, txn_id, open_ms, os.getpid())
        return SinkCommitMessage(self.rows, self.bytes, self.offsets, info.partition, info.attempt, seconds, txn_id,
                                 batch_id, False, open_ms)


def _format_offsets(offsets: OffsetRanges) -> str:
    return ", ".join(f"{t}-{p}: {lo}..{hi}" for (t, p), (lo, hi) in sorted(offsets.items()))


def _committed_tasks(messages: Sequence[Optional[WriterCommitMessage]]) -> Tuple[List[int], List[int]]:
    """(Spark partitions whose task committed rows, partitions whose task found them committed before)."""
    wrote = sorted(m.partition_id for m in messages if isinstance(m, SinkCommitMessage) and m.transactional_id)
    skipped = sorted(m.partition_id for m in messages if isinstance(m, SinkCommitMessage) and m.skipped)
    return wrote, skipped


class KafkaBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("kproducer")``: each task sends its Arrow batches with ``send_batch``, flushes (exactly_once:
    commits its transaction), and returns a :class:`SinkCommitMessage`."""

    def __init__(self, opts: SinkOptions, plan: ColumnPlan) -> None:
        self.opts = opts
        self.plan = plan
        #: exactly_once: this write's id (kproducer.write.id, else a new one per save()) and the prefix of its
        #: transactional ids and marker groups (chosen here, on the driver)
        self.write_id = opts.write_id or uuid.uuid4().hex
        self.prefix = opts.transactional_id_prefix or f"kproducer-{self.write_id}"

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return _Task(self.opts, self.plan, "write", self.prefix, self.write_id).run(iterator)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, nbytes, offsets = summarize(messages)
        if self.opts.exactly_once:
            wrote, skipped = _committed_tasks(messages)
            longest = max((m.transaction_ms for m in messages if isinstance(m, SinkCommitMessage)), default=0.0)
            log.info("kproducer sink: write %r committed exactly once: %d rows (%d bytes) by the tasks of Spark "
                     "partitions %s (the longest transaction open %.0f ms)%s: %s", self.write_id, rows, nbytes, wrote,
                     longest, f"; partitions {skipped} were committed before (by another attempt or an earlier run)"
                     if skipped else "", _format_offsets(offsets))
        else:
            log.info("kproducer sink: wrote %d rows (%d bytes): %s", rows, nbytes, _format_offsets(offsets))
        _driver_faults(self.opts, "the write")

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, _nbytes, offsets = summarize(messages)
        if self.opts.exactly_once:
            wrote, skipped = _committed_tasks(messages)
            log.warning("kproducer sink: the write failed. Each task commits its own transaction: the tasks of Spark "
                        "partitions %s committed %d rows (read_committed consumers see them)%s; the failed tasks' "
                        "rows are aborted. Run the same write again with .option('kproducer.write.id', %r) to write "
                        "the rest exactly once: the partitions committed before then write nothing", wrote + skipped,
                        rows, f" ({skipped} before this run)" if skipped else "", self.write_id)
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
            _wrote, skipped = _committed_tasks(messages)
            if skipped:
                log.info("kproducer sink: micro-batch %d: the tasks of Spark partitions %s found it committed before "
                         "(a replay) and wrote nothing", batchId, skipped)
        log.info("kproducer sink: micro-batch %d wrote %d rows (%d bytes)%s: %s", batchId, rows, nbytes,
                 " exactly once" if self.opts.exactly_once else "", _format_offsets(offsets))
        _driver_faults(self.opts, f"micro-batch {batchId}")

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, _nbytes, offsets = summarize(messages)
        if self.opts.exactly_once:
            wrote, _skipped = _committed_tasks(messages)
            log.warning("kproducer sink: micro-batch %d failed; the tasks of Spark partitions %s committed %d rows, "
                        "the failed tasks' rows are aborted. Restarted from its checkpoint, the query replays the "
                        "micro-batch: the partitions committed write nothing, the others write theirs", batchId,
                        wrote, rows)
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
        if opts.write_id is not None:
            raise SinkSchemaError("option 'kproducer.write.id' is for batch writes: a streaming query's writes are "
                                  "identified by its query id (kept in the checkpoint) and micro-batch ids")
        return KafkaStreamWriter(opts, plan, schema)


__all__ = ["KafkaBatchWriter", "KafkaSink", "KafkaStreamWriter", "SinkCommitMessage", "SinkWriteError", "TaskInfo",
           "find_marker", "marker_group", "marker_metadata", "summarize", "transactional_id"]
