"""Sequence numbers past 2**31-1 (issue 28 item 21).

A partition's sequence is an int32 that wraps to 0 after 2**31-1 (Java's
``DefaultRecordBatch.incrementSequence``; the broker's ``ProducerAppendInfo.inSequence`` accepts 0 after
``Integer.MAX_VALUE``). Everything that compares two sequences must therefore compare them in serial order
(how far one is after the other), not as plain integers: the next sequence, the last acknowledged one, the
order of the batches in flight and of the retries in the accumulator's queue, the sequences moved down after a
refused batch, and where a transaction's next batch starts.

Each partition starts at a sequence just below 2**31 (poked into the producer's idempotence state: a broker
with no state for a producer accepts any first sequence), and sends batches of several records, some of which
straddle the wrap. The rule is checked on the ``IdempotenceState`` itself, on the wire through the scripted
broker (uncompressed batches take their header from the records buffer's ``batch_header`` -- the compiled
twin when it is built --, compressed ones from ``records.batch_header``), on both record-buffer twins, and
end to end on the MockCluster, whose producer state checks sequences as Apache Kafka does.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator, List, Optional, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import NotLeaderOrFollowerError, OutOfOrderSequenceNumberError
from kproducer.mock import MockCluster
from kproducer.producer.batch import ProducerBatch
from kproducer.producer.idempotence import IdempotenceState, ProducerIdAndEpoch
from kproducer.protocol import accel
from kproducer.protocol import messages as m
from kproducer.protocol.compression import CODEC_GZIP, CODEC_NONE
from kproducer.protocol.records import RecordBatchBuilder, _RecordsBufferPy, read_batches
from kproducer.testing import HOLD, Harness

pytestmark = pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")  # (kafka-python)

MAX = 2**31 - 1  # Integer.MAX_VALUE: the last sequence before the wrap
TP = ("t", 0)


def batch_of(n: int, tp: Tuple[str, int] = TP, builder: Optional[RecordBatchBuilder] = None) -> ProducerBatch:
    b = ProducerBatch(tp[0], tp[1], builder or RecordBatchBuilder(1 << 16), 0.0)
    for i in range(n):
        assert b.builder.try_append(1_700_000_000_000 + i, None, b"r%d" % i, None) >= 0
    return b


def state_at(next_sequence: int, acked: bool = True) -> IdempotenceState:
    """Producer 7, epoch 0; partition TP's next sequence is ``next_sequence`` (and the batch before it was
    acknowledged, so that batches are pipelined: a partition's first batch goes alone)."""
    s = IdempotenceState()
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 0))
    st = s.partition(TP)
    st.next_sequence = next_sequence
    if acked:
        st.last_acked_sequence = (next_sequence - 1) & MAX
    return s


def drain(s: IdempotenceState, *sizes: int) -> List[ProducerBatch]:
    out = []
    for n in sizes:
        b = batch_of(n)
        assert s.take_for_drain(b), "the batch may go"
        out.append(b)
    return out


# -- IdempotenceState --------------------------------------------------------------------------------


def test_the_next_sequence_wraps_to_0_after_int32_max() -> None:
    s = state_at(MAX - 2)
    batches = drain(s, 2, 2, 2, 2)
    assert [b.base_sequence for b in batches] == [MAX - 2, MAX, 1, 3]
    assert [b.last_sequence for b in batches] == [MAX - 1, 0, 2, 4]
    assert s.sequence_number(TP) == 5
    # what goes on the wire: the header's baseSequence, and the decoder's last sequence wraps the same way
    decoded = [read_batches(b.records())[0] for b in batches]
    assert [d.base_sequence for d in decoded] == [MAX - 2, MAX, 1, 3]
    assert [d.last_sequence for d in decoded] == [MAX - 1, 0, 2, 4]


def test_a_batch_ending_exactly_at_int32_max_is_followed_by_0() -> None:
    s = state_at(MAX - 2)
    a, b = drain(s, 3, 1)
    assert (a.base_sequence, a.last_sequence, b.base_sequence) == (MAX - 2, MAX, 0)


def test_the_batches_in_flight_stay_oldest_first_across_the_wrap() -> None:
    s = state_at(MAX - 2)
    drain(s, 2, 2, 2)
    assert s.first_in_flight_sequence(TP) == MAX - 2  # not the wrapped 1
    assert [b.base_sequence for b in s.partition(TP).in_flight] == [MAX - 2, MAX, 1]


def test_acknowledgements_move_the_last_acked_sequence_across_the_wrap() -> None:
    s = state_at(MAX - 2)
    a, b, c = drain(s, 2, 2, 2)
    s.handle_completed_batches([(a, 100)])
    assert s.last_acked_sequence(TP) == MAX - 1
    s.handle_completed_batches([(b, 102)])
    assert s.last_acked_sequence(TP) == 0
    assert s.is_next_sequence(c)
    s.handle_completed_batches([(c, 104)])
    assert s.last_acked_sequence(TP) == 2 and s.last_acked_offset(TP) == 105
    assert not s.has_in_flight(TP)


def test_a_late_acknowledgement_does_not_move_the_last_acked_sequence_back_across_the_wrap() -> None:
    s = state_at(MAX - 2)
    a, b = drain(s, 2, 2)
    s.handle_completed_batches([(b, 102), (a, 100)])  # (answers of two connections, after a leader move)
    assert s.last_acked_sequence(TP) == 0


def test_a_refused_batch_before_the_wrap_moves_the_later_ones_down_across_it() -> None:
    """Java's adjustSequencesDueToFailedBatch: no gap is left, also when the later batches wrapped."""
    s = state_at(MAX - 2)
    a, b, c = drain(s, 2, 2, 2)
    queued = [batch_of(1)]  # (a batch without a sequence yet: untouched)
    s.remove_in_flight(a)  # (as TransactionManager.handle_failed_batch does first)
    s.adjust_sequences_due_to_failed_batch(a, queued)
    assert [b.base_sequence, c.base_sequence] == [MAX - 2, MAX]
    assert [b.last_sequence, c.last_sequence] == [MAX - 1, 0]
    assert queued[0].base_sequence == -1
    assert s.sequence_number(TP) == 1
    assert [x.base_sequence for x in s.partition(TP).in_flight] == [MAX - 2, MAX]
    assert b.reopened and c.reopened


def test_a_refused_batch_after_the_wrap_leaves_the_batches_before_it() -> None:
    s = state_at(MAX - 2)
    a, b, c = drain(s, 2, 2, 2)  # MAX-2, MAX (wraps), 1
    s.remove_in_flight(b)
    s.adjust_sequences_due_to_failed_batch(b, [])
    assert [a.base_sequence, c.base_sequence] == [MAX - 2, MAX]
    assert s.sequence_number(TP) == 1
    assert not a.reopened


def test_a_transaction_ending_after_the_wrap_goes_on_after_the_last_acknowledged_sequence() -> None:
    s = state_at(MAX - 2)
    a, b = drain(s, 2, 2)
    s.handle_completed_batches([(a, 0), (b, 2)])
    s.rewind_after_transaction()
    assert s.sequence_number(TP) == 1  # after the acknowledged 0, not back to 0
    (c,) = drain(s, 2)
    assert c.base_sequence == 1


# -- the record buffer twins: the header's baseSequence at the edge ----------------------------------

BUFFERS = [pytest.param(_RecordsBufferPy, id="python")]
if accel.records is not None:
    BUFFERS.append(pytest.param(accel.records.RecordsBuffer, id="compiled"))


@pytest.mark.parametrize("buffer_class", BUFFERS)
@pytest.mark.parametrize("base", [MAX - 1, MAX, 0])
def test_both_buffer_twins_write_the_wrapped_base_sequence(buffer_class: type, base: int) -> None:
    buf = buffer_class(1 << 12)
    for i in range(3):
        buf.try_append(1_700_000_000_000, None, b"v%d" % i, None)
    head = buf.batch_header(0, 7, 0, base)
    with RecordBatchBuilder.records_view(buf) as view:  # (a Python method reading either twin's storage)
        whole = bytes(head) + bytes(view)
    (decoded,) = read_batches(whole)
    assert (decoded.base_sequence, decoded.record_count) == (base, 3)
    assert decoded.last_sequence == (base + 2) & MAX
    # the same bytes as the whole batch built by the module's batch_header (compressed batches' path)
    ref = RecordBatchBuilder(1 << 12)
    for i in range(3):
        ref.try_append(1_700_000_000_000, None, b"v%d" % i, None)
    assert ref.build(7, 0, base) == whole


@pytest.mark.parametrize("buffer_class", BUFFERS)
def test_both_buffer_twins_refuse_a_sequence_past_int32_max(buffer_class: type) -> None:
    buf = buffer_class(1 << 12)
    buf.try_append(1_700_000_000_000, None, b"v", None)
    with pytest.raises(ValueError, match="base_sequence=2147483648"):
        buf.batch_header(0, 7, 0, MAX + 1)
    ref = RecordBatchBuilder(1 << 12)
    ref.try_append(1_700_000_000_000, None, b"v", None)
    with pytest.raises(ValueError, match="base_sequence=2147483648"):
        ref.build(7, 0, MAX + 1)


# -- on the wire: the scripted broker ----------------------------------------------------------------


def harness_at(next_sequence: int, compression: str = "none", **settings: object) -> Harness:
    h = Harness(enable_idempotence=True, linger_ms=5, compression_type=compression, **settings)
    h.boot()
    assert h.txn is not None
    with h.txn._lock:
        h.txn._idempotence.partition(TP).next_sequence = next_sequence
    return h


def wire_sequences(h: Harness) -> List[Tuple[int, int]]:
    return [(b.base_sequence, b.last_sequence) for b in (r.batches()[TP] for r in h.produce_requests())]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_sequences_on_the_wire_wrap_and_every_record_is_acknowledged(compression: str) -> None:
    h = harness_at(MAX - 2, compression)
    futures = []
    for round_ in range(4):
        fs = [h.send(value=b"%d-%d" % (round_, i)) for i in range(2)]
        h.advance(5)
        h.run_until(lambda fs=fs: all(f.done() for f in fs))  # type: ignore[misc]
        futures.extend(fs)
    assert wire_sequences(h) == [(MAX - 2, MAX - 1), (MAX, 0), (1, 2), (3, 4)]
    codec = CODEC_GZIP if compression == "gzip" else CODEC_NONE
    assert all(r.batches()[TP].compression == codec for r in h.produce_requests())
    assert [f.get(0).offset for f in futures] == list(range(8))
    assert h.selector.log_values(TP) == [b"%d-%d" % (r, i) for r in range(4) for i in range(2)]
    assert h.txn is not None and h.txn.last_acked_sequence(TP) == 4


def test_retries_across_the_wrap_go_out_in_sequence_order() -> None:
    """A (MAX..0) fails retriably and B (1..2), in flight behind it, is then out of order at the broker: both
    are retried, A first (the accumulator's queue and the in-flight list order them by serial order)."""
    h = harness_at(MAX - 1, batch_size=200)
    fw = h.send(value=b"W" * 150)
    h.advance(5)
    h.run_until(fw.done)
    h.selector.script(m.PRODUCE, HOLD, HOLD)
    fa = [h.send(value=b"A" * 60), h.send(value=b"a" * 60)]
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    fb = [h.send(value=b"B" * 60), h.send(value=b"b" * 60)]
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 2)
    ra, rb = h.selector.held(m.PRODUCE)
    assert [ra.batches()[TP].base_sequence, rb.batches()[TP].base_sequence] == [MAX, 1]
    h.selector.respond(ra, NotLeaderOrFollowerError.code)
    h.selector.respond(rb, OutOfOrderSequenceNumberError.code)
    h.run()
    assert [b.base_sequence for b in h.accumulator.queued_batches_list()] == [MAX, 1]
    h.advance(1000)
    h.run_until(lambda: all(f.done() for f in fa + fb))
    assert [s for s, _last in wire_sequences(h)[3:]] == [MAX, 1]
    assert h.selector.log_values(TP) == [b"W" * 150, b"A" * 60, b"a" * 60, b"B" * 60, b"b" * 60]
    assert [f.get(0).offset for f in fa + fb] == [1, 2, 3, 4]


# -- end to end on the MockCluster (its producer state checks sequences as Apache Kafka's does) -------------


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    # transaction.version 1: a transaction's sequences go on from the last one (v2 starts each at 0, a new epoch)
    with MockCluster(1, transaction_version=1) as c:
        c.create_topic("w", 1)
        yield c


@contextlib.contextmanager
def producer_at(cluster: MockCluster, next_sequence: int, **settings: object) -> Iterator[Producer]:
    """A producer whose partition w-0 starts at ``next_sequence``, poked in once it has its producer id and
    before it sends anything (the broker has no state for the producer yet: it takes any first sequence)."""
    settings.setdefault("linger_ms", 5)
    settings.setdefault("retry_backoff_ms", 20)
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=30000, **settings)
    try:
        txn = p._txn
        assert txn is not None
        if "transactional_id" in settings:
            p.init_transactions()
        else:
            deadline = time.monotonic() + 30
            while not txn.has_producer_id():  # InitProducerId goes out when the producer starts
                assert time.monotonic() < deadline, "no producer id in 30 s"
                time.sleep(0.01)
        with txn._lock:
            txn._idempotence.partition(("w", 0)).next_sequence = next_sequence
        yield p
    finally:
        p.close(10)


def send_flushed(p: Producer, prefix: str, batches: int, per_batch: int = 2) -> List[bytes]:
    values = []
    for i in range(batches):
        vs = [b"%s-%d-%d" % (prefix.encode(), i, j) for j in range(per_batch)]
        for v in vs:
            p.send("w", v, partition=0)
        p.flush(30)
        values.extend(vs)
    return values


def test_idempotent_producer_on_the_mock_cluster_across_the_wrap_with_a_lost_answer(cluster: MockCluster) -> None:
    """The broker writes a batch straddling the wrap and the answer is lost: the retry is a duplicate of a
    batch in the broker's window (recognised across the wrap), every record is in the log once, in order."""
    with producer_at(cluster, MAX - 2) as p:
        before = send_flushed(p, "a", 1)  # MAX-2..MAX-1: the broker has state for the producer near the end
        cluster.fail_after_append([NotLeaderOrFollowerError.code])  # written, then answered with an error
        across = send_flushed(p, "b", 1)  # MAX..0
        after = send_flushed(p, "c", 2)  # 1..2, 3..4
        assert p._txn is not None and p._txn.last_acked_sequence(("w", 0)) == 4
    assert [r.value for r in cluster.records("w", 0)] == before + across + after
    ((_epoch, last),) = cluster.producer_state("w", 0).values()
    assert last == 4


@pytest.mark.needs("kafka")
def test_a_transaction_after_the_wrap_is_not_taken_for_a_duplicate(cluster: MockCluster) -> None:
    """The second transaction's first batch must follow the last acknowledged sequence (1): started at 0 again,
    it equals a batch still in the broker's duplicate window, which acknowledges it without writing it, and
    the committed transaction silently misses its records."""
    from tests.readback import consume

    with producer_at(cluster, MAX - 3, transactional_id="wrap-tx") as p:
        p.begin_transaction()
        first = send_flushed(p, "t1", 3)  # MAX-3..MAX-2, MAX-1..MAX, 0..1
        p.commit_transaction(30)
        p.begin_transaction()
        second = send_flushed(p, "t2", 2)  # 2..3, 4..5
        p.commit_transaction(30)
    data = [r.value for r in cluster.records("w", 0)]
    assert data == first + second
    got = consume(cluster.bootstrap_servers, "w", [0], len(data), timeout=30, isolation_level="read_committed")
    assert [r.value for r in got] == first + second
