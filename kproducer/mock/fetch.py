"""Fetch (key 1) on a mock broker, served from the stored raw batches, and its purgatory.

A Fetch that finds fewer than ``min_bytes`` waits (up to its ``max_wait_ms``, capped by the cluster's
``max_fetch_wait_ms``) without holding a handler thread: it is parked in the broker's
:class:`FetchPurgatory`, which answers it as soon as one of its partitions gets data, or at its
deadline. Fetch sessions (KIP-227) are not kept: every response has session id 0, which tells the
client to send full requests.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from ..protocol.errors import NO_ERROR, FetchSessionIdNotFoundError, OffsetOutOfRangeError
from .request_channel import Request

if TYPE_CHECKING:
    from .apis import KafkaApis, Result

log = logging.getLogger(__name__)

Body = Dict[str, Any]
TopicPartition = Tuple[str, int]


def handle_fetch(apis: "KafkaApis", request: Request) -> "Result":
    from .apis import DEFERRED

    result = evaluate_fetch(apis, request, first=True, final=False)
    if result is not None:
        return result
    body = request.body
    assert body is not None
    wait = min(body["max_wait_ms"], apis.config.max_fetch_wait_ms) / 1000.0
    partitions = {(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]}
    apis.purgatory.park(DelayedFetch(request, request.received_at + wait, partitions))
    return DEFERRED


def evaluate_fetch(apis: "KafkaApis", request: Request, first: bool, final: bool) -> Optional[Body]:
    """The response, or None when it should wait for more data (never when ``final``)."""
    body = request.body
    assert body is not None
    if body["session_id"] != 0:
        return {"throttle_time_ms": 0, "error_code": FetchSessionIdNotFoundError.code, "session_id": 0, "responses": []}
    read_committed = body["isolation_level"] == 1
    remaining = body["max_bytes"]
    total = 0
    has_error = False
    responses = []
    for t in body["topics"]:
        parts = []
        for part in t["partitions"]:
            limit = min(part["partition_max_bytes"], remaining - total)
            result, size = _fetch_partition(apis, t["topic"], part, read_committed, limit, total == 0, first)
            total += size
            has_error = has_error or result["error_code"] != NO_ERROR
            parts.append(result)
        responses.append({"topic": t["topic"], "partitions": parts})
    if not final and not has_error and total < body["min_bytes"] and body["max_wait_ms"] > 0:
        return None
    return {"throttle_time_ms": 0, "error_code": NO_ERROR, "session_id": 0, "responses": responses}


def _fetch_partition(apis: "KafkaApis", topic: str, part: Body, read_committed: bool, limit: int,
                     min_one: bool, inject: bool) -> Tuple[Body, int]:
    from .apis import leader_epoch_error

    index = part["partition"]
    result: Body = {
        "partition_index": index,
        "error_code": NO_ERROR,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }
    injected = apis.faults.take_error("fetch") if inject else None
    if injected:
        result["error_code"] = injected
        return result, 0
    error, p = apis.partition_error(topic, index)
    if error == NO_ERROR:
        assert p is not None
        error = leader_epoch_error(p, part["current_leader_epoch"])
    if error:
        result["error_code"] = error
        if p is not None:
            result["current_leader"] = apis.leader_info(p)
        return result, 0
    assert p is not None
    plog = p.log
    offset = part["fetch_offset"]
    with plog.lock:
        hw = plog.end_offset
        lso = plog.last_stable_offset
        result["high_watermark"] = hw
        result["last_stable_offset"] = lso
        result["log_start_offset"] = plog.log_start_offset
        if offset < plog.log_start_offset or offset > hw:
            result["error_code"] = OffsetOutOfRangeError.code
            return result, 0
        upper = lso if read_committed else hw
        batches, size = plog.read(offset, max(limit, 0), upper, min_one)
        if read_committed:
            end = offset
            if batches:
                end = _last_offset(batches[-1]) + 1
            result["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in plog.aborted_between(offset, end)
            ] if batches else []
    result["records"] = b"".join(batches)
    return result, size


def _last_offset(batch: bytes) -> int:
    base = int.from_bytes(batch[0:8], "big", signed=True)
    delta = int.from_bytes(batch[23:27], "big", signed=True)
    return base + delta


class DelayedFetch:
    __slots__ = ("request", "deadline", "partitions")

    def __init__(self, request: Request, deadline: float, partitions: Set[TopicPartition]) -> None:
        self.request = request
        self.deadline = deadline
        self.partitions = partitions


class FetchPurgatory:
    """Parked Fetch requests of one broker, completed by a thread on new data or at their deadline."""

    def __init__(self, apis: "KafkaApis") -> None:
        self._apis = apis
        self._cond = threading.Condition()
        self._parked: List[DelayedFetch] = []
        self._dirty: Set[TopicPartition] = set()
        self._running = False
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._running = True
        self._apis.state.add_append_listener(self.on_append)
        self._thread = threading.Thread(
            target=self._run, name=f"mock-broker-{self._apis.broker_id}-fetch-purgatory", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._apis.state.remove_append_listener(self.on_append)
        with self._cond:
            self._running = False
            self._parked = []
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def park(self, delayed: DelayedFetch) -> None:
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
        while True:
            with self._cond:
                while self._running and not self._dirty:
                    now = time.monotonic()
                    if self._parked:
                        timeout: Optional[float] = min(d.deadline for d in self._parked) - now
                        if timeout is not None and timeout <= 0:
                            break
                    else:
                        timeout = None
                    self._cond.wait(timeout)
                if not self._running:
                    return
                dirty, self._dirty = self._dirty, set()
                now = time.monotonic()
                ready: List[Tuple[DelayedFetch, bool]] = []
                keep: List[DelayedFetch] = []
                for d in self._parked:
                    if d.deadline <= now:
                        ready.append((d, True))
                    elif d.partitions & dirty:
                        ready.append((d, False))
                    else:
                        keep.append(d)
                self._parked = keep
            for d, final in ready:
                try:
                    result = evaluate_fetch(self._apis, d.request, first=False, final=final)
                except Exception:
                    from .apis import CLOSE_CONNECTION

                    log.exception("error completing a delayed fetch %r; closing its connection", d.request)
                    self._apis.respond(d.request, CLOSE_CONNECTION)
                    continue
                if result is None:
                    with self._cond:
                        self._parked.append(d)
                else:
                    self._apis.respond(d.request, result)
