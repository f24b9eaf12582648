"""The transaction manager: Java's ``TransactionManager`` for this client, read top to bottom.

1. :class:`State` and :data:`VALID_SOURCES` (Java's ``isTransitionValid``); ``TransactionManager._transition``
   is the only code that changes the state.
2. :class:`TransactionalRequestResult`: what an application thread waits on.
3. Coordinator requests: :class:`CoordinatorKey`, :class:`Outcome`, :class:`Priority` and one handler class
   per request (:class:`FindCoordinatorHandler`, :class:`InitProducerIdHandler`,
   :class:`AddPartitionsToTxnHandler`, :class:`AddOffsetsToTxnHandler`, :class:`TxnOffsetCommitHandler`,
   :class:`EndTxnHandler`). The sender sends them (``Sender._maybe_send_and_poll_transactional_request``);
   a handler's ``handle_response`` updates the manager and returns an :class:`Outcome`. The idempotent producer
   (no transactional.id) gets its producer id the same way: ``request_producer_id_if_needed`` queues an
   :class:`InitProducerIdHandler` for any broker (Java's ``bumpIdempotentEpochAndResetIdIfNeeded``).
4. :class:`TransactionManager`: the application's calls (``init_transactions`` ... ``begin_abort``), what
   ``send()`` checks, what the sender asks (``next_request``, ``retry``, coordinators), and the produce side
   (sequences through :class:`~kproducer.producer.idempotence.IdempotenceState`, failed batches).

Error meaning comes from the error classes' category flags (``retriable``, ``coordinator_moved``,
``fenced``, ``txn_fatal``, ``txn_abortable``; see :mod:`kproducer.protocol.errors`). See docs/transactions.md.

Transactions v2 (KIP-890 part 2) where the cluster's finalized ``transaction.version`` is 2 or more, read as Java
reads it (``_maybe_update_transaction_v2``): no AddPartitionsToTxn / AddOffsetsToTxn, Produce v12, TxnOffsetCommit
v5, EndTxn v5 whose producer id and epoch are adopted, no epoch bumps of our own. A transaction ends with the
version it started with; the sender asks ``TxnRequestHandler.max_version()`` and ``produce_max_version()``.
"""
from __future__ import annotations

import enum
import heapq
import itertools
import logging
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Set, Tuple, Type, Union

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import (
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    OperationNotAttemptedError,
    OutOfOrderSequenceNumberError,
    ProducerClosedError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    TransactionError,
    UnknownProducerIdError,
    UnknownServerError,
    UnsupportedVersionError,
    error_for_code,
)
from ..protocol import messages as m
from ..protocol.errors import NO_ERROR, TransactionAbortableError, error_class_for_code
from ..protocol.messages.api_versions import NO_FINALIZED_FEATURES, FinalizedFeatures
from ..protocol.messages.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from ..protocol.schema import Api
from .batch import ProducerBatch
from .consumer_group import ConsumerGroupMetadata, OffsetAndMetadata
from .idempotence import MAX_EPOCH, NO_PRODUCER, IdempotenceState, ProducerIdAndEpoch

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
Body = Dict[str, Any]
# InitProducerId v3 (KIP-360) lets a producer bump its own epoch with its current id and epoch
EPOCH_BUMP_INIT_PRODUCER_ID_VERSION = 3
# the idempotent producer's InitProducerId asks for no transaction timeout (Java: Integer.MAX_VALUE)
_NO_TRANSACTION_TIMEOUT_MS = 2147483647
# a failed produce batch with one of these ends a transactional producer (Java's maybeTransitionToErrorState)
_FATAL_BATCH_ERRORS = (ProducerFencedError, ClusterAuthorizationFailedError, TransactionalIdAuthorizationFailedError,
                       UnsupportedVersionError)
# ... and under transactions v2 this one too (Java 4.1: the coordinator no longer maps the producer id to the
# transactional id, and without AddPartitionsToTxn there is no request the abort could skip; see docs/transactions.md)
_FATAL_BATCH_ERRORS_V2 = _FATAL_BATCH_ERRORS + (InvalidProducerIdMappingError,)


class FencedTransactionError(ProducerFencedError, TransactionError):
    """What every transactional call raises once the producer was fenced: a ProducerFencedError (as Java
    throws) that is also a TransactionError (the producer must be closed)."""


# --------------------------------------------------------------------------------------------
# 1. states


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"

    def __str__(self) -> str:
        return self.value


S = State
#: target state -> the states it may be entered from (Java's ``State.isTransitionValid``); FATAL_ERROR
#: may be entered from any state
VALID_SOURCES: Dict[State, Tuple[State, ...]] = {
    S.UNINITIALIZED: (S.READY, S.ABORTABLE_ERROR),
    S.INITIALIZING: (S.UNINITIALIZED, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION),
    S.READY: (S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION),
    S.IN_TRANSACTION: (S.READY,),
    S.COMMITTING_TRANSACTION: (S.IN_TRANSACTION,),
    S.ABORTING_TRANSACTION: (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
    S.ABORTABLE_ERROR: (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING),
    S.FATAL_ERROR: tuple(State),
}
#: the states in which a transaction is being committed or aborted (every queued batch is sendable at once)
_COMPLETING = (S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION)


# --------------------------------------------------------------------------------------------
# 2. results

#: the calls whose result a retry after a timeout gets again (Java's handleCachedTransactionRequestResult)
_CACHED_CALLS = ("init_transactions", "commit_transaction", "abort_transaction")


class TransactionalRequestResult:
    """What an application thread waits on while the sender performs a transactional step."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self._event = threading.Event()
        self.error: Optional[BaseException] = None
        #: the application saw the outcome (a wait() that did not time out): Java's ``isAcked``. A call that
        #: timed out leaves it False, and a retry of that call gets this result again (see
        #: ``TransactionManager._cached``)
        self.acked = False

    def done(self, error: Optional[BaseException] = None) -> None:
        if not self._event.is_set():
            self.error = error
            self._event.set()

    def is_done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: Optional[float]) -> None:
        if not self._event.wait(timeout_s):
            then = (f"call {self.operation}() again to wait for its outcome" if self.operation in _CACHED_CALLS
                    else "it may be retried")
            raise KafkaTimeoutError(
                f"{self.operation} did not complete within {timeout_s} s (max.block.ms); it continues in the "
                f"background: {then}"
            )
        self.acked = True
        if self.error is not None:
            raise self.error


class _PendingTransition(NamedTuple):
    """Java's ``PendingStateTransition``: the result of the last init/commit/abort call, the state that call
    moves to, and its name, kept until the application has seen the outcome (``result.acked``)."""

    result: TransactionalRequestResult
    state: "State"
    operation: str


class PendingCallError(IllegalStateError, TransactionError):
    """A transactional call while an earlier ``init_transactions()`` / ``commit_transaction()`` /
    ``abort_transaction()`` has not returned its outcome (it timed out, or another thread still waits for
    it): Java's IllegalStateException "... because the previous call to ... timed out and must be retried".
    Call that one again first."""


# --------------------------------------------------------------------------------------------
# 3. coordinator requests


class CoordinatorType(enum.Enum):
    GROUP = KEY_TYPE_GROUP
    TRANSACTION = KEY_TYPE_TRANSACTION


class CoordinatorKey(NamedTuple):
    """Which coordinator a request goes to: the transaction coordinator of a transactional id, or the
    group coordinator of a consumer group."""

    type: CoordinatorType
    key: str


class Outcome(enum.Enum):
    SUCCESS = "success"  # the step is done (the handler completed its result)
    RETRY = "retry"  # send the same request again after retry.backoff.ms
    FIND_COORDINATOR = "find_coordinator"  # the coordinator moved: look it up, then retry
    FAILED = "failed"  # the handler failed its result and moved the manager to an error state


class Priority(enum.IntEnum):
    """Java's ``TransactionManager.Priority``: lower goes first."""

    FIND_COORDINATOR = 0
    INIT_PRODUCER_ID = 1
    ADD_PARTITIONS_OR_OFFSETS = 2
    END_TXN = 3
    EPOCH_BUMP = 4


def _error_class(code: int) -> Type[KafkaError]:
    return error_class_for_code(code)


class TxnRequestHandler:
    """One coordinator request: how to build it, where it goes, what its answer does."""

    name = "TxnRequest"
    api: Api
    priority = Priority.ADD_PARTITIONS_OR_OFFSETS
    is_end_txn = False

    def __init__(self, manager: "TransactionManager", result: Optional[TransactionalRequestResult] = None) -> None:
        self.manager = manager
        self.result = result or TransactionalRequestResult(self.name)
        self.attempts = 0
        self.retry_at_ms = 0.0

    def coordinator_key(self) -> Optional[CoordinatorKey]:
        """None: any broker will do."""
        return CoordinatorKey(CoordinatorType.TRANSACTION, self.manager.transactional_id or "")

    def build(self) -> Body:
        raise NotImplementedError

    def max_version(self) -> Optional[int]:
        """The highest version of ``api`` the sender may ask for (None: the client's default, ``api.client_max_version``):
        transactions v2 needs the versions of :data:`kproducer.protocol.messages.TRANSACTION_V2_VERSIONS`."""
        return None

    def handle_response(self, body: Body) -> Outcome:
        raise NotImplementedError

    # -- shared error handling (called with the manager's lock held) ----------------------------------

    def fatal(self, error: BaseException) -> Outcome:
        self.manager._transition_to_fatal_error(error)
        self.result.done(error)
        return Outcome.FAILED

    def abortable(self, error: BaseException) -> Outcome:
        if not self.manager.is_transactional:
            # the idempotent producer has no transaction to abort: the error ends it (Java's ends too, when its next
            # InitProducerId is refused the move from ABORTABLE_ERROR to INITIALIZING)
            return self.fatal(error)
        self.manager._transition_to_abortable_error(error)
        self.result.done(error)
        return Outcome.FAILED

    def abortable_if_possible(self, error: BaseException) -> Outcome:
        """Java's ``abortableErrorIfPossible``: abortable when the epoch can be bumped (by InitProducerId v3+ after
        the abort, or under transactions v2 by the abort's EndTxn), else fatal."""
        manager = self.manager
        if manager.can_handle_abortable_error():
            if manager.needs_client_epoch_bump():
                manager.epoch_bump_required = True
            return self.abortable(error)
        return self.fatal(error)

    def common_error(self, code: int, message: Optional[str] = None) -> Outcome:
        """The error handling every coordinator request shares; ``code`` is not NO_ERROR."""
        cls = _error_class(code)
        if cls.coordinator_moved:
            key = self.coordinator_key()
            if key is not None:
                self.manager.forget_coordinator(key)
            return Outcome.FIND_COORDINATOR
        if cls.retriable:
            return Outcome.RETRY
        if cls.fenced:
            why = ("another producer with the same transactional.id is active, or the coordinator aborted this "
                   "producer's transaction because it was open longer than transaction.timeout.ms (either way this "
                   "producer's epoch is stale)") if self.manager.is_transactional else "this producer's epoch is stale"
            return self.fatal(ProducerFencedError(f"{why}; close this producer (broker error {cls.name})"))
        if cls is InvalidProducerIdMappingError and self.manager.is_transaction_v2():
            # fatal under transactions v2, as in Java 4.1 (under v1 abortable, as in Java 3.x: docs/transactions.md)
            return self.fatal(error_for_code(code, message))
        if cls in (UnknownProducerIdError, InvalidProducerIdMappingError):
            return self.abortable_if_possible(error_for_code(code, message))
        if cls.txn_abortable:
            return self.abortable(error_for_code(code, message))
        return self.fatal(error_for_code(code, message))


class FindCoordinatorHandler(TxnRequestHandler):
    name = "FindCoordinator"
    api = m.FIND_COORDINATOR
    priority = Priority.FIND_COORDINATOR

    def __init__(self, manager: "TransactionManager", target: CoordinatorKey) -> None:
        super().__init__(manager)
        self.target = target

    def coordinator_key(self) -> Optional[CoordinatorKey]:
        return None

    def build(self) -> Body:
        return {"key": self.target.key, "key_type": self.target.type.value, "coordinator_keys": [self.target.key]}

    def handle_response(self, body: Body) -> Outcome:
        entry = body["coordinators"][0] if body.get("coordinators") else body
        code = entry["error_code"]
        if code == NO_ERROR:
            self.manager.set_coordinator(self.target, entry["node_id"], entry["host"], entry["port"])
            self.result.done()
            return Outcome.SUCCESS
        cls = _error_class(code)
        if cls.retriable or cls.coordinator_moved:
            return Outcome.RETRY
        if cls.txn_abortable:
            return self.abortable(error_for_code(code, entry.get("error_message")))
        return self.fatal(error_for_code(code, entry.get("error_message")))


class InitProducerIdHandler(TxnRequestHandler):
    """A new producer id (init_transactions(), or the idempotent producer's, at first and after a reset: to any
    broker), or, with ``bump``, a new epoch for the current id (KIP-360). Retries back off as KIP-580 says (the
    sender's ``_handle_transactional_response``)."""

    name = "InitProducerId"
    api = m.INIT_PRODUCER_ID

    def __init__(self, manager: "TransactionManager", bump: bool,
                 result: Optional[TransactionalRequestResult] = None) -> None:
        super().__init__(manager, result or TransactionalRequestResult(
            "abort_transaction" if bump else "init_transactions"))
        self.bump = bump
        #: init_transactions()' own request (not an epoch bump, even when a refused bump falls back to it): its
        #: success is where the transaction version is first read (Java's maybeUpdateTransactionV2Enabled(true))
        self.initial = not bump
        self.priority = Priority.EPOCH_BUMP if bump else Priority.INIT_PRODUCER_ID

    def coordinator_key(self) -> Optional[CoordinatorKey]:
        return super().coordinator_key() if self.manager.is_transactional else None

    def build(self) -> Body:
        manager = self.manager
        current = manager.producer_id_and_epoch if self.bump else NO_PRODUCER
        return {"transactional_id": manager.transactional_id,
                "transaction_timeout_ms": manager.transaction_timeout_ms if manager.is_transactional
                else _NO_TRANSACTION_TIMEOUT_MS,
                "producer_id": current.producer_id, "producer_epoch": current.epoch}

    def handle_response(self, body: Body) -> Outcome:
        code = body["error_code"]
        if code == NO_ERROR:
            self.manager._producer_id_initialized(ProducerIdAndEpoch(body["producer_id"], body["producer_epoch"]),
                                                  initial=self.initial)
            self.result.done()
            return Outcome.SUCCESS
        cls = _error_class(code)
        if cls in (TransactionalIdAuthorizationFailedError, ClusterAuthorizationFailedError):
            # Java: an abortable error, then (Sender.shouldHandleAuthorizationError) UNINITIALIZED, so that
            # init_transactions() may be called again once the ACL is fixed (the idempotent producer asks again)
            error = error_for_code(code)
            self.manager._authorization_failed(error)
            self.result.done(error)
            return Outcome.FAILED
        if self.bump and not (cls.retriable or cls.coordinator_moved or cls.fenced or cls.txn_fatal):
            # The broker advertised InitProducerId v3 but refused the bump (tansu answers UNKNOWN_SERVER_ERROR).
            # An InitProducerId without the current id also gives this transactional id a new epoch (it is
            # what init_transactions() sends): fall back to that rather than failing the producer.
            log.warning("the coordinator refused to bump the epoch of producer id %s (%s); asking for a new "
                        "epoch as init_transactions() does", self.manager.producer_id, cls.name)
            self.manager.epoch_bump_refused()
            self.bump = False
            return Outcome.RETRY
        if cls is UnknownServerError and not self.manager.is_transactional:
            return Outcome.RETRY  # (the idempotent producer tries again, as it always did here; Java fails it)
        return self.common_error(code)


class AddPartitionsToTxnHandler(TxnRequestHandler):
    name = "AddPartitionsToTxn"
    api = m.ADD_PARTITIONS_TO_TXN

    def __init__(self, manager: "TransactionManager", partitions: List[TopicPartition]) -> None:
        super().__init__(manager)
        self.partitions = partitions

    def build(self) -> Body:
        by_topic: Dict[str, List[int]] = {}
        for t, p in self.partitions:
            by_topic.setdefault(t, []).append(p)
        pid = self.manager.producer_id_and_epoch
        return {"transactional_id": self.manager.transactional_id, "producer_id": pid.producer_id,
                "producer_epoch": pid.epoch, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def handle_response(self, body: Body) -> Outcome:
        errors: Dict[TopicPartition, int] = {}
        for topic in body["results"]:
            for pr in topic["results_by_partition"]:
                errors[(topic["name"], pr["partition_index"])] = pr["partition_error_code"]
        manager = self.manager
        for code in errors.values():
            if code == NO_ERROR or code == OperationNotAttemptedError.code:
                continue
            cls = _error_class(code)
            if cls.coordinator_moved or cls.retriable or cls.fenced or cls.txn_fatal \
                    or cls in (UnknownProducerIdError, InvalidProducerIdMappingError):
                outcome = self.common_error(code)  # retried, or the transaction (or producer) cannot go on
                if outcome is Outcome.FAILED:
                    # the partitions are not pending any more (an abort must not wait for them)
                    manager.pending_partitions.difference_update(self.partitions)
                    manager.pending_partitions.difference_update(errors)
                return outcome
        # as Java: the partitions leave the pending set whatever the answer
        manager.pending_partitions.difference_update(errors)
        failed = [(tp, code) for tp, code in errors.items() if code != NO_ERROR]
        if failed:
            # e.g. TOPIC_AUTHORIZATION_FAILED (and OPERATION_NOT_ATTEMPTED for the others): abort the transaction
            real = [(tp, code) for tp, code in failed if code != OperationNotAttemptedError.code] or failed
            tp, code = real[0]
            return self.abortable(error_for_code(code, f"could not add {tp[0]}-{tp[1]} to the transaction"))
        manager.partitions_in_txn.update(errors)
        manager.transaction_started = True
        self.result.done()
        return Outcome.SUCCESS


class AddOffsetsToTxnHandler(TxnRequestHandler):
    name = "AddOffsetsToTxn"
    api = m.ADD_OFFSETS_TO_TXN

    def __init__(self, manager: "TransactionManager", offsets: Dict[TopicPartition, OffsetAndMetadata],
                 group: ConsumerGroupMetadata) -> None:
        super().__init__(manager, TransactionalRequestResult("send_offsets_to_transaction"))
        self.offsets = offsets
        self.group = group

    def build(self) -> Body:
        pid = self.manager.producer_id_and_epoch
        return {"transactional_id": self.manager.transactional_id, "producer_id": pid.producer_id,
                "producer_epoch": pid.epoch, "group_id": self.group.group_id}

    def handle_response(self, body: Body) -> Outcome:
        code = body["error_code"]
        if code == NO_ERROR:
            # the offsets themselves go to the group coordinator; the application waits for that
            self.manager.transaction_started = True
            self.manager._enqueue(TxnOffsetCommitHandler(self.manager, self.offsets, self.group, self.result, v2=False))
            return Outcome.SUCCESS
        return self.common_error(code)


class TxnOffsetCommitHandler(TxnRequestHandler):
    name = "TxnOffsetCommit"
    api = m.TXN_OFFSET_COMMIT

    def __init__(self, manager: "TransactionManager", offsets: Dict[TopicPartition, OffsetAndMetadata],
                 group: ConsumerGroupMetadata, result: TransactionalRequestResult, v2: bool = False) -> None:
        super().__init__(manager, result)
        self.offsets = offsets
        self.group = group
        #: transactions v2: TxnOffsetCommit v5 adds the group to the transaction (no AddOffsetsToTxn before it)
        self.v2 = v2

    def coordinator_key(self) -> Optional[CoordinatorKey]:
        return CoordinatorKey(CoordinatorType.GROUP, self.group.group_id)

    def max_version(self) -> Optional[int]:
        return m.TRANSACTION_V2_VERSIONS[self.api.key] if self.v2 else None

    def build(self) -> Body:
        by_topic: Dict[str, List[Body]] = {}
        for (t, p), om in sorted(self.offsets.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": om.offset,
                                               "committed_leader_epoch": om.leader_epoch,
                                               "committed_metadata": om.metadata})
        pid = self.manager.producer_id_and_epoch
        g = self.group
        return {"transactional_id": self.manager.transactional_id, "group_id": g.group_id,
                "producer_id": pid.producer_id, "producer_epoch": pid.epoch, "generation_id": g.generation_id,
                "member_id": g.member_id, "group_instance_id": g.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def handle_response(self, body: Body) -> Outcome:
        for topic in body["topics"]:
            for pr in topic["partitions"]:
                code = pr["error_code"]
                if code != NO_ERROR:
                    return self.common_error(code)
        self.result.done()
        return Outcome.SUCCESS


class EndTxnHandler(TxnRequestHandler):
    api = m.END_TXN
    priority = Priority.END_TXN
    is_end_txn = True

    def __init__(self, manager: "TransactionManager", commit: bool, v2: bool = False) -> None:
        self.name = "EndTxn(commit)" if commit else "EndTxn(abort)"
        super().__init__(manager, TransactionalRequestResult(
            "commit_transaction" if commit else "abort_transaction"))
        self.commit = commit
        #: the transaction's version, fixed when it started to end: v2 asks for EndTxn v5, which bumps the epoch
        self.v2 = v2

    def max_version(self) -> Optional[int]:
        return m.TRANSACTION_V2_VERSIONS[self.api.key] if self.v2 else None

    def build(self) -> Body:
        pid = self.manager.producer_id_and_epoch
        return {"transactional_id": self.manager.transactional_id, "producer_id": pid.producer_id,
                "producer_epoch": pid.epoch, "committed": self.commit}

    def handle_response(self, body: Body) -> Outcome:
        code = body["error_code"]
        if code == NO_ERROR:
            # EndTxn v5 (transactions v2) answers the producer id and epoch to go on with (the epoch bumped; a new
            # producer id at epoch 0 when it was exhausted); before v5 they are -1
            producer_id = body.get("producer_id", -1)
            next_ids = ProducerIdAndEpoch(producer_id, body.get("producer_epoch", -1)) if producer_id >= 0 else None
            if self.manager._complete_transaction(self.result, next_ids):
                return Outcome.SUCCESS  # an epoch bump follows and completes the result
            self.result.done()
            return Outcome.SUCCESS
        cls = _error_class(code)
        if not self.commit and cls is TransactionAbortableError:
            # Java 4.1: an abort that fails with an abortable error cannot be aborted again: fatal
            error = KafkaError(f"failed to abort the transaction: {error_for_code(code)}")
            error.__cause__ = error_for_code(code)
            return self.fatal(error)
        if cls is InvalidTxnStateError and self.v2:
            # (fatal, as in Java; say the likely cause: under v2 the coordinator's own abort of a timed-out
            # transaction bumped the epoch, so this EndTxn looks like a retry of that abort, not like a fence)
            return self.fatal(error_for_code(code, (
                f"the coordinator refused to {'commit' if self.commit else 'abort'} the transaction: it is no longer "
                "open under this producer's epoch (the coordinator may have aborted it because it was open longer "
                "than transaction.timeout.ms); close this producer")))
        return self.common_error(code)


# --------------------------------------------------------------------------------------------
# 4. the manager

Offsets = Mapping[TopicPartition, Union[int, OffsetAndMetadata]]


class TransactionManager:
    """Idempotent producer state (producer id/epoch, sequences) plus, with a transactional.id, the
    transaction state machine and its queue of coordinator requests. One lock guards it: application
    threads (send, the transaction calls) and the sender thread share it."""

    def __init__(self, transactional_id: Optional[str] = None, transaction_timeout_ms: int = 60000,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.transactional_id = transactional_id
        #: (an attribute, not a property: the network thread reads it several times an iteration)
        self.is_transactional = transactional_id is not None
        self.transaction_timeout_ms = transaction_timeout_ms
        self.clock = clock
        self._lock = threading.RLock()
        self._idempotence = IdempotenceState()
        self._state = State.UNINITIALIZED
        #: the state is COMMITTING_TRANSACTION or ABORTING_TRANSACTION (kept by _transition; an attribute, not a
        #: method: the accumulator reads it on the network thread, RecordAccumulator.sends_at_once)
        self.completing = False
        self._last_error: Optional[BaseException] = None
        # idempotent producer: renew the producer id once nothing is in flight
        self.reset_required = False
        #: idempotent producer: InitProducerIds refused (authorization) since it last had a producer id (the
        #: sender's backoff grows with them), and when the next one may be sent
        self.init_refusals = 0
        self._init_not_before_ms = 0.0
        # transactions
        self.partitions_in_txn: Set[TopicPartition] = set()
        self.pending_partitions: Set[TopicPartition] = set()  # AddPartitionsToTxn sent, not yet answered
        self.new_partitions: Set[TopicPartition] = set()  # not yet sent to the coordinator
        self.transaction_started = False
        self.epoch_bump_required = False
        self.coordinator_supports_epoch_bump = False
        self._epoch_bump_refused = False  # the coordinator advertised v3 but refused a bump
        # transactions v2 (KIP-890 part 2): the cluster's finalized features (the sender gives its network client's);
        # the transaction.version they gave when last read (Java's isTransactionV2Enabled) and their epoch; the
        # version of the open transaction; an epoch bump due after the transaction that saw v2 arrive
        self.finalized_features: Callable[[], FinalizedFeatures] = lambda: NO_FINALIZED_FEATURES
        self._features_epoch = -1
        self._v2_enabled = False
        self._txn_v2 = False
        self._upgrade_bump_required = False
        self._resumed = False  # the transaction was resumed (TransactionHandle): it ends the version-1 way
        self._queue: List[Tuple[int, int, TxnRequestHandler]] = []  # heap of (priority, order, handler)
        self._order = itertools.count()
        self._coordinators: Dict[CoordinatorKey, int] = {}
        self._coordinator_addresses: Dict[int, Tuple[str, int]] = {}
        self._in_flight: Optional[TxnRequestHandler] = None
        #: the last init/commit/abort call until the application saw its outcome (Java's pendingTransition)
        self._pending: Optional[_PendingTransition] = None

    # -- state -------------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def _transition(self, target: State, error: Optional[BaseException] = None) -> None:
        """The only place the state changes; refuses what Java's transition table refuses."""
        with self._lock:
            source = self._state
            if source not in VALID_SOURCES[target]:
                raise IllegalStateError(f"invalid transaction transition from {source} to {target}")
            if target in (State.FATAL_ERROR, State.ABORTABLE_ERROR):
                self._last_error = error
            elif target in (State.READY, State.INITIALIZING, State.UNINITIALIZED):
                self._last_error = None
            log.debug("transaction state %s -> %s", source, target)
            self._state = target
            self.completing = target in _COMPLETING

    def _transition_to_abortable_error(self, error: BaseException) -> None:
        with self._lock:
            if self._state in (State.ABORTING_TRANSACTION, State.FATAL_ERROR, State.ABORTABLE_ERROR):
                # (already abortable: the first error stays the cause, which the commit's error names; Java
                # keeps the latest, usually a consequence of the first)
                log.debug("not moving to ABORTABLE_ERROR in %s: %s", self._state, error)
                return
            if self._state not in VALID_SOURCES[State.ABORTABLE_ERROR]:
                return  # nothing open to abort (e.g. READY)
            log.warning("the transaction must be aborted: %s", error)
            self._transition(State.ABORTABLE_ERROR, error)

    def _transition_to_fatal_error(self, error: BaseException) -> None:
        with self._lock:
            log.error("fatal transaction error: %s" if self.is_transactional else "cannot get a producer id: %s", error)
            self._transition(State.FATAL_ERROR, error)
            queued, self._queue = self._queue, []
            for _p, _o, handler in queued:
                handler.result.done(error)
            if self._pending is not None:
                self._pending.result.done(error)

    def _authorization_failed(self, error: BaseException) -> None:
        """InitProducerId was refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED).
        Java moves to ABORTABLE_ERROR and its sender then to UNINITIALIZED (``shouldHandleAuthorizationError``),
        failing what was queued: ``init_transactions()`` may be called again once the ACLs allow it. The idempotent
        producer stays in ABORTABLE_ERROR until its sender has failed the queued records with ``error``
        (:meth:`transition_to_uninitialized`); then it asks again (KIP-679: the ACL may be added meanwhile)."""
        with self._lock:
            if self._state not in VALID_SOURCES[State.ABORTABLE_ERROR]:
                self._transition_to_fatal_error(error)
                return
            if not self.is_transactional:
                self.init_refusals += 1
                self._transition(State.ABORTABLE_ERROR, error)
                return
            log.warning("the transaction coordinator refused InitProducerId: %s; init_transactions() may be "
                        "called again once the ACLs allow it", error)
            self._transition(State.ABORTABLE_ERROR, error)
            queued, self._queue = self._queue, []
            for _p, _o, handler in queued:
                handler.result.done(error)
            self.epoch_bump_required = False
            self._upgrade_bump_required = False
            self._transition(State.UNINITIALIZED)

    def transition_to_uninitialized(self, retry_at_ms: float) -> None:
        """The idempotent producer's sender has failed the records queued when InitProducerId was refused (Java's
        ``Sender.shouldHandleAuthorizationError`` and ``transitionToUninitialized``): ABORTABLE_ERROR ->
        UNINITIALIZED; the next InitProducerId (:meth:`request_producer_id_if_needed`) is not sent before
        ``retry_at_ms`` (the sender's backoff: a refusal is not retried in a tight loop)."""
        with self._lock:
            self._transition(State.UNINITIALIZED)
            self._init_not_before_ms = retry_at_ms

    @property
    def last_error(self) -> Optional[BaseException]:
        return self._last_error

    def has_fatal_error(self) -> bool:
        return self._state == State.FATAL_ERROR

    def has_abortable_error(self) -> bool:
        return self._state == State.ABORTABLE_ERROR

    def is_aborting(self) -> bool:
        return self._state == State.ABORTING_TRANSACTION

    def can_bump_epoch(self) -> bool:
        return self.coordinator_supports_epoch_bump

    def note_init_producer_id_version(self, version: int) -> None:
        """The transaction coordinator's highest InitProducerId version (KIP-360 needs v3)."""
        with self._lock:
            self.coordinator_supports_epoch_bump = version >= EPOCH_BUMP_INIT_PRODUCER_ID_VERSION \
                and not self._epoch_bump_refused

    def epoch_bump_refused(self) -> None:
        with self._lock:
            self._epoch_bump_refused = True
            self.coordinator_supports_epoch_bump = False

    # -- transactions v2 (KIP-890 part 2) -------------------------------------------------------------

    @property
    def transaction_v2_enabled(self) -> bool:
        """Java's ``isTransactionV2Enabled``: whether the cluster's finalized ``transaction.version`` was 2 or more
        when last read -- when init_transactions() completed, and when a transaction started to end. The next
        transaction runs with it."""
        return self._v2_enabled

    def is_transaction_v2(self) -> bool:
        """Whether the transaction open now (or, with none open, the next one) runs under transactions v2: no
        AddPartitionsToTxn / AddOffsetsToTxn, Produce v12, TxnOffsetCommit v5, EndTxn v5 (which bumps the epoch).
        A transaction ends with the version it started with."""
        return self._txn_v2 if self.has_ongoing_transaction() else self._v2_enabled

    def _maybe_update_transaction_v2(self, on_initialization: bool) -> None:
        """Java's ``maybeUpdateTransactionV2Enabled``: read the finalized features when a newer epoch of them was
        seen. Switching from v1 to v2 (not at initialization) fences the v1 epoch: an epoch bump is due after the
        transaction that is ending (v2 no longer adds partitions explicitly)."""
        features = self.finalized_features()
        if features.epoch <= self._features_epoch:
            return
        self._features_epoch = features.epoch
        was = self._v2_enabled
        self._v2_enabled = features.transaction_version >= m.TRANSACTION_V2_LEVEL
        if self._v2_enabled != was:
            log.info("transaction.version %d (features epoch %d): transactions v%d from the next transaction%s",
                     features.transaction_version, features.epoch, 2 if self._v2_enabled else 1,
                     "" if on_initialization or not self._v2_enabled else ", after an epoch bump")
        if not on_initialization and not was and self._v2_enabled:
            self._upgrade_bump_required = True

    def needs_client_epoch_bump(self) -> bool:
        """Java's ``needToTriggerEpochBumpFromClient``: recovering from an abortable error needs an InitProducerId
        epoch bump after the abort (the coordinator supports it, and under transactions v2 EndTxn bumps instead)."""
        return self.coordinator_supports_epoch_bump and not self.is_transaction_v2()

    def can_handle_abortable_error(self) -> bool:
        """Java's ``canHandleAbortableError``: the epoch can be bumped after an abort, by InitProducerId v3+ or
        (transactions v2) by the abort's EndTxn; else an error that needs a new epoch is fatal."""
        return self.coordinator_supports_epoch_bump or self.is_transaction_v2()

    def produce_max_version(self) -> Optional[int]:
        """The highest Produce version for this producer's requests: v12 under transactions v2 (the leader adds the
        partition to the transaction), None (the client's default, v11) otherwise."""
        if self.is_transactional and self.is_transaction_v2():
            return m.TRANSACTION_V2_VERSIONS[m.PRODUCE.key]
        return None

    # -- the application's calls ----------------------------------------------------------------------

    def _require_transactional(self) -> None:
        if not self.is_transactional:
            raise TransactionError("transactions need a transactional_id: Producer(..., transactional_id='my-app-1')")

    def _check_not_fatal(self) -> None:
        if self._state == State.FATAL_ERROR:
            raise self._fatal_call_error()

    def _fatal_call_error(self) -> TransactionError:
        """Java's maybeFailWithError: after fencing, a ProducerFencedError; else an error caused by the fatal one."""
        cause = self._last_error
        message = f"the producer hit a fatal error and must be closed: {cause}"
        error = FencedTransactionError(message) if isinstance(cause, ProducerFencedError) else TransactionError(message)
        error.__cause__ = cause
        return error

    def _cached(self, operation: str, target: State,
                start: Callable[[], TransactionalRequestResult]) -> TransactionalRequestResult:
        """Java's ``handleCachedTransactionRequestResult``: a call repeated after its wait timed out gets the
        same result (pending, or completed in the background meanwhile) until the application has seen its
        outcome; another of these calls is refused meanwhile. Else ``start()`` begins a new one."""
        pending = self._pending
        if pending is not None:
            if pending.result.acked:
                self._pending = None
            elif pending.state is not target:
                raise self._pending_call_error(operation, pending)
            else:
                return pending.result
        result = start()
        self._pending = _PendingTransition(result, target, operation)
        return result

    def _throw_if_pending(self, operation: str) -> None:
        """Java's ``throwIfPendingState``: nothing else while a timed-out call was not repeated to its outcome."""
        pending = self._pending
        if pending is not None:
            if pending.result.acked:
                self._pending = None
            else:
                raise self._pending_call_error(operation, pending)

    @staticmethod
    def _pending_call_error(operation: str, pending: _PendingTransition) -> PendingCallError:
        return PendingCallError(
            f"{operation}() refused: the previous call to {pending.operation}() timed out (or another thread still "
            f"waits for it), so {pending.operation}() is pending: call {pending.operation}() again to wait for its "
            "outcome")

    def init_transactions(self) -> TransactionalRequestResult:
        self._require_transactional()
        with self._lock:
            # (the fatal check comes after the cached result, as in Java: a retry of a timed-out call collects its
            # outcome, even a fatal one, and so ends the pending call)
            return self._cached("init_transactions", State.INITIALIZING, self._start_init)

    def _start_init(self) -> TransactionalRequestResult:
        self._check_not_fatal()
        if self._state != State.UNINITIALIZED:
            raise TransactionError(f"init_transactions() was already called (state {self._state})")
        self._transition(State.INITIALIZING)
        handler = InitProducerIdHandler(self, bump=False)
        self._enqueue(handler)
        return handler.result

    def begin_transaction(self) -> None:
        self._require_transactional()
        with self._lock:
            self._throw_if_pending("begin_transaction")
            self._check_not_fatal()
            if self._state in (State.UNINITIALIZED, State.INITIALIZING):
                raise TransactionError("call init_transactions() before begin_transaction()")
            if self._state == State.COMMITTING_TRANSACTION:
                raise TransactionError("begin_transaction() while commit_transaction() is pending: call "
                                       "commit_transaction() again to wait for it")
            if self._state != State.READY:
                raise TransactionError(f"begin_transaction() needs the previous transaction to be finished (state "
                                       f"{self._state}); commit or abort it first")
            self._transition(State.IN_TRANSACTION)
            self.transaction_started = False
            self._txn_v2 = self._v2_enabled  # (the version it ends with, too)

    def send_offsets_to_transaction(self, offsets: Offsets,
                                    group: Union[str, ConsumerGroupMetadata]) -> TransactionalRequestResult:
        self._require_transactional()
        metadata = ConsumerGroupMetadata(group) if isinstance(group, str) else group
        if not isinstance(metadata, ConsumerGroupMetadata):
            raise TypeError(f"group must be a group id (str) or a ConsumerGroupMetadata, got {type(group).__name__}")
        with self._lock:
            self._throw_if_pending("send_offsets_to_transaction")
            self._check_not_fatal()
            if self._state == State.ABORTABLE_ERROR:
                raise TransactionError(f"the transaction must be aborted after: {self._last_error}") \
                    from self._last_error
            if self._state != State.IN_TRANSACTION:
                raise TransactionError("send_offsets_to_transaction() needs an open transaction (begin_transaction())")
            if not metadata.group_id:
                raise ValueError("group_id must be a non-empty consumer group id")
            checked: Dict[TopicPartition, OffsetAndMetadata] = {}
            for (topic, partition), value in dict(offsets).items():
                om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)  # type: ignore[arg-type]
                if not isinstance(om.offset, int) or isinstance(om.offset, bool) or om.offset < 0:
                    raise ValueError(f"offset for {topic}-{partition} must be a non-negative int, got {value!r}")
                checked[(topic, partition)] = om
            handler: TxnRequestHandler
            if self._txn_v2:
                # transactions v2: TxnOffsetCommit v5 adds the group to the transaction itself (no AddOffsetsToTxn)
                handler = TxnOffsetCommitHandler(self, checked, metadata,
                                                 TransactionalRequestResult("send_offsets_to_transaction"), v2=True)
                self.transaction_started = True
            else:
                handler = AddOffsetsToTxnHandler(self, checked, metadata)
            self._enqueue(handler)
            return handler.result

    def begin_commit(self) -> TransactionalRequestResult:
        self._require_transactional()
        with self._lock:
            return self._cached("commit_transaction", State.COMMITTING_TRANSACTION, self._start_commit)

    def _start_commit(self) -> TransactionalRequestResult:
        self._check_not_fatal()
        if self._state == State.ABORTABLE_ERROR:
            raise TransactionError(
                f"cannot commit: the transaction must be aborted (abort_transaction()) after: {self._last_error}"
            ) from self._last_error
        if self._state != State.IN_TRANSACTION:
            raise TransactionError(f"commit_transaction() needs an open transaction (state {self._state})")
        self._transition(State.COMMITTING_TRANSACTION)
        return self._begin_completing(commit=True)

    def begin_abort(self) -> TransactionalRequestResult:
        """Abort the open transaction; the caller fails the records still queued (TransactionAbortedError)."""
        self._require_transactional()
        with self._lock:
            return self._cached("abort_transaction", State.ABORTING_TRANSACTION, self._start_abort)

    def abort_at_close(self) -> Optional[TransactionalRequestResult]:
        """The producer closes with a transaction open (IN_TRANSACTION or ABORTABLE_ERROR): abort it, as
        Java's sender does. A call whose outcome the application never collected does not stand in the way
        (it is complete: a transaction is open again). None when there is nothing to abort."""
        with self._lock:
            if self._state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
                return None
            self._pending = None
            return self._cached("abort_transaction", State.ABORTING_TRANSACTION, self._start_abort)

    def _start_abort(self) -> TransactionalRequestResult:
        self._check_not_fatal()
        if self._state == State.COMMITTING_TRANSACTION:
            raise IllegalStateError("abort_transaction() while commit_transaction() is pending: call "
                                    "commit_transaction() again to wait for its outcome")
        if self._state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
            raise TransactionError(f"abort_transaction() needs an open transaction (state {self._state})")
        self._transition(State.ABORTING_TRANSACTION)
        self.new_partitions.clear()
        return self._begin_completing(commit=False)

    def _begin_completing(self, commit: bool) -> TransactionalRequestResult:
        if self.new_partitions:
            self._enqueue_add_partitions()
        v2 = self._txn_v2
        if not commit and not v2 and self.epoch_bump_required \
                and isinstance(self._last_error, InvalidProducerIdMappingError):
            # as Java (3.x): the coordinator does not know this producer id for the transactional id, so it would
            # refuse EndTxn; the new epoch (InitProducerId) ends whatever is open under it
            log.info("not sending EndTxn(abort): the coordinator does not know producer id %s (%s); bumping the "
                     "epoch", self.producer_id, InvalidProducerIdMappingError.name)
            skipped = TransactionalRequestResult("abort_transaction")
            self._complete_transaction(skipped)
            return skipped
        end = EndTxnHandler(self, commit, v2)
        if not self._resumed:
            # Java: the version is read again once EndTxn is built (the transaction ends with the version it
            # started with) and before the epoch bump is decided (switching v1 -> v2 requires one)
            self._maybe_update_transaction_v2(on_initialization=False)
        self._enqueue(end)
        result = end.result
        if (not commit and self.epoch_bump_required) or self._upgrade_bump_required:
            # KIP-360: after EndTxn(abort), InitProducerId with the current id and epoch gives a new epoch,
            # and every sequence starts again at 0 (and so after the last v1 transaction when v2 arrived)
            bump = InitProducerIdHandler(self, bump=True)
            log.info("bumping the epoch of producer id %s after the %s", self.producer_id,
                     "abort" if not commit else "last version-1 transaction")
            self._enqueue(bump)
            result = bump.result
        return result

    def _producer_id_initialized(self, value: ProducerIdAndEpoch, initial: bool = False) -> None:
        """InitProducerId answered (first id, or an epoch bump). ``initial``: init_transactions()' own request,
        after which the transaction version is read (Java's ``maybeUpdateTransactionV2Enabled(true)``)."""
        with self._lock:
            self.set_producer_id(*value)
            self.init_refusals = 0
            self.epoch_bump_required = False
            self._upgrade_bump_required = False
            if self._state != State.READY:
                self._transition(State.READY)
            if initial and self.is_transactional:
                self._maybe_update_transaction_v2(on_initialization=True)

    def _complete_transaction(self, result: Optional[TransactionalRequestResult] = None,
                              next_ids: Optional[ProducerIdAndEpoch] = None) -> bool:
        """EndTxn answered (or there was nothing to end at the coordinator); ``next_ids``: the producer id and epoch
        an EndTxn v5 answered (transactions v2). True when an epoch bump follows that was not queued yet (a batch
        failed while aborting): it completes ``result``."""
        with self._lock:
            aborting = self._state == State.ABORTING_TRANSACTION
            if next_ids is None:
                if aborting and not self.epoch_bump_required and self._idempotence.has_unresolved_batches() \
                        and self.needs_client_epoch_bump():
                    # a batch sent, then aborted before its retry, may or may not have been written
                    self.epoch_bump_required = True
                # (a committed transaction had no failed batch: one would have made it abortable)
                bump = (self.epoch_bump_required and aborting) or self._upgrade_bump_required
            else:
                bump = False  # the coordinator bumped the epoch itself
            self._transition(State.INITIALIZING if bump else State.READY)
            self.partitions_in_txn.clear()
            self.pending_partitions.clear()
            self.new_partitions.clear()
            self.transaction_started = False
            if next_ids is not None:
                # a new epoch (or producer id): every sequence starts again at 0, whatever was unresolved
                log.debug("producer id %s, epoch %s (from EndTxn)", next_ids.producer_id, next_ids.epoch)
                self._idempotence.set_producer_id_and_epoch(next_ids)
                self.epoch_bump_required = False
                self._upgrade_bump_required = False
                return False
            if not bump:
                self._idempotence.rewind_after_transaction()
                return False
            if any(isinstance(h, InitProducerIdHandler) and h.bump for _p, _o, h in self._queue):
                return False
            handler = InitProducerIdHandler(self, bump=True, result=result)
            self._enqueue(handler)
            return result is not None

    # -- send() ---------------------------------------------------------------------------------------

    def check_can_send(self, tp: TopicPartition) -> None:
        """Called by send(): a transactional producer may only send inside a transaction."""
        if not self.is_transactional:
            return
        with self._lock:
            if self._state == State.FATAL_ERROR:
                raise self._fatal_call_error()
            if self._pending is not None:
                self._throw_if_pending("send")
            if self._state == State.ABORTABLE_ERROR:
                raise TransactionError(
                    f"the transaction must be aborted (abort_transaction()) after: {self._last_error}")
            if self._state != State.IN_TRANSACTION:
                raise TransactionError(
                    "send() on a transactional producer needs an open transaction: call begin_transaction() first"
                    f" (state {self._state})")
            if self._txn_v2:
                # transactions v2: the partition joins the transaction with its first Produce (v12), at the leader
                self.partitions_in_txn.add(tp)
                self.transaction_started = True
            elif tp not in self.partitions_in_txn and tp not in self.pending_partitions:
                self.new_partitions.add(tp)

    def maybe_transition_to_error_state(self, error: BaseException) -> None:
        """A record failed before it was queued (send() caught the error) or a batch failed: Java's
        ``maybeTransitionToErrorState``."""
        if not self.is_transactional:
            return  # the idempotent producer's fatal errors are the sender's (Sender.fatal_error)
        with self._lock:
            if isinstance(error, _FATAL_BATCH_ERRORS_V2 if self.is_transaction_v2() else _FATAL_BATCH_ERRORS):
                if self._state != State.FATAL_ERROR:
                    self._transition_to_fatal_error(error)
            elif not isinstance(error, TransactionAbortedError):
                if self.needs_client_epoch_bump() and self._state != State.ABORTING_TRANSACTION \
                        and self._state in VALID_SOURCES[State.ABORTABLE_ERROR]:
                    self.epoch_bump_required = True
                self._transition_to_abortable_error(error)

    # -- the sender's side: coordinator requests ---------------------------------------------------------

    def _enqueue(self, handler: TxnRequestHandler) -> None:
        with self._lock:
            heapq.heappush(self._queue, (int(handler.priority), next(self._order), handler))

    def retry(self, handler: TxnRequestHandler, retry_at_ms: float) -> None:
        handler.retry_at_ms = retry_at_ms
        self._enqueue(handler)

    def _enqueue_add_partitions(self) -> None:
        parts = sorted(self.new_partitions)
        self.pending_partitions.update(parts)
        self.new_partitions.clear()
        self._enqueue(AddPartitionsToTxnHandler(self, parts))

    def next_request(self, has_incomplete_batches: bool) -> Optional[TxnRequestHandler]:
        """The next coordinator request to send, taken off the queue; None when there is none to send now
        (Java's ``nextRequest``)."""
        with self._lock:
            if self.new_partitions and self._state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION) \
                    and self.has_producer_id():
                self._enqueue_add_partitions()
            while self._queue:
                handler = self._queue[0][2]
                if handler.is_end_txn and has_incomplete_batches:
                    return None  # EndTxn waits until every batch of the transaction is acknowledged or failed
                heapq.heappop(self._queue)
                if isinstance(handler, EndTxnHandler) and handler.commit and self._state == State.ABORTABLE_ERROR:
                    # a record of the transaction failed while it was being committed: no EndTxn(commit)
                    error = self._last_error
                    commit_error = TransactionError(
                        f"cannot commit: a record of the transaction failed ({error}); call abort_transaction()")
                    commit_error.__cause__ = error
                    handler.result.done(commit_error)
                    continue
                if handler.is_end_txn and not self.transaction_started and not self.pending_partitions:
                    # nothing reached the coordinator: there is nothing to end there
                    if not self._complete_transaction(handler.result):
                        handler.result.done()
                    continue
                if handler.is_end_txn and self.pending_partitions:
                    heapq.heappush(self._queue, (int(handler.priority), next(self._order), handler))
                    return None
                return handler
            return None

    def has_pending_requests(self) -> bool:
        """Coordinator requests queued or in flight, or new partitions that next_request() will add (only in an
        open or committing transaction: after an abortable error they are never sent, and a closing sender must
        not wait for them)."""
        with self._lock:
            return bool(self._queue) or self._in_flight is not None or (
                bool(self.new_partitions) and self._state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION))

    def has_ongoing_transaction(self) -> bool:
        """Java's ``hasOngoingTransaction``: open, being completed, or to be aborted."""
        return self._state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION,
                               State.ABORTABLE_ERROR)

    def has_pending_transaction_requests(self) -> bool:
        """What a closing producer still sends (Java's ``Sender.hasPendingTransactionalRequests``): the
        coordinator requests of an ongoing transaction. An InitProducerId that is being retried (no
        transaction open) is not waited for."""
        with self._lock:
            return self.has_ongoing_transaction() and self.has_pending_requests()

    def close(self, forced: bool) -> None:
        """The network thread stops, or is told to stop at once (``forced``: Java's ``TransactionManager.close``
        at a forced close): every queued or in-flight request and the pending call fail with
        ProducerClosedError, so that no application thread waits for what will never be sent."""
        how = " forcefully" if forced else ""
        with self._lock:
            queued, self._queue = self._queue, []
            results = [h.result for _p, _o, h in queued]
            if self._in_flight is not None:
                results.append(self._in_flight.result)
            if self._pending is not None:
                results.append(self._pending.result)
            for result in results:
                result.done(ProducerClosedError(f"the producer was closed{how} while {result.operation} was pending"))

    def peek_retry_at(self) -> float:
        with self._lock:
            return self._queue[0][2].retry_at_ms if self._queue else 0.0

    def set_in_flight(self, handler: Optional[TxnRequestHandler]) -> None:
        self._in_flight = handler

    def has_in_flight_request(self) -> bool:
        return self._in_flight is not None

    def coordinator(self, key: CoordinatorKey) -> Optional[int]:
        with self._lock:
            return self._coordinators.get(key)

    def coordinator_address(self, node_id: int) -> Optional[Tuple[str, int]]:
        with self._lock:
            return self._coordinator_addresses.get(node_id)

    def set_coordinator(self, key: CoordinatorKey, node_id: int, host: str, port: int) -> None:
        with self._lock:
            log.info("discovered %s coordinator %s (%s:%s) for %r", key.type.name.lower(), node_id, host, port,
                     key.key)
            self._coordinators[key] = node_id
            self._coordinator_addresses[node_id] = (host, port)

    def forget_coordinator(self, key: CoordinatorKey) -> None:
        with self._lock:
            self._coordinators.pop(key, None)

    def lookup_coordinator(self, key: CoordinatorKey) -> None:
        self._enqueue(FindCoordinatorHandler(self, key))

    def handle_response(self, handler: TxnRequestHandler, body: Body) -> Outcome:
        with self._lock:
            outcome = handler.handle_response(body)
            if outcome is Outcome.FIND_COORDINATOR:
                key = handler.coordinator_key()
                if key is not None:
                    self.forget_coordinator(key)
                    self.lookup_coordinator(key)
            return outcome

    def fail_request(self, handler: TxnRequestHandler, error: BaseException) -> None:
        """A request could not be handled (e.g. a bug while handling its answer): fail visibly."""
        with self._lock:
            handler.result.done(error)
            self._transition_to_fatal_error(error)

    # -- the produce side: producer id and sequences ---------------------------------------------------

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch:
        return self._idempotence.producer_id_and_epoch

    @property
    def producer_id(self) -> int:
        return self._idempotence.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._idempotence.producer_epoch

    def has_producer_id(self) -> bool:
        # (IdempotenceState.has_producer_id, without its call: the network thread asks every iteration)
        return self._idempotence.producer_id_and_epoch.producer_id >= 0

    def request_producer_id_if_needed(self) -> None:
        """The idempotent producer without a producer id (at first, or after a reset) queues an InitProducerId
        for any broker, once (Java's ``bumpIdempotentEpochAndResetIdIfNeeded``): UNINITIALIZED -> INITIALIZING,
        READY when it is answered. The sender sends it as every other coordinator request."""
        with self._lock:
            if not self.is_transactional and self._state is State.UNINITIALIZED and not self.has_producer_id():
                self._transition(State.INITIALIZING)
                handler = InitProducerIdHandler(self, bump=False)
                handler.retry_at_ms = self._init_not_before_ms  # (after a refusal: transition_to_uninitialized)
                self._enqueue(handler)

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        """Adopt a producer id and epoch (an InitProducerId's answer): every sequence starts again at 0."""
        with self._lock:
            log.info("producer id %s, epoch %s%s", producer_id, epoch,
                     f" (transactional.id={self.transactional_id})" if self.transactional_id else "")
            self._idempotence.set_producer_id_and_epoch(ProducerIdAndEpoch(producer_id, epoch))

    def request_reset(self, reason: str) -> None:
        """Idempotent producer: renew the producer id (a fresh id restarts every sequence at 0) once in-flight
        batches are resolved, because a partition's sequence state is unknown. A transactional producer
        cannot continue its transaction over that: it becomes abortable (and the abort bumps the epoch)."""
        with self._lock:
            if self.is_transactional:
                self.maybe_transition_to_error_state(KafkaError(f"sequence state lost: {reason}"))
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
            self._idempotence.set_producer_id_and_epoch(NO_PRODUCER)
            if self._state is State.READY:
                self._transition(State.UNINITIALIZED)  # (request_producer_id_if_needed asks for a new one)
            for b in queued:
                b.set_producer_state(NO_PRODUCER.producer_id, NO_PRODUCER.epoch, -1, False)
            return True

    def drain_sequencer(self) -> Optional[Callable[[ProducerBatch], bool]]:
        """For one drain (the sender thread, under the accumulator's lock): a function given the head batch
        of a partition's queue that keeps it waiting (False; Java's ``shouldStopDrainBatchesForPartition``)
        or gives it its sequence to be sent (True; a retry keeps its own). None when no batch may go now:
        there is no producer id yet, a reset of it is due, or the transactional id is being initialized.
        What holds for the whole drain is checked here, once."""
        if not self.has_producer_id() or self.reset_required:
            return None
        take = self._idempotence.take_for_drain
        if not self.is_transactional:
            return take
        if self._state == State.INITIALIZING:
            return None
        in_txn = self.partitions_in_txn

        def take_in_transaction(batch: ProducerBatch) -> bool:
            return batch.tp in in_txn and take(batch, True)  # a partition not added to the transaction waits
        return take_in_transaction

    def add_split_batches(self, original: ProducerBatch, parts: List[ProducerBatch]) -> None:
        with self._lock:
            self._idempotence.add_split_batches(original, parts)

    def first_in_flight_sequence(self, tp: TopicPartition) -> int:
        return self._idempotence.first_in_flight_sequence(tp)

    def sequence_number(self, tp: TopicPartition) -> int:
        return self._idempotence.sequence_number(tp)

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        return self._idempotence.last_acked_sequence(tp)

    def is_next_sequence(self, batch: ProducerBatch) -> bool:
        return self._idempotence.is_next_sequence(batch)

    def remove_in_flight(self, batch: ProducerBatch) -> None:
        with self._lock:
            self._idempotence.remove_in_flight(batch)

    def handle_completed_batch(self, batch: ProducerBatch, base_offset: int) -> None:
        self.handle_completed_batches(((batch, base_offset),))

    def handle_completed_batches(self, completed: Iterable[Tuple[ProducerBatch, int]]) -> None:
        """The broker wrote these batches, at these base offsets (a produce response's): one take of the lock."""
        with self._lock:
            self._idempotence.handle_completed_batches(completed)

    def handle_failed_batch(self, batch: ProducerBatch, error: BaseException, sequence_unknown: bool,
                            queued: List[ProducerBatch]) -> None:
        """A batch completed with an error (Java's ``handleFailedBatch``). ``sequence_unknown``: the broker
        may or may not have written it (it expired in flight). Otherwise the broker refused it for good and
        the later batches of its partition move down into its sequence range (``queued``: the batches
        waiting in the accumulator)."""
        with self._lock:
            self.maybe_transition_to_error_state(error)
            idem = self._idempotence
            idem.remove_in_flight(batch)
            if self.has_fatal_error() or not batch.has_sequence() or not idem.is_current(batch):
                return
            if isinstance(error, UnknownProducerIdError):
                idem.partition(batch.tp).reset()
            elif sequence_unknown:
                if self.is_transactional and self.needs_client_epoch_bump():
                    self.epoch_bump_required = True  # the broker may have written it: only a new epoch is safe
                if not self.is_transactional:
                    if idem.has_later_sequences(batch):
                        self.request_reset(f"batch for {batch.topic}-{batch.partition} failed: {error}")
                    else:
                        idem.reuse_failed_range(batch)
                elif not self.can_handle_abortable_error():
                    self._transition_to_fatal_error(KafkaError(
                        "the client has no acknowledgement for records it can no longer retry, and the broker "
                        f"cannot bump the producer epoch: it is not safe to continue ({error})"))
            elif isinstance(error, OutOfOrderSequenceNumberError) and not self.is_transactional:
                self.request_reset(f"the broker found a sequence gap in {batch.topic}-{batch.partition}")
            elif not self.is_transactional and not idem.has_later_sequences(batch):
                idem.reuse_failed_range(batch)
            else:
                idem.adjust_sequences_due_to_failed_batch(batch, queued)

    def handle_aborted_batches(self, batches: Iterable[ProducerBatch], error: BaseException) -> None:
        """Batches the sender gave up on without an answer for them (queued ones of a broker that refused our
        credentials, everything at a forced close): as every failed batch, through :meth:`handle_failed_batch`
        (an open transaction becomes abortable). A batch that was sent before (a retry: it has a sequence)
        may have been written."""
        with self._lock:
            for batch in batches:
                self.handle_failed_batch(batch, error, batch.has_sequence(), [])

    def abort_keeps_sent_batches(self) -> bool:
        """Whether an abort leaves the batches that were sent already (they have a sequence; they wait for a
        retry) queued, to be sent before EndTxn, as Java's ``RecordAccumulator.abortUndrainedBatches`` does:
        when the coordinator cannot bump the epoch (InitProducerId < v3). Failing them would leave a sequence
        gap that the next transaction's first batch runs into. With an epoch bump (InitProducerId v3+, or the abort's
        EndTxn under transactions v2) they fail at once instead: the new epoch starts every sequence again at 0 and
        fences a late write of the old one (the abort does not wait for a broker that fails)."""
        return self.is_transactional and not self.can_handle_abortable_error()

    def handle_record_errors(self, original: ProducerBatch, kept: Optional[ProducerBatch], removed: int,
                             error: BaseException, queued: List[ProducerBatch]) -> None:
        """KIP-467: some records of ``original`` failed with ``error`` (the others, if any, are in ``kept``
        and will be retried). A failed record makes an open transaction abortable."""
        with self._lock:
            self.maybe_transition_to_error_state(error)
            if kept is None:
                self._idempotence.remove_in_flight(original)
                self._idempotence.adjust_sequences_due_to_failed_batch(original, queued)
            else:
                self._idempotence.replace_after_record_errors(original, kept, removed, queued)

    def can_retry(self, error: Type[KafkaError], batch: ProducerBatch, log_start_offset: int) -> bool:
        """Whether a batch refused with OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID may be retried
        (Java's ``TransactionManager.canRetry``)."""
        with self._lock:
            idem = self._idempotence
            if not idem.is_current(batch):
                # the id or epoch was renewed meanwhile: the batch gets new sequences when drained again
                return True
            if error is UnknownProducerIdError:
                if not self.is_transactional:
                    self.request_reset("the broker does not know the producer id")
                    return True
                if log_start_offset == -1 or batch.reopened:
                    return True
                if idem.last_acked_offset(batch.tp) < log_start_offset:
                    # the head of the log was removed with our producer state: start the sequences again
                    idem.partition(batch.tp).reset()
                    for b in list(idem.partition(batch.tp).in_flight):
                        b.set_producer_state(-1, -1, -1, True)
                    return True
                return False
            if error is OutOfOrderSequenceNumberError:
                if batch.reopened or not idem.is_next_sequence(batch):
                    # an earlier batch failed or is being retried: this one follows it again
                    return True
                if not self.is_transactional:
                    self.request_reset("the broker rejected the next expected sequence")
                    return True
            return False

    # -- a transaction handed from one process to another (kproducer.producer.transaction_handle) -------

    def submit(self, handler: TxnRequestHandler) -> TransactionalRequestResult:
        """Queue a coordinator request built outside this module (e.g. an OffsetFetch to a group
        coordinator); the sender sends it like its own. Returns the handler's result."""
        with self._lock:
            self._check_not_fatal()
            self._enqueue(handler)
            return handler.result

    def hand_over(self) -> Tuple[ProducerIdAndEpoch, List[TopicPartition]]:
        """Give the open transaction away without ending it: its producer id, epoch and partitions, for
        another process to commit or abort (:meth:`resume_transaction`). Call after flush(); this producer
        can then only be closed (closing does not abort a transaction handed over)."""
        self._require_transactional()
        with self._lock:
            self._check_not_fatal()
            if self._state != State.IN_TRANSACTION:
                raise TransactionError(f"only an open transaction can be handed over (state {self._state})"
                                       + (f" after: {self._last_error}" if self._last_error else ""))
            if self._queue or self._in_flight is not None or self.new_partitions or self.pending_partitions:
                raise TransactionError("the transaction still has coordinator requests or partitions pending: "
                                       "flush() the producer before handing the transaction over")
            handed = self.producer_id_and_epoch, sorted(self.partitions_in_txn)
            # FATAL_ERROR: nothing more is sent under this epoch, and close() does not abort the transaction
            self._transition(State.FATAL_ERROR, TransactionError(
                f"the transaction of producer id {handed[0].producer_id} (epoch {handed[0].epoch}) was handed over "
                "to be ended elsewhere; this producer can only be closed"))
            self._pending = None
            return handed

    def resume_transaction(self, producer_id: int, epoch: int, partitions: List[TopicPartition]) -> None:
        """Take over an open transaction another producer with the same transactional.id handed over
        (Flink's ``resumeTransaction``): instead of init_transactions(), adopt its producer id and epoch, so
        that commit_transaction() / abort_transaction() send EndTxn for it."""
        self._require_transactional()
        if producer_id < 0 or epoch < 0:
            raise ValueError(f"producer id and epoch must be >= 0, got {producer_id} and {epoch}")
        with self._lock:
            self._check_not_fatal()
            if self._state != State.UNINITIALIZED:
                raise TransactionError(f"resume_transaction() needs a fresh producer (state {self._state}); it "
                                       "replaces init_transactions()")
            self._transition(State.INITIALIZING)
            self._idempotence.set_producer_id_and_epoch(ProducerIdAndEpoch(producer_id, epoch))
            self._transition(State.READY)
            self._transition(State.IN_TRANSACTION)
            # ended with EndTxn v3, whatever the cluster's transaction.version: the version-1 rules, which the
            # coordinator applies to a v2 transaction too (no epoch bump: a repeated commit succeeds, a commit after
            # a fence or a timeout is refused); see docs/transactions.md
            self._resumed = True
            self._txn_v2 = False
            self.partitions_in_txn.update(partitions)
            self.transaction_started = True  # EndTxn must reach the coordinator even with no partitions known


__all__ = ["CoordinatorKey", "CoordinatorType", "FencedTransactionError", "MAX_EPOCH", "Outcome", "PendingCallError",
           "Priority", "State",
           "TransactionManager", "TransactionalRequestResult", "VALID_SOURCES"]
