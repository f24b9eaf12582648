"""send() and send_batch() admit records by the same rules (kproducer/producer/admission.py).

Every invalid input below goes through both calls on the same producer and must fail with the same exception
type. Where it fails is the documented contract (Producer.send's docstring, admission.FUTURE_ERRORS): send()
reports a metadata timeout, a record too large or a topic's metadata error through the record's future and
callback, and raises everything else; send_batch() raises every error, before it queues anything. The test
checks that contract too, and that nothing was queued or sent either way. Runs on the scripted transport with
the producer's real network thread; waits are bounded (futures with timeouts; max.block.ms of 50 ms where a
case expects the wait for metadata to time out, 30 s elsewhere).
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

import pytest

from kproducer import Producer
from kproducer.errors import (
    InvalidTopicError,
    KafkaTimeoutError,
    MessageTooLargeError,
    ProducerClosedError,
    SerializationError,
    TopicAuthorizationFailedError,
    TransactionError,
)
from kproducer.producer.admission import BOUND_EXTRA, FUTURE_ERRORS, RECORD_OVERHEAD, RecordAdmission, record_size
from kproducer.producer.partitioner import murmur2, partition_for_key
from kproducer.protocol import messages as m
from tests.unit.producer_env import ProducerEnv, producer_env

MAX_REQUEST = 4000


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"t": [1, 1, 1], "secret": [1]})
        default = self.selector.handlers[m.METADATA.key]

        def metadata(req: Any) -> Any:
            body = default(req)
            for t in body["topics"]:
                if t["name"] == "secret":
                    t["error_code"] = 29  # TOPIC_AUTHORIZATION_FAILED
            return body

        self.selector.handlers[m.METADATA.key] = metadata

    def producer(self, block_ms: int = 30_000, **settings: Any) -> Producer:
        settings.setdefault("bootstrap_servers", "broker1:9092")
        settings.setdefault("linger_ms", 60_000)  # nothing leaves unless a test flushes
        settings.setdefault("max_request_size", MAX_REQUEST)
        p = super().producer(**settings)
        p.partitions_for("t", timeout=5)
        p._max_block_ms = int(block_ms)  # metadata is known now: a case that expects a wait to time out makes it short
        return p


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())


def _boom(value: Any) -> bytes:
    raise RuntimeError("cannot serialize")


class _Case:
    """One invalid record: the producer's settings, the record (send()'s arguments), the expected error."""

    def __init__(self, name: str, error: Type[BaseException], settings: Optional[Dict[str, Any]] = None,
                 closed: bool = False, block_ms: int = 30_000, **record: Any) -> None:
        self.block_ms = block_ms
        self.name = name
        self.error = error
        self.settings = settings or {}
        self.closed = closed
        self.record = record

    def __repr__(self) -> str:
        return self.name


def _partition_99(topic: str, key: Optional[bytes], value: Optional[bytes], n: int) -> int:
    return 99


def _partition_true(topic: str, key: Optional[bytes], value: Optional[bytes], n: int) -> bool:
    return True


CASES = [
    _Case("closed producer", ProducerClosedError, closed=True),
    _Case("empty topic", TypeError, topic=""),
    _Case("topic not a str", TypeError, topic=5),
    _Case("illegal topic name", InvalidTopicError, topic="a b"),
    _Case("topic authorization failed", TopicAuthorizationFailedError, topic="secret"),
    _Case("unknown topic (metadata timeout)", KafkaTimeoutError, topic="nowhere", block_ms=50),
    _Case("str value without a serializer", TypeError, value="text"),
    _Case("int key without a serializer", TypeError, key=5),
    _Case("value serializer raises", SerializationError, settings={"value_serializer": _boom}, value="x"),
    _Case("key serializer returns str", SerializationError, settings={"key_serializer": lambda k: "s"}, key="k"),
    _Case("json serializer, not JSON-able", SerializationError, settings={"value_serializer": "json"},
          value=object()),
    _Case("header value is an int", TypeError, headers=[("h", 5)]),
    _Case("header key is not a str", TypeError, headers=[(b"h", b"v")]),
    _Case("headers are not pairs", TypeError, headers=[b"h"]),
    _Case("negative timestamp", ValueError, timestamp_ms=-1),
    _Case("bool timestamp", ValueError, timestamp_ms=True),
    _Case("float timestamp", ValueError, timestamp_ms=1.5),
    _Case("value over max.request.size", MessageTooLargeError, value=b"x" * MAX_REQUEST),
    _Case("headers make it over max.request.size", MessageTooLargeError, value=b"x" * (MAX_REQUEST - 200),
          headers=[("h", b"y" * 300)]),
    _Case("bool partition", ValueError, partition=True),
    _Case("negative partition", ValueError, partition=-1),
    _Case("str partition", ValueError, partition="1"),
    _Case("partition beyond the count (metadata timeout)", KafkaTimeoutError, partition=3, block_ms=50),
    _Case("partitioner returns a partition out of range", ValueError, settings={"partitioner": _partition_99}),
    _Case("partitioner returns a bool", ValueError, settings={"partitioner": _partition_true}),
    _Case("transactional producer outside a transaction", TransactionError,
          settings={"transactional_id": "tx-1"}),
]


def _send_outcome(p: Producer, record: Dict[str, Any]) -> Tuple[BaseException, bool]:
    """send()'s error and whether it came through the future (and callback) rather than raised."""
    calls: List[Tuple[Any, Optional[BaseException]]] = []
    try:
        fut = p.send(callback=lambda md, e: calls.append((md, e)), **record)
    except Exception as e:  # noqa: B902 - the error is what the test compares
        return e, False
    err = fut.exception(5)
    assert err is not None, "send() accepted an invalid record"
    assert calls == [(None, err)]  # the callback got it, on the sending thread, before send() returned
    return err, True


def _batch_outcome(p: Producer, record: Dict[str, Any]) -> BaseException:
    """send_batch()'s error for the same record, placed between two good ones."""
    topic = record.get("topic", "t")
    value = record.get("value", b"v")
    kwargs: Dict[str, Any] = {}
    if "key" in record:
        kwargs["keys"] = [b"k", record["key"], b"k"]
    if "headers" in record:
        kwargs["headers"] = [None, record["headers"], None]
    for name in ("partition", "timestamp_ms"):
        if name in record:
            kwargs[name] = record[name]
    try:
        p.send_batch(topic, [b"good", value, b"good"], **kwargs)
    except Exception as e:  # noqa: B902
        return e
    raise AssertionError("send_batch() accepted an invalid record")


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_send_and_send_batch_refuse_the_same_records_with_the_same_error(env: Env, case: _Case) -> None:
    p = env.producer(case.block_ms, **case.settings)
    if case.closed:
        p.close(timeout=0)
    record = dict(topic="t", value=b"v")
    record.update(case.record)

    send_error, via_future = _send_outcome(p, record)
    batch_error = _batch_outcome(p, record)

    assert type(send_error) is type(batch_error), (send_error, batch_error)
    assert isinstance(send_error, case.error)
    # the contract: send() reports the errors about the record and the cluster through the future, raises the rest
    assert via_future == isinstance(send_error, FUTURE_ERRORS)
    if not case.closed:
        assert p._accumulator.queued_batches() == 0
    assert env.selector.sent(m.PRODUCE) == []


def test_send_batch_with_one_partition_per_record_refuses_a_bool_among_them(env: Env) -> None:
    p = env.producer()
    with pytest.raises(ValueError, match="record 1: partition True"):
        p.send_batch("t", [b"a", b"b"], partition=[0, True])
    with pytest.raises(ValueError, match="record 1: partition -7 is not in the range"):
        p.send_batch("t", [b"a", b"b"], partition=[0, -7])
    with pytest.raises(ValueError, match="partition has 1 items"):
        p.send_batch("t", [b"a", b"b"], partition=[0])
    assert p._accumulator.queued_batches() == 0


@pytest.mark.parametrize("header_bytes", [0, 40, 400])
def test_the_size_bound_is_the_same_at_the_boundary_with_and_without_headers(env: Env, header_bytes: int) -> None:
    p = env.producer()
    headers = [("h", b"y" * header_bytes)] if header_bytes else None
    # the largest value that fits: record_size + BOUND_EXTRA == max.request.size
    fits = MAX_REQUEST - BOUND_EXTRA - record_size(None, b"", headers)
    assert record_size(None, b"x" * fits, headers) + BOUND_EXTRA == MAX_REQUEST
    for n, ok in ((fits, True), (fits + 1, False)):
        value = b"x" * n
        fut = p.send("t", value, headers=headers, partition=0)
        assert fut.failed() is not ok
        if ok:
            p.send_batch("t", [value], headers=None if headers is None else [headers], partition=0)
        else:
            with pytest.raises(MessageTooLargeError):
                p.send_batch("t", [value], headers=None if headers is None else [headers], partition=0)
            assert isinstance(fut.exception(0), MessageTooLargeError)


def test_both_calls_choose_the_same_partitions(env: Env) -> None:
    p = env.producer()
    keys = [b"k%d" % i for i in range(50)]
    futs = [p.send("t", b"v", key=k) for k in keys]
    batch = p.send_batch("t", [b"v"] * len(keys), keys=keys)
    p.flush(5)
    by_send = [f.get(5).partition for f in futs]
    by_batch = [md.partition for md in batch.get(5)]
    assert by_send == by_batch == [partition_for_key(k, 3) for k in keys]


def test_the_key_hash_cache_is_javas_murmur2_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from kproducer.config import ProducerConfig
    from kproducer.producer import admission

    monkeypatch.setattr(admission, "HASH_CACHE_SIZE", 4)
    adm = RecordAdmission(ProducerConfig(bootstrap_servers="h:1"))
    for i in range(10):
        key = b"key-%d" % i
        assert adm.key_hash(key) == murmur2(key) & 0x7FFFFFFF
        assert adm.hash_cache[key] == murmur2(key) & 0x7FFFFFFF and len(adm.hash_cache) <= 4
    assert adm.key_hash(b"key-9") == murmur2(b"key-9") & 0x7FFFFFFF


def test_keyless_records_of_both_calls_share_one_sticky_state(env: Env) -> None:
    p = env.producer(batch_size=1000)
    adm = p._admission
    # send() starts the topic's sticky partition; send_batch() continues it (same state, same byte count)
    first = p.send("t", b"x" * 90)
    state = adm.sticky.state["t"]
    assert state[1] == RECORD_OVERHEAD + 90
    sticky_part = state[0]
    fut = p.send_batch("t", [b"x" * 90] * 3)
    assert adm.sticky.state["t"][1] == 4 * (RECORD_OVERHEAD + 90)
    p.flush(5)
    assert {md.partition for md in fut.get(5)} == {sticky_part} == {first.get(5).partition}
