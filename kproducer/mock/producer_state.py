"""Idempotent-producer state of one partition: the epoch and the last five batches of each producer id.

The checks follow Apache Kafka's ProducerStateManager:

* a batch equal (same epoch, first and last sequence) to one of the producer's last five batches is a
  duplicate: it is not appended again and the client is told the original base offset;
* an older epoch is rejected (INVALID_PRODUCER_EPOCH);
* a newer epoch must start again at sequence 0;
* in the same epoch the first sequence must follow the last one (wrapping after 2**31-1), otherwise
  OUT_OF_ORDER_SEQUENCE_NUMBER;
* a producer the partition has no state for is accepted whatever its sequence (Kafka 2.5+), except
  after :meth:`ProducerStateTable.expire` dropped its state: then a sequence other than 0 gets
  UNKNOWN_PRODUCER_ID, the answer Kafka gave when a producer's state had been lost to retention.
"""
from __future__ import annotations

from collections import deque
from typing import Deque, Dict, NamedTuple, Optional, Set, Tuple

from ..protocol.errors import (
    NO_ERROR,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)

_INT32_MAX = 0x7FFFFFFF
MAX_CACHED_BATCHES = 5


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class ProducerEntry:
    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: Deque[BatchMetadata] = deque(maxlen=MAX_CACHED_BATCHES)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == _INT32_MAX and next_seq == 0)


class SequenceCheck(NamedTuple):
    error: int
    message: Optional[str]
    #: for a duplicate: the batch it duplicates
    duplicate: Optional[BatchMetadata]


_OK = SequenceCheck(NO_ERROR, None, None)


class ProducerStateTable:
    """Producer id -> entry, for one partition. The caller holds the partition's lock."""

    def __init__(self) -> None:
        self.entries: Dict[int, ProducerEntry] = {}
        self._expired: Set[int] = set()

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> SequenceCheck:
        """Validate a batch before it is appended. ``first_seq`` -1 means no sequence (epoch only)."""
        entry = self.entries.get(producer_id)
        if entry is None:
            if producer_id in self._expired and first_seq > 0:
                return SequenceCheck(
                    UnknownProducerIdError.code,
                    f"no state for producer {producer_id} (expired); sequence {first_seq} is not 0",
                    None,
                )
            return _OK
        if epoch < entry.epoch:
            return SequenceCheck(
                InvalidProducerEpochError.code,
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}",
                None,
            )
        if first_seq < 0:
            return _OK
        if epoch > entry.epoch:
            if first_seq != 0:
                return SequenceCheck(
                    OutOfOrderSequenceNumberError.code,
                    f"invalid sequence {first_seq} for new epoch {epoch} of producer {producer_id} (must be 0)",
                    None,
                )
            return _OK
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return SequenceCheck(NO_ERROR, None, batch)
        if not in_sequence(entry.last_seq, first_seq):
            return SequenceCheck(
                OutOfOrderSequenceNumberError.code,
                f"out of order sequence for producer {producer_id} epoch {epoch}: "
                f"expected {entry.last_seq + 1 if entry.last_seq < _INT32_MAX else 0}, got {first_seq}",
                None,
            )
        return _OK

    def epoch_of(self, producer_id: int) -> Optional[int]:
        """The producer's epoch on this partition, None when the partition has no state for it."""
        entry = self.entries.get(producer_id)
        return entry.epoch if entry is not None else None

    def has_batches(self, producer_id: int) -> bool:
        """Whether the partition remembers batches of the producer in its current epoch (Kafka: the producer
        state entry is not empty; a marker that bumps the epoch empties it)."""
        entry = self.entries.get(producer_id)
        return entry is not None and bool(entry.batches)

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
    ) -> None:
        """Record an appended batch (``first_seq`` -1 for a batch without sequence, e.g. a marker)."""
        entry = self.entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch)
            self.entries[producer_id] = entry
            self._expired.discard(producer_id)
        if first_seq >= 0:
            entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, max_timestamp))

    def expire(self, producer_id: Optional[int] = None) -> None:
        """Forget a producer's state (all producers when None), as retention would."""
        ids = list(self.entries) if producer_id is None else [producer_id]
        for pid in ids:
            self.entries.pop(pid, None)
            self._expired.add(pid)

    def snapshot(self) -> Dict[int, Tuple[int, int]]:
        """Producer id -> (epoch, last sequence)."""
        return {pid: (e.epoch, e.last_seq) for pid, e in self.entries.items()}
