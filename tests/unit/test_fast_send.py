"""Producer.send()'s compiled fast path (_send.FastSend / SendMethod) against the Python send(): the same
bytes on the wire, the same partitions, timestamps, callbacks and errors. A producer whose ``_fast`` is None
sends every record through the Python send() (what KPRODUCER_PURE_PYTHON=1 runs everywhere)."""
from __future__ import annotations

import functools
import gc
import inspect
import pydoc
import random
import sys
import threading
import time
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from kproducer import Producer, RecordMetadata
from kproducer.errors import BufferExhaustedError, KafkaError, MessageTooLargeError, ProducerClosedError
from kproducer.producer.partitioner import partition_for_key
from kproducer.protocol import messages as m
from kproducer.protocol.accel import MODULES, load
from kproducer.protocol.records import read_batches
from tests.unit.producer_env import ProducerEnv
from tests.unit.scripted import HOLD

send_c = load(MODULES["producer"])

pytestmark = pytest.mark.skipif(send_c is None, reason="the compiled accelerator is not built (or is disabled)")

TS = 1_700_000_000_000
TopicPartition = Tuple[str, int]


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"t": [1] * 6, "u": [1, 1]})


@pytest.fixture
def env() -> Iterator[Env]:
    env = Env()
    try:
        yield env
    finally:
        env.close()


def _producer(env: Env, fast: bool, **settings: Any) -> Producer:
    settings.setdefault("linger_ms", 60000)  # only full batches go out before flush(): batch bounds by content
    p = env.producer(**settings)
    p._admission.sticky._rng = random.Random(7)
    if not fast:
        p._fast = None
    else:
        assert p._fast is not None
    p.partitions_for("t")
    p.partitions_for("u")
    return p


def _raw_batches(env: Env) -> Dict[TopicPartition, List[bytes]]:
    out: Dict[TopicPartition, List[bytes]] = {}
    for req in env.selector.sent(m.PRODUCE):
        for t in req.body["topic_data"]:
            for part in t["partition_data"]:
                out.setdefault((t["name"], part["index"]), []).append(bytes(part["records"]))
    return out


def _workload(p: Producer, acked: Dict[TopicPartition, List[int]]) -> List[Any]:
    """Keyless (sticky), keyed, explicit-partition records, with and without callbacks, some with headers
    (those take the Python path in the middle of fast ones); explicit timestamps so the bytes compare."""

    def cb(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        assert md is not None and exc is None
        acked.setdefault((md.topic, md.partition), []).append(md.offset)

    futures = []
    for i in range(1500):
        topic = "t" if i % 7 else "u"
        value = b"v%d" % i * (1 + i % 5)
        kind = i % 5
        if i % 97 == 0:
            futures.append(p.send(topic, value, headers=[("h", b"%d" % i)], timestamp_ms=TS + i, callback=cb))
        elif kind == 0:
            futures.append(p.send(topic, value, timestamp_ms=TS + i))
        elif kind == 1:
            futures.append(p.send(topic, value, key=b"key-%d" % (i % 41), timestamp_ms=TS + i, callback=cb))
        elif kind == 2:
            futures.append(p.send(topic, value, partition=i % 2, timestamp_ms=TS + i, callback=cb))
        elif kind == 3:
            futures.append(p.send(topic, None, b"k", None, None, TS + i, cb))  # all positional, null value
        else:
            futures.append(p.send(topic=topic, value=value, timestamp_ms=TS + i - 3, callback=cb))
    return futures


def _records(wire: Dict[TopicPartition, List[bytes]]) -> Dict[TopicPartition, List[Any]]:
    out: Dict[TopicPartition, List[Any]] = {}
    for tp, raw in wire.items():
        for batch in (b for r in raw for b in read_batches(r)):
            out.setdefault(tp, []).extend((batch.base_timestamp + r.timestamp_delta, r.key, r.value, r.headers)
                                          for r in batch.records)
    return out


@pytest.mark.parametrize("batch_size", [1 << 20, 1024])
def test_fast_and_python_send_put_the_same_bytes_on_the_wire(batch_size: int) -> None:
    """With 1 MB batches nothing is sent before flush(): one batch per partition, compared byte for byte.
    With 1 KB batches they roll over (the fast path hands full batches to the Python path); which batches a
    drain takes before flush() depends on timing (a node's drain takes every partition's first batch), so the
    records are compared in order, per partition."""
    results = []
    for fast in (True, False):
        e = Env()
        try:
            p = _producer(e, fast, batch_size=batch_size)
            acked: Dict[TopicPartition, List[int]] = {}
            futures = _workload(p, acked)
            partitions = [f._batch.partition for f in futures]
            p.flush(30)
            mds = [f.get(5) for f in futures]
            results.append((_raw_batches(e), partitions, mds, acked, dict(p._admission.hash_cache),
                            {t: list(s) for t, s in p._admission.sticky.state.items()},
                            (p._fast.hits, p._fast.opened) if p._fast is not None else (0, 0)))
        finally:
            e.close()
    (wire_f, parts_f, mds_f, acked_f, cache_f, sticky_f, (hits, opened)), (wire_s, parts_s, mds_s, acked_s, cache_s,
                                                                           sticky_s, _) = results
    # the fast path took all but the first records of a topic and those with headers; those its partition's open
    # batch had no room for (the first batches of partitions but a few, and the batches rolled over to)
    # went through Producer._open_batch
    assert hits + opened > 1450 and hits > 1300
    assert opened >= 4 if batch_size > 1024 else opened > 16
    assert parts_f == parts_s
    if batch_size > 1024:
        assert wire_f == wire_s
        assert all(len(raw) == 1 for raw in wire_f.values())
    else:
        assert sum(len(raw) for raw in wire_f.values()) > 16  # batches rolled over
        assert _records(wire_f) == _records(wire_s)
    assert mds_f == mds_s
    assert acked_f == acked_s
    for offsets in acked_f.values():
        assert offsets == sorted(offsets)  # callbacks in append order
    assert cache_f == cache_s and sticky_f == sticky_s


def test_fast_path_partitions_and_timestamps(env: Env) -> None:
    p = _producer(env, True)
    key = b"user-42"
    hits = 0
    for _ in range(2):
        assert p._fast is not None
        hits = p._fast.hits  # (the first records of a topic and of a partition take the Python path: no batch yet)
        before = int(time.time() * 1000)
        f_key = p.send("t", b"x", key=key)
        f_part = p.send("t", b"x", key=key, partition=4)
        f_now = p.send("t", b"x")
        after = int(time.time() * 1000)
    assert p._fast is not None and p._fast.hits - hits == 3
    assert f_key._batch.partition == partition_for_key(key, 6)
    assert f_part._batch.partition == 4
    assert before <= f_now.timestamp <= after
    assert f_now._batch.partition == p._admission.sticky.state["t"][0] or f_now._batch.partition in range(6)
    assert (f_key.key_size, f_key.value_size, f_now.key_size) == (len(key), 1, -1)
    p.flush(10)
    assert f_key.get(5).partition == partition_for_key(key, 6)
    assert f_part.get(5).offset >= 0


def test_sticky_switches_after_a_batch_worth_as_python_send(env: Env) -> None:
    seqs = []
    for fast in (True, False):
        e = Env()
        try:
            p = _producer(e, fast, batch_size=512)
            futs = [p.send("t", b"x" * 90, timestamp_ms=TS) for _ in range(60)]
            seqs.append(([(f._batch.partition, f._delta) for f in futs], list(p._admission.sticky.state["t"])))
            if fast:
                assert p._fast is not None and p._fast.opened > 5  # the new batches: through Producer._open_batch
        finally:
            e.close()
    assert seqs[0] == seqs[1]
    assert len({part for part, _delta in seqs[0][0]}) > 1  # it moved on


def test_bad_arguments_raise_what_python_send_raises(env: Env) -> None:
    other = Env()
    try:
        _check_bad_arguments(_producer(env, True, max_block_ms=3000), _producer(other, False, max_block_ms=3000))
    finally:
        other.close()


def _check_bad_arguments(fast: Producer, slow: Producer) -> None:
    cases: List[Tuple[Tuple[Any, ...], Dict[str, Any]]] = [
        (("t", "text"), {}), (("t", b"v"), {"key": "k"}), ((5, b"v"), {}), (("t", b"v"), {"partition": -1}),
        (("t", b"v"), {"partition": True}), (("t", b"v"), {"partition": 1.0}), (("t", b"v"), {"timestamp_ms": -5}),
        (("t", b"v"), {"timestamp_ms": True}), (("t", b"v"), {"timestamp_ms": 1.5}), (("t", b"v"), {"nope": 1}),
        (("t", b"v", None, None, None, None, None, 8), {}), ((), {"value": b"v"}), (("t", b"v"), {"topic": "t"}),
    ]
    for args, kwargs in cases:
        errors = []
        for p in (fast, slow):
            with pytest.raises((TypeError, ValueError)) as info:
                p.send(*args, **kwargs)
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1], (args, kwargs)
    assert fast._fast is not None and fast._fast.hits == 0
    # errors about the record go to its future, as in the Python send()
    for p in (fast, slow):
        with pytest.raises(MessageTooLargeError):
            p.send("t", b"x" * (2 * 1024 * 1024)).get(1)


def test_closed_or_failed_producer_raises(env: Env) -> None:
    p = _producer(env, True)
    p.send("t", b"x")
    fatal = KafkaError("fenced, say")
    p._sender.fatal_error = fatal
    with pytest.raises(KafkaError) as info:
        p.send("t", b"x")
    assert info.value is fatal
    p._sender.fatal_error = None
    p.close(5)
    with pytest.raises(ProducerClosedError, match="after close"):
        p.send("t", b"x")
    with pytest.raises(ProducerClosedError):
        p.send("t", b"x", key=b"k", partition=1)


@pytest.mark.parametrize("how", ["accumulator", "fatal-error", "exit", "fork"])
def test_every_way_of_closing_closes_the_fast_paths_gate(how: str) -> None:
    """The compiled send() reads one byte (the producer's gate.Gate) instead of the producer's _closed, the sender's
    fatal_error and the accumulator's _closed: each way any of them closes must close the gate too, or records
    would be queued in C after the producer stopped taking them."""
    from kproducer.errors import ProducerForkedError
    from kproducer.producer import lifecycle

    env = Env()
    p = _producer(env, True)
    try:
        p.send("t", b"x")  # (a batch is open: the next record takes the fast path)
        assert p._gate.flag[0] == 1 and p._fast is not None
        hits = p._fast.hits
        p.send("t", b"x")
        assert p._fast.hits == hits + 1
        if how == "accumulator":  # (as the sender's initiate_close() does)
            p._accumulator.close()
        elif how == "fatal-error":  # (any assignment, through the sender's property)
            p._sender.fatal_error = KafkaError("fenced, say")
        elif how == "exit":  # (what lifecycle's exit hook calls, instead of close())
            assert "_refuse_records()" in inspect.getsource(lifecycle._close_at_exit)
            p._refuse_records()
        else:
            p._mark_forked()
        assert p._gate.flag[0] == 0
        opened = p._fast.opened
        with pytest.raises((ProducerClosedError, ProducerForkedError, KafkaError)):
            p.send("t", b"x")
        with pytest.raises((ProducerClosedError, ProducerForkedError, KafkaError)):
            p.send("t", b"x", partition=5)  # (a partition without a batch: not for _open_batch either)
        assert p._fast.hits == hits + 1 and p._fast.opened == opened
    finally:
        if how == "fork":  # (close() of a forked producer leaves the thread alone: it is the parent's)
            p._sender.force_stop()
            p._sender.join(10)
        env.close()


def test_fast_send_refuses_a_gate_that_is_not_one_byte(env: Env) -> None:
    p = _producer(env, True)
    assert p._gate.flag == bytearray(b"\x01") and send_c is not None
    send_c.FastSend(**_fast_send_kwargs(p))  # (the arguments below are complete)
    with pytest.raises(ValueError, match="one byte"):
        send_c.FastSend(**{**_fast_send_kwargs(p), "gate": bytearray(2)})
    with pytest.raises(TypeError):
        send_c.FastSend(**{**_fast_send_kwargs(p), "gate": b"\x01"})


def _fast_send_kwargs(p: Producer) -> Dict[str, Any]:
    import kproducer.producer.kafka_producer as kp

    acc, adm = p._accumulator, p._admission
    return dict(sender=p._sender, metadata=p._metadata, accumulator=acc, batches=acc._batches, lock=acc._lock,
                hash_cache=adm.hash_cache, sticky=adm.sticky, topic_touched=kp.send_core(p).touched,
                future_type=kp.FutureRecordMetadata, batch_type=kp.ProducerBatch, monotonic_ms=None, wall_ms=None,
                max_request_size=adm.max_request_size, record_overhead=kp._RECORD_OVERHEAD,
                bound_extra=kp._BOUND_EXTRA, hash_cache_size=kp.HASH_CACHE_SIZE, touch_ms=kp.TOPIC_TOUCH_MS,
                ignore_keys=adm.ignore_keys, gate=bytearray(b"\x01"), callback_codes=kp._CALLBACK_CODES,
                open_batch=Producer._open_batch)


@pytest.mark.parametrize("settings, built", [
    ({}, True), ({"value_serializer": str.encode}, False), ({"key_serializer": str.encode}, False),
    ({"partitioner": lambda t, k, v, n: 0}, False), ({"transactional_id": "tx-1"}, False),
    ({"partitioner_ignore_keys": True}, True)])
def test_fast_path_is_built_only_for_plain_settings(env: Env, settings: Dict[str, Any], built: bool) -> None:
    assert (env.producer(**settings)._fast is not None) is built


def test_records_that_need_the_python_path_take_it(env: Env) -> None:
    p = _producer(env, True, batch_size=256, compression_type="gzip")
    assert p._fast is not None
    p.send("t", b"x", headers={"h": b"1"})
    p.send("t", b"x", headers=[])  # empty headers: plain
    hits = p._fast.hits
    futures = [p.send("t", b"y" * 50, partition=0, timestamp_ms=TS) for _ in range(40)]  # batches fill and grow
    assert p._fast.hits - hits < 40
    p.flush(10)
    assert [f.get(5).offset for f in futures] == sorted(f.get(5).offset for f in futures)
    assert env.selector.log_values(("t", 0))[-40:] == [b"y" * 50] * 40


def test_callbacks_of_fast_and_python_records_keep_send_order(env: Env) -> None:
    p = _producer(env, True)
    order: List[int] = []
    for i in range(50):
        headers = {"h": b"1"} if i % 3 == 0 else None
        p.send("t", b"x", partition=2, headers=headers, callback=functools.partial(_append_index, order, i))
    p.flush(10)
    assert order == list(range(50))


def _append_index(order: List[int], i: int, md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
    order.append(i)


def test_send_keeps_its_signature_docstring_and_overrides() -> None:
    sig = inspect.signature(Producer.send)
    assert list(sig.parameters) == ["self", "topic", "value", "key", "headers", "partition", "timestamp_ms",
                                    "callback"]
    assert Producer.send.__doc__ is not None and Producer.send.__doc__.startswith("Queue one record")
    assert Producer.send.__name__ == "send" and Producer.send.__qualname__ == "Producer.send"
    assert inspect.isfunction(Producer.send.__wrapped__)  # type: ignore[attr-defined]
    assert "Queue one record" in pydoc.render_doc(Producer.send)
    # (Python 3.13's pydoc wraps a long signature over several " |      " lines: compare without the layout)
    assert "send(self,topic" in "".join(pydoc.plain(pydoc.render_doc(Producer)).replace("|", "").split())

    class Counting(Producer):
        calls = 0

        def send(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            Counting.calls += 1
            return super().send(*args, **kwargs)

    e = Env()
    try:
        c = Counting(transport=e.selector, bootstrap_servers="broker1:9092", linger_ms=60000)
        e.producers.append(c)
        c.partitions_for("t")
        first = c.send("t", b"x", partition=1)
        second = Producer.send(c, "t", b"y", partition=1)  # the unbound call: fast too
        c.flush(10)
        assert (first.get(5).offset, second.get(5).offset) == (0, 1)
        assert Counting.calls == 1 and c._fast is not None and c._fast.hits >= 1
    finally:
        e.close()


def test_fast_path_futures_and_callbacks_are_freed_once_the_batch_completes(env: Env) -> None:
    """The fast path's futures and callback entries are not tracked by the cyclic GC: the batch's completion
    breaks the one cycle they are part of, and reference counting frees them."""

    class Callback:
        calls = 0

        def __call__(self, md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
            Callback.calls += 1

    p = _producer(env, True)
    p.send("t", b"x", partition=3)  # opens the partition's batch
    cb = Callback()
    ref = weakref.ref(cb)
    checked = p.send("t", b"x", partition=3, callback=cb)  # (a new callback: checked by the Python send())
    fut = p.send("t", b"x", partition=3, callback=cb)
    assert p._fast is not None and p._fast.hits == 1
    assert not gc.is_tracked(fut)
    p.flush(10)
    assert fut.get(5).offset == 2 and Callback.calls == 2
    del cb, fut, checked
    assert ref() is None


def test_fast_path_takes_and_gives_back_the_accumulator_lock(env: Env) -> None:
    """On CPython 3.9-3.12 the fast path takes a free accumulator lock without calling acquire() (the lock's layout
    is checked when the producer is made); a lock held elsewhere is waited for through acquire()."""
    p = _producer(env, True)
    assert p._fast is not None
    if sys.implementation.name == "cpython" and sys.version_info < (3, 13):
        assert p._fast.lock_direct == 1
    lock = p._accumulator._lock
    p.send("t", b"x", partition=0)  # opens the batch
    first = p.send("t", b"x", partition=0)
    # (the network thread takes the lock too, now and then: "released" is checked as "can be taken", waiting for
    # the sender's turn, not as "is not locked at this instant")
    assert p._fast.hits == 1 and lock.acquire(timeout=10)
    results: List[Any] = []
    thread = threading.Thread(target=lambda: results.append(p.send("t", b"y", partition=0)))
    thread.start()
    lock.release()
    thread.join(10)
    assert not thread.is_alive() and len(results) == 1
    assert p._fast.hits == 2
    assert lock.acquire(timeout=10)  # released, and still an ordinary lock for the Python code
    lock.release()
    p.flush(10)
    assert (first.get(5).offset, results[0].get(5).offset) == (1, 2)


def test_fast_path_takes_a_free_lock_as_the_semaphore_it_is(env: Env) -> None:
    """On Linux, CPython 3.9-3.12, the lock's PyThread lock is a POSIX semaphore: the fast path takes it with
    sem_trywait (no clock read), and the lock is an ordinary one again afterwards."""
    p = _producer(env, True)
    assert p._fast is not None
    if sys.implementation.name == "cpython" and sys.version_info < (3, 13) and sys.platform.startswith("linux"):
        assert p._fast.lock_sem == 1
    p.send("t", b"x", partition=1)  # opens the batch
    hits = p._fast.hits
    futs = [p.send("t", b"x", partition=1) for _ in range(3)]
    assert p._fast.hits == hits + 3
    lock = p._accumulator._lock
    assert lock.acquire(timeout=10)  # (the network thread may hold it an instant: "free" is "can be taken")
    assert lock.locked()
    lock.release()
    p.flush(10)
    assert [f.get(5).offset for f in futs] == [1, 2, 3]


def _partition_of(p: Producer, topic: str, value: bytes = b"x") -> int:
    fut = p.send(topic, value, timestamp_ms=TS)
    return int(fut._batch.partition)


def test_fast_path_sees_a_replaced_sticky_state(env: Env) -> None:
    """The fast path keeps what it looked up for the last topic while the dicts it came from are unchanged: a
    sticky state the Python code replaces is read at the next record, as by a lookup."""
    p = _producer(env, True)
    sticky = p._admission.sticky
    first = _partition_of(p, "t")  # (the Python path: opens the batch, makes the state)
    other = (first + 1) % 6
    p.send("t", b"x", partition=other)  # opens the other partition's batch
    assert p._fast is not None
    hits = p._fast.hits
    assert _partition_of(p, "t") == first and p._fast.hits == hits + 1
    sticky.state["t"] = [other, 0, 1 << 30]  # replaced (a new list), as StickyPartitioner.current() does
    assert _partition_of(p, "t") == other and p._fast.hits == hits + 2
    sticky.state["t"][0] = first  # changed in place
    assert _partition_of(p, "t") == first and p._fast.hits == hits + 3
    del sticky.state["t"]  # gone: the Python path starts it again
    _partition_of(p, "t")
    assert p._fast.hits == hits + 3 and "t" in sticky.state


def test_fast_path_sees_a_replaced_partition_queue(env: Env) -> None:
    """A partition's queue of batches that is no longer the accumulator's is not appended to."""
    p = _producer(env, True)
    p.send("t", b"x", partition=2)  # opens the batch
    assert p._fast is not None
    hits = p._fast.hits
    f1 = p.send("t", b"x", partition=2)
    assert p._fast.hits == hits + 1
    acc = p._accumulator
    with acc._lock:
        old = acc._batches.pop(("t", 2))
    f2 = p.send("t", b"x", partition=2)  # (the Python path: a new queue and batch)
    assert p._fast.hits == hits + 1 and acc._batches[("t", 2)][-1] is f2._batch
    f3 = p.send("t", b"x", partition=2)  # the fast path again, into the new queue
    assert p._fast.hits == hits + 2 and f3._batch is f2._batch and f1._batch is old[-1]
    with acc._lock:
        acc._batches[("t", 2)].extendleft(reversed(old))  # (back in the accumulator, to be sent)
    p.flush(10)
    assert [f.get(5).offset for f in (f1, f2, f3)] == [1, 2, 3]


def test_fast_path_sees_a_topic_touched_again_and_other_topics(env: Env) -> None:
    """The touch time is re-read when the producer's touch dict changes; records to topics in turn each take the
    fast path with their own counts and queues."""
    p = _producer(env, True)
    for topic in ("t", "u"):
        p.send(topic, b"x", partition=1)
    assert p._fast is not None
    hits = p._fast.hits
    futs = [p.send(topic, b"x", partition=1) for topic in ("t", "u", "t", "u")]
    assert p._fast.hits == hits + 4
    assert [(f._batch.topic, f._batch.partition, f._delta) for f in futs] == [
        ("t", 1, 1), ("u", 1, 1), ("t", 1, 2), ("u", 1, 2)]
    touched = p._core.touched
    touched["t"] = touched["t"] - 10_000.0  # long ago: the Python path touches it
    p.send("t", b"x", partition=1)
    assert p._fast.hits == hits + 4 and time.monotonic() * 1000.0 - touched["t"] < 5_000.0
    p.send("t", b"x", partition=1)
    assert p._fast.hits == hits + 5


# -- a partition without an open batch with room: Producer._open_batch --------------------------------------


def test_a_partition_without_room_takes_open_batch_not_the_python_send(env: Env) -> None:
    """The first batch of a partition and the batch after a full one are opened by Producer._open_batch (the
    accumulator's append and the wakeup), not by the whole Python send(): with the callback, the future, the
    batch's creation time (time.monotonic(), not the coarse clock of the touch check) as send() has them."""
    p = _producer(env, True, batch_size=1024)
    order: List[int] = []

    def cb(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        assert md is not None and exc is None
        order.append(md.offset)

    p.send("t", b"x", partition=0, callback=cb)  # (the Python path: touches the topic, checks the callback)
    fast = p._fast
    assert fast is not None
    hits, opened = fast.hits, fast.opened
    acc = p._accumulator
    before = time.monotonic() * 1000.0
    first = p.send("t", b"y", partition=1, callback=cb)  # the partition's first batch
    assert (fast.hits, fast.opened) == (hits, opened + 1)
    assert first._batch is acc._batches[("t", 1)][-1] and first._delta == 0 and first._batch.created_ms >= before
    futures = [first]
    for _ in range(40):  # (a 1 KB batch holds 8 of these)
        futures.append(p.send("t", b"z" * 100, partition=1, callback=cb))
        if fast.opened == opened + 2:
            break
    rolled = futures[-1]
    assert fast.opened == opened + 2 and fast.hits == hits + len(futures) - 2
    assert rolled._delta == 0 and rolled._batch is not futures[-2]._batch and futures[-2]._batch.closed
    assert [f._delta for f in futures[:-1]] == list(range(len(futures) - 1))
    p.flush(10)
    assert [f.get(5).offset for f in futures] == list(range(len(futures)))
    assert order == [0] + list(range(len(futures)))  # (partition 0's record, then partition 1's in order)


def _exhaust(env: Env, p: Producer) -> int:
    """Take every free byte of the producer's buffer pool and hold the next produce request unanswered (its
    batches keep their memory): a new batch then waits for memory. Returns the bytes taken."""
    env.selector.script(m.PRODUCE, HOLD)
    pool = p._pool
    taken = pool.available_memory()
    pool.allocate(taken, 0)
    return taken


def test_open_batch_waits_for_memory_and_fails_as_python_send(env: Env) -> None:
    """A new batch that gets no memory within max.block.ms: its record's future and callback fail with
    BufferExhaustedError, its bytes do not count towards the sticky partition's batch, the error is counted;
    with the memory back, the next record opens the batch and the sticky partition moves on after it, as in the
    Python send()."""
    seen = []
    for fast in (True, False):
        e = Env()
        try:
            p = _producer(e, fast, batch_size=1024, max_block_ms=50)
            errors: List[Optional[BaseException]] = []

            def cb(md: Optional[RecordMetadata], exc: Optional[BaseException], errors: Any = errors) -> None:
                errors.append(exc)

            first = p.send("u", b"a" * 600, timestamp_ms=TS, callback=cb)  # opens the sticky partition's batch
            part = first._batch.partition
            opened = p._fast.opened if p._fast is not None else 0
            taken = _exhaust(e, p)
            failed = p.send("u", b"b" * 600, timestamp_ms=TS + 1, callback=cb)  # no room: a new batch, no memory
            if fast:
                assert p._fast is not None and p._fast.opened == opened + 1
            with pytest.raises(BufferExhaustedError):
                failed.get(5)
            assert len(errors) == 1 and isinstance(errors[0], BufferExhaustedError)
            sticky_after_failure = list(p._admission.sticky.state["u"])
            assert sticky_after_failure[0] == part
            p._pool.deallocate(taken)
            queued = p.send("u", b"c" * 600, timestamp_ms=TS + 2, callback=cb)  # opens the batch; a batch's worth
            if fast:
                assert p._fast is not None and p._fast.opened == opened + 2
            assert queued._batch.partition == part and queued._delta == 0
            sticky_after = list(p._admission.sticky.state["u"])
            assert sticky_after[0] != part  # moved on
            for _ in range(1000):  # (answer the held request once it is sent: 10 s at most)
                held = e.selector.held(m.PRODUCE)
                if held:
                    e.selector.respond(held[0])
                    break
                time.sleep(0.01)
            p.flush(10)
            assert queued.get(5).partition == part and len(errors) == 3 and errors[1:] == [None, None]
            seen.append((sticky_after_failure, sticky_after, failed.timestamp, failed.value_size,
                         p.metrics()["record-error-total"]))
        finally:
            e.close()
    assert seen[0] == seen[1]
    assert seen[0][4] == 1


def test_close_while_open_batch_waits_for_memory_raises_as_python_send() -> None:
    """close() while a new batch waits for memory: the waiting send() raises, as the Python send() does (the pool's
    "closed while send() waited for buffer memory", or the accumulator's ProducerClosedError when the memory came
    back first: close() fails the held batch; which one depends on the timing, in both paths)."""
    raised = []
    for fast in (True, False):
        e = Env()
        try:
            p = _producer(e, fast, batch_size=1024, max_block_ms=60_000)
            p.send("t", b"x", partition=0)  # (touches the topic)
            opened = p._fast.opened if p._fast is not None else 0
            _exhaust(e, p)
            outcome: List[BaseException] = []

            def send(p: Producer = p, outcome: List[BaseException] = outcome) -> None:
                try:
                    p.send("t", b"y", partition=1)
                except BaseException as exc:  # (what the test compares)
                    outcome.append(exc)

            thread = threading.Thread(target=send)
            thread.start()
            for _ in range(1000):  # (until the send waits for memory: 10 s at most)
                if p._pool.queued() or not thread.is_alive():
                    break
                time.sleep(0.01)
            assert p._pool.queued() == 1
            p.close(0)
            thread.join(10)
            assert not thread.is_alive() and len(outcome) == 1
            if fast:
                assert p._fast is not None and p._fast.opened == opened + 1
            raised.append(outcome[0])
        finally:
            e.close()
    for error in raised:
        assert isinstance(error, KafkaError) and "close" in str(error), repr(error)
