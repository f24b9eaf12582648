"""ListOffsets (key 2) on a mock broker: earliest, latest, max-timestamp and by-timestamp lookups."""
from __future__ import annotations

from typing import Optional, Tuple

from ...protocol.errors import NO_ERROR
from ...protocol.messages.fetch import READ_COMMITTED
from ...protocol.messages.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from ...protocol.records import NO_TIMESTAMP
from ..context import NO_EPOCH, NO_OFFSET, BrokerContext, leader_epoch_error
from ..request_channel import Request
from ..results import Body, Result


def handle_list_offsets(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    read_committed = body["isolation_level"] == READ_COMMITTED
    if read_committed:
        ctx.txn.expire_timed_out()
    topics = []
    for t in body["topics"]:
        parts = []
        for part in t["partitions"]:
            parts.append(_list_offset(ctx, t["name"], part, read_committed))
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _list_offset(ctx: BrokerContext, topic: str, part: Body, read_committed: bool) -> Body:
    index = part["partition_index"]
    result: Body = {"partition_index": index, "error_code": NO_ERROR, "timestamp": NO_TIMESTAMP,
                    "offset": NO_OFFSET, "leader_epoch": NO_EPOCH}
    injected = ctx.faults.take_error("list_offsets")
    if injected:
        result["error_code"] = injected
        return result
    error, p = ctx.partition_error(topic, index)
    if error == NO_ERROR:
        assert p is not None
        error = leader_epoch_error(p, part["current_leader_epoch"])
    if error:
        result["error_code"] = error
        return result
    assert p is not None
    ts = part["timestamp"]
    with p.log.lock:
        plog = p.log
        found: Optional[Tuple[int, int]]
        if ts == EARLIEST_TIMESTAMP:
            found = (plog.log_start_offset, NO_TIMESTAMP)
        elif ts == LATEST_TIMESTAMP:
            found = (plog.last_stable_offset if read_committed else plog.end_offset, NO_TIMESTAMP)
        elif ts == MAX_TIMESTAMP:
            found = plog.offset_of_max_timestamp()
        elif ts >= 0:
            found = plog.offset_for_timestamp(ts)
        else:
            found = None
    if found is not None:
        result["offset"], result["timestamp"] = found
    result["leader_epoch"] = p.leader_epoch
    return result
