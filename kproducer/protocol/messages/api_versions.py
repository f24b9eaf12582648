"""ApiVersions (key 18): which APIs and versions a broker supports."""
from __future__ import annotations

from typing import Any, Dict, Tuple

from ..errors import ProtocolError
from ..schema import Api, Field

API_VERSIONS = Api(
    18,
    "ApiVersions",
    versions="0-3",
    flexible="3+",
    request=[
        Field("client_software_name", "string", "3+"),
        Field("client_software_version", "string", "3+"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("api_keys", [
            Field("api_key", "int16"),
            Field("min_version", "int16"),
            Field("max_version", "int16"),
        ]),
        Field("throttle_time_ms", "int32", "1+", default=0),
        Field("supported_features", [
            Field("name", "string"),
            Field("min_version", "int16"),
            Field("max_version", "int16"),
        ], "3+", tag=0),
        Field("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
        Field("finalized_features", [
            Field("name", "string"),
            Field("max_version_level", "int16"),
            Field("min_version_level", "int16"),
        ], "3+", tag=2),
        Field("zk_migration_ready", "bool", "3+", tag=3),
    ],
)


UNSUPPORTED_VERSION = 35


def decode_api_versions(version: int, data: bytes, pos: int = 0) -> Tuple[int, Dict[str, Any]]:
    """Decode an ApiVersions response body sent in answer to a request of ``version``.

    A broker that does not support the requested version answers UNSUPPORTED_VERSION encoded as v0
    (listing, in ``api_keys``, the ApiVersions versions it does support). Returns the version the body
    was decoded as, and the body.
    """
    try:
        body = API_VERSIONS.decode_response(version, data, pos)
    except ProtocolError:
        if version == 0:
            raise
        return 0, API_VERSIONS.decode_response(0, data, pos)
    if body["error_code"] == UNSUPPORTED_VERSION and version != 0:
        # Brokers send this error as v0; a body that only parses as the version asked for is kept as is.
        try:
            return 0, API_VERSIONS.decode_response(0, data, pos)
        except ProtocolError:
            pass
    return version, body
