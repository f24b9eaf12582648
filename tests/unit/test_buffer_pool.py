"""BufferPool: accounting, blocking up to max.block.ms, FIFO-fair waiters, close()."""
from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional

import pytest

from kproducer.clock import Clock, FakeClock
from kproducer.errors import BufferExhaustedError, KafkaError, KafkaTimeoutError
from kproducer.producer.buffer_pool import BufferPool

REAL = Clock()


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    """Bounded wait for another thread to reach a state."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)


class Allocator(threading.Thread):
    """allocate() in a thread; records the outcome and the order threads finished in."""

    def __init__(self, pool: BufferPool, size: int, max_block_ms: float, name: str,
                 order: Optional[List[str]] = None) -> None:
        super().__init__(daemon=True, name=name)
        self.pool, self.size, self.max_block_ms = pool, size, max_block_ms
        self.result: Optional[int] = None
        self.error: Optional[BaseException] = None
        self.order = order

    def run(self) -> None:
        try:
            self.result = self.pool.allocate(self.size, self.max_block_ms)
        except BaseException as e:  # noqa: B902
            self.error = e
        if self.order is not None:
            self.order.append(self.name)


def test_allocate_and_deallocate_account_memory() -> None:
    pool = BufferPool(1000, 100, FakeClock())
    assert pool.allocate(100, 0) == 100
    assert pool.allocate(250, 0) == 250
    assert pool.available_memory() == 650
    pool.deallocate(100)  # a reservation without its buffer: only the accounting comes back
    assert pool.available_memory() == 750
    assert pool.free_blocks == 0
    pool.deallocate(250)
    pool.deallocate(0)  # ignored
    assert pool.available_memory() == 1000
    assert pool.unallocated_memory() == 1000
    assert pool.queued() == 0


def test_allocating_more_than_buffer_memory_is_a_value_error() -> None:
    pool = BufferPool(100, 10, FakeClock())
    with pytest.raises(ValueError, match="buffer.memory=100"):
        pool.allocate(101, 1000)
    assert pool.available_memory() == 100


def test_exhausted_pool_times_out_after_max_block_ms() -> None:
    clock = FakeClock()
    pool = BufferPool(100, 10, clock)
    pool.allocate(100, 0)
    start = clock.monotonic_ms()
    with pytest.raises(BufferExhaustedError) as info:
        pool.allocate(10, 250)
    # FakeClock.wait advances time instead of sleeping: the pool waited exactly max.block.ms
    assert clock.monotonic_ms() - start == 250
    assert "max.block.ms=250" in str(info.value) and "buffer.memory=100" in str(info.value)
    assert isinstance(info.value, KafkaTimeoutError)
    assert pool.queued() == 0
    assert pool.wait_time_ms_total == 250
    assert pool.available_memory() == 0


def test_zero_max_block_fails_at_once_without_waiting() -> None:
    clock = FakeClock()
    pool = BufferPool(100, 10, clock)
    pool.allocate(95, 0)
    start = clock.monotonic_ms()
    with pytest.raises(BufferExhaustedError):
        pool.allocate(10, 0)
    assert clock.monotonic_ms() == start
    assert pool.available_memory() == 5  # nothing was kept by the failed attempt


def test_timed_out_waiter_gives_back_the_memory_it_collected() -> None:
    clock = FakeClock()
    pool = BufferPool(100, 10, clock)
    pool.allocate(60, 0)
    with pytest.raises(BufferExhaustedError):
        pool.allocate(80, 100)  # collects the 40 that are free, then times out
    assert pool.available_memory() == 40
    assert pool.allocate(40, 0) == 40  # and the memory really is usable again


def test_waiter_blocks_until_memory_is_freed() -> None:
    pool = BufferPool(100, 10, REAL)
    pool.allocate(100, 0)
    t = Allocator(pool, 30, 10_000, "waiter")
    t.start()
    wait_for(lambda: pool.queued() == 1)
    assert t.is_alive() and t.result is None
    pool.deallocate(100)
    t.join(5)
    assert not t.is_alive()
    assert t.error is None and t.result == 30
    assert pool.available_memory() == 70
    assert pool.queued() == 0


def test_waiters_are_served_first_come_first_served() -> None:
    """A large request queued first is not starved by a small one queued after it."""
    pool = BufferPool(100, 10, REAL)
    pool.allocate(100, 0)
    order: List[str] = []
    big = Allocator(pool, 60, 10_000, "big", order)
    big.start()
    wait_for(lambda: pool.queued() == 1)
    small = Allocator(pool, 10, 10_000, "small", order)
    small.start()
    wait_for(lambda: pool.queued() == 2)
    # a new caller queues behind the waiters even when enough memory is free for it
    pool.deallocate(10)
    wait_for(lambda: pool.available_memory() == 0)  # the head (big) collected those 10 bytes
    assert small.is_alive()
    pool.deallocate(50)  # big now has its 60
    big.join(5)
    assert big.result == 60
    assert small.is_alive()  # nothing is left for small yet
    pool.deallocate(10)
    small.join(5)
    assert small.result == 10
    assert order == ["big", "small"]
    assert pool.available_memory() == 0


def test_new_caller_does_not_jump_the_queue() -> None:
    pool = BufferPool(100, 10, REAL)
    pool.allocate(100, 0)
    first = Allocator(pool, 50, 10_000, "first")
    first.start()
    wait_for(lambda: pool.queued() == 1)
    pool.deallocate(20)  # first collects 20 of its 50
    wait_for(lambda: pool.available_memory() == 0)
    # 0 free and a waiter: an immediate caller gets nothing
    with pytest.raises(BufferExhaustedError):
        pool.allocate(5, 0)
    pool.deallocate(30)
    first.join(5)
    assert first.result == 50


def test_a_timed_out_head_waiter_hands_memory_to_the_next() -> None:
    pool = BufferPool(100, 10, REAL)
    pool.allocate(60, 0)
    head = Allocator(pool, 80, 150, "head")  # takes the 40 free bytes, then times out
    head.start()
    wait_for(lambda: pool.queued() == 1 and pool.available_memory() == 0)
    nxt = Allocator(pool, 30, 10_000, "next")
    nxt.start()
    head.join(5)
    nxt.join(5)
    assert isinstance(head.error, BufferExhaustedError)
    # nobody freed memory: the head gave its 40 back and woke the next waiter
    assert nxt.error is None and nxt.result == 30
    assert pool.available_memory() == 10


def test_close_wakes_waiters_with_an_error_and_refuses_new_allocations() -> None:
    pool = BufferPool(100, 10, REAL)
    pool.allocate(100, 0)
    t = Allocator(pool, 10, 60_000, "waiter")
    t.start()
    wait_for(lambda: pool.queued() == 1)
    pool.close()
    t.join(5)
    assert not t.is_alive()
    assert isinstance(t.error, KafkaError) and "closed" in str(t.error)
    assert pool.queued() == 0
    with pytest.raises(KafkaError, match="closed"):
        pool.allocate(1, 0)


class GatedClock(Clock):
    """Real waits, except that one thread, once woken, parks at a gate (with the pool's lock released)
    before it can take memory: the moment right after a deallocate() when memory is free but the head
    waiter has not collected it yet."""

    def __init__(self) -> None:
        self.gated: Optional[threading.Thread] = None
        self.parked = threading.Event()
        self.gate = threading.Event()

    def wait(self, cond: threading.Condition, timeout_ms: Optional[float]) -> bool:
        woke = super().wait(cond, timeout_ms)
        if threading.current_thread() is self.gated and not self.gate.is_set():
            self.parked.set()
            cond.release()
            try:
                self.gate.wait(10)
            finally:
                cond.acquire()
        return woke


def test_free_memory_goes_to_the_head_waiter_not_to_a_newcomer() -> None:
    clock = GatedClock()
    pool = BufferPool(100, 10, clock)
    pool.allocate(100, 0)
    head = Allocator(pool, 50, 10_000, "head")
    clock.gated = head
    head.start()
    wait_for(lambda: pool.queued() == 1)
    pool.deallocate(20)
    assert clock.parked.wait(5)  # the head was woken and has not collected the 20 bytes yet
    assert pool.available_memory() == 20
    with pytest.raises(BufferExhaustedError):
        pool.allocate(5, 0)  # free memory, but someone waits first: no jumping the queue
    assert pool.available_memory() == 20
    clock.gate.set()
    wait_for(lambda: pool.available_memory() == 0)  # the head collected it
    pool.deallocate(30)
    head.join(5)
    assert head.result == 50


# -- pooled buffers ------------------------------------------------------------------------------------


def test_a_batch_size_reservation_comes_with_a_buffer_that_is_reused_after_it_comes_back() -> None:
    pool = BufferPool(1000, 100, FakeClock())
    size, buf = pool.allocate_buffer(100, 0)
    assert size == 100 and buf is not None and len(buf) == 100 - 61 == pool.buffer_size
    assert (pool.buffers_created, pool.buffers_reused) == (1, 0)
    buf[:3] = b"old"
    pool.deallocate(100, buf)
    assert pool.free_blocks == 1 and pool.buffers_returned == 1
    assert pool.available_memory() == 1000  # a free buffer counts as available memory
    assert pool.unallocated_memory() == 900
    size2, again = pool.allocate_buffer(100, 0)
    assert size2 == 100 and again is buf  # the same bytearray: its allocation is reused (contents are the builder's to overwrite)
    assert (pool.buffers_created, pool.buffers_reused) == (1, 1)
    assert pool.hit_rate == 0.5
    assert pool.available_memory() == 900


def test_other_sizes_get_no_buffer_and_foreign_buffers_are_not_pooled() -> None:
    pool = BufferPool(1000, 100, FakeClock())
    assert pool.allocate_buffer(250, 0) == (250, None)  # a large record: its builder grows its own storage
    pool.deallocate(250, bytearray(250 - 61))
    _size, buf = pool.allocate_buffer(100, 0)
    assert buf is not None
    buf.extend(b"grown")  # a buffer that grew (a compressed batch) is not the pool's size any more
    pool.deallocate(100, buf)
    assert pool.free_blocks == 0 and pool.available_memory() == 1000


def test_a_buffer_still_viewed_is_dropped_not_reused() -> None:
    pool = BufferPool(1000, 100, FakeClock())
    _size, buf = pool.allocate_buffer(100, 0)
    assert buf is not None
    buf[:4] = b"keep"
    view = memoryview(buf)[:4]  # e.g. a request that still refers to the records
    pool.deallocate(100, buf)
    assert pool.free_blocks == 0 and pool.dropped_in_use == 1
    assert pool.available_memory() == 1000  # the memory is free again all the same
    _size, other = pool.allocate_buffer(100, 0)
    assert other is not buf
    assert bytes(view) == b"keep"  # nobody writes into what the view sees
    view.release()


def test_free_buffers_are_dropped_to_make_room_for_other_sizes() -> None:
    pool = BufferPool(300, 100, FakeClock())
    bufs = [pool.allocate_buffer(100, 0)[1] for _ in range(3)]
    for b in bufs:
        pool.deallocate(100, b)
    assert pool.free_blocks == 3 and pool.unallocated_memory() == 0
    assert pool.allocate(150, 0) == 150  # two free buffers are dropped for it
    assert pool.free_blocks == 1 and pool.available_memory() == 150
    assert pool.try_allocate(50)  # from the non-pooled memory: the free buffer stays
    assert pool.free_blocks == 1 and pool.available_memory() == 100
    assert not pool.try_allocate(101)
    assert pool.try_allocate(60)  # only by dropping the last free buffer
    assert pool.free_blocks == 0 and pool.available_memory() == 40


def test_exchange_returns_the_buffer_and_keeps_a_smaller_reservation() -> None:
    pool = BufferPool(1000, 100, FakeClock())
    _size, buf = pool.allocate_buffer(100, 0)
    kept = pool.exchange(100, buf, 70)
    assert kept == 70 and pool.free_blocks == 1
    assert pool.available_memory() == 930
    # nothing to gain: the reservation and the buffer stay
    _size, buf2 = pool.allocate_buffer(100, 0)
    assert buf2 is buf
    assert pool.exchange(100, buf2, 100) == 100 and pool.free_blocks == 0
    pool.deallocate(100, buf2)
    pool.deallocate(70)
    assert pool.available_memory() == 1000 and pool.free_blocks == 1


def test_exchange_drops_the_buffer_when_memory_is_short() -> None:
    pool = BufferPool(200, 100, FakeClock())
    _s, a = pool.allocate_buffer(100, 0)
    _s, b = pool.allocate_buffer(100, 0)
    assert pool.unallocated_memory() == 0
    assert pool.exchange(100, a, 80) == 80  # the 80 kept must come from the buffer given back: dropped
    assert pool.free_blocks == 0 and pool.available_memory() == 20
    pool.deallocate(100, b)
    pool.deallocate(80)
    assert pool.available_memory() == 200


def test_a_waiter_for_batch_size_gets_the_buffer_given_back() -> None:
    pool = BufferPool(200, 100, REAL)
    _s, a = pool.allocate_buffer(100, 0)
    _s, b = pool.allocate_buffer(100, 0)
    got: List[Optional[bytearray]] = []
    t = threading.Thread(target=lambda: got.append(pool.allocate_buffer(100, 10_000)[1]), daemon=True)
    t.start()
    wait_for(lambda: pool.queued() == 1)
    pool.deallocate(100, a)
    t.join(5)
    assert not t.is_alive() and got == [a]
    assert pool.buffers_reused == 1 and pool.free_blocks == 0
    pool.deallocate(100, b)
    pool.deallocate(100, got[0])
    assert pool.available_memory() == 200


def test_close_drops_the_free_buffers_and_later_ones() -> None:
    pool = BufferPool(1000, 100, FakeClock())
    _s, a = pool.allocate_buffer(100, 0)
    _s, b = pool.allocate_buffer(100, 0)
    pool.deallocate(100, a)
    pool.close()
    assert pool.free_blocks == 0
    pool.deallocate(100, b)  # a batch completing after close
    assert pool.free_blocks == 0 and pool.available_memory() == 1000


def test_a_tiny_batch_size_pools_nothing() -> None:
    pool = BufferPool(1000, 50, FakeClock())  # batch.size below the 61-byte batch header
    assert pool.allocate_buffer(50, 0) == (50, None)
    pool.deallocate(50)
    assert pool.available_memory() == 1000
