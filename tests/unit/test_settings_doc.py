"""docs/settings.md is generated from kproducer/config.py by tools/gen_settings_doc.py: this test fails
when it is stale. Fix: ``python tools/gen_settings_doc.py`` and commit docs/settings.md."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from kproducer.config import SETTINGS, canonical_name

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "gen_settings_doc.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings_doc", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_settings_doc_is_up_to_date() -> None:
    current = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    assert _generator().render() == current, "docs/settings.md is stale: run python tools/gen_settings_doc.py"


def test_every_setting_and_spelling_is_documented() -> None:
    text = _generator().render()
    for java, setting in SETTINGS.items():
        assert f"| `{java}` |" in text, java
        row = next(line for line in text.splitlines() if line.startswith(f"| `{java}` |"))
        assert setting.doc.split(",")[0].replace("|", "\\|") in row, java
    for line in text.split("## Other spellings", 1)[1].splitlines():
        if line.startswith("| `"):
            name, java = (cell.strip().strip("`") for cell in line.split("|")[1:3])
            assert canonical_name(name) == java, line


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(_generator().render().replace("linger.ms", "linger.millis", 1), encoding="utf-8")
    run = subprocess.run([sys.executable, str(TOOL), "--check", "--output", str(stale)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1 and "linger.millis" in run.stdout and "gen_settings_doc.py" in run.stderr
    fixed = subprocess.run([sys.executable, str(TOOL), "--output", str(stale)], capture_output=True, text=True,
                           timeout=120)
    assert fixed.returncode == 0
    again = subprocess.run([sys.executable, str(TOOL), "--check", "--output", str(stale)], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again.stdout
