"""IdempotenceState on its own: the bookkeeping that mutation testing (tools/mutation.sh, docs/testing.md
"Mutation testing") found no unit test pinned down -- mutants of these lines survived every test of the
producer core. Each test states the rule it holds."""
from __future__ import annotations

import logging
from typing import List, Tuple

import pytest

from kproducer.errors import InvalidRecordError
from kproducer.producer.batch import ProducerBatch
from kproducer.producer.idempotence import (
    BROKER_DUPLICATE_WINDOW,
    IdempotenceState,
    ProducerIdAndEpoch,
    sequence_after,
)
from kproducer.protocol.records import RecordBatchBuilder

TP = ("t", 0)
OTHER = ("t", 1)
MAX = 2**31 - 1


def batch_of(n: int, tp: Tuple[str, int] = TP) -> ProducerBatch:
    b = ProducerBatch(tp[0], tp[1], RecordBatchBuilder(1 << 16), 0.0)
    for i in range(n):
        assert b.builder.try_append(1_700_000_000_000, None, b"r%d" % i, None) >= 0
    return b


def pipelined(pid: int = 7, epoch: int = 0) -> IdempotenceState:
    """A state whose partitions TP and OTHER had a batch acknowledged (so that batches are pipelined)."""
    s = IdempotenceState()
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(pid, epoch))
    for tp in (TP, OTHER):
        first = batch_of(1, tp)
        assert s.take_for_drain(first)
        s.handle_completed_batches([(first, 0)])
    return s


def drain(s: IdempotenceState, *sizes: int, tp: Tuple[str, int] = TP, transactional: bool = False
          ) -> List[ProducerBatch]:
    out = []
    for n in sizes:
        b = batch_of(n, tp)
        assert s.take_for_drain(b, transactional)
        out.append(b)
    return out


def test_sequence_after_is_serial_order() -> None:
    assert sequence_after(1, 0) and not sequence_after(0, 1) and not sequence_after(5, 5)
    assert sequence_after(0, MAX) and not sequence_after(MAX, 0)
    assert sequence_after(2**30 - 1, 0)  # the largest distance still "after"
    assert not sequence_after(2**30, 0)  # half the space away: neither before nor after


def test_a_partition_never_seen_has_the_initial_values() -> None:
    s = IdempotenceState()
    assert (s.sequence_number(TP), s.last_acked_sequence(TP), s.last_acked_offset(TP)) == (0, -1, -1)
    assert s.first_in_flight_sequence(TP) == -1 and not s.has_in_flight(TP)


def test_a_partition_with_nothing_in_flight_has_no_first_in_flight_sequence() -> None:
    s = pipelined()
    assert s.first_in_flight_sequence(TP) == -1 and not s.has_in_flight(TP)
    (b,) = drain(s, 2)
    assert s.first_in_flight_sequence(TP) == 1 and s.has_in_flight(TP)
    assert not s.has_in_flight(("t", 9))


def test_a_new_producer_id_or_epoch_starts_every_partition_again() -> None:
    s = pipelined()
    drain(s, 3)
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 1))
    for tp in (TP, OTHER):
        assert (s.sequence_number(tp), s.last_acked_sequence(tp)) == (0, -1)
        assert not s.has_in_flight(tp) and not s.partition(tp).recent


@pytest.mark.parametrize("transactional", [False, True])
def test_split_parts_replace_the_batch_in_place_among_the_recent_batches(transactional: bool) -> None:
    s = pipelined()
    before, big, after = drain(s, 1, 4, 1, transactional=transactional)
    parts = [batch_of(2), batch_of(2)]
    s.add_split_batches(big, parts)
    st = s.partition(TP)
    recent = list(st.recent)
    assert recent[-4:] == [before, parts[0], parts[1], after]
    assert big not in recent
    assert all(p.is_transactional is transactional for p in parts)


def test_has_later_sequences() -> None:
    s = pipelined()
    (a,) = drain(s, 2)
    assert s.has_later_sequences(a)  # (itself in flight)
    s.remove_in_flight(a)
    assert not s.has_later_sequences(a)  # nothing numbered after it
    drain(s, 1)
    s.remove_in_flight(s.partition(TP).in_flight[0])
    assert s.has_later_sequences(a)  # the next sequence moved on
    assert not s.has_later_sequences(batch_of(1, ("t", 9)))  # a partition never drained


def test_a_refused_batch_leaves_the_recent_batches_and_moves_the_later_ones_of_its_partition_only(
        caplog: pytest.LogCaptureFixture) -> None:
    s = pipelined()
    a, b = drain(s, 2, 3)
    (o,) = drain(s, 1, tp=OTHER)
    q1, q2 = batch_of(1), batch_of(1)  # retries waiting in the accumulator, numbered after b
    for q, seq in ((q1, 6), (q2, 7)):
        q.set_producer_state(7, 0, seq, False)
    q_other = batch_of(1, OTHER)
    q_other.set_producer_state(7, 0, 9, False)
    s.remove_in_flight(a)
    with caplog.at_level(logging.INFO, logger="kproducer.producer.idempotence"):
        s.adjust_sequences_due_to_failed_batch(a, [q1, q2, q_other])
    assert a not in s.partition(TP).recent
    assert [b.base_sequence, q1.base_sequence, q2.base_sequence] == [1, 4, 5]
    assert (q_other.base_sequence, o.base_sequence) == (9, 1)  # another partition: untouched
    assert s.sequence_number(TP) == 4
    assert "moving the sequence of a batch for t-0 from 3 to 1 (records before it failed)" in caplog.messages


def test_a_refused_batch_of_an_older_epoch_or_without_sequence_moves_nothing() -> None:
    s = pipelined()
    (a,) = drain(s, 2)
    (b,) = drain(s, 2)
    old = batch_of(2)
    old.set_producer_state(7, 5, 1, False)  # same id, another epoch
    s.adjust_sequences_due_to_failed_batch(old, [])
    s.adjust_sequences_due_to_failed_batch(batch_of(2), [])  # no sequence
    assert (a.base_sequence, b.base_sequence, s.sequence_number(TP)) == (1, 3, 5)
    stale = batch_of(1)
    stale.set_producer_state(7, 5, 8, False)  # a queued batch of an older epoch: not renumbered
    s.remove_in_flight(a)
    s.adjust_sequences_due_to_failed_batch(a, [stale])
    assert (b.base_sequence, stale.base_sequence) == (1, 8)


@pytest.mark.parametrize("transactional", [False, True])
def test_records_refused_one_by_one_give_the_kept_batch_the_original_s_place(transactional: bool) -> None:
    """KIP-467: the records kept take the original's first sequence (and transactional flag), are marked
    reopened (their OUT_OF_ORDER answer to the old send is retried), replace it among the recent batches, and
    the later batches move down by the records removed -- the kept batch itself is not moved again."""
    s = pipelined()
    before, original, later = drain(s, 1, 4, 2, transactional=transactional)
    kept = batch_of(3)
    queued = [kept]
    s.replace_after_record_errors(original, kept, 1, queued)
    assert (kept.base_sequence, kept.producer_id, kept.is_transactional) == (2, 7, transactional)
    assert kept.reopened is True
    assert later.base_sequence == 5 and s.sequence_number(TP) == 7
    st = s.partition(TP)
    assert original not in st.in_flight and kept in st.in_flight
    assert list(st.recent)[-3:] == [before, kept, later]
    # an original of another epoch, or without sequence: nothing changes
    other = batch_of(2)
    other.set_producer_state(7, 9, 5, False)
    s.replace_after_record_errors(other, batch_of(1), 1, [])
    s.replace_after_record_errors(batch_of(2), batch_of(1), 1, [])
    assert later.base_sequence == 5 and s.sequence_number(TP) == 7


def test_the_rewind_after_a_transaction_skips_only_the_unresolved_partitions() -> None:
    s = pipelined()
    acked_other = s.partition(OTHER).recent[0]
    acked_other.done(0, -1, None)
    (a,) = drain(s, 2)  # TP: sent, then failed without an answer: may have been written
    a.done(-1, -1, InvalidRecordError("aborted before its retry"))
    (o,) = drain(s, 3, tp=OTHER)  # OTHER: aborted unsent (done, error, not in flight any more)
    s.remove_in_flight(o)
    o.done(-1, -1, InvalidRecordError("aborted"))
    assert s.has_unresolved_batches()
    s.rewind_after_transaction()
    assert s.sequence_number(TP) == 3 and s.partition(TP).in_flight == [a]  # untouched
    assert s.sequence_number(OTHER) == 1  # back right after its last acknowledged sequence (0)
    assert list(s.partition(OTHER).recent) == [acked_other]  # the aborted batch left them
    assert s.partition(OTHER).recent.maxlen == BROKER_DUPLICATE_WINDOW


def test_the_rewind_keeps_batches_not_done_and_the_acknowledged_ones_among_the_recent() -> None:
    s = pipelined()
    (a,) = drain(s, 1)
    s.handle_completed_batches([(a, 1)])
    a.done(1, -1, None)
    (b,) = drain(s, 2)  # still in flight, not done
    s.rewind_after_transaction()
    st = s.partition(TP)
    assert st.in_flight == [b] and s.sequence_number(TP) == 4  # not rewound while a batch is out
    assert a in st.recent


def test_has_unresolved_batches() -> None:
    s = pipelined()
    assert not s.has_unresolved_batches()
    (a,) = drain(s, 1)
    assert not s.has_unresolved_batches()  # in flight, not done
    a.done(5, -1, None)
    assert not s.has_unresolved_batches()  # done without error
    (b,) = drain(s, 1)
    b.done(-1, -1, InvalidRecordError("x"))
    assert s.has_unresolved_batches()


def test_reuse_failed_range() -> None:
    """Nothing numbered after a failed batch: the next batch takes its range, and it leaves the recent ones."""
    s = pipelined()
    (a,) = drain(s, 3)
    s.remove_in_flight(a)
    s.reuse_failed_range(a)
    assert s.sequence_number(TP) == 1 and a not in s.partition(TP).recent
    (b,) = drain(s, 2)
    assert b.base_sequence == 1
    # a batch of another epoch, without sequence, or of a partition never drained: nothing changes
    old = batch_of(1)
    old.set_producer_state(7, 4, 0, False)
    s.reuse_failed_range(old)
    s.reuse_failed_range(batch_of(1))
    s.reuse_failed_range(batch_of(1, ("t", 9)))
    assert s.sequence_number(TP) == 3 and s.sequence_number(("t", 9)) == 0


def test_a_partition_just_created_has_the_initial_values() -> None:
    """(Through ``partition()``, which creates the state: the sentinels matter -- a first batch at sequence 0 is
    the next one expected, and no offset is acknowledged.)"""
    s = IdempotenceState()
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 0))
    s.partition(TP)
    assert (s.last_acked_sequence(TP), s.last_acked_offset(TP)) == (-1, -1)
    (a,) = drain(s, 1)
    assert s.is_next_sequence(a)


def test_a_new_batch_waits_rather_than_push_the_oldest_unacknowledged_one_out_of_the_broker_s_window() -> None:
    s = pipelined()  # recent: [the first batch, acknowledged]
    b = drain(s, 1, 1, 1, 1)  # recent: [first, b0..b3]; b0 is the oldest not acknowledged, at index 1
    (b4,) = drain(s, 1)  # b0 stays in the window ([b0..b4]): it may go
    b5 = batch_of(1)
    assert not s.take_for_drain(b5)  # b0 would leave the window: wait
    assert b5.base_sequence == -1 and s.sequence_number(TP) == 6
    s.handle_completed_batches([(b[0], 1)])
    b[0].done(1, -1, None)
    assert s.take_for_drain(b5) and b5.base_sequence == 6
    assert len(s.partition(TP).recent) == BROKER_DUPLICATE_WINDOW and b4 in s.partition(TP).recent


def test_a_retry_goes_out_only_when_it_is_the_first_unacknowledged_batch() -> None:
    s = pipelined()
    a, b = drain(s, 1, 1)
    assert not s.take_for_drain(b)  # (b's retry, while a is unacknowledged)
    assert s.take_for_drain(a)
    assert (a.base_sequence, b.base_sequence, s.sequence_number(TP)) == (1, 2, 3)


def test_a_batch_after_a_done_but_unresolved_first_batch_may_go() -> None:
    """The first batch of a partition goes alone while it is the oldest not done; once done (aborted before its
    retry, say) it holds nothing back."""
    s = IdempotenceState()
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 0))
    (a,) = drain(s, 1)
    b = batch_of(1)
    assert not s.take_for_drain(b)
    a.done(-1, -1, InvalidRecordError("aborted"))
    assert s.take_for_drain(b) and b.base_sequence == 1


@pytest.mark.parametrize("renewed", [ProducerIdAndEpoch(8, 0), ProducerIdAndEpoch(7, 1)])
def test_a_batch_numbered_under_another_producer_id_or_epoch_is_numbered_again(renewed: ProducerIdAndEpoch
                                                                                ) -> None:
    s = pipelined()
    (a,) = drain(s, 2)
    assert (a.producer_id, a.producer_epoch, a.base_sequence) == (7, 0, 1)
    s.set_producer_id_and_epoch(renewed)
    assert s.take_for_drain(a)
    assert (a.producer_id, a.producer_epoch, a.base_sequence) == (renewed.producer_id, renewed.epoch, 0)


def test_acknowledgements_of_batches_of_an_older_epoch_change_nothing() -> None:
    s = pipelined()
    (old,) = drain(s, 2)
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 1))
    (new,) = drain(s, 1)
    s.handle_completed_batches([(old, 10), (new, 12)])  # (one response: the stale batch does not stop the rest)
    assert (s.last_acked_sequence(TP), s.last_acked_offset(TP)) == (0, 12)
    assert not s.has_in_flight(TP)
    stray = batch_of(1, ("t", 9))  # a partition never drained: nothing to update
    stray.set_producer_state(7, 1, 0, False)
    s.handle_completed_batches([(stray, 3)])
    assert s.last_acked_sequence(("t", 9)) == -1


def test_an_acknowledgement_out_of_order_removes_only_its_own_batch() -> None:
    s = pipelined()
    a, b = drain(s, 1, 1)
    s.handle_completed_batches([(b, 2)])
    assert s.partition(TP).in_flight == [a]
    assert (s.last_acked_sequence(TP), s.last_acked_offset(TP)) == (2, 2)
    s.handle_completed_batches([(a, 1)])
    assert not s.has_in_flight(TP)
    assert (s.last_acked_sequence(TP), s.last_acked_offset(TP)) == (2, 2)  # not back


def test_the_last_acknowledged_offset() -> None:
    s = IdempotenceState()
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 0))
    (a,) = drain(s, 3)
    s.handle_completed_batches([(a, -1)])  # no offset (acks=0): unknown, not moved
    assert s.last_acked_offset(TP) == -1 and s.last_acked_sequence(TP) == 2
    (b,) = drain(s, 1)
    s.handle_completed_batches([(b, 0)])  # offset 0 counts
    assert s.last_acked_offset(TP) == 0
    (c,) = drain(s, 4)
    s.handle_completed_batches([(c, 1)])
    assert s.last_acked_offset(TP) == 4  # the batch's last record


@pytest.mark.parametrize("transactional", [False, True])
def test_record_errors_move_the_queued_retries_after_the_batch_down_and_keep_them_transactional(
        transactional: bool) -> None:
    s = pipelined()
    original, later = drain(s, 4, 2, transactional=transactional)
    kept = batch_of(3)
    retry = batch_of(1)  # a retry waiting in the accumulator, numbered after ``later``
    retry.set_producer_state(7, 0, 7, transactional)
    s.replace_after_record_errors(original, kept, 1, [kept, retry])
    assert (later.base_sequence, retry.base_sequence, kept.base_sequence) == (4, 6, 1)
    assert later.is_transactional is transactional and retry.is_transactional is transactional
