"""Only the optional C accelerators live here; all metadata is in setup.cfg.

One extension module per layer, beside the Python it speeds up (docs/design.md, "The compiled accelerators").
Each is optional: when one cannot be built (no compiler), kproducer installs and that layer runs its
pure-Python twin, which produces identical bytes. producer/_send.c uses protocol/_records.c's C API (a capsule).
"""
import os

from setuptools import Extension, setup

# KPRODUCER_REQUIRE_ACCELERATOR=1 (the wheel builds: pyproject.toml's [tool.cibuildwheel]) makes a module that
# does not compile fail the build instead of leaving its layer on the pure-Python twin
_OPTIONAL = os.environ.get("KPRODUCER_REQUIRE_ACCELERATOR", "").strip().lower() not in ("1", "true", "yes")

_COMMON = ["kproducer/protocol/_ccommon.h"]
_RECORDS = [*_COMMON, "kproducer/protocol/_records.h"]
_SEND_METHOD = ["kproducer/producer/_sendmethod.h"]


def _ext(name: str, source: str, depends: "list[str]") -> Extension:
    return Extension(name, [source], depends=depends, optional=_OPTIONAL, extra_compile_args=["-O2"])


setup(
    ext_modules=[
        _ext("kproducer.protocol._records", "kproducer/protocol/_records.c", _RECORDS),
        _ext("kproducer.network._netio", "kproducer/network/_netio.c", _COMMON),
        _ext("kproducer.producer._send", "kproducer/producer/_send.c", [*_RECORDS, *_SEND_METHOD]),
        _ext("kproducer._aio", "kproducer/_aio.c", [*_COMMON, *_SEND_METHOD]),
    ]
)
