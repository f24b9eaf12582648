"""Issue 28 item 20: ``asyncio.wait_for(fut, t)`` on an AsyncProducer record future that times out must not
cancel the record's future (docs/asyncio.md): the record is stored, and a later ``await fut`` gives its
metadata. Before Python 3.12, wait_for cancels the future it was given when time is up; the record future
makes itself a fresh wrapper there. An explicit ``fut.cancel()`` still cancels the future (documented).

On the scripted transport (no sockets): the produce request is held until the test answers it."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, List, Optional

import pytest

import kproducer.testing as kt
from kproducer import Producer, RecordMetadata
from kproducer.aio import AsyncProducer, RecordFuture
from kproducer.protocol import messages as m

TOPIC = "t"
WAIT = 60.0


def run(body: Callable[[AsyncProducer, kt.ScriptedTransport], Awaitable[Any]]) -> Any:
    transport = kt.ScriptedTransport(brokers={1: ("broker1", 9092)}, topics={TOPIC: 3}, real_wait=True)

    async def main() -> Any:
        producer = Producer(bootstrap_servers="broker1:9092", transport=transport, linger_ms=0)
        async with AsyncProducer(producer=producer) as p:
            await p.partitions_for(TOPIC)
            return await body(p, transport)

    return asyncio.run(main())


async def held_record(p: AsyncProducer, transport: kt.ScriptedTransport, value: bytes = b"v") -> RecordFuture:
    """A record whose produce request the broker holds (not done until :func:`answer`)."""
    transport.script(m.PRODUCE, kt.HOLD)
    fut = await p.send(TOPIC, value, partition=0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not transport.held(m.PRODUCE):
        assert loop.time() < deadline, "the produce request was never sent"
        await asyncio.sleep(0.005)
    return fut


def answer(transport: kt.ScriptedTransport) -> None:
    for req in transport.held(m.PRODUCE):
        transport.respond(req)


def test_wait_for_timing_out_does_not_cancel_the_record_future() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> RecordMetadata:
        fut = await held_record(p, transport)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(fut, 0.05)
        assert not fut.cancelled() and not fut.done()
        answer(transport)
        meta = await asyncio.wait_for(fut, WAIT)  # (the record future again, not a cancelled one)
        assert fut.done() and not fut.cancelled() and fut.result() == meta
        return meta

    meta = run(body)
    assert meta.topic == TOPIC and meta.partition == 0 and meta.offset == 0


def test_wait_for_with_no_time_left_and_a_cancelled_wait_for_leave_the_record_future_alone() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> List[Any]:
        fut = await held_record(p, transport)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(fut, 0)
        assert not fut.cancelled()
        # the task that waits in wait_for is cancelled (not a timeout)
        waiter = asyncio.ensure_future(asyncio.wait_for(fut, WAIT))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not fut.cancelled() and not fut.done()
        answer(transport)
        return [await fut, fut.cancelled()]

    meta, cancelled = run(body)
    assert meta.offset == 0 and cancelled is False


def test_wait_for_on_a_done_record_gives_its_metadata_and_the_future_stays_future_like() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> Optional[RecordMetadata]:
        fut = await p.send(TOPIC, b"done", partition=1)
        meta = await fut
        assert await asyncio.wait_for(fut, 0.05) == meta
        assert await asyncio.wait_for(fut, 0) == meta
        # gather, wait and ensure_future still take the record future itself (no Task per record)
        assert asyncio.isfuture(fut) and asyncio.ensure_future(fut) is fut
        done, pending = await asyncio.wait([fut], timeout=WAIT)
        assert done == {fut} and not pending
        assert await asyncio.gather(fut) == [meta]
        return meta

    assert run(body) is not None


def test_an_explicit_cancel_still_cancels_the_future_but_not_the_record() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> List[Any]:
        fut = await held_record(p, transport)
        assert fut.cancel("not interested")
        assert fut.cancelled() and fut.done()
        with pytest.raises(asyncio.CancelledError):
            await fut
        answer(transport)
        await p.flush(WAIT)
        return transport.log_values((TOPIC, 0))

    assert run(body) == [b"v"]  # the record was stored all the same
