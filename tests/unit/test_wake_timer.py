"""Selector.wakeup_at (a timerfd in the epoll set, kproducer/network/timer.py): a poll blocked in one thread ends
when the time set in another comes, not sooner; an earlier time wins; without a timer it is a wakeup now."""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Dict, List

import pytest

from kproducer.network.selector import Selector
from kproducer.network.timer import WakeTimer

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def poll_in_thread(sel: Selector, timeout_ms: float) -> Dict[str, Any]:
    """Starts ``sel.poll(timeout_ms)`` in a thread; the dict gets "returned_at" (time.monotonic()) when it ends."""
    out: Dict[str, Any] = {}

    def run() -> None:
        sel.poll(timeout_ms)
        out["returned_at"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    out["thread"] = t
    t.start()
    return out


@linux_only
def test_a_poll_ends_when_the_time_comes_and_not_before() -> None:
    sel = Selector()
    try:
        assert sel.has_timer
        due = time.monotonic() * 1000.0 + 30
        waiting = poll_in_thread(sel, 60_000)
        sel.wakeup_at(due)
        waiting["thread"].join(20)
        assert not waiting["thread"].is_alive()  # the 60 s poll ended
        assert waiting["returned_at"] * 1000.0 >= due  # not before the time (the clock is time.monotonic())
    finally:
        sel.close_all()


@linux_only
def test_an_earlier_time_wins_and_a_fired_timer_can_be_set_again() -> None:
    sel = Selector()
    try:
        now = time.monotonic() * 1000.0
        sel.wakeup_at(now + 20)
        sel.wakeup_at(now + 3_600_000)  # later: does not postpone the earlier time
        waiting = poll_in_thread(sel, 60_000)
        waiting["thread"].join(20)
        assert not waiting["thread"].is_alive()
        # fired: the next time set counts again
        due = time.monotonic() * 1000.0 + 20
        sel.wakeup_at(due)
        waiting = poll_in_thread(sel, 60_000)
        waiting["thread"].join(20)
        assert not waiting["thread"].is_alive()
        assert waiting["returned_at"] * 1000.0 >= due
    finally:
        sel.close_all()


def test_without_a_timer_wakeup_at_wakes_the_poll_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(WakeTimer, "create", classmethod(lambda cls: None))
    sel = Selector()
    try:
        assert not sel.has_timer
        sel.wakeup_at(time.monotonic() * 1000.0 + 3_600_000)
        waiting = poll_in_thread(sel, 60_000)
        waiting["thread"].join(20)
        assert not waiting["thread"].is_alive()
    finally:
        sel.close_all()


@linux_only
def test_a_closed_selector_s_timer_is_closed_and_setting_it_does_nothing() -> None:
    sel = Selector()
    timer = sel._timer
    assert timer is not None
    sel.close_all()
    assert timer.fd == -1
    sel.wakeup_at(time.monotonic() * 1000.0 + 10)  # (no error: no thread waits any more)


def test_the_sender_sets_the_timer_for_a_new_batch_instead_of_waking_the_thread() -> None:
    from tests.unit.scripted import Harness

    h = Harness(linger_ms=50)
    h.boot()
    sender = h.sender
    sender._timed_wakeup = True  # as with the system clock and a Selector on Linux
    timed: List[float] = []
    h.client.wakeup_at = timed.append  # type: ignore[method-assign]
    before = h.selector.wakeups
    sender.wakeup_for_new_batch(1000.0, False)
    assert timed == [1050.0] and h.selector.wakeups == before  # due at created + linger.ms; not woken now
    sender.wakeup_for_new_batch(1000.0, True)
    assert timed == [1050.0] and h.selector.wakeups == before + 1  # a full batch: sendable now
    sender.poll_until_ms = 1040.0
    sender.wakeup_for_new_batch(1000.0, False)
    assert timed == [1050.0] and h.selector.wakeups == before + 1  # the wait ends before it is due anyway


def test_with_a_timer_the_wait_for_a_response_is_not_cut_to_linger() -> None:
    from kproducer.protocol import messages as m
    from tests.unit.scripted import HOLD, Harness

    h = Harness(linger_ms=50)
    h.boot()
    h.sender._timed_wakeup = True
    h.selector.script(m.PRODUCE, HOLD)
    h.send(value=b"a")
    h.advance(50)
    h.run()
    assert len(h.produce_requests()) == 1
    assert h.selector.poll_timeouts[-1] > 50  # new batches set the timer: no wakeup every linger.ms meanwhile


def _timers() -> List[Any]:
    """The ways WakeTimer reaches timerfd here: the compiled network accelerator's calls, and ctypes'."""
    from kproducer.network import timer as timer_module

    out: List[Any] = [pytest.param(WakeTimer._create_ctypes, id="ctypes")]
    netio = timer_module._netio_c
    compiled = (lambda: WakeTimer(netio.timerfd_open(), netio.timerfd_arm)) if netio is not None and hasattr(
        netio, "timerfd_arm") else None
    out.append(pytest.param(compiled, id="compiled", marks=pytest.mark.skipif(
        compiled is None, reason="the compiled network accelerator is not built (or KPRODUCER_PURE_PYTHON is set)")))
    return out


@linux_only
@pytest.mark.parametrize("make", _timers())
def test_both_timerfd_calls_fire_at_the_time_and_not_before(make: Any) -> None:
    import select

    timer = make()
    ep = select.epoll()
    try:
        ep.register(timer.fd, select.EPOLLIN)
        assert ep.poll(0) == []  # not armed: not readable
        due = time.monotonic() * 1000.0 + 25
        timer.arm(due)
        ready = ep.poll(20)
        assert ready == [(timer.fd, select.EPOLLIN)]
        assert time.monotonic() * 1000.0 >= due
        timer.fired()
        assert ep.poll(0) == []  # consumed
        timer.arm(0.0)  # a time long past (rounded up to 1 ns, not 0, which would disarm): readable at once
        assert ep.poll(5) == [(timer.fd, select.EPOLLIN)]
    finally:
        ep.close()
        timer.close()


@linux_only
def test_the_compiled_arm_refuses_a_time_that_is_not_one() -> None:
    from kproducer.network import timer as timer_module

    netio = timer_module._netio_c
    if netio is None or not hasattr(netio, "timerfd_arm"):
        pytest.skip("the compiled network accelerator is not built (or KPRODUCER_PURE_PYTHON is set)")
    fd = netio.timerfd_open()
    try:
        for bad in (float("nan"), float("inf"), -1.0):
            with pytest.raises(ValueError, match="finite time"):
                netio.timerfd_arm(fd, bad)
        with pytest.raises(OSError):
            netio.timerfd_arm(-5 + 10**6, 1.0)  # not an open fd
    finally:
        import os

        os.close(fd)
