#!/usr/bin/env python3
"""Write the generated parts of kproducer/protocol/errors.py from its ERROR_TABLE.

ERROR_TABLE (and the hand-written code around it) is the source; this script rewrites

* the literal ``__all__`` list: every public top-level name of the module, in file order, with the
  error classes where the generated block stands (a literal list, so that mypy and ``import *``
  see every name), and
* the block between ``# BEGIN GENERATED ERROR CLASSES`` and ``# END GENERATED ERROR CLASSES``:
  one class per table row, its bases and one-line docstring (name, code, retriable, categories)
  taken from the row.

Usage::

    python tools/gen_errors.py           # rewrite the file in place
    python tools/gen_errors.py --check   # exit 1 (and show a diff) if the file is out of step

The table is read with :mod:`ast` from the file's text (not by importing the module), so the script
still works while the classes disagree with the table, which makes the import fail.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

ERRORS_PY = Path(__file__).resolve().parent.parent / "kproducer" / "protocol" / "errors.py"

BEGIN = "# BEGIN GENERATED ERROR CLASSES\n"
END = "# END GENERATED ERROR CLASSES\n"

# category column -> the words the class docstring uses for it (in the table's column order)
CATEGORY_WORDS: Dict[str, str] = {
    "invalid_metadata": "invalid metadata",
    "coordinator_moved": "coordinator moved",
    "fenced": "fenced",
    "txn_fatal": "fatal for transactions",
    "txn_abortable": "aborts the transaction",
    "authentication": "authentication",
}

class GeneratorError(Exception):
    """The file does not have the shape this script expects."""


def read_table(tree: ast.Module) -> Tuple[Any, ...]:
    """ERROR_TABLE's rows, by running only the typing import, ErrorSpec and the table."""
    wanted: List[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "typing":
            wanted.append(node)
        elif isinstance(node, ast.ClassDef) and node.name == "ErrorSpec":
            wanted.append(node)
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "ERROR_TABLE"
        ):
            wanted.append(node)
    if len(wanted) < 3:
        raise GeneratorError("could not find the typing import, ErrorSpec and ERROR_TABLE")
    namespace: Dict[str, Any] = {}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(ERRORS_PY), "exec"), namespace)
    table: Tuple[Any, ...] = namespace["ERROR_TABLE"]
    return table


def class_docstring(spec: Any) -> str:
    categories = [words for column, words in CATEGORY_WORDS.items() if getattr(spec, column)]
    summary = f"{spec.name} (code {spec.code}, {'retriable' if spec.retriable else 'not retriable'}"
    if categories:
        summary += "; " + ", ".join(categories)
    return f'    """{summary})."""'


def render_classes(table: Sequence[Any]) -> str:
    out: List[str] = []
    for spec in table:
        bases = "BrokerResponseError, AuthenticationError" if spec.authentication else "BrokerResponseError"
        out += ["", "", f"class {spec.class_name}({bases}, code={spec.code}):"]
        out.append(class_docstring(spec))
    return "\n".join(out) + "\n\n"


def public_names(tree: ast.Module, begin: int, end: int) -> List[Optional[str]]:
    """Public top-level names defined outside the generated block, in file order; the generated
    block's position is marked by None."""
    names: List[Optional[str]] = []
    marked = False
    for node in tree.body:
        if node.lineno - 1 > begin and not marked:
            names.append(None)
            marked = True
        if begin < node.lineno - 1 < end:
            continue
        found: List[str] = []
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            found = [node.name]
        elif isinstance(node, ast.Assign):
            found = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found = [node.target.id]
        names += [n for n in found if not n.startswith("_")]
    if not marked:
        names.append(None)
    return names


def render(text: str) -> str:
    """The whole file as it should be."""
    tree = ast.parse(text)
    table = read_table(tree)
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise GeneratorError(f"expected exactly one {BEGIN.strip()!r} and one {END.strip()!r} line")
    lines = text.splitlines(keepends=True)
    begin = lines.index(BEGIN)  # 0-based line indexes of the two marker lines
    end = lines.index(END)
    if end < begin:
        raise GeneratorError("the END line comes before the BEGIN line")
    tail = "".join(lines[end + 1 :])

    all_nodes = [
        node for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    ]
    if len(all_nodes) != 1 or all_nodes[0].end_lineno is None:
        raise GeneratorError("expected exactly one `__all__ = [...]` assignment")
    all_node = all_nodes[0]
    names: List[str] = []
    for name in public_names(tree, begin, end):
        if name is None:
            names += [spec.class_name for spec in table]
        elif name != "__all__":
            names.append(name)
    all_text = "__all__ = [\n" + "".join(f'    "{name}",\n' for name in names) + "]\n"

    before_all = "".join(lines[: all_node.lineno - 1])
    after_all = "".join(lines[all_node.end_lineno : begin])
    return before_all + all_text + after_all + BEGIN + render_classes(table) + END + tail


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only report whether the file is in step")
    parser.add_argument("--path", type=Path, default=ERRORS_PY, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    path: Path = args.path
    text = path.read_text(encoding="utf-8")
    try:
        wanted = render(text)
    except GeneratorError as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    if wanted == text:
        return 0
    if args.check:
        diff = difflib.unified_diff(
            text.splitlines(keepends=True), wanted.splitlines(keepends=True),
            fromfile=f"{path} (now)", tofile=f"{path} (from ERROR_TABLE)",
        )
        sys.stderr.writelines(diff)
        print(f"{path} is out of step with its ERROR_TABLE: run python tools/gen_errors.py", file=sys.stderr)
        return 1
    path.write_text(wanted, encoding="utf-8")
    print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
