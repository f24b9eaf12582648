"""InitProducerId (22) and the transaction APIs (24 AddPartitionsToTxn, 25 AddOffsetsToTxn,
26 EndTxn, 28 TxnOffsetCommit) on a mock broker. Requests about a transactional id go to its
coordinator (FindCoordinator key type 1) and TxnOffsetCommit to the group's coordinator; any other
broker answers NOT_COORDINATOR."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ...protocol.errors import (
    NO_ERROR,
    IllegalGenerationError,
    InvalidRequestError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    UnknownMemberIdError,
)
from ..acl import (
    add_partitions_refusal,
    init_producer_id_refusal,
    transaction_refusal,
    txn_offset_commit_refusals,
)
from ..context import BrokerContext
from ..request_channel import Request
from ..results import Body, Result

TopicPartition = Tuple[str, int]


def handle_init_producer_id(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    txn_id: Optional[str] = body["transactional_id"]

    def answer(error: int, pid: int = -1, epoch: int = -1) -> Body:
        return {"throttle_time_ms": 0, "error_code": error, "producer_id": pid, "producer_epoch": epoch}

    injected = ctx.faults.take_error("init_producer_id") or init_producer_id_refusal(ctx.state.authorizer, request,
                                                                                       txn_id)
    if injected:
        return answer(injected)
    if txn_id is None:
        return answer(NO_ERROR, ctx.state.next_producer_id(), 0)
    if not txn_id:
        return answer(InvalidRequestError.code)
    if not ctx.is_coordinator(txn_id):
        return answer(NotCoordinatorError.code)
    error, pid, epoch = ctx.txn.init_producer_id(
        txn_id, body["transaction_timeout_ms"], body["producer_id"], body["producer_epoch"], request.version
    )
    return answer(error, pid, epoch)


def handle_add_partitions_to_txn(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    wanted: List[TopicPartition] = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
    injected = {tp: ctx.faults.take_error("add_partitions_to_txn") for tp in wanted}
    codes: Dict[TopicPartition, int]
    refused = add_partitions_refusal(ctx.state.authorizer, request, body["transactional_id"], wanted)
    if any(injected.values()):
        codes = {tp: code or OperationNotAttemptedError.code for tp, code in injected.items()}
    elif refused is not None:
        codes = refused
    elif not ctx.is_coordinator(body["transactional_id"]):
        codes = {tp: NotCoordinatorError.code for tp in wanted}
    else:
        codes = ctx.txn.add_partitions(
            body["transactional_id"], body["producer_id"], body["producer_epoch"], wanted, request.version
        )
    results: Dict[str, List[Body]] = {}
    for (topic, partition), code in codes.items():
        results.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return {
        "throttle_time_ms": 0,
        "results": [{"name": name, "results_by_partition": parts} for name, parts in results.items()],
    }


def handle_add_offsets_to_txn(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    error = ctx.faults.take_error("add_offsets_to_txn") or transaction_refusal(
        ctx.state.authorizer, request, body["transactional_id"], body["group_id"])
    if not error:
        if not ctx.is_coordinator(body["transactional_id"]):
            error = NotCoordinatorError.code
        else:
            error = ctx.txn.add_offsets(
                body["transactional_id"], body["producer_id"], body["producer_epoch"], body["group_id"],
                request.version,
            )
    return {"throttle_time_ms": 0, "error_code": error}


def handle_end_txn(ctx: BrokerContext, request: Request) -> Result:
    """v5+ (transactions v2) answers the producer id and epoch for the next transaction too."""
    body = request.body
    assert body is not None
    error = ctx.faults.take_error("end_txn") or transaction_refusal(ctx.state.authorizer, request,
                                                                     body["transactional_id"])
    producer_id, epoch = -1, -1
    if not error:
        if not ctx.is_coordinator(body["transactional_id"]):
            error = NotCoordinatorError.code
        else:
            error, producer_id, epoch = ctx.txn.end_txn(
                body["transactional_id"], body["producer_id"], body["producer_epoch"], body["committed"],
                request.version,
            )
    return {"throttle_time_ms": 0, "error_code": error, "producer_id": producer_id, "producer_epoch": epoch}


def handle_txn_offset_commit(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    offsets: Dict[TopicPartition, Tuple[int, Optional[str]]] = {}
    for t in body["topics"]:
        for p in t["partitions"]:
            offsets[(t["name"], p["partition_index"])] = (p["committed_offset"], p["committed_metadata"])
    injected = {tp: ctx.faults.take_error("txn_offset_commit") for tp in offsets}
    codes: Dict[TopicPartition, int] = {tp: code for tp, code in injected.items() if code}
    codes.update(txn_offset_commit_refusals(ctx.state.authorizer, request, body["transactional_id"],
                                            body["group_id"], [tp for tp in offsets if tp not in codes]))
    rest = {tp: value for tp, value in offsets.items() if tp not in codes}
    if rest and not ctx.is_coordinator(body["group_id"]):
        codes.update({tp: NotCoordinatorError.code for tp in rest})
    elif rest and body.get("generation_id", -1) >= 0:
        # the mock's groups have no members (no JoinGroup): as Apache Kafka answers for such a group, a
        # generation is ILLEGAL_GENERATION while the group does not exist and UNKNOWN_MEMBER_ID once it does;
        # generation -1 is accepted whatever the member id (a "simple" consumer)
        with ctx.state.lock:
            known = body["group_id"] in ctx.state.group_offsets
        code = UnknownMemberIdError.code if known else IllegalGenerationError.code
        codes.update({tp: code for tp in rest})
    elif rest:
        codes.update(ctx.txn.txn_offset_commit(
            body["transactional_id"], body["group_id"], body["producer_id"], body["producer_epoch"], rest,
            request.version,
        ))
    results: Dict[str, List[Body]] = {}
    for (topic, partition), code in codes.items():
        results.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in results.items()],
    }
