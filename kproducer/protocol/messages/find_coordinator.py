"""FindCoordinator (key 10): which broker coordinates a consumer group or a transactional id.

v4 looks up several keys at once (``coordinator_keys``) and answers per key in ``coordinators``.
"""
from __future__ import annotations

from ..schema import Api, Field

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

FIND_COORDINATOR = Api(
    10,
    "FindCoordinator",
    versions="0-4",
    flexible="3+",
    request=[
        Field("key", "string", "0-3"),
        Field("key_type", "int8", "1+"),
        Field("coordinator_keys", "[]string", "4+"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+", default=0),
        Field("error_code", "int16", "0-3"),
        Field("error_message", "string", "1-3", nullable="1-3"),
        Field("node_id", "int32", "0-3", default=-1),
        Field("host", "string", "0-3"),
        Field("port", "int32", "0-3", default=-1),
        Field("coordinators", [
            Field("key", "string"),
            Field("node_id", "int32", default=-1),
            Field("host", "string"),
            Field("port", "int32", default=-1),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="4+"),
        ], "4+"),
    ],
)
