"""Producer metrics (issue 15): Java's names, windowed rates and averages with Java's arithmetic, per topic
and per node, measured on the fake clock; statistics.interval.ms + stats_cb; Producer.metrics() on the
MockCluster. Expected values are computed from the times the test drives and the bytes the scripted broker
received, with Java's Rate window rule: max(elapsed since the oldest live sample, (samples - 1) windows)."""
from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from kproducer import Producer
from kproducer.clock import FakeClock
from kproducer.errors import BufferExhaustedError, ConfigError
from kproducer.mock import MockCluster
from kproducer.producer.buffer_pool import BufferPool
from kproducer.producer.metrics import (
    GAUGES,
    NODE_METRICS,
    PRODUCER_METRICS,
    TOPIC_METRICS,
    MetricConfig,
    ProducerMetrics,
    Sensor,
)
from kproducer.protocol import messages as m
from kproducer.protocol.records import RecordBatchBuilder, read_batches
from tests.unit.scripted import HOLD, Harness

WINDOW = 30000.0
DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

#: the metrics issue 15 asks for, and where Java keeps them
ISSUE_PRODUCER_METRICS = {
    "record-send-rate", "record-error-rate", "record-retry-rate", "batch-size-avg", "batch-size-max",
    "compression-rate-avg", "records-per-request-avg", "request-latency-avg", "request-latency-max",
    "buffer-available-bytes", "bufferpool-wait-ratio", "produce-throttle-time-avg",
}
ISSUE_TOPIC_METRICS = {"record-send-rate", "byte-rate", "record-error-rate", "record-retry-rate"}
ISSUE_NODE_METRICS = {"request-latency-avg", "request-latency-max"}
#: names kept from kproducer's metrics() before the rework (backward compatibility)
FORMER_KEYS = {"request-total", "batch-total", "record-send-total", "record-ack-total", "byte-ack-total",
               "record-error-total", "record-retry-total", "batch-split-total", "request-latency-avg",
               "request-latency-max", "buffer-total-bytes", "buffer-available-bytes", "bufferpool-wait-time-ms-total",
               "waiting-threads", "queued-batches", "requests-in-flight"}


def java_window(first_ms: float, now: float, samples: int = 2, window: float = WINDOW) -> float:
    """Java's Rate.windowSize for one live sample that started at ``first_ms``."""
    elapsed = now - first_ms
    full = int(elapsed // window)
    if full < samples - 1:
        elapsed += (samples - 1 - full) * window
    return max(elapsed, 1.0)


# -- Sensor: Java's SampledStat / Rate arithmetic ------------------------------------------------------------


def test_sensor_avg_max_rate_within_the_first_window() -> None:
    s = Sensor(MetricConfig(2, WINDOW))
    assert s.rate(0.0) == 0.0 and math.isnan(s.avg(0.0)) and math.isnan(s.max(0.0))
    s.record(10, 1000.0)
    s.record(20, 11000.0)
    assert s.avg(11000.0) == 15.0 and s.max(11000.0) == 20.0
    # 10 s elapsed, counted as one whole window plus those 10 s
    assert s.rate(11000.0) == 30 * 1000.0 / (10000.0 + WINDOW)
    assert s.count_rate(11000.0) == 2 * 1000.0 / (10000.0 + WINDOW)
    assert s.total == 30.0 and s.count == 2


def test_sensor_rolls_windows_and_drops_obsolete_samples() -> None:
    s = Sensor(MetricConfig(2, WINDOW))
    s.record(10, 0.0)
    s.record(20, 10000.0)
    s.record(5, 30000.0)  # the first sample is complete: a second one starts here
    assert s.rate(45000.0) == 35 * 1000.0 / 45000.0  # one full window elapsed: no padding
    assert s.avg(45000.0) == 35 / 3 and s.max(45000.0) == 20.0
    # the first sample's last event (10 s) is 60 s (2 x 30 s) old at 70 s: it is dropped
    assert s.avg(70000.0) == 5.0 and s.max(70000.0) == 5.0
    assert s.rate(70000.0) == 5 * 1000.0 / java_window(30000.0, 70000.0)
    # and the second at 90 s: nothing is left
    assert s.rate(90000.0) == 0.0 and math.isnan(s.avg(90000.0)) and math.isnan(s.max(90000.0))
    assert s.total == 35.0 and s.count == 3  # lifetime totals stay


def test_sensor_keeps_the_overlapping_sample() -> None:
    """Java keeps samples + 1 slots: the oldest one may start before the monitored window (2 x 1 s here)
    while its last event is inside it; then the rate spans more than the window."""
    s = Sensor(MetricConfig(2, 1000.0))
    for t, v in ((0.0, 1), (900.0, 2), (1000.0, 4), (2000.0, 8)):
        s.record(v, t)
    # three samples (started at 0, 1000, 2000); the first one's last event (900) is 1600 ms old: live
    assert s.rate(2500.0) == 15 * 1000.0 / 2500.0
    s.record(16, 3000.0)  # a fourth sample reuses the first slot
    # at 3000 the sample of 1000 is 2 windows old and dropped: samples of 2000 and 3000 remain
    assert s.rate(3000.0) == (8 + 16) * 1000.0 / 1000.0
    assert s.max(3000.0) == 16.0 and s.avg(3000.0) == 12.0
    assert s.total == 31.0 and s.count == 5


def test_record_many_at_one_time_is_recording_each() -> None:
    one, many = Sensor(MetricConfig(2, 1000.0)), Sensor(MetricConfig(2, 1000.0))
    for t, values in ((0.0, [3, 9, 1]), (700.0, [4]), (1500.0, [2, 8]), (3100.0, [5, 6])):
        for v in values:
            one.record(v, t)
        many.record_many(sum(values), len(values), max(values), t)
        for now in (t, t + 400.0, t + 1999.0):
            assert (one.rate(now), one.count_rate(now), one.total, one.count) == \
                (many.rate(now), many.count_rate(now), many.total, many.count)
            assert one.avg(now) == many.avg(now) or (math.isnan(one.avg(now)) and math.isnan(many.avg(now)))
            assert one.max(now) == many.max(now) or (math.isnan(one.max(now)) and math.isnan(many.max(now)))


def test_settings_choose_samples_and_window() -> None:
    s = Sensor(MetricConfig(3, 500.0))
    s.record(6, 100.0)
    assert s.rate(100.0) == 6 * 1000.0 / java_window(100.0, 100.0, 3, 500.0) == 6.0
    with pytest.raises(ConfigError, match="metrics.num.samples must be at least 1"):
        Producer(bootstrap_servers="127.0.0.1:9", metrics_num_samples=0)
    with pytest.raises(ConfigError, match="metrics.sample.window.ms must be at least 1"):
        Producer(bootstrap_servers="127.0.0.1:9", **{"metrics.sample.window.ms": 0})
    with pytest.raises(ConfigError, match="stats_cb must be callable"):
        Producer(bootstrap_servers="127.0.0.1:9", stats_cb="print")


# -- the sender's recording, on the scripted broker --------------------------------------------------------


def _respond_all_held(h: Harness, **body_extra: Any) -> None:
    for req in h.selector.held(m.PRODUCE):
        h.selector.respond(req, dict(h.selector.produce_response(req), **body_extra))


def test_produce_request_and_response_metrics_are_exact() -> None:
    h = Harness(topics={"t": 2, "u": 1})
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    for i in range(3):
        h.send("t", value=b"a" * (10 + i), partition=0)
    for _ in range(2):
        h.send("t", value=b"b" * 50, partition=1)
    for _ in range(4):
        h.send("u", value=b"c" * 7, partition=0)
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    sent_at = h.now
    request = h.selector.held(m.PRODUCE)[0]
    wire = {(t["name"], p["index"]): len(p["records"]) for t in request.body["topic_data"] for p in t["partition_data"]}
    assert len(wire) == 3
    h.advance(40)
    _respond_all_held(h, throttle_time_ms=25)
    h.run_until(lambda: h.sender.metrics.responses == 1)
    now = h.now
    assert now == sent_at + 40
    got = h.sender.metrics.snapshot()
    window = java_window(sent_at, now)

    assert got["record-send-total"] == 9 and got["records-per-request-avg"] == 9.0
    assert got["record-send-rate"] == 9 * 1000.0 / window
    assert got["request-total"] == 1 and got["request-rate"] == 1000.0 / window
    assert got["batch-total"] == 3
    assert got["batch-size-avg"] == sum(wire.values()) / 3 and got["batch-size-max"] == max(wire.values())
    assert got["compression-rate-avg"] == 1.0  # no compression: the wire batch is the uncompressed batch
    assert got["record-queue-time-avg"] == 5.0 and got["record-queue-time-max"] == 5.0  # created, then 5 ms
    assert got["request-latency-avg"] == 40.0 and got["request-latency-max"] == 40.0
    assert got["produce-throttle-time-avg"] == 25.0 and got["produce-throttle-time-max"] == 25.0
    assert got["response-total"] == 1 and got["response-rate"] == 1000.0 / java_window(now, now)
    assert got["record-ack-total"] == 9 and got["byte-ack-total"] == sum(wire.values())
    assert got["record-error-total"] == 0 and got["record-error-rate"] == 0.0
    # per topic
    assert got["record-send-total{topic=t}"] == 5 and got["record-send-total{topic=u}"] == 4
    assert got["record-send-rate{topic=t}"] == 5 * 1000.0 / window
    assert got["byte-total{topic=t}"] == wire[("t", 0)] + wire[("t", 1)]
    assert got["byte-rate{topic=u}"] == wire[("u", 0)] * 1000.0 / window
    assert got["compression-rate{topic=u}"] == 1.0
    # per node
    assert got["request-latency-avg{node-id=node-1}"] == 40.0
    assert got["request-latency-max{node-id=node-1}"] == 40.0
    assert got["request-total{node-id=node-1}"] == 1 and got["response-total{node-id=node-1}"] == 1


def test_compression_rate_is_wire_size_over_uncompressed_size() -> None:
    h = Harness(topics={"t": 1}, compression_type="gzip")
    h.boot()
    values = [b"kproducer metrics " * 20 + bytes([i]) for i in range(5)]
    for v in values:
        h.send("t", value=v, timestamp=1_700_000_000_000)
    h.run_until(lambda: h.sender.metrics.responses == 1)
    request = h.produce_requests()[0]
    wire = request.body["topic_data"][0]["partition_data"][0]["records"]
    # the same records in an uncompressed batch
    plain = RecordBatchBuilder(1 << 20)
    for r in read_batches(wire)[0].records:
        assert plain.try_append(1_700_000_000_000, r.key, r.value, r.headers or None) >= 0
    expected = len(wire) / len(plain.build())
    got = h.sender.metrics.snapshot()
    assert expected < 0.5
    assert got["compression-rate-avg"] == pytest.approx(expected, rel=1e-12)
    assert got["compression-rate{topic=t}"] == got["compression-rate-avg"]


def test_retries_and_errors_count_records_per_topic() -> None:
    h = Harness(topics={"t": 1, "u": 1}, retry_backoff_ms=100)
    h.boot()
    h.selector.script(m.PRODUCE, {("t", 0): 6, ("u", 0): 29})  # t: NOT_LEADER (retried); u: not authorized
    t_futs = [h.send("t", value=b"x") for _ in range(3)]
    u_futs = [h.send("u", value=b"y") for _ in range(2)]
    h.run_until(lambda: all(f.done() for f in u_futs))
    first = h.now
    got = h.sender.metrics.snapshot()
    assert got["record-retry-total"] == 3 and got["record-retry-total{topic=t}"] == 3
    assert got["record-retry-rate"] == 3 * 1000.0 / java_window(first, first)
    assert got["record-error-total"] == 2 and got["record-error-total{topic=u}"] == 2
    assert got["record-error-rate{topic=u}"] == 2 * 1000.0 / java_window(first, first)
    assert got["record-error-total{topic=t}"] == 0 and got["record-retry-total{topic=u}"] == 0
    h.advance(100)
    h.run_until(lambda: all(f.done() for f in t_futs))
    got = h.sender.metrics.snapshot()
    assert got["record-retry-total"] == 3 and got["record-send-total"] == 3 + 2 + 3  # the retry is sent again
    assert got["record-ack-total"] == 3 and h.sender.metrics.retries == 3


def test_rates_fall_back_to_zero_after_the_windows_pass() -> None:
    h = Harness(topics={"t": 1})
    h.boot()
    h.send("t", value=b"x")
    h.run_until(lambda: h.sender.metrics.responses == 1)
    start = h.now
    h.advance(2 * WINDOW - 1)
    got = h.sender.metrics.snapshot()
    assert got["record-send-rate"] == 1000.0 / java_window(start, h.now) and got["request-latency-avg"] == 0.0
    h.advance(1)
    got = h.sender.metrics.snapshot()
    assert got["record-send-rate"] == 0.0 and math.isnan(got["request-latency-avg"])
    assert got["record-send-total"] == 1  # totals are for the producer's life


def test_buffer_pool_waits_give_the_wait_ratio_and_exhaustion() -> None:
    clock = FakeClock()
    metrics = ProducerMetrics(clock)
    pool = BufferPool(1000, 100, clock)
    pool.metrics = metrics
    pool.allocate(1000, 0)
    with pytest.raises(BufferExhaustedError):
        pool.allocate(100, 50)  # FakeClock.wait moves time by the 50 ms waited
    got = metrics.snapshot()
    assert got["bufferpool-wait-ratio"] == 50 / java_window(clock.monotonic_ms(), clock.monotonic_ms())
    assert got["bufferpool-wait-time-ms-total"] == 50 and got["bufferpool-wait-time-ns-total"] == 50_000_000
    assert got["buffer-exhausted-total"] == 1


def test_gauges_read_the_producer_parts() -> None:
    h = Harness(topics={"t": 1}, buffer_memory=100_000, batch_size=1000)
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    h.send("t", value=b"x")
    got = h.sender.metrics.snapshot()
    assert got["buffer-total-bytes"] == 100_000 and got["buffer-available-bytes"] == 99_000
    assert got["queued-batches"] == 1 and got["requests-in-flight"] == 0 and got["waiting-threads"] == 0
    h.run_until(lambda: bool(h.selector.held(m.PRODUCE)))
    got = h.sender.metrics.snapshot()
    assert got["queued-batches"] == 0 and got["requests-in-flight"] == 1
    assert got["metadata-age"] == (h.now - h.metadata.last_successful_refresh_ms) / 1000.0


# -- names ---------------------------------------------------------------------------------------------------


def test_metric_names_groups_and_tags() -> None:
    h = Harness(topics={"t": 1})
    h.boot()
    h.send("t", value=b"x")
    h.run_until(lambda: h.sender.metrics.responses == 1)
    metrics = h.sender.metrics.metric_list()
    by_group: Dict[str, List[Any]] = {}
    for metric in metrics:
        by_group.setdefault(metric.group, []).append(metric)
    producer = {x.name for x in by_group["producer-metrics"]}
    topic = {x.name for x in by_group["producer-topic-metrics"]}
    node = {x.name for x in by_group["producer-node-metrics"]}
    assert ISSUE_PRODUCER_METRICS <= producer and FORMER_KEYS <= producer
    assert ISSUE_TOPIC_METRICS <= topic and ISSUE_NODE_METRICS <= node
    assert producer == {n for n, _ in PRODUCER_METRICS + GAUGES}
    assert topic == {n for n, _ in TOPIC_METRICS} and node == {n for n, _ in NODE_METRICS}
    assert all(x.tags == {"topic": "t"} for x in by_group["producer-topic-metrics"])
    assert all(x.tags == {"node-id": "node-1"} for x in by_group["producer-node-metrics"])
    assert all(x.description for x in metrics)
    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*", x.name) for x in metrics)


def test_docs_list_every_metric() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for name, _ in PRODUCER_METRICS + GAUGES + TOPIC_METRICS + NODE_METRICS:
        assert f"`{name}`" in text, name


# -- statistics.interval.ms / stats_cb -----------------------------------------------------------------------


def test_stats_cb_is_called_every_interval_from_the_sender_loop() -> None:
    h = Harness(topics={"t": 1})
    reports: List[Dict[str, Any]] = []
    metrics = ProducerMetrics(h.clock, stats_cb=lambda s: reports.append(json.loads(s)), stats_interval_ms=1000,
                              client_id="stats-test")
    metrics.watch(h.client, h.accumulator, h.metadata)
    h.sender.metrics = metrics
    start = h.now
    h.boot()
    assert h.now == start and reports == []
    assert h.selector.poll_timeouts[-1] <= 1000  # the sender wakes up in time for the report
    h.send("t", value=b"x")
    h.run_until(lambda: metrics.responses == 1)
    h.advance(999)
    h.run()
    assert reports == [] and h.selector.poll_timeouts[-1] == 1
    h.advance(1)
    h.run()
    assert len(reports) == 1
    first = reports[0]
    assert first["client_id"] == "stats-test" and first["type"] == "producer"
    assert first["ts"] == int(h.now * 1000) and first["time"] == h.clock.wall_ms() // 1000
    assert first["producer-metrics"]["record-send-total"] == 1
    assert first["producer-topic-metrics"]["t"]["record-send-total"] == 1
    assert first["producer-node-metrics"]["node-1"]["response-total"] == 1
    assert first["producer-metrics"]["produce-throttle-time-avg"] == 0.0
    h.run(3)
    assert len(reports) == 1
    h.advance(1000)
    h.run()
    assert len(reports) == 2 and metrics.stats_reports == 2
    # a long stall gives one report, not one per missed interval
    h.advance(10_500)
    h.run(3)
    assert len(reports) == 3
    h.advance(999)
    h.run()
    assert len(reports) == 3
    h.advance(1)
    h.run()
    assert len(reports) == 4


def test_the_network_thread_asks_for_a_report_only_when_one_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """(next_report_ms is the test the sender makes before calling maybe_report: inf without a stats_cb)"""
    h = Harness(topics={"t": 1})
    assert ProducerMetrics(h.clock).next_report_ms == math.inf
    reports: List[str] = []
    metrics = ProducerMetrics(h.clock, stats_cb=reports.append, stats_interval_ms=1000)
    h.sender.metrics = metrics
    asked: List[float] = []
    maybe_report = metrics.maybe_report

    def counting(now: float) -> float:
        asked.append(now)
        return maybe_report(now)

    monkeypatch.setattr(metrics, "maybe_report", counting)
    h.boot()
    h.run(3)
    assert asked == [] and metrics.next_report_ms > h.now
    h.advance(metrics.next_report_ms - h.now)
    h.run()
    assert len(asked) == 1 and len(reports) == 1 and metrics.next_report_ms > h.now


def test_nan_is_null_in_the_stats_json() -> None:
    metrics = ProducerMetrics(FakeClock())
    stats = json.loads(json.dumps(metrics.stats()))
    assert stats["producer-metrics"]["request-latency-avg"] is None
    assert stats["producer-metrics"]["record-send-rate"] == 0.0


@pytest.mark.allow_internal_errors  # stats_cb raises on purpose: its traceback is logged
def test_a_failing_stats_cb_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(topics={"t": 1})

    def bad(stats: str) -> None:
        raise RuntimeError("monitoring is down")

    metrics = ProducerMetrics(h.clock, stats_cb=bad, stats_interval_ms=100)
    h.sender.metrics = metrics
    h.boot()
    h.advance(100)
    with caplog.at_level(logging.ERROR, logger="kproducer.producer.metrics"):
        h.run()
    assert metrics.stats_failures == 1 and "stats_cb raised" in caplog.text
    fut = h.send("t", value=b"x")
    h.advance(100)
    h.run_until(fut.done)
    assert fut.get(0).offset == 0 and metrics.stats_failures == 2


def test_no_stats_cb_no_reports() -> None:
    calls: List[str] = []
    metrics = ProducerMetrics(FakeClock(), stats_cb=calls.append, stats_interval_ms=0)
    assert metrics.maybe_report(1e12) == math.inf and calls == []


# -- the Producer, on the MockCluster --------------------------------------------------------------------------


def test_producer_metrics_on_the_mock_cluster() -> None:
    n = 500
    reports: List[str] = []
    got_report = threading.Event()

    def on_stats(stats: str) -> None:
        reports.append(stats)
        got_report.set()

    with MockCluster(2) as cluster:
        cluster.create_topic("orders", 4)
        # an hour-long window: every request of the test is in it however slow the machine is
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5, statistics_interval_ms=50,
                      stats_cb=on_stats, client_id="metrics-mock", metrics_sample_window_ms=3_600_000) as p:
            for i in range(n):
                p.send("orders", value=b"%05d" % i, key=b"%d" % (i % 17))
            p.flush(30)
            got = p.metrics()
            assert got_report.wait(30)
        closed = p.metrics()
    assert FORMER_KEYS <= set(got)
    assert got["record-send-total"] == n and got["record-ack-total"] == n
    assert got["record-send-total{topic=orders}"] == n and got["record-error-total"] == 0
    assert got["byte-total{topic=orders}"] == got["byte-ack-total"] > n * 5
    assert got["buffer-available-bytes"] == got["buffer-total-bytes"] == 33554432
    nodes = {k for k in got if k.startswith("request-latency-avg{node-id=")}
    assert nodes == {"request-latency-avg{node-id=node-1}", "request-latency-avg{node-id=node-2}"}
    assert sum(got[f"request-total{{node-id=node-{b}}}"] for b in (1, 2)) == got["request-total"]
    assert got["request-latency-max"] >= got["request-latency-avg"] >= 0
    assert got["records-per-request-avg"] == n / got["request-total"]
    stats = json.loads(reports[0])
    assert stats["client_id"] == "metrics-mock" and "record-send-rate" in stats["producer-metrics"]
    assert closed["record-ack-total"] == n  # readable after close()


def test_metrics_accept_other_projects_spellings() -> None:
    p = Producer({"bootstrap.servers": "127.0.0.1:9", "statistics.interval.ms": 1000, "stats_cb": print,
                  "metrics.num.samples": 3, "metrics.sample.window.ms": 1000}, max_block_ms=0)
    try:
        assert p._sender.metrics.config == (3, 1000.0)
        assert p.config.statistics_interval_ms == 1000 and p.config.stats_cb is print
    finally:
        p.close(0)


def test_metrics_can_be_read_while_sending() -> None:
    """metrics() read from the sending thread between sends (a bounded loop): every record is acknowledged."""
    with MockCluster(1) as cluster:
        cluster.create_topic("t", 2)
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
            deadline = time.monotonic() + 20
            for i in range(2000):
                p.send("t", value=b"v")
                if i % 200 == 0:
                    assert p.metrics()["record-error-total"] == 0
                if time.monotonic() > deadline:
                    break
            p.flush(30)
            assert p.metrics()["record-ack-total"] == i + 1


# -- the prometheus_client bridge (extra [prometheus]) ----------------------------------------------------------


class _Named:
    """Something with a client id and metrics, as the collector reads a Producer."""

    def __init__(self, client_id: str, metrics: ProducerMetrics) -> None:
        self.client_id = client_id
        self.metric_list = metrics.metric_list


def test_prometheus_collector_exposes_every_metric_with_labels() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from kproducer.metrics_prometheus import ProducerCollector

    h = Harness(topics={"t": 1})
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    for _ in range(3):
        h.send("t", value=b"x")
    h.run_until(lambda: bool(h.selector.held(m.PRODUCE)))
    h.advance(12)
    _respond_all_held(h)
    h.run_until(lambda: h.sender.metrics.responses == 1)
    producer = _Named("prom-test", h.sender.metrics)
    registry = prometheus_client.CollectorRegistry()
    collector = ProducerCollector.register(producer, registry=registry)  # type: ignore[arg-type]
    text = prometheus_client.generate_latest(registry).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    me = (("client_id", "prom-test"),)
    assert samples[("kproducer_record_send_total", me)] == 3
    assert samples[("kproducer_request_latency_avg", me)] == 12.0
    assert samples[("kproducer_topic_record_send_total", me + (("topic", "t"),))] == 3
    assert samples[("kproducer_node_request_latency_max", me + (("node_id", "node-1"),))] == 12.0
    assert samples[("kproducer_produce_throttle_time_max", me)] == 0.0
    # every metric is there once per producer/topic/node
    names = {s[0] for s in samples}
    expected = ({"kproducer_" + n.replace("-", "_") for n, _ in PRODUCER_METRICS + GAUGES}
                | {"kproducer_topic_" + n.replace("-", "_") for n, _ in TOPIC_METRICS}
                | {"kproducer_node_" + n.replace("-", "_") for n, _ in NODE_METRICS})
    assert names == expected
    assert "# TYPE kproducer_record_send_total counter" in text and "# TYPE kproducer_record_send_rate gauge" in text
    collector.remove(producer)  # type: ignore[arg-type]
    assert "kproducer_record_send" not in prometheus_client.generate_latest(registry).decode()
