"""A scripted, in-memory Kafka transport for deterministic tests.

:class:`ScriptedTransport` implements :class:`kproducer.network.transport.Transport`, the protocol that
:class:`~kproducer.network.selector.Selector` implements over sockets (``connect``/``send``/``poll``/``close``/
``close_all``/``wakeup`` and the result lists ``connected``/``completed_sends``/``completed_receives``/
``disconnected``/``failures``).
Behind it sits a tiny broker model: it decodes every frame the client writes (request header + body),
records it as a :class:`SentRequest`, and answers it with a real encoded response -- by default
ApiVersions, Metadata, InitProducerId and Produce are answered like a healthy broker would; a test scripts
anything else (an error code, a held response it answers later, a dropped connection, a raw frame).

Responses on one connection are delivered in request order (a held response holds back the ones after it,
as Kafka does). Nothing sleeps: with a :class:`~kproducer.clock.FakeClock` the test drives time itself and
calls ``sender.run_once()`` in its own thread. ``real_wait=True`` makes ``poll`` block on a condition (woken
by ``wakeup``) so a real sender thread can run on top of it (``Producer(..., transport=ScriptedTransport(
real_wait=True))``).
"""
from __future__ import annotations

import itertools
import math
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Set, Tuple, Union

from ..clock import Clock, FakeClock
from ..network.transport import Payload
from ..protocol import messages as m
from ..protocol.errors import (
    NO_ERROR,
    AuthenticationError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from ..protocol.records import RecordBatch, read_batches
from ..protocol.schema import Api

TopicPartition = Tuple[str, int]
Address = Tuple[str, int]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: script result: do not answer now; the test answers later with :meth:`ScriptedTransport.respond`
HOLD = _Sentinel("HOLD")
#: script result: the broker closes the connection instead of answering
DISCONNECT = _Sentinel("DISCONNECT")


class Frame:
    """Script result: send these bytes verbatim as the response frame (payload, no size prefix)."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class Encoded:
    """Script result: encode ``body`` as response version ``version`` (instead of the request's)."""

    def __init__(self, body: Dict[str, Any], version: int) -> None:
        self.body = body
        self.version = version


Result = Any  # dict | int (error code) | {tp: code} (produce) | HOLD | DISCONNECT | Frame | Encoded | callable
Handler = Callable[["SentRequest"], Result]


class PollLimitExceeded(BaseException):
    """Raised by ``poll`` after ``max_polls`` calls: a test loop that never converges fails instead of
    hanging (a BaseException so the sender's catch-all does not swallow it)."""


class SentRequest:
    """One request the client wrote, decoded."""

    def __init__(self, node_id: int, broker_id: int, payload: bytes, written_ms: float) -> None:
        header, api, pos = m.decode_request_header(payload)
        if api is None:
            raise AssertionError(f"the client sent an unknown API key {header.api_key}")
        self.node_id = node_id
        self.broker_id = broker_id
        self.header = header
        self.api: Api = api
        self.version = header.api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id
        self.body: Dict[str, Any] = api.decode_request(header.api_version, payload, pos)
        self.payload = payload
        self.written_ms = written_ms
        self.answered = False
        self.expects_response = not (api is m.PRODUCE and self.body["acks"] == 0)

    # -- produce helpers ---------------------------------------------------------------------------

    def partitions(self) -> List[TopicPartition]:
        """The (topic, partition)s of a Produce request, in request order."""
        return [(t["name"], p["index"]) for t in self.body["topic_data"] for p in t["partition_data"]]

    def batches(self) -> Dict[TopicPartition, RecordBatch]:
        """The record batch of each partition of a Produce request (decoded, CRC checked)."""
        out: Dict[TopicPartition, RecordBatch] = {}
        for t in self.body["topic_data"]:
            for p in t["partition_data"]:
                parsed = read_batches(p["records"])
                assert len(parsed) == 1, "one batch per partition per request"
                out[(t["name"], p["index"])] = parsed[0]
        return out

    def values(self, tp: Optional[TopicPartition] = None) -> List[Optional[bytes]]:
        """Record values of a Produce request (of one partition, or all in request order)."""
        out: List[Optional[bytes]] = []
        for key, batch in self.batches().items():
            if tp is None or key == tp:
                out.extend(r.value for r in batch.records)
        return out

    def __repr__(self) -> str:
        return f"<SentRequest {self.api.name} v{self.version} node={self.node_id} corr={self.correlation_id}>"


class _Conn:
    __slots__ = ("node_id", "broker_id", "state", "unwritten", "outbox", "killed")

    def __init__(self, node_id: int, broker_id: int) -> None:
        self.node_id = node_id
        self.broker_id = broker_id
        self.state = "connecting"
        self.unwritten: Deque[bytes] = deque()
        # requests in arrival order with their response frame (None while held)
        self.outbox: Deque[List[Any]] = deque()
        self.killed: Optional[str] = None


class ScriptedTransport:
    """In-memory transport with a scripted broker behind each address (see the module's docstring)."""

    def __init__(
        self,
        clock: Optional[Clock] = None,
        brokers: Optional[Mapping[int, Address]] = None,
        topics: Optional[Mapping[str, Union[int, List[int]]]] = None,
        real_wait: bool = False,
        idle_advance: bool = False,
        max_polls: int = 100_000,
    ) -> None:
        self.clock = clock
        self.brokers: Dict[int, Address] = dict(brokers or {1: ("broker1", 9092)})
        #: topic -> leader id of each partition
        self.topics: Dict[str, List[int]] = {}
        for name, spec in (topics or {}).items():
            self.add_topic(name, spec)
        self.real_wait = real_wait
        self.idle_advance = idle_advance
        self.max_polls = max_polls
        self.down: Set[int] = set()  #: brokers whose address refuses connections
        self.hanging: Set[int] = set()  #: brokers whose connection attempts never complete
        self.api_versions: Dict[int, Tuple[int, int]] = {
            api.key: (api.min_version, api.max_version) for api in m.APIS.values()
        }
        self.handlers: Dict[int, Handler] = {
            m.API_VERSIONS.key: self._api_versions,
            m.METADATA.key: self._metadata,
            m.INIT_PRODUCER_ID.key: self._init_producer_id,
            m.PRODUCE.key: self._produce,
        }
        self.scripts: Dict[int, Deque[Result]] = {}
        #: every request written, in order
        self.requests: List[SentRequest] = []
        #: broker-side logs: tp -> list of (base offset, batch)
        self.logs: Dict[TopicPartition, List[Tuple[int, RecordBatch]]] = {}
        self.log_end: Dict[TopicPartition, int] = {}
        self.connect_attempts: List[Tuple[float, int, Address]] = []  #: (time, node id, address)
        self.closed_by_client: List[Tuple[int, str]] = []
        self.poll_timeouts: List[float] = []
        self.wakeups = 0
        self._producer_ids = itertools.count(4000)
        self._conns: Dict[int, _Conn] = {}
        self._pending_disconnects: Dict[int, str] = {}
        self._cond = threading.Condition()
        self._closed = False
        # results of the last poll (the Selector interface)
        self.connected: List[int] = []
        self.completed_sends: List[int] = []
        self.completed_receives: List[Tuple[int, bytes]] = []
        self.disconnected: Dict[int, str] = {}
        self.failures: Dict[int, AuthenticationError] = {}

    # -- the cluster model -------------------------------------------------------------------------

    def add_topic(self, name: str, spec: Union[int, List[int]] = 1) -> None:
        """A topic with ``spec`` partitions all led by the lowest broker id, or one leader per partition
        (-1 = no leader)."""
        if isinstance(spec, int):
            leader = min(self.brokers)
            self.topics[name] = [leader] * spec
        else:
            self.topics[name] = list(spec)

    def now(self) -> float:
        return self.clock.monotonic_ms() if self.clock is not None else 0.0

    def _broker_at(self, host: str, port: int) -> Optional[int]:
        for broker_id, addr in self.brokers.items():
            if addr == (host, port):
                return broker_id
        return None

    # -- scripting ---------------------------------------------------------------------------------

    def script(self, api: Api, *results: Result) -> None:
        """Answer the next requests of ``api`` with ``results``, one each, before the default handler
        takes over again."""
        with self._cond:
            self.scripts.setdefault(api.key, deque()).extend(results)

    def respond(self, request: SentRequest, result: Result = 0) -> None:
        """Answer a held request (delivered at the next poll, after earlier responses on its connection)."""
        with self._cond:
            conn = self._conns.get(request.node_id)
            if conn is None:
                raise AssertionError(f"{request} has no connection any more")
            for entry in conn.outbox:
                if entry[0] is request:
                    if entry[1] is not None:
                        raise AssertionError(f"{request} was already answered")
                    frame = self._frame_for(request, result)
                    if frame is HOLD:
                        raise AssertionError("respond() needs an answer, not HOLD")
                    if frame is DISCONNECT:
                        self._kill(conn, "broker closed the connection")
                    else:
                        entry[1] = frame
                    self._cond.notify_all()
                    return
            raise AssertionError(f"{request} is not waiting for an answer")

    def held(self, api: Optional[Api] = None) -> List[SentRequest]:
        """Requests written and not answered yet (oldest first)."""
        with self._cond:
            return [e[0] for c in self._conns.values() for e in c.outbox
                    if e[1] is None and (api is None or e[0].api is api)]

    def sent(self, api: Optional[Api] = None) -> List[SentRequest]:
        with self._cond:
            return [r for r in self.requests if api is None or r.api is api]

    def kill_connection(self, node_id: int, reason: str = "connection closed by the broker") -> None:
        """The broker drops the connection; reported as a disconnection at the next poll."""
        with self._cond:
            conn = self._conns.get(node_id)
            if conn is not None:
                self._kill(conn, reason)
            self._cond.notify_all()

    def inject_frame(self, node_id: int, payload: bytes) -> None:
        """Deliver an unsolicited frame on a connection at the next poll."""
        with self._cond:
            self._conns[node_id].outbox.appendleft([None, payload])
            self._cond.notify_all()

    def connection_states(self) -> Dict[int, str]:
        with self._cond:
            return {n: c.state for n, c in self._conns.items()}

    # -- Selector interface ------------------------------------------------------------------------

    def connect(self, node_id: int, host: str, port: int) -> None:
        with self._cond:
            if node_id in self._conns:
                raise ValueError(f"already connected or connecting to node {node_id}")
            self.connect_attempts.append((self.now(), node_id, (host, port)))
            broker_id = self._broker_at(host, port)
            if broker_id is None or broker_id in self.down:
                self._pending_disconnects[node_id] = f"connect to {host}:{port} failed: ECONNREFUSED"
                self._cond.notify_all()
                return
            self._conns[node_id] = _Conn(node_id, broker_id)
            self._cond.notify_all()

    def is_connected(self, node_id: int) -> bool:
        conn = self._conns.get(node_id)
        return conn is not None and conn.state == "connected"

    def has_channel(self, node_id: int) -> bool:
        return node_id in self._conns

    def channel_ids(self) -> List[int]:
        return list(self._conns)

    def send(self, node_id: int, payload: Payload) -> None:
        if not isinstance(payload, (bytes, bytearray)):  # a frame in parts (a Produce request's batches)
            payload = b"".join(payload)
        with self._cond:
            conn = self._conns.get(node_id)
            if conn is None or conn.state != "connected":
                raise ConnectionError(f"node {node_id} is not connected")
            if conn.killed:
                return  # like a socket the peer closed: the write is lost, the next poll reports it
            conn.unwritten.append(bytes(payload))
            self._cond.notify_all()

    def close(self, node_id: int, reason: str = "closed by client") -> None:
        with self._cond:
            if self._conns.pop(node_id, None) is not None:
                self.closed_by_client.append((node_id, reason))
            self._pending_disconnects.pop(node_id, None)

    def close_all(self) -> None:
        with self._cond:
            for node_id in list(self._conns):
                self.close(node_id, "selector closed")
            self._closed = True
            self._cond.notify_all()

    def wakeup(self) -> None:
        with self._cond:
            self.wakeups += 1
            self._cond.notify_all()

    def setup_timeout_error(self, node_id: int) -> None:
        return None  # no TLS here: a stalled connection says nothing about the settings

    def connection_ready(self, node_id: int) -> None:
        pass  # (no limit on a response's size here)

    def clear_results(self) -> None:
        self.connected = []
        self.completed_sends = []
        self.completed_receives = []
        self.disconnected = {}

    def _has_work(self) -> bool:
        if self._pending_disconnects:
            return True
        for c in self._conns.values():
            if c.killed or c.unwritten or (c.outbox and c.outbox[0][1] is not None):
                return True
            if c.state == "connecting" and c.broker_id not in self.hanging:
                return True
        return False

    def poll(self, timeout_ms: float) -> None:
        with self._cond:
            self.poll_timeouts.append(timeout_ms)
            if len(self.poll_timeouts) > self.max_polls:
                raise PollLimitExceeded(f"more than {self.max_polls} polls")
            connected, disconnected = self.connected, self.disconnected
            self.clear_results()
            self.connected = list(connected)
            self.disconnected = dict(disconnected)
            if self._closed:
                return
            if not self._has_work() and not self.connected and not self.disconnected:
                if self.real_wait:
                    self._cond.wait(max(0.0, min(timeout_ms, 50.0)) / 1000.0)
                elif self.idle_advance and isinstance(self.clock, FakeClock):
                    # at least one ulp: as with a real clock, an idle poll never takes zero time
                    now = self.clock.monotonic_ms()
                    self.clock.advance(max(min(timeout_ms, 3_600_000.0), math.nextafter(now, math.inf) - now))
            self._step()

    def _step(self) -> None:
        for node_id, reason in self._pending_disconnects.items():
            self.disconnected[node_id] = reason
        self._pending_disconnects.clear()
        for node_id, conn in list(self._conns.items()):
            if conn.killed:
                del self._conns[node_id]
                self.disconnected[node_id] = conn.killed
                continue
            if conn.state == "connecting":
                if conn.broker_id in self.hanging:
                    continue
                conn.state = "connected"
                self.connected.append(node_id)
                continue
            # the client's writes reach the broker, which handles them in order
            while conn.unwritten:
                payload = conn.unwritten.popleft()
                self.completed_sends.append(node_id)
                self._handle(conn, payload)
                if conn.killed:
                    break
            if conn.killed:
                del self._conns[node_id]
                self.disconnected[node_id] = conn.killed
                continue
            # responses come back in order; a held one holds back the rest
            while conn.outbox and conn.outbox[0][1] is not None:
                req, frame = conn.outbox.popleft()
                if req is not None:
                    req.answered = True
                self.completed_receives.append((node_id, frame))

    def _kill(self, conn: _Conn, reason: str) -> None:
        conn.killed = reason
        conn.outbox.clear()
        conn.unwritten.clear()

    # -- the broker ----------------------------------------------------------------------------------

    def _handle(self, conn: _Conn, payload: bytes) -> None:
        req = SentRequest(conn.node_id, conn.broker_id, payload, self.now())
        self.requests.append(req)
        queue = self.scripts.get(req.api.key)
        if queue:
            result: Result = queue.popleft()
        else:
            handler = self.handlers.get(req.api.key)
            if handler is None:
                raise AssertionError(f"no handler for {req.api.name}; script one")
            result = handler
        frame = self._frame_for(req, result)
        if frame is DISCONNECT:
            self._kill(conn, "connection closed by the broker")
            return
        if not req.expects_response:
            return
        conn.outbox.append([req, None if frame is HOLD else frame])

    def _frame_for(self, req: SentRequest, result: Result) -> Any:
        """Turn a script result into a response frame (or HOLD / DISCONNECT)."""
        while callable(result) and not isinstance(result, (_Sentinel, Frame, Encoded)):
            result = result(req)
        if result is HOLD or result is DISCONNECT:
            return result
        if isinstance(result, Frame):
            return result.payload
        version = req.version
        if isinstance(result, Encoded):
            version, result = result.version, result.body
        if isinstance(result, int) or (isinstance(result, dict) and req.api is m.PRODUCE
                                        and all(isinstance(k, tuple) for k in result)):
            result = self.error_body(req, result)
        if not isinstance(result, dict):
            raise AssertionError(f"cannot answer {req} with {result!r}")
        return m.encode_response(req.api, version, req.correlation_id, result)

    def error_body(self, req: SentRequest, error: Union[int, Dict[TopicPartition, int]]) -> Dict[str, Any]:
        """A response carrying ``error`` (a code for every partition, or per partition for Produce)."""
        if req.api is m.PRODUCE:
            codes = error if isinstance(error, dict) else {tp: error for tp in req.partitions()}
            return self.produce_response(req, codes)
        assert isinstance(error, int)
        return {"error_code": error}

    def produce_response(self, req: SentRequest, errors: Optional[Dict[TopicPartition, int]] = None,
                         append: bool = True) -> Dict[str, Any]:
        """A Produce response: partitions without an error (or with 46) are appended to the log (when
        ``append``) and get their base offset."""
        errors = errors or {}
        batches = req.batches()
        responses = []
        for t in req.body["topic_data"]:
            parts = []
            for p in t["partition_data"]:
                tp = (t["name"], p["index"])
                code = errors.get(tp, NO_ERROR)
                base = -1
                if code == NO_ERROR and append:
                    base = self.log_end.get(tp, 0)
                    batch = batches[tp]
                    self.logs.setdefault(tp, []).append((base, batch))
                    self.log_end[tp] = base + batch.record_count
                parts.append({"index": p["index"], "error_code": code, "base_offset": base,
                              "log_append_time_ms": -1, "log_start_offset": 0})
            responses.append({"name": t["name"], "partition_responses": parts})
        return {"responses": responses, "throttle_time_ms": 0}

    def log_values(self, tp: TopicPartition) -> List[Optional[bytes]]:
        return [r.value for _base, b in self.logs.get(tp, []) for r in b.records]

    def _api_versions(self, req: SentRequest) -> Result:
        lo, hi = self.api_versions.get(m.API_VERSIONS.key, (0, 3))
        keys = [{"api_key": k, "min_version": v[0], "max_version": v[1]} for k, v in sorted(self.api_versions.items())]
        if not lo <= req.version <= hi:
            # as Kafka does: UNSUPPORTED_VERSION encoded as v0, listing the versions it speaks
            return Encoded({"error_code": UnsupportedVersionError.code, "api_keys": [
                {"api_key": m.API_VERSIONS.key, "min_version": lo, "max_version": hi}]}, 0)
        return {"error_code": NO_ERROR, "api_keys": keys, "throttle_time_ms": 0}

    def _metadata(self, req: SentRequest) -> Result:
        wanted = req.body["topics"]
        names = sorted(self.topics) if wanted is None else [t["name"] for t in wanted]
        topics: List[Dict[str, Any]] = []
        for name in names:
            leaders = self.topics.get(name)
            if leaders is None:
                topics.append({"error_code": UnknownTopicOrPartitionError.code, "name": name, "partitions": []})
                continue
            parts = [{"error_code": LeaderNotAvailableError.code if leader < 0 else NO_ERROR, "partition_index": i,
                      "leader_id": leader, "leader_epoch": 0, "replica_nodes": [max(leader, 0)],
                      "isr_nodes": [max(leader, 0)]}
                     for i, leader in enumerate(leaders)]
            topics.append({"error_code": NO_ERROR, "name": name, "partitions": parts})
        brokers = [{"node_id": b, "host": h, "port": p, "rack": None} for b, (h, p) in sorted(self.brokers.items())]
        return {"brokers": brokers, "cluster_id": "scripted", "controller_id": min(self.brokers), "topics": topics}

    def _init_producer_id(self, req: SentRequest) -> Result:
        return {"error_code": NO_ERROR, "producer_id": next(self._producer_ids), "producer_epoch": 0}

    def _produce(self, req: SentRequest) -> Result:
        errors = {}
        for tp in req.partitions():
            leaders = self.topics.get(tp[0])
            if leaders is None or tp[1] >= len(leaders):
                errors[tp] = UnknownTopicOrPartitionError.code
            elif leaders[tp[1]] != req.broker_id:
                errors[tp] = NotLeaderOrFollowerError.code
        return self.produce_response(req, errors)


#: the name the tests used before kproducer.testing existed
ScriptedSelector = ScriptedTransport

__all__ = ["DISCONNECT", "HOLD", "Encoded", "Frame", "Handler", "PollLimitExceeded", "Result", "ScriptedSelector",
           "ScriptedTransport", "SentRequest"]
