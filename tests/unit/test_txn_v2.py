"""Issue 28 item 7: transactions v2 (KIP-890 part 2) in the client, without a network: the transaction manager and
the sender on a fake clock and a scripted broker (kproducer.testing's Harness) whose ApiVersions answers finalize
``transaction.version`` as a test sets it, and a small scripted transaction coordinator that bumps the epoch at
every EndTxn v5 as Apache Kafka 4.1 does.

What is pinned (Java 4.1's TransactionManager / Sender, ``isTransactionV2Enabled``):

* the version is the cluster's finalized ``transaction.version`` (>= 2: v2), read when init_transactions()
  completes and when a transaction starts to end; a transaction ends with the version it started with, and the
  switch from v1 to v2 bumps the epoch (InitProducerId with the current id and epoch) after that transaction;
* v2: no AddPartitionsToTxn (a partition joins at its first send, Produce v12), no AddOffsetsToTxn
  (TxnOffsetCommit v5), EndTxn v5 whose answer's producer id and epoch the producer adopts (sequences from 0), no
  client-side epoch bumps; v1 otherwise (AddPartitionsToTxn, Produce v11, EndTxn v3);
* the error tables of Produce and EndTxn under v2;
* a transaction resumed from a TransactionHandle ends with EndTxn v3 (the version-1 rules) whatever the cluster.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import pytest

from kproducer.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    NotEnoughReplicasError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionAbortableError,
    UnknownProducerIdError,
)
from kproducer.producer.future import FutureRecordMetadata
from kproducer.producer.transaction_manager import State, TransactionalRequestResult, TransactionManager
from kproducer.protocol import messages as m
from kproducer.protocol.messages.api_versions import TRANSACTION_VERSION_FEATURE
from tests.unit.scripted import HOLD, Harness, SentRequest
from tests.unit.test_txn_correctness import BROKERS, TOPIC, add_partitions, find_coordinator

# --------------------------------------------------------------------------------------------
# a scripted cluster: finalized features in ApiVersions, and a transaction coordinator on broker 1


class Cluster:
    """What the scripted brokers answer: ``level`` is the finalized transaction.version (every new connection's
    ApiVersions v3+ reports it, with ``features_epoch``); the coordinator keeps one producer id and epoch and
    bumps the epoch at InitProducerId and at every EndTxn v5 (answering the new ones), as Apache Kafka does."""

    def __init__(self, h: Harness, level: int) -> None:
        self.h = h
        self.level = level
        self.features_epoch = 1
        self.producer_id = 4000
        self.epoch = -1
        self.end_txn_errors: List[int] = []
        self.exhaust_at_next_end = False
        self._api_versions = h.selector.handlers[m.API_VERSIONS.key]
        sel = h.selector
        sel.handlers[m.API_VERSIONS.key] = self.api_versions
        sel.handlers[m.FIND_COORDINATOR.key] = find_coordinator
        sel.handlers[m.ADD_PARTITIONS_TO_TXN.key] = add_partitions()
        sel.handlers[m.INIT_PRODUCER_ID.key] = self.init_producer_id
        sel.handlers[m.END_TXN.key] = self.end_txn
        sel.handlers[m.ADD_OFFSETS_TO_TXN.key] = lambda req: {"throttle_time_ms": 0, "error_code": 0}
        sel.handlers[m.TXN_OFFSET_COMMIT.key] = txn_offset_commit()

    def set_level(self, level: int) -> None:
        """The feature is finalized at another level: connections made from now on hear of it."""
        self.level = level
        self.features_epoch += 1

    def api_versions(self, req: SentRequest) -> Any:
        body = self._api_versions(req)
        if isinstance(body, dict) and req.version >= 3:
            body = dict(body, finalized_features_epoch=self.features_epoch, finalized_features=[
                {"name": TRANSACTION_VERSION_FEATURE, "min_version_level": self.level,
                 "max_version_level": self.level}] if self.level else [])
        return body

    def init_producer_id(self, req: SentRequest) -> Dict[str, Any]:
        if req.body["producer_id"] >= 0:
            assert (req.body["producer_id"], req.body["producer_epoch"]) == (self.producer_id, self.epoch), \
                "an epoch bump carries the current producer id and epoch"
        self.epoch += 1
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": self.producer_id, "producer_epoch": self.epoch}

    def end_txn(self, req: SentRequest) -> Dict[str, Any]:
        if self.end_txn_errors:
            return {"throttle_time_ms": 0, "error_code": self.end_txn_errors.pop(0)}
        if req.version < 5:
            return {"throttle_time_ms": 0, "error_code": 0}
        if self.exhaust_at_next_end:
            self.producer_id, self.epoch = self.producer_id + 1, 0
            self.exhaust_at_next_end = False
        else:
            self.epoch += 1
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": self.producer_id, "producer_epoch": self.epoch}


def txn_offset_commit(code: int = 0) -> Callable[[SentRequest], Dict[str, Any]]:
    return lambda req: {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": code}
                                           for p in t["partitions"]]} for t in req.body["topics"]]}


def cluster(level: int = 2, init_producer_id_max: Optional[int] = None, **settings: Any) -> Cluster:
    settings.setdefault("linger_ms", 0)
    h = Harness(topics={TOPIC: [1, 2]}, brokers=BROKERS, transactional_id="tx", enable_idempotence=True,
                **settings)
    if init_producer_id_max is not None:
        h.selector.api_versions[m.INIT_PRODUCER_ID.key] = (0, init_producer_id_max)
    c = Cluster(h, level)
    h.metadata.add_topic(TOPIC)

    def ready() -> bool:
        if h.metadata.cluster.partition_count(TOPIC) is None:
            return False
        for node in BROKERS:
            h.client.ready(node, h.now)
        return all(h.client.is_ready(node, h.now) for node in BROKERS)

    h.run_until(ready, what="connected")
    return c


def tm(c: Cluster) -> TransactionManager:
    assert c.h.txn is not None
    return c.h.txn


def drive(c: Cluster, done: Callable[[], bool], steps: int = 200) -> None:
    """Run the sender, stepping the fake clock 50 ms at a time (at most ``steps``), until ``done()``."""
    for _ in range(steps):
        if done():
            return
        c.h.run(3)
        c.h.advance(50)
    assert done(), f"not reached after {steps} steps"


def finish(c: Cluster, result: TransactionalRequestResult) -> None:
    drive(c, result.is_done)
    result.wait(0)


def init(c: Cluster) -> None:
    finish(c, tm(c).init_transactions())
    assert tm(c).state is State.READY


def send(c: Cluster, partition: int, value: bytes = b"v") -> FutureRecordMetadata:
    tm(c).check_can_send((TOPIC, partition))  # as Producer.send() does
    return c.h.send(TOPIC, value, partition=partition)


def sent(c: Cluster, api: Any) -> List[SentRequest]:
    return c.h.selector.sent(api)


def produce_batches(c: Cluster) -> List[Any]:
    """(version, partition, producer id, epoch, base sequence, values) of every batch sent, in order."""
    out = []
    for req in sent(c, m.PRODUCE):
        for (_t, p), b in req.batches().items():
            out.append((req.version, p, b.producer_id, b.producer_epoch, b.base_sequence,
                        [r.value for r in b.records]))
    return out


def commit(c: Cluster) -> None:
    finish(c, tm(c).begin_commit())
    assert tm(c).state is State.READY


# --------------------------------------------------------------------------------------------
# the protocol of a v2 transaction


def test_a_v2_transaction_adds_partitions_by_producing_and_adopts_the_epoch_end_txn_answers() -> None:
    c = cluster(level=2)
    init(c)
    assert tm(c).producer_id_and_epoch == (4000, 0)
    for n in range(3):
        tm(c).begin_transaction()
        futures = [send(c, p, b"%d-%d" % (n, p)) for p in (0, 1, 0)]
        commit(c)
        assert all(f.exception(0) is None for f in futures)
        assert tm(c).producer_id_and_epoch == (4000, n + 1), "EndTxn v5's answer is the producer's new epoch"
    assert sent(c, m.ADD_PARTITIONS_TO_TXN) == [], "v2: no AddPartitionsToTxn"
    assert [r.version for r in sent(c, m.END_TXN)] == [5, 5, 5]
    assert [(r.body["producer_epoch"], r.body["committed"]) for r in sent(c, m.END_TXN)] == \
        [(0, True), (1, True), (2, True)]
    batches = produce_batches(c)
    assert {b[0] for b in batches} == {12}, "transactional Produce v12"
    # each transaction numbers its batches from 0 under its own epoch
    assert sorted((epoch, p, seq, len(vals)) for _v, p, _pid, epoch, seq, vals in batches) == [
        (n, p, 0, 2 - p) for n in range(3) for p in (0, 1)]
    assert len(sent(c, m.INIT_PRODUCER_ID)) == 1, "no client-side epoch bump"


@pytest.mark.parametrize("level", [0, 1])
def test_below_level_2_the_producer_speaks_v1(level: int) -> None:
    c = cluster(level=level)
    init(c)
    for _ in range(2):
        tm(c).begin_transaction()
        f = send(c, 1)
        commit(c)
        assert f.exception(0) is None
    assert tm(c).producer_id_and_epoch == (4000, 0), "v1: the epoch stays"
    assert len(sent(c, m.ADD_PARTITIONS_TO_TXN)) == 2
    assert [r.version for r in sent(c, m.END_TXN)] == [3, 3]
    assert {b[0] for b in produce_batches(c)} == {11}
    assert [b[4] for b in produce_batches(c)] == [0, 1], "v1: the sequence goes on across transactions"


def test_v2_offsets_go_straight_to_the_group_coordinator_with_txn_offset_commit_v5() -> None:
    c = cluster(level=2)
    init(c)
    tm(c).begin_transaction()
    finish(c, tm(c).send_offsets_to_transaction({(TOPIC, 0): 7}, "group-a"))
    assert sent(c, m.ADD_OFFSETS_TO_TXN) == []
    (offsets,) = sent(c, m.TXN_OFFSET_COMMIT)
    assert offsets.version == 5 and offsets.body["producer_epoch"] == 0
    commit(c)  # offsets only: the transaction was started, so EndTxn is sent
    assert [(r.version, r.body["committed"]) for r in sent(c, m.END_TXN)] == [(5, True)]
    assert tm(c).producer_epoch == 1


def test_v1_offsets_use_add_offsets_to_txn_and_txn_offset_commit_v3() -> None:
    c = cluster(level=1)
    init(c)
    tm(c).begin_transaction()
    finish(c, tm(c).send_offsets_to_transaction({(TOPIC, 0): 7}, "group-a"))
    assert len(sent(c, m.ADD_OFFSETS_TO_TXN)) == 1
    assert [r.version for r in sent(c, m.TXN_OFFSET_COMMIT)] == [3]


def test_an_empty_v2_transaction_sends_no_end_txn() -> None:
    c = cluster(level=2)
    init(c)
    tm(c).begin_transaction()
    commit(c)
    tm(c).begin_transaction()
    finish(c, tm(c).begin_abort())
    assert sent(c, m.END_TXN) == [] and tm(c).producer_epoch == 0


def test_an_exhausted_epoch_continues_under_the_new_producer_id_end_txn_answers() -> None:
    c = cluster(level=2)
    init(c)
    tm(c).begin_transaction()
    send(c, 0, b"a")
    c.exhaust_at_next_end = True
    commit(c)
    assert tm(c).producer_id_and_epoch == (4001, 0)
    tm(c).begin_transaction()
    f = send(c, 0, b"b")
    commit(c)
    assert f.exception(0) is None
    assert produce_batches(c)[-1][2:5] == (4001, 0, 0), "the new producer id, epoch 0, sequence 0"


# --------------------------------------------------------------------------------------------
# aborts and errors: no client-side epoch bumps under v2


def test_a_v2_abort_after_a_failed_record_bumps_nothing_itself_and_the_next_transaction_starts_at_0() -> None:
    c = cluster(level=2)
    init(c)
    tm(c).begin_transaction()
    ok = send(c, 1)
    drive(c, ok.done)
    c.h.selector.script(m.PRODUCE, {(TOPIC, 0): TopicAuthorizationFailedError.code})
    bad = send(c, 0)
    drive(c, bad.done)
    assert tm(c).state is State.ABORTABLE_ERROR and not tm(c).epoch_bump_required
    finish(c, tm(c).begin_abort())
    assert [(r.version, r.body["committed"]) for r in sent(c, m.END_TXN)] == [(5, False)]
    assert len(sent(c, m.INIT_PRODUCER_ID)) == 1, "the EndTxn bumped the epoch: no InitProducerId"
    assert tm(c).producer_id_and_epoch == (4000, 1)
    tm(c).begin_transaction()
    again = send(c, 1)
    commit(c)
    assert again.exception(0) is None and produce_batches(c)[-1][3:5] == (1, 0)


def test_a_v2_abort_fails_a_batch_awaiting_its_retry_at_once() -> None:
    """The EndTxn v5 epoch bump fences a late write of the old epoch: the batch is not sent again before
    EndTxn (as the v1 abort with an epoch bump does), and the next transaction starts at sequence 0."""
    c = cluster(level=2, retry_backoff_ms=1000, retry_backoff_max_ms=1000)
    init(c)
    tm(c).begin_transaction()
    c.h.selector.script(m.PRODUCE, {(TOPIC, 0): NotEnoughReplicasError.code})
    b = send(c, 0, b"B")
    c.h.run_until(lambda: len(sent(c, m.PRODUCE)) == 1 and not c.h.client.has_in_flight(), what="B refused")
    abort = tm(c).begin_abort()
    finish(c, abort)
    assert b.done() and b.exception(0) is not None
    assert len(sent(c, m.PRODUCE)) == 1 and [r.version for r in sent(c, m.END_TXN)] == [5]
    assert len(sent(c, m.INIT_PRODUCER_ID)) == 1


def test_v2_a_batch_whose_outcome_is_unknown_is_abortable_even_where_init_producer_id_cannot_bump() -> None:
    """Java's canHandleAbortableError: coordinator bumps (InitProducerId v3+) or transactions v2. A batch that
    timed out in flight makes the transaction abortable (not fatal: EndTxn v5 bumps the epoch) and no
    InitProducerId bump follows the abort."""
    c = cluster(level=2, init_producer_id_max=2, request_timeout_ms=1000, delivery_timeout_ms=1500)
    init(c)
    tm(c).begin_transaction()
    c.h.selector.script(m.PRODUCE, HOLD, HOLD)  # (broker 2, not the coordinator)
    lost = send(c, 1)
    drive(c, lost.done)
    assert lost.exception(0) is not None
    assert tm(c).state is State.ABORTABLE_ERROR
    finish(c, tm(c).begin_abort())
    assert [r.version for r in sent(c, m.END_TXN)] == [5] and len(sent(c, m.INIT_PRODUCER_ID)) == 1
    assert tm(c).producer_epoch == 1


@pytest.mark.parametrize("error, state", [
    (InvalidProducerIdMappingError, State.FATAL_ERROR),
    (InvalidProducerEpochError, State.ABORTABLE_ERROR),
    (TransactionAbortableError, State.ABORTABLE_ERROR),
    (InvalidTxnStateError, State.ABORTABLE_ERROR),
    (OutOfOrderSequenceNumberError, State.ABORTABLE_ERROR),
    (ProducerFencedError, State.FATAL_ERROR),
], ids=lambda x: getattr(x, "__name__", str(x)))
def test_v2_produce_errors(error: Any, state: State) -> None:
    """Java 4.1's maybeTransitionToErrorState for a failed transactional batch under v2."""
    c = cluster(level=2)
    init(c)
    tm(c).begin_transaction()
    c.h.selector.script(m.PRODUCE, {(TOPIC, 0): error.code})
    f = send(c, 0)
    drive(c, f.done)
    assert isinstance(f.exception(0), error)
    assert tm(c).state is state
    if state is State.ABORTABLE_ERROR:
        finish(c, tm(c).begin_abort())
        assert [r.version for r in sent(c, m.END_TXN)] == [5] and len(sent(c, m.INIT_PRODUCER_ID)) == 1


def test_v2_concurrent_transactions_on_produce_is_retried() -> None:
    """The first Produce of a transaction may meet the previous one still writing its markers."""
    c = cluster(level=2, retry_backoff_ms=10)
    init(c)
    tm(c).begin_transaction()
    c.h.selector.script(m.PRODUCE, {(TOPIC, 0): ConcurrentTransactionsError.code},
                        {(TOPIC, 0): ConcurrentTransactionsError.code})
    f = send(c, 0)
    commit(c)
    assert f.exception(0) is None and len(sent(c, m.PRODUCE)) == 3


@pytest.mark.parametrize("commit_first", [True, False], ids=["commit", "abort"])
@pytest.mark.parametrize("error, on_commit, on_abort", [
    (ProducerFencedError, State.FATAL_ERROR, State.FATAL_ERROR),
    (InvalidProducerEpochError, State.FATAL_ERROR, State.FATAL_ERROR),
    (InvalidTxnStateError, State.FATAL_ERROR, State.FATAL_ERROR),
    (InvalidProducerIdMappingError, State.FATAL_ERROR, State.FATAL_ERROR),
    (TransactionAbortableError, State.ABORTABLE_ERROR, State.FATAL_ERROR),
    (UnknownProducerIdError, State.ABORTABLE_ERROR, None),
], ids=lambda x: getattr(x, "__name__", str(x)))
def test_v2_end_txn_errors(error: Any, on_commit: State, on_abort: Optional[State], commit_first: bool) -> None:
    """Java 4.1's EndTxnHandler: TRANSACTION_ABORTABLE on an abort is fatal (an abort cannot be aborted);
    UNKNOWN_PRODUCER_ID is abortable where the epoch can be bumped (v2 always); the rest is fatal."""
    c = cluster(level=2)
    init(c)
    tm(c).begin_transaction()
    f = send(c, 0)
    drive(c, f.done)
    c.end_txn_errors.append(error.code)
    result = tm(c).begin_commit() if commit_first else tm(c).begin_abort()
    drive(c, result.is_done)
    with pytest.raises(KafkaError):
        result.wait(0)
    expected = on_commit if commit_first else on_abort
    if expected is None:  # (Java: the abort fails with it; the transaction cannot become abortable while aborting)
        return
    assert tm(c).state is expected
    if expected is State.ABORTABLE_ERROR:
        finish(c, tm(c).begin_abort())
        assert tm(c).state is State.READY and tm(c).producer_epoch == 1


# --------------------------------------------------------------------------------------------
# which version, and when


def test_the_version_is_read_when_init_transactions_completes() -> None:
    c = cluster(level=2)
    assert not tm(c).is_transaction_v2(), "nothing is decided before init_transactions()"
    init(c)
    assert tm(c).is_transaction_v2()


def test_switching_to_v2_between_transactions_bumps_the_epoch_after_the_v1_transaction() -> None:
    """Java's maybeUpdateTransactionV2Enabled(false) in beginCompletingTransaction: the transaction that was
    open when the feature reached level 2 ends as it started (EndTxn v3), then InitProducerId with the current
    id and epoch fences the v1 epoch; the next transaction is v2."""
    c = cluster(level=1)
    init(c)
    tm(c).begin_transaction()
    first = send(c, 0, b"v1")
    drive(c, first.done)
    c.set_level(2)
    c.h.selector.kill_connection(2)  # broker 2's new connection reports the new level
    second = send(c, 1, b"v1-again")
    drive(c, second.done)
    assert c.h.client.finalized_features.transaction_version == 2
    commit(c)
    assert [r.version for r in sent(c, m.END_TXN)] == [3], "the v1 transaction ends as v1"
    bump = sent(c, m.INIT_PRODUCER_ID)[-1]
    assert (bump.body["producer_id"], bump.body["producer_epoch"]) == (4000, 0), "then the epoch bump"
    assert tm(c).producer_id_and_epoch == (4000, 1) and tm(c).is_transaction_v2()
    n_add = len(sent(c, m.ADD_PARTITIONS_TO_TXN))
    tm(c).begin_transaction()
    third = send(c, 0, b"v2")
    commit(c)
    assert third.exception(0) is None
    assert len(sent(c, m.ADD_PARTITIONS_TO_TXN)) == n_add and sent(c, m.END_TXN)[-1].version == 5
    assert produce_batches(c)[-1][0] == 12 and produce_batches(c)[-1][3:5] == (1, 0)
    assert tm(c).producer_epoch == 2


def test_a_v2_transaction_ends_as_v2_when_the_feature_goes_down_meanwhile_and_the_next_one_is_v1() -> None:
    c = cluster(level=2)
    init(c)
    tm(c).begin_transaction()
    first = send(c, 0)
    drive(c, first.done)
    c.set_level(1)
    c.h.selector.kill_connection(2)
    second = send(c, 1)
    drive(c, second.done)
    assert c.h.client.finalized_features.transaction_version == 1
    commit(c)
    assert [r.version for r in sent(c, m.END_TXN)] == [5] and [b[0] for b in produce_batches(c)] == [12, 12]
    assert tm(c).producer_epoch == 1 and not tm(c).is_transaction_v2()
    tm(c).begin_transaction()
    third = send(c, 0)
    commit(c)
    assert third.exception(0) is None
    assert sent(c, m.END_TXN)[-1].version == 3 and len(sent(c, m.ADD_PARTITIONS_TO_TXN)) == 1
    assert produce_batches(c)[-1][0] == 11 and len(sent(c, m.INIT_PRODUCER_ID)) == 1, "no bump going down"


def test_a_resumed_transaction_ends_with_end_txn_v3_and_no_epoch_bump() -> None:
    """TransactionHandle: the transaction is ended by id and epoch the version-1 way, on a v2 cluster too (a
    commit repeated with the same epoch succeeds; a fenced one is refused: docs/transactions.md)."""
    c = cluster(level=2)
    c.epoch = 5
    tm(c).resume_transaction(4000, 5, [(TOPIC, 0)])
    finish(c, tm(c).begin_commit())
    assert [(r.version, r.body["producer_epoch"]) for r in sent(c, m.END_TXN)] == [(3, 5)]
    c.h.run(5)
    assert sent(c, m.INIT_PRODUCER_ID) == [] and not tm(c).is_transaction_v2()


@pytest.mark.parametrize("level", [1, 2])
def test_transaction_abortable_answering_an_abort_is_fatal_under_both_versions(level: int) -> None:
    """Java 4.1's EndTxnHandler: an abort that fails with TRANSACTION_ABORTABLE cannot be aborted again. (It
    left the producer in ABORTING_TRANSACTION for good: no call could end it.)"""
    c = cluster(level=level)
    init(c)
    tm(c).begin_transaction()
    f = send(c, 0)
    drive(c, f.done)
    c.end_txn_errors.append(TransactionAbortableError.code)
    abort = tm(c).begin_abort()
    drive(c, abort.is_done)
    with pytest.raises(KafkaError, match="failed to abort"):
        abort.wait(0)
    assert tm(c).state is State.FATAL_ERROR
