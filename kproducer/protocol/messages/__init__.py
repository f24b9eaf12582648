"""Kafka request/response messages and the request/response headers around them.

Each module defines one :class:`~kproducer.protocol.schema.Api`. This package keeps the registry by API
key and frames whole requests and responses (header + body; the 4-byte size prefix is the network
layer's job).
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from .. import primitives as p
from ..errors import ProtocolError
from ..schema import Api
from .add_offsets_to_txn import ADD_OFFSETS_TO_TXN
from .add_partitions_to_txn import ADD_PARTITIONS_TO_TXN
from .api_versions import API_VERSIONS
from .create_topics import CREATE_TOPICS
from .end_txn import END_TXN
from .fetch import FETCH
from .find_coordinator import FIND_COORDINATOR
from .init_producer_id import INIT_PRODUCER_ID
from .list_offsets import LIST_OFFSETS
from .metadata import METADATA
from .offset_commit import OFFSET_COMMIT
from .offset_fetch import OFFSET_FETCH
from .produce import PRODUCE
from .sasl_authenticate import SASL_AUTHENTICATE
from .sasl_handshake import SASL_HANDSHAKE
from .txn_offset_commit import TXN_OFFSET_COMMIT

APIS: Dict[int, Api] = {}


def register(api: Api) -> Api:
    """Add an API to the registry (modules of optional APIs call this on import)."""
    APIS[api.key] = api
    return api


for _api in (PRODUCE, METADATA, API_VERSIONS, INIT_PRODUCER_ID):
    register(_api)
for _api in (
    FETCH, LIST_OFFSETS, FIND_COORDINATOR, CREATE_TOPICS, ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT, OFFSET_COMMIT, OFFSET_FETCH, SASL_HANDSHAKE,
    SASL_AUTHENTICATE,
):
    register(_api)


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: Optional[str]


def encode_request(
    api: Api, version: int, correlation_id: int, client_id: Optional[str], body: Dict[str, Any]
) -> bytes:
    """Header (v1, or v2 for flexible versions) followed by the body. No size prefix."""
    parts = encode_request_parts(api, version, correlation_id, client_id, body)
    if len(parts) == 2:
        return bytes(parts[0] + parts[1])
    return b"".join(parts)


#: (api key, version, client id) -> the request header's bytes before and after the correlation id
_HEADER_CACHE: Dict[Tuple[int, int, Optional[str]], Tuple[bytes, bytes]] = {}
_HEADER_CACHE_MAX = 1024  # (client ids are few; a cache that fills up starts over)
_pack_i32 = struct.Struct(">i").pack
_unpack_i32 = struct.Struct(">i").unpack_from


def _header_around_correlation_id(api: Api, version: int, client_id: Optional[str]) -> Tuple[bytes, bytes]:
    key = (api.key, version, client_id)
    cached = _HEADER_CACHE.get(key)
    if cached is None:
        before = bytearray()
        p.write_int16(before, api.key)
        p.write_int16(before, version)
        after = bytearray()
        p.write_nullable_string(after, client_id)  # the client id stays a non-compact string in header v2
        if api.request_header_version(version) >= 2:
            p.write_tagged_fields(after, [])
        if len(_HEADER_CACHE) >= _HEADER_CACHE_MAX:
            _HEADER_CACHE.clear()
        cached = _HEADER_CACHE[key] = (bytes(before), bytes(after))
    return cached


def encode_request_parts(
    api: Api, version: int, correlation_id: int, client_id: Optional[str], body: Dict[str, Any]
) -> List[Any]:
    """:func:`encode_request` as a list of buffers to be joined (or written in order): the header, then the
    body's parts (a Produce request's batches as they are, not copied). The header's bytes but the correlation
    id are made once per API, version and client id."""
    before, after = _header_around_correlation_id(api, version, client_id)
    parts = api.encode_request_parts(version, body)
    parts.insert(0, before + _pack_i32(correlation_id) + after)
    return parts


def decode_request_header(data: bytes) -> Tuple[RequestHeader, Optional[Api], int]:
    """Parse a request header. Returns the header, the API (None when the key is unknown to us) and the
    position where the body starts (for an unknown API, just after the client id)."""
    r = p.Reader(data)
    try:
        api_key = r.int16()
        api_version = r.int16()
        correlation_id = r.int32()
        client_id = r.nullable_string()
        api = APIS.get(api_key)
        if api is not None and api.request_header_version(api_version) >= 2:
            r.tagged_fields()
    except ProtocolError as e:
        raise ProtocolError(f"malformed request header: {e.message}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id), api, r.pos


def encode_response(api: Api, version: int, correlation_id: int, body: Dict[str, Any]) -> bytes:
    out = bytearray()
    p.write_int32(out, correlation_id)
    if api.response_header_version(version) >= 1:
        p.write_tagged_fields(out, [])
    return bytes(out) + api.encode_response(version, body)


def decode_response_header(api: Api, version: int, data: bytes) -> Tuple[int, int]:
    """Returns (correlation id, position of the body)."""
    if len(data) >= 5:  # the common case: no tagged fields in a flexible header (a 0 count)
        flexible = api.response_header_version(version) >= 1
        if not flexible:
            return _unpack_i32(data, 0)[0], 4
        if data[4] == 0:
            return _unpack_i32(data, 0)[0], 5
    r = p.Reader(data)
    try:
        correlation_id = r.int32()
        if api.response_header_version(version) >= 1:
            r.tagged_fields()
    except ProtocolError as e:
        raise ProtocolError(f"malformed {api.name} response header: {e.message}") from None
    return correlation_id, r.pos


def decode_response(api: Api, version: int, data: bytes) -> Tuple[int, Dict[str, Any]]:
    """Returns (correlation id, body)."""
    correlation_id, pos = decode_response_header(api, version, data)
    return correlation_id, api.decode_response(version, data, pos)


#: api key -> the first version that is transactions v2 (KIP-890 part 2; Java's
#: ``LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2`` + 1): Produce v12 and TxnOffsetCommit v5 add the partition
#: (the group's offsets) to the transaction on the broker's side, EndTxn v5 bumps the producer epoch at every
#: transaction end and answers the new producer id and epoch. A client speaks them (``negotiate_version``'s
#: ``max_version``) only when the cluster's ``transaction.version`` is at least :data:`TRANSACTION_V2_LEVEL`.
TRANSACTION_V2_VERSIONS: Dict[int, int] = {PRODUCE.key: 12, END_TXN.key: 5, TXN_OFFSET_COMMIT.key: 5}
#: the finalized ``transaction.version`` from which a cluster runs transactions v2
TRANSACTION_V2_LEVEL = 2


def negotiate_version(api: Api, broker_min: int, broker_max: int, max_version: Optional[int] = None
                      ) -> Optional[int]:
    """Highest version both sides support, or None when the ranges do not overlap. Ours ends at
    ``api.client_max_version`` unless ``max_version`` asks for another end (up to ``api.max_version``)."""
    ours = api.client_max_version if max_version is None else min(max_version, api.max_version)
    hi = min(ours, broker_max)
    lo = max(api.min_version, broker_min)
    return hi if hi >= lo else None


__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "APIS",
    "API_VERSIONS",
    "CREATE_TOPICS",
    "END_TXN",
    "FETCH",
    "FIND_COORDINATOR",
    "LIST_OFFSETS",
    "OFFSET_COMMIT",
    "OFFSET_FETCH",
    "TXN_OFFSET_COMMIT",
    "TRANSACTION_V2_LEVEL",
    "TRANSACTION_V2_VERSIONS",
    "INIT_PRODUCER_ID",
    "METADATA",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "RequestHeader",
    "decode_request_header",
    "decode_response",
    "decode_response_header",
    "encode_request",
    "encode_request_parts",
    "encode_response",
    "negotiate_version",
    "register",
]
