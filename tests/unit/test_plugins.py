"""Plug-ins at start and close, as Java's KafkaProducer: Producer.close() closes the interceptors, serializers and
partitioner that have a close() (once each, errors logged and swallowed); plug-ins the producer made from a class
name or class get configure(configs) (serializers configure(configs, is_key)) with the producer's settings."""
from __future__ import annotations

import logging
from typing import Any, Dict, Iterator, List, Optional

import pytest

from kproducer.errors import ConfigError
from kproducer.producer.interceptors import ProducerRecord
from kproducer.producer.partitioner import ClusterView
from tests.unit.producer_env import ProducerEnv, producer_env

#: what the plug-ins below did, in order (reset by each test)
EVENTS: List[str] = []


@pytest.fixture
def env() -> Iterator[ProducerEnv]:
    EVENTS.clear()
    yield from producer_env(ProducerEnv({"t": [1, 1]}))


class Interceptor:
    def __init__(self, name: str = "interceptor") -> None:
        self.name = name
        self.configs: List[Dict[str, Any]] = []

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return record

    def configure(self, configs: Dict[str, Any]) -> None:
        self.configs.append(configs)
        EVENTS.append(f"configure {self.name}")

    def close(self) -> None:
        EVENTS.append(f"close {self.name}")


class BrokenClose(Interceptor):
    def close(self) -> None:
        EVENTS.append(f"close {self.name}")
        raise RuntimeError("close is broken")


class Serializer:
    """Java's Serializer: configure(configs, is_key), serialize(topic, value, headers), close()."""

    def __init__(self, name: str = "serializer") -> None:
        self.name = name
        self.configured: List[bool] = []
        self.configs: Optional[Dict[str, Any]] = None

    def configure(self, configs: Dict[str, Any], is_key: bool) -> None:
        self.configs = configs
        self.configured.append(is_key)
        EVENTS.append(f"configure {self.name} is_key={is_key}")

    def serialize(self, topic: str, value: Any, headers: Any) -> Optional[bytes]:
        return None if value is None else str(value).encode()

    def close(self) -> None:
        EVENTS.append(f"close {self.name}")


class OneArgSerializer(Serializer):
    def configure(self, configs: Dict[str, Any]) -> None:  # type: ignore[override]
        self.configs = configs
        EVENTS.append(f"configure {self.name}")


class Partitioner:
    def __init__(self) -> None:
        self.configs: Optional[Dict[str, Any]] = None

    def configure(self, configs: Dict[str, Any]) -> None:
        self.configs = configs
        EVENTS.append("configure partitioner")

    def partition(self, topic: str, key: Any, key_bytes: Optional[bytes], value: Any, value_bytes: Optional[bytes],
                  cluster: ClusterView) -> int:
        return 1

    def close(self) -> None:
        EVENTS.append("close partitioner")


class FailingConfigure(Partitioner):
    def configure(self, configs: Dict[str, Any]) -> None:
        raise ValueError("needs schema.registry.url")


HERE = __name__


@pytest.mark.allow_internal_errors  # a plug-in's close() that raises, logged with its traceback
def test_close_closes_every_plugin_once_in_javas_order(env: ProducerEnv, caplog: pytest.LogCaptureFixture) -> None:
    shared = Serializer("serde")  # the same object for keys and values: closed once
    p = env.producer(interceptors=[Interceptor("i1"), BrokenClose("i2"), Interceptor("i3")], key_serializer=shared,
                     value_serializer=shared, partitioner=Partitioner())
    assert p.send("t", "v", key="k").get(5).partition == 1
    with caplog.at_level(logging.WARNING, logger="kproducer.producer.plugins"):
        p.close(5)
    assert EVENTS == ["close i1", "close i2", "close i3", "close serde", "close partitioner"]
    assert "BrokenClose.close() raised" in caplog.text and "close is broken" in caplog.text
    p.close(5)
    p.close(0)
    assert EVENTS == ["close i1", "close i2", "close i3", "close serde", "close partitioner"]
    # objects given as instances are the application's: never configured (as Java)
    assert not [e for e in EVENTS if e.startswith("configure")]


def test_plugins_without_close_and_plain_callables_are_left_alone(env: ProducerEnv) -> None:
    class OnlySend:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            return record

    p = env.producer(interceptors=[OnlySend()], key_serializer=str.encode, value_serializer="json",
                     partitioner=lambda topic, key, value, n: 0)
    assert p.send("t", {"a": 1}, key="k").get(5).partition == 0
    p.close(5)
    assert EVENTS == []


def test_plugins_made_from_names_are_configured_with_the_producers_settings(env: ProducerEnv) -> None:
    p = env.producer(client_id="plug-1", linger_ms=3, sasl_password="s3cret",
                     interceptor_classes=f"{HERE}.Interceptor, {HERE}.Interceptor",
                     key_serializer=f"{HERE}.Serializer", value_serializer=OneArgSerializer,
                     **{"partitioner.class": f"{HERE}.Partitioner"})
    cfg = p.config
    interceptors = list(cfg.interceptor_classes or ())
    assert EVENTS[:5] == ["configure serializer is_key=True", "configure serializer", "configure partitioner",
                          "configure interceptor", "configure interceptor"]
    key, value, part = cfg.key_serializer, cfg.value_serializer, cfg.partitioner
    assert key.configured == [True] and isinstance(value, OneArgSerializer) and isinstance(part, Partitioner)
    for configs in [key.configs, value.configs, part.configs] + [i.configs[0] for i in interceptors]:
        assert configs is not None
        assert configs["client.id"] == "plug-1" and configs["linger.ms"] == 3
        assert configs["bootstrap.servers"] == [("broker1", 9092)]
        assert "s3cret" not in repr(configs)  # a secret stays a Password (printed hidden)
        assert "batch.size" not in configs  # the settings given, as Java's originals
    assert key.configs is not value.configs  # each its own dict
    assert p.send("t", 1, key=2).get(5).partition == 1
    p.close(5)
    assert EVENTS[5:] == ["close interceptor", "close interceptor", "close serializer", "close serializer",
                          "close partitioner"]


def test_interceptor_list_mixing_instances_and_names(env: ProducerEnv) -> None:
    mine = Interceptor("mine")
    p = env.producer(interceptors=[mine, f"{HERE}.Interceptor"])
    made = (p.config.interceptor_classes or ())[1]
    assert mine.configs == [] and len(made.configs) == 1  # only the one the producer made
    assert made.configs[0]["client.id"] == p.client_id  # the generated client id
    p.close(5)
    assert EVENTS == ["configure interceptor", "close mine", "close interceptor"]


def test_a_failing_configure_fails_the_producer_with_the_setting_named(env: ProducerEnv) -> None:
    with pytest.raises(ConfigError, match=r"partitioner: FailingConfigure.configure\(configs\) raised ValueError: "
                                          r"needs schema.registry.url"):
        env.producer(partitioner=f"{HERE}.FailingConfigure")


def test_close_from_a_callback_leaves_plugins_to_the_next_close(env: ProducerEnv) -> None:
    p = env.producer(interceptors=[Interceptor("i")])
    closed_in_callback: List[bool] = []

    def callback(md: Any, exc: Optional[BaseException]) -> None:
        p.close()  # on the network thread: closes without waiting
        closed_in_callback.append(True)

    p.send("t", b"v", callback=callback).get(5)
    p._sender.join(10)
    assert closed_in_callback == [True] and not p._sender.is_alive()
    assert EVENTS == []  # not while the network thread may still call the interceptors
    p.close()
    assert EVENTS == ["close i"]
