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
    "transactional.id": ("the sink chooses the transactional ids itself: use .option('kproducer.guarantee', "
                         "'exactly_once') (and 'kproducer.transactional.id.prefix' to choose their prefix)"),
    "ssl.context": ("it needs a Python ssl.SSLContext, which a Spark option (a string) cannot carry: give the "
                    "TLS settings as kafka.ssl.* options (e.g. kafka.ssl.truststore.location)"),
    "sasl.oauth.token.provider": ("it needs a Python callable, which a Spark option (a string) cannot carry: use "
                                  "kafka.sasl.mechanism PLAIN or SCRAM-SHA-256/512 with kafka.sasl.jaas.config"),
}


KPRODUCER_PREFIX = "kproducer."

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)

#: ``kproducer.*`` options: the sink's own
_KPRODUCER_OPTIONS = ("guarantee", "transactional.id.prefix", "write.id", "buffer.bytes", "trigger.interval.ms",
                      "columnar")
#: exactly_once: how much of its input a task holds (Arrow batches, bytes) before it opens its transaction
DEFAULT_BUFFER_BYTES = 16 * 1024 * 1024
#: fault injection for the sink's own tests, each a non-negative integer (see _sink._Faults): attempt 0 of a
#: task (of Spark partition test.partition, when given) fails / sleeps test.sleep.ms / SIGKILLs its executor JVM
#: after writing that many rows (flushed); test.fail.in.commit=1: the driver's commit() raises; test.kill.driver:
#: the driver's commit() SIGKILLs that process (the driver program) and exits
_TEST_OPTIONS = ("test.fail.after.rows", "test.partition", "test.sleep.after.rows", "test.sleep.ms",
                 "test.kill.executor.after.rows", "test.fail.in.commit", "test.kill.driver")


class SinkOptions(NamedTuple):
    """What the options of ``df.write.format("kproducer")`` say."""

    topic: Optional[str]
    #: producer settings by their Java names, values as Spark passed them (strings), plus SINK_DEFAULTS
    settings: Dict[str, str]
    #: ``kproducer.guarantee``: at_least_once (default) or exactly_once
    guarantee: str = AT_LEAST_ONCE
    #: ``kproducer.transactional.id.prefix`` (exactly_once): None = ``kproducer-<write id>`` (batch) or
    #: ``kproducer-<query id>`` (streams)
    transactional_id_prefix: Optional[str] = None
    #: ``kproducer.test.*`` fault injection (tests only)
    faults: Dict[str, int] = {}
    #: ``kproducer.columnar`` (default true): encode records straight from the Arrow buffers when the rows
    #: allow it (no headers column); false: always the per-row path (bytes objects through send_batch)
    columnar: bool = True
    #: ``kproducer.write.id`` (exactly_once batch writes): the same id on a re-run of a failed write makes the
    #: partitions committed before write nothing; None = a new random id per save()
    write_id: Optional[str] = None
    #: ``kproducer.buffer.bytes`` (exactly_once): a task holds up to this much of its input before it opens its
    #: transaction (0: opens it at its first row)
    buffer_bytes: int = DEFAULT_BUFFER_BYTES

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @property
    def bootstrap_servers(self) -> str:
        return self.settings["bootstrap.servers"]

    def __repr__(self) -> str:  # Spark and users may print the options: never the secrets
        shown = {k: (HIDDEN if is_secret(k) else v) for k, v in self.settings.items()}
        extra = f", guarantee={self.guarantee!r}" if self.exactly_once else ""
        if self.write_id is not None:
            extra += f", write_id={self.write_id!r}"
        return f"SinkOptions(topic={self.topic!r}, settings={shown!r}{extra})"


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
    guarantee = AT_LEAST_ONCE
    prefix: Optional[str] = None
    trigger_ms = 0
    faults: Dict[str, int] = {}
    columnar = True
    write_id: Optional[str] = None
    buffer_bytes: Optional[int] = None
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
        elif name.startswith(KPRODUCER_PREFIX):
            own = name[len(KPRODUCER_PREFIX):]
            text = str(value).strip()
            if own == "guarantee":
                guarantee = text.lower().replace("-", "_")
                if guarantee not in GUARANTEES:
                    raise ConfigError(f"option {raw_name!r} must be one of {', '.join(GUARANTEES)}, got {value!r}")
            elif own == "columnar":
                if text.lower() not in ("true", "false"):
                    raise ConfigError(f"option {raw_name!r} must be true or false, got {value!r}")
                columnar = text.lower() == "true"
            elif own in ("transactional.id.prefix", "write.id"):
                if not text:
                    raise ConfigError(f"option {raw_name!r} is empty: give a value or drop the option")
                if own == "write.id":
                    write_id = text
                else:
                    prefix = text
            elif own in ("trigger.interval.ms", "buffer.bytes") or own in _TEST_OPTIONS:
                try:
                    number = int(text)
                except ValueError:
                    number = -1
                if number < 0:
                    raise ConfigError(f"option {raw_name!r} must be a non-negative integer, got {value!r}")
                if own == "trigger.interval.ms":
                    trigger_ms = number
                elif own == "buffer.bytes":
                    buffer_bytes = number
                else:
                    faults[own] = number
            else:
                close = difflib.get_close_matches(name, [KPRODUCER_PREFIX + o for o in _KPRODUCER_OPTIONS],
                                                  n=1, cutoff=0.6)
                raise ConfigError(f"unknown option {raw_name!r}: the sink's own options are "
                                  f"{', '.join(KPRODUCER_PREFIX + o for o in _KPRODUCER_OPTIONS)}"
                                  + (f"; did you mean {close[0]!r}?" if close else ""))
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
    if guarantee == EXACTLY_ONCE:
        _check_exactly_once(settings)
        if trigger_ms:
            log.warning("kproducer sink: option 'kproducer.trigger.interval.ms' is no longer used (each task commits "
                        "its own transaction: none outlives its task); drop it")
    else:
        given = [n for n, v in (("transactional.id.prefix", prefix), ("write.id", write_id),
                                ("buffer.bytes", buffer_bytes), ("trigger.interval.ms", trigger_ms or None))
                 if v is not None]
        if given:
            raise ConfigError(f"option(s) {', '.join(repr(KPRODUCER_PREFIX + n) for n in given)} apply to "
                              ".option('kproducer.guarantee', 'exactly_once') only")
    return SinkOptions(topic, settings, guarantee, prefix, faults, columnar, write_id,
                       DEFAULT_BUFFER_BYTES if buffer_bytes is None else buffer_bytes)


def _check_exactly_once(settings: Dict[str, str]) -> None:
    """Exactly-once writes: transactional producers must be possible with these settings."""
    try:
        cfg = ProducerConfig(dict(settings, **{"transactional.id": "kproducer-spark-check"}))
    except ConfigError as e:
        raise ConfigError(f"kproducer.guarantee=exactly_once writes through Kafka transactions, which these "
                          f"settings do not allow: {e}") from None
    log.info("kproducer sink: exactly-once, one transaction per task, transaction.timeout.ms=%d",
             cfg.transaction_timeout_ms)


__all__ = ["AT_LEAST_ONCE", "DEFAULT_BUFFER_BYTES", "EXACTLY_ONCE", "GUARANTEES", "KAFKA_PREFIX", "KPRODUCER_PREFIX", "SINK_DEFAULTS",
           "SINK_OPTIONS", "SinkOptions", "parse_options"]
