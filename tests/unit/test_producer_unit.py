"""The Producer facade with its real sender thread on the scripted transport (no sockets): argument
checks at send(), partitioning, callbacks, flush(), close(timeout) with records still queued, and use after
close. Waits are real but bounded (futures with timeouts)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

from kproducer import RecordMetadata
from kproducer.errors import (
    BufferExhaustedError,
    KafkaTimeoutError,
    MessageTooLargeError,
    ProducerClosedError,
    SerializationError,
)
from kproducer.producer.partitioner import partition_for_key
from kproducer.protocol import messages as m
from tests.unit.producer_env import ProducerEnv, producer_env
from tests.unit.scripted import HOLD

BROKERS = {1: ("broker1", 9092), 2: ("broker2", 9093)}
Result = Tuple[Optional[RecordMetadata], Optional[BaseException]]


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"t": [1, 1, 1], "six": [1] * 6, "far": [2, 2]}, BROKERS)


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.002)


def test_send_and_get(env: Env) -> None:
    p = env.producer()
    seen: List[Result] = []
    fut = p.send("t", value=b"v", key=b"k", headers={"h": b"x"}, partition=2, timestamp_ms=42,
                 callback=lambda md, e: seen.append((md, e)))
    md = fut.get(timeout=5)
    assert md == RecordMetadata("t", 2, 0, 42, 1, 1)
    wait_for(lambda: len(seen) == 1)
    assert seen == [(md, None)]
    assert env.selector.log_values(("t", 2)) == [b"v"]
    [req] = env.selector.sent(m.PRODUCE)
    assert req.batches()[("t", 2)].records[0].headers == [("h", b"x")]
    assert fut.done() and fut.exception(0) is None


def test_str_value_without_a_serializer_is_a_type_error_with_a_hint(env: Env) -> None:
    p = env.producer()
    with pytest.raises(TypeError) as info:
        p.send("t", value="text")
    msg = str(info.value)
    assert "value must be bytes" in msg and "str" in msg and ".encode()" in msg and "value_serializer" in msg
    with pytest.raises(TypeError, match="key_serializer"):
        p.send("t", value=b"v", key="k")
    with pytest.raises(TypeError, match="got int"):
        p.send("t", value=5)
    assert env.selector.sent(m.PRODUCE) == [] and p._accumulator.queued_batches() == 0


def test_serializers_are_applied(env: Env) -> None:
    p = env.producer(value_serializer=str.encode, key_serializer=lambda k: k.to_bytes(2, "big"))
    md = p.send("t", value="héllo", key=7, partition=0).get(5)
    assert md.serialized_value_size == len("héllo".encode()) and md.serialized_key_size == 2
    assert env.selector.log_values(("t", 0)) == ["héllo".encode()]


def test_a_failing_serializer_is_a_serialization_error(env: Env) -> None:
    def boom(v: Any) -> bytes:
        raise RuntimeError("cannot")

    p = env.producer(value_serializer=boom)
    with pytest.raises(SerializationError, match="value_serializer failed"):
        p.send("t", value="x")


def test_record_over_max_request_size_is_rejected_at_send(env: Env) -> None:
    p = env.producer(max_request_size=2000)
    p.partitions_for("t")
    # as Java's doSend: the record's future and callback get the error; send() does not raise it
    calls: List[Tuple[Any, Optional[BaseException]]] = []
    future = p.send("t", value=b"x" * 2000, callback=lambda md, exc: calls.append((md, exc)))
    assert future.done() and future.failed()
    with pytest.raises(MessageTooLargeError, match="max.request.size") as info:
        future.get(0)
    assert "2000" in str(info.value)
    assert calls == [(None, info.value)]
    assert p._accumulator.queued_batches() == 0
    p.send("t", value=b"x" * 1800).get(5)  # a record that fits still goes through


def test_record_over_buffer_memory_names_buffer_memory(env: Env) -> None:
    p = env.producer(buffer_memory=4096, batch_size=1024)
    p.partitions_for("t")
    with pytest.raises(MessageTooLargeError, match="buffer.memory"):
        p.send("t", value=b"x" * 5000).get(0)


def test_send_after_close_raises(env: Env) -> None:
    p = env.producer()
    p.send("t", value=b"before").get(5)
    p.close()
    with pytest.raises(ProducerClosedError, match="after close"):
        p.send("t", value=b"after")
    with pytest.raises(ProducerClosedError):
        p.send_batch("t", [b"after"])
    with pytest.raises(ProducerClosedError):
        p.begin_transaction()
    p.close()  # closing again is harmless


def test_context_manager_closes(env: Env) -> None:
    with env.producer() as p:
        fut = p.send("t", value=b"v")
    assert fut.get(0).offset == 0  # close() sent it
    assert not p._sender.is_alive()
    with pytest.raises(ProducerClosedError):
        p.send("t", value=b"v")


@pytest.mark.allow_internal_errors
def test_a_raising_callback_is_logged_and_later_callbacks_still_run(env: Env,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    p = env.producer(linger_ms=10_000)
    calls: List[str] = []

    def bad(md: Any, e: Any) -> None:
        calls.append("bad")
        raise RuntimeError("user callback bug")

    p.send("t", value=b"1", partition=0, callback=lambda md, e: calls.append("first"))
    p.send("t", value=b"2", partition=0, callback=bad)
    last = p.send("t", value=b"3", partition=0, callback=lambda md, e: calls.append("third"))
    with caplog.at_level(logging.ERROR):
        p.flush(5)
        wait_for(lambda: len(calls) == 3)
    assert calls == ["first", "bad", "third"]
    assert last.get(0).offset == 2
    assert any(r.exc_info and "user callback bug" in str(r.exc_info[1]) for r in caplog.records)
    fourth = p.send("t", value=b"4", partition=0)
    p.flush(5)
    assert fourth.get(0).offset == 3  # the sender thread is alive and well
    assert p._sender.is_alive()


def test_flush_sends_lingering_records_and_waits_for_them(env: Env) -> None:
    p = env.producer(linger_ms=60_000)
    futs = [p.send("t", value=bytes([i]), partition=i % 3) for i in range(30)]
    # the sender saw the queued batches and chose to wait for linger.ms (a poll of seconds), sending nothing
    polls = len(env.selector.poll_timeouts)
    wait_for(lambda: any(t >= 10_000 for t in env.selector.poll_timeouts[polls:]))
    assert env.selector.sent(m.PRODUCE) == []  # lingering
    p.flush(timeout=5)
    assert all(f.done() and f.exception(0) is None for f in futs)
    assert sum(len(env.selector.log_values(("t", i))) for i in range(3)) == 30


def test_flush_with_an_unreachable_broker_times_out(env: Env) -> None:
    env.selector.down.add(2)  # "far" is led by broker 2
    p = env.producer()
    fut = p.send("far", value=b"stuck")
    start = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="flush"):
        p.flush(timeout=0.2)
    assert 0.15 < time.monotonic() - start < 3
    assert not fut.done()
    assert not p._accumulator.flush_in_progress()


def test_close_with_a_timeout_fails_queued_records_and_returns(env: Env) -> None:
    env.selector.down.add(2)
    p = env.producer()
    seen: List[Result] = []
    futs = [p.send("far", value=bytes([i]), partition=i % 2, callback=lambda md, e: seen.append((md, e)))
            for i in range(5)]
    start = time.monotonic()
    p.close(timeout=0.2)
    elapsed = time.monotonic() - start
    assert 0.15 < elapsed < 5
    assert not p._sender.is_alive()
    for f in futs:
        err = f.exception(0)
        assert isinstance(err, ProducerClosedError)
    assert len(seen) == 5 and all(md is None and isinstance(e, ProducerClosedError) for md, e in seen)
    assert env.selector.sent(m.PRODUCE) == []


def test_close_with_zero_timeout_fails_records_in_flight(env: Env) -> None:
    env.selector.handlers[m.PRODUCE.key] = lambda req: HOLD
    p = env.producer()
    fut = p.send("t", value=b"x")
    wait_for(lambda: len(env.selector.held(m.PRODUCE)) == 1)
    p.close(timeout=0)
    assert isinstance(fut.exception(0), ProducerClosedError)


def test_close_without_timeout_delivers_what_is_queued(env: Env) -> None:
    p = env.producer(linger_ms=60_000)
    futs = [p.send("t", value=bytes([i]), partition=0) for i in range(10)]
    p.close()
    assert [f.get(0).offset for f in futs] == list(range(10))


def test_keyed_records_use_javas_partition(env: Env) -> None:
    p = env.producer()
    for key in (b"21", b"foobar", b"a-little-bit-long-string", b"a-little-bit-longer-string", b"abc"):
        assert p.send("six", value=b"v", key=key).get(5).partition == partition_for_key(key, 6)
    assert partition_for_key(b"abc", 6) == 3  # docs/design.md, protocol facts


def test_keyless_records_stick_to_a_partition_for_about_a_batch(env: Env) -> None:
    p = env.producer(batch_size=1000)
    parts = [p.send("six", value=b"x" * 100).get(5).partition for _ in range(20)]
    runs = [parts[0]]
    for a, b in zip(parts, parts[1:]):
        if b != a:
            runs.append(b)
    assert 2 <= len(runs) <= 5  # it switched, but not per record
    assert parts[:5] == [parts[0]] * 5


def test_user_partitioner_and_explicit_partition(env: Env) -> None:
    calls: List[Tuple[str, Optional[bytes], Optional[bytes], int]] = []

    def last(topic: str, key: Optional[bytes], value: Optional[bytes], n: int) -> int:
        calls.append((topic, key, value, n))
        return n - 1

    p = env.producer(partitioner=last, max_block_ms=100)
    p.partitions_for("six", timeout=5)  # metadata first: max.block.ms is short
    assert p.send("six", value=b"v", key=b"k").get(5).partition == 5
    assert calls == [("six", b"k", b"v", 6)]
    assert p.send("six", value=b"v", partition=1).get(5).partition == 1  # explicit wins
    with pytest.raises(ValueError, match="not in the range"):
        p.send("six", value=b"v", partition=-1)
    # a partition beyond the known count may be new: like Java, wait for metadata up to max.block.ms
    with pytest.raises(KafkaTimeoutError, match="Partition 6 of topic 'six' with partition count 6"):
        p.send("six", value=b"v", partition=6).get(0)


def test_bad_arguments(env: Env) -> None:
    p = env.producer()
    p.partitions_for("t")
    with pytest.raises(ValueError, match="timestamp_ms"):
        p.send("t", value=b"v", timestamp_ms=-5)
    with pytest.raises(TypeError, match="header"):
        p.send("t", value=b"v", headers=[("h", 5)])  # (a str value is UTF-8, as confluent-kafka)
    with pytest.raises(TypeError, match="topic"):
        p.send("", value=b"v")


def test_unknown_topic_times_out_after_max_block_ms(env: Env) -> None:
    p = env.producer(max_block_ms=200)
    start = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="not present in metadata after 200 ms"):
        p.send("nope", value=b"v").get(0)
    assert 0.15 < time.monotonic() - start < 3


def test_send_blocks_on_full_buffer_memory_then_fails(env: Env) -> None:
    env.selector.handlers[m.PRODUCE.key] = lambda req: HOLD  # nothing is ever acknowledged
    p = env.producer(buffer_memory=2048, batch_size=1024, max_block_ms=200)
    p.partitions_for("t", timeout=5)  # metadata first: max.block.ms is short
    p.send("t", value=b"a" * 900, partition=0)
    p.send("t", value=b"b" * 900, partition=1)  # both 1024-byte reservations are taken now
    start = time.monotonic()
    with pytest.raises(BufferExhaustedError, match="max.block.ms=200"):
        p.send("t", value=b"c" * 900, partition=2).get(0)
    assert 0.15 < time.monotonic() - start < 3
    assert p.metrics()["bufferpool-wait-time-ms-total"] >= 150


def test_memory_freed_by_acknowledgements_unblocks_send(env: Env) -> None:
    env.selector.script(m.PRODUCE, HOLD)
    p = env.producer(buffer_memory=1024, batch_size=1024, max_block_ms=5000)
    first = p.send("t", value=b"a" * 900, partition=0)
    wait_for(lambda: len(env.selector.held(m.PRODUCE)) == 1)
    done = threading.Event()
    result: List[Any] = []

    def blocked_send() -> None:
        result.append(p.send("t", value=b"b" * 900, partition=1))
        done.set()

    t = threading.Thread(target=blocked_send, daemon=True)
    t.start()
    wait_for(lambda: p._pool.queued() == 1)  # waiting for memory
    assert not done.is_set()
    env.selector.respond(env.selector.held(m.PRODUCE)[0], 0)
    assert done.wait(5)
    assert first.get(5).offset == 0 and result[0].get(5).partition == 1


def test_partitions_for_and_metrics(env: Env) -> None:
    p = env.producer()
    parts = p.partitions_for("six")
    assert [x.partition for x in parts] == list(range(6)) and all(x.leader == 1 for x in parts)
    p.send("t", value=b"v").get(5)
    stats = p.metrics()
    assert stats["record-send-total"] == 1 and stats["record-ack-total"] == 1
    assert stats["buffer-available-bytes"] == stats["buffer-total-bytes"]
    assert stats["requests-in-flight"] == 0


def test_flush_from_a_callback_is_refused_and_close_from_a_callback_does_not_deadlock(env: Env) -> None:
    p = env.producer()
    outcome: List[Any] = []

    def cb(md: Any, e: Any) -> None:
        try:
            p.flush()
        except Exception as exc:  # noqa: B902
            outcome.append(exc)
        p.close()  # on the sender thread: must not wait for itself
        outcome.append("closed")

    p.send("t", value=b"v", callback=cb).get(5)
    wait_for(lambda: len(outcome) == 2)
    assert "deadlock" in str(outcome[0]) and outcome[1] == "closed"
    wait_for(lambda: not p._sender.is_alive())
    with pytest.raises(ProducerClosedError):
        p.send("t", value=b"v")


def test_a_refused_producer_id_fails_records_until_the_broker_gives_one(env: Env) -> None:
    # CLUSTER_AUTHORIZATION_FAILED (KIP-679): the records fail, not the producer (Java's idempotent producer asks
    # again); once the broker gives it a producer id (the ACL added) the same producer delivers
    from kproducer.errors import ClusterAuthorizationFailedError
    env.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: {"error_code": 31, "producer_id": -1,
                                                                  "producer_epoch": -1}
    p = env.producer(retry_backoff_ms=10, retry_backoff_max_ms=50)
    assert isinstance(p.send("t", value=b"v").exception(5), ClusterAuthorizationFailedError)  # (send() returned)
    assert isinstance(p.send("t", value=b"v").exception(5), ClusterAuthorizationFailedError)
    assert p._sender.fatal_error is None
    assert len(env.selector.sent(m.INIT_PRODUCER_ID)) >= 2  # (each record failed at a refusal of its own)
    env.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: {"error_code": 0, "producer_id": 7,
                                                                  "producer_epoch": 0}
    txn = p._sender.txn
    assert txn is not None
    wait_for(txn.has_producer_id)
    assert p.send("t", value=b"v").get(5).offset >= 0 and txn.producer_id == 7


def test_a_non_retriable_metadata_error_fails_send_at_once(env: Env) -> None:
    from kproducer.errors import TopicAuthorizationFailedError
    default = env.selector.handlers[m.METADATA.key]

    def metadata(req: Any) -> Any:
        body = default(req)
        for t in body["topics"]:
            if t["name"] == "secret":
                t["error_code"] = 29
        return body

    env.selector.handlers[m.METADATA.key] = metadata
    env.selector.add_topic("secret", 1)
    p = env.producer(max_block_ms=30_000)
    start = time.monotonic()
    with pytest.raises(TopicAuthorizationFailedError):
        p.send("secret", value=b"v").get(0)
    assert time.monotonic() - start < 5  # not after max.block.ms


def test_send_batch_spreads_records_and_reports_offsets_per_partition(env: Env) -> None:
    p = env.producer(batch_size=2000)
    values = [b"v%04d" % i for i in range(1000)]
    keys = [b"k%d" % (i % 10) for i in range(1000)]
    fut = p.send_batch("six", values, keys=keys, headers=[[("n", b"%d" % i)] for i in range(1000)])
    mds = fut.get(timeout=10)
    assert len(mds) == 1000
    for i, md in enumerate(mds):
        assert md.partition == partition_for_key(keys[i], 6)
    # what the broker stored, per partition, is the input order of that partition's records
    for part in range(6):
        expected = [values[i] for i in range(1000) if mds[i].partition == part]
        assert env.selector.log_values(("six", part)) == expected
    ranges = fut.partition_offsets()
    for part in {md.partition for md in mds}:
        offs = [md.offset for md in mds if md.partition == part]
        assert ranges[("six", part)] == (min(offs), max(offs))


def test_send_batch_checks_every_record_before_queuing_any(env: Env) -> None:
    p = env.producer()
    with pytest.raises(TypeError, match="value must be bytes"):
        p.send_batch("t", [b"ok", "not bytes", b"ok"])
    with pytest.raises(ValueError, match="keys has 1 items"):
        p.send_batch("t", [b"a", b"b"], keys=[b"k"])
    with pytest.raises(MessageTooLargeError):
        p.send_batch("t", [b"small", b"x" * 2_000_000])
    assert env.selector.sent(m.PRODUCE) == [] and p._accumulator.queued_batches() == 0
    assert p.send_batch("t", [], partition=1).get(1) == []


def test_send_batch_bounds_the_longest_key_and_value_together(env: Env) -> None:
    """Each key and each value fits max.request.size alone; the record with both does not (the bound is on
    the sum), and a record with the longest value but a short key still goes."""
    p = env.producer(max_request_size=10_000)
    half = b"x" * 6_000
    with pytest.raises(MessageTooLargeError, match="Record 1 "):
        p.send_batch("t", [b"a", half, b"c"], keys=[half, half, None])
    with pytest.raises(MessageTooLargeError, match="Record 0 "):
        p.send_batch("t", [half], keys=(half,))  # a tuple, as a list
    assert p._accumulator.queued_batches() == 0
    fut = p.send_batch("t", [half, bytearray(b"b"), None], keys=[b"k", None, half], partition=0)
    p.flush()
    assert [md.offset for md in fut.get(5)] == [0, 1, 2]


@pytest.mark.parametrize("topic", ["a b", ".", "..", "x" * 250, "tópico"])
def test_an_illegal_topic_name_fails_at_once_not_after_max_block_ms(env: Env, topic: str) -> None:
    from kproducer.errors import InvalidTopicError

    p = env.producer(max_block_ms=600_000)  # a wait for metadata would outlast the test's timeout
    seen: List[Result] = []
    fut = p.send(topic, b"v", callback=lambda md, e: seen.append((md, e)))
    assert isinstance(fut.exception(0), InvalidTopicError)  # already failed: no wait at all
    assert "invalid topic" in str(fut.exception(0))
    wait_for(lambda: len(seen) == 1)
    assert seen[0][0] is None and isinstance(seen[0][1], InvalidTopicError)
    with pytest.raises(InvalidTopicError):
        p.partitions_for(topic)
    with pytest.raises(InvalidTopicError):
        p.send_batch(topic, [b"a", b"b"])
    assert env.selector.sent(m.PRODUCE) == []
    # the producer goes on with legal topics
    assert p.send("t", b"ok").get(5).topic == "t"


def test_legal_topic_names_pass_the_check() -> None:
    from kproducer.protocol.topic import topic_name_problem

    for name in ["t", "a.b_c-D9", "x" * 249, "..."]:
        assert topic_name_problem(name) == ""
