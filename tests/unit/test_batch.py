"""ProducerBatch and the per-record future that resolves through it."""
from __future__ import annotations

import logging
import threading
from typing import Any, List, Optional, Tuple

import pytest

from kproducer.errors import KafkaTimeoutError, NotLeaderOrFollowerError
from kproducer.producer.batch import ProducerBatch
from kproducer.producer.future import FutureRecordMetadata, RecordMetadata
from kproducer.protocol.records import RecordBatchBuilder, read_batches

Result = Tuple[Optional[RecordMetadata], Optional[BaseException]]


def new_batch(capacity: int = 1000, created_ms: float = 1000.0) -> ProducerBatch:
    return ProducerBatch("t", 3, RecordBatchBuilder(capacity), created_ms, reserved_bytes=capacity)


def test_try_append_returns_futures_with_record_sizes() -> None:
    b = new_batch()
    f0 = b.try_append(111, b"key", b"value", None, None, 1001.0)
    f1 = b.try_append(112, None, None, [("h", b"x")], None, 1002.0)
    assert f0 is not None and f1 is not None
    assert (f0.key_size, f0.value_size, f0.timestamp) == (3, 5, 111)
    assert (f1.key_size, f1.value_size) == (-1, -1)
    assert b.record_count == 2
    assert b.last_append_ms == 1002.0
    assert not f0.done()


def test_try_append_refuses_when_full_and_the_batch_reports_full() -> None:
    b = new_batch(capacity=150)
    assert b.try_append(1, None, b"x" * 60, None, None, 0) is not None
    assert not b.is_full()
    assert b.try_append(1, None, b"y" * 60, None, None, 0) is None
    assert b.record_count == 1
    b.close_for_appends()
    assert b.is_full()


def test_done_completes_futures_with_offsets_and_calls_callbacks_in_order() -> None:
    b = new_batch()
    calls: List[Tuple[int, Result]] = []
    futs = [b.try_append(500 + i, None, b"v", None, lambda md, e, i=i: calls.append((i, (md, e))), 0)
            for i in range(3)]
    assert b.done(40, -1, None) is True
    assert [i for i, _ in calls] == [0, 1, 2]
    for i, (md, err) in calls:
        assert err is None and md is not None
        assert (md.topic, md.partition, md.offset, md.timestamp) == ("t", 3, 40 + i, 500 + i)
    assert [f.get(0).offset for f in futs if f is not None] == [40, 41, 42]
    assert all(f is not None and f.succeeded() and not f.failed() for f in futs)


def test_log_append_time_replaces_the_record_timestamp() -> None:
    b = new_batch()
    f = b.try_append(5, None, b"v", None, None, 0)
    b.done(0, 99_999, None)
    assert f is not None and f.get(0).timestamp == 99_999


def test_acks_zero_offsets_are_minus_one() -> None:
    b = new_batch()
    f = b.try_append(5, None, b"v", None, None, 0)
    b.try_append(6, None, b"v", None, None, 0)
    b.done(-1, -1, None)
    assert f is not None and f.get(0).offset == -1


def test_done_with_an_error_fails_every_record() -> None:
    b = new_batch()
    seen: List[Result] = []
    futs = [b.try_append(1, None, b"v", None, lambda md, e: seen.append((md, e)), 0) for _ in range(2)]
    err = NotLeaderOrFollowerError("moved")
    b.done(-1, -1, err)
    assert seen == [(None, err), (None, err)]
    for f in futs:
        assert f is not None and f.failed()
        with pytest.raises(NotLeaderOrFollowerError):
            f.get(0)
        assert f.exception(0) is err


def test_only_the_first_completion_counts() -> None:
    b = new_batch()
    seen: List[Result] = []
    f = b.try_append(1, None, b"v", None, lambda md, e: seen.append((md, e)), 0)
    assert b.done(-1, -1, KafkaTimeoutError("expired"))
    assert b.done(10, -1, None) is False  # a late response after expiry is ignored
    assert len(seen) == 1 and isinstance(seen[0][1], KafkaTimeoutError)
    assert f is not None and isinstance(f.exception(0), KafkaTimeoutError)


@pytest.mark.allow_internal_errors
def test_a_raising_callback_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    b = new_batch()
    seen: List[int] = []

    def bad(md: Any, e: Any) -> None:
        raise ValueError("user bug")

    b.try_append(1, None, b"v", None, lambda md, e: seen.append(0), 0)
    b.try_append(1, None, b"v", None, bad, 0)
    b.try_append(1, None, b"v", None, lambda md, e: seen.append(2), 0)
    with caplog.at_level(logging.ERROR):
        assert b.done(0, -1, None) is True
    assert seen == [0, 2]
    assert any("callback raised" in r.getMessage() and r.exc_info for r in caplog.records)


def test_add_callback_before_and_after_completion() -> None:
    b = new_batch()
    f = b.try_append(1, None, b"v", None, None, 0)
    assert f is not None
    seen: List[str] = []
    f.add_callback(lambda md, e: seen.append("early"))
    assert seen == []
    b.done(7, -1, None)
    assert seen == ["early"]
    f.add_callback(lambda md, e: seen.append(f"late {md.offset if md else None}"))
    assert seen == ["early", "late 7"]  # fired at once: the batch was already done


def test_future_get_times_out_while_pending_and_wakes_on_completion() -> None:
    b = new_batch()
    f = b.try_append(1, None, b"v", None, None, 0)
    assert f is not None
    with pytest.raises(KafkaTimeoutError):
        f.get(timeout=0.01)
    with pytest.raises(KafkaTimeoutError):
        f.exception(timeout=0)
    t = threading.Timer(0.02, lambda: b.done(3, -1, None))
    t.start()
    assert f.get(timeout=5).offset == 3
    t.join()


def test_retry_bookkeeping() -> None:
    b = new_batch(created_ms=1000)
    assert not b.in_retry() and not b.is_backing_off(1000)
    b.in_flight = True
    b.reenqueued(2000, 150)
    assert b.attempts == 1 and b.in_retry() and not b.in_flight
    assert b.last_attempt_ms == 2000 and b.retry_backoff_ms == 150
    assert b.is_backing_off(2149.9) and not b.is_backing_off(2150)


def test_delivery_timeout_counts_from_creation() -> None:
    b = new_batch(created_ms=1000)
    b.reenqueued(5000, 100)  # retries do not restart the clock
    assert not b.has_reached_delivery_timeout(120_000, 120_999)
    assert b.has_reached_delivery_timeout(120_000, 121_000)
    assert b.delivery_deadline(120_000) == 121_000


def test_records_are_rebuilt_when_the_producer_state_changes() -> None:
    b = new_batch()
    b.try_append(1, b"k", b"v", None, None, 0)
    b.try_append(2, b"k", b"w", None, None, 0)
    plain = read_batches(b.records())[0]
    assert (plain.producer_id, plain.base_sequence) == (-1, -1)
    assert b.records() is b.records()  # built once
    b.set_producer_state(9, 2, 17, False)
    assert b.has_sequence() and b.last_sequence == 18
    seq = read_batches(b.records())[0]
    assert (seq.producer_id, seq.producer_epoch, seq.base_sequence) == (9, 2, 17)
    assert [r.value for r in seq.records] == [b"v", b"w"]
    assert b.estimated_size() == len(b.records())


def test_last_sequence_wraps_around() -> None:
    b = new_batch()
    for _ in range(3):
        b.try_append(1, None, b"v", None, None, 0)
    b.set_producer_state(1, 0, 0x7FFFFFFF, False)
    assert b.last_sequence == 1


def test_hand_over_moves_futures_and_callbacks_to_the_split_parts() -> None:
    b = new_batch()
    seen: List[Tuple[int, int]] = []
    futs: List[FutureRecordMetadata] = []
    for i in range(4):
        f = b.try_append(1, None, bytes([i]), None, lambda md, e, i=i: seen.append((i, md.offset if md else -1)), 0)
        assert f is not None
        futs.append(f)
    p1, p2 = new_batch(), new_batch()
    for i in range(2):
        p1.try_append(1, None, bytes([i]), None, None, 0)
        p2.try_append(1, None, bytes([i + 2]), None, None, 0)
    b.hand_over([(p1, 0), (p1, 1), (p2, 0), (p2, 1)])
    assert b.is_done() and b.thunks is None
    assert not futs[0].done()
    p2.done(200, -1, None)
    assert seen == [(2, 200), (3, 201)]  # callbacks moved with their records
    assert futs[3].done() and not futs[1].done()
    p1.done(100, -1, None)
    assert [f.get(0).offset for f in futs] == [100, 101, 200, 201]
    assert sorted(seen) == [(0, 100), (1, 101), (2, 200), (3, 201)]


def test_wait_returns_when_done() -> None:
    b = new_batch()
    assert b.wait(0) is False
    b.done(0, -1, None)
    assert b.wait(0) is True and b.is_done()


def test_release_drops_the_payload_of_a_completed_batch_only() -> None:
    b = new_batch(capacity=1 << 20)
    futs = [b.try_append(1000 + i, b"k", b"v" * 1000, None, None, 1000.0) for i in range(50)]
    assert b.records()  # built
    b.release()  # not done yet: nothing is dropped
    assert b.builder.uncompressed_records_size() > 50_000 and len(b.records()) > 50_000
    b.done(100, -1, None)
    b.release()
    assert b.builder.uncompressed_records_size() == 0
    assert b.record_count == 50  # counts stay for metrics
    # futures still answer from the offsets, not the payload
    md = futs[49].get(0)  # type: ignore[union-attr]
    assert md is not None and md.offset == 149 and md.serialized_value_size == 1000


@pytest.mark.parametrize("state", [(-1, -1, -1, False), (4000, 0, 0, False), (4000, 3, 2**31 - 5, True)])
def test_request_records_are_the_built_batch_in_parts(state: Tuple[int, int, int, bool]) -> None:
    b = new_batch(capacity=4000)
    for i in range(20):
        assert b.try_append(1_700_000_000_000 + i * 7, b"k%d" % i if i % 3 else None, b"v" * i,
                            [("h", b"x")] if i % 5 == 0 else None, None, 1000.0) is not None
    b.close_for_appends()
    b.set_producer_state(*state)
    parts = b.request_records()
    assert isinstance(parts, tuple) and isinstance(parts[1], memoryview)
    assert b"".join(parts) == b.builder.build(*state) == b.records()
    assert b.estimated_size() == len(b"".join(parts))
    # a new producer state (an epoch bump before a retry) makes a new header over the same records
    b.set_producer_state(4001, 0, 7, state[3])
    again = b.request_records()
    assert b"".join(again) == b.builder.build(4001, 0, 7, state[3])


def test_request_records_refuse_an_out_of_range_producer_state_as_build_does() -> None:
    b = new_batch()
    b.try_append(1, None, b"v", None, None, 1000.0)
    b.set_producer_state(2**63, 0, 0, False)  # (no broker gives such an id: a corrupt state says what is wrong)
    with pytest.raises(ValueError, match="out of range"):
        b.request_records()


def test_request_records_of_a_compressed_batch_are_its_built_bytes() -> None:
    b = ProducerBatch("t", 0, RecordBatchBuilder(1000, compression=1), 1000.0)
    b.try_append(1, None, b"v" * 50, None, None, 1000.0)
    assert b.request_records() == b.records()


def test_closing_a_batch_trims_its_buffer_and_keeps_its_bytes() -> None:
    import sys

    b = new_batch(capacity=16384)
    while b.try_append(1, None, b"v" * 10, None, None, 1000.0) is not None:
        pass
    before = b.records()
    b._built = None
    b.close_for_appends()
    buf = b.builder._buf
    assert sys.getsizeof(buf) - len(buf) <= 512
    parts = b.request_records()
    assert isinstance(parts, tuple) and b"".join(parts) == before
    assert b.records() == before


def test_batch_send_future_counts_a_completed_batch_while_its_callbacks_run() -> None:
    """done() said True but get(0) raised KafkaTimeoutError while the batch's callbacks were still running on the
    network thread (the asyncio producer resolves send_batch() from such a callback: a race seen against Apache
    Kafka on a busy machine). get() counts a completed batch as FutureRecordMetadata.get does."""
    from kproducer.producer.future import BatchSendFuture

    b = new_batch()
    f0 = b.try_append(111, b"k", b"v", None, None, 1001.0)
    assert f0 is not None
    result = BatchSendFuture("t", 1, [(b, 0, 1, [0])], 1001)
    in_callback, release = threading.Event(), threading.Event()
    seen: List[Any] = []

    def callback(md: Any, exc: Any) -> None:
        in_callback.set()
        release.wait(30)

    assert b.add_thunk(callback, f0)
    t = threading.Thread(target=b.done, args=(500, -1, None))
    t.start()
    try:
        assert in_callback.wait(30)
        assert result.done()
        seen = result.get(0)
    finally:
        release.set()
        t.join(30)
    assert [(m.partition, m.offset) for m in seen] == [(3, 500)]
