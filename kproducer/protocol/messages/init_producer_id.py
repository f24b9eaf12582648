"""InitProducerId (key 22): a producer id and epoch for idempotent and transactional producers."""
from __future__ import annotations

from ..schema import Api, Field

INIT_PRODUCER_ID = Api(
    22,
    "InitProducerId",
    versions="0-5",
    flexible="2+",
    request=[
        Field("transactional_id", "string", nullable="0+"),
        Field("transaction_timeout_ms", "int32"),
        Field("producer_id", "int64", "3+", default=-1),
        Field("producer_epoch", "int16", "3+", default=-1),
    ],
    response=[
        Field("throttle_time_ms", "int32", default=0),
        Field("error_code", "int16"),
        Field("producer_id", "int64", default=-1),
        Field("producer_epoch", "int16"),
    ],
)
