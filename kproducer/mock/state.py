"""The state every broker of a mock cluster shares: brokers, topics, partition leaders and logs,
producer ids, committed group offsets. Data lives here, not in a broker, so a stopped and restarted
broker finds it again (as if every partition were replicated to every broker)."""
from __future__ import annotations

import itertools
import re
import threading
import uuid
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    LeaderNotAvailableError,
    TopicAlreadyExistsError,
)
from .acl import Authorizer
from .faults import FaultInjector
from .log import PartitionLog
from .mock_clock import SYSTEM_CLOCK, MockClock
from .quotas import QuotaConfig

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
#: the topic config an acks=all Produce checks: fewer in-sync replicas and it is refused (NOT_ENOUGH_REPLICAS)
MIN_INSYNC_REPLICAS = "min.insync.replicas"
#: the topic config that overrides the cluster's max_message_bytes for a topic's batches (MESSAGE_TOO_LARGE)
MAX_MESSAGE_BYTES = "max.message.bytes"
#: how far a CreateTime record's timestamp may be ahead of the broker's clock (Kafka 4.x default: 1 hour; later
#: records are refused with INVALID_TIMESTAMP)
TIMESTAMP_AFTER_MAX_MS = "message.timestamp.after.max.ms"
TIMESTAMP_AFTER_MAX_MS_DEFAULT = 3_600_000


@dataclass
class ClusterConfig:
    auto_create_topics: bool = False
    default_partitions: int = 1
    #: the largest record batch a Produce may carry (Kafka's message.max.bytes default)
    max_message_bytes: int = 1048588
    #: the largest request frame a connection may send; above it the connection is closed
    max_request_size: int = 100 * 1024 * 1024
    #: cap on how long a Fetch waits for data (its max_wait_ms is honoured up to this)
    max_fetch_wait_ms: int = 500
    #: decode every record of a produced batch to validate it (slower); the CRC and the batch
    #: header are always checked
    validate_records: bool = False
    #: when a broker stops, its partitions get a new leader among the live brokers
    move_leaders_on_stop: bool = True
    transaction_max_timeout_ms: int = 900000
    #: api key -> (min, max) versions the brokers advertise and accept (an older broker); None: every API
    #: and version the mock implements (see :func:`kproducer.mock.apis.restrict_versions`)
    served_versions: Optional[Dict[int, Tuple[int, int]]] = None
    #: how an ApiVersions request of a version above the served ones is answered: "v0" (Kafka: the error
    #: encoded as v0, listing the ApiVersions versions served) or "as_requested" (a fault: encoded in
    #: the requested version's flexible shape with a flexible header, which parses as neither)
    unsupported_api_versions_reply: str = "v0"
    #: produce quotas: rates are measured over ``quota_window_num`` samples of ``quota_window_ms`` (Kafka's
    #: quota.window.num and quota.window.size.seconds)
    quota_window_ms: float = 1000.0
    quota_window_num: int = 11
    #: the finalized ``transaction.version`` feature (KIP-890) ApiVersions v3+ advertises: 2 (Apache Kafka 4.x's
    #: default) is transactions v2; the requests of transactions v2 are served at every level but 0, as Apache
    #: Kafka 4.1 does (see docs/mock.md)
    transaction_version: int = 2


#: the transaction.version levels Apache Kafka 4.1 supports (0: the original coordinator, 1: flexible transaction
#: log records, 2: transactions v2)
TRANSACTION_VERSIONS = (0, 1, 2)


def check_transaction_version(level: int) -> int:
    if isinstance(level, bool) or level not in TRANSACTION_VERSIONS:
        raise ValueError(f"transaction_version must be one of {', '.join(map(str, TRANSACTION_VERSIONS))} "
                         f"(Apache Kafka 4.1's transaction.version levels), not {level!r}")
    return level


class BrokerInfo:
    __slots__ = ("id", "host", "port", "alive")

    def __init__(self, broker_id: int, host: str, port: int) -> None:
        self.id = broker_id
        self.host = host
        self.port = port
        self.alive = False


class PartitionState:
    __slots__ = ("topic", "index", "leader", "leader_epoch", "replicas", "log")

    def __init__(self, topic: str, index: int, leader: int, replicas: List[int]) -> None:
        self.topic = topic
        self.index = index
        self.leader = leader
        self.leader_epoch = 0
        self.replicas = replicas
        self.log = PartitionLog(topic, index)


class TopicState:
    __slots__ = ("name", "topic_id", "partitions", "configs")

    def __init__(self, name: str, partitions: List[PartitionState], configs: Dict[str, Optional[str]]) -> None:
        self.name = name
        self.topic_id = uuid.uuid4()
        self.partitions = partitions
        self.configs = configs

    def min_insync_replicas(self) -> int:
        """The topic's ``min.insync.replicas`` (Kafka's default: 1)."""
        value = self.configs.get(MIN_INSYNC_REPLICAS)
        return int(value) if value else 1


class TopicError(Exception):
    """Topic creation refused: ``code`` is the Kafka error code to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ClusterState:
    def __init__(self, config: ClusterConfig, faults: FaultInjector, clock: MockClock = SYSTEM_CLOCK) -> None:
        self.config = config
        #: the time source of every timeout of the cluster
        self.clock = clock
        self.faults = faults
        #: producer_byte_rate quotas per user / client id (each broker measures its own rates)
        self.quotas = QuotaConfig(config.quota_window_ms, config.quota_window_num)
        #: the ACLs (kproducer.mock.acl); off unless MockCluster(authorizer=True)
        self.authorizer = Authorizer()
        self.lock = threading.RLock()
        self.cluster_id = "kproducer-mock-" + uuid.uuid4().hex[:12]
        self.brokers: Dict[int, BrokerInfo] = {}
        self.topics: Dict[str, TopicState] = {}
        #: group -> (topic, partition) -> (offset, metadata)
        self.group_offsets: Dict[str, Dict[Tuple[str, int], Tuple[int, Optional[str]]]] = {}
        self._producer_ids = itertools.count(1000)
        self._append_listeners: List[Callable[[str, int], None]] = []
        #: the finalized features ApiVersions v3+ answers (KIP-584): transaction.version, and the epoch that
        #: orders their changes (Apache Kafka: a metadata offset; here 1, then + 1 per change)
        self.transaction_version = check_transaction_version(config.transaction_version)
        self.features_epoch = 1

    def set_transaction_version(self, level: int) -> None:
        """Finalize another ``transaction.version`` (Apache Kafka: ``kafka-features upgrade/downgrade``)."""
        with self.lock:
            self.transaction_version = check_transaction_version(level)
            self.features_epoch += 1

    # ------------------------------------------------------------------------------ brokers

    def add_broker(self, broker: BrokerInfo) -> None:
        with self.lock:
            self.brokers[broker.id] = broker

    def live_broker_ids(self) -> List[int]:
        with self.lock:
            return sorted(b.id for b in self.brokers.values() if b.alive)

    def live_brokers(self) -> List[BrokerInfo]:
        with self.lock:
            return [self.brokers[i] for i in sorted(self.brokers) if self.brokers[i].alive]

    def controller_id(self) -> int:
        live = self.live_broker_ids()
        return live[0] if live else -1

    def coordinator_for(self, key: str) -> Optional[BrokerInfo]:
        """The broker coordinating a group or transactional id: a stable choice among live brokers."""
        with self.lock:
            live = self.live_brokers()
            if not live:
                return None
            return live[zlib.crc32(key.encode("utf-8")) % len(live)]

    def set_broker_alive(self, broker_id: int, alive: bool, move_leaders: bool = True) -> None:
        """Mark a broker up or down; a broker going down hands its partitions to live brokers when
        the cluster moves leaders on stop (``move_leaders`` False: a whole-cluster shutdown)."""
        with self.lock:
            broker = self.brokers[broker_id]
            broker.alive = alive
            if alive or not move_leaders or not self.config.move_leaders_on_stop:
                return
            live = self.live_broker_ids()
            if not live:
                return
            for topic in self.topics.values():
                for p in topic.partitions:
                    if p.leader == broker_id:
                        # among the replicas only (every broker unless a replication factor was given);
                        # none alive: the partition stays offline until one comes back, as in Kafka
                        candidates = [r for r in p.replicas if r in live]
                        if candidates:
                            p.leader = candidates[0]
                            p.leader_epoch += 1

    # ------------------------------------------------------------------------------- topics

    def not_enough_replicas(self, p: PartitionState) -> Optional[str]:
        """Why an acks=all write to ``p`` is refused (NOT_ENOUGH_REPLICAS): fewer in-sync replicas (those whose
        broker runs) than the topic's min.insync.replicas; None when it may be written."""
        with self.lock:
            topic = self.topics.get(p.topic)
            min_isr = topic.min_insync_replicas() if topic is not None else 1
            isr = [r for r in p.replicas if self.brokers[r].alive]
        if len(isr) >= min_isr:
            return None
        return (f"The size of the current ISR {isr} is insufficient to satisfy the min.isr requirement of "
                f"{min_isr} for partition {p.topic}-{p.index}")

    def create_topic(
        self,
        name: str,
        partitions: int,
        leaders: Optional[Sequence[int]] = None,
        configs: Optional[Dict[str, Optional[str]]] = None,
        validate_only: bool = False,
        replication_factor: Optional[int] = None,
    ) -> Optional[TopicState]:
        """Create a topic; partition i is led by broker ``leaders[i]`` or spread round robin. Its replicas
        are the leader and the next ``replication_factor - 1`` brokers by id (None: every broker)."""
        validate_topic_name(name)
        if partitions < 1:
            raise TopicError(InvalidPartitionsError.code, f"number of partitions must be at least 1, got {partitions}")
        with self.lock:
            if name in self.topics:
                raise TopicError(TopicAlreadyExistsError.code, f"topic {name!r} already exists")
            broker_ids = sorted(self.brokers)
            if not broker_ids:
                raise TopicError(LeaderNotAvailableError.code, "the cluster has no brokers")
            live = self.live_broker_ids() or broker_ids
            rf = len(broker_ids) if replication_factor is None else replication_factor
            if not 1 <= rf <= len(broker_ids):
                raise TopicError(InvalidReplicationFactorError.code,
                                 f"replication factor {rf} is not between 1 and {len(broker_ids)}")
            if leaders is not None:
                if len(leaders) != partitions:
                    raise TopicError(InvalidReplicaAssignmentError.code,
                                     f"{len(leaders)} leaders given for {partitions} partitions")
                unknown = [b for b in leaders if b not in self.brokers]
                if unknown:
                    raise TopicError(InvalidReplicaAssignmentError.code,
                                     f"unknown broker ids in the assignment: {unknown}")
                chosen = list(leaders)
            else:
                chosen = [live[i % len(live)] for i in range(partitions)]
            min_isr = (configs or {}).get(MIN_INSYNC_REPLICAS)
            if min_isr is not None and not (min_isr.isdigit() and int(min_isr) >= 1):
                raise TopicError(InvalidConfigError.code,
                                 f"{MIN_INSYNC_REPLICAS} must be an integer of at least 1, not {min_isr!r}")
            max_bytes = (configs or {}).get(MAX_MESSAGE_BYTES)
            if max_bytes is not None and not (max_bytes.isdigit() and int(max_bytes) >= 0):
                raise TopicError(InvalidConfigError.code,
                                 f"{MAX_MESSAGE_BYTES} must be an integer of at least 0, not {max_bytes!r}")
            after_max = (configs or {}).get(TIMESTAMP_AFTER_MAX_MS)
            if after_max is not None and not (after_max.isdigit() and int(after_max) >= 0):
                raise TopicError(InvalidConfigError.code,
                                 f"{TIMESTAMP_AFTER_MAX_MS} must be an integer of at least 0, not {after_max!r}")
            if validate_only:
                return None
            parts = []
            for i, leader in enumerate(chosen):
                if replication_factor is None:
                    replicas = [leader] + [b for b in broker_ids if b != leader]
                else:
                    at = broker_ids.index(leader)
                    replicas = [broker_ids[(at + k) % len(broker_ids)] for k in range(rf)]
                parts.append(PartitionState(name, i, leader, replicas))
            topic = TopicState(name, parts, dict(configs or {}))
            self.topics[name] = topic
            return topic

    def topic(self, name: str) -> Optional[TopicState]:
        return self.topics.get(name)

    def partition(self, topic: str, index: int) -> Optional[PartitionState]:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    def move_leader(self, topic: str, index: int, broker_id: int) -> None:
        with self.lock:
            p = self.partition(topic, index)
            if p is None:
                raise KeyError(f"unknown partition {topic}-{index}")
            if broker_id not in self.brokers:
                raise KeyError(f"unknown broker {broker_id}")
            if p.leader != broker_id:
                p.leader = broker_id
                p.leader_epoch += 1

    # ------------------------------------------------------------------------------- others

    def next_producer_id(self) -> int:
        with self.lock:
            return next(self._producer_ids)

    def add_append_listener(self, listener: Callable[[str, int], None]) -> None:
        with self.lock:
            self._append_listeners.append(listener)

    def remove_append_listener(self, listener: Callable[[str, int], None]) -> None:
        with self.lock:
            if listener in self._append_listeners:
                self._append_listeners.remove(listener)

    def notify_append(self, topic: str, partition: int) -> None:
        for listener in self._append_listeners:
            listener(topic, partition)

    def commit_offsets(self, group: str, offsets: Dict[Tuple[str, int], Tuple[int, Optional[str]]]) -> None:
        with self.lock:
            self.group_offsets.setdefault(group, {}).update(offsets)


def validate_topic_name(name: str) -> None:
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise TopicError(
            InvalidTopicError.code,
            f"invalid topic name {name!r}: 1-249 characters of ASCII letters, digits, '.', '_' or '-'",
        )
