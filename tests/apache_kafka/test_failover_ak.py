"""Failover against a real Apache Kafka cluster of this module's own (3 brokers; it kills and stops brokers,
so it must not be the shared session cluster).

Each test streams keyed records (bounded by count and time) into a topic with 6 partitions, replication
factor 3 and min.insync.replicas=2, with acks=all and idempotence, while a broker is SIGKILLed, shut down
(controlled) or kept down past the producer's metadata.max.age.ms, then started again. Every future must
succeed and the read-back (kafka-python, read_uncommitted) must hold every record once, each key's values in
send order. The last test makes Apache Kafka answer NOT_ENOUGH_REPLICAS (min.insync.replicas=3 with a broker
down): the producer retries until the broker is back. Each test leaves the cluster with its 3 brokers up.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter, defaultdict
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

import pytest

from kproducer import Producer
from kproducer.testing import ApacheKafkaError
from tests.conftest import start_apache_kafka
from tests.readback import consume

pytestmark = [pytest.mark.apache_kafka,
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

log = logging.getLogger(__name__)

PARTITIONS = 6
KEYS = 24
# a broker that was down needs to register again and catch up: generous, the machine is small and shared
WAIT = 120.0


@pytest.fixture(scope="module")
def kafka() -> Iterator[Any]:
    cluster = start_apache_kafka(brokers=3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def restore(kafka: Any) -> Iterator[None]:
    """After the test, every broker runs again and is registered (the next test starts from 3 brokers)."""
    yield
    for b in kafka.broker_ids:
        if not kafka.alive(b):
            kafka.restart(b, wait=False)
    kafka.wait_for_brokers(kafka.broker_ids, timeout=WAIT)


def new_topic(kafka: Any, min_isr: int = 2, partitions: int = PARTITIONS) -> str:
    name = f"failover-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name, partitions, 3, {"min.insync.replicas": str(min_isr)})
    return name


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def partitions(kafka: Any, topic: str) -> Dict[int, Any]:
    """The topic's partitions as a live broker sees them; empty when no broker answered (one may be going
    down or coming up just then)."""
    try:
        return dict(kafka.partitions(topic))
    except (OSError, ApacheKafkaError):
        return {}


def every_partition(kafka: Any, topic: str, condition: Callable[[Any], bool]) -> bool:
    parts = partitions(kafka, topic)
    return len(parts) > 0 and all(condition(p) for p in parts.values())


def full_isr(kafka: Any, topic: str) -> bool:
    return every_partition(kafka, topic, lambda p: sorted(p.isr) == kafka.broker_ids)


def elect_preferred_leaders(kafka: Any, topic: str) -> None:
    """Move every partition's leadership back to its preferred (first) replica (Kafka's LeaderElectionCommand;
    the controller would do it only after leader.imbalance.check.interval.seconds, 300 s)."""
    wait_until(lambda: full_isr(kafka, topic), f"{topic}'s replicas all back in sync")
    kafka.run_tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", kafka.bootstrap_servers,
                   "--election-type", "PREFERRED", "--all-topic-partitions")


class Stream:
    """Keyed records sent by the test's thread at a moderate pace, value = the record's index, key =
    ``k<index % KEYS>``: :meth:`run` sends until ``disturb`` (run in another thread once ``before`` records
    were sent) has finished and ``after`` more records went out, bounded by ``max_records`` and
    ``max_seconds``."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.futures: List[Any] = []
        self.errors: List[BaseException] = []
        self.on_record: Optional[Callable[[], None]] = None

    def send_some(self, count: int) -> None:
        for _ in range(count):
            i = len(self.futures)
            self.futures.append(self.producer.send(self.topic, str(i).encode(), key=f"k{i % KEYS}".encode()))
            if self.on_record is not None:
                self.on_record()

    def run(self, disturb: Callable[[], None], before: int = 300, after: int = 600, max_records: int = 40_000,
            max_seconds: float = 240.0) -> None:
        done = threading.Event()

        def target() -> None:
            try:
                disturb()
            except BaseException as e:  # noqa: B902 - reported by the test's thread
                self.errors.append(e)
            finally:
                done.set()

        thread = threading.Thread(target=target, name="disturb", daemon=True)
        deadline = time.monotonic() + max_seconds
        end: Optional[int] = None
        while len(self.futures) < max_records and time.monotonic() < deadline:
            if end is None and len(self.futures) >= before and not thread.is_alive() and not done.is_set():
                thread.start()
            if end is None and done.is_set():
                end = len(self.futures) + after
            if end is not None and len(self.futures) >= end:
                break
            self.send_some(10)
            time.sleep(0.02)
        thread.join(WAIT)
        assert not self.errors, f"the disturbance failed: {self.errors[0]!r}"
        assert done.is_set(), "the disturbance did not finish"
        assert end is not None and len(self.futures) >= end, \
            f"only {len(self.futures)} records sent within the bounds (max {max_records}, {max_seconds} s)"

    def check(self, kafka: Any, flush_timeout: float = WAIT) -> None:
        """Every future succeeded; the read-back has every record once, in send order per key, at the
        offsets the futures reported."""
        log.info("%d records sent; flushing", len(self.futures))
        self.producer.flush(flush_timeout)
        n = len(self.futures)
        log.info("flushed; reading back")
        failed = [(i, f.exception(0)) for i, f in enumerate(self.futures) if f.exception(0) is not None]
        assert not failed, f"{len(failed)} of {n} records failed, first: {failed[0]}"
        sent = [f.get(0) for f in self.futures]
        assert len({(m.partition, m.offset) for m in sent}) == n
        got = consume(kafka.bootstrap_servers, self.topic, range(PARTITIONS), expected=n, timeout=WAIT,
                      isolation_level="read_uncommitted")
        counts = Counter(int(r.value) for r in got)
        lost = [i for i in range(n) if i not in counts]
        duplicated = [i for i, c in counts.items() if c > 1]
        assert not lost and not duplicated, (f"{len(lost)} lost (first {lost[:5]}), {len(duplicated)} duplicated "
                                             f"(first {duplicated[:5]}) of {n}")
        assert len(got) == n
        per_key: Dict[bytes, List[int]] = defaultdict(list)
        for r in sorted(got, key=lambda r: (r.partition, r.offset)):
            per_key[r.key].append(int(r.value))
        for k in range(KEYS):
            assert per_key[f"k{k}".encode()] == list(range(k, n, KEYS)), f"key k{k}: not in send order"
        at = {(r.partition, r.offset): int(r.value) for r in got}
        assert all(at[(m.partition, m.offset)] == i for i, m in enumerate(sent))


def producer_for(kafka: Any, **settings: Any) -> Producer:
    return Producer(bootstrap_servers=kafka.bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=5,
                    request_timeout_ms=15_000, **settings)


@pytest.mark.usefixtures("restore")
def test_leader_killed_mid_stream_then_restarted(kafka: Any) -> None:
    topic = new_topic(kafka)
    victim = kafka.leader(topic, 0)

    def disturb() -> None:
        log.info("killing broker %d", victim)
        kafka.kill(victim)
        # the controller fences the dead broker after its session times out and elects other leaders
        wait_until(lambda: every_partition(kafka, topic, lambda p: p.leader not in (victim, -1)),
                   f"new leaders for the partitions broker {victim} led")
        log.info("new leaders elected")
        time.sleep(1.0)  # records flow to the new leaders for a while
        kafka.restart(victim)
        log.info("broker %d is back", victim)

    with producer_for(kafka) as p:
        stream = Stream(p, topic)
        stream.run(disturb)
        stream.check(kafka)
        assert p.metrics()["record-error-total"] == 0


@pytest.mark.usefixtures("restore")
def test_controlled_shutdown_mid_stream_then_restart(kafka: Any) -> None:
    topic = new_topic(kafka)
    victim = kafka.leader(topic, 1)

    def disturb() -> None:
        log.info("stopping broker %d", victim)
        kafka.stop(victim)  # hands its leaderships over before it exits
        wait_until(lambda: every_partition(kafka, topic, lambda p: p.leader not in (victim, -1)),
                   f"the partitions broker {victim} led handed over")
        time.sleep(1.0)
        log.info("restarting broker %d", victim)
        kafka.restart(victim)
        log.info("broker %d is back", victim)

    with producer_for(kafka) as p:
        stream = Stream(p, topic)
        stream.run(disturb)
        stream.check(kafka)


@pytest.mark.usefixtures("restore")
def test_broker_down_longer_than_metadata_max_age(kafka: Any) -> None:
    """With metadata.max.age.ms=3000 the producer refreshes its metadata while the broker is down and drops
    it from its view; when it is back (and leads its partitions again) the producer must find it anew."""
    max_age_ms = 3000
    topic = new_topic(kafka)
    victim = kafka.leader(topic, 2)
    views: List[Set[int]] = []

    with producer_for(kafka, metadata_max_age_ms=max_age_ms) as p:

        def remember_view() -> None:
            nodes = set(p._metadata.cluster.nodes)  # the producer's current list of brokers
            if not views or views[-1] != nodes:
                views.append(nodes)

        def disturb() -> None:
            kafka.stop(victim)
            down_since = time.monotonic()
            wait_until(lambda: any(victim not in v for v in views), f"the producer to forget broker {victim}")
            # the broker stays down for over the metadata max age (and a second more)
            time.sleep(max(0.0, max_age_ms / 1000 + 1.0 - (time.monotonic() - down_since)))
            kafka.restart(victim)
            elect_preferred_leaders(kafka, topic)
            wait_until(lambda: victim in views[-1], f"the producer to see broker {victim} again")

        stream = Stream(p, topic)
        stream.on_record = remember_view
        stream.run(disturb)
        stream.check(kafka)
        assert views[0] == {1, 2, 3} and views[-1] == {1, 2, 3}
        assert any(v == {1, 2, 3} - {victim} for v in views), views
        assert victim in {info.leader for info in p.partitions_for(topic)}


@pytest.mark.usefixtures("restore")
def test_not_enough_replicas_is_retried_until_the_broker_is_back(kafka: Any, caplog: pytest.LogCaptureFixture) -> None:
    """min.insync.replicas=3 with one of the 3 replicas down: Apache Kafka refuses acks=all writes with
    NOT_ENOUGH_REPLICAS (retriable, nothing appended); the producer retries until the broker is back in
    sync, then every record is written exactly once."""
    caplog.set_level(logging.WARNING, logger="kproducer")
    topic = new_topic(kafka, min_isr=3, partitions=3)
    victim = kafka.broker_ids[-1]
    with producer_for(kafka, retry_backoff_max_ms=500) as p:
        first = [p.send(topic, f"before-{i}".encode(), key=f"k{i}".encode()) for i in range(30)]
        p.flush(WAIT)
        assert all(f.exception(0) is None for f in first)
        kafka.stop(victim)
        wait_until(lambda: every_partition(kafka, topic, lambda p: victim not in p.isr),
                   f"broker {victim} out of every ISR")
        during = [p.send(topic, f"during-{i}".encode(), key=f"k{i}".encode()) for i in range(30)]

        def refused() -> bool:
            return any("NOT_ENOUGH_REPLICAS" in r.getMessage() for r in caplog.records)

        wait_until(refused, "a NOT_ENOUGH_REPLICAS answer")
        assert not any("NOT_ENOUGH_REPLICAS_AFTER_APPEND" in r.getMessage() for r in caplog.records)
        assert not all(f.done() for f in during)  # refused so far: retried, not failed
        assert all(f.exception(0) is None for f in during if f.done())
        kafka.restart(victim)
        p.flush(WAIT)
        failed = [f.exception(0) for f in during if f.exception(0) is not None]
        assert not failed, failed[0]
        assert p.metrics()["record-retry-total"] > 0
        after = [p.send(topic, f"after-{i}".encode(), key=f"k{i}".encode()) for i in range(30)]
        p.flush(WAIT)
        assert all(f.exception(0) is None for f in after)
    got = consume(kafka.bootstrap_servers, topic, range(3), expected=90, timeout=WAIT)
    assert sorted(r.value for r in got) == sorted(
        f"{phase}-{i}".encode() for phase in ("before", "during", "after") for i in range(30))
    per_key: Dict[bytes, List[bytes]] = defaultdict(list)
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        per_key[r.key].append(r.value)
    for i in range(30):
        assert per_key[f"k{i}".encode()] == [f"{phase}-{i}".encode() for phase in ("before", "during", "after")]
