"""Fixtures shared by every test: the repo-wide guard against internal errors, the tansu broker and a real
Apache Kafka cluster (``apache_kafka``, ``ak_topic``), and the markers that say what a test needs (setup.cfg):
a test that uses a broker fixture is marked ``broker`` (and ``apache_kafka``) here at collection, the tests under
tests/spark/ ``spark``; a test that starts a broker process without the marker fails (:func:`_broker_launch_guard`),
so ``pytest -m "not broker"`` never starts one.

``tests`` is a package: helpers are imported as ``from tests.tansu import Tansu`` (the repository root is
on ``sys.path``: ``pythonpath`` in setup.cfg's pytest section).
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import pytest

from tests.tansu import Tansu, topic_name


def internal_errors(records: List[logging.LogRecord]) -> List[logging.LogRecord]:
    """The records that stand for an internal error of kproducer (the producer's network thread, the
    mock cluster): a traceback, or the sender thread's "unexpected error ... it carries on"."""
    return [r for r in records if r.name.startswith("kproducer")
            and (r.exc_info is not None or "unexpected error" in r.getMessage())]


@pytest.fixture(autouse=True)
def no_internal_errors(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test fails when kproducer logged an internal error while it ran, even if its assertions held.
    A test that provokes one on purpose (a user callback that raises, a broken broker) and checks the
    log itself says so with ``@pytest.mark.allow_internal_errors``."""
    yield
    if request.node.get_closest_marker("allow_internal_errors") is not None:
        return
    # (caplog.records alone would be the teardown phase's only: this fixture ends in the teardown)
    bad = internal_errors(caplog.get_records("setup") + caplog.get_records("call") + caplog.records)
    assert not bad, "internal errors logged: " + "; ".join(f"{r.name}: {r.getMessage()}" for r in bad[:3])


@pytest.fixture(scope="session")
def tansu() -> Iterator[Tansu]:
    """A real tansu broker for the whole session, on a free 127.0.0.1 port."""
    broker = Tansu().start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def new_topic(tansu: Tansu) -> Callable[..., str]:
    """Create a fresh topic on the session's tansu broker and return its name."""

    def make(partitions: int = 6, prefix: str = "t") -> str:
        name = topic_name(prefix)
        tansu.create_topic(name, partitions)
        return name

    return make


# ----------------------------------------------------------------------------------------- Apache Kafka

#: SASL users of the session's Apache Kafka cluster (besides ``admin`` / ``admin-secret``, a super user)
AK_USERS: Dict[str, str] = {"alice": "alice-secret", "bob": "bob-secret"}


def require_apache_kafka() -> None:
    """Skip the test, with the reason, where Java is missing or Apache Kafka's jars cannot be had (no Maven),
    unless ``KPRODUCER_REQUIRE_APACHE_KAFKA=1`` (set by .ci/run) makes that a failure."""
    from kproducer.testing import ApacheKafkaUnavailable
    from kproducer.testing.apache_kafka import java_binary, kafka_libs

    try:
        java_binary()
        kafka_libs()
    except ApacheKafkaUnavailable as e:
        if os.environ.get("KPRODUCER_REQUIRE_APACHE_KAFKA") == "1":
            raise
        pytest.skip(f"Apache Kafka cannot run here: {e}")


def start_apache_kafka(**kwargs: Any) -> Any:
    """An :class:`kproducer.testing.ApacheKafka` started with ``kwargs`` (the test skips as
    :func:`require_apache_kafka` says where it cannot run)."""
    from kproducer.testing import ApacheKafka

    require_apache_kafka()
    return ApacheKafka(**kwargs).start()


@pytest.fixture(scope="session")
def apache_kafka() -> Iterator[Any]:
    """A real Apache Kafka cluster for the whole session: 3 brokers (ids 1-3), every listener (PLAINTEXT, SSL
    with client certificates requested, SASL_PLAINTEXT, SASL_SSL), the users of :data:`AK_USERS` and ACLs on
    (``StandardAuthorizer``; ANONYMOUS and ``admin`` are super users, so PLAINTEXT and TLS without a client
    certificate may do anything). Tests that stop or kill brokers use a cluster of their own."""
    kafka = start_apache_kafka(brokers=3, listeners=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
                               users=AK_USERS, authorizer=True, ssl_client_auth="requested")
    try:
        yield kafka
    finally:
        kafka.close()


@pytest.fixture
def ak_topic(apache_kafka: Any) -> Callable[..., str]:
    """Create a fresh topic on the session's Apache Kafka cluster and return its name:
    ``ak_topic(partitions=6, replication_factor=3, config={...}, prefix="t")``."""

    def make(partitions: int = 6, replication_factor: int = 3, config: Any = None, prefix: str = "t") -> str:
        name = topic_name(prefix)
        apache_kafka.create_topic(name, partitions, replication_factor, config)
        return name

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    """A failed test that used an Apache Kafka cluster gets the end of every broker's log in its report."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    from kproducer.testing import ApacheKafka

    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, ApacheKafka) and value.directory:
            report.sections.append((f"Apache Kafka logs ({name})", value.logs(30)))


# ------------------------------------------------------------------------------ markers: what a test needs

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
SPARK_DIR = os.path.join(TESTS_DIR, "spark")


@pytest.hookimpl(tryfirst=True)  # before -m deselects (the mark plugin's own modifyitems)
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark each test with what it needs, from what it uses, so that a new test cannot forget: a test whose
    fixtures include ``apache_kafka`` is ``apache_kafka``; one that includes ``tansu`` or is ``apache_kafka`` is
    ``broker``; the tests under tests/spark/ (whose conftest needs pyspark) are ``spark``. A test that starts a
    broker without these fixtures says so itself (``pytest.mark.broker`` / ``apache_kafka``): the guard below
    fails it otherwise. A test marked ``needs("lz4", ...)`` skips, with the reason, where one of these optional
    packages is not installed."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "apache_kafka" in names and item.get_closest_marker("apache_kafka") is None:
            item.add_marker(pytest.mark.apache_kafka)
        if ("tansu" in names or item.get_closest_marker("apache_kafka") is not None) \
                and item.get_closest_marker("broker") is None:
            item.add_marker(pytest.mark.broker)
        if (str(item.path).startswith(SPARK_DIR + os.sep) or "spark" in names) \
                and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        missing = [PIP_NAMES.get(m, m) for mark in item.iter_markers("needs") for m in mark.args
                   if not importable(m)]
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)}, not installed (an optional "
                                                    "package: pip install -e '.[test]' brings them all)"))


#: the distributions of the optional modules whose names differ
PIP_NAMES: Dict[str, str] = {"kafka": "kafka-python", "snappy": "python-snappy", "confluent_kafka": "confluent-kafka"}


def importable(module: str) -> bool:
    """Whether ``module`` (a top-level package name) is installed, without importing it."""
    return importlib.util.find_spec(module) is not None


class UnmarkedBrokerError(Exception):
    """A test started a broker process without the marker that says it needs one."""


#: the test running now (set for its setup, call and teardown), for the guard
_running: List[Optional[pytest.Item]] = [None]
#: what the guard refused while the current test ran (failed in :func:`markers_tell_the_truth`, also if the
#: test caught the error)
_refused: List[str] = []


def broker_launched(argv: Sequence[Any]) -> Optional[str]:
    """The marker a process with this command line needs: ``apache_kafka`` for Apache Kafka's broker (the
    ``kafka.Kafka`` main class), ``broker`` for tansu; None for anything else."""
    args = [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in argv]
    if "kafka.Kafka" in args:
        return "apache_kafka"
    if args and (os.path.basename(args[0]) == "tansu" or args[0] == os.environ.get("TANSU_BIN")):
        return "broker"
    return None


def _broker_launch_guard(event: str, args: Any) -> None:
    """Audit hook: refuses to start a broker process (tansu, Apache Kafka) from a test that is not marked as
    needing one, so that the markers hold whatever way the test starts it (a fixture, a helper class, its own
    Popen). A broker that a child process starts (``kproducer apache-kafka`` run as a command) is not seen."""
    if event != "subprocess.Popen":
        return
    item = _running[0]
    if item is None or not str(item.path).startswith(TESTS_DIR + os.sep):
        return
    needed = broker_launched(args[1] if isinstance(args[1], (list, tuple)) else [args[1]])
    if needed is None or item.get_closest_marker(needed) is not None:
        return
    message = (f"{item.nodeid} starts a broker process but is not marked `{needed}`: use the tansu / "
               f"apache_kafka fixtures (marked at collection) or add pytest.mark.{needed} (setup.cfg's markers)")
    _refused.append(message)
    raise UnmarkedBrokerError(message)


sys.addaudithook(_broker_launch_guard)  # (for the rest of the process: pytest imports this file once)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _running[0] = item
    _refused.clear()
    try:
        yield
    finally:
        _running[0] = None


@pytest.fixture(autouse=True)
def markers_tell_the_truth() -> Iterator[None]:
    """Fails a test that started a broker without its marker even if it caught the guard's error."""
    yield
    assert not _refused, _refused[0]
