"""Harness: a producer's parts on a FakeClock and a ScriptedTransport, driven step by step by a test."""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional, Tuple, Union

from ..clock import FakeClock
from ..config import ProducerConfig
from ..producer.future import Callback, FutureRecordMetadata
from ..producer.transaction_manager import TransactionManager
from ..producer.wiring import wire_producer
from ..protocol import messages as m
from .scripted import Address, ScriptedTransport, SentRequest


class Harness:
    """The producer's internals on a :class:`FakeClock` and a :class:`ScriptedTransport`, built by
    :func:`kproducer.producer.wiring.wire_producer` as :class:`kproducer.Producer` builds them; the test
    drives the sender itself (:meth:`run_once`, :meth:`run_until`) and time (:meth:`advance`).

    ``settings`` are producer settings (either naming style; ``linger_ms`` and ``enable_idempotence``
    default to 0 and False here); ``topics`` maps topic -> partition count (or leader list); ``brokers`` maps
    broker id -> (host, port). ``retry_jitter`` / ``reconnect_jitter`` default to 0 so backoffs are exact.
    ``selector`` is the scripted transport (script it, inspect what was sent)."""

    def __init__(
        self,
        topics: Optional[Mapping[str, Union[int, List[int]]]] = None,
        brokers: Optional[Mapping[int, Address]] = None,
        retry_jitter: float = 0.0,
        reconnect_jitter: float = 0.0,
        idle_advance: bool = False,
        max_polls: int = 20_000,
        **settings: Any,
    ) -> None:
        brokers = dict(brokers or {1: ("broker1", 9092)})
        first = brokers[min(brokers)]
        settings.setdefault("bootstrap_servers", f"{first[0]}:{first[1]}")
        settings.setdefault("enable_idempotence", False)
        settings.setdefault("linger_ms", 0)
        cfg = self.config = ProducerConfig(**settings)
        self.clock = FakeClock()
        self.selector = ScriptedTransport(self.clock, brokers, topics if topics is not None else {"t": 3},
                                          idle_advance=idle_advance, max_polls=max_polls)
        # wired by the function Producer uses (the jitter set to 0, or as asked, so that backoffs are exact)
        self.parts = wire_producer(cfg, self.clock, self.selector, client_id="scripted-test",
                                   software_version="test", jitter=0.0, retry_jitter=retry_jitter,
                                   reconnect_jitter=reconnect_jitter, sender_name="scripted-sender")
        self.metadata = self.parts.metadata
        self.txn: Optional[TransactionManager] = self.parts.transaction_manager
        self.pool = self.parts.pool
        self.accumulator = self.parts.accumulator
        self.retry_backoff = self.accumulator.retry_backoff
        self.client = self.parts.client
        self.sender = self.parts.sender

    # -- driving ---------------------------------------------------------------------------------------

    def advance(self, ms: float) -> None:
        self.clock.advance(ms)

    @property
    def now(self) -> float:
        return self.clock.monotonic_ms()

    def run_once(self) -> None:
        self.sender.run_once()

    def run(self, iterations: int = 1) -> None:
        for _ in range(iterations):
            self.sender.run_once()

    def run_until(self, predicate: Callable[[], bool], max_iterations: int = 200, what: str = "") -> int:
        """Run sender iterations (time stands still) until ``predicate()``; returns how many it took."""
        for i in range(max_iterations):
            if predicate():
                return i
            self.sender.run_once()
        if predicate():
            return max_iterations
        raise AssertionError(f"condition {what or predicate} not reached in {max_iterations} sender iterations")

    def boot(self, *topics: str) -> None:
        """Fetch metadata for ``topics`` (all scripted topics by default), get a producer id when idempotent
        and connect to every leader, without sending records."""
        names = topics or tuple(self.selector.topics)
        for t in names:
            self.metadata.add_topic(t)
        leaders = {lead for t in names for lead in self.selector.topics[t] if lead >= 0}

        def booted() -> bool:
            cluster = self.metadata.cluster
            if any(cluster.partition_count(t) is None for t in names):
                return False
            if self.txn is not None and not self.txn.has_producer_id():
                return False
            for node in leaders:
                self.client.ready(node, self.now)
            return all(self.client.is_ready(node, self.now) for node in leaders)

        self.run_until(booted, what="boot")

    def send(self, topic: str = "t", value: Optional[bytes] = b"v", key: Optional[bytes] = None, partition: int = 0,
             callback: Optional[Callback] = None, headers: Optional[List[Tuple[str, Optional[bytes]]]] = None,
             timestamp: Optional[int] = None, max_block_ms: float = 0) -> FutureRecordMetadata:
        """Append one record as Producer.send() would (the partition is given)."""
        self.metadata.add_topic(topic)
        ts = self.clock.wall_ms() if timestamp is None else timestamp
        return self.accumulator.append(topic, partition, ts, key, value, headers, callback, max_block_ms,
                                       self.now).future

    def produce_requests(self) -> List[SentRequest]:
        return self.selector.sent(m.PRODUCE)


__all__ = ["Harness"]
