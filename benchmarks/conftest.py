"""Benchmarks: setup.cfg's addopts disable pytest-benchmark (``--benchmark-disable``, so that the benchmark
functions run once as quick tests); ``--benchmark-only`` here means "measure", so it turns them back on:
``python -m pytest benchmarks/ --benchmark-only`` (or ``--benchmark-enable``)."""
from __future__ import annotations

from typing import Any


def pytest_configure(config: Any) -> None:
    if config.getoption("benchmark_only", False):
        config.option.benchmark_enable = True
