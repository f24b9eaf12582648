"""The time source of a mock cluster, injectable (``MockCluster(clock=...)``) so that its timeouts
(transaction timeouts, SASL session lifetimes, injected latency, delayed fetches, the close after a
failed authentication) can be stepped by a test instead of slept through.

Any object with ``monotonic_ms()`` and ``wall_ms()`` serves, e.g. :class:`kproducer.clock.FakeClock`
(advance it with ``advance(ms)``). The broker's threads still wait on sockets and conditions in real
time: with a clock other than :class:`SystemClock` they wake at least every :data:`STEPPED_POLL_S`
seconds to look at the clock again, so a step is seen within that time.
"""
from __future__ import annotations

import time
from typing import Optional, Protocol

#: the longest real wait of a broker thread between two looks at a stepped (non-system) clock
STEPPED_POLL_S = 0.01


class MockClock(Protocol):
    def monotonic_ms(self) -> float:
        """Milliseconds of a monotonic clock (deadlines)."""

    def wall_ms(self) -> int:
        """Milliseconds since the epoch (timestamps, credential expiry)."""


class SystemClock:
    """Real time."""

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0

    def wall_ms(self) -> int:
        return int(time.time() * 1000)


SYSTEM_CLOCK = SystemClock()


def real_wait(clock: MockClock, seconds: Optional[float]) -> Optional[float]:
    """How long a broker thread may block (in real seconds) to wait ``seconds`` of ``clock`` time
    (None: no deadline)."""
    if isinstance(clock, SystemClock):
        return seconds
    if seconds is None:
        return STEPPED_POLL_S
    return min(seconds, STEPPED_POLL_S)
