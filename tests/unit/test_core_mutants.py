"""Rules of the buffer pool and the producer batch that mutation testing (tools/mutation.sh, docs/testing.md
"Mutation testing") found no unit test pinned down: a mutant of each line survived every test of the
producer core. Each test states the rule it holds."""
from __future__ import annotations

import threading

from kproducer.producer.batch import ProducerBatch
from kproducer.producer.buffer_pool import BufferPool
from kproducer.protocol.records import RecordBatchBuilder, read_batches


def pool(total: int = 1000, batch_size: int = 100) -> BufferPool:
    return BufferPool(total, batch_size)


def test_try_allocate_takes_memory_only_when_it_needs_no_waiting() -> None:
    p = pool()
    assert p.try_allocate(0) and p.available_memory() == 1000  # nothing to reserve: always yes
    assert p.try_allocate(1000) and p.available_memory() == 0  # exactly what is free: yes
    assert not p.try_allocate(1)
    p.deallocate(1000)
    p.close()
    assert p.try_allocate(0)  # (still nothing to reserve)
    assert not p.try_allocate(1)  # closed, with nobody waiting: no


def test_producer_batch_try_append_keeps_the_key_and_the_headers() -> None:
    b = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    fut = b.try_append(1_700_000_000_000, b"key", b"value", [("h", b"1")], None, 5.0)
    assert fut is not None and b.last_append_ms == 5.0
    (rec,) = read_batches(b.builder.build())[0].records
    assert (rec.key, rec.value, rec.headers) == (b"key", b"value", [("h", b"1")])


def test_a_batch_never_sent_is_not_backing_off() -> None:
    b = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    b.retry_backoff_ms = 100.0
    assert not b.is_backing_off(50.0)  # attempts 0: a first send has no backoff
    b.reenqueued(60.0, 100.0)
    assert b.is_backing_off(100.0) and not b.is_backing_off(160.0)
    assert b.in_flight is False and b.attempts == 1


def test_every_thread_waiting_on_a_batch_is_released() -> None:
    """The first waiter makes the batch's event; every later one must wait on that same event (one made for
    itself would replace it, and done() would release only the last waiter)."""
    b = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    assert not b.wait(0)  # not done: times out at once, and leaves the event made
    event = b._event
    assert event is not None
    results = []
    threads = [threading.Thread(target=lambda: results.append(b.wait(30))) for _ in range(2)]
    for t in threads:
        t.start()
    assert not b.wait(0)
    assert b._event is event
    b.done(0, -1, None)
    for t in threads:
        t.join(60)
    assert results == [True, True]
    assert b.wait(0)


def test_a_split_part_takes_over_every_reservation_of_the_batch() -> None:
    big = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0, reserved_bytes=100)
    big.extra_bytes = 40
    part = ProducerBatch("t", 0, RecordBatchBuilder(1 << 12), 0.0)
    part.take_memory_of(big)
    assert (part.reserved_bytes, part.extra_bytes) == (100, 40)
    assert (big.reserved_bytes, big.extra_bytes) == (0, 0)
    assert big.memory_to_release() == (0, 0)
