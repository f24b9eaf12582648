"""The mock's replica model (replication factor, ISR, min.insync.replicas) and its produce quotas, at the
wire level; the client-level scenarios, on the mock and on Apache Kafka, are in
tests/apache_kafka/test_mock_parity_produce_ak.py."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List

import pytest

from kproducer.clock import FakeClock
from kproducer.mock.quotas import ProduceQuotas, QuotaConfig
from kproducer.mock.wire_client import WireClient
from kproducer.protocol.errors import (
    NO_ERROR,
    InvalidConfigError,
    InvalidReplicationFactorError,
    LeaderNotAvailableError,
    NotEnoughReplicasError,
)
from kproducer.protocol.messages import CREATE_TOPICS, METADATA, PRODUCE
from kproducer.protocol.records import RecordBatchBuilder
from kproducer.testing import MockCluster


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as c:
        yield c


def metadata(c: MockCluster, topic: str, broker: int = 1) -> List[Dict[str, Any]]:
    with WireClient(*c.broker_address(broker)) as client:
        md = client.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    parts: List[Dict[str, Any]] = md["topics"][0]["partitions"]
    return sorted(parts, key=lambda p: p["partition_index"])


def produce(c: MockCluster, topic: str, acks: int, partition: int = 0) -> int:
    builder = RecordBatchBuilder(1024)
    builder.try_append(1000, b"k", b"v", [])
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": builder.build()}]}]}
    with WireClient(*c.broker_address(c.leader(topic, partition))) as client:
        code: int = client.request(PRODUCE, 9, body)["responses"][0]["partition_responses"][0]["error_code"]
    return code


def test_replicas_isr_and_min_insync_replicas(cluster: MockCluster) -> None:
    cluster.create_topic("t", 3, replication_factor=2, config={"min.insync.replicas": 2})
    parts = metadata(cluster, "t")
    assert [p["replica_nodes"] for p in parts] == [[1, 2], [2, 3], [3, 1]]
    assert all(p["isr_nodes"] == p["replica_nodes"] for p in parts)
    cluster.stop_broker(2)
    parts = metadata(cluster, "t")
    assert [p["isr_nodes"] for p in parts] == [[1], [3], [3, 1]]
    assert [p["leader_id"] for p in parts] == [1, 3, 3]  # partition 1 moved to its other replica
    assert produce(cluster, "t", -1, 0) == NotEnoughReplicasError.code
    assert produce(cluster, "t", -1, 1) == NotEnoughReplicasError.code
    assert produce(cluster, "t", -1, 2) == NO_ERROR  # both its replicas run
    assert produce(cluster, "t", 1, 0) == NO_ERROR
    assert cluster.high_watermark("t", 0) == 1 and cluster.high_watermark("t", 1) == 0  # the refused: nothing
    cluster.start_broker(2)
    assert all(p["isr_nodes"] == p["replica_nodes"] for p in metadata(cluster, "t"))
    assert produce(cluster, "t", -1, 0) == NO_ERROR


def test_a_partition_whose_replicas_are_all_down_is_offline(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, leaders=[1], replication_factor=1)
    cluster.stop_broker(1)
    (p,) = metadata(cluster, "t", broker=2)
    assert p["error_code"] == LeaderNotAvailableError.code and p["leader_id"] == -1
    cluster.start_broker(1)
    assert metadata(cluster, "t", broker=2)[0]["leader_id"] == 1


def test_without_a_replication_factor_every_broker_is_a_replica_and_leaders_move_anywhere(
        cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, leaders=[2])
    assert metadata(cluster, "t")[0]["replica_nodes"] == [2, 1, 3]
    cluster.stop_broker(2)
    assert cluster.leader("t", 0) == 1
    assert produce(cluster, "t", -1) == NO_ERROR  # min.insync.replicas 1


def test_create_topic_checks(cluster: MockCluster) -> None:
    with pytest.raises(ValueError, match="replication factor 4"):
        cluster.create_topic("t", 1, replication_factor=4)
    with pytest.raises(ValueError, match="min.insync.replicas"):
        cluster.create_topic("t", 1, config={"min.insync.replicas": "zero"})
    with WireClient(*cluster.broker_address(1)) as client:
        topics = [{"name": name, "num_partitions": 2, "replication_factor": rf, "assignments": [],
                   "configs": [{"name": "min.insync.replicas", "value": value}]}
                  for name, rf, value in [("a", 2, "2"), ("b", 5, "1"), ("c", 1, "x")]]
        result = client.request(CREATE_TOPICS, 7, {"topics": topics, "timeout_ms": 1000, "validate_only": False})
    by_name = {t["name"]: t for t in result["topics"]}
    assert by_name["a"]["error_code"] == NO_ERROR and by_name["a"]["replication_factor"] == 2
    assert by_name["b"]["error_code"] == InvalidReplicationFactorError.code
    assert by_name["c"]["error_code"] == InvalidConfigError.code
    assert [len(p["replica_nodes"]) for p in metadata(cluster, "a")] == [2, 2]


def test_quota_rate_and_throttle_as_kafka() -> None:
    clock = FakeClock()
    config = QuotaConfig(window_ms=1000, window_num=11)
    quotas = ProduceQuotas(config, clock)
    assert quotas.record("alice", "c1", 10**9) == 0  # no quota
    config.set(None, "c1", 1000)
    # 10,000 bytes over the shortest window (10 s): the rate is the quota, no throttle
    assert quotas.record("alice", "c1", 10_000) == 0
    # 5,000 more: 15,000 / 10 s = 1,500 B/s; (1500 - 1000) / 1000 * 10 s = 5 s
    assert quotas.record("alice", "c1", 5_000) == 5000
    clock.advance(3500)  # 3 full samples: measured over 3.5 + 7 = 10.5 s
    assert quotas.record("bob", "c1", 0) == 4500  # the same client id: the same sensor
    # the most specific entity wins, with its own sensor
    config.set("alice", "c1", 100)
    assert quotas.record("alice", "c1", 1000) == 0
    assert quotas.record("alice", "c1", 1000) == 10_000
    clock.advance(11_000)  # every sample expired
    assert quotas.record("bob", "c1", 1) == 0
    config.set(None, "c1", None)
    assert quotas.record("bob", "c1", 10**9) == 0
    with pytest.raises(ValueError):
        config.set(None, None, 10)
    with pytest.raises(ValueError):
        config.set("u", None, 0)
