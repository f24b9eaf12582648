"""Producer id, epoch and per-partition sequence numbers (idempotence), and the transaction state machine.

Shared by the application threads (send, transaction calls) and the sender thread; one lock guards it.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import (
    ClusterAuthorizationFailedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    TransactionError,
    UnsupportedVersionError,
)
from .batch import ProducerBatch

log = logging.getLogger(__name__)

# a batch failing with one of these ends a transactional producer (Java's maybeTransitionToErrorState)
_FATAL_BATCH_ERRORS = (ProducerFencedError, ClusterAuthorizationFailedError, TransactionalIdAuthorizationFailedError,
                       UnsupportedVersionError)

TopicPartition = Tuple[str, int]
NO_PRODUCER_ID = -1
# a broker finds duplicates among the last 5 batches of each producer in a partition
BROKER_DUPLICATE_WINDOW = 5


class State:
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


_VALID_TRANSITIONS: Dict[str, Tuple[str, ...]] = {
    State.UNINITIALIZED: (State.READY, State.ABORTABLE_ERROR),
    State.INITIALIZING: (State.UNINITIALIZED, State.ABORTABLE_ERROR),
    State.READY: (State.INITIALIZING, State.ABORTABLE_ERROR),
    State.IN_TRANSACTION: (State.READY,),
    State.COMMITTING_TRANSACTION: (State.IN_TRANSACTION,),
    State.ABORTING_TRANSACTION: (State.IN_TRANSACTION, State.ABORTABLE_ERROR),
    State.ABORTABLE_ERROR: (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION, State.ABORTABLE_ERROR,
                            State.INITIALIZING),
    State.FATAL_ERROR: (),  # from anywhere
}


class TransactionalRequestResult:
    """What an application thread waits on while the sender performs a transactional step."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self._event = threading.Event()
        self.error: Optional[BaseException] = None

    def done(self, error: Optional[BaseException] = None) -> None:
        if not self._event.is_set():
            self.error = error
            self._event.set()

    def is_done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: Optional[float]) -> None:
        if not self._event.wait(timeout_s):
            raise KafkaTimeoutError(
                f"{self.operation} did not complete within {timeout_s} s (max.block.ms); it continues in the "
                "background and may be retried by calling it again"
            )
        if self.error is not None:
            raise self.error


class _PartitionState:
    __slots__ = ("next_sequence", "last_acked_sequence", "in_flight", "last_acked_offset", "recent")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.in_flight: List[ProducerBatch] = []  # sorted by base sequence
        self.last_acked_offset = -1
        # the last batches given sequences, oldest first (the broker's duplicate window, at most)
        self.recent: Deque[ProducerBatch] = deque(maxlen=BROKER_DUPLICATE_WINDOW)


class PendingRequest:
    """A transactional request waiting to be sent by the sender thread."""

    def __init__(self, kind: str, build: Callable[[], Tuple[Any, Dict[str, Any]]],
                 handler: Callable[[Optional[Dict[str, Any]], Optional[BaseException]], None],
                 result: Optional[TransactionalRequestResult], target: str = "coordinator",
                 priority: int = 5) -> None:
        self.kind = kind
        self.build = build  # -> (api, body)
        self.handler = handler
        self.result = result
        self.target = target  # "coordinator", "group:<id>", or "any"
        self.priority = priority
        self.attempts = 0
        self.retry_at_ms = 0.0


class TransactionManager:
    """Idempotent producer state (producer id/epoch, sequences) plus, with a transactional.id, the
    transaction state machine and its queue of coordinator requests."""

    def __init__(self, transactional_id: Optional[str] = None, transaction_timeout_ms: int = 60000,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.clock = clock
        self._lock = threading.RLock()
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self._partitions: Dict[TopicPartition, _PartitionState] = {}
        self.state = State.UNINITIALIZED
        self._last_error: Optional[BaseException] = None
        self.reset_required = False  # the producer id must be renewed once nothing is in flight
        self.init_in_flight = False
        # transactions
        self.partitions_in_txn: Set[TopicPartition] = set()
        self.pending_partitions: Set[TopicPartition] = set()  # added to the txn by the sender soon
        self.new_partitions: Set[TopicPartition] = set()  # not yet sent to the coordinator
        self.pending_requests: Deque[PendingRequest] = deque()
        self.coordinator: Optional[int] = None
        self.group_coordinators: Dict[str, int] = {}
        self.coordinator_addresses: Dict[int, Tuple[str, int]] = {}
        self.last_request_error: Optional[BaseException] = None
        self.in_flight_request: Optional[PendingRequest] = None
        self.pending_result: Optional[TransactionalRequestResult] = None
        self.transaction_started = False

    # -- producer id --------------------------------------------------------------------------------

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def needs_producer_id(self) -> bool:
        """For a plain idempotent producer: InitProducerId is due (first time, or after a reset)."""
        with self._lock:
            return not self.is_transactional and not self.has_producer_id() and not self.init_in_flight

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        with self._lock:
            log.info("producer id %s, epoch %s%s", producer_id, epoch,
                     f" (transactional.id={self.transactional_id})" if self.transactional_id else "")
            self.producer_id = producer_id
            self.producer_epoch = epoch
            self._reset_sequences()

    def _reset_sequences(self) -> None:
        for st in self._partitions.values():
            st.next_sequence = 0
            st.last_acked_sequence = -1
            st.in_flight = []
            st.recent.clear()

    def request_reset(self, reason: str) -> None:
        """Renew the producer id (a fresh id restarts every sequence at 0) once in-flight batches are
        resolved. Used when a partition's sequence state is unknown (an in-flight batch expired or failed,
        or the broker lost our producer state)."""
        with self._lock:
            if self.is_transactional:
                # a transaction cannot continue over a sequence problem: abort it
                self.transition_to_abortable_error(KafkaError(f"sequence state lost: {reason}"))
                return
            if not self.reset_required:
                log.warning("resetting the idempotent producer id: %s", reason)
            self.reset_required = True

    def maybe_reset(self, nothing_in_flight: bool, queued: List[ProducerBatch]) -> bool:
        """Perform a requested reset when no produce request is in flight: forget the producer id and
        clear the sequences of queued (retried) batches so they get new ones under the new id."""
        with self._lock:
            if not self.reset_required or not nothing_in_flight:
                return False
            self.reset_required = False
            self.producer_id = NO_PRODUCER_ID
            self.producer_epoch = -1
            self._reset_sequences()
            for b in queued:
                b.set_producer_state(NO_PRODUCER_ID, -1, -1, False)
            return True

    # -- sequences (called by the accumulator under its lock, from the sender thread) -----------------

    def _part(self, tp: TopicPartition) -> _PartitionState:
        st = self._partitions.get(tp)
        if st is None:
            st = self._partitions[tp] = _PartitionState()
        return st

    def should_stop_drain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` (the head of its queue) must wait (Kafka's shouldStopDrainBatchesForPartition)."""
        if self.producer_id < 0 or self.reset_required:
            return True
        if self.is_transactional and batch.tp not in self.partitions_in_txn:
            return True
        st = self._partitions.get(batch.tp)
        if st is None or not st.in_flight:
            return False
        if batch.has_sequence():
            # a retry goes out only when it is the first unacknowledged batch: order is kept
            return batch.base_sequence != st.in_flight[0].base_sequence
        oldest = next((b for b in st.in_flight if not b.is_done()), None)
        if oldest is None:
            return False
        # The first batch of a partition under this producer id goes alone: a broker with no state for the
        # producer accepts any sequence (Kafka 2.5+), so a batch pipelined behind a first batch that fails
        # retriably (nothing written) would be written before it, and the first batch's retry would then be
        # refused as OUT_OF_ORDER_SEQUENCE until delivery.timeout.ms.
        if st.last_acked_sequence < 0:
            return True
        # A new batch must not push the oldest unacknowledged batch out of the broker's duplicate window
        # (the producer's last 5 batches): its retry would be refused as OUT_OF_ORDER_SEQUENCE instead of
        # acknowledged as a duplicate. One connection never has more than 5 in flight, but after a leader
        # move the old and the new leader's connections together can.
        if len(st.recent) < BROKER_DUPLICATE_WINDOW:
            return False
        return not any(b is oldest for b in list(st.recent)[1:])

    def assign_sequence(self, batch: ProducerBatch) -> None:
        if batch.has_sequence() and batch.producer_id == self.producer_id:
            return
        st = self._part(batch.tp)
        batch.set_producer_state(self.producer_id, self.producer_epoch, st.next_sequence, self.is_transactional)
        st.next_sequence = (st.next_sequence + batch.record_count) & 0x7FFFFFFF
        st.in_flight.append(batch)
        st.recent.append(batch)
        st.in_flight.sort(key=lambda b: b.base_sequence)

    def add_split_batches(self, original: ProducerBatch, parts: List[ProducerBatch]) -> None:
        """Parts of a split batch take over its sequence range in order."""
        with self._lock:
            st = self._part(original.tp)
            if original in st.in_flight:
                st.in_flight.remove(original)
            if not original.has_sequence() or original.producer_id != self.producer_id:
                return
            seq = original.base_sequence
            for part in parts:
                part.set_producer_state(original.producer_id, original.producer_epoch, seq, original.is_transactional)
                seq = (seq + part.record_count) & 0x7FFFFFFF
                st.in_flight.append(part)
            st.in_flight.sort(key=lambda b: b.base_sequence)
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

    def is_next_sequence(self, batch: ProducerBatch) -> bool:
        st = self._partitions.get(batch.tp)
        last = st.last_acked_sequence if st else -1
        return batch.base_sequence == ((last + 1) & 0x7FFFFFFF)

    def handle_completed_batch(self, batch: ProducerBatch, base_offset: int) -> None:
        with self._lock:
            st = self._partitions.get(batch.tp)
            if st is None or batch.producer_id != self.producer_id:
                return
            if batch in st.in_flight:
                st.in_flight.remove(batch)
            if batch.has_sequence():
                if batch.last_sequence > st.last_acked_sequence or st.last_acked_sequence < 0:
                    st.last_acked_sequence = batch.last_sequence
            if base_offset >= 0:
                st.last_acked_offset = max(st.last_acked_offset, base_offset + batch.record_count - 1)

    def handle_failed_batch(self, batch: ProducerBatch, error: BaseException, sequence_unknown: bool) -> None:
        """A batch completed with an error. When the broker may or may not have written it (it expired in
        flight), or when later batches were already sequenced after it, the sequence state of its
        partition is no longer known and the producer id is reset."""
        with self._lock:
            st = self._partitions.get(batch.tp)
            if st is not None and batch in st.in_flight:
                st.in_flight.remove(batch)
            if self.is_transactional:
                if isinstance(error, _FATAL_BATCH_ERRORS):
                    if self.state != State.FATAL_ERROR:
                        self.transition_to_fatal_error(error)
                elif not isinstance(error, (TransactionError,)) and self.state == State.IN_TRANSACTION:
                    self.transition_to_abortable_error(error)
                return
            if batch.has_sequence() and batch.producer_id == self.producer_id:
                later = st is not None and (st.in_flight or st.next_sequence != (batch.last_sequence + 1) & 0x7FFFFFFF)
                if sequence_unknown or later:
                    self.request_reset(f"batch for {batch.topic}-{batch.partition} failed: {error}")
                elif st is not None:
                    # nothing after it: the next batch may reuse its sequence range
                    st.next_sequence = batch.base_sequence

    def remove_in_flight(self, batch: ProducerBatch) -> None:
        with self._lock:
            st = self._partitions.get(batch.tp)
            if st is not None and batch in st.in_flight:
                st.in_flight.remove(batch)

    def can_retry(self, error_code: int, batch: ProducerBatch, log_start_offset: int) -> bool:
        """Whether a failed batch may be retried (Kafka's TransactionManager.canRetry)."""
        if batch.producer_id != self.producer_id or batch.producer_epoch != self.producer_epoch:
            # the id was renewed meanwhile: the batch gets new sequences when it is drained again
            return True
        if error_code == 59:  # UNKNOWN_PRODUCER_ID: the broker lost our state (e.g. log truncated)
            if not self.is_transactional:
                self.request_reset("the broker does not know the producer id")
            return True
        if error_code == 45:  # OUT_OF_ORDER_SEQUENCE_NUMBER
            if not self.is_next_sequence(batch):
                # an earlier batch failed or is being retried: this one follows it again
                return True
            if not self.is_transactional:
                self.request_reset("the broker rejected the next expected sequence")
                return True
        return False

    # -- transactions: state ----------------------------------------------------------------------

    def _transition(self, target: str, error: Optional[BaseException] = None) -> None:
        with self._lock:
            if target != State.FATAL_ERROR and self.state not in _VALID_TRANSITIONS[target] and \
                    self.state != target:
                raise IllegalStateError(f"invalid transaction transition from {self.state} to {target}")
            if target in (State.FATAL_ERROR, State.ABORTABLE_ERROR):
                self._last_error = error
            elif target == State.READY:
                self._last_error = None
            log.debug("transaction state %s -> %s", self.state, target)
            self.state = target

    def transition_to_abortable_error(self, error: BaseException) -> None:
        with self._lock:
            if self.state in (State.ABORTING_TRANSACTION, State.FATAL_ERROR, State.ABORTABLE_ERROR):
                return
            if self.state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION):
                log.warning("transaction must be aborted: %s", error)
                self._transition(State.ABORTABLE_ERROR, error)

    def transition_to_fatal_error(self, error: BaseException) -> None:
        with self._lock:
            log.error("fatal transaction error: %s", error)
            self._transition(State.FATAL_ERROR, error)
            for req in list(self.pending_requests):
                if req.result is not None:
                    req.result.done(error)
            self.pending_requests.clear()
            if self.pending_result is not None:
                self.pending_result.done(error)

    @property
    def last_error(self) -> Optional[BaseException]:
        return self._last_error

    def has_fatal_error(self) -> bool:
        return self.state == State.FATAL_ERROR

    def has_abortable_error(self) -> bool:
        return self.state == State.ABORTABLE_ERROR

    def is_completing(self) -> bool:
        return self.state in (State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION)

    def is_aborting(self) -> bool:
        return self.state == State.ABORTING_TRANSACTION

    def has_ongoing_transaction(self) -> bool:
        return self.state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION,
                              State.ABORTABLE_ERROR)

    def is_in_transaction(self) -> bool:
        return self.state == State.IN_TRANSACTION

    def check_can_send(self, tp: TopicPartition) -> None:
        """Called by send(): a transactional producer may only send inside a transaction."""
        if not self.is_transactional:
            return
        with self._lock:
            if self.state == State.FATAL_ERROR:
                raise TransactionError(f"the producer hit a fatal error and must be closed: {self._last_error}")
            if self.state == State.ABORTABLE_ERROR:
                raise TransactionError(
                    f"the transaction must be aborted (abort_transaction()) after: {self._last_error}")
            if self.state != State.IN_TRANSACTION:
                raise TransactionError(
                    "send() on a transactional producer needs an open transaction: call begin_transaction() first"
                    f" (state {self.state})")
            if tp not in self.partitions_in_txn and tp not in self.pending_partitions:
                self.new_partitions.add(tp)

    def has_pending_requests(self) -> bool:
        return bool(self.pending_requests) or self.in_flight_request is not None or bool(self.new_partitions)
