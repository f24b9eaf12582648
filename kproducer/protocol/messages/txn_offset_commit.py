"""TxnOffsetCommit (key 28): commit consumer offsets as part of a transaction (sent to the group
coordinator; they become visible when the transaction commits).

v4 is v3 that may answer TRANSACTION_ABORTABLE (KIP-890 part 1). v5 is transactions v2 (KIP-890 part 2): the
group coordinator adds the group's offsets to the transaction itself, so the client sends no AddOffsetsToTxn
first. Java sends v5 only when the cluster's ``transaction.version`` is 2 or more (v4 at most otherwise), so
kproducer's client negotiates at most v3 unless it asks for more."""
from __future__ import annotations

from ..schema import Api, Field

TXN_OFFSET_COMMIT = Api(
    28,
    "TxnOffsetCommit",
    versions="0-5",
    flexible="3+",
    request=[
        Field("transactional_id", "string"),
        Field("group_id", "string"),
        Field("producer_id", "int64", default=-1),
        Field("producer_epoch", "int16", default=-1),
        Field("generation_id", "int32", "3+", default=-1),
        Field("member_id", "string", "3+", default=""),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("committed_offset", "int64"),
                Field("committed_leader_epoch", "int32", "2+", default=-1),
                Field("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32", default=0),
        Field("topics", [
            Field("name", "string"),
            Field("partitions", [
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
            ]),
        ]),
    ],
    client_max=3,
)
