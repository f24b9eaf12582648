"""kproducer.aio.AsyncProducer against a real broker (tansu), read back with kafka-python (issue 15)."""
from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Callable, List, Set

import pytest

from kproducer import RecordMetadata
from kproducer.aio import AsyncProducer
from tests.readback import consume
from tests.tansu import Tansu

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

pytest.importorskip("kafka")



def test_100k_awaited_sends_read_back_exactly(tansu: Tansu, new_topic: Callable[..., str]) -> None:
    topic = new_topic(6)
    n = 100_000

    async def main() -> List[RecordMetadata]:
        # one request in flight: tansu sometimes fails a request pipelined behind another to the same partition
        # with UNKNOWN_SERVER_ERROR under load (docs/design.md, tansu's quirks); pipelining is covered on the
        # MockCluster (test_aio_mock) and by test_idempotence_tansu
        async with AsyncProducer(bootstrap_servers=tansu.bootstrap, linger_ms=5,
                                 max_in_flight_requests_per_connection=1) as p:
            futs = [await p.send(topic, b"%06d" % i, key=b"k%d" % (i % 97)) for i in range(n)]
            return [await f for f in futs]

    metas = asyncio.run(main())
    assert len({(m.partition, m.offset) for m in metas}) == n
    records = consume(tansu.bootstrap, topic, range(6), n)
    assert len(records) == n
    by_place = {(m.partition, m.offset): i for i, m in enumerate(metas)}
    for r in records:
        i = by_place[(r.partition, r.offset)]
        assert r.value == b"%06d" % i and r.key == b"k%d" % (i % 97)
    assert sorted(r.value for r in records) == [b"%06d" % i for i in range(n)]


def test_cancelled_sends_are_sent_exactly_when_admitted(tansu: Tansu, new_topic: Callable[..., str]) -> None:
    """Many concurrent senders with a small buffer (so that many wait for space), a third of them cancelled
    at arbitrary points. Whatever the timing, a record is stored exactly once if its send() returned
    (admitted), and never if its send() was cancelled before returning."""
    topic = new_topic(3)
    n = 3000
    admitted: Set[int] = set()

    async def one(p: AsyncProducer, i: int) -> None:
        fut = await p.send(topic, b"%05d" % i + b"." * 400)
        admitted.add(i)
        await fut

    async def main() -> None:
        # one request in flight, as above: tansu's pipelining quirk failed a batch with UNKNOWN_SERVER_ERROR once
        # under load; what this test checks (admitted exactly once, cancelled never) does not need pipelining
        async with AsyncProducer(bootstrap_servers=tansu.bootstrap, batch_size=4096, buffer_memory=64 * 1024,
                                 linger_ms=2, max_in_flight_requests_per_connection=1) as p:
            rng = random.Random(7)
            tasks = [asyncio.ensure_future(one(p, i)) for i in range(n)]
            for i, t in enumerate(tasks):
                if i % 3 == 0:
                    await asyncio.sleep(0)
                    if rng.random() < 0.5:
                        await asyncio.sleep(0)
                    t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            # also: a future cancelled or timed out after admission is still delivered
            fut = await p.send(topic, b"cancelled-future")
            fut.cancel()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(p.send_and_wait(topic, b"timed-out-await"), 0.001)
            await p.flush()

    asyncio.run(main())
    assert 0 < len(admitted)
    expected = sorted([b"%05d" % i + b"." * 400 for i in admitted] + [b"cancelled-future", b"timed-out-await"])
    values = [r.value for r in consume(tansu.bootstrap, topic, range(3), len(expected))]
    assert sorted(values) == expected  # each admitted record exactly once, no cancelled-before-admission one


def test_transaction_block_commits_and_aborts(tansu: Tansu, new_topic: Callable[..., str]) -> None:
    topic = new_topic(2)

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=tansu.bootstrap, transactional_id=f"aio-{topic}") as p:
            await p.init_transactions()
            async with p.transaction():
                for i in range(50):
                    await p.send(topic, b"c%d" % i)
            with pytest.raises(ValueError):
                async with p.transaction():
                    await p.send(topic, b"aborted")
                    raise ValueError("abort me")

    asyncio.run(main())
    values = [r.value for r in consume(tansu.bootstrap, topic, range(2), 50, isolation_level="read_committed")]
    assert sorted(values) == sorted(b"c%d" % i for i in range(50))
