"""MockCluster's ``fail_after_append``: the broker writes a Produce's batch and then answers an error, as Kafka does
with NOT_ENOUGH_REPLICAS_AFTER_APPEND or a leader that loses leadership after writing. The idempotent producer
retries; the broker finds the retry among the producer's last batches and answers, as Kafka (since 1.0) does, with
no error and the offset of the batch already written, appending nothing; the record is reported delivered once and
kafka-python reads it back once. Without idempotence the retry is written again: a duplicate. A broker that
answers the retry DUPLICATE_SEQUENCE_NUMBER instead (injected) gets the record counted delivered, without an
offset, as Java's Sender does."""
from __future__ import annotations

import threading
from typing import Any, List, Optional, Tuple

import pytest

from kproducer import Producer
from kproducer.mock import MockCluster
from tests.readback import consume

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
NOT_LEADER_OR_FOLLOWER = 6


def _send_recorded(p: Producer, values: List[bytes]) -> Tuple[List[Any], List[Tuple[Any, Optional[BaseException]]]]:
    calls: List[Tuple[Any, Optional[BaseException]]] = []
    lock = threading.Lock()

    def callback(md: Any, exc: Optional[BaseException]) -> None:
        with lock:
            calls.append((md, exc))

    futures = [p.send("t", value=v, partition=0, callback=callback) for v in values]
    p.flush(30)
    return [f.get(0) for f in futures], calls


@pytest.mark.parametrize("code", [NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER])
def test_the_idempotent_producer_delivers_a_batch_written_before_an_error_once(code: int) -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("t", 1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=50, retry_backoff_ms=10,
                      client_id="after-append") as p:
            assert p.send("t", value=b"warm-up", partition=0).get(30).offset == 0  # producer id, connection
            cluster.fail_after_append([code])
            produces_before = cluster.request_counts["produce"]
            mds, calls = _send_recorded(p, [b"once-1", b"once-2", b"once-3"])
            metrics = p.metrics()
        assert cluster.pending_after_append() == []  # the fault was used
        assert cluster.request_counts["produce"] == produces_before + 2  # the batch, and its retry
        assert metrics["record-retry-total"] == 3 and metrics["record-error-total"] == 0
        # delivered once each, at the offsets where the first (written) attempt put them
        assert [(md.offset, exc) for md, exc in calls] == [(1, None), (2, None), (3, None)]
        assert [md.offset for md in mds] == [1, 2, 3]
        stored = cluster.records("t", 0)
        assert [r.value for r in stored] == [b"warm-up", b"once-1", b"once-2", b"once-3"]
        read = consume(cluster.bootstrap_servers, "t", [0], expected=4)
        assert [(r.offset, r.value) for r in read] == [(0, b"warm-up"), (1, b"once-1"), (2, b"once-2"),
                                                      (3, b"once-3")]


def test_without_idempotence_the_retry_writes_the_batch_again() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("t", 1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=50, retry_backoff_ms=10,
                      enable_idempotence=False, client_id="after-append-plain") as p:
            cluster.fail_after_append([NOT_ENOUGH_REPLICAS_AFTER_APPEND])
            mds, calls = _send_recorded(p, [b"twice"])
        assert [(md.offset, exc) for md, exc in calls] == [(1, None)]  # the callback hears of the second copy
        assert mds[0].offset == 1
        read = consume(cluster.bootstrap_servers, "t", [0], expected=2)
        assert [(r.offset, r.value) for r in read] == [(0, b"twice"), (1, b"twice")]


def test_a_code_of_zero_answers_normally_and_clear_faults_forgets_the_rest() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("t", 1)
        cluster.fail_after_append([0, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_ENOUGH_REPLICAS_AFTER_APPEND])
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0, client_id="after-append-0") as p:
            assert p.send("t", value=b"a", partition=0).get(30).offset == 0
            assert cluster.pending_after_append() == [NOT_ENOUGH_REPLICAS_AFTER_APPEND] * 2
            cluster.clear_faults()
            assert cluster.pending_after_append() == []
            assert p.send("t", value=b"b", partition=0).get(30).offset == 1
            assert p.metrics()["record-retry-total"] == 0


def test_a_retry_answered_duplicate_sequence_number_is_delivered_once_without_an_offset() -> None:
    """A broker that no longer has the written batch's metadata answers its retry DUPLICATE_SEQUENCE_NUMBER (Kafka
    keeps the last 5 batches per producer and answers NO_ERROR for those): as Java's Sender, the producer counts the
    batch delivered, with no offset to report (-1)."""
    with MockCluster(1) as cluster:
        cluster.create_topic("t", 1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=50, retry_backoff_ms=10,
                      client_id="after-append-46") as p:
            assert p.send("t", value=b"warm-up", partition=0).get(30).offset == 0
            cluster.inject_errors("produce", [0, 46])  # the first attempt is processed, its retry answered 46
            cluster.fail_after_append([NOT_ENOUGH_REPLICAS_AFTER_APPEND])
            mds, calls = _send_recorded(p, [b"dup"])
            metrics = p.metrics()
        assert cluster.pending_errors("produce") == [] and cluster.pending_after_append() == []
        assert [(md.offset, exc) for md, exc in calls] == [(-1, None)] and mds[0].offset == -1
        assert metrics["record-error-total"] == 0 and metrics["record-retry-total"] == 1
        read = consume(cluster.bootstrap_servers, "t", [0], expected=2)
        assert [(r.offset, r.value) for r in read] == [(0, b"warm-up"), (1, b"dup")]
