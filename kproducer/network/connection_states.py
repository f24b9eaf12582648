"""Per-node connection state with exponential reconnect backoff and KIP-219 client-side throttling
(Kafka's ClusterConnectionStates)."""
from __future__ import annotations

from typing import Dict, Optional

from ..clock import ExponentialBackoff


class ConnectionState:
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CHECKING_API_VERSIONS = "checking_api_versions"
    AUTHENTICATING = "authenticating"  # SASL, after ApiVersions (also re-authentication, KIP-368)
    READY = "ready"


_SETTING_UP = (ConnectionState.CONNECTING, ConnectionState.CHECKING_API_VERSIONS, ConnectionState.AUTHENTICATING)


class _NodeState:
    __slots__ = ("state", "last_attempt_ms", "failures", "backoff_ms", "host", "port", "throttle_until_ms")

    def __init__(self, host: str, port: int) -> None:
        self.state = ConnectionState.DISCONNECTED
        self.last_attempt_ms = 0.0
        self.failures = 0
        self.backoff_ms = 0.0
        self.host = host
        self.port = port
        self.throttle_until_ms = 0.0


class ClusterConnectionStates:
    """Tracks each node's connection state and when it may next be (re)connected."""

    def __init__(self, reconnect_backoff_ms: float, reconnect_backoff_max_ms: float,
                 backoff: Optional[ExponentialBackoff] = None) -> None:
        self._backoff = backoff or ExponentialBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms, 0.2)
        self._nodes: Dict[int, _NodeState] = {}

    def state(self, node_id: int) -> str:
        n = self._nodes.get(node_id)
        return n.state if n else ConnectionState.DISCONNECTED

    def can_connect(self, node_id: int, now_ms: float) -> bool:
        n = self._nodes.get(node_id)
        if n is None:
            return True
        return n.state == ConnectionState.DISCONNECTED and now_ms - n.last_attempt_ms >= n.backoff_ms

    def is_blacked_out(self, node_id: int, now_ms: float) -> bool:
        n = self._nodes.get(node_id)
        return n is not None and n.state == ConnectionState.DISCONNECTED and \
            now_ms - n.last_attempt_ms < n.backoff_ms

    def connection_delay(self, node_id: int, now_ms: float) -> float:
        """Time until a connection attempt is allowed (0 when allowed; large while connecting)."""
        n = self._nodes.get(node_id)
        if n is None:
            return 0.0
        if n.state == ConnectionState.DISCONNECTED:
            # the same arithmetic as can_connect(), so that "not yet" never comes with a zero delay
            return max(0.0, n.backoff_ms - (now_ms - n.last_attempt_ms))
        return float("inf") if n.state != ConnectionState.READY else 0.0

    def connecting(self, node_id: int, now_ms: float, host: str, port: int) -> None:
        n = self._nodes.get(node_id)
        if n is None or (n.host, n.port) != (host, port):
            failures = n.failures if n is not None else 0
            n = self._nodes[node_id] = _NodeState(host, port)
            n.failures = failures
        n.state = ConnectionState.CONNECTING
        n.last_attempt_ms = now_ms

    def checking_api_versions(self, node_id: int) -> None:
        self._nodes[node_id].state = ConnectionState.CHECKING_API_VERSIONS

    def authenticating(self, node_id: int) -> None:
        self._nodes[node_id].state = ConnectionState.AUTHENTICATING

    def ready(self, node_id: int) -> None:
        n = self._nodes[node_id]
        n.state = ConnectionState.READY
        n.failures = 0
        n.backoff_ms = 0.0

    def disconnected(self, node_id: int, now_ms: float) -> None:
        n = self._nodes.get(node_id)
        if n is None:
            return
        if n.state in _SETTING_UP:
            # a failed attempt: back off longer each time
            n.backoff_ms = self._backoff.backoff(n.failures)
            n.failures += 1
        else:
            n.backoff_ms = self._backoff.backoff(0)
        n.state = ConnectionState.DISCONNECTED
        n.last_attempt_ms = now_ms

    def is_ready(self, node_id: int) -> bool:
        """READY (throttled or not: see :meth:`is_ready_unthrottled`)."""
        n = self._nodes.get(node_id)
        return n is not None and n.state == ConnectionState.READY

    # -- KIP-219 client-side throttling ------------------------------------------------------------

    def throttle(self, node_id: int, until_ms: float) -> None:
        """Send nothing more to ``node_id`` before ``until_ms`` (a broker's throttle_time_ms); never
        shortens a throttle already in force."""
        n = self._nodes.get(node_id)
        if n is not None and n.throttle_until_ms < until_ms:
            n.throttle_until_ms = until_ms

    def throttle_delay_ms(self, node_id: int, now_ms: float) -> float:
        n = self._nodes.get(node_id)
        return max(0.0, n.throttle_until_ms - now_ms) if n is not None else 0.0

    def is_ready_unthrottled(self, node_id: int, now_ms: float) -> bool:
        """READY and not throttled by the broker (KIP-219: a throttle_time_ms not over yet), in one call
        (NetworkClient.is_ready's, several times a network-thread iteration)."""
        n = self._nodes.get(node_id)
        return n is not None and n.state == ConnectionState.READY and n.throttle_until_ms <= now_ms

    def poll_delay_ms(self, node_id: int, now_ms: float) -> float:
        """Java's pollDelayMs: the throttle delay of a connected node, else :meth:`connection_delay`."""
        n = self._nodes.get(node_id)
        if n is not None and n.state == ConnectionState.READY and n.throttle_until_ms > now_ms:
            return n.throttle_until_ms - now_ms
        return self.connection_delay(node_id, now_ms)

    def any_ready(self) -> bool:
        """Whether some connection is READY (safe to call from another thread: reads a snapshot)."""
        return any(n.state == ConnectionState.READY for n in list(self._nodes.values()))

    def is_connecting(self, node_id: int) -> bool:
        n = self._nodes.get(node_id)
        return n is not None and n.state in _SETTING_UP

    def failures(self, node_id: int) -> int:
        n = self._nodes.get(node_id)
        return n.failures if n else 0

    def remove(self, node_id: int) -> None:
        self._nodes.pop(node_id, None)
