"""ListOffsets (key 2): the offset of a partition at a timestamp (-2 earliest, -1 latest, -3 max timestamp)."""
from __future__ import annotations

from ..schema import Api, Field

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

LIST_OFFSETS = Api(
    2,
    "ListOffsets",
    versions="1-7",
    flexible="6+",
    request=[
        Field("replica_id", "int32", default=-1),
        Field("isolation_level", "int8", "2+"),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("current_leader_epoch", "int32", "4+", default=-1),
                Field("timestamp", "int64"),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32", "2+", default=0),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
                Field("timestamp", "int64", "1+", default=-1),
                Field("offset", "int64", "1+", default=-1),
                Field("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ],
)
