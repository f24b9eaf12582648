"""benchmarks/compare.py's table: what it prints for a row (the script itself runs brokers and clients)."""
from __future__ import annotations

import os
import sys
from typing import List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))

import compare  # noqa: E402


def _cells(line: str) -> List[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_a_row_shows_every_trial_s_cpu_beside_the_fastest_trial_s() -> None:
    """The fastest trial by msg/s is the row's figure; its CPU need not be the lowest, so every trial's CPU is
    shown too, in trial order."""
    run = compare.Run("kproducer send_batch()", "kproducer", "kproducer", "batch")
    run.result = {"elapsed": 0.1, "cpu": 0.09, "idempotent": True, "peak_rss_mb": 40.0, "rss_setup_mb": 25.0,
                  "errors": 0}
    run.trials = [1.5e6, 2.0e6]
    run.trial_cpu = [0.41, 0.45]
    run.verified = True
    lines = compare.table(100, 200_000, [run]).splitlines()
    header = _cells(lines[2])
    row = _cells(next(line for line in lines if line.startswith("| kproducer send_batch()")))
    assert len(row) == len(header)
    assert row[header.index("CPU µs/record")] == "0.45"
    assert row[header.index("all trials, CPU µs")] == "0.41 / 0.45"
    assert row[header.index("all trials, msg/s")] == "1500k / 2000k"
    assert row[header.index("verified")] == "yes"


def test_a_row_that_did_not_run_has_every_column() -> None:
    run = compare.Run("aiokafka", "aiokafka", "aiokafka")
    run.error = "not installed"
    lines = compare.table(100, 200_000, [run]).splitlines()
    assert len(_cells(lines[-1])) == len(_cells(lines[2])) and "not installed" in lines[-1]
