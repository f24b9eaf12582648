"""Transactions v2 (KIP-890 part 2) on the MockCluster, spoken by hand: the ``transaction.version`` feature in
ApiVersions, Produce v12 adding its partition to the transaction, EndTxn v5 bumping the epoch (its table of
retries, an exhausted epoch), TxnOffsetCommit v5 adding its group, and the answers of older request versions.
Each answer is what Apache Kafka 4.1 answers (tests/apache_kafka/test_txn_v2_protocol_ak.py runs the same
exchanges on both)."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

import pytest

from kproducer.mock import MockCluster
from kproducer.protocol.errors import (
    NO_ERROR,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionAbortableError,
    UnsupportedVersionError,
)
from kproducer.protocol.messages import (
    ADD_PARTITIONS_TO_TXN,
    API_VERSIONS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
)
from kproducer.protocol.messages.api_versions import finalized_features
from tests.unit.mock_wire import Clients, batch, fetch, produce


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as c:
        c.create_topic("t", 6)
        yield c


@pytest.fixture
def clients(cluster: MockCluster) -> Iterator[Clients]:
    cs = Clients(cluster)
    yield cs
    cs.close()


class Txn:
    """A transactional producer spoken by hand, transactions v2 unless told otherwise."""

    def __init__(self, clients: Clients, txn_id: str) -> None:
        self.clients = clients
        self.txn_id = txn_id
        found = clients[1].request(FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})
        self.coordinator = clients[found["node_id"]]
        body = self.coordinator.request(INIT_PRODUCER_ID, 5, {"transactional_id": txn_id,
                                                              "transaction_timeout_ms": 60000,
                                                              "producer_id": -1, "producer_epoch": -1})
        assert body["error_code"] == NO_ERROR
        self.pid, self.epoch = body["producer_id"], body["producer_epoch"]

    def send(self, partition: int, values: List[bytes], seq: int = 0, version: int = 12,
             epoch: Optional[int] = None, pid: Optional[int] = None) -> Dict[str, Any]:
        records = batch(values, producer_id=self.pid if pid is None else pid,
                        epoch=self.epoch if epoch is None else epoch, seq=seq, transactional=True)
        return produce(self.clients.leader("t", partition), records, partition=partition, version=version,
                       txn=self.txn_id)

    def end(self, commit: bool, epoch: Optional[int] = None, version: int = 5,
            pid: Optional[int] = None) -> Dict[str, Any]:
        body = {"transactional_id": self.txn_id, "producer_id": self.pid if pid is None else pid,
                "producer_epoch": self.epoch if epoch is None else epoch, "committed": commit}
        answer: Dict[str, Any] = self.coordinator.request(END_TXN, version, body)
        return answer

    def commit_offsets(self, group: str, version: int = 5, epoch: Optional[int] = None) -> int:
        node = self.clients[1].request(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["node_id"]
        body = {"transactional_id": self.txn_id, "group_id": group, "producer_id": self.pid,
                "producer_epoch": self.epoch if epoch is None else epoch, "generation_id": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                    {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                     "committed_metadata": None}]}]}
        code: int = self.clients[node].request(TXN_OFFSET_COMMIT, version, body)["topics"][0]["partitions"][0][
            "error_code"]
        return code


def ids(answer: Dict[str, Any]) -> Any:
    return answer["error_code"], answer["producer_id"], answer["producer_epoch"]


# ------------------------------------------------------------------------------------ the feature


def test_api_versions_advertises_transaction_version() -> None:
    """Finalized transaction.version 2 by default (a new Apache Kafka 4.x cluster); not listed at 0, as Kafka;
    only in ApiVersions v3+; a change comes with a higher features epoch. The served versions do not change with
    it (Kafka 4.1 advertises Produce v13 / EndTxn v5 / TxnOffsetCommit v5 at every level)."""
    body = {"client_software_name": "t", "client_software_version": "1"}
    for level in (2, 1, 0):
        with MockCluster(1, transaction_version=level) as cluster, Clients(cluster)[1] as c:
            answer = c.request(API_VERSIONS, 3, body)
            features = finalized_features(answer)
            assert features.transaction_version == level
            assert answer["finalized_features"] == ([] if level == 0 else [
                {"name": "transaction.version", "max_version_level": level, "min_version_level": level}])
            served = {k["api_key"]: k["max_version"] for k in answer["api_keys"]}
            assert (served[0], served[26], served[28]) == (12, 5, 5)
            assert finalized_features(c.request(API_VERSIONS, 2, {})).epoch == -1  # no features before v3
            if level == 2:
                cluster.set_transaction_version(0)
                later = finalized_features(c.request(API_VERSIONS, 3, body))
                assert later.transaction_version == 0 and later.epoch > features.epoch
                assert cluster.transaction_version == 0
    with pytest.raises(ValueError, match="transaction_version must be one of 0, 1, 2"):
        MockCluster(1, transaction_version=3)


# ------------------------------------------------------------------------------------ Produce v12


def test_produce_v12_adds_the_partition_to_the_transaction(cluster: MockCluster, clients: Clients) -> None:
    txn = Txn(clients, "tv2-produce")
    assert cluster.transaction_state("tv2-produce") == "Empty"
    assert txn.send(0, [b"a0", b"a1"])["error_code"] == NO_ERROR  # no AddPartitionsToTxn
    assert cluster.transaction_state("tv2-produce") == "Ongoing"
    assert txn.send(0, [b"a2"], seq=2)["error_code"] == NO_ERROR
    assert cluster.last_stable_offset("t", 0) == 0 and cluster.high_watermark("t", 0) == 3
    # older versions still need AddPartitionsToTxn: TRANSACTION_ABORTABLE at v11, INVALID_TXN_STATE before
    assert txn.send(1, [b"b0"], version=11)["error_code"] == TransactionAbortableError.code
    assert txn.send(1, [b"b0"], version=10)["error_code"] == InvalidTxnStateError.code
    # a producer the partition has no batches of starts at sequence 0
    refused = txn.send(2, [b"c0"], seq=5)
    assert refused["error_code"] == OutOfOrderSequenceNumberError.code
    assert "Expected sequence 0 for transactions v2" in refused["error_message"]
    assert txn.send(2, [b"c0"], seq=0)["error_code"] == NO_ERROR
    assert txn.send(2, [b"c0"], seq=0)["base_offset"] == 0  # a retry: the duplicate's offset
    assert ids(txn.end(commit=True)) == (NO_ERROR, txn.pid, txn.epoch + 1)
    assert [r.value for r in cluster.records("t", 0)] == [b"a0", b"a1", b"a2"]
    assert cluster.last_stable_offset("t", 0) == 4 and cluster.last_stable_offset("t", 2) == 2
    assert [r.value for r in cluster.records("t", 1)] == []


def test_produce_v12_refusals(cluster: MockCluster, clients: Clients) -> None:
    """The coordinator's refusals as Apache Kafka's leader answers them: a wrong producer id or an unknown
    transactional id INVALID_PRODUCER_ID_MAPPING; a fenced epoch INVALID_PRODUCER_EPOCH (Kafka turns the
    coordinator's PRODUCER_FENCED into it), also where the partition knows a newer epoch."""
    txn = Txn(clients, "tv2-refusals")
    assert txn.send(3, [b"x"], pid=txn.pid + 100)["error_code"] == InvalidProducerIdMappingError.code
    assert txn.send(3, [b"x"], epoch=txn.epoch + 7)["error_code"] == InvalidProducerEpochError.code
    stranger = batch([b"x"], producer_id=txn.pid, epoch=txn.epoch, seq=0, transactional=True)
    assert produce(clients.leader("t", 3), stranger, partition=3, version=12, txn="unknown-id")["error_code"] == (
        InvalidProducerIdMappingError.code)
    assert txn.send(0, [b"ok"])["error_code"] == NO_ERROR
    newer = Txn(clients, "tv2-refusals")  # fences: the ongoing transaction is aborted with a newer epoch
    assert newer.epoch > txn.epoch
    assert txn.send(0, [b"zombie"], seq=1)["error_code"] == InvalidProducerEpochError.code
    assert txn.send(4, [b"zombie"])["error_code"] == InvalidProducerEpochError.code
    assert cluster.transaction_state("tv2-refusals") == "Empty"


# ------------------------------------------------------------------------------------ EndTxn v5


def test_end_txn_v5_bumps_the_epoch_at_every_end(cluster: MockCluster, clients: Clients) -> None:
    """Kafka 4.1's table: commit/abort of the ongoing transaction bumps the epoch (markers with the new epoch);
    a retry with the previous epoch answers the same ids again; a commit of a completed transaction is
    INVALID_TXN_STATE; an abort of a completed (or empty) one bumps the epoch again, without markers."""
    txn = Txn(clients, "tv2-end")
    e = txn.epoch
    assert txn.send(0, [b"a"])["error_code"] == NO_ERROR
    assert ids(txn.end(commit=True)) == (NO_ERROR, txn.pid, e + 1)
    assert ids(txn.end(commit=True)) == (NO_ERROR, txn.pid, e + 1)  # the retry
    assert ids(txn.end(commit=True, epoch=e + 1)) == (InvalidTxnStateError.code, -1, -1)
    assert ids(txn.end(commit=False)) == (InvalidTxnStateError.code, -1, -1)  # an abort retried after a commit
    markers = [r for r in cluster.records("t", 0, include_control=True) if r.is_control]
    assert [(r.control_type, r.producer_id, r.producer_epoch) for r in markers] == [(1, txn.pid, e + 1)]
    # the next transaction with the epoch EndTxn gave
    assert ids(txn.end(commit=False, epoch=e + 1)) == (NO_ERROR, txn.pid, e + 2)  # CompleteCommit: abort bumps
    assert ids(txn.end(commit=False, epoch=e + 1)) == (NO_ERROR, txn.pid, e + 2)  # its retry
    assert ids(txn.end(commit=True, epoch=e + 2)) == (InvalidTxnStateError.code, -1, -1)
    assert txn.send(0, [b"b"], epoch=e + 2)["error_code"] == NO_ERROR
    assert txn.send(0, [b"old"], epoch=e, seq=1)["error_code"] == InvalidProducerEpochError.code
    assert ids(txn.end(commit=False, epoch=e + 2)) == (NO_ERROR, txn.pid, e + 3)
    view = fetch(clients.leader("t", 0), 0, isolation=1)
    assert view["aborted_transactions"] == [{"producer_id": txn.pid, "first_offset": 2}]
    markers = [r for r in cluster.records("t", 0, include_control=True) if r.is_control]
    assert [(r.control_type, r.producer_epoch) for r in markers] == [(1, e + 1), (0, e + 3)]
    # a stale epoch, a wrong producer id
    assert ids(txn.end(commit=False, epoch=e + 1)) == (ProducerFencedError.code, -1, -1)
    assert ids(txn.end(commit=False, epoch=e + 3, pid=txn.pid + 1)) == (InvalidProducerIdMappingError.code, -1, -1)
    assert cluster.producer_id_and_epoch("tv2-end") == (txn.pid, e + 3)


def test_end_txn_v5_on_an_empty_transaction(clients: Clients) -> None:
    txn = Txn(clients, "tv2-empty")
    assert ids(txn.end(commit=True)) == (InvalidTxnStateError.code, -1, -1)
    assert ids(txn.end(commit=False)) == (NO_ERROR, txn.pid, txn.epoch + 1)


def test_an_exhausted_epoch_continues_under_a_new_producer_id(cluster: MockCluster, clients: Clients) -> None:
    """At epoch 32766 (Short.MAX_VALUE - 1) EndTxn v5 writes the markers with 32767 and answers a new producer id
    with epoch 0; the retry of that EndTxn (old id, 32766) answers the new ids again."""
    txn = Txn(clients, "tv2-overflow")
    cluster._txn.transactions["tv2-overflow"].producer_epoch = 32766  # (as after 32766 transactions)
    assert txn.send(0, [b"last"], epoch=32766)["error_code"] == NO_ERROR
    error, new_pid, new_epoch = ids(txn.end(commit=True, epoch=32766))
    assert (error, new_epoch) == (NO_ERROR, 0) and new_pid != txn.pid
    assert ids(txn.end(commit=True, epoch=32766)) == (NO_ERROR, new_pid, 0)
    markers = [r for r in cluster.records("t", 0, include_control=True) if r.is_control]
    assert [(r.producer_id, r.producer_epoch) for r in markers] == [(txn.pid, 32767)]
    assert txn.send(0, [b"first"], pid=new_pid, epoch=0)["error_code"] == NO_ERROR
    assert ids(txn.end(commit=True, pid=new_pid, epoch=0)) == (NO_ERROR, new_pid, 1)


def test_older_end_txn_versions_keep_the_epoch(cluster: MockCluster, clients: Clients) -> None:
    """v3/v4 (transactions v1) end a transaction -- also one Produce v12 started -- without an epoch bump, and
    their answers carry no producer id (the decoder's -1)."""
    txn = Txn(clients, "tv1-end")
    assert txn.send(0, [b"a"])["error_code"] == NO_ERROR
    assert ids(txn.end(commit=True, version=4)) == (NO_ERROR, -1, -1)
    assert cluster.producer_id_and_epoch("tv1-end") == (txn.pid, txn.epoch)
    body = {"transactional_id": txn.txn_id, "producer_id": txn.pid, "producer_epoch": txn.epoch,
            "topics": [{"name": "t", "partitions": [1]}]}
    assert txn.coordinator.request(ADD_PARTITIONS_TO_TXN, 3, body)["results"][0]["results_by_partition"][0][
        "partition_error_code"] == NO_ERROR
    assert txn.send(1, [b"b"], version=11)["error_code"] == NO_ERROR
    assert ids(txn.end(commit=False, version=3)) == (NO_ERROR, -1, -1)
    markers = [r for r in cluster.records("t", 1, include_control=True) if r.is_control]
    assert [(r.control_type, r.producer_epoch) for r in markers] == [(0, txn.epoch)]


# ------------------------------------------------------------------------------------ TxnOffsetCommit v5


def test_txn_offset_commit_v5_adds_the_group(cluster: MockCluster, clients: Clients) -> None:
    """v5 needs no AddOffsetsToTxn; before, a group not in the transaction is TRANSACTION_ABORTABLE (v4) or
    INVALID_TXN_STATE (v3). A wrong epoch is INVALID_PRODUCER_EPOCH at every version (Kafka 4.1)."""
    txn = Txn(clients, "tv2-offsets")
    assert txn.commit_offsets("g3", version=3) == InvalidTxnStateError.code
    assert txn.commit_offsets("g4", version=4) == TransactionAbortableError.code
    assert txn.commit_offsets("g5", version=5, epoch=txn.epoch + 7) == InvalidProducerEpochError.code
    assert txn.commit_offsets("g3", version=3, epoch=txn.epoch + 7) == InvalidProducerEpochError.code
    assert txn.commit_offsets("g5", version=5) == NO_ERROR
    assert cluster.transaction_state("tv2-offsets") == "Ongoing"
    assert cluster.committed_offsets("g5") == {}
    assert ids(txn.end(commit=True)) == (NO_ERROR, txn.pid, txn.epoch + 1)
    assert cluster.committed_offsets("g5") == {("t", 0): 42}
    assert cluster.committed_offsets("g3") == {} and cluster.committed_offsets("g4") == {}


# ------------------------------------------------------------------------------------ transaction.version 0


def test_transaction_version_0_refuses_transactions_v2() -> None:
    """Apache Kafka 4.1 at transaction.version 0 answers UNSUPPORTED_VERSION where a transactions-v2 request would
    change the transaction (it cannot write it to its log); the older versions work as ever."""
    with MockCluster(1, transaction_version=0) as cluster:
        cluster.create_topic("t", 2)
        clients = Clients(cluster)
        try:
            txn = Txn(clients, "tv0")
            assert txn.send(0, [b"a"])["error_code"] == UnsupportedVersionError.code
            assert txn.commit_offsets("g", version=5) == UnsupportedVersionError.code
            assert ids(txn.end(commit=False)) == (UnsupportedVersionError.code, -1, -1)
            assert cluster.transaction_state("tv0") == "Empty"
            body = {"transactional_id": "tv0", "producer_id": txn.pid, "producer_epoch": txn.epoch,
                    "topics": [{"name": "t", "partitions": [0]}]}
            txn.coordinator.request(ADD_PARTITIONS_TO_TXN, 3, body)
            assert txn.send(0, [b"a"], version=11)["error_code"] == NO_ERROR
            assert ids(txn.end(commit=True, version=3)) == (NO_ERROR, -1, -1)
            # back to 2: transactions v2 again
            cluster.set_transaction_version(2)
            assert txn.send(1, [b"b"])["error_code"] == NO_ERROR
            assert ids(txn.end(commit=True)) == (NO_ERROR, txn.pid, txn.epoch + 1)
        finally:
            clients.close()
