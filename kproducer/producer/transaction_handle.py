"""Ending a Kafka transaction in another process than the one that wrote it (two-phase commit).

An engine that runs writers in worker processes and decides on a driver (Spark, Flink, Beam, a job
scheduler) can make a whole job's output atomic per writer:

1. each writer opens a transaction under its own ``transactional.id`` (``init_transactions()``, which also
   fences older producers of that id and aborts what they left open, then ``begin_transaction()``), sends its
   records, and calls :func:`prepare_transaction`: it flushes, and returns a :class:`TransactionHandle`
   (transactional id, producer id, epoch, partitions) instead of committing; the producer is then closed
   without aborting;
2. the handle travels to the driver (it is a small picklable value; :meth:`TransactionHandle.to_dict` gives
   plain JSON types);
3. the driver ends it with :func:`commit_transaction` or :func:`abort_transaction`: a producer with the same
   ``transactional.id`` adopts the producer id and epoch (:func:`resume_transaction`, Flink's
   ``resumeTransaction``) and sends EndTxn. Kafka accepts it from any connection when id and epoch match.

Committing is idempotent: a second commit of a transaction already committed under the same epoch
succeeds (the coordinator answers a retried EndTxn so), which makes a driver's retry safe. Once another
producer called InitProducerId with the same transactional id, or the transaction ran longer than
``transaction.timeout.ms`` (the coordinator aborts it and bumps the epoch), a commit fails with
:class:`~kproducer.producer.transaction_manager.FencedTransactionError`; an abort then reports that the
transaction was already ended (its records are aborted either way).

:func:`abort_transactional_id` aborts whatever is open under a transactional id without a handle (at a
restart, for ids a crashed run may have left open). :func:`committed_offsets` reads a consumer group's
committed offsets through a producer, for writers that record their progress in the transaction with
``send_offsets_to_transaction`` (e.g. a micro-batch id) and must check it after a restart.

See docs/transactions.md ("Ending a transaction elsewhere").
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import KafkaError, ProducerFencedError, TransactionError, error_for_code
from ..protocol import messages as m
from ..protocol.errors import NO_ERROR, UnstableOffsetCommitError, error_class_for_code
from .kafka_producer import Producer
from .transaction_manager import (
    CoordinatorKey,
    CoordinatorType,
    Outcome,
    TransactionalRequestResult,
    TxnRequestHandler,
)

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]

#: seconds to wait for a producer used to end a transaction to close
_CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TransactionHandle:
    """What another process needs to end an open transaction: its transactional id, producer id and
    epoch, and the partitions it wrote to (informational: EndTxn does not need them)."""

    transactional_id: str
    producer_id: int
    epoch: int
    partitions: Tuple[TopicPartition, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON types: ``{"transactional_id", "producer_id", "epoch", "partitions": [[topic, p], ...]}``."""
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id, "epoch": self.epoch,
                "partitions": [[t, p] for t, p in self.partitions]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TransactionHandle":
        try:
            return cls(str(data["transactional_id"]), int(data["producer_id"]), int(data["epoch"]),
                       tuple((str(t), int(p)) for t, p in data.get("partitions", ())))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a transaction handle ({e!r}): expected transactional_id, producer_id and "
                             "epoch") from None


def prepare_transaction(producer: Producer, timeout: Optional[float] = None) -> TransactionHandle:
    """Flush ``producer`` and hand its open transaction over: returns the handle to commit or abort it
    elsewhere. Raises :class:`~kproducer.errors.TransactionError` when a record of the transaction failed
    (abort it then) or nothing is open. Afterwards the producer can only be closed, and closing it does
    not abort the transaction."""
    producer.flush(timeout)
    txn = producer._transactions()
    pid, partitions = txn.hand_over()
    assert txn.transactional_id is not None
    return TransactionHandle(txn.transactional_id, pid.producer_id, pid.epoch, tuple(partitions))


def _settings(config: Mapping[str, Any], transactional_id: str) -> Dict[str, Any]:
    settings = dict(config)
    for alias in ("transactional_id", "transactional.id"):
        settings.pop(alias, None)
    settings["transactional.id"] = transactional_id
    return settings


def resume_transaction(handle: TransactionHandle, config: Mapping[str, Any]) -> Producer:
    """A new producer (``config`` plus the handle's transactional id) that has taken over the handle's
    open transaction: call ``commit_transaction()`` or ``abort_transaction()`` on it, then ``close()``.
    Sending more records into the resumed transaction is not supported (the sequence numbers of the
    partitions are not known here)."""
    producer = Producer(_settings(config, handle.transactional_id))
    try:
        producer._transactions().resume_transaction(handle.producer_id, handle.epoch, list(handle.partitions))
    except BaseException:
        producer.close(0)
        raise
    return producer


def commit_transaction(handle: TransactionHandle, config: Mapping[str, Any], timeout: Optional[float] = None) -> None:
    """Commit the handle's transaction (EndTxn(commit) with its producer id and epoch). Safe to repeat.
    Raises ``FencedTransactionError`` when the transaction was aborted meanwhile (fenced by a newer producer
    of the same transactional id, or timed out), ``KafkaTimeoutError`` after ``timeout`` s (max.block.ms)."""
    producer = resume_transaction(handle, config)
    try:
        producer.commit_transaction(timeout)
    finally:
        producer.close(_CLOSE_TIMEOUT_S)
    log.debug("committed the transaction of %r (producer id %d, epoch %d)", handle.transactional_id,
              handle.producer_id, handle.epoch)


def abort_transaction(handle: TransactionHandle, config: Mapping[str, Any], timeout: Optional[float] = None) -> bool:
    """Abort the handle's transaction (EndTxn(abort)). True when this call aborted it; False when it had
    already been ended by a newer epoch (a fence or the coordinator's timeout, which abort it too)."""
    producer = resume_transaction(handle, config)
    try:
        producer.abort_transaction(timeout)
        return True
    except ProducerFencedError:
        return False
    except TransactionError as e:
        if isinstance(e.__cause__, ProducerFencedError):
            return False
        raise
    finally:
        producer.close(_CLOSE_TIMEOUT_S)


def abort_transactional_id(transactional_id: str, config: Mapping[str, Any], timeout: Optional[float] = None) -> None:
    """InitProducerId for ``transactional_id``: aborts the transaction open under it, if any, and fences
    every producer that still uses it (their next request fails with ProducerFencedError)."""
    with Producer(_settings(config, transactional_id)) as producer:
        producer.init_transactions(timeout)


class OffsetFetchHandler(TxnRequestHandler):
    """OffsetFetch of one group (every partition it has committed offsets for) from its coordinator.
    An error answer fails only this request, never the producer.

    It asks for stable offsets (v7+ ``require_stable``, KIP-447): while a transaction that committed
    offsets of the group is completing, the coordinator answers UNSTABLE_OFFSET_COMMIT and the request is
    retried, so a commit that just happened is not missed. A transaction that stays open (left by a
    crashed writer) would keep the offsets unstable until it times out: after ``stable_wait_ms`` the
    request is sent once more without ``require_stable`` and returns the last committed offsets."""

    name = "OffsetFetch"
    api = m.OFFSET_FETCH

    def __init__(self, manager: Any, group_id: str, stable_wait_ms: float = 5000.0) -> None:
        super().__init__(manager, TransactionalRequestResult("committed_offsets"))
        self.group_id = group_id
        self.offsets: Dict[TopicPartition, Tuple[int, Optional[str]]] = {}
        self.require_stable = True
        self._stable_deadline_ms = manager.clock.monotonic_ms() + stable_wait_ms

    def coordinator_key(self) -> Optional[CoordinatorKey]:
        return CoordinatorKey(CoordinatorType.GROUP, self.group_id)

    def build(self) -> Dict[str, Any]:
        return {"group_id": self.group_id, "topics": None, "require_stable": self.require_stable}

    def _error(self, code: int, message: Optional[str] = None) -> Outcome:
        cls = error_class_for_code(code)
        if cls.coordinator_moved:
            return Outcome.FIND_COORDINATOR
        if cls is UnstableOffsetCommitError and self.require_stable \
                and self.manager.clock.monotonic_ms() >= self._stable_deadline_ms:
            log.warning("offsets of group %r stayed unstable (a transaction that wrote them is still open); "
                        "reading the last committed ones", self.group_id)
            self.require_stable = False
            return Outcome.RETRY
        if cls.retriable:
            return Outcome.RETRY
        self.result.done(error_for_code(code, message))
        return Outcome.FAILED

    def handle_response(self, body: Dict[str, Any]) -> Outcome:
        code = body.get("error_code", NO_ERROR)
        if code != NO_ERROR:
            return self._error(code)
        out: Dict[TopicPartition, Tuple[int, Optional[str]]] = {}
        for topic in body["topics"]:
            for pr in topic["partitions"]:
                if pr["error_code"] != NO_ERROR:
                    return self._error(pr["error_code"])
                if pr["committed_offset"] >= 0:
                    out[(topic["name"], pr["partition_index"])] = (pr["committed_offset"], pr["metadata"])
        self.offsets = out
        self.result.done()
        return Outcome.SUCCESS


def committed_offsets(producer: Producer, group_id: str, timeout: Optional[float] = None,
                      stable_wait_ms: float = 5000.0) -> Dict[TopicPartition, Tuple[int, Optional[str]]]:
    """The committed offsets (and metadata) of consumer group ``group_id``, ``{(topic, partition): (offset,
    metadata)}``, read through a transactional ``producer`` (after ``init_transactions()``). Waits up to
    ``stable_wait_ms`` for transactions that are completing (see :class:`OffsetFetchHandler`); offsets of
    transactions still open are not included."""
    txn = producer._transactions()
    handler = OffsetFetchHandler(txn, group_id, stable_wait_ms)
    result = txn.submit(handler)
    producer._sender.wakeup()
    result.wait(producer._block_s(timeout))
    return dict(handler.offsets)


def end_all(handles: List[TransactionHandle], config: Mapping[str, Any], commit: bool,
            timeout: Optional[float] = None) -> List[Optional[KafkaError]]:
    """Commit (or abort) several transactions, one after the other; the error of each (None: done)."""
    errors: List[Optional[KafkaError]] = []
    for h in handles:
        try:
            if commit:
                commit_transaction(h, config, timeout)
            else:
                abort_transaction(h, config, timeout)
            errors.append(None)
        except KafkaError as e:
            errors.append(e)
    return errors


__all__ = ["OffsetFetchHandler", "TransactionHandle", "abort_transaction", "abort_transactional_id",
           "commit_transaction", "committed_offsets", "end_all", "prepare_transaction", "resume_transaction"]
