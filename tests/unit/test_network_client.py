"""NetworkClient on the scripted transport and a FakeClock: ApiVersions negotiation, in-flight limits and
ordering, request timeouts, disconnects, reconnect backoff, connection setup timeout, metadata refresh."""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import pytest

from kproducer.clock import ExponentialBackoff, FakeClock
from kproducer.errors import KafkaError, UnsupportedVersionError
from kproducer.network.client import ClientRequest, ClientResponse, NetworkClient
from kproducer.network.connection_states import ClusterConnectionStates, ConnectionState
from kproducer.network.metadata import Metadata
from kproducer.protocol import messages as m
from tests.unit.scripted import DISCONNECT, HOLD, Encoded, Frame, Harness, ScriptedSelector

BROKERS = {1: ("b1", 9001), 2: ("b2", 9002)}


class Env:
    def __init__(self, max_in_flight: int = 5, request_timeout_ms: float = 1000, metadata_max_age_ms: float = 300_000,
                 setup_timeout_ms: float = 10_000, topics: Optional[Dict[str, Any]] = None,
                 setup_timeout_max_ms: float = 30_000, brokers: Optional[Dict[int, Any]] = None,
                 bootstrap: Optional[List[Any]] = None, **client_kw: Any) -> None:
        self.clock = FakeClock()
        brokers = brokers if brokers is not None else BROKERS
        self.selector = ScriptedSelector(self.clock, brokers, topics if topics is not None else {"t": [1, 2]})
        self.metadata = Metadata(bootstrap or [BROKERS[1]], metadata_max_age_ms, 100, 300_000, self.clock)
        self.client = NetworkClient(
            self.metadata, self.selector,  # type: ignore[arg-type]
            client_id="nc-test", max_in_flight=max_in_flight, request_timeout_ms=request_timeout_ms,
            reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000, connection_setup_timeout_ms=setup_timeout_ms,
            connection_setup_timeout_max_ms=setup_timeout_max_ms, clock=self.clock, **client_kw)
        self.client.states = ClusterConnectionStates(50, 1000, ExponentialBackoff(50, 1000, 0))
        self.responses: List[ClientResponse] = []

    @property
    def now(self) -> float:
        return self.clock.monotonic_ms()

    def poll(self, times: int = 1, timeout_ms: float = 0) -> List[ClientResponse]:
        out: List[ClientResponse] = []
        for _ in range(times):
            out.extend(self.client.poll(timeout_ms, self.now))
        return out

    def bootstrap(self) -> None:
        self.metadata.add_topic("t")
        for _ in range(20):
            if not self.metadata.cluster.is_bootstrap:
                return
            self.poll()
        raise AssertionError("no metadata")

    def connect(self, node: int) -> None:
        for _ in range(20):
            if self.client.ready(node, self.now):
                return
            self.poll()
        raise AssertionError(f"node {node} never became ready")

    def request(self, node: int, api: Any = m.INIT_PRODUCER_ID, body: Optional[Dict[str, Any]] = None,
                expect_response: bool = True) -> ClientRequest:
        if body is None:
            body = {"transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1,
                    "producer_epoch": -1}
        req = ClientRequest(node, api, body, self.responses.append, self.now, self.client.request_timeout_ms,
                            expect_response=expect_response)
        self.client.send(req, self.now)
        return req


def test_bootstrap_then_metadata_replaces_the_bootstrap_node() -> None:
    env = Env()
    assert list(env.metadata.cluster.nodes) == [-1]
    env.bootstrap()
    assert sorted(env.metadata.cluster.nodes) == [1, 2]
    sent = [(r.node_id, r.api.name) for r in env.selector.sent()]
    assert sent == [(-1, "ApiVersions"), (-1, "Metadata")]
    assert env.selector.sent()[0].client_id == "nc-test"
    md_req = env.selector.sent(m.METADATA)[0]
    assert [t["name"] for t in md_req.body["topics"]] == ["t"]


def test_api_versions_negotiates_the_highest_common_version() -> None:
    env = Env()
    env.selector.api_versions[m.PRODUCE.key] = (0, 7)
    env.bootstrap()
    env.connect(1)
    assert env.client.api_version(1, m.PRODUCE) == 7
    assert env.client.api_version(1, m.METADATA) == m.METADATA.max_version
    assert env.client.states.state(1) == ConnectionState.READY


def test_api_versions_falls_back_when_the_broker_is_older() -> None:
    env = Env()
    env.selector.api_versions[m.API_VERSIONS.key] = (0, 2)
    env.bootstrap()
    versions = [r.version for r in env.selector.sent(m.API_VERSIONS)]
    assert versions == [3, 2]  # UNSUPPORTED_VERSION told us v0-v2: asked again with v2
    assert env.client.is_ready(-1, env.now)


def test_api_versions_answer_that_cannot_be_parsed_is_asked_again_with_v0() -> None:
    """A broker that speaks ApiVersions only up to v2 may answer a v3 request with a body in neither
    shape: the client asks again with v0 on the same connection instead of reconnecting forever."""
    env = Env()
    # error 35 and an array length that claims far more elements than the frame holds
    garbage = b"\x00\x23\x01\x00\x12\x00\x00\x00\x02"
    env.selector.script(m.API_VERSIONS, lambda req: Frame(req.correlation_id.to_bytes(4, "big") + garbage))
    env.bootstrap()
    assert [r.version for r in env.selector.sent(m.API_VERSIONS)] == [3, 0]
    assert len(env.selector.connect_attempts) == 1  # no reconnection
    assert env.client.is_ready(-1, env.now)


def test_api_versions_v0_answer_that_cannot_be_parsed_closes_the_connection() -> None:
    env = Env()
    env.selector.script(m.API_VERSIONS, lambda req: Frame(req.correlation_id.to_bytes(4, "big") + b"\x00"),
                        lambda req: Frame(req.correlation_id.to_bytes(4, "big") + b"\x00"))
    env.poll(4)
    assert [r.version for r in env.selector.sent(m.API_VERSIONS)] == [3, 0]
    assert env.selector.closed_by_client and "ApiVersions" in env.selector.closed_by_client[0][1]
    assert "ApiVersions" in env.client.describe_connection_errors()


def test_api_versions_error_closes_the_connection() -> None:
    env = Env()
    env.selector.script(m.API_VERSIONS, Encoded({"error_code": 31, "api_keys": []}, 3))
    env.poll(3)
    assert env.selector.closed_by_client and "ApiVersions failed" in env.selector.closed_by_client[0][1]
    assert env.client.states.state(-1) == ConnectionState.DISCONNECTED
    assert env.client.states.failures(-1) == 1  # a failed attempt: it backs off


def test_unsupported_api_is_a_clear_error() -> None:
    env = Env()
    del env.selector.api_versions[m.INIT_PRODUCER_ID.key]
    env.selector.api_versions[m.PRODUCE.key] = (0, 2)  # we need v3+
    env.bootstrap()
    env.connect(1)
    assert not env.client.supports(1, m.INIT_PRODUCER_ID)
    with pytest.raises(UnsupportedVersionError, match="does not support the InitProducerId API"):
        env.client.api_version(1, m.INIT_PRODUCER_ID)
    with pytest.raises(UnsupportedVersionError, match="v0-v2"):
        env.client.api_version(1, m.PRODUCE)


def test_send_to_a_node_that_is_not_ready_is_refused() -> None:
    env = Env()
    env.bootstrap()
    with pytest.raises(KafkaError, match="not ready"):
        env.request(2)
    with pytest.raises(KafkaError, match="ApiVersions"):
        env.client.api_version(2, m.PRODUCE)


def test_responses_complete_requests_oldest_first() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.selector.script(m.INIT_PRODUCER_ID, HOLD, HOLD)
    r1, r2 = env.request(1), env.request(1)
    env.poll()
    held = env.selector.held(m.INIT_PRODUCER_ID)
    assert [h.correlation_id for h in held] == [r1.correlation_id, r2.correlation_id]
    env.selector.respond(held[1], {"error_code": 0, "producer_id": 2, "producer_epoch": 0})
    env.poll()
    assert env.responses == []  # the second answer waits behind the first (Kafka answers in order)
    env.clock.advance(7)
    env.selector.respond(held[0], {"error_code": 0, "producer_id": 1, "producer_epoch": 0})
    got = env.poll()
    assert [r.request for r in got] == [r1, r2]
    assert [r.body["producer_id"] for r in env.responses if r.body] == [1, 2]
    assert got[0].latency_ms == 7 and not got[0].disconnected
    assert env.client.in_flight_count(1) == 0


def test_in_flight_limit_per_connection() -> None:
    env = Env(max_in_flight=2)
    env.bootstrap()
    env.connect(1)
    env.connect(2)
    env.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: HOLD
    env.request(1)
    assert env.client.is_ready(1, env.now)
    env.request(1)
    assert not env.client.is_ready(1, env.now) and not env.client.ready(1, env.now)
    assert env.client.is_ready(2, env.now)  # the limit is per connection
    with pytest.raises(KafkaError):
        env.request(1)
    env.poll()
    env.selector.respond(env.selector.held()[0], {"error_code": 0, "producer_id": 1, "producer_epoch": 0})
    env.poll()
    assert env.client.in_flight_count(1) == 1 and env.client.is_ready(1, env.now)


def test_request_without_response_completes_when_written() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    body = {"transactional_id": None, "acks": 0, "timeout_ms": 100, "topic_data": []}
    req = env.request(1, m.PRODUCE, body, expect_response=False)
    assert env.client.in_flight_count(1) == 1  # until written
    got = env.poll()
    assert [r.request for r in got] == [req] and got[0].body is None and not got[0].disconnected
    assert env.client.in_flight_count(1) == 0


def test_an_answer_to_an_acks0_request_is_ignored() -> None:
    # some brokers (tansu) answer acks=0 produce requests; nobody waits for that answer, and it must not be
    # taken for the answer to the next request
    env = Env()
    env.bootstrap()
    env.connect(1)
    body = {"transactional_id": None, "acks": 0, "timeout_ms": 100, "topic_data": []}
    req0 = env.request(1, m.PRODUCE, body, expect_response=False)
    env.poll()
    answer = m.encode_response(m.PRODUCE, req0.version, req0.correlation_id, {"responses": []})
    env.selector.inject_frame(1, answer)
    later = env.request(1)  # an InitProducerId that does expect its answer
    got = env.poll(3)
    assert [r.request for r in got] == [later] and got[0].body is not None and not got[0].disconnected
    assert env.selector.closed_by_client == []
    assert env.client.states.state(1) == ConnectionState.READY


def test_request_timeout_disconnects_and_fails_in_flight_requests() -> None:
    env = Env(request_timeout_ms=1000)
    env.bootstrap()
    env.connect(1)
    env.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: HOLD
    r1 = env.request(1)
    env.poll()
    env.clock.advance(500)
    r2 = env.request(1)
    env.clock.advance(499)
    assert env.poll() == []
    env.clock.advance(1)
    got = env.poll()
    assert [r.request for r in got] == [r1, r2]  # every request on the connection fails with it
    assert all(r.disconnected and r.timed_out and r.body is None for r in got)
    assert [n for n, why in env.selector.closed_by_client] == [1]
    assert "request.timeout.ms" in env.selector.closed_by_client[0][1]
    assert env.client.states.state(1) == ConnectionState.DISCONNECTED
    assert env.metadata.update_requested()
    assert env.client.in_flight_count() == 0


def test_poll_timeout_never_exceeds_request_timeout() -> None:
    env = Env(request_timeout_ms=1000)
    env.bootstrap()
    env.client.poll(60_000, env.now)
    assert env.selector.poll_timeouts[-1] <= 1000


def test_broker_disconnect_fails_in_flight_requests_as_disconnected() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.selector.script(m.INIT_PRODUCER_ID, DISCONNECT)
    req = env.request(1)
    got = env.poll()
    assert [r.request for r in got] == [req]
    assert got[0].disconnected and not got[0].timed_out
    assert env.client.states.state(1) == ConnectionState.DISCONNECTED
    assert env.client.states.failures(1) == 0  # a working connection that dropped is not a failed attempt
    assert env.metadata.update_requested()


def test_unsolicited_response_closes_the_connection() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.selector.inject_frame(1, b"\x00\x00\x00\x07garbage")
    env.poll()
    assert env.selector.closed_by_client and "no request in flight" in env.selector.closed_by_client[0][1]
    assert env.client.states.state(1) == ConnectionState.DISCONNECTED


def test_malformed_response_fails_the_request_as_a_disconnect() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.selector.script(m.INIT_PRODUCER_ID, lambda req: Frame(req.correlation_id.to_bytes(4, "big") + b"\x01"))
    req = env.request(1)
    got = env.poll()
    assert [r.request for r in got] == [req] and got[0].disconnected
    assert "malformed" in env.selector.closed_by_client[0][1]


def test_reconnect_waits_for_the_backoff_and_it_grows_exponentially() -> None:
    env = Env()
    env.bootstrap()
    env.selector.down.add(2)
    attempts: List[float] = []
    for _ in range(400):
        if env.client.ready(2, env.now):
            break
        if env.selector.connect_attempts and env.selector.connect_attempts[-1][1] == 2 and \
                (not attempts or attempts[-1] != env.selector.connect_attempts[-1][0]):
            attempts.append(env.selector.connect_attempts[-1][0])
        env.poll()
        env.clock.advance(10)
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    # 50, 100, 200, 400, 800, then capped at 1000 (+ up to one 10 ms step of polling granularity)
    expected = [50, 100, 200, 400, 800, 1000, 1000]
    assert len(gaps) >= len(expected)
    for gap, want in zip(gaps, expected):
        assert want <= gap < want + 10
    assert env.client.states.failures(2) == len(attempts)
    assert env.client.is_connection_failed(2)


def test_backoff_delay_is_reported_and_respected() -> None:
    env = Env()
    env.bootstrap()
    env.selector.down.add(2)
    env.client.ready(2, env.now)
    env.poll()  # refused
    assert env.client.states.state(2) == ConnectionState.DISCONNECTED
    assert env.client.poll_delay_ms(2, env.now) == 50
    env.clock.advance(30)
    assert env.client.connection_delay(2, env.now) == 20
    assert env.client.ready(2, env.now) is False
    assert len([a for a in env.selector.connect_attempts if a[1] == 2]) == 1  # not yet retried
    env.clock.advance(20)
    env.selector.down.clear()
    env.client.ready(2, env.now)
    assert len([a for a in env.selector.connect_attempts if a[1] == 2]) == 2
    env.poll(3)
    assert env.client.is_ready(2, env.now)
    assert env.client.states.failures(2) == 0  # a successful connection resets the backoff


def test_connection_setup_timeout() -> None:
    env = Env(setup_timeout_ms=300)
    env.bootstrap()
    env.selector.hanging.add(2)
    env.client.ready(2, env.now)
    env.poll()
    assert env.client.states.is_connecting(2)
    assert env.client.poll_delay_ms(2, env.now) == float("inf")
    env.clock.advance(299)
    env.poll()
    assert env.client.states.is_connecting(2)
    env.clock.advance(1)
    env.poll()
    assert env.client.states.state(2) == ConnectionState.DISCONNECTED
    assert any("setup timed out" in why for _n, why in env.selector.closed_by_client)
    assert env.client.states.failures(2) == 1


@pytest.mark.allow_internal_errors
def test_a_raising_response_callback_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)

    def bad(resp: ClientResponse) -> None:
        raise ValueError("handler bug")

    body = {"transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1, "producer_epoch": -1}
    env.client.send(ClientRequest(1, m.INIT_PRODUCER_ID, body, bad, env.now, 1000), env.now)
    ok = env.request(1)
    with caplog.at_level(logging.ERROR):
        got = env.poll()
    assert len(got) == 2 and [r.request for r in env.responses] == [ok]  # the next callback still ran
    assert any("callback" in r.getMessage() for r in caplog.records)


def test_least_loaded_node_prefers_idle_ready_nodes() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.connect(2)
    env.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: HOLD
    env.request(1)
    assert all(env.client.least_loaded_node(env.now) == 2 for _ in range(20))
    env.request(2)
    env.request(2)
    assert all(env.client.least_loaded_node(env.now) == 1 for _ in range(20))


def test_least_loaded_node_is_none_when_every_node_backs_off() -> None:
    env = Env()
    env.bootstrap()
    env.selector.down.update({1, 2})
    env.client.ready(1, env.now)
    env.client.ready(2, env.now)
    assert env.client.least_loaded_node(env.now) in (1, 2)  # connecting ones are next best
    env.poll()  # both refused
    assert env.client.least_loaded_node(env.now) is None
    env.clock.advance(50)
    assert env.client.least_loaded_node(env.now) in (1, 2)


def test_metadata_is_refreshed_after_max_age() -> None:
    env = Env(metadata_max_age_ms=5000)
    env.bootstrap()
    n = len(env.selector.sent(m.METADATA))
    env.clock.advance(4999)
    env.poll(3)
    assert len(env.selector.sent(m.METADATA)) == n
    env.clock.advance(1)
    env.poll(3)
    assert len(env.selector.sent(m.METADATA)) == n + 1


def test_metadata_update_request_is_served_after_the_refresh_backoff() -> None:
    env = Env()
    env.bootstrap()
    n = len(env.selector.sent(m.METADATA))
    env.metadata.request_update()
    env.poll(3)
    assert len(env.selector.sent(m.METADATA)) == n  # 100 ms since the last refresh have not passed
    env.clock.advance(100)
    env.poll(3)
    assert len(env.selector.sent(m.METADATA)) == n + 1
    assert not env.metadata.update_requested()


def test_failed_metadata_request_backs_off_and_retries() -> None:
    env = Env()
    env.selector.script(m.METADATA, DISCONNECT)
    env.metadata.add_topic("t")
    env.poll(3)
    assert env.metadata.cluster.is_bootstrap
    assert len(env.selector.sent(m.METADATA)) == 1
    env.clock.advance(100)
    for _ in range(10):
        env.poll()
        env.clock.advance(10)
    assert not env.metadata.cluster.is_bootstrap
    assert len(env.selector.sent(m.METADATA)) == 2


def test_metadata_response_without_brokers_is_ignored() -> None:
    env = Env()
    env.selector.script(m.METADATA, {"brokers": [], "topics": []})
    env.metadata.add_topic("t")
    env.poll(3)
    assert env.metadata.cluster.is_bootstrap and env.metadata.version == 0
    assert env.metadata.last_refresh_ms == env.now  # counted as a failed attempt, for the backoff


def test_disconnect_completes_in_flight_requests_at_the_next_poll() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.selector.handlers[m.INIT_PRODUCER_ID.key] = lambda req: HOLD
    req = env.request(1)
    env.poll()
    env.client.disconnect(1)
    got = env.poll()
    assert [r.request for r in got] == [req] and got[0].disconnected
    assert env.client.states.state(1) == ConnectionState.DISCONNECTED


def test_close_stops_polling_and_closes_connections() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.client.close()
    assert env.client.closed and env.selector.channel_ids() == []
    assert env.client.poll(100, env.now) == []


def test_wakeup_reaches_the_selector() -> None:
    env = Env()
    env.client.wakeup()
    assert env.selector.wakeups == 1


# -- exponential connection setup timeout (ClusterConnectionStates) -------------------------------


def test_connection_setup_timeout_doubles_per_failed_attempt_up_to_the_maximum() -> None:
    env = Env(setup_timeout_ms=300, setup_timeout_max_ms=1000)
    env.bootstrap()
    env.selector.hanging.add(2)
    timeouts: List[float] = []
    for _ in range(5):
        for _ in range(100):  # wait out the reconnect backoff
            if env.client.ready(2, env.now) or env.client.states.is_connecting(2):
                break
            env.clock.advance(10)
            env.poll()
        started = env.now
        while env.client.states.is_connecting(2):
            env.clock.advance(1)
            env.poll()
        timeouts.append(env.now - started)
    assert timeouts == [300, 600, 1000, 1000, 1000]
    assert "setup.timeout.max.ms" in env.selector.closed_by_client[-1][1]
    # a connection that gets through starts again from socket.connection.setup.timeout.ms
    env.selector.hanging.clear()
    for _ in range(300):
        if env.client.ready(2, env.now):
            break
        env.clock.advance(10)
        env.poll()
    assert env.client.is_ready(2, env.now) and env.client.states.failures(2) == 0


def test_connection_setup_timeout_jitter_is_20_percent() -> None:
    env = Env(setup_timeout_ms=1000, setup_timeout_max_ms=30_000, connection_setup_timeout_jitter=0.2)
    values = {env.client.setup_timeout_backoff.backoff(0) for _ in range(50)}
    assert all(800 <= v <= 1200 for v in values) and len(values) > 1
    assert all(1600 <= env.client.setup_timeout_backoff.backoff(1) <= 2400 for _ in range(20))


# -- KIP-219 client-side throttling ----------------------------------------------------------------


def test_a_throttled_response_stops_requests_to_that_node_until_the_throttle_ends() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.connect(2)
    env.selector.script(m.INIT_PRODUCER_ID, {"throttle_time_ms": 500, "error_code": 0, "producer_id": 7,
                                             "producer_epoch": 0})
    env.request(1)
    env.poll()
    assert env.responses and env.responses[0].body is not None
    assert not env.client.is_ready(1, env.now) and not env.client.ready(1, env.now)
    assert env.client.poll_delay_ms(1, env.now) == 500
    assert env.client.is_ready(2, env.now)  # per node
    assert env.client.least_loaded_node(env.now) == 2
    with pytest.raises(KafkaError, match="not ready"):
        env.request(1)
    env.clock.advance(499)
    assert not env.client.is_ready(1, env.now) and env.client.poll_delay_ms(1, env.now) == 1
    env.clock.advance(1)
    assert env.client.is_ready(1, env.now)
    assert env.client.throttle_time_ms_total == 500


def test_a_throttle_never_shortens_and_old_versions_are_throttled_by_the_broker() -> None:
    env = Env()
    env.selector.api_versions[m.INIT_PRODUCER_ID.key] = (0, 0)  # v0: the broker delayed the answer itself
    env.bootstrap()
    env.connect(1)
    env.selector.script(m.INIT_PRODUCER_ID, {"throttle_time_ms": 500, "error_code": 0, "producer_id": 7,
                                             "producer_epoch": 0})
    env.request(1)
    env.poll()
    assert env.client.is_ready(1, env.now)
    env.client.states.throttle(1, env.now + 300)
    env.client.states.throttle(1, env.now + 100)
    assert env.client.poll_delay_ms(1, env.now) == 300


# -- KIP-899 rebootstrap ---------------------------------------------------------------------------


def rebootstrap_env(**kw: Any) -> Env:
    """Brokers 1 and 2, and a bootstrap address ("lb") that reaches broker 9, which metadata never lists."""
    brokers = {**BROKERS, 9: ("lb", 9000)}
    env = Env(brokers=brokers, bootstrap=[("lb", 9000)], **kw)
    listed = {1, 2}
    default = env.selector.handlers[m.METADATA.key]

    def metadata(req: Any) -> Any:
        body = default(req)
        body["brokers"] = [b for b in body["brokers"] if b["node_id"] in listed]
        return body

    env.selector.handlers[m.METADATA.key] = metadata
    env.listed = listed  # type: ignore[attr-defined]
    return env


def test_when_no_known_broker_can_be_reached_the_client_goes_back_to_bootstrap_servers() -> None:
    env = rebootstrap_env()
    env.bootstrap()
    env.connect(1)
    env.client.disconnect(-1)
    assert sorted(env.metadata.cluster.nodes) == [1, 2]
    # the whole cluster moves: the old brokers are gone, broker 3 is new; "lb" still reaches the cluster
    env.selector.down.update({1, 2})
    env.selector.brokers[3] = ("b3", 9003)
    env.selector.topics["t"] = [3, 3]
    env.listed.clear()  # type: ignore[attr-defined]
    env.listed.add(3)  # type: ignore[attr-defined]
    env.selector.kill_connection(1)
    for _ in range(50):
        env.poll()
        env.clock.advance(10)
        if 3 in env.metadata.cluster.nodes:
            break
    assert env.client.rebootstraps == 1
    assert sorted(env.metadata.cluster.nodes) == [3]
    assert env.metadata.cluster.leaders[("t", 0)] == 3
    assert any(addr == ("lb", 9000) for _t, node, addr in env.selector.connect_attempts[1:] if node == -1)


def test_metadata_recovery_strategy_none_keeps_trying_the_known_brokers() -> None:
    env = rebootstrap_env(metadata_recovery_strategy="none")
    env.bootstrap()
    env.connect(1)
    env.client.disconnect(-1)
    env.selector.down.update({1, 2})
    env.selector.kill_connection(1)
    for _ in range(50):
        env.poll()
        env.clock.advance(10)
    assert env.client.rebootstraps == 0
    assert sorted(env.metadata.cluster.nodes) == [1, 2]
    assert {node for _t, node, _a in env.selector.connect_attempts[2:]} <= {1, 2}


def test_rebootstrap_after_the_trigger_time_without_metadata() -> None:
    """KIP-1102: brokers that accept connections but never answer Metadata also end in a rebootstrap."""
    env = rebootstrap_env(rebootstrap_trigger_ms=5000, request_timeout_ms=1000)
    env.bootstrap()
    env.connect(1)
    env.client.disconnect(-1)
    env.selector.handlers[m.METADATA.key] = lambda req: HOLD if req.broker_id != 9 else \
        ScriptedSelector._metadata(env.selector, req)
    env.metadata.request_update()
    for _ in range(100):
        env.poll()
        env.clock.advance(100)
        if env.client.rebootstraps:
            break
    assert env.client.rebootstraps == 1
    for _ in range(20):
        env.poll()
    assert 9 in env.metadata.cluster.nodes  # answered through the bootstrap address


# -- a malformed response closes that connection only --------------------------------------------


def test_a_malformed_response_closes_only_its_connection() -> None:
    env = Env()
    env.bootstrap()
    env.connect(1)
    env.connect(2)
    env.selector.script(m.INIT_PRODUCER_ID, lambda req: Frame(req.correlation_id.to_bytes(4, "big") +
                                                               b"\x00\x00\x7f\xff\xff\xff\x00"))
    bad = env.request(1)
    got = env.poll()
    assert [r.request for r in got] == [bad] and got[0].disconnected
    assert env.client.states.state(1) == ConnectionState.DISCONNECTED
    assert env.client.is_ready(2, env.now)
    good = env.request(2)
    env.poll()
    assert [r.request for r in env.responses] == [bad, good] and env.responses[1].body is not None


def test_the_sender_survives_a_malformed_produce_response_and_delivers_the_next_records() -> None:
    h = Harness()
    h.boot()
    h.selector.script(m.PRODUCE, lambda req: Frame(req.correlation_id.to_bytes(4, "big") + b"\xff" * 9))
    first = h.send(value=b"one")
    h.run_until(lambda: bool(h.selector.closed_by_client))
    assert "malformed" in h.selector.closed_by_client[0][1] or "Produce" in h.selector.closed_by_client[0][1]
    h.advance(100)
    h.run_until(first.done)
    assert first.get(0).offset == 0
    second = h.send(value=b"two")
    h.run_until(second.done)
    assert second.get(0).offset == 1
    assert h.selector.log_values(("t", 0)) == [b"one", b"two"]


def test_no_immediate_rebootstrap_when_bootstrap_servers_are_the_known_brokers() -> None:
    """A single broker (or a cluster listed in full) that is down: rebootstrapping would reach nothing new and
    drop the partition metadata that send() needs, so only the trigger time leads to a rebootstrap."""
    env = Env(rebootstrap_trigger_ms=60_000, request_timeout_ms=1000)
    env.bootstrap()
    env.connect(1)
    env.client.disconnect(-1)
    env.metadata.bootstrap_servers.append(BROKERS[2])
    env.selector.down.update({1, 2})
    env.selector.kill_connection(1)
    for _ in range(50):
        env.poll()
        env.clock.advance(10)
    assert env.client.rebootstraps == 0 and env.metadata.cluster.partition_count("t") == 2
    env.clock.advance(60_000)
    for _ in range(5):
        env.poll()
    assert env.client.rebootstraps == 1 and env.metadata.cluster.is_bootstrap


class EagerSelector(ScriptedSelector):
    """As the real Selector: send() writes at once when nothing is queued (the send is complete before the
    next poll), and a poll that starts with completed sends does not wait for them (``waits``: the effective
    timeout of each poll)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waits: List[float] = []

    def send(self, node_id: int, payload: Any) -> None:
        super().send(node_id, payload)
        conn = self._conns[node_id]
        while conn.unwritten:
            self.completed_sends.append(node_id)
            self._handle(conn, conn.unwritten.popleft())

    def poll(self, timeout_ms: float) -> None:
        self.waits.append(0.0 if self.completed_sends else timeout_ms)
        sent = self.completed_sends
        super().poll(timeout_ms)
        self.completed_sends = sent + self.completed_sends


def test_sends_completed_before_a_poll_are_taken_first_so_that_the_poll_still_waits() -> None:
    """send() writes at once; the poll after it used to skip its wait because of that completed send (an
    iteration of the sender for nothing). The client takes such sends before waiting: only acks=0 requests
    complete there, and they end the wait; any other request's answer is waited for."""
    env = Env(request_timeout_ms=30_000)
    env.selector = EagerSelector(env.clock, BROKERS, {"t": [1, 2]})
    env.client.selector = env.selector  # type: ignore[assignment]
    env.bootstrap()
    env.connect(1)
    env.selector.script(m.PRODUCE, HOLD)
    req = env.request(1, m.PRODUCE, {"transactional_id": None, "acks": 1, "timeout_ms": 100, "topic_data": []})
    assert env.selector.completed_sends == [1]
    assert env.poll(timeout_ms=500) == []
    assert env.selector.waits[-1] == 500  # waited (with the answer held), not 0
    assert env.client.in_flight_count(1) == 1
    env.selector.respond(env.selector.held()[0])
    assert [r.request for r in env.poll(timeout_ms=500)] == [req]
    body = {"transactional_id": None, "acks": 0, "timeout_ms": 100, "topic_data": []}
    req0 = env.request(1, m.PRODUCE, body, expect_response=False)
    got = env.poll(timeout_ms=500)
    assert [r.request for r in got] == [req0] and got[0].body is None
    assert env.selector.waits[-1] == 0  # an acks=0 request completed: the poll does not wait
    assert env.client.in_flight_count(1) == 0
