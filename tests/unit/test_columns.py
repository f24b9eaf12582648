"""Records from binary columns (kproducer.protocol.columns, kproducer.producer.columnar): the columnar encoder
(compiled and pure Python) produces the batches the per-row path produces, and send_columns() makes the choices
send_batch() makes (partitions, order, sticky runs, errors)."""
from __future__ import annotations

import array
import random
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from kproducer.errors import MessageTooLargeError
from kproducer.producer.columnar import _column_partitions_py, column_partitions, send_columns
from kproducer.producer.partitioner import murmur2
from kproducer.protocol import messages as m
from kproducer.protocol.accel import records as records_c
from kproducer.protocol.columns import (
    BinaryColumn,
    _column_max_length_py,
    _extend_columns_py,
    column_item,
    column_max_length,
    extend_columns,
    row_indices,
)
from kproducer.protocol.records import RecordBatchBuilder, _RecordsBufferPy
from tests.unit.producer_env import ProducerEnv, producer_env

Column = Tuple[BinaryColumn, List[Optional[bytes]]]


def _data(seed: int, n: int, null_share: float, max_len: int) -> List[Optional[bytes]]:
    rnd = random.Random(seed)
    return [None if rnd.random() < null_share else bytes(rnd.randrange(256) for _ in range(rnd.randrange(max_len)))
            for _ in range(n)]


def _arrow_column(values: List[Optional[bytes]], layout: str) -> Column:
    pa = pytest.importorskip("pyarrow")
    from kproducer.spark._arrow import binary_column

    arr = pa.array(values, pa.large_binary() if layout == "large" else pa.binary())
    if layout == "string":
        arr = pa.array([None if v is None else v.hex() for v in values], pa.string())
    if layout == "sliced":
        arr = arr.slice(5, len(values) - 9)
    expect = [None if v is None else (v.encode() if isinstance(v, str) else v) for v in arr.to_pylist()]
    return binary_column(arr), expect


def _column(values: List[Optional[bytes]], layout: str) -> Column:
    if layout == "plain":
        return BinaryColumn.from_values(values), values
    return _arrow_column(values, layout)


LAYOUTS = ["plain", "arrow", "sliced", "large", "string"]
EXTENDS: Dict[str, Callable[..., int]] = {"py": _extend_columns_py}
if records_c is not None:
    EXTENDS["compiled"] = extend_columns


def _batches(fill: Callable[[Any, int], int], total: int, builder_type: Any) -> List[bytes]:
    """Batches of at most 2 KB filled by ``fill(builder, pos) -> next pos`` until ``total`` records are in."""
    out = []
    pos = 0
    while pos < total:
        b = builder_type(2048)
        nxt = fill(b, pos)
        assert nxt > pos
        pos = nxt
        out.append(b.build(7, 1, 3))
    return out


class _PyBuilder(_RecordsBufferPy):
    """The pure-Python records buffer with RecordBatchBuilder's build() (for the twin on a Python builder)."""

    build = RecordBatchBuilder.build
    records_section = RecordBatchBuilder.records_section
    records_view = RecordBatchBuilder.records_view
    compression = 0
    _section = None
    _section_count = -1
    __slots__ = ("__dict__",)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("impl", sorted(EXTENDS))
@pytest.mark.parametrize("which", ["range", "int32"])
def test_columns_encode_the_batches_the_per_row_path_encodes(layout: str, impl: str, which: str) -> None:
    vcol, values = _column(_data(1, 300, 0.1, 150), layout)
    kcol, keys = _column(_data(2, 300, 0.3, 12), layout)
    n = len(values)
    indices: Sequence[int] = range(n)
    if which == "int32":
        picked = sorted(random.Random(3).sample(range(n), n // 2))
        indices = row_indices(array.array("i", picked).tobytes())
    extend = EXTENDS[impl]
    for with_keys in (True, False):
        ks = keys if with_keys else None
        expected = _batches(lambda b, pos, ks=ks: b.extend(1_700_000_000_000, ks, values, None, indices, pos), len(indices),
                            RecordBatchBuilder)
        kc = kcol if with_keys else None
        got = _batches(lambda b, pos, kc=kc: extend(b, 1_700_000_000_000, kc, vcol, indices, pos),
                       len(indices), RecordBatchBuilder)
        assert got == expected and len(expected) > 3
        if impl == "py":  # the twin on the pure-Python records buffer, too
            assert _batches(lambda b, pos, kc=kc: extend(b, 1_700_000_000_000, kc, vcol, indices, pos), len(indices),
                            _PyBuilder) == expected


@pytest.mark.parametrize("layout", LAYOUTS)
def test_column_partitions_and_lengths_match_per_row_murmur2(layout: str) -> None:
    kcol, keys = _column(_data(4, 400, 0.2, 20), layout)
    for partitions in (1, 6, 13):
        groups: Dict[int, List[int]] = {}
        for i, k in enumerate(keys):
            if k is not None:
                groups.setdefault((murmur2(k) & 0x7FFFFFFF) % partitions, []).append(i)
        nulls = [i for i, k in enumerate(keys) if k is None]
        for fn in (column_partitions, _column_partitions_py):
            got, got_nulls = fn(kcol, partitions)
            assert [(p, list(row_indices(raw))) for p, raw in got] == list(groups.items())
            assert list(row_indices(got_nulls)) == nulls
    longest = max(len(k) for k in keys if k is not None)
    assert column_max_length(kcol) == _column_max_length_py(kcol) == longest
    assert [column_item(kcol, i) for i in range(len(keys))] == keys


@pytest.mark.parametrize("impl", sorted(EXTENDS))
def test_bad_columns_raise(impl: str) -> None:
    good = BinaryColumn.from_values([b"a", b"bc"])
    extend = EXTENDS[impl]
    short = good._replace(length=3)  # offsets for 2 rows only
    with pytest.raises(ValueError, match="too short"):
        extend(RecordBatchBuilder(1000), 0, None, short, range(1), 0)
    broken = good._replace(offsets=array.array("i", [0, 5, 1]).tobytes())  # beyond the data, then backwards
    with pytest.raises(ValueError, match="outside the data buffer"):
        extend(RecordBatchBuilder(1000), 0, None, broken, range(2), 0)
    with pytest.raises(IndexError):
        extend(RecordBatchBuilder(1000), 0, None, good, range(3), 0)
    for fn in (column_max_length, _column_max_length_py):
        with pytest.raises(ValueError):
            fn(broken)


# -- send_columns() vs send_batch() on producers (scripted broker) -----------------------------------

class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"t": [1] * 6})

    def producer(self, **settings: Any) -> Any:
        settings.setdefault("linger_ms", 60_000)
        settings.setdefault("batch_size", 4096)
        p = super().producer(**settings)
        p.partitions_for("t", timeout=5)
        p._admission.sticky._rng = random.Random(11)  # both producers make the same sticky choices
        return p


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())  # type: ignore[misc]


@pytest.fixture
def env2() -> Iterator[Env]:
    """A second scripted broker set (one producer per set)."""
    yield from producer_env(Env())  # type: ignore[misc]


Written = Dict[int, List[Tuple[int, Optional[bytes], Optional[bytes]]]]


def _written(env: Env) -> Tuple[Written, int]:
    """Each partition's records as the broker received them, (timestamp, key, value) in offset order, and the
    number of batches. (Where one partition's batches end depends on when the network thread drains them --
    a ready partition drains the others of its broker, as in Java -- so boundaries are compared by the encoder
    tests above, not here.)"""
    out: Written = {}
    batches = 0
    for req in env.selector.sent(m.PRODUCE):
        for (_t, part), batch in req.batches().items():
            out.setdefault(part, []).extend((r.timestamp, r.key, r.value) for r in batch.records)
            batches += 1
    return out, batches


@pytest.mark.parametrize("case", ["keyed", "keyed-null-keys", "unkeyed", "unkeyed-null-values", "partition"])
def test_send_columns_queues_what_send_batch_queues(env: Env, env2: Env, case: str) -> None:
    n = 2000
    values = _data(5, n, 0.05 if case == "unkeyed-null-values" else 0.0, 120)
    keys: Optional[List[Optional[bytes]]] = None
    if case.startswith("keyed"):
        keys = [None if case == "keyed-null-keys" and i % 7 == 0 else b"k%d" % (i % 50) for i in range(n)]
    partition = 4 if case == "partition" else None
    by_rows, by_columns = env.producer(), env2.producer()
    ts = 1_700_000_000_123
    futures = []
    for lo, hi in ((0, 700), (700, n)):  # two calls: the sticky state carries over
        a = by_rows.send_batch("t", values[lo:hi], keys[lo:hi] if keys else None, partition=partition,
                               timestamp_ms=ts)
        b = send_columns(by_columns, "t", BinaryColumn.from_values(values[lo:hi]),
                         BinaryColumn.from_values(keys[lo:hi]) if keys else None, partition, ts)
        assert b.count == hi - lo
        futures.append((a, b))
    by_rows.flush(30)
    by_columns.flush(30)
    for a, b in futures:  # each record's metadata, in input order
        assert [(md.partition, md.offset) for md in b.get(5)] == [(md.partition, md.offset) for md in a.get(5)]
        assert b.partition_offsets() == a.partition_offsets()
    expected, batches = _written(env)
    assert _written(env2)[0] == expected
    assert batches > 6 and sum(len(records) for records in expected.values()) == n
    if partition is not None:
        assert list(expected) == [partition]
    else:
        assert len(expected) > 1


def test_send_columns_refuses_what_send_batch_refuses(env: Env) -> None:
    p = env.producer(max_request_size=1000)
    values = BinaryColumn.from_values([b"ok", b"x" * 2000, b"ok"])
    with pytest.raises(MessageTooLargeError, match="Record 1 "):
        send_columns(p, "t", values)
    with pytest.raises(ValueError, match="not in the range"):
        send_columns(p, "t", BinaryColumn.from_values([b"a"]), partition=-1)
    with pytest.raises(ValueError, match="keys has 1 rows but values has 2"):
        send_columns(p, "t", BinaryColumn.from_values([b"a", b"b"]), BinaryColumn.from_values([b"k"]))
    with pytest.raises(TypeError, match="topic"):
        send_columns(p, "", BinaryColumn.from_values([b"a"]))
    p.flush(30)
    assert _written(env) == ({}, 0)
    assert send_columns(p, "t", BinaryColumn.from_values([])).count == 0


def test_send_columns_needs_a_producer_without_per_record_settings(env: Env) -> None:
    with_serializer = env.producer(value_serializer="str")
    with pytest.raises(ValueError, match="send_batch"):
        send_columns(with_serializer, "t", BinaryColumn.from_values([b"a"]))


@pytest.mark.skipif(records_c is None, reason="compiled accelerator not built")
def test_compiled_functions_check_their_arguments() -> None:
    col = BinaryColumn.from_values([b"a"])
    assert records_c is not None
    fn = records_c.extend_columns  # (extend_columns() itself hands a pure-Python builder to the twin)
    with pytest.raises(TypeError, match="BinaryColumn"):
        fn(RecordBatchBuilder(100), 0, None, (b"", b""), range(1), 0)
    with pytest.raises(TypeError, match="RecordsBuffer"):
        fn(object(), 0, None, col, range(1), 0)
    with pytest.raises(TypeError, match="int32"):
        fn(RecordBatchBuilder(100), 0, None, col, array.array("q", [0]), 0)
    with pytest.raises(ValueError, match="positive"):
        column_partitions(col, 0)
