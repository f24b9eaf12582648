"""Produce (key 0): record batches to partition leaders. v3+ carries RecordBatch v2."""
from __future__ import annotations

from ..schema import Api, Field, Struct

PRODUCE = Api(
    0,
    "Produce",
    versions="3-11",
    flexible="9+",
    request=[
        Field("transactional_id", "string", "3+", nullable="3+", default=None),
        Field("acks", "int16"),
        Field("timeout_ms", "int32"),
        Field("topic_data", [
            Field("name", "string"),
            Field("partition_data", [
                Field("index", "int32"),
                Field("records", "records"),
            ]),
        ]),
    ],
    response=[
        Field("responses", [
            Field("name", "string"),
            Field("partition_responses", [
                Field("index", "int32"),
                Field("error_code", "int16"),
                Field("base_offset", "int64"),
                Field("log_append_time_ms", "int64", "2+", default=-1),
                Field("log_start_offset", "int64", "5+", default=-1),
                Field("record_errors", [
                    Field("batch_index", "int32"),
                    Field("batch_index_error_message", "string", nullable="8+"),
                ], "8+", default=[]),
                Field("error_message", "string", "8+", nullable="8+", default=None),
                Field("current_leader", Struct([
                    Field("leader_id", "int32", default=-1),
                    Field("leader_epoch", "int32", default=-1),
                ]), "10+", tag=0),
            ]),
        ]),
        Field("throttle_time_ms", "int32", "1+", default=0),
        Field("node_endpoints", [
            Field("node_id", "int32"),
            Field("host", "string"),
            Field("port", "int32"),
            Field("rack", "string", nullable="10+"),
        ], "10+", tag=0),
    ],
)
