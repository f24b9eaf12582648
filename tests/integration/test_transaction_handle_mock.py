"""kproducer.producer.transaction_handle on the MockCluster: a transaction written by one producer and
ended by another (issue 14), read back with kafka-python as a read_committed consumer."""
from __future__ import annotations

from typing import Iterator

import pytest
from readback import consume

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

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TOPIC = "handed"


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(1) as c:
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
