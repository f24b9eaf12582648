"""Records that expire (``delivery.timeout.ms``) are logged at WARNING, counted per partition with the reason
they could not be delivered, at most once per :data:`EXPIRY_LOG_INTERVAL_MS` (issue 30: a broker down for 35 s
expired 15,316 records with no log line at all; their callbacks and futures were the only sign).

Java's client logs nothing at WARN for an expiry either (the error goes to each record's callback); here the
first expiry is said at once and later ones are summed into the next line, so an outage that expires records
by the thousand makes a line every 10 s, not one per batch. What is still counted when the producer closes is
logged then.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Dict, List, Tuple

if TYPE_CHECKING:
    from ..network.client import NetworkClient
    from ..network.metadata import Metadata
    from .batch import ProducerBatch

log = logging.getLogger("kproducer.producer.sender")

#: at most one WARNING about expired records per this many ms
EXPIRY_LOG_INTERVAL_MS = 10000.0
#: the partitions named in one line (the others are summed)
_NAMED_PARTITIONS = 10


def expiry_reason(batch: "ProducerBatch", metadata: "Metadata", client: "NetworkClient", in_flight: bool) -> str:
    """Why ``batch`` could not be delivered in time, as far as the producer knows: no leader, its leader
    unreachable (with the last connection error), or a leader that did not answer in time."""
    leader = metadata.cluster.leader_for(batch.tp)
    if leader is None:
        return "no leader known for the partition (metadata)"
    addr = f"{leader.host}:{leader.port}"
    if in_flight:
        return f"in flight to leader {leader.node_id} ({addr}), not acknowledged in time"
    if client.states.is_ready(leader.node_id):
        return (f"leader {leader.node_id} ({addr}) connected" +
                ("" if batch.attempts == 0 else f", {batch.attempts} failed attempt(s)"))
    why = client.last_errors.get(addr)
    return f"leader {leader.node_id} ({addr}) unreachable" + (f": {why}" if why else "")


class ExpiryLog:
    """Counts expired records per partition and logs them, rate-limited (see the module's docstring)."""

    def __init__(self, delivery_timeout_ms: float, interval_ms: float = EXPIRY_LOG_INTERVAL_MS) -> None:
        self.delivery_timeout_ms = delivery_timeout_ms
        self.interval_ms = interval_ms
        #: "topic-partition" -> records counted since the last line (and, in _reasons, the latest reason);
        #: empty when there is nothing to log (the network thread skips maybe_log() then)
        self.unlogged: Dict[str, int] = {}
        self._reasons: Dict[str, str] = {}
        self._last_logged_ms = float("-inf")
        #: records counted in total
        self.total = 0

    def expired(self, batch: "ProducerBatch", reason: str) -> None:
        tp = f"{batch.topic}-{batch.partition}"
        self.unlogged[tp] = self.unlogged.get(tp, 0) + batch.record_count
        self._reasons[tp] = reason
        self.total += batch.record_count

    def maybe_log(self, now_ms: float) -> None:
        """Log what was counted when the interval since the last line has passed (the first at once)."""
        if self.unlogged and now_ms - self._last_logged_ms >= self.interval_ms:
            self._last_logged_ms = now_ms
            self.flush()

    def flush(self) -> None:
        """Log what was counted now (the producer is closing)."""
        if not self.unlogged:
            return
        items: List[Tuple[str, int, str]] = sorted(
            ((tp, n, self._reasons[tp]) for tp, n in self.unlogged.items()), key=lambda item: -item[1])
        self.unlogged, self._reasons = {}, {}
        total = sum(n for _, n, _ in items)
        parts = [f"{tp}: {n} record{'s' if n != 1 else ''} ({why})" for tp, n, why in items[:_NAMED_PARTITIONS]]
        rest = items[_NAMED_PARTITIONS:]
        if rest:
            parts.append(f"and {sum(n for _, n, _ in rest)} records of {len(rest)} more partitions")
        log.warning("%d record%s expired after delivery.timeout.ms=%.0f (their callbacks and futures got "
                    "KafkaTimeoutError): %s", total, "s" if total != 1 else "", self.delivery_timeout_ms,
                    "; ".join(parts))
