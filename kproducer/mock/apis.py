"""The API layer of a mock broker (Kafka's KafkaApis): one handler per served API.

A handler gets a parsed :class:`Request` and returns the response body, or one of the markers
``NO_RESPONSE`` (acks=0 Produce), ``CLOSE_CONNECTION`` or ``DEFERRED`` (a Fetch parked until data
arrives; the purgatory answers it later). :meth:`KafkaApis.respond` applies the response faults
(dropped responses, latency) and hands the encoded response to the RequestChannel.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ..protocol.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    FencedLeaderEpochError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from ..protocol.messages import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    API_VERSIONS,
    CREATE_TOPICS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    TXN_OFFSET_COMMIT,
    encode_response,
)
from ..protocol.schema import Api
from .faults import api_name, snake
from .request_channel import Request, RequestChannel, Response
from .state import ClusterState, PartitionState, TopicError, TopicState
from .txn import TransactionCoordinator

log = logging.getLogger(__name__)

Body = Dict[str, Any]


class Marker:
    """A handler result that is not a response body."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_GARBLED_BODY = b"\x00\x00\x7f\xff\xff\xff"
_OVERSIZED_FRAME = b"\x7f\xff\xff\xff"

NO_RESPONSE = Marker("NO_RESPONSE")
CLOSE_CONNECTION = Marker("CLOSE_CONNECTION")
DEFERRED = Marker("DEFERRED")
Result = Union[Body, Marker]

#: every API a mock broker serves, with the versions it advertises
SERVED_APIS: List[Api] = [
    PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR, CREATE_TOPICS, INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT, OFFSET_COMMIT, OFFSET_FETCH,
    API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE,
]
SERVED_VERSIONS: Dict[int, Tuple[int, int]] = {a.key: (a.min_version, a.max_version) for a in SERVED_APIS}
API_NAMES: Dict[int, str] = {a.key: snake(a.name) for a in SERVED_APIS}
_KEYS_BY_NAME: Dict[str, int] = {name: key for key, name in API_NAMES.items()}

VersionSpec = Union[None, int, Tuple[int, int]]


def restrict_versions(api_versions: Mapping[Union[str, int], VersionSpec]) -> Dict[int, Tuple[int, int]]:
    """The versions an older broker serves: :data:`SERVED_VERSIONS` with each API named in
    ``api_versions`` (by name, ``"Produce"`` / ``"produce"``, or key, ``0``) limited to a max version
    (an int: the range becomes ``min(implemented min, max)..max``), to a ``(min, max)`` range, or left
    out (None: the API is not served, as a broker that predates it). ApiVersions itself is always served.

    The mock cannot advertise a version above what it implements (ValueError); it may advertise
    versions below (an old broker's v0-v2 Produce, for instance): a request at one of those is refused
    by closing the connection, as no Kafka client sends it without a codec for it."""
    served = dict(SERVED_VERSIONS)
    for name, spec in api_versions.items():
        try:
            key = name if isinstance(name, int) and name in API_NAMES else _KEYS_BY_NAME[api_name(name)]
        except (KeyError, ValueError):
            raise ValueError(f"api_versions: unknown or unserved API {name!r}; served: "
                             f"{', '.join(sorted(API_NAMES.values()))}") from None
        impl_lo, impl_hi = SERVED_VERSIONS[key]
        label = API_NAMES[key]
        if spec is None:
            if key == API_VERSIONS.key:
                raise ValueError("api_versions: ApiVersions cannot be left out (every broker since 0.10 serves it)")
            del served[key]
            continue
        if isinstance(spec, bool) or not isinstance(spec, (int, tuple, list)):
            raise ValueError(f"api_versions[{name!r}]: give a max version, a (min, max) pair or None, not {spec!r}")
        if isinstance(spec, int):
            lo, hi = min(impl_lo, spec), spec
        else:
            if len(spec) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in spec):
                raise ValueError(f"api_versions[{name!r}]: a (min, max) pair of ints, not {spec!r}")
            lo, hi = spec[0], spec[1]
        if not 0 <= lo <= hi:
            raise ValueError(f"api_versions[{name!r}]: versions {lo}..{hi} are not a range of versions >= 0")
        if hi > impl_hi:
            raise ValueError(f"api_versions[{name!r}]: the mock implements {label} up to v{impl_hi}, not v{hi}")
        if key == API_VERSIONS.key and lo > 0:
            raise ValueError("api_versions: ApiVersions must serve v0 (clients fall back to it)")
        served[key] = (lo, hi)
    return served


def leader_epoch_error(p: PartitionState, requested: int) -> int:
    """KIP-320 fencing: a client's current leader epoch older or newer than the partition's."""
    if requested < 0 or requested == p.leader_epoch:
        return NO_ERROR
    return FencedLeaderEpochError.code if requested < p.leader_epoch else UnknownLeaderEpochError.code


class KafkaApis:
    def __init__(
        self,
        broker_id: int,
        state: ClusterState,
        txn: TransactionCoordinator,
        channel: RequestChannel,
    ) -> None:
        from .fetch import FetchPurgatory, handle_fetch
        from .group_apis import handle_offset_commit, handle_offset_fetch
        from .produce import handle_produce
        from .sasl_apis import handle_sasl_authenticate, handle_sasl_handshake
        from .txn_apis import (
            handle_add_offsets_to_txn,
            handle_add_partitions_to_txn,
            handle_end_txn,
            handle_init_producer_id,
            handle_txn_offset_commit,
        )

        self.broker_id = broker_id
        self.state = state
        self.faults = state.faults
        self.config = state.config
        self.txn = txn
        self.channel = channel
        #: api key -> (min, max): what this broker advertises and accepts
        self.served: Dict[int, Tuple[int, int]] = state.config.served_versions or SERVED_VERSIONS
        self.purgatory = FetchPurgatory(self)
        self._handlers: Dict[int, Callable[[Request], Result]] = {
            API_VERSIONS.key: self.handle_api_versions,
            METADATA.key: self.handle_metadata,
            LIST_OFFSETS.key: self.handle_list_offsets,
            FIND_COORDINATOR.key: self.handle_find_coordinator,
            CREATE_TOPICS.key: self.handle_create_topics,
            PRODUCE.key: lambda r: handle_produce(self, r),
            FETCH.key: lambda r: handle_fetch(self, r),
            INIT_PRODUCER_ID.key: lambda r: handle_init_producer_id(self, r),
            ADD_PARTITIONS_TO_TXN.key: lambda r: handle_add_partitions_to_txn(self, r),
            ADD_OFFSETS_TO_TXN.key: lambda r: handle_add_offsets_to_txn(self, r),
            END_TXN.key: lambda r: handle_end_txn(self, r),
            TXN_OFFSET_COMMIT.key: lambda r: handle_txn_offset_commit(self, r),
            OFFSET_COMMIT.key: lambda r: handle_offset_commit(self, r),
            OFFSET_FETCH.key: lambda r: handle_offset_fetch(self, r),
            SASL_HANDSHAKE.key: lambda r: handle_sasl_handshake(self, r),
            SASL_AUTHENTICATE.key: lambda r: handle_sasl_authenticate(self, r),
        }

    # ---------------------------------------------------------------------------- dispatch

    def handle(self, request: Request) -> None:
        key = request.api.key
        header = request.header
        self.faults.record(self.broker_id, API_NAMES[key], header.api_version, header.correlation_id,
                           header.client_id)
        result = self._handlers[key](request)
        if result is not DEFERRED:
            self.respond(request, result)

    def respond(self, request: Request, result: Result, close_after_send: bool = False) -> None:
        """Send a handler's result; ``close_after_send`` closes the connection once it is written."""
        name = API_NAMES[request.api.key]
        if result is CLOSE_CONNECTION or self.faults.take_drop(name):
            self.channel.send_response(Response(request, None, close=True))
            return
        latency = self.faults.latency(self.broker_id)
        send_at = time.monotonic() + latency if latency else 0.0
        if result is NO_RESPONSE:
            self.channel.send_response(Response(request, None, send_at=send_at))
            return
        assert isinstance(result, dict)
        corruption = self.faults.take_corruption(name)
        correlation_id = request.header.correlation_id
        if corruption == "garbled":
            # the right correlation id, then a body no version of any response parses (a count of 2^31-1
            # elements with nothing after it)
            data = correlation_id.to_bytes(4, "big", signed=True) + _GARBLED_BODY
        elif corruption == "oversized":
            # a frame size no client accepts (2^31-1 bytes announced), then a few bytes
            data = _OVERSIZED_FRAME + correlation_id.to_bytes(4, "big", signed=True)
            self.channel.send_response(Response(request, data, send_at=send_at, raw=True))
            return
        elif request.body is None:
            # an ApiVersions request of a version we do not serve is answered as v0 (Kafka), or, as a
            # fault, in the requested version's flexible shape (a server that does not special-case it)
            data = self._unsupported_api_versions_reply(request, result)
        else:
            data = encode_response(request.api, request.version, correlation_id, result)
        self.channel.send_response(Response(request, data, send_at=send_at, close_after_send=close_after_send))

    def _unsupported_api_versions_reply(self, request: Request, result: Body) -> bytes:
        correlation_id = request.header.correlation_id
        if self.config.unsupported_api_versions_reply != "as_requested":
            return encode_response(request.api, 0, correlation_id, result)
        version = min(request.version, API_VERSIONS.max_version)
        body = API_VERSIONS.encode_response(version, result)
        if API_VERSIONS.is_flexible(version):
            # a flexible response header (tagged fields), which ApiVersions never has
            return correlation_id.to_bytes(4, "big", signed=True) + b"\x00" + body
        return correlation_id.to_bytes(4, "big", signed=True) + body

    # ----------------------------------------------------------------------------- helpers

    def partition_error(self, topic: str, index: int) -> Tuple[int, Optional[PartitionState]]:
        """The partition if this broker leads it; else the error to answer."""
        p = self.state.partition(topic, index)
        if p is None:
            return UnknownTopicOrPartitionError.code, None
        if p.leader != self.broker_id:
            return NotLeaderOrFollowerError.code, p
        return NO_ERROR, p

    def leader_info(self, p: Optional[PartitionState]) -> Body:
        """KIP-951's leader hint: the partition's leader and epoch (-1, -1 when unknown or not alive)."""
        if p is None:
            return {"leader_id": -1, "leader_epoch": -1}
        with self.state.lock:
            leader, epoch = p.leader, p.leader_epoch
            broker = self.state.brokers.get(leader)
            if broker is None or not broker.alive:
                return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": leader, "leader_epoch": epoch}

    def node_endpoints(self, broker_ids: List[int]) -> List[Body]:
        out = []
        for b in self.state.live_brokers():
            if b.id in broker_ids:
                out.append({"node_id": b.id, "host": b.host, "port": b.port, "rack": None})
        return out

    # ---------------------------------------------------------------------- ApiVersions (18)

    def handle_api_versions(self, request: Request) -> Result:
        if request.body is None:
            lo, hi = self.served[API_VERSIONS.key]
            return {
                "error_code": UnsupportedVersionError.code,
                "api_keys": [{"api_key": API_VERSIONS.key, "min_version": lo, "max_version": hi}],
            }
        injected = self.faults.take_error("api_versions")
        return {
            "error_code": injected or NO_ERROR,
            "api_keys": [
                {"api_key": key, "min_version": lo, "max_version": hi}
                for key, (lo, hi) in sorted(self.served.items())
            ],
            "throttle_time_ms": 0,
        }

    # -------------------------------------------------------------------------- Metadata (3)

    def handle_metadata(self, request: Request) -> Result:
        body = request.body
        assert body is not None
        injected = self.faults.take_error("metadata")
        state = self.state
        topics: List[Body] = []
        with state.lock:
            requested = body["topics"]
            if requested is None:
                wanted: List[Tuple[Optional[str], Any]] = [(name, None) for name in sorted(state.topics)]
            else:
                wanted = [(t["name"], t["topic_id"]) for t in requested]
            for name, topic_id in wanted:
                topic: Optional[TopicState] = None
                if name is None:
                    topic = next((t for t in state.topics.values() if t.topic_id == topic_id), None)
                    if topic is None:
                        topics.append({"error_code": UnknownTopicIdError.code, "name": None, "topic_id": topic_id,
                                       "partitions": []})
                        continue
                else:
                    topic = state.topics.get(name)
                if topic is None:
                    topics.append(self._missing_topic(name or "", body["allow_auto_topic_creation"]))
                else:
                    topics.append(self._topic_metadata(topic))
            brokers = [{"node_id": b.id, "host": b.host, "port": b.port, "rack": None} for b in state.live_brokers()]
            controller = state.controller_id()
        if injected:
            for t in topics:
                t["error_code"] = injected
        return {
            "throttle_time_ms": 0,
            "brokers": brokers,
            "cluster_id": state.cluster_id,
            "controller_id": controller,
            "topics": topics,
        }

    def _missing_topic(self, name: str, allow_create: bool) -> Body:
        if self.config.auto_create_topics and allow_create:
            try:
                topic = self.state.create_topic(name, self.config.default_partitions)
            except TopicError as e:
                return {"error_code": e.code, "name": name, "partitions": []}
            assert topic is not None
            log.info("auto-created topic %r with %d partitions", name, len(topic.partitions))
            return self._topic_metadata(topic)
        return {"error_code": UnknownTopicOrPartitionError.code, "name": name, "partitions": []}

    def _topic_metadata(self, topic: TopicState) -> Body:
        brokers = self.state.brokers
        partitions = []
        for p in topic.partitions:
            alive = [r for r in p.replicas if brokers[r].alive]
            leader_alive = brokers[p.leader].alive
            partitions.append({
                "error_code": NO_ERROR if leader_alive else LeaderNotAvailableError.code,
                "partition_index": p.index,
                "leader_id": p.leader if leader_alive else -1,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": alive,
                "offline_replicas": [r for r in p.replicas if r not in alive],
            })
        return {
            "error_code": NO_ERROR,
            "name": topic.name,
            "topic_id": topic.topic_id,
            "is_internal": False,
            "partitions": partitions,
        }

    # ----------------------------------------------------------------------- ListOffsets (2)

    def handle_list_offsets(self, request: Request) -> Result:
        body = request.body
        assert body is not None
        read_committed = body["isolation_level"] == 1
        topics = []
        for t in body["topics"]:
            parts = []
            for part in t["partitions"]:
                parts.append(self._list_offset(t["name"], part, read_committed))
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(self, topic: str, part: Body, read_committed: bool) -> Body:
        index = part["partition_index"]
        result: Body = {"partition_index": index, "error_code": NO_ERROR, "timestamp": -1, "offset": -1,
                        "leader_epoch": -1}
        injected = self.faults.take_error("list_offsets")
        if injected:
            result["error_code"] = injected
            return result
        error, p = self.partition_error(topic, index)
        if error == NO_ERROR:
            assert p is not None
            error = leader_epoch_error(p, part["current_leader_epoch"])
        if error:
            result["error_code"] = error
            return result
        assert p is not None
        ts = part["timestamp"]
        with p.log.lock:
            plog = p.log
            found: Optional[Tuple[int, int]]
            if ts == -2:
                found = (plog.log_start_offset, -1)
            elif ts == -1:
                found = (plog.last_stable_offset if read_committed else plog.end_offset, -1)
            elif ts == -3:
                found = plog.offset_of_max_timestamp()
            elif ts >= 0:
                found = plog.offset_for_timestamp(ts)
            else:
                found = None
        if found is not None:
            result["offset"], result["timestamp"] = found
        result["leader_epoch"] = p.leader_epoch
        return result

    # ------------------------------------------------------------------- FindCoordinator (10)

    def handle_find_coordinator(self, request: Request) -> Result:
        body = request.body
        assert body is not None
        v = request.version
        keys = body["coordinator_keys"] if v >= 4 else [body["key"]]
        key_type = body["key_type"]
        injected = self.faults.take_error("find_coordinator")
        results = []
        for key in keys:
            entry: Body = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": NO_ERROR,
                           "error_message": None}
            if injected:
                entry["error_code"] = injected
            elif key_type not in (0, 1) or (key_type == 1 and not key):
                entry["error_code"] = InvalidRequestError.code
                entry["error_message"] = f"invalid key type {key_type} or empty key"
            else:
                broker = self.state.coordinator_for(key)
                if broker is None:
                    entry["error_code"] = CoordinatorNotAvailableError.code
                else:
                    entry.update(node_id=broker.id, host=broker.host, port=broker.port)
            results.append(entry)
        if v >= 4:
            return {"throttle_time_ms": 0, "coordinators": results}
        one = results[0]
        return {"throttle_time_ms": 0, "error_code": one["error_code"], "error_message": one["error_message"],
                "node_id": one["node_id"], "host": one["host"], "port": one["port"]}

    def is_coordinator(self, key: str) -> bool:
        broker = self.state.coordinator_for(key)
        return broker is not None and broker.id == self.broker_id

    # ---------------------------------------------------------------------- CreateTopics (19)

    def handle_create_topics(self, request: Request) -> Result:
        body = request.body
        assert body is not None
        injected = self.faults.take_error("create_topics")
        results = []
        for t in body["topics"]:
            results.append(self._create_topic(t, body["validate_only"], injected))
        return {"throttle_time_ms": 0, "topics": results}

    def _create_topic(self, t: Body, validate_only: bool, injected: Optional[int]) -> Body:
        name = t["name"]
        num = t["num_partitions"]
        rf = t["replication_factor"]
        result: Body = {"name": name, "error_code": NO_ERROR, "error_message": None, "num_partitions": -1,
                        "replication_factor": -1, "configs": []}
        n_brokers = len(self.state.brokers)
        leaders: Optional[List[int]] = None
        try:
            if injected:
                raise TopicError(injected, "injected error")
            if t["assignments"]:
                if num != -1 or rf != -1:
                    raise TopicError(InvalidRequestError.code,
                                     "give either an assignment or partitions/replication factor")
                by_index = {a["partition_index"]: a["broker_ids"] for a in t["assignments"]}
                if sorted(by_index) != list(range(len(by_index))) or not all(by_index.values()):
                    raise TopicError(InvalidReplicaAssignmentError.code, "partitions must be 0..n-1, each with brokers")
                leaders = [by_index[i][0] for i in range(len(by_index))]
                num = len(leaders)
            else:
                if num == -1:
                    num = self.config.default_partitions
                if rf != -1 and not 1 <= rf <= n_brokers:
                    raise TopicError(InvalidReplicationFactorError.code,
                                     f"replication factor {rf} is not between 1 and {n_brokers}")
            configs = {c["name"]: c["value"] for c in t["configs"]}
            topic = self.state.create_topic(name, num, leaders, configs, validate_only)
        except TopicError as e:
            result["error_code"] = e.code
            result["error_message"] = e.message
            return result
        if topic is not None:
            result["topic_id"] = topic.topic_id
            log.info("created topic %r with %d partitions", name, num)
        result["num_partitions"] = num
        result["replication_factor"] = n_brokers
        return result
