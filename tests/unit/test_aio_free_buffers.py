"""``AsyncProducer.send()`` keeps its staged fast path once the buffer pool's memory sits in its free list.

BufferPool keeps the batch.size buffers that completed batches give back on a free list; its ``_available``
counts only the memory in no buffer at all. After the producer once had all of buffer.memory in batches (a
sender faster than the broker for a moment), ``_available`` stays 0 for good while the free list holds
everything. send()'s admission checks must count the free buffers (as ``BufferPool.available_memory()``
does): when they read ``_available`` alone, every record from then on left the staged path for the
synchronous send() with a run of its own (a ``_Run`` and its lists, per record, kept alive by the record's
future): about six GC-tracked objects per record, which made the cyclic collector's full collections take
hundreds of ms in ``benchmarks/compare.py``'s AsyncProducer row. Counted here (runs per record), not timed;
on the scripted transport (no sockets). Runs the same on the compiled and the pure (KPRODUCER_PURE_PYTHON=1)
paths."""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, List, Tuple

import kproducer.testing as kt
from kproducer import Producer
from kproducer.aio import STAGE_MAX, AsyncProducer
from kproducer.protocol.messages import PRODUCE

TOPIC = "t"
BATCH = 16384
MEMORY = 64 * BATCH


def _hold_first_produce(transport: kt.ScriptedTransport) -> Callable[[], None]:
    """A full batch is sendable before linger.ms: the network thread may send some while a fill loop runs (more
    often on the slower pure-Python send()), and their buffers would come back. The first produce request is
    held unanswered, and with one request in flight (the producer's setting) nothing else goes out until the
    function returned here answers it."""
    transport.script(PRODUCE, kt.HOLD)

    def answer_held() -> None:
        with transport._cond:  # (no request was sent yet: the script must not hold the first one after this)
            transport.scripts.pop(PRODUCE.key, None)
        for request in transport.held(PRODUCE):
            transport.respond(request)

    return answer_held


async def _fill_then_drain(p: AsyncProducer, answer_held: Callable[[], None]) -> None:
    """Put every byte of buffer.memory into batches (nothing is answered before the fill is done), then
    flush: every batch's buffer goes back to the pool's free list."""
    pool = p.producer._pool
    sent = 0
    while pool.unallocated_memory() >= BATCH and sent < 4 * MEMORY // 1000:
        p.producer.send(TOPIC, b"f" * 1000)
        sent += 1
    assert pool.unallocated_memory() < BATCH  # (all of buffer.memory was in batches)
    answer_held()
    await p.flush()


def _send_after_fill(n: int) -> Tuple[int, int, int, int]:
    """(distinct runs among n sends' futures, unallocated memory, available memory, values stored)."""
    transport = kt.ScriptedTransport(brokers={1: ("broker1", 9092)}, topics={TOPIC: 3}, real_wait=True)
    answer_held = _hold_first_produce(transport)

    async def main() -> Tuple[int, int, int, int]:
        producer = Producer(bootstrap_servers="broker1:9092", transport=transport, linger_ms=60_000,
                            batch_size=BATCH, buffer_memory=MEMORY, max_in_flight_requests_per_connection=1)
        async with AsyncProducer(producer=producer) as p:
            await p.partitions_for(TOPIC)
            await _fill_then_drain(p, answer_held)
            pool = p.producer._pool
            unallocated, available = pool.unallocated_memory(), pool.available_memory()
            futs: List[Any] = [await p.send(TOPIC, b"v%05d" % i) for i in range(n)]
            runs = len({id(f._run) for f in futs})
            await p.flush()
            for f in futs:
                await f
            stored = sum(1 for part in range(3) for v in transport.log_values((TOPIC, part)) if v.startswith(b"v"))
            return runs, unallocated, available, stored

    return asyncio.run(main())


def test_sends_stay_staged_when_the_pools_memory_is_in_free_buffers() -> None:
    n = 8 * STAGE_MAX
    runs, unallocated, available, stored = _send_after_fill(n)
    # the state the benchmark's producer was in: less unallocated memory than a new keyless run reserves
    # (two batches and its records' bound), nearly all of it in free buffers
    assert unallocated < 2 * BATCH and available == MEMORY, (unallocated, available)
    assert stored == n
    # staged: a run per STAGE_MAX records, per yield to the loop and per millisecond tick of the wall clock;
    # before the fix, one per record (n)
    assert runs < n // 4, runs


def _send_in_the_band(n: int) -> Tuple[int, int, int]:
    """(distinct runs among the first n sends' futures, the pool's free memory before them, values stored):
    sent when the pool has room for one more batch but not for a new staged run (two batches and the
    record's bound), as while the pool refills after running out."""
    transport = kt.ScriptedTransport(brokers={1: ("broker1", 9092)}, topics={TOPIC: 3}, real_wait=True)
    # held until the fill is done and the pool's free memory read; then a timer answers it and the pool refills
    answer_held = _hold_first_produce(transport)

    async def main() -> Tuple[int, int, int]:
        producer = Producer(bootstrap_servers="broker1:9092", transport=transport, linger_ms=60_000,
                            batch_size=BATCH, buffer_memory=MEMORY, max_in_flight_requests_per_connection=1)
        async with AsyncProducer(producer=producer) as p:
            await p.partitions_for(TOPIC)
            pool = p.producer._pool
            sent = 0
            while pool.available_memory() > 2 * BATCH and sent < 4 * MEMORY // 1000:
                p.producer.send(TOPIC, b"f" * 1000)
                sent += 1
            free = pool.available_memory()
            timer = threading.Timer(0.05, answer_held)
            timer.start()
            futs: List[Any] = [await p.send(TOPIC, b"v%05d" % i) for i in range(n)]
            runs = len({id(f._run) for f in futs})
            await p.flush()
            for f in futs:
                await f
            stored = sum(1 for part in range(3) for v in transport.log_values((TOPIC, part)) if v.startswith(b"v"))
            timer.join()
            return runs, free, stored

    return asyncio.run(main())


def test_a_send_waits_for_room_for_a_staged_run_when_the_pool_refills() -> None:
    """With room for one batch but not for a staged run, send() waits (the first record, on the loop: the
    lingering batches are made sendable, as any wait for buffer memory does) until a run fits, and the
    records after it are staged again; before, each was admitted alone through the synchronous send() (two
    batches of 16 KiB hold over a thousand of these records), each with a run of its own."""
    n = STAGE_MAX // 2
    runs, free, stored = _send_in_the_band(n)
    assert BATCH <= free <= 2 * BATCH
    assert stored == n
    assert runs < n // 8, runs
