"""benchmarks/profile_sender.py on the MockCluster (small bursts): each tool reports what it measured, the A/B runner
refuses a burst that ran other code than the checkout it was meant for, and a burst that lost records fails."""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, List

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import profile_sender  # noqa: E402

pytestmark = [pytest.mark.timeout(240)]


def test_burst_alternates_two_checkouts_each_burst_in_a_fresh_process(capsys: pytest.CaptureFixture[str]) -> None:
    args = profile_sender.parse(["burst", "--mock", "-n", "20000", "--trials", "2", "--ab", REPO])
    results = profile_sender.burst(args)
    assert sorted(results) == ["ab", "this"]
    pids = set()
    for runs in results.values():
        assert len(runs) == 2
        for r in runs:
            assert os.path.realpath(r["kproducer"]) == os.path.realpath(REPO)
            assert r["msgs_per_s"] > 0
            assert 0 < r["net_us"] < r["cpu_us"]  # the network thread is part of the process
            pids.add(r["pid"])
    assert len(pids) == 4
    out = capsys.readouterr().out
    # the order alternates: the second trial starts with the other checkout
    order = [line.split()[2] for line in out.splitlines() if line.startswith("trial ")]
    assert order == ["this", "ab", "ab", "this"]
    assert f"this ({REPO}), 2 bursts of 20,000 (batch)" in out


def test_a_burst_that_imported_another_checkout_s_code_is_refused(tmp_path: Any) -> None:
    """A checkout without kproducer on the path falls back to the installed one: the A/B would compare the code
    with itself, so the runner says so instead of printing figures."""
    with profile_sender.Broker(mock=True, pin_cpu=None) as broker:
        with pytest.raises(RuntimeError, match="imported kproducer from"):
            profile_sender.run_child(str(tmp_path), broker.bootstrap, broker.topic(), 1000, "send", None)


def test_a_burst_with_records_not_acknowledged_fails() -> None:
    class Stub:
        def __init__(self, metrics: Dict[str, int]) -> None:
            self._metrics = metrics

        def metrics(self) -> Dict[str, int]:
            return self._metrics

    profile_sender.check_acknowledged(Stub({"record-ack-total": 10, "record-error-total": 0}), 10)
    with pytest.raises(RuntimeError, match="acknowledged 9 of 10 records and failed 0"):
        profile_sender.check_acknowledged(Stub({"record-ack-total": 9, "record-error-total": 0}), 10)
    with pytest.raises(RuntimeError, match="failed 1"):
        profile_sender.check_acknowledged(Stub({"record-ack-total": 10, "record-error-total": 1}), 10)


def test_calls_counts_the_calls_of_the_profiled_iterations_only() -> None:
    result = profile_sender.calls(profile_sender.parse(["calls", "--mock", "-n", "20000", "--iterations", "30",
                                                        "--mode", "send"]))
    assert result["iterations"] == 30
    python = result["python"]

    def count(suffix: str) -> int:
        return sum(v for k, v in python.items() if k.startswith("producer/sender.py:") and k.endswith(suffix))

    assert count("run_once") == 30  # once per profiled iteration: nothing from before or after
    assert 0 < count("send_producer_data") <= 30
    assert result["c"]


def test_split_s_parts_add_up_to_the_network_thread_s_cpu() -> None:
    """Each part's own time has its timed children taken out: the parts add up to the network thread's CPU time
    (up to the iteration under way when the clock was read), not to a multiple of it."""
    per_request = profile_sender.split(profile_sender.parse(["split", "--mock", "-n", "20000", "--bursts", "2"]))
    for _module, cls, method in profile_sender.PARTS:
        assert per_request.get(f"{cls}.{method}", 0.0) >= 0.0
    assert per_request["Sender.run_once"] > 0 and per_request["NetworkClient.send"] > 0
    total = sum(per_request.values())  # = the network thread's CPU per request
    assert total > 0
    assert abs(per_request["(outside the sender iterations)"]) < 0.25 * total


def test_paced_runs_each_client_in_a_fresh_process_and_nets_out_the_pacing_loop(
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("confluent_kafka")
    args = profile_sender.parse(["paced", "--mock", "--rate", "2000", "--seconds", "0.5", "--trials", "2",
                                 "--clients", "null,kproducer,confluent-kafka", "--ab", REPO])
    results = profile_sender.paced(args)
    runs = results[2000.0]
    assert sorted(runs) == ["confluent-kafka", "kproducer", "kproducer@ab", "null"]
    pids = {r["pid"] for rs in runs.values() for r in rs}
    assert len(pids) == 8  # 4 clients x 2 trials, each in its own process
    for label in ("kproducer", "kproducer@ab"):
        for r in runs[label]:
            assert os.path.realpath(r["kproducer"]) == os.path.realpath(REPO)
            assert 0 < r["net_us"] < r["cpu_us"]  # the network thread is part of the process
            assert r["records_per_request"] >= 1 and r["wakeups_per_record"] > 0
    assert all(r["cpu_us"] > 0 for rs in runs.values() for r in rs)
    out = capsys.readouterr().out
    order = [line.split()[3] for line in out.splitlines() if line.startswith("trial ")]
    assert order[:4] == ["null", "kproducer", "confluent-kafka", "kproducer@ab"]
    assert order[4:] == ["kproducer", "confluent-kafka", "kproducer@ab", "null"]  # the order rotates
    assert "net of the do-nothing loop's" in out and "network thread" in out


def test_pace_sends_the_count_asked_at_about_the_rate_asked() -> None:
    calls: List[float] = []
    start = time.perf_counter()
    n = profile_sender.pace(lambda: calls.append(time.perf_counter()), 1000, 0.05)
    assert n == len(calls) == 50
    assert calls[-1] - start >= 0.049  # the 50th record is due 49 ms in: never ahead of the schedule
