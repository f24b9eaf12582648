"""The client's view of the cluster: brokers, topics, partitions and their leaders, and when to refresh it.

A :class:`Cluster` is an immutable snapshot; :class:`Metadata` swaps in a new one on every successful
refresh so readers on other threads never need a lock to look up a leader.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Set, Tuple

from ..clock import SYSTEM_CLOCK, Clock, ExponentialBackoff
from ..protocol.errors import (
    KafkaError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
    error_for_code,
)

log = logging.getLogger(__name__)

# error codes that mean "try again after a refresh" rather than "this topic is broken"
_LEADER_NOT_AVAILABLE = LeaderNotAvailableError.code
_UNKNOWN_TOPIC_OR_PARTITION = UnknownTopicOrPartitionError.code


class Node(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: Optional[str] = None


class PartitionInfo(NamedTuple):
    topic: str
    partition: int
    leader: int  # -1 when there is none
    leader_epoch: int
    replicas: Tuple[int, ...]
    isr: Tuple[int, ...]
    error_code: int = 0


class Cluster:
    """Immutable snapshot of brokers and partition leadership."""

    def __init__(
        self,
        nodes: Iterable[Node],
        partitions: Iterable[PartitionInfo] = (),
        topic_errors: Optional[Mapping[str, int]] = None,
        cluster_id: Optional[str] = None,
        controller_id: int = -1,
        bootstrap: bool = False,
    ) -> None:
        self.nodes: Dict[int, Node] = {n.node_id: n for n in nodes}
        by_topic: Dict[str, List[PartitionInfo]] = {}
        for p in partitions:
            by_topic.setdefault(p.topic, []).append(p)
        self.partitions: Dict[str, Tuple[PartitionInfo, ...]] = {
            t: tuple(sorted(ps, key=lambda p: p.partition)) for t, ps in by_topic.items()
        }
        self.leaders: Dict[Tuple[str, int], int] = {
            (p.topic, p.partition): p.leader for ps in self.partitions.values() for p in ps if p.leader >= 0
        }
        self.partition_counts: Dict[str, int] = {t: len(ps) for t, ps in self.partitions.items()}
        self.available: Dict[str, Tuple[int, ...]] = {
            t: tuple(p.partition for p in ps if p.leader >= 0 and p.leader in self.nodes)
            for t, ps in self.partitions.items()
        }
        self.topic_errors: Dict[str, int] = dict(topic_errors or {})
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.is_bootstrap = bootstrap

    @classmethod
    def bootstrap_cluster(cls, servers: List[Tuple[str, int]]) -> "Cluster":
        # bootstrap nodes get negative ids so they never collide with real broker ids
        return cls([Node(-(i + 1), h, p) for i, (h, p) in enumerate(servers)], bootstrap=True)

    def leader_for(self, tp: Tuple[str, int]) -> Optional[Node]:
        leader = self.leaders.get(tp)
        return None if leader is None else self.nodes.get(leader)

    def partitions_for_node(self, node_id: int) -> List[Tuple[str, int]]:
        return [tp for tp, leader in self.leaders.items() if leader == node_id]

    def partition_count(self, topic: str) -> Optional[int]:
        return self.partition_counts.get(topic)


class Metadata:
    """Thread-safe holder of the current :class:`Cluster` plus refresh bookkeeping.

    The sender thread decides when to refresh (``time_to_next_update``) and feeds responses in;
    application threads wait on :meth:`await_update` with a deadline.
    """

    def __init__(
        self,
        bootstrap_servers: List[Tuple[str, int]],
        metadata_max_age_ms: float = 300000,
        refresh_backoff_ms: float = 100,
        metadata_max_idle_ms: float = 300000,
        clock: Clock = SYSTEM_CLOCK,
        refresh_backoff_max_ms: float = 1000,
        refresh_backoff_jitter: float = 0.0,
    ) -> None:
        self.max_age_ms = metadata_max_age_ms
        self.refresh_backoff_ms = refresh_backoff_ms
        # KIP-580: failed refreshes back off exponentially (retry.backoff.ms -> retry.backoff.max.ms, +/-20%)
        # (the producer passes Java's 0.2 jitter; the default 0 keeps tests exact)
        self.refresh_backoff = ExponentialBackoff(
            refresh_backoff_ms, max(refresh_backoff_ms, refresh_backoff_max_ms), refresh_backoff_jitter)
        #: consecutive failed refreshes (0 after a successful one)
        self.attempts = 0
        self._backoff_ms = self.refresh_backoff.backoff(0)
        #: partition -> the highest leader epoch seen (stale metadata with an older one is not applied)
        self._last_seen_epochs: Dict[Tuple[str, int], int] = {}
        self._topic_ids: Dict[str, Any] = {}
        # when a metadata response (or a rebootstrap) last came: for metadata.recovery.rebootstrap.trigger.ms
        self._last_response_ms = clock.monotonic_ms()
        self.max_idle_ms = metadata_max_idle_ms
        self.clock = clock
        self.cluster = Cluster.bootstrap_cluster(bootstrap_servers)
        self.bootstrap_servers = list(bootstrap_servers)
        self._lock = threading.Condition()
        self._topics: Dict[str, float] = {}  # topic -> last time it was used
        self._new_topics: Set[str] = set()
        self._need_full_update = True
        self._need_partial_update = False
        self.last_refresh_ms = 0.0
        self.last_successful_refresh_ms = 0.0
        self.version = 0
        self._fatal: Optional[KafkaError] = None
        # the latest authentication failure and a counter of them: a waiter fails with a failure that
        # happened while it waited (Java's Metadata.fatalError, without losing it to a concurrent waiter)
        self._auth_error: Optional[KafkaError] = None
        self.auth_failures = 0
        self._topic_exceptions: Dict[str, KafkaError] = {}
        #: the broker whose metadata answer was applied last, as (node id, "host:port") (for error messages)
        self.answered_by: Optional[Tuple[int, str]] = None
        self.closed = False

    # -- interest --------------------------------------------------------------------------------

    def add_topic(self, topic: str) -> None:
        """Note that ``topic`` is in use (and fetch it soon if it is new)."""
        with self._lock:
            now = self.clock.monotonic_ms()
            if topic not in self._topics:
                self._new_topics.add(topic)
                self._request_new_topics()
            self._topics[topic] = now

    def topics(self) -> FrozenSet[str]:
        with self._lock:
            return frozenset(self._topics)

    def request_update(self) -> int:
        """Ask for a refresh of every topic in use; returns the version to wait beyond."""
        with self._lock:
            self._need_full_update = True
            return self.version

    def request_update_for_topic(self, topic: str) -> int:
        with self._lock:
            if topic not in self._topics:
                self._topics[topic] = self.clock.monotonic_ms()
                self._new_topics.add(topic)
            if topic in self._new_topics:
                self._request_new_topics()
            else:
                self._need_partial_update = True
            return self.version

    def _request_new_topics(self) -> None:
        """A refresh for the new topics, at once: the backoff since the last refresh does not apply (Java's
        Metadata.requestUpdateForNewTopics resets lastRefreshMs). Without it the first send() to a topic right
        after another refresh (the bootstrap one, or init_transactions()'s) waited out retry.backoff.ms.
        (Called holding the lock.)"""
        self._need_partial_update = True
        self.last_refresh_ms = 0.0

    def update_requested(self) -> bool:
        return self._need_full_update or self._need_partial_update

    def time_to_next_update(self, now_ms: float) -> float:
        """Milliseconds until a refresh is due (0 = now), respecting the refresh backoff."""
        if self._need_full_update or self._need_partial_update:
            due = 0.0
        else:
            due = max(0.0, self.last_successful_refresh_ms + self.max_age_ms - now_ms)
        backoff = max(0.0, self.last_refresh_ms + self._backoff_ms - now_ms)
        return max(due, backoff)

    def request_topics(self, now_ms: float) -> Tuple[Optional[List[str]], bool]:
        """Topics for the next Metadata request and whether it is a partial (new topics only) one.

        Topics unused for metadata.max.idle.ms are forgotten first."""
        with self._lock:
            idle = [t for t, used in self._topics.items() if now_ms - used > self.max_idle_ms]
            for t in idle:
                del self._topics[t]
                self._new_topics.discard(t)
            if self._need_partial_update and not self._need_full_update and self._new_topics:
                return sorted(self._new_topics), True
            return sorted(self._topics), False

    # -- updates ---------------------------------------------------------------------------------

    def update(self, response: Mapping[str, Any], requested: Optional[List[str]], partial: bool,
               now_ms: float, answered_by: Optional[Tuple[int, str]] = None) -> None:
        """Apply a decoded Metadata response (from ``answered_by``: node id, "host:port")."""
        nodes = [Node(b["node_id"], b["host"], b["port"], b.get("rack")) for b in response["brokers"]]
        parts: List[PartitionInfo] = []
        errors: Dict[str, int] = {}
        exceptions: Dict[str, KafkaError] = {}
        seen: Set[str] = set()
        topic_ids: Dict[str, Any] = {}
        for t in response["topics"]:
            name = t["name"]
            if name is None:
                continue
            seen.add(name)
            err = t["error_code"]
            if err:
                errors[name] = err
                if err not in (_LEADER_NOT_AVAILABLE, _UNKNOWN_TOPIC_OR_PARTITION):
                    exc = error_for_code(err)
                    if not exc.retriable:
                        exceptions[name] = exc
                continue
            topic_id = t.get("topic_id")
            for pinfo in t["partitions"]:
                leader = pinfo["leader_id"]
                if pinfo["error_code"] and pinfo["error_code"] != ReplicaNotAvailableError.code:  # still has a leader
                    leader = -1 if pinfo["error_code"] in (_LEADER_NOT_AVAILABLE, NotLeaderOrFollowerError.code) else leader
                parts.append(PartitionInfo(
                    name, pinfo["partition_index"], leader, pinfo.get("leader_epoch", -1),
                    tuple(pinfo.get("replica_nodes") or ()), tuple(pinfo.get("isr_nodes") or ()),
                    pinfo["error_code"],
                ))
            if topic_id is not None:
                topic_ids[name] = topic_id
        with self._lock:
            old = self.cluster
            parts = self._refuse_stale_leaders(parts, old, topic_ids)
            if partial and not old.is_bootstrap:
                # keep what we knew about the topics this request did not cover
                for topic, infos in old.partitions.items():
                    if topic not in seen:
                        parts.extend(infos)
                for topic, code in old.topic_errors.items():
                    if topic not in seen:
                        errors.setdefault(topic, code)
            if not nodes:
                log.warning("metadata response listed no brokers; keeping the previous broker list")
                nodes = [n for n in old.nodes.values() if n.node_id >= 0] or list(old.nodes.values())
            self.cluster = Cluster(nodes, parts, errors, response.get("cluster_id"),
                                   response.get("controller_id", -1))
            self._topic_exceptions = {k: v for k, v in self._topic_exceptions.items() if k not in seen}
            self._topic_exceptions.update(exceptions)
            if requested is not None:
                self._new_topics.difference_update(requested)
            if not partial:
                self._need_full_update = False
            if not self._new_topics:
                self._need_partial_update = False
            self.last_refresh_ms = now_ms
            self._last_response_ms = now_ms
            self.answered_by = answered_by
            self.attempts = 0
            self._fatal = None  # a broker answered: an earlier fatal refresh error is no longer current
            self._backoff_ms = self.refresh_backoff.backoff(0)
            if not partial:
                self.last_successful_refresh_ms = now_ms
            elif self.last_successful_refresh_ms == 0:
                self.last_successful_refresh_ms = now_ms
            self.version += 1
            self._lock.notify_all()

    def _refuse_stale_leaders(self, parts: List[PartitionInfo], old: Cluster,
                              topic_ids: Dict[str, Any]) -> List[PartitionInfo]:
        """Java's Metadata.updateLatestMetadata: a partition whose leader epoch is older than the newest one
        seen keeps the metadata we had (or is left out when we had none); a new topic id resets the epoch."""
        out: List[PartitionInfo] = []
        old_by_tp: Optional[Dict[Tuple[str, int], PartitionInfo]] = None
        seen = self._last_seen_epochs
        for pi in parts:
            tp = (pi.topic, pi.partition)
            epoch = pi.leader_epoch
            if epoch < 0:  # an old broker, or an error without a leader: nothing to compare
                out.append(pi)
                continue
            current = seen.get(tp)
            new_id = topic_ids.get(pi.topic)
            old_id = self._topic_ids.get(pi.topic)
            if current is None or epoch >= current or (new_id is not None and new_id != old_id):
                seen[tp] = epoch
                out.append(pi)
                continue
            log.debug("ignoring metadata of %s-%s with leader epoch %s: epoch %s was seen already", pi.topic,
                      pi.partition, epoch, current)
            if old_by_tp is None:
                old_by_tp = {(p.topic, p.partition): p for ps in old.partitions.values() for p in ps}
            kept = old_by_tp.get(tp)
            if kept is not None:
                out.append(kept)
        self._topic_ids.update(topic_ids)
        return out

    def update_partition_leadership(self, leaders: Mapping[Tuple[str, int], Tuple[int, int]],
                                    nodes: Iterable[Node]) -> Set[Tuple[str, int]]:
        """KIP-951: apply the leaders a Produce (v10+) response named for partitions it refused with
        NOT_LEADER_OR_FOLLOWER, ``(leader id, leader epoch)`` per partition, with the endpoints of those
        leaders (Java's ``Metadata.updatePartitionLeadership``). The brokers given are added to (or
        replace, by id) the known ones; a partition is updated only when its new epoch is newer than the
        one we have, its leader's address is known, and the partition is in the metadata. The rest of the
        metadata is kept as it is, and a refresh is not counted as done. Returns the updated partitions."""
        with self._lock:
            old = self.cluster
            if old.is_bootstrap:
                return set()
            merged: Dict[int, Node] = dict(old.nodes)
            for n in nodes:
                if n.node_id >= 0 and n.host and n.port >= 0:
                    merged[n.node_id] = n
            by_tp = {(p.topic, p.partition): p for ps in old.partitions.values() for p in ps}
            updated: Dict[Tuple[str, int], PartitionInfo] = {}
            for tp, (leader, epoch) in leaders.items():
                if leader < 0 or epoch < 0:
                    log.debug("%s-%s: incomplete leader hint (leader %s, epoch %s); ignored", tp[0], tp[1],
                              leader, epoch)
                    continue
                current = by_tp.get(tp)
                if current is None:
                    log.debug("%s-%s: leader hint for a partition no longer in the metadata; ignored", *tp)
                    continue
                known = max(current.leader_epoch, self._last_seen_epochs.get(tp, -1))
                if epoch <= known:
                    log.debug("%s-%s: leader hint %s (epoch %s) is not newer than epoch %s; ignored", tp[0],
                              tp[1], leader, epoch, known)
                    continue
                if leader not in merged:
                    log.debug("%s-%s: leader hint names broker %s, whose address is unknown; ignored", tp[0],
                              tp[1], leader)
                    continue
                updated[tp] = current._replace(leader=leader, leader_epoch=epoch, error_code=0)
                self._last_seen_epochs[tp] = epoch
            if not updated:
                return set()
            parts = [updated.get((p.topic, p.partition), p) for ps in old.partitions.values() for p in ps]
            self.cluster = Cluster(merged.values(), parts, old.topic_errors, old.cluster_id, old.controller_id)
            for tp, p in updated.items():
                log.debug("%s-%s: leader is now broker %s (epoch %s), from a produce response", tp[0], tp[1],
                          p.leader, p.leader_epoch)
            return set(updated)

    def last_seen_leader_epoch(self, tp: Tuple[str, int]) -> Optional[int]:
        return self._last_seen_epochs.get(tp)

    def rebootstrap(self, now_ms: float) -> None:
        """KIP-899: forget the brokers we knew and start again from bootstrap.servers (Java's
        Metadata.rebootstrap). Topics in use, and the leader epochs seen, are kept."""
        with self._lock:
            log.info("rebootstrapping with %s", ",".join(f"{h}:{p}" for h, p in self.bootstrap_servers))
            self.cluster = Cluster.bootstrap_cluster(self.bootstrap_servers)
            self._need_full_update = True
            self._last_response_ms = now_ms
            self.attempts = 0
            self._backoff_ms = self.refresh_backoff.backoff(0)
            self.last_refresh_ms = 0.0
            self.version += 1
            self._lock.notify_all()

    def rebootstrap_due(self, now_ms: float, trigger_ms: float) -> bool:
        """Whether a refresh is wanted and no metadata came for ``trigger_ms`` (KIP-1102's
        metadata.recovery.rebootstrap.trigger.ms)."""
        return self.update_requested() and now_ms - self._last_response_ms >= trigger_ms

    def failed_update(self, now_ms: float, error: Optional[KafkaError] = None) -> None:
        with self._lock:
            self.last_refresh_ms = now_ms
            self._backoff_ms = self.refresh_backoff.backoff(self.attempts)
            self.attempts += 1
            if error is not None and not error.retriable:
                self._fatal = error
            self._lock.notify_all()

    def authentication_failed(self, error: KafkaError) -> None:
        """A broker refused our credentials or TLS settings: wake the waiters, who raise ``error``."""
        with self._lock:
            self._auth_error = error
            self.auth_failures += 1
            self._lock.notify_all()

    def authentication_succeeded(self) -> None:
        """A connection was set up (and authenticated): the last failure is no longer current."""
        if self._auth_error is not None:
            with self._lock:
                self._auth_error = None

    def current_authentication_error(self) -> Optional[KafkaError]:
        """The latest authentication failure, unless a connection was set up since (None then)."""
        return self._auth_error

    def authentication_error_since(self, count: int) -> Optional[KafkaError]:
        """The latest authentication failure if there was one after :attr:`auth_failures` was ``count``."""
        return self._auth_error if self.auth_failures > count else None

    def topic_exception(self, topic: str) -> Optional[KafkaError]:
        return self._topic_exceptions.get(topic) or self._fatal

    # -- waiting ---------------------------------------------------------------------------------

    def await_update(self, last_version: int, timeout_ms: float, auth_failures: Optional[int] = None) -> bool:
        """Block until the version moves past ``last_version`` (or, when ``auth_failures`` is given, an
        authentication failure happens after that count, or a refresh failed for good: see
        :meth:`topic_exception`); False on timeout."""
        deadline = self.clock.monotonic_ms() + timeout_ms
        with self._lock:
            while self.version <= last_version and not self.closed and self._fatal is None and \
                    (auth_failures is None or self.auth_failures <= auth_failures):
                remaining = deadline - self.clock.monotonic_ms()
                if remaining <= 0:
                    return False
                self.clock.wait(self._lock, remaining)
            return self.version > last_version

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._lock.notify_all()
