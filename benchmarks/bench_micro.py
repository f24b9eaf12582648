"""Per-record micro-benchmarks of the producer's hot path (pytest-benchmark).

Run:  python -m pytest benchmarks/bench_micro.py --benchmark-enable -q
      (add --benchmark-columns=min,mean,median,ops for a compact table)

setup.cfg disables benchmarks by default, so without --benchmark-enable each function runs once, as a
quick test. Every round handles ``N`` records: divide the time by ``N`` for the per-record cost (the
``per_record_ns`` extra info does that for the mean when benchmarks are enabled).

Where kproducer has a compiled accelerator and a pure-Python twin, both are measured ("compiled" is
skipped when the extension is not built; KPRODUCER_PURE_PYTHON=1 disables it globally).

- record append: RecordBatchBuilder.try_append, 100-byte value, with and without an 8-byte key
- batch build + CRC: build() of a full 16 KB batch (header + CRC32C), and CRC32C of 16 KB alone
- murmur2 of a 16-byte key
- accumulator append: RecordAccumulator.append straight (no producer, no network)
- send(): a Producer on an in-process MockCluster, (a) as configured for compare.py (linger 5 ms,
  16 KB batches: the network thread runs concurrently) and (b) with linger.ms=60000 and 1 MB batches,
  so that the network is all but idle while send() runs
- send() fast path: the plain cases through the compiled FastSend and, switched off, through the Python send()
- send_batch(): the same two set-ups, one call with N records
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

from kproducer import Producer
from kproducer.mock import MockCluster
from kproducer.producer import partitioner
from kproducer.producer.accumulator import RecordAccumulator
from kproducer.producer.buffer_pool import BufferPool
from kproducer.protocol import accel
from kproducer.protocol import records as rec

N = 1000
TS = 1_700_000_000_000
KEY = b"k" * 8
VALUE = b"v" * 100
BATCH_SIZE = 16384
TOPIC = "bench"
PARTITIONS = 6

IMPLS = ["compiled", "pure"]


def _per_record(benchmark: Any, n: int = N) -> None:
    benchmark.extra_info["records_per_round"] = n
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        benchmark.extra_info["per_record_ns"] = round(stats.stats.mean / n * 1e9, 1)


def _need(impl: str) -> None:
    if impl == "compiled" and set(accel.implementations().values()) != {"compiled"}:
        pytest.skip("the compiled accelerators are not all built (or KPRODUCER_PURE_PYTHON is set)")


def _append_fn(builder: rec.RecordBatchBuilder, impl: str) -> Callable[..., int]:
    if impl == "pure":
        return builder._try_append_py
    return builder.try_append


# -- record append ------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("key", [None, KEY], ids=["nokey", "key8"])
def test_record_append(benchmark: Any, impl: str, key: Optional[bytes]) -> None:
    """N records appended into one large builder (no batch-full checks trip)."""
    _need(impl)

    def run() -> rec.RecordBatchBuilder:
        builder = rec.RecordBatchBuilder(16 * 1024 * 1024)
        append = _append_fn(builder, impl)
        value = VALUE
        for i in range(N):
            append(TS + i, key, value, None)
        return builder

    builder = benchmark(run)
    _per_record(benchmark)
    assert builder.record_count == N


@pytest.mark.parametrize("impl", IMPLS)
def test_record_append_with_headers(benchmark: Any, impl: str) -> None:
    _need(impl)
    headers = [("trace-id", b"0123456789abcdef"), ("source", b"bench")]

    def run() -> rec.RecordBatchBuilder:
        builder = rec.RecordBatchBuilder(16 * 1024 * 1024)
        append = _append_fn(builder, impl)
        for i in range(N):
            append(TS + i, KEY, VALUE, headers)
        return builder

    builder = benchmark(run)
    _per_record(benchmark)
    assert builder.record_count == N


# -- batch build + CRC --------------------------------------------------------------------------

def _full_batch() -> rec.RecordBatchBuilder:
    builder = rec.RecordBatchBuilder(BATCH_SIZE)
    i = 0
    while builder.try_append(TS + i, None, VALUE, None) >= 0:
        i += 1
    return builder


def test_batch_build_crc_16k(benchmark: Any) -> None:
    """build() of a full 16 KB batch: records section, header, CRC32C (a fresh builder per round, so the
    records-section cache does not help)."""
    data = benchmark.pedantic(lambda b: b.build(1000, 0, 0), setup=lambda: ((_full_batch(),), {}),
                              rounds=200)
    header = rec.read_batch_header(data)
    assert header.size == len(data)


@pytest.mark.parametrize("impl", ["kproducer", "crcmod"])
def test_crc32c_16k(benchmark: Any, impl: str) -> None:
    """CRC32C over 16 KB: the function records.py uses, and crcmod's (the fallback)."""
    import crcmod.predefined

    data = bytes(range(256)) * 64
    fn = rec.crc32c if impl == "kproducer" else crcmod.predefined.mkPredefinedCrcFun("crc-32c")
    value = benchmark(fn, data)
    assert value == crcmod.predefined.mkPredefinedCrcFun("crc-32c")(data)
    benchmark.extra_info["bytes"] = len(data)


# -- murmur2 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
def test_murmur2(benchmark: Any, impl: str) -> None:
    _need(impl)
    fn = partitioner._murmur2_py if impl == "pure" else partitioner.murmur2
    keys = [f"user-{i:011d}".encode() for i in range(N)]  # 16 bytes each

    def run() -> int:
        acc = 0
        for k in keys:
            acc ^= fn(k)
        return acc

    benchmark(run)
    _per_record(benchmark)
    # Java's Utils.murmur2("21") == -973932308 (from Kafka's test suite)
    assert fn(b"21") == -973932308


# -- accumulator --------------------------------------------------------------------------------

def _accumulator() -> RecordAccumulator:
    pool = BufferPool(256 * 1024 * 1024, BATCH_SIZE)
    return RecordAccumulator(BATCH_SIZE, 5, 100, 1000, 120000, pool)


def test_accumulator_append(benchmark: Any) -> None:
    """RecordAccumulator.append of N 100-byte records over 6 partitions (batches fill and roll over),
    no sender: a fresh accumulator per round."""

    def run(acc: RecordAccumulator) -> RecordAccumulator:
        append = acc.append
        for i in range(N):
            append(TOPIC, i % PARTITIONS, TS, None, VALUE, None, None, 1000.0, 0.0)
        return acc

    acc = benchmark.pedantic(run, setup=lambda: ((_accumulator(),), {}), rounds=50)
    _per_record(benchmark)
    assert acc.queued_batches() >= PARTITIONS


# -- send() / send_batch() on a MockCluster ------------------------------------------------------

@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(num_brokers=1) as c:
        c.create_topic(TOPIC, PARTITIONS)
        yield c


SETUPS = {
    "linger5": {"linger.ms": 5, "batch.size": BATCH_SIZE},
    "idle-network": {"linger.ms": 60000, "batch.size": 1024 * 1024, "buffer.memory": 512 * 1024 * 1024},
}


@pytest.fixture(params=list(SETUPS))
def producer(request: Any, cluster: MockCluster) -> Iterator[Producer]:
    p = Producer(SETUPS[request.param], bootstrap_servers=cluster.bootstrap_servers)
    p.partitions_for(TOPIC)  # metadata up front
    try:
        yield p
    finally:
        p.close(5)


def test_send(benchmark: Any, producer: Producer) -> None:
    """N keyless send() calls, no callback."""
    send = producer.send

    def run() -> None:
        for _ in range(N):
            send(TOPIC, VALUE)

    benchmark(run)
    _per_record(benchmark)
    producer.flush(30)


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_send_fast_path(benchmark: Any, producer: Producer, path: str) -> None:
    """N send() calls of the plain case (keyless, keyed, explicit partition, with a callback: a quarter each)
    through the compiled fast path (``Producer._fast``, _send.FastSend) or, with it switched off on this
    producer, the Python send()."""
    _need(path)
    fast = producer._fast
    if path == "compiled" and fast is None:
        pytest.skip("this producer has no compiled fast path")
    send = producer.send
    keys = [f"user-{i:011d}".encode() for i in range(N)]
    acked: List[int] = []

    def cb(md: Any, exc: Optional[BaseException]) -> None:
        acked.append(1)

    def run() -> None:
        for i in range(0, N, 4):
            send(TOPIC, VALUE)
            send(TOPIC, VALUE, key=keys[i])
            send(TOPIC, VALUE, partition=i % PARTITIONS)
            send(TOPIC, VALUE, callback=cb)

    if path == "python":
        producer._fast = None
    try:
        benchmark(run)
    finally:
        producer._fast = fast
    _per_record(benchmark)
    producer.flush(30)
    assert acked


def test_send_keyed_with_callback(benchmark: Any, producer: Producer) -> None:
    """N keyed send() calls, each with a callback (murmur2 + the callback bookkeeping)."""
    send = producer.send
    keys = [f"user-{i:011d}".encode() for i in range(N)]
    acked: List[int] = []

    def cb(md: Any, exc: Optional[BaseException]) -> None:
        acked.append(1)

    def run() -> None:
        for k in keys:
            send(TOPIC, VALUE, key=k, callback=cb)

    benchmark(run)
    _per_record(benchmark)
    producer.flush(30)
    assert acked


def test_send_batch(benchmark: Any, producer: Producer) -> None:
    """One send_batch() call with N records."""
    values = [VALUE] * N
    futures: List[Any] = []

    def run() -> None:
        futures.append(producer.send_batch(TOPIC, values))

    benchmark(run)
    _per_record(benchmark)
    producer.flush(30)
    futures[-1].wait(30)


def test_send_batch_keyed(benchmark: Any, producer: Producer) -> None:
    """One send_batch() call with N keyed records (grouped by murmur2 partition)."""
    values = [VALUE] * N
    keys = [f"user-{i:011d}".encode() for i in range(N)]
    futures: List[Tuple[Any]] = []

    def run() -> None:
        futures.append((producer.send_batch(TOPIC, values, keys=keys),))

    benchmark(run)
    _per_record(benchmark)
    producer.flush(30)
    futures[-1][0].wait(30)


# -- AsyncProducer (kproducer.aio) -----------------------------------------------------------------

@pytest.mark.parametrize("path", ["compiled", "python"])
def test_async_send(benchmark: Any, cluster: MockCluster, path: str) -> None:
    """N keyless ``await send()`` on one loop, the futures kept (the send half of benchmarks/compare.py's
    asyncio row, in process, idle network). ``compiled``: send()'s hot path in _aio.c (aio_stage);
    ``python``: that step in Python (a coroutine per call). After the rounds, every future is awaited once (done)."""
    import asyncio

    from kproducer import aio

    _need(path)
    stage = aio._stage
    if path == "compiled" and stage is None:
        pytest.skip("the asyncio hot path is not compiled")
    loop = asyncio.new_event_loop()
    p = aio.AsyncProducer(SETUPS["idle-network"], bootstrap_servers=cluster.bootstrap_servers)
    loop.run_until_complete(p.partitions_for(TOPIC))
    kept: List[Any] = []

    # (with the accelerator, AsyncProducer.send is a compiled method that stages in C itself: the Python path
    # is its __wrapped__ async def)
    py_send = getattr(aio.AsyncProducer.send, "__wrapped__", aio.AsyncProducer.send)

    async def round_() -> None:
        send = p.send if path == "compiled" else partial(py_send, p)
        kept.extend([await send(TOPIC, VALUE) for _ in range(N)])

    async def await_all() -> None:
        await p.flush()
        for f in kept:
            assert (await f).offset >= 0

    if path == "python":
        aio._stage = None
    try:
        benchmark(lambda: loop.run_until_complete(round_()))
    finally:
        aio._stage = stage
        loop.run_until_complete(await_all())
        loop.run_until_complete(p.close(5))
        loop.close()
    _per_record(benchmark)
