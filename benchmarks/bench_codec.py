"""Micro-benchmarks of the message codec on the produce path (pytest-benchmark).

Run:  python -m pytest benchmarks/bench_codec.py --benchmark-enable -q

A Produce request is encoded once per request (a set of batches), not per record; the strict encoder
(unknown and missing fields are refused) must keep this small against the records it carries.

- Produce v9 and v11 request bodies with 1 topic x 1 partition, and 10 topics x 10 partitions
  (16 KB record sections, which are copied as bytes)
- Produce v11 response decode, 10 x 10 partitions
"""
from __future__ import annotations

from typing import Any, Dict

import pytest

from kproducer.protocol.messages import PRODUCE

RECORDS = b"r" * 16384


def _request(topics: int, partitions: int) -> Dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": f"topic-{t}", "partition_data": [{"index": p, "records": RECORDS} for p in range(partitions)]}
        for t in range(topics)]}


@pytest.mark.parametrize("version", [9, 11])
@pytest.mark.parametrize("shape", [(1, 1), (10, 10)], ids=["1x1", "10x10"])
def test_produce_request_encode(benchmark: Any, version: int, shape: Any) -> None:
    body = _request(*shape)
    data = benchmark(PRODUCE.encode_request, version, body)
    assert PRODUCE.decode_request(version, data)["topic_data"][0]["name"] == "topic-0"


def test_produce_response_decode(benchmark: Any) -> None:
    body = {"responses": [{"name": f"topic-{t}", "partition_responses": [
        {"index": p, "error_code": 0, "base_offset": 1000 * p, "log_append_time_ms": -1, "log_start_offset": 0}
        for p in range(10)]} for t in range(10)]}
    data = PRODUCE.encode_response(11, body)
    got = benchmark(PRODUCE.decode_response, 11, data)
    assert len(got["responses"]) == 10
