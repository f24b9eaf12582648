"""Batch buffers and the BufferPool with the sender running (scripted transport, fake clock): a buffer is
reused only once its batch is finished and nothing views it (docs/design.md, "Batch buffers"), and what goes
on the wire is never another batch's bytes -- through retries, compression, splits, expiry and aborts."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from kproducer.errors import KafkaTimeoutError, ProducerClosedError
from kproducer.producer.batch import ProducerBatch
from kproducer.producer.future import FutureRecordMetadata
from kproducer.protocol import messages as m
from kproducer.protocol.records import RECORD_BATCH_OVERHEAD
from tests.unit.scripted import HOLD, Harness, SentRequest

BIG = 900  # a value that nearly fills a 1024-byte batch: the batch closes full, its pool buffer stays with it


def batch_of(fut: FutureRecordMetadata) -> ProducerBatch:
    batch = fut._resolve()
    assert isinstance(batch, ProducerBatch)
    return batch


def records_bytes(req: SentRequest, partition: int = 0) -> bytes:
    """The record batch bytes of one partition of a Produce request, as written."""
    for t in req.body["topic_data"]:
        for p in t["partition_data"]:
            if p["index"] == partition:
                data: bytes = p["records"]
                return data
    raise AssertionError(f"partition {partition} not in {req}")


def settings(**extra: Any) -> Dict[str, Any]:
    return {"batch_size": 1024, "buffer_memory": 64 * 1024, **extra}


def test_a_finished_batchs_buffer_is_reused_by_the_next_batch() -> None:
    h = Harness(**settings())
    h.boot()
    first = h.send(value=b"a" * BIG)
    buf = batch_of(first).builder._buf
    assert len(buf) == 1024 - RECORD_BATCH_OVERHEAD  # the records are written in place in a pool buffer
    h.run_until(first.done)
    assert h.pool.free_blocks == 1 and h.pool.buffers_returned == 1
    second = h.send(value=b"b" * BIG)
    assert batch_of(second).builder._buf is buf
    h.run_until(second.done)
    assert h.selector.log_values(("t", 0)) == [b"a" * BIG, b"b" * BIG]
    assert (h.pool.buffers_created, h.pool.buffers_reused) == (1, 1)
    assert h.pool.available_memory() == h.pool.total_memory


def test_a_buffer_is_not_reused_while_its_batch_waits_for_a_retry() -> None:
    h = Harness(**settings(retry_backoff_ms=100))
    h.boot()
    h.selector.script(m.PRODUCE, 6)  # NOT_LEADER_OR_FOLLOWER once
    fut = h.send(value=b"a" * BIG)
    batch = batch_of(fut)
    buf = batch.builder._buf
    h.run_until(lambda: batch.attempts == 1)
    assert not fut.done() and h.pool.free_blocks == 0
    # other batches come and go while it backs off: none gets its buffer
    for i in range(3):
        other = h.send(partition=1, value=bytes([i]) * BIG)
        assert batch_of(other).builder._buf is not buf
        h.run_until(other.done)
    h.advance(100)
    h.run_until(fut.done)
    attempts = [r for r in h.produce_requests() if ("t", 0) in r.partitions()]
    assert len(attempts) == 2
    assert records_bytes(attempts[1]) == records_bytes(attempts[0])  # the retry sends the same bytes
    assert h.selector.log_values(("t", 0)) == [b"a" * BIG]
    assert h.pool.dropped_in_use == 0
    assert h.pool.available_memory() == h.pool.total_memory


def test_the_view_lent_to_a_request_is_released_when_the_batch_finishes() -> None:
    h = Harness(**settings())
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    fut = h.send(value=b"a" * BIG)
    batch = batch_of(fut)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    view = batch._view
    assert view is not None and bytes(view).endswith(b"a" * BIG + b"\x00")
    [req] = h.selector.held(m.PRODUCE)
    h.selector.respond(req, 0)
    h.run_until(fut.done)
    with pytest.raises(ValueError):  # released: a late reader gets an error, never the next batch's records
        view.tobytes()
    assert h.pool.free_blocks == 1 and h.pool.dropped_in_use == 0


def test_a_buffer_something_still_views_is_dropped_not_reused() -> None:
    h = Harness(**settings())
    h.boot()
    fut = h.send(value=b"a" * BIG)
    held = memoryview(batch_of(fut).builder._buf)  # e.g. a zero-copy consumer of the records, not let go
    before = bytes(held)
    h.run_until(fut.done)
    assert h.pool.dropped_in_use == 1 and h.pool.free_blocks == 0
    nxt = h.send(value=b"z" * BIG)
    assert batch_of(nxt).builder._buf is not held.obj
    h.run_until(nxt.done)
    assert bytes(held) == before  # nothing was written into it
    held.release()
    assert h.pool.available_memory() == h.pool.total_memory


def test_a_batch_closed_early_gives_its_buffer_back_at_once_and_keeps_its_records() -> None:
    h = Harness(**settings(retry_backoff_ms=100, linger_ms=5))
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    small = h.send(value=b"s" * 10)
    batch = batch_of(small)
    pool_buf = batch.builder._buf
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    # drained with most of its buffer empty: it keeps a trimmed copy and a reservation of what it holds
    assert batch.builder._buf is not pool_buf and batch.reserved_bytes == RECORD_BATCH_OVERHEAD + batch.builder._len
    assert h.pool.free_blocks == 1
    nxt = h.send(partition=1, value=b"n" * BIG)  # the next batch writes into that buffer meanwhile
    assert batch_of(nxt).builder._buf is pool_buf
    [req] = h.selector.held(m.PRODUCE)
    h.selector.respond(req, 6)  # retriable: the small batch goes again, from its own copy
    h.advance(5)
    h.run_until(lambda: batch.attempts == 1 and nxt.done())
    h.advance(100)
    h.run_until(small.done)
    attempts = [r for r in h.produce_requests() if ("t", 0) in r.partitions()]
    assert len(attempts) == 2 and records_bytes(attempts[0]) == records_bytes(attempts[1])
    assert h.selector.log_values(("t", 0)) == [b"s" * 10]
    assert h.selector.log_values(("t", 1)) == [b"n" * BIG]
    assert h.pool.available_memory() == h.pool.total_memory


def test_a_compressed_batch_gives_its_buffer_back_once_compressed() -> None:
    h = Harness(**settings(retry_backoff_ms=100, compression_type="gzip"))
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    values = [b"compressible %d " % i * 4 for i in range(8)]
    futs = [h.send(value=v) for v in values]
    batch = batch_of(futs[0])
    pool_buf = batch.builder._buf
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    # the wire bytes are the compressed output (a separate object): the uncompressed buffer is back
    assert batch.builder._buf is not pool_buf and h.pool.free_blocks == 1
    assert batch.reserved_bytes == len(batch.records())
    other = h.send(partition=1, value=b"x" * BIG)
    assert batch_of(other).builder._buf is pool_buf
    [req] = h.selector.held(m.PRODUCE)
    h.selector.respond(req, 6)
    h.run_until(other.done)
    h.advance(100)
    h.run_until(lambda: all(f.done() for f in futs))
    attempts = [r for r in h.produce_requests() if ("t", 0) in r.partitions()]
    assert len(attempts) == 2 and records_bytes(attempts[0]) == records_bytes(attempts[1])
    assert h.selector.log_values(("t", 0)) == values
    assert h.pool.available_memory() == h.pool.total_memory


def test_a_batch_split_after_message_too_large_drops_its_buffer_and_the_parts_carry_the_records() -> None:
    h = Harness(**settings(linger_ms=5))
    h.boot()
    h.selector.script(m.PRODUCE, 10)  # MESSAGE_TOO_LARGE
    values = [bytes([i]) * 100 for i in range(6)]
    futs = [h.send(value=v) for v in values]
    batch = batch_of(futs[0])
    h.advance(5)
    h.run_until(lambda: all(f.done() for f in futs))
    assert batch.split_into is not None
    assert len(batch.builder._buf) == 0  # the original's records are gone: the parts hold copies
    assert h.selector.log_values(("t", 0)) == values
    assert h.pool.dropped_in_use == 0
    assert h.pool.available_memory() == h.pool.total_memory


def test_an_expired_in_flight_batch_gives_its_buffer_back_and_the_written_request_is_intact() -> None:
    h = Harness(**settings())  # delivery.timeout.ms 120 s, request.timeout.ms 30 s
    h.boot()
    h.selector.down.add(1)
    h.selector.kill_connection(1)
    h.run()
    start = h.now
    fut = h.send(value=b"a" * BIG)
    buf = batch_of(fut).builder._buf
    h.run(3)
    h.advance(100_000)  # queued for 100 s while the leader is unreachable
    h.selector.down.clear()
    h.selector.script(m.PRODUCE, HOLD)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    [late] = h.selector.held(m.PRODUCE)
    h.advance(start + 120_000 - h.now)  # the request has been out < request.timeout.ms
    h.run()
    assert isinstance(fut.exception(0), KafkaTimeoutError)
    # the request was encoded into its own bytes when it was sent: the buffer may serve the next batch
    assert h.pool.free_blocks == 1
    nxt = h.send(partition=1, value=b"z" * BIG)
    assert batch_of(nxt).builder._buf is buf
    assert late.values() == [b"a" * BIG]
    h.selector.respond(late, 0)
    h.run_until(nxt.done)
    assert h.selector.log_values(("t", 1)) == [b"z" * BIG]


def test_aborted_batches_give_their_buffers_back() -> None:
    h = Harness(**settings())
    h.boot()
    h.selector.script(m.PRODUCE, HOLD)
    in_flight = h.send(partition=0, value=b"a" * BIG)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    h.selector.down.add(1)
    queued = h.send(partition=1, value=b"b" * BIG)
    h.sender.force_stop()
    h.sender.run()
    for f in (in_flight, queued):
        assert isinstance(f.exception(0), ProducerClosedError)
    assert h.pool.available_memory() == h.pool.total_memory
    assert h.pool.dropped_in_use == 0


def test_steady_traffic_reuses_buffers() -> None:
    h = Harness(**settings())
    h.boot()
    sent: List[bytes] = []
    for i in range(40):
        v = bytes([i]) * BIG
        sent.append(v)
        fut = h.send(partition=i % 3, value=v)
        h.run_until(fut.done)
    assert h.pool.buffers_created <= 3 and h.pool.buffers_reused >= 37
    got = [v for p in range(3) for v in h.selector.log_values(("t", p))]
    assert sorted(got) == sorted(sent)
