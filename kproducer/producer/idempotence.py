"""Idempotence bookkeeping: the producer id and epoch, and per partition the next sequence number, the
last acknowledged sequence and the batches in flight (Java's ``TxnPartitionMap`` and the sequence half
of ``TransactionManager``).

The sender thread and the accumulator's drain (under the transaction manager's lock) use it; it
changes no transaction state itself: what a failed batch means for a transaction is decided by
:class:`~kproducer.producer.transaction_manager.TransactionManager`, which owns one of these.
"""
from __future__ import annotations

import logging
from collections import deque
from itertools import islice
from typing import Deque, Dict, Iterable, List, NamedTuple, Tuple

from .batch import ProducerBatch

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767
# a broker finds duplicates among the last 5 batches of each producer in a partition
BROKER_DUPLICATE_WINDOW = 5
_SEQUENCE_MASK = 0x7FFFFFFF
_HALF_SEQUENCE_SPACE = 1 << 30


def sequence_after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b``. Sequences wrap to 0 after 2**31-1 (Java's
    ``DefaultRecordBatch.incrementSequence``), so they compare in serial order (RFC 1982 on 31 bits): the
    sequences a producer compares are never 2**30 apart."""
    return 0 < ((a - b) & _SEQUENCE_MASK) < _HALF_SEQUENCE_SPACE


def _oldest_first(st: "PartitionSequences") -> None:
    """Sort a partition's batches in flight by sequence, oldest first: by how far each is behind the next
    sequence (every batch in flight was numbered before it), which holds across the wrap."""
    nxt = st.next_sequence
    st.in_flight.sort(key=lambda b: (b.base_sequence - nxt) & _SEQUENCE_MASK)


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0


NO_PRODUCER = ProducerIdAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)


class PartitionSequences:
    """One partition's sequence state under the current producer id and epoch."""

    __slots__ = ("next_sequence", "last_acked_sequence", "in_flight", "last_acked_offset", "recent")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.in_flight: List[ProducerBatch] = []  # sorted by base sequence
        self.last_acked_offset = -1
        # the last batches given sequences, oldest first (the broker's duplicate window, at most)
        self.recent: Deque[ProducerBatch] = deque(maxlen=BROKER_DUPLICATE_WINDOW)

    def reset(self) -> None:
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.in_flight = []
        self.recent.clear()


class IdempotenceState:
    """Producer id, epoch and sequence numbers. Not thread-safe by itself: the owner's lock guards it."""

    def __init__(self) -> None:
        self.producer_id_and_epoch = NO_PRODUCER
        self._partitions: Dict[TopicPartition, PartitionSequences] = {}

    # -- producer id and epoch ------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        return self.producer_id_and_epoch.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.producer_id_and_epoch.epoch

    def has_producer_id(self) -> bool:
        return self.producer_id_and_epoch.producer_id >= 0  # (is_valid, without a property call)

    def set_producer_id_and_epoch(self, value: ProducerIdAndEpoch) -> None:
        """A new id or epoch: every sequence starts again at 0."""
        self.producer_id_and_epoch = value
        self.reset_sequences()

    def reset_sequences(self) -> None:
        for st in self._partitions.values():
            st.reset()

    def is_current(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` was numbered under the current producer id and epoch."""
        return batch.producer_id == self.producer_id and batch.producer_epoch == self.producer_epoch

    # -- sequences --------------------------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> PartitionSequences:
        st = self._partitions.get(tp)
        if st is None:
            st = self._partitions[tp] = PartitionSequences()
        return st

    def take_for_drain(self, batch: ProducerBatch, transactional: bool = False) -> bool:
        """``batch`` (the head of its partition's queue) is about to be drained: False when it must wait (the
        sequence part of Java's ``RecordAccumulator.shouldStopDrainBatchesForPartition``); else it keeps its
        sequence (a retry) or gets the next one, and True. One call per drained batch."""
        pid, epoch = self.producer_id_and_epoch
        tp = batch.tp
        st = self._partitions.get(tp)
        sequenced = batch.base_sequence >= 0 and batch.producer_id == pid and batch.producer_epoch == epoch
        if st is not None and st.in_flight:
            in_flight = st.in_flight
            if sequenced:
                # a retry goes out only when it is the first unacknowledged batch: order is kept
                if batch.base_sequence != in_flight[0].base_sequence:
                    return False
            else:
                oldest = None  # the oldest batch in flight not done yet
                for b in in_flight:
                    if not b.is_done():
                        oldest = b
                        break
                # The first batch of a partition under this producer id goes alone: a broker with no state for
                # the producer accepts any sequence (Kafka 2.5+), so a batch pipelined behind a first batch that
                # fails retriably (nothing written) would be written before it, and the first batch's retry
                # would then be refused as OUT_OF_ORDER_SEQUENCE until delivery.timeout.ms.
                if oldest is not None and st.last_acked_sequence < 0:
                    return False
                # A new batch must not push the oldest unacknowledged batch out of the broker's duplicate
                # window (the producer's last 5 batches): its retry would be refused as OUT_OF_ORDER_SEQUENCE
                # instead of acknowledged as a duplicate. One connection never has more than 5 in flight, but
                # after a leader move the old and the new leader's connections together can.
                recent = st.recent
                if (oldest is not None and len(recent) >= BROKER_DUPLICATE_WINDOW
                        and oldest not in islice(recent, 1, None)):  # (batches compare by identity)
                    return False
        # Whatever sequence the batch carries now is the one the broker will answer: a sequence moved while
        # it was out (``reopened``) excuses only the OUT_OF_ORDER answer to the send before the move (Java
        # clears it in ProducerBatch.close at drain). Kept set, every later OUT_OF_ORDER_SEQUENCE answer
        # would be retried as well, until delivery.timeout.ms, instead of renewing the producer id.
        batch.reopened = False
        if sequenced:
            return True
        if st is None:
            st = self._partitions[tp] = PartitionSequences()
        seq = st.next_sequence
        batch.set_producer_state(pid, epoch, seq, transactional)
        st.next_sequence = (seq + batch.builder._count) & _SEQUENCE_MASK
        in_flight = st.in_flight
        in_flight.append(batch)
        st.recent.append(batch)
        if len(in_flight) > 1 and sequence_after(in_flight[-2].base_sequence, seq):  # kept sorted: rarely moves
            _oldest_first(st)
        return True

    def add_split_batches(self, original: ProducerBatch, parts: List[ProducerBatch]) -> None:
        """Parts of a split batch take over its sequence range in order."""
        st = self.partition(original.tp)
        if original in st.in_flight:
            st.in_flight.remove(original)
        if not original.has_sequence() or not self.is_current(original):
            return
        seq = original.base_sequence
        for part in parts:
            part.set_producer_state(original.producer_id, original.producer_epoch, seq, original.is_transactional)
            seq = (seq + part.record_count) & _SEQUENCE_MASK
            st.in_flight.append(part)
        _oldest_first(st)
        # the parts take the original's place among the recent batches
        recent = list(st.recent)
        if original in recent:
            i = recent.index(original)
            recent[i:i + 1] = parts
        st.recent.clear()
        st.recent.extend(recent)

    def first_in_flight_sequence(self, tp: TopicPartition) -> int:
        st = self._partitions.get(tp)
        return st.in_flight[0].base_sequence if st and st.in_flight else -1

    def sequence_number(self, tp: TopicPartition) -> int:
        st = self._partitions.get(tp)
        return st.next_sequence if st else 0

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        st = self._partitions.get(tp)
        return st.last_acked_sequence if st else -1

    def last_acked_offset(self, tp: TopicPartition) -> int:
        st = self._partitions.get(tp)
        return st.last_acked_offset if st else -1

    def is_next_sequence(self, batch: ProducerBatch) -> bool:
        return batch.base_sequence == ((self.last_acked_sequence(batch.tp) + 1) & _SEQUENCE_MASK)

    def has_in_flight(self, tp: TopicPartition) -> bool:
        st = self._partitions.get(tp)
        return bool(st and st.in_flight)

    def remove_in_flight(self, batch: ProducerBatch) -> None:
        st = self._partitions.get(batch.tp)
        if st is not None and batch in st.in_flight:
            st.in_flight.remove(batch)

    def handle_completed_batches(self, completed: Iterable[Tuple[ProducerBatch, int]]) -> None:
        """The broker wrote these batches (a produce response's, in its order) at these base offsets: each
        leaves its partition's in-flight list, and the partition's last acknowledged sequence and offset
        move on. Batches numbered under an older producer id or epoch change nothing."""
        pid, epoch = self.producer_id_and_epoch
        partitions = self._partitions
        for batch, base_offset in completed:
            st = partitions.get(batch.tp)
            if st is None or batch.producer_id != pid or batch.producer_epoch != epoch:
                continue
            in_flight = st.in_flight
            if in_flight and in_flight[0] is batch:  # the usual case: acknowledged in sequence order
                del in_flight[0]
            elif batch in in_flight:
                in_flight.remove(batch)
            count = batch.builder._count
            last = batch.last_sequence  # (-1: no sequence)
            if last >= 0 and (st.last_acked_sequence < 0 or sequence_after(last, st.last_acked_sequence)):
                st.last_acked_sequence = last
            if base_offset >= 0 and base_offset + count - 1 > st.last_acked_offset:
                st.last_acked_offset = base_offset + count - 1

    def has_later_sequences(self, batch: ProducerBatch) -> bool:
        """Whether batches were numbered after ``batch`` in its partition."""
        st = self._partitions.get(batch.tp)
        return st is not None and (bool(st.in_flight)
                                   or st.next_sequence != (batch.last_sequence + 1) & _SEQUENCE_MASK)

    def adjust_sequences_due_to_failed_batch(self, batch: ProducerBatch, queued: Iterable[ProducerBatch]) -> None:
        """The broker refused ``batch`` for good (nothing of it was written): every batch numbered after
        it in its partition moves down by its record count, so that no gap is left (Java's
        ``TransactionManager.adjustSequencesDueToFailedBatch``). ``queued`` are the batches waiting in the
        accumulator (retries keep their sequences there)."""
        st = self._partitions.get(batch.tp)
        if st is None or not batch.has_sequence() or not self.is_current(batch):
            return
        if batch in st.recent:
            st.recent.remove(batch)
        self._shift_later(st, batch, batch.record_count, queued)

    def replace_after_record_errors(self, original: ProducerBatch, kept: ProducerBatch, removed: int,
                                    queued: Iterable[ProducerBatch]) -> None:
        """KIP-467: ``removed`` records of ``original`` failed on their own and the rest moved to ``kept``,
        which takes the original's place and first sequence; later batches move down by ``removed``."""
        st = self._partitions.get(original.tp)
        if st is None or not original.has_sequence() or not self.is_current(original):
            return
        if original in st.in_flight:
            st.in_flight.remove(original)
        kept.set_producer_state(original.producer_id, original.producer_epoch, original.base_sequence,
                                original.is_transactional)
        kept.reopened = True
        st.in_flight.append(kept)
        recent = [kept if b is original else b for b in st.recent]
        st.recent.clear()
        st.recent.extend(recent)
        self._shift_later(st, original, removed, [b for b in queued if b is not kept])

    def _shift_later(self, st: PartitionSequences, failed: ProducerBatch, count: int,
                     queued: Iterable[ProducerBatch]) -> None:
        st.next_sequence = (st.next_sequence - count) & _SEQUENCE_MASK
        later = {id(b): b for b in st.in_flight}
        for b in queued:
            if b.tp == failed.tp:
                later.setdefault(id(b), b)
        for b in later.values():
            if b is failed or not b.has_sequence() or not self.is_current(b) \
                    or not sequence_after(b.base_sequence, failed.base_sequence):
                continue
            new_sequence = (b.base_sequence - count) & _SEQUENCE_MASK
            log.info("moving the sequence of a batch for %s-%s from %d to %d (records before it failed)",
                     b.topic, b.partition, b.base_sequence, new_sequence)
            b.set_producer_state(b.producer_id, b.producer_epoch, new_sequence, b.is_transactional)
            b.reopened = True  # its OUT_OF_ORDER_SEQUENCE answer, if already sent, is retried
        _oldest_first(st)

    def rewind_after_transaction(self) -> None:
        """A transaction ended (EndTxn answered) under the same epoch: every batch of it is done, and those
        that failed or were aborted unsent were not written, so each partition goes on right after its
        last acknowledged sequence (no gap for the next transaction's first batch)."""
        for st in self._partitions.values():
            if any(b.is_done() and b.error is not None for b in st.in_flight):
                continue  # a batch that may have been written: only a new epoch resolves this partition
            st.in_flight = [b for b in st.in_flight if not b.is_done()]
            if not st.in_flight:
                st.next_sequence = (st.last_acked_sequence + 1) & _SEQUENCE_MASK
                st.recent = deque((b for b in st.recent if b.is_done() and b.error is None),
                                  maxlen=BROKER_DUPLICATE_WINDOW)

    def has_unresolved_batches(self) -> bool:
        """Whether a batch that was sent is done with an error without the broker having refused it (it was
        aborted before its retry): whether it was written is unknown."""
        return any(b.is_done() and b.error is not None for st in self._partitions.values() for b in st.in_flight)

    def reuse_failed_range(self, batch: ProducerBatch) -> None:
        """Nothing was numbered after ``batch``: the next batch may take its sequence range."""
        st = self._partitions.get(batch.tp)
        if st is not None and batch.has_sequence() and self.is_current(batch):
            st.next_sequence = batch.base_sequence
            if batch in st.recent:
                st.recent.remove(batch)
