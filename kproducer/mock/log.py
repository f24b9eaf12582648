"""In-memory partition logs.

A :class:`PartitionLog` keeps each appended record batch as the raw bytes the producer sent, with only
the base offset and partition leader epoch rewritten (neither is covered by the CRC), so appends and
Fetch responses never decode records. Records are decoded only when someone asks for them
(:meth:`PartitionLog.records`, ListOffsets by timestamp).

It also keeps what transactions need: the open transaction of each producer (its first offset, which
bounds the last stable offset), the producers whose transaction includes this partition, and the
aborted transactions that a read_committed consumer must filter.
"""
from __future__ import annotations

import threading
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_KEY,
    RecordBatchHeader,
    build_control_batch,
    read_batch_header,
    read_batches,
    stamp_batch,
)
from .producer_state import ProducerStateTable


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the abort marker


@dataclass(frozen=True)
class StoredRecord:
    """One record as the broker stores it."""

    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, Optional[bytes]]] = field(default_factory=list)
    producer_id: int = -1
    producer_epoch: int = -1
    #: the record's sequence number (base sequence + offset delta), -1 without idempotence
    sequence: int = -1
    is_transactional: bool = False
    is_control: bool = False
    #: for a control record: 0 abort marker, 1 commit marker
    control_type: Optional[int] = None
    timestamp_type: int = 0
    batch_base_offset: int = 0


class PartitionLog:
    """The records of one partition. Callers hold :attr:`lock` around every method that changes or
    reads the log (the producer-state check and the append must be atomic)."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.lock = threading.Lock()
        self._batches: List[bytes] = []
        self._bases: List[int] = []
        self._lasts: List[int] = []
        self._max_timestamps: List[int] = []
        self.log_start_offset = 0
        #: the log end offset, which is also the high watermark (no replication to wait for)
        self.end_offset = 0
        self.size_bytes = 0
        self.producers = ProducerStateTable()
        #: producer id -> first offset of its open transaction in this partition
        self.ongoing_txns: Dict[int, int] = {}
        #: producer id -> epoch, for producers whose ongoing transaction includes this partition
        self.txn_members: Dict[int, int] = {}
        self.aborted: List[AbortedTxn] = []

    # ----------------------------------------------------------------------------- writing

    def append(self, data: bytes, header: RecordBatchHeader, leader_epoch: int) -> int:
        """Append one validated batch; returns its base offset."""
        base = self.end_offset
        stored = stamp_batch(data, base, leader_epoch)
        last = base + header.last_offset_delta
        self._batches.append(stored)
        self._bases.append(base)
        self._lasts.append(last)
        self._max_timestamps.append(header.max_timestamp)
        self.end_offset = last + 1
        self.size_bytes += len(stored)
        pid = header.producer_id
        if pid >= 0:
            self.producers.update(
                pid, header.producer_epoch, header.base_sequence, header.last_sequence, base, last,
                header.max_timestamp,
            )
            if header.is_transactional and not header.is_control and pid not in self.ongoing_txns:
                self.ongoing_txns[pid] = base
        return base

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, leader_epoch: int,
                      timestamp_ms: Optional[int] = None) -> int:
        """Write a transaction marker (a control batch, stamped ``timestamp_ms``, default now) and close
        the producer's transaction here."""
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        data = build_control_batch(
            CONTROL_COMMIT if commit else CONTROL_ABORT, timestamp_ms, producer_id, producer_epoch
        )
        offset = self.append(data, read_batch_header(data, 0, verify_crc=False), leader_epoch)
        first = self.ongoing_txns.pop(producer_id, None)
        if not commit and first is not None:
            self.aborted.append(AbortedTxn(producer_id, first, offset))
        self.txn_members.pop(producer_id, None)
        return offset

    # ----------------------------------------------------------------------------- reading

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, or the high watermark."""
        if self.ongoing_txns:
            return min(self.ongoing_txns.values())
        return self.end_offset

    def read(self, offset: int, max_bytes: int, upper: int, min_one: bool) -> Tuple[List[bytes], int]:
        """Whole batches from the one holding ``offset``, below ``upper``, up to ``max_bytes``
        (the first batch even when larger if ``min_one``). Returns (batches, total size)."""
        i = bisect_left(self._lasts, offset)
        batches = self._batches
        lasts = self._lasts
        out: List[bytes] = []
        total = 0
        n = len(batches)
        while i < n and lasts[i] < upper:
            b = batches[i]
            if total + len(b) > max_bytes and (out or not min_one):
                break
            out.append(b)
            total += len(b)
            i += 1
        return out, total

    def aborted_between(self, start: int, upper: int) -> List[AbortedTxn]:
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < upper]

    def batch_count(self) -> int:
        return len(self._batches)

    def raw_batches(self) -> List[bytes]:
        return list(self._batches)

    def records(self) -> List[StoredRecord]:
        """Every stored record, decoded (control records included)."""
        return decode_batches(self._batches)

    def offset_for_timestamp(self, timestamp: int) -> Optional[Tuple[int, int]]:
        """(offset, timestamp) of the first record whose timestamp is >= ``timestamp``."""
        for i, max_ts in enumerate(self._max_timestamps):
            if max_ts >= timestamp:
                for rec in decode_batches([self._batches[i]]):
                    if rec.timestamp >= timestamp and not rec.is_control:
                        return rec.offset, rec.timestamp
        return None

    def offset_of_max_timestamp(self) -> Optional[Tuple[int, int]]:
        """(offset, timestamp) of the record with the largest timestamp (the first of equals)."""
        if not self._batches:
            return None
        best = max(range(len(self._batches)), key=lambda i: (self._max_timestamps[i], -i))
        target = self._max_timestamps[best]
        for rec in decode_batches([self._batches[best]]):
            if rec.timestamp == target:
                return rec.offset, rec.timestamp
        return self._lasts[best], target


def decode_batches(batches: List[bytes]) -> List[StoredRecord]:
    out: List[StoredRecord] = []
    for batch in read_batches(b"".join(batches), verify_crc=False):
        control = batch.is_control
        for rec in batch.records:
            control_type: Optional[int] = None
            if control and rec.key is not None and len(rec.key) >= 4:
                control_type = CONTROL_KEY.unpack_from(rec.key)[1]
            out.append(
                StoredRecord(
                    offset=rec.offset,
                    timestamp=rec.timestamp,
                    key=rec.key,
                    value=rec.value,
                    headers=list(rec.headers),
                    producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch,
                    sequence=(batch.base_sequence + rec.offset_delta) % (1 << 31) if batch.base_sequence >= 0 else -1,
                    is_transactional=batch.is_transactional,
                    is_control=control,
                    control_type=control_type,
                    timestamp_type=batch.timestamp_type,
                    batch_base_offset=batch.base_offset,
                )
            )
    return out
