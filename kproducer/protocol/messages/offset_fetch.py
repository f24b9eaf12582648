"""OffsetFetch (key 9): read a consumer group's committed offsets from its coordinator (one group
per request; v8 batches groups and is not implemented)."""
from __future__ import annotations

from ..schema import Api, Field

OFFSET_FETCH = Api(
    9,
    "OffsetFetch",
    versions="1-7",
    flexible="6+",
    request=[
        Field("group_id", "string"),
        # null (v2+) = every partition the group has committed offsets for
        Field("topics", [
            Field("name", "string"),
            Field("partition_indexes", "[]int32"),
        ], nullable="2+"),
        Field("require_stable", "bool", "7+", default=False),
    ],
    response=[
        Field("throttle_time_ms", "int32", "3+", default=0),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("committed_offset", "int64", default=-1),
                Field("committed_leader_epoch", "int32", "5+", default=-1),
                Field("metadata", "string", nullable="0+"),
                Field("error_code", "int16"),
            ]),
        ]),
        Field("error_code", "int16", "2+"),
    ],
)
