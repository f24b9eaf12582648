#!/usr/bin/env bash
# Mutation testing of the producer core, on demand (not in CI): docs/testing.md, "Mutation testing".
#
#   tools/mutation.sh                       # the core: accumulator sender idempotence transaction_manager
#                                           #   buffer_pool batch records partitioner
#   tools/mutation.sh idempotence batch     # some modules (names under kproducer/producer/, or records)
#
# Runs mutmut 3 (pip install -e '.[mutation]') in a COPY of the tree (kproducer/, tests/, setup.*,
# pyproject.toml copied to a temporary directory): the working tree is never mutated, so it is safe while
# other people work in it. One worker by default, and a time bound; then a kill-rate table per module and
# the survivors. Settings (environment):
#   MUTATION_MINUTES  stop after this many minutes (default 40); mutants not run by then count as not run
#   MUTATION_CHILDREN mutmut's --max-children (default 1: the machine has 2 cores, others run tests too)
#   MUTATION_PYTEST_ARGS  more pytest arguments, e.g. "--deselect tests/unit/test_x.py::test_y" for a test
#                     that fails in the tree as it is (mutmut needs every selected test to pass unmutated)
#   MUTATION_MUTANTS  only these mutants (names as the table below prints them, or globs such as
#                     'kproducer.producer.batch.*grow*'): to check that a new test kills the survivors
#   MUTATION_DIR      the copy's directory (default: a new one under $TMPDIR); kept after the run, for
#                     `cd $MUTATION_DIR && mutmut show <mutant>` / `mutmut results`
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
minutes="${MUTATION_MINUTES:-40}"
children="${MUTATION_CHILDREN:-1}"
"$python" -c 'import mutmut' 2>/dev/null || {
    echo "mutmut is not installed: $python -m pip install -e '$root[mutation]'" >&2; exit 2; }

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(accumulator sender idempotence transaction_manager buffer_pool batch records partitioner)
only=()
for m in "${modules[@]}"; do
    case "$m" in
        records) path=kproducer/protocol/records.py ;;
        */*|*.py) path="$m" ;;
        *) path="kproducer/producer/$m.py" ;;
    esac
    [ -f "$root/$path" ] || { echo "no module $path" >&2; exit 2; }
    only+=("$path")
done

work="${MUTATION_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/kproducer-mutation.XXXXXX")}"
mkdir -p "$work"
echo "== copying the tree to $work"
tar -C "$root" --exclude=__pycache__ --exclude='*.pyc' -cf - kproducer tests setup.cfg setup.py pyproject.toml README.md \
    | tar -C "$work" -xf -
{
    echo
    cat "$root/tools/mutmut.cfg"
    for a in ${MUTATION_PYTEST_ARGS:-}; do echo "    $a"; done  # (continues pytest_add_cli_args)
    echo "only_mutate ="
    for p in "${only[@]}"; do echo "    $p"; done
} >> "$work/setup.cfg"

cd "$work"
echo "== mutmut run (${only[*]}; $children worker(s), at most $minutes min)"
set +e
set -f  # (MUTATION_MUTANTS: names or globs for mutmut, split on spaces, not expanded by the shell)
# shellcheck disable=SC2086
timeout --signal=INT --kill-after=60 "$((minutes * 60))" "$python" -m mutmut run --max-children "$children" \
    ${MUTATION_MUTANTS:-} > "$work/mutmut-run.log" 2>&1
rc=$?
set -e +f
[ $rc -eq 0 ] || echo "mutmut stopped with status $rc (124, 130 or 137: the time bound) -- see $work/mutmut-run.log" >&2
"$python" -m mutmut results --all true > "$work/results.txt" 2>/dev/null || true
"$python" - "$work/results.txt" <<'PY'
import collections
import sys

counts = collections.defaultdict(collections.Counter)
survivors = []
for line in open(sys.argv[1], encoding="utf-8"):
    name, sep, status = line.strip().rpartition(": ")
    if not sep or ".x" not in name:
        continue
    module = name.split(".x", 1)[0]
    counts[module][status] += 1
    if status in ("survived", "no tests", "timeout", "suspicious"):
        survivors.append(f"{status:10} {name}")
print(f"{'module':42} {'mutants':>7} {'killed':>6} {'survived':>8} {'no tests':>8} {'other':>6} {'kill rate':>9}")
for module in sorted(counts):
    c = counts[module]
    total = sum(c.values())
    killed = c["killed"]
    other = total - killed - c["survived"] - c["no tests"]
    run = total - c["not checked"]
    rate = f"{100.0 * killed / run:.1f}%" if run else "-"
    print(f"{module:42} {total:7} {killed:6} {c['survived']:8} {c['no tests']:8} {other:6} {rate:>9}")
print()
print("\n".join(survivors) if survivors else "no survivors")
PY
echo
echo "(the copy: $work -- 'cd $work && $python -m mutmut show <name>' shows a mutant's diff)"
