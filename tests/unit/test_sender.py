"""Sender + NetworkClient + RecordAccumulator running for real on the scripted transport, one
``run_once()`` at a time in the test thread, on a FakeClock."""
from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

import pytest

from kproducer.errors import (
    ClusterAuthorizationFailedError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    ProducerClosedError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from kproducer.producer.future import RecordMetadata
from kproducer.protocol import messages as m
from tests.unit.scripted import DISCONNECT, HOLD, Frame, Harness

Result = Tuple[Optional[RecordMetadata], Optional[BaseException]]


def take_down(h: Harness, broker: int = 1) -> None:
    """The broker stops and refuses connections; the client notices (one sender iteration)."""
    h.selector.down.add(broker)
    h.selector.kill_connection(broker)
    h.run()
    assert h.client.states.state(broker) == "disconnected"


def collector() -> Tuple[List[Result], Any]:
    seen: List[Result] = []
    return seen, lambda md, exc: seen.append((md, exc))


# -- the happy path ----------------------------------------------------------------------------------


def test_boot_negotiates_versions_fetches_metadata_and_connects() -> None:
    h = Harness(topics={"t": 2})
    h.boot()
    apis = [(r.node_id, r.api.name) for r in h.selector.sent()]
    assert apis[0] == (-1, "ApiVersions")  # the bootstrap connection negotiates first
    assert (-1, "Metadata") in apis
    assert (1, "ApiVersions") in apis
    assert h.metadata.cluster.partition_count("t") == 2
    assert h.metadata.cluster.leaders == {("t", 0): 1, ("t", 1): 1}


def test_a_record_is_produced_and_its_future_and_callback_complete() -> None:
    h = Harness()
    h.boot()
    seen, cb = collector()
    fut = h.send(value=b"hello", key=b"k", headers=[("h", b"x")], callback=cb, timestamp=1234)
    h.run_until(fut.done)
    md = fut.get(0)
    assert (md.topic, md.partition, md.offset, md.timestamp) == ("t", 0, 0, 1234)
    assert (md.serialized_key_size, md.serialized_value_size) == (1, 5)
    assert seen == [(md, None)]
    [req] = h.produce_requests()
    assert req.node_id == 1 and req.body["acks"] == -1 and req.body["timeout_ms"] == 30000
    rec = req.batches()[("t", 0)].records[0]
    assert (rec.key, rec.value, rec.headers) == (b"k", b"hello", [("h", b"x")])
    assert h.pool.available_memory() == h.pool.total_memory  # memory came back
    assert h.sender.metrics.snapshot()["record-ack-total"] == 1


@pytest.mark.allow_internal_errors
def test_a_failure_recording_a_sent_requests_metrics_neither_fails_nor_resends_its_batches(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    h.boot()

    def broken(node: int, batches: Any, now: Any = None) -> None:
        raise RuntimeError("metrics bug")

    monkeypatch.setattr(h.sender.metrics, "record_produce_request", broken)
    with caplog.at_level(logging.ERROR, logger="kproducer.producer.sender"):
        fut = h.send(value=b"once")
        h.run_until(fut.done)
    assert fut.get(0).offset == 0
    assert len(h.produce_requests()) == 1  # sent once: not completed as failed and retried
    assert h.sender.metrics.retries == 0
    assert "could not record the metrics of a produce request" in caplog.text


def test_unknown_leader_triggers_a_metadata_request_for_that_topic() -> None:
    h = Harness(topics={"t": 1, "u": 2})
    h.boot("t")
    before = len(h.selector.sent(m.METADATA))
    # appended without telling Metadata about "u": the sender's ready() finds no leader and asks for it
    start = h.now
    fut = h.accumulator.append("u", 1, 1, None, b"v", None, None, 0, h.now).future
    # a topic new to the metadata is fetched at once, without waiting out retry.backoff.ms since the boot's
    # refresh (Java: Metadata.add -> requestUpdateForNewTopics)
    h.run_until(fut.done)
    assert h.now == start
    topics = [[t["name"] for t in r.body["topics"]] for r in h.selector.sent(m.METADATA)[before:]]
    assert topics and topics[0] == ["u"]  # a partial request for just that topic
    assert fut.get(0).partition == 1


def test_unknown_leader_of_a_known_topic_asks_again_after_the_refresh_backoff() -> None:
    h = Harness(topics={"t": [1, -1]})  # partition 1 has no leader
    h.boot("t")
    before = len(h.selector.sent(m.METADATA))
    fut = h.send(value=b"v", partition=1)
    h.run()
    assert h.metadata.update_requested() and len(h.selector.sent(m.METADATA)) == before
    # metadata refreshes are spaced by retry.backoff.ms; the sender sleeps just that long
    assert h.selector.poll_timeouts[-1] == 100
    h.advance(100)
    h.run()
    assert len(h.selector.sent(m.METADATA)) == before + 1
    assert not fut.done()


def test_records_wait_for_linger_then_go_out_in_one_request() -> None:
    h = Harness(linger_ms=50)
    h.boot()
    futs = [h.send(value=bytes([i])) for i in range(3)]
    h.run()
    assert h.produce_requests() == []
    assert h.selector.poll_timeouts[-1] == 50  # the sender sleeps exactly until linger expires
    h.advance(49)
    h.run()
    assert h.produce_requests() == []
    assert h.selector.poll_timeouts[-1] == 1
    h.advance(1)
    h.run()
    [req] = h.produce_requests()
    assert req.values() == [b"\x00", b"\x01", b"\x02"]
    assert [f.get(0).offset for f in futs] == [0, 1, 2]


def test_one_request_per_node_carries_all_its_ready_partitions() -> None:
    h = Harness(topics={"t": [1, 2, 1]}, brokers={1: ("b1", 1), 2: ("b2", 2)})
    h.boot()
    futs = [h.send(partition=p, value=bytes([p])) for p in range(3)]
    h.run_until(lambda: all(f.done() for f in futs))
    reqs = h.produce_requests()
    assert sorted((r.node_id, tuple(sorted(r.partitions()))) for r in reqs) == [
        (1, (("t", 0), ("t", 2))), (2, (("t", 1),))]
    assert h.selector.log_values(("t", 1)) == [b"\x01"]


def test_acks_0_completes_when_written_with_offset_minus_one() -> None:
    h = Harness(acks=0)
    h.boot()
    fut = h.send()
    h.run_until(fut.done)
    [req] = h.produce_requests()
    assert req.body["acks"] == 0 and not req.expects_response
    assert fut.get(0).offset == -1
    assert h.client.in_flight_count() == 0
    assert h.selector.log_values(("t", 0)) == [b"v"]  # written, though the broker says nothing
    assert not h.selector.held()


def test_acks_1_is_sent_as_is() -> None:
    h = Harness(acks=1)
    h.boot()
    fut = h.send()
    h.run_until(fut.done)
    assert h.produce_requests()[0].body["acks"] == 1
    assert fut.get(0).offset == 0


# -- retries ---------------------------------------------------------------------------------------


def test_retriable_error_retries_after_backoff_and_refreshes_metadata() -> None:
    h = Harness(retry_backoff_ms=100)
    h.boot()
    h.selector.script(m.PRODUCE, 6)  # NOT_LEADER_OR_FOLLOWER once
    seen, cb = collector()
    fut = h.send(value=b"x", callback=cb)
    h.run_until(lambda: len(h.produce_requests()) == 1 and not h.selector.held())
    h.run()
    assert not fut.done() and seen == []
    batch = fut._resolve()
    assert batch.attempts == 1 and batch.retry_backoff_ms == 100
    assert h.metadata.update_requested()
    metadata_before = len(h.selector.sent(m.METADATA))
    h.run(3)
    assert len(h.produce_requests()) == 1  # still backing off
    assert max(h.selector.poll_timeouts[-3:]) <= 100
    h.advance(100)
    h.run_until(fut.done)
    assert len(h.produce_requests()) == 2
    assert h.produce_requests()[1].values() == [b"x"]
    assert len(h.selector.sent(m.METADATA)) > metadata_before
    assert fut.get(0).offset == 0 and len(seen) == 1 and seen[0][1] is None
    assert h.sender.metrics.retries == 1


def test_retry_backoff_grows_exponentially_up_to_the_maximum() -> None:
    h = Harness(retry_backoff_ms=100, retry_backoff_max_ms=300, idle_advance=True)
    h.boot()
    h.selector.script(m.PRODUCE, 7, 7, 7, 7)  # REQUEST_TIMED_OUT (retriable, no metadata refresh)
    fut = h.send()
    h.run_until(fut.done, max_iterations=500)
    times = [r.written_ms for r in h.produce_requests()]
    assert [b - a for a, b in zip(times, times[1:])] == [100, 200, 300, 300]
    assert fut.get(0).offset == 0


def test_retry_backoff_jitter_stays_within_twenty_percent() -> None:
    h = Harness(retry_backoff_ms=100, retry_backoff_max_ms=100_000, retry_jitter=0.2, idle_advance=True)
    h.boot()
    h.selector.script(m.PRODUCE, *([7] * 6))
    fut = h.send()
    h.run_until(fut.done, max_iterations=500)
    times = [r.written_ms for r in h.produce_requests()]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(gaps) == 6
    for k, gap in enumerate(gaps):
        assert 0.8 * 100 * 2 ** k <= gap <= 1.2 * 100 * 2 ** k + 1


def test_non_retriable_error_fails_every_record_of_the_batch() -> None:
    h = Harness(linger_ms=10)
    h.boot()
    h.selector.script(m.PRODUCE, 29)  # TOPIC_AUTHORIZATION_FAILED
    seen, cb = collector()
    futs = [h.send(value=bytes([i]), callback=cb) for i in range(3)]
    h.advance(10)
    h.run_until(lambda: all(f.done() for f in futs))
    assert len(h.produce_requests()) == 1  # not retried
    assert len(seen) == 3 and all(md is None and isinstance(e, TopicAuthorizationFailedError) for md, e in seen)
    for f in futs:
        with pytest.raises(TopicAuthorizationFailedError):
            f.get(0)
    assert h.pool.available_memory() == h.pool.total_memory
    assert h.sender.metrics.records_failed == 3


def test_retries_are_bounded_by_the_retries_setting() -> None:
    h = Harness(retries=2, idle_advance=True)
    h.boot()
    h.selector.script(m.PRODUCE, 6, 6, 6, 6)
    fut = h.send()
    h.run_until(fut.done, max_iterations=500)
    assert len(h.produce_requests()) == 3  # the first attempt and two retries
    assert isinstance(fut.exception(0), NotLeaderOrFollowerError)


def test_retries_zero_fails_at_the_first_error() -> None:
    h = Harness(retries=0)
    h.boot()
    h.selector.script(m.PRODUCE, 7)
    fut = h.send()
    h.run_until(fut.done)
    assert len(h.produce_requests()) == 1
    assert isinstance(fut.exception(0), RequestTimedOutError)


def test_a_retry_goes_back_ahead_of_newer_records() -> None:
    h = Harness(max_in_flight_requests_per_connection=1)  # guarantee order: the partition is muted
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    f1 = h.send(value=b"first")
    h.run_until(lambda: len(h.selector.held()) == 1)
    f2 = h.send(value=b"second")
    h.run(3)
    assert len(h.produce_requests()) == 1  # muted while the first is in flight
    h.selector.respond(h.selector.held()[0], 7)  # REQUEST_TIMED_OUT: retriable
    h.run()
    assert f1._resolve().attempts == 1 and not f2.done()
    h.advance(100)
    h.run_until(lambda: f1.done() and f2.done())
    assert h.selector.log_values(("t", 0)) == [b"first", b"second"]
    assert [r.values() for r in h.produce_requests()] == [[b"first"], [b"first"], [b"second"]]


def test_a_response_that_leaves_a_partition_out_is_retried() -> None:
    h = Harness()
    h.boot()
    h.selector.script(m.PRODUCE, {"responses": [], "throttle_time_ms": 0})
    fut = h.send()
    h.run_until(lambda: len(h.produce_requests()) == 1 and not h.selector.held())
    h.advance(100)
    h.run_until(fut.done)
    assert len(h.produce_requests()) == 2 and fut.get(0).offset == 0


def test_leader_move_is_followed_after_not_leader() -> None:
    h = Harness(topics={"t": [1]}, brokers={1: ("b1", 1), 2: ("b2", 2)}, idle_advance=True)
    h.boot()
    h.selector.topics["t"] = [2]  # the leader moves; broker 1 now answers NOT_LEADER_OR_FOLLOWER
    fut = h.send()
    h.run_until(fut.done)
    nodes = [r.node_id for r in h.produce_requests()]
    # the retry and the metadata refresh are due at the same time (both wait retry.backoff.ms): the
    # first retry may still go to the old leader, then the records follow the new one
    assert nodes[-1] == 2 and set(nodes[:-1]) == {1}
    assert h.metadata.cluster.leaders[("t", 0)] == 2
    assert fut.get(0).offset == 0


# -- expiry ----------------------------------------------------------------------------------------


def test_delivery_timeout_bounds_retries() -> None:
    h = Harness(delivery_timeout_ms=1000, request_timeout_ms=500, retry_backoff_ms=100,
                retry_backoff_max_ms=100, idle_advance=True)
    h.boot()
    h.selector.handlers[m.PRODUCE.key] = lambda req: 7  # always REQUEST_TIMED_OUT
    seen, record = collector()
    done_at: List[float] = []
    start = h.now
    fut = h.send(callback=lambda md, exc: (record(md, exc), done_at.append(h.now)))
    h.run_until(fut.done, max_iterations=1000)
    # no later than delivery.timeout.ms (float rounding aside); read when the callback ran: the iteration that
    # failed the batch may then sleep (idle_advance moves the clock) with nothing left to do
    assert done_at[0] - start <= 1000 + 1e-6
    assert len(seen) == 1 and seen[0][1] is not None
    assert isinstance(seen[0][1], (KafkaTimeoutError, RequestTimedOutError))
    assert len(h.produce_requests()) >= 5


def test_a_retriable_error_after_the_delivery_deadline_is_not_retried() -> None:
    h = Harness(delivery_timeout_ms=40_000, request_timeout_ms=30_000)
    h.boot()
    take_down(h)
    start = h.now
    fut = h.send()
    h.advance(15_000)  # queued while the leader is away, so the request is out when the deadline passes
    h.selector.down.clear()
    h.selector.script(m.PRODUCE, HOLD)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    h.advance(start + 40_000 - 1 - h.now)
    h.run()
    assert not fut.done()
    # the broker's retriable error is read just after the deadline has passed
    h.selector.respond(h.selector.held(m.PRODUCE)[0], 7)
    real_poll = h.selector.poll

    def slow_poll(timeout_ms: float) -> None:
        h.advance(2)
        real_poll(timeout_ms)

    h.selector.poll = slow_poll  # type: ignore[method-assign]
    h.run()
    assert fut.done()
    assert isinstance(fut.exception(0), RequestTimedOutError)  # failed with the broker's error, not retried
    assert h.sender.metrics.retries == 0 and fut._resolve().attempts == 0


def test_a_queued_batch_expires_after_delivery_timeout() -> None:
    h = Harness(delivery_timeout_ms=5000, request_timeout_ms=1000, idle_advance=True)
    h.boot()
    take_down(h)
    when: List[float] = []
    start = h.now
    fut = h.send(callback=lambda md, e: when.append(h.now))
    h.run_until(fut.done, max_iterations=2000)
    assert [t - start for t in when] == [5000]  # failed exactly at the deadline: the sender woke up for it
    err = fut.exception(0)
    assert isinstance(err, KafkaTimeoutError) and "delivery.timeout.ms" in str(err)
    assert "never sent" in str(err)
    assert h.produce_requests() == []
    assert h.pool.available_memory() == h.pool.total_memory


def test_a_batch_expires_while_in_flight_and_a_late_response_is_ignored() -> None:
    h = Harness()  # delivery.timeout.ms 120 s, request.timeout.ms 30 s
    h.boot()
    take_down(h)
    seen, cb = collector()
    start = h.now
    fut = h.send(callback=cb)
    h.run(3)
    h.advance(100_000)  # queued for 100 s while the leader is unreachable
    h.selector.down.clear()
    h.selector.script(m.PRODUCE, HOLD)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    h.advance(start + 120_000 - h.now)  # the request has been out < request.timeout.ms
    h.run()
    assert fut.done()
    err = fut.exception(0)
    assert isinstance(err, KafkaTimeoutError) and "in flight" in str(err)
    [late] = h.selector.held(m.PRODUCE)
    h.selector.respond(late, 0)
    h.run(2)
    assert len(seen) == 1  # the late success does not call the callback again
    assert isinstance(fut.exception(0), KafkaTimeoutError)


# -- request timeout, disconnects, reconnect backoff -----------------------------------------------


def test_request_timeout_closes_the_connection_and_retries() -> None:
    h = Harness(request_timeout_ms=2000)
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    fut = h.send()
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    h.advance(1999)
    h.run()
    assert not h.selector.closed_by_client
    h.advance(1)
    h.run()
    assert [n for n, why in h.selector.closed_by_client] == [1]
    assert "request.timeout.ms" in h.selector.closed_by_client[0][1]
    batch = fut._resolve()
    assert batch.attempts == 1 and not fut.done()
    assert h.metadata.update_requested()
    connects = len(h.selector.connect_attempts)
    h.advance(100)
    h.run_until(fut.done)
    assert len(h.selector.connect_attempts) > connects  # reconnected
    assert len(h.produce_requests()) == 2 and fut.get(0).offset == 0


def test_broker_disconnect_mid_request_retries_on_a_new_connection() -> None:
    h = Harness()
    h.boot()
    h.selector.script(m.PRODUCE, DISCONNECT)
    fut = h.send(value=b"again")
    h.run_until(lambda: len(h.produce_requests()) == 1 and fut._resolve().attempts == 1)
    h.advance(100)
    h.run_until(fut.done)
    assert [r.values() for r in h.produce_requests()] == [[b"again"], [b"again"]]
    assert fut.get(0).offset == 0


def test_response_with_a_wrong_correlation_id_drops_the_connection() -> None:
    h = Harness()
    h.boot()

    def wrong_id(req: Any) -> Frame:
        body = h.selector.produce_response(req, append=False)
        return Frame(m.encode_response(m.PRODUCE, req.version, req.correlation_id + 1000, body))

    h.selector.script(m.PRODUCE, wrong_id)
    fut = h.send()
    h.run_until(lambda: bool(h.selector.closed_by_client))
    assert "correlation id" in h.selector.closed_by_client[0][1]
    h.advance(100)
    h.run_until(fut.done)
    assert fut.get(0).offset == 0 and len(h.produce_requests()) == 2


def test_reconnect_backoff_grows_exponentially_while_the_broker_is_down() -> None:
    h = Harness(reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000, idle_advance=True,
                delivery_timeout_ms=20_000, request_timeout_ms=10_000)
    h.boot()
    take_down(h)
    fut = h.send()
    h.run_until(fut.done, max_iterations=5000)
    times = [t for t, node, _addr in h.selector.connect_attempts if node == 1]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(gaps) >= 8
    assert gaps[0] == 50  # reconnect.backoff.ms after the connection was lost
    for a, b in zip(gaps[1:], gaps[2:]):
        assert b == min(2 * a, 1000)  # doubles on every failed attempt ...
    assert gaps[-1] == 1000  # ... up to reconnect.backoff.max.ms
    assert isinstance(fut.exception(0), KafkaTimeoutError)


def test_reconnect_backoff_has_jitter_within_twenty_percent() -> None:
    h = Harness(reconnect_backoff_ms=50, reconnect_backoff_max_ms=100_000, reconnect_jitter=0.2,
                idle_advance=True, delivery_timeout_ms=12_000, request_timeout_ms=10_000)
    h.boot()
    take_down(h)
    fut = h.send()
    h.run_until(fut.done, max_iterations=5000)
    times = [t for t, node, _addr in h.selector.connect_attempts if node == 1]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(gaps) >= 5
    for k, gap in enumerate(gaps[1:6]):
        assert 0.8 * 50 * 2 ** k <= gap <= 1.2 * 50 * 2 ** k + 1


def test_records_are_delivered_once_the_broker_comes_back() -> None:
    h = Harness(idle_advance=True)
    h.boot()
    take_down(h)
    fut = h.send(value=b"late")
    h.run(30)
    assert not fut.done() and h.produce_requests() == []
    h.selector.down.clear()
    h.run_until(fut.done, max_iterations=200)
    assert fut.get(0).offset == 0 and h.selector.log_values(("t", 0)) == [b"late"]


def test_connection_setup_timeout_counts_as_a_failed_attempt() -> None:
    h = Harness(socket_connection_setup_timeout_ms=500)
    h.boot()
    h.selector.hanging.add(1)
    h.selector.kill_connection(1)
    h.run()
    fut = h.send()
    h.advance(50)  # reconnect.backoff.ms after losing the connection
    h.run(3)
    assert h.selector.connection_states().get(1) == "connecting"
    h.advance(500)
    h.run(2)
    assert any("setup timed out" in why for _n, why in h.selector.closed_by_client)
    assert h.client.states.failures(1) == 1
    h.selector.hanging.clear()
    h.advance(100)
    h.run_until(fut.done)
    assert fut.get(0).offset == 0


# -- in flight -------------------------------------------------------------------------------------


def test_at_most_max_in_flight_requests_per_connection() -> None:
    h = Harness(max_in_flight_requests_per_connection=2)
    h.boot()
    h.selector.handlers[m.PRODUCE.key] = lambda req: HOLD
    futs = []
    for i in range(3):
        futs.append(h.send(value=bytes([i])))
        h.run(2)
    assert len(h.selector.held(m.PRODUCE)) == 2
    assert h.client.in_flight_count(1) == 2
    first, second = h.selector.held(m.PRODUCE)
    h.selector.respond(first, 0)
    h.run()
    assert futs[0].done() and not futs[1].done()  # the oldest completes first
    h.run()
    assert len(h.selector.held(m.PRODUCE)) == 2  # the third went out once a slot freed
    for req in h.selector.held(m.PRODUCE):
        h.selector.respond(req, 0)
    h.run_until(lambda: all(f.done() for f in futs))
    assert [f.get(0).offset for f in futs] == [0, 1, 2]


# -- callbacks -------------------------------------------------------------------------------------


@pytest.mark.allow_internal_errors
def test_a_raising_callback_is_logged_and_the_sender_carries_on(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    h.boot()
    order: List[str] = []

    def bad(md: Any, exc: Any) -> None:
        order.append("bad")
        raise RuntimeError("callback bug")

    f1 = h.send(value=b"1", callback=lambda md, e: order.append("first"))
    h.send(value=b"2", callback=bad)
    f3 = h.send(value=b"3", callback=lambda md, e: order.append("third"))
    with caplog.at_level(logging.ERROR):
        h.run_until(f3.done)
    assert order == ["first", "bad", "third"]
    assert any("callback" in r.getMessage() and r.exc_info and "callback bug" in str(r.exc_info[1])
               for r in caplog.records)
    f4 = h.send(value=b"4", callback=lambda md, e: order.append("fourth"))
    h.run_until(f4.done)  # the sender still works
    assert order[-1] == "fourth" and f1.get(0).offset == 0 and f4.get(0).offset == 3


@pytest.mark.allow_internal_errors
def test_an_unexpected_error_in_run_once_is_logged_and_survived(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    h.boot()
    real_ready = h.accumulator.ready
    calls = {"n": 0}

    def flaky(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("internal bug")
        return real_ready(*args)

    h.accumulator.ready = flaky  # type: ignore[method-assign]
    fut = h.send()
    before = h.now
    with caplog.at_level(logging.ERROR):
        h.sender._run_once_safely()
    assert any("unexpected error" in r.getMessage() for r in caplog.records)
    assert h.now - before == 10  # it paused briefly instead of spinning
    for _ in range(20):
        if fut.done():
            break
        h.sender._run_once_safely()
    assert fut.get(0).offset == 0


# -- message too large -----------------------------------------------------------------------------


def test_a_batch_too_large_for_the_broker_is_split_and_resent() -> None:
    h = Harness(linger_ms=5)
    h.boot()
    h.selector.script(m.PRODUCE, 10)  # MESSAGE_TOO_LARGE
    seen, cb = collector()
    futs = [h.send(value=bytes([i]) * 100, callback=cb) for i in range(6)]
    h.advance(5)
    h.run_until(lambda: all(f.done() for f in futs))
    reqs = h.produce_requests()
    assert len(reqs) >= 3 and len(reqs[0].values()) == 6
    assert all(len(r.values()) < 6 for r in reqs[1:])
    assert h.selector.log_values(("t", 0)) == [bytes([i]) * 100 for i in range(6)]
    assert [f.get(0).offset for f in futs] == list(range(6))
    assert len(seen) == 6 and all(e is None for _md, e in seen)
    assert h.sender.metrics.splits >= 1


def test_a_single_record_too_large_for_the_broker_fails() -> None:
    h = Harness()
    h.boot()
    h.selector.script(m.PRODUCE, 10)
    fut = h.send()
    h.run_until(fut.done)
    from kproducer.errors import MessageTooLargeError
    assert isinstance(fut.exception(0), MessageTooLargeError)
    assert len(h.produce_requests()) == 1


# -- idempotence -----------------------------------------------------------------------------------


def test_idempotent_producer_gets_an_id_then_numbers_batches() -> None:
    h = Harness(enable_idempotence=True)
    h.boot()
    apis = [r.api.name for r in h.selector.sent()]
    assert "InitProducerId" in apis
    f1 = h.send(value=b"a")
    h.run_until(f1.done)
    f2 = h.send(value=b"b")
    f3 = h.send(value=b"c")
    h.run_until(lambda: f2.done() and f3.done())
    batches = [r.batches()[("t", 0)] for r in h.produce_requests()]
    assert [(b.producer_id, b.producer_epoch, b.base_sequence, b.record_count) for b in batches] == [
        (4000, 0, 0, 1), (4000, 0, 1, 2)]
    everything = [r.api.name for r in h.selector.sent()]
    assert everything.index("InitProducerId") < everything.index("Produce")
    assert everything.count("InitProducerId") == 1  # once, not per batch


def test_idempotent_retry_keeps_its_sequence_and_bytes() -> None:
    h = Harness(enable_idempotence=True)
    h.boot()
    h.selector.script(m.PRODUCE, 6)
    fut = h.send(value=b"x")
    h.run_until(lambda: fut._resolve().attempts == 1)
    h.advance(100)
    h.run_until(fut.done)
    first, second = h.produce_requests()
    assert first.body["topic_data"] == second.body["topic_data"]  # the same batch, byte for byte
    assert second.batches()[("t", 0)].base_sequence == 0


def test_idempotent_retries_go_out_in_sequence_order() -> None:
    h = Harness(enable_idempotence=True, batch_size=200)
    h.boot()
    # the partition's first batch goes alone; once it is acknowledged, batches are pipelined
    fw = h.send(value=b"W" * 150)
    h.run_until(fw.done)
    # A (seq 1) fails retriably; B (seq 2), already in flight, is then out of order at the broker
    h.selector.script(m.PRODUCE, HOLD, HOLD)
    fa = h.send(value=b"A" * 150)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    fb = h.send(value=b"B" * 150)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 2)
    ra, rb = h.selector.held(m.PRODUCE)
    assert [ra.batches()[("t", 0)].base_sequence, rb.batches()[("t", 0)].base_sequence] == [1, 2]
    h.selector.respond(ra, 6)
    h.selector.respond(rb, 45)  # OUT_OF_ORDER_SEQUENCE_NUMBER
    h.run()
    assert [b.base_sequence for b in h.accumulator.queued_batches_list()] == [1, 2]
    h.advance(1000)
    h.run_until(lambda: fa.done() and fb.done())
    resent = [r.batches()[("t", 0)].base_sequence for r in h.produce_requests()[3:]]
    assert resent == [1, 2]
    assert h.selector.log_values(("t", 0)) == [b"W" * 150, b"A" * 150, b"B" * 150]
    assert fa.get(0).offset == 1 and fb.get(0).offset == 2


def test_duplicate_sequence_is_counted_as_success() -> None:
    h = Harness(enable_idempotence=True)
    h.boot()
    h.selector.script(m.PRODUCE, {("t", 0): 46})
    fut = h.send()
    h.run_until(fut.done)
    assert fut.exception(0) is None
    assert len(h.produce_requests()) == 1


def test_init_producer_id_retriable_error_is_retried_after_the_backoff() -> None:
    # (a constant backoff here: its growth is tested in test_lifecycle.py)
    h = Harness(enable_idempotence=True, retry_backoff_ms=100, retry_backoff_max_ms=100)
    failed = {"error_code": 15, "producer_id": -1, "producer_epoch": -1}  # COORDINATOR_NOT_AVAILABLE
    h.selector.script(m.INIT_PRODUCER_ID, failed, failed)
    h.run_until(lambda: len(h.selector.sent(m.INIT_PRODUCER_ID)) == 1)
    h.run(10)
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 1  # no hammering the broker: it waits
    assert h.selector.poll_timeouts[-1] == 100
    h.advance(100)
    h.run_until(lambda: len(h.selector.sent(m.INIT_PRODUCER_ID)) == 2)
    h.advance(99)
    h.run(5)
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 2
    h.advance(1)
    h.boot()
    times = [r.written_ms for r in h.selector.sent(m.INIT_PRODUCER_ID)]
    assert [b - a for a, b in zip(times, times[1:])] == [100, 100]
    assert h.txn is not None and h.txn.producer_id == 4000


def test_records_expire_while_no_broker_gives_a_producer_id() -> None:
    h = Harness(enable_idempotence=True, delivery_timeout_ms=2000, request_timeout_ms=1000, idle_advance=True,
                retry_backoff_max_ms=100)  # (a constant backoff: its growth is tested in test_lifecycle.py)
    h.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: {"error_code": 15, "producer_id": -1,
                                                                "producer_epoch": -1}
    when: List[float] = []
    start = h.now
    fut = h.send(callback=lambda md, e: when.append(h.now))
    h.run_until(fut.done, max_iterations=2000)
    assert isinstance(fut.exception(0), KafkaTimeoutError)
    assert [t - start for t in when] == [2000]  # exactly at delivery.timeout.ms
    # retried every retry.backoff.ms (100), not in a tight loop
    assert 10 <= len(h.selector.sent(m.INIT_PRODUCER_ID)) <= 21 and h.produce_requests() == []


@pytest.mark.parametrize("code, error", [(31, ClusterAuthorizationFailedError),
                                         (53, TransactionalIdAuthorizationFailedError)])
def test_a_refused_init_producer_id_fails_the_queued_records_then_the_producer_asks_again(
        code: int, error: Any) -> None:
    # Java's Sender.shouldHandleAuthorizationError (KIP-679: a principal that may Write no topic): the queued
    # records fail with the error, the producer is not fatal, and once the ACL is there it delivers
    h = Harness(enable_idempotence=True, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    h.selector.script(m.INIT_PRODUCER_ID, {"error_code": code, "producer_id": -1, "producer_epoch": -1})
    seen, cb = collector()
    futs = [h.send(value=b"a", callback=cb), h.send(value=b"b", partition=1, callback=cb)]
    h.run_until(lambda: all(f.done() for f in futs))
    assert all(isinstance(f.exception(0), error) for f in futs)
    assert [type(e) for _md, e in seen] == [error, error]
    assert h.sender.fatal_error is None and h.txn is not None and not h.txn.has_fatal_error()
    late = h.send(value=b"late")  # (send() does not raise)
    h.run(10)
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 1  # the next one waits out retry.backoff.ms
    assert h.selector.poll_timeouts[-1] == 100 and not late.done()
    h.advance(100)
    h.run_until(late.done)  # (the default answer now: a producer id)
    assert late.get(0).offset == 0
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 2
    assert [r.values() for r in h.produce_requests()] == [[b"late"]]  # the refused records were not sent


# -- closing ---------------------------------------------------------------------------------------


def test_initiate_close_sends_what_is_queued_then_stops() -> None:
    h = Harness(linger_ms=60_000)
    h.boot()
    futs = [h.send(value=bytes([i])) for i in range(3)]
    h.run()
    assert h.produce_requests() == []  # lingering
    h.sender.initiate_close()
    h.sender.run()  # in this thread: drains, then returns
    assert [f.get(0).offset for f in futs] == [0, 1, 2]
    assert h.client.closed
    with pytest.raises(ProducerClosedError):
        h.send()


def test_initiate_close_with_an_unreachable_broker_ends_by_delivery_timeout() -> None:
    h = Harness(idle_advance=True, delivery_timeout_ms=3000, request_timeout_ms=1000)
    h.boot()
    take_down(h)
    when: List[float] = []
    start = h.now
    fut = h.send(callback=lambda md, e: when.append(h.now))
    h.sender.initiate_close()
    h.sender.run()
    assert isinstance(fut.exception(0), KafkaTimeoutError)
    assert [t - start for t in when] == [3000]
    assert h.client.closed


def test_force_stop_fails_queued_and_in_flight_records() -> None:
    h = Harness()
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    in_flight = h.send(partition=0)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    h.selector.down.add(1)
    queued = h.send(partition=1)
    h.sender.force_stop()
    h.sender.run()
    for f in (in_flight, queued):
        assert isinstance(f.exception(0), ProducerClosedError)
    assert h.pool.available_memory() == h.pool.total_memory
    assert h.client.closed


@pytest.mark.allow_internal_errors
def test_a_broker_without_a_usable_produce_version_fails_the_records_at_once() -> None:
    h = Harness()
    h.selector.api_versions[m.PRODUCE.key] = (0, 2)  # only versions before RecordBatch v2
    h.boot()
    seen, cb = collector()
    fut = h.send(callback=cb)
    h.run_until(fut.done)
    assert isinstance(fut.exception(0), UnsupportedVersionError)
    assert "Produce" in str(fut.exception(0))
    assert h.produce_requests() == [] and len(seen) == 1
    # the sender keeps working: other records are handled the same way, nothing hangs
    fut2 = h.send(partition=1)
    h.run_until(fut2.done)
    assert isinstance(fut2.exception(0), UnsupportedVersionError)


# -- KIP-467: per-record errors ----------------------------------------------------------------------


def _refuse_records(h: Harness, code: int, indexes: List[int]) -> Any:
    """A Produce answer refusing the whole batch with ``code``, naming ``indexes`` as the bad records."""
    def answer(req: Any) -> Any:
        body = h.selector.produce_response(req, {tp: code for tp in req.partitions()})
        for topic in body["responses"]:
            for p in topic["partition_responses"]:
                p["error_message"] = "some records are invalid"
                p["record_errors"] = [{"batch_index": i, "batch_index_error_message": f"record {i} is bad"}
                                      for i in indexes]
        return body
    return answer


@pytest.mark.parametrize("idempotent", [False, True])
def test_record_errors_fail_only_the_named_records_and_retry_the_others(idempotent: bool) -> None:
    from kproducer.errors import InvalidRecordError

    h = Harness(linger_ms=5, enable_idempotence=idempotent)
    h.boot()
    if idempotent:  # the partition's first batch goes alone; acknowledge one first
        first = h.send(value=b"first")
        h.advance(5)
        h.run_until(first.done)
    h.selector.script(m.PRODUCE, _refuse_records(h, InvalidRecordError.code, [1, 3]))
    seen, cb = collector()
    futs = [h.send(value=b"r%d" % i, callback=cb) for i in range(5)]
    h.advance(5)
    h.run_until(lambda: all(f.done() for f in futs))
    for i in (1, 3):
        exc = futs[i].exception(0)
        assert isinstance(exc, InvalidRecordError) and f"record {i} is bad" in str(exc), exc
    good = [futs[i].get(0) for i in (0, 2, 4)]
    assert [md.offset for md in good] == [o + (1 if idempotent else 0) for o in range(3)]
    reqs = h.produce_requests()[1 if idempotent else 0:]
    assert len(reqs) == 2 and reqs[1].values() == [b"r0", b"r2", b"r4"]
    assert h.selector.log_values(("t", 0))[-3:] == [b"r0", b"r2", b"r4"]
    if idempotent:
        retried = reqs[1].batches()[("t", 0)]
        assert retried.base_sequence == 1, "the kept records take the failed batch's first sequence"
        nxt = h.send(value=b"next")
        h.advance(5)
        h.run_until(nxt.done)
        assert h.produce_requests()[-1].batches()[("t", 0)].base_sequence == 4
    assert len(seen) == 5
    assert h.sender.metrics.records_failed == 2
    assert h.pool.available_memory() == h.pool.total_memory


def test_record_errors_naming_every_record_fail_the_batch() -> None:
    from kproducer.errors import InvalidRecordError

    h = Harness(linger_ms=5)
    h.boot()
    h.selector.script(m.PRODUCE, _refuse_records(h, InvalidRecordError.code, [0, 1]))
    futs = [h.send(value=b"r%d" % i) for i in range(2)]
    h.advance(5)
    h.run_until(lambda: all(f.done() for f in futs))
    assert all(isinstance(f.exception(0), InvalidRecordError) for f in futs)
    assert len(h.produce_requests()) == 1


def test_idempotent_producer_moves_later_sequences_down_after_a_refused_batch() -> None:
    """Java's adjustSequencesDueToFailedBatch: a batch the broker refused for good leaves no gap; the batch
    in flight behind it takes its sequence (its OUT_OF_ORDER answer is retried) and the producer id stays."""
    from kproducer.errors import InvalidRecordError, OutOfOrderSequenceNumberError

    h = Harness(enable_idempotence=True, linger_ms=5)
    h.boot()
    first = h.send(value=b"first")
    h.advance(5)
    h.run_until(first.done)
    h.selector.script(m.PRODUCE, HOLD, HOLD)
    a = h.send(value=b"a")
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    b = h.send(value=b"b")
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 2)
    req_a, req_b = h.selector.held(m.PRODUCE)
    assert req_b.batches()[("t", 0)].base_sequence == 2
    h.selector.respond(req_a, InvalidRecordError.code)
    h.run_until(a.done)
    assert isinstance(a.exception(0), InvalidRecordError)
    h.selector.respond(req_b, OutOfOrderSequenceNumberError.code)
    h.run_until(lambda: b._resolve().attempts == 1)
    h.advance(100)
    h.run_until(b.done)
    assert b.get(0).offset == 1
    retry = h.produce_requests()[-1].batches()[("t", 0)]
    assert (retry.producer_id, retry.base_sequence) == (first_pid(h), 1)
    assert h.selector.sent(m.INIT_PRODUCER_ID) and len(h.selector.sent(m.INIT_PRODUCER_ID)) == 1


def first_pid(h: Harness) -> int:
    return h.produce_requests()[0].batches()[("t", 0)].producer_id


# -- the poll after sending (Sender._after_send_timeout) -----------------------------------------------


def test_after_a_send_that_fills_max_in_flight_the_sender_waits_for_a_response() -> None:
    """Java polls with 0 after sending, to loop and send more; with the broker at max.in.flight nothing more can
    go, so the sender waits instead of spending an iteration to find that out, and the response ends the wait."""
    h = Harness(topics={"t": 1}, max_in_flight_requests_per_connection=1, batch_size=1024, linger_ms=0)
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    futs = [h.send(value=b"x" * 900, partition=0) for _ in range(2)]  # two batches: one per request
    h.run()
    assert len(h.selector.held(m.PRODUCE)) == 1
    assert h.selector.poll_timeouts[-1] > 0  # (it was 0: the next iteration only found the broker busy)
    h.selector.respond(h.selector.held(m.PRODUCE)[0])
    h.run_until(lambda: all(f.done() for f in futs))
    assert len(h.produce_requests()) == 2



def count_ready_calls(h: Harness, monkeypatch: pytest.MonkeyPatch) -> List[float]:
    """The times of the accumulator's ready() calls from now on."""
    asked: List[float] = []
    ready = h.accumulator.ready

    def counting(cluster: Any, now: float) -> Any:
        asked.append(now)
        return ready(cluster, now)

    monkeypatch.setattr(h.accumulator, "ready", counting)
    return asked

def test_after_a_send_that_fills_max_in_flight_the_accumulator_is_not_asked_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With every node just sent to at max.in.flight, the partitions of those nodes wait for a response and the
    others' timing is what ready() found before the drain: one ready() per iteration, not two."""
    h = Harness(topics={"t": [1, 2]}, brokers={1: ("broker1", 9092), 2: ("broker2", 9092)},
                max_in_flight_requests_per_connection=1, batch_size=1024, linger_ms=50)
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    h.send(value=b"x" * 900, partition=0)
    h.send(value=b"x" * 900, partition=0)  # a full batch: node 1 is ready at once
    h.advance(20)
    h.send(value=b"b", partition=1)  # node 2's partition: due in 50 ms
    asked = count_ready_calls(h, monkeypatch)
    h.run()
    assert len(h.selector.held(m.PRODUCE)) == 1 and len(asked) == 1
    assert h.selector.poll_timeouts[-1] == 50  # node 2's batch lingers out then; a response ends it sooner


def test_after_a_send_that_empties_the_drained_partitions_the_accumulator_is_not_asked_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker can take another request, but the drain left nothing queued in its partitions: the second
    ready() could only find again what the first found for the other partitions (a batch opened since arms its
    own wakeup), so an iteration that sends asks the accumulator once."""
    h = Harness(topics={"t": [1, 2]}, brokers={1: ("broker1", 9092), 2: ("broker2", 9092)}, linger_ms=50)
    h.boot()
    h.send(value=b"a", partition=0)
    h.advance(20)
    h.send(value=b"b", partition=1)  # node 2's partition: due in 50 ms
    h.advance(30)  # node 1's batch is due
    asked = count_ready_calls(h, monkeypatch)
    h.run()
    assert len(h.produce_requests()) == 1 and len(asked) == 1
    assert h.selector.poll_timeouts[-1] == 20  # node 2's batch lingers out then, as the first ready() found
    h.advance(20)
    h.run_until(lambda: len(h.produce_requests()) == 2)


def test_after_a_send_the_sender_loops_at_once_while_the_broker_takes_more() -> None:
    """What Java's zero poll is for: more ready batches than one request holds (max.request.size) go in the
    next iteration, without waiting."""
    h = Harness(topics={"t": 2}, batch_size=1024, max_request_size=1200, linger_ms=0)
    h.boot()
    h.selector.script(m.PRODUCE, HOLD, HOLD)
    futs = [h.send(value=b"x" * 900, partition=p) for p in (0, 1)]  # two batches, one per request
    h.run()
    assert len(h.selector.held(m.PRODUCE)) == 1
    assert h.selector.poll_timeouts[-1] == 0  # the second batch is ready and the broker can take it
    h.run()
    assert len(h.selector.held(m.PRODUCE)) == 2
    for req in h.selector.held(m.PRODUCE):
        h.selector.respond(req)
    h.run_until(lambda: all(f.done() for f in futs))


def test_after_a_send_the_sender_sleeps_until_the_next_batch_lingers_out() -> None:
    """(Two leaders: a ready node's request takes every partition of that node, lingering or not.)"""
    h = Harness(topics={"t": [1, 2]}, brokers={1: ("broker1", 9092), 2: ("broker2", 9092)}, linger_ms=50)
    h.boot()
    h.send(value=b"a", partition=0)
    h.advance(50)
    h.send(value=b"b", partition=1)  # appended now: due in 50 ms
    h.run()
    assert len(h.produce_requests()) == 1
    assert h.selector.poll_timeouts[-1] == 50  # not 0: nothing else can go before then
    h.advance(50)
    h.run_until(lambda: len(h.produce_requests()) == 2)
