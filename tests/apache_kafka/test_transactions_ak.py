"""Transactions of kproducer's Producer against Apache Kafka 4.1 (the shared 3-broker cluster, PLAINTEXT).

Every scenario is read back independently: kafka-python (and confluent-kafka) consumers with
``read_committed`` (Apache Kafka really hides aborted records and holds consumers at the last stable offset),
``read_uncommitted`` to prove the aborted records were written, raw Fetch for the control batches (markers
with their producer id and epoch), and confluent-kafka's ``committed()`` for group offsets.

The shared cluster finalizes ``transaction.version`` 2 (KIP-890 part 2), and kproducer speaks transactions v2 to
it: no AddPartitionsToTxn / AddOffsetsToTxn (Produce v12 and TxnOffsetCommit v5 add the partitions and the group),
and EndTxn v5, which bumps the producer epoch at every transaction end: a transaction's records carry the epoch it
started with, its markers the next one. EndTxn answers once PrepareCommit/PrepareAbort is logged, before the
markers are written (so a read after commit_transaction() waits for the markers, and the next transaction's first
Produce may meet CONCURRENT_TRANSACTIONS, retried). ``test_the_same_workload_under_transactions_v2_and_v1`` also
runs on a cluster of its own downgraded to ``transaction.version`` 1 (FeatureCommand), where kproducer speaks v1.

Tests taking the ``backend`` fixture run the same scenario on kproducer's MockCluster (transaction.version 2, its
default) and on Apache Kafka (the mock: EndTxn completes the transaction before it answers; no group members).
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
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionError,
    UnknownMemberIdError,
)
from kproducer.mock.wire_client import WireClient
from kproducer.producer.transaction_manager import FencedTransactionError, State
from kproducer.protocol import messages as m
from kproducer.protocol.messages.api_versions import finalized_features
from tests.conftest import start_apache_kafka
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
# which transaction protocol: the same workload under transactions v2 and v1


def finalized_transaction_version(bootstrap: str) -> int:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with WireClient(host, int(port)) as client:
        versions = client.request(m.API_VERSIONS, 3, {"client_software_name": "kproducer-tests",
                                                      "client_software_version": "1"})
    return finalized_features(versions).transaction_version


@pytest.fixture(scope="module")
def apache_kafka_tv1() -> Iterator[Any]:
    """A cluster of our own (one broker) with ``transaction.version`` downgraded to 1 (Kafka's FeatureCommand)."""
    kafka = start_apache_kafka(brokers=1)
    try:
        kafka.run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", kafka.bootstrap_servers,
                       "downgrade", "--feature", "transaction.version=1")
        wait_for(lambda: finalized_transaction_version(kafka.bootstrap_servers) == 1, "transaction.version 1")
        yield kafka
    finally:
        kafka.close()


def test_a_producer_reads_the_downgraded_transaction_version_at_init(apache_kafka_tv1: Any) -> None:
    """FeatureCommand's downgrade reaches the brokers' ApiVersions answers, and kproducer reads the level when
    init_transactions() completes: version 1, no transaction open yet."""
    with txn_producer(apache_kafka_tv1.bootstrap_servers, unique("tv1")) as producer:
        txn = producer._transactions()
        assert not txn.transaction_v2_enabled
        producer.init_transactions()
        assert producer._client.finalized_features.transaction_version == 1
        assert not txn.transaction_v2_enabled and not txn.is_transaction_v2()


@pytest.fixture(params=["apache_kafka-tv2", "apache_kafka-tv1", "mock-tv2", "mock-tv1"])
def versioned(request: Any) -> Iterator[Tuple[Backend, int]]:
    """A backend and its finalized transaction.version: the shared Apache Kafka cluster (2), our own downgraded
    one (1), and MockClusters set to 2 and 1."""
    name, level = request.param.split("-tv")
    if name == "apache_kafka":
        kafka = request.getfixturevalue("apache_kafka" if level == "2" else "apache_kafka_tv1")
        rf = min(3, len(kafka.broker_ids))
        yield Backend(request.param, kafka.bootstrap_servers, lambda t, n: kafka.create_topic(t, n, rf),
                      lambda t, p: f"127.0.0.1:{kafka.port(kafka.leader(t, p))}"), int(level)
        return
    from kproducer.testing import MockCluster

    with MockCluster(3, transaction_version=int(level)) as cluster:
        def address(t: str, p: int) -> str:
            host, port = cluster.broker_address(cluster.leader(t, p))
            return f"{host}:{port}"
        yield Backend(request.param, cluster.bootstrap_servers, lambda t, n: cluster.create_topic(t, n),
                      address), int(level)


def spy_requests(producer: Producer) -> List[Tuple[str, int]]:
    """What the producer's network client sends from now on: (API name, version), in order."""
    sent: List[Tuple[str, int]] = []
    client = producer._client
    original = client.send

    def send(request: Any, now_ms: float) -> None:
        original(request, now_ms)
        sent.append((request.api.name, request.version))

    client.send = send  # type: ignore[method-assign]
    return sent


def test_the_same_workload_under_transactions_v2_and_v1(versioned: Tuple[Backend, int]) -> None:
    """One workload -- a transaction with records on 3 partitions and the offsets of a group, one written and
    aborted, one committed, one empty -- on a cluster that finalized transaction.version 2 and on one at 1.

    Level 2: kproducer speaks transactions v2 (KIP-890 part 2): no AddPartitionsToTxn or AddOffsetsToTxn, Produce
    v12, TxnOffsetCommit v5, EndTxn v5; each transaction's records carry its own epoch, starting at sequence 0,
    and its markers the epoch after (the producer adopts the epoch EndTxn answers). Level 1: version 1
    (AddPartitionsToTxn, AddOffsetsToTxn, Produce v11, TxnOffsetCommit v3, EndTxn v3), one epoch throughout, the
    sequences go on. Both: read back exactly once with read_committed kafka-python and confluent-kafka consumers,
    the aborted records written but hidden, the offsets committed with the transaction."""
    backend, level = versioned
    v2 = level >= 2
    if backend.name.startswith("apache_kafka"):
        assert finalized_transaction_version(backend.bootstrap) == level
    parts = [0, 1, 2]
    topic, src = backend.topic(3), backend.topic(1)
    group = unique("wl-group")
    committed: Dict[int, List[bytes]] = {p: [] for p in parts}
    written: Dict[int, List[bytes]] = {p: [] for p in parts}
    with txn_producer(backend.bootstrap, unique("wl")) as producer:
        requests = spy_requests(producer)
        producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        pid, first_epoch = txn.producer_id, txn.producer_epoch
        assert txn.transaction_v2_enabled is v2
        epochs = [first_epoch]
        for n, (commit, count) in enumerate([(True, 9), (False, 6), (True, 6), (True, 0)]):
            producer.begin_transaction()
            for j in range(count):
                value = b"t%d-%d" % (n, j)
                producer.send(topic, value, partition=j % 3)
                written[j % 3].append(value)
                if commit:
                    committed[j % 3].append(value)
            if n == 0:
                producer.send_offsets_to_transaction({(src, 0): 3}, group)
            if commit:
                producer.commit_transaction()
            else:
                producer.flush(WAIT)
                producer.abort_transaction()
            epochs.append(txn.producer_epoch)
        assert txn.producer_id == pid
    apis = [name for name, _v in requests]
    versions = {name: sorted({v for n, v in requests if n == name}) for name in set(apis)}
    if v2:
        assert "AddPartitionsToTxn" not in apis and "AddOffsetsToTxn" not in apis, versions
        assert (versions["Produce"], versions["EndTxn"], versions["TxnOffsetCommit"]) == ([12], [5], [5])
        # the empty transaction (nothing sent) ends without EndTxn: no bump for it
        assert epochs == [first_epoch + i for i in (0, 1, 2, 3, 3)]
    else:
        assert apis.count("AddPartitionsToTxn") >= 3 and apis.count("AddOffsetsToTxn") == 1
        assert (versions["Produce"], versions["EndTxn"], versions["TxnOffsetCommit"]) == ([11], [3], [3])
        assert epochs == [first_epoch] * 5
    assert apis.count("EndTxn") == 3
    # (read first: on Apache Kafka EndTxn is answered before the markers are written; the consumers wait for them)
    assert read(backend.bootstrap, topic, parts, 15, committed=True) == committed
    assert read_confluent(backend.bootstrap, topic, parts, 15) == committed
    assert read(backend.bootstrap, topic, parts, 21, committed=False) == written
    assert committed_offsets(backend.bootstrap, group, [(src, 0)], stable=True) == {(src, 0): 3}
    # the logs, as the brokers hold them: each transaction's batches and marker, their epochs and sequences
    for p in parts:
        batches, _ = fetch_batches(backend.leader_address(topic, p), topic, p)
        shape = [((COMMIT if b.records[0].key[-1] == 1 else ABORT) if b.is_control else "data", b.producer_id,
                  b.producer_epoch) for b in batches]
        expected: List[Tuple[Any, ...]] = []
        for n, marker in enumerate((COMMIT, ABORT, COMMIT)):
            data_epoch = first_epoch + n if v2 else first_epoch
            expected += [("data", pid, data_epoch)] * sum(1 for b in batches if not b.is_control and
                                                           b.records[0].value.startswith(b"t%d-" % n))
            expected.append((marker, pid, data_epoch + 1 if v2 else first_epoch))
        assert shape == expected, (p, shape)
        values = [r.value for b in batches if not b.is_control for r in b.records]
        assert values == written[p], p
        first_sequences = [next(b.base_sequence for b in batches if not b.is_control
                                and b.records[0].value.startswith(b"t%d-" % n)) for n in range(3)]
        assert first_sequences == ([0, 0, 0] if v2 else [0, 3, 5]), (p, first_sequences)


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
        # transactions v2: each transaction under its own epoch, its marker with the next
        assert [entry[1:3] for entry in log if entry[0] != "data"] == [(pid, epoch + 1), (pid, epoch + 2),
                                                                         (pid, epoch + 3)]
        assert {entry[1:3] for entry in log if entry[0] == "data"} <= {(pid, epoch), (pid, epoch + 1),
                                                                         (pid, epoch + 2)}
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
    for p in parts:  # (the commit's EndTxn v5 bumps the epoch: its marker carries epoch + 3)
        assert backend.log(topic, p) == [("data", pid, epoch, [b"old-%d" % p]), (ABORT, pid, epoch + 1),
                                         ("data", pid, epoch + 2, [b"new-%d" % p]), (COMMIT, pid, epoch + 3)]


def test_a_fenced_producer_records_fail(backend: Backend) -> None:
    """After being fenced: a record for a partition already in the transaction is refused by the partition
    leader (INVALID_PRODUCER_EPOCH: abortable, as in Java), the commit is refused until an abort, and the
    abort hits the fence (PRODUCER_FENCED); a record for a new partition fails with INVALID_PRODUCER_EPOCH too
    (transactions v2: the leader asks the coordinator to add the partition, which refuses the old epoch; under
    v1 AddPartitionsToTxn answered PRODUCER_FENCED). Nothing either fenced producer wrote becomes visible."""
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
            assert isinstance(exc, InvalidProducerEpochError), repr(exc)
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
    epoch, so read_committed consumers move on without the producer. The producer's commit is then refused:
    under transactions v2 with INVALID_TXN_STATE (the coordinator takes the EndTxn v5 with the epoch just before
    its own for a retry of the abort that completed the transaction; under v1 it was PRODUCER_FENCED): fatal, as
    in Java's EndTxnHandler; the error names the timeout as a possible cause. The producer must be closed; a new
    producer with the same transactional id carries on. The mock aborts a timed-out transaction when the
    transactional id is used again or a read_committed Fetch / ListOffsets asks for the last stable offset (as
    here), rather than on a timer."""
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
        with pytest.raises(InvalidTxnStateError, match="transaction.timeout.ms"):
            producer.commit_transaction()
        assert txn.state is State.FATAL_ERROR
        for call in (producer.begin_transaction, producer.abort_transaction):
            with pytest.raises(TransactionError, match="must be closed"):
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
        assert (txn.producer_id, txn.producer_epoch) == (pid_epoch[0], pid_epoch[1] + 50), "v2: a bump per EndTxn"
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


# --------------------------------------------------------------------------------------------
# a transaction ended by another producer (TransactionHandle) on a transactions-v2 cluster


def test_a_handed_over_v2_transaction_is_committed_by_id_and_epoch(backend: Backend) -> None:
    """The writer speaks transactions v2 (its first commit bumped the epoch); it hands the next transaction over,
    and another producer commits it by producer id and epoch with EndTxn v3 (the version-1 rules on a v2
    coordinator): twice, the second a retry that succeeds. A handed-over transaction fenced by a new
    InitProducerId is refused at commit (PRODUCER_FENCED) and its abort reports it was ended already."""
    from kproducer.producer.transaction_handle import (
        abort_transaction,
        abort_transactional_id,
        commit_transaction,
        prepare_transaction,
    )

    topic = backend.topic(2)
    config = {"bootstrap.servers": backend.bootstrap}
    handles = []
    for tid in (unique("handed"), unique("handed-fenced")):
        with txn_producer(backend.bootstrap, tid) as writer:
            writer.init_transactions()
            first_epoch = writer._transactions().producer_epoch
            writer.begin_transaction()
            writer.send(topic, b"%s-first" % tid.encode(), partition=0)
            writer.commit_transaction()
            writer.begin_transaction()
            writer.send(topic, b"%s-handed" % tid.encode(), partition=1)
            handle = prepare_transaction(writer, WAIT)
        assert handle.epoch == first_epoch + 1, "transactions v2: the first commit bumped the epoch"
        handles.append(handle)
    ok, fenced = handles
    commit_transaction(ok, config, WAIT)
    commit_transaction(ok, config, WAIT)  # a retry after success
    abort_transactional_id(fenced.transactional_id, config, WAIT)
    with pytest.raises(ProducerFencedError):
        commit_transaction(fenced, config, WAIT)
    assert abort_transaction(fenced, config, WAIT) is False
    got = read(backend.bootstrap, topic, [0, 1], 3, committed=True)
    assert got == {0: [b"%s-first" % h.transactional_id.encode() for h in handles],
                   1: [b"%s-handed" % ok.transactional_id.encode()]}
