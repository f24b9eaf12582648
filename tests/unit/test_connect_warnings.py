"""Issue 30 item 1: a broker that cannot be reached is logged at WARNING (Java's "Connection to node -1
(127.0.0.1:1) could not be established"), rate-limited per address with a count of the attempts in between;
the network client hands the same failure to its error handler (the producer's error_cb)."""
from __future__ import annotations

import logging
import socket
from typing import Any, List

import pytest

from kproducer.clock import ExponentialBackoff, FakeClock
from kproducer.errors import KafkaConnectionError, KafkaError
from kproducer.network.client import CONNECT_WARNING_INTERVAL_MS, NetworkClient
from kproducer.network.connection_states import ClusterConnectionStates
from kproducer.network.metadata import Metadata
from kproducer.network.selector import Selector
from tests.unit.scripted import ScriptedSelector

LOGGER = "kproducer.network.client"


def _client(clock: FakeClock, selector: Any, bootstrap: Any) -> NetworkClient:
    metadata = Metadata(bootstrap, 300_000, 100, 300_000, clock)
    client = NetworkClient(metadata, selector, reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000, clock=clock)
    client.states = ClusterConnectionStates(50, 1000, ExponentialBackoff(50, 1000, 0))
    return client


def _warnings(caplog: pytest.LogCaptureFixture) -> List[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING and "could not be established" in r.getMessage()]


def test_a_refused_bootstrap_server_is_a_warning_once_per_interval_with_the_repeats_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    selector = ScriptedSelector(clock, {1: ("b1", 9001)}, {"t": [1]})
    selector.down.add(1)
    client = _client(clock, selector, [("b1", 9001)])
    client.metadata.add_topic("t")
    errors: List[KafkaError] = []
    client.on_error = errors.append
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    # 25 s of a broker that refuses every connection: an attempt per reconnect backoff (up to 1 s)
    for _ in range(2500):
        client.poll(0, clock.monotonic_ms())
        clock.advance(10)
    attempts = len(selector.connect_attempts)
    assert attempts >= 20
    warned = _warnings(caplog)
    # at 0 s, 10 s and 20 s: not one line per attempt
    assert len(warned) == 3, warned
    assert warned[0].startswith("Connection to node -1 (b1:9001) could not be established: connect to b1:9001 "
                                "failed: ECONNREFUSED. Broker may not be available (check bootstrap.servers")
    assert "more failed attempts" not in warned[0]
    counted = [int(w.rsplit("(", 1)[1].split()[0]) for w in warned[1:]]
    assert all(c > 0 for c in counted)
    assert 1 + len(counted) + sum(counted) <= attempts  # the attempts between warnings, counted
    # the same failures, as errors that belong to no record
    assert len(errors) == 3 and all(isinstance(e, KafkaConnectionError) for e in errors)
    assert "b1:9001" in str(errors[0])
    assert CONNECT_WARNING_INTERVAL_MS == 10000.0


def test_after_a_successful_connection_the_next_failure_warns_at_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    selector = ScriptedSelector(clock, {1: ("b1", 9001)}, {"t": [1]})
    selector.down.add(1)
    client = _client(clock, selector, [("b1", 9001)])
    client.metadata.add_topic("t")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    client.poll(0, clock.monotonic_ms())
    clock.advance(100)
    client.poll(0, clock.monotonic_ms())
    assert len(_warnings(caplog)) == 1
    selector.down.clear()
    for _ in range(50):
        client.poll(0, clock.monotonic_ms())
        clock.advance(10)
        if not client.metadata.cluster.is_bootstrap:
            break
    assert not client.metadata.cluster.is_bootstrap and client.ever_connected
    selector.down.add(1)
    for node_id in list(selector.connection_states()):
        selector.kill_connection(node_id)
    for _ in range(300):  # well within the 10 s interval of the first warning
        client.poll(0, clock.monotonic_ms())
        clock.advance(10)
    warned = _warnings(caplog)
    assert len(warned) == 2, warned
    assert "(b1:9001)" in warned[1]


def test_an_unresolvable_host_and_a_real_refused_port_are_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def resolver(host: str, p: int) -> Any:
        if host == "no-such-broker.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return socket.getaddrinfo(host, p, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)

    clock = FakeClock()
    selector = Selector(resolver=resolver)
    client = _client(clock, selector, [("no-such-broker.invalid", 9092), ("127.0.0.1", port)])
    client.metadata.add_topic("t")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    try:
        for _ in range(200):
            client.poll(10, clock.monotonic_ms())
            clock.advance(100)
            warned = _warnings(caplog)
            if len(warned) >= 2:
                break
    finally:
        client.close()
    joined = "\n".join(warned)
    assert "(no-such-broker.invalid:9092) could not be established: cannot resolve no-such-broker.invalid:9092" \
        in joined
    assert f"(127.0.0.1:{port}) could not be established: connect to 127.0.0.1:{port}" in joined
    assert "ECONNREFUSED" in joined


def test_a_connection_setup_timeout_is_the_same_warning(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    selector = ScriptedSelector(clock, {1: ("b1", 9001)}, {"t": [1]})
    selector.hanging.add(1)
    client = _client(clock, selector, [("b1", 9001)])
    client.metadata.add_topic("t")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for _ in range(150):
        client.poll(0, clock.monotonic_ms())
        clock.advance(100)
    warned = _warnings(caplog)
    assert len(warned) == 1, warned  # (one 10 s setup timeout in 15 s)
    assert "connection setup timed out after 10000 ms" in warned[0]
