"""Fixtures shared by every test: the repo-wide guard against internal errors, and the tansu broker.

``tests`` is a package: helpers are imported as ``from tests.tansu import Tansu`` (the repository root is
on ``sys.path``: ``pythonpath`` in setup.cfg's pytest section).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator, List

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
