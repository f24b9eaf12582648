"""Loads kproducer's optional compiled accelerators, one per layer, unless ``KPRODUCER_PURE_PYTHON`` is set.

Each layer has its own C extension module beside the Python it speeds up (docs/design.md, "The compiled
accelerators"): ``protocol/_records`` (the record encoder, CRC32C, murmur2, columns, the Produce codec),
``network/_netio`` (the network thread's socket I/O, Linux), ``producer/_send`` (send()'s fast path, futures,
metrics bookkeeping; it needs ``_records``) and ``_aio`` (the asyncio face). Each layer asks :func:`load` for its
own module and uses the pure-Python twin, which gives identical results, when it gets None. A module that was
not built (no compiler at install time) leaves only its layer on the twin; the first one missing is logged
once, at INFO. ``KPRODUCER_PURE_PYTHON=1`` (also ``true``/``yes``) forces the twins everywhere.

This is the one place that reports which is in use: :data:`IMPLEMENTATION` (computed on access) and
:func:`implementations`.
"""
from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Dict, Optional

log = logging.getLogger(__name__)

#: the compiled module of each layer (by its import name)
MODULES: Dict[str, str] = {
    "protocol": "kproducer.protocol._records",
    "network": "kproducer.network._netio",
    "producer": "kproducer.producer._send",
    "aio": "kproducer._aio",
}

#: the pure-Python twins are forced for every layer (``KPRODUCER_PURE_PYTHON``)
FORCED_PURE = os.environ.get("KPRODUCER_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes")

_loaded: Dict[str, Optional[ModuleType]] = {}


def load(name: str) -> Optional[ModuleType]:
    """The compiled module ``name`` (an import name), or None: forced off, or not built (its layer then runs its
    pure-Python twin; the first module found missing is logged once, at INFO, with the reason)."""
    if name in _loaded:
        return _loaded[name]
    module: Optional[ModuleType] = None
    if not FORCED_PURE:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # not compiled (no C compiler at install time), or a module it needs is not
            level = logging.DEBUG if any(v is None for v in _loaded.values()) else logging.INFO
            log.log(level, "kproducer's compiled %s is not available (%s): that layer uses its pure-Python "
                    "code (the same results, more CPU per record)", name, exc)
    _loaded[name] = module
    return module


#: the protocol layer's compiled module (``kproducer/protocol/_records.c``), or None
records: Optional[ModuleType] = load(MODULES["protocol"])


def implementations() -> Dict[str, str]:
    """Each layer's implementation: ``{"protocol": "compiled" | "pure-python", "network": ..., ...}``."""
    return {layer: "compiled" if load(name) is not None else "pure-python" for layer, name in MODULES.items()}


def _implementation() -> str:
    impls = implementations()
    kinds = set(impls.values())
    if len(kinds) == 1:
        return kinds.pop()
    return "mixed (" + ", ".join(f"{layer} {kind}" for layer, kind in impls.items()) + ")"


def __getattr__(name: str) -> str:
    # IMPLEMENTATION: "compiled" (every layer), "pure-python" (none), or "mixed (protocol compiled, ...)";
    # computed on access, as the higher layers' modules load after this one
    if name == "IMPLEMENTATION":
        return _implementation()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
