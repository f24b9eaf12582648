"""A wakeup at a set time for the network thread's wait in epoll: a CLOCK_MONOTONIC timerfd in the selector's set.

The application's thread opens a batch and the network thread, waiting for I/O, must learn when that batch is due
(linger.ms). Writing to the selector's wakeup socket ends the wait now and costs the network thread an iteration
that only finds out when to wake up next; arming this timer at the batch's due time costs the application's
thread one system call and ends the wait when the batch is due, with no iteration before (issue 31).

The system calls are the compiled network accelerator's (network/_netio.c: ``timerfd_open``, ``timerfd_arm``),
or, without it, ctypes' (whose call costs the application's thread several times more for every new batch).
"""
from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from typing import Callable, Optional

from ..protocol.accel import MODULES, load

_netio_c = load(MODULES["network"])

log = logging.getLogger(__name__)

__all__ = ["WakeTimer"]


class WakeTimer:
    """A non-blocking timerfd on CLOCK_MONOTONIC (``time.monotonic()``'s clock on Linux). :meth:`arm` makes the
    fd readable at a time, and only moves an armed time earlier, never later, until :meth:`fired` (the
    selector saw it readable) disarms it. Thread-safe."""

    def __init__(self, fd: int, settime: Callable[[int, float], None]) -> None:
        self.fd = fd
        self._settime = settime  # (fd, absolute CLOCK_MONOTONIC ms): readable once then, rounded up to the ns
        self._lock = threading.Lock()
        self._at = math.inf  # the armed time (ms); inf when not armed

    @classmethod
    def create(cls) -> Optional["WakeTimer"]:
        """A timer, or None where there is none (not Linux, or no way to reach timerfd)."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            if _netio_c is not None and hasattr(_netio_c, "timerfd_arm"):
                return cls(_netio_c.timerfd_open(), _netio_c.timerfd_arm)
            return cls._create_ctypes()  # (os.timerfd_create is Python 3.13's)
        except (OSError, AttributeError, ImportError, TypeError) as e:
            log.debug("no timerfd (%s): a new batch wakes the network thread at once", e)
            return None

    @classmethod
    def _create_ctypes(cls) -> "WakeTimer":
        import ctypes

        class Timespec(ctypes.Structure):
            _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

        class Itimerspec(ctypes.Structure):
            _fields_ = [("it_interval", Timespec), ("it_value", Timespec)]

        libc = ctypes.CDLL(None, use_errno=True)
        timerfd_create = libc.timerfd_create
        timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        timerfd_create.restype = ctypes.c_int
        timerfd_settime = libc.timerfd_settime
        timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(Itimerspec), ctypes.c_void_p]
        timerfd_settime.restype = ctypes.c_int
        # TFD_NONBLOCK and TFD_CLOEXEC are O_NONBLOCK and O_CLOEXEC by definition
        fd = timerfd_create(time.CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        def settime(fd: int, deadline_ms: float) -> None:
            # rounded up: never before the time (a zero time would disarm the timer)
            ns = max(1, math.ceil(deadline_ms * 1e6))
            spec = Itimerspec(Timespec(0, 0), Timespec(*divmod(ns, 1_000_000_000)))  # (no interval: once)
            if timerfd_settime(fd, 1, ctypes.byref(spec), None) < 0:  # 1: TFD_TIMER_ABSTIME
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))

        return cls(fd, settime)

    def arm(self, deadline_ms: float) -> None:
        """Make the fd readable at ``deadline_ms`` (``time.monotonic()`` in ms) unless it is armed earlier."""
        with self._lock:
            if deadline_ms >= self._at:
                return
            if self.fd < 0:
                raise OSError("the timer is closed")
            self._settime(self.fd, deadline_ms)
            self._at = deadline_ms

    def fired(self) -> None:
        """The selector saw the fd readable: consume the expiry; the next :meth:`arm` sets a new time."""
        with self._lock:
            self._at = math.inf
            try:
                os.read(self.fd, 8)
            except (BlockingIOError, InterruptedError):
                pass

    def close(self) -> None:
        with self._lock:
            fd, self.fd = self.fd, -1
            self._at = -math.inf  # arm() does nothing from now on: no thread waits any more
        if fd >= 0:
            os.close(fd)
