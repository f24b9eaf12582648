"""Issue 28, items 1-6 and 21 (transactions exactly as Java), without a network: the transaction manager and
the sender on a fake clock and a scripted broker (kproducer.testing's Harness). Each test names the item it
pins; each failed before its fix.

* 1: every batch a transactional producer fails (here: the queued batches of a leader whose connection failed
  authentication) makes the transaction abortable; the commit then fails and no EndTxn(commit) is sent.
* 2: a retried commit / abort / init_transactions after a timed-out wait gets the cached result (also when it
  completed in the background); begin_transaction() and other calls are refused until then (Java's
  handleCachedTransactionRequestResult / throwIfPendingState).
* 3: UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING on AddPartitionsToTxn: abortable, no partition stays
  pending, the abort completes (INVALID_PRODUCER_ID_MAPPING: without EndTxn, straight to a new epoch).
* 4: aborting on a coordinator without epoch bumps (InitProducerId < v3) sends the batches awaiting a retry
  before EndTxn (no sequence gap); the next transaction commits.
* 5: TRANSACTIONAL_ID_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED on InitProducerId: the typed error,
  and init_transactions() may be called again (Java: ABORTABLE_ERROR, then UNINITIALIZED).
* 6: the sender's close does not wait for InitProducerId retries when no transaction is open, and fails the
  waiting call; a forced close fails a waiting commit at once.
* 21: PRODUCER_FENCED and the other fatal errors in a transactional produce response are fatal; a commit is
  never sent from ABORTABLE_ERROR (behaviourally: what reaches the wire).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import pytest

from kproducer.errors import (
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    InvalidRecordError,
    KafkaTimeoutError,
    NotEnoughReplicasError,
    ProducerClosedError,
    ProducerFencedError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    TransactionError,
    UnknownProducerIdError,
    UnsupportedVersionError,
)
from kproducer.producer.future import FutureRecordMetadata
from kproducer.producer.transaction_manager import State, TransactionalRequestResult, TransactionManager
from kproducer.protocol import messages as m
from tests.unit.scripted import Harness, SentRequest

BROKERS = {1: ("broker1", 9092), 2: ("broker2", 9092)}
TOPIC = "t"


# --------------------------------------------------------------------------------------------
# a scripted transaction coordinator (broker 1) in front of the Harness


def find_coordinator(req: SentRequest) -> Dict[str, Any]:
    host, port = BROKERS[1]
    if req.version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [
            {"key": k, "node_id": 1, "host": host, "port": port, "error_code": 0, "error_message": None}
            for k in req.body["coordinator_keys"]]}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "node_id": 1, "host": host, "port": port}


def add_partitions(code: int = 0, only: Optional[int] = None) -> Callable[[SentRequest], Dict[str, Any]]:
    """AddPartitionsToTxn answered with ``code`` for every partition (or for partition ``only``; the others
    OPERATION_NOT_ATTEMPTED, as Kafka answers)."""
    def answer(req: SentRequest) -> Dict[str, Any]:
        def partition_code(p: int) -> int:
            if only is None:
                return code
            return code if p == only else (55 if code else 0)
        return {"throttle_time_ms": 0, "results": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": partition_code(p)} for p in t["partitions"]]}
            for t in req.body["topics"]]}
    return answer


def end_txn(code: int = 0) -> Callable[[SentRequest], Dict[str, Any]]:
    return lambda req: {"throttle_time_ms": 0, "error_code": code}


def refused(code: int) -> Dict[str, Any]:
    """An InitProducerId answer with this error."""
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def txn_harness(leaders: Optional[List[int]] = None, **settings: Any) -> Harness:
    settings.setdefault("linger_ms", 0)
    h = Harness(topics={TOPIC: leaders or [1, 1, 1]}, brokers=BROKERS, transactional_id="tx",
                enable_idempotence=True, **settings)
    h.selector.handlers[m.FIND_COORDINATOR.key] = find_coordinator
    h.selector.handlers[m.ADD_PARTITIONS_TO_TXN.key] = add_partitions()
    h.selector.handlers[m.END_TXN.key] = end_txn()
    return h


def connect(h: Harness) -> None:
    """Metadata for the topic and a connection to each broker (Harness.boot() would also wait for a producer
    id, which a transactional producer gets from init_transactions())."""
    h.metadata.add_topic(TOPIC)
    nodes = set(BROKERS)

    def ready() -> bool:
        if h.metadata.cluster.partition_count(TOPIC) is None:
            return False
        for node in nodes:
            h.client.ready(node, h.now)
        return all(h.client.is_ready(node, h.now) for node in nodes)

    h.run_until(ready, what="connected")


def tm(h: Harness) -> TransactionManager:
    assert h.txn is not None
    return h.txn


def complete(h: Harness, result: TransactionalRequestResult, what: str = "", iterations: int = 400) -> None:
    h.run_until(result.is_done, max_iterations=iterations, what=what or result.operation)


def init(h: Harness) -> None:
    result = tm(h).init_transactions()
    complete(h, result)
    result.wait(0)
    assert tm(h).state is State.READY


def send(h: Harness, partition: int, value: bytes = b"v") -> FutureRecordMetadata:
    tm(h).check_can_send((TOPIC, partition))  # as Producer.send() does
    return h.send(TOPIC, value, partition=partition)


def drive(h: Harness, done: Callable[[], bool], steps: int = 200) -> None:
    """Run the sender, stepping the fake clock 50 ms at a time (at most ``steps``), until ``done()``."""
    for _ in range(steps):
        if done():
            return
        h.run(3)
        h.advance(50)
    assert done(), f"not reached after {steps} steps"


def end_txns(h: Harness) -> List[bool]:
    """What every EndTxn sent asked for: True commit, False abort."""
    return [r.body["committed"] for r in h.selector.sent(m.END_TXN)]


def init_producer_ids(h: Harness) -> List[SentRequest]:
    return h.selector.sent(m.INIT_PRODUCER_ID)


# --------------------------------------------------------------------------------------------
# item 1


@pytest.mark.parametrize("while_committing", [False, True])
def test_batches_failed_by_an_authentication_failure_make_the_transaction_abortable(while_committing: bool) -> None:
    """36 records over 4 partitions on brokers 1 and 2 (the coordinator is 1). Broker 2's connection fails
    authentication while its batches are queued: they fail, and the commit must fail with them (not commit
    the 18 records broker 1 has), whether the failure came before commit_transaction() or during it."""
    h = txn_harness(leaders=[1, 2, 1, 2], linger_ms=60_000, delivery_timeout_ms=120_000)
    connect(h)
    init(h)
    tm(h).begin_transaction()
    futures = {i: send(h, i % 4, b"r%d" % i) for i in range(36)}
    h.run(3)  # AddPartitionsToTxn: the partitions join the transaction; the batches linger
    assert tm(h).partitions_in_txn == {(TOPIC, p) for p in range(4)}
    h.selector.down.add(2)
    h.selector.failures[2] = SaslAuthenticationFailedError("credentials refused by broker 2")
    h.selector.kill_connection(2)
    commit: Optional[TransactionalRequestResult] = None
    if while_committing:
        commit = tm(h).begin_commit()
    drive(h, lambda: all(f.done() for i, f in futures.items() if i % 4 in (1, 3)))
    assert all(isinstance(f.exception(0), SaslAuthenticationFailedError) for i, f in futures.items() if i % 4 in (1, 3))
    assert tm(h).state is State.ABORTABLE_ERROR
    if commit is None:
        with pytest.raises(TransactionError) as raised:
            tm(h).begin_commit()
        assert isinstance(raised.value.__cause__, SaslAuthenticationFailedError)
    else:
        drive(h, commit.is_done)
        with pytest.raises(TransactionError) as raised:
            commit.wait(0)
        assert isinstance(raised.value.__cause__, SaslAuthenticationFailedError)
    assert True not in end_txns(h), "no EndTxn(commit) may reach the coordinator"
    abort = tm(h).begin_abort()
    drive(h, abort.is_done)
    abort.wait(0)
    assert end_txns(h) == [False]
    assert all(f.done() for f in futures.values())


def test_batches_that_expire_make_the_transaction_abortable() -> None:
    """The other paths that fail a batch without a broker's refusal: delivery.timeout.ms for a batch that could
    never be sent (its leader is unreachable) makes the transaction abortable too."""
    h = txn_harness(leaders=[1, 2], linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=2000)
    connect(h)
    init(h)
    h.selector.down.add(2)
    h.selector.kill_connection(2)
    tm(h).begin_transaction()
    ok, lost = send(h, 0), send(h, 1)
    drive(h, lambda: ok.done() and lost.done(), steps=100)
    assert ok.exception(0) is None and isinstance(lost.exception(0), KafkaTimeoutError)
    assert tm(h).state is State.ABORTABLE_ERROR
    with pytest.raises(TransactionError) as raised:
        tm(h).begin_commit()
    assert raised.value.__cause__ is lost.exception(0)


# --------------------------------------------------------------------------------------------
# item 2


def _commit_in_background(h: Harness) -> TransactionalRequestResult:
    init(h)
    tm(h).begin_transaction()
    send(h, 0)
    result = tm(h).begin_commit()
    with pytest.raises(KafkaTimeoutError):
        result.wait(0)  # the application's wait expired
    return result


def test_a_commit_that_completed_after_its_call_timed_out_is_returned_to_the_retry() -> None:
    h = txn_harness()
    connect(h)
    result = _commit_in_background(h)
    drive(h, result.is_done)
    assert tm(h).state is State.READY and end_txns(h) == [True]
    # Java's throwIfPendingState: nothing else until the timed-out call was retried
    for call in (tm(h).begin_transaction, tm(h).begin_abort, tm(h).init_transactions):
        with pytest.raises(IllegalStateError, match=r"commit_transaction\(\)"):
            call()
    with pytest.raises(TransactionError, match=r"commit_transaction\(\)"):
        tm(h).check_can_send((TOPIC, 0))
    again = tm(h).begin_commit()
    assert again is result
    again.wait(0)  # the cached success
    tm(h).begin_transaction()  # now accepted
    assert tm(h).state is State.IN_TRANSACTION
    assert end_txns(h) == [True], "the retry sent nothing"


def test_a_retried_commit_still_pending_waits_for_the_same_attempt_and_other_calls_are_refused() -> None:
    h = txn_harness()
    connect(h)
    h.selector.handlers[m.END_TXN.key] = end_txn(51)  # CONCURRENT_TRANSACTIONS: retried
    result = _commit_in_background(h)
    h.run(20)
    assert not result.is_done()
    assert tm(h).begin_commit() is result
    with pytest.raises(IllegalStateError, match=r"commit_transaction\(\)"):
        tm(h).begin_abort()
    h.selector.handlers[m.END_TXN.key] = end_txn()
    drive(h, result.is_done)
    assert tm(h).begin_commit() is result
    result.wait(0)
    assert end_txns(h).count(True) >= 2 and tm(h).state is State.READY


def test_an_abort_that_completed_after_its_call_timed_out_is_returned_to_the_retry() -> None:
    h = txn_harness()
    connect(h)
    init(h)
    tm(h).begin_transaction()
    send(h, 0)
    result = tm(h).begin_abort()
    with pytest.raises(KafkaTimeoutError):
        result.wait(0)
    drive(h, result.is_done)
    assert tm(h).state is State.READY
    with pytest.raises(IllegalStateError, match=r"abort_transaction\(\)"):
        tm(h).begin_transaction()
    assert tm(h).begin_abort() is result
    result.wait(0)
    tm(h).begin_transaction()


def test_init_transactions_that_completed_after_its_call_timed_out_is_returned_to_the_retry() -> None:
    h = txn_harness()
    connect(h)
    result = tm(h).init_transactions()
    with pytest.raises(KafkaTimeoutError):
        result.wait(0)
    drive(h, result.is_done)
    assert tm(h).state is State.READY
    with pytest.raises(IllegalStateError, match=r"init_transactions\(\)"):
        tm(h).begin_transaction()
    assert tm(h).init_transactions() is result
    result.wait(0)
    with pytest.raises(TransactionError, match="already called"):
        tm(h).init_transactions()  # once acknowledged, a new call is a new call
    tm(h).begin_transaction()
    assert len(init_producer_ids(h)) == 1


def test_a_commit_that_failed_in_the_background_raises_on_the_retry_then_abort_is_allowed() -> None:
    h = txn_harness()
    connect(h)
    h.selector.handlers[m.END_TXN.key] = end_txn(TopicAuthorizationFailedError.code)  # abortable
    result = _commit_in_background(h)
    drive(h, result.is_done)
    assert tm(h).state is State.ABORTABLE_ERROR
    with pytest.raises(IllegalStateError, match=r"commit_transaction\(\)"):
        tm(h).begin_abort()
    assert tm(h).begin_commit() is result
    with pytest.raises(TopicAuthorizationFailedError):
        result.wait(0)
    h.selector.handlers[m.END_TXN.key] = end_txn()
    abort = tm(h).begin_abort()
    drive(h, abort.is_done)
    abort.wait(0)
    assert tm(h).state is State.READY


# --------------------------------------------------------------------------------------------
# item 3


@pytest.mark.parametrize("code", [UnknownProducerIdError.code, InvalidProducerIdMappingError.code])
@pytest.mark.parametrize("started", [False, True], ids=["first-partition", "later-partition"])
def test_producer_id_errors_on_add_partitions_are_abortable_and_the_abort_completes(code: int, started: bool) -> None:
    h = txn_harness()
    connect(h)
    init(h)
    first_id = tm(h).producer_id_and_epoch
    tm(h).begin_transaction()
    if started:  # a partition already in the transaction, with a record written
        f = send(h, 0)
        drive(h, f.done)
        assert f.exception(0) is None
    h.selector.handlers[m.ADD_PARTITIONS_TO_TXN.key] = add_partitions(code)
    futures = [send(h, 1, b"x%d" % i) for i in range(3)]
    drive(h, lambda: tm(h).state is not State.IN_TRANSACTION)
    assert tm(h).state is State.ABORTABLE_ERROR
    assert not tm(h).pending_partitions, "no partition may stay pending"
    with pytest.raises(TransactionError) as raised:
        tm(h).begin_commit()
    assert raised.value.__cause__ is not None and raised.value.__cause__.code == code  # type: ignore[attr-defined]
    h.selector.handlers[m.ADD_PARTITIONS_TO_TXN.key] = add_partitions()
    abort = tm(h).begin_abort()
    drive(h, abort.is_done, steps=100)
    abort.wait(0)
    assert all(f.done() and f.exception(0) is not None for f in futures)
    # EndTxn only when something reached the coordinator, and never after INVALID_PRODUCER_ID_MAPPING (the
    # coordinator does not know the producer id: Java goes straight to InitProducerId)
    assert end_txns(h) == ([False] if started and code == UnknownProducerIdError.code else [])
    bump = init_producer_ids(h)[-1]
    assert (bump.body["producer_id"], bump.body["producer_epoch"]) == tuple(first_id), "an epoch bump"
    assert tm(h).state is State.READY
    tm(h).begin_transaction()
    f = send(h, 1)
    commit = tm(h).begin_commit()
    drive(h, commit.is_done)
    commit.wait(0)
    assert f.exception(0) is None and end_txns(h)[-1] is True


def test_producer_id_errors_on_add_partitions_without_epoch_bump_are_fatal_and_leave_nothing_pending() -> None:
    h = txn_harness()
    h.selector.api_versions[m.INIT_PRODUCER_ID.key] = (0, 2)
    connect(h)
    init(h)
    tm(h).begin_transaction()
    h.selector.handlers[m.ADD_PARTITIONS_TO_TXN.key] = add_partitions(UnknownProducerIdError.code)
    send(h, 1)
    drive(h, lambda: tm(h).state is not State.IN_TRANSACTION)
    assert tm(h).state is State.FATAL_ERROR and not tm(h).pending_partitions
    assert not tm(h).has_pending_requests()


# --------------------------------------------------------------------------------------------
# item 4


def test_abort_without_epoch_bump_retries_the_batches_awaiting_a_retry_before_end_txn() -> None:
    """InitProducerId v2: the epoch cannot be bumped, so a batch that was sent must be resolved before
    EndTxn (Java's RecordAccumulator.abortUndrainedBatches leaves batches with a sequence queued). Batch A
    is written; batch B is refused retriably and waits for its retry when the abort begins: B is sent again,
    then EndTxn(abort); the next transaction's batch continues the sequence and commits."""
    h = txn_harness(retry_backoff_ms=1000, retry_backoff_max_ms=1000)
    h.selector.api_versions[m.INIT_PRODUCER_ID.key] = (0, 2)
    connect(h)
    init(h)
    tm(h).begin_transaction()
    a = send(h, 0, b"A")
    drive(h, a.done)
    assert a.exception(0) is None
    h.selector.script(m.PRODUCE, {(TOPIC, 0): NotEnoughReplicasError.code})
    b = send(h, 0, b"B")
    h.run_until(lambda: len(h.produce_requests()) == 2 and not h.client.has_in_flight(), what="B refused")
    assert not b.done() and h.accumulator.queued_batches() == 1  # B waits 1 s for its retry
    abort = tm(h).begin_abort()
    h.run(5)
    assert not b.done(), "B is retried, not failed"
    assert end_txns(h) == []
    drive(h, abort.is_done)
    abort.wait(0)
    assert b.exception(0) is None, "B was written (and is aborted with the transaction)"
    sequences = [r.batches()[(TOPIC, 0)].base_sequence for r in h.produce_requests()]
    assert sequences == [0, 1, 1]
    assert end_txns(h) == [False] and len(init_producer_ids(h)) == 1
    tm(h).begin_transaction()
    c = send(h, 0, b"C")
    commit = tm(h).begin_commit()
    drive(h, commit.is_done)
    commit.wait(0)
    assert c.exception(0) is None
    assert h.produce_requests()[-1].batches()[(TOPIC, 0)].base_sequence == 2, "no gap"


# --------------------------------------------------------------------------------------------
# item 5


@pytest.mark.parametrize("error", [TransactionalIdAuthorizationFailedError, ClusterAuthorizationFailedError])
def test_init_transactions_refused_by_authorization_may_be_called_again(error: Any) -> None:
    h = txn_harness()
    connect(h)
    h.selector.script(m.INIT_PRODUCER_ID, refused(error.code))
    result = tm(h).init_transactions()
    complete(h, result)
    with pytest.raises(error):
        result.wait(0)
    assert tm(h).state is State.UNINITIALIZED  # Java: ABORTABLE_ERROR, then UNINITIALIZED (Sender)
    with pytest.raises(TransactionError, match=r"init_transactions\(\)"):
        tm(h).begin_transaction()
    again = tm(h).init_transactions()  # the ACL was fixed
    assert again is not result
    complete(h, again)
    again.wait(0)
    assert tm(h).state is State.READY and len(init_producer_ids(h)) == 2
    tm(h).begin_transaction()


def test_an_authorization_failure_answered_after_init_timed_out_is_raised_by_the_retry() -> None:
    h = txn_harness()
    connect(h)
    h.selector.script(m.INIT_PRODUCER_ID, refused(TransactionalIdAuthorizationFailedError.code))
    result = tm(h).init_transactions()
    with pytest.raises(KafkaTimeoutError):
        result.wait(0)
    complete(h, result)
    assert tm(h).init_transactions() is result
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        result.wait(0)
    fresh = tm(h).init_transactions()
    complete(h, fresh)
    fresh.wait(0)


# --------------------------------------------------------------------------------------------
# item 6 (the manager's part; the producer's close() is tested in tests/integration/test_txn_correctness_mock.py)


def test_close_does_not_wait_for_init_producer_id_retries_and_fails_the_waiting_call() -> None:
    """Java's Sender waits at close only for the requests of an open transaction (hasOngoingTransaction):
    an InitProducerId the coordinator keeps refusing retriably is not waited for. The sender's run() returns
    (before the fix it retried until the poll limit) and init_transactions() fails at once."""
    h = txn_harness()
    connect(h)
    h.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: refused(51)
    result = tm(h).init_transactions()
    h.run(10)
    assert not result.is_done() and tm(h).has_pending_requests()
    h.sender.initiate_close()
    h.sender.run()  # (in this thread: the fake clock stands still; a loop that never ends hits the poll limit)
    with pytest.raises(ProducerClosedError, match="init_transactions"):
        result.wait(0)


def test_a_forced_close_fails_a_waiting_commit_at_once() -> None:
    h = txn_harness()
    connect(h)
    init(h)
    tm(h).begin_transaction()
    send(h, 0)
    h.selector.handlers[m.END_TXN.key] = end_txn(51)  # the commit cannot complete
    commit = tm(h).begin_commit()
    h.run(10)
    assert not commit.is_done()
    h.sender.force_stop()  # close(0), or close(timeout) once the timeout passed
    assert commit.is_done(), "failed at once, not after max.block.ms"
    with pytest.raises(ProducerClosedError, match="forcefully"):
        commit.wait(0)
    h.sender.run()
    assert not tm(h).has_pending_requests()


# --------------------------------------------------------------------------------------------
# item 21


FATAL_PRODUCE_ERRORS = [ProducerFencedError, ClusterAuthorizationFailedError, TransactionalIdAuthorizationFailedError,
                        UnsupportedVersionError]


@pytest.mark.parametrize("error", FATAL_PRODUCE_ERRORS, ids=lambda e: e.__name__)
def test_a_fatal_error_in_a_transactional_produce_response_is_fatal(error: Any) -> None:
    h = txn_harness()
    connect(h)
    init(h)
    tm(h).begin_transaction()
    h.selector.script(m.PRODUCE, {(TOPIC, 0): error.code})
    f = send(h, 0)
    drive(h, f.done)
    assert isinstance(f.exception(0), error)
    assert tm(h).state is State.FATAL_ERROR
    # nothing more happens under this producer id: no commit, no abort, no send
    for call in (tm(h).begin_commit, tm(h).begin_abort, tm(h).begin_transaction):
        with pytest.raises(TransactionError) as raised:
            call()
        assert raised.value.__cause__ is f.exception(0)
    with pytest.raises(TransactionError):
        tm(h).check_can_send((TOPIC, 1))
    h.run(10)
    assert h.selector.sent(m.END_TXN) == []


def test_a_record_failure_before_the_commit_means_no_end_txn_commit() -> None:
    h = txn_harness()
    connect(h)
    init(h)
    tm(h).begin_transaction()
    h.selector.script(m.PRODUCE, {(TOPIC, 0): TopicAuthorizationFailedError.code})
    f = send(h, 0)
    drive(h, f.done)
    assert tm(h).state is State.ABORTABLE_ERROR
    with pytest.raises(TransactionError) as raised:
        tm(h).begin_commit()
    assert raised.value.__cause__ is f.exception(0)
    h.run(10)
    assert end_txns(h) == []
    abort = tm(h).begin_abort()
    drive(h, abort.is_done)
    abort.wait(0)
    assert end_txns(h) == [False]


def test_a_record_failure_while_committing_fails_the_commit_without_end_txn_commit() -> None:
    h = txn_harness()
    connect(h)
    init(h)
    tm(h).begin_transaction()
    ok = send(h, 1)
    drive(h, ok.done)
    h.selector.script(m.PRODUCE, {(TOPIC, 0): TopicAuthorizationFailedError.code})
    f = send(h, 0)
    commit = tm(h).begin_commit()
    drive(h, commit.is_done)
    with pytest.raises(TransactionError) as raised:
        commit.wait(0)
    assert raised.value.__cause__ is f.exception(0)
    assert end_txns(h) == []
    assert tm(h).state is State.ABORTABLE_ERROR


def test_the_first_failed_batch_stays_the_cause_of_the_commit_error() -> None:
    h = txn_harness(linger_ms=100)
    connect(h)
    init(h)
    tm(h).begin_transaction()
    h.selector.script(m.PRODUCE, {(TOPIC, 0): TopicAuthorizationFailedError.code,
                                  (TOPIC, 1): InvalidRecordError.code})
    first, second = send(h, 0), send(h, 1)  # one produce request: both answered with an error
    h.advance(100)
    drive(h, lambda: first.done() and second.done())
    assert len(h.produce_requests()) == 1
    assert isinstance(second.exception(0), InvalidRecordError)
    with pytest.raises(TransactionError) as raised:
        tm(h).begin_commit()
    assert raised.value.__cause__ is first.exception(0)


# --------------------------------------------------------------------------------------------
# found by the hypothesis property test (tests/integration/test_transactions_hypothesis_mock.py)


def _manager_in_transaction() -> TransactionManager:
    from tests.unit.test_transaction_state import ready_manager

    tm = ready_manager()
    tm.begin_transaction()
    return tm


def test_partitions_never_added_after_an_abortable_error_do_not_keep_close_waiting() -> None:
    # A record for a new partition while the transaction turned abortable (e.g. UNKNOWN_PRODUCER_ID on an
    # AddPartitionsToTxn in flight): next_request() never sends that partition, so it is no pending request.
    # Before the fix has_pending_requests() counted it and Sender.run's close loop waited for it until close's
    # timeout, never aborting the transaction (Java's hasPendingRequests is the request queue only).
    tm = _manager_in_transaction()
    tm.check_can_send((TOPIC, 1))
    assert tm.has_pending_requests()  # open transaction: an AddPartitionsToTxn is due
    tm.maybe_transition_to_error_state(UnknownProducerIdError("from AddPartitionsToTxn"))
    assert tm.state is State.ABORTABLE_ERROR and tm.new_partitions
    assert tm.next_request(False) is None
    assert not tm.has_pending_requests()


@pytest.mark.parametrize("call", ["commit_transaction", "abort_transaction"])
def test_a_retried_call_collects_a_fatal_outcome_and_ends_the_pending_call(call: str) -> None:
    # fenced while a timed-out commit/abort was pending: the retry must return the cached (fatal) result, as
    # Java's handleCachedTransactionRequestResult does before maybeFailWithError; before the fix it raised the
    # fatal error without collecting it, the call stayed pending, and begin_transaction() said "call
    # abort_transaction() again" for ever (PendingCallError), which can never succeed.
    tm = _manager_in_transaction()
    result = tm.begin_commit() if call == "commit_transaction" else tm.begin_abort()
    with pytest.raises(KafkaTimeoutError):
        result.wait(0)  # the application's wait timed out: the call is pending
    tm._transition_to_fatal_error(ProducerFencedError("fenced by a newer producer"))
    retried = tm.begin_commit() if call == "commit_transaction" else tm.begin_abort()
    assert retried is result
    with pytest.raises(ProducerFencedError):
        retried.wait(0)
    with pytest.raises(TransactionError) as later:  # the fatal error, no longer "call ... again"
        tm.begin_transaction()
    assert "fatal" in str(later.value) and "again" not in str(later.value)
