"""Idempotent sequence checks and transactions on the mock broker (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, markers and read_committed fetches)."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List

import pytest

from kproducer.clock import FakeClock
from kproducer.mock import MockCluster
from kproducer.mock.wire_client import WireClient
from kproducer.protocol.errors import (
    NO_ERROR,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
)
from kproducer.protocol.messages import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
)
from kproducer.protocol.records import read_batches
from tests.unit.mock_wire import Clients, batch, fetch, list_offset, produce


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


def init_pid(c: WireClient, txn: Any = None, timeout_ms: int = 60000, version: int = 4,
             producer_id: int = -1, epoch: int = -1) -> Dict[str, Any]:
    return c.request(INIT_PRODUCER_ID, version, {"transactional_id": txn, "transaction_timeout_ms": timeout_ms,
                                                 "producer_id": producer_id, "producer_epoch": epoch})


def values(n: int, start: int = 0) -> List[bytes]:
    return [b"v%d" % i for i in range(start, start + n)]


# ------------------------------------------------------------------------------------ idempotence


@pytest.mark.parametrize("version", [0, 2, 5])
def test_init_producer_id_allocates_distinct_ids(clients: Clients, version: int) -> None:
    ids = set()
    for broker_id in (1, 2, 3):
        body = init_pid(clients[broker_id], version=version)
        assert body["error_code"] == NO_ERROR and body["producer_epoch"] == 0
        ids.add(body["producer_id"])
    assert len(ids) == 3


def test_duplicates_and_gaps(cluster: MockCluster, clients: Clients) -> None:
    c = clients[1]
    pid = init_pid(c)["producer_id"]
    sent = [batch(values(3, 3 * i), producer_id=pid, epoch=0, seq=3 * i) for i in range(7)]
    assert [produce(c, b)["base_offset"] for b in sent] == [0, 3, 6, 9, 12, 15, 18]
    # a retry of one of the last five batches: success with the original offset, nothing appended
    for i in (2, 4, 6):
        result = produce(c, sent[i])
        assert (result["error_code"], result["base_offset"]) == (NO_ERROR, 3 * i)
    assert cluster.high_watermark("t", 0) == 21
    # older than the cached five: out of order
    assert produce(c, sent[1])["error_code"] == OutOfOrderSequenceNumberError.code
    # a gap
    assert produce(c, batch(values(1), producer_id=pid, epoch=0, seq=22))["error_code"] == (
        OutOfOrderSequenceNumberError.code
    )
    assert produce(c, batch(values(1), producer_id=pid, epoch=0, seq=21))["base_offset"] == 21
    assert cluster.producer_state("t", 0) == {pid: (0, 21)}
    assert [r.sequence for r in cluster.records("t", 0)][-3:] == [19, 20, 21]
    assert all(r.producer_id == pid for r in cluster.records("t", 0))


def test_epochs(cluster: MockCluster, clients: Clients) -> None:
    c = clients[1]
    pid = init_pid(c)["producer_id"]
    assert produce(c, batch(values(2), producer_id=pid, epoch=3, seq=0))["error_code"] == NO_ERROR
    assert produce(c, batch(values(1), producer_id=pid, epoch=2, seq=2))["error_code"] == (
        InvalidProducerEpochError.code
    )
    # a new epoch must start at sequence 0
    assert produce(c, batch(values(1), producer_id=pid, epoch=4, seq=2))["error_code"] == (
        OutOfOrderSequenceNumberError.code
    )
    assert produce(c, batch(values(1), producer_id=pid, epoch=4, seq=0))["error_code"] == NO_ERROR
    assert cluster.producer_state("t", 0) == {pid: (4, 0)}


def test_unknown_producer_state(cluster: MockCluster, clients: Clients) -> None:
    c = clients[1]
    # no state: any sequence is accepted (Kafka 2.5+)
    assert produce(c, batch(values(1), producer_id=777, epoch=0, seq=40))["error_code"] == NO_ERROR
    cluster.expire_producer_state("t", 0, 777)
    assert produce(c, batch(values(1), producer_id=777, epoch=0, seq=41))["error_code"] == (
        UnknownProducerIdError.code
    )
    assert produce(c, batch(values(1), producer_id=777, epoch=0, seq=0))["error_code"] == NO_ERROR
    assert produce(c, batch(values(1), producer_id=777, epoch=0, seq=1))["error_code"] == NO_ERROR


def test_sequence_wraps(clients: Clients) -> None:
    c = clients[1]
    top = 2 ** 31 - 1
    assert produce(c, batch(values(2), producer_id=5, epoch=0, seq=top - 1))["error_code"] == NO_ERROR
    assert produce(c, batch(values(2), producer_id=5, epoch=0, seq=0))["error_code"] == NO_ERROR


# ------------------------------------------------------------------------------------ transactions


class Txn:
    """A transactional producer spoken by hand."""

    def __init__(self, clients: Clients, txn_id: str) -> None:
        self.clients = clients
        self.txn_id = txn_id
        found = clients[1].request(FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})
        self.coordinator = clients[found["node_id"]]
        body = init_pid(self.coordinator, txn_id)
        assert body["error_code"] == NO_ERROR
        self.pid, self.epoch = body["producer_id"], body["producer_epoch"]
        self.seq: Dict[int, int] = {}

    def add(self, *partitions: int, version: int = 3) -> Dict[int, int]:
        body = {"transactional_id": self.txn_id, "producer_id": self.pid, "producer_epoch": self.epoch,
                "topics": [{"name": "t", "partitions": list(partitions)}]}
        result = self.coordinator.request(ADD_PARTITIONS_TO_TXN, version, body)["results"][0]
        return {p["partition_index"]: p["partition_error_code"] for p in result["results_by_partition"]}

    def send(self, partition: int, vals: List[bytes]) -> Dict[str, Any]:
        seq = self.seq.get(partition, 0)
        result = produce(self.clients.leader("t", partition),
                         batch(vals, producer_id=self.pid, epoch=self.epoch, seq=seq, transactional=True),
                         partition=partition, txn=self.txn_id)
        if result["error_code"] == NO_ERROR:
            self.seq[partition] = seq + len(vals)
        return result

    def end(self, commit: bool, version: int = 3) -> int:
        body = {"transactional_id": self.txn_id, "producer_id": self.pid, "producer_epoch": self.epoch,
                "committed": commit}
        code: int = self.coordinator.request(END_TXN, version, body)["error_code"]
        return code


def test_commit_writes_markers_and_releases_the_lso(cluster: MockCluster, clients: Clients) -> None:
    txn = Txn(clients, "tx-commit")
    assert cluster.transaction_state("tx-commit") == "Empty"
    assert txn.add(0, 1) == {0: NO_ERROR, 1: NO_ERROR}
    assert cluster.transaction_state("tx-commit") == "Ongoing"
    plain = produce(clients[1], batch([b"plain"]))  # before the transaction's data: stable
    assert txn.send(0, [b"a", b"b"])["base_offset"] == 1
    assert txn.send(1, [b"c"])["base_offset"] == 0
    leader0 = clients.leader("t", 0)
    assert cluster.last_stable_offset("t", 0) == 1 and cluster.high_watermark("t", 0) == 3
    committed_view = fetch(leader0, 0, isolation=1)
    assert [b.base_offset for b in read_batches(committed_view["records"])] == [plain["base_offset"]]
    assert committed_view["last_stable_offset"] == 1
    assert list_offset(leader0, -1, isolation=1)["offset"] == 1
    assert list_offset(leader0, -1)["offset"] == 3
    assert txn.end(commit=True) == NO_ERROR
    assert cluster.transaction_state("tx-commit") == "CompleteCommit"
    assert cluster.high_watermark("t", 0) == 4 and cluster.last_stable_offset("t", 0) == 4
    records = cluster.records("t", 0, include_control=True)
    assert [(r.value, r.is_transactional, r.is_control, r.control_type) for r in records] == [
        (b"plain", False, False, None), (b"a", True, False, None), (b"b", True, False, None),
        (records[3].value, True, True, 1)]
    assert [r.value for r in cluster.records("t", 0)] == [b"plain", b"a", b"b"]
    view = fetch(leader0, 0, isolation=1)
    assert view["aborted_transactions"] == []
    assert sum(b.record_count for b in read_batches(view["records"])) == 4
    # a retried EndTxn(commit) is fine; an abort now is not
    assert txn.end(commit=True) == NO_ERROR
    assert txn.end(commit=False) == InvalidTxnStateError.code


def test_abort_is_listed_for_read_committed_consumers(cluster: MockCluster, clients: Clients) -> None:
    txn = Txn(clients, "tx-abort")
    assert txn.add(0) == {0: NO_ERROR}
    txn.send(0, [b"x", b"y"])
    assert txn.end(commit=False) == NO_ERROR
    produce(clients[1], batch([b"after"]))
    leader = clients.leader("t", 0)
    view = fetch(leader, 0, isolation=1)
    assert view["aborted_transactions"] == [{"producer_id": txn.pid, "first_offset": 0}]
    assert fetch(leader, 0)["aborted_transactions"] is None
    # past the aborted range there is nothing to report
    assert fetch(leader, 3, isolation=1)["aborted_transactions"] == []
    markers = [r for r in cluster.records("t", 0, include_control=True) if r.is_control]
    assert [(m.offset, m.control_type, m.producer_id) for m in markers] == [(2, 0, txn.pid)]
    # the next transaction of the same producer continues its sequence
    assert txn.add(0) == {0: NO_ERROR}
    assert txn.send(0, [b"z"])["error_code"] == NO_ERROR


def test_transactional_produce_needs_add_partitions(clients: Clients) -> None:
    txn = Txn(clients, "tx-strict")
    assert txn.send(2, [b"x"])["error_code"] == InvalidTxnStateError.code
    assert txn.add(2) == {2: NO_ERROR}
    assert txn.send(2, [b"x"])["error_code"] == NO_ERROR
    result = produce(clients.leader("t", 2), batch([b"y"], producer_id=txn.pid, epoch=0, seq=1, transactional=True),
                     partition=2, txn=None)
    assert result["error_code"] == TransactionalIdAuthorizationFailedError.code


def test_init_producer_id_fences_the_old_epoch(cluster: MockCluster, clients: Clients) -> None:
    old = Txn(clients, "tx-fence")
    assert old.add(0) == {0: NO_ERROR}
    old.send(0, [b"zombie"])
    new = Txn(clients, "tx-fence")
    assert (new.pid, new.epoch) == (old.pid, old.epoch + 2)
    # the ongoing transaction was aborted, with a marker of a fencing epoch (as Apache Kafka: old + 1)
    assert cluster.transaction_state("tx-fence") == "Empty"
    assert [(r.control_type, r.producer_epoch) for r in cluster.records("t", 0, include_control=True)
            if r.is_control] == [(0, old.epoch + 1)]
    assert old.add(1, version=3) == {1: ProducerFencedError.code}
    assert old.add(1, version=1) == {1: InvalidProducerEpochError.code}
    assert old.end(commit=True, version=3) == ProducerFencedError.code
    assert old.send(0, [b"late"])["error_code"] == InvalidProducerEpochError.code
    unknown = dict(old.__dict__)
    old.pid = 999999
    assert old.add(1) == {1: InvalidProducerIdMappingError.code}
    old.__dict__.update(unknown)
    # InitProducerId v3+ with a stale producer id and epoch is fenced too
    assert init_pid(new.coordinator, "tx-fence", producer_id=old.pid, epoch=old.epoch)["error_code"] == (
        ProducerFencedError.code
    )


def test_transaction_apis_need_the_coordinator(clients: Clients) -> None:
    txn = Txn(clients, "tx-coord")
    node = next(i for i in (1, 2, 3) if clients[i] is not txn.coordinator)
    assert init_pid(clients[node], "tx-coord")["error_code"] == NotCoordinatorError.code
    txn.coordinator, saved = clients[node], txn.coordinator
    assert txn.add(0) == {0: NotCoordinatorError.code}
    assert txn.end(commit=True) == NotCoordinatorError.code
    txn.coordinator = saved
    assert init_pid(saved, "tx-coord", timeout_ms=10 ** 9)["error_code"] == InvalidTransactionTimeoutError.code
    assert init_pid(saved, "")["error_code"] == InvalidRequestError.code
    assert txn.add(0, 99) == {0: OperationNotAttemptedError.code, 99: UnknownTopicOrPartitionError.code}


def test_offsets_in_a_transaction(cluster: MockCluster, clients: Clients) -> None:
    group = "consumers"
    for commit in (False, True):
        txn = Txn(clients, f"tx-offsets-{commit}")
        body = {"transactional_id": txn.txn_id, "producer_id": txn.pid, "producer_epoch": txn.epoch,
                "group_id": group}
        assert txn.coordinator.request(ADD_OFFSETS_TO_TXN, 3, body)["error_code"] == NO_ERROR
        node = clients[1].request(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["node_id"]
        commit_body = {"transactional_id": txn.txn_id, "group_id": group, "producer_id": txn.pid,
                       "producer_epoch": txn.epoch, "topics": [{"name": "t", "partitions": [
                           {"partition_index": 3, "committed_offset": 10 + commit, "committed_metadata": None}]}]}
        response = clients[node].request(TXN_OFFSET_COMMIT, 3, commit_body)
        assert response["topics"][0]["partitions"][0]["error_code"] == NO_ERROR
        assert cluster.committed_offsets(group) == {}  # pending until the transaction commits
        assert txn.end(commit) == NO_ERROR
        assert cluster.committed_offsets(group) == ({("t", 3): 11} if commit else {})
        if commit:
            # after the transaction a TxnOffsetCommit is refused until offsets are added again
            response = clients[node].request(TXN_OFFSET_COMMIT, 3, commit_body)
            assert response["topics"][0]["partitions"][0]["error_code"] == InvalidTxnStateError.code


def test_transaction_timeout_aborts_and_fences() -> None:
    clock = FakeClock()
    with MockCluster(1, clock=clock) as cluster:
        cluster.create_topic("t", 1)
        clients = Clients(cluster)
        try:
            txn = Txn(clients, "tx-slow")
            txn.coordinator.request(INIT_PRODUCER_ID, 4, {"transactional_id": "tx-slow", "transaction_timeout_ms": 100,
                                                          "producer_id": txn.pid, "producer_epoch": txn.epoch})
            txn.epoch += 1
            txn.add(0)
            txn.send(0, [b"a"])
            clock.advance(101)
            assert txn.end(commit=True) == ProducerFencedError.code
            assert cluster.transaction_state("tx-slow") == "CompleteAbort"
            assert cluster.last_stable_offset("t", 0) == cluster.high_watermark("t", 0) == 2
        finally:
            clients.close()



@pytest.mark.parametrize("reader", ["fetch", "list_offsets"])
def test_a_read_committed_reader_gets_a_timed_out_transaction_aborted(reader: str) -> None:
    """As Apache Kafka's coordinator aborts a timed-out transaction by itself, read_committed consumers do not
    wait for its producer to come back: a read_committed Fetch or ListOffsets aborts it (fencing epoch)."""
    clock = FakeClock()
    with MockCluster(1, clock=clock) as cluster:
        cluster.create_topic("t", 1)
        clients = Clients(cluster)
        try:
            txn = Txn(clients, "tx-left")
            txn.coordinator.request(INIT_PRODUCER_ID, 4, {"transactional_id": "tx-left", "transaction_timeout_ms": 100,
                                                          "producer_id": txn.pid, "producer_epoch": txn.epoch})
            txn.epoch += 1
            txn.add(0)
            txn.send(0, [b"a"])
            leader = clients.leader("t", 0)
            assert list_offset(leader, -1, isolation=1)["offset"] == 0
            clock.advance(101)
            if reader == "fetch":
                view = fetch(leader, 0, isolation=1)
                assert (view["last_stable_offset"], view["high_watermark"]) == (2, 2)
            else:
                assert list_offset(leader, -1, isolation=1)["offset"] == 2
            assert cluster.transaction_state("tx-left") == "CompleteAbort"
            markers = [r for r in cluster.records("t", 0, include_control=True) if r.is_control]
            assert [(m.control_type, m.producer_epoch) for m in markers] == [(0, txn.epoch + 1)]
            assert txn.end(commit=True) == ProducerFencedError.code
        finally:
            clients.close()


def test_txn_offset_commit_to_a_group_without_members() -> None:
    """As Apache Kafka answers for a group without members: generation -1 is accepted whatever the member id;
    a generation is ILLEGAL_GENERATION while the group does not exist, UNKNOWN_MEMBER_ID once it does."""
    with MockCluster(1) as cluster:
        cluster.create_topic("t", 1)
        clients = Clients(cluster)
        try:
            txn = Txn(clients, "tx-group")

            def commit(generation: int, member: str) -> int:
                body = {"transactional_id": txn.txn_id, "producer_id": txn.pid, "producer_epoch": txn.epoch,
                        "group_id": "g"}
                assert txn.coordinator.request(ADD_OFFSETS_TO_TXN, 3, body)["error_code"] == NO_ERROR
                response = txn.coordinator.request(TXN_OFFSET_COMMIT, 3, dict(
                    body, generation_id=generation, member_id=member, group_instance_id=None,
                    topics=[{"name": "t", "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": None}]}]))
                code: int = response["topics"][0]["partitions"][0]["error_code"]
                assert txn.end(commit=code == NO_ERROR) == NO_ERROR
                return code

            assert commit(3, "m-1") == IllegalGenerationError.code
            assert cluster.committed_offsets("g") == {}
            assert commit(-1, "m-1") == NO_ERROR
            assert cluster.committed_offsets("g") == {("t", 0): 5}
            assert commit(3, "m-1") == UnknownMemberIdError.code
            assert commit(0, "") == UnknownMemberIdError.code
        finally:
            clients.close()

def test_injected_transaction_errors(cluster: MockCluster, clients: Clients) -> None:
    cluster.inject_errors("init_producer_id", [CoordinatorNotAvailableError.code])
    assert init_pid(clients[1])["error_code"] == CoordinatorNotAvailableError.code
    txn = Txn(clients, "tx-inject")
    cluster.inject_errors("add_partitions_to_txn", [ConcurrentTransactionsError.code])
    assert txn.add(0, 1) == {0: ConcurrentTransactionsError.code, 1: OperationNotAttemptedError.code}
    assert txn.add(0) == {0: NO_ERROR}
    cluster.inject_errors("end_txn", [ConcurrentTransactionsError.code])
    assert txn.end(commit=True) == ConcurrentTransactionsError.code
    assert txn.end(commit=True) == NO_ERROR
