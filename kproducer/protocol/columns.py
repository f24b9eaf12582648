"""Keys and values as binary columns (Arrow's layout: offsets + data + validity bitmap), encoded into record
batches without a Python ``bytes`` object per row.

A :class:`BinaryColumn` describes one Arrow ``binary``/``string`` (int32 offsets) or ``large_binary``/
``large_string`` (int64 offsets, ``wide``) array by its buffers; any bytes-like objects will do (a
``pyarrow.Buffer``, ``bytes``, a ``memoryview``), so this module does not need pyarrow. Three operations, each
with a compiled version (``_records``) and a pure-Python twin here that gives identical results:

* :func:`extend_columns` -- ``RecordsBuffer.extend()`` for columns: append rows to a batch until it is full (the
  twin slices each row out of the data buffer and calls ``builder.try_append``: the same encoder, so the same
  bytes);
* ``column_partitions`` (in :mod:`kproducer.producer.columnar`, next to murmur2) -- rows grouped by
  ``toPositive(murmur2(key)) % partitions``, and the rows with a null key;
* :func:`column_max_length` -- the longest row (the max.request.size check).
"""
from __future__ import annotations

import array
import sys
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

from .accel import records as _records_c


class BinaryColumn(NamedTuple):
    """One binary column by its buffers: row ``i`` is ``data[offsets[offset + i]:offsets[offset + i + 1]]``,
    null when bit ``offset + i`` of ``validity`` is clear (``validity`` None: no nulls)."""

    offsets: Any
    data: Any
    validity: Any
    offset: int
    length: int
    #: int64 offsets (large_binary / large_string) instead of int32
    wide: bool = False

    @classmethod
    def from_values(cls, values: Sequence[Optional[bytes]]) -> "BinaryColumn":
        """A column holding ``values`` (None: null), for tests and small inputs."""
        offsets = array.array("i", [0])
        validity = bytearray((len(values) + 7) // 8)
        data = bytearray()
        nulls = False
        for i, v in enumerate(values):
            if v is None:
                nulls = True
            else:
                data += v
                validity[i >> 3] |= 1 << (i & 7)
            offsets.append(len(data))
        if sys.byteorder != "little":  # pragma: no cover - Arrow buffers are little-endian
            offsets.byteswap()
        return cls(offsets.tobytes(), bytes(data), bytes(validity) if nulls else None, 0, len(values), False)


def _ints(buf: Any, wide: bool) -> Sequence[int]:
    mv = memoryview(buf).cast("B")
    size = 8 if wide else 4
    return mv[:len(mv) - len(mv) % size].cast("q" if wide else "i")


class _Rows:
    """A column's rows as Python values (the pure-Python twin's view of the buffers)."""

    __slots__ = ("offsets", "data", "validity", "offset", "length")

    def __init__(self, col: BinaryColumn) -> None:
        if col.offset < 0 or col.length < 0:
            raise ValueError(f"a column's offset and length must be >= 0, got {col.offset} and {col.length}")
        self.offsets = _ints(col.offsets, col.wide)
        self.data = memoryview(col.data).cast("B")
        self.validity = memoryview(col.validity).cast("B") if col.validity is not None else None
        self.offset = col.offset
        self.length = col.length
        if len(self.offsets) < col.offset + col.length + 1 or (
                self.validity is not None and len(self.validity) < (col.offset + col.length + 7) // 8):
            raise ValueError(f"offsets or validity buffer too short for {col.length} rows at offset {col.offset}")

    def bounds(self, i: int) -> Optional[Tuple[int, int]]:
        """``(start, stop)`` of row ``i`` in the data buffer; None when it is null."""
        if not 0 <= i < self.length:
            raise IndexError(f"row {i} is not in the column's {self.length} rows")
        j = self.offset + i
        validity = self.validity
        if validity is not None and not (validity[j >> 3] >> (j & 7)) & 1:
            return None
        lo, hi = self.offsets[j], self.offsets[j + 1]
        if lo < 0 or hi < lo or hi > len(self.data):
            raise ValueError(f"row {i}: offsets {lo}..{hi} outside the data buffer ({len(self.data)} bytes)")
        return lo, hi

    def item(self, i: int) -> Optional[bytes]:
        b = self.bounds(i)
        return None if b is None else bytes(self.data[b[0]:b[1]])

    def length_of(self, i: int) -> int:
        """Row ``i``'s length (0 for a null)."""
        b = self.bounds(i)
        return 0 if b is None else b[1] - b[0]


def column_item(col: BinaryColumn, i: int) -> Optional[bytes]:
    """Row ``i`` as bytes (None when null): for the few places that need one record's bytes."""
    return _Rows(col).item(i)


def _extend_columns_py(builder: Any, timestamp_ms: int, keys: Optional[BinaryColumn], values: BinaryColumn,
                       indices: Sequence[int], pos: int) -> int:
    append = builder.try_append
    krows = _Rows(keys) if keys is not None else None
    vrows = _Rows(values)
    total = len(indices)
    while pos < total:
        i = indices[pos]
        if append(timestamp_ms, krows.item(i) if krows is not None else None, vrows.item(i), None) < 0:
            break
        pos += 1
    return pos


def _column_max_length_py(col: BinaryColumn) -> int:
    rows = _Rows(col)
    return max((rows.length_of(i) for i in range(rows.length)), default=0)


_extend_columns_c: Optional[Callable[..., int]] = getattr(_records_c, "extend_columns", None)
_RecordsBufferC: Any = getattr(_records_c, "RecordsBuffer", None)


def extend_columns(builder: Any, timestamp_ms: int, keys: Optional[BinaryColumn], values: BinaryColumn,
                   indices: Sequence[int], pos: int) -> int:
    """Append rows ``indices[pos:]`` of ``keys`` (None: no keys) and ``values`` to ``builder`` (a
    RecordBatchBuilder) without headers, with one timestamp, until the batch is full; returns the position of
    the first row not appended (``builder.extend`` for columns). ``indices``: a range or int32 row indices
    (:func:`row_indices`)."""
    if _extend_columns_c is not None and isinstance(builder, _RecordsBufferC):
        return _extend_columns_c(builder, timestamp_ms, keys, values, indices, pos)
    return _extend_columns_py(builder, timestamp_ms, keys, values, indices, pos)


column_max_length: Callable[[BinaryColumn], int] = getattr(_records_c, "column_max_length", None) or _column_max_length_py


def row_indices(raw: bytes) -> Sequence[int]:
    """int32 row indices (as :func:`column_partitions` returns them) as a sequence (sliceable, and what
    :func:`extend_columns` takes)."""
    return memoryview(raw).cast("i")


__all__ = ["BinaryColumn", "column_item", "column_max_length", "extend_columns", "row_indices"]
