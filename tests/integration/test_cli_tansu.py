"""``kproducer produce`` and ``kproducer perf`` against a real broker (tansu), read back with kafka-python."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Set

import pytest

from kproducer import cli
from tests.readback import consume

pytestmark = [
    pytest.mark.broker,
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


def test_produce_to_tansu_read_back(tansu: Any, new_topic: Callable[..., str], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    topic = new_topic(3)
    lines = [f"key{i % 4}|value {i}" for i in range(50)]
    data = tmp_path / "in.txt"
    data.write_text("\n".join(lines) + "\n")
    rc = cli.main(["produce", "--bootstrap", tansu.bootstrap, "--topic", topic, "--file", str(data),
                   "--key-separator", "|", "--header", "origin=cli", "--header", "empty=",
                   "--compression", "gzip", "-X", "linger.ms=2"])
    assert rc == 0, capsys.readouterr().err
    got = consume(tansu.bootstrap, topic, range(3), len(lines), timeout=20)
    assert sorted((r.key, r.value) for r in got) == sorted(
        (f"key{i % 4}".encode(), f"value {i}".encode()) for i in range(50))
    assert all(list(r.headers) == [("origin", b"cli"), ("empty", b"")] for r in got)
    # same key, same partition; within a partition, the file's order
    by_key: Dict[bytes, Set[int]] = {}
    for r in got:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    for p in range(3):
        values = [int(r.value.split()[1]) for r in sorted(got, key=lambda r: r.offset) if r.partition == p]
        assert values == sorted(values)


def test_perf_against_tansu(tansu: Any, new_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    topic = new_topic(6)
    for extra in ([], ["--batch", "--chunk-size", "500"]):
        rc = cli.main(["perf", "--bootstrap", tansu.bootstrap, "--topic", topic, "--num-records", "3000",
                       "--record-size", "100", "--json", "--reporting-interval", "0", *extra])
        out = capsys.readouterr().out
        assert rc == 0
        doc = json.loads(out)
        assert doc["records"] == 3000 and doc["errors"] == 0 and doc["records_per_sec"] > 0
        assert doc["p99_ms"] >= doc["p50_ms"] > 0
    assert len(consume(tansu.bootstrap, topic, range(6), 6000, timeout=20)) == 6000
