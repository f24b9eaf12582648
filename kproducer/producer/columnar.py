"""``send_columns()``: ``Producer.send_batch()`` for keys and values given as binary columns (Arrow's buffers,
:class:`kproducer.protocol.columns.BinaryColumn`), without a Python ``bytes`` object per record.

The same admission rules as send_batch() (kproducer.producer.admission), applied per column where they can be:
the producer is open, the topic is valid and known (metadata within max.block.ms), the longest key + the longest
value fit max.request.size (else the first record too large is named), an explicit partition is in range, keyed
records go by ``toPositive(murmur2(key)) % partitions``, keyless ones (and records whose key is null) by the
uniform sticky partitioner with the same choices send_batch() makes, and a transactional producer must be in a
transaction. Records get one timestamp (now, or ``timestamp_ms``) and no headers.

Only for a producer without key/value serializers, interceptors, a custom partitioner or
partitioner.ignore.keys (:func:`columnar_supported`); send_batch() is the general path.
"""
from __future__ import annotations

import array
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ..protocol.accel import records as _records_c
from ..protocol.columns import BinaryColumn, _Rows, column_max_length, row_indices
from .admission import BOUND_EXTRA, RECORD_OVERHEAD, bad_partition, check_timestamp, check_topic
from .future import BatchSendFuture
from .partitioner import murmur2

if TYPE_CHECKING:
    from .kafka_producer import Producer


def columnar_supported(producer: "Producer") -> bool:
    """Whether :func:`send_columns` may be used with ``producer`` (nothing per record is configured)."""
    adm = producer._admission
    return bool(adm.plain) and not adm.ignore_keys


def _column_partitions_py(keys: BinaryColumn, num_partitions: int) -> Tuple[List[Tuple[int, bytes]], bytes]:
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    rows = _Rows(keys)
    grouped: Dict[int, "array.array[int]"] = {}
    nulls: "array.array[int]" = array.array("i")
    for i in range(rows.length):
        k = rows.item(i)
        if k is None:
            nulls.append(i)
        else:
            p = (murmur2(k) & 0x7FFFFFFF) % num_partitions
            grouped.setdefault(p, array.array("i")).append(i)
    return [(p, a.tobytes()) for p, a in grouped.items()], nulls.tobytes()


def column_partitions(keys: BinaryColumn, num_partitions: int) -> Tuple[List[Tuple[int, bytes]], bytes]:
    """Rows of ``keys`` grouped by ``toPositive(murmur2(key)) % num_partitions`` as ``[(partition, int32 rows
    as bytes)]`` in order of first appearance, and the rows with a null key (int32 as bytes)."""
    fn = getattr(_records_c, "column_partitions", None)
    if fn is not None:
        return fn(keys, num_partitions)  # type: ignore[no-any-return]
    return _column_partitions_py(keys, num_partitions)


class _CumulativeSizes(Sequence[int]):
    """Running totals of the records' sizes as send_batch() counts them for the sticky partitioner (value
    length + RECORD_OVERHEAD, no key) for a value column whose null rows take no bytes in the data buffer."""

    def __init__(self, offsets: Sequence[int], first: int, n: int) -> None:
        self._offsets = offsets
        self._first = first
        self._base = offsets[first]
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return (i + 1) * RECORD_OVERHEAD + self._offsets[self._first + i + 1] - self._base


def _sticky_sizes(values: BinaryColumn) -> Sequence[int]:
    rows = _Rows(values)
    if values.validity is not None:
        lengths = [rows.length_of(i) for i in range(rows.length)]
        if sum(lengths) != rows.offsets[values.offset + values.length] - rows.offsets[values.offset]:
            # null rows that hold bytes in the data buffer (Arrow allows it): count them as send_batch() does
            total = 0
            out: List[int] = []
            for n in lengths:
                total += RECORD_OVERHEAD + n
                out.append(total)
            return out
    return _CumulativeSizes(rows.offsets, values.offset, values.length)


def _check_sizes(producer: "Producer", keys: Optional[BinaryColumn], values: BinaryColumn) -> None:
    adm = producer._admission
    limit = adm.max_request_size - RECORD_OVERHEAD - BOUND_EXTRA
    if column_max_length(values) + (column_max_length(keys) if keys is not None else 0) <= limit:
        return
    vrows = _Rows(values)
    krows = _Rows(keys) if keys is not None else None
    for i in range(values.length):
        size = RECORD_OVERHEAD + vrows.length_of(i) + (krows.length_of(i) if krows is not None else 0)
        if size + BOUND_EXTRA > adm.max_request_size:
            raise adm.too_large(size + BOUND_EXTRA, i)


def send_columns(producer: "Producer", topic: str, values: BinaryColumn, keys: Optional[BinaryColumn] = None,
                 partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> BatchSendFuture:
    """Queue ``values.length`` records for ``topic`` (row i: key ``keys`` row i or none, value ``values`` row i,
    a null row is a null key/value); ``partition``: one partition for all, or None (the partitioner). Raises
    like send_batch() (nothing queued then); ValueError when the producer is configured with something that
    works per record (see :func:`columnar_supported`) or the columns' lengths differ."""
    if producer._closed:
        producer._raise_closed("send_columns()")
    sender = producer._sender
    if sender.fatal_error is not None:
        raise sender.fatal_error
    check_topic(topic)
    if not columnar_supported(producer):
        raise ValueError("send_columns() needs a producer without serializers, interceptors, a custom "
                         "partitioner or partitioner.ignore.keys: use send_batch()")
    n = values.length
    if keys is not None and keys.length != n:
        raise ValueError(f"keys has {keys.length} rows but values has {n}")
    if partition is not None and type(partition) is not int:
        raise ValueError(f"partition must be an int or None, got {partition!r} (a bool is not a partition)")
    adm = producer._admission
    clock = producer._clock
    timestamp = clock.wall_ms() if timestamp_ms is None else check_timestamp(timestamp_ms)
    start = clock.monotonic_ms()
    if n == 0:
        return BatchSendFuture(topic, 0, [], timestamp)
    _check_sizes(producer, keys, values)
    metadata = producer._metadata
    cluster = metadata.cluster
    num_partitions = cluster.partition_counts.get(topic)
    if num_partitions is None or (partition is not None and partition >= num_partitions):
        num_partitions = producer._wait_on_metadata(topic, partition, producer._max_block_ms)
        cluster = metadata.cluster
    else:
        producer._touch(topic, start)  # (the send core's rule: kproducer/producer/core.py)
    groups: List[Tuple[int, Sequence[int]]]
    if partition is not None:
        if not 0 <= partition < num_partitions:
            raise bad_partition(partition, num_partitions, topic)
        groups = [(partition, range(n))]
    else:
        available = cluster.available.get(topic, ())
        sticky = adm.sticky
        if keys is None:
            groups = [(p, range(a, b)) for p, a, b in
                      sticky.runs_cumulative(topic, _sticky_sizes(values), available, num_partitions)]
        else:
            keyed, null_raw = column_partitions(keys, num_partitions)
            groups = [(p, row_indices(raw)) for p, raw in keyed]
            if null_raw:
                vrows = _Rows(values)
                grouped: Dict[int, "array.array[int]"] = {}
                for i in row_indices(null_raw):
                    p = sticky.partition(topic, available, num_partitions)
                    sticky.record_appended(topic, RECORD_OVERHEAD + vrows.length_of(i), available, num_partitions)
                    grouped.setdefault(p, array.array("i")).append(i)
                # a partition that has keyed rows too takes all its rows in row order, as send_batch() does
                merged = dict(groups)
                for p, a in grouped.items():
                    both = sorted(list(merged[p]) + a.tolist()) if p in merged else a.tolist()
                    merged[p] = row_indices(array.array("i", both).tobytes())
                groups = list(merged.items())
    adm.check_can_send(topic, [part for part, _rows in groups])
    acc = producer._accumulator
    segments = producer._append_groups(groups, start, lambda part, rows, remaining, now, segs: acc.append_columns(
        topic, part, timestamp, keys, values, rows, remaining, now, segs))
    return BatchSendFuture(topic, n, segments, timestamp)


__all__ = ["column_partitions", "columnar_supported", "send_columns"]
