"""Reading back what the producer wrote, independently of it: kafka-python's consumer for records, and raw
Fetch requests for whole batches (control batches included, which consumers hide)."""
from __future__ import annotations

import socket
import struct
import time
from typing import Any, Dict, List, Sequence, Tuple

from kproducer.protocol.messages import FETCH, decode_response, encode_request
from kproducer.protocol.records import RecordBatch, read_batches


def consume(bootstrap: str, topic: str, partitions: Sequence[int], expected: int, timeout: float = 60.0,
            isolation_level: str = "read_uncommitted", **consumer_settings: Any) -> List[Any]:
    """Read ``partitions`` of ``topic`` from the beginning with kafka-python until ``expected`` records or
    ``timeout``; then one more short poll so that extra (unexpected) records would be seen too.
    ``consumer_settings``: more KafkaConsumer arguments (e.g. security_protocol="SSL", ssl_cafile=...)."""
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
        fetch_max_wait_ms=20, consumer_timeout_ms=5000, request_timeout_ms=15000, isolation_level=isolation_level,
        allow_auto_create_topics=False, client_id="kproducer-tests-consumer", **consumer_settings,
    )
    got: List[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=200, max_records=20000).values():
                got.extend(msgs)
        for msgs in consumer.poll(timeout_ms=200, max_records=20000).values():
            got.extend(msgs)
    finally:
        consumer.close()
    return got


def fetch_batches(bootstrap: str, topic: str, partition: int, isolation_level: int = 0,
                  timeout: float = 20.0) -> Tuple[List[RecordBatch], Dict[str, Any]]:
    """Every batch of a partition, control batches included (raw Fetch v11); and the last partition
    response (without records)."""
    host, port = bootstrap.rsplit(":", 1)
    out: List[RecordBatch] = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:

        def recv(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = sock.recv(n - len(buf))
                assert chunk, "broker closed the connection"
                buf += chunk
            return buf

        offset, corr, deadline = 0, 0, time.monotonic() + timeout
        while time.monotonic() < deadline:
            corr += 1
            frame = encode_request(FETCH, 11, corr, "kproducer-tests-fetch", {
                "max_wait_ms": 10, "min_bytes": 1, "max_bytes": 16 << 20, "isolation_level": isolation_level,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 16 << 20}]}],
            })
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", recv(4))
            got_corr, resp = decode_response(FETCH, 11, recv(size))
            assert got_corr == corr
            (pr,) = resp["responses"][0]["partitions"]
            assert pr["error_code"] == 0, pr
            batches = read_batches(pr["records"] or b"", allow_partial_tail=True)
            out.extend(b for b in batches if b.last_offset >= offset)
            if batches:
                offset = batches[-1].last_offset + 1
            end = pr["high_watermark"] if isolation_level == 0 else pr["last_stable_offset"]
            if not batches or offset >= end:
                return out, {k: v for k, v in pr.items() if k != "records"}
        raise AssertionError(f"could not fetch {topic}-{partition} in {timeout}s")
