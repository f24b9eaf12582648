"""Transactions of kproducer's Producer against Apache Kafka 4.1 (the shared 3-broker cluster, PLAINTEXT).

Every scenario is read back independently: kafka-python (and confluent-kafka) consumers with
``read_committed`` (Apache Kafka really hides aborted records and holds consumers at the last stable offset),
``read_uncommitted`` to prove the aborted records were written, raw Fetch for the control batches (markers
with their producer id and epoch), and confluent-kafka's ``committed()`` for group offsets.

The broker finalizes ``transaction.version`` 2 (KIP-890), but kproducer speaks EndTxn v3 / Produce v11 /
AddPartitionsToTxn v3, so every transaction here is a version-1 transaction: the epoch stays put across
transactions, and EndTxn answers once PrepareCommit/PrepareAbort is logged, before the markers are written
(so a read after commit_transaction() waits for the markers).

Tests taking the ``backend`` fixture run the same scenario on kproducer's MockCluster and on Apache Kafka
(the mock: EndTxn completes the transaction before it answers; no group members).
"""
from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import pytest

from kproducer import ConsumerGroupMetadata, Producer
from kproducer.errors import (
    IllegalGenerationError,
    InvalidProducerEpochError,
    ProducerFencedError,
    TransactionError,
    UnknownMemberIdError,
)
from kproducer.mock.wire_client import WireClient
from kproducer.producer.transaction_manager import CoordinatorKey, CoordinatorType, FencedTransactionError, State
from kproducer.protocol import messages as m
from tests.readback import consume, fetch_batches

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(300)]

WAIT = 60.0
COMMIT, ABORT = "COMMIT", "ABORT"


# --------------------------------------------------------------------------------------------
# helpers


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def txn_producer(bootstrap: str, transactional_id: str, **config: Any) -> Iterator[Producer]:
    config.setdefault("linger_ms", 5)
    config.setdefault("retry_backoff_ms", 20)
    config.setdefault("max_block_ms", 60000)
    producer = Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id, **config)
    try:
        yield producer
    finally:
        producer.close(30)


def by_partition(messages: Sequence[Any], partitions: Sequence[int]) -> Dict[int, List[bytes]]:
    """Values per partition in offset order; a record read twice shows up twice."""
    out: Dict[int, List[bytes]] = {p: [] for p in partitions}
    for msg in sorted(messages, key=lambda x: (x.partition, x.offset)):
        out[msg.partition].append(msg.value)
    return out


def read(bootstrap: str, topic: str, partitions: Sequence[int], expected: int, committed: bool) -> Dict[int, List[bytes]]:
    """kafka-python, from the beginning: ``expected`` records (then one more poll for unexpected ones)."""
    got = consume(bootstrap, topic, partitions, expected, timeout=WAIT,
                  isolation_level="read_committed" if committed else "read_uncommitted")
    return by_partition(got, partitions)


def read_confluent(bootstrap: str, topic: str, partitions: Sequence[int], expected: int) -> Dict[int, List[bytes]]:
    """confluent-kafka (librdkafka) with isolation.level=read_committed: ``expected`` records, then a few
    more polls in which an unexpected record would show up."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
        "isolation.level": "read_committed", "fetch.wait.max.ms": 50,
    })
    out: Dict[int, List[Tuple[int, bytes]]] = {p: [] for p in partitions}
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in partitions])
        deadline, extra = time.monotonic() + WAIT, 5
        while time.monotonic() < deadline and extra > 0:
            msg = consumer.poll(0.2)
            if sum(len(v) for v in out.values()) >= expected:
                extra -= 1
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return {p: [v for _o, v in sorted(recs)] for p, recs in out.items()}


def end_offsets(bootstrap: str, topic: str, partitions: Sequence[int]) -> Tuple[Dict[int, int], Dict[int, int]]:
    """(last stable offsets, high watermarks) from ListOffsets (kafka-python's end_offsets)."""
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                 isolation_level=isolation, request_timeout_ms=15000)
        try:
            ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        finally:
            consumer.close()
        out.append({tp.partition: offset for tp, offset in ends.items()})
    return out[0], out[1]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


def committed_offsets(bootstrap: str, group: str, partitions: Sequence[Tuple[str, int]],
                      stable: bool) -> Dict[Tuple[str, int], int]:
    """A group's committed offsets through confluent-kafka. ``stable``: read_committed, so librdkafka asks
    for stable offsets (KIP-447 require_stable) and waits while a transaction with offsets of the group
    completes; otherwise the last committed offsets, pending transactional ones left out."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "isolation.level": "read_committed" if stable else "read_uncommitted",
    })
    try:
        tps = [confluent_kafka.TopicPartition(t, p) for t, p in partitions]
        return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=WAIT) if tp.offset >= 0}
    finally:
        consumer.close()


class Backend:
    """A cluster a scenario runs on: the shared Apache Kafka cluster, or a MockCluster."""

    def __init__(self, name: str, bootstrap: str, create_topic: Callable[[str, int], None],
                 leader_address: Callable[[str, int], str]) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self._create_topic = create_topic
        self.leader_address = leader_address

    def topic(self, partitions: int) -> str:
        name = unique("tx")
        self._create_topic(name, partitions)
        return name

    def log(self, topic: str, partition: int) -> List[Tuple[Any, ...]]:
        """The partition's log read with raw Fetch from its leader: ("data", producer id, epoch, [values])
        per record batch and (COMMIT|ABORT, producer id, epoch) per control batch."""
        batches, _ = fetch_batches(self.leader_address(topic, partition), topic, partition)
        out: List[Tuple[Any, ...]] = []
        for b in batches:
            if b.is_control:
                (rec,) = b.records
                assert rec.key is not None
                out.append((COMMIT if rec.key[-1] == 1 else ABORT, b.producer_id, b.producer_epoch))
            else:
                out.append(("data", b.producer_id, b.producer_epoch, [r.value for r in b.records]))
        return out


def ak_backend(kafka: Any) -> Backend:
    return Backend("apache_kafka", kafka.bootstrap_servers,
                   lambda name, n: kafka.create_topic(name, n, 3),
                   lambda t, p: f"127.0.0.1:{kafka.port(kafka.leader(t, p))}")


@pytest.fixture
def ak(apache_kafka: Any) -> Backend:
    return ak_backend(apache_kafka)


@pytest.fixture(params=["mock", "apache_kafka"])
def backend(request: Any) -> Iterator[Backend]:
    """The same scenario on kproducer's MockCluster and on Apache Kafka."""
    if request.param == "apache_kafka":
        yield ak_backend(request.getfixturevalue("apache_kafka"))
        return
    from kproducer.testing import MockCluster

    with MockCluster(3) as cluster:
        def address(t: str, p: int) -> str:
            host, port = cluster.broker_address(cluster.leader(t, p))
            return f"{host}:{port}"
        yield Backend("mock", cluster.bootstrap_servers, lambda name, n: cluster.create_topic(name, n), address)


def flat(log: List[Tuple[Any, ...]]) -> List[Any]:
    """A log as values and markers: [b"v1", b"v2", "COMMIT", b"v3", "ABORT", ...]."""
    out: List[Any] = []
    for entry in log:
        out.extend(entry[3] if entry[0] == "data" else [entry[0]])
    return out


# --------------------------------------------------------------------------------------------
# which transaction protocol


def test_the_broker_offers_transactions_v2_and_kproducer_speaks_v1(apache_kafka: Any, ak: Backend) -> None:
    """Apache Kafka 4.1 finalizes transaction.version 2 and offers EndTxn v5 / Produce v12; kproducer
    negotiates EndTxn v3, AddPartitionsToTxn v3 and Produce v11, so the coordinator runs the transaction as
    version 1: the markers carry the producer's own epoch and the epoch stays put from one transaction to
    the next (version 2 bumps it at every EndTxn)."""
    host, port = apache_kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with WireClient(host, int(port)) as client:
        versions = client.request(m.API_VERSIONS, 3, {"client_software_name": "kproducer-tests",
                                                      "client_software_version": "1"})
    broker = {k["api_key"]: k["max_version"] for k in versions["api_keys"]}
    features = {f["name"]: f["max_version_level"] for f in versions["finalized_features"]}
    assert features.get("transaction.version") == 2, features
    assert broker[m.END_TXN.key] >= 5 and broker[m.PRODUCE.key] >= 12 and broker[m.ADD_PARTITIONS_TO_TXN.key] >= 5

    topic = ak.topic(2)
    tid = unique("tv")
    with txn_producer(ak.bootstrap, tid) as producer:
        producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        pid, epoch = txn.producer_id, txn.producer_epoch
        for i in range(3):
            producer.begin_transaction()
            producer.send(topic, b"r%d" % i, partition=0).get(WAIT)
            producer.commit_transaction()
            assert (txn.producer_id, txn.producer_epoch) == (pid, epoch), "version 1: no epoch bump per transaction"
        coordinator = txn.coordinator(CoordinatorKey(CoordinatorType.TRANSACTION, tid))
        assert coordinator is not None
        client = producer._client
        assert client.api_version(coordinator, m.END_TXN) == 3
        assert client.api_version(coordinator, m.ADD_PARTITIONS_TO_TXN) == 3
        assert client.api_version(coordinator, m.INIT_PRODUCER_ID) == 5
        assert client.api_version(apache_kafka.leader(topic, 0), m.PRODUCE) == 11
    assert read(ak.bootstrap, topic, [0], 3, committed=True)[0] == [b"r0", b"r1", b"r2"]
    assert ak.log(topic, 0) == [entry for i in range(3)
                                for entry in (("data", pid, epoch, [b"r%d" % i]), (COMMIT, pid, epoch))]


# --------------------------------------------------------------------------------------------
# commit and abort


def test_commit_abort_commit_read_back(backend: Backend) -> None:
    """Committed records are visible to read_committed consumers exactly once and in order; aborted ones
    are hidden from them but were written (read_uncommitted sees them, and the ABORT markers)."""
    parts = list(range(6))
    topic = backend.topic(6)
    futures: Dict[bytes, Any] = {}

    def send(producer: Producer, tag: str, n: int) -> Dict[int, List[bytes]]:
        out: Dict[int, List[bytes]] = {p: [] for p in parts}
        for j in range(n):
            value = b"%s-%03d" % (tag.encode(), j)
            futures[value] = producer.send(topic, value, partition=j % 6)
            out[j % 6].append(value)
        return out

    tid = unique("cac")
    with txn_producer(backend.bootstrap, tid) as producer:
        producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        pid, epoch = txn.producer_id, txn.producer_epoch
        producer.begin_transaction()
        c1 = send(producer, "c1", 30)
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = send(producer, "a", 30)
        producer.flush(WAIT)  # written, then aborted
        producer.abort_transaction()
        producer.begin_transaction()
        c2 = send(producer, "c2", 30)
        producer.commit_transaction()
        assert txn.state is State.READY
    for value, future in futures.items():
        md = future.get(0)
        assert md.topic == topic and value in {v for d in (c1, aborted, c2) for v in d[md.partition]}

    committed = {p: c1[p] + c2[p] for p in parts}
    everything = {p: c1[p] + aborted[p] + c2[p] for p in parts}
    assert read(backend.bootstrap, topic, parts, 60, committed=True) == committed
    assert read(backend.bootstrap, topic, parts, 90, committed=False) == everything
    assert read_confluent(backend.bootstrap, topic, parts, 60) == committed
    for p in parts:
        log = backend.log(topic, p)
        assert flat(log) == c1[p] + [COMMIT] + aborted[p] + [ABORT] + c2[p] + [COMMIT], p
        assert {entry[1:3] for entry in log} == {(pid, epoch)}
        offsets = [futures[v].get(0).offset for v in everything[p]]
        assert offsets == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16], "records, then a marker per transaction"


# --------------------------------------------------------------------------------------------
# fencing


def test_a_second_producer_fences_the_first(backend: Backend) -> None:
    """init_transactions() of a second producer with the same transactional id aborts the first one's open
    transaction and fences it: the first one's commit raises ProducerFencedError (fatal, as Java's
    EndTxnHandler makes PRODUCER_FENCED), after which every call says the producer must be closed.

    Apache Kafka bumps the epoch twice (once for the abort markers, once for the new producer); the mock
    does the same."""
    parts = [0, 1, 2]
    topic = backend.topic(3)
    tid = unique("fence")
    with txn_producer(backend.bootstrap, tid) as first:
        first.init_transactions()
        assert first._txn is not None
        pid, epoch = first._txn.producer_id, first._txn.producer_epoch
        first.begin_transaction()
        for p in parts:
            first.send(topic, b"old-%d" % p, partition=p)
        first.flush(WAIT)
        with txn_producer(backend.bootstrap, tid) as second:
            second.init_transactions()
            assert second._txn is not None
            assert (second._txn.producer_id, second._txn.producer_epoch) == (pid, epoch + 2)
            with pytest.raises(ProducerFencedError, match="(?i)fenced") as info:
                first.commit_transaction()
            assert "transactional.id" in str(info.value)
            assert first._txn.state is State.FATAL_ERROR
            for call in (first.begin_transaction, first.abort_transaction, first.commit_transaction):
                with pytest.raises(FencedTransactionError, match="must be closed"):
                    call()
            with pytest.raises(FencedTransactionError, match="must be closed"):
                first.send(topic, b"late", partition=0)
            second.begin_transaction()
            for p in parts:
                second.send(topic, b"new-%d" % p, partition=p)
            second.commit_transaction()
    assert read(backend.bootstrap, topic, parts, 3, committed=True) == {p: [b"new-%d" % p] for p in parts}
    assert read(backend.bootstrap, topic, parts, 6, committed=False) == {p: [b"old-%d" % p, b"new-%d" % p]
                                                                         for p in parts}
    for p in parts:
        assert backend.log(topic, p) == [("data", pid, epoch, [b"old-%d" % p]), (ABORT, pid, epoch + 1),
                                         ("data", pid, epoch + 2, [b"new-%d" % p]), (COMMIT, pid, epoch + 2)]


def test_a_fenced_producer_records_fail(backend: Backend) -> None:
    """After being fenced: a record for a partition already in the transaction is refused by the partition
    leader (INVALID_PRODUCER_EPOCH: abortable, as in Java), the commit is refused until an abort, and the
    abort hits the fence (PRODUCER_FENCED); a record for a new partition fails with PRODUCER_FENCED
    (AddPartitionsToTxn). Nothing either fenced producer wrote becomes visible."""
    topic = backend.topic(4)
    tid = unique("fenced-send")
    with txn_producer(backend.bootstrap, tid) as first:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"in-txn", partition=0).get(WAIT)
        with txn_producer(backend.bootstrap, tid) as second:
            second.init_transactions()
            exc = first.send(topic, b"same-partition", partition=0).exception(WAIT)
            assert isinstance(exc, InvalidProducerEpochError), repr(exc)
            with pytest.raises(TransactionError, match="abort"):
                first.commit_transaction()
            with pytest.raises(ProducerFencedError, match="(?i)fenced"):
                first.abort_transaction()
    tid = unique("fenced-new")
    with txn_producer(backend.bootstrap, tid) as third:
        third.init_transactions()
        third.begin_transaction()
        third.send(topic, b"x", partition=1).get(WAIT)
        with txn_producer(backend.bootstrap, tid) as fourth:
            fourth.init_transactions()
            exc = third.send(topic, b"new-partition", partition=3).exception(WAIT)
            assert isinstance(exc, ProducerFencedError) and "fenced" in str(exc).lower(), repr(exc)
            fourth.begin_transaction()
            fourth.send(topic, b"fourth", partition=2)
            fourth.commit_transaction()
    # the fourth producer's committed record shows that the consumer read past the aborted ones
    assert read(backend.bootstrap, topic, [0, 1, 2, 3], 1, committed=True) == {0: [], 1: [], 2: [b"fourth"], 3: []}
    assert read(backend.bootstrap, topic, [0, 1, 2, 3], 3, committed=False) == {
        0: [b"in-txn"], 1: [b"x"], 2: [b"fourth"], 3: []}


# --------------------------------------------------------------------------------------------
# consumer offsets in a transaction


def test_send_offsets_to_transaction_commits_offsets_only_with_the_transaction(backend: Backend) -> None:
    src, out = backend.topic(2), backend.topic(2)
    group = unique("group")
    tps = [(src, 0), (src, 1)]
    with txn_producer(backend.bootstrap, unique("offsets")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(out, b"one", partition=0)
        producer.send_offsets_to_transaction({(src, 0): 5, (src, 1): 7}, group)
        producer.flush(WAIT)
        assert committed_offsets(backend.bootstrap, group, tps, stable=False) == {}, "pending until the commit"
        producer.commit_transaction()
        assert committed_offsets(backend.bootstrap, group, tps, stable=True) == {(src, 0): 5, (src, 1): 7}
        # an aborted transaction's offsets are dropped
        producer.begin_transaction()
        producer.send(out, b"two", partition=0)
        producer.send_offsets_to_transaction({(src, 0): 50}, group)
        producer.abort_transaction()
        # offsets alone make a transaction too; once it is complete the abort before it is complete as well
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(src, 1): 8}, group)
        producer.commit_transaction()
        assert committed_offsets(backend.bootstrap, group, tps, stable=True) == {(src, 0): 5, (src, 1): 8}
    assert read(backend.bootstrap, out, [0, 1], 1, committed=True) == {0: [b"one"], 1: []}


def _joined_consumer(consumer_class: Any, bootstrap: str, topic: str, attempts: int = 3) -> Tuple[Any, str]:
    """A kafka-python consumer that has joined a new group of its own and been assigned ``topic``'s
    partitions, and the group's name. kafka-python 3.0 now and then stops heartbeating right after its first
    rebalance and never sees its assignment (Apache Kafka's log: the group stable at generation 2, then the
    member removed on heartbeat expiration): such a consumer is closed and a new one joins a new group."""
    for attempt in range(1, attempts + 1):
        group = unique("live")
        consumer = consumer_class(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                  auto_offset_reset="earliest", isolation_level="read_committed")

        def joined(consumer: Any = consumer) -> bool:
            consumer.poll(200)
            return consumer.group_metadata().generation_id > 0 and bool(consumer.assignment())

        try:
            wait_for(joined, "the consumer to join its group", timeout=WAIT / 2)
            return consumer, group
        except AssertionError:
            consumer.close()
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def test_send_offsets_with_a_live_consumer_group_member(ak: Backend) -> None:
    """consume-transform-produce with a kafka-python consumer in a group: its ConsumerGroupMetadata commits
    (the consumer sees the offset); a stale generation is ILLEGAL_GENERATION and an unknown member
    UNKNOWN_MEMBER_ID (KIP-447 zombie fencing), both abortable: after abort_transaction() the producer goes
    on. (The mock serves no JoinGroup: it has no members to check.)"""
    from kafka import KafkaConsumer, TopicPartition

    src, out = ak.topic(2), ak.topic(2)
    consumer, group = _joined_consumer(KafkaConsumer, ak.bootstrap, src)
    try:
        gm = consumer.group_metadata()
        meta = ConsumerGroupMetadata(gm.group_id, gm.generation_id, gm.member_id, gm.group_instance_id)
        with txn_producer(ak.bootstrap, unique("ctp")) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(out, b"kept", partition=0)
            producer.send_offsets_to_transaction({(src, 0): 3}, meta)
            producer.commit_transaction()
            wait_for(lambda: consumer.committed(TopicPartition(src, 0)) == 3, "the consumer to see offset 3")
            for bad, error in ((meta._replace(generation_id=meta.generation_id + 5), IllegalGenerationError),
                               (meta._replace(member_id="not-a-member"), UnknownMemberIdError)):
                producer.begin_transaction()
                producer.send(out, b"dropped", partition=1)
                with pytest.raises(error):
                    producer.send_offsets_to_transaction({(src, 0): 4}, bad)
                with pytest.raises(TransactionError, match="abort") as info:
                    producer.commit_transaction()
                assert isinstance(info.value.__cause__, error)
                producer.abort_transaction()
            producer.begin_transaction()
            producer.send_offsets_to_transaction({(src, 1): 9}, meta)
            producer.commit_transaction()
        assert committed_offsets(ak.bootstrap, group, [(src, 0), (src, 1)], stable=True) == {(src, 0): 3,
                                                                                                (src, 1): 9}
    finally:
        consumer.close()
    assert read(ak.bootstrap, out, [0, 1], 1, committed=True) == {0: [b"kept"], 1: []}


def test_offsets_of_a_group_without_members(backend: Backend) -> None:
    """TxnOffsetCommit (v3) for a group with no members: generation -1 is accepted whatever the member id
    (a "simple" group, as from a consumer that assigns its partitions itself); a generation >= 0 is
    ILLEGAL_GENERATION while the group does not exist and UNKNOWN_MEMBER_ID once it does."""
    src = backend.topic(1)
    group = unique("simple")
    with txn_producer(backend.bootstrap, unique("simple-txn")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        with pytest.raises(IllegalGenerationError):
            producer.send_offsets_to_transaction({(src, 0): 1}, ConsumerGroupMetadata(group, 3, "m-1"))
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(src, 0): 2}, ConsumerGroupMetadata(group, -1, "m-1"))
        producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(UnknownMemberIdError):
            producer.send_offsets_to_transaction({(src, 0): 3}, ConsumerGroupMetadata(group, 3, "m-1"))
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(src, 0): 4}, ConsumerGroupMetadata(group, -1, "", "instance-1"))
        producer.commit_transaction()
    assert committed_offsets(backend.bootstrap, group, [(src, 0)], stable=True) == {(src, 0): 4}


# --------------------------------------------------------------------------------------------
# the coordinator's transaction timeout


def test_a_transaction_past_its_timeout_is_aborted_and_fences_its_producer(backend: Backend) -> None:
    """transaction.timeout.ms=3000: the coordinator aborts the open transaction by itself (Apache Kafka
    checks every transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default) with a new
    epoch, so read_committed consumers move on without the producer. The producer's commit then gets
    PRODUCER_FENCED: fatal, as in Java (EndTxnHandler: INVALID_PRODUCER_EPOCH / PRODUCER_FENCED ->
    ProducerFencedException); the error names the timeout as a possible cause. The producer must be closed;
    a new producer with the same transactional id carries on. The mock aborts a timed-out transaction when
    the transactional id is used again or a read_committed Fetch / ListOffsets asks for the last stable
    offset (as here), rather than on a timer."""
    parts = [0, 1, 2]
    topic = backend.topic(3)
    tid = unique("timeout")
    with txn_producer(backend.bootstrap, tid, transaction_timeout_ms=3000) as producer:
        producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        pid, epoch = txn.producer_id, txn.producer_epoch
        producer.begin_transaction()
        for p in parts:
            producer.send(topic, b"late-%d" % p, partition=p)
        producer.flush(WAIT)
        lso, hw = end_offsets(backend.bootstrap, topic, parts)
        assert all(lso[p] == 0 < hw[p] for p in parts), (lso, hw)

        def aborted_by_coordinator() -> bool:
            stable, high = end_offsets(backend.bootstrap, topic, parts)
            return all(stable[p] == high[p] == 2 for p in parts)  # the record and the ABORT marker

        wait_for(aborted_by_coordinator, "the coordinator to abort the timed-out transaction")
        with pytest.raises(ProducerFencedError, match="transaction.timeout.ms"):
            producer.commit_transaction()
        assert txn.state is State.FATAL_ERROR
        for call in (producer.begin_transaction, producer.abort_transaction):
            with pytest.raises(FencedTransactionError, match="must be closed"):
                call()
    for p in parts:
        assert backend.log(topic, p) == [("data", pid, epoch, [b"late-%d" % p]), (ABORT, pid, epoch + 1)]
    with txn_producer(backend.bootstrap, tid, transaction_timeout_ms=30000) as again:
        again.init_transactions()
        assert again._txn is not None
        assert (again._txn.producer_id, again._txn.producer_epoch) == (pid, epoch + 2)
        again.begin_transaction()
        for p in parts:
            again.send(topic, b"again-%d" % p, partition=p)
        again.commit_transaction()
    assert read(backend.bootstrap, topic, parts, 3, committed=True) == {p: [b"again-%d" % p] for p in parts}
    assert read(backend.bootstrap, topic, parts, 6, committed=False) == {p: [b"late-%d" % p, b"again-%d" % p]
                                                                    for p in parts}


# --------------------------------------------------------------------------------------------
# many transactions, several writers


def test_fifty_transactions_alternating_commit_and_abort(backend: Backend) -> None:
    parts = [0, 1, 2]
    topic = backend.topic(3)
    expected: Dict[int, List[bytes]] = {p: [] for p in parts}
    with txn_producer(backend.bootstrap, unique("many")) as producer:
        producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        pid_epoch = (txn.producer_id, txn.producer_epoch)
        for i in range(50):
            producer.begin_transaction()
            values = [(b"t%02d-%d" % (i, j), (i + j) % 3) for j in range(4)]
            for value, p in values:
                producer.send(topic, value, partition=p)
            if i % 2 == 0:
                producer.commit_transaction()
                for value, p in values:
                    expected[p].append(value)
            else:
                producer.flush(WAIT)
                producer.abort_transaction()
        assert (txn.producer_id, txn.producer_epoch) == pid_epoch
    assert read(backend.bootstrap, topic, parts, 100, committed=True) == expected
    assert sum(len(v) for v in read(backend.bootstrap, topic, parts, 200, committed=False).values()) == 200
    for p in parts:
        markers = [entry[0] for entry in backend.log(topic, p) if entry[0] != "data"]
        assert markers == [COMMIT, ABORT] * 25, p


def test_two_producers_interleaved_on_the_same_partitions(backend: Backend) -> None:
    """Two transactional producers write to the same partitions at once, ending their transactions in
    varying order: each one's committed records are visible (in its order), aborted ones are not, and an
    open transaction holds read_committed consumers back at its first offset (the last stable offset)
    while the other producer's committed records after it wait."""
    parts = [0, 1]
    topic = backend.topic(2)
    expected: Dict[bytes, Dict[int, List[bytes]]] = {b"a": {0: [], 1: []}, b"b": {0: [], 1: []}}
    with txn_producer(backend.bootstrap, unique("A")) as a, txn_producer(backend.bootstrap, unique("B")) as b:
        a.init_transactions()
        b.init_transactions()
        for r in range(10):
            a.begin_transaction()
            b.begin_transaction()
            for j in range(4):
                a.send(topic, b"a%d-%d" % (r, j), partition=j % 2)
                b.send(topic, b"b%d-%d" % (r, j), partition=j % 2)
                if j == 1:
                    a.flush(WAIT)
                    b.flush(WAIT)
            ends = [(a, b"a", r % 2 == 0), (b, b"b", r % 2 == 1)]
            if r % 3 == 0:
                ends.reverse()
            for producer, tag, commit in ends:
                if commit:
                    producer.commit_transaction()
                    for j in range(4):
                        expected[tag][j % 2].append(tag + b"%d-%d" % (r, j))
                else:
                    producer.flush(WAIT)
                    producer.abort_transaction()
        # the last stable offset: A leaves a transaction open; B commits after it
        a.begin_transaction()
        held = a.send(topic, b"a-open", partition=0).get(WAIT).offset
        b.begin_transaction()
        b.send(topic, b"b-last", partition=0).get(WAIT)
        b.commit_transaction()
        wait_for(lambda: end_offsets(backend.bootstrap, topic, [0])[1][0] >= held + 3, "B's commit marker")
        assert end_offsets(backend.bootstrap, topic, [0])[0][0] == held, "A's open transaction holds the LSO"
        a.abort_transaction()
    expected[b"b"][0].append(b"b-last")
    got = read(backend.bootstrap, topic, parts, 41, committed=True)
    for p in parts:
        assert sorted(got[p]) == sorted(expected[b"a"][p] + expected[b"b"][p]), p
        for tag in (b"a", b"b"):
            assert [v for v in got[p] if v.startswith(tag)] == expected[tag][p], (p, tag)
    assert sum(len(v) for v in read(backend.bootstrap, topic, parts, 82, committed=False).values()) == 82
