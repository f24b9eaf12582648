"""Issue 12, lifecycle items that need no broker: the exit flush bound, and the exponential backoff of
InitProducerId retries (KIP-580), on the scripted transport and a FakeClock.

(Fork safety, a producer dropped without close() and interpreter exit run against the MockCluster in
tests/integration/test_lifecycle_mock.py.)"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List

import pytest

from kproducer.errors import ProducerClosedError, ProducerForkedError
from kproducer.producer import lifecycle
from kproducer.producer.transaction_manager import State
from kproducer.protocol import messages as m

from scripted import DISCONNECT, Harness, SentRequest

COORDINATOR_LOAD_IN_PROGRESS = 14  # retriable: the same request is sent again after the backoff
COORDINATOR_NOT_AVAILABLE = 15


def gaps(requests: List[SentRequest]) -> List[float]:
    times = [r.written_ms for r in requests]
    return [b - a for a, b in zip(times, times[1:])]


def failed_init(code: int) -> Dict[str, Any]:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


# -- exit flush bound ------------------------------------------------------------------------------

@pytest.mark.parametrize("delivery_timeout_ms, expected_s", [
    (120_000, 30.0),  # the default delivery.timeout.ms: the 30 s cap
    (5_000, 5.0),  # records expire before the cap anyway
    (30_000, 30.0),
    (0, 0.0),
])
def test_exit_flush_is_bounded_by_delivery_timeout_and_30_seconds(delivery_timeout_ms: int,
                                                                  expected_s: float) -> None:
    assert lifecycle.EXIT_FLUSH_MAX_S == 30.0
    assert lifecycle.exit_flush_seconds(delivery_timeout_ms) == expected_s


def test_the_fork_error_is_a_closed_error_that_says_what_to_do() -> None:
    err = ProducerForkedError()
    assert isinstance(err, ProducerClosedError)
    assert "cannot be used across fork()" in str(err) and "create a new Producer in the child" in str(err)
    assert not err.retriable


# -- InitProducerId backoff (KIP-580) -----------------------------------------------------------------

def test_idempotent_init_producer_id_backoff_doubles_up_to_the_maximum_and_resets_after_success() -> None:
    h = Harness(enable_idempotence=True, retry_backoff_ms=100, retry_backoff_max_ms=1000, idle_advance=True)
    h.selector.script(m.INIT_PRODUCER_ID, *[failed_init(COORDINATOR_NOT_AVAILABLE)] * 6)
    h.boot()  # retried until the seventh attempt succeeds
    sent = h.selector.sent(m.INIT_PRODUCER_ID)
    assert len(sent) == 7
    assert gaps(sent) == [100, 200, 400, 800, 1000, 1000]
    assert h.txn is not None and h.txn.has_producer_id()

    # the id is lost later (e.g. UNKNOWN_PRODUCER_ID): a new round of failures starts again at retry.backoff.ms
    h.selector.script(m.INIT_PRODUCER_ID, failed_init(COORDINATOR_NOT_AVAILABLE),
                      failed_init(COORDINATOR_NOT_AVAILABLE))
    h.txn.request_reset("test")
    h.run_until(lambda: not h.txn.has_producer_id())  # type: ignore[union-attr]
    h.boot()
    again = h.selector.sent(m.INIT_PRODUCER_ID)[7:]
    assert len(again) == 3
    assert gaps(again) == [100, 200]


def test_idempotent_init_producer_id_backoff_grows_after_disconnections_too() -> None:
    h = Harness(enable_idempotence=True, retry_backoff_ms=50, retry_backoff_max_ms=300, idle_advance=True)
    h.selector.script(m.INIT_PRODUCER_ID, DISCONNECT, DISCONNECT, DISCONNECT, DISCONNECT)
    h.boot()
    sent = h.selector.sent(m.INIT_PRODUCER_ID)
    assert len(sent) == 5
    # each gap is at least the backoff (reconnecting may add a little, never less)
    for gap, backoff in zip(gaps(sent), [50, 100, 200, 300]):
        assert backoff <= gap < backoff + 100, gaps(sent)


def test_init_producer_id_backoff_jitter_stays_within_twenty_percent() -> None:
    h = Harness(enable_idempotence=True, retry_backoff_ms=100, retry_backoff_max_ms=1000, retry_jitter=0.2,
                idle_advance=True)
    h.selector.script(m.INIT_PRODUCER_ID, *[failed_init(COORDINATOR_NOT_AVAILABLE)] * 8)
    h.boot()
    observed = gaps(h.selector.sent(m.INIT_PRODUCER_ID))
    assert len(observed) == 8
    for gap, nominal in zip(observed, [100, 200, 400, 800, 1000, 1000, 1000, 1000]):
        # +/-20 % around the doubled value, never above retry.backoff.max.ms
        assert 0.8 * nominal <= gap <= min(1.2 * nominal, 1000), observed


def test_transactional_init_producer_id_backoff_doubles_up_to_the_maximum() -> None:
    h = Harness(transactional_id="tx-1", enable_idempotence=True, retry_backoff_ms=100, retry_backoff_max_ms=500,
                idle_advance=True)
    h.selector.handlers[m.FIND_COORDINATOR.key] = lambda req: {
        "error_code": 0, "node_id": 1, "host": "broker1", "port": 9092,
        "coordinators": [{"key": "tx-1", "node_id": 1, "host": "broker1", "port": 9092, "error_code": 0}]}
    h.selector.script(m.INIT_PRODUCER_ID, *[failed_init(COORDINATOR_LOAD_IN_PROGRESS)] * 5)
    assert h.txn is not None
    result = h.txn.init_transactions()
    h.run_until(result.is_done, max_iterations=500)
    assert result.error is None
    assert h.txn.state is State.READY and h.txn.has_producer_id()
    sent = h.selector.sent(m.INIT_PRODUCER_ID)
    assert len(sent) == 6
    assert gaps(sent) == [100, 200, 400, 500, 500]


# -- a Producer collected while open ---------------------------------------------------------------

class _StubSender:
    def __init__(self) -> None:
        self.close_calls = 0

    def initiate_close(self) -> None:
        self.close_calls += 1


def test_a_collected_producer_is_closed_even_when_its_warning_is_turned_into_an_error() -> None:
    sender = _StubSender()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(ResourceWarning, match="Producer was not closed; call close"):
            lifecycle._collected_while_open(sender, "client-1", os.getpid())  # type: ignore[arg-type]
    assert sender.close_calls == 1  # the network thread was told to drain and stop before the warning


def test_a_producer_collected_in_a_forked_child_is_left_alone() -> None:
    sender = _StubSender()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        lifecycle._collected_while_open(sender, "client-1", os.getpid() + 1)  # type: ignore[arg-type]
    assert sender.close_calls == 0  # (the parent's thread is not ours to stop, and no warning)
