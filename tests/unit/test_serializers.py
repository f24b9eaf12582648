"""Serializers (kproducer/serialization.py): a plain callable, an object with serialize(topic, value, headers)
that may add headers, the "str"/"json"/"bytes" shortcuts, Java class names and dotted names; through send()
and send_batch() alike. Checked on what the scripted broker received."""
from __future__ import annotations

import json
from typing import Any, Iterator, List, Optional, Tuple

import pytest

from kproducer.config import ProducerConfig
from kproducer.errors import ConfigError, SerializationError
from kproducer.protocol import messages as m
from kproducer.serialization import JsonSerializer, StringSerializer
from tests.unit.producer_env import ProducerEnv, producer_env

Header = Tuple[str, Optional[bytes]]


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"t": [1]})

    def stored(self) -> List[Tuple[Optional[bytes], Optional[bytes], List[Header]]]:
        """(key, value, headers) of every record the broker received, in order."""
        out = []
        for req in self.selector.sent(m.PRODUCE):
            for rec in req.batches()[("t", 0)].records:
                out.append((rec.key, rec.value, list(rec.headers)))
        return out


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())


class SchemaIdSerializer:
    """A schema-registry style serializer: sees the topic, tags the record with a header."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any, List[Header]]] = []

    def serialize(self, topic: str, value: Any, headers: List[Header]) -> Optional[bytes]:
        self.calls.append((topic, value, list(headers)))
        headers.append(("schema.id", b"7"))
        return None if value is None else json.dumps(value).encode()


def test_a_plain_callable_still_works(env: Env) -> None:
    p = env.producer(value_serializer=str.upper, key_serializer=str.encode)
    with pytest.raises(SerializationError, match="returned str, not bytes"):
        p.send("t", "v", key="k")


def test_a_callable_may_return_a_bytearray(env: Env) -> None:
    p = env.producer(value_serializer=lambda v: bytearray(v, "ascii"), key_serializer=str.encode)
    p.send("t", "v", key="k").get(5)
    assert env.stored() == [(b"k", b"v", [])]


def test_an_object_with_serialize_sees_topic_and_headers_and_may_add_headers(env: Env) -> None:
    ser = SchemaIdSerializer()
    p = env.producer(value_serializer=ser)
    p.send("t", {"a": 1}, headers=[("trace", b"x")]).get(5)
    p.send("t", None).get(5)  # a tombstone stays a tombstone (the serializer decides)
    assert ser.calls == [("t", {"a": 1}, [("trace", b"x")]), ("t", None, [])]
    assert env.stored() == [(None, b'{"a": 1}', [("trace", b"x"), ("schema.id", b"7")]),
                            (None, None, [("schema.id", b"7")])]


def test_send_batch_gives_each_record_its_own_headers_list(env: Env) -> None:
    ser = SchemaIdSerializer()
    p = env.producer(value_serializer=ser, key_serializer="str")
    p.send_batch("t", [{"n": 1}, {"n": 2}], keys=["a", "b"], headers=[None, {"h": b"2"}]).get(5)
    assert env.stored() == [(b"a", b'{"n": 1}', [("schema.id", b"7")]),
                            (b"b", b'{"n": 2}', [("h", b"2"), ("schema.id", b"7")])]


def test_a_header_a_serializer_adds_must_be_a_header(env: Env) -> None:
    class Bad:
        def serialize(self, topic: str, value: Any, headers: List[Any]) -> bytes:
            headers.append(("n", 5))
            return b"v"

    p = env.producer(value_serializer=Bad())
    with pytest.raises(TypeError, match="header 'n': value must be bytes"):
        p.send("t", "v")
    with pytest.raises(TypeError, match="header 'n': value must be bytes"):
        p.send_batch("t", ["v"])
    assert env.selector.sent(m.PRODUCE) == []


@pytest.mark.parametrize("spec", ["str", "string", "org.apache.kafka.common.serialization.StringSerializer",
                                  "kproducer.serialization.StringSerializer", StringSerializer])
def test_string_serializer_spellings(env: Env, spec: Any) -> None:
    p = env.producer(value_serializer=spec, key_serializer=spec)
    p.send("t", "héllo", key="k").get(5)
    p.send("t", None, key=b"raw").get(5)  # None stays None; bytes pass through
    assert env.stored() == [(b"k", "héllo".encode(), []), (b"raw", None, [])]
    with pytest.raises(SerializationError, match="takes str, got int"):
        p.send("t", 5)


def test_json_serializer(env: Env) -> None:
    p = env.producer(value_serializer="json", key_serializer="json")
    p.send("t", {"é": [1, 2.5, None]}, key=17).get(5)
    p.send("t", None, key=None).get(5)
    assert env.stored() == [(b"17", '{"é":[1,2.5,null]}'.encode(), []), (None, None, [])]
    with pytest.raises(SerializationError, match="value_serializer failed"):
        p.send("t", {1, 2})


def test_bytes_serializer_is_no_conversion(env: Env) -> None:
    p = env.producer(value_serializer="org.apache.kafka.common.serialization.ByteArraySerializer")
    p.send("t", b"as is").get(5)
    assert env.stored() == [(None, b"as is", [])]
    with pytest.raises(SerializationError, match="returned str"):
        p.send("t", "text")


def test_a_serializer_class_is_instantiated() -> None:
    cfg = ProducerConfig(bootstrap_servers="h:1", value_serializer=JsonSerializer,
                         key_serializer="kproducer.serialization.JsonSerializer")
    assert isinstance(cfg.value_serializer, JsonSerializer) and isinstance(cfg.key_serializer, JsonSerializer)


@pytest.mark.parametrize("spec, fragment", [
    ("no_such_module.Serializer", "could not be imported"),
    ("kproducer.serialization.NoSuchThing", "could not be imported"),
    ("yaml", "not a dotted name"),
    (5, "got a int"),
])
def test_bad_serializer_settings_fail_at_creation(spec: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig(bootstrap_servers="h:1", value_serializer=spec)
    assert "value.serializer must be" in str(info.value) and fragment in str(info.value)


def test_no_serializer_keeps_the_fast_path() -> None:
    from kproducer.producer.admission import RecordAdmission

    assert RecordAdmission(ProducerConfig(bootstrap_servers="h:1")).plain
    assert not RecordAdmission(ProducerConfig(bootstrap_servers="h:1", value_serializer="str")).plain
