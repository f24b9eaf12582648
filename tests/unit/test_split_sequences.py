"""The parts of a split idempotent batch take over its sequence range (issue 28 item 21).

A batch the broker refuses as MESSAGE_TOO_LARGE is split into smaller batches (KIP-126) and resent. When it
already had sequences, its parts take over its range in order -- consecutive, non-overlapping, the first at
the batch's base sequence (Java's ``ProducerBatch.split`` then ``RecordAccumulator.splitAndReenqueue``) --
and the partition's next sequence does not move. Overlapping parts are refused by the broker (a part equal to
one already written is even acknowledged as its duplicate without being written). Checked on
``IdempotenceState.add_split_batches`` itself, on the wire through the scripted broker (uncompressed and
gzip: the split re-encodes the records through the builder, the compiled twin when it is built, and the
header comes from ``batch_header`` of either twin), across the sequence wrap, for a part split again, and
end to end on the MockCluster, whose producer state checks sequences as Apache Kafka does.
"""
from __future__ import annotations

from typing import List, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import MessageTooLargeError
from kproducer.mock import MockCluster
from kproducer.producer.batch import ProducerBatch
from kproducer.producer.idempotence import IdempotenceState, ProducerIdAndEpoch
from kproducer.protocol import messages as m
from kproducer.protocol.records import RecordBatchBuilder
from kproducer.testing import Harness

MAX = 2**31 - 1
TP = ("t", 0)
TOO_LARGE = MessageTooLargeError.code


def batch_of(n: int) -> ProducerBatch:
    b = ProducerBatch(TP[0], TP[1], RecordBatchBuilder(1 << 16), 0.0)
    for i in range(n):
        assert b.builder.try_append(1_700_000_000_000, None, b"r%d" % i, None) >= 0
    return b


def assert_takes_over(original: Tuple[int, int], parts: List[ProducerBatch], sizes: List[int]) -> None:
    """The parts cover ``original`` = (base, record count) in order: consecutive, non-overlapping."""
    base, count = original
    assert [p.record_count for p in parts] == sizes and sum(sizes) == count
    expected = base
    for p in parts:
        assert p.base_sequence == expected, f"part at {p.base_sequence}, expected {expected}"
        expected = (expected + p.record_count) & MAX
    assert parts[-1].last_sequence == (base + count - 1) & MAX


# -- IdempotenceState.add_split_batches ---------------------------------------------------------------


@pytest.mark.parametrize("base", [10, MAX - 2])
@pytest.mark.parametrize("sizes", [[2, 2, 2], [1, 3, 2], [5, 1]])
def test_the_parts_take_over_the_batch_s_sequence_range(base: int, sizes: List[int]) -> None:
    s = IdempotenceState()
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 3))
    s.partition(TP).next_sequence = base
    s.partition(TP).last_acked_sequence = (base - 1) & MAX
    big = batch_of(sum(sizes))
    after = batch_of(1)
    assert s.take_for_drain(big) and s.take_for_drain(after)
    next_before = s.sequence_number(TP)
    parts = [batch_of(n) for n in sizes]
    s.add_split_batches(big, parts)
    assert_takes_over((base, sum(sizes)), parts, sizes)
    assert all((p.producer_id, p.producer_epoch) == (7, 3) for p in parts)
    assert s.sequence_number(TP) == next_before  # the range is the same: nothing after it moves
    assert after.base_sequence == (base + sum(sizes)) & MAX
    st = s.partition(TP)
    assert st.in_flight == parts + [after]  # oldest first, the big batch gone (compared by identity)
    assert list(st.recent) == parts + [after]
    assert s.first_in_flight_sequence(TP) == base


def test_parts_of_a_batch_numbered_under_an_older_epoch_get_no_sequence() -> None:
    s = IdempotenceState()
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 0))
    big = batch_of(4)
    assert s.take_for_drain(big)
    s.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 1))  # a bump: every sequence starts again
    parts = [batch_of(2), batch_of(2)]
    s.add_split_batches(big, parts)
    assert [p.base_sequence for p in parts] == [-1, -1]  # numbered again when drained
    assert not s.has_in_flight(TP)


# -- on the wire: the scripted broker -----------------------------------------------------------------


def harness(base: int = 0, compression: str = "none") -> Harness:
    h = Harness(enable_idempotence=True, linger_ms=5, compression_type=compression)
    h.boot()
    if base:
        assert h.txn is not None
        with h.txn._lock:
            h.txn._idempotence.partition(TP).next_sequence = base
    return h


def sent_batches(h: Harness) -> List[Tuple[int, int, List[bytes]]]:
    """(base sequence, record count, values) of each produce request's batch for TP, in order."""
    out = []
    for r in h.produce_requests():
        b = r.batches()[TP]
        out.append((b.base_sequence, b.record_count, [rec.value for rec in b.records]))
    return out


def check_split(h: Harness, base: int, values: List[bytes], refused: int) -> List[Tuple[int, int, List[bytes]]]:
    """The first ``refused`` requests were refused as too large; the ones after carry the parts, which take
    over the batch's range. Returns the parts' (base, count, values)."""
    sent = sent_batches(h)
    assert sent[0] == (base, len(values), values)
    parts = sent[refused:]
    # each record once, in order, and the parts' sequences consecutive from the batch's base sequence
    assert [v for _b, _n, vs in parts for v in vs] == values
    expected = base
    for seq, n, _vs in parts:
        assert seq == expected, f"parts at {[p[0] for p in parts]} (sizes {[p[1] for p in parts]})"
        expected = (expected + n) & MAX
    assert len(parts) >= 2
    return parts


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("base", [0, 5, MAX - 2])
def test_a_split_idempotent_batch_goes_out_with_consecutive_sequences(compression: str, base: int) -> None:
    h = harness(base, compression)
    h.selector.script(m.PRODUCE, TOO_LARGE)
    values = [bytes([65 + i]) * 300 for i in range(6)]
    futs = [h.send(value=v) for v in values]
    h.advance(5)
    h.run_until(lambda: all(f.done() for f in futs))
    check_split(h, base, values, refused=1)
    assert h.selector.log_values(TP) == values
    assert [f.get(0).offset for f in futs] == list(range(6))
    assert h.sender.metrics.splits >= 1
    # the partition goes on right after the batch's range
    nxt = h.send(value=b"next")
    h.advance(5)
    h.run_until(nxt.done)
    assert sent_batches(h)[-1][:2] == ((base + 6) & MAX, 1)
    assert h.txn is not None and h.txn.last_acked_sequence(TP) == (base + 6) & MAX


def test_a_part_split_again_keeps_the_range() -> None:
    h = harness(MAX - 3)
    h.selector.script(m.PRODUCE, TOO_LARGE, TOO_LARGE)  # the batch, then its first part
    values = [bytes([65 + i]) * 300 for i in range(8)]
    futs = [h.send(value=v) for v in values]
    h.advance(5)
    h.run_until(lambda: all(f.done() for f in futs))
    sent = sent_batches(h)
    first_part = sent[1]
    assert first_part[0] == MAX - 3 and 1 < first_part[1] < 8  # refused too: split again
    check_split(h, MAX - 3, values, refused=2)
    assert h.selector.log_values(TP) == values
    assert [f.get(0).offset for f in futs] == list(range(8))


def test_a_split_batch_with_a_later_batch_in_flight() -> None:
    """The batch behind the split one keeps its sequence; the parts go first, in order, then it."""
    from kproducer.testing import HOLD

    h = harness(3)
    first = h.send(value=b"first")
    h.advance(5)
    h.run_until(first.done)  # acknowledged: the batches after it are pipelined
    h.selector.script(m.PRODUCE, HOLD, HOLD)
    big_values = [bytes([65 + i]) * 300 for i in range(6)]
    big = [h.send(value=v) for v in big_values]
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 1)
    later = h.send(value=b"later")
    h.advance(5)
    h.run_until(lambda: len(h.selector.held(m.PRODUCE)) == 2)
    r_big, r_later = h.selector.held(m.PRODUCE)
    assert (r_big.batches()[TP].base_sequence, r_later.batches()[TP].base_sequence) == (4, 10)
    h.selector.respond(r_big, TOO_LARGE)
    h.selector.respond(r_later, 45)  # OUT_OF_ORDER_SEQUENCE_NUMBER: the broker did not write the big batch
    h.run_until(lambda: later._resolve().attempts == 1)
    h.advance(1000)  # (the later batch's retry backoff)
    h.run_until(lambda: all(f.done() for f in big + [later]))
    resent = sent_batches(h)[3:]
    seqs = [(seq, n) for seq, n, _v in resent]
    assert seqs[-1] == (10, 1), seqs  # the later batch, with its own sequence, after the parts
    expected = 4
    for seq, n in seqs[:-1]:
        assert seq == expected, seqs
        expected += n
    assert expected == 10
    assert h.selector.log_values(TP) == [b"first"] + big_values + [b"later"]
    assert later.get(0).offset == 7


# -- end to end on the MockCluster ---------------------------------------------------------------------


@pytest.mark.needs("kafka")
@pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")
def test_split_parts_are_written_once_on_the_mock_cluster() -> None:
    """The mock broker checks each part's sequence (as Apache Kafka's ProducerStateManager): overlapping parts
    would be refused as out of order or taken for duplicates of the part before."""
    from tests.readback import consume

    with MockCluster(1) as cluster:
        cluster.create_topic("s", 1)
        p = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=50, retry_backoff_ms=20,
                     max_block_ms=30000, delivery_timeout_ms=60000)
        try:
            p.send("s", b"first", partition=0).get(30)
            cluster.inject_errors("produce", [TOO_LARGE])
            values = [bytes([65 + i]) * 400 for i in range(10)]
            futs = [p.send("s", v, partition=0) for v in values]
            p.flush(30)
            assert [f.get(0).offset for f in futs] == list(range(1, 11))
            tail = [p.send("s", b"tail-%d" % i, partition=0) for i in range(3)]
            p.flush(30)
            assert [f.get(0).offset for f in tail] == [11, 12, 13]
            assert p._sender.metrics.splits >= 1
        finally:
            p.close(10)
        expected = [b"first"] + values + [b"tail-%d" % i for i in range(3)]
        assert [r.value for r in cluster.records("s", 0)] == expected
        ((_epoch, last),) = cluster.producer_state("s", 0).values()
        assert last == 13
        got = consume(cluster.bootstrap_servers, "s", [0], len(expected), timeout=30)
        assert [r.value for r in got] == expected
