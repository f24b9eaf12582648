"""NetworkClient: requests and responses over the Selector, per-connection ApiVersions negotiation,
SASL authentication, in-flight bookkeeping, request timeouts, reconnect backoff and metadata refresh.

A connection goes CONNECTING (TCP, then TLS in the Selector) -> CHECKING_API_VERSIONS ->
AUTHENTICATING (SASL only: SaslHandshake + SaslAuthenticate, see :mod:`.sasl_authenticator`) -> READY.
``socket.connection.setup.timeout.ms`` covers all of it. A READY connection whose SASL session has a
lifetime (KIP-368) stops taking new requests shortly before it runs out, lets its in-flight requests
finish, and re-authenticates on the same connection.

Authentication failures (wrong credentials, a certificate that does not verify, TLS on one side only)
are not retried in a loop: the connection backs off like any failed attempt, and the failure is handed
to the producer (:meth:`NetworkClient.take_authentication_failures`) and to metadata waits, which fail
at once with it.

Also as Java: the setup timeout doubles per consecutive failed attempt up to
``socket.connection.setup.timeout.max.ms``; a response with ``throttle_time_ms`` holds back further
requests to its broker until the throttle ends (KIP-219); when no known broker can be reached the client
goes back to ``bootstrap.servers`` (KIP-899, ``metadata.recovery.strategy=rebootstrap``). See
docs/network.md.

Used by one thread (the producer's sender thread); only :meth:`NetworkClient.wakeup` may be called from
others.
"""
from __future__ import annotations

import logging
import random
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from ..clock import SYSTEM_CLOCK, Clock, ExponentialBackoff
from ..errors import KafkaConnectionError
from ..protocol import messages as m
from ..protocol.errors import (
    AuthenticationError,
    KafkaError,
    ProtocolError,
    UnsupportedVersionError,
    error_for_code,
)
from ..protocol.messages.api_versions import (
    NO_FINALIZED_FEATURES,
    FinalizedFeatures,
    decode_api_versions,
    finalized_features,
)
from ..protocol.schema import Api
from .channel_security import PLAINTEXT, ChannelSecurity
from .connection_states import ClusterConnectionStates, ConnectionState
from .in_flight import InFlightRequests
from .metadata import Metadata, Node
from .sasl_authenticator import SaslAuthenticator, reauthentication_delay_ms
from .selector import Selector
from .transport import Payload, Transport

log = logging.getLogger(__name__)

ResponseCallback = Callable[["ClientResponse"], None]

SOFTWARE_NAME = "kproducer"

#: a broker address that cannot be reached is logged at WARNING at most once per this many ms (or per
#: reconnect.backoff.max.ms when that is longer); the attempts in between are counted in the next warning
CONNECT_WARNING_INTERVAL_MS = 10000.0

#: api key -> the first version whose throttle_time_ms the client must honour itself (KIP-219; Java's
#: ``shouldClientThrottle`` of each response class). APIs not listed are never throttled client-side.
_CLIENT_THROTTLE_SINCE: Dict[int, int] = {
    0: 6,  # Produce
    1: 8,  # Fetch
    2: 3,  # ListOffsets
    3: 6,  # Metadata
    8: 4,  # OffsetCommit
    9: 4,  # OffsetFetch
    10: 2,  # FindCoordinator
    18: 2,  # ApiVersions
    19: 3,  # CreateTopics
    22: 1,  # InitProducerId
    24: 1,  # AddPartitionsToTxn
    25: 1,  # AddOffsetsToTxn
    26: 1,  # EndTxn
    28: 1,  # TxnOffsetCommit
}


class ClientRequest:
    """A request on its way to a node. ``body`` is the message as a dict of snake_case fields."""

    __slots__ = ("node_id", "api", "version", "body", "correlation_id", "created_ms", "sent_ms",
                 "timeout_ms", "expect_response", "callback", "internal")

    def __init__(self, node_id: int, api: Api, body: Dict[str, Any], callback: Optional[ResponseCallback],
                 created_ms: float, timeout_ms: float, expect_response: bool = True,
                 version: Optional[int] = None) -> None:
        self.node_id = node_id
        self.api = api
        self.version = version if version is not None else -1
        self.body = body
        self.correlation_id = -1
        self.created_ms = created_ms
        self.sent_ms = created_ms
        self.timeout_ms = timeout_ms
        self.expect_response = expect_response
        self.callback = callback
        self.internal = False


class ClientResponse:
    """What became of a request: a decoded body, or a disconnection (possibly by timeout)."""

    __slots__ = ("request", "body", "received_ms", "disconnected", "timed_out", "error", "latency_ms")

    def __init__(self, request: ClientRequest, body: Optional[Dict[str, Any]], received_ms: float,
                 disconnected: bool = False, timed_out: bool = False, error: Optional[KafkaError] = None) -> None:
        self.request = request
        self.body = body
        self.received_ms = received_ms
        self.disconnected = disconnected
        self.timed_out = timed_out
        self.error = error
        #: from the request's write to this answer (an attribute: the request was written before it is answered)
        self.latency_ms = received_ms - request.sent_ms


class NetworkClient:
    """Kafka's NetworkClient, for one thread."""

    def __init__(
        self,
        metadata: Metadata,
        selector: Optional[Transport] = None,
        *,
        client_id: str = "kproducer",
        max_in_flight: int = 5,
        request_timeout_ms: float = 30000,
        reconnect_backoff_ms: float = 50,
        reconnect_backoff_max_ms: float = 1000,
        connection_setup_timeout_ms: float = 10000,
        connection_setup_timeout_max_ms: float = 30000,
        connection_setup_timeout_jitter: float = 0.0,
        connections_max_idle_ms: float = 540000,
        allow_auto_topic_creation: bool = True,
        software_version: str = "0",
        clock: Clock = SYSTEM_CLOCK,
        security: ChannelSecurity = PLAINTEXT,
        metadata_recovery_strategy: str = "rebootstrap",
        rebootstrap_trigger_ms: float = 300000,
    ) -> None:
        self.metadata = metadata
        self.security = security
        self.selector: Transport = selector or Selector(ssl_context=security.ssl_context)
        #: the transport's timed wakeup (Selector.wakeup_at), if it has one
        self._wakeup_at: Optional[Callable[[float], None]] = getattr(self.selector, "wakeup_at", None)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        # Java's ClusterConnectionStates: the setup timeout doubles per consecutive failed attempt, up to
        # socket.connection.setup.timeout.max.ms, with +/-20% jitter (the producer passes Java's 0.2; the
        # default 0 keeps tests exact)
        self.setup_timeout_backoff = ExponentialBackoff(
            connection_setup_timeout_ms, max(connection_setup_timeout_ms, connection_setup_timeout_max_ms),
            connection_setup_timeout_jitter)
        self._setup_timeouts: Dict[int, float] = {}  # node -> the setup timeout of its current attempt
        self.metadata_recovery_strategy = metadata_recovery_strategy
        self.rebootstrap_trigger_ms = rebootstrap_trigger_ms
        #: times this client went back to bootstrap.servers (KIP-899)
        self.rebootstraps = 0
        self.connections_max_idle_ms = connections_max_idle_ms
        self._last_activity: Dict[int, float] = {}
        self._unanswered_ids: Dict[int, Deque[int]] = {}  # correlation ids of written acks=0 requests
        self._next_idle_check = 0.0
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.connect_warning_interval_ms = max(CONNECT_WARNING_INTERVAL_MS, reconnect_backoff_max_ms)
        # "host:port" -> [when its last "could not be established" warning was logged, attempts since]
        self._connect_warnings: Dict[str, List[float]] = {}
        #: called (on the network thread) with an error that belongs to no record: a broker that cannot be
        #: reached (as often as its WARNING), an authentication failure (the producer's error_cb)
        self.on_error: Optional[Callable[[KafkaError], None]] = None
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.software_version = software_version
        self.clock = clock
        self.in_flight = InFlightRequests(max_in_flight)
        self.states = ClusterConnectionStates(reconnect_backoff_ms, reconnect_backoff_max_ms)
        self._api_versions: Dict[int, Dict[int, Tuple[int, int]]] = {}
        #: the cluster's finalized features (KIP-584): those of the ApiVersions answer with the highest
        #: features epoch so far, from any broker (Java's ApiVersions.update); ``transaction.version`` 2+ means
        #: transactions v2 (KIP-890)
        self.finalized_features: FinalizedFeatures = NO_FINALIZED_FEATURES
        self._unwritten: Dict[int, List[ClientRequest]] = {}
        self._correlation = 0
        self._metadata_in_flight: Optional[ClientRequest] = None
        self._connect_started: Dict[int, float] = {}
        self._node_addresses: Dict[int, Tuple[str, int]] = {}
        self._rng = random.Random()
        self._pending: List[ClientResponse] = []
        self._metadata_topics: Tuple[Optional[List[str]], bool] = (None, False)
        self._authenticators: Dict[int, SaslAuthenticator] = {}
        self._reauthenticate_at: Dict[int, float] = {}  # node -> when its SASL session must be renewed
        self._reauthenticating: Dict[int, bool] = {}  # node -> waiting for its in-flight requests to finish
        self.pending_authentication_failures: Dict[int, AuthenticationError] = {}  # not yet taken by the producer
        #: "host:port" -> why the last connection to it failed (for error messages that explain timeouts)
        self.last_errors: Dict[str, str] = {}
        #: True once any broker connection became READY (a timeout before that is NoBrokersAvailableError)
        self.ever_connected = False
        #: sum of the throttle times brokers asked for (KIP-219), for metrics
        self.throttle_time_ms_total = 0
        self.closed = False

    # -- connection readiness ------------------------------------------------------------------

    def _node(self, node_id: int) -> Optional[Node]:
        return self.metadata.cluster.nodes.get(node_id)

    def is_ready(self, node_id: int, now_ms: float) -> bool:
        """Connected, ApiVersions done, below max.in.flight and not throttled by the broker (KIP-219)."""
        return self.states.is_ready_unthrottled(node_id, now_ms) and self.in_flight.can_send_more(node_id)

    def ready(self, node_id: int, now_ms: float) -> bool:
        """Like :meth:`is_ready`, but starts connecting when the node is disconnected and backoff allows."""
        if self.is_ready(node_id, now_ms):
            return True
        if self.states.can_connect(node_id, now_ms):
            self._initiate_connect(node_id, now_ms)
        return False

    def connection_delay(self, node_id: int, now_ms: float) -> float:
        return self.states.connection_delay(node_id, now_ms)

    def poll_delay_ms(self, node_id: int, now_ms: float) -> float:
        """How long until ``node_id`` may be ready: backoff while disconnected, the rest of a broker's
        throttle (KIP-219) while connected, otherwise unknown."""
        throttle = self.states.throttle_delay_ms(node_id, now_ms)
        if throttle > 0 and self.states.is_ready(node_id):
            return throttle
        if self.states.state(node_id) == ConnectionState.DISCONNECTED:
            return self.states.connection_delay(node_id, now_ms)
        return float("inf")

    def is_connection_failed(self, node_id: int) -> bool:
        return self.states.state(node_id) == ConnectionState.DISCONNECTED and self.states.failures(node_id) > 0

    def describe_connection_errors(self) -> str:
        """The last connection failure per broker, for error messages ("" when there was none)."""
        errors = dict(self.last_errors)
        return "; ".join(f"{addr}: {why}" for addr, why in sorted(errors.items()))

    def take_authentication_failures(self) -> Dict[int, AuthenticationError]:
        """Authentication failures since the last call, by node (for the producer to fail what waits)."""
        failures, self.pending_authentication_failures = self.pending_authentication_failures, {}
        return failures

    def _initiate_connect(self, node_id: int, now_ms: float) -> None:
        node = self._node(node_id)
        if node is None:
            addr = self._node_addresses.get(node_id)
            if addr is None:
                return
            host, port = addr
        else:
            host, port = node.host, node.port
            self._node_addresses[node_id] = (host, port)
        log.debug("connecting to node %s at %s:%s", node_id, host, port)
        self.states.connecting(node_id, now_ms, host, port)
        self._connect_started[node_id] = now_ms
        self._setup_timeouts[node_id] = self.setup_timeout_backoff.backoff(self.states.failures(node_id))
        self.selector.connect(node_id, host, port)

    def learn_node_address(self, node_id: int, host: str, port: int) -> None:
        """Remember where a node listens when metadata does not list it (e.g. a coordinator)."""
        self._node_addresses.setdefault(node_id, (host, port))

    def least_loaded_node(self, now_ms: float) -> Optional[int]:
        """A ready node with the fewest requests in flight; else a connecting one; else one we may
        connect to. None when every node is backing off."""
        nodes = list(self.metadata.cluster.nodes)
        if not nodes:
            return None
        offset = self._rng.randrange(len(nodes))
        best, best_load = None, None
        connecting = None
        can_connect = None
        for i in range(len(nodes)):
            node_id = nodes[(offset + i) % len(nodes)]
            if self.is_ready(node_id, now_ms):
                load = self.in_flight.count(node_id)
                if load == 0:
                    return node_id
                if best_load is None or load < best_load:
                    best, best_load = node_id, load
            elif self.states.is_connecting(node_id):
                connecting = node_id
            elif can_connect is None and self.states.can_connect(node_id, now_ms):
                can_connect = node_id
        if best is not None:
            return best
        if connecting is not None:
            return connecting
        return can_connect

    # -- sending -----------------------------------------------------------------------------------

    def api_version(self, node_id: int, api: Api, max_version: Optional[int] = None) -> int:
        """Highest version of ``api`` both we and the node support: up to ``api.client_max_version``, or up to
        ``max_version`` when given (e.g. Produce v12 for transactions v2, see
        :data:`kproducer.protocol.messages.TRANSACTION_V2_VERSIONS`)."""
        versions = self._api_versions.get(node_id)
        if versions is None:
            raise KafkaError(f"node {node_id} has not completed ApiVersions negotiation")
        rng = versions.get(api.key)
        if rng is None:
            raise UnsupportedVersionError(
                f"broker {node_id} does not support the {api.name} API (kproducer needs {api.name} "
                f"v{api.min_version}-v{api.max_version}); the broker is too old for this feature")
        v = m.negotiate_version(api, rng[0], rng[1], max_version)
        if v is None:
            raise UnsupportedVersionError(
                f"broker {node_id} supports {api.name} v{rng[0]}-v{rng[1]}, "
                f"kproducer needs v{api.min_version}-v{api.max_version}"
            )
        return v

    def supports(self, node_id: int, api: Api) -> bool:
        try:
            self.api_version(node_id, api)
            return True
        except KafkaError:
            return False

    def send(self, request: ClientRequest, now_ms: float) -> None:
        """Queue ``request`` to its node, which must be ready (see :meth:`ready`)."""
        node_id = request.node_id
        if not request.internal and not self.is_ready(node_id, now_ms):
            raise KafkaError(f"attempt to send a request to node {node_id}, which is not ready")
        if request.version < 0:
            request.version = self.api_version(node_id, request.api)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        request.correlation_id = self._correlation
        # in parts: a Produce request's batches are written from where they are (the selector's sendmsg)
        parts = m.encode_request_parts(request.api, request.version, request.correlation_id, self.client_id,
                                       request.body)
        payload: Payload = parts if len(parts) > 2 else parts[0] + parts[1]
        request.sent_ms = now_ms
        self._last_activity[node_id] = now_ms
        self.in_flight.add(request)
        self._unwritten.setdefault(node_id, []).append(request)
        self.selector.send(node_id, payload)

    # -- polling -----------------------------------------------------------------------------------

    def poll(self, timeout_ms: float, now_ms: float) -> List[ClientResponse]:
        """Do network I/O for up to ``timeout_ms``; complete and return the responses that arrived."""
        if self.closed:
            return []
        # (whether an update is due is asked here, without a call: nothing is due in most polls)
        if self._metadata_in_flight is not None:
            metadata_timeout = self.request_timeout_ms
        else:
            metadata_timeout = self.metadata.time_to_next_update(now_ms)
            if metadata_timeout <= 0:
                metadata_timeout = self._update_metadata(now_ms)
        # responses completed outside poll (requests to a node we disconnected) come first
        responses, self._pending = self._pending, []
        if self.selector.completed_sends:
            # written since the last poll (send() writes at once): taken before waiting, so that the selector
            # does not skip its wait for them; only acks=0 requests complete here, and those end the wait
            self._handle_completed_sends(responses, now_ms)
        timeout = 0.0 if responses else min(timeout_ms, metadata_timeout, self.request_timeout_ms)
        if self._reauthenticate_at:
            timeout = min(timeout, max(0.0, min(self._reauthenticate_at.values()) - now_ms))
        selector = self.selector
        selector.poll(max(0.0, timeout))
        now_ms = self.clock.monotonic_ms()
        # (each step's cheap test is made here, not in a call: at a low rate a poll is mostly these tests)
        if selector.completed_sends:
            self._handle_completed_sends(responses, now_ms)
        if selector.completed_receives:
            self._handle_completed_receives(responses, now_ms)
        if selector.disconnected:
            self._handle_disconnections(responses, now_ms)
        if selector.connected:
            self._handle_connections(now_ms)
        if self._connect_started:
            self._handle_timed_out_connections(responses, now_ms)
        if now_ms >= self.in_flight.next_timeout_ms:
            self._handle_timed_out_requests(responses, now_ms)
        if self._reauthenticate_at:
            self._maybe_reauthenticate(now_ms)
        if now_ms >= self._next_idle_check:
            self._close_idle_connections(now_ms)
        for r in responses:
            self._complete(r)
        return responses

    def _complete(self, response: ClientResponse) -> None:
        """Run the request's callback with its response."""
        cb = response.request.callback
        if cb is None:
            return
        try:
            cb(response)
        except Exception:  # a callback must never break the I/O thread
            log.exception("uncaught error in a response callback for %s", response.request.api.name)

    def _handle_completed_sends(self, responses: List[ClientResponse], now_ms: float) -> None:
        # the selector keeps completed sends until taken (send() writes eagerly, between polls): take them,
        # or every later poll would see them again, never block, and pop the wrong unwritten requests
        sends, self.selector.completed_sends = self.selector.completed_sends, []
        for node_id in sends:
            queue = self._unwritten.get(node_id)
            if not queue:
                continue
            req = queue.pop(0)
            if not req.expect_response:
                # acks=0: the request is complete once it is written
                self.in_flight.remove(req)
                answered = self._unanswered_ids.setdefault(node_id, deque(maxlen=256))
                answered.append(req.correlation_id)
                responses.append(ClientResponse(req, None, now_ms))

    def _handle_completed_receives(self, responses: List[ClientResponse], now_ms: float) -> None:
        for node_id, frame in self.selector.completed_receives:
            if not self.selector.has_channel(node_id):
                continue  # closed earlier in this poll (e.g. a protocol failure on a previous frame)
            self._last_activity[node_id] = now_ms
            unanswered = self._unanswered_ids.get(node_id)
            if unanswered and len(frame) >= 4 and int.from_bytes(frame[:4], "big", signed=True) in unanswered:
                # some brokers answer acks=0 produce requests anyway: nobody waits for that answer
                unanswered.remove(int.from_bytes(frame[:4], "big", signed=True))
                continue
            req = self.in_flight.oldest(node_id)
            if req is None or not req.expect_response:
                self._protocol_failure(node_id, "received a response with no request in flight", responses, now_ms)
                continue
            try:
                correlation_id, pos = m.decode_response_header(req.api, req.version, frame)
                if correlation_id != req.correlation_id:
                    raise ProtocolError(
                        f"correlation id {correlation_id} does not match the oldest request's "
                        f"{req.correlation_id} ({req.api.name})"
                    )
                if req.api is m.API_VERSIONS:
                    _ver, body = decode_api_versions(req.version, frame, pos)
                else:
                    body = req.api.decode_response(req.version, frame, pos)
            except ProtocolError as e:
                if req.api is m.API_VERSIONS and req.version > 0:
                    # an older broker that cannot read our ApiVersions version may answer in a shape we
                    # cannot parse either: the frame boundary is intact, so ask again with v0 (as Java does)
                    log.info("node %s: unreadable answer to ApiVersions v%s (%s); retrying with v0",
                             node_id, req.version, e)
                    self.in_flight.complete_oldest(node_id)
                    self._send_api_versions(node_id, 0, now_ms)
                    continue
                self._protocol_failure(node_id, str(e), responses, now_ms)
                continue
            self.in_flight.complete_oldest(node_id)
            if body.get("throttle_time_ms"):
                self._maybe_throttle(req, body, now_ms)
            if req.internal:
                self._handle_internal_response(req, body, now_ms)
            else:
                responses.append(ClientResponse(req, body, now_ms))

    def _maybe_throttle(self, req: ClientRequest, body: Dict[str, Any], now_ms: float) -> None:
        """KIP-219: a broker that answers at once with throttle_time_ms > 0 expects the client to send it
        nothing more until the throttle ends (API versions from which it does, as Java's
        ``AbstractResponse.shouldClientThrottle``; older versions were delayed by the broker itself)."""
        throttle = body.get("throttle_time_ms")
        if not throttle or throttle <= 0:
            return
        since = _CLIENT_THROTTLE_SINCE.get(req.api.key)
        if since is None or req.version < since:
            return
        log.debug("node %s throttles this client for %s ms (%s v%s)", req.node_id, throttle, req.api.name,
                  req.version)
        self.states.throttle(req.node_id, now_ms + throttle)
        self.throttle_time_ms_total += throttle

    def _protocol_failure(self, node_id: int, why: str, responses: List[ClientResponse], now_ms: float) -> None:
        log.error("closing connection to node %s: %s", node_id, why)
        self.selector.close(node_id, why)
        self._process_disconnection(node_id, responses, now_ms, timed_out=False, reason=why)

    def _handle_disconnections(self, responses: List[ClientResponse], now_ms: float) -> None:
        if not self.selector.disconnected:
            return
        failures = self.selector.failures
        for node_id, reason in list(self.selector.disconnected.items()):
            # a connection never established is logged (WARNING, rate-limited) below
            never_connected = self.states.state(node_id) == ConnectionState.CONNECTING
            log.log(logging.DEBUG if never_connected else logging.INFO, "disconnected from node %s: %s", node_id,
                    reason)
            failure = failures.get(node_id)
            auth = self._authenticators.get(node_id)
            if failure is None and auth is not None and not self._reauthenticating.get(node_id):
                # closed by the broker during the first SASL exchange: an authentication failure, said at once
                failure = auth.connection_closed(reason)
                log.error("authentication with node %s failed: %s", node_id, failure)
                reason = str(failure)
            self._process_disconnection(node_id, responses, now_ms, timed_out=False, reason=reason)
            if failure is not None:
                self._record_authentication_failure(node_id, failure)
            elif never_connected:
                self._connection_not_established(node_id, reason, now_ms)
        self.selector.disconnected = {}
        self.selector.failures = {}
        self.metadata.request_update()

    def _record_authentication_failure(self, node_id: int, error: AuthenticationError) -> None:
        self.pending_authentication_failures[node_id] = error
        self.metadata.authentication_failed(error)
        self.report_error(error)

    def report_error(self, error: KafkaError) -> None:
        """Hand an error that belongs to no record to :attr:`on_error` (the producer's error_cb), on this
        (the network) thread; an exception it raises is logged."""
        if self.on_error is not None:
            try:
                self.on_error(error)
            except Exception:  # the network thread must carry on
                log.exception("error_cb raised an exception; it is ignored (the producer carries on)")

    def _connection_not_established(self, node_id: int, reason: str, now_ms: float) -> None:
        """Java's NetworkClient: WARN "Connection to node N (host:port) could not be established. Node may not
        be available." Here at most once per address per :attr:`connect_warning_interval_ms` (a broker that
        is down is retried every reconnect.backoff.max.ms), with the count of the attempts in between, and
        again at once after a connection to it succeeded."""
        host, port = self._node_addresses.get(node_id, ("?", 0))
        addr = f"{host}:{port}"
        entry = self._connect_warnings.get(addr)
        if entry is not None and now_ms - entry[0] < self.connect_warning_interval_ms:
            entry[1] += 1
            log.debug("connection to node %s (%s) could not be established: %s", node_id, addr, reason)
            return
        more = ""
        if entry is not None and entry[1]:
            more = f" ({entry[1]:.0f} more failed attempts since the last warning)"
        self._connect_warnings[addr] = [now_ms, 0]
        hint = " (check bootstrap.servers and that the broker is up)" if node_id < 0 else ""
        log.warning("Connection to node %s (%s) could not be established: %s. Broker may not be available%s%s",
                    node_id, addr, reason, hint, more)
        self.report_error(KafkaConnectionError(
            f"connection to node {node_id} ({addr}) could not be established: {reason}; broker may not be "
            f"available"))

    def _fail_authentication(self, node_id: int, error: AuthenticationError, now_ms: float) -> None:
        """Close a connection whose authentication failed; not retried before the reconnect backoff."""
        log.error("authentication with node %s failed: %s", node_id, error)
        self.selector.close(node_id, str(error))
        self._process_disconnection(node_id, self._pending, now_ms, timed_out=False, reason=str(error))
        self._record_authentication_failure(node_id, error)

    def _process_disconnection(self, node_id: int, responses: List[ClientResponse], now_ms: float,
                               timed_out: bool, reason: str) -> None:
        self.states.disconnected(node_id, now_ms)
        addr = self._node_addresses.get(node_id)
        if addr is not None and reason not in ("closed by client", "idle"):
            self.last_errors[f"{addr[0]}:{addr[1]}"] = reason
        self._api_versions.pop(node_id, None)
        self._authenticators.pop(node_id, None)
        self._reauthenticate_at.pop(node_id, None)
        self._reauthenticating.pop(node_id, None)
        self._unwritten.pop(node_id, None)
        self._unanswered_ids.pop(node_id, None)
        self._connect_started.pop(node_id, None)
        self._setup_timeouts.pop(node_id, None)
        for req in self.in_flight.clear_all(node_id):
            if req.internal:
                if req is self._metadata_in_flight:
                    self._metadata_in_flight = None
                    self.metadata.failed_update(now_ms)
                continue
            responses.append(ClientResponse(req, None, now_ms, disconnected=True, timed_out=timed_out))
        if self._metadata_in_flight is not None and self._metadata_in_flight.node_id == node_id:
            self._metadata_in_flight = None
            self.metadata.failed_update(now_ms)

    def _handle_connections(self, now_ms: float) -> None:
        for node_id in self.selector.connected:
            log.debug("connected to node %s; negotiating API versions", node_id)
            self.states.checking_api_versions(node_id)
            self._send_api_versions(node_id, m.API_VERSIONS.max_version, now_ms)
        self.selector.connected = []

    def _send_api_versions(self, node_id: int, version: int, now_ms: float) -> None:
        body: Dict[str, Any] = {"client_software_name": SOFTWARE_NAME,
                                "client_software_version": self.software_version}
        req = ClientRequest(node_id, m.API_VERSIONS, body, None, now_ms, self.request_timeout_ms,
                            version=version)
        req.internal = True
        self.send(req, now_ms)

    def _handle_internal_response(self, req: ClientRequest, body: Dict[str, Any], now_ms: float) -> None:
        if req.api is m.API_VERSIONS:
            self._handle_api_versions(req, body, now_ms)
        elif req.api is m.METADATA:
            self._handle_metadata(req, body, now_ms)
        elif req.api is m.SASL_HANDSHAKE or req.api is m.SASL_AUTHENTICATE:
            self._handle_sasl_response(req, body, now_ms)

    def _handle_api_versions(self, req: ClientRequest, body: Dict[str, Any], now_ms: float) -> None:
        node_id = req.node_id
        versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        err = body["error_code"]
        if err == UnsupportedVersionError.code and req.version > 0:
            # the broker told us which ApiVersions versions it speaks: ask again with the best of them
            rng = versions.get(m.API_VERSIONS.key)
            retry = min(rng[1], m.API_VERSIONS.max_version) if rng else 0
            if retry >= req.version:
                retry = req.version - 1
            log.debug("node %s does not support ApiVersions v%s; retrying with v%s", node_id, req.version, retry)
            self._send_api_versions(node_id, max(0, retry), now_ms)
            return
        if err:
            why = f"ApiVersions failed: {error_for_code(err)}"
            self.selector.close(node_id, why)
            self._process_disconnection(node_id, self._pending, now_ms, timed_out=False, reason=why)
            return
        self._api_versions[node_id] = versions
        features = finalized_features(body)
        if features.epoch > self.finalized_features.epoch:
            if features.levels != self.finalized_features.levels:
                log.debug("node %s: finalized features %s (epoch %s)", node_id, dict(features.levels),
                          features.epoch)
            self.finalized_features = features
        if self.security.sasl_mechanism is not None:
            self._start_authentication(node_id, now_ms)
            return
        self._set_ready(node_id)

    def _set_ready(self, node_id: int) -> None:
        self._connect_started.pop(node_id, None)
        self._setup_timeouts.pop(node_id, None)
        self.states.ready(node_id)
        self.selector.connection_ready(node_id)  # (responses may be large from now on)
        self.ever_connected = True
        self.metadata.authentication_succeeded()
        addr = self._node_addresses.get(node_id)
        if addr is not None:
            self.last_errors.pop(f"{addr[0]}:{addr[1]}", None)
            self._connect_warnings.pop(f"{addr[0]}:{addr[1]}", None)
        log.debug("node %s ready", node_id)

    # -- SASL --------------------------------------------------------------------------------------

    def _start_authentication(self, node_id: int, now_ms: float) -> None:
        sec = self.security
        assert sec.sasl_mechanism is not None and sec.sasl_client_factory is not None
        host, port = self._node_addresses.get(node_id, ("?", 0))
        auth = SaslAuthenticator(sec.sasl_mechanism, sec.sasl_client_factory, host, f"{host}:{port}",
                                 self._api_versions.get(node_id, {}))
        self.states.authenticating(node_id)
        self._authenticators[node_id] = auth
        self._send_sasl(node_id, auth, auth.first_request(), now_ms)

    def _send_sasl(self, node_id: int, auth: SaslAuthenticator,
                   request: Optional[Tuple[Api, int, Dict[str, Any]]], now_ms: float) -> None:
        if request is None:
            self._authenticators.pop(node_id, None)
            if auth.error is not None:
                self._fail_authentication(node_id, auth.error, now_ms)
                return
            self._authenticated(node_id, auth, now_ms)
            return
        api, version, body = request
        req = ClientRequest(node_id, api, body, None, now_ms, self.request_timeout_ms, version=version)
        req.internal = True
        self.send(req, now_ms)

    def _handle_sasl_response(self, req: ClientRequest, body: Dict[str, Any], now_ms: float) -> None:
        auth = self._authenticators.get(req.node_id)
        if auth is None:
            return  # the connection was closed meanwhile
        self._send_sasl(req.node_id, auth, auth.on_response(req.api, body), now_ms)

    def _authenticated(self, node_id: int, auth: SaslAuthenticator, now_ms: float) -> None:
        log.debug("node %s: SASL %s authentication done (session lifetime %s ms)", node_id, auth.mechanism,
                  auth.session_lifetime_ms or "unlimited")
        delay = reauthentication_delay_ms(auth.session_lifetime_ms, self._rng)
        if delay is not None:
            self._reauthenticate_at[node_id] = now_ms + delay
        self._reauthenticating.pop(node_id, None)
        self._set_ready(node_id)

    def _maybe_reauthenticate(self, now_ms: float) -> None:
        """KIP-368: renew SASL sessions before they expire, on the same connection, between requests."""
        for node_id, due in list(self._reauthenticate_at.items()):
            if now_ms < due:
                continue
            if not self._reauthenticating.get(node_id):
                if not self.states.is_ready(node_id):
                    continue
                # no new requests on this connection until it is re-authenticated
                log.debug("node %s: SASL session is about to expire; re-authenticating", node_id)
                self._reauthenticating[node_id] = True
                self.states.authenticating(node_id)
            if self.in_flight.count(node_id) == 0:
                del self._reauthenticate_at[node_id]
                self._start_authentication(node_id, now_ms)

    # -- metadata ----------------------------------------------------------------------------------

    def _update_metadata(self, now_ms: float) -> float:
        """An update is due and none is in flight (poll() asks): send a Metadata request to the least loaded
        broker, connecting or re-bootstrapping as needed; returns how long the poll may wait."""
        node_id = self.least_loaded_node(now_ms)
        if self.metadata_recovery_strategy == "rebootstrap" and not self.metadata.cluster.is_bootstrap:
            # KIP-899 / KIP-1102: every known broker is out of reach (or no metadata came for
            # metadata.recovery.rebootstrap.trigger.ms): start again from bootstrap.servers
            stuck = node_id is None and not any(self.states.is_ready(n) for n in self.metadata.cluster.nodes) \
                and not self._bootstrap_is_known_brokers()
            if stuck or self.metadata.rebootstrap_due(now_ms, self.rebootstrap_trigger_ms):
                self._rebootstrap(now_ms)
                node_id = self.least_loaded_node(now_ms)
        if node_id is None:
            log.debug("no broker available for a metadata request; backing off")
            return self.reconnect_backoff_ms
        if self.is_ready(node_id, now_ms):
            try:
                version = self.api_version(node_id, m.METADATA)
            except UnsupportedVersionError as e:
                # an older broker whose Metadata versions we cannot speak: waiting cannot help (Java's
                # DefaultMetadataUpdater hands this to Metadata.fatalError, which metadata waits throw)
                self._metadata_unsupported(node_id, e, now_ms)
                return self.reconnect_backoff_ms
            topics, partial = self.metadata.request_topics(now_ms)
            body: Dict[str, Any] = {
                "topics": [{"name": t} for t in topics] if topics is not None else None,
                "allow_auto_topic_creation": self.allow_auto_topic_creation,
            }
            req = ClientRequest(node_id, m.METADATA, body, None, now_ms, self.request_timeout_ms, version=version)
            req.internal = True
            self._metadata_topics = (topics, partial)
            self._metadata_in_flight = req
            self.send(req, now_ms)
            return self.request_timeout_ms
        if self.states.is_connecting(node_id):
            return self.reconnect_backoff_ms
        self._initiate_connect(node_id, now_ms)
        return self.reconnect_backoff_ms

    def _metadata_unsupported(self, node_id: int, error: UnsupportedVersionError, now_ms: float) -> None:
        log.error("cannot fetch metadata from node %s: %s", node_id, error)
        addr = self._node_addresses.get(node_id)
        if addr is not None:
            self.last_errors[f"{addr[0]}:{addr[1]}"] = str(error)
        self.metadata.failed_update(now_ms, error)

    def _bootstrap_is_known_brokers(self) -> bool:
        """Whether bootstrap.servers names only brokers of the current metadata (a single broker, or a
        cluster listed in full): going back to them at once would reach nothing new and only drop the
        partition metadata that send() needs while they are down, so only the trigger time applies."""
        known = {(n.host, n.port) for n in self.metadata.cluster.nodes.values()}
        return all(addr in known for addr in self.metadata.bootstrap_servers)

    def _rebootstrap(self, now_ms: float) -> None:
        log.info("no known broker can be reached (or no metadata for %.0f ms): rebootstrapping from "
                 "bootstrap.servers %s", self.rebootstrap_trigger_ms,
                 ",".join(f"{h}:{p}" for h, p in self.metadata.bootstrap_servers))
        self.rebootstraps += 1
        self.metadata.rebootstrap(now_ms)
        for node_id in self.metadata.cluster.nodes:
            # the bootstrap node ids are reused: forget what an earlier bootstrap connection left behind
            if self.states.state(node_id) == ConnectionState.DISCONNECTED:
                self.states.remove(node_id)
            self._node_addresses.pop(node_id, None)

    def _handle_metadata(self, req: ClientRequest, body: Dict[str, Any], now_ms: float) -> None:
        self._metadata_in_flight = None
        topics, partial = self._metadata_topics
        if not body["brokers"]:
            log.warning("ignoring a metadata response with no brokers")
            self.metadata.failed_update(now_ms)
            return
        host, port = self._node_addresses.get(req.node_id, ("?", 0))
        self.metadata.update(body, topics, partial, now_ms, answered_by=(req.node_id, f"{host}:{port}"))

    # -- timeouts ----------------------------------------------------------------------------------

    def _handle_timed_out_requests(self, responses: List[ClientResponse], now_ms: float) -> None:
        for node_id in self.in_flight.nodes_with_timed_out_requests(now_ms):
            why = f"request timed out after {self.request_timeout_ms:.0f} ms (request.timeout.ms)"
            log.warning("disconnecting from node %s: %s", node_id, why)
            self.selector.close(node_id, why)
            self._process_disconnection(node_id, responses, now_ms, timed_out=True, reason=why)
            self.metadata.request_update()

    def _handle_timed_out_connections(self, responses: List[ClientResponse], now_ms: float) -> None:
        for node_id, started in list(self._connect_started.items()):
            limit = self._setup_timeouts.get(node_id, self.connection_setup_timeout_ms)
            if now_ms - started >= limit:
                why = (f"connection setup timed out after {limit:.0f} ms (socket.connection.setup.timeout.ms, "
                       f"doubled per failed attempt up to socket.connection.setup.timeout.max.ms) while "
                       f"{self.states.state(node_id)}")
                fatal = self.selector.setup_timeout_error(node_id)
                tcp_connecting = fatal is None and self.states.state(node_id) == ConnectionState.CONNECTING
                if not tcp_connecting:
                    log.warning("node %s: %s", node_id, fatal or why)
                self.selector.close(node_id, why)
                self._process_disconnection(node_id, responses, now_ms, timed_out=True,
                                            reason=str(fatal) if fatal is not None else why)
                if fatal is not None:
                    self._record_authentication_failure(node_id, fatal)
                elif tcp_connecting:
                    self._connection_not_established(node_id, why, now_ms)
                self.metadata.request_update()

    def _close_idle_connections(self, now_ms: float) -> None:
        """Close connections with nothing in flight and no traffic for connections.max.idle.ms."""
        self._next_idle_check = now_ms + 1000.0
        idle_ms = self.connections_max_idle_ms
        if idle_ms < 0:
            return
        for node_id in self.selector.channel_ids():
            last = self._last_activity.get(node_id)
            if last is not None and now_ms - last >= idle_ms and self.in_flight.count(node_id) == 0 \
                    and self.states.is_ready(node_id):
                log.debug("closing connection to node %s: idle for %.0f ms (connections.max.idle.ms)",
                          node_id, now_ms - last)
                self.selector.close(node_id, "idle")
                self._process_disconnection(node_id, self._pending, now_ms, False, "idle")
                self._last_activity.pop(node_id, None)

    # -- misc ----------------------------------------------------------------------------------------

    def in_flight_count(self, node_id: Optional[int] = None) -> int:
        return self.in_flight.count(node_id)

    def has_in_flight(self) -> bool:
        return self.in_flight.count() > 0

    def disconnect(self, node_id: int) -> None:
        """Close a connection; its requests complete as disconnected on the next poll."""
        self.selector.close(node_id, "closed by client")
        self._process_disconnection(node_id, self._pending, self.clock.monotonic_ms(), False, "closed by client")

    def wakeup(self) -> None:
        self.selector.wakeup()

    def has_timed_wakeup(self) -> bool:
        """Whether wakeup_at() ends the poll at the time given (a timer), not at once."""
        return self._wakeup_at is not None and bool(getattr(self.selector, "has_timer", False))

    def wakeup_at(self, deadline_ms: float) -> None:
        """Make the poll under way in the network thread return at ``deadline_ms`` (``time.monotonic()`` in ms) at
        the latest, not sooner; a transport without a timer is woken now."""
        at = self._wakeup_at
        if at is None:
            self.selector.wakeup()
        else:
            at(deadline_ms)

    def close(self) -> None:
        self.closed = True
        self.selector.close_all()
        self.security.close()  # e.g. the refresher of OAuth tokens
