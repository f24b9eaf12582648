"""Serializers: what ``key.serializer`` / ``value.serializer`` accept, and loading plug-ins by dotted name.

A serializer is given as one of

- a callable ``f(value) -> bytes | None`` (the simplest form, e.g. ``str.encode``);
- an object with ``serialize(topic, value, headers) -> bytes | None``: Java's ``Serializer`` with headers,
  the form a schema-registry serializer needs (it may add headers: ``headers`` is the record's mutable
  list of ``(str, bytes)`` pairs);
- the shortcuts ``"str"`` (UTF-8) and ``"json"`` (``json.dumps`` as UTF-8), or ``"bytes"`` (no conversion);
- a dotted name (``"mypkg.serde.AvroSerializer"``): the class is imported and instantiated without
  arguments (a module-level function or object is used as is). Java's StringSerializer and
  ByteArraySerializer names map to ``"str"`` and ``"bytes"``.

Every form is turned into one shape, ``(topic, value, headers) -> bytes | None``, once, when the producer is
created. ``None`` stays ``None`` for every shortcut (a tombstone stays a tombstone). As in Java, a serializer
made from a name or class gets ``configure(configs, is_key)`` (or ``configure(configs)``), and ``Producer.close()``
calls a serializer's ``close()``: see :mod:`kproducer.producer.plugins`.
"""
from __future__ import annotations

import importlib
import json
from typing import Any, Callable, List, Optional, Tuple

from .errors import ConfigError

Header = Tuple[str, Optional[bytes]]
#: the one shape every configured serializer is turned into
SerializeFn = Callable[[str, Any, List[Header]], Optional[bytes]]


class StringSerializer:
    """``str`` as UTF-8 (Java's StringSerializer); bytes pass through unchanged."""

    __slots__ = ("encoding",)

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def serialize(self, topic: str, value: Any, headers: List[Header]) -> Optional[bytes]:
        if value is None or isinstance(value, bytes):
            return value  # type: ignore[no-any-return]
        if not isinstance(value, str):
            raise TypeError(f"the 'str' serializer takes str, got {type(value).__name__}")
        return value.encode(self.encoding)

    def __repr__(self) -> str:
        return "StringSerializer()"


class JsonSerializer:
    """Any JSON-serializable value as compact UTF-8 JSON; None stays None (a tombstone)."""

    __slots__ = ()

    def serialize(self, topic: str, value: Any, headers: List[Header]) -> Optional[bytes]:
        if value is None:
            return None
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def __repr__(self) -> str:
        return "JsonSerializer()"


class BytesSerializer:
    """No conversion (Java's ByteArraySerializer): the value must already be bytes or None."""

    __slots__ = ()

    def serialize(self, topic: str, value: Any, headers: List[Header]) -> Optional[bytes]:
        return value  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return "BytesSerializer()"


SHORTCUTS = {"str": StringSerializer, "string": StringSerializer, "json": JsonSerializer, "bytes": BytesSerializer}
#: Java class names users bring along from a Java configuration
JAVA_NAMES = {
    "org.apache.kafka.common.serialization.StringSerializer": "str",
    "org.apache.kafka.common.serialization.ByteArraySerializer": "bytes",
    "org.apache.kafka.common.serialization.BytesSerializer": "bytes",
}


def load_object(name: str, setting: str, what: str) -> Any:
    """Import ``package.module.Name``; a class is instantiated without arguments. ConfigError when the
    name cannot be imported (says which setting and what went wrong)."""
    module_name, _, attr = name.strip().rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"{setting} must be {what}; {name!r} is not a dotted name (package.module.Name)")
    try:
        module = importlib.import_module(module_name)
        obj = getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{setting} must be {what}; {name!r} could not be imported: {e}") from None
    return instantiate(obj, setting) if isinstance(obj, type) else obj


def instantiate(cls: type, setting: str) -> Any:
    """A plug-in class given where an instance is expected (as Java configures serializers, partitioners and
    interceptors by class): made without arguments; ConfigError naming the setting when that fails."""
    try:
        return cls()
    except Exception as e:
        raise ConfigError(f"{setting}: {cls.__name__} could not be instantiated without arguments: {e}") from None


_SERIALIZER_WHAT = ("callable(value) -> bytes, an object with serialize(topic, value, headers), 'str', 'json', "
                    "'bytes' or a dotted class name")


def check_serializer(setting: str, spec: Any) -> Any:
    """Validate a key/value serializer setting; returns what to keep in the config (a shortcut or dotted
    name is loaded here, so that a typo fails when the producer is created)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        name = JAVA_NAMES.get(spec.strip(), spec.strip())
        if name.lower() in SHORTCUTS:
            return SHORTCUTS[name.lower()]()
        spec = load_object(name, setting, _SERIALIZER_WHAT)
    elif isinstance(spec, type) and callable(getattr(spec, "serialize", None)):
        spec = instantiate(spec, setting)  # a Serializer class rather than an instance, as Java configures it
    if callable(getattr(spec, "serialize", None)) or callable(spec):
        return spec
    raise ConfigError(f"{setting} must be {_SERIALIZER_WHAT}, got a {type(spec).__name__}")


def serialize_fn(spec: Any) -> Optional[SerializeFn]:
    """The ``(topic, value, headers)`` form of a checked serializer setting (None: no serializer)."""
    if spec is None:
        return None
    method = getattr(spec, "serialize", None)
    if callable(method):
        return method  # type: ignore[no-any-return]
    fn: Callable[[Any], Optional[bytes]] = spec

    def plain(topic: str, value: Any, headers: List[Header]) -> Optional[bytes]:
        return fn(value)

    return plain


__all__ = ["BytesSerializer", "JsonSerializer", "SerializeFn", "StringSerializer", "check_serializer",
           "load_object", "serialize_fn"]
