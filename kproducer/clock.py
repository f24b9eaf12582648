"""Time sources, injectable so that accumulator and sender logic is tested without sleeping."""
from __future__ import annotations

import random
import threading
import time
from typing import Optional

#: the longest single wait, in seconds: Java LONG timeouts (``max.block.ms=9223372036854775807``) are
#: longer than threading can wait (OverflowError); waits are cut to this and loop on their deadline
MAX_WAIT_S = min(threading.TIMEOUT_MAX, 86400.0 * 365)
_WAIT_MAX_S = MAX_WAIT_S


class Clock:
    """Real time: ``monotonic_ms()`` for deadlines, ``wall_ms()`` for record timestamps."""

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def wait(self, cond: threading.Condition, timeout_ms: Optional[float]) -> bool:
        """Wait on ``cond`` (held by the caller) for at most ``timeout_ms``.

        Timeouts beyond what the OS can wait (a Java long such as ``max.block.ms=9223372036854775807``)
        are cut to :data:`threading.TIMEOUT_MAX`: the wait then ends early, as a spurious wakeup would,
        and callers that loop on a deadline wait again."""
        if timeout_ms is None:
            return cond.wait(None)
        return cond.wait(min(max(0.0, timeout_ms) / 1000.0, _WAIT_MAX_S))


class FakeClock(Clock):
    """A clock that only moves when told to. ``wait`` advances it by the timeout instead of sleeping."""

    def __init__(self, start_ms: float = 1_000_000.0, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._now = float(start_ms)
        self._wall_offset = wall_start_ms - int(start_ms)

    def monotonic_ms(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return int(self._now) + self._wall_offset

    def advance(self, ms: float) -> None:
        self._now += ms

    def wait(self, cond: threading.Condition, timeout_ms: Optional[float]) -> bool:
        if timeout_ms is None:
            return cond.wait(0.001)
        self._now += max(0.0, timeout_ms)
        return cond.wait(0)


SYSTEM_CLOCK = Clock()


class ExponentialBackoff:
    """``initial * 2**attempts`` capped at ``maximum``, with +/- ``jitter`` (Kafka's ExponentialBackoff)."""

    __slots__ = ("initial", "maximum", "jitter", "_rng")

    def __init__(self, initial_ms: float, maximum_ms: float, jitter: float = 0.2,
                 rng: Optional[random.Random] = None) -> None:
        self.initial = float(initial_ms)
        self.maximum = max(float(maximum_ms), float(initial_ms))
        self.jitter = jitter
        self._rng = rng or random.Random()

    def backoff(self, attempts: int) -> float:
        """Wait before attempt ``attempts + 1`` (``attempts`` failures so far, 0 = first retry)."""
        if self.initial <= 0:
            return 0.0
        term = self.initial * (2.0 ** min(attempts, 62))
        if self.jitter:
            term *= self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return min(term, self.maximum)
