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
"""
from __future__ import annotations

import logging
import threading
from typing import Dict, List, Optional, Set, Tuple

from ..protocol.errors import (
    NO_ERROR,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OperationNotAttemptedError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from .state import ClusterState

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
_MAX_EPOCH = 32767 - 1

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
    )

    def __init__(self, transactional_id: str, producer_id: int, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = 0
        self.timeout_ms = timeout_ms
        self.state = EMPTY
        self.partitions: Set[TopicPartition] = set()
        self.groups: Set[str] = set()
        self.pending_offsets: Dict[str, Dict[TopicPartition, Tuple[int, Optional[str]]]] = {}
        self.started_at_ms = 0.0


def fenced_code(api: str, version: int) -> int:
    """PRODUCER_FENCED for the versions that know it (KIP-588), INVALID_PRODUCER_EPOCH before."""
    first = {"init_producer_id": 4, "add_partitions_to_txn": 2, "add_offsets_to_txn": 2, "end_txn": 2,
             "txn_offset_commit": 3}[api]
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

    def _complete(self, meta: TxnMetadata, commit: bool) -> None:
        """Write the markers, apply or drop the transactional offsets, and end the transaction."""
        touched: List[TopicPartition] = []
        for topic, index in sorted(meta.partitions):
            p = self._state.partition(topic, index)
            if p is None:
                continue
            with p.log.lock:
                p.log.append_marker(meta.producer_id, meta.producer_epoch, commit, p.leader_epoch,
                                    self._state.clock.wall_ms())
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
                return fenced_code("init_producer_id", version), -1, -1
            meta.timeout_ms = timeout_ms
            if meta.state == ONGOING:
                # as Apache Kafka: abort with a fencing epoch (the markers carry it), then a new epoch again
                # for the caller -- the new producer gets the old epoch + 2
                self._bump_epoch(meta)
                self._complete(meta, commit=False)
            self._bump_epoch(meta)
            meta.state = EMPTY
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
                return {tp: InvalidTxnStateError.code for tp in offsets}
            result: Dict[TopicPartition, int] = {}
            pending = meta.pending_offsets.setdefault(group, {})
            for tp, value in offsets.items():
                if self._state.partition(*tp) is None:
                    result[tp] = UnknownTopicOrPartitionError.code
                else:
                    pending[tp] = value
                    result[tp] = NO_ERROR
            return result

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, version: int) -> int:
        with self._lock:
            error, meta = self._validate(transactional_id, producer_id, epoch, "end_txn", version)
            if meta is None:
                return error
            if meta.state == ONGOING:
                self._complete(meta, commit)
                return NO_ERROR
            if (meta.state == COMPLETE_COMMIT and commit) or (meta.state == COMPLETE_ABORT and not commit):
                return NO_ERROR  # a retry of the EndTxn that completed it
            return InvalidTxnStateError.code

    def describe(self, transactional_id: str) -> Optional[TxnMetadata]:
        with self._lock:
            return self.transactions.get(transactional_id)
