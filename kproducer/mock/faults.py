"""Fault injection and request accounting for a mock cluster.

* ``inject_errors(api, codes)``: the next responses of that API answer these error codes, one code per
  partition response for the partition-level APIs (produce, fetch, list_offsets,
  add_partitions_to_txn, txn_offset_commit, offset_commit) and one per request for the others (for
  metadata and create_topics the code goes to every topic of that response). A code of 0 answers
  normally. An injected error is answered instead of processing: nothing is appended or changed.
* ``drop_responses(api, count)``: the next ``count`` requests of that API are processed (a Produce is
  appended) but the connection is closed instead of answering: a lost response (``pending_drops(api)``: how many
  are still to come).
* ``fail_after_append(codes)``: the next partition batches a Produce appends are written to the log and then
  answered with these error codes (one per appended partition batch; 0 answers normally): the broker wrote the
  batch but the client hears of an error, as with Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND or a leader that
  lost its leadership after writing. A retry of that batch by an idempotent producer is then a duplicate
  (answered as Kafka does: no error, the original offset, nothing appended); without idempotence the retry is
  appended again.
* ``set_latency(broker_id, ms)``: every response of that broker leaves ``ms`` later.
* ``corrupt_responses(api, kind, count)``: the next ``count`` requests of that API are processed but
  answered with a broken response: ``"garbled"`` (the right correlation id, then a body that parses as
  no version of any response) or ``"oversized"`` (a frame size of 2^31-1 bytes that no client accepts).
"""
from __future__ import annotations

import re
import threading
from collections import Counter, deque
from typing import Deque, Dict, Iterable, List, NamedTuple, Optional, Union

from ..protocol.messages import APIS
from .mock_clock import SYSTEM_CLOCK, MockClock

#: the kinds of broken responses :meth:`FaultInjector.corrupt_responses` can send
CORRUPTIONS = ("garbled", "oversized")


def api_name(name: Union[str, int]) -> str:
    """Normalise an API name: ``"InitProducerId"``, ``"init_producer_id"``, ``"init-producer-id"`` or
    the API key ``22`` all give ``"init_producer_id"``."""
    if isinstance(name, int):
        api = APIS.get(name)
        if api is None:
            raise ValueError(f"unknown API key {name}")
        return snake(api.name)
    text = name.strip().replace("-", "_")
    if "_" not in text and text.lower() != text:
        text = snake(text)
    return text.lower()


def snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


class RequestLogEntry(NamedTuple):
    broker_id: int
    api: str
    version: int
    correlation_id: int
    client_id: Optional[str]
    time: float


class FaultInjector:
    """Thread-safe store of pending faults and of the requests seen."""

    def __init__(self, known_apis: Iterable[str], log_size: int = 10000, clock: MockClock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._known = set(known_apis)
        self._errors: Dict[str, Deque[int]] = {}
        self._drops: Dict[str, int] = {}
        self._after_append: Deque[int] = deque()
        self._corruptions: Dict[str, Deque[str]] = {}
        self._latency: Dict[int, float] = {}
        self.request_counts: "Counter[str]" = Counter()
        self.request_log: Deque[RequestLogEntry] = deque(maxlen=log_size)

    def _check(self, api: Union[str, int]) -> str:
        name = api_name(api)
        if name not in self._known:
            raise ValueError(f"unknown or unserved API {api!r}; known: {', '.join(sorted(self._known))}")
        return name

    def inject_errors(self, api: Union[str, int], codes: Iterable[int]) -> None:
        name = self._check(api)
        values = [int(c) for c in codes]
        with self._lock:
            self._errors.setdefault(name, deque()).extend(values)

    def take_error(self, name: str) -> Optional[int]:
        """The next injected code for this API (``name`` already normalised), or None."""
        if not self._errors:  # fast path: nothing injected at all
            return None
        with self._lock:
            pending = self._errors.get(name)
            if not pending:
                return None
            code = pending.popleft()
            if not pending:
                del self._errors[name]
            return code

    def pending_errors(self, api: Union[str, int]) -> List[int]:
        with self._lock:
            return list(self._errors.get(api_name(api), ()))

    def drop_responses(self, api: Union[str, int], count: int = 1) -> None:
        name = self._check(api)
        with self._lock:
            self._drops[name] = self._drops.get(name, 0) + count

    def pending_drops(self, api: Union[str, int]) -> int:
        """How many of the responses ``drop_responses`` asked to lose for this API are still to come."""
        with self._lock:
            return self._drops.get(api_name(api), 0)

    def take_drop(self, name: str) -> bool:
        if not self._drops:
            return False
        with self._lock:
            left = self._drops.get(name, 0)
            if left <= 0:
                return False
            if left == 1:
                del self._drops[name]
            else:
                self._drops[name] = left - 1
            return True

    def fail_after_append(self, codes: Iterable[int]) -> None:
        """The next partition batches a Produce appends answer these codes (the batches stay written)."""
        values = [int(c) for c in codes]
        with self._lock:
            self._after_append.extend(values)

    def take_after_append_error(self) -> int:
        """The code to answer for a partition batch just appended (0: answer normally)."""
        if not self._after_append:  # fast path: nothing injected
            return 0
        with self._lock:
            return self._after_append.popleft() if self._after_append else 0

    def pending_after_append(self) -> List[int]:
        with self._lock:
            return list(self._after_append)

    def corrupt_responses(self, api: Union[str, int], kind: str = "garbled", count: int = 1) -> None:
        name = self._check(api)
        if kind not in CORRUPTIONS:
            raise ValueError(f"unknown corruption {kind!r}; known: {', '.join(CORRUPTIONS)}")
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        with self._lock:
            self._corruptions.setdefault(name, deque()).extend([kind] * count)

    def take_corruption(self, name: str) -> Optional[str]:
        """The next corruption for this API's response (``name`` already normalised), or None."""
        if not self._corruptions:
            return None
        with self._lock:
            pending = self._corruptions.get(name)
            if not pending:
                return None
            kind = pending.popleft()
            if not pending:
                del self._corruptions[name]
            return kind

    def set_latency(self, broker_id: int, ms: float) -> None:
        with self._lock:
            if ms > 0:
                self._latency[broker_id] = ms / 1000.0
            else:
                self._latency.pop(broker_id, None)

    def latency(self, broker_id: int) -> float:
        """Seconds to hold this broker's responses."""
        return self._latency.get(broker_id, 0.0)

    def record(self, broker_id: int, name: str, version: int, correlation_id: int, client_id: Optional[str]) -> None:
        with self._lock:
            self.request_counts[name] += 1
            self.request_log.append(
                RequestLogEntry(broker_id, name, version, correlation_id, client_id, self._clock.wall_ms() / 1000.0)
            )

    def reset_log(self) -> None:
        with self._lock:
            self.request_counts.clear()
            self.request_log.clear()

    def clear(self) -> None:
        """Forget pending errors, drops and latencies (not the request log)."""
        with self._lock:
            self._errors.clear()
            self._drops.clear()
            self._after_append.clear()
            self._corruptions.clear()
            self._latency.clear()
