"""Metadata (key 3): brokers, topics, partitions and their leaders."""
from __future__ import annotations

from ..schema import ZERO_UUID, Api, Field

METADATA = Api(
    3,
    "Metadata",
    versions="1-12",
    flexible="9+",
    request=[
        # null = all topics (v1+); an empty list = no topics
        Field("topics", [
            Field("topic_id", "uuid", "10+", default=ZERO_UUID),
            Field("name", "string", nullable="10+"),
        ], nullable="1+"),
        Field("allow_auto_topic_creation", "bool", "4+", default=True),
        Field("include_cluster_authorized_operations", "bool", "8-10", default=False),
        Field("include_topic_authorized_operations", "bool", "8+", default=False),
    ],
    response=[
        Field("throttle_time_ms", "int32", "3+", default=0),
        Field("brokers", [
            Field("node_id", "int32"),
            Field("host", "string"),
            Field("port", "int32"),
            Field("rack", "string", "1+", nullable="1+"),
        ]),
        Field("cluster_id", "string", "2+", nullable="2+", default=None),
        Field("controller_id", "int32", "1+", default=-1),
        Field("topics", [
            Field("error_code", "int16"),
            Field("name", "string", nullable="12+"),
            Field("topic_id", "uuid", "10+", default=ZERO_UUID),
            Field("is_internal", "bool", "1+", default=False),
            Field("partitions", [
                Field("error_code", "int16"),
                Field("partition_index", "int32"),
                Field("leader_id", "int32"),
                Field("leader_epoch", "int32", "7+", default=-1),
                Field("replica_nodes", "[]int32"),
                Field("isr_nodes", "[]int32"),
                Field("offline_replicas", "[]int32", "5+", default=[]),
            ]),
            Field("topic_authorized_operations", "int32", "8+", default=-2147483648),
        ]),
        Field("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
    ],
)
