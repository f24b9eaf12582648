"""AddOffsetsToTxn (key 25): add a consumer group's offsets topic partition to a transaction."""
from __future__ import annotations

from ..schema import Api, Field

ADD_OFFSETS_TO_TXN = Api(
    25,
    "AddOffsetsToTxn",
    versions="0-3",
    flexible="3+",
    request=[
        Field("transactional_id", "string"),
        Field("producer_id", "int64", default=-1),
        Field("producer_epoch", "int16", default=-1),
        Field("group_id", "string"),
    ],
    response=[
        Field("throttle_time_ms", "int32", default=0),
        Field("error_code", "int16"),
    ],
)
