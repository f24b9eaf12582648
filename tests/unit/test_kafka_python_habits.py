"""Issue 30 item 5: kafka-python's future habits work (chainable ``add_callback(fn, *args, **kwargs)`` /
``add_errback(fn, *args, **kwargs)``), and a send() callback that cannot take ``(metadata, exception)`` is a
TypeError naming it at once, not a traceback logged for every record."""
from __future__ import annotations

import functools
from typing import Any, Iterator, List, Optional, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import KafkaError
from kproducer.mock import MockCluster
from kproducer.producer.future import CALLBACK_CODES, RecordMetadata
from kproducer.protocol.accel import MODULES, load

send_c = load(MODULES["producer"])


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(num_brokers=1) as c:
        c.create_topic("t", partitions=1)
        yield c


@pytest.fixture
def producer(cluster: MockCluster) -> Iterator[Producer]:
    # (max.block.ms: a send to a partition beyond the topic's count waits that long for metadata, then fails)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0, max_block_ms=300) as p:
        p.partitions_for("t")
        yield p


def test_kafka_python_chain_on_success(producer: Producer) -> None:
    seen: List[Tuple[str, Any]] = []
    fut = producer.send("t", b"v")
    same = fut.add_callback(lambda md: seen.append(("ok", md))).add_errback(lambda e: seen.append(("err", e)))
    assert same is fut
    md = fut.get(30)
    producer.flush(30)
    assert seen == [("ok", md)]


def test_kafka_python_chain_on_failure(producer: Producer) -> None:
    seen: List[Tuple[str, Any]] = []
    fut = producer.send("t", b"v", partition=7)  # (no partition 7: the future fails)
    fut.add_callback(lambda md: seen.append(("ok", md))).add_errback(lambda e: seen.append(("err", e)))
    assert fut.failed()
    assert len(seen) == 1 and seen[0][0] == "err" and isinstance(seen[0][1], KafkaError)


def test_extra_arguments_are_passed_as_kafka_python_does(producer: Producer) -> None:
    seen: List[Any] = []

    def on_ok(md: RecordMetadata, tag: str, *, n: int) -> None:
        seen.append(("ok", md.topic, tag, n))

    def on_err(exc: BaseException, tag: str) -> None:
        seen.append(("err", type(exc).__name__, tag))

    producer.send("t", b"v").add_callback(on_ok, "a", n=1).add_errback(on_err, "b").get(30)
    producer.send("t", b"v", partition=9).add_callback(on_ok, "c", n=2).add_errback(on_err, "d")
    producer.flush(30)
    assert seen[0] == ("ok", "t", "a", 1)
    assert seen[1][0] == "err" and seen[1][2] == "d" and len(seen) == 2


def test_kproducers_two_argument_form_still_gets_both(producer: Producer) -> None:
    seen: List[Tuple[Optional[RecordMetadata], Optional[BaseException]]] = []
    fut = producer.send("t", b"v")
    assert fut.add_callback(lambda md, exc: seen.append((md, exc))) is fut
    fut.get(30)
    producer.flush(30)
    assert seen and seen[0][0] is not None and seen[0][1] is None
    bad = producer.send("t", b"v", partition=9)
    bad.add_callback(lambda md, exc: seen.append((md, exc)))
    assert seen[-1][0] is None and isinstance(seen[-1][1], KafkaError)


def test_add_callback_with_arguments_it_cannot_take_fails_at_once(producer: Producer) -> None:
    fut = producer.send("t", b"v")
    with pytest.raises(TypeError, match="add_callback"):
        fut.add_callback(lambda md: None, "extra")
    with pytest.raises(TypeError, match="add_errback"):
        fut.add_errback(lambda: None)
    fut.get(30)


def test_a_one_argument_send_callback_is_a_type_error_naming_it(cluster: MockCluster, producer: Producer) -> None:
    before = cluster.high_watermark("t")

    def on_delivery(md: Any) -> None:
        pass

    with pytest.raises(TypeError) as info:
        producer.send("t", b"v", callback=on_delivery)
    text = str(info.value)
    assert "on_delivery" in text and "callback(metadata, exception)" in text and "add_callback" in text
    with pytest.raises(TypeError, match="lambda"):
        producer.send("t", b"v", callback=lambda md: None)
    with pytest.raises(TypeError, match="callable"):
        producer.send("t", b"v", callback="not callable")  # type: ignore[arg-type]

    class OneArg:
        def __call__(self, md: Any) -> None:
            pass

    with pytest.raises(TypeError, match="OneArg"):
        producer.send("t", b"v", callback=OneArg())
    with pytest.raises(TypeError):
        producer.send("t", b"v", callback=functools.partial(lambda a, b, c: None, 1, 2))
    producer.flush(30)
    assert cluster.high_watermark("t") == before  # nothing was queued


def test_good_callbacks_of_every_kind_are_taken(producer: Producer) -> None:
    seen: List[str] = []

    class Handler:
        def on_delivery(self, md: Any, exc: Any) -> None:
            seen.append("method")

        def __call__(self, md: Any, exc: Any = None) -> None:
            seen.append("object")

    h = Handler()
    futures = [producer.send("t", b"v", callback=cb) for cb in (
        lambda md, exc: seen.append("lambda"), h.on_delivery, h, functools.partial(lambda tag, md, exc: seen.append(tag),
                                                                                       "partial"),
        lambda *args: seen.append("varargs"))]
    for f in futures:
        f.get(30)
    producer.flush(30)
    assert sorted(seen) == ["lambda", "method", "object", "partial", "varargs"]


def test_a_lambda_written_in_a_loop_is_checked_once_and_keeps_the_compiled_path(cluster: MockCluster) -> None:
    seen: List[int] = []
    # (linger: the partition's batch stays open, so that plain records take the compiled send())
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=60000, batch_size=1 << 20) as producer:
        producer.partitions_for("t")
        for _ in range(3):
            producer.send("t", b"v", callback=lambda md, exc: seen.append(1))
        code = (lambda md, exc: seen.append(1)).__code__  # (another lambda: its own code)
        assert id(code) not in CALLBACK_CODES
        if send_c is not None:
            fast = producer._fast
            assert fast is not None
            hits = fast.hits
            for _ in range(50):
                producer.send("t", b"v", callback=lambda md, exc: None)
            assert fast.hits - hits >= 49  # (the first is checked by the Python send())

            class H:
                def done(self, md: Any, exc: Any) -> None:
                    pass

                def __call__(self, md: Any, exc: Any) -> None:
                    pass

            for cb in (H().done, H()):
                hits = fast.hits
                for _ in range(50):
                    producer.send("t", b"v", callback=cb)
                assert fast.hits - hits >= 49
        producer.flush(30)
    assert len(seen) == 3


def test_the_compiled_send_checks_the_callback_too(cluster: MockCluster) -> None:
    """With an open batch for the partition (linger), a plain record takes the compiled send(): the callback is
    checked there as well."""
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=60000, batch_size=1 << 20) as p:
        p.partitions_for("t")
        first = p.send("t", b"v", partition=0)  # opens the batch
        for _ in range(3):
            with pytest.raises(TypeError, match="callback"):
                p.send("t", b"v", partition=0, callback=lambda md: None)
        if send_c is not None:
            assert p._fast is not None
            hits = p._fast.hits
            for _ in range(3):
                p.send("t", b"v", partition=0, callback=lambda md, exc: None)
            assert p._fast.hits > hits  # a good callback stays on the compiled path
        p.flush(30)
        assert first.get(30).offset >= 0
