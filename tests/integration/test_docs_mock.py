"""Issue 30 item 10: every ```python block of README.md and docs/*.md runs, against a MockCluster, so the docs
cannot drift from the code.

The blocks of one page run in order in one namespace (as a reader goes down the page), with ``servers`` (and
``BOOT``) bound to the bootstrap servers of a 3-broker MockCluster that has the topics the pages use. A string
literal that is a placeholder broker address (``"127.0.0.1:9092"``, ``"h:9092"``, ``"broker1:9092"``, ...) is
replaced by those servers. A block with top-level ``await`` runs on an asyncio loop. What a block needs besides
that is said by HTML comments right above its fence (invisible on a rendered page):

``<!-- docs-test: skip REASON -->``
    the block is not run; the reason says why (and what runs it instead).
``<!-- docs-test: setup CODE -->``
    Python run first in the page's namespace (names the block takes as given, e.g. a callback).
``<!-- docs-test: column N -->``
    a side-by-side comparison: only the text from column N of each line (kproducer's side) is run.
``<!-- docs-test: keep-addresses -->``
    the block's addresses are not replaced (a scripted transport's broker names).
``<!-- docs-test: config-only -->``
    ``Producer(...)`` only checks the settings (ProducerConfig): a recipe for a cloud service's brokers.

Producers left open by a page are closed after it.
"""
from __future__ import annotations

import ast
import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional

import pytest

from kproducer.config import ProducerConfig
from kproducer.mock import MockCluster

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
TOPICS = ("t", "topic", "events", "orders", "out", "in")
PLACEHOLDERS = ("127.0.0.1:9092", "localhost:9092", "h:9092", "broker1:9092,broker2:9092", "broker1:9092",
                "broker:9092", "broker:9093", "HOST:9093")
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<directive>[\w-]+)(?:\s+(?P<arg>.*?))?\s*-->\s*$")


class Block(NamedTuple):
    page: Path
    line: int  # of the first line of code (1-based)
    code: str
    directives: Dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def python_blocks(page: Path) -> List[Block]:
    """The ```python blocks of a page, with the docs-test directives of the comment lines right above each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: List[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or not m.group(2):
            i += 1
            continue
        lang = m.group(2)
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if lang == "python":
            directives: Dict[str, str] = {}
            k = i - 1
            while k >= 0 and _MARKER.match(lines[k]):
                d = _MARKER.match(lines[k])
                assert d is not None
                name, arg = d.group("directive"), d.group("arg") or ""
                directives[name] = (arg + "\n" + directives[name]) if name in directives else arg
                k -= 1
            out.append(Block(page, i + 2, "\n".join(lines[i + 1:j]), directives))
        i = j + 1
    return out


def _prepare(block: Block, servers: str) -> str:
    code = block.code
    column = block.directives.get("column")
    if column is not None:
        n = int(column)
        code = "\n".join(line[n:] for line in code.splitlines())
    code = textwrap.dedent(code)
    if "keep-addresses" not in block.directives:
        for placeholder in PLACEHOLDERS:
            for quote in ('"', "'"):
                code = code.replace(f"{quote}{placeholder}{quote}", f"{quote}{servers}{quote}")
    return code


def _close_leftovers(namespace: Dict[str, Any]) -> None:
    from kproducer import Producer

    for value in list(namespace.values()):
        if isinstance(value, Producer) and not value._closed:
            value.close(0)


def _run(code: str, block: Block, namespace: Dict[str, Any]) -> None:
    compiled = compile(code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & 0x80:  # CO_COROUTINE: the block awaits at top level
        asyncio.run(eval(compiled, namespace))  # noqa: S307 - our own docs
    else:
        exec(compiled, namespace)  # noqa: S102 - our own docs


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(num_brokers=3) as c:
        for topic in TOPICS:
            c.create_topic(topic, partitions=6)
        yield c


def test_every_python_block_is_found_and_a_skip_says_why() -> None:
    blocks = [b for page in PAGES for b in python_blocks(page)]
    assert len(blocks) >= 30
    for b in blocks:
        assert set(b.directives) <= {"skip", "setup", "column", "keep-addresses", "config-only"}, b.where
        if "skip" in b.directives:
            assert len(b.directives["skip"]) > 10, f"{b.where}: a skip says why"
    skipped = [b.where for b in blocks if "skip" in b.directives]
    assert len(skipped) < len(blocks) / 3, skipped  # (most blocks run)


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_the_python_blocks_of_a_page_run(page: Path, cluster: MockCluster) -> None:
    from kproducer import Producer

    namespace: Dict[str, Any] = {"__name__": f"docs_{page.stem}", "servers": cluster.bootstrap_servers,
                                 "BOOT": cluster.bootstrap_servers}
    ran = 0
    try:
        for block in python_blocks(page):
            if "skip" in block.directives:
                continue
            code = _prepare(block, cluster.bootstrap_servers)
            real_producer: Optional[Any] = None
            if "config-only" in block.directives:
                real_producer = namespace.get("Producer", Producer)
                namespace["Producer"] = lambda *args, **kwargs: ProducerConfig(*args, **kwargs)
            try:
                setup = block.directives.get("setup")
                if setup:
                    exec(compile(setup, f"{block.where} (setup)", "exec"), namespace)  # noqa: S102
                _run(code, block, namespace)
            except BaseException as e:  # noqa: B902 - name the block
                raise AssertionError(f"{block.where}: the block fails as written: {type(e).__name__}: {e}\n"
                                     f"{code}") from e
            finally:
                if real_producer is not None:
                    namespace["Producer"] = real_producer
            ran += 1
    finally:
        _close_leftovers(namespace)
    assert ran >= 1
