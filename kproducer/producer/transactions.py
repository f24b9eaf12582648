"""Transactions: the steps the application asks for (init, begin, send offsets, commit, abort) and the
coordinator requests the sender thread sends for them (FindCoordinator, InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn), with Kafka's error handling."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..errors import (
    KafkaError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionError,
    error_for_code,
)
from ..network.client import ClientRequest, ClientResponse
from ..protocol import messages as m
from ..protocol.messages.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from ..protocol.schema import Api
from .transaction_manager import PendingRequest, State, TransactionalRequestResult, TransactionManager

if TYPE_CHECKING:
    from .accumulator import RecordAccumulator
    from .sender import Sender

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
Body = Optional[Dict[str, Any]]

_COORDINATOR_ERRORS = frozenset({14, 15, 16})  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_RETRY_ERRORS = frozenset({14, 51, 3, 55, 7, 13, 5})  # load in progress, concurrent txns, unknown tp, ...
_FENCED = frozenset({90, 47})  # PRODUCER_FENCED, INVALID_PRODUCER_EPOCH
_FATAL = frozenset({53, 48, 49, 35})  # TXN_ID_AUTH_FAILED, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, UNSUPPORTED


def _fenced_error(code: int) -> KafkaError:
    return ProducerFencedError(
        "another producer with the same transactional.id is active (this producer's epoch is stale); "
        f"close this producer (broker error {code})"
    )


# --------------------------------------------------------------------------------------------
# application side


def _require_transactional(txn: Optional[TransactionManager]) -> TransactionManager:
    if txn is None or not txn.is_transactional:
        raise TransactionError("transactions need a transactional_id: Producer(..., transactional_id='my-app-1')")
    return txn


def _check_not_fatal(txn: TransactionManager) -> None:
    if txn.has_fatal_error():
        raise TransactionError(f"the producer hit a fatal error and must be closed: {txn.last_error}") \
            from txn.last_error


def init_transactions(txn_opt: Optional[TransactionManager]) -> TransactionalRequestResult:
    txn = _require_transactional(txn_opt)
    with txn._lock:
        _check_not_fatal(txn)
        if txn.pending_result is not None and txn.pending_result.operation == "init_transactions" \
                and not txn.pending_result.is_done():
            return txn.pending_result  # a retried call waits for the same attempt
        if txn.state != State.UNINITIALIZED:
            raise TransactionError(f"init_transactions() was already called (state {txn.state})")
        txn.state = State.INITIALIZING
        result = TransactionalRequestResult("init_transactions")
        txn.pending_result = result
        _enqueue_init_producer_id(txn, result)
        return result


def begin_transaction(txn_opt: Optional[TransactionManager]) -> None:
    txn = _require_transactional(txn_opt)
    with txn._lock:
        _check_not_fatal(txn)
        if txn.state == State.UNINITIALIZED or txn.state == State.INITIALIZING:
            raise TransactionError("call init_transactions() before begin_transaction()")
        if txn.state != State.READY:
            raise TransactionError(f"begin_transaction() needs the previous transaction to be finished (state "
                                   f"{txn.state}); commit or abort it first")
        txn._transition(State.IN_TRANSACTION)
        txn.transaction_started = False


def send_offsets_to_transaction(txn_opt: Optional[TransactionManager], offsets: Mapping[TopicPartition, int],
                                group_id: str, generation_id: int = -1, member_id: str = "",
                                group_instance_id: Optional[str] = None) -> TransactionalRequestResult:
    txn = _require_transactional(txn_opt)
    with txn._lock:
        _check_not_fatal(txn)
        if txn.state == State.ABORTABLE_ERROR:
            raise TransactionError(f"the transaction must be aborted after: {txn.last_error}")
        if txn.state != State.IN_TRANSACTION:
            raise TransactionError("send_offsets_to_transaction() needs an open transaction (begin_transaction())")
        if not group_id:
            raise ValueError("group_id must be a non-empty consumer group id")
        result = TransactionalRequestResult("send_offsets_to_transaction")
        offsets_copy = dict(offsets)
        for (topic, partition), offset in offsets_copy.items():
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"offset for {topic}-{partition} must be a non-negative int, got {offset!r}")

        def build() -> Tuple[Api, Dict[str, Any]]:
            return m.ADD_OFFSETS_TO_TXN, {"transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
                                          "producer_epoch": txn.producer_epoch, "group_id": group_id}

        def handle(body: Body, error: Optional[BaseException]) -> Optional[str]:
            code = body["error_code"] if body is not None else 13
            outcome = _classify(txn, code)
            if outcome == "ok":
                txn.transaction_started = True
                _enqueue_txn_offset_commit(txn, result, offsets_copy, group_id, generation_id, member_id,
                                           group_instance_id)
                return None
            return outcome

        _enqueue(txn, PendingRequest("AddOffsetsToTxn", build, _adapter(txn, handle, result), None))
        return result


def begin_commit(txn_opt: Optional[TransactionManager]) -> TransactionalRequestResult:
    txn = _require_transactional(txn_opt)
    with txn._lock:
        _check_not_fatal(txn)
        if txn.state == State.ABORTABLE_ERROR:
            raise TransactionError(
                f"cannot commit: the transaction must be aborted (abort_transaction()) after: {txn.last_error}"
            ) from txn.last_error
        if txn.pending_result is not None and txn.pending_result.operation == "commit_transaction" \
                and not txn.pending_result.is_done():
            return txn.pending_result
        if txn.state != State.IN_TRANSACTION:
            raise TransactionError(f"commit_transaction() needs an open transaction (state {txn.state})")
        txn._transition(State.COMMITTING_TRANSACTION)
        return _enqueue_end_txn(txn, committed=True)


def begin_abort(txn: TransactionManager, accumulator: "RecordAccumulator") -> TransactionalRequestResult:
    with txn._lock:
        _check_not_fatal(txn)
        if txn.pending_result is not None and txn.pending_result.operation == "abort_transaction" \
                and not txn.pending_result.is_done():
            return txn.pending_result
        if txn.state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR, State.COMMITTING_TRANSACTION):
            raise TransactionError(f"abort_transaction() needs an open transaction (state {txn.state})")
        txn._transition(State.ABORTING_TRANSACTION)
        # a commit that could not finish is superseded
        for req in list(txn.pending_requests):
            if req.kind.startswith("EndTxn"):
                txn.pending_requests.remove(req)
                if req.result is not None:
                    req.result.done(TransactionError("the commit was superseded by abort_transaction()"))
        txn.new_partitions.clear()
        result = _enqueue_end_txn(txn, committed=False)
    accumulator.abort_undrained_batches(TransactionAbortedError(
        "the transaction was aborted before this record was sent"))
    return result


# --------------------------------------------------------------------------------------------
# requests


def _enqueue(txn: TransactionManager, req: PendingRequest, front: bool = False) -> None:
    with txn._lock:
        if front:
            txn.pending_requests.appendleft(req)
        else:
            txn.pending_requests.append(req)


def _classify(txn: TransactionManager, code: int) -> str:
    """'ok', 'retry', 'coordinator' (find it again, then retry), or 'failed' (state already changed)."""
    if code == 0:
        return "ok"
    if code in _COORDINATOR_ERRORS and code != 14:
        txn.coordinator = None
        return "coordinator"
    if code in _RETRY_ERRORS or code == 14:
        return "retry"
    if code in _FENCED:
        txn.last_request_error = _fenced_error(code)
        txn.transition_to_fatal_error(txn.last_request_error)
        return "failed"
    exc = error_for_code(code)
    txn.last_request_error = exc
    if code in _FATAL:
        txn.transition_to_fatal_error(exc)
    else:
        txn.transition_to_abortable_error(exc)
    return "failed"


def _adapter(txn: TransactionManager, handle: Callable[[Body, Optional[BaseException]], Optional[str]],
             result: Optional[TransactionalRequestResult]) -> Callable[[Body, Optional[BaseException]], None]:
    """Wrap a handler: 'failed' completes ``result`` with the transaction's error; retries are the
    pump's business (see :func:`_on_response`)."""

    def run(body: Body, error: Optional[BaseException]) -> None:
        outcome = handle(body, error)
        if outcome == "failed" and result is not None:
            result.done(txn.last_request_error or txn.last_error or KafkaError("transactional request failed"))
        if outcome in ("retry", "coordinator"):
            raise _Retry(outcome)

    return run


class _Retry(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _enqueue_init_producer_id(txn: TransactionManager, result: TransactionalRequestResult) -> None:
    def build() -> Tuple[Api, Dict[str, Any]]:
        return m.INIT_PRODUCER_ID, {"transactional_id": txn.transactional_id,
                                    "transaction_timeout_ms": txn.transaction_timeout_ms,
                                    "producer_id": -1, "producer_epoch": -1}

    def handle(body: Body, error: Optional[BaseException]) -> Optional[str]:
        code = body["error_code"] if body is not None else 13
        outcome = _classify(txn, code)
        if outcome == "ok":
            assert body is not None
            txn.set_producer_id(body["producer_id"], body["producer_epoch"])
            with txn._lock:
                txn.state = State.READY
                txn._last_error = None
                txn.pending_result = None
            result.done(None)
        elif outcome == "failed":
            with txn._lock:
                if txn.state == State.INITIALIZING:
                    txn.state = State.UNINITIALIZED
        return outcome

    _enqueue(txn, PendingRequest("InitProducerId", build, _adapter(txn, handle, result), result))


def _enqueue_add_partitions(txn: TransactionManager) -> None:
    with txn._lock:
        parts = sorted(txn.new_partitions)
        txn.pending_partitions.update(parts)
        txn.new_partitions.clear()
    by_topic: Dict[str, List[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)

    def build() -> Tuple[Api, Dict[str, Any]]:
        return m.ADD_PARTITIONS_TO_TXN, {
            "transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def handle(body: Body, error: Optional[BaseException]) -> Optional[str]:
        if body is None:
            return "retry"
        worst = "ok"
        for topic in body["results"]:
            for pr in topic["results_by_partition"]:
                tp = (topic["name"], pr["partition_index"])
                outcome = _classify(txn, pr["partition_error_code"])
                if outcome == "ok":
                    with txn._lock:
                        txn.partitions_in_txn.add(tp)
                        txn.pending_partitions.discard(tp)
                        txn.transaction_started = True
                elif worst != "failed":
                    worst = outcome
        if worst == "failed":
            with txn._lock:
                txn.pending_partitions.difference_update(parts)
        return None if worst == "ok" else worst

    _enqueue(txn, PendingRequest("AddPartitionsToTxn", build, _adapter(txn, handle, None), None), front=True)


def _enqueue_txn_offset_commit(txn: TransactionManager, result: TransactionalRequestResult,
                               offsets: Dict[TopicPartition, int], group_id: str, generation_id: int,
                               member_id: str, group_instance_id: Optional[str]) -> None:
    by_topic: Dict[str, List[Dict[str, Any]]] = {}
    for (t, p), off in sorted(offsets.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                           "committed_leader_epoch": -1, "committed_metadata": ""})

    def build() -> Tuple[Api, Dict[str, Any]]:
        return m.TXN_OFFSET_COMMIT, {
            "transactional_id": txn.transactional_id, "group_id": group_id, "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch, "generation_id": generation_id, "member_id": member_id,
            "group_instance_id": group_instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def handle(body: Body, error: Optional[BaseException]) -> Optional[str]:
        if body is None:
            return "retry"
        for topic in body["topics"]:
            for pr in topic["partitions"]:
                code = pr["error_code"]
                if code in _COORDINATOR_ERRORS and code != 14:
                    txn.group_coordinators.pop(group_id, None)
                    return "coordinator"
                outcome = _classify(txn, code)
                if outcome != "ok":
                    return outcome
        result.done(None)
        return None

    _enqueue(txn, PendingRequest("TxnOffsetCommit", build, _adapter(txn, handle, result), result,
                                 target=f"group:{group_id}"), front=True)


def _enqueue_end_txn(txn: TransactionManager, committed: bool) -> TransactionalRequestResult:
    op = "commit_transaction" if committed else "abort_transaction"
    result = TransactionalRequestResult(op)
    txn.pending_result = result
    txn.last_request_error = None
    if not txn.transaction_started and not txn.pending_partitions and not txn.new_partitions:
        # nothing reached the coordinator: there is nothing to end there
        _enqueue(txn, PendingRequest("EndTxnLocal", lambda: (m.END_TXN, {}), lambda b, e: None, result))
        return result

    def build() -> Tuple[Api, Dict[str, Any]]:
        return m.END_TXN, {"transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
                           "producer_epoch": txn.producer_epoch, "committed": committed}

    def handle(body: Body, error: Optional[BaseException]) -> Optional[str]:
        code = body["error_code"] if body is not None else 13
        outcome = _classify(txn, code)
        if outcome == "ok":
            _complete_transaction(txn)
            result.done(None)
        return outcome

    kind = "EndTxnCommit" if committed else "EndTxnAbort"
    _enqueue(txn, PendingRequest(kind, build, _adapter(txn, handle, result), result))
    return result


def _complete_transaction(txn: TransactionManager) -> None:
    with txn._lock:
        txn.partitions_in_txn.clear()
        txn.pending_partitions.clear()
        txn.new_partitions.clear()
        txn.transaction_started = False
        txn.state = State.READY
        txn._last_error = None
        txn.pending_result = None


# --------------------------------------------------------------------------------------------
# sender side


def maybe_send_and_poll_transactional_request(sender: "Sender", txn: TransactionManager) -> bool:
    """Send the next coordinator request if one is due (Kafka's maybeSendAndPollTransactionalRequest).
    True when this sender iteration was spent on it."""
    client = sender.client
    now = sender.clock.monotonic_ms()
    if txn.in_flight_request is not None:
        client.poll(sender.retry_backoff_ms, now)
        return True
    acc = sender.accumulator
    if txn.has_fatal_error():
        err = txn.last_error or KafkaError("fatal transaction error")
        if acc.has_undrained():
            acc.abort_undrained_batches(err)
        client.poll(sender.retry_backoff_ms, now)
        return True
    if txn.has_abortable_error() or txn.is_aborting():
        if acc.has_undrained():
            acc.abort_undrained_batches(txn.last_error or TransactionAbortedError(
                "the transaction is being aborted; this record was not sent"))
    with txn._lock:
        if txn.new_partitions and txn.state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION) \
                and txn.has_producer_id():
            _enqueue_add_partitions(txn)
        req = txn.pending_requests[0] if txn.pending_requests else None
    if req is None:
        return False
    if req.kind.startswith("EndTxn") and acc.has_incomplete():
        return False  # EndTxn waits until every batch of the transaction is acknowledged or failed
    if req.retry_at_ms > now:
        # back off (as Java's sender sleeps), but wake up when the retry is due: nothing else may
        # (with no records queued, the sender's own poll could sleep for request.timeout.ms)
        client.poll(req.retry_at_ms - now, now)
        return True
    if req.kind == "EndTxnCommit" and txn.has_abortable_error():
        # a record of the transaction failed: it cannot be committed
        with txn._lock:
            txn.pending_requests.popleft()
            txn.pending_result = None
        assert req.result is not None
        req.result.done(TransactionError(
            f"cannot commit: a record of the transaction failed ({txn.last_error}); call abort_transaction()"))
        return True
    if req.kind == "EndTxnLocal":
        with txn._lock:
            txn.pending_requests.popleft()
        _complete_transaction(txn)
        assert req.result is not None
        req.result.done(None)
        return True
    # where does it go?
    if req.target == "coordinator":
        node = txn.coordinator
        if node is None:
            _lookup_coordinator(txn, KEY_TYPE_TRANSACTION, txn.transactional_id or "")
            req = txn.pending_requests[0]
            node = client.least_loaded_node(now)
    elif req.target.startswith("group:"):
        group = req.target[6:]
        node = txn.group_coordinators.get(group)
        if node is None:
            _lookup_coordinator(txn, KEY_TYPE_GROUP, group)
            req = txn.pending_requests[0]
            node = client.least_loaded_node(now)
    else:
        node = client.least_loaded_node(now)
    if node is not None and node in txn.coordinator_addresses:
        client.learn_node_address(node, *txn.coordinator_addresses[node])
    if node is None or not client.ready(node, now):
        client.poll(sender.retry_backoff_ms if node is None else min(50.0, sender.retry_backoff_ms), now)
        return True
    with txn._lock:
        txn.pending_requests.popleft()
        txn.in_flight_request = req
    api, body = req.build()
    req.attempts += 1
    client.send(ClientRequest(node, api, body, lambda resp: _on_response(sender, txn, req, resp), now,
                              sender.request_timeout_ms), now)
    client.poll(sender.request_timeout_ms, now)
    return True


def _on_response(sender: "Sender", txn: TransactionManager, req: PendingRequest, resp: ClientResponse) -> None:
    txn.in_flight_request = None
    now = resp.received_ms
    body = resp.body
    try:
        if resp.disconnected:
            log.debug("%s: connection lost; retrying", req.kind)
            if req.target == "coordinator":
                txn.coordinator = None
            raise _Retry("coordinator")
        req.handler(body, None)
    except _Retry as r:
        if r.kind == "coordinator" and req.target.startswith("group:"):
            txn.group_coordinators.pop(req.target[6:], None)
        req.retry_at_ms = now + sender.retry_backoff_ms
        _enqueue(txn, req, front=True)
    except Exception as e:  # a bug must not wedge the transaction: fail it visibly
        log.exception("error handling the %s response", req.kind)
        txn.transition_to_fatal_error(e)


def _lookup_coordinator(txn: TransactionManager, key_type: int, key: str) -> None:
    """Put a FindCoordinator request at the head of the queue."""

    def build() -> Tuple[Api, Dict[str, Any]]:
        return m.FIND_COORDINATOR, {"key": key, "key_type": key_type, "coordinator_keys": [key]}

    def handle(body: Body, error: Optional[BaseException]) -> Optional[str]:
        if body is None:
            return "retry"
        if body.get("coordinators"):
            entry = body["coordinators"][0]
        else:
            entry = body
        code = entry["error_code"]
        if code:
            if code in _COORDINATOR_ERRORS or code in _RETRY_ERRORS:
                return "retry"
            exc = error_for_code(code)
            txn.transition_to_fatal_error(exc)
            if txn.pending_result is not None:
                txn.pending_result.done(exc)
            return None
        node_id = entry["node_id"]
        _sender_learn_node(txn, node_id, entry["host"], entry["port"])
        if key_type == KEY_TYPE_TRANSACTION:
            txn.coordinator = node_id
        else:
            txn.group_coordinators[key] = node_id
        return None

    _enqueue(txn, PendingRequest("FindCoordinator", build, _adapter(txn, handle, None), None, target="any"),
             front=True)


def _sender_learn_node(txn: TransactionManager, node_id: int, host: str, port: int) -> None:
    txn.coordinator_addresses[node_id] = (host, port)
