"""ProducerBatch's base: the fields the compiled append uses (builder, closed, thunks) live in _send.BatchBase
(compiled) or its twin batch._BatchFieldsPy (pure Python); FastSend reads them through BatchBase's struct and
takes only batch types built on it."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from typing import Any

import pytest

from kproducer.producer import batch as batch_mod
from kproducer.producer.batch import ProducerBatch
from kproducer.protocol.accel import MODULES, load
from kproducer.protocol.records import RecordBatchBuilder

send_c = load(MODULES["producer"])
FIELDS = ("builder", "closed", "thunks")


def test_the_appended_fields_live_in_the_base_chosen_at_import() -> None:
    base = ProducerBatch.__mro__[1]
    assert base is (batch_mod._BatchFieldsPy if send_c is None else send_c.BatchBase)
    assert not set(FIELDS) & set(ProducerBatch.__slots__)
    b = ProducerBatch("t", 0, RecordBatchBuilder(1024), 0.0)
    assert (b.closed, b.thunks, type(b.builder)) == (False, [], RecordBatchBuilder)
    b.closed = True
    assert b.closed is True


def test_an_unset_field_raises_attribute_error_as_a_slot_does() -> None:
    b = ProducerBatch.__new__(ProducerBatch)
    for name in FIELDS:
        with pytest.raises(AttributeError):
            getattr(b, name)


def test_a_cycle_through_the_base_fields_is_collected() -> None:
    class Batch(ProducerBatch):  # (a subclass gets a __weakref__ slot)
        pass

    b = Batch("t", 0, RecordBatchBuilder(1024), 0.0)
    b.thunks = [(print, b)]  # type: ignore[list-item]
    ref = weakref.ref(b)
    del b
    for _ in range(3):
        if ref() is None:
            break
        gc.collect()
    assert ref() is None


@pytest.mark.skipif(send_c is None, reason="the compiled accelerator is not built (or is disabled)")
def test_fast_send_takes_only_batch_types_built_on_batch_base() -> None:
    from tests.unit.test_fast_send import Env, _fast_send_kwargs, _producer

    class SlotBatch:  # the fields as plain slots (what FastSend once read by offset) are refused now
        __slots__ = FIELDS

    env = Env()
    try:
        p = _producer(env, True)
        assert send_c is not None
        send_c.FastSend(**_fast_send_kwargs(p))
        with pytest.raises(TypeError, match="BatchBase"):
            send_c.FastSend(**{**_fast_send_kwargs(p), "batch_type": SlotBatch})
    finally:
        env.close()


@pytest.mark.skipif(send_c is None, reason="the compiled accelerator is not built (or is disabled)")
def test_without_the_compiled_producer_module_the_batch_uses_the_twin() -> None:
    code = ("import sys\nsys.modules['kproducer.producer._send'] = None  # (import raises ImportError)\n"
            "from kproducer.producer.batch import ProducerBatch\nprint(ProducerBatch.__mro__[1].__name__)\n")
    env: Any = {k: v for k, v in os.environ.items() if k != "KPRODUCER_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "_BatchFieldsPy"
