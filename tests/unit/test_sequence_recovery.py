"""An idempotent producer recovers after a pipelined batch fails for good (UNKNOWN_SERVER_ERROR, not
retriable) while later batches of its partition are in flight and answered OUT_OF_ORDER_SEQUENCE_NUMBER
(tansu's pipelining quirk under load). Java (``TransactionManager.canRetry`` / ``ProducerBatch.close``):
the later batches take the failed batch's sequence range and are retried once for the OUT_OF_ORDER answer
to their old sequences; if the broker refuses the next expected sequence again, the producer id is renewed.
It must never retry the same refusal until delivery.timeout.ms (the livelock seen in CI)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from kproducer.errors import OutOfOrderSequenceNumberError, UnknownServerError
from kproducer.protocol import messages as m
from tests.unit.scripted import HOLD, Harness

TP = ("t", 0)


class SequenceCheckingBroker:
    """A Produce handler that checks sequences per producer id and epoch, as a Kafka broker does: the next
    sequence is written, a repeat of the last batch is a duplicate (46), anything else is out of order (45).
    ``write`` records a batch as written without answering (a broker that wrote it but answered an error)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.last: Dict[Tuple[int, int], Tuple[int, int]] = {}  # (pid, epoch) -> (first seq, last seq)

    def write(self, req: Any) -> None:
        b = req.batches()[TP]
        self.last[(b.producer_id, b.producer_epoch)] = (b.base_sequence, b.base_sequence + b.record_count - 1)
        self.h.selector.produce_response(req, {TP: 0})  # appends to the log

    def __call__(self, req: Any) -> Dict[str, Any]:
        b = req.batches()[TP]
        key = (b.producer_id, b.producer_epoch)
        last = self.last.get(key)
        if last is not None and last == (b.base_sequence, b.base_sequence + b.record_count - 1):
            return self.h.selector.produce_response(req, {TP: 46}, append=False)
        expected = 0 if last is None else last[1] + 1
        if b.base_sequence != expected:
            return self.h.selector.produce_response(req, {TP: OutOfOrderSequenceNumberError.code}, append=False)
        self.last[key] = (b.base_sequence, b.base_sequence + b.record_count - 1)
        return self.h.selector.produce_response(req, {TP: 0})


def _held(h: Harness, n: int) -> Callable[[], bool]:
    return lambda: len(h.selector.held(m.PRODUCE)) == n


def _pipeline_three(h: Harness) -> Tuple[Any, List[Any], List[Any]]:
    """W acknowledged, then batches A (two records), B and C in flight at once; returns (broker,
    [A, A', B, C] futures, [A, B, C] requests)."""
    h.boot()
    broker = SequenceCheckingBroker(h)
    h.selector.handlers[m.PRODUCE.key] = broker
    w = h.send(value=b"W" * 150)
    h.run_until(w.done)
    assert w.exception(0) is None
    h.selector.script(m.PRODUCE, HOLD, HOLD, HOLD)
    futs = [h.send(value=b"A" * 150), h.send(value=b"a" * 150)]  # A: one batch of two records
    h.run_until(_held(h, 1))
    futs.append(h.send(value=b"B" * 150))
    h.run_until(_held(h, 2))
    futs.append(h.send(value=b"C" * 150))
    h.run_until(_held(h, 3))
    reqs = h.selector.held(m.PRODUCE)
    assert [r.batches()[TP].base_sequence for r in reqs] == [1, 3, 4]
    return broker, futs, reqs


def _drive(h: Harness, done: Any, steps: int = 100) -> int:
    """Advance the fake clock by 100 ms steps (at most ``steps``, i.e. 10 s, far below delivery.timeout.ms)
    until ``done()``; returns the steps taken."""
    for i in range(steps):
        if done():
            return i
        h.advance(100)
        h.run(5)
    return steps


def _retries(h: Harness) -> int:
    return len(h.produce_requests())


def test_failed_batch_not_written_later_batches_take_its_sequences() -> None:
    """A refused (not written): B and C move down to sequences 1 and 2, are retried once each and are
    written once; the producer id stays (Java's adjustSequencesDueToFailedBatch)."""
    h = Harness(enable_idempotence=True, batch_size=400)
    _broker, (a, a2, b, c), (ra, rb, rc) = _pipeline_three(h)
    h.selector.respond(ra, UnknownServerError.code)
    h.selector.respond(rb, OutOfOrderSequenceNumberError.code)
    h.selector.respond(rc, OutOfOrderSequenceNumberError.code)
    h.run(5)
    _drive(h, lambda: a.done() and b.done() and c.done())
    assert isinstance(a.exception(0), UnknownServerError) and isinstance(a2.exception(0), UnknownServerError)
    assert b.exception(0) is None and c.exception(0) is None
    assert h.selector.log_values(TP) == [b"W" * 150, b"B" * 150, b"C" * 150]
    assert (b.get(0).offset, c.get(0).offset) == (1, 2)
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 1
    assert _retries(h) == 6  # W, A, B, C, then B and C once more


def test_failed_batch_written_anyway_does_not_livelock() -> None:
    """A was written although the broker answered UNKNOWN_SERVER_ERROR (tansu under load): B moved down
    to A's sequence is refused again as OUT_OF_ORDER. That refusal of the next expected sequence must renew
    the producer id (Java bumps the epoch), not be retried until delivery.timeout.ms expires B and C."""
    h = Harness(enable_idempotence=True, batch_size=400)
    broker, (a, a2, b, c), (ra, rb, rc) = _pipeline_three(h)
    broker.write(ra)
    h.selector.respond(ra, UnknownServerError.code)
    h.selector.respond(rb, OutOfOrderSequenceNumberError.code)
    h.selector.respond(rc, OutOfOrderSequenceNumberError.code)
    h.run(5)
    steps = _drive(h, lambda: b.done() and c.done())
    assert b.done() and c.done(), f"B and C still retried after {steps} steps: {_retries(h)} produce requests"
    assert isinstance(a.exception(0), UnknownServerError) and isinstance(a2.exception(0), UnknownServerError)
    assert b.exception(0) is None and c.exception(0) is None
    # A's records are in the log (the broker wrote them, the client could not know); B and C once each
    assert h.selector.log_values(TP) == [b"W" * 150, b"A" * 150, b"a" * 150, b"B" * 150, b"C" * 150]
    assert len(h.selector.sent(m.INIT_PRODUCER_ID)) == 2  # the producer id was renewed once
    assert _retries(h) <= 10
