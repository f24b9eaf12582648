"""kproducer's version: the one place it is written (setup.cfg reads it; ``kproducer.__version__`` re-exports it).

Modules inside the package import it from here, not from the package, whose ``__init__`` is still running when
they are imported."""
__version__ = "0.1.0"
