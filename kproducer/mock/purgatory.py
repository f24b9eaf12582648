"""A broker's purgatory: requests parked until data arrives on one of their partitions or their
deadline passes (Kafka's DelayedOperationPurgatory), so that a waiting Fetch holds no handler thread.

A parked :class:`DelayedOperation` is tried again (``complete(final=False)``) whenever one of its
partitions gets an append, and for the last time (``complete(final=True)``, which must answer) at its
deadline. A try that answers None stays parked. The answer goes to ``respond``.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, List, Optional, Set, Tuple

from .mock_clock import MockClock, real_wait
from .request_channel import Request
from .results import CLOSE_CONNECTION, Body, Result
from .state import ClusterState

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
#: ``complete(final)``: the response, or None to keep waiting (never None when ``final``)
Completion = Callable[[bool], Optional[Body]]


class DelayedOperation:
    __slots__ = ("request", "deadline_ms", "partitions", "complete")

    def __init__(self, request: Request, deadline_ms: float, partitions: Set[TopicPartition],
                 complete: Completion) -> None:
        self.request = request
        #: the cluster clock's monotonic_ms() at which it must be answered
        self.deadline_ms = deadline_ms
        self.partitions = partitions
        self.complete = complete


class Purgatory:
    """Parked operations of one broker, completed by a thread on new data or at their deadline."""

    def __init__(self, broker_id: int, state: ClusterState, clock: MockClock,
                 respond: Callable[[Request, Result], None]) -> None:
        self._broker_id = broker_id
        self._state = state
        self._clock = clock
        self._respond = respond
        self._cond = threading.Condition()
        self._parked: List[DelayedOperation] = []
        self._dirty: Set[TopicPartition] = set()
        self._running = False
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._running = True
        self._state.add_append_listener(self.on_append)
        self._thread = threading.Thread(
            target=self._run, name=f"mock-broker-{self._broker_id}-fetch-purgatory", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._state.remove_append_listener(self.on_append)
        with self._cond:
            self._running = False
            self._parked = []
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def park(self, delayed: DelayedOperation) -> None:
        with self._cond:
            self._parked.append(delayed)
            self._cond.notify()

    def on_append(self, topic: str, partition: int) -> None:
        if not self._parked:
            return
        with self._cond:
            self._dirty.add((topic, partition))
            self._cond.notify()

    def parked(self) -> int:
        return len(self._parked)

    def _run(self) -> None:
        clock = self._clock
        while True:
            with self._cond:
                while self._running and not self._dirty:
                    now = clock.monotonic_ms()
                    if self._parked:
                        timeout: Optional[float] = (min(d.deadline_ms for d in self._parked) - now) / 1000.0
                        if timeout is not None and timeout <= 0:
                            break
                    else:
                        timeout = None
                    self._cond.wait(real_wait(clock, timeout))
                if not self._running:
                    return
                dirty, self._dirty = self._dirty, set()
                now = clock.monotonic_ms()
                ready: List[Tuple[DelayedOperation, bool]] = []
                keep: List[DelayedOperation] = []
                for d in self._parked:
                    if d.deadline_ms <= now:
                        ready.append((d, True))
                    elif d.partitions & dirty:
                        ready.append((d, False))
                    else:
                        keep.append(d)
                self._parked = keep
            for d, final in ready:
                try:
                    result = d.complete(final)
                except Exception:
                    log.exception("error completing a delayed %r; closing its connection", d.request)
                    self._respond(d.request, CLOSE_CONNECTION)
                    continue
                if result is None:
                    with self._cond:
                        self._parked.append(d)
                else:
                    self._respond(d.request, result)
