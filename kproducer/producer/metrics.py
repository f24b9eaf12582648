"""The producer's metrics: Java's names, windowed rates and averages, exposed by Producer.metrics().

Java's client keeps each statistic over ``metrics.num.samples`` samples of ``metrics.sample.window.ms``
each (default 2 x 30 s): a rate is the sum recorded in the live samples divided by the time they span
(at least ``num.samples - 1`` whole windows), an average or a maximum is taken over the events of the live
samples, and a sample older than ``num.samples x window`` is dropped when measured. :class:`Sensor` does
the same, with one set of samples per sensor that serves its average, maximum, rate and count rate at once
(Java's separate Avg/Max/Rate stats see the same samples, as they record the same events).

Recording is per batch, per request and per response, never per record, and uses the injected clock, so
tests on a FakeClock get exact values. Names, groups and tags follow Java's ``producer-metrics``,
``producer-topic-metrics`` (tag ``topic``) and ``producer-node-metrics`` (tag ``node-id``, ``node-<id>``);
see docs/metrics.md for the list and what kproducer adds.

With ``statistics.interval.ms`` > 0 and a ``stats_cb``, the network thread calls ``stats_cb(json_str)``
every interval (confluent-kafka's habit; the JSON holds every metric, see :meth:`ProducerMetrics.stats`).
"""
from __future__ import annotations

import json
import logging
import math
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..clock import SYSTEM_CLOCK, Clock
from ..protocol.accel import MODULES, load
from ..protocol.records import RECORD_BATCH_OVERHEAD

if TYPE_CHECKING:
    from ..network.client import NetworkClient
    from ..network.metadata import Metadata
    from .accumulator import RecordAccumulator
    from .batch import ProducerBatch

_send_c = load(MODULES["producer"])

log = logging.getLogger(__name__)

NAN = float("nan")
_NEG_INF = float("-inf")

PRODUCER_GROUP = "producer-metrics"
TOPIC_GROUP = "producer-topic-metrics"
NODE_GROUP = "producer-node-metrics"

Number = Union[int, float]


class MetricConfig(NamedTuple):
    """Java's MetricConfig: ``samples`` windows of ``window_ms`` each."""

    samples: int = 2
    window_ms: float = 30000.0


class Metric(NamedTuple):
    """One metric's name, group, tags, description and current value (Java's MetricName + value)."""

    name: str
    group: str
    tags: Dict[str, str]
    description: str
    value: float

    @property
    def key(self) -> str:
        """The key of this metric in :meth:`Producer.metrics`: the bare name for producer-wide metrics,
        ``name{tag=value}`` for per-topic and per-node ones."""
        if not self.tags:
            return self.name
        return self.name + "{" + ",".join(f"{k}={v}" for k, v in self.tags.items()) + "}"


class _SensorPy:
    """The recording half of :class:`Sensor` (pure Python; compiled twin: ``_send.SensorBase``)."""

    __slots__ = ("_config", "_samples", "_current", "total", "count")

    def __init__(self, config: MetricConfig) -> None:
        self._config = config
        # each sample: [start_ms, last_event_ms, event_count, sum, max]
        self._samples: List[List[float]] = []
        self._current = 0
        #: lifetime sum of the recorded values, and number of events (Java's CumulativeSum / CumulativeCount)
        self.total = 0.0
        self.count = 0

    def record(self, value: float, now: float) -> None:
        self.record_many(value, 1, value, now)

    def record_many(self, total: float, count: int, largest: float, now: float) -> None:
        """``count`` values summing to ``total``, the largest ``largest``, all at ``now``: the same as
        recording each of them (samples only depend on the time), in one step."""
        samples = self._samples
        if not samples:
            samples.append([now, now, 0, 0.0, _NEG_INF])
        s = samples[self._current]
        if now - s[0] >= self._config.window_ms:
            s = self._advance(now)
        s[1] = now
        s[2] += count
        s[3] += total
        if largest > s[4]:
            s[4] = float(largest)  # (a float, as the compiled twin keeps it)
        self.total += total
        self.count += count

    def _advance(self, now: float) -> List[float]:
        samples = self._samples
        self._current = (self._current + 1) % (self._config.samples + 1)
        if self._current >= len(samples):
            s = [now, now, 0, 0.0, _NEG_INF]
            samples.append(s)
            return s
        s = samples[self._current]
        s[0] = s[1] = now
        s[2] = 0
        s[3] = 0.0
        s[4] = _NEG_INF
        return s

    def _purge(self, now: float) -> None:
        """Reset samples whose last event is older than the monitored window (Java's purgeObsoleteSamples)."""
        expire = self._config.samples * self._config.window_ms
        for s in self._samples:
            if now - s[1] >= expire:
                s[0] = s[1] = now
                s[2] = 0
                s[3] = 0.0
                s[4] = _NEG_INF


if TYPE_CHECKING:
    _SensorBase = _SensorPy
else:
    _SensorBase = _send_c.SensorBase if _send_c is not None else _SensorPy


class Sensor(_SensorBase):
    """Samples of recorded values: Java's SampledStat windows (``samples + 1`` slots, one of them the
    "overlapping" sample), plus lifetime totals. Not locked: :class:`ProducerMetrics` holds its lock. The
    recording (``record``, ``record_many``, ``_purge``) is compiled when the accelerator is there; ``_samples``
    is then a copy, ``[start_ms, last_event_ms, event_count, sum, max]`` per sample as in :class:`_SensorPy`."""

    __slots__ = ()

    def avg(self, now: float) -> float:
        """Mean of the values recorded in the live samples; NaN when there are none (Java's Avg)."""
        self._purge(now)
        count = sum(s[2] for s in self._samples)
        return sum(s[3] for s in self._samples) / count if count else NAN

    def max(self, now: float) -> float:
        """Largest value recorded in the live samples; NaN when there are none (Java's Max)."""
        self._purge(now)
        if not any(s[2] for s in self._samples):
            return NAN
        return max(s[4] for s in self._samples)

    def rate(self, now: float, per_ms: float = 1000.0) -> float:
        """Sum of the live samples per second (per ``per_ms`` milliseconds); Java's Rate of a WindowedSum."""
        window = self._window_ms(now)
        return sum(s[3] for s in self._samples) * per_ms / window

    def count_rate(self, now: float) -> float:
        """Events per second over the live samples; Java's Rate of a WindowedCount."""
        window = self._window_ms(now)
        return sum(s[2] for s in self._samples) * 1000.0 / window

    def _window_ms(self, now: float) -> float:
        """Java's Rate.windowSize: the time since the oldest live sample began, counted as at least
        ``samples - 1`` whole windows, and at least 1 ms."""
        self._purge(now)
        config = self._config
        oldest = min((s[0] for s in self._samples), default=now)
        elapsed = now - oldest
        full = int(elapsed // config.window_ms)
        if full < config.samples - 1:
            elapsed += (config.samples - 1 - full) * config.window_ms
        return max(elapsed, 1.0)


class _TopicSensors:
    __slots__ = ("records", "bytes", "compression", "retries", "errors")

    def __init__(self, config: MetricConfig) -> None:
        self.records = Sensor(config)
        self.bytes = Sensor(config)
        self.compression = Sensor(config)
        self.retries = Sensor(config)
        self.errors = Sensor(config)


class _NodeSensors:
    __slots__ = ("latency", "requests", "responses")

    def __init__(self, config: MetricConfig) -> None:
        self.latency = Sensor(config)
        self.requests = Sensor(config)
        self.responses = Sensor(config)


# (name, description) of every metric, by group, in the order they are listed
PRODUCER_METRICS: Tuple[Tuple[str, str], ...] = (
    ("batch-size-avg", "The average number of bytes sent per partition per-request."),
    ("batch-size-max", "The max number of bytes sent per partition per-request."),
    ("compression-rate-avg", "The average compression rate of record batches, defined as the average ratio of "
                             "the compressed batch size over the uncompressed size."),
    ("record-queue-time-avg", "The average time in ms record batches spent in the send buffer."),
    ("record-queue-time-max", "The maximum time in ms record batches spent in the send buffer."),
    ("request-latency-avg", "The average request latency in ms"),
    ("request-latency-max", "The maximum request latency in ms"),
    ("record-send-rate", "The average number of records sent per second."),
    ("record-send-total", "The total number of records sent."),
    ("records-per-request-avg", "The average number of records per request."),
    ("record-retry-rate", "The average per-second number of retried record sends"),
    ("record-retry-total", "The total number of retried record sends"),
    ("record-error-rate", "The average per-second number of record sends that resulted in errors"),
    ("record-error-total", "The total number of record sends that resulted in errors"),
    ("batch-split-rate", "The average number of batch splits per second"),
    ("batch-split-total", "The total number of batch splits"),
    ("produce-throttle-time-avg", "The average time in ms a request was throttled by a broker"),
    ("produce-throttle-time-max", "The maximum time in ms a request was throttled by a broker"),
    ("request-rate", "The number of produce requests sent per second"),
    ("request-total", "The total number of produce requests sent"),
    ("response-rate", "The number of produce responses received per second"),
    ("response-total", "The total number of produce responses received"),
    ("record-size-avg", "The average record size"),
    ("record-size-max", "The maximum record size"),
    ("bufferpool-wait-ratio", "The fraction of time an appender waits for space allocation."),
    ("bufferpool-wait-time-ns-total", "The total time in nanoseconds an appender waits for space allocation."),
    ("bufferpool-wait-time-ms-total", "The total time in milliseconds an appender waits for space allocation "
                                      "(kproducer)."),
    ("buffer-exhausted-rate", "The average per-second number of record sends that are dropped due to buffer "
                              "exhaustion"),
    ("buffer-exhausted-total", "The total number of record sends that are dropped due to buffer exhaustion"),
    ("flush-time-ns-total", "Total time producer has spent in flush in nanoseconds."),
    ("txn-init-time-ns-total", "Total time producer has spent in initTransactions in nanoseconds."),
    ("txn-begin-time-ns-total", "Total time producer has spent in beginTransaction in nanoseconds."),
    ("txn-send-offsets-time-ns-total", "Total time producer has spent in sendOffsetsToTransaction in nanoseconds."),
    ("txn-commit-time-ns-total", "Total time producer has spent in commitTransaction in nanoseconds."),
    ("txn-abort-time-ns-total", "Total time producer has spent in abortTransaction in nanoseconds."),
    ("metadata-wait-time-ns-total", "Total time producer has spent waiting on topic metadata in nanoseconds."),
    ("batch-total", "The total number of batches sent, retries included (kproducer)."),
    ("record-ack-total", "The total number of records acknowledged by the brokers (kproducer)."),
    ("byte-ack-total", "The total number of batch bytes acknowledged by the brokers (kproducer)."),
)
#: the timers of Java's KafkaProducerMetrics (group producer-metrics): the time the application spent in a call,
#: a lifetime sum in nanoseconds. Keys of :meth:`ProducerMetrics.record_call_time`.
CALL_TIMERS: Tuple[str, ...] = ("flush", "txn-init", "txn-begin", "txn-send-offsets", "txn-commit", "txn-abort",
                                "metadata-wait")
#: gauges read from the producer's parts when measured (registered by :meth:`ProducerMetrics.watch`)
GAUGES: Tuple[Tuple[str, str], ...] = (
    ("buffer-total-bytes", "The maximum amount of buffer memory the client can use (whether or not it is "
                           "currently used)."),
    ("buffer-available-bytes", "The total amount of buffer memory that is not being used (either unallocated "
                               "or in the free list)."),
    ("waiting-threads", "The number of user threads blocked waiting for buffer memory to enqueue their "
                        "records"),
    ("requests-in-flight", "The current number of in-flight requests awaiting a response."),
    ("metadata-age", "The age in seconds of the current producer metadata being used."),
    ("queued-batches", "The number of batches waiting in the accumulator to be sent (kproducer)."),
    ("connection-count", "The current number of active connections."),
)
TOPIC_METRICS: Tuple[Tuple[str, str], ...] = (
    ("record-send-rate", "The average number of records sent per second for a topic."),
    ("record-send-total", "The total number of records sent for a topic."),
    ("byte-rate", "The average number of bytes sent per second for a topic."),
    ("byte-total", "The total number of bytes sent for a topic."),
    ("compression-rate", "The average compression rate of record batches for a topic, defined as the average "
                         "ratio of the compressed batch size over the uncompressed size."),
    ("record-retry-rate", "The average per-second number of retried record sends for a topic"),
    ("record-retry-total", "The total number of retried record sends for a topic"),
    ("record-error-rate", "The average per-second number of record sends that resulted in errors for a topic"),
    ("record-error-total", "The total number of record sends that resulted in errors for a topic"),
)
NODE_METRICS: Tuple[Tuple[str, str], ...] = (
    ("request-latency-avg", "The average request latency in ms for a node"),
    ("request-latency-max", "The maximum request latency in ms for a node"),
    ("request-rate", "The number of produce requests sent per second to a node"),
    ("request-total", "The total number of produce requests sent to a node"),
    ("response-rate", "The number of produce responses received per second from a node"),
    ("response-total", "The total number of produce responses received from a node"),
)

StatsCallback = Callable[[str], Any]


RequestStats = Tuple[int, int, int, int, float, float, float, float, int, int, int, Dict[str, List[float]]]


def _request_stats_py(batches: Sequence["ProducerBatch"]) -> RequestStats:
    """What :meth:`ProducerMetrics.record_produce_request` records of a produce request's batches: the records,
    the batches, the sum and largest of their sizes (what drain packs by), of their compression ratios and of
    their queue times, the sum, largest and count of the batch-sized largest records, and per topic [records,
    bytes, ratio sum, ratio max, batches]. (Compiled twin: ``_send.produce_request_stats``.)"""
    records = 0
    count = 0
    size_sum = 0
    size_max = 0
    ratio_sum = 0.0
    ratio_max = _NEG_INF
    queue_sum = 0.0
    queue_max = _NEG_INF
    rsize_sum = 0
    rsize_max = 0
    rsize_count = 0
    per_topic: Dict[str, List[float]] = {}
    for b in batches:
        builder = b.builder
        n = builder._count
        size = b.estimated_size()
        raw = RECORD_BATCH_OVERHEAD + builder._len  # (builder.estimated_size())
        ratio = size / raw if raw > 0 else 1.0
        queued = b.drained_ms - b.created_ms
        if n:
            largest = builder._max_rec + RECORD_BATCH_OVERHEAD
            rsize_sum += largest
            rsize_count += 1
            if largest > rsize_max:
                rsize_max = largest
        if queued < 0.0:
            queued = 0.0
        records += n
        count += 1
        size_sum += size
        if size > size_max:
            size_max = size
        ratio_sum += ratio
        if ratio > ratio_max:
            ratio_max = ratio
        queue_sum += queued
        if queued > queue_max:
            queue_max = queued
        t = per_topic.get(b.topic)
        if t is None:
            per_topic[b.topic] = [n, size, ratio, ratio, 1]
        else:
            t[0] += n
            t[1] += size
            t[2] += ratio
            if ratio > t[3]:
                t[3] = ratio
            t[4] += 1
    return (records, count, size_sum, size_max, ratio_sum, ratio_max, queue_sum, queue_max, rsize_sum, rsize_max,
            rsize_count, per_topic)


_request_stats: Callable[[Sequence["ProducerBatch"]], RequestStats] = (
    _send_c.produce_request_stats if _send_c is not None else _request_stats_py)


class ProducerMetrics:
    """Every metric of one producer. Written by the network thread (and by send() for records that fail
    there, by appenders waiting for buffer memory); read from any thread. One lock guards all of it.

    The plain counters (``records_failed``, ``retries``, ``splits``, ...) of the former SenderMetrics stay
    as attributes."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, *, samples: int = 2, window_ms: float = 30000.0,
                 stats_cb: Optional[StatsCallback] = None, stats_interval_ms: float = 0,
                 client_id: str = "") -> None:
        if samples < 1 or window_ms <= 0:
            raise ValueError("metrics need at least one sample of a positive window")
        self.clock = clock
        self.config = config = MetricConfig(samples, float(window_ms))
        self.client_id = client_id
        self._lock = threading.Lock()
        self._batch_size = Sensor(config)
        self._record_size = Sensor(config)
        self._compression = Sensor(config)
        self._queue_time = Sensor(config)
        self._latency = Sensor(config)
        self._records_per_request = Sensor(config)
        self._retries = Sensor(config)
        self._errors = Sensor(config)
        self._splits = Sensor(config)
        self._throttle = Sensor(config)
        self._buffer_wait = Sensor(config)
        self._exhausted = Sensor(config)
        self._responses = Sensor(config)
        self._topics: Dict[str, _TopicSensors] = {}
        self._nodes: Dict[int, _NodeSensors] = {}
        self._gauges: Dict[str, Callable[[], float]] = {}
        # plain lifetime counters (the former SenderMetrics attributes)
        self.requests = 0
        self.batches_sent = 0
        self.records_sent = 0
        self.records_acked = 0
        self.bytes_acked = 0
        self.records_failed = 0
        self.retries = 0
        self.splits = 0
        self.responses = 0
        self.buffer_wait_ms_total = 0.0
        #: KafkaProducerMetrics' timers: name (flush, txn-init, ...) -> lifetime milliseconds
        self.call_time_ms: Dict[str, float] = dict.fromkeys(CALL_TIMERS, 0.0)
        # statistics.interval.ms / stats_cb
        self._stats_cb = stats_cb if stats_interval_ms > 0 else None
        self._stats_interval_ms = float(stats_interval_ms)
        #: when stats_cb is due next (the clock's monotonic ms; inf without one): the network thread calls
        #: maybe_report() only from then on
        self.next_report_ms = clock.monotonic_ms() + self._stats_interval_ms if self._stats_cb is not None \
            else math.inf
        #: how many times stats_cb was called, and how many of those raised
        self.stats_reports = 0
        self.stats_failures = 0

    # -- wiring ------------------------------------------------------------------------------------

    def watch(self, client: Optional["NetworkClient"] = None, accumulator: Optional["RecordAccumulator"] = None,
              metadata: Optional["Metadata"] = None) -> None:
        """Read the gauges (buffer memory, in-flight requests, metadata age, queued batches) from the
        producer's parts, and have the accumulator's buffer pool record its waits here."""
        if accumulator is not None:
            pool = accumulator.free
            pool.metrics = self
            self._gauges["buffer-total-bytes"] = lambda: float(pool.total_memory)
            self._gauges["buffer-available-bytes"] = lambda: float(pool.available_memory())
            self._gauges["waiting-threads"] = lambda: float(pool.queued())
            self._gauges["queued-batches"] = lambda: float(accumulator.queued_batches())
        if client is not None:
            self._gauges["requests-in-flight"] = lambda: float(client.in_flight_count())
            # (Java's Selector: its channels, connecting ones included)
            self._gauges["connection-count"] = lambda: float(len(client.selector.channel_ids()))
        if metadata is not None:
            clock = self.clock
            self._gauges["metadata-age"] = lambda: (clock.monotonic_ms() - metadata.last_successful_refresh_ms) / 1000.0

    # -- recording (one call per event) --------------------------------------------------------------

    def _topic(self, topic: str) -> _TopicSensors:
        sensors = self._topics.get(topic)
        if sensors is None:
            sensors = self._topics[topic] = _TopicSensors(self.config)
        return sensors

    def _node(self, node: int) -> _NodeSensors:
        sensors = self._nodes.get(node)
        if sensors is None:
            sensors = self._nodes[node] = _NodeSensors(self.config)
        return sensors

    def record_produce_request(self, node: int, batches: Sequence["ProducerBatch"],
                               now: Optional[float] = None) -> None:
        """A produce request to ``node`` carrying ``batches`` was sent (their records are built): per batch
        its size, compression ratio, queue time and the topic's records and bytes; per request the record
        count (Java's Sender.updateProduceRequestMetrics). All happen at one time, so each sensor takes the
        request's batches in one step (the same samples as one record() per batch).

        record-size: as Java, each batch records its largest record, as the size of a batch holding just that
        record (the 61-byte batch header included); the builder keeps its largest record's size as it writes
        them (one comparison per record where the record is written, instead of a walk over the batch here).
        ``now``: when it was sent (the clock's monotonic ms; None: now)."""
        if now is None:
            now = self.clock.monotonic_ms()
        (records, count, size_sum, size_max, ratio_sum, ratio_max, queue_sum, queue_max, rsize_sum, rsize_max,
         rsize_count, per_topic) = _request_stats(batches)
        with self._lock:
            if count:
                self._batch_size.record_many(size_sum, count, size_max, now)
                self._compression.record_many(ratio_sum, count, ratio_max, now)
                self._queue_time.record_many(queue_sum, count, queue_max, now)
                if rsize_count:
                    self._record_size.record_many(rsize_sum, rsize_count, rsize_max, now)
                for topic, (n_records, n_bytes, r_sum, r_max, n_batches) in per_topic.items():
                    ts = self._topics.get(topic) or self._topic(topic)  # (made once: the call only then)
                    ts.records.record_many(n_records, int(n_batches), n_records, now)
                    ts.bytes.record_many(n_bytes, int(n_batches), n_bytes, now)
                    ts.compression.record_many(r_sum, int(n_batches), r_max, now)
            self._records_per_request.record(records, now)
            (self._nodes.get(node) or self._node(node)).requests.record(1, now)  # (made once: the call only then)
            self.requests += 1
            self.batches_sent += count
            self.records_sent += records

    def record_produce_response(self, node: int, latency_ms: float, throttle_time_ms: float = 0,
                                now: Optional[float] = None) -> None:
        """A produce response came from ``node`` (with acks=0 there is none), at ``now`` (the clock's
        monotonic ms; None: now)."""
        if now is None:
            now = self.clock.monotonic_ms()
        with self._lock:
            self._latency.record(latency_ms, now)
            self._throttle.record(throttle_time_ms, now)
            self._responses.record(1, now)
            n = self._nodes.get(node) or self._node(node)  # (made once: the call only then)
            n.latency.record(latency_ms, now)
            n.responses.record(1, now)
            self.responses += 1

    def record_retries(self, topic: str, records: int) -> None:
        """A batch of ``records`` records of ``topic`` is sent again."""
        now = self.clock.monotonic_ms()
        with self._lock:
            self._retries.record(records, now)
            self._topic(topic).retries.record(records, now)
            self.retries += records

    def record_errors(self, topic: Optional[str], records: int) -> None:
        """``records`` records failed (``topic`` None: counted for the producer only)."""
        now = self.clock.monotonic_ms()
        with self._lock:
            self._errors.record(records, now)
            if topic is not None:
                self._topic(topic).errors.record(records, now)
            self.records_failed += records

    def record_split(self, extra_batches: int) -> None:
        """A batch too large for the broker was split into ``extra_batches + 1`` batches."""
        now = self.clock.monotonic_ms()
        with self._lock:
            self._splits.record(1, now)
            self.splits += extra_batches

    def record_call_time(self, name: str, elapsed_ms: float) -> None:
        """The application spent ``elapsed_ms`` in a call timed by Java's KafkaProducerMetrics: ``name`` is
        one of :data:`CALL_TIMERS` (flush, txn-init, txn-begin, txn-send-offsets, txn-commit, txn-abort,
        metadata-wait); read as ``<name>-time-ns-total``."""
        with self._lock:
            self.call_time_ms[name] += elapsed_ms

    def record_success(self, records: int, size: int) -> None:
        with self._lock:
            self.records_acked += records
            self.bytes_acked += size

    def record_buffer_wait(self, waited_ms: float, exhausted: bool) -> None:
        """An appender waited ``waited_ms`` for buffer memory; ``exhausted``: and gave up (max.block.ms)."""
        now = self.clock.monotonic_ms()
        with self._lock:
            self._buffer_wait.record(waited_ms, now)
            self.buffer_wait_ms_total += waited_ms
            if exhausted:
                self._exhausted.record(1, now)

    # -- reading ---------------------------------------------------------------------------------------

    def _producer_values(self, now: float) -> Dict[str, float]:
        rpr = self._records_per_request
        return {
            "batch-size-avg": self._batch_size.avg(now),
            "batch-size-max": self._batch_size.max(now),
            "compression-rate-avg": self._compression.avg(now),
            "record-queue-time-avg": self._queue_time.avg(now),
            "record-queue-time-max": self._queue_time.max(now),
            "request-latency-avg": self._latency.avg(now),
            "request-latency-max": self._latency.max(now),
            "record-send-rate": rpr.rate(now),
            "record-send-total": self.records_sent,
            "records-per-request-avg": rpr.avg(now),
            "record-retry-rate": self._retries.rate(now),
            "record-retry-total": self.retries,
            "record-error-rate": self._errors.rate(now),
            "record-error-total": self.records_failed,
            "batch-split-rate": self._splits.count_rate(now),
            "batch-split-total": self.splits,
            "produce-throttle-time-avg": self._throttle.avg(now),
            "produce-throttle-time-max": self._throttle.max(now),
            "request-rate": rpr.count_rate(now),
            "request-total": self.requests,
            "response-rate": self._responses.count_rate(now),
            "response-total": self.responses,
            "record-size-avg": self._record_size.avg(now),
            "record-size-max": self._record_size.max(now),
            "bufferpool-wait-ratio": self._buffer_wait.rate(now, per_ms=1.0),
            "bufferpool-wait-time-ns-total": self.buffer_wait_ms_total * 1e6,
            "bufferpool-wait-time-ms-total": self.buffer_wait_ms_total,
            "buffer-exhausted-rate": self._exhausted.count_rate(now),
            "buffer-exhausted-total": self._exhausted.count,
            **{f"{name}-time-ns-total": ms * 1e6 for name, ms in self.call_time_ms.items()},
            "batch-total": self.batches_sent,
            "record-ack-total": self.records_acked,
            "byte-ack-total": self.bytes_acked,
        }

    @staticmethod
    def _topic_values(t: _TopicSensors, now: float) -> Dict[str, float]:
        return {
            "record-send-rate": t.records.rate(now),
            "record-send-total": t.records.total,
            "byte-rate": t.bytes.rate(now),
            "byte-total": t.bytes.total,
            "compression-rate": t.compression.avg(now),
            "record-retry-rate": t.retries.rate(now),
            "record-retry-total": t.retries.total,
            "record-error-rate": t.errors.rate(now),
            "record-error-total": t.errors.total,
        }

    @staticmethod
    def _node_values(n: _NodeSensors, now: float) -> Dict[str, float]:
        return {
            "request-latency-avg": n.latency.avg(now),
            "request-latency-max": n.latency.max(now),
            "request-rate": n.requests.count_rate(now),
            "request-total": n.requests.count,
            "response-rate": n.responses.count_rate(now),
            "response-total": n.responses.count,
        }

    def _gauge_values(self) -> Dict[str, float]:
        out: Dict[str, float] = {}
        for name, fn in self._gauges.items():
            try:
                out[name] = fn()
            except Exception:  # a part being closed: the gauge has no value now
                log.debug("gauge %s could not be read", name, exc_info=True)
                out[name] = NAN
        return out

    def grouped(self) -> Dict[str, Dict[str, Dict[str, float]]]:
        """``{"producer-metrics": {"": {name: value}}, "producer-topic-metrics": {topic: {...}},
        "producer-node-metrics": {"node-<id>": {...}}}``, measured now."""
        gauges = self._gauge_values()  # outside the lock: the parts take their own locks
        now = self.clock.monotonic_ms()
        with self._lock:
            producer = self._producer_values(now)
            topics = {topic: self._topic_values(t, now) for topic, t in self._topics.items()}
            nodes = {f"node-{node}": self._node_values(n, now) for node, n in self._nodes.items()}
        producer.update(gauges)
        return {PRODUCER_GROUP: {"": producer}, TOPIC_GROUP: topics, NODE_GROUP: nodes}

    def metric_list(self) -> List[Metric]:
        """Every metric, measured now, with its group, tags and description."""
        grouped = self.grouped()
        descriptions = {PRODUCER_GROUP: dict(PRODUCER_METRICS + GAUGES), TOPIC_GROUP: dict(TOPIC_METRICS),
                        NODE_GROUP: dict(NODE_METRICS)}
        tag_names = {PRODUCER_GROUP: "", TOPIC_GROUP: "topic", NODE_GROUP: "node-id"}
        out: List[Metric] = []
        for group, entities in grouped.items():
            tag = tag_names[group]
            for entity, values in entities.items():
                tags = {tag: entity} if tag else {}
                for name, value in values.items():
                    out.append(Metric(name, group, tags, descriptions[group].get(name, ""), float(value)))
        return out

    def snapshot(self) -> Dict[str, Number]:
        """The flat view of :meth:`Producer.metrics`: producer-wide metrics by name, per-topic and per-node
        ones as ``name{topic=...}`` / ``name{node-id=node-1}``."""
        out: Dict[str, Number] = {}
        for metric in self.metric_list():
            value = metric.value
            out[metric.key] = int(value) if metric.name.endswith("-total") and value.is_integer() else value
        return out

    # -- statistics.interval.ms ----------------------------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """What stats_cb gets (as JSON): client id, times, and every metric by group. NaN (no events in
        the window) is null."""
        grouped = self.grouped()
        clean = {group: {entity: {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                  for k, v in values.items()}
                         for entity, values in entities.items()}
                 for group, entities in grouped.items()}
        return {
            "name": self.client_id,
            "client_id": self.client_id,
            "type": "producer",
            "ts": int(self.clock.monotonic_ms() * 1000),  # microseconds, monotonic (librdkafka's "ts")
            "time": self.clock.wall_ms() // 1000,  # seconds since the epoch (librdkafka's "time")
            PRODUCER_GROUP: clean[PRODUCER_GROUP][""],
            TOPIC_GROUP: clean[TOPIC_GROUP],
            NODE_GROUP: clean[NODE_GROUP],
        }

    def maybe_report(self, now: float) -> float:
        """Calls stats_cb when the interval has passed (the network thread, once ``now`` reaches
        ``next_report_ms``). Returns how long until the next report is due (inf when there is no stats_cb)."""
        cb = self._stats_cb
        if cb is None:
            return math.inf
        due = self.next_report_ms
        if now < due:
            return due - now
        # the next report one interval after this one was due; after a stall, one interval from now
        # (no burst of reports to catch up)
        nxt = due + self._stats_interval_ms
        self.next_report_ms = nxt if nxt > now else now + self._stats_interval_ms
        self.stats_reports += 1
        try:
            cb(json.dumps(self.stats(), separators=(",", ":")))
        except Exception:
            self.stats_failures += 1
            log.exception("stats_cb raised an exception; it is ignored")
        return max(0.0, self.next_report_ms - now)


#: the former name (kproducer <= the metrics rework)
SenderMetrics = ProducerMetrics

__all__ = ["CALL_TIMERS", "GAUGES", "NODE_GROUP", "NODE_METRICS", "PRODUCER_GROUP", "PRODUCER_METRICS", "TOPIC_GROUP",
           "TOPIC_METRICS", "Metric", "MetricConfig", "ProducerMetrics", "Sensor", "SenderMetrics"]
