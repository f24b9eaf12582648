"""The sans-IO protocol layer against a real broker (tansu), over a plain blocking socket.

Requests are framed by hand (4-byte big-endian size, then header + body); record batches come from
RecordBatchBuilder; kafka-python's consumer reads back what was produced, byte for byte.
"""
from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

from kproducer.protocol.compression import CODEC_GZIP, CODEC_NONE
from kproducer.protocol.messages import (
    API_VERSIONS,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    decode_response,
    decode_response_header,
    encode_request,
    negotiate_version,
)
from kproducer.protocol.messages.api_versions import decode_api_versions
from kproducer.protocol.records import RecordBatchBuilder, read_batches
from kproducer.protocol.schema import Api

pytestmark = [
    pytest.mark.broker,
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

ZERO_UUID = uuid.UUID(int=0)
IO_TIMEOUT = 10.0
MAX_FRAME = 64 * 1024 * 1024

Header = Tuple[str, Optional[bytes]]
# (timestamp ms, key, value, headers)
Rec = Tuple[int, Optional[bytes], Optional[bytes], List[Header]]


class Conn:
    """One blocking connection to the broker; every read and write is bounded by IO_TIMEOUT."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        assert host == "127.0.0.1"
        self.sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT)
        self.sock.settimeout(IO_TIMEOUT)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recv_exactly(self, n: int) -> bytes:
        deadline = time.monotonic() + IO_TIMEOUT
        chunks: List[bytes] = []
        got = 0
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete response within {IO_TIMEOUT}s")
            chunk = self.sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise ConnectionError(f"broker closed the connection after {got} of {n} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def roundtrip(self, api: Api, version: int, body: Dict[str, Any]) -> Tuple[int, bytes]:
        """Send one request; return (correlation id sent, raw response payload)."""
        self.correlation_id += 1
        frame = encode_request(api, version, self.correlation_id, "kproducer-tests", body)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", self._recv_exactly(4))
        assert 0 < size <= MAX_FRAME, f"bad response size {size}"
        return self.correlation_id, self._recv_exactly(size)

    def request(self, api: Api, version: int, body: Dict[str, Any]) -> Dict[str, Any]:
        sent, payload = self.roundtrip(api, version, body)
        if api is API_VERSIONS:
            corr, pos = decode_response_header(api, version, payload)
            decoded_as, resp = decode_api_versions(version, payload, pos)
            assert decoded_as == version, resp
        else:
            corr, resp = decode_response(api, version, payload)
        assert corr == sent
        return resp


@pytest.fixture
def conn(tansu: Any) -> Any:
    c = Conn(tansu.bootstrap)
    try:
        yield c
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# ApiVersions and Metadata


@pytest.mark.parametrize("version", [3, 0])
def test_api_versions(conn: Conn, version: int) -> None:
    body = {"client_software_name": "kproducer-tests", "client_software_version": "0.0.1"} if version >= 3 else {}
    resp = conn.request(API_VERSIONS, version, body)
    assert resp["error_code"] == 0
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
    for key in (0, 3, 18, 22):
        assert key in ranges, f"api {key} missing from {ranges}"
        lo, hi = ranges[key]
        assert 0 <= lo <= hi
    assert ranges[0][1] >= 11 and ranges[3][1] >= 12 and ranges[18][1] >= 3
    assert negotiate_version(PRODUCE, *ranges[0]) == 11
    assert negotiate_version(METADATA, *ranges[3]) == 12
    assert negotiate_version(API_VERSIONS, *ranges[18]) == 3
    assert negotiate_version(INIT_PRODUCER_ID, *ranges[22]) is not None


def test_two_requests_on_one_connection_keep_correlation_ids(conn: Conn) -> None:
    a = conn.request(API_VERSIONS, 3, {"client_software_name": "a", "client_software_version": "1"})
    b = conn.request(API_VERSIONS, 2, {})
    assert a["error_code"] == b["error_code"] == 0
    assert conn.correlation_id == 2


def _metadata_topics(version: int, topic: Optional[str]) -> Optional[List[Dict[str, Any]]]:
    if topic is None:
        return None
    entry: Dict[str, Any] = {"name": topic}
    if version >= 10:
        entry["topic_id"] = ZERO_UUID
    return [entry]


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_metadata(conn: Conn, tansu: Any, new_topic: Any, version: int) -> None:
    topic = new_topic(partitions=6)
    body = {"topics": _metadata_topics(version, topic), "allow_auto_topic_creation": False}
    resp = conn.request(METADATA, version, body)
    brokers = {b["node_id"]: b for b in resp["brokers"]}
    assert brokers, resp
    assert any(b["host"] == "127.0.0.1" and b["port"] == tansu.port for b in brokers.values()), brokers
    topics = {t["name"]: t for t in resp["topics"]}
    assert list(topics) == [topic]
    t = topics[topic]
    assert t["error_code"] == 0
    assert t["is_internal"] is False
    parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
    assert [p["partition_index"] for p in parts] == list(range(6))
    for p in parts:
        assert p["error_code"] == 0
        assert p["leader_id"] in brokers
        assert p["leader_id"] in p["replica_nodes"]
    if version >= 10:
        assert t["topic_id"] != ZERO_UUID
    if version < 7:
        assert all(p["leader_epoch"] == -1 for p in parts)  # absent: the default


@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_all_topics(conn: Conn, new_topic: Any, version: int) -> None:
    topic = new_topic(partitions=6)
    resp = conn.request(METADATA, version, {"topics": None})
    names = [t["name"] for t in resp["topics"]]
    assert topic in names


# --------------------------------------------------------------------------------------------
# Produce, then consume with kafka-python


def _build(records: Sequence[Rec], compression: int = CODEC_NONE, producer_id: int = -1,
           producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    builder = RecordBatchBuilder(capacity=1 << 20, compression=compression)
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.try_append(ts, key, value, headers) == i
    batch = builder.build(producer_id, producer_epoch, base_sequence)
    # our own reader agrees with what we built
    (decoded,) = read_batches(batch)
    assert [(r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == [
        (ts, k, v, list(h)) for ts, k, v, h in records]
    return batch


def _produce(conn: Conn, version: int, topic: str, partition: int, batch: bytes,
             transactional_id: Optional[str] = None) -> int:
    resp = conn.request(PRODUCE, version, {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    })
    assert len(resp["responses"]) == 1
    topic_resp = resp["responses"][0]
    assert topic_resp["name"] == topic
    (pr,) = topic_resp["partition_responses"]
    assert pr["index"] == partition
    assert pr["error_code"] == 0, pr
    assert pr["base_offset"] >= 0
    if version >= 8:
        assert pr["record_errors"] == []
    return int(pr["base_offset"])


def _records(tag: str, now: int) -> List[Rec]:
    """A varied set of records: keys, null keys, values, null and empty values, headers, timestamps."""
    return [
        (now, f"{tag}-k0".encode(), f"{tag}-value-0".encode(), []),
        (now + 5, None, b"keyless value", [("h1", b"v1"), ("h2", b"")]),
        (now + 7, f"{tag}-k2".encode(), None, [("null-header", None)]),  # tombstone
        (now - 1000, b"", b"", []),  # older than the first record; empty key and value
        (now - 40 * 24 * 3600 * 1000, b"\x00\xff\x01", bytes(range(256)), [  # delta beyond int32
            ("ключ-🔑", b"\x00\x01"), ("dup", b"1"), ("dup", b"2"), ("日本語", None)]),
        (now + 3, b"k" * 300, b"v" * 20000, [("big", b"x" * 1000)]),
        (now + 1, f"{tag}-last".encode(), "ünïcødé välue ✓".encode(), [("", b"empty key")]),
    ]


def _consume(bootstrap: str, topic: str, partitions: Sequence[int], expected_count: int,
             timeout: float = 30.0) -> List[Any]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
        fetch_max_wait_ms=50,
        request_timeout_ms=15000,
        client_id="kproducer-tests-consumer",
    )
    got: List[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while len(got) < expected_count and time.monotonic() < deadline:
            for _tp, msgs in consumer.poll(timeout_ms=500).items():
                got.extend(msgs)
    finally:
        consumer.close()
    return got


def _assert_consumed(consumed: List[Any], expected: Dict[Tuple[int, int], Rec]) -> None:
    by_pos = {(m.partition, m.offset): m for m in consumed}
    assert len(by_pos) == len(consumed), "duplicate records consumed"
    assert sorted(by_pos) == sorted(expected), (sorted(by_pos), sorted(expected))
    for pos, (ts, key, value, headers) in expected.items():
        m = by_pos[pos]
        assert m.key == key, pos
        assert m.value == value, pos
        assert [(k, v) for k, v in m.headers] == list(headers), pos
        assert m.timestamp == ts, pos
        assert m.timestamp_type == 0, pos  # CreateTime


def test_produce_versions_then_consume(conn: Conn, tansu: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=6)
    now = int(time.time() * 1000) - 60_000
    expected: Dict[Tuple[int, int], Rec] = {}
    plan = [
        # (produce version, partition, compression)
        (3, 0, CODEC_NONE),
        (7, 1, CODEC_GZIP),
        (9, 2, CODEC_NONE),
        (11, 3, CODEC_NONE),
        # two batches to the same partition: the second base offset follows the first batch
        (3, 5, CODEC_NONE),
        (9, 5, CODEC_GZIP),
        (11, 5, CODEC_NONE),
    ]
    last_base: Dict[int, int] = {}
    for i, (version, partition, codec) in enumerate(plan):
        recs = _records(f"v{version}-p{partition}-{i}", now + i * 100)
        base = _produce(conn, version, topic, partition, _build(recs, codec))
        if partition in last_base:
            assert base == last_base[partition] + len(recs)
        else:
            assert base == 0
        last_base[partition] = base
        for j, rec in enumerate(recs):
            expected[(partition, base + j)] = rec
    consumed = _consume(tansu.bootstrap, topic, range(6), len(expected))
    _assert_consumed(consumed, expected)


def test_init_producer_id_and_idempotent_produce(conn: Conn, tansu: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=6)
    resp = conn.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert resp["error_code"] == 0, resp
    pid, epoch = resp["producer_id"], resp["producer_epoch"]
    assert pid >= 0 and epoch >= 0
    now = int(time.time() * 1000)
    expected: Dict[Tuple[int, int], Rec] = {}
    sequence = 0
    for version in (11, 9):
        recs = _records(f"idem-{version}", now)
        batch = _build(recs, producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
        (header,) = read_batches(batch)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, epoch, sequence)
        base = _produce(conn, version, topic, 4, batch)
        assert base == sequence  # a fresh partition: offsets follow the sequence numbers
        for j, rec in enumerate(recs):
            expected[(4, base + j)] = rec
        sequence += len(recs)
    consumed = _consume(tansu.bootstrap, topic, [4], len(expected))
    _assert_consumed(consumed, expected)


def test_init_producer_id_v5(conn: Conn) -> None:
    resp = conn.request(INIT_PRODUCER_ID, 5, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert resp["error_code"] == 0 and resp["producer_id"] >= 0
