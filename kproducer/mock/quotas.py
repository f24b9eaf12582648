"""Produce byte-rate quotas on a mock broker, as Apache Kafka's ClientQuotaManager does them.

:class:`QuotaConfig` (one per cluster) holds the ``producer_byte_rate`` quotas set for a user and/or a
client id (:meth:`kproducer.mock.cluster.MockCluster.set_quota`). :class:`ProduceQuotas` (one per broker:
as in Kafka, each broker measures and enforces on its own) records the size of every Produce request
against the quota entity it matches and answers how long to throttle.

The rate is Kafka's ``Rate`` over ``window_num`` samples of ``window_ms`` each (Kafka's
``quota.window.num`` 11 and ``quota.window.size.seconds`` 1): the bytes of the samples not older than the
whole window, divided by the time since the oldest sample began, counted as at least ``window_num - 1``
full samples. Above the quota, the throttle is ``(rate - quota) / quota * that time``: how long, with
nothing more sent, until the rate is back at the quota. The broker answers at once with
``throttle_time_ms`` and mutes the connection that long (KIP-219, Produce v6+; for older versions it
holds the response back instead).
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from .mock_clock import MockClock

#: a quota entity: (user, client id); None is "any" (Kafka's entity without that part)
Entity = Tuple[Optional[str], Optional[str]]


class QuotaConfig:
    """The cluster's ``producer_byte_rate`` quotas per (user, client id)."""

    def __init__(self, window_ms: float = 1000.0, window_num: int = 11) -> None:
        if window_ms <= 0 or window_num < 2:
            raise ValueError("the quota window needs window_ms > 0 and window_num >= 2")
        self.window_ms = float(window_ms)
        self.window_num = window_num
        self._lock = threading.Lock()
        self._rates: Dict[Entity, float] = {}

    def set(self, user: Optional[str], client_id: Optional[str], producer_byte_rate: Optional[float]) -> None:
        """Set (None: remove) the quota of an entity."""
        if user is None and client_id is None:
            raise ValueError("a quota needs a user or a client id (or both)")
        if producer_byte_rate is not None and producer_byte_rate <= 0:
            raise ValueError(f"producer_byte_rate must be > 0, not {producer_byte_rate}")
        with self._lock:
            if producer_byte_rate is None:
                self._rates.pop((user, client_id), None)
            else:
                self._rates[(user, client_id)] = float(producer_byte_rate)

    def resolve(self, user: Optional[str], client_id: str) -> Optional[Tuple[Entity, float]]:
        """The quota that applies to a request, most specific first (Kafka's order without defaults):
        user and client id, then the user, then the client id."""
        with self._lock:
            if not self._rates:
                return None
            for entity in ((user, client_id), (user, None), (None, client_id)):
                if entity[0] is None and entity[1] is None:
                    continue
                rate = self._rates.get(entity)
                if rate is not None:
                    return entity, rate
        return None


class _Rate:
    """Bytes per second over ``window_num`` samples of ``window_ms`` (Kafka's SampledStat + Rate)."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        #: (sample start ms, bytes)
        self.samples: Deque[List[float]] = deque()

    def record(self, size: float, now_ms: float, window_ms: float, window_num: int) -> Tuple[float, float]:
        """Add ``size`` bytes; returns (the rate in bytes/s, the time it is measured over in ms)."""
        samples = self.samples
        if not samples or now_ms >= samples[-1][0] + window_ms:
            samples.append([now_ms, 0.0])
        samples[-1][1] += size
        while samples and samples[0][0] + window_ms * window_num <= now_ms:  # purge expired samples
            samples.popleft()
        elapsed = now_ms - samples[0][0]
        full = int(elapsed // window_ms)
        if full < window_num - 1:
            elapsed += (window_num - 1 - full) * window_ms
        total = sum(s[1] for s in samples)
        return total * 1000.0 / elapsed, elapsed


class ProduceQuotas:
    """One broker's byte-rate sensors, one per quota entity."""

    def __init__(self, config: QuotaConfig, clock: MockClock) -> None:
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._sensors: Dict[Entity, _Rate] = {}

    def record(self, user: Optional[str], client_id: str, size: int) -> int:
        """Count a Produce request of ``size`` bytes; the throttle time in ms (0: within the quota)."""
        found = self._config.resolve(user, client_id)
        if found is None:
            return 0
        entity, quota = found
        now = self._clock.monotonic_ms()
        with self._lock:
            sensor = self._sensors.get(entity)
            if sensor is None:
                sensor = self._sensors[entity] = _Rate()
            rate, elapsed_ms = sensor.record(size, now, self._config.window_ms, self._config.window_num)
        if rate <= quota:
            return 0
        return int(round((rate - quota) / quota * elapsed_ms))
