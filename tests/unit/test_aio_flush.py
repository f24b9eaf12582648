"""AsyncProducer._flush_staged's bulk append of staged keyless records: the compiled sticky cut
(``_send.sticky_cut`` through ``StickyPartitioner.record_runs``) and the compiled ``RecordsBuffer.extend``
against their Python twins (the same partitions, the same bytes), the staged records against the synchronous
``send()`` of the same records, and the failure paths (a closed producer, memory that runs out mid-append: each
record fails with the right error, none is lost)."""
from __future__ import annotations

import asyncio
import random
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from kproducer import Producer, RecordMetadata
from kproducer.aio import STAGE_MAX, AsyncProducer, RecordFuture
from kproducer.errors import BufferExhaustedError, ProducerClosedError
from kproducer.producer import partitioner as partitioner_mod
from kproducer.producer.admission import RECORD_OVERHEAD
from kproducer.producer.partitioner import StickyPartitioner
from kproducer.protocol.accel import MODULES, load
from kproducer.protocol.records import RecordBatchBuilder, _RecordsBufferPy
from tests.unit.producer_env import ProducerEnv, producer_env
from tests.unit.test_fast_send import Env, _raw_batches, _records

send_c = load(MODULES["producer"])

TS = 1_700_000_000_000

@pytest.fixture
def env() -> Iterator[ProducerEnv]:
    yield from producer_env(Env())


compiled = pytest.mark.skipif(send_c is None, reason="the compiled accelerator is not built (or is disabled)")


def _values(n: int, seed: int, lengths: Sequence[int] = (0, 1, 37, 100, 900, 5000)) -> List[Optional[bytes]]:
    rng = random.Random(seed)
    return [None if rng.random() < 0.05 else bytes([i % 251]) * rng.choice(lengths) for i in range(n)]


# -- the sticky cut ---------------------------------------------------------------------------------------


@compiled
@pytest.mark.parametrize("batch_size", [1, 100, 1000, 16384])
@pytest.mark.parametrize("keyed", [False, True])
def test_compiled_record_runs_choose_the_python_partitions(batch_size: int, keyed: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    values = _values(700, batch_size)
    keys: Optional[List[Optional[bytes]]] = None
    if keyed:
        keys = [None if i % 3 else b"k%d" % i for i in range(len(values))]
    results = []
    for cut in (partitioner_mod._sticky_cut, None):
        monkeypatch.setattr(partitioner_mod, "_sticky_cut", cut)
        sp = StickyPartitioner(batch_size, random.Random(3))
        runs = [sp.record_runs("t", keys, values[a:b], RECORD_OVERHEAD, (0, 2, 4), 6)
                for a, b in ((0, 1), (1, 300), (300, 300), (300, 700))]
        results.append((runs, {t: list(s) for t, s in sp.state.items()}))
    assert results[0] == results[1]
    # and the same as runs() of the listed sizes, as one record_appended() per record would choose
    sizes = [RECORD_OVERHEAD + (0 if v is None else len(v)) + (0 if keys is None else len(keys[i] or b""))
             for i, v in enumerate(values)]
    one = StickyPartitioner(batch_size, random.Random(3))
    per_record = []
    for size in sizes:
        per_record.append(one.partition("t", (0, 2, 4), 6))
        one.record_appended("t", size, (0, 2, 4), 6)
    flat = [p for runs in results[0][0] for p, a, b in runs for _ in range(a, b)]
    assert flat == per_record
    assert results[0][1] == one.state


@compiled
def test_sticky_cut_contract() -> None:
    assert send_c is not None
    cut = send_c.sticky_cut
    values = [b"a" * 5, None, b"bb", b"c" * 30]
    assert cut(values, None, 10, 0, 16) == (2, 25)  # the record that reaches the budget is included
    assert cut(values, None, 10, 0, 15) == (1, 15)
    assert cut(values, None, 10, 1, 1000) == (4, 62)  # the rest stays below: (len, bytes)
    assert cut(values, [b"kk", None, None, None], 10, 0, 17) == (1, 17)
    assert cut(values, None, 10, 0, 0) == (1, 15)  # a budget already reached takes one record
    assert cut([], None, 10, 0, 5) == (0, 0)
    assert cut((bytearray(3),), None, 1, 0, 4) == (1, 4)  # len() of any sized value, as the Python twin
    with pytest.raises(TypeError):
        cut([1], None, 10, 0, 5)
    with pytest.raises(ValueError, match="fewer keys"):
        cut(values, [None], 10, 0, 100)


# -- RecordsBuffer.extend ---------------------------------------------------------------------------------


class _PyBuilder(_RecordsBufferPy):
    pass


@compiled
@pytest.mark.parametrize("indices", [range(0, 300), range(5, 290, 3), range(299, -1, -1), list(range(10, 200, 7)),
                                     tuple(range(0, 50))])
def test_compiled_extend_writes_the_python_bytes(indices: Sequence[int]) -> None:
    values = _values(300, 11)
    keys_list: List[Optional[bytes]] = [None if i % 4 else b"key%d" % i for i in range(300)]
    for keys in (None, keys_list, tuple(keys_list)):
        for vals in (values, tuple(values)):
            out = []
            for builder in (RecordBatchBuilder(4096), _PyBuilder(4096)):
                pos, filled = 0, []
                while pos < len(indices):  # a batch after another, as the accumulator's append loop
                    builder = type(builder)(4096)
                    nxt = builder.extend(TS, keys, vals, None, indices, pos)
                    assert nxt > pos  # (an empty batch takes its first record whatever its size)
                    filled.append((bytes(builder._buf[:builder._len]), builder._count, builder._max_ts))
                    pos = nxt
                out.append(filled)
            assert out[0] == out[1]
            assert len(out[0]) > 1  # the batches filled up


# -- _flush_staged against the synchronous send() --------------------------------------------------------


def _producer(env: ProducerEnv, **settings: Any) -> Producer:
    settings.setdefault("linger_ms", 60000)  # only full batches go out before flush(): batch bounds by content
    p = env.producer(**settings)
    p._admission.sticky._rng = random.Random(7)
    p.partitions_for("t")
    return p


def _workload(keyed: bool, lengths: Sequence[int]) -> List[Tuple[Optional[bytes], Optional[bytes]]]:
    values = _values(3000, 5, lengths)
    return [(b"key-%d" % (i % 13) if keyed and i % 2 else None, v) for i, v in enumerate(values)]


def _sync_run(env: ProducerEnv, records: List[Tuple[Optional[bytes], Optional[bytes]]], **settings: Any) -> Any:
    p = _producer(env, **settings)
    futures = [p.send("t", v, k, timestamp_ms=TS + i // 700) for i, (k, v) in enumerate(records)]
    p.flush(30)
    return [(f.get(5).partition, f.get(5).offset) for f in futures], p._admission.sticky.state


def _aio_run(env: ProducerEnv, records: List[Tuple[Optional[bytes], Optional[bytes]]], **settings: Any) -> Any:
    p = _producer(env, **settings)
    flushes = []

    async def main() -> List[RecordMetadata]:
        async with AsyncProducer(producer=p) as ap:
            real = ap._flush_staged

            def counting() -> None:
                flushes.append(ap._hot.count)
                real()

            ap._flush_staged = counting  # type: ignore[method-assign]
            futs: List[RecordFuture] = [await ap.send("t", v, k, timestamp_ms=TS + i // 700)
                                        for i, (k, v) in enumerate(records)]
            await ap.flush(30)
            return [await f for f in futs]

    metas = asyncio.run(main())
    assert sum(flushes) >= len(records) and 16 <= max(flushes) <= STAGE_MAX  # appended in bulk, bounded
    return [(md.partition, md.offset) for md in metas], p._admission.sticky.state


@pytest.mark.parametrize("batch_size", [1 << 20, 4096])
@pytest.mark.parametrize("keyed", [False, True])
def test_staged_records_go_where_and_as_the_synchronous_send_puts_them(batch_size: int, keyed: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyless records (and, with partitioner.ignore.keys, keyed ones spread as keyless) staged by the async
    send() and appended by _flush_staged: the same partitions, offsets, sticky state and record bytes as the
    synchronous send() of each record; with the compiled sticky cut and with its Python twin. With 1 MB batches
    the records (< 1 MB a partition) stay in one batch per partition until flush(), compared byte for byte; with
    4 KB batches they roll over and the partitions switch (which batches a drain takes before flush() depends on
    timing: a node's drain takes every partition's first batch), so the records are compared in order."""
    records = _workload(keyed, (0, 1, 37, 100, 300) if batch_size > 4096 else (0, 1, 37, 100, 900, 5000))
    settings: Dict[str, Any] = {"batch_size": batch_size}
    if keyed:
        settings["partitioner_ignore_keys"] = True
    results = []
    for path in ("sync", "aio", "aio-python-cut"):
        if path == "aio-python-cut":
            monkeypatch.setattr(partitioner_mod, "_sticky_cut", None)
        e = Env()
        try:
            run = _sync_run if path == "sync" else _aio_run
            placed, sticky = run(e, records, **settings)
            results.append((placed, {t: list(s) for t, s in sticky.items()}, _raw_batches(e)))
        finally:
            e.close()
    (placed_s, sticky_s, wire_s) = results[0]
    if batch_size == 4096:
        assert len(set(p for p, _o in placed_s)) > 3  # the sticky partitioner moved on, several times
    for placed, sticky, wire in results[1:]:
        assert placed == placed_s
        assert sticky == sticky_s
        if batch_size > 4096:
            assert wire == wire_s  # one batch per partition and timestamp run: byte for byte
        else:
            assert sum(len(raw) for raw in wire.values()) > 16  # batches rolled over
            assert _records(wire) == _records(wire_s)


# -- failure paths ----------------------------------------------------------------------------------------


def _stage(ap: AsyncProducer, n: int, value: bytes = b"v" * 100) -> List[RecordFuture]:
    """Stage ``n`` keyless records in one run, as send()'s fast path does (without appending them)."""
    run = ap._new_run(asyncio.get_running_loop(), "t", TS, True)
    return [ap._stage_one(run, None, value) for _ in range(n)]


async def _outcomes(futs: List[RecordFuture]) -> List[Any]:
    out: List[Any] = []
    for f in futs:
        try:
            md = await f
            out.append((md.partition, md.offset))
        except Exception as e:  # noqa: BLE001 (the record's error is what is checked)
            out.append(e)
    return out


def test_staged_records_of_a_closed_producer_fail_with_producer_closed_error(env: ProducerEnv) -> None:
    p = _producer(env, linger_ms=0)

    async def main() -> List[Any]:
        async with AsyncProducer(producer=p) as ap:
            futs = _stage(ap, 300)
            p._accumulator.close()  # closed between staging and the append
            ap._flush_staged()
            return await _outcomes(futs)

    outcomes = asyncio.run(main())
    assert len(outcomes) == 300
    assert all(isinstance(o, ProducerClosedError) for o in outcomes)


def test_memory_that_runs_out_mid_append_fails_the_rest_and_loses_nothing(env: ProducerEnv,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool refuses the third batch: the records in the first two are sent, every other one fails with
    the pool's error; a run staged after it is appended again once memory is back."""
    p = _producer(env, linger_ms=0, batch_size=4096)
    pool = p._accumulator.free
    real = pool.allocate_buffer
    calls = []

    def allocate_buffer(size: int, max_block_ms: float) -> Tuple[int, Optional[bytearray]]:
        calls.append(size)
        if len(calls) == 3:
            raise BufferExhaustedError("no memory (test)")
        return real(size, max_block_ms)

    monkeypatch.setattr(pool, "allocate_buffer", allocate_buffer)

    async def main() -> Tuple[List[Any], List[Any]]:
        async with AsyncProducer(producer=p) as ap:
            futs = _stage(ap, 200)
            ap._flush_staged()
            first = await _outcomes(futs)
            later = _stage(ap, 50)
            ap._flush_staged()
            return first, await _outcomes(later)

    first, later = asyncio.run(main())
    ok = [o for o in first if isinstance(o, tuple)]
    failed = [o for o in first if not isinstance(o, tuple)]
    assert len(ok) + len(failed) == 200
    assert 0 < len(ok) < 200 and first[:len(ok)] == ok  # the records appended before the refusal went out
    assert all(isinstance(o, BufferExhaustedError) and "no memory (test)" in str(o) for o in failed)
    assert all(isinstance(o, tuple) for o in later)
    offsets: Dict[int, List[int]] = {}
    for part, off in ok + later:
        offsets.setdefault(part, []).append(off)
    for part, offs in offsets.items():
        assert offs == list(range(len(offs)))  # none lost, none twice
        assert len(env.selector.log_values(("t", part))) == len(offs)
