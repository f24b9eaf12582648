"""The Produce fast paths (kproducer.protocol.messages.produce.ProduceApi) against the generic schema codec:
byte-identical requests and equal decoded responses at every version, including the cases handed back to the
generic codec (tagged fields, record errors, odd types, malformed data)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kproducer.protocol import messages as m
from kproducer.protocol.accel import records as records_c
from kproducer.protocol.errors import ProtocolError
from kproducer.protocol.messages.produce import _join_record_parts
from kproducer.protocol.schema import Api, SchemaError

PRODUCE = m.PRODUCE
VERSIONS = list(range(PRODUCE.min_version, PRODUCE.max_version + 1))

names = st.text(min_size=0, max_size=140)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
records = st.one_of(st.none(), st.binary(max_size=300), st.binary(max_size=300).map(memoryview))

request_bodies = st.fixed_dictionaries({
    "transactional_id": st.one_of(st.none(), names),
    "acks": int16,
    "timeout_ms": int32,
    "topic_data": st.lists(st.fixed_dictionaries({
        "name": names,
        "partition_data": st.lists(st.fixed_dictionaries({"index": int32, "records": records}), max_size=4),
    }), max_size=3),
})


def _generic_encode(version: int, body: Dict[str, Any]) -> bytes:
    return Api.encode_request(PRODUCE, version, body)


def _generic_decode(version: int, data: bytes, pos: int = 0) -> Dict[str, Any]:
    return Api.decode_response(PRODUCE, version, data, pos)


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(VERSIONS), body=request_bodies)
def test_fast_request_encoding_is_byte_identical(version: int, body: Dict[str, Any]) -> None:
    assert PRODUCE.encode_request(version, body) == _generic_encode(version, body)


def test_a_request_the_fast_path_does_not_take_is_encoded_by_the_schema_codec() -> None:
    body = {"acks": -1, "timeout_ms": 30000, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"xyz"}]}]}  # no transactional_id: the generic codec's default (null)
    for version in VERSIONS:
        assert PRODUCE.encode_request(version, body) == _generic_encode(version, body)
    with pytest.raises(TypeError):
        PRODUCE.encode_request(9, {**body, "transactional_id": None, "acks": "all"})


def _partition(index: int, code: int, base: int, append_ms: int, start: int,
               errors: List[Dict[str, Any]], message: Optional[str], leader: Optional[Dict[str, int]]) -> Dict[str, Any]:
    p: Dict[str, Any] = {"index": index, "error_code": code, "base_offset": base, "log_append_time_ms": append_ms,
                         "log_start_offset": start, "record_errors": errors, "error_message": message}
    if leader is not None:
        p["current_leader"] = leader
    return p


partitions = st.builds(
    _partition, int32, int16, int64, int64, int64,
    st.one_of(st.just([]), st.lists(st.fixed_dictionaries({
        "batch_index": int32, "batch_index_error_message": st.one_of(st.none(), names)}), max_size=2)),
    st.one_of(st.none(), names),
    st.one_of(st.none(), st.fixed_dictionaries({"leader_id": int32, "leader_epoch": int32})),
)

response_bodies = st.fixed_dictionaries({
    "responses": st.lists(st.fixed_dictionaries({
        "name": names, "partition_responses": st.lists(partitions, max_size=4)}), max_size=3),
    "throttle_time_ms": int32,
    "node_endpoints": st.one_of(st.just([]), st.lists(st.fixed_dictionaries({
        "node_id": int32, "host": names, "port": int32, "rack": st.one_of(st.none(), names)}), max_size=2)),
})


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(VERSIONS), body=response_bodies)
def test_fast_response_decoding_equals_the_schema_decoder(version: int, body: Dict[str, Any]) -> None:
    data = PRODUCE.encode_response(version, body)
    assert PRODUCE.decode_response(version, data) == _generic_decode(version, data)
    framed = b"\x00\x00\x00\x07" + data  # decoding from an offset
    assert PRODUCE.decode_response(version, framed, 4) == _generic_decode(version, framed, 4)


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(VERSIONS), body=request_bodies, head=st.binary(max_size=600),
       rest=st.binary(max_size=600))
def test_compiled_request_encoder_is_the_python_fast_path_twin(version: int, body: Dict[str, Any], head: bytes,
                                                               rest: bytes) -> None:
    """The compiled encoder's parts join to the Python fast path's bytes (and the schema codec's), records given
    whole or in parts (a batch's header and a view of its records); it gives up where the Python path does."""
    if records_c is None:
        pytest.skip("the compiled accelerator is not in use")
    store = bytearray(head + rest)
    in_parts = {**body, "topic_data": [*body["topic_data"], {"name": "t", "partition_data": [
        {"index": 1, "records": (head, memoryview(store)[len(head):])},
        {"index": 2, "records": (memoryview(store), bytearray(rest), b"")}]}]}
    for b in (body, in_parts):
        compiled = records_c.encode_produce_request(version, b)
        python = PRODUCE._encode_request_parts(version, b)
        assert compiled is not None
        joined = b"".join(compiled)
        assert joined == b"".join(python) == _generic_encode(version, _join_record_parts(b))
    # the records views are handed over as they are, not copied
    views = [p for p in records_c.encode_produce_request(version, in_parts) if type(p) is memoryview]
    given = [pd["records"] for pd in in_parts["topic_data"][-1]["partition_data"]]
    assert any(v is given[0][1] for v in views) and any(v is given[1][0] for v in views)
    # what the Python fast path hands to the schema codec, the compiled one does too
    for odd in ({**body, "acks": True}, {**body, "extra": 1}, {**body, "topic_data": [{"name": "t"}]},
                {**body, "topic_data": [{"name": "t", "partition_data": [{"index": 2**31, "records": None}]}]},
                {**body, "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": [b"x"]}]}]}):
        assert records_c.encode_produce_request(version, odd) is None
        with pytest.raises(Exception):
            PRODUCE._encode_request_parts(version, odd)


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(VERSIONS), body=response_bodies, cut=st.integers(0, 40))
def test_compiled_response_decoder_is_the_python_fast_path_twin(version: int, body: Dict[str, Any],
                                                                cut: int) -> None:
    """The compiled decoder returns what ProduceApi._decode_response_fast returns, and None exactly where the
    Python fast path gives up (tagged fields, record errors, truncated data) for the generic decoder."""
    if records_c is None:
        pytest.skip("the compiled accelerator is not in use")
    data = b"\x00\x00" + PRODUCE.encode_response(version, body)
    for chunk in (data, data[:len(data) - cut]):
        part, mutable, top = PRODUCE._partition_defaults(version)
        compiled = records_c.decode_produce_response(chunk, 2, version, part, mutable, top)
        try:
            python: Optional[Dict[str, Any]] = PRODUCE._decode_response_fast(version, chunk, 2)
        except Exception:
            python = None
        assert compiled == python


def test_compiled_response_decoder_takes_the_common_case() -> None:
    if records_c is None:
        pytest.skip("the compiled accelerator is not in use")
    body = {"responses": [{"name": "topic", "partition_responses": [
        {"index": i, "error_code": 0, "base_offset": 100 * i, "log_append_time_ms": -1, "log_start_offset": 0}
        for i in range(6)]}], "throttle_time_ms": 3}
    for version in VERSIONS:
        data = PRODUCE.encode_response(version, body)
        part, mutable, top = PRODUCE._partition_defaults(version)
        decoded = records_c.decode_produce_response(data, 0, version, part, mutable, top)
        assert decoded is not None and decoded == _generic_decode(version, data)
        assert [p["base_offset"] for p in decoded["responses"][0]["partition_responses"]] == [0, 100, 200, 300, 400,
                                                                                             500]


def test_decoded_defaults_are_not_shared_between_responses() -> None:
    body = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5}, {"index": 1, "error_code": 0, "base_offset": 6}]}],
        "throttle_time_ms": 0}
    for version in VERSIONS:
        data = PRODUCE.encode_response(version, body)
        first = PRODUCE.decode_response(version, data)
        a, b = first["responses"][0]["partition_responses"]
        a["record_errors"].append("mutated")
        a["current_leader"]["leader_id"] = 99
        first["node_endpoints"].append("mutated")
        again = PRODUCE.decode_response(version, data)
        assert again == _generic_decode(version, data)
        assert b["record_errors"] == [] and b["current_leader"] == {"leader_id": -1, "leader_epoch": -1}


@pytest.mark.parametrize("version", VERSIONS)
def test_malformed_responses_raise_what_the_schema_decoder_raises(version: int) -> None:
    body = {"responses": [{"name": "topic", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5, "error_message": "e"}]}], "throttle_time_ms": 0}
    data = PRODUCE.encode_response(version, body)
    for cut in range(len(data)):
        with pytest.raises(ProtocolError) as fast:
            PRODUCE.decode_response(version, data[:cut])
        with pytest.raises(ProtocolError) as generic:
            _generic_decode(version, data[:cut])
        assert str(fast.value) == str(generic.value)
    # bytes after the last field are skipped, as Java's client does (tests/unit/test_trailing_bytes.py)
    assert PRODUCE.decode_response(version, data + b"\x00") == _generic_decode(version, data)


@settings(max_examples=80, deadline=None)
@given(version=st.sampled_from(VERSIONS), head=st.binary(max_size=61), rest=st.binary(max_size=300),
       tid=st.one_of(st.none(), names))
def test_records_given_in_parts_encode_as_their_join(version: int, head: bytes, rest: bytes,
                                                     tid: Optional[str]) -> None:
    def body(records: Any, acks: Any = -1) -> Dict[str, Any]:
        return {"transactional_id": tid, "acks": acks, "timeout_ms": 30000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records}, {"index": 1, "records": b"x"}]}]}

    expected = _generic_encode(version, body(head + rest))
    assert PRODUCE.encode_request(version, body((head, memoryview(bytearray(rest))))) == expected
    # anything unusual takes the schema codec's path, which is strict: an unknown field is refused there too
    with pytest.raises(SchemaError, match="unknown field 'extra'"):
        PRODUCE.encode_request(version, {**body((head, rest)), "extra": 1})
