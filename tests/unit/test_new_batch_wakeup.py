"""The wakeup for a new batch (Sender.wakeup_for_new_batch): skipped only when the network thread's current wait
ends before the batch is due anyway, so that records still go out when linger.ms says (issue 31)."""
from __future__ import annotations

from typing import List

import pytest

from kproducer.protocol import messages as m
from tests.unit.scripted import HOLD, Harness


def test_the_wait_s_end_is_published_during_the_wait_and_withdrawn_after_it() -> None:
    h = Harness(linger_ms=50)
    h.boot()
    seen: List[float] = []
    poll = h.selector.poll

    def watching(timeout_ms: float) -> None:
        seen.append(h.sender.poll_until_ms)
        poll(timeout_ms)

    h.selector.poll = watching  # type: ignore[method-assign]
    h.send(value=b"a")
    h.advance(10)
    h.run()
    assert h.selector.poll_timeouts[-1] == 40
    assert seen == [h.now + 40]  # the batch is due in 40 ms: the wait ends then
    assert h.sender.poll_until_ms == float("inf")  # not waiting: every new batch wakes the thread


def test_a_new_batch_wakes_the_thread_unless_its_wait_ends_before_the_batch_is_due() -> None:
    h = Harness(linger_ms=50)
    h.boot()
    sender, now = h.sender, h.now

    def woken(created_ms: float, full: bool) -> bool:
        before = h.selector.wakeups
        sender.wakeup_for_new_batch(created_ms, full)
        return h.selector.wakeups > before

    assert woken(now, False)  # running an iteration (or waiting elsewhere): always
    sender.poll_until_ms = now + 50
    assert not woken(now, False)  # due at now + 50: the wait ends by then
    assert not woken(now + 5, False)
    assert woken(now - 1, False)  # due before the wait ends
    assert woken(now, True)  # its partition has a full batch: sendable now
    h.accumulator.begin_flush()
    assert woken(now, False)  # a flush makes every batch sendable now


def test_while_a_request_is_in_flight_the_wait_ends_after_linger_at_the_latest() -> None:
    """So that a batch opened during the wait needs no wakeup of its own; the response usually ends it sooner."""
    h = Harness(linger_ms=50)
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    h.send(value=b"a")
    h.advance(50)
    h.run()
    [req] = h.produce_requests()
    assert h.selector.poll_timeouts[-1] == 50
    h.send(value=b"b")  # opened during that wait: due when it ends (nothing woke the thread)
    h.advance(50)
    h.run()
    assert len(h.produce_requests()) == 2  # sent when due, the first still in flight
    assert req in h.selector.held()


@pytest.mark.parametrize("linger_ms", [0, 50])
def test_with_nothing_in_flight_and_nothing_queued_the_wait_is_not_capped(linger_ms: int) -> None:
    h = Harness(linger_ms=linger_ms)
    h.boot()
    h.run()
    assert not h.client.has_in_flight()
    assert h.selector.poll_timeouts[-1] > 1000  # no wakeup every linger.ms while idle
