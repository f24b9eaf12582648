"""Kafka wire primitives: round trips, byte-exact vectors, malformed input."""
from __future__ import annotations

import math
import struct
import time
import uuid
from typing import Any, Callable, List, Optional, Tuple

import pytest

from kproducer.protocol import primitives as p
from kproducer.protocol.errors import ProtocolError
from kproducer.protocol.primitives import Reader

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

Writer = Callable[[bytearray, Any], None]
ReadFn = Callable[[Reader], Any]


def enc(writer: Writer, value: Any) -> bytes:
    out = bytearray()
    writer(out, value)
    return bytes(out)


def roundtrip(writer: Writer, read: ReadFn, value: Any) -> Any:
    data = enc(writer, value)
    r = Reader(data)
    got = read(r)
    assert r.remaining() == 0, f"{r.remaining()} bytes left after reading {value!r}"
    assert r.pos == len(data)
    return got


# --------------------------------------------------------------------------------------------
# round trips

INT_CASES = [
    ("int8", p.write_int8, Reader.int8, [-128, -1, 0, 1, 127]),
    ("int16", p.write_int16, Reader.int16, [-32768, -1, 0, 1, 255, 256, 32767]),
    ("uint16", p.write_uint16, Reader.uint16, [0, 1, 0x7FFF, 0x8000, 0xFFFF]),
    ("int32", p.write_int32, Reader.int32, [I32_MIN, -1, 0, 1, 65536, I32_MAX]),
    ("uint32", p.write_uint32, Reader.uint32, [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]),
    ("int64", p.write_int64, Reader.int64, [I64_MIN, -1, 0, 1, 1 << 40, I64_MAX]),
]


@pytest.mark.parametrize("name,writer,read,values", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_fixed_width_int_roundtrip(name: str, writer: Writer, read: ReadFn, values: List[int]) -> None:
    width = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8}[name]
    for v in values:
        assert len(enc(writer, v)) == width
        assert roundtrip(writer, read, v) == v


def test_fixed_width_vectors_are_big_endian() -> None:
    assert enc(p.write_int8, -1) == b"\xff"
    assert enc(p.write_int16, 0x0102) == b"\x01\x02"
    assert enc(p.write_int16, -2) == b"\xff\xfe"
    assert enc(p.write_uint16, 0xFFFE) == b"\xff\xfe"
    assert enc(p.write_int32, 0x01020304) == b"\x01\x02\x03\x04"
    assert enc(p.write_int32, I32_MIN) == b"\x80\x00\x00\x00"
    assert enc(p.write_uint32, 0xFFFFFFFF) == b"\xff\xff\xff\xff"
    assert enc(p.write_int64, 1) == b"\x00" * 7 + b"\x01"
    assert enc(p.write_int64, I64_MIN) == b"\x80" + b"\x00" * 7
    assert enc(p.write_float64, 1.0) == bytes.fromhex("3ff0000000000000")


def test_float64_roundtrip() -> None:
    for v in [0.0, -0.0, 1.5, -2.25, 1e300, -1e-300, math.inf, -math.inf, 5e-324]:
        got = roundtrip(p.write_float64, Reader.float64, v)
        assert got == v and math.copysign(1.0, got) == math.copysign(1.0, v)
    assert math.isnan(roundtrip(p.write_float64, Reader.float64, math.nan))


def test_bool_roundtrip_and_vectors() -> None:
    assert enc(p.write_bool, True) == b"\x01"
    assert enc(p.write_bool, False) == b"\x00"
    assert roundtrip(p.write_bool, Reader.bool, True) is True
    assert roundtrip(p.write_bool, Reader.bool, False) is False
    # any non-zero byte reads as true
    assert Reader(b"\x02").bool() is True


def test_uuid_roundtrip_and_vectors() -> None:
    u = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
    assert enc(p.write_uuid, u) == bytes.fromhex("0123456789abcdef0123456789abcdef")
    assert roundtrip(p.write_uuid, Reader.uuid, u) == u
    u4 = uuid.uuid4()
    assert roundtrip(p.write_uuid, Reader.uuid, u4) == u4
    zero = uuid.UUID(int=0)
    assert roundtrip(p.write_uuid, Reader.uuid, zero) == zero
    assert enc(p.write_uuid, None) == bytes(16)  # None writes the zero uuid


# varints ----------------------------------------------------------------------------------

VARINT_VALUES = [0, 1, -1, 2, -2, 63, -64, 64, -65, 8191, -8192, 8192, 1 << 20, -(1 << 20),
                 I32_MAX - 1, I32_MAX, I32_MIN, I32_MIN + 1]
VARLONG_VALUES = VARINT_VALUES + [I32_MAX + 1, I32_MIN - 1, 1 << 56, -(1 << 56), I64_MAX, I64_MIN,
                                  I64_MAX - 1, I64_MIN + 1]


@pytest.mark.parametrize("v", VARINT_VALUES)
def test_varint_roundtrip(v: int) -> None:
    assert roundtrip(p.write_varint, Reader.varint, v) == v
    data = p.encode_varint(v)
    assert p.decode_varint(data, 0) == (v, len(data))
    assert len(data) <= 5


@pytest.mark.parametrize("v", VARLONG_VALUES)
def test_varlong_roundtrip(v: int) -> None:
    assert roundtrip(p.write_varlong, Reader.varlong, v) == v
    data = p.encode_varlong(v)
    assert p.decode_varlong(data, 0) == (v, len(data))
    assert len(data) <= 10


@pytest.mark.parametrize("v", [0, 1, 127, 128, 255, 300, 16383, 16384, (1 << 21) - 1, 1 << 21,
                               (1 << 28) - 1, 1 << 28, 0xFFFFFFFF])
def test_unsigned_varint_roundtrip(v: int) -> None:
    assert roundtrip(p.write_unsigned_varint, Reader.unsigned_varint, v) == v
    data = p.encode_unsigned_varint(v)
    assert p.decode_unsigned_varint(data, 0) == (v, len(data))


def test_varint_vectors() -> None:
    # zigzag: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, 2 -> 4 ...
    assert p.encode_varint(0) == b"\x00"
    assert p.encode_varint(-1) == b"\x01"
    assert p.encode_varint(1) == b"\x02"
    assert p.encode_varint(-2) == b"\x03"
    assert p.encode_varint(63) == b"\x7e"
    assert p.encode_varint(-64) == b"\x7f"
    assert p.encode_varint(64) == b"\x80\x01"
    assert p.encode_varint(150) == b"\xac\x02"
    assert p.encode_varint(I32_MAX) == b"\xfe\xff\xff\xff\x0f"
    assert p.encode_varint(I32_MIN) == b"\xff\xff\xff\xff\x0f"
    assert p.encode_varlong(-1) == b"\x01"
    assert p.encode_varlong(I64_MAX) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert p.encode_varlong(I64_MIN) == b"\xff" * 9 + b"\x01"
    assert p.encode_unsigned_varint(0) == b"\x00"
    assert p.encode_unsigned_varint(127) == b"\x7f"
    assert p.encode_unsigned_varint(128) == b"\x80\x01"
    assert p.encode_unsigned_varint(300) == b"\xac\x02"
    assert p.encode_unsigned_varint(0xFFFFFFFF) == b"\xff\xff\xff\xff\x0f"
    assert p.zigzag32(-1) == 1 and p.zigzag32(1) == 2 and p.zigzag32(I32_MIN) == 0xFFFFFFFF
    assert p.zigzag64(I64_MIN) == 0xFFFFFFFFFFFFFFFF and p.zigzag64(I64_MAX) == 0xFFFFFFFFFFFFFFFE
    assert p.unzigzag(3) == -2 and p.unzigzag(4) == 2


def test_varint_decode_from_offset_and_end() -> None:
    data = b"\xff\xac\x02\x01"
    assert p.decode_unsigned_varint(data, 1) == (300, 3)
    assert p.decode_varint(data, 3) == (-1, 4)
    with pytest.raises(ProtocolError):
        p.decode_unsigned_varint(data, 1, end=2)  # continuation byte cut by end
    with pytest.raises(ProtocolError):
        p.decode_unsigned_varint(b"\xac", 0, end=99)  # an end beyond the buffer must not IndexError
    assert p.decode_unsigned_varint(data, 1, end=99) == (300, 3)


# strings ----------------------------------------------------------------------------------

STRINGS = ["", "a", "abc", "héllo wörld", "日本語テキスト", "emoji \U0001F600 \u0000 nul", "x" * 300]


@pytest.mark.parametrize("s", STRINGS)
def test_string_roundtrips(s: str) -> None:
    assert roundtrip(p.write_string, Reader.string, s) == s
    assert roundtrip(p.write_nullable_string, Reader.nullable_string, s) == s
    assert roundtrip(p.write_compact_string, Reader.compact_string, s) == s
    assert roundtrip(p.write_compact_nullable_string, Reader.compact_nullable_string, s) == s


def test_null_strings_roundtrip() -> None:
    assert roundtrip(p.write_nullable_string, Reader.nullable_string, None) is None
    assert roundtrip(p.write_compact_nullable_string, Reader.compact_nullable_string, None) is None


def test_string_vectors() -> None:
    assert enc(p.write_string, "abc") == b"\x00\x03abc"
    assert enc(p.write_string, "") == b"\x00\x00"
    assert enc(p.write_nullable_string, None) == b"\xff\xff"
    assert enc(p.write_nullable_string, "ab") == b"\x00\x02ab"
    assert enc(p.write_compact_string, "abc") == b"\x04abc"
    assert enc(p.write_compact_string, "") == b"\x01"
    assert enc(p.write_compact_nullable_string, None) == b"\x00"
    assert enc(p.write_compact_nullable_string, "abc") == b"\x04abc"
    # length counts UTF-8 bytes, not characters
    assert enc(p.write_string, "é") == b"\x00\x02\xc3\xa9"
    assert enc(p.write_compact_string, "é") == b"\x03\xc3\xa9"
    s127 = "x" * 127  # compact length 128 needs a two-byte varint
    assert enc(p.write_compact_string, s127) == b"\x80\x01" + s127.encode()


def test_string_length_limit() -> None:
    s = "x" * 0x7FFF
    assert roundtrip(p.write_string, Reader.string, s) == s
    assert roundtrip(p.write_compact_string, Reader.compact_string, s) == s
    with pytest.raises(ValueError):
        enc(p.write_string, "x" * 0x8000)
    with pytest.raises(ValueError):
        enc(p.write_compact_string, "x" * 0x8000)
    with pytest.raises(ValueError):
        enc(p.write_string, "é" * 0x4000)  # 32768 UTF-8 bytes


# bytes ------------------------------------------------------------------------------------

BYTES = [b"", b"\x00", b"abc", bytes(range(256)), b"\xff" * 1000]


@pytest.mark.parametrize("b", BYTES, ids=lambda b: f"len{len(b)}")
def test_bytes_roundtrips(b: bytes) -> None:
    assert roundtrip(p.write_bytes, Reader.bytes_, b) == b
    assert roundtrip(p.write_nullable_bytes, Reader.nullable_bytes, b) == b
    assert roundtrip(p.write_compact_bytes, Reader.compact_bytes, b) == b
    assert roundtrip(p.write_compact_nullable_bytes, Reader.compact_nullable_bytes, b) == b
    # bytearray and memoryview inputs write the same bytes
    assert enc(p.write_bytes, bytearray(b)) == enc(p.write_bytes, b)
    assert enc(p.write_compact_bytes, memoryview(b)) == enc(p.write_compact_bytes, b)


def test_null_bytes_roundtrip_and_vectors() -> None:
    assert roundtrip(p.write_nullable_bytes, Reader.nullable_bytes, None) is None
    assert roundtrip(p.write_compact_nullable_bytes, Reader.compact_nullable_bytes, None) is None
    assert enc(p.write_nullable_bytes, None) == b"\xff\xff\xff\xff"
    assert enc(p.write_compact_nullable_bytes, None) == b"\x00"
    assert enc(p.write_bytes, b"ab") == b"\x00\x00\x00\x02ab"
    assert enc(p.write_bytes, b"") == b"\x00\x00\x00\x00"
    assert enc(p.write_compact_bytes, b"ab") == b"\x03ab"
    assert enc(p.write_compact_bytes, b"") == b"\x01"


def test_memoryview_of_wider_items_writes_its_bytes() -> None:
    mv = memoryview(struct.pack(">4i", 1, 2, 3, 4)).cast("i")  # 4 items, 16 bytes
    assert enc(p.write_bytes, mv) == b"\x00\x00\x00\x10" + mv.tobytes()
    assert enc(p.write_compact_bytes, mv) == b"\x11" + mv.tobytes()


def test_reader_accepts_memoryview_and_bytearray() -> None:
    data = enc(p.write_compact_string, "abc") + enc(p.write_int32, 7)
    for buf in (memoryview(data), bytearray(data)):
        r = Reader(buf)  # type: ignore[arg-type]
        assert r.compact_string() == "abc"
        assert r.int32() == 7
        assert r.remaining() == 0


# arrays -----------------------------------------------------------------------------------


def write_int32_array(out: bytearray, values: Optional[List[int]], compact: bool) -> None:
    p.write_array_length(out, None if values is None else len(values), compact)
    for v in values or ():
        p.write_int32(out, v)


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("values", [[], [0], [1, -1, I32_MAX, I32_MIN], list(range(200))])
def test_array_roundtrip(compact: bool, values: List[int]) -> None:
    out = bytearray()
    write_int32_array(out, values, compact)
    r = Reader(bytes(out))
    assert r.array(Reader.int32, compact) == values
    assert r.remaining() == 0


def test_array_of_strings_roundtrip() -> None:
    out = bytearray()
    items = ["a", "", "日本"]
    p.write_array_length(out, len(items), True)
    for s in items:
        p.write_compact_string(out, s)
    assert Reader(bytes(out)).array(Reader.compact_string, compact=True) == items


def test_array_vectors_and_null_arrays() -> None:
    out = bytearray()
    write_int32_array(out, [1, 2], False)
    assert bytes(out) == b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x02"
    out = bytearray()
    write_int32_array(out, [1, 2], True)
    assert bytes(out) == b"\x03" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x02"
    out = bytearray()
    write_int32_array(out, [], True)
    assert bytes(out) == b"\x01"
    out = bytearray()
    write_int32_array(out, None, True)
    assert bytes(out) == b"\x00"
    out = bytearray()
    write_int32_array(out, None, False)
    assert bytes(out) == b"\xff\xff\xff\xff"
    # null arrays are read as -1 when nullable, and rejected otherwise
    assert Reader(b"\x00").array_length(compact=True, nullable=True) == -1
    assert Reader(b"\xff\xff\xff\xff").array_length(compact=False, nullable=True) == -1
    with pytest.raises(ProtocolError):
        Reader(b"\x00").array_length(compact=True, nullable=False)
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xff").array(Reader.int32)


# tagged fields ----------------------------------------------------------------------------


def test_tagged_fields_roundtrip_and_vectors() -> None:
    assert enc(p.write_tagged_fields, []) == b"\x00"
    fields = [(5, b"\x01\x02"), (0, b""), (300, b"x" * 130)]
    data = enc(p.write_tagged_fields, fields)
    # written sorted by tag: count, then (tag, size, data) each
    assert data == (b"\x03" + b"\x00\x00" + b"\x05\x02\x01\x02" + b"\xac\x02" + b"\x82\x01" + b"x" * 130)
    r = Reader(data)
    assert r.tagged_fields() == sorted(fields)
    assert r.remaining() == 0
    with pytest.raises(ValueError):
        enc(p.write_tagged_fields, [(1, b""), (1, b"a")])


def test_tagged_fields_out_of_order_rejected() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\x02" + b"\x03\x00" + b"\x01\x00").tagged_fields()
    with pytest.raises(ProtocolError):
        Reader(b"\x02" + b"\x01\x00" + b"\x01\x00").tagged_fields()  # duplicate tag


# --------------------------------------------------------------------------------------------
# malformed input


def _composite() -> Tuple[bytes, Callable[[Reader], List[Any]], List[Any]]:
    """A buffer holding one of every primitive, and a function reading it back in order."""
    u = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    steps: List[Tuple[Writer, ReadFn, Any]] = [
        (p.write_int8, Reader.int8, -5),
        (p.write_int16, Reader.int16, -300),
        (p.write_uint16, Reader.uint16, 65000),
        (p.write_int32, Reader.int32, -70000),
        (p.write_uint32, Reader.uint32, 4000000000),
        (p.write_int64, Reader.int64, -(1 << 40)),
        (p.write_float64, Reader.float64, 2.5),
        (p.write_bool, Reader.bool, True),
        (p.write_uuid, Reader.uuid, u),
        (p.write_varint, Reader.varint, -12345),
        (p.write_varlong, Reader.varlong, I64_MIN),
        (p.write_unsigned_varint, Reader.unsigned_varint, 300),
        (p.write_string, Reader.string, "héllo"),
        (p.write_nullable_string, Reader.nullable_string, None),
        (p.write_nullable_string, Reader.nullable_string, "x"),
        (p.write_compact_string, Reader.compact_string, "日本"),
        (p.write_compact_nullable_string, Reader.compact_nullable_string, None),
        (p.write_compact_nullable_string, Reader.compact_nullable_string, ""),
        (p.write_bytes, Reader.bytes_, b"\x00\x01\x02"),
        (p.write_nullable_bytes, Reader.nullable_bytes, None),
        (p.write_compact_bytes, Reader.compact_bytes, b"abc"),
        (p.write_compact_nullable_bytes, Reader.compact_nullable_bytes, None),
        (lambda o, v: write_int32_array(o, v, False), lambda r: r.array(Reader.int32), [1, 2, 3]),
        (lambda o, v: write_int32_array(o, v, True), lambda r: r.array(Reader.int32, True), [4, 5]),
        (p.write_tagged_fields, Reader.tagged_fields, [(0, b"ab"), (7, b"")]),
        (p.write_compact_string, Reader.compact_string, ""),
    ]
    out = bytearray()
    for w, _r, v in steps:
        w(out, v)

    def read_all(r: Reader) -> List[Any]:
        return [rd(r) for _w, rd, _v in steps]

    return bytes(out), read_all, [v for _w, _r, v in steps]


def test_composite_roundtrip() -> None:
    data, read_all, values = _composite()
    r = Reader(data)
    assert read_all(r) == values
    assert r.remaining() == 0


def test_truncated_at_every_position_raises_protocol_error() -> None:
    data, read_all, _values = _composite()
    deadline = time.monotonic() + 10
    for n in range(len(data)):
        # as a shorter buffer, and as a Reader whose end cuts the full buffer
        for r in (Reader(data[:n]), Reader(data, 0, n)):
            with pytest.raises(ProtocolError):
                read_all(r)
        assert time.monotonic() < deadline


def test_reader_end_beyond_buffer_still_raises_protocol_error() -> None:
    data, read_all, _values = _composite()
    for n in range(0, len(data), 7):
        with pytest.raises(ProtocolError):
            read_all(Reader(data[:n], 0, len(data) + 100))


def test_negative_lengths_rejected() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xfe" + b"ab").string()  # -2
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff").string()  # null where a non-nullable string is expected
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xfe").nullable_string()
    with pytest.raises(ProtocolError):
        Reader(b"\x00").compact_string()  # compact null where non-nullable
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xfe" + b"ab").bytes_()
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xff").bytes_()
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xfe").nullable_bytes()
    with pytest.raises(ProtocolError):
        Reader(b"\x00").compact_bytes()
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xfe").array(Reader.int8)
    with pytest.raises(ProtocolError):
        Reader(b"\x80\x00\x00\x00").array_length(False, True)
    with pytest.raises(ProtocolError):
        Reader(b"ab").raw(-1)


def test_varint_too_long_rejected() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\x80\x80\x80\x80\x80\x01").unsigned_varint()
    with pytest.raises(ProtocolError):
        Reader(b"\xff" * 5 + b"\x01").varint()
    with pytest.raises(ProtocolError):
        Reader(b"\xff" * 10 + b"\x01").varlong()
    with pytest.raises(ProtocolError):
        p.decode_varint(b"\xff" * 6, 0)
    with pytest.raises(ProtocolError):
        Reader(b"\xff" * 100).varlong()  # never loops past the limit


def test_varint_overflow_rejected() -> None:
    # five bytes, but more than 32 bits of payload
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xff\x1f").varint()
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xff\x1f").unsigned_varint()
    # ten bytes, but more than 64 bits
    with pytest.raises(ProtocolError):
        Reader(b"\xff" * 9 + b"\x7f").varlong()
    with pytest.raises(ProtocolError):
        Reader(b"\x81").unsigned_varint()  # continuation bit and nothing after


def test_array_count_bigger_than_remaining_data() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\x00\x00\x00\x05" + b"\x01\x02").array(Reader.int8)
    with pytest.raises(ProtocolError):
        Reader(b"\x7f\xff\xff\xff").array(Reader.int32)  # must not try to allocate/loop 2^31 times
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xff\x0f").array(Reader.int32, compact=True)
    with pytest.raises(ProtocolError):
        Reader(b"\x06\x01\x02").array(Reader.int8, compact=True)
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\x0f").tagged_fields()  # huge tagged-field count


def test_lengths_bigger_than_remaining_data() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\x00\x05abc").string()
    with pytest.raises(ProtocolError):
        Reader(b"\x7f\xff\xff\xff" + b"abc").bytes_()
    with pytest.raises(ProtocolError):
        Reader(b"\x10abc").compact_string()
    with pytest.raises(ProtocolError):
        Reader(b"\x01\x00\x05ab").tagged_fields()


def test_invalid_utf8_rejected() -> None:
    for bad in (b"\xff", b"\xc3", b"\xc3\x28", b"\xed\xa0\x80", b"abc\x80"):
        with pytest.raises(ProtocolError):
            Reader(struct.pack(">h", len(bad)) + bad).string()
        with pytest.raises(ProtocolError):
            Reader(struct.pack(">h", len(bad)) + bad).nullable_string()
        with pytest.raises(ProtocolError):
            Reader(p.encode_unsigned_varint(len(bad) + 1) + bad).compact_string()
        with pytest.raises(ProtocolError):
            Reader(p.encode_unsigned_varint(len(bad) + 1) + bad).compact_nullable_string()


@pytest.mark.parametrize("writer,bad", [
    (p.write_int8, 128), (p.write_int8, -129),
    (p.write_int16, 1 << 15), (p.write_int16, -(1 << 15) - 1),
    (p.write_uint16, -1), (p.write_uint16, 1 << 16),
    (p.write_int32, I32_MAX + 1), (p.write_int32, I32_MIN - 1),
    (p.write_uint32, -1), (p.write_uint32, 1 << 32),
    (p.write_int64, I64_MAX + 1), (p.write_int64, I64_MIN - 1),
    (p.write_varint, I32_MAX + 1), (p.write_varint, I32_MIN - 1),
    (p.write_varlong, I64_MAX + 1), (p.write_varlong, I64_MIN - 1),
    (p.write_unsigned_varint, -1), (p.write_unsigned_varint, 1 << 32),
])
def test_out_of_range_writes_raise_value_error(writer: Writer, bad: int) -> None:
    out = bytearray(b"keep")
    with pytest.raises(ValueError):
        writer(out, bad)
    assert out == b"keep"  # nothing half-written


def test_out_of_range_encoders_raise_value_error() -> None:
    with pytest.raises(ValueError):
        p.encode_varint(I32_MAX + 1)
    with pytest.raises(ValueError):
        p.encode_varlong(I64_MIN - 1)
    with pytest.raises(ValueError):
        p.encode_unsigned_varint(-1)


def test_wrong_types_raise_type_error() -> None:
    for writer in (p.write_int8, p.write_int16, p.write_int32, p.write_int64, p.write_uint16, p.write_uint32):
        with pytest.raises(TypeError):
            writer(bytearray(), 1.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            writer(bytearray(), "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.write_float64(bytearray(), "1.0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.write_string(bytearray(), b"abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.write_compact_nullable_string(bytearray(), 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.write_bytes(bytearray(), "abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.write_uuid(bytearray(), "00112233-4455-6677-8899-aabbccddeeff")  # type: ignore[arg-type]


def test_unencodable_string_raises_value_error() -> None:
    with pytest.raises(ValueError):
        p.write_string(bytearray(), "lone surrogate \ud800")
    with pytest.raises(ValueError):
        p.write_compact_string(bytearray(), "\udfff")


def test_negative_array_length_on_write_raises() -> None:
    with pytest.raises(ValueError):
        p.write_array_length(bytearray(), -1, True)
    with pytest.raises(ValueError):
        p.write_array_length(bytearray(), -2, False)


def test_reader_start_outside_the_data_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"abc", 4)
    with pytest.raises(ProtocolError):
        Reader(b"abc", -1)
    with pytest.raises(ProtocolError):
        Reader(b"abcdef", 3, 2)
    assert Reader(b"abc", 3).remaining() == 0
