"""What happens to a producer around ``fork()``, when it is dropped without ``close()``, and at
interpreter exit (see docs/network.md, "A producer's life").

* **fork()**: a child process inherits the parent's producers as copies without their network thread
  (threads do not survive fork) but with the parent's sockets. Every producer created in the parent is
  marked *forked* in the child: its public calls raise :class:`~kproducer.errors.ProducerForkedError`
  at once and ``close()`` only drops it (nothing is written to the shared sockets). A producer created
  in the child works as usual.
* **dropped without close()**: the network thread holds no reference to the public
  :class:`~kproducer.Producer`, so the producer object can be collected while records are queued. Then
  a ``ResourceWarning`` is emitted and the thread stops accepting records, delivers what is queued
  (or lets it expire after ``delivery.timeout.ms``, as always) and ends; nothing is failed on purpose.
* **interpreter exit**: every producer still open (in use or dropped and still delivering) gets up to
  ``min(delivery.timeout.ms, 30 s)`` to deliver its records, all producers at the same time; then it
  is closed (what is left fails with ProducerClosedError, as a ``close(timeout)`` that expires).
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

if TYPE_CHECKING:
    from .kafka_producer import Producer
    from .sender import Sender

log = logging.getLogger(__name__)

#: the longest a still-open producer flushes at interpreter exit, in seconds (Java's close() without a
#: timeout waits without bound; an exiting program should not hang for ever on an unreachable cluster)
EXIT_FLUSH_MAX_S = 30.0
#: after the flush time, how long a force-stopped network thread gets to fail its records and end
_STOP_WAIT_S = 5.0

UNCLOSED_WARNING = "Producer was not closed; call close() or use it as a context manager"


class _Open:
    """A producer that was not closed: its exit flush bound and a weak reference to the public Producer
    (dead once that was collected). It must not reference the network thread, its key in ``_open``: a
    value that holds its weak key keeps it alive for ever."""

    __slots__ = ("exit_flush_s", "producer")

    def __init__(self, exit_flush_s: float, producer: "weakref.ref[Producer]") -> None:
        self.exit_flush_s = exit_flush_s
        self.producer = producer


_lock = threading.RLock()  # (reentrant: a finalizer or __del__ may close a producer while it is held)
# every producer made in this process whose object still exists (for the fork hook)
_producers: "weakref.WeakSet[Producer]" = weakref.WeakSet()
# producers not closed, by network thread. Weak keys: a running thread is referenced by threading itself,
# so an entry stays while the thread delivers and goes when both the thread ended and the Producer is gone.
_open: "weakref.WeakKeyDictionary[Sender, _Open]" = weakref.WeakKeyDictionary()


def exit_flush_seconds(delivery_timeout_ms: float) -> float:
    """How long a producer that is still open flushes at interpreter exit."""
    return max(0.0, min(delivery_timeout_ms / 1000.0, EXIT_FLUSH_MAX_S))


def register(producer: "Producer", sender: "Sender", exit_flush_s: float) -> "weakref.finalize[Any, Any]":
    """Track a new producer (its network thread is started); returns the finalizer that warns when the
    Producer is collected without close() (``detach()`` it in close())."""
    with _lock:
        _producers.add(producer)
        _open[sender] = _Open(exit_flush_s, weakref.ref(producer))
    finalizer = weakref.finalize(producer, _collected_while_open, sender, producer.client_id, os.getpid())
    finalizer.atexit = False  # interpreter exit is handled by _close_at_exit (bounded flush)
    return finalizer


def closing(sender: "Sender") -> None:
    """The producer is being closed by close(): exit needs to do nothing more for it."""
    with _lock:
        _open.pop(sender, None)


def _collected_while_open(sender: "Sender", client_id: str, pid: int) -> None:
    """The Producer object was garbage-collected while open: warn, and let its network thread deliver what
    is queued and end (it stays in ``_open`` so that interpreter exit bounds the wait)."""
    if os.getpid() != pid:
        return  # a forked child's copy (the fork hook detaches these; this covers a fork during register())
    if threading.current_thread() is sender:
        # collected by the cyclic GC on the network thread itself, which may hold the accumulator's lock:
        # only clear the flag (queued batches still go out as they become ready)
        sender.running = False
        sender.wakeup()
    else:
        sender.initiate_close()
    log.info("producer %s was dropped without close(): delivering its queued records, then stopping its "
             "network thread", client_id)
    # last: with -W error::ResourceWarning this raises (and is printed as "Exception ignored in")
    warnings.warn(f"{UNCLOSED_WARNING} (client.id={client_id}); its queued records are still being sent",
                  ResourceWarning, stacklevel=1)


def _close_at_exit() -> None:
    """Interpreter exit: give every producer still open a bounded time to deliver, all at once, then close."""
    with _lock:
        pending: List[Tuple["Sender", float, Optional["Producer"]]] = [
            (sender, o.exit_flush_s, o.producer()) for sender, o in _open.items() if sender.is_alive()]
        _open.clear()
    if not pending:
        return
    log.info("interpreter exit: %d producer(s) were not closed; flushing them for up to %.0f s",
             len(pending), max(bound for _, bound, _ in pending))
    start = time.monotonic()
    for sender, _, producer in pending:  # everyone stops accepting records and starts draining now
        if producer is not None:
            producer._refuse_records()  # (not through close(): that waits, one producer after the other)
        sender.initiate_close()
    for sender, bound, producer in pending:
        remaining = max(0.0, bound - (time.monotonic() - start))
        try:
            if producer is not None:
                producer.close(remaining)  # (joins the thread, then force-stops it when time is up)
            else:
                sender.join(remaining)
                if sender.is_alive():
                    log.warning("interpreter exit: a dropped producer's records were not all delivered within "
                                "%.0f s; failing the rest", bound)
                    sender.force_stop()
                    sender.join(_STOP_WAIT_S)
        except Exception:  # one producer must not keep the others from closing
            log.warning("interpreter exit: closing a producer failed", exc_info=True)


# -- fork ---------------------------------------------------------------------------------------------

def _before_fork() -> None:
    _lock.acquire()  # the child gets the registry in a consistent state


def _after_fork_in_parent() -> None:
    _lock.release()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # (the parent's is held by the forking thread; the child starts afresh)
    _open.clear()  # the parent's network threads do not exist here: nothing to flush at exit
    for producer in list(_producers):
        try:
            producer._mark_forked()
        except Exception:  # never fail a fork over this
            pass
    _producers.clear()


def _install() -> None:
    atexit.register(_close_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_after_fork_in_child)


_install()

__all__ = ["EXIT_FLUSH_MAX_S", "UNCLOSED_WARNING", "closing", "exit_flush_seconds", "register"]
