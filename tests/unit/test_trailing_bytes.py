"""Bytes after a response's last field (issue 28 item 19): accepted, as Java's client does (it parses the fields
it knows and ignores the rest of the buffer), and logged once per API. librdkafka's mock cluster answers
Metadata v12 with one such byte: kproducer closed the connection ("1 unexpected trailing bytes") and never
got metadata. A request with trailing bytes is still refused (the mock broker's decoding), and so is a
response cut short."""
from __future__ import annotations

import logging
from typing import Any, Dict, Iterator, List

import pytest

from kproducer.protocol import messages as m
from kproducer.protocol import schema
from kproducer.protocol.errors import ProtocolError
from kproducer.protocol.messages.api_versions import decode_api_versions
from tests.protocol_bodies import full_response
from tests.unit.producer_env import ProducerEnv, producer_env
from tests.unit.scripted import Frame, SentRequest

JUNK = [b"\x00", b"\xff\xff", b"garbage!"]
ALL = [(api, v) for api in m.APIS.values() for v in range(api.min_version, api.max_version + 1)]


def _response(api: Any, version: int) -> Dict[str, Any]:
    return full_response(api, version, {})


@pytest.mark.parametrize("api,version", ALL, ids=[f"{a.name}-v{v}" for a, v in ALL])
def test_every_response_with_trailing_bytes_decodes_as_without(api: Any, version: int) -> None:
    body = _response(api, version)
    data = api.encode_response(version, body)
    want = api.decode_response(version, data)
    framed = m.encode_response(api, version, 7, body)
    for junk in JUNK:
        assert api.decode_response(version, data + junk) == want
        assert m.decode_response(api, version, framed + junk) == (7, want)
    if data:
        with pytest.raises(ProtocolError):  # cut short is still malformed
            api.decode_response(version, data[:-1])


def test_requests_with_trailing_bytes_are_still_refused() -> None:
    body = m.METADATA.request_defaults(12)
    body["topics"] = None
    data = m.METADATA.encode_request(12, body)
    with pytest.raises(ProtocolError, match="trailing"):
        m.METADATA.decode_request(12, data + b"\x00")


@pytest.mark.parametrize("version", range(3, m.PRODUCE.max_version + 1))
def test_the_produce_decoders_fast_paths_accept_trailing_bytes(version: int) -> None:
    # Produce's own decoders (the compiled one and its Python twin) hand anything unusual to the generic one
    body = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5}]}],
            "throttle_time_ms": 0}
    data = m.PRODUCE.encode_response(version, full_response(m.PRODUCE, version, body))
    want = m.PRODUCE.decode_response(version, data)
    assert want["responses"][0]["partition_responses"][0]["base_offset"] == 5
    assert m.PRODUCE.decode_response(version, data + b"\x00") == want
    assert m.PRODUCE._decode_response_fast(version, data, 0) == want  # (the twin on a clean answer)


def test_logged_once_per_api(caplog: pytest.LogCaptureFixture) -> None:
    meta = m.METADATA.encode_response(12, _response(m.METADATA, 12)) + b"\x00"
    produce = m.PRODUCE.encode_response(9, _response(m.PRODUCE, 9)) + b"\x00\x00"
    saved = set(schema._TRAILING_LOGGED)
    schema._TRAILING_LOGGED.clear()  # (other tests of this process may have logged them already)
    try:
        with caplog.at_level(logging.DEBUG, logger="kproducer.protocol.schema"):
            for _ in range(3):
                m.METADATA.decode_response(12, meta)
                m.PRODUCE.decode_response(9, produce)
    finally:
        schema._TRAILING_LOGGED.update(saved)
    lines = [r.getMessage() for r in caplog.records if r.name == "kproducer.protocol.schema"]
    assert len(lines) == 2, lines
    assert "Metadata v12 response has 1 bytes after its last field" in lines[0]
    assert "Produce v9 response has 2 bytes after its last field" in lines[1]


def test_api_versions_falls_back_to_v0_for_an_unsupported_version_answer_with_trailing_bytes() -> None:
    # a broker that does not speak the version asked for answers UNSUPPORTED_VERSION as v0
    v0 = m.API_VERSIONS.encode_response(0, {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 2}]})
    version, body = decode_api_versions(3, v0 + b"\x00")
    assert version == 0 and body["error_code"] == 35
    assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 2}]


def test_an_unsupported_version_answer_in_neither_shape_sets_no_throttle() -> None:
    # librdkafka's mock cluster answers ApiVersions v3 with these bytes (seen on the wire): read as v3 (the
    # trailing bytes skipped) the "throttle time" is 1,179,648 ms, which would hold the connection for 20 minutes
    librdkafka = bytes.fromhex("0023" "01" "00120000" "0002" "00" "00000000")
    version, body = decode_api_versions(3, librdkafka)
    assert body["error_code"] == 35 and body["throttle_time_ms"] == 0
    assert version == 3 and body["api_keys"] == []  # (the client asks again with v0)


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"t": [1, 1]})


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())


def test_the_producer_takes_metadata_and_produce_answers_with_a_trailing_byte(env: Env) -> None:
    sel = env.selector
    default_metadata, default_produce = sel._metadata, sel._produce
    answered: List[str] = []

    def with_junk(handler: Any, name: str) -> Any:
        def answer(req: SentRequest) -> Frame:
            answered.append(name)
            body = handler(req)
            return Frame(m.encode_response(req.api, req.version, req.correlation_id, body) + b"\x00")
        return answer

    sel.handlers[m.METADATA.key] = with_junk(default_metadata, "metadata")
    sel.handlers[m.PRODUCE.key] = with_junk(default_produce, "produce")
    p = env.producer(max_block_ms=10000)
    assert len(p.partitions_for("t", timeout=10)) == 2  # (the connection used to be closed: no metadata, ever)
    md = p.send("t", b"v", partition=1).get(30)
    assert md.offset == 0 and sel.log_values(("t", 1)) == [b"v"]
    assert "metadata" in answered and "produce" in answered
