"""BufferPool: bounds the memory held by queued records to buffer.memory.

Batches reserve memory when they are created (``batch.size``, or more for one large record) and give it
back when they complete. When memory is exhausted, ``allocate`` blocks up to max.block.ms; waiters are
served strictly first come, first served, and each waiter collects memory as it is freed so that a large
request is not starved by a stream of small ones. The pool keeps the count of ``batch.size`` blocks
returned to it as its free list (Kafka keeps the ByteBuffers themselves; Python's allocator already
recycles the memory behind a bytearray, so only the accounting is kept here).
"""
from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Callable, Deque, Optional

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import BufferExhaustedError, KafkaError

if TYPE_CHECKING:
    from .metrics import ProducerMetrics


class _Waiter:
    __slots__ = ("cond", "needed", "collected")

    def __init__(self, lock: threading.Lock, needed: int) -> None:
        self.cond = threading.Condition(lock)
        self.needed = needed
        self.collected = 0


class BufferPool:
    def __init__(self, total_memory: int, poolable_size: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.total_memory = total_memory
        self.poolable_size = poolable_size
        self.clock = clock
        self._lock = threading.Lock()
        self._available = total_memory  # memory not reserved by any batch nor promised to a waiter
        self._free_blocks = 0  # poolable-size blocks returned and not yet handed out again
        self._waiters: Deque[_Waiter] = deque()
        self._closed = False
        self.wait_time_ms_total = 0.0
        #: where waits are recorded (bufferpool-wait-ratio; set by ProducerMetrics.watch)
        self.metrics: Optional["ProducerMetrics"] = None
        #: called (on the freeing thread, outside the pool's lock) after memory was given back; the asyncio
        #: producer (kproducer.aio) sets it to wake sends waiting for buffer space without blocking its loop
        self.on_free: Optional[Callable[[], None]] = None

    def allocate(self, size: int, max_time_to_block_ms: float) -> int:
        """Reserve ``size`` bytes, waiting up to ``max_time_to_block_ms``. Returns ``size``.

        Raises :class:`BufferExhaustedError` on timeout and ValueError when ``size`` can never fit.
        """
        if size > self.total_memory:
            raise ValueError(
                f"attempt to allocate {size} bytes, more than buffer.memory={self.total_memory}"
            )
        with self._lock:
            if self._closed:
                raise KafkaError("the producer is closed; no memory can be allocated")
            if not self._waiters and self._available >= size:
                self._take(size)
                return size
            # out of memory (or others are waiting first): queue up and collect memory as it frees up
            waiter = _Waiter(self._lock, size)
            self._waiters.append(waiter)
            start = self.clock.monotonic_ms()
            deadline = start + max_time_to_block_ms
            exhausted = False
            try:
                while waiter.collected < size:
                    if self._closed:
                        raise KafkaError("the producer was closed while send() waited for buffer memory")
                    # take what is free right now, if we are at the head of the queue
                    if self._waiters[0] is waiter and self._available > 0:
                        got = min(self._available, size - waiter.collected)
                        self._take(got)
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
                return size
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
                self._waiters.remove(waiter)
                if self._waiters and self._available > 0:
                    self._waiters[0].cond.notify()

    def try_allocate(self, size: int) -> bool:
        """Reserve ``size`` bytes only if that needs no waiting (free now, and nobody is waiting first);
        never blocks. Used to grow a compressed batch beyond batch.size while its records are appended."""
        if size <= 0:
            return True
        with self._lock:
            if self._closed or self._waiters or self._available < size:
                return False
            self._take(size)
            return True

    def _take(self, size: int) -> None:
        self._available -= size
        if size == self.poolable_size and self._free_blocks:
            self._free_blocks -= 1

    def deallocate(self, size: int) -> None:
        """Return ``size`` bytes reserved by :meth:`allocate`."""
        if size <= 0:
            return
        with self._lock:
            self._available += size
            if size == self.poolable_size:
                self._free_blocks += 1
            if self._waiters:
                self._waiters[0].cond.notify()
        on_free = self.on_free
        if on_free is not None:
            on_free()

    def available_memory(self) -> int:
        with self._lock:
            return self._available

    def queued(self) -> int:
        """How many threads are waiting for memory (the accumulator treats > 0 as 'memory exhausted')."""
        return len(self._waiters)

    @property
    def free_blocks(self) -> int:
        return self._free_blocks

    def close(self) -> None:
        """Wake every waiter with an error."""
        with self._lock:
            self._closed = True
            for w in self._waiters:
                w.cond.notify_all()
