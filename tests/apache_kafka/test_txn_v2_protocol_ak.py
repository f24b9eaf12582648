"""Transactions v2 (KIP-890 part 2) on the wire, against Apache Kafka 4.1 and against the MockCluster: the same
script of raw requests (kproducer's protocol codec over a socket, ``kproducer.mock.wire_client``) gets the same
answers from both -- that is the parity proof of the mock -- and they are the answers written down here.

The script: ApiVersions (``transaction.version`` finalized at 2), InitProducerId; a transaction written with
Produce v12 only (no AddPartitionsToTxn) and TxnOffsetCommit v5 (no AddOffsetsToTxn), ended by EndTxn v5, which
answers the producer id and the epoch + 1; its retry, a commit too many, writes with the old epoch; an abort of
the completed transaction (epoch + 2); a second transaction with that epoch, aborted (epoch + 3); then a
transaction the version-1 way (AddPartitionsToTxn v3, Produce v11, EndTxn v3: no epoch bump), and InitProducerId
bumping the epoch (+ 4). On the way, what older versions answer for a partition or group not added to the
transaction (Produce v11: TRANSACTION_ABORTABLE, v10: INVALID_TXN_STATE; TxnOffsetCommit v4 / v3 likewise), and
the refusals of Produce v12 (sequence not 0 where the producer has no state, an old epoch, a wrong producer id).

Read back independently: kafka-python consumers with read_committed (the committed transactions' records only)
and read_uncommitted (everything written), raw Fetch for the markers and their epochs, OffsetFetch for the group's
committed offset.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from kproducer.mock.wire_client import WireClient
from kproducer.protocol import messages as m
from kproducer.protocol.errors import error_for_code
from kproducer.protocol.messages.api_versions import finalized_features
from kproducer.protocol.records import RecordBatchBuilder
from kproducer.testing import MockCluster
from tests.readback import consume, fetch_batches

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

WAIT = 60.0
PARTITIONS = [0, 1, 2, 3]
#: answers a client retries as Java's TransactionManager does (the coordinator is busy completing a transaction
#: or loading); the mock never gives them
RETRIABLE = {"CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE",
             "NOT_COORDINATOR"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def name_of(code: int) -> str:
    return "NONE" if code == 0 else error_for_code(code).name


def batch(values: Sequence[bytes], producer_id: int, epoch: int, seq: int, transactional: bool = True) -> bytes:
    builder = RecordBatchBuilder(1 << 20)
    for i, value in enumerate(values):
        builder.try_append(1_000 + i, None, value, [])
    return builder.build(producer_id, epoch, seq, is_transactional=transactional)


class Wire:
    """Raw connections to a cluster's brokers (by node id, from Metadata), with Kafka's request routing."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.boot = WireClient(host, int(port), timeout=30, client_id="kproducer-tv2-script")
        self.topic = topic
        metadata = self.boot.request(m.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        self.addresses = {b["node_id"]: (b["host"], b["port"]) for b in metadata["brokers"]}
        self.leaders = {p["partition_index"]: p["leader_id"] for p in metadata["topics"][0]["partitions"]}
        self.connections: Dict[int, WireClient] = {}

    def node(self, node_id: int) -> WireClient:
        if node_id not in self.connections:
            self.connections[node_id] = WireClient(*self.addresses[node_id], timeout=30,
                                                   client_id="kproducer-tv2-script")
        return self.connections[node_id]

    def leader_address(self, partition: int) -> str:
        host, port = self.addresses[self.leaders[partition]]
        return f"{host}:{port}"

    def coordinator(self, key: str, key_type: int) -> WireClient:
        """FindCoordinator (0: group, 1: transactional id), asked again while the coordinator is not ready."""
        deadline = time.monotonic() + WAIT
        while True:
            found = self.boot.request(m.FIND_COORDINATOR, 1, {"key": key, "key_type": key_type})
            if found["error_code"] == 0:
                self.addresses.setdefault(found["node_id"], (found["host"], found["port"]))
                return self.node(found["node_id"])
            assert time.monotonic() < deadline, f"no coordinator for {key}: {name_of(found['error_code'])}"
            time.sleep(0.2)

    def close(self) -> None:
        self.boot.close()
        for c in self.connections.values():
            c.close()


def retried(call: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """``call()`` again while it answers an error a client retries (bounded)."""
    deadline = time.monotonic() + WAIT
    while True:
        answer = call()
        if name_of(answer["error_code"]) not in RETRIABLE:
            return answer
        assert time.monotonic() < deadline, f"still {name_of(answer['error_code'])} after {WAIT} s"
        time.sleep(0.05)


class Script:
    """One transactional id and group spoken by hand; each step's answer goes into :attr:`transcript` with producer
    ids as "pid" (the one InitProducerId gave) or "new", and epochs relative to that first epoch ("E+n")."""

    def __init__(self, wire: Wire, transactional_id: str, group: str) -> None:
        self.wire = wire
        self.tid = transactional_id
        self.group = group
        self.transcript: List[Tuple[str, ...]] = []
        self.pid = -1
        self.first_epoch = 0

    def note(self, step: str, code: int, producer_id: Optional[int] = None, epoch: Optional[int] = None) -> None:
        entry: Tuple[str, ...] = (step, name_of(code))
        if producer_id is not None and epoch is not None:
            if producer_id < 0:
                entry += ("-", "-")
            else:
                entry += ("pid" if producer_id == self.pid else "new", f"E+{epoch - self.first_epoch}")
        self.transcript.append(entry)

    def init(self, step: str, producer_id: int = -1, epoch: int = -1) -> int:
        coordinator = self.wire.coordinator(self.tid, 1)
        answer = retried(lambda: coordinator.request(m.INIT_PRODUCER_ID, 5, {
            "transactional_id": self.tid, "transaction_timeout_ms": 60000, "producer_id": producer_id,
            "producer_epoch": epoch}))
        if self.pid < 0:
            self.pid, self.first_epoch = answer["producer_id"], answer["producer_epoch"]
        self.note(step, answer["error_code"], answer["producer_id"], answer["producer_epoch"])
        epoch_now: int = answer["producer_epoch"]
        return epoch_now

    def produce(self, step: str, partition: int, values: Sequence[bytes], epoch: int, seq: int, version: int = 12,
                producer_id: Optional[int] = None) -> None:
        records = batch(values, self.pid if producer_id is None else producer_id, epoch, seq)
        body = {"transactional_id": self.tid, "acks": -1, "timeout_ms": 30000, "topic_data": [
            {"name": self.wire.topic, "partition_data": [{"index": partition, "records": records}]}]}
        leader = self.wire.node(self.wire.leaders[partition])
        answer = retried(lambda: leader.request(m.PRODUCE, version, body)["responses"][0]["partition_responses"][0])
        self.note(step, answer["error_code"])

    def add_partitions(self, step: str, partitions: Sequence[int], epoch: int) -> None:
        coordinator = self.wire.coordinator(self.tid, 1)
        body = {"transactional_id": self.tid, "producer_id": self.pid, "producer_epoch": epoch,
                "topics": [{"name": self.wire.topic, "partitions": list(partitions)}]}

        def call() -> Dict[str, Any]:
            result: Dict[str, Any] = coordinator.request(m.ADD_PARTITIONS_TO_TXN, 3, body)["results"][0][
                "results_by_partition"][0]
            return {"error_code": result["partition_error_code"]}

        self.note(step, retried(call)["error_code"])

    def commit_offsets(self, step: str, group: str, epoch: int, version: int, offset: int = 42) -> None:
        coordinator = self.wire.coordinator(group, 0)
        body = {"transactional_id": self.tid, "group_id": group, "producer_id": self.pid, "producer_epoch": epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": self.wire.topic, "partitions": [
                    {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                     "committed_metadata": None}]}]}

        def call() -> Dict[str, Any]:
            partition: Dict[str, Any] = coordinator.request(m.TXN_OFFSET_COMMIT, version, body)["topics"][0][
                "partitions"][0]
            return partition

        self.note(step, retried(call)["error_code"])

    def end(self, step: str, commit: bool, epoch: int, version: int = 5) -> int:
        coordinator = self.wire.coordinator(self.tid, 1)
        answer = retried(lambda: coordinator.request(m.END_TXN, version, {
            "transactional_id": self.tid, "producer_id": self.pid, "producer_epoch": epoch, "committed": commit}))
        self.note(step, answer["error_code"], answer["producer_id"], answer["producer_epoch"])
        next_epoch: int = answer["producer_epoch"]
        return next_epoch

    def run(self) -> None:
        answer = self.wire.boot.request(m.API_VERSIONS, 3, {"client_software_name": "kproducer-tests",
                                                            "client_software_version": "1"})
        served = {k["api_key"]: k["max_version"] for k in answer["api_keys"]}
        self.transcript.append(("transaction.version", str(finalized_features(answer).transaction_version)))
        self.transcript.append(("serves Produce v12, EndTxn v5, TxnOffsetCommit v5",
                                str(served[0] >= 12 and served[26] >= 5 and served[28] >= 5)))
        e = self.init("InitProducerId v5")
        assert e == self.first_epoch
        # transaction 1: transactions v2
        self.produce("Produce v12 p0, no AddPartitionsToTxn", 0, [b"t1-p0-a", b"t1-p0-b"], e, 0)
        self.produce("Produce v12 p0, next batch", 0, [b"t1-p0-c"], e, 2)
        self.produce("Produce v11 p1, not added", 1, [b"never"], e, 0, version=11)
        self.produce("Produce v10 p1, not added", 1, [b"never"], e, 0, version=10)
        self.produce("Produce v12 p2, sequence 5 without state", 2, [b"never"], e, 5)
        self.produce("Produce v12 p2, sequence 0", 2, [b"t1-p2-a"], e, 0)
        self.produce("Produce v12 p3, wrong producer id", 3, [b"never"], e, 0, producer_id=self.pid + 1000)
        self.commit_offsets("TxnOffsetCommit v3, group not added", self.group + "-v3", e, 3)
        self.commit_offsets("TxnOffsetCommit v4, group not added", self.group + "-v4", e, 4)
        self.commit_offsets("TxnOffsetCommit v5, no AddOffsetsToTxn", self.group, e, 5)
        self.commit_offsets("TxnOffsetCommit v5, wrong epoch", self.group + "-x", e + 7, 5)
        e1 = self.end("EndTxn v5 commit", True, e)
        self.end("EndTxn v5 commit again (a retry)", True, e)
        self.end("EndTxn v5 commit with the new epoch", True, e1)
        self.produce("Produce v12 p3, the old epoch", 3, [b"never"], e, 0)
        self.produce("Produce v12 p0, the old epoch", 0, [b"never"], e, 3)
        e2 = self.end("EndTxn v5 abort of the completed transaction", False, e1)
        self.end("EndTxn v5 abort again (a retry)", False, e1)
        self.end("EndTxn v5 commit after it", True, e2)
        # transaction 2, with the epoch EndTxn gave: aborted
        self.produce("Produce v12 p0, the epoch from EndTxn", 0, [b"t2-p0-a"], e2, 0)
        self.produce("Produce v12 p1, the epoch from EndTxn", 1, [b"t2-p1-a"], e2, 0)
        e3 = self.end("EndTxn v5 abort", False, e2)
        # transaction 3, the version-1 way: no epoch bump
        self.add_partitions("AddPartitionsToTxn v3 p1", [1], e3)
        self.produce("Produce v11 p1", 1, [b"t3-p1-a"], e3, 0, version=11)
        self.end("EndTxn v3 commit", True, e3, version=3)
        self.init("InitProducerId v5 bumps the epoch", self.pid, e3)


#: what Apache Kafka 4.1 answers (and the mock)
EXPECTED = [
    ("transaction.version", "2"),
    ("serves Produce v12, EndTxn v5, TxnOffsetCommit v5", "True"),
    ("InitProducerId v5", "NONE", "pid", "E+0"),
    ("Produce v12 p0, no AddPartitionsToTxn", "NONE"),
    ("Produce v12 p0, next batch", "NONE"),
    ("Produce v11 p1, not added", "TRANSACTION_ABORTABLE"),
    ("Produce v10 p1, not added", "INVALID_TXN_STATE"),
    ("Produce v12 p2, sequence 5 without state", "OUT_OF_ORDER_SEQUENCE_NUMBER"),
    ("Produce v12 p2, sequence 0", "NONE"),
    ("Produce v12 p3, wrong producer id", "INVALID_PRODUCER_ID_MAPPING"),
    ("TxnOffsetCommit v3, group not added", "INVALID_TXN_STATE"),
    ("TxnOffsetCommit v4, group not added", "TRANSACTION_ABORTABLE"),
    ("TxnOffsetCommit v5, no AddOffsetsToTxn", "NONE"),
    ("TxnOffsetCommit v5, wrong epoch", "INVALID_PRODUCER_EPOCH"),
    ("EndTxn v5 commit", "NONE", "pid", "E+1"),
    ("EndTxn v5 commit again (a retry)", "NONE", "pid", "E+1"),
    ("EndTxn v5 commit with the new epoch", "INVALID_TXN_STATE", "-", "-"),
    ("Produce v12 p3, the old epoch", "INVALID_PRODUCER_EPOCH"),
    ("Produce v12 p0, the old epoch", "INVALID_PRODUCER_EPOCH"),
    ("EndTxn v5 abort of the completed transaction", "NONE", "pid", "E+2"),
    ("EndTxn v5 abort again (a retry)", "NONE", "pid", "E+2"),
    ("EndTxn v5 commit after it", "INVALID_TXN_STATE", "-", "-"),
    ("Produce v12 p0, the epoch from EndTxn", "NONE"),
    ("Produce v12 p1, the epoch from EndTxn", "NONE"),
    ("EndTxn v5 abort", "NONE", "pid", "E+3"),
    ("AddPartitionsToTxn v3 p1", "NONE"),
    ("Produce v11 p1", "NONE"),
    ("EndTxn v3 commit", "NONE", "-", "-"),
    ("InitProducerId v5 bumps the epoch", "NONE", "pid", "E+4"),
]

COMMIT, ABORT = "COMMIT", "ABORT"
#: each partition's log afterwards: data batches (values, epoch) and markers (kind, epoch); epochs relative
EXPECTED_LOGS = {
    0: [([b"t1-p0-a", b"t1-p0-b"], 0), ([b"t1-p0-c"], 0), (COMMIT, 1), ([b"t2-p0-a"], 2), (ABORT, 3)],
    1: [([b"t2-p1-a"], 2), (ABORT, 3), ([b"t3-p1-a"], 3), (COMMIT, 3)],
    2: [([b"t1-p2-a"], 0), (COMMIT, 1)],
    3: [],
}


@pytest.fixture(params=["mock", "apache_kafka"])
def cluster(request: Any) -> Iterator[Tuple[str, str]]:
    """(bootstrap servers, a fresh topic of 4 partitions) on the MockCluster (3 brokers) or the session's Apache
    Kafka cluster (3 brokers, replication factor 3)."""
    topic = unique("tv2")
    if request.param == "apache_kafka":
        kafka = request.getfixturevalue("apache_kafka")
        kafka.create_topic(topic, len(PARTITIONS), 3)
        yield kafka.bootstrap_servers, topic
        return
    with MockCluster(3) as mock:
        mock.create_topic(topic, len(PARTITIONS))
        yield mock.bootstrap_servers, topic


def relative_log(leader: str, topic: str, partition: int, pid: int, first_epoch: int) -> List[Tuple[Any, int]]:
    """The partition's batches of the script's producer, read with raw Fetch from its leader."""
    batches, _ = fetch_batches(leader, topic, partition)
    out: List[Tuple[Any, int]] = []
    for b in batches:
        assert b.producer_id == pid, (b.producer_id, pid)
        if b.is_control:
            (record,) = b.records
            assert record.key is not None
            out.append((COMMIT if record.key[-1] == 1 else ABORT, b.producer_epoch - first_epoch))
        else:
            out.append(([r.value for r in b.records], b.producer_epoch - first_epoch))
    return out


def committed_offset(wire: Wire, group: str, topic: str) -> int:
    """The group's committed offset of partition 0 (OffsetFetch v7, require_stable: Apache Kafka answers
    UNSTABLE_OFFSET_COMMIT until the transaction's marker reached the offsets topic), -1 for none."""
    coordinator = wire.coordinator(group, 0)
    deadline = time.monotonic() + WAIT
    while True:
        answer = coordinator.request(m.OFFSET_FETCH, 7, {"group_id": group, "require_stable": True,
                                                          "topics": [{"name": topic, "partition_indexes": [0]}]})
        (partition,) = answer["topics"][0]["partitions"]
        code = answer["error_code"] or partition["error_code"]
        if code == 0:
            offset: int = partition["committed_offset"]
            return offset
        assert name_of(code) in ("UNSTABLE_OFFSET_COMMIT", *RETRIABLE) and time.monotonic() < deadline, name_of(code)
        time.sleep(0.1)


def test_transactions_v2_on_the_wire(cluster: Tuple[str, str]) -> None:
    bootstrap, topic = cluster
    group = unique("tv2-group")
    wire = Wire(bootstrap, topic)
    try:
        script = Script(wire, unique("tv2-txn"), group)
        script.run()
        assert script.transcript == EXPECTED
        # the markers and their epochs: + 1 at the commit, + 3 at the abort (version 2); the version-1 commit
        # keeps the epoch
        for partition in PARTITIONS:
            assert relative_log(wire.leader_address(partition), topic, partition, script.pid,
                                script.first_epoch) == EXPECTED_LOGS[partition], f"partition {partition}"
        assert committed_offset(wire, group, topic) == 42
        assert committed_offset(wire, group + "-v3", topic) == -1
        assert committed_offset(wire, group + "-v4", topic) == -1
    finally:
        wire.close()
    committed = consume(bootstrap, topic, PARTITIONS, expected=5, timeout=WAIT, isolation_level="read_committed")
    assert sorted((r.partition, r.value) for r in committed) == [
        (0, b"t1-p0-a"), (0, b"t1-p0-b"), (0, b"t1-p0-c"), (1, b"t3-p1-a"), (2, b"t1-p2-a")]
    everything = consume(bootstrap, topic, PARTITIONS, expected=7, timeout=WAIT)
    assert sorted((r.partition, r.value) for r in everything) == sorted(
        [(0, b"t1-p0-a"), (0, b"t1-p0-b"), (0, b"t1-p0-c"), (0, b"t2-p0-a"), (1, b"t2-p1-a"), (1, b"t3-p1-a"),
         (2, b"t1-p2-a")])
