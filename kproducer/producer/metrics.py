"""Counters the sender keeps, exposed by Producer.metrics()."""
from __future__ import annotations

from typing import Dict, Union


class SenderMetrics:
    """Plain counters, written by the sender thread only (reads from other threads may be a moment stale)."""

    def __init__(self) -> None:
        self.requests = 0
        self.batches_sent = 0
        self.records_sent = 0
        self.records_acked = 0
        self.bytes_acked = 0
        self.records_failed = 0
        self.retries = 0
        self.splits = 0
        self.latency_total_ms = 0.0
        self.latency_max_ms = 0.0
        self.responses = 0

    def record_request(self, batches: int, records: int) -> None:
        self.requests += 1
        self.batches_sent += batches
        self.records_sent += records

    def record_latency(self, ms: float) -> None:
        self.responses += 1
        self.latency_total_ms += ms
        if ms > self.latency_max_ms:
            self.latency_max_ms = ms

    def record_success(self, records: int, size: int) -> None:
        self.records_acked += records
        self.bytes_acked += size

    def record_error(self, records: int) -> None:
        self.records_failed += records

    def snapshot(self) -> Dict[str, Union[int, float]]:
        return {
            "request-total": self.requests,
            "batch-total": self.batches_sent,
            "record-send-total": self.records_sent,
            "record-ack-total": self.records_acked,
            "byte-ack-total": self.bytes_acked,
            "record-error-total": self.records_failed,
            "record-retry-total": self.retries,
            "batch-split-total": self.splits,
            "request-latency-avg": self.latency_total_ms / self.responses if self.responses else 0.0,
            "request-latency-max": self.latency_max_ms,
        }
