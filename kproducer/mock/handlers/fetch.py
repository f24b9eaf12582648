"""Fetch (key 1) on a mock broker, served from the stored raw batches.

A Fetch that finds fewer than ``min_bytes`` waits (up to its ``max_wait_ms``, capped by the cluster's
``max_fetch_wait_ms``) without holding a handler thread: it is parked in the broker's
:class:`~kproducer.mock.purgatory.Purgatory`, which answers it as soon as one of its partitions gets
data, or at its deadline. Fetch sessions (KIP-227) are not kept: every response has session id 0
(:data:`NO_SESSION`), which tells the client to send full requests.
"""
from __future__ import annotations

from functools import partial
from typing import Optional, Tuple

from ...protocol.errors import NO_ERROR, FetchSessionIdNotFoundError, OffsetOutOfRangeError
from ...protocol.messages.fetch import READ_COMMITTED
from ...protocol.records import read_batch_header
from ..context import NO_NODE, NO_OFFSET, BrokerContext, leader_epoch_error
from ..purgatory import DelayedOperation
from ..request_channel import Request
from ..results import DEFERRED, Body, Result

#: the session id of a full (sessionless) Fetch response
NO_SESSION = 0


def handle_fetch(ctx: BrokerContext, request: Request) -> Result:
    assert request.body is not None
    if request.body["isolation_level"] == READ_COMMITTED:
        ctx.txn.expire_timed_out()  # (here, not in evaluate_fetch: the purgatory thread must not take its lock)
    result = evaluate_fetch(ctx, request, first=True, final=False)
    if result is not None:
        return result
    body = request.body
    assert body is not None
    wait_ms = min(body["max_wait_ms"], ctx.config.max_fetch_wait_ms)
    partitions = {(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]}
    complete = partial(evaluate_fetch, ctx, request, False)
    ctx.purgatory.park(DelayedOperation(request, request.received_at_ms + wait_ms, partitions, complete))
    return DEFERRED


def evaluate_fetch(ctx: BrokerContext, request: Request, first: bool, final: bool) -> Optional[Body]:
    """The response, or None when it should wait for more data (never when ``final``)."""
    body = request.body
    assert body is not None
    if body["session_id"] != NO_SESSION:
        return {"throttle_time_ms": 0, "error_code": FetchSessionIdNotFoundError.code, "session_id": NO_SESSION,
                "responses": []}
    read_committed = body["isolation_level"] == READ_COMMITTED
    remaining = body["max_bytes"]
    total = 0
    has_error = False
    responses = []
    for t in body["topics"]:
        parts = []
        for part in t["partitions"]:
            limit = min(part["partition_max_bytes"], remaining - total)
            result, size = _fetch_partition(ctx, t["topic"], part, read_committed, limit, total == 0, first)
            total += size
            has_error = has_error or result["error_code"] != NO_ERROR
            parts.append(result)
        responses.append({"topic": t["topic"], "partitions": parts})
    if not final and not has_error and total < body["min_bytes"] and body["max_wait_ms"] > 0:
        return None
    return {"throttle_time_ms": 0, "error_code": NO_ERROR, "session_id": NO_SESSION, "responses": responses}


def _fetch_partition(ctx: BrokerContext, topic: str, part: Body, read_committed: bool, limit: int,
                     min_one: bool, inject: bool) -> Tuple[Body, int]:
    index = part["partition"]
    result: Body = {
        "partition_index": index,
        "error_code": NO_ERROR,
        "high_watermark": NO_OFFSET,
        "last_stable_offset": NO_OFFSET,
        "log_start_offset": NO_OFFSET,
        "aborted_transactions": None,
        "preferred_read_replica": NO_NODE,
        "records": b"",
    }
    injected = ctx.faults.take_error("fetch") if inject else None
    if injected:
        result["error_code"] = injected
        return result, 0
    error, p = ctx.partition_error(topic, index)
    if error == NO_ERROR:
        assert p is not None
        error = leader_epoch_error(p, part["current_leader_epoch"])
    if error:
        result["error_code"] = error
        if p is not None:
            result["current_leader"] = ctx.leader_info(p)
        return result, 0
    assert p is not None
    plog = p.log
    offset = part["fetch_offset"]
    with plog.lock:
        hw = plog.end_offset
        lso = plog.last_stable_offset
        result["high_watermark"] = hw
        result["last_stable_offset"] = lso
        result["log_start_offset"] = plog.log_start_offset
        if offset < plog.log_start_offset or offset > hw:
            result["error_code"] = OffsetOutOfRangeError.code
            return result, 0
        upper = lso if read_committed else hw
        batches, size = plog.read(offset, max(limit, 0), upper, min_one)
        if read_committed:
            end = offset
            if batches:
                end = read_batch_header(batches[-1], verify_crc=False).last_offset + 1
            result["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in plog.aborted_between(offset, end)
            ] if batches else []
    result["records"] = b"".join(batches)
    return result, size
