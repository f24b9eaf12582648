"""kproducer.producer.transaction_handle on the MockCluster: a transaction written by one producer and
ended by another (issue 14), read back with kafka-python as a read_committed consumer."""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from kproducer import Producer, TransactionHandle
from kproducer.errors import ProducerFencedError, TransactionError
from kproducer.mock import MockCluster
from kproducer.producer.transaction_handle import (
    abort_transaction,
    abort_transactional_id,
    commit_transaction,
    committed_offsets,
    prepare_transaction,
    resume_transaction,
)
from tests.readback import consume

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TOPIC = "handed"


@pytest.fixture(params=[0, 2], ids=["tv0", "tv2"])
def cluster(request: Any) -> Iterator[MockCluster]:
    """transaction.version 0 (the writer speaks transactions v1) and 2 (v2: the writer's transactions bump the
    epoch at every EndTxn; a resumed transaction is still ended with EndTxn v3, the version-1 rules)."""
    with MockCluster(1, transaction_version=request.param) as c:
        c.create_topic(TOPIC, partitions=2)
        yield c


def _write(cluster: MockCluster, tid: str, values: range, group: str = "") -> TransactionHandle:
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=tid, linger_ms=1)
    try:
        p.init_transactions(10)
        p.begin_transaction()
        for v in values:
            p.send(TOPIC, str(v).encode(), partition=v % 2)
        if group:
            p.send_offsets_to_transaction({(TOPIC, 0): 5}, group, timeout=10)
        return prepare_transaction(p, 10)
    finally:
        p.close(5)  # does not abort a transaction handed over


def _committed(cluster: MockCluster) -> list:  # type: ignore[type-arg]
    got = consume(cluster.bootstrap_servers, TOPIC, [0, 1], 0, timeout=1, isolation_level="read_committed")
    return sorted(int(r.value) for r in got)


def test_commit_by_another_producer_is_idempotent(cluster: MockCluster) -> None:
    handle = _write(cluster, "w-0", range(10), group="progress")
    assert handle.transactional_id == "w-0" and handle.partitions == ((TOPIC, 0), (TOPIC, 1))
    assert cluster.transaction_state("w-0") == "Ongoing"
    assert _committed(cluster) == []
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    commit_transaction(TransactionHandle.from_dict(handle.to_dict()), config)
    commit_transaction(handle, config)  # a retry after success
    assert cluster.transaction_state("w-0") == "CompleteCommit"
    assert _committed(cluster) == list(range(10))
    assert cluster.committed_offsets("progress") == {(TOPIC, 0): 5}
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="reader") as reader:
        reader.init_transactions(10)
        assert committed_offsets(reader, "progress", 10) == {(TOPIC, 0): (5, "")}
        assert committed_offsets(reader, "nobody", 10) == {}


def test_abort_and_fencing(cluster: MockCluster) -> None:
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    aborted = _write(cluster, "w-1", range(4))
    assert abort_transaction(aborted, config) is True
    assert cluster.transaction_state("w-1") == "CompleteAbort"

    fenced = _write(cluster, "w-2", range(4))
    abort_transactional_id("w-2", config)  # InitProducerId: aborts the open transaction, bumps the epoch
    assert cluster.transaction_state("w-2") != "Ongoing"
    with pytest.raises(ProducerFencedError):
        commit_transaction(fenced, config)
    assert abort_transaction(fenced, config) is False  # already ended by the newer epoch
    assert _committed(cluster) == []


def test_misuse_is_refused(cluster: MockCluster) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="w-3") as p:
        p.init_transactions(10)
        with pytest.raises(TransactionError, match="only an open transaction can be handed over"):
            prepare_transaction(p, 10)
    handle = _write(cluster, "w-4", range(2))
    resumed = resume_transaction(handle, {"bootstrap.servers": cluster.bootstrap_servers})
    try:
        with pytest.raises(TransactionError, match="needs a fresh producer"):
            resumed._transactions().resume_transaction(1, 1, [])
    finally:
        resumed.abort_transaction(10)
        resumed.close(5)
    with pytest.raises(ValueError, match="not a transaction handle"):
        TransactionHandle.from_dict({"producer_id": 1})


def test_committed_offsets_waits_for_unstable_offsets_then_reads_the_last_committed(cluster: MockCluster) -> None:
    """UNSTABLE_OFFSET_COMMIT (a transaction with offsets of the group is completing) is retried; when it
    persists past stable_wait_ms, the offsets are read without require_stable."""
    from kproducer.producer.transaction_handle import OffsetFetchHandler
    from kproducer.protocol.errors import UnstableOffsetCommitError

    handle = _write(cluster, "w-5", range(2), group="progress-5")
    commit_transaction(handle, {"bootstrap.servers": cluster.bootstrap_servers})
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="reader-5", retry_backoff_ms=10) as p:
        p.init_transactions(10)
        cluster.inject_errors("offset_fetch", [UnstableOffsetCommitError.code] * 3)
        assert committed_offsets(p, "progress-5", 10) == {(TOPIC, 0): (5, "")}
        assert cluster.pending_errors("offset_fetch") == []
        for wait_ms, stable_at_the_end in ((60_000.0, True), (0.0, False)):
            cluster.inject_errors("offset_fetch", [UnstableOffsetCommitError.code])
            txn = p._transactions()
            handler = OffsetFetchHandler(txn, "progress-5", stable_wait_ms=wait_ms)
            result = txn.submit(handler)
            p._sender.wakeup()
            result.wait(10)
            assert handler.offsets == {(TOPIC, 0): (5, "")}
            assert handler.require_stable is stable_at_the_end



def test_a_transaction_written_after_others_is_handed_over_with_its_current_epoch(cluster: MockCluster) -> None:
    """The writer commits a transaction first, then hands the next one over. Under transactions v2 that commit's
    EndTxn v5 bumped the epoch, and the handle carries the bumped one; the resumed producer ends the transaction
    with EndTxn v3 (no bump: a repeated commit with the handle's epoch succeeds) on both versions."""
    v2 = cluster.transaction_version >= 2
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="w-6", linger_ms=1)
    try:
        p.init_transactions(10)
        first_epoch = p._transactions().producer_epoch
        p.begin_transaction()
        p.send(TOPIC, b"100", partition=0)
        p.commit_transaction(10)
        p.begin_transaction()
        p.send(TOPIC, b"101", partition=1)
        handle = prepare_transaction(p, 10)
    finally:
        p.close(5)
    assert handle.epoch == first_epoch + (1 if v2 else 0)
    cluster.reset_request_log()
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    commit_transaction(handle, config)
    commit_transaction(handle, config)
    assert [e.version for e in cluster.request_log if e.api == "end_txn"] == [3, 3]
    assert not any(e.api == "init_producer_id" for e in cluster.request_log), "no epoch bump"
    assert cluster.producer_id_and_epoch("w-6") == (handle.producer_id, handle.epoch)
    assert _committed(cluster) == [100, 101]
