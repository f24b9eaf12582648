"""ApiVersions (key 18): which APIs and versions a broker supports."""
from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Tuple

from ..errors import ProtocolError
from ..schema import Api, Field

#: the feature whose finalized level says which transaction protocol a cluster runs (KIP-890): 2 and above is
#: transactions v2 (Apache Kafka 4.x finalizes 2 on a new cluster)
TRANSACTION_VERSION_FEATURE = "transaction.version"

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
        # Brokers send this error as v0; a body that only parses as the version asked for is kept, but not its
        # throttle time: a response decoded in a shape it was not written in (bytes after the last field are
        # skipped) may read anything there -- librdkafka's mock cluster answers v3 in neither shape, and its
        # "throttle" would hold the connection for 20 minutes
        try:
            return 0, API_VERSIONS.decode_response(0, data, pos)
        except ProtocolError:
            body["throttle_time_ms"] = 0
    return version, body


class FinalizedFeatures(NamedTuple):
    """The features a cluster has finalized (KIP-584) as an ApiVersions v3+ answer tells them: ``levels`` maps
    a feature name to its finalized (max) level; ``epoch`` orders answers (a newer one has a higher epoch; -1:
    nothing known, e.g. a broker that predates KIP-584 or an answer below v3). A feature not listed is at
    level 0."""

    epoch: int
    levels: Mapping[str, int]

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    @property
    def transaction_version(self) -> int:
        """The finalized ``transaction.version`` (0 when not finalized)."""
        return self.level(TRANSACTION_VERSION_FEATURE)


#: what a client knows before any ApiVersions v3+ answer
NO_FINALIZED_FEATURES = FinalizedFeatures(-1, {})


def finalized_features(body: Dict[str, Any]) -> FinalizedFeatures:
    """The finalized features of a decoded ApiVersions response body (any version)."""
    levels = {f["name"]: f["max_version_level"] for f in body.get("finalized_features") or ()}
    return FinalizedFeatures(body.get("finalized_features_epoch", -1), levels)
