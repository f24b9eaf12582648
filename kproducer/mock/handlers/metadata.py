"""Metadata (key 3) on a mock broker, creating unknown topics when the cluster auto-creates them."""
from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

from ...protocol.errors import (
    NO_ERROR,
    LeaderNotAvailableError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from ..acl import CLUSTER, CLUSTER_NAME, CREATE, DESCRIBE, TOPIC
from ..context import NO_NODE, BrokerContext
from ..request_channel import Request
from ..results import Body, Result
from ..state import TopicError, TopicState

log = logging.getLogger(__name__)


def handle_metadata(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    injected = ctx.faults.take_error("metadata")
    state = ctx.state
    topics: List[Body] = []
    with state.lock:
        requested = body["topics"]
        if requested is None:
            wanted: List[Tuple[Optional[str], Any]] = [(name, None) for name in sorted(state.topics)]
        else:
            wanted = [(t["name"], t["topic_id"]) for t in requested]
        for name, topic_id in wanted:
            topic: Optional[TopicState] = None
            if name is None:
                topic = next((t for t in state.topics.values() if t.topic_id == topic_id), None)
                if topic is None:
                    topics.append({"error_code": UnknownTopicIdError.code, "name": None, "topic_id": topic_id,
                                   "partitions": []})
                    continue
            else:
                topic = state.topics.get(name)
            if not ctx.state.authorizer.allows(request, DESCRIBE, TOPIC, topic.name if topic else name or ""):
                # as Kafka: unauthorized topics are left out of an all-topics request, else refused by name
                if requested is not None:
                    topics.append(_unauthorized(name or ""))
                continue
            if topic is None:
                auto_create = body["allow_auto_topic_creation"] and ctx.config.auto_create_topics
                if auto_create and not (ctx.state.authorizer.allows(request, CREATE, CLUSTER, CLUSTER_NAME)
                                        or ctx.state.authorizer.allows(request, CREATE, TOPIC, name or "")):
                    topics.append(_unauthorized(name or ""))
                    continue
                topics.append(_missing_topic(ctx, name or "", body["allow_auto_topic_creation"]))
            else:
                topics.append(_topic_metadata(ctx, topic))
        brokers = [{"node_id": b.id, "host": b.host, "port": b.port, "rack": None} for b in state.live_brokers()]
        controller = state.controller_id()
    if injected:
        for t in topics:
            t["error_code"] = injected
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": state.cluster_id,
        "controller_id": controller,
        "topics": topics,
    }


def _unauthorized(name: str) -> Body:
    return {"error_code": TopicAuthorizationFailedError.code, "name": name, "is_internal": False, "partitions": []}


def _missing_topic(ctx: BrokerContext, name: str, allow_create: bool) -> Body:
    if ctx.config.auto_create_topics and allow_create:
        try:
            topic = ctx.state.create_topic(name, ctx.config.default_partitions)
        except TopicError as e:
            return {"error_code": e.code, "name": name, "partitions": []}
        assert topic is not None
        log.info("auto-created topic %r with %d partitions", name, len(topic.partitions))
        return _topic_metadata(ctx, topic)
    return {"error_code": UnknownTopicOrPartitionError.code, "name": name, "partitions": []}


def _topic_metadata(ctx: BrokerContext, topic: TopicState) -> Body:
    brokers = ctx.state.brokers
    partitions = []
    for p in topic.partitions:
        alive = [r for r in p.replicas if brokers[r].alive]
        leader_alive = brokers[p.leader].alive
        partitions.append({
            "error_code": NO_ERROR if leader_alive else LeaderNotAvailableError.code,
            "partition_index": p.index,
            "leader_id": p.leader if leader_alive else NO_NODE,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas),
            "isr_nodes": alive,
            "offline_replicas": [r for r in p.replicas if r not in alive],
        })
    return {
        "error_code": NO_ERROR,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": partitions,
    }
