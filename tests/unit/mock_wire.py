"""Helpers of the mock broker's tests: one wire client per broker, and Produce/Fetch/ListOffsets requests
reduced to the one partition a test looks at."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from kproducer.mock import MockCluster
from kproducer.mock.wire_client import WireClient
from kproducer.protocol.messages import FETCH, LIST_OFFSETS, PRODUCE
from kproducer.protocol.records import RecordBatchBuilder


class Clients:
    """One WireClient per broker, opened on first use."""

    def __init__(self, cluster: MockCluster) -> None:
        self.cluster = cluster
        self.open: Dict[int, WireClient] = {}

    def __getitem__(self, broker_id: int) -> WireClient:
        if broker_id not in self.open:
            self.open[broker_id] = WireClient(*self.cluster.broker_address(broker_id))
        return self.open[broker_id]

    def leader(self, topic: str, partition: int) -> WireClient:
        return self[self.cluster.leader(topic, partition)]

    def close(self) -> None:
        for c in self.open.values():
            c.close()



def batch(values: List[bytes], ts: int = 1000, producer_id: int = -1, epoch: int = -1, seq: int = -1,
          transactional: bool = False) -> bytes:
    b = RecordBatchBuilder(1 << 20)
    for i, v in enumerate(values):
        b.try_append(ts + i, b"k" + v, v, [("h", v)])
    return b.build(producer_id, epoch, seq, is_transactional=transactional)


def produce(c: WireClient, records: bytes, partition: int = 0, topic: str = "t", acks: int = -1,
            version: int = 9, txn: Optional[str] = None) -> Dict[str, Any]:
    body = {"transactional_id": txn, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
    response = c.request(PRODUCE, version, body)
    part: Dict[str, Any] = response["responses"][0]["partition_responses"][0]
    part["node_endpoints"] = response["node_endpoints"]
    return part


def fetch(c: WireClient, offset: int, partition: int = 0, version: int = 12, isolation: int = 0,
          max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20, leader_epoch: int = -1,
          session_id: int = 0) -> Dict[str, Any]:
    body = FETCH.request_defaults(version)
    body.update(max_wait_ms=0, min_bytes=1, isolation_level=isolation, max_bytes=max_bytes, session_id=session_id,
                topics=[{"topic": "t", "partitions": [{"partition": partition, "fetch_offset": offset,
                                                       "current_leader_epoch": leader_epoch,
                                                       "partition_max_bytes": partition_max_bytes}]}])
    response = c.request(FETCH, version, body)
    if response["error_code"]:
        return {"error_code": response["error_code"]}
    part: Dict[str, Any] = response["responses"][0]["partitions"][0]
    return part


def list_offset(c: WireClient, timestamp: int, partition: int = 0, version: int = 7,
                isolation: int = 0) -> Dict[str, Any]:
    body = {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": "t", "partitions": [{"partition_index": partition, "timestamp": timestamp}]}]}
    part: Dict[str, Any] = c.request(LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]
    return part
