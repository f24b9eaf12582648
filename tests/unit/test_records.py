"""Tests for kproducer.protocol.records (RecordBatch v2 builder and reader)."""

from __future__ import annotations

import importlib.util
import logging
import random
import struct
import sys
from typing import Any, List, Optional, Sequence, Tuple

import pytest

from kproducer.protocol import compression, records
from kproducer.protocol.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
)
from kproducer.protocol.errors import ProtocolError
from kproducer.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    RECORD_BATCH_OVERHEAD,
    Record,
    RecordBatchBuilder,
    build_control_batch,
    crc32c,
    decode_varint,
    decode_varlong,
    encode_varint,
    read_batch_header,
    read_batches,
    set_base_offset,
)

OPTIONAL_MODULES = {CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4.frame", CODEC_ZSTD: "zstandard"}
ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]

Hdrs = Optional[Sequence[Tuple[str, Optional[bytes]]]]
Rec = Tuple[int, Optional[bytes], Optional[bytes], Hdrs]


def require(codec: int) -> None:
    module = OPTIONAL_MODULES.get(codec)
    if module is not None:
        pytest.importorskip(module)


def make_batch(
    recs: Sequence[Rec],
    codec: int = CODEC_NONE,
    capacity: int = 1 << 30,
    **build_args: Any,
) -> bytes:
    builder = RecordBatchBuilder(capacity, codec)
    for i, (ts, key, value, headers) in enumerate(recs):
        assert builder.try_append(ts, key, value, headers) == i
    return builder.build(**build_args)


def raw_batch(
    section: bytes,
    record_count: int,
    attributes: int = 0,
    last_offset_delta: Optional[int] = None,
    base_timestamp: int = 1000,
) -> bytes:
    """Assemble a batch around a hand-made records section, with a correct CRC."""
    if last_offset_delta is None:
        last_offset_delta = record_count - 1
    body = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_timestamp,
            base_timestamp,
            -1,
            -1,
            -1,
            record_count,
        )
        + section
    )
    crc = crc32c(body)
    return struct.pack(">qiibI", 0, 49 + len(section), -1, 2, crc) + body


def vi(n: int) -> bytes:
    return encode_varint(n)


def raw_record(body: bytes) -> bytes:
    return vi(len(body)) + body


SIMPLE_BODY = b"\x00" + vi(0) + vi(0) + vi(1) + b"k" + vi(1) + b"v" + vi(0)


# --------------------------------------------------------------------------------------------
# CRC32C and varints
# --------------------------------------------------------------------------------------------


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
    assert crc32c(bytearray(b"123456789")) == 0xE3069283
    assert crc32c(memoryview(b"_123456789")[1:]) == 0xE3069283


def test_crc_extension_flag_is_reported() -> None:
    assert isinstance(records.CRC_EXTENSION_IN_USE, bool)
    mod = sys.modules["crcmod.crcmod"]
    assert records.CRC_EXTENSION_IN_USE == bool(getattr(mod, "_usingExtension", False))


def test_warning_logged_when_crc_extension_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # load a private copy of the module with crcmod's extension flag forced off and without
    # kproducer's own accelerator (which replaces crcmod when it is compiled)
    import kproducer.protocol.accel as accel

    monkeypatch.setattr(accel, "records", None)
    monkeypatch.setattr(sys.modules["crcmod.crcmod"], "_usingExtension", False, raising=False)
    spec = importlib.util.spec_from_file_location(
        "kproducer.protocol._records_probe", records.__file__
    )
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, probe)  # dataclasses look their module up
    with caplog.at_level(logging.WARNING):
        spec.loader.exec_module(probe)
    assert probe.CRC_EXTENSION_IN_USE is False
    assert any(
        "C extension" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records
    )


@pytest.mark.parametrize(
    "value,encoded",
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-2, b"\x03"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (8191, b"\xfe\x7f"),
        (8192, b"\x80\x80\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_vectors(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))
    assert decode_varlong(b"xx" + encoded, 2) == (value, 2 + len(encoded))


def test_varlong_extremes_round_trip() -> None:
    for value in (2**63 - 1, -(2**63), 2**40, -(2**40) - 3, 1_700_000_000_000):
        encoded = encode_varint(value)
        assert len(encoded) <= 10
        assert decode_varlong(encoded) == (value, len(encoded))


def test_varint_round_trip_range() -> None:
    for value in list(range(-20000, 20000, 7)) + [16383, 16384, -16384, -16385]:
        encoded = encode_varint(value)
        assert decode_varint(bytearray(encoded)) == (value, len(encoded))


def test_varint_overflow_and_truncation() -> None:
    with pytest.raises(ProtocolError, match="overflow"):
        decode_varint(b"\xff\xff\xff\xff\xff\x01")
    decode_varlong(b"\xff\xff\xff\xff\xff\x01")  # fine as a varlong
    with pytest.raises(ProtocolError, match="overflow"):
        decode_varlong(b"\xff" * 10 + b"\x01")
    with pytest.raises(ProtocolError, match="truncated"):
        decode_varint(b"\x80\x80")
    with pytest.raises(ProtocolError, match="truncated"):
        decode_varint(b"")


# --------------------------------------------------------------------------------------------
# Byte-exact vector
# --------------------------------------------------------------------------------------------


def test_byte_exact_vector() -> None:
    builder = RecordBatchBuilder(1000)
    assert builder.try_append(1000, b"k", b"v", None) == 0
    assert builder.try_append(995, None, b"", [("h", None)]) == 1
    data = builder.build(producer_id=0x1234, producer_epoch=5, base_sequence=7)

    # record 0: attrs 0, tsDelta 0, offsetDelta 0, key len 1 "k", value len 1 "v", 0 headers
    rec0 = "00" "00" "00" "02" "6b" "02" "76" "00"  # 8 bytes -> length varint 0x10
    # record 1: attrs 0, tsDelta -5 (zigzag 9), offsetDelta 1, null key, empty value,
    # 1 header: key len 1 "h", null value
    rec1 = "00" "09" "02" "01" "00" "02" "02" "68" "01"  # 9 bytes -> length varint 0x12
    section = "10" + rec0 + "12" + rec1
    crc_covered = (
        "0000"  # attributes
        "00000001"  # lastOffsetDelta
        "00000000000003e8"  # baseTimestamp 1000
        "00000000000003e8"  # maxTimestamp 1000
        "0000000000001234"  # producerId
        "0005"  # producerEpoch
        "00000007"  # baseSequence
        "00000002"  # recordCount
    ) + section
    expected = bytes.fromhex(
        "0000000000000000"  # baseOffset
        "00000044"  # batchLength = 49 + 19
        "ffffffff"  # partitionLeaderEpoch
        "02"  # magic
        "6e3ea3d6" + crc_covered  # crc
    )
    assert crc32c(bytes.fromhex(crc_covered)) == 0x6E3EA3D6
    assert data == expected
    assert builder.estimated_size() == len(expected) == 80

    (batch,) = read_batches(data)
    assert batch.crc == 0x6E3EA3D6
    assert batch.records[1] == Record(1, -5, None, b"", [("h", None)], 0, 1, 995)


def test_empty_builder_builds_empty_batch() -> None:
    builder = RecordBatchBuilder(100)
    assert builder.is_empty() and builder.record_count == 0
    assert builder.first_timestamp == -1 and builder.max_timestamp == -1
    data = builder.build()
    assert len(data) == RECORD_BATCH_OVERHEAD
    (batch,) = read_batches(data)
    assert batch.record_count == 0 and batch.records == [] and batch.last_offset_delta == -1


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------


def varied_records() -> List[Rec]:
    rnd = random.Random(42)
    base = 1_700_000_000_000
    recs: List[Rec] = [
        (base, b"key", b"value", None),
        (base + 1, None, None, None),
        (base + 2, b"", b"", []),
        (base - 50, b"neg-delta", b"x", None),  # negative timestamp delta
        (base + 3, b"k" * 8, b"v" * 100, [("h1", b"v1"), ("h2", None), ("", b"")]),
        (base + 4, None, b"\x00\xff" * 10, [("ключ-ü-🚀", b"unicode key"), ("n", None)]),
        (base + 100_000, b"big-delta", b"y", None),  # delta beyond the varint table
        (base - 10**9, b"very-negative", None, None),
        (base + 5, b"large", bytes(rnd.getrandbits(8) for _ in range(70_000)), None),
        (base + 6, b"k" * 20_000, b"z" * 300, [("hk" * 5000, b"hv" * 9000)]),
        (0, b"epoch-zero", b"v", None),
    ]
    # bytes-like keys and values other than bytes are accepted too
    other: Any = (base + 7, bytearray(b"bytearray-key"), memoryview(b"mv-value"), None)
    recs.append(other)
    return recs


def expected_headers(headers: Hdrs) -> List[Tuple[str, Optional[bytes]]]:
    return [(k, None if v is None else bytes(v)) for k, v in (headers or [])]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_all_codecs(codec: int) -> None:
    require(codec)
    recs = varied_records()
    data = make_batch(recs, codec, producer_id=77, producer_epoch=3, base_sequence=1000)
    (batch,) = read_batches(data)
    base_ts = recs[0][0]
    assert batch.compression == codec
    assert batch.magic == 2
    assert batch.base_offset == 0
    assert batch.partition_leader_epoch == -1
    assert batch.producer_id == 77 and batch.producer_epoch == 3 and batch.base_sequence == 1000
    assert batch.record_count == len(recs) == len(batch.records)
    assert batch.last_offset_delta == len(recs) - 1
    assert batch.base_timestamp == base_ts
    assert batch.max_timestamp == max(r[0] for r in recs)
    assert batch.timestamp_type == 0
    assert not batch.is_transactional and not batch.is_control
    assert batch.batch_length == len(data) - 12 and batch.size == len(data)
    for i, ((ts, key, value, headers), rec) in enumerate(zip(recs, batch.records)):
        assert rec.offset_delta == rec.offset == i
        assert rec.timestamp == ts
        assert rec.timestamp_delta == ts - base_ts
        assert rec.key == (None if key is None else bytes(key))
        assert rec.value == (None if value is None else bytes(value))
        assert rec.headers == expected_headers(headers)
        assert rec.attributes == 0


def test_round_trip_many_small_records_beyond_varint_table() -> None:
    n = 20_000  # offset deltas past the precomputed table
    builder = RecordBatchBuilder(1 << 30)
    for i in range(n):
        assert builder.try_append(5000 + i, None, b"%d" % i, None) == i
    (batch,) = read_batches(builder.build())
    assert batch.record_count == n
    assert [r.value for r in batch.records[-3:]] == [b"19997", b"19998", b"19999"]
    assert batch.records[-1].timestamp == 5000 + n - 1
    assert batch.max_timestamp == 5000 + n - 1


def test_transactional_flag() -> None:
    data = make_batch(
        [(1, b"k", b"v", None)],
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    header = read_batch_header(data)
    assert header.is_transactional and not header.is_control
    assert header.attributes == 0x10


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_attributes_carry_codec(codec: int) -> None:
    require(codec)
    data = make_batch([(1, b"k", b"v" * 500, None)], codec, is_transactional=True)
    assert read_batch_header(data).attributes == codec | 0x10


@pytest.mark.parametrize("control_type", [CONTROL_ABORT, CONTROL_COMMIT])
def test_control_batch_parses_as_records(control_type: int) -> None:
    data = build_control_batch(
        control_type, 12345, producer_id=9, producer_epoch=2, coordinator_epoch=4
    )
    (batch,) = read_batches(data)
    assert batch.is_control and batch.is_transactional
    assert batch.producer_id == 9 and batch.producer_epoch == 2 and batch.base_sequence == -1
    (rec,) = batch.records
    assert rec.key == struct.pack(">hh", 0, control_type)
    assert rec.value == struct.pack(">hi", 0, 4)
    assert rec.timestamp == 12345


def test_log_append_time_batches_use_max_timestamp() -> None:
    section = raw_record(b"\x00" + vi(0) + vi(0) + vi(-1) + vi(-1) + vi(0)) + raw_record(
        b"\x00" + vi(3) + vi(1) + vi(-1) + vi(-1) + vi(0)
    )
    body = struct.pack(">hiqqqhii", 0x08, 1, 100, 999, -1, -1, -1, 2) + section
    data = struct.pack(">qiibI", 0, 49 + len(section), -1, 2, crc32c(body)) + body
    (batch,) = read_batches(data)
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch.records] == [999, 999]


# --------------------------------------------------------------------------------------------
# kafka-python's independent decoder/encoder (tests only)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_decodes_our_batches(codec: int) -> None:
    require(codec)
    default_records = pytest.importorskip("kafka.record.default_records")
    recs = [r for r in varied_records()]
    data = make_batch(
        recs, codec, producer_id=123, producer_epoch=4, base_sequence=55, is_transactional=True
    )
    theirs = default_records.DefaultRecordBatch(bytearray(data))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert theirs.base_offset == 0
    assert theirs.producer_id == 123
    assert theirs.producer_epoch == 4
    assert theirs.base_sequence == 55
    assert theirs.is_transactional
    assert theirs.records_count == len(recs)
    assert theirs.last_offset_delta == len(recs) - 1
    assert theirs.max_timestamp == max(r[0] for r in recs)
    decoded = list(theirs)
    assert len(decoded) == len(recs)
    for i, ((ts, key, value, headers), rec) in enumerate(zip(recs, decoded)):
        assert rec.offset == i
        assert rec.timestamp == ts
        assert rec.key == (None if key is None else bytes(key))
        assert rec.value == (None if value is None else bytes(value))
        assert list(rec.headers) == expected_headers(headers)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_we_decode_kafka_python_batches(codec: int) -> None:
    require(codec)
    default_records = pytest.importorskip("kafka.record.default_records")
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=42,
        producer_epoch=1,
        base_sequence=10,
        batch_size=1 << 20,
    )
    recs = [
        (1000 + i * 3 - (i % 2) * 7, b"k%d" % i, b"value-%d" % i * 10, [("h", b"%d" % i)])
        for i in range(50)
    ]
    for i, (ts, key, value, headers) in enumerate(recs):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    data = bytes(builder.build())
    (batch,) = read_batches(data)
    assert batch.producer_id == 42 and batch.base_sequence == 10 and batch.compression == codec
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records] == [
        (i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(recs)
    ]
    # and our encoding of the same records is byte-identical when uncompressed, except for
    # partitionLeaderEpoch (not covered by the CRC), which the Java client sets to -1 and
    # kafka-python to 0
    if codec == CODEC_NONE:
        ours = make_batch(recs, producer_id=42, producer_epoch=1, base_sequence=10)
        assert ours[12:16] == b"\xff\xff\xff\xff"
        assert ours[:12] == data[:12] and ours[16:] == data[16:]


# --------------------------------------------------------------------------------------------
# Capacity and size estimates
# --------------------------------------------------------------------------------------------


def test_capacity_limits_appends() -> None:
    capacity = 1000
    builder = RecordBatchBuilder(capacity)
    value = b"v" * 50
    accepted = 0
    while True:
        before = builder.estimated_size()
        result = builder.try_append(1, b"key", value, None)
        if result == -1:
            assert builder.estimated_size() == before  # nothing changed
            break
        assert result == accepted
        accepted += 1
        assert builder.estimated_size() <= capacity
    assert accepted == builder.record_count > 1
    # the rejected record would have pushed the size past capacity
    one = RecordBatchBuilder(1 << 20)
    one.try_append(1, b"key", value, None)
    assert builder.estimated_size() + (one.estimated_size() - RECORD_BATCH_OVERHEAD) > capacity
    data = builder.build()
    assert len(data) == builder.estimated_size()
    assert read_batches(data)[0].record_count == accepted


def test_rejected_record_leaves_builder_unchanged() -> None:
    builder = RecordBatchBuilder(200)
    assert builder.try_append(100, b"a", b"x" * 50, None) == 0
    before = builder.build()
    assert builder.try_append(50, b"b", b"y" * 200, [("h", b"z")]) == -1
    assert builder.record_count == 1
    assert builder.first_timestamp == 100 and builder.max_timestamp == 100
    assert builder.build() == before
    assert builder.try_append(150, b"c", b"small", None) == 1
    assert builder.max_timestamp == 150


def test_first_record_always_accepted_even_if_too_big() -> None:
    builder = RecordBatchBuilder(100)
    assert builder.try_append(1, b"k", b"x" * 10_000, None) == 0
    assert builder.estimated_size() > 100
    assert builder.try_append(1, None, b"", None) == -1
    (batch,) = read_batches(builder.build())
    assert batch.records[0].value == b"x" * 10_000


def test_exact_fit_is_accepted() -> None:
    probe = RecordBatchBuilder(1 << 20)
    probe.try_append(1, b"k", b"v", None)
    probe.try_append(1, b"k", b"v", None)
    builder = RecordBatchBuilder(probe.estimated_size())
    assert builder.try_append(1, b"k", b"v", None) == 0
    assert builder.try_append(1, b"k", b"v", None) == 1
    assert builder.estimated_size() == builder.capacity
    assert builder.try_append(1, b"k", b"v", None) == -1


@pytest.mark.parametrize(
    "key,value,headers",
    [
        (None, None, None),
        (b"", b"", []),
        (b"k" * 8, b"v" * 100, None),
        (b"k" * 20_000, b"v" * 1_000_000, [("h" * 300, b"x" * 70_000), ("ü", None)]),
        (None, b"v", [("a", None)] * 50),
    ],
)
def test_estimate_record_size_is_an_upper_bound(
    key: Optional[bytes], value: Optional[bytes], headers: Hdrs
) -> None:
    estimate = RecordBatchBuilder.estimate_record_size(key, value, headers)
    for ts in (0, 2**62):  # worst case timestamp delta is in the second record
        builder = RecordBatchBuilder(1 << 30)
        builder.try_append(0, None, None, None)
        before = builder.estimated_size()
        builder.try_append(ts, key, value, headers)
        record_size = builder.estimated_size() - before
        assert RECORD_BATCH_OVERHEAD + record_size <= estimate
    payload = len(key or b"") + len(value or b"")
    payload += sum(len(k.encode()) + len(v or b"") for k, v in headers or [])
    assert estimate - payload < 100 + 10 * len(headers or [])


def test_timestamp_properties() -> None:
    builder = RecordBatchBuilder(1 << 20)
    for ts in (500, 700, 200, 650):
        builder.try_append(ts, None, b"x", None)
    assert builder.first_timestamp == 500
    assert builder.max_timestamp == 700
    assert builder.last_offset_delta == 3
    header = read_batch_header(builder.build())
    assert header.base_timestamp == 500 and header.max_timestamp == 700


# --------------------------------------------------------------------------------------------
# Rebuilds
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_rebuild_with_new_producer_state_has_valid_crc(
    codec: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(codec)
    calls = []
    real_compress = compression.compress

    def counting_compress(c: int, data: bytes, level: Optional[int] = None) -> bytes:
        calls.append(c)
        return real_compress(c, data, level)

    monkeypatch.setattr(records, "compress", counting_compress)
    builder = RecordBatchBuilder(1 << 20, codec)
    for i in range(100):
        builder.try_append(1000 + i, b"key-%d" % i, b"value " * 20, None)
    first = builder.build(producer_id=1, producer_epoch=0, base_sequence=0)
    second = builder.build(producer_id=1, producer_epoch=1, base_sequence=0)
    third = builder.build(producer_id=2, producer_epoch=7, base_sequence=500, is_transactional=True)
    assert len({first, second, third}) == 3
    assert (
        first[RECORD_BATCH_OVERHEAD:]
        == second[RECORD_BATCH_OVERHEAD:]
        == third[RECORD_BATCH_OVERHEAD:]
    )
    assert len(calls) == (0 if codec == CODEC_NONE else 1)  # records section compressed once
    for data, (pid, epoch, seq) in ((first, (1, 0, 0)), (second, (1, 1, 0)), (third, (2, 7, 500))):
        (batch,) = read_batches(data)  # verifies the CRC
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, seq)
        assert [r.key for r in batch.records] == [b"key-%d" % i for i in range(100)]
    assert read_batch_header(third).is_transactional


def test_append_after_build_invalidates_cache() -> None:
    builder = RecordBatchBuilder(1 << 20, CODEC_GZIP)
    builder.try_append(1, b"a", b"1", None)
    first = builder.build()
    builder.try_append(2, b"b", b"2", None)
    second = builder.build()
    assert [r.key for r in read_batches(first)[0].records] == [b"a"]
    assert [r.key for r in read_batches(second)[0].records] == [b"a", b"b"]


def test_build_rejects_out_of_range_header_fields() -> None:
    builder = RecordBatchBuilder(100)
    builder.try_append(1, None, b"x", None)
    with pytest.raises(ValueError):
        builder.build(producer_id=2**63)
    with pytest.raises(ValueError):
        builder.build(producer_epoch=2**15)
    with pytest.raises(ValueError):
        builder.build(base_sequence=2**31)


def test_builder_rejects_unknown_codec() -> None:
    with pytest.raises(ValueError):
        RecordBatchBuilder(100, 5)


def test_builder_reports_missing_codec_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compression, "_modules", {})
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(compression.UnsupportedCodecError):
        RecordBatchBuilder(100, CODEC_ZSTD)


def test_bad_header_types_raise_type_error() -> None:
    builder = RecordBatchBuilder(1000)
    with pytest.raises(TypeError):
        builder.try_append(1, None, b"v", [(b"bytes-key", b"v")])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        builder.try_append(1, None, b"v", [("only-one",)])  # type: ignore[list-item]
    assert builder.record_count == 0


# --------------------------------------------------------------------------------------------
# Header-only parse, base offsets, several batches
# --------------------------------------------------------------------------------------------


def test_read_batch_header_fields() -> None:
    data = make_batch(
        [(10, b"a", b"1", None), (30, b"b", b"2", None), (20, b"c", b"3", None)],
        producer_id=8,
        producer_epoch=2,
        base_sequence=2**31 - 2,
    )
    header = read_batch_header(b"junk" + data, 4)
    assert header.base_offset == 0
    assert header.batch_length == len(data) - 12
    assert header.size == len(data)
    assert header.partition_leader_epoch == -1
    assert header.magic == 2
    assert header.crc == crc32c(data[21:])
    assert header.attributes == 0
    assert header.last_offset_delta == 2
    assert (header.base_timestamp, header.max_timestamp) == (10, 30)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (8, 2, 2**31 - 2)
    assert header.record_count == 3
    assert header.last_sequence == 0  # wraps past int32 max
    assert header.last_offset == 2


def test_set_base_offset_keeps_crc_valid() -> None:
    data = make_batch([(1, b"a", b"1", None), (2, b"b", b"2", None)])
    moved = set_base_offset(data, 1_000_000)
    assert moved[8:] == data[8:]
    (batch,) = read_batches(moved)
    assert batch.base_offset == 1_000_000
    assert [r.offset for r in batch.records] == [1_000_000, 1_000_001]
    assert batch.last_offset == 1_000_001
    assert set_base_offset(bytearray(data), 5)[:8] == struct.pack(">q", 5)


def test_set_base_offset_of_second_batch() -> None:
    a = make_batch([(1, b"a", b"1", None)])
    b = make_batch([(2, b"b", b"2", None), (3, b"c", b"3", None)])
    both = set_base_offset(set_base_offset(a + b, 10), 11, pos=len(a))
    batches = read_batches(both)
    assert [[r.offset for r in x.records] for x in batches] == [[10], [11, 12]]
    with pytest.raises(ProtocolError):
        set_base_offset(a[:40], 1)


def test_concatenated_batches_and_partial_tail() -> None:
    batches = [make_batch([(i, b"k%d" % i, b"v" * i, None)]) for i in range(1, 4)]
    data = b"".join(batches)
    parsed = read_batches(data)
    assert [b.records[0].key for b in parsed] == [b"k1", b"k2", b"k3"]
    assert read_batches(b"") == []
    for cut in (1, 10, 30, 61, len(batches[2]) - 1):
        partial = data[: len(data) - cut]
        with pytest.raises(ProtocolError):
            read_batches(partial)
        assert [b.records[0].key for b in read_batches(partial, allow_partial_tail=True)] == [
            b"k1",
            b"k2",
        ]
    # memoryview / bytearray input
    assert len(read_batches(memoryview(data))) == 3
    assert len(read_batches(bytearray(data))) == 3


# --------------------------------------------------------------------------------------------
# Malformed input
# --------------------------------------------------------------------------------------------


def valid_batch() -> bytes:
    return make_batch(
        [(1000, b"key", b"value", [("h", b"hv")]), (1001, None, b"second", None)],
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
    )


def test_every_truncation_raises_protocol_error() -> None:
    data = valid_batch()
    for length in range(len(data)):
        with pytest.raises(ProtocolError):
            read_batches(data[:length] or b"\x00")
        if length:
            assert read_batches(data[:length], allow_partial_tail=True) == []
    with pytest.raises(ProtocolError, match="truncated"):
        read_batch_header(data[:30])


def test_negative_batch_length() -> None:
    data = bytearray(valid_batch())
    struct.pack_into(">i", data, 8, -5)
    with pytest.raises(ProtocolError, match="negative batchLength"):
        read_batches(bytes(data))
    with pytest.raises(ProtocolError, match="negative batchLength"):
        read_batches(bytes(data), allow_partial_tail=True)


def test_batch_length_past_end() -> None:
    data = bytearray(valid_batch())
    struct.pack_into(">i", data, 8, len(data))
    with pytest.raises(ProtocolError, match="truncated"):
        read_batch_header(bytes(data))


def test_batch_length_too_small() -> None:
    data = bytearray(valid_batch())
    struct.pack_into(">i", data, 8, 30)
    with pytest.raises(ProtocolError, match="minimum"):
        read_batches(bytes(data))


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_unsupported_magic(magic: int) -> None:
    data = bytearray(valid_batch())
    data[16] = magic
    with pytest.raises(ProtocolError, match="magic"):
        read_batches(bytes(data))


def test_bad_crc_reports_expected_and_actual() -> None:
    data = bytearray(valid_batch())
    good_crc = crc32c(bytes(data[21:]))
    data[-3] ^= 0x01
    bad_crc = crc32c(bytes(data[21:]))
    with pytest.raises(ProtocolError) as info:
        read_batches(bytes(data))
    message = str(info.value)
    assert "CRC" in message
    assert f"0x{good_crc:08x}" in message and f"0x{bad_crc:08x}" in message
    # without verification the corrupted byte is simply decoded
    read_batches(bytes(data), verify_crc=False)
    with pytest.raises(ProtocolError, match="CRC"):
        read_batch_header(bytes(data))
    read_batch_header(bytes(data), verify_crc=False)


def test_crc_covers_header_fields_after_magic() -> None:
    data = bytearray(valid_batch())
    struct.pack_into(">q", data, 45, 99)  # producerId
    with pytest.raises(ProtocolError, match="CRC"):
        read_batches(bytes(data))


def test_record_length_mismatch_too_long() -> None:
    body = SIMPLE_BODY + b"\x00"  # one stray byte inside the record
    with pytest.raises(ProtocolError, match="record length mismatch"):
        read_batches(raw_batch(raw_record(body), 1))


def test_record_length_mismatch_too_short() -> None:
    # length claims fewer bytes than the fields need
    section = vi(len(SIMPLE_BODY) - 2) + SIMPLE_BODY
    with pytest.raises(ProtocolError):
        read_batches(raw_batch(section, 1))


def test_record_length_past_section_end() -> None:
    section = vi(100) + SIMPLE_BODY
    with pytest.raises(ProtocolError, match="past the end"):
        read_batches(raw_batch(section, 1))


def test_negative_record_length() -> None:
    with pytest.raises(ProtocolError, match="negative record length"):
        read_batches(raw_batch(vi(-3) + SIMPLE_BODY, 1))


def test_varint_overflow_in_record() -> None:
    section = b"\xff\xff\xff\xff\xff\xff\x01" + SIMPLE_BODY
    with pytest.raises(ProtocolError, match="overflow"):
        read_batches(raw_batch(section, 1))
    # an 11-byte timestamp delta varlong inside a record whose length covers it
    body = b"\x00" + b"\xff" * 10 + b"\x01" + vi(0) + vi(-1) + vi(-1) + vi(0)
    with pytest.raises(ProtocolError, match="overflow"):
        read_batches(raw_batch(raw_record(body), 1))


@pytest.mark.parametrize("which", ["key", "value"])
@pytest.mark.parametrize("length", [-2, -7, -1000])
def test_negative_key_or_value_length(which: str, length: int) -> None:
    if which == "key":
        body = b"\x00" + vi(0) + vi(0) + vi(length) + vi(-1) + vi(0)
    else:
        body = b"\x00" + vi(0) + vi(0) + vi(-1) + vi(length) + vi(0)
    with pytest.raises(ProtocolError, match=f"invalid {which} length"):
        read_batches(raw_batch(raw_record(body), 1))


def test_key_longer_than_record() -> None:
    body = b"\x00" + vi(0) + vi(0) + vi(50) + b"abc" + vi(-1) + vi(0)
    with pytest.raises(ProtocolError, match="record length mismatch"):
        read_batches(raw_batch(raw_record(body), 1))


def test_record_count_larger_than_records() -> None:
    section = raw_record(SIMPLE_BODY) * 2
    with pytest.raises(ProtocolError, match="record count mismatch"):
        read_batches(raw_batch(section, 3))


def test_record_count_smaller_than_records() -> None:
    section = raw_record(SIMPLE_BODY) * 2
    with pytest.raises(ProtocolError, match="record count mismatch"):
        read_batches(raw_batch(section, 1))


def test_huge_record_count_does_not_hang() -> None:
    section = raw_record(SIMPLE_BODY)
    with pytest.raises(ProtocolError, match="record count mismatch"):
        read_batches(raw_batch(section, 2**31 - 1, last_offset_delta=0))


def test_negative_record_count() -> None:
    with pytest.raises(ProtocolError, match="negative recordCount"):
        read_batches(raw_batch(b"", -1))


def test_negative_header_count() -> None:
    body = b"\x00" + vi(0) + vi(0) + vi(-1) + vi(-1) + vi(-1)
    with pytest.raises(ProtocolError, match="header count"):
        read_batches(raw_batch(raw_record(body), 1))


def test_huge_header_count_does_not_hang() -> None:
    body = b"\x00" + vi(0) + vi(0) + vi(-1) + vi(-1) + vi(2**31 - 1) + vi(1) + b"h" + vi(-1)
    with pytest.raises(ProtocolError):
        read_batches(raw_batch(raw_record(body), 1))


def test_bad_header_key() -> None:
    null_key = b"\x00" + vi(0) + vi(0) + vi(-1) + vi(-1) + vi(1) + vi(-1) + vi(-1)
    with pytest.raises(ProtocolError, match="header key length"):
        read_batches(raw_batch(raw_record(null_key), 1))
    bad_utf8 = b"\x00" + vi(0) + vi(0) + vi(-1) + vi(-1) + vi(1) + vi(2) + b"\xff\xfe" + vi(-1)
    with pytest.raises(ProtocolError, match="UTF-8"):
        read_batches(raw_batch(raw_record(bad_utf8), 1))
    bad_value = b"\x00" + vi(0) + vi(0) + vi(-1) + vi(-1) + vi(1) + vi(1) + b"h" + vi(-4)
    with pytest.raises(ProtocolError, match="header value length"):
        read_batches(raw_batch(raw_record(bad_value), 1))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codec(codec: int) -> None:
    data = raw_batch(raw_record(SIMPLE_BODY), 1, attributes=codec)
    with pytest.raises(ProtocolError, match="codec"):
        read_batches(data)
    assert read_batch_header(data).compression == codec  # the header alone is still readable


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_corrupt_compressed_records(codec: int) -> None:
    require(codec)
    data = raw_batch(b"this is not compressed data at all", 1, attributes=codec)
    with pytest.raises(ProtocolError):
        read_batches(data)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_compressed_records_with_bad_content(codec: int) -> None:
    require(codec)
    section = compression.compress(codec, raw_record(SIMPLE_BODY) + b"\x07")
    with pytest.raises(ProtocolError, match="record count mismatch"):
        read_batches(raw_batch(section, 1, attributes=codec))


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_fuzzed_batches_raise_only_protocol_error(codec: int) -> None:
    require(codec)
    rnd = random.Random(1000 + codec)
    good = make_batch(varied_records()[:6], codec)
    for _ in range(300):
        damaged = bytearray(good)
        for _ in range(rnd.randint(1, 3)):
            damaged[rnd.randrange(len(damaged))] = rnd.getrandbits(8)
        if rnd.random() < 0.3:
            del damaged[rnd.randrange(len(damaged)) :]
        for verify in (True, False):
            try:
                read_batches(bytes(damaged), verify_crc=verify)
            except ProtocolError:
                pass


# -- writing in place into a given (pooled) buffer ---------------------------------------------------------


def _fill(builder: RecordBatchBuilder, n: int) -> int:
    appended = 0
    for i in range(n):
        key = None if i % 3 == 0 else b"k%d" % i
        value = None if i % 7 == 0 else bytes([i % 251]) * (i * 13 % 300)
        headers = [("h", b"x"), ("e", None)] if i % 4 == 0 else None
        if builder.try_append(1_700_000_000_000 + i, key, value, headers) < 0:
            break
        appended += 1
    return appended


def test_records_are_written_in_place_into_a_given_buffer_whatever_it_held() -> None:
    fresh = RecordBatchBuilder(4096)
    dirty_buf = bytearray(b"\xff" * (4096 - RECORD_BATCH_OVERHEAD))  # a reused buffer: old bytes in it
    dirty = RecordBatchBuilder(4096, buffer=dirty_buf)
    assert _fill(fresh, 200) == _fill(dirty, 200) > 5
    assert dirty._buf is dirty_buf and len(dirty_buf) == 4096 - RECORD_BATCH_OVERHEAD  # not grown, not replaced
    assert dirty.uncompressed_records_size() == dirty._len < len(dirty_buf)
    assert dirty.estimated_size() == fresh.estimated_size() <= 4096
    assert dirty.build(5, 1, 9) == fresh.build(5, 1, 9)
    assert bytes(dirty.records_view()) == fresh.records_section()


def test_a_record_larger_than_the_given_buffer_grows_it() -> None:
    buf = bytearray(100)
    b = RecordBatchBuilder(161, buffer=buf)
    assert b.try_append(1, None, b"v" * 1000) == 0  # the first record is accepted whatever its size
    assert b._buf is buf and len(buf) >= b._len > 1000
    assert b.try_append(2, None, b"w") == -1  # and the batch is full
    [parsed] = read_batches(b.build())
    assert [r.value for r in parsed.records] == [b"v" * 1000]


def test_a_builder_without_a_buffer_grows_its_own_storage_with_its_records() -> None:
    b = RecordBatchBuilder(16384)
    while b.try_append(1, None, b"x" * 100) >= 0:
        assert len(b._buf) == b._len  # appended as to any bytearray
    assert b.estimated_size() <= 16384


def test_a_detached_buffer_leaves_the_builder_unable_to_append() -> None:
    buf = bytearray(1000)
    b = RecordBatchBuilder(1061, buffer=buf)
    b.try_append(1, None, b"v")
    assert b.detach_buffer() is buf
    with pytest.raises(ValueError, match="released"):
        b.try_append(2, None, b"w")
    with pytest.raises(ValueError, match="released"):
        b.records_view()


def test_the_buffer_must_be_a_bytearray() -> None:
    with pytest.raises(TypeError, match="bytearray"):
        RecordBatchBuilder(1000, buffer=b"bytes")  # type: ignore[arg-type]
