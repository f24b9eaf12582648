"""kproducer.aio.AsyncProducer on the embedded MockCluster (issue 15).

What is read back is read with kafka-python (tests/readback.py), independently of the producer. Nothing here
depends on speed: the "loop is not blocked" checks are structural (another task keeps running while a send
waits; a sending task yields every YIELD_EVERY sends; deliveries are chunked) plus asyncio's debug-mode
slow-callback log with a threshold a hundred times the 5 ms budget (the 5 ms figure itself is measured in
benchmarks/compare.py, not asserted).
"""
from __future__ import annotations

import asyncio
import gc
from typing import Any, Iterator, List

import pytest

from kproducer import RecordMetadata
from kproducer.aio import DELIVER_CHUNK, YIELD_EVERY, AsyncProducer, RecordFuture
from kproducer.errors import BufferExhaustedError, KafkaTimeoutError
from kproducer.mock import MockCluster
from tests.readback import consume

pytestmark = [pytest.mark.timeout(240)]

pytest.importorskip("kafka")

TOPIC = "t"
PARTITIONS = 6



@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(1) as c:
        c.create_topic(TOPIC, PARTITIONS)
        yield c


def read_values(cluster: MockCluster, expected: int, topic: str = TOPIC, **settings: Any) -> List[bytes]:
    return [r.value for r in consume(cluster.bootstrap_servers, topic, range(cluster.partition_count(topic)),
                                     expected, **settings)]


class Ticker:
    """A task that counts its turns on the loop (proof that the loop is not held)."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    async def until(self, n: int) -> None:
        target = self.ticks + n
        while self.ticks < target:
            await asyncio.sleep(0.001)

    def stop(self) -> None:
        self._task.cancel()


def test_100k_awaited_sends_read_back_exactly(cluster: MockCluster) -> None:
    n = 100_000

    async def main() -> List[RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5) as p:
            futs = [await p.send(TOPIC, b"%06d" % i) for i in range(n)]
            metas = await asyncio.gather(*futs)
            # completions reached the loop per group of batches, never per record
            batches = sum(cluster.batch_count(TOPIC, part) for part in range(PARTITIONS))
            assert 0 < p.wakeups <= batches < n // 10
        return metas

    metas = asyncio.run(main())
    assert len(metas) == n
    where = {(m.partition, m.offset): i for i, m in enumerate(metas)}
    assert len(where) == n  # distinct offsets
    records = consume(cluster.bootstrap_servers, TOPIC, range(PARTITIONS), n)
    assert len(records) == n
    assert sorted(r.value for r in records) == [b"%06d" % i for i in range(n)]
    for r in records:  # every future named where its record is
        assert r.value == b"%06d" % where[(r.partition, r.offset)]


def test_cancelling_a_send_waiting_for_buffer_space_never_admits_the_record(cluster: MockCluster) -> None:
    """Buffer memory for 4 batches of one record each; the broker is stopped so nothing frees memory. The
    5th send waits for space; cancelled, it was never admitted. Meanwhile another task runs."""

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, batch_size=1024,
                                 buffer_memory=4096, linger_ms=0, max_block_ms=120_000) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=0)
            cluster.stop_broker(1)
            held = [await p.send(TOPIC, b"held-%d" % i + b"." * 900, partition=0) for i in range(4)]
            ticker = Ticker()
            victim = asyncio.ensure_future(p.send(TOPIC, b"victim", partition=0))
            while p._space_waiters == 0:
                await asyncio.sleep(0.001)
            await ticker.until(50)  # the loop runs other tasks while the send waits
            assert not victim.done()
            victim.cancel()
            with pytest.raises(asyncio.CancelledError):
                await victim
            later = asyncio.ensure_future(p.send(TOPIC, b"later", partition=0))
            while p._space_waiters == 0:
                await asyncio.sleep(0.001)
            cluster.start_broker(1)
            await (await later)
            for f in held:
                await f
            ticker.stop()

    asyncio.run(main())
    values = read_values(cluster, 6)
    assert sorted(values) == sorted([b"warm", b"later"] + [b"held-%d" % i + b"." * 900 for i in range(4)])


def test_buffer_wait_past_max_block_ms_fails_the_record(cluster: MockCluster) -> None:
    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, batch_size=1024,
                                 buffer_memory=2048, linger_ms=0, max_block_ms=200, delivery_timeout_ms=120_000,
                                 request_timeout_ms=60_000) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=0)
            cluster.stop_broker(1)
            held = [await p.send(TOPIC, b"x" * 900, partition=0) for _ in range(2)]
            fut = await p.send(TOPIC, b"too-late", partition=0)
            with pytest.raises(BufferExhaustedError, match="max.block.ms=200"):
                await fut
            cluster.start_broker(1)
            for f in held:
                await f

    asyncio.run(main())
    assert b"too-late" not in read_values(cluster, 3)


def test_cancelling_the_returned_future_does_not_unsend_the_record(cluster: MockCluster) -> None:
    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=1)
            cluster.set_latency(1, 300)
            fut = await p.send(TOPIC, b"cancelled-future", partition=1)
            fut.cancel()
            with pytest.raises(asyncio.TimeoutError):  # wait_for cancels the await after the admission
                await asyncio.wait_for(p.send_and_wait(TOPIC, b"timed-out-await", partition=1), 0.001)
            await p.flush()
            cluster.set_latency(1, 0)
            assert fut.cancelled()

    asyncio.run(main())
    values = read_values(cluster, 3)
    assert sorted(values) == [b"cancelled-future", b"timed-out-await", b"warm"]  # each exactly once


def test_cancelling_a_send_waiting_for_metadata_never_admits_the_record(cluster: MockCluster) -> None:
    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=60_000,
                                 allow_auto_create_topics=False) as p:
            ticker = Ticker()
            victim = asyncio.ensure_future(p.send("later", b"victim"))
            await ticker.until(20)
            assert not victim.done()  # the topic does not exist: it cannot have been admitted
            victim.cancel()
            with pytest.raises(asyncio.CancelledError):
                await victim
            cluster.create_topic("later", 2)
            await p.send_and_wait("later", b"after")
            ticker.stop()

    asyncio.run(main())
    assert read_values(cluster, 1, topic="later") == [b"after"]


def test_unknown_topic_fails_the_future_after_max_block_ms(cluster: MockCluster) -> None:
    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=200,
                                 allow_auto_create_topics=False) as p:
            fut = await p.send("missing", b"v")
            with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
                await fut

    asyncio.run(main())


def test_a_sending_task_yields_and_deliveries_are_chunked(cluster: MockCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Structural proof that one task sending flat out does not hold the loop: other tasks get a turn at
    least once per YIELD_EVERY sends, and no delivery callback settles more than DELIVER_CHUNK watched
    records (records with a done callback: here gather's, registered while the broker is down)."""
    n = 20_000
    per_call: List[int] = []
    settled = [0]
    real_settle = RecordFuture._settle

    def counting_settle(self: RecordFuture) -> None:
        settled[0] += 1
        real_settle(self)

    monkeypatch.setattr(RecordFuture, "_settle", counting_settle)

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers) as p:
            await p.send_and_wait(TOPIC, b"warm")
            deliver = p._deliver

            def measured() -> None:
                before = settled[0]
                deliver()
                per_call.append(settled[0] - before)

            p._deliver = measured  # type: ignore[method-assign]
            cluster.stop_broker(1)
            ticker = Ticker()
            start = ticker.ticks
            futs = [await p.send(TOPIC, b"v") for _ in range(n)]
            assert ticker.ticks - start >= n // YIELD_EVERY
            gathered = asyncio.gather(*futs)  # a done callback on every record, none done yet
            assert not any(f.done() for f in futs)
            cluster.start_broker(1)
            metas = await gathered
            assert len({(m.partition, m.offset) for m in metas}) == n
            ticker.stop()

    asyncio.run(main())
    assert sum(per_call) >= n and max(per_call) <= DELIVER_CHUNK
    assert len(per_call) >= n // DELIVER_CHUNK


def test_kproducer_loop_callbacks_do_bounded_work_in_asyncio_debug_mode(cluster: MockCluster,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """In asyncio's debug mode (which makes a loop call from another thread raise -- the completion thunk
    runs on the network thread, and the no_internal_errors fixture would report the error), the callbacks
    kproducer puts on the loop do bounded work: each delivery settles at most DELIVER_CHUNK watched records.
    Its time is not asserted here (a speed figure belongs in a benchmark): the loop's longest stall is measured
    by benchmarks/compare.py's asyncio rows."""
    n = 20_000
    sizes: List[int] = []
    settled = [0]
    real_settle = RecordFuture._settle

    def counting_settle(self: RecordFuture) -> None:
        settled[0] += 1
        real_settle(self)

    monkeypatch.setattr(RecordFuture, "_settle", counting_settle)

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, batch_size=4096,
                                 buffer_memory=4 * 1024 * 1024, linger_ms=20) as p:
            await p.send_and_wait(TOPIC, b"warm")
            deliver = p._deliver

            def measured() -> None:
                before = settled[0]
                deliver()
                sizes.append(settled[0] - before)

            p._deliver = measured  # type: ignore[method-assign]
            cluster.stop_broker(1)
            futs = [await p.send(TOPIC, b"%06d" % i) for i in range(n)]
            # every other record awaited by a task of its own (a waiter each), the rest by gather
            tasks = [asyncio.ensure_future(_await(f)) for f in futs[::2]]
            gathered = asyncio.gather(*futs[1::2])
            await asyncio.sleep(0)  # the tasks start and wait
            cluster.start_broker(1)
            await p.flush()
            assert all(f.done() and f.result().offset >= 0 for f in futs)
            assert (await asyncio.gather(*tasks)) == [f.result() for f in futs[::2]]
            assert (await gathered) == [f.result() for f in futs[1::2]]
            batch = await p.send_batch(TOPIC, [b"b%05d" % i for i in range(5000)])
            await batch

    asyncio.run(main(), debug=True)
    assert sum(sizes) >= n
    assert max(sizes) <= DELIVER_CHUNK
    assert len(read_values(cluster, n + 5001)) == n + 5001


async def _await(fut: RecordFuture) -> RecordMetadata:
    return await fut


def test_send_batch_resolves_to_its_batch_future(cluster: MockCluster) -> None:
    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers) as p:
            fut = await p.send_batch(TOPIC, [b"%05d" % i for i in range(10_000)], partition=2)
            result = await fut
            assert result.partition_offsets() == {(TOPIC, 2): (0, 9999)}

    asyncio.run(main())
    assert read_values(cluster, 10_000) == [b"%05d" % i for i in range(10_000)]


def test_transactions_commit_and_abort() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic(TOPIC, 2)

        async def main() -> None:
            async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="aio-1") as p:
                await p.init_transactions()
                async with p.transaction():
                    futs = [await p.send(TOPIC, b"committed-%d" % i) for i in range(100)]
                assert all(f.done() and not f.exception() for f in futs)
                with pytest.raises(RuntimeError, match="boom"):
                    async with p.transaction():
                        await p.send(TOPIC, b"aborted")
                        raise RuntimeError("boom")
                await p.begin_transaction()
                await p.send(TOPIC, b"committed-last")
                await p.commit_transaction()

        asyncio.run(main())
        values = read_values(cluster, 101, isolation_level="read_committed")
        assert sorted(values) == sorted([b"committed-%d" % i for i in range(100)] + [b"committed-last"])


def test_send_after_close_raises_and_close_is_idempotent(cluster: MockCluster) -> None:
    from kproducer.errors import ProducerClosedError

    async def main() -> None:
        p = AsyncProducer(bootstrap_servers=cluster.bootstrap_servers)
        await p.start()
        fut = await p.send(TOPIC, b"v")
        await p.close()
        assert fut.done() and fut.result().offset >= 0
        await p.close()
        with pytest.raises(ProducerClosedError):
            await p.send(TOPIC, b"late")

    asyncio.run(main())


def test_calls_after_close(cluster: MockCluster) -> None:
    from kproducer.errors import ProducerClosedError

    async def main() -> None:
        p = AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="closed-1")
        await p.close()
        await p.flush()  # nothing to flush
        with pytest.raises(ProducerClosedError):
            await p.commit_transaction()
        with pytest.raises(ProducerClosedError):
            await p.send_batch(TOPIC, [b"v"])

    asyncio.run(main())


def test_a_record_over_max_request_size_fails_at_once(cluster: MockCluster) -> None:
    from kproducer.errors import MessageTooLargeError

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, max_request_size=10_000,
                                 buffer_memory=64 * 1024, max_block_ms=60_000) as p:
            await p.send_and_wait(TOPIC, b"warm")
            fut = await p.send(TOPIC, b"x" * 20_000)  # admission does not wait for memory it will never need
            with pytest.raises(MessageTooLargeError):
                await fut

    asyncio.run(main())


def test_staged_and_one_by_one_sends_keep_the_callers_order_per_partition(cluster: MockCluster) -> None:
    """Plain records are staged and appended in bulk at the end of the loop iteration; records with headers
    take the synchronous send(). Mixed on one partition they are stored in the order they were sent."""
    n = 3000

    async def main() -> List[RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5) as p:
            futs = []
            for i in range(n):
                value = b"%05d" % i
                if i % 7 == 3:
                    futs.append(await p.send(TOPIC, value, partition=0, headers=[("h", b"1")]))
                elif i % 11 == 5:
                    futs.append(await p.send(TOPIC, value, partition=0, timestamp_ms=1_700_000_000_000 + i))
                else:
                    futs.append(await p.send(TOPIC, value, partition=0))
            return [await f for f in futs]

    metas = asyncio.run(main())
    offsets = [m.offset for m in metas]
    assert offsets == sorted(offsets) and len(set(offsets)) == n
    assert metas[16].timestamp == 1_700_000_000_016 and metas[3].serialized_value_size == 5
    stored = [r.value for r in cluster.records(TOPIC, 0)]
    assert stored == [b"%05d" % i for i in range(n)]


def test_bad_arguments_raise_from_send_as_from_the_synchronous_send(cluster: MockCluster) -> None:
    bad: List[Any] = [
        dict(value="str"), dict(value=b"v", key="k"), dict(value=b"v", timestamp_ms=-1),
        dict(value=b"v", timestamp_ms=True), dict(value=b"v", partition=-1), dict(value=b"v", partition=True),
        dict(value=b"v", partition="0"), dict(value=b"v", headers=[(1, b"x")]),
    ]

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers) as p:
            await p.send_and_wait(TOPIC, b"warm")
            for kw in bad:
                with pytest.raises(Exception) as sync_error:
                    p.producer.send(TOPIC, **kw)
                with pytest.raises(type(sync_error.value)) as async_error:
                    await p.send(TOPIC, **kw)
                assert str(async_error.value) == str(sync_error.value)
            with pytest.raises(TypeError):
                await p.send("", b"v")
            await p.send_and_wait(TOPIC, b"after")  # the producer is still usable

    asyncio.run(main())


def test_staged_records_of_a_split_batch_are_resolved(cluster: MockCluster) -> None:
    """MESSAGE_TOO_LARGE on a batch of staged records: the batch is split (KIP-126) and every record's
    future follows it to the batch that holds it now."""
    n = 2000

    async def main() -> List[RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=50) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=1)
            cluster.inject_errors("Produce", [10])
            futs = [await p.send(TOPIC, b"%05d" % i, partition=1) for i in range(n)]
            return [await f for f in futs]

    metas = asyncio.run(main())
    assert [m.offset for m in metas] == list(range(1, n + 1))
    assert [r.value for r in cluster.records(TOPIC, 1)][1:] == [b"%05d" % i for i in range(n)]


def test_staged_records_of_a_failed_batch_fail(cluster: MockCluster) -> None:
    from kproducer.errors import KafkaError

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=20, retries=0,
                                 enable_idempotence=False) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=2)
            cluster.inject_errors("Produce", [87])  # INVALID_RECORD: not retriable
            futs = [await p.send(TOPIC, b"%05d" % i, partition=2) for i in range(100)]
            results = await asyncio.gather(*futs, return_exceptions=True)
            assert all(isinstance(r, KafkaError) for r in results), results[:3]

    asyncio.run(main())


def test_keyless_keyed_and_explicit_partition_records_are_stored_in_send_order(cluster: MockCluster) -> None:
    """Keyless records are staged per topic and get their partitions when appended; records with a key or
    an explicit partition are staged per partition. Interleaved, every partition stores its records in the
    order they were sent, and the futures report where each one went."""
    n = 6000

    async def main() -> List[RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5, batch_size=2048) as p:
            futs = []
            for i in range(n):
                value = b"%05d" % i
                kind = (i // 7) % 3  # runs of each kind, then switching
                if kind == 0:
                    futs.append(await p.send(TOPIC, value))
                elif kind == 1:
                    futs.append(await p.send(TOPIC, value, partition=i % PARTITIONS))
                else:
                    futs.append(await p.send(TOPIC, value, key=b"k%d" % (i % 10)))
            return [await f for f in futs]

    metas = asyncio.run(main())
    for part in range(PARTITIONS):
        stored = [int(r.value) for r in cluster.records(TOPIC, part)]
        assert stored == sorted(stored)
        assert stored == [i for i, m in sorted(enumerate(metas), key=lambda im: im[1].offset) if m.partition == part]
    assert sum(cluster.high_watermark(TOPIC, part) for part in range(PARTITIONS)) == n
    assert len({m.partition for m in metas[0:7]}) == 1  # (a keyless run stays on one partition)
    # keyless records move on to another partition after about batch.size bytes (uniform sticky)
    assert len({m.partition for i, m in enumerate(metas) if (i // 7) % 3 == 0}) > 1


def test_record_future_awaited_before_and_after_its_batch_completes(cluster: MockCluster) -> None:
    """The future send() returns resolves for a task that awaits it before the batch completes (the broker
    is down) and, the same, for an await after completion; result() says "not ready" until then."""

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=3)
            cluster.stop_broker(1)
            fut = await p.send(TOPIC, b"early", partition=3, key=b"k")
            assert isinstance(fut, RecordFuture) and not fut.done() and not fut.cancelled()
            with pytest.raises(asyncio.InvalidStateError):
                fut.result()
            with pytest.raises(asyncio.InvalidStateError):
                fut.exception()
            early = asyncio.ensure_future(_await(fut))
            await asyncio.sleep(0.05)
            assert not early.done() and not fut.done()
            cluster.start_broker(1)
            meta = await early
            assert fut.done() and fut.exception() is None and fut.result() == meta
            assert await fut == meta  # awaited again, after completion
            assert (meta.topic, meta.partition, meta.offset) == (TOPIC, 3, 1)
            assert (meta.serialized_key_size, meta.serialized_value_size) == (1, 5)
            assert "done" in repr(fut)

    asyncio.run(main())
    assert [r.value for r in cluster.records(TOPIC, 3)] == [b"warm", b"early"]


def test_record_future_raises_the_records_error(cluster: MockCluster) -> None:
    from kproducer.errors import KafkaError

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=20, retries=0,
                                 enable_idempotence=False) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=4)
            cluster.inject_errors("Produce", [87])  # INVALID_RECORD: not retriable
            futs = [await p.send(TOPIC, b"%d" % i, partition=4) for i in range(10)]
            waiter = asyncio.ensure_future(_await(futs[0]))  # waiting before the failure
            with pytest.raises(KafkaError) as raised:
                await waiter
            for f in futs:
                with pytest.raises(type(raised.value)):
                    await f
                assert f.done() and not f.cancelled()
                assert isinstance(f.exception(), KafkaError)
                with pytest.raises(KafkaError):
                    f.result()
            assert "failed" in repr(futs[0])

    asyncio.run(main())


def test_record_future_works_with_asyncio_gather_wait_wait_for_shield_and_callbacks(cluster: MockCluster) -> None:
    """The record future is future-like: asyncio takes it as it is (no Task made for it)."""

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=5)
            cluster.stop_broker(1)
            futs = [await p.send(TOPIC, b"%d" % i, partition=5) for i in range(6)]
            assert all(asyncio.isfuture(f) for f in futs)
            assert asyncio.ensure_future(futs[0]) is futs[0]
            assert futs[0].get_loop() is asyncio.get_running_loop()
            calls: List[Any] = []
            futs[1].add_done_callback(calls.append)
            futs[1].add_done_callback(lambda f: calls.append("second"))
            futs[2].add_done_callback(calls.append)
            assert futs[2].remove_done_callback(calls.append) == 1
            gathered = asyncio.gather(*futs[:3])
            waited = asyncio.ensure_future(asyncio.wait(futs[3:5]))
            timed = asyncio.ensure_future(asyncio.wait_for(futs[5], 60))
            shielded = asyncio.shield(futs[4])
            await asyncio.sleep(0.05)
            assert not calls and not gathered.done() and not waited.done()
            cluster.start_broker(1)
            metas = await gathered
            done, pending = await waited
            assert done == set(futs[3:5]) and not pending
            assert (await timed) == futs[5].result()
            assert (await shielded) == futs[4].result()
            assert [m.offset for m in metas] == [1, 2, 3]
            await asyncio.sleep(0)
            assert calls == [futs[1], "second"]  # (futs[2]'s callback was removed)
            late: List[Any] = []
            futs[0].add_done_callback(late.append)  # already done: scheduled at once
            await asyncio.sleep(0)
            assert late == [futs[0]]

    asyncio.run(main())
    assert [r.value for r in cluster.records(TOPIC, 5)] == [b"warm"] + [b"%d" % i for i in range(6)]


def test_cancelling_a_task_awaiting_a_record_cancels_neither_the_record_nor_its_future(cluster: MockCluster) -> None:
    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=0)
            cluster.stop_broker(1)
            fut = await p.send(TOPIC, b"kept", partition=0)
            first = asyncio.ensure_future(_await(fut))
            second = asyncio.ensure_future(_await(fut))
            await asyncio.sleep(0.02)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert not fut.cancelled() and not fut.done()
            with pytest.raises(asyncio.TimeoutError):  # wait_for's timeout cancels its own wait only
                await asyncio.wait_for(_await(fut), 0.01)
            cluster.start_broker(1)
            meta = await second  # the other waiter still gets the outcome
            assert meta == fut.result() and meta.offset == 1
            # cancel() itself cancels the future (not the record), and wakes its waiters
            cluster.stop_broker(1)
            other = await p.send(TOPIC, b"sent-anyway", partition=0)
            waiter = asyncio.ensure_future(_await(other))
            await asyncio.sleep(0.02)
            assert other.cancel("not interested") and other.cancelled() and other.done()
            assert not other.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            with pytest.raises(asyncio.CancelledError):
                other.result()
            cluster.start_broker(1)
            await p.flush()
            assert other.cancelled()

    asyncio.run(main())
    assert [r.value for r in cluster.records(TOPIC, 0)] == [b"warm", b"kept", b"sent-anyway"]


def test_keyless_sends_past_the_buffer_memory_wait_for_space_and_all_arrive(cluster: MockCluster) -> None:
    """Keyless records sent flat out that need more than buffer.memory: the staging bound (the hot path's
    included) sends the excess through the waiting path, and every record is stored once, in order per
    partition."""
    n = 400

    async def main() -> List[RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, buffer_memory=64 * 1024,
                                 batch_size=16 * 1024, linger_ms=5, max_block_ms=60_000) as p:
            await p.send_and_wait(TOPIC, b"warm", partition=0)
            waits = [0]
            real_wait = p._wait_admissible

            async def counting_wait(*args: Any) -> Any:
                waits[0] += 1
                return await real_wait(*args)

            p._wait_admissible = counting_wait  # type: ignore[method-assign]
            futs = [await p.send(TOPIC, b"%04d" % i + b"." * 996) for i in range(n)]
            assert waits[0] > 0  # (some sends had to wait for memory)
            return [await f for f in futs]

    metas = asyncio.run(main())
    assert len({(m.partition, m.offset) for m in metas}) == n
    values = read_values(cluster, n + 1)
    assert sorted(values) == sorted([b"warm"] + [b"%04d" % i + b"." * 996 for i in range(n)])
    for part in range(PARTITIONS):
        stored = [int(r.value[:4]) for r in cluster.records(TOPIC, part) if r.value != b"warm"]
        assert stored == sorted(stored)


def test_compiled_and_python_paths_of_the_record_future_agree(cluster: MockCluster) -> None:
    """A record's metadata is the same whether ``await`` computes it (compiled with the accelerator: the common
    case of a done record) or ``result()`` does (Python), for keyless records staged by send()'s hot path
    across several STAGE_MAX flushes, records with None values, keyed and explicit-partition records, and
    the one-record runs of the synchronous path; every metadata names where its record is stored."""
    from kproducer.aio import STAGE_MAX
    from kproducer.protocol.accel import MODULES, load

    aio_c = load(MODULES["aio"])

    n = 3 * STAGE_MAX + 17

    async def main() -> List[Any]:
        async with AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5) as p:
            futs = [await p.send(TOPIC, b"v%05d" % i) for i in range(n)]
            futs.append(await p.send(TOPIC, None))
            futs.append(await p.send(TOPIC, b"keyed", key=b"key"))
            futs.append(await p.send(TOPIC, b"explicit", partition=2))
            futs.append(await p.send(TOPIC, b"headers", headers=[("h", b"1")]))  # (the synchronous path)
            if aio_c is not None:  # the hot path's futures are not tracked by the cyclic GC (no cycle is left)
                assert not all(gc.is_tracked(f) for f in futs[1:n])
            await p.flush()
            out = []
            for f in futs:
                it = f.__await__()
                with pytest.raises(StopIteration) as stop:
                    # done: the await finishes at once (or, with the accelerator, after one bare yield to the
                    # loop when awaiting done records has run for YIELD_AFTER_S)
                    assert it.send(None) is None
                    it.send(None)
                meta = stop.value.value
                assert meta == f.result() == await f
                out.append(meta)
            with pytest.raises(ValueError):  # (the iterator of an await acts as a generator's)
                futs[0].__await__().throw(ValueError("thrown"))
            futs[0].__await__().close()
            return out

    metas = asyncio.run(main())
    values = [b"v%05d" % i for i in range(n)] + [None, b"keyed", b"explicit", b"headers"]
    stored = {(part, r.offset): r for part in range(PARTITIONS) for r in cluster.records(TOPIC, part)}
    assert len(stored) == len(values)
    for meta, value in zip(metas, values):
        assert meta.topic == TOPIC
        rec = stored[(meta.partition, meta.offset)]
        assert rec.value == value
        assert meta.serialized_value_size == (-1 if value is None else len(value))
        assert meta.serialized_key_size == (3 if value == b"keyed" else -1)
        assert meta.timestamp == rec.timestamp
    assert metas[-2].partition == 2
