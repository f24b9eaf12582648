"""The compiled accelerators (one per layer) must produce exactly what the pure-Python code produces; and how they
are loaded (kproducer/protocol/accel.py)."""
from __future__ import annotations

import logging
import math
import os
import random
import subprocess
import sys
from typing import List, Optional, Tuple

import crcmod.predefined  # type: ignore[import-untyped]
import pytest

from kproducer.producer.partitioner import _murmur2_py
from kproducer.protocol import accel
from kproducer.protocol.records import RecordBatchBuilder, read_batches

records_c = accel.records
send_c = accel.load(accel.MODULES["producer"])
compiled = pytest.mark.skipif(records_c is None or send_c is None, reason="compiled accelerator not built")

_crcmod = crcmod.predefined.mkPredefinedCrcFun("crc-32c")


def _random_record(rng: random.Random) -> Tuple[int, Optional[bytes], Optional[bytes], Optional[List[Tuple[str, Optional[bytes]]]]]:
    def blob() -> Optional[bytes]:
        r = rng.random()
        if r < 0.1:
            return None
        if r < 0.15:
            return b""
        return rng.randbytes(rng.choice([1, 7, 100, 300, 20000]))

    headers = None
    if rng.random() < 0.5:
        headers = [("k\u00e9y" * rng.randint(0, 3), blob()) for _ in range(rng.randint(0, 5))]
    ts = 1_700_000_000_000 + rng.randint(-10**9, 10**9)
    return ts, blob(), blob(), headers


@compiled
def test_the_compiled_bases_are_in_use() -> None:
    assert records_c is not None and send_c is not None
    from kproducer.producer.future import FutureRecordMetadata

    assert issubclass(RecordBatchBuilder, records_c.RecordsBuffer)
    assert issubclass(FutureRecordMetadata, send_c.FutureBase)


@compiled
def test_builder_bytes_identical() -> None:
    assert records_c is not None
    rng = random.Random(42)
    for _trial in range(30):
        cap = rng.choice([200, 16384, 1 << 20])
        py = RecordBatchBuilder(cap)
        c = RecordBatchBuilder(cap)
        for _ in range(rng.randint(1, 200)):
            rec = _random_record(rng)
            d_py = py._try_append_py(*rec)
            d_c = c.try_append(*rec)
            assert d_py == d_c
        assert py.build(7, 1, 3) == c.build(7, 1, 3)
        batch = read_batches(c.build())[0]
        assert batch.record_count == c.record_count


@compiled
def test_many_headers_fall_back_to_python() -> None:
    headers = [(f"h{i}", b"v") for i in range(40)]
    py = RecordBatchBuilder(1 << 20)
    c = RecordBatchBuilder(1 << 20)
    assert py._try_append_py(5, b"k", b"v", headers) == c.try_append(5, b"k", b"v", headers) == 0
    assert py.build() == c.build()


@compiled
def test_type_errors_match() -> None:
    b = RecordBatchBuilder(1 << 20)
    with pytest.raises(TypeError):
        b.try_append(1, "str key", b"v", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        b.try_append(1, None, b"v", [(b"bytes-key", b"v")])  # type: ignore[list-item]
    assert b.record_count == 0


@compiled
def test_murmur2_identical() -> None:
    assert records_c is not None
    rng = random.Random(7)
    for n in range(0, 70):
        data = rng.randbytes(n)
        assert records_c.murmur2(data) == _murmur2_py(data)
    assert records_c.murmur2(b"21") == -973932308


@compiled
def test_crc32c_identical() -> None:
    assert records_c is not None
    rng = random.Random(3)
    assert records_c.crc32c(b"123456789") == 0xE3069283
    for n in list(range(0, 40)) + [1000, 65537]:
        data = rng.randbytes(n)
        assert records_c.crc32c(data) == _crcmod(data)
        # continuing a CRC over a split buffer
        cut = n // 3
        assert records_c.crc32c(data[cut:], records_c.crc32c(data[:cut])) == _crcmod(data)
        # unaligned views
        assert records_c.crc32c(memoryview(data)[1:]) == _crcmod(data[1:])


@compiled
def test_crc32c_identical_around_the_interleaved_block_sizes() -> None:
    """The SSE4.2 path runs three streams over blocks of 3 x 2048 and 3 x 256 bytes and combines them:
    lengths at and around those sizes, from every alignment, continuing a CRC, give the reference CRC."""
    assert records_c is not None
    rng = random.Random(11)
    for n in (255, 256, 257, 767, 768, 769, 6143, 6144, 6145, 6144 + 768, 16384 - 61, 16384, 3 * 6144 + 7):
        data = rng.randbytes(n + 8)
        for offset in range(8):
            chunk = data[offset:offset + n]
            assert records_c.crc32c(memoryview(data)[offset:offset + n]) == _crcmod(chunk)
        assert records_c.crc32c(data[n // 2:], records_c.crc32c(data[:n // 2])) == _crcmod(data)


@compiled
def test_extend_matches_one_by_one_appends() -> None:
    rng = random.Random(11)
    records = [_random_record(rng) for _ in range(300)]
    keys = [r[1] for r in records]
    values = [r[2] for r in records]
    headers = [r[3] for r in records]
    order = list(range(300))
    rng.shuffle(order)
    for cap in (300, 16384, 1 << 22):
        ts = 1_700_000_000_000
        c = RecordBatchBuilder(cap)
        py = RecordBatchBuilder(cap)
        pos_c = c.extend(ts, keys, values, headers, order, 5)
        pos_py = 5
        while pos_py < len(order):
            i = order[pos_py]
            if py._try_append_py(ts, keys[i], values[i], headers[i]) < 0:
                break
            pos_py += 1
        assert pos_c == pos_py
        assert c.build() == py.build()
    # keys and headers may be None; a range works as the index sequence
    b = RecordBatchBuilder(1 << 20)
    assert b.extend(5, None, [b"a", None, b"c"], None, range(3), 0) == 3
    assert [r.value for r in read_batches(b.build())[0].records] == [b"a", None, b"c"]


@compiled
def test_builder_bytes_identical_into_reused_buffers() -> None:
    """Both builders write into given buffers (dirty, as the BufferPool hands them out) in place: same bytes,
    same storage sizes."""
    assert records_c is not None
    rng = random.Random(7)
    for _trial in range(30):
        cap = rng.choice([300, 16384, 1 << 18])
        room = max(0, cap - 61)
        py = RecordBatchBuilder(cap, buffer=bytearray(rng.randbytes(room)))
        c = RecordBatchBuilder(cap, buffer=bytearray(rng.randbytes(room)))
        for _ in range(rng.randint(1, 200)):
            rec = _random_record(rng)
            assert py._try_append_py(*rec) == c.try_append(*rec)
        assert py._len == c._len and len(py._buf) == len(c._buf)
        assert py.build(7, 1, 3) == c.build(7, 1, 3)


@compiled
def test_bytes_longest_matches_its_python_twin() -> None:
    from kproducer.producer.admission import _bytes_longest_py, bytes_longest

    assert bytes_longest is records_c.bytes_longest
    rng = random.Random(7)
    cases: List[object] = [
        [], (), [None], [b""], [b"a", None, b"abc"], (b"xy", b"z"), [b"a"] * 3 + [b"b" * 300],
        [b"a", "text"], [b"a", bytearray(b"abc")], [memoryview(b"ab")], [None, 1], ["str"],
        range(0),  # a sequence that is neither a list nor a tuple: converted
        [rng.randbytes(rng.randint(0, 2000)) if rng.random() < 0.9 else None for _ in range(500)],
    ]
    for items in cases:
        assert records_c.bytes_longest(items) == _bytes_longest_py(items), items  # type: ignore[arg-type]
    assert records_c.bytes_longest([b"a", None, b"abc"]) == 3
    assert records_c.bytes_longest([b"abc", "x"]) == -1
    with pytest.raises(TypeError, match="takes a sequence"):
        records_c.bytes_longest(3)


@compiled
def test_batch_header_matches_its_python_twin() -> None:
    """RecordsBuffer.batch_header (the 61-byte header of a produce request's batch, CRC included) makes the bytes
    its twin does, over records of every shape, for each producer state, and both refuse the same out-of-range
    fields with ValueError."""
    assert records_c is not None
    from kproducer.protocol.records import _RecordsBufferPy

    rng = random.Random(7)
    states = [(0, -1, -1, -1), (0x10, 0, 0, 0), (0, 2**63 - 1, 32767, 2**31 - 1), (0x10, 4000, 3, 2**31 - 5),
              (-32768, -(2**63), -32768, -(2**31))]
    for trial in range(40):
        cap = rng.choice([200, 16384])
        storage = rng.choice([None, 16384])  # the builder's own storage, or a pool-sized one
        c = records_c.RecordsBuffer(cap, None if storage is None else bytearray(storage))
        py = _RecordsBufferPy(cap, None if storage is None else bytearray(storage))
        for _ in range(rng.randint(0 if trial == 0 else 1, 60)):
            rec = _random_record(rng)
            assert c.try_append(*rec) == py._try_append_py(*rec)
        for state in states:
            head = c.batch_header(*state)
            assert head == py.batch_header(*state) and len(head) == 61
            if trial and state[0] == 0:
                # the header and the records are the batch build() makes, and a reader finds its CRC right
                whole = head + bytes(c._buf[: c._len])
                assert whole == _copy_into_builder(c, cap).build(*state[1:])
                assert read_batches(whole, verify_crc=True)[0].record_count == c._count
    for bad in [(0, 2**63, 0, 0), (0, -(2**63) - 1, 0, 0), (0, 1, 2**15, 0), (0, 1, -(2**15) - 1, 0),
                (0, 1, 0, 2**31), (0, 1, 0, -(2**31) - 1), (2**15, 1, 0, 0)]:
        for buffer in (c, py):
            with pytest.raises(ValueError, match="out of range"):
                buffer.batch_header(*bad)


def _copy_into_builder(src: "object", cap: int) -> RecordBatchBuilder:
    """A builder holding the same records as ``src`` (a RecordsBuffer), copied field by field."""
    b = RecordBatchBuilder(cap)
    b._buf = bytearray(src._buf[: src._len])  # type: ignore[attr-defined]
    b._len = src._len  # type: ignore[attr-defined]
    b._count = src._count  # type: ignore[attr-defined]
    b._base_ts = src._base_ts  # type: ignore[attr-defined]
    b._max_ts = src._max_ts  # type: ignore[attr-defined]
    return b


@compiled
def test_produce_request_stats_match_their_python_twin() -> None:
    """The figures of a produce request's batches for the metrics (record_produce_request): the same values and
    types from the compiled function as from its twin, over plain, compressed, built, empty and multi-topic
    batches."""
    assert send_c is not None
    from kproducer.producer.batch import ProducerBatch
    from kproducer.producer.metrics import _request_stats_py

    rng = random.Random(11)
    for trial in range(30):
        batches = []
        for i in range(rng.randint(0 if trial == 0 else 1, 8)):
            compression = rng.choice([0, 0, 1])
            b = ProducerBatch(rng.choice(["a", "b", "c\u00e9"]), i, RecordBatchBuilder(16384, compression=compression),
                              1000.0 + rng.random() * 50)
            for _ in range(rng.randint(0, 30)):
                b.try_append(1_700_000_000_000, None, rng.randbytes(rng.randint(0, 300)), None, None, 1000.0)
            if compression:
                b.compression_ratio = rng.choice([0.0, 0.5])
            if rng.random() < 0.3 and b.record_count:
                b.records()  # built: its size is exact
            b.drained_ms = 1000.0 + rng.random() * 100  # (sometimes before created_ms: counted as 0)
            batches.append(b)
        compiled = send_c.produce_request_stats(batches)
        twin = _request_stats_py(batches)
        assert compiled == twin
        assert [type(x) for x in compiled[:-1]] == [type(x) for x in twin[:-1]]
        assert {t: [type(x) for x in v] for t, v in compiled[-1].items()} == \
            {t: [type(x) for x in v] for t, v in twin[-1].items()}
    with pytest.raises(TypeError):
        send_c.produce_request_stats(None)


@compiled
def test_bytearray_exported_matches_its_python_twin() -> None:
    assert send_c is not None
    from kproducer.producer.buffer_pool import _in_use_py

    buf = bytearray(b"abc")
    assert not send_c.bytearray_exported(buf) and not _in_use_py(buf)
    view = memoryview(buf)
    assert send_c.bytearray_exported(buf) and _in_use_py(buf)
    sub = view[1:]
    view.release()
    assert send_c.bytearray_exported(buf) and _in_use_py(buf)  # the slice still holds it
    sub.release()
    assert not send_c.bytearray_exported(buf) and not _in_use_py(buf)
    assert buf == b"abc"  # (the twin's probe leaves it as it was)
    empty = bytearray()
    with memoryview(empty):
        assert not send_c.bytearray_exported(empty) and not _in_use_py(empty)  # never a pool buffer
    with pytest.raises(TypeError):
        send_c.bytearray_exported(b"bytes")


@compiled
def test_sensor_recording_matches_its_python_twin() -> None:
    """metrics.Sensor records in C (SensorBase): the same samples, windows, purges and lifetime totals as its
    twin over random values and times (window rolls, idle gaps longer than the monitored window)."""
    assert send_c is not None
    from kproducer.producer.metrics import MetricConfig, Sensor, _SensorPy

    assert issubclass(Sensor, send_c.SensorBase)

    class PySensor(_SensorPy):  # Sensor's reading half over the twin's recording
        __slots__ = ()
        avg, max, rate, count_rate, _window_ms = Sensor.avg, Sensor.max, Sensor.rate, Sensor.count_rate, \
            Sensor._window_ms

    rng = random.Random(5)
    for samples, window in [(1, 100.0), (2, 1000.0), (3, 50.0)]:
        config = MetricConfig(samples, window)
        c, py = Sensor(config), PySensor(config)
        now = 1_000_000.0
        for _ in range(500):
            now += rng.choice([0.0, 1.0, 17.5, window / 2, window, 4 * window])
            op = rng.random()
            if op < 0.4:
                value = rng.choice([0, 1, 7, 16384, 2.5, -3.0])
                c.record(value, now)
                py.record(value, now)
            elif op < 0.9:
                count = rng.randint(0, 9)
                total, largest = rng.choice([(count * 3, 5), (count * 0.5, 0.75), (0, -1.0)])
                c.record_many(total, count, largest, now)
                py.record_many(total, count, largest, now)
            else:
                c._purge(now)
                py._purge(now)
            assert c._samples == py._samples and c._current == py._current
            assert [type(x) for s in c._samples for x in s] == [type(x) for s in py._samples for x in s]
            assert c.total == py.total and c.count == py.count and type(c.count) is type(py.count)
        for read in ("avg", "max", "rate", "count_rate"):  # the reading half over both
            a, b = getattr(c, read)(now), getattr(py, read)(now)
            assert a == b or (math.isnan(a) and math.isnan(b))  # (NaN when nothing is live)
    with pytest.raises(ValueError, match="samples"):
        Sensor(MetricConfig(0, 100.0))


# ------------------------------------------------------------------------------------------------------------
# Loading: one compiled module per layer (kproducer/protocol/accel.py)


@compiled
def test_each_layer_has_its_own_compiled_module() -> None:
    """The types live in the module of the layer they serve, and producer/_send.c reaches the record encoder
    through protocol/_records.c's C API capsule (never the reverse)."""
    assert records_c is not None and send_c is not None
    aio_c = accel.load(accel.MODULES["aio"])
    netio_c = accel.load(accel.MODULES["network"])
    assert aio_c is not None and netio_c is not None
    assert records_c.RecordsBuffer.__module__ == "kproducer.protocol._records"
    assert send_c.FastSend.__module__ == send_c.SendMethod.__module__ == "kproducer.producer._send"
    assert aio_c.AioSendMethod.__module__ == "kproducer._aio"
    assert type(records_c._C_API).__name__ == "PyCapsule"
    assert not hasattr(records_c, "FastSend") and not hasattr(records_c, "AioFuture")
    assert accel.implementations() == dict.fromkeys(accel.MODULES, "compiled")
    assert accel.IMPLEMENTATION == "compiled"


def test_a_missing_module_leaves_its_layer_on_python_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(accel, "FORCED_PURE", False)
    monkeypatch.setattr(accel, "_loaded", {accel.MODULES["protocol"]: object()})  # (the protocol layer: built)
    monkeypatch.setitem(accel.MODULES, "producer", "kproducer.producer._not_built")
    monkeypatch.setitem(accel.MODULES, "aio", "kproducer._not_built_either")
    with caplog.at_level(logging.DEBUG, logger=accel.__name__):
        assert accel.load(accel.MODULES["producer"]) is None
        assert accel.load(accel.MODULES["producer"]) is None  # (cached: not tried, nor logged, again)
        assert accel.load(accel.MODULES["aio"]) is None
    told = [r for r in caplog.records if r.name == accel.__name__]
    assert [r.levelno for r in told] == [logging.INFO, logging.DEBUG]  # once at INFO, whatever else is missing
    assert "kproducer.producer._not_built" in told[0].getMessage()
    assert "pure-Python" in told[0].getMessage() and "No module named" in told[0].getMessage()
    impls = accel.implementations()
    assert impls["protocol"] == "compiled" and impls["producer"] == impls["aio"] == "pure-python"
    assert accel.IMPLEMENTATION.startswith("mixed (protocol compiled, ")


def test_pure_python_forced_loads_nothing_and_logs_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(accel, "FORCED_PURE", True)
    monkeypatch.setattr(accel, "_loaded", {})
    with caplog.at_level(logging.DEBUG, logger=accel.__name__):
        assert all(accel.load(name) is None for name in accel.MODULES.values())
    assert not [r for r in caplog.records if r.name == accel.__name__]
    assert accel.IMPLEMENTATION == "pure-python"
    assert not hasattr(accel, "speedups")  # (the single module of old is gone)


def test_the_environment_variable_forces_every_layer_onto_python() -> None:
    code = ("import kproducer, kproducer.aio\nfrom kproducer.protocol import accel\n"
            "from kproducer.producer import kafka_producer\n"
            "print(accel.IMPLEMENTATION, kafka_producer._send_c is None, type(kafka_producer.Producer.send).__name__)")
    for value, expected in (("1", "pure-python True function"), ("yes", "pure-python True function")):
        env = {**os.environ, "KPRODUCER_PURE_PYTHON": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("\n")[0] == expected


@compiled
def test_without_the_protocol_module_the_producer_module_stays_out_too() -> None:
    """producer/_send.c needs protocol/_records.c's C API: with _records not there (as if not built), both
    layers run their twins, the others stay compiled, and a producer works."""
    code = ("import sys\nsys.modules['kproducer.protocol._records'] = None  # (import raises ImportError)\n"
            "import kproducer, kproducer.aio\nfrom kproducer.protocol import accel\n"
            "from kproducer.producer.future import FutureRecordMetadata\n"
            "from kproducer.protocol.records import RecordBatchBuilder\n"
            "print(sorted(accel.implementations().items()))\n"
            "print(FutureRecordMetadata.__mro__[1].__name__, RecordBatchBuilder.__mro__[1].__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "KPRODUCER_PURE_PYTHON"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == str([("aio", "compiled"), ("network", "compiled"), ("producer", "pure-python"),
                            ("protocol", "pure-python")])
    assert lines[1] == "_FutureFieldsPy _RecordsBufferPy"
