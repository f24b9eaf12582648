"""The mock-cluster command's serve loop run on a thread in a test, with what it prints captured."""
from __future__ import annotations

import argparse
import io
import threading
import time
from contextlib import redirect_stdout
from types import TracebackType
from typing import List, Optional, Type

from kproducer.mock.cli import serve_forever


class ServeInBackground:
    """``serve_forever(args)`` on a thread while the ``with`` block runs: its standard output goes to
    :attr:`out`, its exit status to :attr:`result`; leaving the block stops it and joins the thread."""

    def __init__(self, args: argparse.Namespace, join_timeout: float = 10.0) -> None:
        self.args = args
        self.join_timeout = join_timeout
        self.stop = threading.Event()
        self.out = io.StringIO()
        self.result: List[int] = []
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with redirect_stdout(self.out):
            self.result.append(serve_forever(self.args, self.stop))

    def wait_for(self, text: str, timeout: float) -> str:
        """What was printed once it contains ``text``, or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while text not in self.out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.out.getvalue()

    def __enter__(self) -> "ServeInBackground":
        self.thread.start()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.stop.set()
        self.thread.join(self.join_timeout)
