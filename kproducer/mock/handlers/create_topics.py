"""CreateTopics (key 19) on a mock broker."""
from __future__ import annotations

import logging
from typing import List, Optional

from ...protocol.errors import (
    NO_ERROR,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
)
from ..context import BrokerContext
from ..request_channel import Request
from ..results import Body, Result
from ..state import TopicError

log = logging.getLogger(__name__)

#: "not given" for num_partitions / replication_factor in a request, "unknown" in the response
UNSET = -1


def handle_create_topics(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    injected = ctx.faults.take_error("create_topics")
    results = []
    for t in body["topics"]:
        results.append(_create_topic(ctx, t, body["validate_only"], injected))
    return {"throttle_time_ms": 0, "topics": results}


def _create_topic(ctx: BrokerContext, t: Body, validate_only: bool, injected: Optional[int]) -> Body:
    name = t["name"]
    num = t["num_partitions"]
    rf = t["replication_factor"]
    result: Body = {"name": name, "error_code": NO_ERROR, "error_message": None, "num_partitions": UNSET,
                    "replication_factor": UNSET, "configs": []}
    n_brokers = len(ctx.state.brokers)
    leaders: Optional[List[int]] = None
    try:
        if injected:
            raise TopicError(injected, "injected error")
        if t["assignments"]:
            if num != UNSET or rf != UNSET:
                raise TopicError(InvalidRequestError.code,
                                 "give either an assignment or partitions/replication factor")
            by_index = {a["partition_index"]: a["broker_ids"] for a in t["assignments"]}
            if sorted(by_index) != list(range(len(by_index))) or not all(by_index.values()):
                raise TopicError(InvalidReplicaAssignmentError.code, "partitions must be 0..n-1, each with brokers")
            leaders = [by_index[i][0] for i in range(len(by_index))]
            num = len(leaders)
        else:
            if num == UNSET:
                num = ctx.config.default_partitions
        configs = {c["name"]: c["value"] for c in t["configs"]}
        # (ClusterState.create_topic checks the replication factor: 1 to the number of brokers)
        given_rf = None if leaders is not None or rf == UNSET else rf
        topic = ctx.state.create_topic(name, num, leaders, configs, validate_only, replication_factor=given_rf)
    except TopicError as e:
        result["error_code"] = e.code
        result["error_message"] = e.message
        return result
    if topic is not None:
        result["topic_id"] = topic.topic_id
        log.info("created topic %r with %d partitions", name, num)
    result["num_partitions"] = num
    result["replication_factor"] = n_brokers if given_rf is None else given_rf
    return result
