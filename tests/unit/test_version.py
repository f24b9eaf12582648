"""kproducer's version lives in kproducer/_version.py (issue 31 item 5): the package re-exports it, setup.cfg reads
it, and no module inside the package takes it from the package itself (that worked only because ``__init__``
assigned it before importing them)."""
from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from pathlib import Path

import kproducer
from kproducer import _version

PACKAGE = Path(kproducer.__file__).parent


def test_the_package_re_exports_the_version_of_version_py() -> None:
    assert kproducer.__version__ == _version.__version__
    assert "__version__" in kproducer.__all__


def test_setup_cfg_reads_the_version_from_version_py() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(PACKAGE.parent / "setup.cfg")
    assert cfg["metadata"]["version"] == "attr: kproducer._version.__version__"


def test_no_module_of_the_package_imports_the_version_from_the_package() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        depth = len(path.relative_to(PACKAGE).parts) - 1  # the level of a relative import that names the package
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not any(a.name == "__version__" for a in node.names):
                continue
            from_package = (node.level == depth + 1 and not node.module) or (node.level == 0
                                                                             and node.module == "kproducer")
            if from_package:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []


def test_the_cli_reports_the_version_when_imported_first() -> None:
    # (a fresh interpreter: the command-line module is the first thing imported)
    out = subprocess.run([sys.executable, "-c", "import kproducer.cli as c, sys; sys.exit(c.main(['--version']))"],
                         capture_output=True, text=True, timeout=120, cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"kproducer {_version.__version__}"
