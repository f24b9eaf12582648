"""FindCoordinator (key 10) on a mock broker: group (key type 0) and transaction (key type 1)
coordinators, v4+ batched."""
from __future__ import annotations

from ...protocol.errors import NO_ERROR, CoordinatorNotAvailableError, InvalidRequestError
from ...protocol.messages.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from ..acl import coordinator_refusal
from ..context import NO_NODE, BrokerContext
from ..request_channel import Request
from ..results import Body, Result

#: the first version that looks up several keys at once (KIP-699)
BATCHED_VERSION = 4


def handle_find_coordinator(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    v = request.version
    keys = body["coordinator_keys"] if v >= BATCHED_VERSION else [body["key"]]
    key_type = body["key_type"]
    injected = ctx.faults.take_error("find_coordinator")
    results = []
    for key in keys:
        entry: Body = {"key": key, "node_id": NO_NODE, "host": "", "port": -1, "error_code": NO_ERROR,
                       "error_message": None}
        if injected:
            entry["error_code"] = injected
        elif key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION) or (key_type == KEY_TYPE_TRANSACTION and not key):
            entry["error_code"] = InvalidRequestError.code
            entry["error_message"] = f"invalid key type {key_type} or empty key"
        elif refused := coordinator_refusal(ctx.state.authorizer, request, key, key_type == KEY_TYPE_TRANSACTION):
            entry["error_code"] = refused
        else:
            broker = ctx.state.coordinator_for(key)
            if broker is None:
                entry["error_code"] = CoordinatorNotAvailableError.code
            else:
                entry.update(node_id=broker.id, host=broker.host, port=broker.port)
        results.append(entry)
    if v >= BATCHED_VERSION:
        return {"throttle_time_ms": 0, "coordinators": results}
    one = results[0]
    return {"throttle_time_ms": 0, "error_code": one["error_code"], "error_message": one["error_message"],
            "node_id": one["node_id"], "host": one["host"], "port": one["port"]}
