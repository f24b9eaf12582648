"""Requests sent to a node and not yet answered, oldest first (Kafka answers in order)."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Deque, Dict, Iterator, List, Optional

if TYPE_CHECKING:
    from .client import ClientRequest


class InFlightRequests:
    """Per-node FIFO of requests awaiting a response, bounded by max.in.flight.requests.per.connection."""

    def __init__(self, max_per_connection: int) -> None:
        self.max_per_connection = max_per_connection
        self._requests: Dict[int, Deque["ClientRequest"]] = {}
        self._count = 0
        #: no request times out before this (ms): lowered by add(), found again by nodes_with_timed_out_requests()
        #: (so that the network thread's poll looks for timed-out requests only when one may be)
        self.next_timeout_ms = float("inf")

    def add(self, request: "ClientRequest") -> None:
        """``request`` was sent (its ``sent_ms`` set)."""
        self._requests.setdefault(request.node_id, deque()).append(request)
        self._count += 1
        deadline = request.sent_ms + request.timeout_ms
        if deadline < self.next_timeout_ms:
            self.next_timeout_ms = deadline

    def oldest(self, node_id: int) -> Optional["ClientRequest"]:
        q = self._requests.get(node_id)
        return q[0] if q else None

    def complete_oldest(self, node_id: int) -> "ClientRequest":
        """Remove and return the oldest request to ``node_id`` (the one a response answers)."""
        q = self._requests.get(node_id)
        if not q:
            raise KeyError(f"no request in flight to node {node_id}")
        self._count -= 1
        return q.popleft()

    def remove(self, request: "ClientRequest") -> None:
        """Remove one request (one that expects no response, once it is written)."""
        q = self._requests.get(request.node_id)
        if q is not None and request in q:
            q.remove(request)
            self._count -= 1

    def can_send_more(self, node_id: int) -> bool:
        q = self._requests.get(node_id)
        return q is None or len(q) < self.max_per_connection

    def count(self, node_id: Optional[int] = None) -> int:
        if node_id is None:
            return self._count
        q = self._requests.get(node_id)
        return len(q) if q else 0

    def clear_all(self, node_id: int) -> List["ClientRequest"]:
        """Remove every request to ``node_id`` (its connection died), oldest first."""
        q = self._requests.pop(node_id, None)
        if not q:
            return []
        self._count -= len(q)
        return list(q)

    def nodes_with_timed_out_requests(self, now_ms: float) -> List[int]:
        """The nodes whose oldest request is older than its timeout (the caller ends their connections). The
        next time one may be is kept in ``next_timeout_ms``: the oldest deadline of the others' requests."""
        out = []
        soonest = float("inf")
        for node_id, q in self._requests.items():
            if q:
                head = q[0]
                if now_ms - head.sent_ms >= head.timeout_ms:
                    out.append(node_id)
                elif head.sent_ms + head.timeout_ms < soonest:
                    soonest = head.sent_ms + head.timeout_ms
        self.next_timeout_ms = soonest
        return out

    def __iter__(self) -> Iterator["ClientRequest"]:
        for q in self._requests.values():
            yield from q
