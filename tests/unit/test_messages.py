"""Kafka messages: round trips for every API and version, byte-exact vectors derived by hand from
Apache Kafka's JSON message schemas, header framing, the ApiVersions fallback, malformed input."""
from __future__ import annotations

import copy
import time
import uuid
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import pytest

from kproducer.protocol import primitives as p
from kproducer.protocol.errors import ProtocolError
from kproducer.protocol.messages import (
    API_VERSIONS,
    APIS,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    decode_request_header,
    decode_response,
    decode_response_header,
    encode_request,
    encode_request_parts,
    encode_response,
    negotiate_version,
)
from kproducer.protocol.messages.api_versions import UNSUPPORTED_VERSION, decode_api_versions
from kproducer.protocol.schema import Api, SchemaError
from tests.protocol_bodies import full_response

MAX = 0x7FFF
ZERO_UUID = uuid.UUID(int=0)
U1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
U2 = uuid.UUID("f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f")
I32_MIN = -(1 << 31)


def h(s: str) -> bytes:
    """Hex with spaces and ``|`` separators for readability."""
    return bytes.fromhex(s.replace("|", " "))


# --------------------------------------------------------------------------------------------
# Hand-written version tables (from the Kafka JSON schemas): field -> (first version, last version,
# default when absent, sub-spec for arrays/structs). Used to compute what a decode must return.


class V(NamedTuple):
    lo: int = 0
    hi: int = MAX
    default: Any = None
    sub: Optional[Dict[str, "V"]] = None
    struct: bool = False


Spec = Dict[str, V]


def project(value: Dict[str, Any], spec: Spec, version: int) -> Dict[str, Any]:
    """What ``value`` must decode to after an encode at ``version``: absent fields take defaults."""
    out: Dict[str, Any] = {}
    for name, f in spec.items():
        if f.lo <= version <= f.hi:
            v = value[name]
            if f.sub is not None and v is not None:
                v = project(v, f.sub, version) if f.struct else [project(x, f.sub, version) for x in v]
            out[name] = v
        else:
            out[name] = copy.deepcopy(f.default)
    return out


API_VERSIONS_REQ: Spec = {
    "client_software_name": V(3, default=""),
    "client_software_version": V(3, default=""),
}
API_VERSIONS_RESP: Spec = {
    "error_code": V(),
    "api_keys": V(sub={"api_key": V(), "min_version": V(), "max_version": V()}),
    "throttle_time_ms": V(1, default=0),
    "supported_features": V(3, default=[], sub={"name": V(), "min_version": V(), "max_version": V()}),
    "finalized_features_epoch": V(3, default=-1),
    "finalized_features": V(3, default=[], sub={
        "name": V(), "max_version_level": V(), "min_version_level": V()}),
    "zk_migration_ready": V(3, default=False),
}
METADATA_REQ: Spec = {
    "topics": V(sub={"topic_id": V(10, default=ZERO_UUID), "name": V()}),
    "allow_auto_topic_creation": V(4, default=True),
    "include_cluster_authorized_operations": V(8, 10, default=False),
    "include_topic_authorized_operations": V(8, default=False),
}
METADATA_RESP: Spec = {
    "throttle_time_ms": V(3, default=0),
    "brokers": V(sub={"node_id": V(), "host": V(), "port": V(), "rack": V(1, default=None)}),
    "cluster_id": V(2, default=None),
    "controller_id": V(1, default=-1),
    "topics": V(sub={
        "error_code": V(),
        "name": V(),
        "topic_id": V(10, default=ZERO_UUID),
        "is_internal": V(1, default=False),
        "partitions": V(sub={
            "error_code": V(),
            "partition_index": V(),
            "leader_id": V(),
            "leader_epoch": V(7, default=-1),
            "replica_nodes": V(),
            "isr_nodes": V(),
            "offline_replicas": V(5, default=[]),
        }),
        "topic_authorized_operations": V(8, default=I32_MIN),
    }),
    "cluster_authorized_operations": V(8, 10, default=I32_MIN),
}
PRODUCE_REQ: Spec = {
    "transactional_id": V(3, default=None),
    "acks": V(),
    "timeout_ms": V(),
    "topic_data": V(sub={"name": V(), "partition_data": V(sub={"index": V(), "records": V()})}),
}
PRODUCE_RESP: Spec = {
    "responses": V(sub={
        "name": V(),
        "partition_responses": V(sub={
            "index": V(),
            "error_code": V(),
            "base_offset": V(),
            "log_append_time_ms": V(2, default=-1),
            "log_start_offset": V(5, default=-1),
            "record_errors": V(8, default=[], sub={"batch_index": V(), "batch_index_error_message": V()}),
            "error_message": V(8, default=None),
            "current_leader": V(10, default={"leader_id": -1, "leader_epoch": -1}, struct=True,
                                sub={"leader_id": V(), "leader_epoch": V()}),
        }),
    }),
    "throttle_time_ms": V(1, default=0),
    "node_endpoints": V(10, default=[], sub={"node_id": V(), "host": V(), "port": V(), "rack": V()}),
}
INIT_PRODUCER_ID_REQ: Spec = {
    "transactional_id": V(),
    "transaction_timeout_ms": V(),
    "producer_id": V(3, default=-1),
    "producer_epoch": V(3, default=-1),
}
INIT_PRODUCER_ID_RESP: Spec = {
    "throttle_time_ms": V(),
    "error_code": V(),
    "producer_id": V(),
    "producer_epoch": V(),
}

# Fully populated bodies: every field of every version, none at its default (so tagged fields are sent).
FULL: Dict[str, Tuple[Dict[str, Any], Dict[str, Any]]] = {
    "ApiVersions": (
        {"client_software_name": "kproducer", "client_software_version": "0.1.0-dév"},
        {
            "error_code": 0,
            "api_keys": [
                {"api_key": 0, "min_version": 3, "max_version": 11},
                {"api_key": 18, "min_version": 0, "max_version": 4},
            ],
            "throttle_time_ms": 25,
            "supported_features": [{"name": "metadata.version", "min_version": 1, "max_version": 20}],
            "finalized_features_epoch": 42,
            "finalized_features": [
                {"name": "metadata.version", "max_version_level": 20, "min_version_level": 19}],
            "zk_migration_ready": True,
        },
    ),
    "Metadata": (
        {
            "topics": [{"topic_id": U1, "name": "orders"}, {"topic_id": U2, "name": "ünïcødé-тема"}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True,
        },
        {
            "throttle_time_ms": 5,
            "brokers": [
                {"node_id": 1, "host": "b1.example", "port": 9092, "rack": "r1"},
                {"node_id": 2, "host": "b2.example", "port": 9093, "rack": "r2"},
            ],
            "cluster_id": "cluster-xyz",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "orders",
                    "topic_id": U1,
                    "is_internal": True,
                    "partitions": [
                        {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 4,
                         "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": [2]},
                        {"error_code": 9, "partition_index": 1, "leader_id": 2, "leader_epoch": 0,
                         "replica_nodes": [], "isr_nodes": [2, 1], "offline_replicas": []},
                    ],
                    "topic_authorized_operations": 0x0FF8,
                },
                {"error_code": 3, "name": "gone", "topic_id": U2, "is_internal": True, "partitions": [],
                 "topic_authorized_operations": 0},
            ],
            "cluster_authorized_operations": 0x0ABC,
        },
    ),
    "Produce": (
        {
            "transactional_id": "txn-1",
            "acks": -1,
            "timeout_ms": 30000,
            "topic_data": [
                {"name": "orders", "partition_data": [
                    {"index": 0, "records": b"batch-bytes\x00\xff"}, {"index": 5, "records": b""}]},
                {"name": "other", "partition_data": []},
            ],
        },
        {
            "responses": [
                {
                    "name": "orders",
                    "partition_responses": [
                        {"index": 0, "error_code": 0, "base_offset": 100, "log_append_time_ms": 1700000000000,
                         "log_start_offset": 7,
                         "record_errors": [{"batch_index": 3, "batch_index_error_message": "bad record"}],
                         "error_message": "msg", "current_leader": {"leader_id": 2, "leader_epoch": 11}},
                        {"index": 1, "error_code": 6, "base_offset": -1, "log_append_time_ms": 5,
                         "log_start_offset": 6, "record_errors": [], "error_message": "not leader",
                         "current_leader": {"leader_id": 3, "leader_epoch": 0}},
                    ],
                }
            ],
            "throttle_time_ms": 9,
            "node_endpoints": [{"node_id": 2, "host": "b2.example", "port": 9093, "rack": "r2"}],
        },
    ),
    "InitProducerId": (
        {"transactional_id": "txn", "transaction_timeout_ms": 60000, "producer_id": 1234, "producer_epoch": 5},
        {"throttle_time_ms": 1, "error_code": 0, "producer_id": 77, "producer_epoch": 3},
    ),
}

SPECS: Dict[str, Tuple[Api, Spec, Spec]] = {
    "ApiVersions": (API_VERSIONS, API_VERSIONS_REQ, API_VERSIONS_RESP),
    "Metadata": (METADATA, METADATA_REQ, METADATA_RESP),
    "Produce": (PRODUCE, PRODUCE_REQ, PRODUCE_RESP),
    "InitProducerId": (INIT_PRODUCER_ID, INIT_PRODUCER_ID_REQ, INIT_PRODUCER_ID_RESP),
}

EXPECTED_RANGES = {"ApiVersions": (0, 3), "Metadata": (1, 12), "Produce": (3, 12), "InitProducerId": (0, 5)}
EXPECTED_FLEXIBLE = {"ApiVersions": 3, "Metadata": 9, "Produce": 9, "InitProducerId": 2}

ALL_VERSIONS = [(name, v) for name, (lo, hi) in EXPECTED_RANGES.items() for v in range(lo, hi + 1)]
IDS = [f"{n}-v{v}" for n, v in ALL_VERSIONS]


def test_registry_and_version_ranges() -> None:
    assert APIS[0] is PRODUCE and APIS[3] is METADATA and APIS[18] is API_VERSIONS and APIS[22] is INIT_PRODUCER_ID
    for name, (api, _rq, _rs) in SPECS.items():
        assert api.name == name
        assert (api.min_version, api.max_version) == EXPECTED_RANGES[name]
        first_flexible = EXPECTED_FLEXIBLE[name]
        for v in range(api.min_version, api.max_version + 1):
            assert api.is_flexible(v) == (v >= first_flexible)
            assert api.request_header_version(v) == (2 if v >= first_flexible else 1)
            expected_resp_header = 0 if name == "ApiVersions" else (1 if v >= first_flexible else 0)
            assert api.response_header_version(v) == expected_resp_header


# --------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("name,version", ALL_VERSIONS, ids=IDS)
def test_request_roundtrip(name: str, version: int) -> None:
    api, spec, _ = SPECS[name]
    full = FULL[name][0]
    data = api.encode_request(version, full)
    expected = project(full, spec, version)
    assert api.decode_request(version, data) == expected
    # the projected body (only this version's fields) encodes to the very same bytes
    assert api.encode_request(version, expected) == data


@pytest.mark.parametrize("name,version", ALL_VERSIONS, ids=IDS)
def test_response_roundtrip(name: str, version: int) -> None:
    api, _, spec = SPECS[name]
    full = FULL[name][1]
    data = api.encode_response(version, full)
    expected = project(full, spec, version)
    assert api.decode_response(version, data) == expected
    assert api.encode_response(version, expected) == data


@pytest.mark.parametrize("name,version", ALL_VERSIONS, ids=IDS)
def test_framed_roundtrip(name: str, version: int) -> None:
    api, req_spec, resp_spec = SPECS[name]
    req, resp = FULL[name]
    frame = encode_request(api, version, 123456, "client-ü", req)
    header, found, pos = decode_request_header(frame)
    assert header == (api.key, version, 123456, "client-ü") and found is api
    assert api.decode_request(version, frame, pos) == project(req, req_spec, version)
    rframe = encode_response(api, version, -7, resp)
    corr, body = decode_response(api, version, rframe)
    assert corr == -7 and body == project(resp, resp_spec, version)


def test_default_bodies_decode_to_defaults() -> None:
    # encoding request_defaults()/response_defaults() writes every field's default; decoding gives them
    # all back
    for api, req_spec, resp_spec in SPECS.values():
        for v in range(api.min_version, api.max_version + 1):
            req = api.decode_request(v, api.encode_request(v, api.request_defaults(v)))
            assert set(req) == set(req_spec)
            resp = api.decode_response(v, api.encode_response(v, api.response_defaults(v)))
            assert set(resp) == set(resp_spec)
    assert PRODUCE.decode_response(9, PRODUCE.encode_response(9, {"responses": []}))["node_endpoints"] == []
    assert METADATA.decode_request(4, METADATA.encode_request(4, {"topics": None}))["allow_auto_topic_creation"]
    assert INIT_PRODUCER_ID.decode_request(3, INIT_PRODUCER_ID.encode_request(
        3, {"transactional_id": None, "transaction_timeout_ms": 1}))["producer_id"] == -1


def test_encode_refuses_unknown_fields_naming_the_closest() -> None:
    body = {"transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": []}
    with pytest.raises(SchemaError, match=r"Produce v9 request: unknown field 'timeout' \(did you mean 'timeout_ms'\?\)"):
        PRODUCE.encode_request(9, body)
    # nested structs name their place
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1,
            "topic_data": [{"name": "t", "partition_data": [{"idx": 0, "records": None}]}]}
    with pytest.raises(SchemaError, match=r"in topic_data\[\], in partition_data\[\]: unknown field 'idx' "
                                          r"\(did you mean 'index'\?\)"):
        PRODUCE.encode_request(9, body)
    # a SchemaError is a ValueError and a ProtocolError (a KafkaError)
    with pytest.raises(ValueError):
        METADATA.encode_request(12, {"topics": None, "allow_auto_topic_creatoin": True})
    with pytest.raises(ProtocolError):
        METADATA.encode_response(12, {**METADATA.response_defaults(12), "throttle_ms": 0})
    # a name nothing resembles: no suggestion, but the list of fields
    with pytest.raises(SchemaError, match="unknown field 'zzz'; the fields are"):
        METADATA.encode_request(12, {"topics": None, "zzz": 1})


def test_encode_refuses_missing_required_fields() -> None:
    with pytest.raises(SchemaError, match="Produce v9 request: field 'timeout_ms' is missing"):
        PRODUCE.encode_request(9, {"transactional_id": None, "acks": 1, "topic_data": []})
    with pytest.raises(SchemaError, match="in partition_data\\[\\]: field 'records' is missing"):
        PRODUCE.encode_request(3, {"transactional_id": None, "acks": 1, "timeout_ms": 1,
                                   "topic_data": [{"name": "t", "partition_data": [{"index": 0}]}]})
    # Metadata's topics: null (all topics) and [] (none) differ, so there is no default
    with pytest.raises(SchemaError, match="'topics' is missing"):
        METADATA.encode_request(4, {})
    with pytest.raises(SchemaError, match="'error_code' is missing"):
        INIT_PRODUCER_ID.encode_response(0, {"producer_id": 1, "producer_epoch": 0})


def test_fields_with_defaults_may_be_left_out() -> None:
    # declared defaults (Kafka's "default": "null" / "-1" / "true"), tagged fields, and fields the
    # version lacks
    body = {"acks": -1, "timeout_ms": 1, "topic_data": []}  # transactional_id: default null
    assert PRODUCE.decode_request(9, PRODUCE.encode_request(9, body))["transactional_id"] is None
    got = INIT_PRODUCER_ID.decode_request(4, INIT_PRODUCER_ID.encode_request(
        4, {"transactional_id": "t", "transaction_timeout_ms": 1}))
    assert (got["producer_id"], got["producer_epoch"]) == (-1, -1)
    got = METADATA.decode_request(12, METADATA.encode_request(12, {"topics": [{"name": "t"}]}))
    assert got["topics"][0]["topic_id"] == ZERO_UUID and got["allow_auto_topic_creation"] is True
    # a body built for the newest version encodes at an old one (the extra fields are not written)
    v12 = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": True}
    assert METADATA.encode_request(1, v12) == METADATA.encode_request(1, {"topics": None})
    # tagged fields and throttle_time_ms (default 0) in a response
    resp = PRODUCE.decode_response(10, PRODUCE.encode_response(10, {"responses": []}))
    assert resp["throttle_time_ms"] == 0 and resp["node_endpoints"] == []


def test_nullable_fields_roundtrip_as_null() -> None:
    cases: List[Tuple[Api, str, int, Dict[str, Any]]] = []
    for v in range(1, 13):
        cases.append((METADATA, "request", v, {"topics": None}))
    for v in range(10, 13):
        cases.append((METADATA, "request", v, {"topics": [{"topic_id": U1, "name": None}]}))
    for v in range(1, 13):
        body: Dict[str, Any] = {"brokers": [{"node_id": 1, "host": "h", "port": 1, "rack": None}], "topics": []}
        if v >= 2:
            body["cluster_id"] = None
        if v >= 12:
            body["topics"] = [{"error_code": 0, "name": None, "topic_id": U1, "partitions": []}]
        cases.append((METADATA, "response", v, body))
    for v in range(3, 12):
        cases.append((PRODUCE, "request", v, {"transactional_id": None, "acks": 1, "timeout_ms": 1,
                                             "topic_data": [{"name": "t", "partition_data": [
                                                 {"index": 0, "records": None}]}]}))
    for v in range(8, 12):
        pr: Dict[str, Any] = {"index": 0, "error_code": 0, "base_offset": 0, "log_append_time_ms": -1,
                              "record_errors": [{"batch_index": 0, "batch_index_error_message": None}],
                              "error_message": None}
        body = {"responses": [{"name": "t", "partition_responses": [pr]}]}
        if v >= 10:
            body["node_endpoints"] = [{"node_id": 1, "host": "h", "port": 1, "rack": None}]
        cases.append((PRODUCE, "response", v, body))
    for v in range(0, 6):
        cases.append((INIT_PRODUCER_ID, "request", v, {"transactional_id": None, "transaction_timeout_ms": 1}))
    for api, kind, v, body in cases:
        if kind == "request":
            got = api.decode_request(v, api.encode_request(v, body))
        else:
            got = api.decode_response(v, api.encode_response(v, body))
        _assert_subset(body, got, f"{api.name} v{v} {kind}")


def _assert_subset(want: Any, got: Any, where: str) -> None:
    if isinstance(want, dict):
        for k, v in want.items():
            _assert_subset(v, got[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(want, got)):
            _assert_subset(a, b, f"{where}[{i}]")
    else:
        assert got == want, where


def test_null_where_not_nullable_is_rejected_on_encode() -> None:
    with pytest.raises((TypeError, ValueError)):
        METADATA.encode_request(9, {"topics": [{"name": None}]})  # name nullable from v10
    with pytest.raises((TypeError, ValueError)):
        PRODUCE.encode_request(3, {"topic_data": None})
    with pytest.raises((TypeError, ValueError)):
        METADATA.encode_response(11, {"topics": [{"name": None, "partitions": []}]})  # nullable from v12


def test_encode_errors_name_the_field_and_keep_the_type() -> None:
    with pytest.raises(ValueError, match="acks"):
        PRODUCE.encode_request(9, {"acks": 1 << 15, "timeout_ms": 1, "topic_data": []})
    with pytest.raises(TypeError, match="timeout_ms"):
        PRODUCE.encode_request(9, {"acks": 1, "timeout_ms": "30s", "topic_data": []})
    # an unencodable string (lone surrogate) is a ValueError naming the field, not a TypeError from the
    # exception re-wrapping
    with pytest.raises(ValueError, match="name"):
        METADATA.encode_request(12, {"topics": [{"topic_id": U1, "name": "bad \ud800"}]})
    with pytest.raises(ValueError, match="host"):
        PRODUCE.encode_response(10, {"responses": [],
                                     "node_endpoints": [{"node_id": 1, "host": "\udc00", "port": 1, "rack": None}]})


def test_unimplemented_versions_raise() -> None:
    for api in (API_VERSIONS, METADATA, PRODUCE, INIT_PRODUCER_ID):
        with pytest.raises(ValueError):
            api.encode_request(api.max_version + 1, {})
        with pytest.raises(ValueError):
            api.decode_response(api.min_version - 1, b"")


def test_decoded_defaults_are_not_shared_between_messages() -> None:
    a = PRODUCE.decode_response(9, PRODUCE.encode_response(9, {"responses": []}))
    a["node_endpoints"].append("x")
    b = PRODUCE.decode_response(9, PRODUCE.encode_response(9, {"responses": []}))
    assert b["node_endpoints"] == []
    pr = {"index": 0, "error_code": 0, "base_offset": 0, "log_append_time_ms": -1, "log_start_offset": -1}
    body = {"responses": [{"name": "t", "partition_responses": [pr]}]}
    c = PRODUCE.decode_response(10, PRODUCE.encode_response(10, body))
    c["responses"][0]["partition_responses"][0]["current_leader"]["leader_id"] = 99
    d = PRODUCE.decode_response(10, PRODUCE.encode_response(10, body))
    assert d["responses"][0]["partition_responses"][0]["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
    body4 = full_response(METADATA, 4, {"topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]})
    e = METADATA.decode_response(4, METADATA.encode_response(4, body4))
    e["topics"][0]["partitions"][0]["offline_replicas"].append(1)
    f = METADATA.decode_response(4, METADATA.encode_response(4, body4))
    assert f["topics"][0]["partitions"][0]["offline_replicas"] == []


# --------------------------------------------------------------------------------------------
# byte-exact vectors (derived by hand from the JSON schemas)

# request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable string
# request header v2: the same + tagged fields (the client id stays a non-compact string)
# response header v0: correlation_id int32; v1: + tagged fields


def test_api_versions_v0_request_vector() -> None:
    frame = encode_request(API_VERSIONS, 0, 1, "kp", {})
    assert frame == h("0012 0000 | 00000001 | 0002 6b70")  # empty body


def test_api_versions_v3_request_vector() -> None:
    body = {"client_software_name": "kproducer", "client_software_version": "0.1"}
    frame = encode_request(API_VERSIONS, 3, 7, "cli", body)
    assert frame == h(
        "0012 0003 | 00000007 | 0003 636c69 | 00"  # header v2
        "| 0a 6b70726f6475636572 | 04 302e31 | 00"  # compact strings, tagged fields
    )
    assert API_VERSIONS.decode_request(3, frame, 14) == body


def test_api_versions_v0_response_vector() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11},
                                          {"api_key": 18, "min_version": 0, "max_version": 3}]}
    wire = h("0000 | 00000002 | 0000 0003 000b | 0012 0000 0003")
    assert API_VERSIONS.encode_response(0, body) == wire
    frame = encode_response(API_VERSIONS, 0, 9, body)
    assert frame == h("00000009") + wire
    corr, got = decode_response(API_VERSIONS, 0, frame)
    assert corr == 9 and got == {**body, "throttle_time_ms": 0, "supported_features": [],
                                 "finalized_features_epoch": -1, "finalized_features": [],
                                 "zk_migration_ready": False}


V3_API_VERSIONS_RESPONSE = h(
    "0000"                                  # error_code
    "| 03 | 0000 0003 000b 00 | 0012 0000 0003 00"  # compact array of 2, each with empty tagged fields
    "| 00000010"                            # throttle_time_ms 16
    "| 02"                                  # two tagged fields
    "| 00 08 | 02 | 02 78 | 0001 | 0002 | 00"   # tag 0 supported_features [{"x", 1, 2}], 8 bytes
    "| 01 08 | 0000000000000005"            # tag 1 finalized_features_epoch 5
)
V3_API_VERSIONS_BODY = {
    "error_code": 0,
    "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11},
                 {"api_key": 18, "min_version": 0, "max_version": 3}],
    "throttle_time_ms": 16,
    "supported_features": [{"name": "x", "min_version": 1, "max_version": 2}],
    "finalized_features_epoch": 5,
    "finalized_features": [],
    "zk_migration_ready": False,
}


def test_api_versions_v3_response_vector() -> None:
    assert API_VERSIONS.encode_response(3, V3_API_VERSIONS_BODY) == V3_API_VERSIONS_RESPONSE
    assert API_VERSIONS.decode_response(3, V3_API_VERSIONS_RESPONSE) == V3_API_VERSIONS_BODY
    # the response header stays v0 (no tagged fields) even though v3 is flexible
    frame = encode_response(API_VERSIONS, 3, 0x01020304, V3_API_VERSIONS_BODY)
    assert frame == h("01020304") + V3_API_VERSIONS_RESPONSE
    assert decode_response_header(API_VERSIONS, 3, frame) == (0x01020304, 4)
    assert decode_response(API_VERSIONS, 3, frame) == (0x01020304, V3_API_VERSIONS_BODY)
    assert decode_api_versions(3, frame, 4) == (3, V3_API_VERSIONS_BODY)


def test_metadata_v1_request_vector() -> None:
    frame = encode_request(METADATA, 1, 42, "kp", {"topics": [{"name": "foo"}]})
    assert frame == h("0003 0001 | 0000002a | 0002 6b70 | 00000001 | 0003 666f6f")
    # null = all topics
    assert METADATA.encode_request(1, {"topics": None}) == h("ffffffff")
    assert METADATA.encode_request(1, {"topics": []}) == h("00000000")
    assert METADATA.encode_request(4, {"topics": None, "allow_auto_topic_creation": False}) == h("ffffffff 00")


def test_metadata_v12_request_vector() -> None:
    body = {"topics": [{"topic_id": U1, "name": "foo"}], "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False}
    frame = encode_request(METADATA, 12, 42, "kp", body)
    assert frame == h(
        "0003 000c | 0000002a | 0002 6b70 | 00"                        # header v2
        "| 02 | 00112233445566778899aabbccddeeff | 04 666f6f | 00"    # topics: id, name, tagged
        "| 01 | 00 | 00"        # allow_auto_topic_creation, include_topic_authorized_operations, tagged
    )
    assert METADATA.encode_request(12, {"topics": None}) == h("00 01 00 00")
    assert METADATA.encode_request(10, {"topics": None, "include_cluster_authorized_operations": True}) == \
        h("00 01 01 00 00")


def test_produce_v3_request_vector() -> None:
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "foo", "partition_data": [{"index": 2, "records": b"abc"}]}]}
    frame = encode_request(PRODUCE, 3, 5, None, body)
    assert frame == h(
        "0000 0003 | 00000005 | ffff"                  # header v1, null client id
        "| ffff | ffff | 00007530"                     # transactional_id null, acks -1, timeout 30000
        "| 00000001 | 0003 666f6f | 00000001 | 00000002 | 00000003 616263"
    )
    header, api, pos = decode_request_header(frame)
    assert header == (0, 3, 5, None) and api is PRODUCE and pos == 10
    assert PRODUCE.decode_request(3, frame, pos) == body


def test_produce_v9_request_vector() -> None:
    body = {"transactional_id": "tx", "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": "foo", "partition_data": [{"index": 2, "records": b"abc"}]}]}
    frame = encode_request(PRODUCE, 9, 5, "kp", body)
    assert frame == h(
        "0000 0009 | 00000005 | 0002 6b70 | 00"        # header v2
        "| 03 7478 | 0001 | 00007530"
        "| 02 | 04 666f6f | 02 | 00000002 | 04 616263 | 00 | 00 | 00"
    )
    assert PRODUCE.encode_request(9, {"acks": 0, "timeout_ms": 0, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": None}]}]}) == h("00 0000 00000000 02 02 74 02 00000000 00 00 00 00")


def test_init_producer_id_v0_request_vector() -> None:
    frame = encode_request(INIT_PRODUCER_ID, 0, 1, "kp", {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert frame == h("0016 0000 | 00000001 | 0002 6b70 | ffff | 0000ea60")
    body = INIT_PRODUCER_ID.encode_request(0, {"transactional_id": "t1", "transaction_timeout_ms": 1})
    assert body == h("0002 7431 | 00000001")


def test_init_producer_id_v4_request_vector() -> None:
    frame = encode_request(INIT_PRODUCER_ID, 4, 1, "kp", {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert frame == h("0016 0004 | 00000001 | 0002 6b70 | 00 | 00 | 0000ea60 | ffffffffffffffff | ffff | 00")
    body = INIT_PRODUCER_ID.encode_request(
        4, {"transactional_id": "t1", "transaction_timeout_ms": 1, "producer_id": 5, "producer_epoch": 2})
    assert body == h("03 7431 | 00000001 | 0000000000000005 | 0002 | 00")


def test_init_producer_id_response_vectors() -> None:
    wire = h("00000000 | 0000 | 000000000000007b | 0002")
    assert INIT_PRODUCER_ID.decode_response(1, wire) == {
        "throttle_time_ms": 0, "error_code": 0, "producer_id": 123, "producer_epoch": 2}
    assert INIT_PRODUCER_ID.decode_response(4, wire + b"\x00")["producer_id"] == 123
    frame = encode_response(INIT_PRODUCER_ID, 4, 3, {"error_code": 0, "producer_id": 123, "producer_epoch": 2})
    assert frame == h("00000003 00") + wire + b"\x00"


PRODUCE_V10_RESPONSE = h(
    "0000000b | 00"                        # response header v1: correlation id, tagged fields
    "| 02 | 04 666f6f"                     # responses: 1 topic "foo"
    "| 02 | 00000001 | 0006"               # 1 partition: index 1, error 6 NOT_LEADER_OR_FOLLOWER
    "| ffffffffffffffff | ffffffffffffffff | ffffffffffffffff"  # base offset, append time, log start
    "| 01 | 00"                            # record_errors [], error_message null
    "| 01 | 00 09 | 00000003 00000007 00"  # tagged: CurrentLeader (tag 0) leader 3 epoch 7, own tagged fields
    "| 00"                                 # topic tagged fields
    "| 00000000"                           # throttle_time_ms
    "| 01 | 00 15 | 02 | 00000003 | 0a 6c6f63616c686f7374 | 00002384 | 00 | 00"  # NodeEndpoints (tag 0)
)
PRODUCE_V10_BODY: Dict[str, Any] = {
    "responses": [{"name": "foo", "partition_responses": [{
        "index": 1, "error_code": 6, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
        "record_errors": [], "error_message": None, "current_leader": {"leader_id": 3, "leader_epoch": 7}}]}],
    "throttle_time_ms": 0,
    "node_endpoints": [{"node_id": 3, "host": "localhost", "port": 9092, "rack": None}],
}


def test_produce_v10_response_with_current_leader_vector() -> None:
    assert decode_response(PRODUCE, 10, PRODUCE_V10_RESPONSE) == (11, PRODUCE_V10_BODY)
    assert encode_response(PRODUCE, 10, 11, PRODUCE_V10_BODY) == PRODUCE_V10_RESPONSE
    # without the tagged fields (defaults) both sections are empty
    plain = copy.deepcopy(PRODUCE_V10_BODY)
    plain["node_endpoints"] = []
    plain["responses"][0]["partition_responses"][0]["current_leader"] = {"leader_id": -1, "leader_epoch": -1}
    wire = PRODUCE.encode_response(10, plain)
    assert wire == h("02 04666f6f 02 00000001 0006" + " ff" * 24 + " 01 00 00 00 00000000 00")
    assert PRODUCE.decode_response(10, wire) == plain


def test_produce_v3_response_vector() -> None:
    wire = h("00000001 | 0003 666f6f | 00000001 | 00000002 | 0000 | 000000000000000a | ffffffffffffffff"
             "| 00000000")
    got = PRODUCE.decode_response(3, wire)
    assert got["responses"][0]["partition_responses"][0] == {
        "index": 2, "error_code": 0, "base_offset": 10, "log_append_time_ms": -1, "log_start_offset": -1,
        "record_errors": [], "error_message": None, "current_leader": {"leader_id": -1, "leader_epoch": -1}}
    assert got["node_endpoints"] == [] and got["throttle_time_ms"] == 0
    assert PRODUCE.encode_response(3, got) == wire


def test_request_header_framing() -> None:
    # v1 (non-flexible): no tagged fields; v2 (flexible): an empty tagged-field section
    assert encode_request(METADATA, 8, 1, "c", {"topics": []}).startswith(h("0003 0008 00000001 0001 63 00000000"))
    v9 = encode_request(METADATA, 9, 1, "c", {"topics": []})
    assert v9.startswith(h("0003 0009 00000001 0001 63 00 01"))
    header, api, pos = decode_request_header(v9)
    assert header.api_key == 3 and header.api_version == 9 and header.client_id == "c" and pos == 12
    # tagged fields in a v2 header are skipped
    with_tags = h("0003 0009 00000001 0001 63 | 01 05 02 abcd") + v9[12:]
    header2, _, pos2 = decode_request_header(with_tags)
    assert header2 == header and METADATA.decode_request(9, with_tags, pos2) == METADATA.decode_request(9, v9, pos)
    # an API we do not know: the body starts right after the client id
    header3, api3, pos3 = decode_request_header(h("0063 0001 00000002 ffff beef"))
    assert header3 == (99, 1, 2, None) and api3 is None and pos3 == 10
    for n in range(10):
        with pytest.raises(ProtocolError):
            decode_request_header(h("0000 0009 00000005 0002 6b70 00")[:n])
    with pytest.raises(ProtocolError):
        decode_request_header(h("0000 0009 00000005 0002 6b70"))  # v2 header missing its tagged fields


def test_request_headers_made_from_the_cached_parts_match_a_fresh_encoding() -> None:
    """The header's bytes but the correlation id are cached per API, version and client id: every request still
    gets its own correlation id and its own client id, flexible or not, also after the cache starts over."""
    from kproducer.protocol import messages as msgs

    def reference(api: Api, version: int, cid: int, client_id: Optional[str]) -> bytes:
        out = bytearray()
        p.write_int16(out, api.key)
        p.write_int16(out, version)
        p.write_int32(out, cid)
        p.write_nullable_string(out, client_id)
        if api.request_header_version(version) >= 2:
            p.write_tagged_fields(out, [])
        return bytes(out)

    for api, version in ((METADATA, 8), (METADATA, 9), (PRODUCE, 9), (API_VERSIONS, 3)):
        for client_id in (None, "", "kp", "prödücer-1"):
            for cid in (0, 1, 2**31 - 1, -5):
                header = encode_request_parts(api, version, cid, client_id, api.request_defaults(version))[0]
                assert header == reference(api, version, cid, client_id)
    msgs._HEADER_CACHE.clear()
    for i in range(msgs._HEADER_CACHE_MAX + 3):  # fills up and starts over
        assert encode_request_parts(METADATA, 9, i, f"c{i}", {"topics": []})[0] == reference(METADATA, 9, i, f"c{i}")
    assert len(msgs._HEADER_CACHE) <= msgs._HEADER_CACHE_MAX


def test_response_header_framing() -> None:
    # v0 for non-flexible versions and for ApiVersions, v1 (+ tagged fields) for flexible ones
    assert encode_response(METADATA, 8, 5, METADATA.response_defaults(8)).startswith(h("00000005 00000000"))
    # throttle, brokers [], cluster_id null, controller_id -1, topics [], cluster_authorized_operations
    # (v8-10, default INT32_MIN), tagged fields
    assert encode_response(METADATA, 9, 5, METADATA.response_defaults(9)) == h("00000005 00 | 00000000 01 00 ffffffff 01 80000000 00")
    assert encode_response(API_VERSIONS, 3, 5, {"error_code": 0, "api_keys": []}) == h("00000005 | 0000 01 00000000 00")
    assert decode_response_header(METADATA, 9, h("00000005 00")) == (5, 5)
    assert decode_response_header(METADATA, 8, h("00000005 00")) == (5, 4)
    # unknown tagged fields in the response header are skipped
    assert decode_response_header(PRODUCE, 9, h("00000005 02 03 01 ff 09 00")) == (5, 10)
    for data in (b"", h("000000"), h("00000005")):
        with pytest.raises(ProtocolError):
            decode_response_header(PRODUCE, 9, data)
    with pytest.raises(ProtocolError):
        decode_response_header(API_VERSIONS, 3, h("000000"))


# --------------------------------------------------------------------------------------------
# ApiVersions UNSUPPORTED_VERSION fallback


def test_api_versions_unsupported_version_fallback() -> None:
    # a broker that does not know v3 answers with a v0 body listing the ApiVersions versions it supports
    v0_error = h("0023 | 00000001 | 0012 0000 0002")
    frame = h("0000002a") + v0_error
    corr, pos = decode_response_header(API_VERSIONS, 3, frame)
    assert (corr, pos) == (42, 4)
    version, body = decode_api_versions(3, frame, pos)
    assert version == 0
    assert body["error_code"] == UNSUPPORTED_VERSION == 35
    assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 2}]
    assert negotiate_version(API_VERSIONS, 0, 2) == 2
    # the same for v1 and v2 requests (v0 body lacks the throttle time)
    for asked in (1, 2):
        assert decode_api_versions(asked, v0_error) == (0, body)
    # an empty api_keys list, too
    assert decode_api_versions(3, h("0023 00000000")) == (0, {
        "error_code": 35, "api_keys": [], "throttle_time_ms": 0, "supported_features": [],
        "finalized_features_epoch": -1, "finalized_features": [], "zk_migration_ready": False})
    # asking v0 gives the v0 body whatever the error
    assert decode_api_versions(0, v0_error) == (0, body)
    # a successful v3 answer is decoded as v3
    assert decode_api_versions(3, V3_API_VERSIONS_RESPONSE) == (3, V3_API_VERSIONS_BODY)
    # an error answered in the version asked for (not v0-shaped) is still returned
    v3_error = API_VERSIONS.encode_response(3, {"error_code": 35, "api_keys": []})
    assert decode_api_versions(3, v3_error)[0] == 3
    with pytest.raises(ProtocolError):
        decode_api_versions(3, h("0023 0000"))
    with pytest.raises(ProtocolError):
        decode_api_versions(0, h("0000 00000001 0012"))


def test_negotiate_version() -> None:
    assert negotiate_version(PRODUCE, 0, 11) == 11
    assert negotiate_version(PRODUCE, 0, 13) == 11
    assert negotiate_version(PRODUCE, 5, 7) == 7
    assert negotiate_version(PRODUCE, 3, 3) == 3
    assert negotiate_version(PRODUCE, 0, 2) is None
    assert negotiate_version(PRODUCE, 12, 13) is None
    assert negotiate_version(METADATA, 0, 12) == 12
    assert negotiate_version(METADATA, 0, 0) is None
    assert negotiate_version(API_VERSIONS, 0, 4) == 3
    assert negotiate_version(INIT_PRODUCER_ID, 0, 5) == 5
    assert negotiate_version(INIT_PRODUCER_ID, 0, 1) == 1


# --------------------------------------------------------------------------------------------
# tagged fields


def test_unknown_tagged_fields_are_skipped() -> None:
    # ApiVersions v3: unknown tags 5 and 900 around the known ones, and one inside an api_keys element
    wire = h(
        "0000 | 03 | 0000 0003 000b | 01 07 02 abcd | 0012 0000 0003 00 | 00000010"
        "| 04 | 00 08 02 02 78 0001 0002 00 | 01 08 0000000000000005 | 05 03 010203 | 8407 00"
    )
    assert API_VERSIONS.decode_response(3, wire) == V3_API_VERSIONS_BODY
    # Produce v10: an unknown tag after CurrentLeader in the partition; an unknown top-level tag
    current_leader = h("01 | 00 09 00000003 00000007 00")
    assert PRODUCE_V10_RESPONSE.count(current_leader) == 1
    wire = PRODUCE_V10_RESPONSE.replace(current_leader, h("02 | 00 09 00000003 00000007 00 | 05 01 ff"))
    assert decode_response(PRODUCE, 10, wire) == (11, PRODUCE_V10_BODY)
    plain = PRODUCE.encode_response(10, {**PRODUCE_V10_BODY, "node_endpoints": []})
    assert plain.endswith(h("00000000 00"))
    with_unknown = plain[:-1] + h("01 2a 04 deadbeef")
    assert PRODUCE.decode_response(10, with_unknown) == {**PRODUCE_V10_BODY, "node_endpoints": []}
    # Metadata v12 request with an unknown tag in a topic entry
    req = h("02 00112233445566778899aabbccddeeff 04 666f6f | 01 63 00 | 01 00 00")
    assert METADATA.decode_request(12, req)["topics"] == [{"topic_id": U1, "name": "foo"}]


def test_known_tagged_field_with_trailing_bytes_is_rejected() -> None:
    bad = PRODUCE_V10_RESPONSE.replace(h("01 00 09 00000003 00000007 00"), h("01 00 0a 00000003 00000007 00 ff"))
    assert bad != PRODUCE_V10_RESPONSE
    with pytest.raises(ProtocolError):
        decode_response(PRODUCE, 10, bad)
    short = PRODUCE_V10_RESPONSE.replace(h("01 00 09 00000003 00000007 00"), h("01 00 04 00000003"))
    with pytest.raises(ProtocolError):
        decode_response(PRODUCE, 10, short)


def test_tagged_fields_not_sent_before_flexible_versions() -> None:
    full = FULL["ApiVersions"][1]
    assert API_VERSIONS.encode_response(2, full) == API_VERSIONS.encode_response(
        2, {k: full[k] for k in ("error_code", "api_keys", "throttle_time_ms")})


# --------------------------------------------------------------------------------------------
# malformed input


def _all_encodings() -> List[Tuple[str, Api, int, str, bytes]]:
    out = []
    for name, v in ALL_VERSIONS:
        api = SPECS[name][0]
        req, resp = FULL[name]
        out.append((name, api, v, "request", api.encode_request(v, req)))
        out.append((name, api, v, "response", api.encode_response(v, resp)))
    return out


def _decode(api: Api, version: int, kind: str, data: bytes) -> Dict[str, Any]:
    if kind == "request":
        return api.decode_request(version, data)
    return api.decode_response(version, data)


def test_truncated_bodies_raise_protocol_error_at_every_length() -> None:
    deadline = time.monotonic() + 60
    checked = 0
    for _name, api, v, kind, data in _all_encodings():
        assert len(data) > 0 or kind == "request"
        for n in range(len(data)):
            with pytest.raises(ProtocolError):
                _decode(api, v, kind, data[:n])
            checked += 1
        assert time.monotonic() < deadline
    assert checked > 1000


def test_truncated_frames_raise_protocol_error_at_every_length() -> None:
    for name, v in ALL_VERSIONS:
        api = SPECS[name][0]
        frame = encode_response(api, v, 1, FULL[name][1])
        for n in range(len(frame)):
            with pytest.raises(ProtocolError):
                decode_response(api, v, frame[:n])


def test_trailing_garbage_raises_protocol_error_in_requests_and_is_skipped_in_responses() -> None:
    # (responses: as Java's client, which ignores what follows the last field; tests/unit/test_trailing_bytes.py)
    for _name, api, v, kind, data in _all_encodings():
        for junk in (b"\x00", b"\xff\xff", b"garbage"):
            if kind == "request":
                with pytest.raises(ProtocolError):
                    _decode(api, v, kind, data + junk)
            else:
                assert _decode(api, v, kind, data + junk) == _decode(api, v, kind, data)
    assert decode_response(PRODUCE, 10, PRODUCE_V10_RESPONSE + b"\x00") == decode_response(PRODUCE, 10,
                                                                                        PRODUCE_V10_RESPONSE)


def test_corrupted_lengths_raise_protocol_error() -> None:
    # flip every byte of a few encodings to 0xff / 0x7f: either a clean decode or a ProtocolError, never
    # another exception (IndexError, struct.error, MemoryError ...)
    for _name, api, v, kind, data in _all_encodings():
        if v not in (api.min_version, api.max_version):
            continue
        for i in range(len(data)):
            for b in (0xFF, 0x7F, 0x80):
                mutated = data[:i] + bytes((b,)) + data[i + 1:]
                try:
                    _decode(api, v, kind, mutated)
                except ProtocolError:
                    pass


def test_huge_array_count_is_rejected_quickly() -> None:
    t0 = time.monotonic()
    with pytest.raises(ProtocolError):
        PRODUCE.decode_response(3, h("7fffffff"))
    with pytest.raises(ProtocolError):
        PRODUCE.decode_response(9, h("ffffffff0f"))
    with pytest.raises(ProtocolError):
        METADATA.decode_response(9, h("00000000 ffffff7f"))
    assert time.monotonic() - t0 < 1


def test_invalid_utf8_in_body_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        METADATA.decode_request(1, h("00000001 0002 c328"))
    with pytest.raises(ProtocolError):
        METADATA.decode_request(9, h("02 03 c328 00 01 00 00"))


def test_protocol_error_is_a_kafka_error_with_message() -> None:
    from kproducer.protocol.errors import KafkaError

    with pytest.raises(KafkaError) as info:
        PRODUCE.decode_response(3, b"\x00")
    assert "Produce v3 response" in str(info.value)


def test_primitives_used_by_schema_are_consistent() -> None:
    # records in flexible versions are compact nullable bytes; in older versions int32-length bytes
    out = bytearray()
    p.write_compact_nullable_bytes(out, b"abc")
    assert bytes(out) in PRODUCE.encode_request(9, {"acks": 1, "timeout_ms": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"abc"}]}]})


def test_body_offset_past_the_data_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        API_VERSIONS.decode_request(0, b"", 1)
    with pytest.raises(ProtocolError):
        PRODUCE.decode_response(3, b"\x00\x00", 5)
