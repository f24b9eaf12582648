"""``AsyncProducer.send()`` without a coroutine: with the accelerator, a call that the hot path takes (a
keyless bytes value for the topic of the current keyless run) stages the record at once and returns a
finished coroutine-like object (``_aio.AioReady``) whose ``await`` gives the record's future; every other
call runs the Python ``async def send`` and returns its coroutine (and ``KPRODUCER_PURE_PYTHON=1`` always
does). Both must behave as a coroutine for asyncio, and the hot path must allocate nothing the cyclic GC
counts. On the scripted transport (no sockets); nothing here depends on speed."""
from __future__ import annotations

import asyncio
import collections
import collections.abc
import gc
import inspect
import sys
import warnings
from typing import Any, Awaitable, Callable, List, Optional, Tuple

import pytest

import kproducer.testing as kt
from kproducer import Producer, RecordMetadata
from kproducer.aio import STAGE_MAX, YIELD_EVERY, AsyncProducer, RecordFuture
from kproducer.protocol.accel import MODULES, load

aio_c = load(MODULES["aio"])

TOPIC = "t"
compiled = pytest.mark.skipif(aio_c is None, reason="the compiled accelerator is not built (or is disabled)")


def run(body: Callable[[AsyncProducer, kt.ScriptedTransport], Awaitable[Any]], **settings: Any) -> Any:
    """Run ``body(p, transport)`` on a fresh event loop with an AsyncProducer on the scripted transport."""
    transport = kt.ScriptedTransport(brokers={1: ("broker1", 9092)}, topics={TOPIC: 3}, real_wait=True)
    settings.setdefault("linger_ms", 5)

    async def main() -> Any:
        producer = Producer(bootstrap_servers="broker1:9092", transport=transport, **settings)
        async with AsyncProducer(producer=producer) as p:
            await p.partitions_for(TOPIC)  # metadata known from here on
            return await body(p, transport)

    return asyncio.run(main())


def stored(transport: kt.ScriptedTransport) -> List[Optional[bytes]]:
    return [v for part in range(3) for v in transport.log_values((TOPIC, part))]


async def staged_ready(p: AsyncProducer, value: bytes) -> Any:
    """A call of send() that the hot path takes (with the accelerator): the current keyless run exists once
    one record was staged in this loop iteration, the call is not the 32nd (the yield check), and the wall
    clock's millisecond is still the run's -- when it ticked in between, the call took the Python path: its
    coroutine is closed unrun (nothing sent, no warning) and the call made again."""
    for _ in range(1000):
        await p.send(TOPIC, b"first")  # opens the keyless run (the Python fast path)
        while p._hot.sends % 32 >= 30:
            await p.send(TOPIC, b"pad")
        r = p.send(TOPIC, value)
        if aio_c is None or type(r) is aio_c.AioReady:
            return r
        r.close()
    raise AssertionError("send() never took the hot path")


def test_send_returns_an_awaitable_that_asyncio_takes_as_a_coroutine() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> None:
        r = await staged_ready(p, b"ready")
        if aio_c is not None:
            assert type(r) is aio_c.AioReady and not gc.is_tracked(r)
        assert asyncio.iscoroutine(r) and isinstance(r, collections.abc.Coroutine) and inspect.isawaitable(r)
        fut = await r
        assert isinstance(fut, RecordFuture) and not fut.done()
        await p.flush()
        meta = await fut
        assert fut.done() and fut.result() == meta and meta.topic == TOPIC and meta.serialized_value_size == 5
        assert transport.log_values((TOPIC, meta.partition))[meta.offset] == b"ready"

    run(body)


def test_create_task_ensure_future_gather_and_wait_for_take_sends_result() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> None:
        await (await staged_ready(p, b"r"))
        futs: List[RecordFuture] = []
        futs.append(await asyncio.create_task(p.send(TOPIC, b"task")))
        futs.append(await asyncio.ensure_future(p.send(TOPIC, b"ensured")))
        futs.extend(await asyncio.gather(p.send(TOPIC, b"g1"), p.send(TOPIC, b"g2")))
        futs.append(await asyncio.wait_for(p.send(TOPIC, b"waited"), 60))
        futs.append(await p.send(TOPIC, b"keyed", key=b"k"))  # (the Python path, a coroutine)
        assert all(isinstance(f, RecordFuture) for f in futs)
        metas = await asyncio.gather(*futs)
        values = [transport.log_values((TOPIC, m.partition))[m.offset] for m in metas]
        assert values == [b"task", b"ensured", b"g1", b"g2", b"waited", b"keyed"]

    run(body)


def test_a_send_result_never_awaited_warns_and_its_staged_record_is_sent_all_the_same() -> None:
    outcome: List[bool] = []

    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> None:
        with pytest.warns(RuntimeWarning, match="coroutine 'AsyncProducer.send' was never awaited"):
            r = await staged_ready(p, b"dropped")
            ready = aio_c is not None and type(r) is aio_c.AioReady
            del r
            gc.collect()
        await p.flush()
        # staged by the call itself (the compiled hot path) -> sent; a coroutine never run sends nothing
        outcome.append(ready)
        assert (b"dropped" in stored(transport)) is ready

    run(body)
    assert outcome == [aio_c is not None]


def test_close_throw_and_a_second_await_behave_as_a_coroutines() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # closing a coroutine that never ran does not warn
            r = await staged_ready(p, b"closed")
            r.close()
            del r
            gc.collect()
        r = await staged_ready(p, b"thrown")
        with pytest.raises(ValueError, match="into it"):
            r.throw(ValueError("into it"))
        r = await staged_ready(p, b"twice")
        fut = await r
        with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
            await r
        await p.flush()
        assert isinstance(fut, RecordFuture) and (await fut).serialized_value_size == 5
        # a closed or thrown-into coroutine is finished: with the accelerator the record was staged by the call
        values = stored(transport)
        assert (b"closed" in values) is (b"thrown" in values) is (aio_c is not None)

    run(body)


def test_calls_the_hot_path_does_not_take_run_the_python_send() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> None:
        await (await staged_ready(p, b"r"))
        others = [p.send(TOPIC, b"k", key=b"key"), p.send(TOPIC, b"p", partition=1),
                  p.send(TOPIC, b"h", headers=[("h", b"1")]), p.send(TOPIC, b"ts", timestamp_ms=1),
                  p.send(TOPIC, None), p.send("other-topic", b"o"), p.send(TOPIC, bytearray(b"ba"))]
        assert all(inspect.iscoroutine(c) for c in others)  # native coroutines: the Python send()
        await asyncio.gather(*others[:4])
        for c in others[4:]:
            c.close()
        with pytest.raises(TypeError):
            await p.send(TOPIC, b"v", bogus=1)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            await p.send(TOPIC, b"v", value=b"twice")  # type: ignore[misc]
        # the yield check: the 32nd call since the last check takes the Python path (a coroutine)
        kinds = []
        for _ in range(64):
            r = p.send(TOPIC, b"y")
            kinds.append(inspect.iscoroutine(r))
            await r
        assert sum(kinds) >= 2 if aio_c is not None else all(kinds)

    run(body)


def test_keywords_and_a_subclass_override_work() -> None:
    class Counting(AsyncProducer):
        calls = 0

        async def send(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> RecordFuture:
            Counting.calls += 1
            return await super().send(topic, value, key, **kw)

    transport = kt.ScriptedTransport(brokers={1: ("broker1", 9092)}, topics={TOPIC: 3}, real_wait=True)

    async def main() -> List[RecordMetadata]:
        async with Counting(producer=Producer(bootstrap_servers="broker1:9092", transport=transport)) as p:
            futs = [await p.send(TOPIC, value=b"kw%d" % i) for i in range(40)]
            futs += [await p.send(topic=TOPIC, value=b"kw", key=None, partition=None) for _ in range(40)]
            return list(await asyncio.gather(*futs))

    metas = asyncio.run(main())
    assert Counting.calls == 80 and len({(m.partition, m.offset) for m in metas}) == 80
    expected: List[Optional[bytes]] = [b"kw%d" % i for i in range(40)]
    expected += [b"kw"] * 40
    assert collections.Counter(stored(transport)) == collections.Counter(expected)


def test_send_keeps_its_signature_docstring_and_coroutine_function_marks() -> None:
    sig = inspect.signature(AsyncProducer.send)
    assert list(sig.parameters)[:4] == ["self", "topic", "value", "key"]
    assert sig.parameters["headers"].kind is inspect.Parameter.KEYWORD_ONLY
    assert AsyncProducer.send.__doc__ and "RecordFuture" in AsyncProducer.send.__doc__
    assert AsyncProducer.send.__name__ == "send" and AsyncProducer.send.__qualname__ == "AsyncProducer.send"
    assert asyncio.iscoroutinefunction(AsyncProducer.send)
    if sys.version_info >= (3, 11) or aio_c is None:  # (3.9/3.10's inspect accepts only real functions)
        assert inspect.iscoroutinefunction(AsyncProducer.send)
    if aio_c is not None:
        assert type(AsyncProducer.__dict__["send"]) is aio_c.AioSendMethod
        assert inspect.iscoroutinefunction(AsyncProducer.send.__wrapped__)  # type: ignore[attr-defined]


@compiled
def test_the_compiled_send_and_its_python_twin_give_the_same_records() -> None:
    """The same calls through the compiled descriptor and through its Python function (``__wrapped__``, what
    KPRODUCER_PURE_PYTHON=1 runs) store the same values and give futures of the same kind."""
    n = 2 * STAGE_MAX + 5

    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> Any:
        py_send = AsyncProducer.send.__wrapped__  # type: ignore[attr-defined]
        a = [await p.send(TOPIC, b"c%05d" % i) for i in range(n)]
        b = [await py_send(p, TOPIC, b"p%05d" % i) for i in range(n)]
        await p.flush()
        ma, mb = [await f for f in a], [await f for f in b]
        assert all(type(f) is RecordFuture for f in a + b)
        assert [m.serialized_value_size for m in ma] == [m.serialized_value_size for m in mb] == [6] * n
        assert [transport.log_values((TOPIC, m.partition))[m.offset] for m in ma] == [b"c%05d" % i for i in range(n)]
        assert [transport.log_values((TOPIC, m.partition))[m.offset] for m in mb] == [b"p%05d" % i for i in range(n)]

    run(body)


@compiled
def test_the_hot_path_allocates_nothing_the_cyclic_gc_counts() -> None:
    """``futs = [await p.send(...)]`` then ``await`` each: no coroutine, no GC object per record (a future, the
    ready object and a RecordMetadata whose fields are all atomic are plain objects or untracked), so a caller
    keeping 100k futures does not drive the collector. Counted with gc.get_count() over a bounded loop, with
    the network thread idle (nothing is sendable before linger.ms)."""
    n = 4 * STAGE_MAX

    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> Any:
        await (await staged_ready(p, b"r"))
        gc.collect()
        gc.disable()
        try:
            before = gc.get_count()[0]
            futs = [await p.send(TOPIC, b"v") for _ in range(n)]
            sent = gc.get_count()[0] - before
        finally:
            gc.enable()
        assert not any(gc.is_tracked(f) for f in futs)
        await p.flush()
        gc.collect()
        gc.disable()
        try:
            before = gc.get_count()[0]
            offsets = set()
            for f in futs:  # (the metadata dropped after use, as a caller that logs or checks it does)
                meta = await f
                offsets.add(meta.offset)
            awaited = gc.get_count()[0] - before
        finally:
            gc.enable()
        assert not gc.is_tracked(meta) and len(offsets) > n // 3
        return sent, awaited

    sent, awaited = run(body, linger_ms=60_000, batch_size=1 << 20)
    # (what is left: a few objects per STAGE_MAX flush and per batch; before, one future per record)
    assert sent < n // 16, sent
    assert awaited < n // 16, awaited


async def _start_turn_counter() -> Tuple[List[int], "asyncio.Future[None]"]:
    """A task that counts the loop iterations it gets (turns[0]); started and run once."""
    turns = [0]

    async def other() -> None:
        while True:
            turns[0] += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0)
    return turns, task


def test_a_task_sending_in_a_tight_loop_lets_another_task_run() -> None:
    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> None:
        turns, task = await _start_turn_counter()
        start = turns[0]
        n = 3 * YIELD_EVERY
        futs = [await p.send(TOPIC, b"v") for _ in range(n)]
        assert turns[0] - start >= n // YIELD_EVERY
        task.cancel()
        await p.flush()
        assert len(await asyncio.gather(*futs)) == n

    run(body)


@compiled
def test_awaiting_many_done_records_lets_another_task_run() -> None:
    """``for f in futs: await f`` over records that are all done never has to suspend; the compiled await
    yields to the loop once (a bare yield) when that has run for YIELD_AFTER_S, so another task gets turns.
    (Time-based, but only as a lower bound: a slower machine makes more yields, not fewer.)"""
    n = 16 * STAGE_MAX * 4

    async def body(p: AsyncProducer, transport: kt.ScriptedTransport) -> None:
        futs = [await p.send(TOPIC, b"v") for _ in range(n)]
        await p.flush()
        assert all(f.done() for f in futs)
        turns, task = await _start_turn_counter()
        start = turns[0]
        metas = []
        for f in futs:
            metas.append(await f)
        assert turns[0] - start >= 1
        task.cancel()
        assert [m.offset for m in metas] == [f.result().offset for f in futs]

    run(body, batch_size=1 << 20)
