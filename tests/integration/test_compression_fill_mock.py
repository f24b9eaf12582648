"""Compressed batches fill to batch.size *compressed* on the MockCluster (issue 12): the batches the broker
stored (read raw with Fetch) are within 10% of batch.size for gzip, snappy, lz4 and zstd on JSON-like values,
with send() and with send_batch(); the records read back with kafka-python; bytes on the wire
(``byte-ack-total``) are the stored batches' bytes; a compressed batch the broker refuses as too large is split
and delivered."""
from __future__ import annotations

import json
import random
from typing import Any, Iterator, List

import pytest

from kproducer import Producer
from kproducer.mock import MockCluster
from kproducer.protocol.compression import codec_from_name, is_codec_available
from kproducer.protocol.records import RecordBatch
from tests.readback import consume, fetch_batches

pytestmark = [pytest.mark.timeout(120)]

BATCH_SIZE = 16384
N = 12_000  # ~1.5 MB of values: about 20 full batches with gzip, 40 with lz4
CODECS = ["gzip", "snappy", "lz4", "zstd"]
WAIT = 30.0


def json_values(n: int, seed: int = 3) -> Iterator[bytes]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "order", "user", "click", "view", "cart", "pay"]
    for i in range(n):
        yield json.dumps({"id": i, "user": f"user-{rng.randrange(10000)}", "event": rng.choice(words),
                          "ts": 1700000000000 + i * 7, "amount": round(rng.random() * 1000, 2),
                          "tags": [rng.choice(words) for _ in range(rng.randrange(1, 4))],
                          "ok": rng.random() < 0.9}).encode()


def require(codec_name: str) -> None:
    if not is_codec_available(codec_from_name(codec_name)):
        pytest.skip(f"{codec_name}: its compression library is not installed in this environment")


def stored_batches(cluster: MockCluster, topic: str) -> List[RecordBatch]:
    batches: List[RecordBatch] = fetch_batches(cluster.bootstrap_servers, topic, 0)[0]
    return batches


@pytest.mark.parametrize("mode", ["send", "send_batch"])
@pytest.mark.parametrize("codec_name", CODECS)
def test_compressed_batches_fill_to_batch_size(codec_name: str, mode: str, no_internal_errors: None) -> None:
    require(codec_name)
    values = list(json_values(N))
    with MockCluster(1) as cluster:
        cluster.create_topic("fill", 1)
        # linger.ms is long: only full batches are sent before flush() sends the last one
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "compression.type": codec_name,
                             "batch.size": BATCH_SIZE, "linger.ms": 60_000})
        try:
            futures: List[Any]
            if mode == "send":
                futures = [producer.send("fill", v) for v in values]
            else:
                futures = [producer.send_batch("fill", values[i:i + 2000]) for i in range(0, N, 2000)]
            producer.flush(WAIT)
            for f in futures:
                f.get(WAIT)
            metrics = producer.metrics()
        finally:
            producer.close(WAIT)
        batches = stored_batches(cluster, "fill")
        assert sum(b.record_count for b in batches) == N
        assert all(b.compression == codec_from_name(codec_name) for b in batches)
        full = [b.size for b in batches[:-1]]  # the last one was sent by flush()
        assert len(full) >= 10
        assert all(0.9 * BATCH_SIZE <= s <= 1.1 * BATCH_SIZE for s in full), full
        # bytes on the wire as the producer counts them: the batches as stored
        assert metrics["byte-ack-total"] == sum(b.size for b in batches)
        assert metrics["batch-split-total"] == 0
        if mode == "send":
            got = consume(cluster.bootstrap_servers, "fill", [0], N)
            assert [r.value for r in got] == values


def test_uncompressed_batches_still_stop_at_batch_size(no_internal_errors: None) -> None:
    values = list(json_values(3000))
    with MockCluster(1) as cluster:
        cluster.create_topic("plain", 1)
        with Producer({"bootstrap.servers": cluster.bootstrap_servers, "batch.size": BATCH_SIZE,
                       "linger.ms": 60_000}) as producer:
            for v in values:
                producer.send("plain", v)
            producer.flush(WAIT)
        batches = stored_batches(cluster, "plain")
        assert sum(b.record_count for b in batches) == len(values)
        assert all(b.size <= BATCH_SIZE for b in batches)
        assert all(b.size >= 0.9 * BATCH_SIZE for b in batches[:-1])


def test_a_compressed_batch_the_broker_finds_too_large_is_split_and_delivered(no_internal_errors: None) -> None:
    """The broker accepts batches of up to 8 KB only: the full (~16 KB compressed) batches come back with
    MESSAGE_TOO_LARGE, are split (and the estimate reset to 1.0, as Java) until they fit, and every record
    arrives once, in order."""
    require("gzip")
    values = list(json_values(4000))
    with MockCluster(1, max_message_bytes=8000) as cluster:
        cluster.create_topic("split", 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "compression.type": "gzip",
                             "batch.size": BATCH_SIZE, "linger.ms": 60_000})
        try:
            futures = [producer.send("split", v) for v in values]
            producer.flush(WAIT)
            offsets = [f.get(WAIT).offset for f in futures]
            splits = producer.metrics()["batch-split-total"]
        finally:
            producer.close(WAIT)
        assert splits >= 1
        assert offsets == list(range(len(values)))
        batches = stored_batches(cluster, "split")
        assert all(b.size <= 8000 for b in batches)
        got = consume(cluster.bootstrap_servers, "split", [0], len(values))
        assert [r.value for r in got] == values
