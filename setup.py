"""Only the optional C accelerator lives here; all metadata is in setup.cfg.

The extension is optional: when it cannot be built (no compiler), kproducer installs and runs on its
pure-Python code paths, which produce identical bytes.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kproducer.protocol._speedups",
            ["kproducer/protocol/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
