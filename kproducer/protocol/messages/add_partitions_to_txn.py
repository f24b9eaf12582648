"""AddPartitionsToTxn (key 24): add partitions to a producer's ongoing transaction (v0-v3: one
transaction per request; v4 batches transactions and is not implemented)."""
from __future__ import annotations

from ..schema import Api, Field

ADD_PARTITIONS_TO_TXN = Api(
    24,
    "AddPartitionsToTxn",
    versions="0-3",
    flexible="3+",
    request=[
        Field("transactional_id", "string"),
        Field("producer_id", "int64", default=-1),
        Field("producer_epoch", "int16", default=-1),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", "[]int32"),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32", default=0),
        Field("results", [
            Field("name", "string"),
            Field("results_by_partition", [
                Field("partition_index", "int32"),
                Field("partition_error_code", "int16"),
            ]),
        ]),
    ],
)
