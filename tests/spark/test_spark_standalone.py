"""The exactly-once sink where users run it: a Spark standalone cluster started here (a master and two workers from
pyspark's own spark-class, executors in their own JVMs; the workers named 127.0.0.1 and localhost, so that Spark
counts them as two hosts and runs speculative copies) writing to the session's Apache Kafka cluster (3 brokers).
Every scenario runs exactly_once and, as the control that shows the fault bit, at_least_once; a read_committed
kafka-python consumer checks every row once (exactly_once) and finds the duplicates (at_least_once):

* a task that fails after partial delivery (Spark retries it);
* an executor process SIGKILLed mid-write (the task's attempt 0 kills its own executor JVM after writing and
  flushing part of its rows; Spark retries the task on the other executor);
* a job longer than transaction.timeout.ms (8 s): tasks ~10 s each (a slow Python UDF), one of them failing at its
  end and retried;
* speculation on, with a deliberately slow task (attempt 0 sleeps 60 s half-way; the copy commits);
* a streaming query whose driver is SIGKILLed in the sink's commit of micro-batch 0 (the tasks' transactions are
  committed, the checkpoint does not say so), restarted from its checkpoint by a new driver.

The drivers are separate Python programs (tests/spark/standalone_job.py), three in all (one per Spark application:
the streams' kills end two of them; the speculation scenario runs in the third, with spark.speculation on), run
once for the module; each test checks its scenario's outcome. Opt-in with KPRODUCER_SPARK_STANDALONE=1 (.ci/run
sets it): ~2-3 minutes on 2 shared cores. Skipped with the reason where Java or pyspark's spark-class is missing.
Bounded: the cluster start waits at most 90 s, each driver 420 s; only the processes started here are stopped (and
the killed drivers' JVMs, whose pids the drivers wrote down).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from tests.spark.ak_helpers import admin_client, markers, open_transactions, read_values, transactions
from tests.spark.spark_standalone import (  # tests/spark/spark_standalone.py
    StandaloneCluster,
    StandaloneError,
    run_driver,
)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.apache_kafka,
    pytest.mark.skipif(os.environ.get("KPRODUCER_SPARK_STANDALONE") != "1",
                       reason="starts a Spark standalone cluster (3 JVMs) and three driver programs (2-3 min on 2 "
                              "shared cores); .ci/run runs it: set KPRODUCER_SPARK_STANDALONE=1"),
]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standalone_job.py")
PARTITIONS = 2  # Kafka partitions of every topic, and Spark partitions of every job
ROWS = 2000  # per batch job: two tasks of 1000 rows (Arrow batches of 500)
STREAM_ROWS = 400  # per micro-batch
GUARANTEES = ("exactly_once", "at_least_once")
TXN_TIMEOUT_MS = 8000


@pytest.fixture(scope="module")
def standalone() -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(REPO, workers=2, cores=1, memory="1g", hosts=("127.0.0.1", "localhost"))
    try:
        cluster.start()
    except StandaloneError as e:
        cluster.cleanup()
        if "no java" in str(e) or "not found" in str(e):
            pytest.skip(f"cannot start a Spark standalone cluster here: {e}")
        raise
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.cleanup()


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


class Runs:
    """The drivers' outcomes: ``results[name]`` (the RESULT line of each step), ``topics[scenario][guarantee]``,
    each driver's exit code and stderr tail."""

    def __init__(self) -> None:
        self.results: Dict[str, Dict[str, Any]] = {}
        self.topics: Dict[str, Dict[str, str]] = {}
        #: the exactly_once batch writes' kproducer.write.id
        self.write_ids: Dict[str, str] = {}
        self.codes: List[int] = []
        self.stderr: List[str] = []

    def result(self, name: str) -> Dict[str, Any]:
        assert name in self.results, f"no result for {name}: {self.stderr}"
        return self.results[name]


def _batch_steps(runs: Runs, scenario: str, options: Dict[str, Any], **step: Any) -> List[Dict[str, Any]]:
    """The scenario's exactly_once step (with its write id, so that the test knows its transactional ids
    ``kproducer-<write id>-<partition>``) and its at_least_once control."""
    eos = dict(options, **{"kproducer.write.id": runs.write_ids[scenario]})
    return [dict(step, kind="batch", name=f"{scenario}-{g}", topic=runs.topics[scenario][g], guarantee=g, rows=ROWS,
                 partitions=PARTITIONS, options=eos if g == "exactly_once" else options) for g in GUARANTEES]


@pytest.fixture(scope="module")
def runs(standalone: StandaloneCluster, apache_kafka: Any) -> Iterator[Runs]:
    bootstrap = apache_kafka.bootstrap_servers
    out = Runs()
    for scenario in ("retry", "kill", "long", "speculation", "stream"):
        out.write_ids[scenario] = f"sa-{scenario}-{uuid.uuid4().hex[:8]}"
        out.topics[scenario] = {}
        for g in GUARANTEES:
            name = f"sa-{scenario}-{g[:3]}-{uuid.uuid4().hex[:6]}"
            apache_kafka.create_topic(name, PARTITIONS, 3)
            out.topics[scenario][g] = name
    base = tempfile.mkdtemp(prefix="kproducer-standalone-ck-")
    streams = {g: {"kind": "stream", "topic": out.topics["stream"][g], "guarantee": g, "rows": STREAM_ROWS,
                   "checkpoint": os.path.join(base, g, "checkpoint")} for g in GUARANTEES}
    for g in GUARANTEES:
        os.makedirs(os.path.join(base, g))
    drivers = [
        {"steps": [dict(streams["exactly_once"], name="stream-exactly_once-killed", kill_driver=True)]},
        {"steps": [dict(streams["exactly_once"], name="stream-exactly_once")]
            + _batch_steps(out, "retry", {"kproducer.test.fail.after.rows": 500, "kproducer.test.partition": 1})
            + _batch_steps(out, "long", {"kafka.transaction.timeout.ms": TXN_TIMEOUT_MS,
                                         "kproducer.test.fail.after.rows": ROWS // PARTITIONS,
                                         "kproducer.test.partition": 1}, slow={"seconds": 10})
            + _batch_steps(out, "kill", {"kproducer.test.kill.executor.after.rows": 500, "kproducer.test.partition": 0})
            + [dict(streams["at_least_once"], name="stream-at_least_once-killed", kill_driver=True)]},
        {"speculation": True,
         "steps": [dict(streams["at_least_once"], name="stream-at_least_once")]
            + _batch_steps(out, "speculation", {"kproducer.test.sleep.after.rows": 500,
                                                "kproducer.test.sleep.ms": 60000, "kproducer.test.partition": 1})},
    ]
    try:
        for spec in drivers:
            proc = run_driver(JOB, [standalone.master_url, bootstrap, json.dumps(spec)], standalone.env(), timeout=420)
            out.codes.append(proc.returncode)
            out.stderr.append(proc.stderr[-3000:])
            for line in proc.stdout.splitlines():
                if line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT "):])
                    out.results[result["name"]] = result
            for g in GUARANTEES:  # a killed driver's JVM exits when its Python program is gone
                pid_file = os.path.join(base, g, "jvm.pid")
                if os.path.exists(pid_file):
                    with open(pid_file) as f:
                        jvm = int(f.read())
                    os.remove(pid_file)
                    if not _wait_gone(jvm, 60):
                        os.kill(jvm, signal.SIGKILL)
                        assert _wait_gone(jvm, 30)
        yield out
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _ok(runs: Runs, name: str) -> Dict[str, Any]:
    result = runs.result(name)
    assert result["ok"], result
    return result


def _both(runs: Runs, apache_kafka: Any, scenario: str) -> Tuple[Counter, Counter, Counter]:  # type: ignore[type-arg]
    """(exactly_once: read_committed, exactly_once: read_uncommitted, at_least_once: read_committed)."""
    for g in GUARANTEES:
        _ok(runs, f"{scenario}-{g}")
    bootstrap = apache_kafka.bootstrap_servers
    eos, alos = runs.topics[scenario]["exactly_once"], runs.topics[scenario]["at_least_once"]
    return read_values(bootstrap, eos), read_values(bootstrap, eos, "read_uncommitted"), read_values(bootstrap, alos)


def test_the_drivers_ran_on_two_executors(runs: Runs) -> None:
    """The drivers the streams' kills end died of SIGKILL; the others exited cleanly; every application had its two
    executors (own JVMs) registered."""
    assert runs.codes == [-signal.SIGKILL, -signal.SIGKILL, 0], runs.stderr
    assert runs.result("retry-exactly_once")["executors"] == 2
    assert runs.result("speculation-exactly_once")["executors"] == 2


def test_task_failing_after_partial_delivery(runs: Runs, apache_kafka: Any) -> None:
    """Attempt 0 of task 1 writes and flushes 500 of its rows (ids 1000-1499), then fails; Spark retries it."""
    committed, everything, control = _both(runs, apache_kafka, "retry")
    partial = Counter(range(1000, 1500))
    assert committed == Counter(range(ROWS))
    assert everything == Counter(range(ROWS)) + partial  # attempt 0's rows are in the log, aborted
    assert control == Counter(range(ROWS)) + partial  # the control: they stay, written twice


def test_executor_killed_mid_write(runs: Runs, apache_kafka: Any) -> None:
    """Attempt 0 of task 0 writes and flushes 500 rows, then SIGKILLs its executor JVM (and its own worker): its
    transaction is left open, nothing aborts it. The retry (on another executor) has the same transactional id: its
    InitProducerId aborts the open transaction, then it writes the partition."""
    committed, everything, control = _both(runs, apache_kafka, "kill")
    partial = Counter(range(500))
    assert committed == Counter(range(ROWS))
    assert everything == Counter(range(ROWS)) + partial
    assert control == Counter(range(ROWS)) + partial
    prefix = f"kproducer-{runs.write_ids['kill']}"
    with admin_client(apache_kafka.bootstrap_servers) as admin:
        assert open_transactions(admin, prefix) == {}
        assert transactions(admin, prefix) == {f"{prefix}-{p}": "CompleteCommit" for p in range(PARTITIONS)}
        assert markers(admin, prefix, PARTITIONS)[0]["attempt"] >= 1  # the retry committed partition 0


def test_job_longer_than_the_transaction_timeout(runs: Runs, apache_kafka: Any) -> None:
    """kafka.transaction.timeout.ms=8000, two tasks whose attempt 0 gets its rows from a slow UDF for ~10 s; task 1's
    attempt 0 fails after writing all its rows, its retry is fast. The job outlasts the timeout (and each first
    attempt does): every row once, since a task opens its transaction only when its input is in (the buffer) and
    commits it itself."""
    committed, everything, control = _both(runs, apache_kafka, "long")
    assert runs.result("long-exactly_once")["seconds"] * 1000 > TXN_TIMEOUT_MS  # (the UDF's pauses alone: 10 s)
    assert committed == Counter(range(ROWS))
    assert Counter(range(ROWS)) <= everything <= Counter(range(ROWS)) + Counter(range(1000, 2000))
    assert control == Counter(range(ROWS)) + Counter(range(1000, 2000))


def test_speculative_copy_of_a_slow_task(runs: Runs, apache_kafka: Any) -> None:
    """spark.speculation on; attempt 0 of task 1 writes and flushes 500 rows, then sleeps 60 s. Spark runs a copy on
    the other host, which fences attempt 0 (aborting its transaction), writes and commits; Spark kills attempt 0.
    The marker says the copy committed; the control keeps attempt 0's 500 rows and the copy's."""
    committed, everything, control = _both(runs, apache_kafka, "speculation")
    partial = Counter(range(1000, 1500))
    assert committed == Counter(range(ROWS))
    assert everything == Counter(range(ROWS)) + partial
    assert Counter(range(ROWS)) + partial <= control  # (attempt 0 may write more if it wakes before it is killed)
    assert runs.result("speculation-exactly_once")["seconds"] < 60  # it did not wait for the sleeping attempt
    prefix = f"kproducer-{runs.write_ids['speculation']}"
    with admin_client(apache_kafka.bootstrap_servers) as admin:
        found = markers(admin, prefix, PARTITIONS)
        assert open_transactions(admin, prefix) == {}
    assert found[1]["attempt"] >= 1 and found[1]["rows"] == ROWS // PARTITIONS, found  # the copy committed task 1


def test_stream_driver_killed_in_the_commit_then_restarted(runs: Runs, apache_kafka: Any) -> None:
    """The first driver is SIGKILLed in the sink's commit of micro-batch 0, after both tasks committed their
    transactions and before the checkpoint recorded the batch; a new driver restarts the query from the checkpoint
    and Spark replays batch 0: exactly_once, its tasks find their markers and write nothing (nothing aborted in the
    log either); the control writes batch 0 again."""
    bootstrap = apache_kafka.bootstrap_servers
    totals = {}
    for g in GUARANTEES:
        assert f"stream-{g}-killed" not in runs.results  # the driver died in the step
        result = _ok(runs, f"stream-{g}")
        assert result["batches"][0] == 0, result  # micro-batch 0 again: Spark had not recorded its commit
        totals[g] = STREAM_ROWS * (max(result["batches"]) + 1)
    eos, alos = runs.topics["stream"]["exactly_once"], runs.topics["stream"]["at_least_once"]
    assert read_values(bootstrap, eos) == Counter(range(totals["exactly_once"]))
    assert sum(read_values(bootstrap, eos, "read_uncommitted").values()) == totals["exactly_once"]
    assert read_values(bootstrap, alos) == Counter(range(totals["at_least_once"])) + Counter(range(STREAM_ROWS))
