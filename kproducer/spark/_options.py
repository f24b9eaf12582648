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
_KPRODUCER_OPTIONS = ("guarantee", "transactional.id.prefix", "trigger.interval.ms", "columnar")
#: fault injection for the sink's own tests (each takes a count; and test.kill.driver.after.commits
#: "<count>:<pid>": the driver's commit SIGKILLs the driver program ``pid`` after that many commits)
_TEST_OPTIONS = ("test.fail.after.rows", "test.fail.commit.after")


class SinkOptions(NamedTuple):
    """What the options of ``df.write.format("kproducer")`` say."""

    topic: Optional[str]
    #: producer settings by their Java names, values as Spark passed them (strings), plus SINK_DEFAULTS
    settings: Dict[str, str]
    #: ``kproducer.guarantee``: at_least_once (default) or exactly_once
    guarantee: str = AT_LEAST_ONCE
    #: ``kproducer.transactional.id.prefix`` (exactly_once): None = derived from the query id (streams) or
    #: a new random one per write (batch)
    transactional_id_prefix: Optional[str] = None
    #: ``kproducer.trigger.interval.ms`` (exactly_once streams): checked against transaction.timeout.ms
    trigger_interval_ms: int = 0
    #: ``kproducer.test.*`` fault injection (tests only)
    faults: Dict[str, int] = {}
    #: ``kproducer.columnar`` (default true): encode records straight from the Arrow buffers when the rows
    #: allow it (no headers column); false: always the per-row path (bytes objects through send_batch)
    columnar: bool = True

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @property
    def bootstrap_servers(self) -> str:
        return self.settings["bootstrap.servers"]

    def __repr__(self) -> str:  # Spark and users may print the options: never the secrets
        shown = {k: (HIDDEN if is_secret(k) else v) for k, v in self.settings.items()}
        extra = f", guarantee={self.guarantee!r}" if self.exactly_once else ""
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
            elif own == "transactional.id.prefix":
                if not text:
                    raise ConfigError(f"option {raw_name!r} is empty: give a prefix or drop the option")
                prefix = text
            elif own == "test.kill.driver.after.commits":
                count, _, pid = text.partition(":")
                if not (count.isdigit() and pid.isdigit()):
                    raise ConfigError(f"option {raw_name!r} must be '<commits>:<driver pid>', got {value!r}")
                faults[own] = int(count)
                faults["test.kill.driver.pid"] = int(pid)
            elif own == "trigger.interval.ms" or own in _TEST_OPTIONS:
                try:
                    number = int(text)
                except ValueError:
                    number = -1
                if number < 0:
                    raise ConfigError(f"option {raw_name!r} must be a non-negative integer, got {value!r}")
                if own == "trigger.interval.ms":
                    trigger_ms = number
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
        _check_exactly_once(settings, trigger_ms)
    elif prefix is not None or trigger_ms:
        raise ConfigError("options 'kproducer.transactional.id.prefix' and 'kproducer.trigger.interval.ms' apply "
                          "to .option('kproducer.guarantee', 'exactly_once') only")
    return SinkOptions(topic, settings, guarantee, prefix, trigger_ms, faults, columnar)


def _check_exactly_once(settings: Dict[str, str], trigger_ms: int) -> None:
    """Exactly-once writes: transactional producers must be possible with these settings, and a task's
    transaction must outlive the micro-batch (the trigger interval) plus the driver's commit."""
    try:
        cfg = ProducerConfig(dict(settings, **{"transactional.id": "kproducer-spark-check"}))
    except ConfigError as e:
        raise ConfigError(f"kproducer.guarantee=exactly_once writes through Kafka transactions, which these "
                          f"settings do not allow: {e}") from None
    commit_ms = cfg.request_timeout_ms
    needed = trigger_ms + commit_ms
    if cfg.transaction_timeout_ms <= needed:
        raise ConfigError(
            f"kafka.transaction.timeout.ms={cfg.transaction_timeout_ms} is too short for exactly-once writes: a "
            f"task's transaction stays open until the driver commits the micro-batch, so it must exceed the "
            f"trigger interval (kproducer.trigger.interval.ms={trigger_ms}) plus the commit time "
            f"(kafka.request.timeout.ms={commit_ms}) = {needed} ms; raise kafka.transaction.timeout.ms above "
            f"{needed} (the broker caps it at its transaction.max.timeout.ms, 15 minutes by default)")
    log.info("kproducer sink: exactly-once, transaction.timeout.ms=%d > trigger interval %d ms + commit time %d ms",
             cfg.transaction_timeout_ms, trigger_ms, commit_ms)


__all__ = ["AT_LEAST_ONCE", "EXACTLY_ONCE", "GUARANTEES", "KAFKA_PREFIX", "KPRODUCER_PREFIX", "SINK_DEFAULTS",
           "SINK_OPTIONS", "SinkOptions", "parse_options"]
