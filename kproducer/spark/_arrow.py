"""Arrow record batches -> what the producer takes, one group per (topic, partition).

Two forms: :func:`column_groups` gives the key and value columns as their Arrow buffers
(:class:`~kproducer.protocol.columns.BinaryColumn`, for ``send_columns``: no Python object per row at all);
:func:`groups` gives lists of ``bytes`` for ``Producer.send_batch`` (the path for rows with headers).
Measured with pyarrow 26 here: ``cast(binary).to_pylist()`` is the fastest way to get a column's
``bytes`` objects (~0.14 us a value), faster than slicing the data buffer by the offsets in Python.
Grouping by topic and by partition happens in Arrow (unique / filter, a stable sort and slices) in both.
"""
from __future__ import annotations

from typing import Any, Iterator, List, NamedTuple, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from ..protocol.columns import BinaryColumn
from ._schema import HEADERS, KEY, PARTITION, TOPIC, VALUE, ColumnPlan

Header = Tuple[str, Optional[bytes]]


class SinkDataError(ValueError):
    """A row that cannot be written (a null topic with no topic option)."""


class Group(NamedTuple):
    topic: str
    partition: Optional[int]
    values: List[Optional[bytes]]
    keys: Optional[List[Optional[bytes]]]
    headers: Optional[List[Optional[List[Header]]]]
    nbytes: int


class ColumnGroup(NamedTuple):
    topic: str
    partition: Optional[int]
    values: BinaryColumn
    keys: Optional[BinaryColumn]
    rows: int
    nbytes: int


def binary_column(col: Any) -> BinaryColumn:
    """A string/binary Arrow array as a :class:`BinaryColumn` over its own buffers (string and binary share
    the layout: no cast, no copy; view types are cast to binary, which copies)."""
    t = col.type
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        wide = True
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        wide = False
    else:  # string_view, binary_view
        col = col.cast(pa.binary())
        wide = False
    validity, offsets, data = col.buffers()[:3]
    if offsets is None:  # (not produced by Spark; an array built without buffers)
        return BinaryColumn.from_values(bytes_list(col))
    return BinaryColumn(offsets, data if data is not None else b"", validity if col.null_count else None,
                        col.offset, len(col), wide)


def bytes_list(col: Any) -> List[Optional[bytes]]:
    """A string/binary Arrow array as a list of bytes (None for nulls)."""
    t = col.type
    if pa.types.is_string(t):
        col = col.cast(pa.binary())
    elif pa.types.is_large_string(t):
        col = col.cast(pa.large_binary())
    elif hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t):
        col = col.cast(pa.binary())
    elif hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t):
        col = col.cast(pa.binary())
    out: List[Optional[bytes]] = col.to_pylist()
    return out


def _byte_length(col: Any) -> int:
    if col.null_count == len(col):
        return 0
    total = pc.sum(pc.binary_length(col)).as_py()
    return int(total or 0)


def headers_list(col: Any) -> Tuple[Optional[List[Optional[List[Header]]]], int]:
    """An ``array<struct<key:string,value:binary>>`` column as per-row lists of (key, value) pairs
    (None for a null or empty array), and the header bytes."""
    n = len(col)
    if col.null_count == n:
        return None, 0
    offsets = col.offsets.to_pylist()  # respects the array's slice offset; indexes col.values
    lo, hi = offsets[0], offsets[-1]
    if hi == lo:
        return None, 0
    entries = col.values.slice(lo, hi - lo)
    children = entries.flatten()  # applies the struct's own offset and nulls
    st = entries.type
    kcol, vcol = children[st.get_field_index("key")], children[st.get_field_index("value")]
    pairs = list(zip(kcol.to_pylist(), bytes_list(vcol)))
    nbytes = _byte_length(kcol) + _byte_length(vcol)
    valid = col.is_valid().to_pylist() if col.null_count else None
    out: List[Optional[List[Header]]] = []
    append = out.append
    for i in range(n):
        a, b = offsets[i] - lo, offsets[i + 1] - lo
        if b > a and (valid is None or valid[i]):
            append(pairs[a:b])
        else:
            append(None)
    return out, nbytes


def _by_topic(batch: Any, plan: ColumnPlan) -> Iterator[Tuple[str, Any]]:
    if plan.topic is not None:
        yield plan.topic, batch
        return
    tcol = batch.column(TOPIC)
    if tcol.null_count:
        raise SinkDataError(f"{tcol.null_count} row(s) have a null topic: fill the 'topic' column or set "
                            ".option('topic', ...) (which then applies to every row)")
    topics = pc.unique(tcol).to_pylist()
    if len(topics) == 1:
        yield topics[0], batch
        return
    for t in topics:
        yield t, batch.filter(pc.equal(tcol, t))


def _by_partition(batch: Any, plan: ColumnPlan) -> Iterator[Tuple[Optional[int], Any]]:
    if not plan.has_partition:
        yield None, batch
        return
    pcol = batch.column(PARTITION)
    n = len(pcol)
    if pcol.null_count == n:
        yield None, batch
        return
    if pcol.null_count == 0:
        mm = pc.min_max(pcol).as_py()
        if mm["min"] == mm["max"]:
            yield int(mm["min"]), batch
            return
    order = pc.sort_indices(pcol)  # stable: rows keep their order within a partition; nulls last
    ordered = batch.take(order)
    runs = pc.value_counts(ordered.column(PARTITION))
    start = 0
    for p, count in zip(runs.field("values").to_pylist(), runs.field("counts").to_pylist()):
        yield (None if p is None else int(p)), ordered.slice(start, count)
        start += count


def groups(batch: Any, plan: ColumnPlan) -> Iterator[Group]:
    """Split a record batch into per-(topic, partition) groups of bytes lists. The partition is None
    where the partition column is absent or null (the producer's partitioner then decides: murmur2 of
    the key, or sticky for keyless records)."""
    for topic, tb in _by_topic(batch, plan):
        for partition, pb in _by_partition(tb, plan):
            vcol = pb.column(VALUE)
            values = bytes_list(vcol)
            nbytes = _byte_length(vcol)
            keys: Optional[List[Optional[bytes]]] = None
            if plan.has_key:
                kcol = pb.column(KEY)
                if kcol.null_count < len(kcol):
                    keys = bytes_list(kcol)
                    nbytes += _byte_length(kcol)
            headers: Optional[List[Optional[List[Header]]]] = None
            if plan.has_headers:
                headers, hbytes = headers_list(pb.column(HEADERS))
                nbytes += hbytes
            yield Group(topic, partition, values, keys, headers, nbytes)


def _column_bytes(col: Any, c: BinaryColumn) -> int:
    """Bytes of the non-null rows: the offsets' span when there are no nulls (no per-row work)."""
    if col.null_count or c.length == 0:
        return _byte_length(col)
    width = 8 if c.wide else 4
    first = int.from_bytes(memoryview(c.offsets)[c.offset * width:(c.offset + 1) * width], "little", signed=True)
    end = c.offset + c.length
    last = int.from_bytes(memoryview(c.offsets)[end * width:(end + 1) * width], "little", signed=True)
    return last - first


def column_groups(batch: Any, plan: ColumnPlan) -> Iterator[ColumnGroup]:
    """:func:`groups` for rows without headers, with the key and value columns as their Arrow buffers (keys
    None when there is no key column or every key is null)."""
    for topic, tb in _by_topic(batch, plan):
        for partition, pb in _by_partition(tb, plan):
            vcol = pb.column(VALUE)
            values = binary_column(vcol)
            nbytes = _column_bytes(vcol, values)
            keys: Optional[BinaryColumn] = None
            if plan.has_key:
                kcol = pb.column(KEY)
                if kcol.null_count < len(kcol):
                    keys = binary_column(kcol)
                    nbytes += _column_bytes(kcol, keys)
            yield ColumnGroup(topic, partition, values, keys, len(vcol), nbytes)


__all__ = ["ColumnGroup", "Group", "SinkDataError", "binary_column", "bytes_list", "column_groups", "groups",
           "headers_list"]
