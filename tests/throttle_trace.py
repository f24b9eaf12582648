"""A trace of what a producer's network client sends and which throttles the brokers ask for, for the quota
tests (tests/apache_kafka/test_acl_quota_ak.py and test_mock_parity_produce_ak.py)."""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Tuple

from kproducer import Producer


class ThrottleTrace:
    """Records, on the producer's network thread, every request kproducer puts on a connection and every
    throttle a broker asked for (kproducer's own clock, milliseconds)."""

    def __init__(self, p: Producer) -> None:
        self.sends: List[Tuple[float, int, str]] = []
        self.throttles: List[Tuple[float, int, int]] = []
        self.lock = threading.Lock()
        client = p._client
        send, maybe_throttle = client.send, client._maybe_throttle

        def traced_send(request: Any, now_ms: float) -> None:
            with self.lock:
                self.sends.append((now_ms, request.node_id, request.api.name))
            send(request, now_ms)

        def traced_throttle(request: Any, body: Dict[str, Any], now_ms: float) -> None:
            throttle = body.get("throttle_time_ms") or 0
            if throttle > 0:
                with self.lock:
                    self.throttles.append((now_ms, request.node_id, throttle))
            maybe_throttle(request, body, now_ms)

        client.send = traced_send  # type: ignore[method-assign]
        client._maybe_throttle = traced_throttle  # type: ignore[method-assign]

    def early_sends(self) -> List[Tuple[float, int, str, float]]:
        """Requests sent to a broker while a throttle it asked for was still running."""
        with self.lock:
            return [(sent, node, api, start + ms) for start, tnode, ms in self.throttles
                    for sent, node, api in self.sends if node == tnode and start < sent < start + ms - 1]
