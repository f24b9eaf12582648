"""Issue 30, a new user's first hour, on the MockCluster and real sockets: what the user sees (log lines at
WARNING, error texts, time to the error) for a wrong port (item 1), a missing topic (item 2) and a broker
that goes away (item 3)."""
from __future__ import annotations

import logging
import re
import socket
import threading
import time
from typing import Callable, Dict, List, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    UnknownTopicOrPartitionError,
)
from kproducer.mock import MockCluster


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> List[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("kproducer") and r.levelno == logging.WARNING and text in r.getMessage()]


def test_a_wrong_port_is_a_warning_at_once_and_no_brokers_available(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    caplog.set_level(logging.WARNING, logger="kproducer")
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=2000)
    try:
        started = time.monotonic()
        with pytest.raises(NoBrokersAvailableError) as info:
            p.send("t", b"v").get(30)
        # (max.block.ms, as Java: the wait is bounded by it, not by a hidden default)
        assert time.monotonic() - started < 30
        assert f"127.0.0.1:{port}" in str(info.value) and "ECONNREFUSED" in str(info.value)
    finally:
        p.close(0)
    warned = _warnings(caplog, "could not be established")
    assert warned and warned[0].startswith(f"Connection to node -1 (127.0.0.1:{port}) could not be established")
    assert "Broker may not be available" in warned[0]
    assert len(warned) <= 2  # one per 10 s per address, not one per attempt


def test_a_missing_topic_says_the_broker_answered_and_that_auto_creation_is_off(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kproducer")
    with MockCluster(num_brokers=1) as cluster:  # (auto_create_topics=False, as Apache Kafka in the tests)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=1500) as p:
            with pytest.raises(KafkaTimeoutError) as info:
                p.send("no-such-topic", b"v").get(30)
    error = info.value
    text = str(error)
    assert not isinstance(error, NoBrokersAvailableError)
    assert "no broker is reachable" not in text
    assert "UNKNOWN_TOPIC_OR_PARTITION" in text and "broker 1 (127.0.0.1:" in text
    assert "auto.create.topics.enable" in text  # the broker does not create topics on metadata requests
    assert isinstance(error.__cause__, UnknownTopicOrPartitionError)
    # said at WARNING while waiting, not only when max.block.ms has passed
    warned = _warnings(caplog, "UNKNOWN_TOPIC_OR_PARTITION")
    assert len(warned) == 1 and "'no-such-topic'" in warned[0] and "max.block.ms" in warned[0]


def test_a_missing_topic_with_the_producers_auto_creation_off_names_that_setting() -> None:
    with MockCluster(num_brokers=1, auto_create_topics=True) as cluster:
        with Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=1000,
                      allow_auto_create_topics=False) as p:
            with pytest.raises(KafkaTimeoutError) as info:
                p.send("no-such-topic", b"v").get(30)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in str(info.value)
    assert "allow.auto.create.topics=false" in str(info.value)


def test_sasl_against_a_plaintext_listener_says_the_listener_does_not_speak_sasl() -> None:
    """Item 7: the mock (as Kafka's KafkaApis) answers SaslHandshake on a listener without SASL with
    ILLEGAL_SASL_STATE."""
    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_username="alice", sasl_password="alice-secret",
                      max_block_ms=20000) as p:
            started = time.monotonic()
            with pytest.raises(AuthenticationError) as info:
                p.send("t", b"v").get(30)
            assert time.monotonic() - started < 15  # fails fast, not after max.block.ms
    text = str(info.value)
    assert "listener does not speak SASL" in text and "check security.protocol" in text, text
    assert "127.0.0.1:" in text and "alice-secret" not in text


# -- item 3: a broker that goes away; errors that belong to no record ---------------------------------------


def _wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_expired_records_are_logged_counted_per_partition_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kproducer")
    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=2)
        p = Producer(bootstrap_servers=cluster.bootstrap_servers, delivery_timeout_ms=1500, request_timeout_ms=1000,
                     linger_ms=0)
        try:
            p.send("t", b"warm-up", partition=0).get(30)
            cluster.stop_broker(1)
            futures = [p.send("t", b"v%d" % i, partition=0 if i < 50 else 1) for i in range(80)]
            for f in futures:
                with pytest.raises(KafkaTimeoutError):
                    f.get(30)
        finally:
            p.close(30)
    warned = _warnings(caplog, "expired after delivery.timeout.ms=1500")
    assert 1 <= len(warned) <= 4, warned  # counted, not one line per batch or record
    counts: Dict[str, int] = {}
    for line in warned:
        for tp, n in re.findall(r"(t-\d): (\d+) record", line):
            counts[tp] = counts.get(tp, 0) + int(n)
    assert counts == {"t-0": 50, "t-1": 30}, warned
    assert "leader 1 (127.0.0.1:" in warned[0] and "ECONNREFUSED" in warned[0], warned[0]


def test_connection_count_is_a_metric() -> None:
    with MockCluster(num_brokers=3) as cluster:
        cluster.create_topic("t", partitions=3)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as p:
            for part in range(3):
                p.send("t", b"v", partition=part).get(30)
            # one connection per broker (the bootstrap connection may still be open)
            assert _wait_for(lambda: p.metrics()["connection-count"] == cluster.connection_count_total), \
                (p.metrics()["connection-count"], cluster.connection_count_total)
            assert p.metrics()["connection-count"] >= 3
            assert any(m.name == "connection-count" and m.group == "producer-metrics" for m in p.metric_list())
            before = p.metrics()["connection-count"]
            # its connections close (the bootstrap one too when it went there); no record needs it: they stay so
            cluster.stop_broker(2)
            assert _wait_for(lambda: p.metrics()["connection-count"] < before), (before, p.metrics())
            assert p.metrics()["connection-count"] >= 2


def test_error_cb_hears_an_unreachable_broker_off_the_callers_thread() -> None:
    heard: List[Tuple[KafkaError, str]] = []
    port = _closed_port()
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=1000,
                 error_cb=lambda e: heard.append((e, threading.current_thread().name)))
    try:
        with pytest.raises(NoBrokersAvailableError):
            p.send("t", b"v").get(30)
        assert _wait_for(lambda: bool(heard))
    finally:
        p.close(0)
    error, thread = heard[0]
    assert isinstance(error, KafkaConnectionError) and f"127.0.0.1:{port}" in str(error)
    assert thread != threading.current_thread().name
    assert len(heard) <= 2  # as often as the WARNING: once per address per 10 s


@pytest.mark.allow_internal_errors
def test_an_error_cb_that_raises_is_logged_and_the_producer_carries_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: List[KafkaError] = []

    def error_cb(e: KafkaError) -> None:
        calls.append(e)
        raise RuntimeError("boom")

    port = _closed_port()
    with Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=500, error_cb=error_cb) as p:
        for _ in range(2):
            with pytest.raises(NoBrokersAvailableError):  # (not NetworkThreadDiedError: the thread carries on)
                p.send("t", b"v").get(30)
        assert p._sender.is_alive()
    assert calls
    assert any("error_cb" in r.getMessage() and r.exc_info is not None for r in caplog.records), caplog.text


def test_error_cb_hears_an_authentication_failure() -> None:
    heard: List[KafkaError] = []
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"],
                     users={"alice": "alice-secret"}) as cluster:
        cluster.create_topic("t", partitions=1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_username="alice", sasl_password="wrong",
                      error_cb=heard.append) as p:
            with pytest.raises(AuthenticationError):
                p.send("t", b"v").get(30)
    assert heard and isinstance(heard[0], AuthenticationError)
    assert "wrong" not in str(heard[0])


def test_error_cb_hears_a_refused_producer_id() -> None:
    heard: List[KafkaError] = []
    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=1)
        # refused again and again (the producer asks again after each refusal): the record fails with it
        cluster.inject_errors("init_producer_id", [ClusterAuthorizationFailedError.code] * 100)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, error_cb=heard.append) as p:
            with pytest.raises(ClusterAuthorizationFailedError):
                p.send("t", b"v").get(30)
            assert _wait_for(lambda: any(isinstance(e, ClusterAuthorizationFailedError) for e in heard))


# -- item 8 -------------------------------------------------------------------------------------------


def test_close_0_of_a_producer_that_never_sent_logs_no_expiry(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kproducer")
    with MockCluster(num_brokers=1) as cluster:
        p = Producer(bootstrap_servers=cluster.bootstrap_servers)
        p.close(0)
        pending = Producer(bootstrap_servers=f"127.0.0.1:{_closed_port()}", max_block_ms=0)
        fut = pending.send("t", b"v")  # (fails at once: no metadata within max.block.ms=0)
        pending.close(0)
    assert fut.failed()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "close(" in r.getMessage()]


def test_close_0_with_records_queued_still_says_it_fails_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kproducer")
    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=1)
        p = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=60000, batch_size=1 << 20)
        p.partitions_for("t")
        fut = p.send("t", b"v")
        p.close(0)
    assert fut.failed()
    assert _warnings(caplog, "expired with records pending")


def test_send_batch_get_reports_the_serialized_sizes() -> None:
    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=3)
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
            values = [b"a", b"", None, b"x" * 300]
            keys = [b"k1", None, b"key-three", b""]
            mds = p.send_batch("t", values, keys=keys).get(30)
            assert [(m.serialized_key_size, m.serialized_value_size) for m in mds] == \
                [(2, 1), (-1, 0), (9, -1), (0, 300)]
            one = p.send("t", b"a", key=b"k1").get(30)
            assert (one.serialized_key_size, one.serialized_value_size) == (2, 1)  # as send() says
        with Producer(bootstrap_servers=cluster.bootstrap_servers, value_serializer="json",
                      key_serializer="str") as p:
            values2, keys2 = [{"a": 1}, [1, 2, 3]], ["é", "kk"]
            mds = p.send_batch("t", values2, keys=keys2).get(30)
            singles = [p.send("t", v, key=k).get(30) for k, v in zip(keys2, values2)]
            assert [(m.serialized_key_size, m.serialized_value_size) for m in mds] == \
                [(m.serialized_key_size, m.serialized_value_size) for m in singles]
            assert mds[0].serialized_key_size == 2 and mds[0].serialized_value_size > 0
