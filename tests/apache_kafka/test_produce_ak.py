"""Producing to a real Apache Kafka cluster (the shared session cluster, PLAINTEXT): keyed idempotent records
exactly once and in order, every compression codec, headers, records too large for the topic or for the
producer, send_batch() and the AsyncProducer. Everything is read back with an independent consumer
(kafka-python or confluent-kafka), never with kproducer's own decoder alone."""
from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections import Counter, defaultdict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

from kproducer import Producer
from kproducer.aio import AsyncProducer
from kproducer.errors import MessageTooLargeError, RecordTooLargeError
from kproducer.protocol.compression import CODEC_NAMES
from tests.readback import consume, fetch_batches

pytestmark = [pytest.mark.apache_kafka,
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]
log = logging.getLogger(__name__)

Header = Tuple[str, Optional[bytes]]


def confluent_consume(bootstrap: str, topic: str, partitions: Sequence[int], expected: int,
                      timeout: float = 60.0) -> List[Any]:
    """Read ``partitions`` of ``topic`` from the beginning with confluent-kafka (librdkafka, its own codecs)
    until ``expected`` records or ``timeout``, then poll a little more so that extra records would show."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kproducer-tests-readback",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_uncommitted", "enable.partition.eof": False})
    got: List[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=5000, timeout=0.2):
                assert m.error() is None, m.error()
                got.append(m)
        for m in consumer.consume(num_messages=5000, timeout=0.5):
            assert m.error() is None, m.error()
            got.append(m)
    finally:
        consumer.close()
    return got


def by_partition(records: List[Any]) -> Dict[int, List[Any]]:
    """kafka-python records grouped by partition, each list in offset order."""
    out: Dict[int, List[Any]] = defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r.offset)
    return out


# --------------------------------------------------------------------------------------------- idempotence


def test_keyed_idempotent_records_exactly_once_in_key_order(apache_kafka: Any,
                                                           ak_topic: Callable[..., str]) -> None:
    n, nkeys = 20_000, 50
    topic = ak_topic(partitions=6, config={"min.insync.replicas": "2"})
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers, linger_ms=5) as p:
        assert p.config.enable_idempotence and p.config.acks == -1
        futures = [p.send(topic, str(i).encode(), key=f"k{i % nkeys}".encode()) for i in range(n)]
        p.flush(120)
        sent = [f.get(0) for f in futures]
    assert len({(m.partition, m.offset) for m in sent}) == n
    got = consume(apache_kafka.bootstrap_servers, topic, range(6), expected=n, timeout=120)
    assert len(got) == n
    values = Counter(r.value for r in got)
    assert not [v for v, c in values.items() if c > 1], "duplicates read back"
    assert set(values) == {str(i).encode() for i in range(n)}
    per_key: Dict[bytes, List[int]] = defaultdict(list)
    partition_of: Dict[bytes, int] = {}
    for part, records in by_partition(got).items():
        for r in records:
            assert partition_of.setdefault(r.key, part) == part, f"key {r.key!r} in two partitions"
            per_key[r.key].append(int(r.value))
    assert len(per_key) == nkeys
    for k in range(nkeys):
        assert per_key[f"k{k}".encode()] == list(range(k, n, nkeys)), f"key k{k} out of send order"
    # the futures' offsets are the offsets the consumer saw
    offsets = {(r.partition, r.offset): int(r.value) for r in got}
    assert all(offsets[(m.partition, m.offset)] == i for i, m in enumerate(sent))


# --------------------------------------------------------------------------------------------- compression


def _codec_available(name: str) -> bool:
    module = {"snappy": "snappy", "lz4": "lz4.frame", "zstd": "zstandard"}.get(name)
    if module is None:
        return True
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codec_read_back(apache_kafka: Any, ak_topic: Callable[..., str], codec: str) -> None:
    if not _codec_available(codec):
        pytest.skip(f"the Python library for {codec} is not installed")
    n = 3000
    topic = ak_topic(partitions=2)
    values = [(f"record {i} " + "abcdefgh" * (i % 40)).encode() for i in range(n)]
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers, compression_type=codec, linger_ms=20) as p:
        futures = [p.send(topic, v, key=f"k{i % 7}".encode(), headers=[("i", str(i).encode())])
                   for i, v in enumerate(values)]
        p.flush(60)
        for f in futures:
            f.get(0)
    got = confluent_consume(apache_kafka.bootstrap_servers, topic, [0, 1], expected=n)
    assert len(got) == n
    assert sorted(m.value() for m in got) == sorted(values)
    for m in got:
        ((name, idx),) = m.headers()
        assert name == "i" and m.value() == values[int(idx)]
        assert m.key() == f"k{int(idx) % 7}".encode()
    # the broker kept the producer's codec (topic compression.type=producer): the batches are compressed
    codecs = set()
    for part in (0, 1):
        batches, _ = fetch_batches(apache_kafka.bootstrap_servers.split(",")[0], topic, part)
        codecs |= {b.compression for b in batches}
    assert {CODEC_NAMES[c] for c in codecs} == {codec}


# --------------------------------------------------------------------------------------------- headers

HEADER_CASES: List[List[Header]] = [
    [("a", b"1"), ("a", b"2"), ("a", b"1")],  # repeated names, kept in order
    [("none", None), ("empty", b""), ("bin", bytes(range(256)))],
    [("ünïcödé-名前", b"\x00\xff\x00"), ("", b"empty name")],
    [("k" * 300, b"v" * 5000)],
    [],
]


def test_headers_read_back_byte_exact(apache_kafka: Any, ak_topic: Callable[..., str]) -> None:
    topic = ak_topic(partitions=1)
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers) as p:
        futures = [p.send(topic, f"v{i}".encode(), headers=h or None) for i, h in enumerate(HEADER_CASES)]
        p.flush(30)
        for f in futures:
            f.get(0)
    expected = {f"v{i}".encode(): h for i, h in enumerate(HEADER_CASES)}
    got = consume(apache_kafka.bootstrap_servers, topic, [0], expected=len(HEADER_CASES))
    assert len(got) == len(HEADER_CASES)
    for r in got:  # kafka-python: a list of (str, bytes or None)
        assert [(k, v) for k, v in r.headers] == expected[r.value]
    got2 = confluent_consume(apache_kafka.bootstrap_servers, topic, [0], expected=len(HEADER_CASES))
    assert len(got2) == len(HEADER_CASES)
    for m in got2:  # confluent-kafka: None when there are no headers
        assert list(m.headers() or []) == expected[m.value()]


# --------------------------------------------------------------------------------------------- too large


def test_record_over_topic_max_message_bytes_fails_alone(apache_kafka: Any, ak_topic: Callable[..., str]
                                                         ) -> None:
    """A record bigger than the topic's max.message.bytes (far below the producer's max.request.size, so
    kproducer's own check lets it through): Apache Kafka answers MESSAGE_TOO_LARGE for the batch. Batches of
    several records are split (KIP-126) until only the big record's own batch fails; every other record of
    the partition, before and after it, is written exactly once and in order."""
    topic = ak_topic(partitions=1, config={"max.message.bytes": "2048"})
    small = [f"small-{i:03d}-".encode() + b"x" * 80 for i in range(60)]
    big = b"B" * 6000
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers, linger_ms=50, retries=10) as p:
        p.send(topic, b"warm-up").get(30)  # metadata and producer id in place: the rest goes in few batches
        before = [p.send(topic, v) for v in small[:30]]
        big_future = p.send(topic, big)
        after = [p.send(topic, v) for v in small[30:]]
        p.flush(60)
        err = big_future.exception(0)
        log.info("the record over max.message.bytes failed with %r", err)
        assert isinstance(err, MessageTooLargeError) and err.code == 10
        assert RecordTooLargeError is MessageTooLargeError
        assert "max.request.size" not in str(err)  # the broker's answer, not kproducer's own size check
        mds = [f.get(0) for f in before + after]
        assert [m.offset for m in mds] == list(range(1, 61))
        assert p.metrics()["batch-split-total"] >= 1
    got = consume(apache_kafka.bootstrap_servers, topic, [0], expected=61)
    assert [r.value for r in got] == [b"warm-up"] + small


def test_record_over_max_request_size_fails_in_the_producer(apache_kafka: Any, ak_topic: Callable[..., str]
                                                            ) -> None:
    """A record over the producer's max.request.size never reaches the broker: kproducer fails its future at
    once with MessageTooLargeError naming the setting; the records around it are delivered."""
    topic = ak_topic(partitions=1)
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers, max_request_size=10_000) as p:
        first = p.send(topic, b"a")
        big = p.send(topic, b"B" * 20_000)
        assert big.done()
        err = big.exception(0)
        assert isinstance(err, MessageTooLargeError) and "max.request.size" in str(err)
        last = p.send(topic, b"b")
        p.flush(30)
        assert [first.get(0).offset, last.get(0).offset] == [0, 1]
    got = consume(apache_kafka.bootstrap_servers, topic, [0], expected=2)
    assert [r.value for r in got] == [b"a", b"b"]


# --------------------------------------------------------------------------------------------- bulk and asyncio


def test_send_batch_read_back(apache_kafka: Any, ak_topic: Callable[..., str]) -> None:
    n = 5000
    topic = ak_topic(partitions=3)
    values = [f"b{i}".encode() for i in range(n)]
    keys = [f"k{i % 11}".encode() for i in range(n)]
    headers: List[Optional[List[Header]]] = [[("n", str(i).encode())] if i % 3 == 0 else None for i in range(n)]
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers) as p:
        mds = p.send_batch(topic, values, keys=keys, headers=headers).get(60)
        keyless = p.send_batch(topic, [b"x0", b"x1", b"x2"], partition=2).get(30)
    assert [m.partition for m in keyless] == [2, 2, 2]
    assert len({(m.partition, m.offset) for m in mds + keyless}) == n + 3
    got = consume(apache_kafka.bootstrap_servers, topic, [0, 1, 2], expected=n + 3)
    assert len(got) == n + 3
    where = {(r.partition, r.offset): r for r in got}
    for i, m in enumerate(mds):
        r = where[(m.partition, m.offset)]
        assert (r.key, r.value) == (keys[i], values[i])
        assert [(k, v) for k, v in r.headers] == (headers[i] or [])
    per_key: Dict[bytes, List[int]] = defaultdict(list)
    for records in by_partition([r for r in got if r.key is not None]).values():
        for r in records:
            per_key[r.key].append(int(r.value[1:]))
    for k in range(11):
        assert per_key[f"k{k}".encode()] == list(range(k, n, 11))
    assert [r.value for r in by_partition(got)[2] if r.key is None] == [b"x0", b"x1", b"x2"]


def test_async_producer_read_back(apache_kafka: Any, ak_topic: Callable[..., str]) -> None:
    n = 3000
    topic = ak_topic(partitions=3)

    async def produce() -> List[Any]:
        async with AsyncProducer(bootstrap_servers=apache_kafka.bootstrap_servers, linger_ms=5) as p:
            futures = [await p.send(topic, f"a{i}".encode(), key=f"k{i % 13}".encode()) for i in range(n)]
            futures.append(await p.send(topic, b"with-headers", key=b"h", headers=[("x", b"1"), ("y", None)]))
            mds = list(await asyncio.wait_for(asyncio.gather(*futures), 60))
            mds.append(await p.send_and_wait(topic, b"last", key=b"h"))
            bulk = await p.send_batch(topic, [b"c0", b"c1"], keys=[b"h", b"h"])
            mds.extend((await asyncio.wait_for(bulk, 60)).get(0))
            return mds

    mds = asyncio.run(produce())
    total = n + 4
    assert len({(m.partition, m.offset) for m in mds}) == total
    got = consume(apache_kafka.bootstrap_servers, topic, [0, 1, 2], expected=total)
    assert len(got) == total
    assert sorted(r.value for r in got) == sorted([f"a{i}".encode() for i in range(n)] +
                                                  [b"with-headers", b"last", b"c0", b"c1"])
    per_key: Dict[bytes, List[bytes]] = defaultdict(list)
    for records in by_partition(got).values():
        for r in records:
            per_key[r.key].append(r.value)
    assert per_key[b"h"] == [b"with-headers", b"last", b"c0", b"c1"]
    for k in range(13):
        assert per_key[f"k{k}".encode()] == [f"a{i}".encode() for i in range(k, n, 13)]
    (h,) = [r for r in got if r.value == b"with-headers"]
    assert [(k, v) for k, v in h.headers] == [("x", b"1"), ("y", None)]
