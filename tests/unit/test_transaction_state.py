"""The transaction manager's state machine and coordinator request handlers, without a network
(issue 11): Java's transition table, one way to change state, typed outcomes and coordinator keys."""
from __future__ import annotations

import ast
import pathlib
from typing import Any, Dict

import pytest

from kproducer import ConsumerGroupMetadata, OffsetAndMetadata
from kproducer.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    IllegalStateError,
    InvalidRecordError,
    NotCoordinatorError,
    ProducerFencedError,
    TransactionError,
)
from kproducer.producer.transaction_manager import (
    VALID_SOURCES,
    AddOffsetsToTxnHandler,
    CoordinatorKey,
    CoordinatorType,
    EndTxnHandler,
    FindCoordinatorHandler,
    InitProducerIdHandler,
    Outcome,
    State,
    TransactionManager,
    TxnOffsetCommitHandler,
)

S = State
PRODUCER = pathlib.Path(__file__).resolve().parents[2] / "kproducer" / "producer"


def ready_manager() -> TransactionManager:
    tm = TransactionManager("tx")
    result = tm.init_transactions()
    handler = tm.next_request(False)
    assert isinstance(handler, InitProducerIdHandler)
    assert tm.handle_response(handler, {"error_code": 0, "producer_id": 7, "producer_epoch": 3}) is Outcome.SUCCESS
    result.wait(0)  # (the application sees the outcome: until then a retry of the call would get it again)
    assert tm.state is S.READY and tm.producer_id_and_epoch == (7, 3)
    return tm


def test_the_transition_table_is_javas() -> None:
    assert VALID_SOURCES == {
        S.UNINITIALIZED: (S.READY, S.ABORTABLE_ERROR),
        S.INITIALIZING: (S.UNINITIALIZED, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION),
        S.READY: (S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION),
        S.IN_TRANSACTION: (S.READY,),
        S.COMMITTING_TRANSACTION: (S.IN_TRANSACTION,),
        S.ABORTING_TRANSACTION: (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
        S.ABORTABLE_ERROR: (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING),
        S.FATAL_ERROR: tuple(State),
    }


@pytest.mark.parametrize("source", list(State))
@pytest.mark.parametrize("target", list(State))
def test_transition_refuses_what_the_table_refuses(source: State, target: State) -> None:
    tm = TransactionManager("tx")
    tm._state = source  # test set-up only: the code changes state through _transition
    if source in VALID_SOURCES[target]:
        tm._transition(target)
        assert tm.state is target
        # (what the accumulator reads: every queued batch goes at once while a transaction completes)
        assert tm.completing is (target in (State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION))
    else:
        with pytest.raises(IllegalStateError, match="invalid transaction transition"):
            tm._transition(target)
        assert tm.state is source


def test_only_transition_assigns_the_state() -> None:
    """No module of kproducer/producer assigns a transaction state except _transition."""
    offenders = []
    for path in PRODUCER.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for sub in ast.walk(node):
                    targets = sub.targets if isinstance(sub, ast.Assign) else (
                        [sub.target] if isinstance(sub, (ast.AugAssign, ast.AnnAssign)) else [])
                    for t in targets:
                        if isinstance(t, ast.Attribute) and t.attr in ("_state", "state") \
                                and node.name not in ("_transition", "__init__"):
                            offenders.append(f"{path.name}:{sub.lineno} in {node.name}")
    assert offenders == []


def test_imports_run_one_way() -> None:
    """sender -> transaction_manager, never back; no module named transactions.py any more."""
    source = (PRODUCER / "transaction_manager.py").read_text() + (PRODUCER / "idempotence.py").read_text()
    assert "sender" not in {n.module.split(".")[-1] for n in ast.walk(ast.parse(source))
                            if isinstance(n, ast.ImportFrom) and n.module}
    assert not (PRODUCER / "transactions.py").exists()


def test_abort_while_commit_pending_is_an_illegal_state() -> None:
    tm = ready_manager()
    tm.begin_transaction()
    tm.begin_commit()
    with pytest.raises(IllegalStateError, match=r"commit_transaction\(\) is pending"):
        tm.begin_abort()
    assert tm.state is S.COMMITTING_TRANSACTION


def test_a_failed_record_while_committing_makes_the_commit_fail_without_end_txn() -> None:
    tm = ready_manager()
    tm.begin_transaction()
    tm.check_can_send(("t", 0))
    add = tm.next_request(False)
    assert add is not None and tm.handle_response(add, {"results": [{"name": "t", "results_by_partition": [
        {"partition_index": 0, "partition_error_code": 0}]}]}) is Outcome.SUCCESS
    result = tm.begin_commit()
    error = InvalidRecordError("bad")
    tm.maybe_transition_to_error_state(error)
    assert tm.state is S.ABORTABLE_ERROR
    assert tm.next_request(False) is None, "no EndTxn(commit) goes out"
    with pytest.raises(TransactionError) as raised:
        result.wait(0)
    assert raised.value.__cause__ is error
    # the abort sends EndTxn(abort), then (the broker can bump epochs) InitProducerId with the current id
    tm.coordinator_supports_epoch_bump = True
    tm.epoch_bump_required = True
    abort = tm.begin_abort()
    end = tm.next_request(False)
    assert isinstance(end, EndTxnHandler) and end.build()["committed"] is False
    assert tm.handle_response(end, {"error_code": 0}) is Outcome.SUCCESS
    assert tm.state is S.INITIALIZING
    bump = tm.next_request(False)
    assert isinstance(bump, InitProducerIdHandler) and bump.bump
    assert (bump.build()["producer_id"], bump.build()["producer_epoch"]) == (7, 3)
    assert tm.handle_response(bump, {"error_code": 0, "producer_id": 7, "producer_epoch": 4}) is Outcome.SUCCESS
    abort.wait(0)
    assert tm.state is S.READY and tm.producer_id_and_epoch == (7, 4)


@pytest.mark.parametrize("code, outcome", [
    (NotCoordinatorError.code, Outcome.FIND_COORDINATOR),
    (CoordinatorLoadInProgressError.code, Outcome.RETRY),
    (ConcurrentTransactionsError.code, Outcome.RETRY),
    (ProducerFencedError.code, Outcome.FAILED),
])
def test_end_txn_outcomes(code: int, outcome: Outcome) -> None:
    tm = ready_manager()
    tm.begin_transaction()
    tm.transaction_started = True
    tm.begin_commit()
    end = tm.next_request(False)
    assert isinstance(end, EndTxnHandler)
    assert tm.handle_response(end, {"error_code": code}) is outcome
    if outcome is Outcome.FIND_COORDINATOR:
        key = CoordinatorKey(CoordinatorType.TRANSACTION, "tx")
        assert end.coordinator_key() == key
        lookup = tm.next_request(False)
        assert isinstance(lookup, FindCoordinatorHandler) and lookup.target == key
        assert lookup.coordinator_key() is None
    if outcome is Outcome.FAILED:
        assert tm.state is S.FATAL_ERROR and isinstance(tm.last_error, ProducerFencedError)


def test_offsets_with_group_metadata_reach_txn_offset_commit() -> None:
    tm = ready_manager()
    tm.begin_transaction()
    group = ConsumerGroupMetadata("g", generation_id=5, member_id="m-1", group_instance_id="i-1")
    result = tm.send_offsets_to_transaction({("in", 0): 10, ("in", 1): OffsetAndMetadata(20, "meta")}, group)
    add = tm.next_request(False)
    assert isinstance(add, AddOffsetsToTxnHandler) and add.build()["group_id"] == "g"
    assert tm.handle_response(add, {"error_code": 0}) is Outcome.SUCCESS
    commit = tm.next_request(False)
    assert isinstance(commit, TxnOffsetCommitHandler)
    assert commit.coordinator_key() == CoordinatorKey(CoordinatorType.GROUP, "g")
    body: Dict[str, Any] = commit.build()
    assert (body["generation_id"], body["member_id"], body["group_instance_id"]) == (5, "m-1", "i-1")
    assert body["topics"] == [{"name": "in", "partitions": [
        {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": -1, "committed_metadata": ""},
        {"partition_index": 1, "committed_offset": 20, "committed_leader_epoch": -1, "committed_metadata": "meta"}]}]
    assert tm.handle_response(commit, {"topics": [{"name": "in", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 0}]}]}) is Outcome.SUCCESS
    result.wait(0)
