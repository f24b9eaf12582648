"""Producers on a scripted broker in memory (kproducer.testing's ScriptedTransport) with the real clock: the
shared set-up of the unit tests that drive the public Producer (send, send_batch, serializers, interceptors)."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple

from kproducer import Producer
from kproducer.clock import SYSTEM_CLOCK
from tests.unit.scripted import ScriptedSelector

ONE_BROKER: Dict[int, Tuple[str, int]] = {1: ("broker1", 9092)}


class ProducerEnv:
    """One scripted broker set (``brokers``: node id -> address) serving ``topics`` (name -> the leader of each
    partition); every producer made here talks to it and is closed by :func:`producer_env`."""

    def __init__(self, topics: Mapping[str, Sequence[int]], brokers: Mapping[int, Tuple[str, int]] = ONE_BROKER
                 ) -> None:
        self.selector = ScriptedSelector(SYSTEM_CLOCK, dict(brokers), {t: list(p) for t, p in topics.items()},
                                         real_wait=True)  # type: ignore[arg-type]
        self.producers: List[Producer] = []

    def producer(self, **settings: Any) -> Producer:
        settings.setdefault("bootstrap_servers", "broker1:9092")
        settings.setdefault("linger_ms", 0)
        p = Producer(transport=self.selector, **settings)
        self.producers.append(p)
        return p

    def close(self) -> None:
        for p in self.producers:
            p.close(timeout=0)
            assert not p._sender.is_alive(), "the producer's network thread outlived close()"


def producer_env(env: ProducerEnv) -> Iterator[ProducerEnv]:
    """The body of a fixture: yield ``env``, then close its producers."""
    try:
        yield env
    finally:
        env.close()
