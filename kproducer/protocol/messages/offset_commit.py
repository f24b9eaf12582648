"""OffsetCommit (key 8): store a consumer group's committed offsets on its coordinator."""
from __future__ import annotations

from ..schema import Api, Field

OFFSET_COMMIT = Api(
    8,
    "OffsetCommit",
    versions="2-8",
    flexible="8+",
    request=[
        Field("group_id", "string"),
        Field("generation_id", "int32", "1+", default=-1),
        Field("member_id", "string", "1+"),
        Field("group_instance_id", "string", "7+", nullable="7+", default=None),
        Field("retention_time_ms", "int64", "2-4", default=-1),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("committed_offset", "int64"),
                Field("committed_leader_epoch", "int32", "6+", default=-1),
                Field("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32", "3+", default=0),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
            ]),
        ]),
    ],
)
