"""RecordAccumulator: per-partition queues of batches between send() and the sender thread."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from ..clock import SYSTEM_CLOCK, Clock, ExponentialBackoff
from ..errors import KafkaError, ProducerClosedError
from ..protocol.columns import BinaryColumn, column_item, extend_columns
from ..protocol.records import RECORD_BATCH_OVERHEAD, RecordBatchBuilder
from .batch import Header, ProducerBatch
from .buffer_pool import BufferPool
from .compression_ratio import BatchSizing, CompressionRatioEstimator
from .future import Callback, FutureRecordMetadata
from .gate import Gate
from .idempotence import sequence_after

if TYPE_CHECKING:
    from ..network.metadata import Cluster
    from .transaction_manager import TransactionManager

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]


class AppendResult(NamedTuple):
    future: FutureRecordMetadata
    batch_is_full: bool
    new_batch_created: bool


_tuple_new = tuple.__new__
_ONE = (0,)
_INF = float("inf")


class _SequenceRows:
    """What the append loop appends: records given as sequences (send(), send_batch())."""

    __slots__ = ("timestamp", "keys", "values", "headers", "indices")

    def __init__(self, timestamp: int, keys: Optional[Sequence[Optional[bytes]]], values: Sequence[Optional[bytes]],
                 headers: Optional[Sequence[Optional[Sequence[Header]]]], indices: Sequence[int]) -> None:
        self.timestamp = timestamp
        self.keys = keys
        self.values = values
        self.headers = headers
        self.indices = indices

    def extend(self, builder: RecordBatchBuilder, pos: int) -> int:
        """Append ``indices[pos:]`` while they fit; the position reached."""
        return builder.extend(self.timestamp, self.keys, self.values, self.headers, self.indices, pos)

    def row(self, i: int) -> Tuple[Optional[bytes], Optional[bytes], Optional[Sequence[Header]]]:
        keys, headers = self.keys, self.headers
        return (keys[i] if keys is not None else None, self.values[i], headers[i] if headers is not None else None)


class _ColumnRows:
    """What the append loop appends: rows of binary columns (kproducer.protocol.columns, no headers), encoded
    straight from the columns' buffers."""

    __slots__ = ("timestamp", "keys", "values", "indices")

    def __init__(self, timestamp: int, keys: Optional[BinaryColumn], values: BinaryColumn,
                 indices: Sequence[int]) -> None:
        self.timestamp = timestamp
        self.keys = keys
        self.values = values
        self.indices = indices

    def extend(self, builder: RecordBatchBuilder, pos: int) -> int:
        return extend_columns(builder, self.timestamp, self.keys, self.values, self.indices, pos)

    def row(self, i: int) -> Tuple[Optional[bytes], Optional[bytes], Optional[Sequence[Header]]]:
        keys = self.keys
        return (column_item(keys, i) if keys is not None else None, column_item(self.values, i), None)
#: the records of one send_batch() in one batch: (batch, first offset delta, count, their positions)
Segment = Tuple[ProducerBatch, int, int, Sequence[int]]


class ReadyCheckResult(NamedTuple):
    ready_nodes: Set[int]
    next_ready_check_delay_ms: float
    unknown_leader_topics: Set[str]


class RecordAccumulator:
    """Queues records into batches per partition; tells the sender which nodes have sendable batches
    (:meth:`ready`) and hands them over (:meth:`drain`); takes retries back at the head
    (:meth:`reenqueue`); expires batches past delivery.timeout.ms (:meth:`expired_batches`)."""

    def __init__(
        self,
        batch_size: int,
        linger_ms: float,
        retry_backoff_ms: float,
        retry_backoff_max_ms: float,
        delivery_timeout_ms: float,
        buffer_pool: BufferPool,
        compression: int = 0,
        compression_level: Optional[int] = None,
        clock: Clock = SYSTEM_CLOCK,
        transaction_manager: Optional["TransactionManager"] = None,
        backoff: Optional[ExponentialBackoff] = None,
        max_request_size: Optional[int] = None,
    ) -> None:
        self.batch_size = batch_size
        #: compressed batches are cut at batch.size *estimated compressed* bytes; see compression_ratio.py
        self.ratio_estimator = CompressionRatioEstimator()
        #: no batch grows beyond this many uncompressed bytes (so even incompressible records fit a request)
        self.max_request_size = max_request_size
        self._sizing = BatchSizing(self.ratio_estimator, compression, batch_size, max_request_size,
                                   buffer_pool.try_allocate) if compression else None
        self.linger_ms = linger_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.free = buffer_pool
        self.compression = compression
        self.compression_level = compression_level
        self.clock = clock
        self.txn = transaction_manager
        self.retry_backoff = backoff or ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, 0.2)
        self._lock = threading.Lock()
        self._batches: Dict[TopicPartition, Deque[ProducerBatch]] = {}
        self._incomplete: Set[ProducerBatch] = set()
        self._incomplete_lock = threading.Lock()
        self._muted: Set[TopicPartition] = set()
        self._drain_index: Dict[int, int] = {}
        self._node_partitions_cache: Tuple[Optional["Cluster"], Dict[int, List[TopicPartition]]] = (None, {})
        self._flushes_in_progress = 0
        self._appends_in_progress = 0
        self._closed = False
        #: whether records are taken (gate.Gate: its byte is what send()'s compiled fast path reads instead of the
        #: producer's _closed, the sender's fatal_error and this accumulator's _closed); whichever closes first
        #: closes it (here, Sender.fatal_error, Producer._refuse_records) and nothing reopens it
        self.gate = Gate()
        #: no queued batch reaches delivery.timeout.ms before this (inf: none queued at the last scan). It may be
        #: earlier than the true next expiry (the batch it came from was drained since), never later: whatever
        #: puts an older batch at the head of a queue (a retry, a split, a drain uncovering it) lowers it; a
        #: new batch never expires before the ones queued already
        self.next_batch_expiry_ms = float("inf")
        #: whether the last drain() left a batch queued in a partition of the nodes it drained (True when it may
        #: have: a muted partition, a batch backing off or kept waiting, the request full); the sender asks ready()
        #: again after sending only then (Sender._after_send_timeout)
        self.left_behind = True

    # -- append (application threads) -------------------------------------------------------------
    #
    # One append path: _append() puts records into the partition's open batch (the builder's try_append /
    # extend decide whether a record fits: the one place that decides a batch is full), and opens a new batch
    # (_reserve takes its memory outside the lock; _new_batch, the one place batches are made, makes it under the
    # lock and the loop fills it there, so no empty batch is ever queued) when there is none or it is full, until
    # every record is in. append() (one record, from send()) starts with the first step of
    # that loop inlined: the per-record hot path.

    def append(self, topic: str, partition: int, timestamp: int, key: Optional[bytes], value: Optional[bytes],
               headers: Optional[Sequence[Header]], callback: Optional[Callback], max_block_ms: float,
               now_ms: float) -> AppendResult:
        """Add a record to the partition's last open batch, or to a new batch (which may block up to
        ``max_block_ms`` for memory). ``batch_is_full``/``new_batch_created`` tell the caller to wake the
        sender."""
        tp = (topic, partition)
        lock = self._lock
        lock.acquire()  # (explicitly: a `with` block costs twice as much on this path)
        try:
            if self._closed:
                raise ProducerClosedError("send() called after close(): the producer no longer accepts records")
            dq = self._batches.get(tp)
            if dq:
                last = dq[-1]
                if not last.closed:
                    # _append's first step for one record, inlined (ProducerBatch.try_append without the call)
                    delta = last.builder.try_append(timestamp, key, value, headers)
                    if delta >= 0:
                        fut = FutureRecordMetadata(last, delta, timestamp, -1 if key is None else len(key),
                                                   -1 if value is None else len(value))
                        if callback is not None:
                            last.thunks.append((callback, fut))  # type: ignore[union-attr]
                        # (last_append_ms, informational, is left to the other appends here)
                        # built without AppendResult's Python-level __new__ (~0.3 us)
                        return _tuple_new(AppendResult, (fut, len(dq) > 1, False))  # type: ignore[no-any-return]
                    if last.sizing is not None and last.grow():
                        # a compressed batch reached its first capacity: it may hold more (compression_ratio.py)
                        grown = last.try_append(timestamp, key, value, headers, callback, now_ms)
                        if grown is not None:
                            return AppendResult(grown, len(dq) > 1 or last.is_full(), False)
                    last.close_for_appends()
        finally:
            lock.release()
        segments: List[Segment] = []
        new, full, made = self._append(tp, _SequenceRows(timestamp, None if key is None else (key,), (value,),
                                                         None if headers is None else (headers,), _ONE),
                                       1, max_block_ms, now_ms, segments, True, callback)
        assert made is not None
        return AppendResult(made, full, new)

    def append_many(self, topic: str, partition: int, timestamp: int, keys: Optional[Sequence[Optional[bytes]]],
                    values: Sequence[Optional[bytes]], headers: Optional[Sequence[Optional[Sequence[Header]]]],
                    indices: Sequence[int], max_block_ms: float, now_ms: float,
                    segments: List[Segment]) -> bool:
        """Append the records at ``indices`` (positions in ``keys``/``values``/``headers``) to the partition,
        in order, filling batches as :meth:`append` would. Appends ``(batch, first delta, count, indices)``
        to ``segments`` for each batch used. Returns whether the sender should be woken (a new or full batch).
        """
        new, full, _fut = self._append((topic, partition), _SequenceRows(timestamp, keys, values, headers, indices),
                                       len(indices), max_block_ms, now_ms, segments, False, None)
        return new or full

    def append_columns(self, topic: str, partition: int, timestamp: int, keys: Optional[BinaryColumn],
                       values: BinaryColumn, indices: Sequence[int], max_block_ms: float, now_ms: float,
                       segments: List[Segment]) -> bool:
        """:meth:`append_many` for rows of binary columns (kproducer.protocol.columns, no headers): the same
        loop, with ``extend_columns`` encoding straight from the columns' buffers."""
        new, full, _fut = self._append((topic, partition), _ColumnRows(timestamp, keys, values, indices), len(indices),
                                       max_block_ms, now_ms, segments, False, None)
        return new or full

    def _append(self, tp: TopicPartition, rows: Union[_SequenceRows, _ColumnRows], total: int, max_block_ms: float,
                now_ms: float, segments: List[Segment], want_future: bool,
                callback: Optional[Callback]) -> Tuple[bool, bool, Optional[FutureRecordMetadata]]:
        """The append loop over ``rows`` (``total`` of them): ``(a batch was opened, the last batch is full or
        not alone, the future)``; the future (and ``callback``'s registration, under the lock so that callbacks
        keep the append order) only with ``want_future``, for a single record."""
        pos = 0
        indices = rows.indices
        new = False
        fut: Optional[FutureRecordMetadata] = None
        # memory reserved (outside the lock: it may block) for a batch that is made and filled under the lock, so
        # that the sender never sees a new batch before its first records are in (Java's appendNewBatch)
        reservation: Optional[Tuple[int, Optional[bytearray]]] = None
        try:
            while True:
                with self._lock:
                    if self._closed:
                        raise ProducerClosedError("send() called after close(): the producer no longer accepts records")
                    dq = self._batches.get(tp)
                    if dq is None:
                        dq = self._batches[tp] = deque()
                    last = dq[-1] if dq else None
                    if reservation is not None:
                        if last is None or last.closed:
                            last = self._new_batch(tp, now_ms, *reservation)
                            reservation = None
                            dq.append(last)
                            self._head_queued(last)  # (every batch queued lowers the next expiry, a new one too)
                            with self._incomplete_lock:
                                self._incomplete.add(last)
                            new = True
                        # else another thread opened a batch meanwhile: that one is used, the memory given back below
                    if last is not None and not last.closed:
                        start = pos
                        first_delta = last.builder.record_count
                        pos = rows.extend(last.builder, pos)
                        while pos < total and last.sizing is not None and last.grow():
                            # a compressed batch reached its first capacity: it may hold more (compression_ratio.py)
                            pos = rows.extend(last.builder, pos)
                        if pos > start:
                            last.last_append_ms = now_ms
                            segments.append((last, first_delta, pos - start, indices[start:pos]))
                            if want_future:
                                key, value, _ = rows.row(indices[0])
                                fut = FutureRecordMetadata(last, first_delta, rows.timestamp,
                                                           -1 if key is None else len(key),
                                                           -1 if value is None else len(value))
                                if callback is not None:
                                    last.thunks.append((callback, fut))  # type: ignore[union-attr]
                        if pos >= total:
                            return new, len(dq) > 1 or last.is_full(), fut
                        last.close_for_appends()
                    self._appends_in_progress += 1
                try:
                    if reservation is not None:
                        self.free.deallocate(*reservation)
                        reservation = None
                    reservation = self._reserve(*rows.row(indices[pos]), max_block_ms)
                finally:
                    with self._lock:
                        self._appends_in_progress -= 1
        finally:
            if reservation is not None:
                self.free.deallocate(*reservation)

    def _reserve(self, key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[Header]],
                 max_block_ms: float) -> Tuple[int, Optional[bytearray]]:
        """Reserve memory for a new batch big enough for this record (may block up to ``max_block_ms``); the
        caller makes the batch under the lock (_new_batch) or gives the memory back."""
        size = max(self.batch_size, RecordBatchBuilder.estimate_record_size(key, value, headers))
        return self.free.allocate_buffer(size, max_block_ms)

    def _new_batch(self, tp: TopicPartition, now_ms: float, reserved: int,
                   buf: Optional[bytearray] = None) -> ProducerBatch:
        """A new, empty batch for new records: the one place their batches are made (and sized). A compressed
        one is full at batch.size estimated *compressed* bytes. ``buf``: the BufferPool buffer its records are
        written into (the batch gives it back when it is finished, see ProducerBatch.release)."""
        builder = RecordBatchBuilder(self.batch_size, self.compression, self.compression_level, buf)
        batch = ProducerBatch(tp[0], tp[1], builder, now_ms, reserved)
        if buf is not None:
            batch.pool = self.free
        if self._sizing is not None:
            batch.compress_by_estimate(self._sizing)
        return batch

    def batch_limit(self, topic: str) -> int:
        """About how many uncompressed bytes a full batch of ``topic`` holds (batch.size without compression);
        the sticky partitioner moves on after that many bytes."""
        if self._sizing is None:
            return self.batch_size
        return self._sizing.limit(self.ratio_estimator.estimate(topic, self.compression))

    # -- ready / drain (sender thread) -----------------------------------------------------------

    def sends_at_once(self) -> bool:
        """Whether every partition's head batch is sendable now, lingering or not: a thread waits for buffer
        memory, a flush is under way, the accumulator is closed, or a transaction is completing."""
        # (attributes, not calls: ready() asks this on the network thread, and each call there is a cold frame)
        txn = self.txn
        return (self._flushes_in_progress > 0 or self._closed or bool(self.free.waiters)
                or (txn is not None and txn.completing))

    def ready(self, cluster: "Cluster", now_ms: float) -> ReadyCheckResult:
        """Nodes with at least one sendable partition, how long until another might become sendable,
        and topics whose leader is unknown (their metadata must be refreshed)."""
        ready_nodes: Set[int] = set()
        next_delay = float("inf")
        unknown: Set[str] = set()
        # every partition's head batch is sendable now, lingering or not (asked once, when a lingering batch
        # needs the answer: nothing else calls for it)
        forced: Optional[bool] = None
        linger = self.linger_ms
        leaders = cluster.leaders
        nodes = cluster.nodes
        muted = self._muted
        with self._lock:
            items = list(self._batches.items())
        for tp, dq in items:
            if not dq:
                continue
            try:
                batch = dq[0]
            except IndexError:
                continue
            leader = leaders.get(tp)
            if leader is None or leader not in nodes:
                unknown.add(tp[0])
                continue
            if leader in ready_nodes or tp in muted:
                continue
            waited = now_ms - batch.last_attempt_ms
            if batch.attempts > 0 and waited < batch.retry_backoff_ms:  # backing off after a failed attempt
                next_delay = min(next_delay, batch.retry_backoff_ms - waited)
            elif waited >= linger or len(dq) > 1 or batch.is_full() or (
                    forced if forced is not None else (forced := self.sends_at_once())):
                ready_nodes.add(leader)
            else:
                next_delay = min(next_delay, linger - waited)
        # built without the NamedTuple's Python-level __new__ (a call per ready(), several per request)
        return _tuple_new(ReadyCheckResult, (ready_nodes, next_delay, unknown))  # type: ignore[no-any-return]

    def _partitions_by_node(self, cluster: "Cluster") -> Dict[int, List[TopicPartition]]:
        cached_cluster, mapping = self._node_partitions_cache
        if cached_cluster is not cluster:
            mapping = {}
            for tp, leader in cluster.leaders.items():
                mapping.setdefault(leader, []).append(tp)
            for parts in mapping.values():
                parts.sort()
            self._node_partitions_cache = (cluster, mapping)
        return mapping

    def drain(self, cluster: "Cluster", nodes: Set[int], max_size: int, now_ms: float) -> Dict[int, List[ProducerBatch]]:
        """Take head batches of each node's partitions, up to ``max_size`` bytes per node, starting each
        time from the next partition so that none starves. Taken batches are closed for appends.
        ``left_behind`` tells afterwards whether a batch of those nodes' partitions may still be queued."""
        cached_cluster, by_node = self._node_partitions_cache
        if cached_cluster is not cluster:
            by_node = self._partitions_by_node(cluster)
        out: Dict[int, List[ProducerBatch]] = {}
        txn = self.txn
        batches = self._batches
        muted = self._muted
        left = False  # a batch stays queued in a partition of ``nodes`` (or may: the tests below are conservative)
        for node in nodes:
            parts = by_node.get(node)
            if not parts:
                continue
            size = 0
            ready: List[ProducerBatch] = []
            n = len(parts)
            start = self._drain_index.get(node, 0) % n
            idx = start
            with self._lock:
                # idempotence: takes the head batch (its sequence) or keeps it waiting
                take = txn.drain_sequencer() if txn is not None else None
                if txn is not None and take is None:
                    left = True  # no batch may go now (e.g. the producer id is not known yet)
                    continue
                while True:
                    tp = parts[idx]
                    idx = (idx + 1) % n
                    dq = batches.get(tp)
                    if dq:
                        first = dq[0]
                        if tp in muted or (first.attempts > 0 and first.is_backing_off(now_ms)):
                            left = True
                        else:
                            first_size = first.estimated_size()
                            if ready and size + first_size > max_size:
                                # a single batch larger than the request size is still sent, alone.
                                # The next drain starts at this partition, so that it is not starved.
                                idx = (idx - 1) % n
                                left = True
                                break
                            if take is None or take(first):
                                dq.popleft()
                                if dq:
                                    self._head_queued(dq[0])
                                    left = True
                                first.close_for_appends()
                                first.in_flight = True
                                first.drained_ms = now_ms
                                size += first_size
                                ready.append(first)
                            else:
                                left = True
                    if idx == start:
                        break
                self._drain_index[node] = idx
            if ready:
                out[node] = ready
        self.left_behind = left
        return out

    # -- retries ---------------------------------------------------------------------------------

    def reenqueue(self, batch: ProducerBatch, now_ms: float) -> None:
        """Put a batch to retry back at the head of its queue (in sequence order when idempotent)."""
        batch.reenqueued(now_ms, self.retry_backoff.backoff(batch.attempts))
        with self._lock:
            dq = self._batches.setdefault(batch.tp, deque())
            if batch.has_sequence() and self.txn is not None:
                self._insert_in_sequence_order(dq, batch)
            else:
                dq.appendleft(batch)
            self._head_queued(batch)

    def _head_queued(self, batch: ProducerBatch) -> None:
        """``batch`` was queued: a new batch (append), or one put back at or uncovered at the head of its queue,
        though older than batches queued since the last expiry scan. It lowers the next expiry, so that no scan
        is needed before it (the caller holds the lock)."""
        deadline = batch.created_ms + self.delivery_timeout_ms
        if deadline < self.next_batch_expiry_ms:
            self.next_batch_expiry_ms = deadline

    @staticmethod
    def _sequence_position(dq: Deque[ProducerBatch], batch: ProducerBatch) -> int:
        """Where ``batch`` goes in its queue: retried batches sit at the head ordered by sequence (across the
        wrap at 2^31); new (unsequenced) batches follow."""
        for i, other in enumerate(dq):
            if not other.has_sequence() or sequence_after(other.base_sequence, batch.base_sequence):
                return i
        return len(dq)

    @classmethod
    def _insert_in_sequence_order(cls, dq: Deque[ProducerBatch], batch: ProducerBatch) -> None:
        dq.insert(cls._sequence_position(dq, batch), batch)

    def split_and_reenqueue(self, batch: ProducerBatch, now_ms: float) -> int:
        """Split a batch the broker found too large into batches of half its size, put them back at the
        head of the partition's queue, and hand the records' futures over. Returns the number of parts."""
        from ..protocol.records import read_batches

        parsed = read_batches(batch.builder.build(), verify_crc=False)[0]
        target = max(1, min(self.batch_size, batch.builder.estimated_size() // 2))
        parts: List[ProducerBatch] = []
        mapping: List[Tuple[ProducerBatch, int]] = []
        current: Optional[ProducerBatch] = None
        for rec in parsed.records:
            headers = rec.headers or None
            ts = parsed.base_timestamp + rec.timestamp_delta
            delta = current.builder.try_append(ts, rec.key, rec.value, headers) if current is not None else -1
            if current is None or delta < 0:
                current = ProducerBatch(batch.topic, batch.partition,
                                        RecordBatchBuilder(target, self.compression, self.compression_level),
                                        batch.created_ms, 0)
                current.attempts = batch.attempts
                current.last_attempt_ms = now_ms
                parts.append(current)
                delta = current.builder.try_append(ts, rec.key, rec.value, headers)
            mapping.append((current, delta))
        for part in parts:
            part.close_for_appends()
        # memory stays reserved by the first part; the others reserve none
        parts[0].take_memory_of(batch)
        if self.compression:
            # as Java: back to the initial estimate, or the big batch's ratio if worse, so splits stay rare
            raw = batch.builder.uncompressed_records_size()
            observed = (batch.estimated_size() - RECORD_BATCH_OVERHEAD) / raw if raw else 1.0
            self.ratio_estimator.set(batch.topic, self.compression, max(1.0, observed))
        with self._incomplete_lock:
            self._incomplete.discard(batch)
            self._incomplete.update(parts)
        batch.hand_over(mapping)
        with self._lock:
            dq = self._batches.setdefault(batch.tp, deque())
            if batch.has_sequence() and self.txn is not None:
                # the parts take the big batch's place in sequence order (they get its sequences next): with
                # several batches in flight, a later batch may have been split and queued first
                i = self._sequence_position(dq, batch)
                for j, part in enumerate(parts):
                    dq.insert(i + j, part)
            else:
                for part in reversed(parts):
                    dq.appendleft(part)
            self._head_queued(parts[0])  # (the parts are as old as the batch they split)
        return len(parts)

    def split_out_failed_records(self, batch: ProducerBatch, failed: Dict[int, BaseException],
                                 now_ms: float) -> Optional[ProducerBatch]:
        """KIP-467: the broker refused some records of ``batch`` (``failed``: position in the batch -> the
        record's error) and wrote none of it. Those records fail with their own error; the others move to
        one new batch, put back at the head of the partition's queue and returned (None when every record
        failed). The records' futures and callbacks follow them."""
        from ..protocol.records import read_batches

        parsed = read_batches(batch.builder.build(), verify_crc=False)[0]
        capacity = max(self.batch_size, batch.builder.estimated_size() * 2)
        good = ProducerBatch(batch.topic, batch.partition,
                             RecordBatchBuilder(capacity, self.compression, self.compression_level), batch.created_ms, 0)
        good.attempts = batch.attempts
        good.last_attempt_ms = now_ms
        bad: List[Tuple[ProducerBatch, BaseException]] = []
        mapping: List[Tuple[ProducerBatch, int]] = []
        for i, rec in enumerate(parsed.records):
            ts = parsed.base_timestamp + rec.timestamp_delta
            target = good
            if i in failed:
                target = ProducerBatch(batch.topic, batch.partition,
                                       RecordBatchBuilder(capacity, self.compression, self.compression_level),
                                       batch.created_ms, 0)
                bad.append((target, failed[i]))
            delta = target.builder.try_append(ts, rec.key, rec.value, rec.headers or None)
            if delta < 0:
                raise KafkaError(f"could not move record {i} of a batch for {batch.topic}-{batch.partition}")
            mapping.append((target, delta))
        keep = good.record_count > 0
        parts = ([good] if keep else []) + [b for b, _e in bad]
        for part in parts:
            part.close_for_appends()
        parts[0].take_memory_of(batch)  # memory stays reserved by one part
        with self._incomplete_lock:
            self._incomplete.discard(batch)
            self._incomplete.update(parts)
        batch.hand_over(mapping)
        for part, error in bad:
            part.done(-1, -1, error)
            self.deallocate(part)
        if not keep:
            return None
        good.reenqueued(now_ms, 0.0)
        good.attempts = batch.attempts
        with self._lock:
            self._batches.setdefault(batch.tp, deque()).appendleft(good)
            self._head_queued(good)
        return good

    # -- expiry ------------------------------------------------------------------------------------

    def expired_batches(self, now_ms: float) -> List[ProducerBatch]:
        """Remove and return queued batches that have been waiting longer than delivery.timeout.ms (the
        queues are scanned only once the next expiry is due: every batch queued lowers it, _head_queued)."""
        expired: List[ProducerBatch] = []
        if now_ms < self.next_batch_expiry_ms:
            return expired
        next_expiry = _INF
        timeout = self.delivery_timeout_ms
        with self._lock:
            for dq in self._batches.values():
                while dq:
                    b = dq[0]
                    if b.has_reached_delivery_timeout(timeout, now_ms):
                        dq.popleft()
                        b.close_for_appends()
                        expired.append(b)
                    else:
                        next_expiry = min(next_expiry, b.delivery_deadline(timeout))
                        break
            self.next_batch_expiry_ms = next_expiry
        return expired

    # -- completion and bookkeeping ------------------------------------------------------------------

    def deallocate(self, batch: ProducerBatch) -> None:
        """Forget a completed batch, drop its record bytes and give its memory back."""
        self.deallocate_batches((batch,))

    def deallocate_batches(self, batches: Sequence[ProducerBatch]) -> None:
        """:meth:`deallocate` of several batches (those of one produce response), taking each lock once."""
        with self._incomplete_lock:
            discard = self._incomplete.discard
            for b in batches:
                discard(b)
        returns: List[Tuple[int, Optional[bytearray]]] = []
        for b in batches:
            buf = b.release()
            reserved, extra = b.memory_to_release()
            returns.append((reserved, buf))
            if extra:
                returns.append((extra, None))
        self.free.deallocate_many(returns)

    def incomplete_batches(self) -> List[ProducerBatch]:
        with self._incomplete_lock:
            return list(self._incomplete)

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def has_undrained(self) -> bool:
        with self._lock:
            return any(self._batches.values())

    def queued_batches(self) -> int:
        with self._lock:
            return sum(len(dq) for dq in self._batches.values())

    def queued_batches_list(self) -> List[ProducerBatch]:
        with self._lock:
            return [b for dq in self._batches.values() for b in dq]

    def mute(self, tp: TopicPartition) -> None:
        self._muted.add(tp)

    def unmute(self, tp: TopicPartition) -> None:
        self._muted.discard(tp)

    def begin_flush(self) -> None:
        with self._lock:
            self._flushes_in_progress += 1

    def end_flush(self) -> None:
        with self._lock:
            self._flushes_in_progress -= 1

    def flush_in_progress(self) -> bool:
        return self._flushes_in_progress > 0

    def await_flush_completion(self, timeout_s: Optional[float]) -> bool:
        """Wait for every batch that exists now to complete; False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        return all(_wait_done(b, deadline) for b in self.incomplete_batches())

    def appends_in_progress(self) -> bool:
        return self._appends_in_progress > 0

    def close(self) -> None:
        """Refuse new records; queued batches become ready so they drain."""
        with self._lock:
            self._closed = True
            self.gate.close()  # (under the lock: the compiled send() reads it under the lock too)

    @property
    def closed(self) -> bool:
        return self._closed

    def abort_undrained_batches(self, error: BaseException,
                                partitions: Optional[Set[TopicPartition]] = None, keep_sequenced: bool = False,
                                before_failing: Optional[Callable[[List[ProducerBatch]], None]] = None
                                ) -> List[ProducerBatch]:
        """Fail every batch still queued (not in flight) with ``error``, or only those of ``partitions``;
        returns them. ``keep_sequenced``: the batches that were sent before (they have a sequence: they wait
        for a retry) stay queued, as Java's abortUndrainedBatches leaves them with a transaction manager.
        ``before_failing`` is given the batches taken before any of them fails (the transaction manager: a
        failed batch makes the transaction abortable before a callback can see the failure)."""
        aborted: List[ProducerBatch] = []
        with self._lock:
            for tp, dq in self._batches.items():
                if partitions is not None and tp not in partitions:
                    continue
                if keep_sequenced and any(b.has_sequence() for b in dq):
                    kept = [b for b in dq if b.has_sequence()]
                    for b in dq:
                        if not b.has_sequence():
                            b.close_for_appends()
                            aborted.append(b)
                    dq.clear()
                    dq.extend(kept)
                    continue
                while dq:
                    b = dq.popleft()
                    b.close_for_appends()
                    aborted.append(b)
        if before_failing is not None and aborted:
            before_failing(aborted)
        for b in aborted:
            b.done(-1, -1, error)
            self.deallocate(b)
        return aborted

    def abort_incomplete_batches(self, error: BaseException) -> None:
        """Fail everything not yet acknowledged (used when the producer is force-closed)."""
        self.abort_undrained_batches(error)
        for b in self.incomplete_batches():
            b.close_for_appends()
            b.done(-1, -1, error)
            self.deallocate(b)


def _wait_done(batch: ProducerBatch, deadline: Optional[float]) -> bool:
    """Wait for a batch, and for the parts it was split into, until ``deadline`` (time.monotonic)."""
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not batch.wait(remaining):
        return False
    if batch.split_into is not None:
        parts = {id(p): p for p, _delta in batch.split_into}
        return all(_wait_done(p, deadline) for p in parts.values())
    return True
