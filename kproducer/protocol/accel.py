"""Loads the optional compiled accelerator (``_speedups``), unless ``KPRODUCER_PURE_PYTHON`` is set.

Every accelerated function has a pure-Python twin producing identical results; callers pick the
compiled one when :data:`speedups` is not None.
"""
from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Optional

log = logging.getLogger(__name__)

speedups: Optional[ModuleType] = None
if os.environ.get("KPRODUCER_PURE_PYTHON", "").strip() not in ("1", "true", "yes"):
    try:
        from . import _speedups as speedups  # type: ignore[attr-defined,no-redef,unused-ignore]
    except ImportError:  # not compiled (no C compiler at install time): the pure-Python paths run
        log.debug("kproducer's compiled accelerator is not available; using pure Python")
        speedups = None

#: "compiled" or "pure-python", for diagnostics and benchmark reports
IMPLEMENTATION = "compiled" if speedups is not None else "pure-python"
