"""Smoke test of benchmarks/compare.py's Apache Kafka code paths (--broker apache-kafka): the Java KafkaProducer
rows (Kafka's ProducerPerformance, cold and warm JVM), the topic deletion that keeps the broker's disk bounded and
the broker's processes for --pin; and of the parsing both rely on, plus bench_spark.py's choice of Spark's Kafka
connector. Small counts only: the figures are not looked at, only that every row ran and was verified."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, List

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCHMARKS)

import bench_spark  # noqa: E402
import compare  # noqa: E402

pytestmark = pytest.mark.apache_kafka

PERF_OUTPUT = """\
3000 records sent, 599.5 records/sec (0.06 MB/sec), 1420.3 ms avg latency, 2001.0 ms max latency.
20000 records sent, 5817.3 records/sec (0.55 MB/sec), 1221.03 ms avg latency, 2098.00 ms max latency, 1275 ms 50th, \
1478 ms 95th, 1499 ms 99th, 1552 ms 99.9th.

Metric Name                                                                                   Value
producer-metrics:record-error-total:{client-id=perf-measured}                                  : 2.000
producer-metrics:record-send-total:{client-id=perf-measured}                                   : 20000.000
producer-topic-metrics:record-error-total:{client-id=perf-measured, topic=p}                   : 7.000
"""


def test_producer_performance_summary_and_metrics_parse() -> None:
    total = compare.parse_perf_total(PERF_OUTPUT)
    assert total is not None
    assert total["records"] == 20000 and total["rate"] == pytest.approx(5817.3)
    assert total["latency_p99_ms"] == 1499 and total["latency_max_ms"] == 2098.0
    assert compare.parse_perf_metric(PERF_OUTPUT, "record-error-total") == 2.0  # producer-metrics, not per topic
    assert compare.parse_perf_total(PERF_OUTPUT.splitlines()[0]) is None  # a window line has no percentiles


def test_spark_kafka_connector_version_choice() -> None:
    served = ["3.5.1", "4.1.3", "4.2.0-preview5", "4.2.0", "4.3.0-preview1"]
    assert bench_spark.pick_connector_version("4.2.0", served) == "4.2.0"
    assert bench_spark.pick_connector_version("4.3.0", served) == "4.2.0"  # newest same-major release served
    assert bench_spark.pick_connector_version("4.1.9", served) == "4.1.3"
    assert bench_spark.pick_connector_version("5.0.0", served) is None


def test_compare_rows_with_the_java_producer(apache_kafka: Any) -> None:
    """kproducer send() and both Java rows through compare.run_rows on the session's cluster: each runs, every
    record is stored (read back by kafka-python), the table has the Java rows with a ratio, and every topic the
    rows used (the Java rows' extra one too) is deleted afterwards."""
    assert sorted(compare.broker_pids(apache_kafka)) == sorted(
        list(apache_kafka.pids().values()) + [apache_kafka.controller_pid()])
    num = 3000
    kit = compare.JavaKit(apache_kafka)
    used: List[str] = []

    def topic_name(prefix: str) -> str:
        name = f"bench-{prefix}-{len(used)}-{time.monotonic_ns() % 10**9}"
        used.append(name)
        return name

    try:
        runs = [r for r in compare.plan("default", False, java=True)
                if r.label in ("kproducer send()", compare.JAVA_LABEL, compare.JAVA_WARM_LABEL)]
        active = compare.select(runs, None, kit)
        warm = next(r for r in runs if r.label == compare.JAVA_WARM_LABEL)
        if warm not in active:
            assert warm.error is not None and "JDK" in warm.error
        args = argparse.Namespace(repeat=1, pins=None, java=kit, chunk=1000, timeout=240.0)
        compare.run_rows(active, args, 100, num, apache_kafka, apache_kafka.bootstrap_servers, topic_name)
    finally:
        kit.close()
    for run in active:
        assert run.result is not None, (run.label, run.error)
        assert run.verified is True, (run.label, run.result.get("stored"))
        assert run.result["errors"] == 0 and run.result["elapsed"] > 0 and run.result["peak_rss_mb"] > 0
        if run.label != compare.JAVA_LABEL:
            assert run.result["cpu"] > 0
    cold = next(r for r in runs if r.label == compare.JAVA_LABEL)
    # its CPU is the JVM's minus a 1-record run's: with only 3000 records that difference is within the noise
    assert cold.result is not None and cold.result["cpu_jvm"] > 0 and cold.result["cpu_baseline"] > 0
    assert cold.result["cpu"] == pytest.approx(cold.result["cpu_jvm"] - cold.result["cpu_baseline"])
    assert cold.result["idempotent"] is True and cold.result["latency_max_ms"] >= cold.result["latency_avg_ms"]
    table = compare.table(100, num, runs)
    row = next(line for line in table.splitlines() if line.startswith(f"| {compare.JAVA_LABEL} |"))
    assert "×" in row and "| yes |" in row
    summary = compare.java_summary(runs, num)
    assert summary is not None and "whole JVM" in summary
    assert len(used) == 1 + 2 * 2  # the kproducer row's topic; each Java row's and its other topic
    deadline = time.monotonic() + 60
    left = used
    while left and time.monotonic() < deadline:
        left = [t for t in left if apache_kafka.partitions(t)]
        time.sleep(0.2)
    assert not left, f"topics not deleted: {left}"
