"""ClusterConnectionStates: the per-node state machine and exponential reconnect backoff."""
from __future__ import annotations

import random

from kproducer.clock import ExponentialBackoff
from kproducer.network.connection_states import ClusterConnectionStates, ConnectionState


def exact(initial: float = 50, maximum: float = 1000) -> ClusterConnectionStates:
    return ClusterConnectionStates(initial, maximum, ExponentialBackoff(initial, maximum, 0))


def test_unknown_node_may_connect_at_once() -> None:
    s = exact()
    assert s.state(1) == ConnectionState.DISCONNECTED
    assert s.can_connect(1, 0) and not s.is_ready(1) and not s.is_connecting(1)
    assert s.connection_delay(1, 0) == 0 and not s.is_blacked_out(1, 0) and s.failures(1) == 0


def test_lifecycle_to_ready() -> None:
    s = exact()
    s.connecting(1, 100, "h", 1)
    assert s.is_connecting(1) and not s.can_connect(1, 10_000)
    assert s.connection_delay(1, 100) == float("inf")  # wait for the attempt to finish
    s.checking_api_versions(1)
    assert s.state(1) == ConnectionState.CHECKING_API_VERSIONS and s.is_connecting(1)
    s.ready(1)
    assert s.is_ready(1) and not s.is_connecting(1) and s.connection_delay(1, 100) == 0


def test_failed_attempts_back_off_exponentially_up_to_the_maximum() -> None:
    s = exact(50, 1000)
    now = 0.0
    delays = []
    for _ in range(7):
        assert s.can_connect(1, now)
        s.connecting(1, now, "h", 1)
        s.disconnected(1, now)  # the attempt failed
        delays.append(s.connection_delay(1, now))
        assert s.is_blacked_out(1, now) and not s.can_connect(1, now + delays[-1] - 0.001)
        now += delays[-1]
    assert delays == [50, 100, 200, 400, 800, 1000, 1000]
    assert s.failures(1) == 7


def test_failure_during_api_versions_counts_as_a_failed_attempt() -> None:
    s = exact()
    s.connecting(1, 0, "h", 1)
    s.checking_api_versions(1)
    s.disconnected(1, 0)
    assert s.failures(1) == 1 and s.connection_delay(1, 0) == 50


def test_success_resets_the_backoff() -> None:
    s = exact()
    for t in (0, 50, 150):
        s.connecting(1, t, "h", 1)
        s.disconnected(1, t)
    assert s.connection_delay(1, 150) == 200  # third failure: 50 * 2**2
    s.connecting(1, 350, "h", 1)
    s.ready(1)
    assert s.failures(1) == 0
    s.disconnected(1, 1000)  # a working connection dropped: back to the initial backoff
    assert s.connection_delay(1, 1000) == 50
    assert s.failures(1) == 0


def test_delay_counts_down() -> None:
    s = exact()
    s.connecting(1, 1000, "h", 1)
    s.disconnected(1, 1000)
    assert s.connection_delay(1, 1020) == 30
    assert s.connection_delay(1, 1050) == 0 and s.can_connect(1, 1050) and not s.is_blacked_out(1, 1050)


def test_jitter_is_within_twenty_percent() -> None:
    s = ClusterConnectionStates(100, 100_000, ExponentialBackoff(100, 100_000, 0.2, random.Random(7)))
    now = 0.0
    for k in range(8):
        s.connecting(1, now, "h", 1)
        s.disconnected(1, now)
        d = s.connection_delay(1, now)
        assert 0.8 * 100 * 2 ** k <= d <= 1.2 * 100 * 2 ** k
        now += d


def test_default_backoff_has_jitter() -> None:
    delays = set()
    for node in range(30):
        s = ClusterConnectionStates(100, 1000)
        s.connecting(node, 0, "h", 1)
        s.disconnected(node, 0)
        delays.add(s.connection_delay(node, 0))
    assert len(delays) > 5 and all(80 <= d <= 120 for d in delays)


def test_a_new_address_keeps_the_failure_count() -> None:
    s = exact()
    s.connecting(1, 0, "old", 1)
    s.disconnected(1, 0)
    s.connecting(1, 50, "new", 2)  # the broker moved
    s.disconnected(1, 50)
    assert s.failures(1) == 2 and s.connection_delay(1, 50) == 100


def test_not_allowed_to_connect_always_comes_with_a_positive_delay() -> None:
    """can_connect() and connection_delay() must agree even where float rounding bites: otherwise the
    sender polls with a zero timeout while it may not reconnect yet, and spins."""
    s = ClusterConnectionStates(48.98982129577476, 1000, ExponentialBackoff(48.98982129577476, 1000, 0))
    last = 1000495.435087092
    s.connecting(1, last, "h", 1)
    s.disconnected(1, last)
    now = last + 48.98982129577476  # rounds so that now - last < backoff
    assert not s.can_connect(1, now)
    assert s.connection_delay(1, now) > 0
    rng = random.Random(3)
    for _ in range(2000):
        last = 1_000_000.0 + rng.random() * 1e6
        backoff = rng.uniform(1, 2000)
        t = ClusterConnectionStates(backoff, backoff, ExponentialBackoff(backoff, backoff, 0))
        t.connecting(1, last, "h", 1)
        t.disconnected(1, last)
        now = last + backoff
        assert t.can_connect(1, now) or t.connection_delay(1, now) > 0


def test_remove_forgets_a_node() -> None:
    s = exact()
    s.connecting(1, 0, "h", 1)
    s.disconnected(1, 0)
    s.remove(1)
    assert s.can_connect(1, 0) and s.failures(1) == 0
