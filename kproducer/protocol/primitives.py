"""Kafka wire primitives: fixed-width integers, varints, strings, bytes, arrays, tagged fields.

Sans-IO: a :class:`Reader` walks a bytes buffer and raises :class:`ProtocolError` when the data is
truncated or malformed; the ``write_*`` functions append to a ``bytearray``.
"""
from __future__ import annotations

import builtins
import operator
import struct
import uuid
from typing import Callable, List, Optional, Tuple, TypeVar

from .errors import ProtocolError

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

INT8_RANGE = (-(1 << 7), (1 << 7) - 1)
INT16_RANGE = (-(1 << 15), (1 << 15) - 1)
INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)


# --------------------------------------------------------------------------------------------
# varints


def zigzag32(n: int) -> int:
    return ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF


def zigzag64(n: int) -> int:
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def encode_unsigned_varint(n: int) -> bytes:
    """Encode a non-negative integer as a base-128 varint (least significant group first)."""
    if n < 0:
        raise ValueError(f"unsigned varint cannot encode negative value {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Zigzag-encode a signed 32-bit integer as a varint."""
    if not INT32_RANGE[0] <= n <= INT32_RANGE[1]:
        raise ValueError(f"varint value {n} is outside the int32 range")
    return encode_unsigned_varint(zigzag32(n))


def encode_varlong(n: int) -> bytes:
    """Zigzag-encode a signed 64-bit integer as a varint."""
    if not INT64_RANGE[0] <= n <= INT64_RANGE[1]:
        raise ValueError(f"varlong value {n} is outside the int64 range")
    return encode_unsigned_varint(zigzag64(n))


def decode_unsigned_varint(
    buf: bytes, pos: int, max_bytes: int = 5, end: Optional[int] = None
) -> Tuple[int, int]:
    """Decode an unsigned varint at ``pos``; returns (value, new position)."""
    result = 0
    shift = 0
    if end is None or end > len(buf):
        end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise ProtocolError(f"truncated varint at offset {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise ProtocolError(f"varint longer than {max_bytes} bytes at offset {pos - max_bytes}")


def decode_varint(buf: bytes, pos: int, end: Optional[int] = None) -> Tuple[int, int]:
    raw, pos = decode_unsigned_varint(buf, pos, 5, end)
    if raw > 0xFFFFFFFF:
        raise ProtocolError("varint overflows 32 bits")
    return unzigzag(raw), pos


def decode_varlong(buf: bytes, pos: int, end: Optional[int] = None) -> Tuple[int, int]:
    raw, pos = decode_unsigned_varint(buf, pos, 10, end)
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise ProtocolError("varlong overflows 64 bits")
    return unzigzag(raw), pos


# --------------------------------------------------------------------------------------------
# reading


class Reader:
    """Bounds-checked cursor over a bytes-like buffer."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int = 0, end: Optional[int] = None) -> None:
        self.buf = buf
        self.pos = pos
        # Never trust an ``end`` past the buffer: a length field of truncated data may claim more bytes than
        # exist, and reads must then fail with ProtocolError rather than struct.error / IndexError.
        self.end = len(buf) if end is None or end > len(buf) else end
        if not 0 <= pos <= self.end:
            raise ProtocolError(f"start offset {pos} is outside the data (0..{self.end})")

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise ProtocolError(
                f"truncated data: {what} needs {n} bytes at offset {pos} but only {self.end - pos} remain"
            )
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return int(_I8.unpack_from(self.buf, self._need(1, "int8"))[0])

    def bool(self) -> builtins.bool:
        return self.buf[self._need(1, "bool")] != 0

    def int16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._need(2, "int16"))[0])

    def uint16(self) -> int:
        return int(_U16.unpack_from(self.buf, self._need(2, "uint16"))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._need(4, "int32"))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self.buf, self._need(4, "uint32"))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.buf, self._need(8, "int64"))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self.buf, self._need(8, "float64"))[0])

    def uuid(self) -> uuid.UUID:
        p = self._need(16, "uuid")
        return uuid.UUID(bytes=bytes(self.buf[p:p + 16]))

    def unsigned_varint(self) -> int:
        value, pos = decode_unsigned_varint(self.buf, self.pos, 5, self.end)
        if value > 0xFFFFFFFF:
            raise ProtocolError(f"unsigned varint at offset {self.pos} overflows 32 bits")
        self.pos = pos
        return value

    def varint(self) -> int:
        value, self.pos = decode_varint(self.buf, self.pos, self.end)
        return value

    def varlong(self) -> int:
        value, self.pos = decode_varlong(self.buf, self.pos, self.end)
        return value

    def raw(self, n: int, what: str = "bytes") -> bytes:
        p = self._need(n, what)
        return bytes(self.buf[p:p + n])

    # length-prefixed --------------------------------------------------------------------

    def _str(self, n: int, nullable: builtins.bool, what: str) -> Optional[str]:
        if n == -1 and nullable:
            return None
        if n < 0:
            raise ProtocolError(f"invalid {what} length {n}")
        p = self._need(n, what)
        try:
            return bytes(self.buf[p:p + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"{what} is not valid UTF-8: {e}") from None

    def string(self) -> str:
        s = self._str(self.int16(), False, "string")
        assert s is not None
        return s

    def nullable_string(self) -> Optional[str]:
        return self._str(self.int16(), True, "nullable string")

    def compact_string(self) -> str:
        s = self._str(self.unsigned_varint() - 1, False, "compact string")
        assert s is not None
        return s

    def compact_nullable_string(self) -> Optional[str]:
        return self._str(self.unsigned_varint() - 1, True, "compact nullable string")

    def _bytes(self, n: int, nullable: builtins.bool, what: str) -> Optional[bytes]:
        if n == -1 and nullable:
            return None
        if n < 0:
            raise ProtocolError(f"invalid {what} length {n}")
        return self.raw(n, what)

    def bytes_(self) -> bytes:
        b = self._bytes(self.int32(), False, "bytes")
        assert b is not None
        return b

    def nullable_bytes(self) -> Optional[bytes]:
        return self._bytes(self.int32(), True, "nullable bytes")

    def compact_bytes(self) -> bytes:
        b = self._bytes(self.unsigned_varint() - 1, False, "compact bytes")
        assert b is not None
        return b

    def compact_nullable_bytes(self) -> Optional[bytes]:
        return self._bytes(self.unsigned_varint() - 1, True, "compact nullable bytes")

    def array_length(self, compact: builtins.bool, nullable: builtins.bool) -> int:
        """Element count of an array (``-1`` for null). Rejects counts the remaining data cannot hold."""
        n = self.unsigned_varint() - 1 if compact else self.int32()
        if n == -1:
            if not nullable:
                raise ProtocolError("null array where a non-nullable array was expected")
            return -1
        if n < 0:
            raise ProtocolError(f"invalid array length {n}")
        if n > self.end - self.pos:
            raise ProtocolError(
                f"array claims {n} elements but only {self.end - self.pos} bytes remain"
            )
        return n

    def array(self, item: Callable[["Reader"], T], compact: builtins.bool = False) -> List[T]:
        n = self.array_length(compact, False)
        return [item(self) for _ in range(n)]

    def tagged_fields(self) -> List[Tuple[int, bytes]]:
        """Read a tagged-field section and return the raw (tag, data) pairs."""
        count = self.unsigned_varint()
        if count > self.end - self.pos:
            raise ProtocolError(f"tagged field count {count} exceeds the remaining data")
        out = []
        last = -1
        for _ in range(count):
            tag = self.unsigned_varint()
            if tag <= last:
                raise ProtocolError(f"tagged fields out of order: tag {tag} after {last}")
            last = tag
            size = self.unsigned_varint()
            out.append((tag, self.raw(size, f"tagged field {tag}")))
        return out


# --------------------------------------------------------------------------------------------
# writing


def _check(n: int, rng: Tuple[int, int], what: str) -> int:
    if type(n) is not int:
        # floats (even 1.0) and other non-integers would otherwise escape as struct.error
        try:
            n = operator.index(n)
        except TypeError:
            raise TypeError(f"{what} must be an integer, got {type(n).__name__}") from None
    if not rng[0] <= n <= rng[1]:
        raise ValueError(f"{what} value {n} is out of range {rng[0]}..{rng[1]}")
    return n


def write_int8(out: bytearray, n: int) -> None:
    out += _I8.pack(_check(n, INT8_RANGE, "int8"))


def write_bool(out: bytearray, b: bool) -> None:
    out.append(1 if b else 0)


def write_int16(out: bytearray, n: int) -> None:
    out += _I16.pack(_check(n, INT16_RANGE, "int16"))


def write_uint16(out: bytearray, n: int) -> None:
    out += _U16.pack(_check(n, (0, 0xFFFF), "uint16"))


def write_int32(out: bytearray, n: int) -> None:
    out += _I32.pack(_check(n, INT32_RANGE, "int32"))


def write_uint32(out: bytearray, n: int) -> None:
    out += _U32.pack(_check(n, (0, 0xFFFFFFFF), "uint32"))


def write_int64(out: bytearray, n: int) -> None:
    out += _I64.pack(_check(n, INT64_RANGE, "int64"))


def write_float64(out: bytearray, x: float) -> None:
    try:
        out += _F64.pack(x)
    except struct.error:
        raise TypeError(f"float64 must be a number, got {type(x).__name__}") from None


def write_uuid(out: bytearray, u: Optional[uuid.UUID]) -> None:
    if u is None:
        out += bytes(16)
    elif isinstance(u, uuid.UUID):
        out += u.bytes
    else:
        raise TypeError(f"uuid must be uuid.UUID, got {type(u).__name__}")


def write_unsigned_varint(out: bytearray, n: int) -> None:
    """Write a protocol unsigned varint (an unsigned 32-bit quantity, at most 5 bytes)."""
    out += encode_unsigned_varint(_check(n, (0, 0xFFFFFFFF), "unsigned varint"))


def write_varint(out: bytearray, n: int) -> None:
    out += encode_varint(n)


def write_varlong(out: bytearray, n: int) -> None:
    out += encode_varlong(n)


MAX_STRING_BYTES = 0x7FFF


def _utf8(s: str, what: str) -> bytes:
    if not isinstance(s, str):
        raise TypeError(f"{what} must be str, got {type(s).__name__}")
    try:
        b = s.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates; re-raised as a plain ValueError (see schema.py)
        raise ValueError(f"{what} cannot be encoded as UTF-8: {e.reason}") from None
    if len(b) > MAX_STRING_BYTES:
        # Kafka strings (compact or not) are limited to 32767 bytes; Java brokers reject longer ones.
        raise ValueError(f"{what} of {len(b)} bytes is longer than {MAX_STRING_BYTES}")
    return b


def write_string(out: bytearray, s: str) -> None:
    b = _utf8(s, "string")
    out += _I16.pack(len(b))
    out += b


def write_nullable_string(out: bytearray, s: Optional[str]) -> None:
    if s is None:
        out += _I16.pack(-1)
    else:
        write_string(out, s)


def write_compact_string(out: bytearray, s: str) -> None:
    b = _utf8(s, "string")
    out += encode_unsigned_varint(len(b) + 1)
    out += b


def write_compact_nullable_string(out: bytearray, s: Optional[str]) -> None:
    if s is None:
        out.append(0)
    else:
        write_compact_string(out, s)


def _as_bytes(b: object, what: str) -> bytes:
    if isinstance(b, (bytes, bytearray)):
        return b  # type: ignore[return-value]
    if isinstance(b, memoryview):
        # len() of a memoryview counts items, not bytes: flatten anything that is not a 1-D byte view
        if b.itemsize != 1 or b.ndim != 1:
            return b.tobytes()
        return b  # type: ignore[return-value]
    raise TypeError(f"{what} must be bytes, got {type(b).__name__}")


def write_bytes(out: bytearray, b: bytes) -> None:
    b = _as_bytes(b, "bytes")
    if len(b) > INT32_RANGE[1]:
        raise ValueError(f"bytes of length {len(b)} do not fit an int32 length")
    out += _I32.pack(len(b))
    out += b


def write_nullable_bytes(out: bytearray, b: Optional[bytes]) -> None:
    if b is None:
        out += _I32.pack(-1)
    else:
        write_bytes(out, b)


def write_compact_bytes(out: bytearray, b: bytes) -> None:
    b = _as_bytes(b, "bytes")
    out += encode_unsigned_varint(len(b) + 1)
    out += b


def write_compact_nullable_bytes(out: bytearray, b: Optional[bytes]) -> None:
    if b is None:
        out.append(0)
    else:
        write_compact_bytes(out, b)


def write_array_length(out: bytearray, n: Optional[int], compact: bool) -> None:
    """Write an array's element count; ``None`` writes a null array."""
    if n is not None:
        n = _check(n, (0, INT32_RANGE[1] - 1), "array length")
    if compact:
        out += encode_unsigned_varint(0 if n is None else n + 1)
    else:
        out += _I32.pack(-1 if n is None else n)


def write_tagged_fields(out: bytearray, fields: List[Tuple[int, bytes]]) -> None:
    """Write a tagged-field section from (tag, data) pairs, sorted by tag."""
    out += encode_unsigned_varint(len(fields))
    last = -1
    for tag, data in sorted(fields, key=lambda f: f[0]):
        if tag == last:
            raise ValueError(f"tagged field {tag} appears twice")
        last = tag
        out += encode_unsigned_varint(_check(tag, (0, 0xFFFFFFFF), "tag"))
        out += encode_unsigned_varint(len(data))
        out += data
