"""Producer interceptors (kproducer/producer/interceptors.py), as Java's ProducerInterceptor: on_send sees and
may change each record before serialization, on_acknowledgement hears of every record's outcome before its
callback, a raising interceptor is logged and skipped; configured as objects, classes or dotted names
(interceptor.classes). Also the partitioner's cluster view and partitioner.class by name."""
from __future__ import annotations

import logging
import threading
from typing import Any, Iterator, List, Optional, Tuple

import pytest

from kproducer import RecordMetadata
from kproducer.config import ProducerConfig
from kproducer.errors import ConfigError, MessageTooLargeError
from kproducer.producer.interceptors import ProducerRecord
from kproducer.producer.partitioner import ClusterView, RoundRobinPartitioner
from kproducer.protocol import messages as m
from tests.unit.producer_env import ProducerEnv, producer_env

Ack = Tuple[Optional[RecordMetadata], Optional[BaseException]]


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"t": [1, 1, 1]})


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())


class Recorder:
    """Records what it sees; on_send appends a tag to str values and adds a header."""

    def __init__(self, tag: str = "+") -> None:
        self.tag = tag
        self.sent: List[ProducerRecord] = []
        self.acks: List[Ack] = []
        self.lock = threading.Lock()
        self.closed = 0

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.sent.append(record)
        headers: List[Tuple[str, Optional[bytes]]] = list(record.headers or []) + [  # type: ignore[arg-type,assignment]
            ("via", self.tag.encode())]
        value = record.value + self.tag if isinstance(record.value, str) else record.value
        return record._replace(value=value, headers=headers)

    def on_acknowledgement(self, metadata: Optional[RecordMetadata], exception: Optional[BaseException]) -> None:
        with self.lock:
            self.acks.append((metadata, exception))

    def close(self) -> None:
        self.closed += 1


class Raising:
    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        raise RuntimeError("on_send is broken")

    def on_acknowledgement(self, metadata: Any, exception: Any) -> None:
        raise RuntimeError("on_acknowledgement is broken")


class NotARecord:
    def on_send(self, record: ProducerRecord) -> Any:
        return {"value": "oops"}


def test_on_send_runs_in_order_before_serialization_and_may_change_the_record(env: Env) -> None:
    a, b = Recorder("a"), Recorder("b")
    p = env.producer(interceptors=[a, b], value_serializer="str")
    md = p.send("t", "v", partition=1).get(5)
    assert a.sent == [ProducerRecord("t", "v", None, None, 1, None)]  # the record as given, not serialized
    assert b.sent[0].value == "va" and b.sent[0].headers == [("via", b"a")]
    [req] = env.selector.sent(m.PRODUCE)
    [rec] = req.batches()[("t", 1)].records
    assert rec.value == b"vab" and list(rec.headers) == [("via", b"a"), ("via", b"b")]
    assert md.partition == 1


def test_on_acknowledgement_comes_before_the_callback_with_the_metadata(env: Env) -> None:
    rec = Recorder()
    order: List[str] = []
    p = env.producer(interceptors=[rec])
    done = threading.Event()

    def callback(md: Any, e: Any) -> None:
        order.append(f"callback after {len(rec.acks)} acks")
        done.set()

    md = p.send("t", b"v", partition=2, callback=callback).get(5)
    assert done.wait(5)
    assert rec.acks == [(md, None)] and order == ["callback after 1 acks"]


def test_a_failed_record_reaches_the_interceptors_with_topic_and_partition(env: Env) -> None:
    rec = Recorder()
    p = env.producer(interceptors=[rec], max_request_size=1000)
    fut = p.send("t", b"x" * 2000, partition=2)
    assert isinstance(fut.exception(0), MessageTooLargeError)
    [(md, err)] = rec.acks
    assert md == RecordMetadata("t", 2, -1, -1, -1, -1) and err is fut.exception(0)
    with pytest.raises(TypeError):  # a raised error is reported too (Java's onSendError)
        p.send("t", 5)
    assert isinstance(rec.acks[-1][1], TypeError) and rec.acks[-1][0].partition == -1  # type: ignore[union-attr]


@pytest.mark.allow_internal_errors  # the interceptor raises on purpose: its traceback is logged
def test_a_raising_interceptor_is_logged_and_skipped(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder()
    p = env.producer(interceptors=[Raising(), NotARecord(), rec])
    seen: List[Ack] = []
    with caplog.at_level(logging.WARNING, logger="kproducer.producer.interceptors"):
        md = p.send("t", b"v", partition=0, callback=lambda m_, e: seen.append((m_, e))).get(5)
        p.flush(5)
    assert rec.sent == [ProducerRecord("t", b"v", None, None, 0, None)]  # unchanged by the two broken ones
    assert rec.acks == [(md, None)] and seen == [(md, None)]
    messages = [r.getMessage() for r in caplog.records]
    assert any("Raising.on_send raised" in msg for msg in messages)
    assert any("NotARecord.on_send raised" in msg for msg in messages)
    assert any("Raising.on_acknowledgement raised" in msg for msg in messages)


def test_send_batch_runs_each_record_through_the_interceptors(env: Env) -> None:
    rec = Recorder()
    p = env.producer(interceptors=[rec], value_serializer="str")
    mds = p.send_batch("t", ["a", "b", "c"], partition=0).get(5)
    p.flush(5)
    assert [r.value for r in rec.sent] == ["a", "b", "c"]
    assert env.selector.log_values(("t", 0)) == [b"a+", b"b+", b"c+"]
    acks = sorted(rec.acks, key=lambda a: a[0].offset)  # type: ignore[union-attr]
    assert [(a.partition, a.offset, a.timestamp, e) for a, e in acks] == [  # type: ignore[union-attr]
        (md.partition, md.offset, md.timestamp, None) for md in mds]
    assert [a.serialized_value_size for a, _e in acks] == [2, 2, 2]  # type: ignore[union-attr]


def test_interceptor_classes_by_name_and_close() -> None:
    cfg = ProducerConfig(bootstrap_servers="h:1",
                         interceptor_classes="tests.unit.test_interceptors.Recorder, tests.unit.test_interceptors.Recorder")
    assert [type(i).__name__ for i in cfg.interceptor_classes or ()] == ["Recorder", "Recorder"]
    assert ProducerConfig(bootstrap_servers="h:1", interceptors=[Recorder]).interceptor_classes[0].tag == "+"  # type: ignore[index]
    with pytest.raises(ConfigError, match="neither on_send"):
        ProducerConfig(bootstrap_servers="h:1", interceptors=[object()])
    with pytest.raises(ConfigError, match="could not be imported"):
        ProducerConfig({"bootstrap.servers": "h:1", "interceptor.classes": "nowhere.Interceptor"})


def test_no_interceptor_no_cost_path() -> None:
    from kproducer.producer.admission import RecordAdmission

    adm = RecordAdmission(ProducerConfig(bootstrap_servers="h:1", interceptors=[]))
    assert adm.interceptors is None and adm.plain


# -- partitioners -------------------------------------------------------------------------------------------

class JavaStylePartitioner:
    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any, Optional[bytes], Any, Optional[bytes]]] = []
        self.views: List[Tuple[Optional[int], Tuple[int, ...]]] = []

    def partition(self, topic: str, key: Any, key_bytes: Optional[bytes], value: Any, value_bytes: Optional[bytes],
                  cluster: ClusterView) -> int:
        self.calls.append((topic, key, key_bytes, value, value_bytes))
        self.views.append((cluster.partition_count(topic), cluster.available_partitions(topic)))
        return cluster.available_partitions(topic)[-1]


def test_a_java_style_partitioner_gets_the_raw_record_and_the_cluster_view(env: Env) -> None:
    part = JavaStylePartitioner()
    p = env.producer(partitioner=part, key_serializer="str", value_serializer="str")
    assert p.send("t", "v", key="k").get(5).partition == 2
    assert [md.partition for md in p.send_batch("t", ["v1", "v2"], keys=["k1", "k2"]).get(5)] == [2, 2]
    assert part.calls == [("t", "k", b"k", "v", b"v"), ("t", "k1", b"k1", "v1", b"v1"), ("t", "k2", b"k2", "v2", b"v2")]
    assert part.views == [(3, (0, 1, 2))] * 3


@pytest.mark.parametrize("name", ["org.apache.kafka.clients.producer.RoundRobinPartitioner",
                                  "kproducer.producer.partitioner.RoundRobinPartitioner"])
def test_partitioner_class_by_name(env: Env, name: str) -> None:
    p = env.producer(**{"partitioner.class": name})
    assert isinstance(p.config.partitioner, RoundRobinPartitioner)
    assert [p.send("t", b"v", key=b"same").get(5).partition for _ in range(4)] == [0, 1, 2, 0]


def test_javas_default_partitioner_names_mean_the_default() -> None:
    for name in ("org.apache.kafka.clients.producer.internals.DefaultPartitioner",
                 "org.apache.kafka.clients.producer.UniformStickyPartitioner"):
        assert ProducerConfig(bootstrap_servers="h:1", partitioner_class=name).partitioner is None
    with pytest.raises(ConfigError, match="partitioner must be"):
        ProducerConfig(bootstrap_servers="h:1", partitioner=42)


def test_a_record_failing_for_buffer_memory_is_acknowledged_once(env: Env) -> None:
    from kproducer.errors import BufferExhaustedError
    from tests.unit.scripted import HOLD

    env.selector.handlers[m.PRODUCE.key] = lambda req: HOLD  # nothing is ever acknowledged
    rec = Recorder()
    p = env.producer(interceptors=[rec], buffer_memory=2048, batch_size=1024, max_block_ms=30_000)
    p.partitions_for("t", timeout=5)
    p._max_block_ms = 50  # metadata is known: only the wait for memory is left, keep it short
    p.send("t", b"a" * 900, partition=0)
    p.send("t", b"b" * 900, partition=1)  # both 1024-byte reservations are taken now
    seen: List[Ack] = []
    fut = p.send("t", b"c" * 900, partition=2, callback=lambda md, e: seen.append((md, e)))
    assert isinstance(fut.exception(0), BufferExhaustedError)
    assert rec.acks == [(RecordMetadata("t", 2, -1, -1, -1, -1), fut.exception(0))]
    assert seen == [(None, fut.exception(0))]
