"""Issue 28 items 13, 14 and 17: the producer's network thread runs user code (send callbacks) and must neither
die silently, nor wait for itself, nor stop enforcing delivery.timeout.ms when something keeps failing in its
loop.

* A callback that raises a BaseException (SystemExit, KeyboardInterrupt, a custom subclass) is logged at ERROR
  with its traceback, once per call, and the thread goes on (Java logs and goes on after a callback's
  exception). If the thread ever dies all the same (an error escaping its loop), the producer turns fatal:
  send(), flush(), close() and every pending future (the asyncio producer's too) fail with
  NetworkThreadDiedError, nothing hangs.
* On the network thread nothing waits for the network thread: ``get()`` / ``BatchSendFuture.wait()`` on a
  record that is not done, ``flush()``, and ``send()`` / ``send_batch()`` to a topic whose metadata is not
  known fail at once with NetworkThreadWaitError; a done future still answers.
* An exception that recurs in every sender iteration still lets expiry run (records fail at
  delivery.timeout.ms) and is logged with backoff (first, then at most once per interval with a count); this
  part runs on the fake clock (Harness).

The producers run on the scripted transport (kproducer.testing) with the real clock; no sockets."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Iterator, List, Optional, Tuple, Type

import pytest

from kproducer import Producer
from kproducer.aio import AsyncProducer
from kproducer.errors import (
    KafkaTimeoutError,
    NetworkThreadDiedError,
    NetworkThreadWaitError,
    ProducerClosedError,
)
from kproducer.producer import sender as sender_module
from kproducer.producer.future import FutureRecordMetadata, RecordMetadata
from kproducer.protocol import messages as m
from tests.unit.producer_env import ProducerEnv, producer_env
from tests.unit.scripted import HOLD, Harness

WAIT = 60.0  # generous bound for event-driven waits on a loaded machine
TOPIC = "t"
Outcome = Tuple[Optional[RecordMetadata], Optional[BaseException]]


@pytest.fixture
def env() -> Iterator[ProducerEnv]:
    yield from producer_env(ProducerEnv({TOPIC: [1, 1, 1]}))


class Custom(BaseException):
    """A BaseException of the application's own (not an Exception)."""


def callback_errors(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("kproducer") and r.levelno >= logging.ERROR
            and "callback" in r.getMessage()]


def wait_until(predicate: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.005)


# -- item 13: a callback's BaseException -----------------------------------------------------------------

@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt, Custom])
def test_a_callback_raising_a_base_exception_is_logged_and_the_network_thread_goes_on(
        env: ProducerEnv, caplog: pytest.LogCaptureFixture, kind: Type[BaseException]) -> None:
    p = env.producer()
    p.partitions_for(TOPIC)
    calls: List[int] = []

    def raising(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        calls.append(1)
        raise kind("raised by the application's callback")

    with caplog.at_level(logging.ERROR, logger="kproducer"):
        first = [p.send(TOPIC, b"a%d" % i, partition=i, callback=raising) for i in range(3)]
        for f in first:
            assert f.get(WAIT).offset >= 0
        wait_until(lambda: len(calls) == 3, "the three callbacks")
        # the network thread survived: more records are delivered, flush() returns
        later = [p.send(TOPIC, b"b%d" % i, partition=i) for i in range(3)]
        p.flush(WAIT)
        assert all(f.get(0).offset >= 0 for f in later)
        assert p._sender.is_alive() and p._sender.fatal_error is None
    logged = callback_errors(caplog)
    assert len(logged) == 3  # once per callback call
    for record in logged:
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None and record.exc_info[0] is kind  # with the traceback


@pytest.mark.allow_internal_errors
def test_a_callback_of_a_record_failed_in_send_raising_keyboard_interrupt_reaches_the_caller(
        env: ProducerEnv) -> None:
    """Off the network thread (a record send() fails at once runs its callback on the caller's thread) a
    KeyboardInterrupt is Ctrl-C: it is not swallowed."""
    p = env.producer(max_request_size=1024)

    def interrupted(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        p.send(TOPIC, b"x" * 4096, partition=0, callback=interrupted)  # too large: failed in send()


class Died(BaseException):
    """Escapes the sender loop (its catch-all is for Exception)."""


def kill_network_thread(p: Producer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next sender iteration raise a BaseException out of the loop, and wait for the thread to end."""

    def broken(*_args: Any) -> None:
        raise Died("a bug that escapes the loop")

    monkeypatch.setattr(p._sender, "run_once", broken)
    p._sender.wakeup()
    p._sender.join(WAIT)
    assert not p._sender.is_alive()


@pytest.mark.allow_internal_errors
def test_a_network_thread_that_dies_makes_the_producer_fatal(
        env: ProducerEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    p = env.producer()
    p.partitions_for(TOPIC)
    env.selector.script(m.PRODUCE, HOLD, HOLD, HOLD)  # the first records stay in flight
    seen: List[Outcome] = []
    in_flight = [p.send(TOPIC, b"f%d" % i, partition=i, callback=lambda md, e: seen.append((md, e)))
                 for i in range(3)]
    wait_until(lambda: len(env.selector.held(m.PRODUCE)) >= 1, "a held produce request")
    flushing: List[BaseException] = []

    def flush() -> None:
        try:
            p.flush()
        except BaseException as e:  # noqa: B902 - what the waiting flush() ends with is the result
            flushing.append(e)

    flusher = threading.Thread(target=flush)
    flusher.start()
    with caplog.at_level(logging.ERROR, logger="kproducer"):
        kill_network_thread(p, monkeypatch)
    flusher.join(WAIT)
    assert not flusher.is_alive(), "flush() waiting when the network thread died never returned"
    assert len(flushing) == 1 and isinstance(flushing[0], NetworkThreadDiedError)
    # every pending future and callback failed with it, naming the cause
    for f in in_flight:
        err = f.exception(WAIT)
        assert isinstance(err, NetworkThreadDiedError)
        assert isinstance(err.__cause__, Died) and "Died" in str(err) and "escapes the loop" in str(err)
    assert len(seen) == 3 and all(isinstance(e, NetworkThreadDiedError) for _md, e in seen)
    # and every later call says so at once
    with pytest.raises(NetworkThreadDiedError):
        p.send(TOPIC, b"late", partition=0)
    with pytest.raises(NetworkThreadDiedError):
        p.send_batch(TOPIC, [b"x", b"y"])
    with pytest.raises(NetworkThreadDiedError):
        p.flush(WAIT)
    with pytest.raises(NetworkThreadDiedError):
        p.close(WAIT)
    p.close(WAIT)  # said once; closing again is quiet
    with pytest.raises(ProducerClosedError):
        p.send(TOPIC, b"after close", partition=0)
    died = [r for r in caplog.records if "network thread died" in r.getMessage()]
    assert died and died[0].levelno >= logging.ERROR and died[0].exc_info is not None


@pytest.mark.allow_internal_errors
def test_a_network_thread_that_dies_while_the_producer_waits_for_metadata_ends_the_wait(
        env: ProducerEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    p = env.producer(max_block_ms=120_000)
    p.partitions_for(TOPIC)
    outcome: List[BaseException] = []

    def send_unknown() -> None:
        try:
            p.send("unknown-topic", b"v")
        except BaseException as e:  # noqa: B902
            outcome.append(e)

    sender = threading.Thread(target=send_unknown)
    sender.start()
    wait_until(lambda: "unknown-topic" in p._metadata.topics(), "the metadata wait")
    kill_network_thread(p, monkeypatch)
    sender.join(WAIT)  # (well before max.block.ms)
    assert not sender.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], NetworkThreadDiedError)
    with pytest.raises(NetworkThreadDiedError):
        p.close(WAIT)


# -- item 14: nothing on the network thread waits for it -------------------------------------------------

def run_in_callback(p: Producer, action: Any) -> Tuple[Any, Optional[BaseException], float]:
    """Run ``action()`` in the callback of a record (on the network thread): (its result, what it raised,
    how long it took)."""
    box: List[Any] = []
    done = threading.Event()

    def callback(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        started = time.monotonic()
        try:
            box.append((action(), None))
        except BaseException as e:  # noqa: B902
            box.append((None, e))
        box.append(time.monotonic() - started)
        done.set()

    p.send(TOPIC, b"trigger", partition=0, callback=callback)
    assert done.wait(WAIT), "the callback never ran"
    (result, error), took = box
    return result, error, took


def test_get_on_a_pending_future_in_a_callback_fails_at_once(env: ProducerEnv) -> None:
    p = env.producer()
    p.partitions_for(TOPIC)
    env.selector.script(m.PRODUCE, 0, HOLD)  # the trigger is acknowledged, the next request held
    pending: List[FutureRecordMetadata] = []

    def get_pending() -> Any:
        fut = p.send(TOPIC, b"other", partition=1)
        pending.append(fut)
        return fut.get(20)  # (before the fix: the network thread waited 20 s for itself)

    _result, error, _took = run_in_callback(p, get_pending)
    assert isinstance(error, NetworkThreadWaitError), error
    assert isinstance(error, KafkaTimeoutError)  # a wait that could not be: as a timeout, named
    assert "network thread" in str(error)
    assert not pending[0].done()
    for req in env.selector.held(m.PRODUCE):
        env.selector.respond(req)
    assert pending[0].get(WAIT).offset >= 0  # the record itself is fine


def test_get_on_a_done_future_in_a_callback_returns_its_metadata(env: ProducerEnv) -> None:
    p = env.producer()
    earlier = p.send(TOPIC, b"earlier", partition=2)
    meta = earlier.get(WAIT)
    result, error, _took = run_in_callback(p, lambda: earlier.get())
    assert error is None and result == meta
    # and its own record's future, done while its callbacks run
    own: List[Any] = []
    box: List[FutureRecordMetadata] = []
    done = threading.Event()

    def callback(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        own.append(box[0].get())
        own.append(md)
        done.set()

    box.append(p.send(TOPIC, b"own", partition=0, callback=callback))
    assert done.wait(WAIT)
    assert own[0] == own[1] and own[0].offset >= 0


def test_batch_send_future_wait_in_a_callback_fails_at_once(env: ProducerEnv) -> None:
    p = env.producer()
    p.partitions_for(TOPIC)
    env.selector.script(m.PRODUCE, 0, HOLD)

    def wait_batch() -> Any:
        return p.send_batch(TOPIC, [b"a", b"b"], partition=1).get(20)

    _result, error, _took = run_in_callback(p, wait_batch)
    assert isinstance(error, NetworkThreadWaitError), error


def test_flush_in_a_callback_fails_with_the_typed_error(env: ProducerEnv) -> None:
    p = env.producer()
    p.partitions_for(TOPIC)
    _result, error, _took = run_in_callback(p, lambda: p.flush())
    assert isinstance(error, NetworkThreadWaitError), error


def test_send_in_a_callback_to_a_topic_without_metadata_fails_its_future_at_once(env: ProducerEnv) -> None:
    p = env.producer(max_block_ms=10_000)
    p.partitions_for(TOPIC)
    env.selector.add_topic("elsewhere", 2)
    seen: List[Outcome] = []
    fut, error, took = run_in_callback(
        p, lambda: p.send("elsewhere", b"v", callback=lambda md, e: seen.append((md, e))))
    assert error is None  # as a metadata timeout would, the error goes to the record's future and callback
    assert fut.done()
    assert isinstance(fut.exception(0), NetworkThreadWaitError)
    assert "elsewhere" in str(fut.exception(0))
    assert len(seen) == 1 and isinstance(seen[0][1], NetworkThreadWaitError)
    # (the topic's metadata is asked for all the same: a later send from a callback finds it)
    wait_until(lambda: p._metadata.cluster.partition_counts.get("elsewhere") == 2, "the topic's metadata")
    again, error, _took = run_in_callback(p, lambda: p.send("elsewhere", b"w"))
    assert error is None and again.get(WAIT).topic == "elsewhere"


def test_send_batch_in_a_callback_to_a_topic_without_metadata_raises_at_once(env: ProducerEnv) -> None:
    p = env.producer(max_block_ms=10_000)
    p.partitions_for(TOPIC)
    env.selector.add_topic("elsewhere", 2)
    _result, error, _took = run_in_callback(p, lambda: p.send_batch("elsewhere", [b"a"]))
    assert isinstance(error, NetworkThreadWaitError), error


# -- item 17: an error that recurs in every sender iteration (fake clock) --------------------------------

def repeated_error_logs(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name == sender_module.__name__ and r.levelno >= logging.ERROR]


@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("where", ["ready", "metrics"])
def test_a_recurring_sender_error_lets_records_expire_on_time_and_is_logged_with_backoff(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, where: str) -> None:
    h = Harness(delivery_timeout_ms=3000, request_timeout_ms=1000)
    h.boot()

    def broken(*_args: Any) -> Any:
        raise RuntimeError(f"bug in {where}")

    if where == "ready":
        monkeypatch.setattr(h.accumulator, "ready", broken)
    else:
        monkeypatch.setattr(h.sender.metrics, "maybe_report", broken)
        monkeypatch.setattr(h.sender.metrics, "next_report_ms", 0.0)  # a report due in every iteration (stats_cb)
    fut = h.send()
    sent_at = h.now
    with caplog.at_level(logging.ERROR, logger="kproducer"):
        for _ in range(10_000):  # each failing iteration pauses 10 ms of fake time
            if fut.done():
                break
            h.sender._run_once_safely()
        assert fut.done(), "the record did not expire while the error recurred"
        error = fut.exception(0)
        assert isinstance(error, KafkaTimeoutError) and "delivery.timeout.ms" in str(error)
        # on time: at delivery.timeout.ms, within the iterations' pauses
        assert 3000 <= h.now - sent_at <= 3000 + 1000
        assert len(repeated_error_logs(caplog)) == 1  # the first time, with its traceback
        first = repeated_error_logs(caplog)[0]
        assert first.exc_info is not None and f"bug in {where}" in str(first.exc_info[1])
        # the same error for a long while: logged again at most once per interval, with a count
        interval_ms = sender_module.REPEATED_ERROR_LOG_INTERVAL_S * 1000
        started = h.now
        iterations = 0
        while h.now - started < 3 * interval_ms + 1:
            h.sender._run_once_safely()
            iterations += 1
            assert iterations < 100_000
    logs = repeated_error_logs(caplog)
    assert 3 <= len(logs) <= 5, [r.getMessage() for r in logs]  # not one per iteration
    assert iterations > 100
    assert "times" in logs[-1].getMessage() and f"bug in {where}" in logs[-1].getMessage()
    # the loop works again once the error stops
    monkeypatch.undo()
    fut2 = h.send()
    h.run_until(fut2.done)
    assert fut2.get(0).offset >= 0


# -- the asyncio producer's futures when the network thread dies ---------------------------------------

@pytest.mark.allow_internal_errors
def test_asyncio_records_staged_when_the_network_thread_dies_fail_with_its_error(
        env: ProducerEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> List[Any]:
        async with AsyncProducer(producer=env.producer()) as ap:
            await ap.partitions_for(TOPIC)
            env.selector.script(m.PRODUCE, HOLD)
            in_flight = await ap.send(TOPIC, b"in-flight", partition=0)
            await asyncio.sleep(0)  # (appended at the end of the loop iteration)
            deadline = time.monotonic() + WAIT
            while not env.selector.held(m.PRODUCE):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
            staged = [await ap.send(TOPIC, b"s%d" % i) for i in range(3)]  # appended at this iteration's end
            kill_network_thread(ap.producer, monkeypatch)  # (blocks the loop for a moment: fine here)
            outcomes = []
            for fut in [in_flight, *staged]:
                try:
                    outcomes.append(await asyncio.wait_for(fut, WAIT))
                except BaseException as e:  # noqa: B902
                    outcomes.append(e)
            with pytest.raises(NetworkThreadDiedError):
                await ap.send(TOPIC, b"late")
            with pytest.raises(NetworkThreadDiedError):
                await ap.close()
            return outcomes

    outcomes = asyncio.run(main())
    assert len(outcomes) == 4 and all(isinstance(o, NetworkThreadDiedError) for o in outcomes), outcomes
