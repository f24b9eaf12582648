"""RecordBatch v2 (magic 2): a fast builder for the producer and a strict reader.

Batch layout (all integers big-endian)::

    baseOffset            int64    0 from the producer; the broker assigns it
    batchLength           int32    bytes after this field
    partitionLeaderEpoch  int32    -1 from the producer
    magic                 int8     2
    crc                   uint32   CRC32C of everything from `attributes` to the end
    attributes            int16    bits 0-2 codec, bit 3 timestamp type (1 = LogAppendTime),
                                   bit 4 transactional, bit 5 control
    lastOffsetDelta       int32
    baseTimestamp         int64    the first record's timestamp
    maxTimestamp          int64
    producerId            int64
    producerEpoch         int16
    baseSequence          int32
    recordCount           int32
    records               (compressed as a whole when the codec is not "none")

Each record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 = null) + key, valueLength varint (-1 = null) + value, headersCount varint,
then per header keyLength varint + UTF-8 key, valueLength varint (-1 = null) + value.  All
varints are zigzag encoded.

The builder encodes each record at append time into one bytearray (the per-record hot path), so
building a batch is one compression call, one CRC and one join.  The reader raises
:class:`ProtocolError` for any malformed input.
"""

from __future__ import annotations

import logging
import struct
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

import crcmod.predefined  # type: ignore[import-untyped,unused-ignore]

from .accel import records as _records_c
from .compression import CODEC_NAMES, CODEC_NONE, check_codec_available, compress, decompress
from .errors import ProtocolError

__all__ = [
    "CRC_EXTENSION_IN_USE",
    "crc32c",
    "encode_varint",
    "decode_varint",
    "decode_varlong",
    "RECORD_BATCH_OVERHEAD",
    "MAGIC",
    "ATTR_COMPRESSION_MASK",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "ATTR_CONTROL",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "NO_TIMESTAMP",
    "Header",
    "RecordBatchBuilder",
    "Record",
    "RecordBatchHeader",
    "RecordBatch",
    "read_batch_header",
    "read_batches",
    "RecordDecodeError",
    "set_base_offset",
    "stamp_batch",
    "CONTROL_KEY",
    "build_control_batch",
]

log = logging.getLogger(__name__)

BytesLike = Union[bytes, bytearray, memoryview]


class RecordDecodeError(ProtocolError):
    """A record inside a batch is malformed; ``record_index`` is its position in the batch (0-based),
    which a broker reports in a Produce response's ``record_errors``."""

    def __init__(self, record_index: int, message: str) -> None:
        super().__init__(message)
        self.record_index = record_index
Header = Tuple[str, Optional[bytes]]

# --------------------------------------------------------------------------------------------
# CRC32C
# --------------------------------------------------------------------------------------------

_crc32c_fun = crcmod.predefined.mkPredefinedCrcFun("crc-32c")

#: True when crcmod's C extension computes the CRC (the pure-Python fallback is ~100x slower)
CRC_EXTENSION_IN_USE: bool = bool(
    getattr(sys.modules.get("crcmod.crcmod"), "_usingExtension", False)
)
if _records_c is not None:
    # kproducer's own accelerator: slicing-by-8, or the SSE4.2 instruction (several GB/s)
    _crc32c_fun = _records_c.crc32c
elif not CRC_EXTENSION_IN_USE:
    log.warning(
        "crcmod's C extension is not in use: CRC32C of record batches will be computed in pure "
        "Python and be very slow. Reinstall crcmod with a C compiler available "
        "(pip install --force-reinstall --no-binary crcmod crcmod)."
    )


def crc32c(data: BytesLike, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``; pass a previous result as ``crc`` to continue it."""
    result: int = _crc32c_fun(data, crc)
    return result


# --------------------------------------------------------------------------------------------
# Constants and header layout
# --------------------------------------------------------------------------------------------

MAGIC = 2
RECORD_BATCH_OVERHEAD = 61  # bytes of batch header before the records
_LENGTH_OFFSET = 8  # batchLength field
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21  # CRC coverage starts here
#: where a batch's magic byte is, and where the bytes its CRC covers start (public for brokers)
MAGIC_OFFSET = _MAGIC_OFFSET
CRC_COVERAGE_OFFSET = _ATTRIBUTES_OFFSET
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD  # 49

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

NO_TIMESTAMP = -1

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_PREFIX = struct.Struct(">qiibI")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordCount
_BODY_HEADER = struct.Struct(">hiqqqhii")
_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_BATCH_LENGTH = struct.Struct(">i")
_OFFSET_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
#: the key of a control record: version, type (CONTROL_ABORT / CONTROL_COMMIT)
CONTROL_KEY = struct.Struct(">hh")
assert _PREFIX.size + _BODY_HEADER.size == _HEADER.size == RECORD_BATCH_OVERHEAD

_INT32_MAX = 0x7FFFFFFF

# --------------------------------------------------------------------------------------------
# Varints (zigzag)
# --------------------------------------------------------------------------------------------


def _zigzag_varint(n: int) -> bytes:
    """Zigzag varint/varlong encoding of any int (no table)."""
    z = (n << 1) if n >= 0 else ((-n) << 1) - 1
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Precomputed encodings of 0.._TABLE_SIZE-1: the pure-Python hot path indexes these instead of encoding. With the
# compiled builder they serve only the rare records it hands to Python: small tables (the full ones are 1.4 MB).
_TABLE_SIZE = 1 << 14 if _records_c is None else 1 << 7
_VARINTS: Tuple[bytes, ...] = tuple(_zigzag_varint(i) for i in range(_TABLE_SIZE))
# record attributes byte (always 0) followed by the timestamp delta
_ATTRS_TS: Tuple[bytes, ...] = tuple(b"\x00" + v for v in _VARINTS)
_NULL = b"\x01"  # zigzag varint of -1
_NO_HEADERS = b"\x00"  # zigzag varint of 0


def encode_varint(n: int) -> bytes:
    """Zigzag varint (or varlong: there is no size limit) encoding of ``n``."""
    if 0 <= n < _TABLE_SIZE:
        return _VARINTS[n]
    return _zigzag_varint(n)


def _decode_zigzag(buf: bytes, pos: int, limit: int, max_bytes: int, what: str) -> Tuple[int, int]:
    shift = 0
    z = 0
    start = pos
    while True:
        if pos >= limit:
            raise ProtocolError(f"truncated {what} at offset {start}")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if pos - start >= max_bytes:
            raise ProtocolError(
                f"{what} at offset {start} is longer than {max_bytes} bytes (varint overflow)"
            )


def decode_varint(buf: BytesLike, pos: int = 0) -> Tuple[int, int]:
    """Decode a zigzag varint (at most 5 bytes) at ``pos``; return (value, position after it)."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    return _decode_zigzag(data, pos, len(data), 5, "varint")


def decode_varlong(buf: BytesLike, pos: int = 0) -> Tuple[int, int]:
    """Decode a zigzag varlong (at most 10 bytes) at ``pos``; return (value, position after it)."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    return _decode_zigzag(data, pos, len(data), 10, "varlong")


def _encode_headers(headers: Sequence[Header]) -> bytes:
    """headersCount varint followed by the encoded headers."""
    parts: List[bytes] = [encode_varint(len(headers))]
    append = parts.append
    for item in headers:
        try:
            hkey, hvalue = item
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes or None) pair, got {item!r}") from None
        if not isinstance(hkey, str):
            raise TypeError(f"a header key must be a str, got {type(hkey).__name__}")
        raw_key = hkey.encode("utf-8")
        append(encode_varint(len(raw_key)))
        append(raw_key)
        if hvalue is None:
            append(_NULL)
        else:
            append(encode_varint(len(hvalue)))
            append(hvalue)
    return b"".join(parts)


# --------------------------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------------------------


def batch_header(attributes: int, count: int, base_timestamp: int, max_timestamp: int, producer_id: int,
                 producer_epoch: int, base_sequence: int, section: Union[bytes, memoryview]) -> bytes:
    """The 61-byte RecordBatch v2 header (baseOffset 0, partitionLeaderEpoch -1) of a batch of ``count`` records
    whose records section (compressed or not) is ``section``, its CRC included. ValueError when a field is out
    of its range. (Compiled twin, for the records a builder holds uncompressed: ``RecordsBuffer.batch_header``.)"""
    try:
        body_header = _BODY_HEADER.pack(attributes, count - 1, base_timestamp, max_timestamp, producer_id,
                                        producer_epoch, base_sequence, count)
    except struct.error as exc:
        raise ValueError(
            f"batch header field out of range (producer_id={producer_id}, "
            f"producer_epoch={producer_epoch}, base_sequence={base_sequence}): {exc}"
        ) from None
    crc = _crc32c_fun(section, _crc32c_fun(body_header))
    return _PREFIX.pack(0, _MIN_BATCH_LENGTH + len(section), -1, MAGIC, crc) + body_header


class _RecordsBufferPy:
    """The encoded records of one batch: the pure-Python twin of ``_records.RecordsBuffer``, the
    base of :class:`RecordBatchBuilder` (the compiled one is used when it is available)."""

    __slots__ = ("capacity", "_buf", "_len", "_count", "_base_ts", "_max_ts", "_max_rec")

    def __init__(self, capacity: int, buffer: Optional[bytearray] = None) -> None:
        #: soft limit on estimated_size(); the first record is accepted regardless
        self.capacity: int = capacity
        if buffer is None:
            buffer = bytearray()
        elif type(buffer) is not bytearray:
            raise TypeError(f"RecordsBuffer's buffer must be a bytearray or None, got {type(buffer).__name__}")
        #: the storage: records are written in place from its start (its length is the room, not the records)
        self._buf: bytearray = buffer
        #: bytes of encoded records at the start of ``_buf`` (the write position)
        self._len = 0
        self._count = 0
        self._base_ts = NO_TIMESTAMP
        self._max_ts = NO_TIMESTAMP
        #: the size of the largest record written, its length prefix included (record-size-avg/max)
        self._max_rec = 0

    def batch_header(self, attributes: int, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """The 61-byte batch header of the records written so far, uncompressed, CRC included (see
        :func:`batch_header`)."""
        if self._len > len(self._buf):
            raise ValueError("the batch's records were released")
        with memoryview(self._buf) as whole, whole[: self._len] as records:
            return batch_header(attributes, self._count, self._base_ts, self._max_ts, producer_id, producer_epoch,
                                base_sequence, records)

    def _try_append_py(
        self,
        timestamp_ms: int,
        key: Optional[bytes],
        value: Optional[bytes],
        headers: Optional[Sequence[Header]] = None,
    ) -> int:
        """Encode one record into the batch.

        Returns the record's offset delta (0, 1, 2, ...), or -1 when the batch already holds a
        record and this one would push :meth:`estimated_size` over ``capacity`` (nothing is
        changed then).  The first record is always accepted.  ``timestamp_ms`` must be an int;
        key, value and header values bytes-like or None; header keys str.  The caller validates
        types (a wrong type raises TypeError here, possibly from deep inside).
        """
        count = self._count
        if count:
            delta = timestamp_ms - self._base_ts
        else:
            delta = 0
        if key is None:
            key_len = _NULL
            key = b""
        else:
            n = len(key)
            key_len = _VARINTS[n] if n < _TABLE_SIZE else _zigzag_varint(n)
        if value is None:
            value_len = _NULL
            value = b""
        else:
            n = len(value)
            value_len = _VARINTS[n] if n < _TABLE_SIZE else _zigzag_varint(n)
        record = b"".join(
            (
                _ATTRS_TS[delta] if 0 <= delta < _TABLE_SIZE else b"\x00" + _zigzag_varint(delta),
                _VARINTS[count] if count < _TABLE_SIZE else _zigzag_varint(count),
                key_len,
                key,
                value_len,
                value,
                _encode_headers(headers) if headers else _NO_HEADERS,
            )
        )
        n = len(record)
        length = _VARINTS[n] if n < _TABLE_SIZE else _zigzag_varint(n)
        buf = self._buf
        pos = self._len
        end = pos + len(length) + n
        if count and end + RECORD_BATCH_OVERHEAD > self.capacity:
            return -1
        size = len(buf)
        if pos == size:
            # the storage ends at the records (a builder's own storage): append, the bytearray grows itself
            buf += length
            buf += record
        elif end <= size:
            # room left in the storage (a pool buffer): write in place
            buf[pos:end] = length + record
        elif pos > size:
            raise ValueError("the batch's records were released; nothing can be appended")
        else:
            del buf[pos:]
            buf += length
            buf += record
        if count:
            if timestamp_ms > self._max_ts:
                self._max_ts = timestamp_ms
        else:
            self._base_ts = self._max_ts = timestamp_ms
        self._len = end
        if end - pos > self._max_rec:
            self._max_rec = end - pos
        self._count = count + 1
        return count

    try_append = _try_append_py

    def extend(self, timestamp_ms: int, keys: Optional[Sequence[Optional[bytes]]],
               values: Sequence[Optional[bytes]], headers: Optional[Sequence[Optional[Sequence[Header]]]],
               indices: Sequence[int], pos: int) -> int:
        """Append the records at ``indices[pos:]`` (positions in ``keys``/``values``/``headers``, which
        may be None) with one timestamp until the batch is full; returns the position of the first record
        not appended."""
        append = self.try_append
        total = len(indices)
        while pos < total:
            i = indices[pos]
            if append(timestamp_ms, keys[i] if keys is not None else None, values[i],
                      headers[i] if headers is not None else None) < 0:
                break
            pos += 1
        return pos


if TYPE_CHECKING:
    _RecordsBase = _RecordsBufferPy
else:
    _RecordsBase = _records_c.RecordsBuffer if _records_c is not None else _RecordsBufferPy


class RecordBatchBuilder(_RecordsBase):
    """Accumulates records into one RecordBatch v2.

    Records are encoded when appended (uncompressed); :meth:`build` compresses the records section
    once and caches it, so rebuilding with another producer id / epoch / sequence (a retry after
    an epoch bump) only redoes the 61-byte header and the CRC.  Not thread-safe: the caller
    serialises appends and builds (the accumulator appends and drains under its one lock).
    """

    __slots__ = ("compression", "compression_level", "_section", "_section_count")

    def __init__(
        self, capacity: int, compression: int = CODEC_NONE, compression_level: Optional[int] = None,
        buffer: Optional[bytearray] = None,
    ) -> None:
        if compression not in CODEC_NAMES:
            raise ValueError(f"unknown compression codec id {compression!r}; valid ids are 0-4")
        if compression != CODEC_NONE:
            check_codec_available(compression)
        super().__init__(capacity, buffer)
        self.compression: int = compression
        self.compression_level: Optional[int] = compression_level
        self._section: Optional[bytes] = None
        self._section_count = -1

    # the Python encoder stays reachable on every builder (the compiled one hands unusual records to it)
    _try_append_py = _RecordsBufferPy._try_append_py


    @property
    def record_count(self) -> int:
        """Number of records appended so far."""
        return self._count

    @property
    def first_timestamp(self) -> int:
        """The first record's timestamp (the batch's baseTimestamp); -1 when empty."""
        return self._base_ts

    @property
    def max_timestamp(self) -> int:
        """The largest record timestamp so far; -1 when empty."""
        return self._max_ts

    @property
    def last_offset_delta(self) -> int:
        return self._count - 1

    def is_empty(self) -> bool:
        return self._count == 0

    def estimated_size(self) -> int:
        """Batch header (61 bytes) + the records encoded so far, uncompressed."""
        return RECORD_BATCH_OVERHEAD + self._len

    def uncompressed_records_size(self) -> int:
        """Bytes of the encoded records (uncompressed), without the batch header."""
        return self._len

    @staticmethod
    def estimate_record_size(
        key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[Header]] = None
    ) -> int:
        """Upper bound of the size of a batch holding just this record (header included).

        For max.request.size / batch-size checks at send() time.
        """
        # length varint 5, attributes 1, timestampDelta varlong 10, offsetDelta varint 5,
        # keyLength 5, valueLength 5, headersCount 5
        size = RECORD_BATCH_OVERHEAD + 36
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        if headers:
            for hkey, hvalue in headers:
                size += 10 + len(hkey.encode("utf-8"))
                if hvalue is not None:
                    size += len(hvalue)
        return size

    def records_view(self) -> memoryview:
        """A view of the encoded (uncompressed) records in the storage, not a copy. It pins the storage: a
        BufferPool does not take the buffer back while a view of it is alive (release() the view)."""
        buf = self._buf
        if self._len > len(buf):
            raise ValueError("the batch's records were released")
        with memoryview(buf) as whole:
            return whole[: self._len]

    def detach_buffer(self) -> bytearray:
        """Hand the storage over (to a BufferPool): the builder forgets it and its records (counts,
        timestamps, sizes and a built section stay; nothing can be appended or rebuilt uncompressed)."""
        buf = self._buf
        self._buf = bytearray()
        return buf

    def release(self) -> None:
        """Free the encoded records (after the batch is acknowledged); counts and timestamps stay."""
        self._buf = bytearray()
        self._len = 0
        self._section = None
        self._section_count = -1

    def records_section(self) -> bytes:
        """The records section as it goes on the wire (compressed when a codec is set); cached."""
        section = self._section
        if section is None or self._section_count != self._count:
            with self.records_view() as view:
                raw = bytes(view)
            if self.compression == CODEC_NONE:
                section = raw
            else:
                section = compress(self.compression, raw, self.compression_level)
            self._section = section
            self._section_count = self._count
        return section

    def build(
        self,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
    ) -> bytes:
        """The complete batch bytes (baseOffset 0, partitionLeaderEpoch -1, CreateTime).

        May be called again (e.g. with a new producer id / epoch / sequence): the compressed
        records section is cached and only the header and CRC are recomputed.  Appending after a
        build is allowed and invalidates the cache.
        """
        section = self.records_section()
        attributes = self.compression
        if is_transactional:
            attributes |= ATTR_TRANSACTIONAL
        if is_control:
            attributes |= ATTR_CONTROL
        head = batch_header(attributes, self._count, self._base_ts, self._max_ts, producer_id, producer_epoch,
                            base_sequence, section)
        return head + section


def build_control_batch(
    control_type: int,
    timestamp_ms: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
) -> bytes:
    """A transactional control batch holding one end-transaction marker.

    ``control_type`` is CONTROL_ABORT (0) or CONTROL_COMMIT (1).  The record key is
    version int16 (0) + type int16; the value is version int16 (0) + coordinatorEpoch int32.
    """
    builder = RecordBatchBuilder(capacity=RECORD_BATCH_OVERHEAD + 64)
    builder.try_append(
        timestamp_ms,
        CONTROL_KEY.pack(0, control_type),
        struct.pack(">hi", 0, coordinator_epoch),
        None,
    )
    return builder.build(producer_id, producer_epoch, -1, is_transactional=True, is_control=True)


# --------------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------------


@dataclass
class Record:
    """One decoded record.  ``offset`` and ``timestamp`` are absolute."""

    offset_delta: int
    timestamp_delta: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Header] = field(default_factory=list)
    attributes: int = 0
    offset: int = 0
    timestamp: int = 0


@dataclass
class RecordBatchHeader:
    """The 61-byte batch header (no records decoded)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire (12 + batch_length)."""
        return _LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """TIMESTAMP_CREATE_TIME (0) or TIMESTAMP_LOG_APPEND_TIME (1)."""
        return (self.attributes & ATTR_TIMESTAMP_TYPE) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """Sequence of the batch's last record (wrapping past int32 max like Kafka); -1 if none."""
        if self.base_sequence < 0:
            return -1
        seq = self.base_sequence + self.last_offset_delta
        return seq - (_INT32_MAX + 1) if seq > _INT32_MAX else seq


@dataclass
class RecordBatch(RecordBatchHeader):
    """A batch header plus its decoded records."""

    records: List[Record] = field(default_factory=list)


def read_batch_header(data: BytesLike, pos: int = 0, verify_crc: bool = True) -> RecordBatchHeader:
    """Parse and validate the header of the batch starting at ``pos`` without decoding records.

    Checks that the whole batch is present, batchLength is sane, magic is 2, recordCount is not
    negative and (when ``verify_crc``) that the CRC matches.  Raises ProtocolError otherwise.
    """
    end = len(data)
    remaining = end - pos
    if pos < 0 or remaining < _LOG_OVERHEAD:
        raise ProtocolError(
            f"truncated record batch at offset {pos}: {max(remaining, 0)} bytes left, "
            f"need at least {RECORD_BATCH_OVERHEAD}"
        )
    (batch_length,) = _BATCH_LENGTH.unpack_from(data, pos + _LENGTH_OFFSET)
    if batch_length < 0:
        raise ProtocolError(f"negative batchLength {batch_length} in record batch at offset {pos}")
    if remaining > _MAGIC_OFFSET:
        magic = data[pos + _MAGIC_OFFSET]
        if magic != MAGIC:
            raise ProtocolError(
                f"unsupported record batch magic {magic} at offset {pos} "
                "(only magic 2 is supported)"
            )
    if batch_length < _MIN_BATCH_LENGTH:
        raise ProtocolError(
            f"batchLength {batch_length} at offset {pos} is smaller than the minimum "
            f"{_MIN_BATCH_LENGTH}"
        )
    if batch_length > remaining - _LOG_OVERHEAD:
        raise ProtocolError(
            f"truncated record batch at offset {pos}: batchLength {batch_length} needs "
            f"{_LOG_OVERHEAD + batch_length} bytes, only {remaining} available"
        )
    fields = _HEADER.unpack_from(data, pos)
    header = RecordBatchHeader(*fields)
    if header.record_count < 0:
        raise ProtocolError(f"negative recordCount {header.record_count} at offset {pos}")
    if verify_crc:
        batch_end = pos + _LOG_OVERHEAD + batch_length
        actual = _crc32c_fun(memoryview(data)[pos + _ATTRIBUTES_OFFSET : batch_end])
        if actual != header.crc:
            raise ProtocolError(
                f"record batch CRC mismatch at offset {pos}: header says 0x{header.crc:08x}, "
                f"computed 0x{actual:08x} (corrupt batch)"
            )
    return header


def _read_varint(buf: bytes, pos: int, limit: int, max_bytes: int, what: str) -> Tuple[int, int]:
    # one-byte fast path; the general case raises ProtocolError on truncation or overflow
    if pos < limit:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    return _decode_zigzag(buf, pos, limit, max_bytes, what)


def _decode_records(section: bytes, header: RecordBatchHeader, batch_pos: int) -> List[Record]:
    records: List[Record] = []
    append = records.append
    pos = 0
    end = len(section)
    count = header.record_count
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append_ts = header.max_timestamp if header.timestamp_type else None
    rv = _read_varint
    for index in range(count):
        if pos >= end:
            raise ProtocolError(
                f"record count mismatch in batch at offset {batch_pos}: recordCount is {count} "
                f"but the records section holds only {index} records"
            )
        length, pos = rv(section, pos, end, 5, "record length varint")
        if length < 0:
            raise RecordDecodeError(
                index,
                f"negative record length {length} (record {index}, batch at {batch_pos})"
            )
        rec_end = pos + length
        if rec_end > end:
            raise RecordDecodeError(
                index,
                f"record {index} length {length} runs past the end of the records section "
                f"(batch at offset {batch_pos})"
            )
        if pos >= rec_end:
            raise RecordDecodeError(
                index, f"record {index} is empty (length {length}, batch at {batch_pos})"
            )
        attributes = section[pos]
        pos += 1
        ts_delta, pos = rv(section, pos, rec_end, 10, "timestampDelta varlong")
        offset_delta, pos = rv(section, pos, rec_end, 5, "offsetDelta varint")
        key: Optional[bytes]
        klen, pos = rv(section, pos, rec_end, 5, "key length varint")
        if klen == -1:
            key = None
        elif klen < 0:
            raise RecordDecodeError(index, f"invalid key length {klen} (record {index}, batch at {batch_pos})")
        elif pos + klen > rec_end:
            raise RecordDecodeError(
                index,
                f"record length mismatch: key of {klen} bytes runs past the record's length "
                f"{length} (record {index}, batch at {batch_pos})"
            )
        else:
            key = section[pos : pos + klen]
            pos += klen
        value: Optional[bytes]
        vlen, pos = rv(section, pos, rec_end, 5, "value length varint")
        if vlen == -1:
            value = None
        elif vlen < 0:
            raise RecordDecodeError(
                index,
                f"invalid value length {vlen} (record {index}, batch at {batch_pos})"
            )
        elif pos + vlen > rec_end:
            raise RecordDecodeError(
                index,
                f"record length mismatch: value of {vlen} bytes runs past the record's length "
                f"{length} (record {index}, batch at {batch_pos})"
            )
        else:
            value = section[pos : pos + vlen]
            pos += vlen
        hcount, pos = rv(section, pos, rec_end, 5, "headers count varint")
        if hcount < 0:
            raise RecordDecodeError(
                index,
                f"invalid header count {hcount} (record {index}, batch at {batch_pos})"
            )
        headers: List[Header] = []
        for _ in range(hcount):
            hklen, pos = rv(section, pos, rec_end, 5, "header key length varint")
            if hklen < 0 or pos + hklen > rec_end:
                raise RecordDecodeError(
                index,
                    f"invalid header key length {hklen} (record {index}, batch at {batch_pos})"
                )
            try:
                hkey = section[pos : pos + hklen].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordDecodeError(
                index,
                    f"header key is not valid UTF-8 (record {index}, batch at {batch_pos}): {exc}"
                ) from None
            pos += hklen
            hvalue: Optional[bytes]
            hvlen, pos = rv(section, pos, rec_end, 5, "header value length varint")
            if hvlen == -1:
                hvalue = None
            elif hvlen < 0 or pos + hvlen > rec_end:
                raise RecordDecodeError(
                index,
                    f"invalid header value length {hvlen} (record {index}, batch at {batch_pos})"
                )
            else:
                hvalue = section[pos : pos + hvlen]
                pos += hvlen
            headers.append((hkey, hvalue))
        if pos != rec_end:
            raise RecordDecodeError(
                index,
                f"record length mismatch: record {index} says {length} bytes but its fields take "
                f"{length - (rec_end - pos)} (batch at offset {batch_pos})"
            )
        append(
            Record(
                offset_delta,
                ts_delta,
                key,
                value,
                headers,
                attributes,
                base_offset + offset_delta,
                base_ts + ts_delta if log_append_ts is None else log_append_ts,
            )
        )
    if pos != end:
        raise ProtocolError(
            f"record count mismatch in batch at offset {batch_pos}: recordCount is {count} but "
            f"{end - pos} bytes remain after the last record"
        )
    return records


def read_batches(
    data: BytesLike, verify_crc: bool = True, allow_partial_tail: bool = False
) -> List[RecordBatch]:
    """Decode every batch in a records field (several batches may be concatenated).

    A trailing partial batch (which a broker may return in a Fetch response) is ignored when
    ``allow_partial_tail`` is true and raises ProtocolError otherwise.  Any malformed batch
    raises ProtocolError; a compressed batch whose codec library is missing raises
    UnsupportedCodecError.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    end = len(buf)
    pos = 0
    batches: List[RecordBatch] = []
    while pos < end:
        remaining = end - pos
        if allow_partial_tail:
            if remaining < RECORD_BATCH_OVERHEAD:
                break
            (batch_length,) = _BATCH_LENGTH.unpack_from(buf, pos + _LENGTH_OFFSET)
            if batch_length > remaining - _LOG_OVERHEAD:
                break
        header = read_batch_header(buf, pos, verify_crc)
        batch_end = pos + header.size
        section = buf[pos + RECORD_BATCH_OVERHEAD : batch_end]
        codec = header.compression
        if codec != CODEC_NONE:
            section = decompress(codec, section)
        records = _decode_records(section, header, pos)
        batches.append(
            RecordBatch(
                header.base_offset,
                header.batch_length,
                header.partition_leader_epoch,
                header.magic,
                header.crc,
                header.attributes,
                header.last_offset_delta,
                header.base_timestamp,
                header.max_timestamp,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.record_count,
                records,
            )
        )
        pos = batch_end
    return batches


def stamp_batch(data: BytesLike, base_offset: int, partition_leader_epoch: int) -> bytes:
    """A copy of the one whole batch ``data`` with its baseOffset and partitionLeaderEpoch set, as a
    broker stores it (neither field is covered by the CRC, so the batch stays valid)."""
    (batch_length,) = _BATCH_LENGTH.unpack_from(data, _LENGTH_OFFSET)
    return b"".join(
        (_OFFSET_PREFIX.pack(base_offset, batch_length, partition_leader_epoch), memoryview(data)[_MAGIC_OFFSET:])
    )


def set_base_offset(data: BytesLike, base_offset: int, pos: int = 0) -> bytes:
    """Return a copy of ``data`` with the baseOffset of the batch at ``pos`` set to ``base_offset``.

    baseOffset is not covered by the CRC, so the batch stays valid.
    """
    if pos < 0 or len(data) - pos < RECORD_BATCH_OVERHEAD:
        raise ProtocolError(f"no complete record batch header at offset {pos}")
    out = bytearray(data)
    _INT64.pack_into(out, pos, base_offset)
    return bytes(out)
