"""ApiVersions (key 18) on a mock broker: the versions it serves (KIP-35, KIP-511)."""
from __future__ import annotations

from ...protocol.errors import NO_ERROR, UnsupportedVersionError
from ...protocol.messages import API_VERSIONS
from ..context import BrokerContext
from ..request_channel import Request
from ..results import Result


def handle_api_versions(ctx: BrokerContext, request: Request) -> Result:
    if request.body is None:
        lo, hi = ctx.served[API_VERSIONS.key]
        return {
            "error_code": UnsupportedVersionError.code,
            "api_keys": [{"api_key": API_VERSIONS.key, "min_version": lo, "max_version": hi}],
        }
    injected = ctx.faults.take_error("api_versions")
    return {
        "error_code": injected or NO_ERROR,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(ctx.served.items())
        ],
        "throttle_time_ms": 0,
    }
