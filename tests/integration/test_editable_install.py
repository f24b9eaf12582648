"""Issue 30 item 4: the README's ``pip install -e .`` behaves like a regular install for mypy and for PySpark.

A copy of this checkout is installed editable into a fresh virtual environment (pip's build isolation, as the
README's command does; the C accelerator is not compiled, to keep it short). Then ``mypy --strict`` of a user
script finds kproducer with its precise types (py.typed), and PySpark's own discovery of Python data sources
(``pyspark/sql/worker/lookup_data_sources.py``: ``pkgutil.iter_modules()`` over the workers' path) finds
``pyspark_kproducer`` and registers the ``kproducer`` format. Before the fix setuptools made the editable install
an import hook (a meta-path finder), which neither of them sees through."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, Iterator

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
_IGNORE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                 ".mypy_cache", ".ruff_cache", "*.so", ".benchmarks")

USER_SCRIPT = '''\
from kproducer import Producer
from kproducer.producer.future import RecordMetadata


def send_one(p: Producer) -> RecordMetadata:
    return p.send("t", b"v").get(10)


reveal_type(Producer(bootstrap_servers="127.0.0.1:9092").send("t", b"v").get(1).offset)
'''


def _env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def editable_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("editable")
    repo = base / "kproducer-checkout"
    shutil.copytree(REPO, repo, ignore=_IGNORE)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    # the README's command, run by this environment's pip for the new one (it has no pip of its own); CC=false:
    # the optional C accelerator fails to compile at once, so the install takes seconds
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-e",
                           str(repo)], capture_output=True, text=True, timeout=300, env=_env(CC="false"),
                          cwd=str(base))
    if done.returncode != 0:
        text = done.stdout + done.stderr
        if any(s in text for s in ("Could not find a version", "Failed to establish", "No matching distribution",
                                   "Temporary failure in name resolution", "Network is unreachable")):
            pytest.skip("pip could not fetch the build requirements (setuptools, wheel): " + text[-300:])
        raise AssertionError(f"pip install -e failed:\n{text[-3000:]}")
    yield python


def test_mypy_strict_finds_kproducer_and_its_types(editable_python: Path, tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(USER_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--python-executable", str(editable_python),
                           "--cache-dir", str(tmp_path / ".mypy_cache"), "--no-error-summary", "app.py"],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=_env())
    out = done.stdout + done.stderr
    assert "Cannot find implementation or library stub" not in out, out
    assert 'Revealed type is "builtins.int"' in out or 'Revealed type is "int"' in out, out
    assert done.returncode == 0 and "error:" not in out, out


def test_pysparks_discovery_finds_the_kproducer_data_source(editable_python: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    # pyspark, pyarrow and crcmod from this environment's site-packages: a PYTHONPATH entry, whose .pth files
    # (this environment's own editable kproducer) are not processed
    site = sysconfig.get_paths()["purelib"]
    code = ("import io, sys\n"
            "from pyspark.sql.worker.lookup_data_sources import _main\n"
            "out = io.BytesIO()\n"
            "_main(io.BytesIO(), out)\n"
            "sys.stdout.buffer.write(out.getvalue())\n"
            "import kproducer\n"
            "sys.stderr.write(kproducer.__file__)\n")
    done = subprocess.run([str(editable_python), "-c", code], capture_output=True, timeout=120, cwd=str(tmp_path),
                          env=_env(PYTHONPATH=site))
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert "kproducer-checkout" in done.stderr.decode()  # (the editable copy, not this checkout)
    data = done.stdout
    (count,) = struct.unpack(">i", data[:4])
    names = []
    pos = 4
    for _ in range(count):
        (n,) = struct.unpack(">i", data[pos:pos + 4])
        names.append(data[pos + 4:pos + 4 + n].decode())
        (m,) = struct.unpack(">i", data[pos + 4 + n:pos + 8 + n])
        pos += 8 + n + m
    assert "kproducer" in names, names
