"""CreateTopics (key 19): create topics with a partition count or an explicit replica assignment."""
from __future__ import annotations

from ..schema import ZERO_UUID, Api, Field

CREATE_TOPICS = Api(
    19,
    "CreateTopics",
    versions="2-7",
    flexible="5+",
    request=[
        Field("topics", [
            Field("name", "string"),
            Field("num_partitions", "int32", default=-1),
            Field("replication_factor", "int16", default=-1),
            Field("assignments", [
                Field("partition_index", "int32"),
                Field("broker_ids", "[]int32"),
            ]),
            Field("configs", [
                Field("name", "string"),
                Field("value", "string", nullable="0+"),
            ]),
        ]),
        Field("timeout_ms", "int32", default=60000),
        Field("validate_only", "bool", "1+"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "2+", default=0),
        Field("topics", [
            Field("name", "string"),
            Field("topic_id", "uuid", "7+", default=ZERO_UUID),
            Field("error_code", "int16"),
            Field("error_message", "string", "1+", nullable="0+", default=None),
            Field("topic_config_error_code", "int16", "5+", tag=0),
            Field("num_partitions", "int32", "5+", default=-1),
            Field("replication_factor", "int16", "5+", default=-1),
            Field("configs", [
                Field("name", "string"),
                Field("value", "string", nullable="5+"),
                Field("read_only", "bool"),
                Field("config_source", "int8", default=-1),
                Field("is_sensitive", "bool"),
            ], "5+", nullable="5+"),
        ]),
    ],
)
