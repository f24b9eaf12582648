"""The transaction coordinator of a mock cluster: transactional ids, their producer id and epoch,
the partitions and groups of the ongoing transaction, and its completion (markers into the partition
logs, transactional offsets into the group's committed offsets).

Completion is synchronous: EndTxn returns once every marker is written, so there is no
PrepareCommit/PrepareAbort state for a client to observe (no CONCURRENT_TRANSACTIONS answers).
A transaction open for longer than its timeout is aborted, with an epoch bump that fences its
producer, the next time the coordinator touches that transactional id or a read_committed Fetch or
ListOffsets asks for a last stable offset (:meth:`TransactionCoordinator.expire_timed_out`). InitProducerId for a transactional id
with an open transaction aborts it under a fencing epoch and gives the caller the epoch after that (old + 2),
as Apache Kafka does.

Transactions v2 (KIP-890 part 2), decided per request version as Apache Kafka 4.1 decides it: Produce v12+ and
TxnOffsetCommit v5+ add their partition (group) to the transaction here (:meth:`TransactionCoordinator.add_implicitly`),
and EndTxn v5+ ends the transaction with an epoch bump (the markers carry the new epoch; an exhausted epoch gives a
new producer id with epoch 0) and answers the producer id and epoch to use next, following Kafka's table of
retries (:meth:`TransactionCoordinator.end_txn`). With ``transaction.version`` 0 they are refused with
UNSUPPORTED_VERSION (Apache Kafka 4.1 fails to write them to its transaction log, and leaves the id answering
CONCURRENT_TRANSACTIONS afterwards; the mock leaves it usable).
"""
from __future__ import annotations

import logging
import threading
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..protocol.errors import (
    NO_ERROR,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from .state import ClusterState

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
_MAX_EPOCH = 32767 - 1
#: EndTxn from this version ends a transaction the transactions v2 way (Kafka's transactionVersionForEndTxn)
END_TXN_V2_VERSION = 5
#: TxnOffsetCommit from this version adds the group to the transaction itself (Kafka's
#: txnOffsetCommitRequestVersionToTransactionSupportedOperation: ADD_PARTITION)
TXN_OFFSET_COMMIT_V2_VERSION = 5

EMPTY = "Empty"
ONGOING = "Ongoing"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"


class TxnMetadata:
    __slots__ = (
        "transactional_id",
        "producer_id",
        "producer_epoch",
        "timeout_ms",
        "state",
        "partitions",
        "groups",
        "pending_offsets",
        "started_at_ms",
        "prev_producer_id",
        "last_producer_epoch",
    )

    def __init__(self, transactional_id: str, producer_id: int, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = 0
        #: the producer id before an EndTxn v5 gave a new one (an exhausted epoch), to recognize its retry
        self.prev_producer_id = -1
        #: the epoch before an InitProducerId with the producer's id and epoch bumped it (-1: none), to recognize
        #: its retry (Apache Kafka's lastProducerEpoch)
        self.last_producer_epoch = -1
        self.timeout_ms = timeout_ms
        self.state = EMPTY
        self.partitions: Set[TopicPartition] = set()
        self.groups: Set[str] = set()
        self.pending_offsets: Dict[str, Dict[TopicPartition, Tuple[int, Optional[str]]]] = {}
        self.started_at_ms = 0.0


def fenced_code(api: str, version: int) -> int:
    """PRODUCER_FENCED for the versions that know it (KIP-588), INVALID_PRODUCER_EPOCH before. TxnOffsetCommit
    answers INVALID_PRODUCER_EPOCH at every version (Apache Kafka 4.1: the group coordinator asks the transaction
    coordinator to verify, which turns PRODUCER_FENCED into INVALID_PRODUCER_EPOCH)."""
    if api == "txn_offset_commit":
        return InvalidProducerEpochError.code
    first = {"init_producer_id": 4, "add_partitions_to_txn": 2, "add_offsets_to_txn": 2, "end_txn": 2}[api]
    return ProducerFencedError.code if version >= first else InvalidProducerEpochError.code


class TransactionCoordinator:
    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._lock = threading.RLock()
        self.transactions: Dict[str, TxnMetadata] = {}

    # ------------------------------------------------------------------------------ helpers

    def _expire_if_timed_out(self, meta: TxnMetadata) -> None:
        if meta.state == ONGOING and self._state.clock.monotonic_ms() - meta.started_at_ms > meta.timeout_ms:
            log.info("transaction %r timed out after %d ms: aborting", meta.transactional_id, meta.timeout_ms)
            self._bump_epoch(meta)
            self._complete(meta, commit=False)

    def expire_timed_out(self) -> None:
        """Abort every transaction open for longer than its timeout. Apache Kafka's coordinator does it on its
        own (every transaction.abort.timed.out.transaction.cleanup.interval.ms), so read_committed consumers
        move on without the producer; the mock does it when a read_committed Fetch or ListOffsets asks."""
        with self._lock:
            for meta in list(self.transactions.values()):
                self._expire_if_timed_out(meta)

    def _bump_epoch(self, meta: TxnMetadata) -> None:
        if meta.producer_epoch >= _MAX_EPOCH:
            meta.producer_id = self._state.next_producer_id()
            meta.producer_epoch = 0
        else:
            meta.producer_epoch += 1

    def _validate(self, transactional_id: str, producer_id: int, epoch: int, api: str,
                  version: int) -> Tuple[int, Optional[TxnMetadata]]:
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return InvalidProducerIdMappingError.code, None
        self._expire_if_timed_out(meta)
        if meta.producer_epoch != epoch:
            return fenced_code(api, version), None
        return NO_ERROR, meta

    def _complete(self, meta: TxnMetadata, commit: bool, marker_epoch: Optional[int] = None) -> None:
        """Write the markers (with ``marker_epoch``, default the producer's), apply or drop the transactional
        offsets, and end the transaction."""
        touched: List[TopicPartition] = []
        epoch = meta.producer_epoch if marker_epoch is None else marker_epoch
        for topic, index in sorted(meta.partitions):
            p = self._state.partition(topic, index)
            if p is None:
                continue
            with p.log.lock:
                p.log.append_marker(meta.producer_id, epoch, commit, p.leader_epoch, self._state.clock.wall_ms())
            touched.append((topic, index))
        if commit:
            for group, offsets in meta.pending_offsets.items():
                self._state.commit_offsets(group, offsets)
        meta.partitions = set()
        meta.groups = set()
        meta.pending_offsets = {}
        meta.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        for topic, index in touched:
            self._state.notify_append(topic, index)

    # ---------------------------------------------------------------------------------- APIs

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int,
                         version: int) -> Tuple[int, int, int]:
        """Returns (error, producer id, epoch)."""
        if timeout_ms <= 0 or timeout_ms > self._state.config.transaction_max_timeout_ms:
            return InvalidTransactionTimeoutError.code, -1, -1
        with self._lock:
            meta = self.transactions.get(transactional_id)
            if meta is None:
                meta = TxnMetadata(transactional_id, self._state.next_producer_id(), timeout_ms)
                self.transactions[transactional_id] = meta
                return NO_ERROR, meta.producer_id, meta.producer_epoch
            if producer_id >= 0 and (producer_id != meta.producer_id or epoch != meta.producer_epoch):
                if producer_id == meta.producer_id and epoch == meta.last_producer_epoch >= 0 \
                        and meta.state != ONGOING:
                    # as Apache Kafka (prepareIncrementProducerEpoch): the retry of an epoch bump whose answer was
                    # lost gets the bumped epoch again
                    return NO_ERROR, meta.producer_id, meta.producer_epoch
                return fenced_code("init_producer_id", version), -1, -1
            meta.timeout_ms = timeout_ms
            before = (meta.producer_id, meta.producer_epoch, meta.state)
            if meta.state == ONGOING:
                # as Apache Kafka: abort with a fencing epoch (the markers carry it), then a new epoch again
                # for the caller -- the new producer gets the old epoch + 2
                self._bump_epoch(meta)
                self._complete(meta, commit=False)
                if producer_id >= 0 and meta.producer_id == before[0]:
                    # the producer's own epoch bump while its transaction is open: Apache Kafka aborts it
                    # (answering CONCURRENT_TRANSACTIONS meanwhile) and gives the producer that epoch + 1
                    meta.state = EMPTY
                    meta.last_producer_epoch = before[1]
                    return NO_ERROR, meta.producer_id, meta.producer_epoch
            self._bump_epoch(meta)
            meta.state = EMPTY
            # a bump by the producer itself can be retried; a new producer's InitProducerId (or a fencing abort, or a
            # new producer id) forgets the previous epoch, as Kafka does
            bumped_own = producer_id >= 0 and before[2] != ONGOING and meta.producer_id == before[0]
            meta.last_producer_epoch = before[1] if bumped_own else -1
            return NO_ERROR, meta.producer_id, meta.producer_epoch

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: List[TopicPartition], version: int) -> Dict[TopicPartition, int]:
        with self._lock:
            error, meta = self._validate(transactional_id, producer_id, epoch, "add_partitions_to_txn", version)
            if meta is None:
                return {tp: error for tp in partitions}
            unknown = {tp for tp in partitions if self._state.partition(*tp) is None}
            if unknown:
                return {tp: UnknownTopicOrPartitionError.code if tp in unknown else OperationNotAttemptedError.code
                        for tp in partitions}
            self._begin(meta)
            for tp in partitions:
                p = self._state.partition(*tp)
                assert p is not None
                with p.log.lock:
                    p.log.txn_members[producer_id] = epoch
                meta.partitions.add(tp)
            return {tp: NO_ERROR for tp in partitions}

    def add_implicitly(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Sequence[TopicPartition] = (), group: Optional[str] = None) -> int:
        """Transactions v2: a partition leader (Produce v12+) or a group coordinator (TxnOffsetCommit v5+) adds
        ``partitions`` or ``group`` to the transaction, as Apache Kafka's AddPartitionsToTxnManager asks its
        coordinator (AddPartitionsToTxn v5, not verify-only). Returns the error the request answers (Kafka turns
        the coordinator's PRODUCER_FENCED into INVALID_PRODUCER_EPOCH); the mock has no pending transitions, so
        never CONCURRENT_TRANSACTIONS."""
        with self._lock:
            meta = self.transactions.get(transactional_id)
            if meta is None or meta.producer_id != producer_id:
                return InvalidProducerIdMappingError.code
            self._expire_if_timed_out(meta)
            if meta.producer_epoch != epoch:
                return InvalidProducerEpochError.code
            new_partitions = [tp for tp in partitions if tp not in meta.partitions]
            if meta.state == ONGOING and not new_partitions and (group is None or group in meta.groups):
                return NO_ERROR
            if self._state.transaction_version == 0:
                # (Apache Kafka 4.1 cannot write a transactions-v2 state at transaction.version 0)
                return UnsupportedVersionError.code
            self._begin(meta)
            for tp in new_partitions:
                p = self._state.partition(*tp)
                if p is None:
                    continue
                with p.log.lock:
                    p.log.txn_members[producer_id] = epoch
                meta.partitions.add(tp)
            if group is not None:
                meta.groups.add(group)
            return NO_ERROR

    def _begin(self, meta: TxnMetadata) -> None:
        if meta.state != ONGOING:
            meta.state = ONGOING
            meta.started_at_ms = self._state.clock.monotonic_ms()

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str, version: int) -> int:
        with self._lock:
            error, meta = self._validate(transactional_id, producer_id, epoch, "add_offsets_to_txn", version)
            if meta is None:
                return error
            self._begin(meta)
            meta.groups.add(group)
            return NO_ERROR

    def txn_offset_commit(self, transactional_id: str, group: str, producer_id: int, epoch: int,
                          offsets: Dict[TopicPartition, Tuple[int, Optional[str]]],
                          version: int) -> Dict[TopicPartition, int]:
        with self._lock:
            error, meta = self._validate(transactional_id, producer_id, epoch, "txn_offset_commit", version)
            if meta is None:
                return {tp: error for tp in offsets}
            if meta.state != ONGOING or group not in meta.groups:
                # no AddOffsetsToTxn before: v5+ (transactions v2) adds the group here; before, Apache Kafka's
                # verification answers TRANSACTION_ABORTABLE (v4) or INVALID_TXN_STATE
                if version >= TXN_OFFSET_COMMIT_V2_VERSION:
                    error = self.add_implicitly(transactional_id, producer_id, epoch, group=group)
                else:
                    error = TransactionAbortableError.code if version >= 4 else InvalidTxnStateError.code
                if error:
                    return {tp: error for tp in offsets}
            result: Dict[TopicPartition, int] = {}
            pending = meta.pending_offsets.setdefault(group, {})
            for tp, value in offsets.items():
                if self._state.partition(*tp) is None:
                    result[tp] = UnknownTopicOrPartitionError.code
                else:
                    pending[tp] = value
                    result[tp] = NO_ERROR
            return result

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                version: int) -> Tuple[int, int, int]:
        """Returns (error, producer id, epoch): the producer id and epoch to use next (EndTxn v5+; -1, -1 before
        v5 and with an error)."""
        if version >= END_TXN_V2_VERSION:
            return self._end_txn_v2(transactional_id, producer_id, epoch, commit)
        with self._lock:
            error, meta = self._validate(transactional_id, producer_id, epoch, "end_txn", version)
            if meta is None:
                return error, -1, -1
            if meta.state == ONGOING:
                self._complete(meta, commit)
                return NO_ERROR, -1, -1
            if (meta.state == COMPLETE_COMMIT and commit) or (meta.state == COMPLETE_ABORT and not commit):
                return NO_ERROR, -1, -1  # a retry of the EndTxn that completed it
            return InvalidTxnStateError.code, -1, -1

    def _end_txn_v2(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Tuple[int, int, int]:
        """EndTxn v5+ as Apache Kafka 4.1's TransactionCoordinator.endTransaction for transactions v2. A retry
        (the epoch just before the bumped one, or the last epoch of an exhausted producer id) of the EndTxn that
        completed the transaction answers NONE with the current ids again. Otherwise:

        ============== ====================== ======================
        state          abort                  commit
        ============== ====================== ======================
        Ongoing        markers, epoch + 1     markers, epoch + 1
        Empty          epoch + 1              INVALID_TXN_STATE
        CompleteAbort  epoch + 1              INVALID_TXN_STATE
        CompleteCommit epoch + 1              INVALID_TXN_STATE
        ============== ====================== ======================

        (an abort of a retry in the other completed state, and a commit retried after an abort, are
        INVALID_TXN_STATE). A stale epoch is PRODUCER_FENCED, a wrong producer id INVALID_PRODUCER_ID_MAPPING."""
        failed = (InvalidProducerIdMappingError.code, -1, -1)
        with self._lock:
            meta = self.transactions.get(transactional_id)
            if meta is None:
                return failed
            self._expire_if_timed_out(meta)
            retry_on_overflow = (meta.prev_producer_id == producer_id and epoch == _MAX_EPOCH
                                 and meta.producer_epoch == 0)
            retry_on_bump = meta.producer_id == producer_id and meta.producer_epoch == epoch + 1
            if meta.producer_id != producer_id and not retry_on_overflow:
                return failed
            completed = (COMPLETE_COMMIT, COMPLETE_ABORT)
            valid = (retry_on_bump or retry_on_overflow or epoch == meta.producer_epoch if meta.state in completed
                     else epoch == meta.producer_epoch)
            if not valid:
                return ProducerFencedError.code, -1, -1
            retry = retry_on_bump or retry_on_overflow
            if meta.state in completed and retry:
                if (meta.state == COMPLETE_COMMIT) == commit:
                    return NO_ERROR, meta.producer_id, meta.producer_epoch
                return InvalidTxnStateError.code, -1, -1
            if commit and meta.state != ONGOING:
                return InvalidTxnStateError.code, -1, -1
            if self._state.transaction_version == 0:
                return UnsupportedVersionError.code, -1, -1
            # the markers carry the bumped epoch; an exhausted epoch continues under a new producer id at 0
            bumped = meta.producer_epoch + 1
            self._complete(meta, commit, marker_epoch=bumped)
            if meta.producer_epoch >= _MAX_EPOCH:
                meta.prev_producer_id = meta.producer_id
                meta.producer_id = self._state.next_producer_id()
                meta.producer_epoch = 0
            else:
                meta.producer_epoch = bumped
            return NO_ERROR, meta.producer_id, meta.producer_epoch

    def describe(self, transactional_id: str) -> Optional[TxnMetadata]:
        with self._lock:
            return self.transactions.get(transactional_id)
