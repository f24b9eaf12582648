"""The mock broker's structure: one handler table, one handler shape, imports only of kproducer.protocol
and itself, no import cycle between its modules and no import inside a function except for optional
dependencies."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Dict, List, Set

from kproducer.mock.apis import SERVED_APIS, SERVED_VERSIONS
from kproducer.mock.handlers import HANDLERS

MOCK = Path(__file__).resolve().parents[2] / "kproducer" / "mock"
#: function-local imports that are on purpose: the optional ``cryptography`` package (certs) and the
#: command line (cli), loaded only when used
LAZY_IMPORTS_ALLOWED = {("cluster.py", ".certs"), ("__init__.py", ".cli")}


def module_name(path: Path) -> str:
    rel = path.relative_to(MOCK.parent.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def mock_files() -> List[Path]:
    return sorted(MOCK.rglob("*.py"))


def test_every_served_api_has_one_handler_of_the_one_shape() -> None:
    keys = [api.key for api, _ in HANDLERS]
    assert len(keys) == len(set(keys))
    assert [a.key for a in SERVED_APIS] == keys and set(SERVED_VERSIONS) == set(keys)
    for api, handler in HANDLERS:
        params = list(inspect.signature(handler).parameters)
        assert params == ["ctx", "request"], f"{api.name}: {handler.__name__}{params}"


def test_imports_only_protocol_and_itself_without_cycles_or_local_imports() -> None:
    graph: Dict[str, Set[str]] = {}
    for path in mock_files():
        tree = ast.parse(path.read_text())
        name = module_name(path)
        deps = graph.setdefault(name, set())
        top_level = set(id(n) for n in tree.body)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = [resolve(path, node)] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for target in targets:
                if not target.startswith("kproducer"):
                    continue
                assert target.startswith(("kproducer.protocol", "kproducer.mock")), f"{name} imports {target}"
                if id(node) not in top_level:
                    relative = "." * node.level + (node.module or "") if isinstance(node, ast.ImportFrom) else target
                    assert (path.name, relative) in LAZY_IMPORTS_ALLOWED, f"{name}: import of {target} in a function"
                    continue
                if target.startswith("kproducer.mock"):
                    if not name.startswith(target + "."):  # its own package has run already
                        deps.add(target)
                    if isinstance(node, ast.ImportFrom):  # "from . import x" / "from .handlers import y"
                        deps.update(f"{target}.{a.name}" for a in node.names)
    modules = set(graph)
    for name in graph:
        graph[name] = {d for d in graph[name] if d in modules and d != name}

    # a module's package __init__ runs before it: a parent importing its child is not a cycle
    def cycle_from(start: str) -> List[str]:
        stack = [(start, [start])]
        seen: Set[str] = set()
        while stack:
            node, trail = stack.pop()
            for dep in graph[node]:
                if dep == start and not start.startswith(node + "."):
                    return trail + [dep]
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, trail + [dep]))
        return []

    for name in sorted(graph):
        cycle = cycle_from(name)
        assert not cycle, " -> ".join(cycle)
