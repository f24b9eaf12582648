"""Cluster snapshots and Metadata refresh bookkeeping (on a FakeClock)."""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kproducer.clock import FakeClock
from kproducer.errors import InvalidTopicError, NetworkError, TopicAuthorizationFailedError
from kproducer.network.metadata import Cluster, Metadata, Node, PartitionInfo


def response(brokers: Sequence[int] = (1, 2), topics: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """A decoded Metadata response. ``topics``: name -> list of (partition, leader, error) or an int error."""
    out: List[Dict[str, Any]] = []
    for name, spec in (topics or {}).items():
        if isinstance(spec, int):
            out.append({"error_code": spec, "name": name, "partitions": []})
            continue
        out.append({"error_code": 0, "name": name, "partitions": [
            {"error_code": err, "partition_index": p, "leader_id": leader, "leader_epoch": 3,
             "replica_nodes": [1, 2], "isr_nodes": [1]} for p, leader, err in spec]})
    return {"brokers": [{"node_id": b, "host": f"h{b}", "port": 9000 + b, "rack": None} for b in brokers],
            "cluster_id": "cid", "controller_id": brokers[0] if brokers else -1, "topics": out}


def new_metadata(**kw: Any) -> Tuple[Metadata, FakeClock]:
    clock = FakeClock()
    kw.setdefault("metadata_max_age_ms", 10_000)
    kw.setdefault("refresh_backoff_ms", 100)
    kw.setdefault("metadata_max_idle_ms", 60_000)
    return Metadata([("b1", 1), ("b2", 2)], clock=clock, **kw), clock


# -- Cluster -------------------------------------------------------------------------------------


def test_bootstrap_cluster_uses_negative_ids() -> None:
    c = Cluster.bootstrap_cluster([("a", 1), ("b", 2)])
    assert c.is_bootstrap
    assert c.nodes == {-1: Node(-1, "a", 1), -2: Node(-2, "b", 2)}
    assert c.leaders == {} and c.partition_count("t") is None


def test_cluster_indexes() -> None:
    parts = [PartitionInfo("t", 2, 1, 0, (1,), (1,)), PartitionInfo("t", 0, 2, 0, (2,), (2,)),
             PartitionInfo("t", 1, -1, 0, (), ()), PartitionInfo("t", 3, 9, 0, (9,), (9,))]
    c = Cluster([Node(1, "h1", 1), Node(2, "h2", 2)], parts)
    assert [p.partition for p in c.partitions["t"]] == [0, 1, 2, 3]  # sorted
    assert c.partition_count("t") == 4
    assert c.leaders == {("t", 0): 2, ("t", 2): 1, ("t", 3): 9}
    assert c.available["t"] == (0, 2)  # no leader, or a leader that is not a known broker: unavailable
    assert c.leader_for(("t", 2)) == Node(1, "h1", 1)
    assert c.leader_for(("t", 1)) is None and c.leader_for(("t", 3)) is None
    assert c.partitions_for_node(1) == [("t", 2)]


# -- updates -------------------------------------------------------------------------------------


def test_update_replaces_the_bootstrap_cluster() -> None:
    md, clock = new_metadata()
    md.add_topic("t")
    md.update(response(topics={"t": [(0, 1, 0), (1, 2, 0)]}), ["t"], False, clock.monotonic_ms())
    c = md.cluster
    assert not c.is_bootstrap and sorted(c.nodes) == [1, 2]
    assert c.leaders == {("t", 0): 1, ("t", 1): 2}
    assert c.cluster_id == "cid" and c.controller_id == 1
    assert c.partitions["t"][0].leader_epoch == 3 and c.partitions["t"][0].replicas == (1, 2)
    assert md.version == 1 and not md.update_requested()


def test_partition_errors_decide_the_leader() -> None:
    md, clock = new_metadata()
    md.update(response(topics={"t": [(0, 1, 5), (1, 2, 6), (2, 1, 9), (3, 2, 0)]}), ["t"], False,
              clock.monotonic_ms())
    # LEADER_NOT_AVAILABLE and NOT_LEADER: no leader; REPLICA_NOT_AVAILABLE still has one
    assert md.cluster.leaders == {("t", 2): 1, ("t", 3): 2}
    assert md.cluster.available["t"] == (2, 3)
    assert md.cluster.partition_count("t") == 4


def test_retriable_topic_errors_are_remembered_but_not_raised() -> None:
    md, clock = new_metadata()
    md.update(response(topics={"t": 3, "u": 5}), ["t", "u"], False, clock.monotonic_ms())
    assert md.cluster.topic_errors == {"t": 3, "u": 5}
    assert md.cluster.partition_count("t") is None
    assert md.topic_exception("t") is None and md.topic_exception("u") is None


def test_fatal_topic_errors_are_raised_until_the_topic_is_fine() -> None:
    md, clock = new_metadata()
    md.update(response(topics={"bad!": 17, "secret": 29}), ["bad!", "secret"], False, clock.monotonic_ms())
    assert isinstance(md.topic_exception("bad!"), InvalidTopicError)
    assert isinstance(md.topic_exception("secret"), TopicAuthorizationFailedError)
    md.update(response(topics={"secret": [(0, 1, 0)]}), ["secret"], True, clock.monotonic_ms())
    assert md.topic_exception("secret") is None  # access was granted meanwhile
    assert isinstance(md.topic_exception("bad!"), InvalidTopicError)  # not in the answer: unchanged


def test_partial_update_keeps_other_topics_and_full_update_drops_them() -> None:
    md, clock = new_metadata()
    now = clock.monotonic_ms()
    md.update(response(topics={"a": [(0, 1, 0)], "b": [(0, 2, 0)]}), ["a", "b"], False, now)
    md.update(response(topics={"c": [(0, 1, 0)]}), ["c"], True, now)
    assert sorted(md.cluster.partitions) == ["a", "b", "c"]
    md.update(response(topics={"a": [(0, 2, 0)]}), ["a"], False, now)
    assert sorted(md.cluster.partitions) == ["a"] and md.cluster.leaders[("a", 0)] == 2


def test_response_without_brokers_keeps_the_known_ones() -> None:
    md, clock = new_metadata()
    md.update(response(brokers=(1, 2)), [], False, clock.monotonic_ms())
    md.update(response(brokers=(), topics={"t": [(0, 1, 0)]}), ["t"], False, clock.monotonic_ms())
    assert sorted(md.cluster.nodes) == [1, 2] and md.cluster.leaders == {("t", 0): 1}


# -- when to refresh -----------------------------------------------------------------------------


def test_refresh_schedule() -> None:
    md, clock = new_metadata(metadata_max_age_ms=10_000, refresh_backoff_ms=100)
    now = clock.monotonic_ms()
    assert md.time_to_next_update(now) == 0  # nothing known yet
    md.update(response(), [], False, now)
    assert md.time_to_next_update(now) == 10_000
    clock.advance(4000)
    assert md.time_to_next_update(clock.monotonic_ms()) == 6000
    md.request_update()
    assert md.time_to_next_update(clock.monotonic_ms()) == 0
    md.failed_update(clock.monotonic_ms())
    assert md.time_to_next_update(clock.monotonic_ms()) == 100  # backoff after a failure
    clock.advance(100)
    assert md.time_to_next_update(clock.monotonic_ms()) == 0


def test_updates_are_spaced_by_the_refresh_backoff() -> None:
    md, clock = new_metadata(refresh_backoff_ms=100)
    now = clock.monotonic_ms()
    md.update(response(), [], False, now)
    md.request_update()
    assert md.time_to_next_update(now + 30) == 70


def test_a_new_topic_is_fetched_at_once_and_a_known_one_after_the_backoff() -> None:
    """Java's requestUpdateForNewTopics: a topic new to the producer is fetched without waiting out the refresh
    backoff after the last refresh (the first send() right after the bootstrap refresh, or after
    init_transactions(), waited ~retry.backoff.ms); once a response covered it, asking again backs off."""
    md, clock = new_metadata(refresh_backoff_ms=100)
    now = clock.monotonic_ms()
    md.update(response(), [], False, now)
    md.add_topic("a")
    assert md.time_to_next_update(now + 1) == 0
    md.update(response(topics={"a": 3}), ["a"], True, now + 1)  # UNKNOWN_TOPIC_OR_PARTITION: no longer new
    md.request_update_for_topic("a")
    assert md.time_to_next_update(now + 2) == 99
    md.request_update_for_topic("b")
    assert md.time_to_next_update(now + 2) == 0


def test_new_topics_get_a_partial_request_and_requested_ones_a_full_one() -> None:
    md, clock = new_metadata()
    now = clock.monotonic_ms()
    md.add_topic("a")
    md.update(response(topics={"a": [(0, 1, 0)]}), ["a"], False, now)
    md.add_topic("b")
    assert md.update_requested()
    assert md.request_topics(now) == (["b"], True)
    md.update(response(topics={"b": [(0, 1, 0)]}), ["b"], True, now)
    assert not md.update_requested()
    md.request_update()
    assert md.request_topics(now) == (["a", "b"], False)


def test_request_update_for_an_unknown_topic_adds_it() -> None:
    md, clock = new_metadata()
    md.update(response(), [], False, clock.monotonic_ms())
    md.request_update_for_topic("x")
    assert "x" in md.topics()
    assert md.request_topics(clock.monotonic_ms()) == (["x"], True)


def test_idle_topics_are_forgotten() -> None:
    md, clock = new_metadata(metadata_max_idle_ms=60_000)
    md.add_topic("old")
    clock.advance(30_000)
    md.add_topic("new")
    clock.advance(30_001)
    topics, _partial = md.request_topics(clock.monotonic_ms())
    assert topics == ["new"] and md.topics() == frozenset({"new"})


def test_using_a_topic_keeps_it() -> None:
    md, clock = new_metadata(metadata_max_idle_ms=60_000)
    md.add_topic("t")
    for _ in range(5):
        clock.advance(50_000)
        md.add_topic("t")
    assert md.request_topics(clock.monotonic_ms())[0] == ["t"]


# -- waiting -------------------------------------------------------------------------------------


def test_await_update_times_out_by_the_clock() -> None:
    md, clock = new_metadata()
    start = clock.monotonic_ms()
    assert md.await_update(md.version, 500) is False
    assert clock.monotonic_ms() - start == 500  # FakeClock.wait moved time instead of sleeping


def test_await_update_returns_when_the_version_moves() -> None:
    md = Metadata([("b", 1)])  # the real clock: another thread updates
    version = md.version
    t = threading.Timer(0.02, lambda: md.update(response(), [], False, 1.0))
    t.start()
    assert md.await_update(version, 5000) is True
    t.join()
    assert md.await_update(version, 0) is True  # already past it


def test_close_releases_waiters() -> None:
    md = Metadata([("b", 1)])
    t = threading.Timer(0.02, md.close)
    t.start()
    assert md.await_update(md.version, 5000) is False
    t.join()


def test_failed_update_with_a_fatal_error_is_reported_for_every_topic() -> None:
    md, clock = new_metadata()
    md.failed_update(clock.monotonic_ms(), TopicAuthorizationFailedError("no"))
    assert isinstance(md.topic_exception("anything"), TopicAuthorizationFailedError)


def test_failed_update_with_a_retriable_error_is_not_fatal() -> None:
    md, clock = new_metadata()
    md.failed_update(clock.monotonic_ms(), NetworkError("flaky"))
    assert md.topic_exception("t") is None


# -- KIP-580: exponential backoff of failed refreshes ---------------------------------------------


def test_failed_refreshes_back_off_exponentially_up_to_the_maximum() -> None:
    md, clock = new_metadata(refresh_backoff_max_ms=1000)
    now = clock.monotonic_ms()
    md.request_update()
    waits = []
    for _ in range(6):
        md.failed_update(now)
        waits.append(md.time_to_next_update(now))
    assert waits == [100, 200, 400, 800, 1000, 1000]
    assert md.attempts == 6
    md.update(response(topics={"t": [(0, 1, 0)]}), ["t"], False, now)
    assert md.attempts == 0
    md.request_update()
    assert md.time_to_next_update(now) == 100  # a success resets the backoff
    md.failed_update(now + 100)
    assert md.time_to_next_update(now + 100) == 100


def test_refresh_backoff_jitter_stays_within_20_percent() -> None:
    md, clock = new_metadata(refresh_backoff_max_ms=1000, refresh_backoff_jitter=0.2)
    now = clock.monotonic_ms()
    md.request_update()
    md.failed_update(now)
    md.failed_update(now)
    assert 160 <= md.time_to_next_update(now) <= 240


# -- leader epochs: stale metadata is not applied -----------------------------------------------


def epoch_response(epochs: Dict[int, Tuple[int, int]], topic_id: Any = None) -> Dict[str, Any]:
    """Partition -> (leader, leader epoch) of topic t."""
    resp = response(topics={"t": [(p, leader, 0) for p, (leader, _e) in epochs.items()]})
    for pinfo in resp["topics"][0]["partitions"]:
        pinfo["leader_epoch"] = epochs[pinfo["partition_index"]][1]
    if topic_id is not None:
        resp["topics"][0]["topic_id"] = topic_id
    return resp


def test_a_partition_with_an_older_leader_epoch_keeps_the_newer_metadata() -> None:
    """Java's Metadata.updateLatestMetadata: a broker with stale metadata cannot move a leader back."""
    md, clock = new_metadata()
    now = clock.monotonic_ms()
    md.update(epoch_response({0: (1, 5), 1: (2, 5)}), ["t"], False, now)
    md.update(epoch_response({0: (2, 4), 1: (1, 6)}), ["t"], False, now)
    assert md.cluster.leaders[("t", 0)] == 1  # epoch 4 < 5: refused
    assert md.cluster.partitions["t"][0].leader_epoch == 5
    assert md.cluster.leaders[("t", 1)] == 1  # epoch 6 > 5: taken
    assert md.last_seen_leader_epoch(("t", 0)) == 5 and md.last_seen_leader_epoch(("t", 1)) == 6
    md.update(epoch_response({0: (2, 5), 1: (1, 6)}), ["t"], False, now)
    assert md.cluster.leaders[("t", 0)] == 2  # the same epoch is accepted


def test_a_stale_partition_we_never_had_is_left_out_and_a_new_topic_id_resets_the_epoch() -> None:
    md, clock = new_metadata()
    now = clock.monotonic_ms()
    md.update(epoch_response({0: (1, 5)}, topic_id="id-1"), ["t"], False, now)
    md.rebootstrap(now)  # forget the cluster, keep the epochs
    md.update(epoch_response({0: (2, 3), 1: (2, 3)}, topic_id="id-1"), ["t"], False, now)
    assert ("t", 0) not in md.cluster.leaders and md.cluster.leaders[("t", 1)] == 2
    # the topic was deleted and created again: its epochs start over
    md.update(epoch_response({0: (2, 0)}, topic_id="id-2"), ["t"], False, now)
    assert md.cluster.leaders[("t", 0)] == 2 and md.last_seen_leader_epoch(("t", 0)) == 0


def test_partitions_without_a_leader_epoch_are_taken_as_they_come() -> None:
    md, clock = new_metadata()
    now = clock.monotonic_ms()
    md.update(epoch_response({0: (1, 5)}), ["t"], False, now)
    md.update(epoch_response({0: (2, -1)}), ["t"], False, now)  # an old broker (Metadata < v7)
    assert md.cluster.leaders[("t", 0)] == 2


# -- KIP-899 rebootstrap ---------------------------------------------------------------------------


def test_rebootstrap_goes_back_to_the_bootstrap_servers_and_wakes_waiters() -> None:
    md, clock = new_metadata()
    now = clock.monotonic_ms()
    md.add_topic("t")
    md.update(response(topics={"t": [(0, 1, 0)]}), ["t"], False, now)
    version = md.version
    assert not md.rebootstrap_due(now + 1_000_000, 300_000)  # no refresh wanted
    md.request_update()
    assert not md.rebootstrap_due(now + 299_999, 300_000)
    assert md.rebootstrap_due(now + 300_000, 300_000)
    md.rebootstrap(now + 300_000)
    assert md.cluster.is_bootstrap and sorted(md.cluster.nodes) == [-2, -1]
    assert md.version == version + 1 and md.update_requested() and "t" in md.topics()
    assert not md.rebootstrap_due(now + 300_001, 300_000)
