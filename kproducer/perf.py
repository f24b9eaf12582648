"""The logic of ``kproducer perf``, a producer load generator like Kafka's kafka-producer-perf-test.

:func:`run_perf` sends ``num_records`` records of ``record_size`` bytes to a topic, optionally throttled to
``throughput`` records/s, and measures each record's latency from the ``send()`` call to its delivery
callback with :func:`time.perf_counter`. Without ``bootstrap`` it starts an in-process
:class:`~kproducer.mock.MockCluster` and creates the topic there.

With ``batch=True`` records go through ``send_batch()`` in chunks of ``chunk_size`` records; a record's
latency is then from its chunk's ``send_batch()`` call to the moment the whole chunk is acknowledged (an
upper bound: a chunk spans several partitions, which complete at slightly different times).

This module does not print: progress lines go to the ``progress`` callable (the CLI writes them to stderr).
"""
from __future__ import annotations

import logging
import math
import random
import string
import threading
import time
from array import array
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from . import Producer
from .producer.future import BatchSendFuture, RecordMetadata

log = logging.getLogger(__name__)

MB = 1024 * 1024
DEFAULT_CHUNK = 1000


def make_payload(record_size: int, seed: int = 0) -> bytes:
    """One payload of ``record_size`` random upper-case letters (as kafka-producer-perf-test makes)."""
    rnd = random.Random(seed)
    return "".join(rnd.choice(string.ascii_uppercase) for _ in range(record_size)).encode("ascii")


def percentile(sorted_values: "array[float] | List[float]", fraction: float) -> float:
    """The nearest-rank percentile of already sorted values (0.0 for none)."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    idx = min(n - 1, max(0, int(math.ceil(fraction * n)) - 1))
    return float(sorted_values[idx])


class PerfResult:
    """Totals of one run; latencies in milliseconds."""

    def __init__(self, records: int, errors: int, elapsed_s: float, record_size: int,
                 latencies_ms: "array[float]", cpu_s: float, mode: str, first_error: Optional[str]) -> None:
        self.records = records
        self.errors = errors
        self.elapsed_s = elapsed_s
        self.record_size = record_size
        self.cpu_s = cpu_s
        self.mode = mode
        self.first_error = first_error
        lat = sorted(latencies_ms)
        self.latency_samples = len(lat)
        self.avg_ms = (math.fsum(lat) / len(lat)) if lat else 0.0
        self.max_ms = lat[-1] if lat else 0.0
        self.p50_ms = percentile(lat, 0.50)
        self.p95_ms = percentile(lat, 0.95)
        self.p99_ms = percentile(lat, 0.99)
        self.p999_ms = percentile(lat, 0.999)

    @property
    def records_per_sec(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_sec(self) -> float:
        return self.records_per_sec * self.record_size / MB

    def as_dict(self) -> Dict[str, Any]:
        return {
            "mode": self.mode,
            "records": self.records,
            "errors": self.errors,
            "record_size": self.record_size,
            "elapsed_s": round(self.elapsed_s, 6),
            "records_per_sec": round(self.records_per_sec, 1),
            "mb_per_sec": round(self.mb_per_sec, 3),
            "avg_latency_ms": round(self.avg_ms, 3),
            "p50_ms": round(self.p50_ms, 3),
            "p95_ms": round(self.p95_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "p999_ms": round(self.p999_ms, 3),
            "max_latency_ms": round(self.max_ms, 3),
            "cpu_s": round(self.cpu_s, 4),
            "cpu_us_per_record": round(self.cpu_s / self.records * 1e6, 3) if self.records else 0.0,
            "first_error": self.first_error,
        }

    def summary(self) -> str:
        """The final line, in kafka-producer-perf-test's format (with fractional milliseconds)."""
        text = (f"{self.records} records sent, {self.records_per_sec:.1f} records/sec "
                f"({self.mb_per_sec:.2f} MB/sec), {self.avg_ms:.2f} ms avg latency, {self.max_ms:.2f} ms max "
                f"latency, {self.p50_ms:.2f} ms 50th, {self.p95_ms:.2f} ms 95th, {self.p99_ms:.2f} ms 99th, "
                f"{self.p999_ms:.2f} ms 99.9th.")
        if self.errors:
            text += f" {self.errors} records failed (first error: {self.first_error})."
        return text


class _Stats:
    """Latencies collected on the producer's network thread (callbacks), read by the progress thread."""

    def __init__(self) -> None:
        self.latencies: "array[float]" = array("d")
        self.errors = 0
        self.first_error: Optional[str] = None
        self.sent = 0  # updated by the sending thread in steps

    def error(self, exc: BaseException, count: int = 1) -> None:
        self.errors += count
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"


class _Progress(threading.Thread):
    """Every ``interval`` seconds, reports the window's rate and latency like kafka-producer-perf-test."""

    def __init__(self, stats: _Stats, record_size: int, interval: float, out: Callable[[str], None]) -> None:
        super().__init__(name="kproducer-perf-progress", daemon=True)
        self.stats = stats
        self.record_size = record_size
        self.interval = interval
        self.out = out
        self.stopped = threading.Event()

    def run(self) -> None:
        done = 0
        last = time.perf_counter()
        while not self.stopped.wait(self.interval):
            now = time.perf_counter()
            lat = self.stats.latencies
            count = len(lat)
            window = lat[done:count]
            n = len(window)
            rate = n / (now - last) if now > last else 0.0
            avg = (math.fsum(window) / n) if n else 0.0
            worst = max(window) if n else 0.0
            self.out(f"{n} records sent, {rate:.1f} records/sec ({rate * self.record_size / MB:.2f} MB/sec), "
                     f"{avg:.1f} ms avg latency, {worst:.1f} ms max latency.")
            done, last = count, now


def _throttle_sleep(start: float, sent: int, throughput: float) -> None:
    """Sleep while ``sent`` records are ahead of ``throughput`` records/s since ``start`` (in >= 1 ms steps,
    so records go in small bursts, as Kafka's ThroughputThrottler does)."""
    ahead = sent / throughput - (time.perf_counter() - start)
    if ahead >= 0.001:
        time.sleep(ahead)


def _send_loop(producer: Producer, topic: str, payload: bytes, num_records: int, throughput: float,
               stats: _Stats) -> None:
    add = stats.latencies.append
    err = stats.error
    pc = time.perf_counter
    send = producer.send
    # one small function per record, its start time bound as a default argument (evaluated at def time)
    start = pc()
    if throughput <= 0:
        for _ in range(num_records):
            def callback(md: Optional[RecordMetadata], exc: Optional[BaseException], t0: float = pc()) -> None:
                if exc is None:
                    add((pc() - t0) * 1000.0)
                else:
                    err(exc)
            send(topic, payload, callback=callback)
        stats.sent = num_records
        return
    step = max(1, min(1000, int(throughput // 1000) or 1))  # check the schedule about once a millisecond
    i = 0
    while i < num_records:
        for _ in range(min(step, num_records - i)):
            def callback2(md: Optional[RecordMetadata], exc: Optional[BaseException], t0: float = pc()) -> None:
                if exc is None:
                    add((pc() - t0) * 1000.0)
                else:
                    err(exc)
            send(topic, payload, callback=callback2)
        i += step
        stats.sent = min(i, num_records)
        _throttle_sleep(start, stats.sent, throughput)


def _batch_loop(producer: Producer, topic: str, payload: bytes, num_records: int, throughput: float,
                stats: _Stats, chunk_size: int) -> None:
    pending: Deque[Optional[Tuple[BatchSendFuture, float]]] = deque()
    ready = threading.Semaphore(0)
    add = stats.latencies.extend
    pc = time.perf_counter

    def waiter() -> None:  # completes chunks in order; a chunk's records all get the chunk's latency
        while True:
            ready.acquire()
            item = pending.popleft()
            if item is None:
                return
            fut, t0 = item
            exc = fut.exception()
            if exc is None:
                ms = (pc() - t0) * 1000.0
                add(array("d", [ms]) * fut.count)
            else:
                stats.error(exc, fut.count)

    thread = threading.Thread(target=waiter, name="kproducer-perf-batch-waiter", daemon=True)
    thread.start()
    values = [payload] * chunk_size
    start = pc()
    i = 0
    try:
        while i < num_records:
            n = min(chunk_size, num_records - i)
            t0 = pc()
            fut = producer.send_batch(topic, values if n == chunk_size else values[:n])
            pending.append((fut, t0))
            ready.release()
            i += n
            stats.sent = i
            if throughput > 0:
                _throttle_sleep(start, i, throughput)
    finally:
        pending.append(None)
        ready.release()
        thread.join()


def run_perf(
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float = -1,
    bootstrap: Optional[str] = None,
    producer_props: Optional[Mapping[str, Any]] = None,
    batch: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
    partitions: int = 6,
    progress: Optional[Callable[[str], None]] = None,
    progress_interval: float = 5.0,
    payload: Optional[bytes] = None,
) -> PerfResult:
    """Run one perf test and return its result. ``throughput`` <= 0 means unthrottled. ``producer_props``
    are producer settings (Java names or aliases; ConfigError for bad ones). Without ``bootstrap`` a
    one-broker MockCluster runs in this process with ``topic`` created with ``partitions`` partitions."""
    if num_records < 1:
        raise ValueError("num_records must be at least 1")
    if record_size < 0:
        raise ValueError("record_size must not be negative")
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    props: Dict[str, Any] = dict(producer_props or {})
    value = payload if payload is not None else make_payload(record_size)
    cluster = None
    if bootstrap is None:
        from .mock import MockCluster

        cluster = MockCluster(num_brokers=1).start()
        cluster.create_topic(topic, partitions)
        bootstrap = cluster.bootstrap_servers
    try:
        producer = Producer(props, bootstrap_servers=bootstrap)
        stats = _Stats()
        reporter = _Progress(stats, len(value), progress_interval, progress) if progress else None
        try:
            # fetch metadata first so that it is not part of the first record's latency
            producer.partitions_for(topic)
            if reporter is not None:
                reporter.start()
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            if batch:
                _batch_loop(producer, topic, value, num_records, throughput, stats, chunk_size)
            else:
                _send_loop(producer, topic, value, num_records, throughput, stats)
            producer.flush()
            elapsed = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
        finally:
            if reporter is not None:
                reporter.stopped.set()
                reporter.join()
            producer.close()
        return PerfResult(num_records, stats.errors, elapsed, len(value), stats.latencies, cpu,
                          "send_batch" if batch else "send", stats.first_error)
    finally:
        if cluster is not None:
            cluster.stop()


__all__ = ["PerfResult", "make_payload", "percentile", "run_perf"]
