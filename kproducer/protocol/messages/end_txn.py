"""EndTxn (key 26): commit or abort a producer's ongoing transaction."""
from __future__ import annotations

from ..schema import Api, Field

END_TXN = Api(
    26,
    "EndTxn",
    versions="0-3",
    flexible="3+",
    request=[
        Field("transactional_id", "string"),
        Field("producer_id", "int64", default=-1),
        Field("producer_epoch", "int16", default=-1),
        Field("committed", "bool"),
    ],
    response=[
        Field("throttle_time_ms", "int32", default=0),
        Field("error_code", "int16"),
    ],
)
