"""BufferPool: bounds the memory held by queued records to buffer.memory, and recycles batch buffers.

Batches reserve memory when they are created (``batch.size``, or more for one large record) and give it
back when they complete. When memory is exhausted, ``allocate`` blocks up to max.block.ms; waiters are
served strictly first come, first served, and each waiter collects memory as it is freed so that a large
request is not starved by a stream of small ones.

As Java's BufferPool, the pool keeps the buffers of finished ``batch.size`` batches on a free list and
hands them to new batches (:meth:`allocate_buffer`), whose record builder writes into them in place (a
write position, no growth). A pooled buffer is a ``bytearray`` of ``batch.size - 61`` bytes: the records
of a full batch (the 61-byte batch header is built separately). Accounting, as Java's:
``buffer.memory = non-pooled available + free buffers x batch.size + reserved by batches``; free buffers
are dropped to make room when a reservation needs more than the non-pooled memory.

Ownership (docs/design.md, "Batch buffers"): a buffer belongs to one batch from allocate_buffer until the
batch gives it back with :meth:`deallocate` (``ProducerBatch.release``: the batch is finished, every view it
lent for a request was released). The pool refuses a buffer that something still views (a live
memoryview of it, which would see the next batch's records): it is dropped, not reused, and counted in
``dropped_in_use``.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Callable, Deque, Iterable, Optional, Tuple

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import BufferExhaustedError, KafkaError
from ..protocol.accel import MODULES, load
from ..protocol.records import RECORD_BATCH_OVERHEAD

if TYPE_CHECKING:
    from .metrics import ProducerMetrics

_send_c = load(MODULES["producer"])


class _Waiter:
    __slots__ = ("cond", "needed", "collected")

    def __init__(self, lock: threading.Lock, needed: int) -> None:
        self.cond = threading.Condition(lock)
        self.needed = needed
        self.collected = 0


def _in_use_py(buf: bytearray) -> bool:
    """Whether something still holds a view (memoryview, buffer export) of ``buf``: CPython refuses to
    resize an exported bytearray. Shrinking by a byte and growing back keeps its allocation. (Compiled twin,
    which reads the bytearray's export count: ``_send.bytearray_exported``.)"""
    if not buf:
        return False
    try:
        last = buf[-1]
        del buf[-1:]
    except BufferError:
        return True
    buf.append(last)
    return False


in_use: Callable[[bytearray], bool] = _send_c.bytearray_exported if _send_c is not None else _in_use_py


class BufferPool:
    def __init__(self, total_memory: int, poolable_size: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.total_memory = total_memory
        self.poolable_size = poolable_size
        #: length of a pooled buffer: a full batch's records (0: batch.size too small to pool anything)
        self.buffer_size = max(0, poolable_size - RECORD_BATCH_OVERHEAD)
        self.clock = clock
        self._lock = threading.Lock()
        self._available = total_memory  # memory neither reserved, nor in a free buffer, nor promised to a waiter
        self._free: Deque[bytearray] = deque()  # batch.size buffers given back, ready for new batches
        #: the threads waiting for memory, first come first served (read by the accumulator: while one waits,
        #: every batch is sendable at once, RecordAccumulator.sends_at_once; changed only by this pool)
        self.waiters: Deque[_Waiter] = deque()
        self._closed = False
        self.wait_time_ms_total = 0.0
        #: batch buffers handed out by allocate_buffer: reused from the free list / newly made
        self.buffers_reused = 0
        self.buffers_created = 0
        #: buffers given back to the free list / given back while still viewed (dropped, not reused)
        self.buffers_returned = 0
        self.dropped_in_use = 0
        #: where waits are recorded (bufferpool-wait-ratio; set by ProducerMetrics.watch)
        self.metrics: Optional["ProducerMetrics"] = None
        #: called (on the freeing thread, outside the pool's lock) after memory was given back; the asyncio
        #: producer (kproducer.aio) sets it to wake sends waiting for buffer space without blocking its loop
        self.on_free: Optional[Callable[[], None]] = None

    def allocate(self, size: int, max_time_to_block_ms: float) -> int:
        """Reserve ``size`` bytes, waiting up to ``max_time_to_block_ms``. Returns ``size``.

        Raises :class:`BufferExhaustedError` on timeout and ValueError when ``size`` can never fit.
        """
        self._reserve(size, max_time_to_block_ms, False)
        return size

    def allocate_buffer(self, size: int, max_time_to_block_ms: float) -> Tuple[int, Optional[bytearray]]:
        """As :meth:`allocate`, and for a ``batch.size`` reservation also a buffer to write the batch's records
        into: a pooled one when the free list has one, else a new one. ``(size, None)`` for other sizes
        (the builder grows its own storage: a record larger than batch.size gets its own buffer)."""
        poolable = size == self.poolable_size and self.buffer_size > 0
        buf = self._reserve(size, max_time_to_block_ms, poolable)
        if not poolable:
            return size, None
        with self._lock:
            if buf is not None:
                self.buffers_reused += 1
            else:
                self.buffers_created += 1
        return size, buf if buf is not None else bytearray(self.buffer_size)

    def _reserve(self, size: int, max_time_to_block_ms: float, want_buffer: bool) -> Optional[bytearray]:
        if size > self.total_memory:
            raise ValueError(
                f"attempt to allocate {size} bytes, more than buffer.memory={self.total_memory}"
            )
        with self._lock:
            if self._closed:
                raise KafkaError("the producer is closed; no memory can be allocated")
            if not self.waiters:
                if size == self.poolable_size and self._free:
                    buf = self._free.pop()
                    return buf if want_buffer else None
                if self.available_memory_unlocked() >= size:
                    self._free_up(size)
                    self._available -= size
                    return None
            # out of memory (or others are waiting first): queue up and collect memory as it frees up
            waiter = _Waiter(self._lock, size)
            self.waiters.append(waiter)
            start = self.clock.monotonic_ms()
            deadline = start + max_time_to_block_ms
            exhausted = False
            try:
                while waiter.collected < size:
                    if self._closed:
                        raise KafkaError("the producer was closed while send() waited for buffer memory")
                    # take what is free right now, if we are at the head of the queue
                    if self.waiters[0] is waiter:
                        if waiter.collected == 0 and size == self.poolable_size and self._free:
                            buf = self._free.pop()
                            return buf if want_buffer else None
                        free = self.available_memory_unlocked()
                        if free > 0:
                            got = min(free, size - waiter.collected)
                            self._free_up(got)
                            self._available -= got
                            waiter.collected += got
                            continue
                    remaining = deadline - self.clock.monotonic_ms()
                    if remaining <= 0:
                        exhausted = True
                        raise BufferExhaustedError(
                            f"Failed to allocate {size} bytes within max.block.ms={max_time_to_block_ms:.0f} ms: "
                            f"buffer.memory={self.total_memory} is full of records waiting to be sent. "
                            "Increase buffer.memory or max.block.ms, or produce more slowly"
                        )
                    self.clock.wait(waiter.cond, remaining)
                return None
            except BaseException:
                # give back what was collected, and let the next waiter try
                self._available += waiter.collected
                waiter.collected = 0
                raise
            finally:
                waited = self.clock.monotonic_ms() - start
                self.wait_time_ms_total += waited
                if self.metrics is not None:
                    self.metrics.record_buffer_wait(waited, exhausted)
                self.waiters.remove(waiter)
                if self.waiters and (self._available > 0 or self._free):
                    self.waiters[0].cond.notify()

    def try_allocate(self, size: int) -> bool:
        """Reserve ``size`` bytes only if that needs no waiting (free now, and nobody is waiting first);
        never blocks. Used to grow a compressed batch beyond batch.size while its records are appended."""
        if size <= 0:
            return True
        with self._lock:
            if (self._closed or self.waiters
                    or self.available_memory_unlocked() < size):
                return False
            self._free_up(size)
            self._available -= size
            return True

    def _free_up(self, size: int) -> None:
        """Drop free buffers until the non-pooled memory covers ``size`` (the caller holds the lock)."""
        free = self._free
        while free and self._available < size:
            free.pop()
            self._available += self.poolable_size

    def _reusable(self, size: int, buffer: Optional[bytearray]) -> Optional[bool]:
        """Whether ``buffer`` (given back with a reservation of ``size``) can go to the free list: None when it
        is not a pool buffer at all, False when it is one that something still views (checked outside the
        lock: it asks the bytearray whether it can be resized)."""
        if buffer is None or size != self.poolable_size or len(buffer) != self.buffer_size or self.buffer_size <= 0:
            return None
        return not in_use(buffer)

    def _give_back(self, size: int, buffer: Optional[bytearray], reusable: Optional[bool]) -> None:
        """Under the lock: the buffer to the free list when it is ``reusable``, else its memory counts as free."""
        if reusable is False:
            self.dropped_in_use += 1
        if reusable and not self._closed:
            self._free.append(buffer)  # type: ignore[arg-type]
            self.buffers_returned += 1
        else:
            self._available += size

    def deallocate(self, size: int, buffer: Optional[bytearray] = None) -> None:
        """Return ``size`` bytes reserved by :meth:`allocate`, and the batch's buffer if it has one: a
        ``batch.size`` reservation's buffer of the pooled length that nothing views any more goes to the
        free list, for the next batch; anything else is dropped (the memory counts as free again)."""
        self.deallocate_many(((size, buffer),))

    def deallocate_many(self, returns: Iterable[Tuple[int, Optional[bytearray]]]) -> None:
        """:meth:`deallocate` of several reservations (the batches of one produce response) under one take of
        the lock, with one wakeup of the waiting sends."""
        checked = []
        for size, buffer in returns:  # (a loop, not a comprehension: one frame less per produce response)
            if size > 0:
                checked.append((size, buffer, None if buffer is None else self._reusable(size, buffer)))
        if not checked:
            return
        with self._lock:
            for size, buffer, reusable in checked:
                self._give_back(size, buffer, reusable)
            if self.waiters:
                self.waiters[0].cond.notify()
        on_free = self.on_free
        if on_free is not None:
            on_free()

    def exchange(self, size: int, buffer: Optional[bytearray], keep: int) -> int:
        """A batch swaps its reservation of ``size`` bytes (and its pool buffer) for one of ``keep`` bytes (what
        replaces the buffer: its records trimmed, or compressed), never blocking: the buffer goes to the free
        list as by :meth:`deallocate` (dropped instead when the pool has too little memory left to give the
        batch ``keep`` bytes without it). Returns the batch's new reservation (``size`` unchanged, buffer kept,
        when ``keep >= size``)."""
        if keep >= size:
            return size
        reusable = self._reusable(size, buffer)
        with self._lock:
            self._give_back(size, buffer, reusable)
            if self._available < keep:  # (_free_up's own test, made before the call)
                self._free_up(keep)  # the memory given back covers ``keep``: at worst the buffer is dropped here
            self._available -= keep
            if self.waiters:
                self.waiters[0].cond.notify()
        on_free = self.on_free
        if on_free is not None:
            on_free()
        return keep

    def available_memory(self) -> int:
        """Memory not reserved by a batch (free buffers included), as Java's ``availableMemory()``."""
        with self._lock:
            return self.available_memory_unlocked()

    def available_memory_unlocked(self) -> int:
        """:meth:`available_memory` without taking the lock: under it, or as a snapshot that other threads may
        change at once (the asyncio producer's staging checks, which only other threads' appends can lower)."""
        return self._available + len(self._free) * self.poolable_size

    def free_unless_waited(self) -> int:
        """:meth:`available_memory_unlocked`, or -1 while a thread waits for memory (whose turn comes first): what
        records may take without waiting, read without the lock (the send core's check for staged records)."""
        return -1 if self.waiters else self._available + len(self._free) * self.poolable_size

    def can_take(self, size: int) -> bool:
        """Whether ``size`` bytes could be reserved now without waiting (nobody waits, enough available)."""
        with self._lock:
            return not self.waiters and self.available_memory_unlocked() >= size

    def unallocated_memory(self) -> int:
        """Memory in neither a batch nor a free buffer (Java's ``unallocatedMemory()``)."""
        with self._lock:
            return self._available

    def queued(self) -> int:
        """How many threads are waiting for memory (the accumulator treats > 0 as 'memory exhausted')."""
        return len(self.waiters)

    @property
    def free_blocks(self) -> int:
        """Buffers on the free list."""
        return len(self._free)

    @property
    def hit_rate(self) -> float:
        """Share of batch buffers handed out that were reused from the free list (0.0 before any)."""
        total = self.buffers_reused + self.buffers_created
        return self.buffers_reused / total if total else 0.0

    def close(self) -> None:
        """Wake every waiter with an error, and drop the free buffers."""
        with self._lock:
            self._closed = True
            self._available += len(self._free) * self.poolable_size
            self._free.clear()
            for w in self.waiters:
                w.cond.notify_all()
