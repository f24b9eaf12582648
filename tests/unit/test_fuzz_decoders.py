"""Fuzzing the decoders of everything a broker sends: every response decoder of every API and version we
implement, the response header, ApiVersions' fallback decoding, and the Selector's FrameReader.

Random, truncated and oversized input (array counts and lengths far beyond the data) must raise only
ProtocolError (FrameError for frames), and must be refused before anything proportional to the claimed
size is allocated. The network client's side of it (a malformed response closes only its connection and
the producer goes on delivering) is tested in test_network_client.py.
"""
from __future__ import annotations

import struct
import tracemalloc
import uuid
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproducer.errors import ProtocolError
from kproducer.network.selector import FrameError, FrameReader
from kproducer.protocol import messages as m
from kproducer.protocol.messages.api_versions import decode_api_versions
from kproducer.protocol.schema import Api, Field, Struct

FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

RESPONSES: List[Tuple[Api, int]] = [(api, v) for api in sorted(m.APIS.values(), key=lambda a: a.key)
                                    for v in range(api.min_version, api.max_version + 1)]
IDS = [f"{api.name}-v{v}" for api, v in RESPONSES]


# -- sample bodies built from the schemas ---------------------------------------------------------


def _in(version: int, r: Tuple[int, int]) -> bool:
    return r[0] <= version <= r[1]


def _sample_scalar(t: str, i: int) -> Any:
    if t == "bool":
        return i % 2 == 0
    if t == "float64":
        return 1.5
    if t == "uuid":
        return uuid.UUID(int=0x1234 + i)
    if t == "string":
        return f"s{i}"
    if t in ("bytes", "records"):
        return bytes([i % 256]) * 3
    if t == "int8":
        return i % 100
    return 1000 + i


def _sample_fields(fields: List[Field], version: int, depth: int = 0) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for i, f in enumerate(fields):
        if not _in(version, f.versions):
            continue
        t = f.type
        if isinstance(t, list):
            out[f.name] = [_sample_fields(t, version, depth + 1) for _ in range(2 if depth < 2 else 1)]
        elif isinstance(t, Struct):
            out[f.name] = _sample_fields(t.fields, version, depth + 1)
        elif t.startswith("[]"):
            out[f.name] = [_sample_scalar(t[2:], i), _sample_scalar(t[2:], i + 1)]
        else:
            out[f.name] = _sample_scalar(t, i)
    return out


def sample_response(api: Api, version: int) -> bytes:
    """A valid response frame (header + body) with two elements in every array."""
    body = _sample_fields(api.response_fields, version)
    return m.encode_response(api, version, 42, body)


def decode(api: Api, version: int, frame: bytes) -> None:
    """What the network client does with a response frame."""
    _cid, pos = m.decode_response_header(api, version, frame)
    if api is m.API_VERSIONS:
        decode_api_versions(version, frame, pos)
    else:
        api.decode_response(version, frame, pos)


def only_protocol_errors(api: Api, version: int, frame: bytes) -> None:
    try:
        decode(api, version, frame)
    except ProtocolError:
        pass


def test_samples_are_valid() -> None:
    for api, version in RESPONSES:
        decode(api, version, sample_response(api, version))


# -- random and truncated input ------------------------------------------------------------------


@pytest.mark.parametrize("api,version", RESPONSES, ids=IDS)
@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_protocol_errors(api: Api, version: int, data: bytes) -> None:
    only_protocol_errors(api, version, data)


@pytest.mark.parametrize("api,version", RESPONSES, ids=IDS)
def test_every_truncation_of_a_valid_response_is_a_protocol_error(api: Api, version: int) -> None:
    """(With the schema decoder itself: ApiVersions' fallback rightly reads a v1-v2 body cut before its
    throttle_time_ms as the v0 body it then is.)"""
    frame = sample_response(api, version)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            _cid, pos = m.decode_response_header(api, version, frame[:cut])
            api.decode_response(version, frame[:cut], pos)


@pytest.mark.parametrize("api,version", RESPONSES, ids=IDS)
@FUZZ
@given(st.data())
def test_mutated_valid_responses_raise_only_protocol_errors(api: Api, version: int, data: st.DataObject) -> None:
    frame = bytearray(sample_response(api, version))
    for _ in range(data.draw(st.integers(1, 4))):
        if not frame:
            break
        pos = data.draw(st.integers(0, len(frame) - 1))
        kind = data.draw(st.sampled_from(["byte", "int32", "varint", "insert", "delete"]))
        if kind == "byte":
            frame[pos] = data.draw(st.integers(0, 255))
        elif kind == "int32":
            frame[pos:pos + 4] = struct.pack(">i", data.draw(st.sampled_from(
                [-2, -1, 0x7FFFFFFF, 0x10000000, 65535, len(frame)])))
        elif kind == "varint":
            frame[pos:pos + 1] = data.draw(st.sampled_from([b"\xff\xff\xff\xff\x07", b"\xff\xff\xff\xff\x0f",
                                                            b"\x80\x80\x80\x80\x80\x01", b"\xff\x7f"]))
        elif kind == "insert":
            frame[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        else:
            del frame[pos:pos + data.draw(st.integers(1, 8))]
    only_protocol_errors(api, version, bytes(frame))


# -- oversized claims are refused before allocating -----------------------------------------------


HUGE_INT32 = struct.pack(">i", 0x7FFFFFF0)
HUGE_VARINT = b"\xf0\xff\xff\xff\x07"  # 2^31 - 16 as an unsigned varint


@pytest.mark.parametrize("api,version", RESPONSES, ids=IDS)
def test_huge_counts_and_lengths_anywhere_are_refused_without_allocating(api: Api, version: int) -> None:
    """Put a count of ~2^31 (int32 and varint) at every position of a valid response: decoding fails
    with ProtocolError (or succeeds, where the bytes were not a count), and never allocates more than a
    small multiple of the frame."""
    frame = sample_response(api, version)
    tracemalloc.start()
    try:
        worst = 0
        for pos in range(len(frame)):
            for huge in (HUGE_INT32, HUGE_VARINT):
                mutated = frame[:pos] + huge + frame[pos + len(huge):]
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                only_protocol_errors(api, version, mutated)
                worst = max(worst, tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()
    assert worst < 512 * 1024, f"{api.name} v{version}: a decode allocated {worst} bytes"


def test_an_array_count_beyond_the_remaining_bytes_is_refused() -> None:
    # Metadata v1 response: brokers array claiming 2^31-1 entries in a 9-byte frame
    frame = struct.pack(">i", 7) + struct.pack(">i", 0x7FFFFFFF) + b"\x00"
    with pytest.raises(ProtocolError, match="array claims 2147483647 elements"):
        decode(m.METADATA, 1, frame)


# -- FrameReader ---------------------------------------------------------------------------------


@FUZZ
@given(chunks=st.lists(st.binary(max_size=64), max_size=20), limit=st.integers(0, 256))
def test_frame_reader_random_chunks_raise_only_frame_errors(chunks: List[bytes], limit: int) -> None:
    reader = FrameReader(limit)
    try:
        for chunk in chunks:
            for f in reader.feed(chunk):
                assert len(f) <= limit
    except FrameError:
        return
    assert reader.buffered <= sum(len(c) for c in chunks)


@FUZZ
@given(payloads=st.lists(st.binary(max_size=100), max_size=10), cuts=st.lists(st.integers(1, 50), max_size=40))
def test_frame_reader_reassembles_any_split(payloads: List[bytes], cuts: List[int]) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    reader = FrameReader(100)
    out: List[bytes] = []
    pos = 0
    for n in cuts + [len(stream)]:
        out.extend(reader.feed(stream[pos:pos + n]))
        pos += n
    assert out == payloads and reader.buffered == 0


@FUZZ
@given(size=st.one_of(st.integers(-(2 ** 31), -1), st.integers(1025, 2 ** 31 - 1)))
def test_frame_reader_refuses_oversized_and_negative_sizes_before_buffering(size: int) -> None:
    reader = FrameReader(1024)
    tracemalloc.start()
    try:
        with pytest.raises(FrameError):
            reader.feed(struct.pack(">i", size) + b"x" * 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
