"""KIP-951 leader discovery on the scripted transport and on Metadata directly.

A Produce response (v10+) that refuses a partition with NOT_LEADER_OR_FOLLOWER names the partition's
current leader (id, epoch) and that broker's endpoint. As Java's Sender / Metadata.updatePartitionLeadership,
kproducer moves the partition to that leader at once (only for a newer leader epoch, a known or given
endpoint, and a partition in the metadata) and retries the batch there without the retry backoff and
without waiting for the metadata refresh it still asks for."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import pytest

from kproducer.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from kproducer.network.metadata import Metadata, Node
from kproducer.protocol import messages as m

from scripted import HOLD, Harness, SentRequest

NOT_LEADER = NotLeaderOrFollowerError.code
BROKERS = {1: ("b1", 9091), 2: ("b2", 9092)}


def hinted(h: Harness, leader: int, epoch: int, endpoints: Optional[List[int]] = None,
           code: int = NOT_LEADER) -> Any:
    """A Produce answer refusing every partition with ``code`` and naming ``leader`` / ``epoch`` as the
    current leader, with the endpoints of the brokers ``endpoints`` (default: the leader)."""
    def answer(req: SentRequest) -> Dict[str, Any]:
        body = h.selector.produce_response(req, {tp: code for tp in req.partitions()})
        for topic in body["responses"]:
            for p in topic["partition_responses"]:
                p["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        body["node_endpoints"] = [{"node_id": b, "host": h.selector.brokers[b][0], "port": h.selector.brokers[b][1],
                                   "rack": None} for b in (endpoints if endpoints is not None else [leader])]
        return body
    return answer


def booted(**settings: Any) -> Harness:
    h = Harness(topics={"t": [1]}, brokers=BROKERS, **settings)
    h.boot()
    assert h.metadata.cluster.leaders[("t", 0)] == 1
    return h


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_leader_hint_reroutes_the_retry_with_no_metadata_response_in_between(idempotent: bool) -> None:
    h = booted(enable_idempotence=idempotent)
    metadata_before = len(h.selector.sent(m.METADATA))
    version_before = h.metadata.version
    h.selector.topics["t"] = [2]  # the leader moved: broker 1 refuses, broker 2 takes the partition
    h.selector.script(m.METADATA, *([HOLD] * 5))  # no metadata refresh is ever answered
    h.selector.script(m.PRODUCE, hinted(h, leader=2, epoch=1))
    fut = h.send(value=b"moved")
    start = h.now
    h.run_until(fut.done)  # time stands still: no retry backoff was waited for
    assert h.now == start
    produce = h.produce_requests()
    assert [r.broker_id for r in produce] == [1, 2]
    assert produce[0].version >= 10
    assert fut.get(0).offset == 0 and h.selector.log_values(("t", 0)) == [b"moved"]
    assert h.metadata.cluster.leaders[("t", 0)] == 2
    assert h.metadata.cluster.partitions["t"][0].leader_epoch == 1
    assert h.metadata.last_seen_leader_epoch(("t", 0)) == 1
    # the metadata did not come from a refresh: every Metadata request since is still unanswered
    assert h.metadata.version == version_before
    later = h.selector.sent(m.METADATA)[metadata_before:]
    assert all(not r.answered for r in later)
    # as Java, a refresh is still wanted (requested, or already on its way)
    assert h.metadata.update_requested() or later


def test_every_batch_refused_by_the_old_leader_skips_the_backoff() -> None:
    """Two batches of one partition in flight to the old leader: the first answer moves the partition,
    the second carries the same (no longer newer) hint; both retries go to the new leader at once."""
    h = booted(enable_idempotence=True, max_in_flight_requests_per_connection=5)
    warm = h.send(value=b"warm")  # (a partition's first idempotent batch goes alone)
    h.run_until(warm.done)
    h.selector.script(m.METADATA, *([HOLD] * 5))
    h.selector.script(m.PRODUCE, HOLD, HOLD)
    first = h.send(value=b"a")
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    second = h.send(value=b"b")
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 2)
    h.selector.topics["t"] = [2]
    for req in h.selector.held(m.PRODUCE):
        h.selector.respond(req, hinted(h, leader=2, epoch=1))
    start = h.now
    h.run_until(lambda: first.done() and second.done())
    assert h.now == start
    retries = h.produce_requests()[3:]
    assert retries and all(r.broker_id == 2 for r in retries)
    assert h.selector.log_values(("t", 0)) == [b"warm", b"a", b"b"]
    assert [first.get(0).offset, second.get(0).offset] == [1, 2]


def test_fenced_leader_epoch_with_a_hint_is_followed_too() -> None:
    h = booted()
    h.selector.topics["t"] = [2]
    h.selector.script(m.METADATA, *([HOLD] * 5))
    h.selector.script(m.PRODUCE, hinted(h, leader=2, epoch=3, code=FencedLeaderEpochError.code))
    fut = h.send()
    h.run_until(fut.done)
    assert [r.broker_id for r in h.produce_requests()] == [1, 2]
    assert h.metadata.cluster.partitions["t"][0].leader_epoch == 3


def test_a_hint_that_is_not_newer_is_ignored_and_the_retry_backs_off() -> None:
    h = booted(retry_backoff_ms=100, retry_backoff_max_ms=100)
    h.selector.script(m.PRODUCE, hinted(h, leader=2, epoch=0))  # epoch 0 is what metadata already says
    fut = h.send()
    h.run_until(lambda: len(h.produce_requests()) == 1 and not h.selector.held(m.PRODUCE))
    h.run(3)
    assert h.metadata.cluster.leaders[("t", 0)] == 1  # not moved by a stale hint
    assert len(h.produce_requests()) == 1  # and the retry waits for retry.backoff.ms
    h.advance(100)
    h.run_until(fut.done)
    assert [r.broker_id for r in h.produce_requests()] == [1, 1]


def test_a_hint_naming_a_broker_without_an_address_is_ignored() -> None:
    h = booted(retry_backoff_ms=100, retry_backoff_max_ms=100)
    h.selector.script(m.PRODUCE, hinted(h, leader=7, epoch=1, endpoints=[]))
    fut = h.send()
    h.run_until(lambda: len(h.produce_requests()) == 1 and not h.selector.held(m.PRODUCE))
    h.run(3)
    assert h.metadata.cluster.leaders[("t", 0)] == 1
    h.advance(100)
    h.run_until(fut.done)
    assert fut.get(0).offset == 0


def test_incomplete_hints_are_ignored() -> None:
    h = booted(retry_backoff_ms=100, retry_backoff_max_ms=100)
    h.selector.script(m.PRODUCE, hinted(h, leader=-1, epoch=-1, endpoints=[]))
    fut = h.send()
    h.run_until(lambda: len(h.produce_requests()) == 1 and not h.selector.held(m.PRODUCE))
    assert h.metadata.cluster.leaders[("t", 0)] == 1
    h.advance(100)
    h.run_until(fut.done)
    assert fut.get(0).offset == 0


# -- Metadata.update_partition_leadership --------------------------------------------------------------


def metadata_with(leader: int = 1, epoch: int = 4) -> Metadata:
    md = Metadata([("b1", 9091)])
    md.update({"brokers": [{"node_id": 1, "host": "b1", "port": 9091, "rack": None},
                           {"node_id": 2, "host": "b2", "port": 9092, "rack": None}],
               "cluster_id": "c", "controller_id": 1,
               "topics": [{"error_code": 0, "name": "t", "partitions": [
                   {"error_code": 0, "partition_index": i, "leader_id": leader, "leader_epoch": epoch,
                    "replica_nodes": [1, 2], "isr_nodes": [1, 2]} for i in range(2)]}]},
              ["t"], False, 0.0)
    return md


def test_update_partition_leadership_moves_only_newer_epochs_and_keeps_the_rest() -> None:
    md = metadata_with()
    updated = md.update_partition_leadership({("t", 0): (2, 5), ("t", 1): (2, 4)}, [])
    assert updated == {("t", 0)}
    cluster = md.cluster
    assert cluster.leaders == {("t", 0): 2, ("t", 1): 1}
    assert cluster.partitions["t"][0].replicas == (1, 2)  # the rest of the partition's metadata is kept
    assert cluster.cluster_id == "c" and cluster.controller_id == 1
    assert sorted(cluster.nodes) == [1, 2]
    assert md.last_seen_leader_epoch(("t", 0)) == 5


def test_update_partition_leadership_adds_the_given_endpoints() -> None:
    md = metadata_with()
    updated = md.update_partition_leadership({("t", 0): (3, 5)}, [Node(3, "b3", 9093)])
    assert updated == {("t", 0)}
    assert md.cluster.nodes[3] == Node(3, "b3", 9093)
    assert md.cluster.leader_for(("t", 0)) == Node(3, "b3", 9093)
    assert md.cluster.available["t"] == (0, 1)


@pytest.mark.parametrize("hints,nodes", [
    ({("t", 0): (3, 5)}, []),  # no address for broker 3
    ({("u", 0): (2, 5)}, []),  # a partition the metadata does not hold
    ({("t", 0): (2, 4)}, []),  # the same epoch
    ({("t", 0): (2, 3)}, []),  # an older epoch
    ({("t", 0): (-1, 5)}, []),  # no leader
    ({("t", 0): (2, -1)}, []),  # no epoch
])
def test_update_partition_leadership_ignores(hints: Dict[Tuple[str, int], Tuple[int, int]],
                                             nodes: List[Node]) -> None:
    md = metadata_with()
    before = md.cluster
    assert md.update_partition_leadership(hints, nodes) == set()
    assert md.cluster is before


def test_a_stale_metadata_response_after_a_hint_does_not_move_the_leader_back() -> None:
    md = metadata_with(leader=1, epoch=4)
    md.update_partition_leadership({("t", 0): (2, 5)}, [])
    # a broker with older metadata answers a refresh: partition 0 keeps the hinted leader
    md.update({"brokers": [{"node_id": 1, "host": "b1", "port": 9091, "rack": None},
                           {"node_id": 2, "host": "b2", "port": 9092, "rack": None}],
               "cluster_id": "c", "controller_id": 1,
               "topics": [{"error_code": 0, "name": "t", "partitions": [
                   {"error_code": 0, "partition_index": i, "leader_id": 1, "leader_epoch": 4,
                    "replica_nodes": [1, 2], "isr_nodes": [1, 2]} for i in range(2)]}]},
              ["t"], False, 1.0)
    assert md.cluster.leaders == {("t", 0): 2, ("t", 1): 1}


def test_a_hint_on_bootstrap_metadata_is_ignored() -> None:
    md = Metadata([("b1", 9091)])
    assert md.update_partition_leadership({("t", 0): (2, 5)}, [Node(2, "b2", 9092)]) == set()
    assert md.cluster.is_bootstrap
