"""Round trips of the message schemas added for the mock broker (Fetch, ListOffsets, FindCoordinator,
CreateTopics, the transaction APIs, OffsetCommit, OffsetFetch), byte layouts checked by hand, and a
cross-check of every version against kafka-python's encoder when it is installed."""
from __future__ import annotations

import struct
import uuid
from typing import Any, Dict, List, Sequence

import pytest

from kproducer.protocol.messages import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    APIS,
    CREATE_TOPICS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    TXN_OFFSET_COMMIT,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from kproducer.protocol.schema import Api, Field, Struct

NEW_APIS = [FETCH, LIST_OFFSETS, FIND_COORDINATOR, CREATE_TOPICS, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN,
            END_TXN, TXN_OFFSET_COMMIT, OFFSET_COMMIT, OFFSET_FETCH]


def _present(f: Field, version: int, flexible: bool) -> bool:
    if not f.versions[0] <= version <= f.versions[1]:
        return False
    if f.tag is not None:
        return flexible and f.tagged_versions[0] <= version <= f.tagged_versions[1]
    return True


def sample(fields: Sequence[Field], seed: int = 0) -> Dict[str, Any]:
    """A body giving every field a non-default value."""
    out: Dict[str, Any] = {}
    for i, f in enumerate(fields):
        n = (seed * 31 + i + 2) % 500
        t = f.type
        if isinstance(t, list):
            out[f.name] = [sample(t, n), sample(t, n + 1)]
        elif isinstance(t, Struct):
            out[f.name] = sample(t.fields, n)
        elif t.startswith("[]"):
            out[f.name] = [f"s{n}", f"t{n}"] if t == "[]string" else [n, n + 1]
        elif t == "string":
            out[f.name] = f"{f.name}-{n}"
        elif t in ("bytes", "records"):
            out[f.name] = bytes([n % 256]) * 3
        elif t == "bool":
            out[f.name] = True
        elif t == "uuid":
            out[f.name] = uuid.UUID(int=n)
        elif t == "int8":
            out[f.name] = n % 100
        elif t == "int16":
            out[f.name] = n
        else:
            out[f.name] = 1000 + n
    return out


def expected(fields: Sequence[Field], version: int, flexible: bool, body: Dict[str, Any]) -> Dict[str, Any]:
    """What decoding the encoded ``body`` must give: the values of the fields the version has,
    the defaults of the others."""
    out: Dict[str, Any] = {}
    for f in fields:
        if not _present(f, version, flexible):
            out[f.name] = f.default_value(version)
            continue
        value = body[f.name]
        t = f.type
        if isinstance(t, list):
            value = [expected(t, version, flexible, item) for item in value]
        elif isinstance(t, Struct):
            value = expected(t.fields, version, flexible, value)
        out[f.name] = value
    return out


def versions(api: Api) -> List[int]:
    return list(range(api.min_version, api.max_version + 1))


CASES = [(api, v) for api in NEW_APIS for v in versions(api)]


@pytest.mark.parametrize("api,version", CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_request_round_trip(api: Api, version: int) -> None:
    body = sample(api.request_fields)
    data = api.encode_request(version, body)
    decoded = api.decode_request(version, data)
    assert decoded == expected(api.request_fields, version, api.is_flexible(version), body)
    assert api.encode_request(version, decoded) == data


@pytest.mark.parametrize("api,version", CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_response_round_trip(api: Api, version: int) -> None:
    body = sample(api.response_fields, seed=5)
    data = api.encode_response(version, body)
    decoded = api.decode_response(version, data)
    assert decoded == expected(api.response_fields, version, api.is_flexible(version), body)
    assert api.encode_response(version, decoded) == data


@pytest.mark.parametrize("api,version", CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_framing_with_headers(api: Api, version: int) -> None:
    body = sample(api.request_fields)
    frame = encode_request(api, version, 77, "client", body)
    header, found, pos = decode_request_header(frame)
    assert found is api and header.correlation_id == 77 and header.api_version == version
    assert api.decode_request(version, frame, pos) == api.decode_request(version, api.encode_request(version, body))
    response = sample(api.response_fields)
    cid, decoded = decode_response(api, version, encode_response(api, version, 77, response))
    assert cid == 77 and decoded == api.decode_response(version, api.encode_response(version, response))


def test_all_new_apis_registered() -> None:
    for api in NEW_APIS:
        assert APIS[api.key] is api
    assert {a.key for a in NEW_APIS} == {1, 2, 8, 9, 10, 19, 24, 25, 26, 28}


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _cs(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def test_find_coordinator_layouts() -> None:
    assert FIND_COORDINATOR.encode_request(0, {"key": "g"}) == _s("g")
    assert FIND_COORDINATOR.encode_request(1, {"key": "tx", "key_type": 1}) == _s("tx") + b"\x01"
    # v3 flexible: compact string, key type, empty tagged fields
    assert FIND_COORDINATOR.encode_request(3, {"key": "g", "key_type": 0}) == _cs("g") + b"\x00\x00"
    # v4: an array of keys instead of one key
    assert FIND_COORDINATOR.encode_request(4, {"key_type": 0, "coordinator_keys": ["a", "b"]}) == (
        b"\x00" + b"\x03" + _cs("a") + _cs("b") + b"\x00"
    )
    v0 = FIND_COORDINATOR.encode_response(0, {"error_code": 0, "node_id": 2, "host": "h", "port": 9092})
    assert v0 == struct.pack(">hi", 0, 2) + _s("h") + struct.pack(">i", 9092)
    v4 = FIND_COORDINATOR.decode_response(4, struct.pack(">i", 0) + b"\x02" + _cs("g") + struct.pack(">i", 3)
                                          + _cs("h") + struct.pack(">ih", 9, 0) + b"\x00" + b"\x00" + b"\x00")
    assert v4["coordinators"] == [{"key": "g", "node_id": 3, "host": "h", "port": 9, "error_code": 0,
                                   "error_message": None}]


def test_end_txn_and_add_offsets_layouts() -> None:
    body = {"transactional_id": "t", "producer_id": 5, "producer_epoch": 2, "committed": True}
    assert END_TXN.encode_request(0, body) == _s("t") + struct.pack(">qh?", 5, 2, True)
    assert END_TXN.encode_request(3, body) == _cs("t") + struct.pack(">qh?", 5, 2, True) + b"\x00"
    assert END_TXN.encode_response(1, {"throttle_time_ms": 4, "error_code": 90}) == struct.pack(">ih", 4, 90)
    add = {"transactional_id": "t", "producer_id": 5, "producer_epoch": 2, "group_id": "g"}
    assert ADD_OFFSETS_TO_TXN.encode_request(2, add) == _s("t") + struct.pack(">qh", 5, 2) + _s("g")


def test_list_offsets_layouts() -> None:
    body = {"replica_id": -1, "isolation_level": 1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": 3,
                                                      "timestamp": -2}]}]}
    v1 = LIST_OFFSETS.encode_request(1, body)
    assert v1 == struct.pack(">ii", -1, 1) + _s("t") + struct.pack(">iiq", 1, 0, -2)
    v4 = LIST_OFFSETS.encode_request(4, body)
    assert v4 == struct.pack(">ibi", -1, 1, 1) + _s("t") + struct.pack(">iiiq", 1, 0, 3, -2)
    v6 = LIST_OFFSETS.encode_request(6, body)
    assert v6 == struct.pack(">ib", -1, 1) + b"\x02" + _cs("t") + b"\x02" + struct.pack(">iiq", 0, 3, -2) + b"\x00\x00\x00"


def test_fetch_v12_tagged_fields() -> None:
    body = FETCH.request_defaults(12)
    body.update(max_wait_ms=100, min_bytes=1, cluster_id="c1", topics=[])
    data = FETCH.encode_request(12, body)
    # cluster_id travels as tag 0 in the trailing tagged section: 1 field, tag 0, 3 bytes, "c1"
    assert data.endswith(b"\x01\x00\x03" + _cs("c1"))
    assert FETCH.decode_request(12, data)["cluster_id"] == "c1"
    # without a cluster id: the empty rack id (compact "") then an empty tagged section
    body["cluster_id"] = None
    assert FETCH.encode_request(12, body).endswith(b"\x01\x01\x00")
    response = {"responses": [{"topic": "t", "partitions": [{
        "partition_index": 0, "error_code": 6, "high_watermark": 10, "records": b"",
        "current_leader": {"leader_id": 2, "leader_epoch": 4}}]}]}
    decoded = FETCH.decode_response(12, FETCH.encode_response(12, response))
    part = decoded["responses"][0]["partitions"][0]
    assert part["current_leader"] == {"leader_id": 2, "leader_epoch": 4}
    assert part["diverging_epoch"] == {"epoch": -1, "end_offset": -1}
    assert part["aborted_transactions"] is None and part["last_stable_offset"] == -1


def test_fetch_aborted_transactions_null_and_empty() -> None:
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 1, "records": None, "aborted_transactions": []}
    body = {"responses": [{"topic": "t", "partitions": [part]}]}
    for v in (4, 11, 12):
        assert FETCH.decode_response(v, FETCH.encode_response(v, body))["responses"][0]["partitions"][0][
            "aborted_transactions"] == []
        part["aborted_transactions"] = None
        assert FETCH.decode_response(v, FETCH.encode_response(v, body))["responses"][0]["partitions"][0][
            "aborted_transactions"] is None
        part["aborted_transactions"] = []


def test_offset_fetch_null_topics_means_all() -> None:
    data = OFFSET_FETCH.encode_request(7, {"group_id": "g", "topics": None, "require_stable": True})
    assert data == _cs("g") + b"\x00" + b"\x01" + b"\x00"
    assert OFFSET_FETCH.decode_request(7, data)["topics"] is None
    with pytest.raises(ValueError):
        OFFSET_FETCH.encode_request(1, {"group_id": "g", "topics": None})


def test_create_topics_v5_response_tagged_config_error() -> None:
    body = {"topics": [{"name": "t", "error_code": 0, "topic_config_error_code": 40, "num_partitions": 3,
                        "replication_factor": 1, "configs": None}]}
    decoded = CREATE_TOPICS.decode_response(5, CREATE_TOPICS.encode_response(5, body))
    topic = decoded["topics"][0]
    assert topic["topic_config_error_code"] == 40 and topic["configs"] is None and topic["num_partitions"] == 3
    # v4 has none of those fields: decoding fills defaults
    v4 = CREATE_TOPICS.decode_response(4, CREATE_TOPICS.encode_response(4, body))["topics"][0]
    assert v4["num_partitions"] == -1 and v4["topic_config_error_code"] == 0


def _kafka_python_classes() -> Dict[Any, Any]:
    pytest.importorskip("kafka")
    try:
        import importlib
        import inspect

        from kafka.protocol.api_message import ApiMessage  # type: ignore[import-untyped]
    except ImportError:
        pytest.skip("kafka-python without the JSON-schema protocol package")
    classes = {}
    for name in ("consumer.fetch", "consumer.offsets", "consumer.group", "metadata.find_coordinator",
                 "admin.topics", "producer.transaction"):
        module = importlib.import_module("kafka.protocol." + name)
        for cls_name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, ApiMessage) and cls is not ApiMessage:
                classes[(cls.API_KEY, cls_name.endswith("Request"))] = cls
    return classes


@pytest.mark.parametrize("api,version", CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_same_bytes_as_kafka_python(api: Api, version: int) -> None:
    """kafka-python's encoder (generated from Kafka's JSON schemas) re-encodes our bytes unchanged."""
    classes = _kafka_python_classes()
    for is_request in (True, False):
        cls = classes[(api.key, is_request)]
        if is_request:
            data = api.encode_request(version, sample(api.request_fields))
        else:
            data = api.encode_response(version, sample(api.response_fields, seed=3))
        decoded = cls.decode(data, version=version)
        for attr in ("_header", "_min_version", "_max_version"):
            if not hasattr(decoded, attr):
                setattr(decoded, attr, None)
        assert bytes(decoded.encode(version=version)) == data
