"""The send core (kproducer/producer/core.py): the narrow API the send paths share, and the one owner of
the rules it holds (touching a topic, a key's partition, room in the pool, appending runs)."""
from __future__ import annotations

import ast
import asyncio
import gc
import pathlib
import threading
import time
import weakref
from typing import Any, Iterator, List, Set

import pytest

import kproducer.aio
from kproducer import Producer
from kproducer.aio import AsyncProducer
from kproducer.errors import ProducerClosedError
from kproducer.producer.buffer_pool import BufferPool
from kproducer.producer.columnar import send_columns
from kproducer.producer.core import TOPIC_TOUCH_MS, SendCore
from kproducer.producer.kafka_producer import send_core
from kproducer.producer.partitioner import partition_for_key
from kproducer.protocol.columns import BinaryColumn
from tests.unit.producer_env import ProducerEnv, producer_env

#: attributes with a leading underscore that aio.py may read on objects that are not its own: the
#: standard library's (sys._getframe)
_STDLIB_PRIVATE = {"_getframe"}


def _own_names(tree: ast.Module) -> Set[str]:
    """The underscore names aio.py defines itself: its classes' slots, methods and attributes it assigns."""
    own: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            for const in ast.walk(node.value):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    own.add(const.value)
        elif isinstance(node, (ast.Name, ast.arg)) and isinstance(getattr(node, "ctx", ast.Store()), ast.Store):
            own.add(node.id if isinstance(node, ast.Name) else node.arg)
    return own


def _root_is(node: ast.AST, names: Set[str], self_attrs: Set[str]) -> bool:
    """Whether the chain ``node`` (attributes, calls, subscripts) starts at one of the local ``names``,
    ``self.<one of self_attrs>`` or a ``send_core(...)`` call."""
    while True:
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return node.attr in self_attrs
            node = node.value
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "send_core":
                return True
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return isinstance(node, ast.Name) and node.id in names


def private_reaches(source: str) -> List[str]:
    """``x._name`` in ``source`` (aio.py) that reaches into an object that is not its own: a name it does not
    define itself (``pool._waiters``, ``sf._batch``, ...), or any private name on the producer, the send core or
    what was got from them (``p._closed`` where ``p = self._producer``); and private imports."""
    tree = ast.parse(source)
    own = _own_names(tree)
    # what holds the producer or its parts: self._producer, self._core, and what is got from them
    self_attrs = {"_producer", "_core"}
    names: Set[str] = set()
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    for _ in range(10):  # (to a fixed point: each round adds what the previous round's names feed)
        before = len(names) + len(self_attrs)
        for a in assigns:
            if _root_is(a.value, names, self_attrs):
                for target in a.targets:
                    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(t, ast.Name):
                            names.add(t.id)
                        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            self_attrs.add(t.attr)
        if len(names) + len(self_attrs) == before:
            break
    reaches: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            receiver = node.value
            on_self = isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
            if not on_self and node.attr not in own and node.attr not in _STDLIB_PRIVATE:
                reaches.append(f"line {node.lineno}: .{node.attr}")
            elif not on_self and _root_is(receiver, names, self_attrs):
                reaches.append(f"line {node.lineno}: .{node.attr} of the producer or its parts")
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level > 0:
            reaches.extend(f"line {node.lineno}: import {a.name}" for a in node.names
                           if a.name.startswith("_") and not a.name.startswith("__"))
    return reaches


def test_aio_makes_no_private_reach_into_the_producers_parts() -> None:
    """aio.py reads the producer through the send core (kproducer/producer/core.py) and the public API only."""
    path = pathlib.Path(kproducer.aio.__file__)
    assert private_reaches(path.read_text()) == []


@pytest.mark.parametrize("source, found", [
    ("class A:\n    __slots__ = ('_mine',)\n    def f(self, p):\n        return p._pool, self._mine\n", 1),
    ("class A:\n    def f(self):\n        p = self._producer\n        return p._closed\n", 1),
    ("class A:\n    def f(self):\n        self._pool = self._core.pool\n        pool = self._pool\n"
     "        return pool._waiters, self._closed\n", 1),
    ("from .producer.future import _FailedSend\n", 1),
    ("class A:\n    __slots__ = ('_run',)\n    def f(self, rec):\n        return rec._run, self._core.touch\n", 0),
])
def test_the_reach_check_sees_a_reach(source: str, found: int) -> None:
    """(the check above can fail: each kind of reach is found, an own attribute is not)"""
    assert len(private_reaches(source)) == found


@pytest.fixture
def env() -> Iterator[ProducerEnv]:
    yield from producer_env(ProducerEnv({"t": [1] * 6, "u": [1, 1]}))


class _CountingMetadata:
    def __init__(self, real: Any) -> None:
        self.real = real
        self.added: List[str] = []

    def add_topic(self, topic: str) -> None:
        self.added.append(topic)
        self.real.add_topic(topic)

    @property
    def cluster(self) -> Any:
        return self.real.cluster


def test_touch_notes_a_topic_at_most_once_per_period(env: ProducerEnv) -> None:
    core = send_core(env.producer())
    counting = core.metadata = _CountingMetadata(core.metadata)  # type: ignore[assignment]
    core.touch("t", 10_000.0)
    core.touch("t", 10_000.0 + TOPIC_TOUCH_MS)  # (not more than the period later)
    core.touch("u", 10_500.0)
    core.touch("t", 10_001.0 + TOPIC_TOUCH_MS)
    assert counting.added == ["t", "u", "t"]
    assert core.touched == {"t": 10_001.0 + TOPIC_TOUCH_MS, "u": 10_500.0}


def _touches(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    seen: List[str] = []
    real = SendCore.touch

    def touch(self: SendCore, topic: str, now: float) -> None:
        seen.append(topic)
        real(self, topic, now)

    monkeypatch.setattr(SendCore, "touch", touch)
    return seen


@pytest.mark.parametrize("how", ["send", "send_batch", "send_columns", "aio"])
def test_every_send_path_touches_through_the_core(env: ProducerEnv, monkeypatch: pytest.MonkeyPatch,
                                                  how: str) -> None:
    """send()'s Python path, send_batch(), send_columns() and the asyncio producer's staged records all touch the
    topic with SendCore.touch (the one place the rule is written)."""
    seen = _touches(monkeypatch)
    p = env.producer(linger_ms=60000)
    p.partitions_for("t")  # (waits for the metadata: no touch)
    assert seen == []
    if how == "send":
        p.send("t", b"v", partition=1)
    elif how == "send_batch":
        p.send_batch("t", [b"a", b"b"])
    elif how == "send_columns":
        send_columns(p, "t", BinaryColumn.from_values([b"a", b"b"]))
    else:
        async def main() -> None:
            ap = AsyncProducer(producer=p)
            await ap.start()
            fut = await ap.send("t", b"v")
            await ap.send("t", b"w")
            ap._flush_staged()
            assert fut._locate() is not None  # appended

        asyncio.run(main())
    assert "t" in seen


def test_key_partition_is_murmur2_through_the_one_cache(env: ProducerEnv) -> None:
    p = env.producer()
    core = send_core(p)
    for key in (b"21", b"foobar", b"abc", b"a-little-bit-long-string"):
        assert core.key_partition(key, 6) == partition_for_key(key, 6)
        assert key in core.admission.hash_cache


def test_room_in_the_pool(env: ProducerEnv) -> None:
    p = env.producer(buffer_memory=1 << 20, batch_size=16384)
    core = send_core(p)
    assert core.can_stage(1 << 20) and core.has_room(1 << 20)
    assert not core.can_stage((1 << 20) + 1) and not core.has_room((1 << 20) + 1)


def test_append_run_keyless_spreads_batch_sized_runs(env: ProducerEnv) -> None:
    """A keyless run goes to partitions in batch-sized runs (the sticky choice of send_batch())."""
    p = env.producer(linger_ms=60000, batch_size=1024)
    p.partitions_for("t")
    core = send_core(p)
    segments: List[Any] = []
    values = [b"x" * 100] * 40
    core.append_run("t", None, 1_700_000_000_000, None, values, core.monotonic_ms(), segments)
    parts = [b.partition for b, _first, _count, _rows in segments]
    assert sum(count for _b, _f, count, _r in segments) == 40
    assert len(set(parts)) > 1
    keyed: List[Any] = []
    core.append_run("t", 3, 1_700_000_000_000, [b"k"] * 5, [b"v"] * 5, core.monotonic_ms(), keyed)
    assert [(b.partition, count) for b, _f, count, _r in keyed] == [(3, 5)]


def test_the_core_does_not_keep_the_producer_alive(env: ProducerEnv) -> None:
    """The core refers to the producer's metadata wait weakly (the producer holds the core): it holds neither
    the producer nor a bound method of it, and once the producer is gone its wait says the producer closed."""
    p: Producer = env.producer()
    ref = weakref.ref(p)
    core = send_core(p)
    assert not any(x is p or getattr(x, "__self__", None) is p for x in gc.get_referents(core))
    env.producers.remove(p)
    p.close(timeout=0)
    del p
    gc.collect()
    assert ref() is None
    with pytest.raises(ProducerClosedError):
        core.wait_on_metadata("t", None, 0)


def test_no_room_while_a_thread_waits_for_memory() -> None:
    """A thread queued for memory comes first: nothing is stageable (-1) and can_take() is False until it got
    its memory, even for 0 bytes."""
    pool = BufferPool(4096, 1024)
    held = pool.allocate(4096, 0)
    assert pool.free_unless_waited() == 0 and pool.can_take(0) and not pool.can_take(1)
    waiter = threading.Thread(target=pool.allocate, args=(1024, 60_000))
    waiter.start()
    for _ in range(2000):  # (bounded: until the thread is queued)
        if pool.queued():
            break
        time.sleep(0.005)
    assert pool.queued() == 1
    assert pool.free_unless_waited() == -1 and not pool.can_take(0)
    pool.deallocate(held)
    waiter.join(10)
    assert not waiter.is_alive()
    assert pool.free_unless_waited() == 3072 and pool.can_take(3072) and not pool.can_take(3073)


_PACKAGE = pathlib.Path(kproducer.aio.__file__).parent


def test_only_the_gate_writes_its_byte(env: ProducerEnv) -> None:
    """The gate (gate.Gate) is closed through its close(): no other module writes its byte."""
    import re

    from kproducer.producer.gate import Gate

    writes = re.compile(r"(gate|flag)\s*\[\s*0\s*\]\s*=[^=]")
    found = [f"{path.relative_to(_PACKAGE)}:{n}" for path in sorted(_PACKAGE.rglob("*.py"))
             if path.name != "gate.py" for n, line in enumerate(path.read_text().splitlines(), 1)
             if writes.search(line)]
    assert found == []
    p = env.producer()
    gate = p._accumulator.gate
    assert type(gate) is Gate and gate.flag == bytearray(b"\x01")
    core = send_core(p)
    assert core.accepting()
    p._sender.fatal_error = ProducerClosedError("stand-in for a fatal error")
    assert gate.flag[0] == 0 and not core.accepting()


def test_the_python_send_paths_share_the_admission_rules(env: ProducerEnv) -> None:
    """The plain-record test, the timestamp check and the size bound are admission.py's functions; the Python
    send paths (kafka_producer.py, aio.py) call them instead of writing their own copies."""
    from kproducer.producer.admission import (
        BOUND_EXTRA,
        MAX_TIMESTAMP,
        check_timestamp,
        plain_record,
        record_size,
        valid_timestamp,
    )

    for path in (_PACKAGE / "producer" / "kafka_producer.py", _PACKAGE / "aio.py"):
        assert "MAX_TIMESTAMP" not in path.read_text(), path  # (the timestamp rule's bound, written there)
    assert [valid_timestamp(t) for t in (0, MAX_TIMESTAMP, -1, MAX_TIMESTAMP + 1, True, 1.0, None)] == \
        [True, True, False, False, False, False, False]
    with pytest.raises(ValueError, match="timestamp_ms"):
        check_timestamp(-1)
    assert [plain_record(k, v, h) for k, v, h in [
        (None, None, None), (b"k", b"v", []), (b"k", b"v", {}), (None, b"v", [("h", None)]),
        ("k", b"v", None), (b"k", bytearray(b"v"), None)]] == [True, True, True, False, False, False]
    p = env.producer(max_request_size=1000)
    assert p._admission.size_limit == send_core(p).size_limit == 1000 - BOUND_EXTRA
    assert record_size(b"k", b"v" * 90, None) == 10 + 91
    with pytest.raises(Exception, match="max.request.size"):
        p._admission.check_sizes(None, [b"v" * (1000 - BOUND_EXTRA - 9)], None)
    p._admission.check_sizes(None, [b"v" * (1000 - BOUND_EXTRA - 10)], None)
