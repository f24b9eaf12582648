"""Fetch (key 1): read record batches from partition leaders. v4+ returns RecordBatch v2 data.

Versions up to 12 name topics by string (v13+ switch to topic ids); v12 is the first flexible one.
"""
from __future__ import annotations

from ..schema import Api, Field, Struct

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

FETCH = Api(
    1,
    "Fetch",
    versions="4-12",
    flexible="12+",
    request=[
        Field("cluster_id", "string", "12+", nullable="12+", tag=0),
        Field("replica_id", "int32", default=-1),
        Field("max_wait_ms", "int32"),
        Field("min_bytes", "int32"),
        Field("max_bytes", "int32", "3+", default=0x7FFFFFFF),
        Field("isolation_level", "int8", "4+", default=0),
        Field("session_id", "int32", "7+", default=0),
        Field("session_epoch", "int32", "7+", default=-1),
        Field("topics", [
            Field("topic", "string"),
            Field("partitions", [
                Field("partition", "int32"),
                Field("current_leader_epoch", "int32", "9+", default=-1),
                Field("fetch_offset", "int64"),
                Field("last_fetched_epoch", "int32", "12+", default=-1),
                Field("log_start_offset", "int64", "5+", default=-1),
                Field("partition_max_bytes", "int32"),
            ]),
        ]),
        Field("forgotten_topics_data", [
            Field("topic", "string"),
            Field("partitions", "[]int32"),
        ], "7+"),
        Field("rack_id", "string", "11+", default=""),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+", default=0),
        Field("error_code", "int16", "7+", default=0),
        Field("session_id", "int32", "7+", default=0),
        Field("responses", [
            Field("topic", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
                Field("high_watermark", "int64"),
                Field("last_stable_offset", "int64", "4+", default=-1),
                Field("log_start_offset", "int64", "5+", default=-1),
                Field("diverging_epoch", Struct([
                    Field("epoch", "int32", default=-1),
                    Field("end_offset", "int64", default=-1),
                ]), "12+", tag=0),
                Field("current_leader", Struct([
                    Field("leader_id", "int32", default=-1),
                    Field("leader_epoch", "int32", default=-1),
                ]), "12+", tag=1),
                Field("snapshot_id", Struct([
                    Field("end_offset", "int64", default=-1),
                    Field("epoch", "int32", default=-1),
                ]), "12+", tag=2),
                Field("aborted_transactions", [
                    Field("producer_id", "int64"),
                    Field("first_offset", "int64"),
                ], "4+", nullable="4+", default=None),
                Field("preferred_read_replica", "int32", "11+", default=-1),
                Field("records", "records"),
            ]),
        ]),
    ],
)
