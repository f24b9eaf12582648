"""One Producer per Python worker process and configuration, created on first use, closed at exit.

Spark reuses Python worker processes between tasks (``spark.python.worker.reuse``, on by default), so
a task finds the producer an earlier task of the same query (or of an earlier one with the same
settings) opened, with its connections and metadata already in place.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Dict, Mapping, Tuple

from ..config import reveal
from ..producer.kafka_producer import Producer

log = logging.getLogger(__name__)

Key = Tuple[Tuple[str, str], ...]

_lock = threading.Lock()
_producers: Dict[Key, Producer] = {}
_owner_pid = os.getpid()

#: seconds close_all() waits at exit for anything still queued (every task flushes before it returns,
#: so normally there is nothing)
CLOSE_TIMEOUT_S = 10.0


def _key(settings: Mapping[str, str]) -> Key:
    # by the secrets' values: str() of a Password is "[hidden]" for every password
    return tuple(sorted((k, str(reveal(v))) for k, v in settings.items()))


def _check_fork() -> None:
    # a forked child inherits the dict but not the producers' threads: forget them without closing
    global _owner_pid
    pid = os.getpid()
    if pid != _owner_pid:
        _producers.clear()
        _owner_pid = pid


def get_producer(settings: Mapping[str, str]) -> Producer:
    """The process's producer for these settings, created on first use."""
    key = _key(settings)
    with _lock:
        _check_fork()
        producer = _producers.get(key)
        if producer is None:
            producer = Producer(dict(settings))
            _producers[key] = producer
            log.info("kproducer sink: new producer %s in worker process %d", producer.client_id, os.getpid())
        return producer


def discard_producer(settings: Mapping[str, str], timeout: float = 0.0) -> None:
    """Close and forget the producer for these settings (after a failed task, so that the next task
    starts with a fresh one: queued records of the failed task are dropped, not sent later)."""
    with _lock:
        _check_fork()
        producer = _producers.pop(_key(settings), None)
    if producer is not None:
        try:
            producer.close(timeout)
        except Exception:  # the task is failing already; its own error is the one to report
            log.warning("kproducer sink: closing producer %s failed", producer.client_id, exc_info=True)


def close_all(timeout: float = CLOSE_TIMEOUT_S) -> None:
    """Close every cached producer of this process (registered with :mod:`atexit`)."""
    with _lock:
        _check_fork()
        producers = list(_producers.values())
        _producers.clear()
    for producer in producers:
        try:
            producer.close(timeout)
        except Exception:
            log.warning("kproducer sink: closing producer %s failed", producer.client_id, exc_info=True)


def cached_count() -> int:
    """How many producers this process holds (for tests)."""
    with _lock:
        _check_fork()
        return len(_producers)


atexit.register(close_all)

__all__ = ["CLOSE_TIMEOUT_S", "cached_count", "close_all", "discard_producer", "get_producer"]
