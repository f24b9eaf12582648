"""The metadata wait of send() says why it timed out: NoBrokersAvailableError (a KafkaTimeoutError) when no
broker was ever reached, a plain KafkaTimeoutError when brokers answer but the topic is not there."""
from __future__ import annotations

import socket

import pytest

from kproducer import Producer
from kproducer.errors import KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailableError
from kproducer.mock import MockCluster


def _closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then closed: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_unreachable_bootstrap_raises_no_brokers_available() -> None:
    port = _closed_port()
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=300, reconnect_backoff_ms=10)
    try:
        with pytest.raises(NoBrokersAvailableError, match="not present in metadata after 300 ms") as info:
            p.send("t", value=b"v").get(5)
        # existing handlers of timeouts and of connection errors both catch it
        assert isinstance(info.value, KafkaTimeoutError) and isinstance(info.value, KafkaConnectionError)
        assert info.value.retriable
        assert f"127.0.0.1:{port}" in str(info.value)  # the last connection error of the broker
    finally:
        p.close(timeout=0)


def test_reachable_broker_without_the_topic_raises_a_plain_timeout() -> None:
    with MockCluster(1) as cluster:
        p = Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=300)
        try:
            with pytest.raises(KafkaTimeoutError, match="not present in metadata") as info:
                p.send("missing-topic", value=b"v").get(5)
            assert not isinstance(info.value, NoBrokersAvailableError)
        finally:
            p.close(timeout=0)
