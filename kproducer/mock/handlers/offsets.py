"""OffsetCommit (8) and OffsetFetch (9) on a mock broker, for consumers that assign partitions
themselves (no group membership: JoinGroup/SyncGroup are not served). Both go to the group's
coordinator (FindCoordinator key type 0); another broker answers NOT_COORDINATOR. A commit is
accepted from a "simple" consumer (generation -1, no member id), as Kafka accepts it for a group
without members; a member id or generation gets UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ...protocol.errors import (
    NO_ERROR,
    IllegalGenerationError,
    InvalidGroupIdError,
    NotCoordinatorError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from ..context import NO_EPOCH, NO_OFFSET, BrokerContext
from ..request_channel import Request
from ..results import Result

TopicPartition = Tuple[str, int]


def handle_offset_commit(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    group = body["group_id"]
    if not group:
        group_error = InvalidGroupIdError.code
    elif not ctx.is_coordinator(group):
        group_error = NotCoordinatorError.code
    elif body["member_id"]:
        group_error = UnknownMemberIdError.code
    elif body["generation_id"] >= 0:
        group_error = IllegalGenerationError.code
    else:
        group_error = NO_ERROR
    accepted: Dict[TopicPartition, Tuple[int, Optional[str]]] = {}
    topics = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            code = ctx.faults.take_error("offset_commit") or group_error
            if not code and ctx.state.partition(*tp) is None:
                code = UnknownTopicOrPartitionError.code
            if not code:
                accepted[tp] = (p["committed_offset"], p["committed_metadata"])
            parts.append({"partition_index": tp[1], "error_code": code})
        topics.append({"name": t["name"], "partitions": parts})
    if accepted:
        ctx.state.commit_offsets(group, accepted)
    return {"throttle_time_ms": 0, "topics": topics}


def handle_offset_fetch(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    group = body["group_id"]
    error = ctx.faults.take_error("offset_fetch") or NO_ERROR
    if not error and not ctx.is_coordinator(group):
        error = NotCoordinatorError.code
    with ctx.state.lock:
        committed = dict(ctx.state.group_offsets.get(group, {}))
    wanted: Dict[str, List[int]] = {}
    if body["topics"] is None:
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        for t in body["topics"]:
            wanted.setdefault(t["name"], []).extend(t["partition_indexes"])
    topics = []
    for topic, partitions in wanted.items():
        parts = []
        for partition in partitions:
            offset, metadata = committed.get((topic, partition), (NO_OFFSET, ""))
            parts.append({
                "partition_index": partition,
                "committed_offset": offset if not error else NO_OFFSET,
                "committed_leader_epoch": NO_EPOCH,
                "metadata": metadata if metadata is not None else "",
                "error_code": error,
            })
        topics.append({"name": topic, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}
