"""Transactions v2 (KIP-890 part 2) in the protocol layer: Produce v12, EndTxn v4-v5 and TxnOffsetCommit v4-v5,
the finalized features of ApiVersions v3 (``transaction.version``), what a client negotiates by default and when
it asks for transactions v2, and the NetworkClient exposing the cluster's finalized features.

The reference is Apache Kafka's own JSON message schemas as kafka-python 3.0 ships them, with kafka-python's
codec generated from them: every field of ours is compared with the schema's (name, versions, nullable
versions, tag), and each message is encoded by one codec and decoded by the other, both ways, at every
version."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

import pytest

from kproducer.protocol import messages as m
from kproducer.protocol.messages.api_versions import (
    NO_FINALIZED_FEATURES,
    TRANSACTION_VERSION_FEATURE,
    FinalizedFeatures,
    finalized_features,
)
from kproducer.protocol.schema import MAX_VERSION, Api, Field, Struct
from tests.unit.scripted import SentRequest
from tests.unit.test_network_client import Env

kp_produce = pytest.importorskip("kafka.protocol.producer.produce")
kp_txn = pytest.importorskip("kafka.protocol.producer.transaction")
kp_metadata = pytest.importorskip("kafka.protocol.metadata")

#: our API -> kafka-python's (request, response) classes, generated from Kafka's JSON schemas
KP: Dict[str, Tuple[Any, Any]] = {
    "Produce": (kp_produce.ProduceRequest, kp_produce.ProduceResponse),
    "EndTxn": (kp_txn.EndTxnRequest, kp_txn.EndTxnResponse),
    "TxnOffsetCommit": (kp_txn.TxnOffsetCommitRequest, kp_txn.TxnOffsetCommitResponse),
    "InitProducerId": (kp_txn.InitProducerIdRequest, kp_txn.InitProducerIdResponse),
    "ApiVersions": (kp_metadata.ApiVersionsRequest, kp_metadata.ApiVersionsResponse),
}
APIS = {api.name: api for api in (m.PRODUCE, m.END_TXN, m.TXN_OFFSET_COMMIT, m.INIT_PRODUCER_ID, m.API_VERSIONS)}


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def json_versions(spec: str) -> Tuple[int, int]:
    if spec == "none":
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), MAX_VERSION)
    lo, _, hi = spec.partition("-")
    return (int(lo), int(hi or lo))


def clip(rng: Tuple[int, int], within: Tuple[int, int]) -> Tuple[int, int]:
    """A version range within ``within`` (the versions we implement, or a nested struct's); empty: (1, 0)."""
    lo, hi = max(rng[0], within[0]), min(rng[1], within[1])
    return (lo, hi) if lo <= hi else (1, 0)


def compare_fields(ours: List[Field], theirs: List[Dict[str, Any]], within: Tuple[int, int], where: str) -> None:
    by_name = {f.name: f for f in ours}
    for spec in theirs:
        name = snake(spec["name"])
        versions = clip(json_versions(spec["versions"]), within)
        if versions == (1, 0):
            continue  # a field of versions we do not implement (Produce v13's topic_id)
        assert name in by_name, f"{where}: Kafka's field {spec['name']} ({name}) is missing"
        field = by_name.pop(name)
        assert clip(field.versions, within) == versions, f"{where}.{name}: versions"
        if spec["type"] != "records":  # (records are nullable on the wire whatever the schema says)
            assert clip(field.nullable, versions) == clip(json_versions(spec.get("nullableVersions", "none")),
                                                          versions), f"{where}.{name}: nullable versions"
        assert field.tag == spec.get("tag"), f"{where}.{name}: tag"
        if "fields" in spec:
            sub = field.type.fields if isinstance(field.type, Struct) else field.type
            assert isinstance(sub, list), f"{where}.{name}: not a struct"
            compare_fields(sub, spec["fields"], versions, f"{where}.{name}")
    assert not by_name, f"{where}: fields Kafka's schema does not have: {sorted(by_name)}"


@pytest.mark.parametrize("name", sorted(APIS))
def test_our_schemas_are_kafkas(name: str) -> None:
    """Every field Kafka's JSON schema has in the versions we implement, with the same versions, nullable
    versions and tag; and nothing else. Our versions are versions Kafka has."""
    api = APIS[name]
    for kind, cls, ours in (("request", KP[name][0], api.request_fields), ("response", KP[name][1], api.response_fields)):
        schema = cls.json
        lo, hi = json_versions(schema["validVersions"])
        assert lo <= api.min_version and api.max_version <= hi
        implemented = (api.min_version, api.max_version)
        assert clip(json_versions(schema["flexibleVersions"]), implemented) == clip(api.flexible, implemented)
        compare_fields(ours, schema["fields"], implemented, f"{name} {kind}")


def test_the_versions_of_transactions_v2() -> None:
    """Produce v12, EndTxn v5 and TxnOffsetCommit v5 are implemented (the mock serves them); the client
    negotiates v11 / v3 / v3 unless it asks for transactions v2."""
    assert (m.PRODUCE.min_version, m.PRODUCE.max_version, m.PRODUCE.client_max_version) == (3, 12, 11)
    assert (m.END_TXN.max_version, m.END_TXN.client_max_version) == (5, 3)
    assert (m.TXN_OFFSET_COMMIT.max_version, m.TXN_OFFSET_COMMIT.client_max_version) == (5, 3)
    assert m.TRANSACTION_V2_VERSIONS == {m.PRODUCE.key: 12, m.END_TXN.key: 5, m.TXN_OFFSET_COMMIT.key: 5}
    assert m.TRANSACTION_V2_LEVEL == 2


#: Apache Kafka 4.1's ApiVersions ranges (Produce, EndTxn, TxnOffsetCommit)
AK41 = {m.PRODUCE.key: (0, 13), m.END_TXN.key: (0, 5), m.TXN_OFFSET_COMMIT.key: (0, 5)}


@pytest.mark.parametrize("api, default, v2", [(m.PRODUCE, 11, 12), (m.END_TXN, 3, 5), (m.TXN_OFFSET_COMMIT, 3, 5)])
def test_negotiation_by_default_and_for_transactions_v2(api: Api, default: int, v2: int) -> None:
    lo, hi = AK41[api.key]
    assert m.negotiate_version(api, lo, hi) == default
    assert m.negotiate_version(api, lo, hi, m.TRANSACTION_V2_VERSIONS[api.key]) == v2
    assert m.negotiate_version(api, lo, hi, 99) == api.max_version  # never above what we implement
    # a broker of before KIP-890 part 2 (Apache Kafka 3.x: Produce v0-11, EndTxn v0-4, TxnOffsetCommit v0-4)
    assert m.negotiate_version(api, 0, v2 - 1, v2) == v2 - 1
    assert m.negotiate_version(api, lo, hi, api.min_version - 1) is None


def test_client_max_must_be_an_implemented_version() -> None:
    with pytest.raises(ValueError, match="client_max v4 is outside v0-v3"):
        Api(99, "X", versions="0-3", flexible="none", request=[], response=[], client_max=4)


# --------------------------------------------------------------------------------------------
# both codecs, both ways


def kp_build(cls: Any, body: Dict[str, Any]) -> Any:
    """A kafka-python message (or nested struct) from a body of ours."""
    values = {}
    for field in cls._struct._fields:
        if field.name not in body:
            continue
        value = body[field.name]
        if field.is_struct_array():
            value = None if value is None else [kp_build(getattr(cls, field.type_str), v) for v in value]
        elif field.is_struct():
            value = kp_build(getattr(cls, field.type_str), value)
        values[field.name] = value
    return cls(**values)


def produce_request(version: int) -> Dict[str, Any]:
    return {"transactional_id": "txn-\u00e9", "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": "t1", "partition_data": [{"index": 0, "records": b"\x00batch-0"}, {"index": 3, "records": None}]},
        {"name": "t2", "partition_data": [{"index": 1, "records": b"\x01" * 300}]}]}


def produce_response(version: int) -> Dict[str, Any]:
    part = {"index": 2, "error_code": 6, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": 17}
    if version >= 8:
        part.update(record_errors=[{"batch_index": 1, "batch_index_error_message": "bad"}], error_message="why")
    if version >= 10:
        part["current_leader"] = {"leader_id": 3, "leader_epoch": 9}
    ok: Dict[str, Any] = {"index": 0, "error_code": 0, "base_offset": 41, "log_append_time_ms": 1234,
                          "log_start_offset": 0}
    body: Dict[str, Any] = {"responses": [{"name": "t1", "partition_responses": [part, ok]}], "throttle_time_ms": 5}
    if version >= 10:
        # (an absent tagged struct decodes as None in kafka-python, as its defaults with us: both given here)
        ok["current_leader"] = {"leader_id": 2, "leader_epoch": 0}
        body["node_endpoints"] = [{"node_id": 3, "host": "h3", "port": 9093, "rack": None}]
    return body


def end_txn_request(version: int) -> Dict[str, Any]:
    return {"transactional_id": "tid", "producer_id": 2**40 + 7, "producer_epoch": 32766, "committed": True}


def end_txn_response(version: int) -> Dict[str, Any]:
    body = {"throttle_time_ms": 7, "error_code": 0}
    if version >= 5:
        body.update(producer_id=2**40 + 8, producer_epoch=0)  # an exhausted epoch: a new producer id, epoch 0
    return body


def txn_offset_commit_request(version: int) -> Dict[str, Any]:
    body: Dict[str, Any] = {"transactional_id": "tid", "group_id": "g", "producer_id": 1001, "producer_epoch": 4,
                            "topics": [{"name": "in", "partitions": [
                                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 2,
                                 "committed_metadata": None},
                                {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": -1,
                                 "committed_metadata": "m"}]}]}
    if version >= 3:
        body.update(generation_id=5, member_id="member-1", group_instance_id="instance-1")
    return body


def txn_offset_commit_response(version: int) -> Dict[str, Any]:
    return {"throttle_time_ms": 0, "topics": [{"name": "in", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 48}]}]}


CASES = [(m.PRODUCE, produce_request, produce_response),
         (m.END_TXN, end_txn_request, end_txn_response),
         (m.TXN_OFFSET_COMMIT, txn_offset_commit_request, txn_offset_commit_response)]


def versions_of(api: Api) -> List[int]:
    return list(range(api.min_version, api.max_version + 1))


def drop_absent(api_fields: List[Field], body: Dict[str, Any], version: int) -> Dict[str, Any]:
    """``body`` without the fields ``version`` does not have (kafka-python leaves them out of to_dict)."""
    out = {}
    for f in api_fields:
        if f.name not in body or not f.versions[0] <= version <= f.versions[1]:
            continue
        value = body[f.name]
        sub = f.type.fields if isinstance(f.type, Struct) else f.type
        if isinstance(sub, list) and value is not None:
            value = [drop_absent(sub, v, version) for v in value] if isinstance(value, list) else \
                drop_absent(sub, value, version)
        out[f.name] = value
    return out


@pytest.mark.parametrize("api, request_body, response_body", CASES, ids=[c[0].name for c in CASES])
def test_encoded_by_us_decoded_by_kafkas_schema_and_back(api: Api, request_body: Any, response_body: Any) -> None:
    kp_request, kp_response = KP[api.name]
    for version in versions_of(api):
        for kind, make, kp_cls, encode, decode in (
                ("request", request_body, kp_request, api.encode_request, api.decode_request),
                ("response", response_body, kp_response, api.encode_response, api.decode_response)):
            body = make(version)
            ours = encode(version, body)
            theirs = kp_cls.decode(ours, version=version).to_dict(json=False)
            fields = api.request_fields if kind == "request" else api.response_fields
            assert theirs == drop_absent(fields, decode(version, ours), version), f"{api.name} v{version} {kind}"
            # and the other way: kafka-python encodes the same body to the same bytes, which we decode
            kp_bytes = bytes(kp_build(kp_cls, drop_absent(fields, body, version)).encode(version=version))
            assert kp_bytes == ours, f"{api.name} v{version} {kind}: the two codecs disagree"
            assert decode(version, kp_bytes) == decode(version, ours)


def test_end_txn_v5_response_carries_the_new_producer_id_and_epoch() -> None:
    """Byte by byte as the schema lays it out: throttle (int32), error (int16), producer id (int64), epoch
    (int16), no tagged fields; below v5 the decoder fills -1 for both ids (Java: the defaults)."""
    raw = bytes.fromhex("00000007" "0000" "0000010000000008" "0000" "00")
    assert m.END_TXN.decode_response(5, raw) == {"throttle_time_ms": 7, "error_code": 0,
                                                 "producer_id": 2**40 + 8, "producer_epoch": 0}
    assert m.END_TXN.encode_response(5, end_txn_response(5)) == raw
    v4 = m.END_TXN.decode_response(4, bytes.fromhex("00000000" "0030" "00"))
    assert (v4["error_code"], v4["producer_id"], v4["producer_epoch"]) == (48, -1, -1)


def test_produce_v12_fast_paths_match_the_schema_codec() -> None:
    """v12 has v11's wire form: the hand-written (and compiled) request encoder and response decoder give what
    the generic codec gives; v12 and v11 bytes are identical."""
    body = produce_request(12)
    parts = m.PRODUCE.encode_request_parts(12, body)
    generic = Api.encode_request(m.PRODUCE, 12, body)
    assert b"".join(bytes(p) for p in parts) == generic == Api.encode_request(m.PRODUCE, 11, body)
    for response in (produce_response(12), {"responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 5}]}]}):
        raw = m.PRODUCE.encode_response(12, response)
        assert m.PRODUCE.decode_response(12, raw) == Api.decode_response(m.PRODUCE, 12, raw)
    # a whole request frame with its header: v12 in the header, the body as v11's
    framed = m.encode_request(m.PRODUCE, 12, 9, "c", body)
    header, api, pos = m.decode_request_header(framed)
    assert (header.api_version, api) == (12, m.PRODUCE)
    assert m.PRODUCE.decode_request(12, framed, pos) == body


# --------------------------------------------------------------------------------------------
# ApiVersions' finalized features


def api_versions_response(epoch: int, features: Dict[str, int]) -> Dict[str, Any]:
    return {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 13}], "throttle_time_ms": 0,
            "supported_features": [{"name": "metadata.version", "min_version": 7, "max_version": 27}],
            "finalized_features_epoch": epoch,
            "finalized_features": [{"name": n, "max_version_level": v, "min_version_level": v}
                                   for n, v in features.items()]}


def test_finalized_features_of_an_api_versions_v3_answer() -> None:
    """What Apache Kafka 4.1 answers (kafka-python encodes it from Kafka's schema): transaction.version 2."""
    kp_bytes = bytes(kp_build(kp_metadata.ApiVersionsResponse, api_versions_response(
        13, {"group.version": 1, TRANSACTION_VERSION_FEATURE: 2, "metadata.version": 27})).encode(version=3))
    body = m.API_VERSIONS.decode_response(3, kp_bytes)
    features = finalized_features(body)
    assert features == FinalizedFeatures(13, {"group.version": 1, "transaction.version": 2, "metadata.version": 27})
    assert features.transaction_version == 2 and features.level("group.version") == 1
    assert features.level("no.such.feature") == 0
    # no feature finalized, or an ApiVersions below v3: nothing known
    assert finalized_features(m.API_VERSIONS.decode_response(3, m.API_VERSIONS.encode_response(
        3, {"error_code": 0, "api_keys": []}))) == NO_FINALIZED_FEATURES
    v2 = m.API_VERSIONS.decode_response(2, m.API_VERSIONS.encode_response(2, api_versions_response(5, {"x": 1})))
    assert finalized_features(v2) == NO_FINALIZED_FEATURES
    assert NO_FINALIZED_FEATURES.transaction_version == 0


def test_network_client_exposes_the_newest_finalized_features() -> None:
    """As Java's ApiVersions.update: the features of the answer with the highest features epoch, from any
    broker; an older epoch (a broker that has not caught up) does not replace them; ApiVersions v0-v2 answers
    carry none."""
    env = Env()
    answers = {-1: api_versions_response(3, {TRANSACTION_VERSION_FEATURE: 0}),
               1: api_versions_response(8, {TRANSACTION_VERSION_FEATURE: 2, "group.version": 1}),
               2: api_versions_response(5, {TRANSACTION_VERSION_FEATURE: 1})}

    def api_versions(req: SentRequest) -> Dict[str, Any]:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(env.selector.api_versions.items())]
        return {**answers[req.node_id], "api_keys": keys}

    env.selector.handlers[m.API_VERSIONS.key] = api_versions
    assert env.client.finalized_features == NO_FINALIZED_FEATURES
    env.bootstrap()
    assert env.client.finalized_features.epoch == 3 and env.client.finalized_features.transaction_version == 0
    env.connect(1)
    assert env.client.finalized_features == FinalizedFeatures(8, {"transaction.version": 2, "group.version": 1})
    env.connect(2)  # epoch 5 < 8: kept
    assert env.client.finalized_features.transaction_version == 2
    # the default negotiation stays where it was; transactions v2 asks for more
    assert env.client.api_version(1, m.PRODUCE) == 11
    assert env.client.api_version(1, m.PRODUCE, m.TRANSACTION_V2_VERSIONS[m.PRODUCE.key]) == 12
    assert env.client.api_version(1, m.END_TXN) == 3
    assert env.client.api_version(1, m.END_TXN, 5) == 5
