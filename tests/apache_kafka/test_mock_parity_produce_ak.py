"""The same Produce scenarios on the MockCluster and on Apache Kafka 4.1, with the same client outcome.

* min.insync.replicas: a topic with 3 replicas and min.insync.replicas=3 loses one broker. acks=all writes
  are refused with NOT_ENOUGH_REPLICAS (retriable, nothing appended) and retried until the broker is back,
  then delivered exactly once in key order; acks=1 and acks=0 writes go through meanwhile. (Apache Kafka on a
  module cluster of 3 brokers of its own, as it stops one; the mock: ``MockCluster(3)`` with
  ``create_topic(replication_factor=, config=)``.)
* producer_byte_rate quota for a client id: the broker answers Produce with throttle_time_ms > 0 and kproducer
  sends that broker nothing until the throttle is over (produce-throttle-time-max > 0), nothing lost; and a
  raw client that ignores the throttle is not read from until the throttle is over (the broker mutes the
  connection, KIP-219). (Apache Kafka: the session cluster, whose quota window is 11 samples of 1 s; the
  mock: ``set_quota`` with samples of 100 ms, so it throttles after less data.)
"""
from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from typing import Any, Callable, Dict, Iterator, List

import pytest

from kproducer import Producer
from kproducer.mock.wire_client import WireClient
from kproducer.protocol.messages import METADATA, PRODUCE
from kproducer.protocol.records import RecordBatchBuilder
from kproducer.testing import MockCluster
from tests.conftest import start_apache_kafka
from tests.readback import consume
from tests.throttle_trace import ThrottleTrace

pytestmark = [pytest.mark.apache_kafka,
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

log = logging.getLogger(__name__)

BACKENDS = ["mock", "apache_kafka"]


class Backend:
    """What a scenario needs of a cluster, whichever it is."""

    def __init__(self, name: str, cluster: Any, wait: float, min_window_s: float = 10.0) -> None:
        self.name = name
        #: the shortest time a quota's rate is measured over (Kafka: quota.window.num - 1 samples)
        self.min_window_s = min_window_s
        self.cluster = cluster
        #: how long to wait for the cluster to react (a real broker restarting on a busy machine: long)
        self.wait = wait

    @property
    def bootstrap_servers(self) -> str:
        return str(self.cluster.bootstrap_servers)

    @property
    def broker_ids(self) -> List[int]:
        return list(self.cluster.broker_ids)

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: Dict[str, str]) -> None:
        if self.name == "mock":
            self.cluster.create_topic(name, partitions, replication_factor=replication_factor, config=config)
        else:
            self.cluster.create_topic(name, partitions, replication_factor, config)

    def stop(self, broker_id: int) -> None:
        if self.name == "mock":
            self.cluster.stop_broker(broker_id)
        else:
            self.cluster.stop(broker_id)  # controlled shutdown

    def start(self, broker_id: int) -> None:
        if self.name == "mock":
            self.cluster.start_broker(broker_id)
        else:
            self.cluster.restart(broker_id)

    def running(self, broker_id: int) -> bool:
        return bool(self.cluster.is_running(broker_id) if self.name == "mock" else self.cluster.alive(broker_id))

    def isr(self, topic: str) -> Dict[int, List[int]]:
        """Partition -> in-sync replicas, from a live broker's Metadata answer (empty if none answered)."""
        for b in self.broker_ids:
            if not self.running(b):
                continue
            host, port = self.broker_address(b)
            try:
                with WireClient(host, port, timeout=10, client_id="parity-metadata") as client:
                    md = client.request(METADATA, 12, {"topics": [{"name": topic}],
                                                       "allow_auto_topic_creation": False})
            except OSError:
                continue
            return {p["partition_index"]: sorted(p["isr_nodes"]) for t in md["topics"] for p in t["partitions"]}
        return {}

    def broker_address(self, broker_id: int) -> Any:
        if self.name == "mock":
            return self.cluster.broker_address(broker_id)
        return "127.0.0.1", self.cluster.port(broker_id)

    def leader(self, topic: str, partition: int) -> int:
        return int(self.cluster.leader(topic, partition))

    def set_quota(self, client_id: str, producer_byte_rate: int) -> None:
        self.cluster.set_quota(client_id=client_id, producer_byte_rate=producer_byte_rate)


def wait_until(condition: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def ak_three() -> Iterator[Any]:
    """Apache Kafka with 3 brokers of this module's own (a test stops one)."""
    cluster = start_apache_kafka(brokers=3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(params=BACKENDS)
def three_brokers(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "mock":
        with MockCluster(3) as mock:
            yield Backend("mock", mock, wait=30.0)
        return
    kafka = request.getfixturevalue("ak_three")
    try:
        yield Backend("apache_kafka", kafka, wait=120.0)
    finally:  # every broker up again for the next test
        for b in kafka.broker_ids:
            if not kafka.alive(b):
                kafka.restart(b, wait=False)
        kafka.wait_for_brokers(kafka.broker_ids, timeout=120)


@pytest.fixture(params=BACKENDS)
def quota_cluster(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "mock":
        with MockCluster(1, quota_window_ms=100) as mock:
            yield Backend("mock", mock, wait=30.0, min_window_s=1.0)
        return
    yield Backend("apache_kafka", request.getfixturevalue("apache_kafka"), wait=120.0)


def new_topic(backend: Backend, partitions: int, replication_factor: int = 1,
              config: Dict[str, str] = {}) -> str:  # noqa: B006 - read only
    name = f"parity-{uuid.uuid4().hex[:10]}"
    backend.create_topic(name, partitions, replication_factor, dict(config))
    return name


# ------------------------------------------------------------------------------------ min.insync.replicas


def test_not_enough_replicas_is_retried_until_the_broker_is_back(three_brokers: Backend,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    backend = three_brokers
    caplog.set_level(logging.WARNING, logger="kproducer")
    topic = new_topic(backend, 3, 3, {"min.insync.replicas": "3"})
    victim = backend.broker_ids[-1]
    with Producer(bootstrap_servers=backend.bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=5,
                  request_timeout_ms=15_000, retry_backoff_max_ms=500) as p:
        before = [p.send(topic, f"before-{i}".encode(), key=f"k{i}".encode()) for i in range(30)]
        p.flush(backend.wait)
        assert all(f.exception(0) is None for f in before)
        assert all(isr == backend.broker_ids for isr in backend.isr(topic).values())

        backend.stop(victim)
        wait_until(lambda: len(backend.isr(topic)) == 3 and all(victim not in isr for isr in backend.isr(topic).values()),
                   f"broker {victim} out of every ISR", backend.wait)
        during = [p.send(topic, f"during-{i}".encode(), key=f"k{i}".encode()) for i in range(30)]

        def refused() -> bool:
            return any("NOT_ENOUGH_REPLICAS" in r.getMessage() for r in caplog.records)

        wait_until(refused, "a NOT_ENOUGH_REPLICAS answer", backend.wait)
        assert not any("NOT_ENOUGH_REPLICAS_AFTER_APPEND" in r.getMessage() for r in caplog.records)
        assert not all(f.done() for f in during)  # refused so far: retried, not failed
        assert all(f.exception(0) is None for f in during if f.done())

        # acks=1 and acks=0 do not wait for the other replicas: written while the ISR is short
        for acks in ("1", "0"):
            with Producer(bootstrap_servers=backend.bootstrap_servers, acks=acks, enable_idempotence=False,
                          linger_ms=5, request_timeout_ms=15_000) as other:
                sent = [other.send(topic, f"acks{acks}-{i}".encode(), key=f"k{i}".encode()) for i in range(10)]
                other.flush(backend.wait)
                assert all(f.exception(0) is None for f in sent), f"acks={acks}: {[f.exception(0) for f in sent]}"
        assert not all(f.done() for f in during)  # still refused: the ISR is still short

        backend.start(victim)
        wait_until(lambda: all(isr == backend.broker_ids for isr in backend.isr(topic).values()),
                   f"broker {victim} back in every ISR", backend.wait)
        p.flush(backend.wait)
        failed = [f.exception(0) for f in during if f.exception(0) is not None]
        assert not failed, failed[0]
        assert p.metrics()["record-retry-total"] > 0
        after = [p.send(topic, f"after-{i}".encode(), key=f"k{i}".encode()) for i in range(30)]
        p.flush(backend.wait)
        assert all(f.exception(0) is None for f in after)
    got = consume(backend.bootstrap_servers, topic, range(3), expected=110, timeout=backend.wait)
    phases = ("before", "during", "after")
    expected = [f"{phase}-{i}".encode() for phase in phases for i in range(30)]
    expected += [f"acks{acks}-{i}".encode() for acks in ("1", "0") for i in range(10)]
    assert sorted(r.value for r in got) == sorted(expected)  # each once: nothing refused was appended
    per_key: Dict[bytes, List[bytes]] = defaultdict(list)
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        if not r.value.startswith(b"acks"):
            per_key[r.key].append(r.value)
    for i in range(30):
        assert per_key[f"k{i}".encode()] == [f"{phase}-{i}".encode() for phase in phases]


# ----------------------------------------------------------------------------------------------- quotas

RATE = 10 * 1024
VALUE = b"x" * 1000


def test_a_producer_byte_rate_quota_is_honoured_and_nothing_is_lost(quota_cluster: Backend) -> None:
    backend = quota_cluster
    topic = new_topic(backend, 1, 1)  # one partition: the quota is per broker
    client_id = f"kproducer-parity-{uuid.uuid4().hex[:8]}"
    backend.set_quota(client_id, RATE)
    sent = 0
    with Producer(bootstrap_servers=backend.bootstrap_servers, client_id=client_id, linger_ms=50,
                  batch_size=256 * 1024) as p:
        trace = ThrottleTrace(p)
        # bursts of ~20 KB until the broker throttles: Apache Kafka measures over at least 10 s (10 samples of
        # 1 s), the mock here over at least 1 s (10 of 100 ms); bounded
        deadline = time.monotonic() + 120
        while not trace.throttles and sent < 600 and time.monotonic() < deadline:
            futures = [p.send(topic, VALUE, key=b"%d" % (sent + i)) for i in range(20)]
            p.flush(120)
            for f in futures:
                f.get(0)
            sent += 20
        assert trace.throttles, f"no throttle_time_ms from the broker after {sent} KB"
        futures = [p.send(topic, VALUE, key=b"%d" % (sent + i)) for i in range(20)]  # waits for the throttle
        p.flush(120)
        for f in futures:
            f.get(0)
        sent += 20
        metrics = p.metrics()
        throttles = list(trace.throttles)
        early = trace.early_sends()
    assert metrics["produce-throttle-time-max"] > 0
    assert metrics["produce-throttle-time-max"] == max(ms for _t, _n, ms in throttles)
    assert metrics["produce-throttle-time-avg"] > 0
    assert not early, f"requests sent while throttled (sent_ms, node, api, throttle end): {early[:5]}"
    start, node, ms = throttles[0]
    later = [t for t, n, api in trace.sends if n == node and api == "Produce" and t > start]
    assert later and min(later) >= start + ms - 1
    got = consume(backend.bootstrap_servers, topic, [0], expected=sent, timeout=backend.wait)
    assert sorted(int(m.key) for m in got) == list(range(sent))


def _produce_body(topic: str, size: int) -> Dict[str, Any]:
    builder = RecordBatchBuilder(size + 1024)
    assert builder.try_append(int(time.time() * 1000), b"k", b"y" * size, []) == 0
    return {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": builder.build()}]}]}


def test_a_throttled_connection_is_not_read_until_the_throttle_is_over(quota_cluster: Backend) -> None:
    """A client that ignores throttle_time_ms (pipelines a second Produce right behind the throttled one) gets
    its second answer only once the throttle is over: the broker mutes the connection (KIP-219)."""
    backend = quota_cluster
    topic = new_topic(backend, 1, 1)
    client_id = f"kproducer-parity-raw-{uuid.uuid4().hex[:8]}"
    backend.set_quota(client_id, RATE)
    # one request of the quota's bytes over its shortest window and 1.5 s more: ~1.5 s of throttle
    big = _produce_body(topic, int(RATE * (backend.min_window_s + 1.5)))
    tiny = _produce_body(topic, 10)
    host, port = backend.broker_address(backend.leader(topic, 0))
    with WireClient(host, port, timeout=120, client_id=client_id) as client:
        # until the broker throttles: Apache Kafka applies a new quota shortly after ConfigCommand returns, so
        # the big request may pass; small ones then ask whether the quota is there (a big one again each 1 s)
        for attempt in range(60):
            started = time.monotonic()
            client.send(PRODUCE, 9, big if attempt % 10 == 0 else tiny)
            _, first = client.receive(PRODUCE, 9)
            answered = time.monotonic()
            assert first["responses"][0]["partition_responses"][0]["error_code"] == 0
            throttle_ms = first["throttle_time_ms"]
            if throttle_ms > 0:
                break
            time.sleep(0.1)
        assert throttle_ms > 0
        client.send(PRODUCE, 9, _produce_body(topic, 10))
        _, second = client.receive(PRODUCE, 9)
        second_at = time.monotonic()
    # the broker started the throttle when it handled the first request (between started and answered)
    assert second_at - started >= throttle_ms / 1000.0 - 0.05, (throttle_ms, second_at - started)
    assert second["responses"][0]["partition_responses"][0]["error_code"] == 0
    log.info("%s: throttled %d ms, the first answer after %.3f s, the second after %.3f s", backend.name,
             throttle_ms, answered - started, second_at - started)


# ------------------------------------------------------------------------------------ timestamps ahead


@pytest.fixture(params=BACKENDS)
def one_broker(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "mock":
        with MockCluster(1) as mock:
            yield Backend("mock", mock, wait=30.0)
        return
    yield Backend("apache_kafka", request.getfixturevalue("apache_kafka"), wait=120.0)


@pytest.mark.parametrize("late", ["two hours ahead", "the largest timestamp"])
def test_a_timestamp_too_far_ahead_is_refused_and_its_batch_fails(one_broker: Backend, late: str) -> None:
    """A CreateTime more than message.timestamp.after.max.ms (Kafka 4.x: one hour) ahead of the broker's clock:
    the broker refuses the batch with INVALID_TIMESTAMP; records sent on their own are not affected."""
    from kproducer.protocol.errors import InvalidTimestampError

    topic = new_topic(one_broker, 1)
    with Producer({"bootstrap.servers": one_broker.bootstrap_servers, "linger.ms": 0}) as producer:
        good = producer.send(topic, b"now", timestamp_ms=int(time.time() * 1000)).get(60)
        stamp = int(time.time() * 1000) + 2 * 3600 * 1000 if late == "two hours ahead" else 2**63 - 1
        with pytest.raises(InvalidTimestampError):
            producer.send(topic, b"later", timestamp_ms=stamp).get(60)
        after = producer.send(topic, b"after").get(60)
    assert good.offset == 0 and after.offset == 1
    assert [r.value for r in consume(one_broker.bootstrap_servers, topic, [0], 2)] == [b"now", b"after"]
