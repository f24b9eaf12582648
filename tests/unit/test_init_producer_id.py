"""One InitProducerId path (issue 31 item 5): the idempotent producer gets its producer id as the transactional one
does, through the transaction manager's InitProducerIdHandler, queued by the manager and sent by the sender's
coordinator loop (Java's TransactionManager serves both). Its error handling is the handler's; where the two
producers still differ on purpose is pinned here too (docs/transactions.md). The KIP-580 backoff of these retries
is tested in test_lifecycle.py."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from kproducer.errors import ClusterAuthorizationFailedError, ProducerFencedError, TransactionError, UnknownServerError
from kproducer.producer.transaction_manager import State, TransactionManager
from kproducer.protocol import messages as m
from tests.unit.scripted import HOLD, Harness, SentRequest

INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90
UNKNOWN_SERVER_ERROR = -1


def refused(code: int) -> Dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def coordinator(req: SentRequest) -> Dict[str, Any]:
    return {"throttle_time_ms": 0, "coordinators": [
        {"key": k, "node_id": 1, "host": "broker1", "port": 9092, "error_code": 0, "error_message": None}
        for k in req.body["coordinator_keys"]]}


def producer(transactional: bool) -> Harness:
    if not transactional:
        return Harness(enable_idempotence=True, retry_backoff_ms=100, retry_backoff_max_ms=100, idle_advance=True)
    h = Harness(enable_idempotence=True, transactional_id="tx", retry_backoff_ms=100, retry_backoff_max_ms=100,
                idle_advance=True)
    h.selector.handlers[m.FIND_COORDINATOR.key] = coordinator
    return h


def manager(h: Harness) -> TransactionManager:
    assert h.txn is not None
    return h.txn


def get_producer_id(h: Harness) -> Optional[BaseException]:
    """Run until the producer has an id (None) or cannot get one (the error the application sees)."""
    txn = manager(h)
    if txn.is_transactional:
        result = txn.init_transactions()
        h.run_until(result.is_done, max_iterations=400)
        return result.error
    h.run_until(lambda: txn.has_producer_id() or h.sender.fatal_error is not None, max_iterations=400)
    return h.sender.fatal_error


def run_noting_states(h: Harness, done: Callable[[], bool], states: List[State]) -> None:
    """Run the sender until ``done()`` (at most 200 iterations), noting each new state of the transaction manager."""
    for _ in range(200):
        if states[-1] is not manager(h).state:
            states.append(manager(h).state)
        if done():
            return
        h.run_once()
    raise AssertionError(f"not done; states {states}")


def test_the_idempotent_producer_asks_through_the_transaction_managers_handler() -> None:
    h = Harness(enable_idempotence=True)
    txn = manager(h)
    states = [txn.state]
    h.selector.script(m.INIT_PRODUCER_ID, HOLD)
    run_noting_states(h, lambda: len(h.selector.held(m.INIT_PRODUCER_ID)) == 1, states)
    assert txn.has_in_flight_request()  # the manager's request
    [request] = h.selector.held(m.INIT_PRODUCER_ID)
    assert request.body["transactional_id"] is None and request.body["transaction_timeout_ms"] == 2**31 - 1
    assert (request.body["producer_id"], request.body["producer_epoch"]) == (-1, -1)
    h.selector.respond(request, {"error_code": 0, "producer_id": 41, "producer_epoch": 2})
    run_noting_states(h, txn.has_producer_id, states)
    assert (txn.producer_id, txn.producer_epoch) == (41, 2)
    assert not txn.has_in_flight_request() and not txn.has_pending_requests()
    # as Java's idempotent producer
    assert states == [State.UNINITIALIZED, State.INITIALIZING, State.READY]

    # a reset renews the id the same way
    txn.request_reset("test")
    states = [txn.state]
    run_noting_states(h, lambda: txn.has_producer_id() and txn.producer_id != 41, states)
    # (READY -> UNINITIALIZED -> INITIALIZING in one sender iteration: the table has no READY -> INITIALIZING)
    assert states == [State.READY, State.INITIALIZING, State.READY]
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 2


@pytest.mark.parametrize("code", [INVALID_PRODUCER_EPOCH, PRODUCER_FENCED])
@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transactional"])
def test_a_fenced_init_producer_id_is_a_fatal_producer_fenced_error_for_both_producers(
        transactional: bool, code: int) -> None:
    # Java's InitProducerIdHandler: INVALID_PRODUCER_EPOCH and PRODUCER_FENCED are PRODUCER_FENCED, fatal. Before
    # issue 31 the idempotent producer had its own handling and ended with InvalidProducerEpochError.
    h = producer(transactional)
    h.selector.script(m.INIT_PRODUCER_ID, refused(code))
    error = get_producer_id(h)
    assert isinstance(error, ProducerFencedError), error
    assert f"broker error {'PRODUCER_FENCED' if code == PRODUCER_FENCED else 'INVALID_PRODUCER_EPOCH'}" in str(error)
    assert manager(h).has_fatal_error()
    h.run(20)
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 1  # not retried


@pytest.mark.allow_internal_errors  # (UNKNOWN_SERVER_ERROR's text, logged, says "unexpected error": the guard's word)
@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transactional"])
def test_unknown_server_error_is_retried_by_the_idempotent_producer_only(transactional: bool) -> None:
    # (a difference kept: the idempotent producer always retried it; Java's handler, and so the transactional
    # producer's, fail fatally)
    h = producer(transactional)
    h.selector.script(m.INIT_PRODUCER_ID, refused(UNKNOWN_SERVER_ERROR))
    error = get_producer_id(h)
    if transactional:
        assert isinstance(error, UnknownServerError) and manager(h).has_fatal_error()
        with pytest.raises(TransactionError):
            manager(h).begin_transaction()
        assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 1
    else:
        assert error is None and manager(h).state is State.READY
        sent = h.selector.sent(m.INIT_PRODUCER_ID)
        assert len(sent) == 2 and sent[1].written_ms - sent[0].written_ms == 100  # after retry.backoff.ms


CLUSTER_AUTHORIZATION_FAILED = 31


def test_a_refused_idempotent_producer_id_goes_back_to_uninitialized_through_the_transition_function(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Java: InitProducerIdHandler's abortableError, then Sender.shouldHandleAuthorizationError's
    # transitionToUninitialized, then bumpIdempotentEpochAndResetIdIfNeeded's INITIALIZING (not FATAL_ERROR)
    h = producer(transactional=False)
    txn = manager(h)
    moves: List[Tuple[State, State]] = []
    transition = txn._transition

    def noting(target: State, error: Optional[BaseException] = None) -> None:
        source = txn.state
        transition(target, error)
        moves.append((source, target))

    monkeypatch.setattr(txn, "_transition", noting)
    h.selector.script(m.INIT_PRODUCER_ID, refused(CLUSTER_AUTHORIZATION_FAILED))
    assert get_producer_id(h) is None
    assert moves == [(State.UNINITIALIZED, State.INITIALIZING), (State.INITIALIZING, State.ABORTABLE_ERROR),
                     (State.ABORTABLE_ERROR, State.UNINITIALIZED), (State.UNINITIALIZED, State.INITIALIZING),
                     (State.INITIALIZING, State.READY)]
    assert txn.last_error is None and txn.init_refusals == 0


def test_refused_producer_ids_are_asked_again_after_a_growing_backoff_reset_by_a_success() -> None:
    # KIP-580 as for the retried InitProducerIds: retry.backoff.ms doubling per refusal up to retry.backoff.max.ms
    # (Java asks again at once); a producer id resets it
    h = Harness(enable_idempotence=True, retry_backoff_ms=100, retry_backoff_max_ms=1000, idle_advance=True)
    txn = manager(h)
    h.selector.script(m.INIT_PRODUCER_ID, *[refused(CLUSTER_AUTHORIZATION_FAILED)] * 6)
    failed = []
    for _ in range(6):  # a record queued during each wait fails at the next refusal
        fut = h.send()
        h.run_until(fut.done, max_iterations=50)
        failed.append(fut.exception(0))
    h.run_until(txn.has_producer_id, max_iterations=50)
    assert all(isinstance(e, ClusterAuthorizationFailedError) for e in failed), failed
    times = [r.written_ms for r in h.selector.sent(m.INIT_PRODUCER_ID)]
    assert [b - a for a, b in zip(times, times[1:])] == [100, 200, 400, 800, 1000, 1000]
    assert txn.init_refusals == 0 and h.sender.fatal_error is None
    first = txn.producer_id
    txn.request_reset("test")  # a new producer id, refused once: the backoff starts again at retry.backoff.ms
    h.selector.script(m.INIT_PRODUCER_ID, refused(CLUSTER_AUTHORIZATION_FAILED))
    h.run_until(lambda: txn.has_producer_id() and txn.producer_id != first, max_iterations=50)
    times = [r.written_ms for r in h.selector.sent(m.INIT_PRODUCER_ID)]
    assert len(times) == 9 and times[-1] - times[-2] == 100
