"""Sink options -> producer settings, validated on the driver. Needs neither pyspark nor pyarrow."""
from __future__ import annotations

import difflib
import logging
from typing import Dict, Mapping, NamedTuple, Optional

from ..config import HIDDEN, SETTINGS, ProducerConfig, canonical_item, canonical_name, is_secret, reveal
from ..errors import ConfigError

log = logging.getLogger(__name__)

KAFKA_PREFIX = "kafka."

#: sink options that are not producer settings
SINK_OPTIONS = ("topic",)

#: producer settings the sink changes from the producer's defaults (a user's kafka.* option wins):
#: bulk writes fill big batches, and 256 KiB batches measured ~1.7x the rows/s of 16 KiB ones here
SINK_DEFAULTS: Dict[str, str] = {"batch.size": "262144"}

#: options Spark itself may hand to a data source; accepted and ignored
_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})

#: producer settings that cannot be given as Spark options, and why
_UNSUPPORTED: Dict[str, str] = {
    "key.serializer": "keys are written as they are: give the key column as string or binary",
    "value.serializer": "values are written as they are: give the value column as string or binary",
    "partitioner": "it needs a Python callable; compute a 'partition' column instead",
    "transactional.id": ("the sink shares one producer per worker process between tasks, so it cannot "
                         "use transactions; it writes at-least-once"),
    "ssl.context": ("it needs a Python ssl.SSLContext, which a Spark option (a string) cannot carry: give the "
                    "TLS settings as kafka.ssl.* options (e.g. kafka.ssl.truststore.location)"),
    "sasl.oauth.token.provider": ("it needs a Python callable, which a Spark option (a string) cannot carry: use "
                                  "kafka.sasl.mechanism PLAIN or SCRAM-SHA-256/512 with kafka.sasl.jaas.config"),
}


class SinkOptions(NamedTuple):
    """What the options of ``df.write.format("kproducer")`` say."""

    topic: Optional[str]
    #: producer settings by their Java names, values as Spark passed them (strings), plus SINK_DEFAULTS
    settings: Dict[str, str]

    @property
    def bootstrap_servers(self) -> str:
        return self.settings["bootstrap.servers"]

    def __repr__(self) -> str:  # Spark and users may print the options: never the secrets
        shown = {k: (HIDDEN if is_secret(k) else v) for k, v in self.settings.items()}
        return f"SinkOptions(topic={self.topic!r}, settings={shown!r})"


def _suggest(name: str) -> str:
    candidates = [KAFKA_PREFIX + s for s in SETTINGS] + list(SINK_OPTIONS)
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse_options(options: Mapping[str, str]) -> SinkOptions:
    """Split and validate sink options.

    Security settings are given as Spark's kafka sink takes them (``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``, ...; also
    librdkafka's and kafka-python's names). No message raised or logged here shows a secret value, and
    the ``repr()`` of the result hides them.

    ``topic`` is the default topic (it wins over a ``topic`` column); ``kafka.<setting>`` are producer
    settings (``kafka.bootstrap.servers`` is required). Raises :class:`~kproducer.errors.ConfigError`
    naming the option for an unknown or unsupported producer setting, a bad value, a producer setting
    given without its ``kafka.`` prefix, or a likely misspelling of ``topic``. Other options are ignored
    (as Spark's own kafka sink does), with a warning.
    """
    topic: Optional[str] = None
    settings: Dict[str, str] = {}
    spelled: Dict[str, str] = {}
    for raw_name, value in options.items():
        name = raw_name.lower()
        if name.startswith(KAFKA_PREFIX):
            setting = name[len(KAFKA_PREFIX):]
            try:
                java = canonical_name(setting)
            except ConfigError:
                raise ConfigError(f"unknown option {raw_name!r}: {setting!r} is not a kproducer producer "
                                  f"setting{_suggest(name)}") from None
            try:
                java, value = canonical_item(setting, value)  # e.g. kafka-python's ssl_check_hostname
            except ConfigError as e:
                raise ConfigError(f"invalid option {raw_name!r}: {e}") from None
            if java in _UNSUPPORTED:
                raise ConfigError(f"option {raw_name!r} is not supported by the kproducer Spark sink: "
                                  f"{_UNSUPPORTED[java]}")
            if java in settings and reveal(settings[java]) != reveal(value):
                raise ConfigError(f"options {spelled[java]!r} and {raw_name!r} are the same producer setting "
                                  f"({java}) with different values; give it once")
            settings[java] = value
            spelled.setdefault(java, raw_name)
        elif name == "topic":
            topic = value.strip() if isinstance(value, str) else value
            if not topic:
                raise ConfigError("option 'topic' is empty: give a topic name or drop the option and use a "
                                  "'topic' column")
        elif name in _SPARK_OPTIONS:
            continue
        elif name == "path":
            raise ConfigError(f"the kproducer sink takes no path (got {value!r}): give the topic with "
                              ".option('topic', ...) or a 'topic' column, and call save() / start() without "
                              "arguments")
        else:
            as_setting: Optional[str]
            try:
                as_setting = canonical_name(name)
            except ConfigError:
                as_setting = None
            if as_setting is not None:
                raise ConfigError(f"option {raw_name!r} looks like a producer setting: producer settings are "
                                  f"given with the 'kafka.' prefix, e.g. 'kafka.{as_setting}'")
            if difflib.get_close_matches(name, SINK_OPTIONS, n=1, cutoff=0.75):
                raise ConfigError(f"unknown option {raw_name!r}{_suggest(name)}")
            log.warning("kproducer sink: ignoring unknown option %r (producer settings are kafka.<setting>)",
                        raw_name)
    if "bootstrap.servers" not in settings or not str(settings["bootstrap.servers"]).strip():
        raise ConfigError("option 'kafka.bootstrap.servers' is required, e.g. "
                          ".option('kafka.bootstrap.servers', 'host1:9092,host2:9092')")
    for name, value in SINK_DEFAULTS.items():
        settings.setdefault(name, value)
    try:
        ProducerConfig(settings)  # every value checked here, on the driver
    except ConfigError as e:
        raise ConfigError(f"invalid kafka.* option: {e}") from None
    return SinkOptions(topic, settings)


__all__ = ["KAFKA_PREFIX", "SINK_DEFAULTS", "SINK_OPTIONS", "SinkOptions", "parse_options"]
