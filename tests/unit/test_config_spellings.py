"""Other clients' spellings of Java's settings (librdkafka's, aiokafka's), accepted as kproducer's settings with
their values converted where the clients differ; two spellings of one setting with different values are refused
naming both; settings without an equivalent are refused with what to do instead."""
from __future__ import annotations

from typing import Any, Dict

import pytest

from kproducer.config import NO_EQUIVALENT, ProducerConfig
from kproducer.errors import ConfigError

BASE: Dict[str, Any] = {"bootstrap.servers": "127.0.0.1:9092"}


def make(**settings: Any) -> ProducerConfig:
    return ProducerConfig({**BASE, **{k.replace("__", "."): v for k, v in settings.items()}})


@pytest.mark.needs("lz4")
def test_a_confluent_kafka_configuration_is_accepted_as_is() -> None:
    cfg = ProducerConfig({**BASE, "queue.buffering.max.ms": "20", "compression.codec": "lz4",
                          "message.timeout.ms": 300000, "message.max.bytes": 2000000, "message.send.max.retries": 10,
                          "queue.buffering.max.kbytes": "4096", "request.required.acks": -1,
                          "socket.timeout.ms": 60000, "socket.receive.buffer.bytes": 0})
    assert (cfg.linger_ms, cfg.compression_type, cfg.delivery_timeout_ms, cfg.max_request_size, cfg.retries) == (
        20, 3, 300000, 2000000, 10)
    assert cfg.buffer_memory == 4096 * 1024 and cfg.acks == -1 and cfg.request_timeout_ms == 60000
    assert cfg.receive_buffer_bytes == -1  # librdkafka's 0: the OS default
    assert cfg.spelled["linger.ms"] == "queue.buffering.max.ms"


@pytest.mark.parametrize("a, b", [("linger.ms", "queue.buffering.max.ms"), ("linger_ms", "queue_buffering_max_ms"),
                                  ("compression.type", "compression.codec"), ("batch_size", "max_batch_size"),
                                  ("request.timeout.ms", "socket.timeout.ms")])
def test_two_spellings_with_different_values_are_refused_naming_both(a: str, b: str) -> None:
    value_a, value_b = ("gzip", "lz4") if "compression" in a else (40000, 50000)
    with pytest.raises(ConfigError) as info:
        ProducerConfig({**BASE, a: value_a, b: value_b})
    assert a in str(info.value) and b in str(info.value) and "same setting" in str(info.value)
    same = ProducerConfig({**BASE, a: value_a, b: value_a})  # the same value twice: fine
    assert same.spelled


def test_the_same_value_in_other_units_is_the_same_setting() -> None:
    cfg = ProducerConfig({**BASE, "buffer.memory": 1 << 20, "queue.buffering.max.kbytes": 1024})
    assert cfg.buffer_memory == 1 << 20
    with pytest.raises(ConfigError, match="buffer.memory and queue.buffering.max.kbytes"):
        ProducerConfig({**BASE, "buffer.memory": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})


def test_converted_values_are_checked_as_kproducers() -> None:
    with pytest.raises(ConfigError, match=r"queue.buffering.max.kbytes must be an integer \(kilobytes\)"):
        make(queue__buffering__max__kbytes="lots")
    with pytest.raises(ConfigError, match="buffer.memory must be at least 1"):
        make(queue__buffering__max__kbytes=0)
    with pytest.raises(ConfigError, match=r"delivery.timeout.ms=5000 \(given as message.timeout.ms\) must be at least "
                                          r"linger.ms \+ request.timeout.ms = 30005"):
        make(message__timeout__ms=5000)
    assert make(message__timeout__ms=5000, request__timeout__ms=4000).delivery_timeout_ms == 5000
    with pytest.raises(ConfigError, match="compression.type"):
        make(compression__codec="brotli")


def test_librdkafka_partitioner_names() -> None:
    assert make(partitioner="murmur2_random").partitioner is None  # Java's default, which kproducer has
    with pytest.raises(ConfigError, match="'consistent_random' is librdkafka's"):
        make(partitioner="consistent_random")


@pytest.mark.parametrize("name", sorted(NO_EQUIVALENT))
def test_settings_without_an_equivalent_are_refused_with_advice(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig({**BASE, name: 1})
    assert f"unknown producer setting {name!r}: {NO_EQUIVALENT[name]}" == str(info.value)
