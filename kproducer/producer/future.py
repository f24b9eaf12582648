"""RecordMetadata and the light per-record future that resolves through its batch."""
from __future__ import annotations

import inspect
import logging
import numbers
import threading
import time
import weakref
from types import FunctionType, MethodType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import KafkaTimeoutError, NetworkThreadWaitError
from ..protocol.accel import MODULES, load

if TYPE_CHECKING:
    from .batch import ProducerBatch

_send_c = load(MODULES["producer"])

log = logging.getLogger(__name__)


class RecordMetadata(NamedTuple):
    """Where a record was stored. ``offset`` is -1 when acks=0 (the broker does not say)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


Callback = Callable[[Optional[RecordMetadata], Optional[BaseException]], None]

#: the functions known to take (metadata, exception), by the id of their code object (a lambda written in a
#: loop is a new function each time, with the same code): id -> the code object (held, so that its id is not
#: reused); a bound method's function under -id. Read by send() and by the compiled send() (_send.c).
CALLBACK_CODES: Dict[int, Any] = {}
_CALLBACK_OTHERS: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _accepts(fn: Any, n: int) -> Optional[bool]:
    """Whether ``fn`` can be called with ``n`` positional arguments; None when its signature is unknown."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # (a builtin without a signature: assume it can)
        return None
    try:
        sig.bind(*([None] * n))
    except TypeError:
        return False
    return True


def _code_key(callback: Any) -> Optional[Tuple[int, Any]]:
    """(key in :data:`CALLBACK_CODES`, code) of a function, a bound method of one, or an object whose class
    defines ``__call__`` in Python (called as that bound method); None for other callables."""
    if type(callback) is FunctionType:
        code = callback.__code__
        return id(code), code
    if type(callback) is MethodType and type(callback.__func__) is FunctionType:
        code = callback.__func__.__code__
        return -id(code), code
    # an object whose class defines __call__ in Python: called as that bound method (looked up on the type, as
    # the interpreter and the compiled send() look it up)
    call = next((c.__dict__["__call__"] for c in type(callback).__mro__ if "__call__" in c.__dict__), None)
    if type(call) is FunctionType:
        code = call.__code__
        return -id(code), code
    return None


def check_callback(callback: Any, call: str = "send()") -> None:
    """TypeError at once, naming ``callback``, when it is not a callable that takes ``(metadata, exception)``
    (rather than a TypeError logged for every record when it is called). Checked once per function or
    method (by its code object) or per other callable object (weakly held)."""
    key = _code_key(callback)
    if key is not None:
        if key[0] in CALLBACK_CODES:
            return
    elif not callable(callback):
        raise TypeError(f"{call}: callback must be a callable taking (metadata, exception), got {callback!r}")
    else:
        try:
            if _CALLBACK_OTHERS.get(callback):
                return
        except TypeError:  # (not weakly referable, or unhashable: checked each time)
            pass
    if _accepts(callback, 2) is False:
        hint = ""
        if _accepts(callback, 1):
            hint = (" (kafka-python's one-argument callbacks: future.add_callback(fn) calls fn(metadata) on "
                    "success, future.add_errback(fn) fn(exception) on failure)")
        try:
            sig = str(inspect.signature(callback))
        except (TypeError, ValueError):
            sig = "(?)"
        raise TypeError(f"{call}: callback {_callable_name(callback)}{sig} cannot be called as "
                        f"callback(metadata, exception): it must take two positional arguments, exactly one of "
                        f"which is None{hint}")
    if key is not None:
        if len(CALLBACK_CODES) > 4096:  # (functions made from ever new code objects: keep it bounded)
            CALLBACK_CODES.clear()
        CALLBACK_CODES[key[0]] = key[1]
    else:
        try:
            _CALLBACK_OTHERS[callback] = True
        except TypeError:
            pass


def _success_only(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Callback:
    """kafka-python's add_callback: ``fn(metadata, *args, **kwargs)`` when the record succeeded."""
    def on_done(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        if exc is None:
            fn(md, *args, **kwargs)
    return on_done


def _failure_only(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Callback:
    """kafka-python's add_errback: ``fn(exception, *args, **kwargs)`` when the record failed."""
    def on_done(md: Optional[RecordMetadata], exc: Optional[BaseException]) -> None:
        if exc is not None:
            fn(exc, *args, **kwargs)
    return on_done


def _check_extra(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], call: str, first: str) -> None:
    if not callable(fn):
        raise TypeError(f"{call}: expected a callable, got {fn!r}")
    try:
        inspect.signature(fn).bind(None, *args, **kwargs)
    except ValueError:  # (no signature known)
        return
    except TypeError as e:
        raise TypeError(f"{call}: {_callable_name(fn)} cannot be called as fn({first}"
                        f"{', *args' if args else ''}{', **kwargs' if kwargs else ''}): {e}") from None


def on_network_thread() -> bool:
    """Whether the calling thread is a producer's network thread (kproducer.producer.sender.Sender), where send
    callbacks run: nothing there may wait for a record, a flush or metadata (only that thread brings them)."""
    return getattr(threading.current_thread(), "kproducer_network_thread", False) is True


def network_thread_wait_error(call: str, why: str,
                              hint: str = "wait outside the callback, or use the future's add_callback()"
                              ) -> NetworkThreadWaitError:
    """The error of a wait asked for on the network thread (see :func:`on_network_thread`)."""
    return NetworkThreadWaitError(
        f"{call} cannot wait on the producer's network thread (it was called from a send callback): {why}, and "
        f"only that thread can change it: it would wait for itself (a deadlock); {hint}")


def check_timeout(timeout: Any, call: str) -> Optional[float]:
    """A wait's ``timeout`` (seconds) as a float, or None for no limit: None, +inf, or longer than the
    ``threading`` module can wait (``threading.TIMEOUT_MAX``, about 292 years). A negative one times out at
    once. TypeError when it is not a number (a bool is not one), ValueError for NaN, both naming ``call``."""
    if timeout is None:
        return None
    given: Any = timeout  # (not narrowed by the checks below)
    if type(timeout) is not float and type(timeout) is not int and (
            isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)):
        raise TypeError(f"{call}: timeout must be a number of seconds or None, got {timeout!r}")
    try:
        seconds = float(timeout)
    except OverflowError:  # an int beyond a float: "forever", or at once for a negative one
        return None if given > 0 else 0.0
    if seconds != seconds:
        raise ValueError(f"{call}: timeout must be a number of seconds or None, got {timeout!r}")
    return None if seconds > threading.TIMEOUT_MAX else seconds


class _FutureFieldsPy:
    """The fields of a per-record future: the pure-Python twin of ``_send.FutureBase``."""

    __slots__ = ("_batch", "_delta", "timestamp", "key_size", "value_size")

    def __init__(self, batch: "ProducerBatch", delta: int, timestamp: int, key_size: int, value_size: int) -> None:
        self._batch = batch
        self._delta = delta
        self.timestamp = timestamp
        self.key_size = key_size
        self.value_size = value_size


if TYPE_CHECKING:
    _FutureBase = _FutureFieldsPy
else:
    _FutureBase = _send_c.FutureBase if _send_c is not None else _FutureFieldsPy


class FutureRecordMetadata(_FutureBase):
    """The result of one ``send()``. Cheap: it holds its batch and its position in it; waiting and
    completion go through the batch, so there is no lock or event per record."""

    __slots__ = ()

    def _resolve(self) -> "ProducerBatch":
        # a batch split after MESSAGE_TOO_LARGE hands its records over to smaller batches
        batch = self._batch
        while batch.split_into is not None:
            batch, self._delta = batch.split_into[self._delta]
            self._batch = batch
        return batch

    def done(self) -> bool:
        return self._resolve().is_done()

    def get(self, timeout: Optional[float] = None) -> RecordMetadata:
        """Block until the record is acknowledged; raise its error. ``timeout`` in seconds (None or inf: no
        limit)."""
        timeout = check_timeout(timeout, "future.get()")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            batch = self._resolve()
            if batch.is_done():
                break
            if on_network_thread():
                raise network_thread_wait_error("future.get()", "the record is not acknowledged yet")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0 or not batch.wait(remaining):
                if self._resolve().is_done():
                    continue
                raise KafkaTimeoutError(f"record not acknowledged within {timeout} s (future.get timeout)")
        err = batch.error
        if err is not None:
            raise err
        return self._metadata(batch)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """Wait like :meth:`get` and return the error (None on success)."""
        timeout = check_timeout(timeout, "future.exception()")
        try:
            self.get(timeout)
        except KafkaTimeoutError as e:
            batch = self._resolve()
            if not batch.is_done():
                raise
            return e
        except BaseException as e:  # noqa: B902 - the record's own error is the answer
            return e
        return None

    def succeeded(self) -> bool:
        b = self._resolve()
        return b.is_done() and b.error is None

    def failed(self) -> bool:
        b = self._resolve()
        return b.is_done() and b.error is not None

    def _metadata(self, batch: "ProducerBatch") -> RecordMetadata:
        offset = batch.base_offset + self._delta if batch.base_offset >= 0 else -1
        ts = batch.log_append_time if batch.log_append_time >= 0 else self.timestamp
        return RecordMetadata(batch.topic, batch.partition, offset, ts, self.key_size, self.value_size)

    def add_callback(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``callback(metadata, exception)`` when done (right away if it already is); exactly one of the two
        is None. kafka-python's form also works: with extra arguments, or a callback that takes one argument,
        ``callback(metadata, *args, **kwargs)`` is called on success only (``add_errback`` for failures).
        Returns this future, so that calls chain: ``fut.add_callback(ok).add_errback(failed)``. A callback
        that cannot take its arguments is a TypeError here, not at completion."""
        if args or kwargs or _accepts(callback, 2) is False:
            _check_extra(callback, args, kwargs, "add_callback()", "metadata")
            self._add(_success_only(callback, args, kwargs))
        else:
            self._add(callback)
        return self

    def add_errback(self, errback: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """kafka-python's: call ``errback(exception, *args, **kwargs)`` if the record fails (right away if it
        already has). Returns this future."""
        _check_extra(errback, args, kwargs, "add_errback()", "exception")
        self._add(_failure_only(errback, args, kwargs))
        return self

    def _add(self, callback: Callback) -> None:
        batch = self._resolve()
        if not batch.add_thunk(callback, self):
            self.fire(callback, self._resolve())

    def fire(self, callback: Callback, batch: "ProducerBatch") -> None:
        err = batch.error
        try:
            if err is None:
                callback(self._metadata(batch), None)
            else:
                callback(None, err)
        except Exception:
            log.exception("a producer callback raised; the producer carries on")
        except BaseException as e:  # noqa: B902 - SystemExit, KeyboardInterrupt, an application's own subclass
            if not on_network_thread():
                raise  # (a callback run on the application's thread: Ctrl-C and sys.exit() are the application's)
            # on the network thread nobody would see it, and the thread would end: log it and go on (as Java's
            # ProducerBatch logs a callback's exception and goes on)
            log.error("a producer callback raised %s; the network thread carries on", type(e).__name__,
                      exc_info=True)

    def __repr__(self) -> str:
        b = self._batch
        state = "pending" if not b.is_done() else ("failed" if b.error else "done")
        return f"<FutureRecordMetadata {b.topic}-{b.partition} delta={self._delta} {state}>"




class _FailedSend:
    """Stands in for the batch of a record that failed before it was queued (send() caught the error):
    done, with that error, as far as its future is concerned."""

    __slots__ = ("topic", "partition", "error")
    split_into = None
    base_offset = -1
    log_append_time = -1

    def __init__(self, topic: str, partition: int, error: BaseException) -> None:
        self.topic = topic
        self.partition = partition
        self.error = error

    def is_done(self) -> bool:
        return True

    def wait(self, timeout: Optional[float]) -> bool:
        return True

    def add_thunk(self, callback: Callback, fut: "FutureRecordMetadata") -> bool:
        return False


def failed_future(topic: str, partition: Optional[int], timestamp: int, key_size: int, value_size: int,
                  error: BaseException, callback: Optional[Callback]) -> FutureRecordMetadata:
    """The future of a record send() could not queue (Java's FutureFailure); runs ``callback`` with the
    error on the calling thread, as Java's KafkaProducer.doSend does."""
    stand_in = _FailedSend(topic, -1 if partition is None else partition, error)
    fut = FutureRecordMetadata(stand_in, 0, timestamp, key_size, value_size)  # type: ignore[arg-type]
    if callback is not None:
        fut.fire(callback, stand_in)  # type: ignore[arg-type]
    return fut


Segment = Tuple["ProducerBatch", int, int, Sequence[int]]


class BatchSendFuture:
    """The result of one ``send_batch()``: waits on the few batches the records went into, not on
    one future per record."""

    __slots__ = ("topic", "count", "_segments", "_timestamp", "_keys", "_values")

    def __init__(self, topic: str, count: int, segments: List[Segment], timestamp: int,
                 keys: Optional[Sequence[Optional[bytes]]] = None,
                 values: Optional[Sequence[Optional[bytes]]] = None) -> None:
        """``keys`` / ``values``: the serialized keys and values, for the sizes :meth:`get` reports (held by
        reference, not copied; -1 when not given)."""
        self.topic = topic
        self.count = count
        self._segments = segments
        self._timestamp = timestamp
        self._keys = keys
        self._values = values

    def _batches(self) -> List["ProducerBatch"]:
        out: Dict[int, "ProducerBatch"] = {}
        for batch, _d, _n, _idx in self._segments:
            stack = [batch]
            while stack:
                b = stack.pop()
                if b.split_into is not None:
                    stack.extend(p for p, _ in b.split_into)
                else:
                    out[id(b)] = b
        return list(out.values())

    def done(self) -> bool:
        return all(b.is_done() for b in self._batches())

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait until every record is acknowledged or failed; raise the first error. ``timeout`` in seconds
        (None or inf: no limit)."""
        timeout = check_timeout(timeout, "BatchSendFuture.wait()")
        deadline = None if timeout is None else time.monotonic() + timeout
        for b in self._batches():
            # a completed batch counts even while its callbacks still run (as FutureRecordMetadata.get and
            # done(): the asyncio producer resolves send_batch() from a callback, before the batch settles)
            if b.is_done():
                continue
            if on_network_thread():
                raise network_thread_wait_error("BatchSendFuture.wait()", "its records are not all acknowledged yet")
            if not b.wait(None if deadline is None else max(0.0, deadline - time.monotonic())) and not b.is_done():
                raise KafkaTimeoutError(f"send_batch records not acknowledged within {timeout} s")
        err = self._first_error()
        if err is not None:
            raise err

    def _first_error(self) -> Optional[BaseException]:
        for b in self._batches():
            if b.error is not None:
                return b.error
        return None

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The first error among the records (None when all succeeded), after waiting like :meth:`wait`."""
        timeout = check_timeout(timeout, "BatchSendFuture.exception()")
        try:
            self.wait(timeout)
        except KafkaTimeoutError:
            if not self.done():
                raise
        except BaseException:  # noqa: B902 - the records' own error is the answer
            pass
        return self._first_error()

    def get(self, timeout: Optional[float] = None) -> List[RecordMetadata]:
        """Wait, then return every record's metadata in input order (raises the first error)."""
        self.wait(timeout)
        out: List[Optional[RecordMetadata]] = [None] * self.count
        keys, values = self._keys, self._values
        for batch, first, n, idx in self._segments:
            for j in range(n):
                b, delta = batch, first + j
                while b.split_into is not None:
                    b, delta = b.split_into[delta]
                offset = b.base_offset + delta if b.base_offset >= 0 else -1
                ts = b.log_append_time if b.log_append_time >= 0 else self._timestamp
                i = idx[j]
                k = keys[i] if keys is not None else None
                v = values[i] if values is not None else None
                out[i] = RecordMetadata(b.topic, b.partition, offset, ts, -1 if k is None else len(k),
                                        -1 if v is None else len(v))
        return out  # type: ignore[return-value]

    def partition_offsets(self) -> Dict[Tuple[str, int], Tuple[int, int]]:
        """``{(topic, partition): (first offset, last offset)}`` of the records (waits like :meth:`wait`).
        Computed per batch, not per record. Offsets are -1 with acks=0."""
        self.wait()
        ranges: Dict[Tuple[str, int], Tuple[int, int]] = {}

        def add(b: "ProducerBatch", lo_delta: int, hi_delta: int) -> None:
            lo = b.base_offset + lo_delta if b.base_offset >= 0 else -1
            hi = b.base_offset + hi_delta if b.base_offset >= 0 else -1
            key = (b.topic, b.partition)
            if key in ranges:
                old_lo, old_hi = ranges[key]
                lo, hi = min(lo, old_lo), max(hi, old_hi)
            ranges[key] = (lo, hi)

        for batch, first, n, _idx in self._segments:
            if batch.split_into is None:
                add(batch, first, first + n - 1)
                continue
            for j in range(first, first + n):  # split batches: follow each record
                b, delta = batch, j
                while b.split_into is not None:
                    b, delta = b.split_into[delta]
                add(b, delta, delta)
        return ranges

    def __repr__(self) -> str:
        return f"<BatchSendFuture {self.topic} records={self.count} {'done' if self.done() else 'pending'}>"


__all__ = ["CALLBACK_CODES", "BatchSendFuture", "Callback", "FutureRecordMetadata", "RecordMetadata", "check_callback",
           "check_timeout", "network_thread_wait_error", "on_network_thread"]
