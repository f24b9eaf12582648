"""The producer's plug-ins (serializers, partitioner, interceptors) at start and at close, as Java's KafkaProducer
treats them.

- **configure**: a plug-in the producer made itself, from a dotted class name or a class (``partitioner.class``,
  ``interceptor.classes``, ``key.serializer``/``value.serializer`` given as names or classes), is configured
  when it defines ``configure``: ``configure(configs)``, or for a serializer whose ``configure`` takes two
  arguments ``configure(configs, is_key)`` (Java's ``Serializer.configure(Map, boolean)``). ``configs`` is a new
  dict of the settings the application gave, by Java name, as kproducer holds them (secrets as
  :class:`~kproducer.config.Password`), plus ``client.id`` (Java passes its originals plus client.id).
  Objects the application made are not configured (as in Java: it configured them itself). A ``configure``
  that raises fails the Producer's construction with ConfigError (Java fails the constructor too).
- **close**: :meth:`Producer.close` calls ``close()`` on every interceptor, the key and value serializers and the
  partitioner that have one, after the network thread has stopped (no more on_acknowledgement calls), in
  Java's order (interceptors, key serializer, value serializer, partitioner); each object once (a serializer
  used for keys and values is closed once); an exception is logged and swallowed.
"""
from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, List, Tuple

from ..config import SETTINGS, ProducerConfig
from ..errors import ConfigError

log = logging.getLogger(__name__)

_SERIALIZERS = ("key.serializer", "value.serializer")


def plugin_configs(cfg: ProducerConfig, client_id: str) -> Dict[str, Any]:
    """What ``configure`` gets: the settings given explicitly, by Java name, and ``client.id``."""
    configs = {java: getattr(cfg, SETTINGS[java].alias) for java in sorted(cfg.explicit)}
    configs["client.id"] = client_id
    return configs


def _takes_is_key(method: Any) -> bool:
    """Whether a serializer's configure takes (configs, is_key), Java's signature."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: Java's form
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def configure_plugins(cfg: ProducerConfig, client_id: str) -> None:
    """``configure`` each plug-in the producer made from a name or class (see the module's docstring)."""
    configs = plugin_configs(cfg, client_id)
    for setting, plugin in cfg.loaded_plugins:
        method = getattr(plugin, "configure", None)
        if not callable(method):
            continue
        try:
            if setting in _SERIALIZERS and _takes_is_key(method):
                method(dict(configs), setting == "key.serializer")
            else:
                method(dict(configs))
        except Exception as e:
            raise ConfigError(f"{setting}: {type(plugin).__name__}.configure(configs) raised "
                              f"{type(e).__name__}: {e}") from e


def closable_plugins(cfg: ProducerConfig) -> List[Tuple[str, Any]]:
    """``(setting, object)`` of each distinct plug-in with a ``close()``, in the order Java closes them."""
    candidates: List[Tuple[str, Any]] = [("interceptor.classes", i) for i in cfg.interceptor_classes or ()]
    candidates += [("key.serializer", cfg.key_serializer), ("value.serializer", cfg.value_serializer),
                   ("partitioner", cfg.partitioner)]
    seen: List[int] = []
    out: List[Tuple[str, Any]] = []
    for setting, plugin in candidates:
        if plugin is None or id(plugin) in seen or not callable(getattr(plugin, "close", None)):
            continue
        seen.append(id(plugin))
        out.append((setting, plugin))
    return out


def close_plugins(cfg: ProducerConfig) -> None:
    """``close()`` each plug-in that has one, once; an exception is logged and swallowed (Java's
    closeQuietly)."""
    for setting, plugin in closable_plugins(cfg):
        try:
            plugin.close()
        except Exception:
            log.warning("%s: %s.close() raised; ignored", setting, type(plugin).__name__, exc_info=True)


__all__ = ["close_plugins", "closable_plugins", "configure_plugins", "plugin_configs"]
