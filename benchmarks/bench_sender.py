"""The sender's per-batch cost (pytest-benchmark): drain -> produce request build -> response handling ->
completion, with no broker and no socket.

Run:  python -m pytest benchmarks/bench_sender.py --benchmark-enable -q
      (setup.cfg disables benchmarks by default; without --benchmark-enable each runs once, as a quick test;
      ``python -m pytest`` alone collects only tests/, so these do not run there)

Each round queues ``BATCHES_PER_PARTITION`` full 16 KB batches (100-byte records) on each of 6 partitions
led by one broker (not timed: pedantic setup), then times the sender's iterations (``Sender.run_once``) until
every batch is acknowledged and completed. The sender runs on the unit tests' scripted transport and fake
clock (tests/unit/scripted.py), with a *fast* broker behind it: Produce requests are not decoded; each is
answered with a pre-encoded response (every partition, no error) whose correlation id is patched in, so the
round's time is the client's alone (plus the scripted selector's bookkeeping, a few list operations per
request). ``per_batch_us`` in the extra info: the mean round time / batches.

Variants: plain (acks=all, idempotence off) and idempotent (sequences, producer state per batch), both with a
callback-free future per record as send() leaves them; and ``one-partition`` (idempotent, the same 120 batches on
one partition, so one batch per request): its per-batch time less the 6-partition one's, times 6/5, is the cost
of a produce request apart from its batches (docs/design.md "Performance budget").
"""
from __future__ import annotations

import os
import struct
import sys
from typing import Any, Dict, Tuple

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "unit"))

from scripted import Harness, ScriptedSelector, SentRequest  # noqa: E402

from kproducer.protocol import messages as m  # noqa: E402
from kproducer.testing.scripted import _Conn  # noqa: E402

TOPIC = "bench"
PARTITIONS = 6
BATCH_SIZE = 16384
VALUE = b"v" * 100
BATCHES_PER_PARTITION = 20
TS = 1_700_000_000_000


class FastSelector(ScriptedSelector):
    """The scripted selector, but Produce requests are answered from a pre-encoded frame (not decoded)."""

    produce_frames: Dict[int, bytes]  # request version -> response frame with correlation id 0

    def _handle(self, conn: _Conn, payload: bytes) -> None:
        api_key, version, cid = struct.unpack_from(">hhi", payload, 0)
        frames = getattr(self, "produce_frames", None)
        if api_key != m.PRODUCE.key or frames is None:
            super()._handle(conn, payload)
            return
        frame = frames.get(version)
        if frame is None:  # the first request of this version: decode it once, keep the answer
            req = SentRequest(conn.node_id, conn.broker_id, payload, self.now())
            body = self.produce_response(req, append=False)
            for t in body["responses"]:
                for p in t["partition_responses"]:
                    p["base_offset"] = 0
            frame = frames[version] = m.encode_response(m.PRODUCE, version, 0, body)
        conn.outbox.append([None, struct.pack(">i", cid) + frame[4:]])


def _harness(idempotent: bool, partitions: int = PARTITIONS) -> Harness:
    import kproducer.testing.harness as harness_module

    # Harness builds its transport from the name it imported (patching tests/unit/scripted's alias does not
    # reach it: the fast broker was never used and every round decoded every record it was sent)
    real = harness_module.ScriptedTransport
    harness_module.ScriptedTransport = FastSelector  # type: ignore[misc]
    try:
        h = Harness(topics={TOPIC: partitions}, batch_size=BATCH_SIZE, linger_ms=0, acks="all",
                    enable_idempotence=idempotent, buffer_memory=256 * 1024 * 1024, max_polls=10**9)
    finally:
        harness_module.ScriptedTransport = real  # type: ignore[misc]
    assert isinstance(h.selector, FastSelector)
    h.boot(TOPIC)
    h.selector.produce_frames = {}  # type: ignore[attr-defined]
    return h


def _fill(h: Harness, partitions: int = PARTITIONS) -> int:
    """Queue BATCHES_PER_PARTITION * PARTITIONS batches spread evenly over ``partitions`` partitions (all full but
    the last of each); returns how many."""
    append = h.accumulator.append
    now = h.now
    for p in range(partitions):
        before = h.accumulator.queued_batches()
        while h.accumulator.queued_batches() - before < BATCHES_PER_PARTITION * PARTITIONS // partitions:
            append(TOPIC, p, TS, None, VALUE, None, None, 0, now)
    return h.accumulator.queued_batches()


def _drain_all(h: Harness) -> int:
    acc = h.accumulator
    client = h.client
    run_once = h.sender.run_once
    iterations = 0
    while acc.has_undrained() or client.has_in_flight():
        run_once()
        iterations += 1
        if iterations > 100_000:
            raise AssertionError("the sender did not finish the round")
    return iterations


@pytest.mark.parametrize(("idempotent", "partitions"), [(False, PARTITIONS), (True, PARTITIONS), (True, 1)],
                         ids=["plain", "idempotent", "one-partition"])
def test_sender_per_batch(benchmark: Any, idempotent: bool, partitions: int) -> None:
    h = _harness(idempotent, partitions)
    counts: Dict[str, int] = {}
    futures = []

    def setup() -> Tuple[Tuple[()], Dict[str, Any]]:
        counts["batches"] = _fill(h, partitions)
        return (), {}

    def run() -> int:
        return _drain_all(h)

    # one round outside the timing: the response frames get encoded, the code paths warmed
    setup()
    futures.append(h.send(TOPIC, VALUE, partition=0))
    run()
    benchmark.pedantic(run, setup=setup, rounds=30 if benchmark.enabled else 1)
    batches = counts["batches"]
    benchmark.extra_info["batches_per_round"] = batches
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        benchmark.extra_info["per_batch_us"] = round(stats.stats.mean / batches * 1e6, 2)
        benchmark.extra_info["per_batch_us_min"] = round(stats.stats.min / batches * 1e6, 2)
    assert not h.accumulator.has_undrained() and not h.client.has_in_flight()
    assert futures[0].get(0).offset >= 0
    assert h.accumulator.queued_batches() == 0
