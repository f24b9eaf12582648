"""Every API handler of the mock broker, spoken to over the wire: Metadata, Produce, ListOffsets, Fetch,
FindCoordinator, CreateTopics, OffsetCommit and OffsetFetch (idempotence and transactions are in
test_mock_txn.py)."""
from __future__ import annotations

import struct
import time
from typing import Any, Dict, Iterator, List, Optional

import pytest

from kproducer.mock import MockCluster
from kproducer.mock.wire_client import WireClient
from kproducer.protocol.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    FencedLeaderEpochError,
    FetchSessionIdNotFoundError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaStorageError,
    LeaderNotAvailableError,
    MessageTooLargeError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownLeaderEpochError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from kproducer.protocol.messages import (
    CREATE_TOPICS,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
)
from kproducer.protocol.records import crc32c, read_batches
from tests.unit.mock_wire import Clients, batch, fetch, list_offset, produce


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3, max_message_bytes=20000) as c:
        c.create_topic("t", 6)
        yield c


@pytest.fixture
def clients(cluster: MockCluster) -> Iterator[Clients]:
    cs = Clients(cluster)
    yield cs
    cs.close()


# ------------------------------------------------------------------------------------------ Metadata


@pytest.mark.parametrize("version", [1, 4, 7, 9, 10, 12])
def test_metadata_spreads_leaders_and_answers_from_any_broker(cluster: MockCluster, clients: Clients,
                                                              version: int) -> None:
    for broker_id in (1, 2, 3):
        body = clients[broker_id].request(METADATA, version, {"topics": None})
        assert sorted((b["node_id"], b["port"]) for b in body["brokers"]) == sorted(
            (i, cluster.broker_address(i)[1]) for i in (1, 2, 3))
        assert body["controller_id"] == 1
        (topic,) = body["topics"]
        assert topic["name"] == "t" and topic["error_code"] == NO_ERROR
        assert [p["leader_id"] for p in topic["partitions"]] == [1, 2, 3, 1, 2, 3]
        assert all(sorted(p["replica_nodes"]) == [1, 2, 3] for p in topic["partitions"])
        if version >= 2:
            assert body["cluster_id"].startswith("kproducer-mock-")
        if version >= 10:
            assert topic["topic_id"].int != 0


def test_metadata_unknown_topic_and_auto_create() -> None:
    with MockCluster(2, auto_create_topics=True, default_partitions=4) as cluster, \
            WireClient(*cluster.broker_address(2)) as c:
        no_create = c.request(METADATA, 9, {"topics": [{"name": "new"}], "allow_auto_topic_creation": False})
        assert no_create["topics"][0]["error_code"] == UnknownTopicOrPartitionError.code
        created = c.request(METADATA, 9, {"topics": [{"name": "new"}], "allow_auto_topic_creation": True})
        assert created["topics"][0]["error_code"] == NO_ERROR and len(created["topics"][0]["partitions"]) == 4
        assert cluster.partition_count("new") == 4
        bad = c.request(METADATA, 9, {"topics": [{"name": "bad name!"}], "allow_auto_topic_creation": True})
        assert bad["topics"][0]["error_code"] == InvalidTopicError.code
    with MockCluster(1) as cluster, WireClient(*cluster.broker_address(1)) as c:
        assert c.request(METADATA, 12, {"topics": [{"name": "nope"}]})["topics"][0]["error_code"] == (
            UnknownTopicOrPartitionError.code
        )
        assert c.request(METADATA, 12, {"topics": []})["topics"] == []


def test_metadata_after_broker_stop(cluster: MockCluster, clients: Clients) -> None:
    cluster.stop_broker(2)
    body = clients[1].request(METADATA, 12, {"topics": None})
    assert sorted(b["node_id"] for b in body["brokers"]) == [1, 3]
    partitions = body["topics"][0]["partitions"]
    assert all(p["leader_id"] in (1, 3) and p["error_code"] == NO_ERROR for p in partitions)
    assert partitions[1]["leader_epoch"] == 1 and partitions[1]["offline_replicas"] == [2]


def test_metadata_leaderless_when_leaders_do_not_move() -> None:
    with MockCluster(2, move_leaders_on_stop=False) as cluster, WireClient(*cluster.broker_address(1)) as c:
        cluster.create_topic("t", 2)
        cluster.stop_broker(2)
        partitions = c.request(METADATA, 12, {"topics": [{"name": "t"}]})["topics"][0]["partitions"]
        assert [(p["error_code"], p["leader_id"]) for p in partitions] == [(0, 1), (5, -1)]


def test_metadata_injected_error(cluster: MockCluster, clients: Clients) -> None:
    cluster.inject_errors("metadata", [LeaderNotAvailableError.code])
    assert clients[1].request(METADATA, 12, {"topics": None})["topics"][0]["error_code"] == (
        LeaderNotAvailableError.code
    )
    assert clients[1].request(METADATA, 12, {"topics": None})["topics"][0]["error_code"] == NO_ERROR


# ------------------------------------------------------------------------------------------- Produce


@pytest.mark.parametrize("version", [3, 5, 8, 9, 11])
@pytest.mark.parametrize("acks", [1, -1])
def test_produce_assigns_offsets(cluster: MockCluster, clients: Clients, version: int, acks: int) -> None:
    c = clients.leader("t", 1)
    first = produce(c, batch([b"a", b"b", b"c"]), partition=1, acks=acks, version=version)
    second = produce(c, batch([b"d"], ts=5000), partition=1, acks=acks, version=version)
    assert (first["error_code"], first["base_offset"]) == (0, 0)
    assert (second["error_code"], second["base_offset"]) == (0, 3)
    assert first["log_append_time_ms"] == -1
    if version >= 5:
        assert first["log_start_offset"] == 0
    stored = cluster.records("t", 1)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in stored] == [
        (0, b"ka", b"a", [("h", b"a")], 1000), (1, b"kb", b"b", [("h", b"b")], 1001),
        (2, b"kc", b"c", [("h", b"c")], 1002), (3, b"kd", b"d", [("h", b"d")], 5000)]
    assert cluster.high_watermark("t", 1) == 4 and cluster.batch_count("t", 1) == 2


def test_produce_to_a_follower_is_refused(cluster: MockCluster, clients: Clients) -> None:
    follower = clients[2]  # partition 0 is led by broker 1
    old = produce(follower, batch([b"x"]), version=9)
    assert old["error_code"] == NotLeaderOrFollowerError.code
    new = produce(follower, batch([b"x"]), version=11)
    assert new["error_code"] == NotLeaderOrFollowerError.code
    assert new["current_leader"] == {"leader_id": 1, "leader_epoch": 0}
    assert [e["node_id"] for e in new["node_endpoints"]] == [1]
    assert cluster.high_watermark("t", 0) == 0


def test_produce_unknown_partition(clients: Clients) -> None:
    assert produce(clients[1], batch([b"x"]), partition=6)["error_code"] == UnknownTopicOrPartitionError.code
    assert produce(clients[1], batch([b"x"]), topic="nope")["error_code"] == UnknownTopicOrPartitionError.code


def _corrupt_crc(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def test_produce_validation_errors(cluster: MockCluster, clients: Clients) -> None:
    c = clients[1]
    good = batch([b"a", b"b"])
    cases = {
        "bad crc": (_corrupt_crc(good), 2),
        "two batches": (good + good, 87),
        "trailing garbage": (good + b"xx", 87),
        "truncated": (good[:-3], 2),
        "header only": (good[:40], 2),
        "magic 1": (good[:16] + b"\x01" + good[17:], 87),
        "no records": (b"", 87),
    }
    for name, (data, code) in cases.items():
        result = produce(c, data)
        assert result["error_code"] == code, name
        assert result["error_message"], name
        assert result["base_offset"] == -1
    bad_count = bytearray(good)
    struct.pack_into(">i", bad_count, 57, 5)  # recordCount 5 with lastOffsetDelta 1
    assert produce(c, _with_crc(bad_count))["error_code"] == InvalidRecordError.code
    control = bytearray(good)
    struct.pack_into(">h", control, 21, 0x20)
    assert produce(c, _with_crc(control))["error_code"] == InvalidRecordError.code
    assert produce(c, batch([b"x" * 25000]))["error_code"] == MessageTooLargeError.code
    assert produce(c, good, acks=2)["error_code"] == InvalidRequiredAcksError.code
    assert cluster.high_watermark("t", 0) == 0
    assert produce(c, good)["error_code"] == NO_ERROR


def test_produce_validate_records_reports_the_bad_record() -> None:
    with MockCluster(1, validate_records=True) as cluster, WireClient(*cluster.broker_address(1)) as c:
        cluster.create_topic("t", 1)
        good = batch([b"aa", b"bb", b"cc"])
        assert produce(c, good)["error_code"] == NO_ERROR
        # make the third record's length varint claim one byte more, keeping the CRC right
        data = bytearray(good)
        pos = 61
        for _ in range(2):
            pos += 1 + (data[pos] >> 1)
        data[pos] += 2
        result = produce(c, _with_crc(data))
        assert result["error_code"] == InvalidRecordError.code
        assert result["record_errors"][0]["batch_index"] == 2
        assert "record" in result["error_message"]


def test_produce_acks_zero_error_closes_connection(cluster: MockCluster) -> None:
    with WireClient(*cluster.broker_address(2)) as c:
        c.send(PRODUCE, 9, {"transactional_id": None, "acks": 0, "timeout_ms": 1,
                            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch([b"x"])}]}]})
        assert c.is_closed_by_peer()


def test_produce_injected_errors_per_partition(cluster: MockCluster, clients: Clients) -> None:
    not_leader, timed_out = NotLeaderOrFollowerError.code, RequestTimedOutError.code
    cluster.inject_errors("produce", [not_leader, timed_out, NO_ERROR, not_leader])
    c = clients[1]
    results = [produce(c, batch([b"x"]))["error_code"] for _ in range(5)]
    assert results == [not_leader, timed_out, NO_ERROR, not_leader, NO_ERROR]
    assert cluster.high_watermark("t", 0) == 2
    assert cluster.pending_errors("produce") == []


def test_drop_responses_appends_then_closes(cluster: MockCluster, clients: Clients) -> None:
    cluster.drop_responses("produce", 1)
    c = clients[1]
    c.send(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 1,
                        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch([b"x"])}]}]})
    assert c.is_closed_by_peer()
    assert cluster.high_watermark("t", 0) == 1


# --------------------------------------------------------------------------------------- ListOffsets


@pytest.mark.parametrize("version", [1, 2, 4, 6, 7])
def test_list_offsets(cluster: MockCluster, clients: Clients, version: int) -> None:
    c = clients[1]
    assert list_offset(c, -1, version=version)["offset"] == 0
    produce(c, batch([b"a", b"b"], ts=1000))
    produce(c, batch([b"c", b"d"], ts=5000))
    produce(c, batch([b"e"], ts=3000))
    assert list_offset(c, -2, version=version)["offset"] == 0
    latest = list_offset(c, -1, version=version)
    assert (latest["offset"], latest["timestamp"], latest["error_code"]) == (5, -1, 0)
    found = list_offset(c, 1001, version=version)
    assert (found["offset"], found["timestamp"]) == (1, 1001)
    assert list_offset(c, 4000, version=version)["offset"] == 2
    assert list_offset(c, 9999, version=version)["offset"] == -1
    if version >= 7:
        assert (list_offset(c, -3, version=version)["offset"], list_offset(c, -3)["timestamp"]) == (3, 5001)
    if version >= 4:
        assert list_offset(c, -1, version=version)["leader_epoch"] == 0


def test_list_offsets_errors(cluster: MockCluster, clients: Clients) -> None:
    assert list_offset(clients[2], -1)["error_code"] == NotLeaderOrFollowerError.code
    assert list_offset(clients[1], -1, partition=9)["error_code"] == UnknownTopicOrPartitionError.code
    cluster.inject_errors("list_offsets", [RequestTimedOutError.code])
    assert list_offset(clients[1], -1)["error_code"] == RequestTimedOutError.code


# --------------------------------------------------------------------------------------------- Fetch


@pytest.mark.parametrize("version", [4, 5, 7, 9, 11, 12])
def test_fetch_returns_stored_batches(cluster: MockCluster, clients: Clients, version: int) -> None:
    c = clients[1]
    b1, b2 = batch([b"a", b"b"]), batch([b"c"])
    produce(c, b1)
    produce(c, b2)
    part = fetch(c, 0, version=version)
    assert part["error_code"] == NO_ERROR and part["high_watermark"] == 3
    batches = read_batches(part["records"])
    assert [(b.base_offset, b.record_count) for b in batches] == [(0, 2), (2, 1)]
    assert [r.value for b in batches for r in b.records] == [b"a", b"b", b"c"]
    # the stored batch is the producer's batch with only baseOffset and leader epoch changed
    assert part["records"][:8] == b"\x00" * 8 and part["records"][16:len(b1)] == b1[16:]
    # fetching from the middle of a batch returns that whole batch
    middle = read_batches(fetch(c, 1, version=version)["records"])
    assert [b.base_offset for b in middle] == [0, 2]
    assert fetch(c, 3, version=version)["records"] == b""
    assert fetch(c, 4, version=version)["error_code"] == OffsetOutOfRangeError.code
    if version >= 4:
        assert part["last_stable_offset"] == 3
    if version >= 5:
        assert part["log_start_offset"] == 0


def test_fetch_size_limits(clients: Clients) -> None:
    c = clients[1]
    for i in range(5):
        produce(c, batch([bytes([65 + i]) * 100]))
    one = len(read_batches(fetch(c, 0)["records"])[0].records[0].value)
    assert one == 100
    # at least one batch even when it is larger than the limits
    assert len(read_batches(fetch(c, 0, partition_max_bytes=10)["records"])) == 1
    assert len(read_batches(fetch(c, 0, max_bytes=10)["records"])) == 1
    size = len(fetch(c, 0, partition_max_bytes=1)["records"])
    assert len(read_batches(fetch(c, 0, partition_max_bytes=size * 2 + 5)["records"])) == 2


def test_fetch_errors(cluster: MockCluster, clients: Clients) -> None:
    assert fetch(clients[2], 0)["error_code"] == NotLeaderOrFollowerError.code
    assert fetch(clients[2], 0)["current_leader"] == {"leader_id": 1, "leader_epoch": 0}
    assert fetch(clients[1], 0, partition=7)["error_code"] == UnknownTopicOrPartitionError.code
    assert fetch(clients[1], 0, session_id=5)["error_code"] == FetchSessionIdNotFoundError.code
    cluster.move_leader("t", 0, 2)
    assert fetch(clients[2], 0, leader_epoch=0)["error_code"] == FencedLeaderEpochError.code
    assert fetch(clients[2], 0, leader_epoch=5)["error_code"] == UnknownLeaderEpochError.code
    assert fetch(clients[2], 0, leader_epoch=1)["error_code"] == NO_ERROR
    cluster.inject_errors("fetch", [KafkaStorageError.code])
    assert fetch(clients[2], 0)["error_code"] == KafkaStorageError.code


def test_fetch_waits_at_most_the_cap() -> None:
    with MockCluster(1, max_fetch_wait_ms=100) as cluster, WireClient(*cluster.broker_address(1)) as c:
        cluster.create_topic("t", 1)
        body = FETCH.request_defaults(12)
        body.update(max_wait_ms=30000, min_bytes=1, topics=[
            {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}]}])
        start = time.monotonic()
        assert c.request(FETCH, 12, body)["responses"][0]["partitions"][0]["records"] == b""
        assert 0.09 <= time.monotonic() - start < 1.0
    # min_bytes 0: answered at once, not after max_wait_ms (a minute, under a cap of a minute): a client
    # with a 30 s socket timeout gets the answer (no wall-clock bound to break on a busy machine)
    with MockCluster(1, max_fetch_wait_ms=60_000) as cluster, \
            WireClient(*cluster.broker_address(1), timeout=30.0) as c:
        cluster.create_topic("t", 1)
        body.update(max_wait_ms=60_000, min_bytes=0)
        assert c.request(FETCH, 12, body)["responses"][0]["partitions"][0]["records"] == b""


# --------------------------------------------------------------------------------- FindCoordinator


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_find_coordinator(cluster: MockCluster, clients: Clients, version: int) -> None:
    if version >= 4:
        body = clients[1].request(FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": ["g1", "g2"]})
        found = {c["key"]: c for c in body["coordinators"]}
        assert set(found) == {"g1", "g2"} and all(c["error_code"] == NO_ERROR for c in found.values())
        node = found["g1"]["node_id"]
        port = found["g1"]["port"]
    else:
        body = clients[1].request(FIND_COORDINATOR, version, {"key": "g1", "key_type": 0})
        assert body["error_code"] == NO_ERROR
        node, port = body["node_id"], body["port"]
    assert node in (1, 2, 3) and cluster.broker_address(node)[1] == port
    # every broker gives the same answer
    other = clients[2].request(FIND_COORDINATOR, 1, {"key": "g1", "key_type": 0})
    assert other["node_id"] == node


def test_find_coordinator_moves_off_a_stopped_broker(cluster: MockCluster, clients: Clients) -> None:
    keys = [f"txn-{i}" for i in range(30)]
    body = clients[1].request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": keys})
    assert {c["node_id"] for c in body["coordinators"]} == {1, 2, 3}
    cluster.stop_broker(3)
    body = clients[1].request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": keys})
    assert {c["node_id"] for c in body["coordinators"]} == {1, 2}
    bad = clients[1].request(FIND_COORDINATOR, 3, {"key": "", "key_type": 1})
    assert bad["error_code"] == InvalidRequestError.code
    cluster.inject_errors("find_coordinator", [CoordinatorNotAvailableError.code])
    assert clients[1].request(FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})["error_code"] == (
        CoordinatorNotAvailableError.code
    )


# ------------------------------------------------------------------------------------- CreateTopics


def _create(c: WireClient, version: int, topics: List[Dict[str, Any]], validate_only: bool = False) -> List[Dict[str, Any]]:
    body = {"topics": topics, "timeout_ms": 1000, "validate_only": validate_only}
    result: List[Dict[str, Any]] = c.request(CREATE_TOPICS, version, body)["topics"]
    return result


def _topic(name: str, partitions: int = -1, rf: int = -1, assignments: Optional[List[Any]] = None) -> Dict[str, Any]:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": assignments or [], "configs": [{"name": "retention.ms", "value": "1000"}]}


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6, 7])
def test_create_topics(cluster: MockCluster, clients: Clients, version: int) -> None:
    results = _create(clients[2], version, [_topic("a", 3, 1), _topic("t", 2), _topic("b"), _topic("c", 0),
                                            _topic("d", 2, 9), _topic("bad/name", 1)])
    codes = {r["name"]: r["error_code"] for r in results}
    assert codes == {
        "a": NO_ERROR, "t": TopicAlreadyExistsError.code, "b": NO_ERROR, "c": InvalidPartitionsError.code,
        "d": InvalidReplicationFactorError.code, "bad/name": InvalidTopicError.code,
    }
    assert cluster.partition_count("a") == 3 and cluster.partition_count("b") == 1
    if version >= 5:
        assert results[0]["num_partitions"] == 3
    if version >= 7:
        assert results[0]["topic_id"].int != 0
    assert results[1]["error_message"]


def test_create_topics_assignment_and_validate_only(cluster: MockCluster, clients: Clients) -> None:
    assignment = [{"partition_index": 0, "broker_ids": [3, 1]}, {"partition_index": 1, "broker_ids": [2]}]
    assert _create(clients[1], 5, [_topic("x", assignments=assignment)])[0]["error_code"] == NO_ERROR
    assert [cluster.leader("x", i) for i in (0, 1)] == [3, 2]
    assert _create(clients[1], 5, [_topic("y", 4)], validate_only=True)[0]["error_code"] == NO_ERROR
    assert "y" not in cluster.topics()
    bad = [{"partition_index": 0, "broker_ids": [9]}]
    assert _create(clients[1], 5, [_topic("z", assignments=bad)])[0]["error_code"] == (
        InvalidReplicaAssignmentError.code
    )


# ------------------------------------------------------------------------------ OffsetCommit/Fetch


def _coordinator(clients: Clients, group: str) -> WireClient:
    node = clients[1].request(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["node_id"]
    return clients[node]


@pytest.mark.parametrize("commit_version,fetch_version", [(2, 1), (5, 5), (7, 6), (8, 7)])
def test_offset_commit_and_fetch(cluster: MockCluster, clients: Clients, commit_version: int,
                                 fetch_version: int) -> None:
    group = "grp"
    coordinator = _coordinator(clients, group)
    commit = {"group_id": group, "generation_id": -1, "member_id": "", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42, "committed_metadata": "m"},
                                     {"partition_index": 9, "committed_offset": 1, "committed_metadata": None}]}]}
    parts = coordinator.request(OFFSET_COMMIT, commit_version, commit)["topics"][0]["partitions"]
    assert [(p["partition_index"], p["error_code"]) for p in parts] == [(0, 0), (9, 3)]
    assert cluster.committed_offsets(group) == {("t", 0): 42}
    got = coordinator.request(OFFSET_FETCH, fetch_version, {"group_id": group, "topics": [
        {"name": "t", "partition_indexes": [0, 1]}]})
    offsets = [(p["partition_index"], p["committed_offset"], p["metadata"]) for p in got["topics"][0]["partitions"]]
    assert offsets == [(0, 42, "m"), (1, -1, "")]
    if fetch_version >= 2:
        everything = coordinator.request(OFFSET_FETCH, fetch_version, {"group_id": group, "topics": None})
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in everything["topics"]] == [
            ("t", [0])]


def test_offset_apis_need_the_coordinator(cluster: MockCluster, clients: Clients) -> None:
    group = "g2"
    node = clients[1].request(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["node_id"]
    other = clients[1 if node != 1 else 2]
    commit = {"group_id": group, "member_id": "", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]}]}
    assert other.request(OFFSET_COMMIT, 8, commit)["topics"][0]["partitions"][0]["error_code"] == (
        NotCoordinatorError.code
    )
    assert other.request(OFFSET_FETCH, 7, {"group_id": group, "topics": None})["error_code"] == (
        NotCoordinatorError.code
    )
    member = dict(commit, member_id="m-1", generation_id=3)
    assert clients[node].request(OFFSET_COMMIT, 8, member)["topics"][0]["partitions"][0]["error_code"] == (
        UnknownMemberIdError.code
    )
    assert cluster.committed_offsets(group) == {}
