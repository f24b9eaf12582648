"""ProducerBatch: the records bound for one partition, sent and acknowledged together."""
from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

from ..protocol.accel import MODULES, load
from ..protocol.compression import CODEC_NONE
from ..protocol.records import (
    ATTR_TRANSACTIONAL,
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
)
from .compression_ratio import ESTIMATION_FACTOR, GUESSED, SAMPLED
from .future import Callback, FutureRecordMetadata

if TYPE_CHECKING:
    from .buffer_pool import BufferPool
    from .compression_ratio import BatchSizing

Header = Tuple[str, Optional[bytes]]
_TRIM_SLACK = 512
Thunk = Tuple[Callback, FutureRecordMetadata]
_send_c = load(MODULES["producer"])


class _BatchFieldsPy:
    """The fields of a batch that the compiled append reads and writes: the pure-Python twin of
    ``_send.BatchBase`` (ProducerBatch declares its other fields as its own slots)."""

    __slots__ = ("builder", "closed", "thunks")
    builder: RecordBatchBuilder
    closed: bool  # no more appends
    thunks: Optional[List[Thunk]]


if TYPE_CHECKING:
    _BatchBase = _BatchFieldsPy
else:
    _BatchBase = _send_c.BatchBase if _send_c is not None else _BatchFieldsPy


class ProducerBatch(_BatchBase):
    """Records for one topic-partition, their callbacks, and the batch's delivery bookkeeping."""

    __slots__ = (
        "topic", "partition", "tp", "created_ms", "last_attempt_ms", "last_append_ms",
        "drained_ms", "attempts", "retry_backoff_ms", "in_flight", "reserved_bytes",
        "base_offset", "log_append_time", "error", "_event", "_lock", "_done", "_settled",
        "producer_id", "producer_epoch", "base_sequence", "is_transactional", "_built", "_head",
        "split_into", "reopened", "compression_ratio", "sizing", "extra_bytes", "grown", "filled",
        "pool", "_view",
    )

    def __init__(self, topic: str, partition: int, builder: RecordBatchBuilder, created_ms: float,
                 reserved_bytes: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.tp = (topic, partition)
        self.builder = builder
        self.created_ms = created_ms
        self.last_attempt_ms = created_ms
        self.last_append_ms = created_ms
        self.drained_ms = 0.0
        self.attempts = 0
        self.retry_backoff_ms = 0.0
        self.closed = False  # no more appends
        self.in_flight = False
        self.reserved_bytes = reserved_bytes
        self.base_offset = -1
        self.log_append_time = -1
        self.error: Optional[BaseException] = None
        self.thunks = []
        # made only when someone waits (most batches complete unwaited: an Event costs a Condition and a lock)
        self._event: Optional[threading.Event] = None
        self._lock = threading.Lock()
        self._done = False
        self._settled = False  # done and every callback fired: wait() returns at once
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.is_transactional = False
        self._built: Optional[bytes] = None
        self._head: Optional[bytes] = None  # the 61-byte batch header of request_records() (this producer state)
        self.split_into: Optional[List[Tuple["ProducerBatch", int]]] = None
        self.reopened = False
        #: a compressed batch: the estimated compression ratio its size is judged by (0.0: not compressed)
        self.compression_ratio = 0.0
        #: a compressed batch that may still grow (see :meth:`grow`), until it is built; else None
        self.sizing: Optional["BatchSizing"] = None
        #: memory reserved from the BufferPool by growing (given back with ``reserved_bytes``)
        self.extra_bytes = 0
        #: a compressed batch that grew at least once
        self.grown = False
        #: a compressed batch closed because it reached batch.size by the estimate (its ratio is representative)
        self.filled = False
        #: the BufferPool whose buffer the builder writes into (None: the builder's own storage); the buffer
        #: goes back by :meth:`release` (finished), or earlier: see :meth:`close_for_appends`, :meth:`records`
        #: and :meth:`grow`
        self.pool: Optional["BufferPool"] = None
        #: the view of the records lent to produce requests (request_records); released by :meth:`release`
        self._view: Optional[memoryview] = None

    def compress_by_estimate(self, sizing: "BatchSizing") -> None:
        """Make this (new, compressed) batch full at batch.size *estimated compressed* bytes: its builder gets
        room for ``sizing.limit(estimate)`` uncompressed bytes, at most its capacity now (the memory reserved);
        :meth:`grow` gives it more when it gets there."""
        ratio = sizing.estimator.estimate(self.topic, sizing.codec)
        self.compression_ratio = ratio
        self.sizing = sizing
        limit = sizing.limit(ratio)
        if limit < self.builder.capacity:
            self.builder.capacity = limit

    # -- appending ---------------------------------------------------------------------------

    def try_append(self, timestamp: int, key: Optional[bytes], value: Optional[bytes],
                   headers: Optional[Sequence[Header]], callback: Optional[Callback],
                   now_ms: float) -> Optional[FutureRecordMetadata]:
        """Append a record; None when the batch has no room (the caller starts a new batch)."""
        delta = self.builder.try_append(timestamp, key, value, headers)
        if delta < 0:
            return None
        fut = FutureRecordMetadata(self, delta, timestamp, -1 if key is None else len(key),
                                   -1 if value is None else len(value))
        if callback is not None:
            self.thunks.append((callback, fut))  # type: ignore[union-attr]
        self.last_append_ms = now_ms
        return fut

    @property
    def record_count(self) -> int:
        return self.builder._count  # (the builder's record_count, read several times per batch by the sender)

    def is_full(self) -> bool:
        builder = self.builder
        return self.closed or RECORD_BATCH_OVERHEAD + builder._len >= builder.capacity  # (builder.estimated_size())

    def estimated_size(self) -> int:
        """Bytes on the wire: exact once built; before, the uncompressed size, or for a compressed batch the
        estimate from its compression ratio (as Java's ``estimatedSizeInBytes``: what drain packs by)."""
        built = self._built
        if built is not None:
            return len(built)
        ratio = self.compression_ratio
        if ratio:
            return RECORD_BATCH_OVERHEAD + int(self.builder.uncompressed_records_size() * ratio * ESTIMATION_FACTOR)
        return RECORD_BATCH_OVERHEAD + self.builder._len  # (builder.estimated_size(), without the call)

    def grow(self) -> bool:
        """A compressed batch refused a record at its capacity: give it room up to batch.size estimated
        compressed bytes, by the current estimate (or by measuring itself while the estimator knows nothing,
        see ``BatchSizing``), reserving the memory that takes from the BufferPool if it is free now. False: the
        batch is full. The caller holds the accumulator's lock."""
        sizing = self.sizing
        if sizing is None or self.closed:
            return False
        builder = self.builder
        estimator = sizing.estimator
        codec = sizing.codec
        state = estimator.state(self.topic, codec)
        if state == GUESSED or (state == SAMPLED and self.grown):
            raw = builder.uncompressed_records_size()
            if raw <= 0:
                return False
            estimator.sample(self.topic, codec, len(builder.records_section()) / raw)
        ratio = estimator.estimate(self.topic, codec)
        limit = sizing.limit(ratio)
        if limit <= builder.capacity:
            self.filled = True
            return False
        extra = limit - self.reserved_bytes - self.extra_bytes
        if extra > 0:
            if not sizing.try_allocate(extra):
                return False
            self.extra_bytes += extra
        builder.capacity = limit
        self.compression_ratio = ratio
        self.grown = True
        if self.pool is not None:
            self._leave_pool_buffer(limit - RECORD_BATCH_OVERHEAD)
        return True

    def _leave_pool_buffer(self, room: int) -> None:
        """A compressed batch outgrew its pool buffer (batch.size - 61 bytes): move its records to storage of
        its new room and give the pool buffer back now, for the next batch, with its batch.size reservation
        (replaced by an extra reservation of the same size, if the pool has it free right now; else the batch
        keeps writing into the pool buffer, which grows in place and is not reused)."""
        pool = self.pool
        sizing = self.sizing
        size = self.reserved_bytes
        if pool is None or sizing is None or size <= 0 or not sizing.try_allocate(size):
            return
        builder = self.builder
        old = builder._buf
        used = builder._len
        new = bytearray(max(room, used))
        with memoryview(old) as whole:
            new[:used] = whole[:used]
        builder._buf = new
        self.extra_bytes += size
        self.reserved_bytes = 0
        self.pool = None
        pool.deallocate(size, old)

    def take_memory_of(self, other: "ProducerBatch") -> None:
        """After a split, this part holds the memory the original batch reserved."""
        self.reserved_bytes, other.reserved_bytes = other.reserved_bytes, 0
        self.extra_bytes, other.extra_bytes = other.extra_bytes, 0

    def memory_to_release(self) -> Tuple[int, int]:
        """The BufferPool reservations to give back (batch.size-sized first, so the pool counts its block);
        zeroed here."""
        out = (self.reserved_bytes, self.extra_bytes)
        self.reserved_bytes = self.extra_bytes = 0
        return out

    def close_for_appends(self) -> None:
        """No more appends. The records' storage is trimmed to them when it has more than ``_TRIM_SLACK`` bytes
        of room left (one copy of the batch), so that queued batches hold what they use: a builder's own
        storage (a large record's, a compressed batch that grew in place, a split's part) grows as a bytearray
        does, over-allocating, memory buffer.memory does not count; an uncompressed batch closed early (linger.ms, a flush) leaves most of
        its pool buffer empty: the buffer goes back to the pool at once, for the next batch, and the batch
        keeps a reservation of what it holds (BufferPool.exchange). A compressed batch keeps its buffer until
        it is compressed (:meth:`records`)."""
        if self.closed:
            return
        self.closed = True
        builder = self.builder
        buf = builder._buf
        if sys.getsizeof(buf) - builder._len <= _TRIM_SLACK or self._view is not None:
            return
        pool = self.pool
        if pool is not None and builder.compression != CODEC_NONE:
            return
        builder._buf = buf[:builder._len]  # (a copy: builder.records_view() copied, without its call)
        if pool is not None:
            self.pool = None
            self.reserved_bytes = pool.exchange(self.reserved_bytes, buf, RECORD_BATCH_OVERHEAD + builder._len)

    # -- producer state (idempotence) --------------------------------------------------------

    def has_sequence(self) -> bool:
        return self.base_sequence >= 0

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           is_transactional: bool) -> None:
        if (producer_id, producer_epoch, base_sequence, is_transactional) != (
                self.producer_id, self.producer_epoch, self.base_sequence, self.is_transactional):
            self.producer_id = producer_id
            self.producer_epoch = producer_epoch
            self.base_sequence = base_sequence
            self.is_transactional = is_transactional
            self._built = None
            self._head = None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.builder._count - 1) & 0x7FFFFFFF  # (record_count, without its call)

    def records(self) -> bytes:
        """The batch as it goes on the wire (built once per producer state)."""
        built = self._built
        if built is None:
            built = self._built = self.builder.build(self.producer_id, self.producer_epoch, self.base_sequence,
                                                     self.is_transactional)
            sizing = self.sizing
            if sizing is not None:  # a compressed batch, built for the first time: tell the estimator
                self.sizing = None
                raw = self.builder.uncompressed_records_size()
                if raw > 0:
                    sizing.estimator.observe(self.topic, sizing.codec, (len(built) - RECORD_BATCH_OVERHEAD) / raw,
                                             self.filled)
            pool = self.pool
            if pool is not None and self.closed and self.builder.compression != CODEC_NONE:
                # compressed: the wire bytes are a separate object (cached in the builder for rebuilds), so the
                # uncompressed pool buffer goes back now; the batch keeps a reservation of the compressed size
                self.pool = None
                self.reserved_bytes = pool.exchange(self.reserved_bytes, self.builder.detach_buffer(), len(built))
        return built

    def request_records(self) -> Union[bytes, Tuple[bytes, memoryview]]:
        """The batch for a produce request: for an uncompressed batch, its 61-byte header and a view of the
        records encoded at append time, so that the only copy of the records is the request's (the bytes
        are those of :meth:`records`); else :meth:`records`. The batch is closed for appends."""
        builder = self.builder
        if builder.compression != CODEC_NONE or self._built is not None or self.sizing is not None:
            return self.records()
        view = self._view
        if view is None:
            view = self._view = builder.records_view()
        head = self._head
        if head is None:
            try:
                head = self._head = builder.batch_header(ATTR_TRANSACTIONAL if self.is_transactional else 0,
                                                         self.producer_id, self.producer_epoch, self.base_sequence)
            except ValueError:
                return self.records()  # out-of-range producer state: build() says what is wrong
        return head, view

    # -- retries and expiry ------------------------------------------------------------------

    def reenqueued(self, now_ms: float, backoff_ms: float) -> None:
        self.attempts += 1
        self.last_attempt_ms = now_ms
        self.last_append_ms = now_ms
        self.retry_backoff_ms = backoff_ms
        self.in_flight = False

    def in_retry(self) -> bool:
        return self.attempts > 0

    def is_backing_off(self, now_ms: float) -> bool:
        return self.attempts > 0 and now_ms - self.last_attempt_ms < self.retry_backoff_ms

    def has_reached_delivery_timeout(self, delivery_timeout_ms: float, now_ms: float) -> bool:
        return now_ms - self.created_ms >= delivery_timeout_ms

    def delivery_deadline(self, delivery_timeout_ms: float) -> float:
        return self.created_ms + delivery_timeout_ms

    # -- completion --------------------------------------------------------------------------

    def is_done(self) -> bool:
        return self._done

    def wait(self, timeout: Optional[float]) -> bool:
        """Block until the batch is completed and its callbacks have run (or ``timeout`` seconds)."""
        if self._settled:
            return True
        with self._lock:
            if self._settled:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(timeout)

    def _settle(self) -> None:
        with self._lock:
            self._settled = True
            event = self._event
        if event is not None:
            event.set()

    def add_thunk(self, callback: Callback, fut: FutureRecordMetadata) -> bool:
        """Register a callback; False when the batch is already done (the caller fires it)."""
        with self._lock:
            if self.thunks is None:
                return False
            self.thunks.append((callback, fut))
            return True

    def done(self, base_offset: int, log_append_time: int, error: Optional[BaseException]) -> bool:
        """Complete every record: with offsets, or with ``error``. Only the first call counts
        (a response that arrives after the batch expired is ignored); returns whether it did."""
        event: Optional[threading.Event] = None
        with self._lock:
            if self._done:
                return False
            self._done = True
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            thunks, self.thunks = self.thunks, None
            if not thunks:  # no callback to run first: settled at once (one take of the lock, not two)
                self._settled = True
                event = self._event
        if thunks:
            try:
                for callback, fut in thunks:
                    fut.fire(callback, self)  # (logs what a callback raises; see FutureRecordMetadata.fire)
            finally:
                # waiters are released even when a callback's KeyboardInterrupt reaches an application thread
                self._settle()
        elif event is not None:
            event.set()
        return True

    def hand_over(self, parts: List[Tuple["ProducerBatch", int]]) -> None:
        """After a split: record i now lives at ``parts[i]`` = (new batch, its delta there). The
        callbacks move with the records; futures follow ``split_into``."""
        with self._lock:
            thunks, self.thunks = self.thunks, None
            self.split_into = parts
            self._done = True
        try:
            for callback, fut in thunks or ():
                new_batch, _delta = parts[fut._delta]
                fut._resolve()
                if not new_batch.add_thunk(callback, fut):
                    fut.fire(callback, new_batch)
        finally:
            self._settle()
        # the parts hold copies of the records (and this batch's memory reservation): its buffer is dropped
        self.release()

    def release(self) -> Optional[bytearray]:
        """Drop the record bytes of a completed batch (futures keep only offsets and sizes), so that
        completed batches a caller still references do not hold on to the payloads. Returns the builder's
        storage for the BufferPool, after releasing the view lent to produce requests (their bytes were
        copied into the request when it was encoded; a later use of that view raises ValueError instead of
        reading another batch's records). None when the batch is not done, or the view could not be released
        (something still exports it: the storage must not be reused)."""
        if not self._done:
            return None
        self._built = None
        self._head = None
        builder = self.builder
        view = self._view
        if view is not None:
            self._view = None
            try:
                view.release()
            except BufferError:
                builder.release()
                return None
        buf = builder.detach_buffer() if self.pool is not None else None
        self.pool = None
        builder.release()
        return buf

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.topic}-{self.partition} records={self.record_count} "
                f"attempts={self.attempts} seq={self.base_sequence} done={self._done}>")
