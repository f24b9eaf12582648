"""kproducer.testing, the public test kit: one Transport protocol for the socket Selector and the scripted
transport, and one wiring function for Producer and the Harness."""
from __future__ import annotations

import asyncio
from typing import Any, List

import pytest

import kproducer.testing as kt
from kproducer import Producer, RecordMetadata
from kproducer.aio import AsyncProducer
from kproducer.mock import MockCluster
from kproducer.network.selector import Selector
from kproducer.producer import kafka_producer
from kproducer.producer.wiring import ProducerParts
from kproducer.protocol import messages as m


def test_both_transports_implement_the_protocol() -> None:
    sel = Selector()
    try:
        assert isinstance(sel, kt.Transport)
    finally:
        sel.close_all()
    assert isinstance(kt.ScriptedTransport(), kt.Transport)


def test_the_kit_exports() -> None:
    assert kt.MockCluster is MockCluster
    clock = kt.FakeClock()
    before = clock.monotonic_ms()
    clock.advance(250)
    assert clock.monotonic_ms() == before + 250
    assert kt.ScriptedSelector is kt.ScriptedTransport


def test_harness_and_producer_are_wired_by_the_same_function(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[ProducerParts] = []
    original = kafka_producer.wire_producer

    def spy(*args: Any, **kwargs: Any) -> ProducerParts:
        parts = original(*args, **kwargs)
        calls.append(parts)
        return parts

    import kproducer.testing.harness as harness_module

    monkeypatch.setattr(kafka_producer, "wire_producer", spy)
    monkeypatch.setattr(harness_module, "wire_producer", spy)
    h = kt.Harness(linger_ms=0)
    assert calls[-1] is h.parts and h.sender is h.parts.sender and h.client.selector is h.selector
    transport = kt.ScriptedTransport(brokers={1: ("broker1", 9092)}, topics={"t": 2}, real_wait=True)
    with Producer(bootstrap_servers="broker1:9092", transport=transport, linger_ms=0) as p:
        assert calls[-1] is p._parts and p._parts.transport is transport
        md = p.send("t", b"v", partition=1).get(timeout=10)
    assert md == RecordMetadata("t", 1, 0, md.timestamp, -1, 1)
    assert transport.log_values(("t", 1)) == [b"v"]


def test_harness_drives_a_scripted_produce() -> None:
    h = kt.Harness(topics={"t": 1})
    h.boot()
    fut = h.send("t", b"x")
    h.run_until(fut.done, what="acknowledged")
    assert fut.get(0).offset == 0
    [req] = h.produce_requests()
    assert req.api is m.PRODUCE and req.values() == [b"x"]


def test_async_producer_on_the_scripted_transport() -> None:
    """AsyncProducer wraps any Producer: here one on the scripted transport (no sockets at all)."""
    transport = kt.ScriptedTransport(brokers={1: ("broker1", 9092)}, topics={"t": 3}, real_wait=True)

    async def main() -> None:
        producer = Producer(bootstrap_servers="broker1:9092", transport=transport, linger_ms=0)
        async with AsyncProducer(producer=producer) as p:
            metas = [await (await p.send("t", b"%d" % i, partition=i % 3)) for i in range(30)]
        assert [(md.partition, md.offset) for md in metas] == [(i % 3, i // 3) for i in range(30)]

    asyncio.run(main())
    assert transport.log_values(("t", 0)) == [b"%d" % i for i in range(0, 30, 3)]
