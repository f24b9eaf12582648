"""ApiVersions (key 18) on a mock broker: the versions it serves (KIP-35, KIP-511) and, from v3, the finalized
features (KIP-584): ``transaction.version`` (KIP-890) as the cluster is set, listed only above level 0, as Apache
Kafka lists it. The served versions do not depend on it (Apache Kafka 4.1 advertises Produce v13 and EndTxn v5
at every level)."""
from __future__ import annotations

from ...protocol.errors import NO_ERROR, UnsupportedVersionError
from ...protocol.messages import API_VERSIONS
from ...protocol.messages.api_versions import TRANSACTION_VERSION_FEATURE
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
    state = ctx.state
    with state.lock:
        level, epoch = state.transaction_version, state.features_epoch
    return {
        "error_code": injected or NO_ERROR,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(ctx.served.items())
        ],
        "throttle_time_ms": 0,
        # (tagged fields: written in v3+ only)
        "finalized_features_epoch": epoch,
        "finalized_features": [{"name": TRANSACTION_VERSION_FEATURE, "max_version_level": level,
                                "min_version_level": level}] if level else [],
    }
