"""Fixtures of the integration tests."""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture
def no_internal_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail a test when the producer or the mock cluster logged an internal error (a traceback, or the
    sender thread's "unexpected error ... it carries on"), even if the test's assertions held. (The records
    of the test's call phase: in a fixture's teardown ``caplog.records`` holds only the teardown's.)"""
    yield
    bad = [r for r in caplog.get_records("call") if r.name.startswith("kproducer")
           and (r.exc_info is not None or "unexpected error" in r.getMessage())]
    assert not bad, "internal errors logged: " + "; ".join(f"{r.name}: {r.getMessage()}" for r in bad[:3])
