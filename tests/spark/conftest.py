"""One small local SparkSession shared by the Spark tests (skipped when pyspark is not installed)."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest


def _missing(modules: Sequence[str]) -> List[str]:
    out = []
    for name in modules:
        try:
            __import__(name)
        except ImportError:
            out.append(name)
    return out


#: the Spark tests' own needs; without them every test module here is one skipped test (not an error at import,
#: and not "no tests ran": `pytest tests/spark` says why and exits 0)
MISSING = _missing(("pyspark", "pyarrow"))
if MISSING:
    _REASON = f"{' and '.join(MISSING)} not installed (pip install 'kproducer[spark]')"

    class _Unavailable(pytest.Item):
        def runtest(self) -> None:
            pytest.skip(_REASON)

        def reportinfo(self) -> Tuple[Any, Optional[int], str]:
            return self.path, None, f"{self.path.name}: {_REASON}"

    class _UnavailableModule(pytest.File):
        def collect(self) -> Iterator[pytest.Item]:
            yield _Unavailable.from_parent(self, name="needs_spark")

    def pytest_pycollect_makemodule(module_path: Any, parent: Any) -> Any:
        """A test module here is not imported (its imports need pyspark/pyarrow): one skipped item instead."""
        return _UnavailableModule.from_parent(parent, path=module_path)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: a top-level ``pyspark_*`` module: PySpark registers its ``DefaultSource`` by itself at session start
#: (the automatic way documented in docs/spark.md), here under a second name to test it in isolation
AUTO_MODULE = "pyspark_kproducer_autotest"
AUTO_FORMAT = "kproducer_autotest"
_AUTO_SOURCE = f'''
from kproducer.spark import KafkaSink


class DefaultSource(KafkaSink):
    @classmethod
    def name(cls):
        return "{AUTO_FORMAT}"
'''


def _prepend_path(var: str, path: str) -> None:
    old = os.environ.get(var)
    os.environ[var] = path if not old else path + os.pathsep + old


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2,2] (a failed task is retried once), no UI, 2 shuffle partitions; workers run this
    interpreter (which has pyarrow and kproducer) and bind to 127.0.0.1. ``kproducer`` is registered with kproducer.spark.register()."""
    saved_env = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                 "PYTHONPATH")}
    auto_dir = tempfile.mkdtemp(prefix="kproducer-spark-")
    with open(os.path.join(auto_dir, AUTO_MODULE + ".py"), "w") as f:
        f.write(_AUTO_SOURCE)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    _prepend_path("PYTHONPATH", REPO)
    _prepend_path("PYTHONPATH", auto_dir)
    sys.path.insert(0, auto_dir)

    from pyspark.sql import SparkSession

    import kproducer.spark

    # local[2, 2]: two cores, and a failed task is tried once more (the exactly-once tests need a retry)
    session = (SparkSession.builder.master("local[2,2]").appName("kproducer-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    kproducer.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        sys.path.remove(auto_dir)
        shutil.rmtree(auto_dir, ignore_errors=True)


Read = Tuple[int, int, Optional[bytes], Optional[bytes], List[Tuple[str, bytes]]]


def _consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0,
             isolation_level: str = "read_uncommitted") -> List[Read]:
    """Everything in the topic, read with kafka-python: (partition, offset, key, value, headers); waits
    for ``expected`` records, then a little longer to catch extras. ``isolation_level="read_committed"``
    leaves out records of aborted transactions (and waits for open ones)."""
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=50, request_timeout_ms=15000,
                             max_partition_fetch_bytes=4 * 1024 * 1024, check_crcs=False,
                             client_id="kproducer-spark-tests", isolation_level=isolation_level)
    out: List[Read] = []

    def take(polled: Dict[Any, Sequence[Any]]) -> None:
        for records in polled.values():
            out.extend((r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records)

    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            take(consumer.poll(timeout_ms=200, max_records=100_000))
        take(consumer.poll(timeout_ms=300))
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="session")
def consume() -> Any:
    """``consume(bootstrap, topic, partitions, expected)`` -> [(partition, offset, key, value, headers)]."""
    return _consume
