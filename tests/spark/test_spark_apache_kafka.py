"""The ``kproducer`` Spark sink against a real Apache Kafka cluster (the session's ``apache_kafka``: 3 brokers,
PLAINTEXT listener), read back with kafka-python and confluent-kafka -- as read_committed consumers where the
write is exactly-once. Apache Kafka filters aborted transactions on read (tansu 0.6 does not), so this is where
``kproducer.guarantee=exactly_once`` meets the real transaction coordinator: each task attempt commits its own
transaction under ``<prefix>-<Spark partition>`` with the partition's marker (issue 29); a speculative copy
fencing the first attempt mid-write, a task whose transaction outlives transaction.timeout.ms (aborted by the
coordinator), a task failing half-way and retried, a failed job run again with the same ``kproducer.write.id``,
a micro-batch replayed after it was committed, a driver failing in a micro-batch's commit. The at-least-once
runs of the same faults (the controls) show the duplicates.

Transaction states are read from the coordinators with kafka-python's admin client (ListTransactions /
DescribeTransactions), the markers with its OffsetFetch (list_group_offsets), independently of kproducer. Few
rows and two Kafka partitions keep the file short. The same scenarios on a Spark standalone cluster:
test_spark_standalone.py.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, List

import pytest

from kproducer.producer.partitioner import murmur2
from kproducer.spark import SinkCommitMessage, SinkWriteError
from kproducer.spark._sink import transactional_id
from tests.spark.ak_helpers import (
    PARTITIONS,
    admin_client,
    confluent_read,
    log_ends,
    markers,
    open_transactions,
    read_values,
    transactions,
)
from tests.spark.eos_helpers import (
    arrow_batch_rows,
    as_task,
    batch_writer,
    batches_run,
    forget_commit,
    frame_whose_task_1_fails,
    rows,
    sink_write,
    stream,
)

pytestmark = [pytest.mark.spark, pytest.mark.apache_kafka]

@pytest.fixture
def topic(ak_topic: Callable[..., str]) -> str:
    return ak_topic(partitions=PARTITIONS, replication_factor=3, prefix="spark")


@pytest.fixture(scope="module")
def admin(apache_kafka: Any) -> Any:
    with admin_client(apache_kafka.bootstrap_servers) as client:
        yield client


# -- at-least-once ------------------------------------------------------------------------------------------

def test_at_least_once_keys_values_headers(spark: Any, apache_kafka: Any, topic: str) -> None:
    """5,000 rows with key, value and two headers (one with a null value), the partition chosen by the
    partitioner from the key (murmur2, as the Java client): every row is read back once, byte for byte, from
    its key's partition (confluent-kafka)."""
    n = 5000
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "concat('k', id) AS key", "CAST(id AS STRING) AS value",
        "array(named_struct('key', 'id', 'value', CAST(CAST(id AS STRING) AS BINARY)),"
        "      named_struct('key', 'none', 'value', CAST(NULL AS BINARY))) AS headers")
    sink_write(df, apache_kafka.bootstrap_servers, topic, "at_least_once", **{"kafka.linger.ms": "5"})

    got = confluent_read(apache_kafka.bootstrap_servers, topic, "read_uncommitted")
    by_id: Counter = Counter()  # type: ignore[type-arg]
    for partition, _o, key, value, headers in got:
        assert value is not None and key is not None
        assert key == b"k" + value
        assert partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
        assert headers == [("id", value), ("none", None)]
        by_id[int(value)] += 1
    assert by_id == Counter(range(n))


# -- exactly-once: the writers called directly (no Spark job): attempts interleaved as we choose ------------------

def test_speculative_copy_fences_the_first_attempt_mid_write(apache_kafka: Any, admin: Any, monkeypatch: Any,
                                                             topic: str) -> None:
    """kproducer.buffer.bytes=0: attempt 0 of task 0 has sent and flushed its first rows in its transaction when a
    copy (attempt 1) runs from start to commit. The copy's InitProducerId (same transactional id) aborts attempt 0's
    transaction; attempt 0's next request is refused and it fails naming the copy. A later copy (attempt 2) finds the
    marker and writes nothing. The coordinator shows one transactional id per Spark partition, committed."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-spec-{uuid.uuid4().hex[:8]}"
    writer = batch_writer(bootstrap, topic, prefix, **{"kproducer.buffer.bytes": "0",
                                                       "kproducer.test.sleep.after.rows": "100",
                                                       "kproducer.test.sleep.ms": "0"})
    copy: List[SinkCommitMessage] = []

    def attempt0_input() -> Any:
        yield rows(0, 100, PARTITIONS)  # (flushed after it: kproducer.test.sleep.after.rows)
        as_task(monkeypatch, 0, 1)
        copy.append(writer.write(iter([rows(0, 200, PARTITIONS)])))
        as_task(monkeypatch, 0, 0)
        yield rows(100, 200, PARTITIONS)

    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(attempt0_input())
    text = str(info.value)
    assert "another attempt of this task (a speculative copy or Spark's retry) began under" in text, text
    assert open_transactions(admin, prefix) == {}
    assert transactions(admin, prefix) == {transactional_id(prefix, 0): "CompleteCommit"}
    as_task(monkeypatch, 0, 2)
    late = writer.write(iter([rows(0, 200, PARTITIONS)]))
    assert (copy[0].rows, copy[0].skipped, late.rows, late.skipped) == (200, False, 0, True)
    # the late copy's InitProducerId bumped the epoch of the completed transaction (state Empty), and it began none
    assert transactions(admin, prefix) == {transactional_id(prefix, 0): "Empty"}

    assert read_values(bootstrap, topic) == Counter(range(200))
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == 300  # attempt 0's 100, aborted
    assert markers(admin, prefix, 1) == {0: {"write": writer.write_id, "partition": 0, "attempt": 1, "rows": 200}}


def test_task_transaction_outliving_the_timeout_fails_naming_it(apache_kafka: Any, admin: Any, monkeypatch: Any,
                                                                topic: str) -> None:
    """kproducer.buffer.bytes=0 and transaction.timeout.ms=3000: the task's input stops after its first rows until
    the coordinator has aborted the transaction (its periodic scan,
    transaction.abort.timed.out.transaction.cleanup.interval.ms: 10 s by default, with an epoch bump): the task
    fails saying the transaction outlived the timeout and what to change. Nothing is visible."""
    bootstrap = apache_kafka.bootstrap_servers
    prefix = f"ak-timeout-{uuid.uuid4().hex[:8]}"
    writer = batch_writer(bootstrap, topic, prefix, **{"kafka.transaction.timeout.ms": "3000",
                                                       "kproducer.buffer.bytes": "0"})
    tid = transactional_id(prefix, 0)
    states: List[Dict[str, str]] = []

    def stalled() -> Any:
        yield rows(0, 20, PARTITIONS)
        deadline = time.monotonic() + 90  # bounded: the timeout, then the coordinator's next scan
        while time.monotonic() < deadline:
            states.append(transactions(admin, prefix))
            # (Empty before the first AddPartitionsToTxn reached the coordinator, and again after the abort)
            if "Ongoing" in [st.get(tid) for st in states] and states[-1].get(tid) in ("CompleteAbort", "Empty"):
                break
            time.sleep(0.5)
        yield rows(20, 40, PARTITIONS)

    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(stalled())
    assert states[-1].get(tid) in ("CompleteAbort", "Empty"), states[-3:]  # the coordinator aborted it
    assert "Ongoing" in [st.get(tid) for st in states], states[:3]
    text = str(info.value)
    assert "longer than transaction.timeout.ms=3000: the coordinator aborted it" in text, text
    assert read_values(bootstrap, topic) == Counter()
    assert open_transactions(admin, prefix, 30.0, ongoing_too=True) == {}


def test_refused_transaction_timeout_fails_the_task_before_writing(apache_kafka: Any, monkeypatch: Any,
                                                                   topic: str) -> None:
    """transaction.timeout.ms above the broker's transaction.max.timeout.ms (15 min): InitProducerId answers
    INVALID_TRANSACTION_TIMEOUT and the task fails before writing anything."""
    bootstrap = apache_kafka.bootstrap_servers
    writer = batch_writer(bootstrap, topic, f"ak-maxto-{uuid.uuid4().hex[:8]}",
                          **{"kafka.transaction.timeout.ms": "3600000", "kafka.max.block.ms": "10000"})
    as_task(monkeypatch, 0, 0)
    with pytest.raises(SinkWriteError) as info:
        writer.write(iter([rows(0, 5, PARTITIONS)]))
    text = str(info.value)
    assert "INVALID_TRANSACTION_TIMEOUT" in text and "nothing was written" in text, text
    assert read_values(bootstrap, topic, "read_uncommitted") == Counter()


# -- exactly-once: batch writes -----------------------------------------------------------------------------

def test_exactly_once_batch_write(spark: Any, apache_kafka: Any, admin: Any, topic: str) -> None:
    n = 5000
    prefix = f"ak-eos-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, n, numPartitions=2).selectExpr("concat('k', id) AS key", "CAST(id AS STRING) AS value")
    sink_write(df, apache_kafka.bootstrap_servers, topic, **{"kproducer.transactional.id.prefix": prefix,
                                                              "kproducer.write.id": "ak-eos-write"})

    bootstrap = apache_kafka.bootstrap_servers
    assert read_values(bootstrap, topic) == Counter(range(n))
    committed = confluent_read(bootstrap, topic)
    assert Counter(int(v) for *_x, v, _h in committed if v is not None) == Counter(range(n))
    # nothing else in the log: no aborted attempt, and the tasks' transactions ended committed
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == n
    assert open_transactions(admin, prefix) == {}
    assert transactions(admin, prefix) == {transactional_id(prefix, p): "CompleteCommit" for p in range(2)}
    found = markers(admin, prefix, 2)
    assert {p: (m["write"], m["rows"]) for p, m in found.items()} == {0: ("ak-eos-write", n // 2),
                                                                     1: ("ak-eos-write", n // 2)}


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_task_failing_half_way_is_retried(spark: Any, apache_kafka: Any, admin: Any, topic: str,
                                          guarantee: str) -> None:
    """Attempt 0 of both tasks writes (and flushes: the rows are in the log) its first quarter of the rows,
    then fails; Spark retries each task. exactly_once: read_committed sees every row once, the failed
    attempts' rows are in the log, aborted. at_least_once (the control run: the fault bit): the first
    quarter of each task's rows is there twice."""
    n = 4000
    prefix = f"ak-retry-{uuid.uuid4().hex[:8]}"
    options = {"kproducer.test.fail.after.rows": str(n // 4)}
    if guarantee == "exactly_once":
        options["kproducer.transactional.id.prefix"] = prefix
    with arrow_batch_rows(spark, 500):
        df = spark.range(0, n, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
        sink_write(df, apache_kafka.bootstrap_servers, topic, guarantee, **options)

    bootstrap = apache_kafka.bootstrap_servers
    # the Spark partitions are ids [0, n/2) and [n/2, n): each failed attempt wrote the first n/4 of its own
    written_twice = Counter(range(n // 4)) + Counter(range(n // 2, n // 2 + n // 4))
    everything = read_values(bootstrap, topic, "read_uncommitted")
    assert everything == Counter(range(n)) + written_twice
    if guarantee == "at_least_once":
        assert read_values(bootstrap, topic) == everything  # no transactions to hide
        return
    assert read_values(bootstrap, topic) == Counter(range(n))
    assert open_transactions(admin, prefix) == {}
    # attempt 0 aborted its own transaction when it failed; attempt 1 committed under the same transactional id
    assert transactions(admin, prefix) == {transactional_id(prefix, p): "CompleteCommit" for p in range(2)}
    assert {p: m["attempt"] for p, m in markers(admin, prefix, 2).items()} == {0: 1, 1: 1}


@pytest.mark.parametrize("same_write_id", [True, False], ids=["same-write-id", "control-no-write-id"])
def test_failed_job_run_again(spark: Any, apache_kafka: Any, admin: Any, topic: str, same_write_id: bool,
                              tmp_path: Any) -> None:
    """Task 1's input fails in both attempts (a UDF, while a flag file exists, after a pause that lets task 0
    commit): the job fails, task 0's rows are committed (each task commits its own), nothing holds back the last
    stable offset. Run again (the flag gone) with the same kproducer.write.id, only task 1 writes; the control,
    without a write id, writes task 0's rows again."""
    bootstrap = apache_kafka.bootstrap_servers
    n = 400
    flag = str(tmp_path / "fail")
    df = frame_whose_task_1_fails(spark, n, flag)
    prefix = f"ak-rerun-{uuid.uuid4().hex[:8]}"
    options = {"kproducer.write.id": prefix} if same_write_id else {}
    with pytest.raises(Exception) as info:
        sink_write(df, bootstrap, topic, **options)
    assert "the input of task 1 failed" in str(info.value)
    assert read_values(bootstrap, topic) == Counter(range(n // 2))
    ends = log_ends(bootstrap, topic)
    assert ends["read_committed"] == ends["read_uncommitted"], ends  # no transaction left open
    os.remove(flag)
    sink_write(df, bootstrap, topic, **options)
    if not same_write_id:
        assert read_values(bootstrap, topic) == Counter(range(n)) + Counter(range(n // 2))
        return
    assert read_values(bootstrap, topic) == Counter(range(n))
    assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == n
    # the default prefix is kproducer-<write id>: task 0 committed in the first run (the second run's task 0 only
    # called InitProducerId: Empty), task 1 in the second; both markers name the write
    tprefix = f"kproducer-{prefix}"
    assert transactions(admin, tprefix) == {transactional_id(tprefix, 0): "Empty",
                                            transactional_id(tprefix, 1): "CompleteCommit"}
    assert {p: (m["write"], m["rows"]) for p, m in markers(admin, tprefix, 2).items()} == {0: (prefix, n // 2),
                                                                                           1: (prefix, n // 2)}


# -- exactly-once: streams ----------------------------------------------------------------------------------

def test_stream_micro_batch_replayed_after_commit_writes_nothing(spark: Any, apache_kafka: Any, admin: Any,
                                                                 topic: str) -> None:
    """Two availableNow runs write micro-batches 0 and 1; the checkpoint then forgets batch 1's commit, so
    the third run replays it: its tasks find batch 1 in their marker groups' committed offsets (written in
    the transactions) and write nothing -- not even an aborted transaction."""
    bootstrap = apache_kafka.bootstrap_servers
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-ak-replay-")
    try:
        for _ in range(2):
            query = stream(spark, bootstrap, topic, checkpoint, rows)
            query.awaitTermination(120)
            assert query.exception() is None
        forget_commit(checkpoint, 1)
        query = stream(spark, bootstrap, topic, checkpoint, rows)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 1, seen  # the replay (availableNow may run batch 2 after it)
        total = rows * (max(seen) + 1)
        assert read_values(bootstrap, topic) == Counter(range(total))
        assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == total
        assert open_transactions(admin, f"kproducer-{query.id}") == {}
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_stream_driver_fails_in_the_commit_then_restarted(spark: Any, apache_kafka: Any, admin: Any, topic: str,
                                                          guarantee: str) -> None:
    """The driver fails in micro-batch 0's commit (fault injection), after both tasks committed their
    transactions, before Spark records the batch in the checkpoint. The query restarted from its checkpoint
    replays batch 0: exactly_once, both tasks find their markers (batch 0, written in their transactions) and
    write nothing; the control (at_least_once) writes batch 0 again."""
    bootstrap = apache_kafka.bootstrap_servers
    rows = 200
    checkpoint = tempfile.mkdtemp(prefix="kproducer-ak-crash-")
    try:
        query = stream(spark, bootstrap, topic, checkpoint, rows, guarantee, **{"kproducer.test.fail.in.commit": "1"})
        with pytest.raises(Exception) as info:
            query.awaitTermination(120)
        assert "kproducer.test.fail.in.commit" in str(info.value)
        prefix = f"kproducer-{query.id}"
        if guarantee == "exactly_once":
            assert {p: m["batch"] for p, m in markers(admin, prefix, 2).items()} == {0: 0, 1: 0}

        query = stream(spark, bootstrap, topic, checkpoint, rows, guarantee)
        query.awaitTermination(120)
        assert query.exception() is None
        seen = batches_run(query)
        assert seen[0] == 0, seen  # the replay of batch 0 (availableNow may run batch 1 too)
        total = rows * (max(seen) + 1)
        if guarantee == "at_least_once":
            assert read_values(bootstrap, topic) == Counter(range(total)) + Counter(range(rows))
            return
        assert read_values(bootstrap, topic) == Counter(range(total))
        assert sum(read_values(bootstrap, topic, "read_uncommitted").values()) == total
        assert open_transactions(admin, prefix) == {}
        ends = log_ends(bootstrap, topic)
        assert ends["read_committed"] == ends["read_uncommitted"], ends
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
