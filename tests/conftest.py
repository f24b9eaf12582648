"""Fixtures shared by every test: the repo-wide guard against internal errors, the tansu broker and a real
Apache Kafka cluster (``apache_kafka``, ``ak_topic``).

``tests`` is a package: helpers are imported as ``from tests.tansu import Tansu`` (the repository root is
on ``sys.path``: ``pythonpath`` in setup.cfg's pytest section).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Iterator, List

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
