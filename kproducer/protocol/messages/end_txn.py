"""EndTxn (key 26): commit or abort a producer's ongoing transaction.

v4 is v3 that may answer TRANSACTION_ABORTABLE (KIP-890 part 1). v5 is transactions v2 (KIP-890 part 2): the
coordinator bumps the producer epoch at every transaction end and answers the producer id and epoch the
producer must use from then on (a new producer id with epoch 0 when the epoch is exhausted). A client sends v5
only when the cluster's ``transaction.version`` is 2 or more (Java's ``EndTxnRequest.Builder``: v4 at most
otherwise), so kproducer's client negotiates at most v3 unless it asks for more."""
from __future__ import annotations

from ..schema import Api, Field

END_TXN = Api(
    26,
    "EndTxn",
    versions="0-5",
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
        Field("producer_id", "int64", "5+", default=-1),
        Field("producer_epoch", "int16", "5+", default=-1),
    ],
    client_max=3,
)
