"""The examples run end to end on the embedded mock cluster (the README's main command runs quickstart)."""
from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_quickstart_prints_offsets(capsys: pytest.CaptureFixture[str]) -> None:
    assert _load("quickstart").main(["--count", "12"]) == 0
    out = capsys.readouterr().out
    assert out.count("callback: quickstart-") == 12
    assert "future.get(): quickstart-" in out
    assert "13 records delivered" in out


def test_keyed_ordering_keeps_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert _load("keyed_ordering").main(["--per-key", "150"]) == 0
    out = capsys.readouterr().out
    assert "all keys kept their order" in out
    assert "OUT OF ORDER" not in out
