"""The asyncio producer: :class:`AsyncProducer`, a thin layer over :class:`kproducer.Producer`.

It shares the synchronous producer's accumulator, buffer pool and network thread (there is no second
implementation of anything that talks to Kafka); what it adds is the bridge to one event loop:

* ``await send()`` admits a record only when that cannot block: the topic's metadata is known and the
  buffer pool has room (then the synchronous ``send()`` appends without waiting). Otherwise it waits on the
  loop -- for metadata in a worker thread, for buffer space on an :class:`asyncio.Event` that the pool's
  ``on_free`` hook sets -- and tries again, bounded by ``max.block.ms`` as in Java.
* Completions reach the loop in groups. Each batch carries one completion thunk (not one per record); the
  network thread queues the completed batch and wakes the loop with one ``call_soon_threadsafe`` for all
  batches completed until the loop gets to them (so about one per produce response). On the loop, each
  completed batch is marked done (nothing is done per record: a :class:`RecordFuture` computes its
  RecordMetadata when asked); the few records with a waiting task or a done callback are settled at most
  :data:`DELIVER_CHUNK` per callback, so a response carrying thousands of them never holds the loop for long.
* Blocking calls of the synchronous producer (``flush``, ``close``, the transaction calls,
  ``send_batch``) run in a small thread pool of the producer's own.

With the accelerator, ``AsyncProducer.send`` is a compiled method: a call that the hot path takes stages its
record in the call and returns a finished coroutine (no coroutine object, nothing the cyclic GC counts);
other calls run the ``async def send`` below. RecordFuture's instances are not GC objects.

Cancellation (documented in docs/asyncio.md): ``send()`` admits the record as its last step, without
suspending after it. Cancelling it while it waits (for metadata, buffer space, or its periodic yield to
the loop) means the record was never admitted and is never sent. Once ``send()`` has returned, the record
is on its way: cancelling the returned future (e.g. ``asyncio.wait_for`` timing out) does not un-send it.
"""
from __future__ import annotations

import asyncio
import collections.abc
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import sys
from bisect import bisect_right as _bisect
from collections import deque
from functools import partial
from time import perf_counter as _perf_counter
from time import time as _wall
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Deque,
    Dict,
    Generator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from .errors import BufferExhaustedError, KafkaError, ProducerClosedError
from .network.metadata import PartitionInfo
from .producer.admission import BOUND_EXTRA, RECORD_OVERHEAD, plain_record, record_size, valid_timestamp
from .producer.batch import ProducerBatch
from .producer.consumer_group import ConsumerGroupMetadata, OffsetAndMetadata
from .producer.core import batches_of, failed_stand_in, first_error, record_position
from .producer.future import BatchSendFuture, RecordMetadata, on_network_thread
from .producer.kafka_producer import HeaderInput, Producer, send_core
from .protocol.accel import MODULES, load
from .protocol.records import RecordBatchBuilder

_aio_c = load(MODULES["aio"])

log = logging.getLogger(__name__)

#: record futures resolved per loop callback (then the rest waits for the next loop iteration)
DELIVER_CHUNK = 1024
#: ``send()`` yields to the loop (``await asyncio.sleep(0)``) once YIELD_AFTER_S seconds passed since its last
#: yield, and at least once per YIELD_EVERY calls, so that a task sending in a tight loop lets the loop's
#: other tasks run (a send that does not wait would otherwise never suspend). Not more often: each yield
#: lets the event loop poll its selector, which hands the GIL to the network thread for a while. (1 ms, not 2:
#: asyncio runs a timer's task one loop iteration after the timer is due, so another task waits about two to
#: three of these steps; in alternated benchmark runs 1 ms lowered the median longest stall from ~11.5 to
#: ~7.7 ms at no measurable throughput cost.)
YIELD_AFTER_S = 0.001
YIELD_EVERY = 4096
#: staged records (send()'s fast path) appended at once at the latest
STAGE_MAX = 1024
_RECORD_OVERHEAD = RECORD_OVERHEAD
_BOUND_EXTRA = BOUND_EXTRA
_HOT_BOUND = RECORD_OVERHEAD + BOUND_EXTRA

_tuple_new = tuple.__new__


class _BatchGroup:
    """Resolves the future of one ``send_batch()`` once every batch its records went into is done."""

    __slots__ = ("future", "result", "remaining")

    def __init__(self, future: "asyncio.Future[BatchSendFuture]", result: BatchSendFuture, remaining: int) -> None:
        self.future = future
        self.result = result
        self.remaining = remaining


class _BatchSlot:
    """The loop's view of one batch that records wait for: ``done`` becomes True on the loop (in
    ``_deliver``), after the network thread completed the batch -- so a record's state only ever changes on
    the loop, as an asyncio future's does. ``watchers``: records with a waiting task or a done callback;
    ``groups``: send_batch() groups; ``split``: after a KIP-126 split, the slots of the batches that hold the
    records now."""

    __slots__ = ("batch", "done", "watchers", "groups", "split")

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self.done = False
        self.watchers: Optional[List["RecordFuture"]] = None
        self.groups: Optional[List[_BatchGroup]] = None
        self.split: Optional[Dict[Any, "_BatchSlot"]] = None


class _Run:
    """Records staged together (one partition, or the keyless records of one topic, one timestamp): their
    keys and values, and -- once appended -- ``segs``, ``(first index, count, first offset delta, slot)`` per
    batch they went into, in index order (``starts``: their first indices). A record's future is (run, index); it computes its RecordMetadata from these when
    asked. ``sizes``: (key size, value size) of a one-record run made by the synchronous send() (its
    serialized sizes), else None (sizes from keys/values). ``extra``: per-record state of the few records
    that have one (cancelled, callbacks, waiting tasks); None for none."""

    __slots__ = ("owner", "ts", "keys", "values", "topic", "part", "segs", "starts", "extra", "watchers", "sizes")

    def __init__(self, owner: "AsyncProducer", ts: int, topic: str, part: Any) -> None:
        self.owner = owner
        self.ts = ts
        self.keys: List[Optional[bytes]] = []
        self.values: List[Optional[bytes]] = []
        self.topic = topic
        self.part = part
        self.segs: Optional[List[Tuple[int, int, int, _BatchSlot]]] = None
        self.starts: List[int] = [0]  # the segments' first indices (ascending, as segs)
        self.extra: Optional[Dict[int, _RecordState]] = None
        self.watchers: Optional[List["RecordFuture"]] = None  # watching records before the append
        self.sizes: Optional[Tuple[int, int]] = None


class _PyHotState:
    """send()'s counters and memory bound for its hot path (with the accelerator: ``_aio.AioHot``)."""

    __slots__ = ("sends", "need", "limit", "count", "max_value", "stage_max", "bound")

    def __init__(self) -> None:
        self.sends = self.need = self.count = self.max_value = self.stage_max = self.bound = 0
        self.limit = -1


class _RecordState:
    """What only some records have: ``cancelled``, done callbacks ``(fn, context)``, waiting tasks' futures."""

    __slots__ = ("cancelled", "message", "callbacks", "waiters")

    def __init__(self) -> None:
        self.cancelled = False
        self.message: Optional[str] = None
        self.callbacks: List[Tuple[Any, Any]] = []
        self.waiters: List["asyncio.Future[None]"] = []


#: the compiled AsyncProducer.send descriptor (see _compiled_send), when built
_SendMethod: Any = getattr(_aio_c, "AioSendMethod", None) if _aio_c is not None else None


def _compiled_send(fn: Any) -> Any:
    """``fn`` (the Python ``async def send``) wrapped in the compiled descriptor ``_aio.AioSendMethod``:
    it keeps fn's name, docstring, signature (``__wrapped__``) and code flags, so that help(),
    inspect.signature, inspect.iscoroutinefunction and asyncio.iscoroutinefunction see fn."""
    method: Any = functools.update_wrapper(_SendMethod(fn), fn)
    method.__code__ = fn.__code__
    method.__defaults__ = fn.__defaults__
    method.__kwdefaults__ = fn.__kwdefaults__
    marker = getattr(asyncio.coroutines, "_is_coroutine", None)
    if marker is not None:
        method._is_coroutine = marker
    if hasattr(inspect, "markcoroutinefunction"):
        inspect.markcoroutinefunction(method)
    return method


#: the code of asyncio.wait_for (see RecordFuture._asyncio_future_blocking)
_WAIT_FOR_CODE: Any = getattr(getattr(asyncio.tasks, "wait_for", None), "__code__", None)


def _called_by_wait_for() -> bool:
    """Whether asyncio.wait_for is asking (through ensure_future and isfuture) whether its argument is a future."""
    try:
        frame: Any = sys._getframe(2)  # (0: here, 1: the property, 2: isfuture, then ensure_future's frames)
    except ValueError:  # (a stack not that deep: not asyncio asking)
        return False
    for _ in range(5):
        if frame is None:
            return False
        if frame.f_code is _WAIT_FOR_CODE:
            return True
        frame = frame.f_back
    return False


#: the compiled base of RecordFuture (its slots and a compiled ``await`` of a done record), when built
_CFuture: Any = getattr(_aio_c, "AioFuture", None) if _aio_c is not None else None
if TYPE_CHECKING:
    _RecordFutureBase = object
else:
    _RecordFutureBase = object if _CFuture is None else _CFuture


class RecordFuture(_RecordFutureBase):
    """What ``await AsyncProducer.send()`` returns: the future of one record's :class:`RecordMetadata`.

    ``await fut`` gives the metadata or raises the record's error. It is *future-like* in asyncio's sense
    (``asyncio.isfuture(fut)`` is True), so ``asyncio.gather``, ``asyncio.wait``, ``asyncio.wait_for``,
    ``asyncio.shield`` and ``asyncio.ensure_future`` take it as they take an :class:`asyncio.Future` (no
    Task is made for it), and it has the Future's methods: ``done()``, ``result()``, ``exception()``,
    ``cancel()``, ``cancelled()``, ``add_done_callback()``, ``remove_done_callback()``, ``get_loop()``.

    It is cheap: a reference to the records staged with it and its position among them. Nothing is done per
    record when its batch completes -- the batch is marked done on the loop (one step per batch) and the
    metadata is computed when asked for. A task awaiting a record that is not done yet waits on an
    :class:`asyncio.Future` of its own, made then; cancelling that task does not cancel the record (other
    tasks awaiting it still get its outcome). ``cancel()`` cancels the future (it reports CancelledError
    from then on), never the record, which is on its way (Kafka cannot recall it).

    Its state changes only on the event loop, as an asyncio future's: ``done()`` becomes True when the loop
    handles the completion of the record's batch. Use it from the loop's thread only.
    """

    # (with the accelerator, the slots ``_run`` and ``_i`` and ``__await__``/``__iter__`` are the compiled
    # base's: it computes a done record's metadata itself and calls _await() for everything else)
    __slots__ = ("_run", "_i") if _CFuture is None else ()  # type: ignore[assignment]
    @property
    def _asyncio_future_blocking(self) -> Optional[bool]:
        """asyncio's mark of a future-like object (``asyncio.isfuture``): False, never True (a waiting task
        waits on a future of its own, so a task's cancellation never cancels the record's future). None (not
        future-like) to ``asyncio.wait_for`` while the record is pending: it then awaits the record in a Task
        of its own and, when time is up, cancels that Task, not the record's future (before Python 3.12
        wait_for cancels the future it was given; docs/asyncio.md)."""
        if _WAIT_FOR_CODE is not None and _called_by_wait_for() and not self.done():
            return None
        return False

    def __init__(self, run: _Run, index: int) -> None:
        self._run = run
        self._i = index

    # -- where the record is -----------------------------------------------------------------------

    def _locate(self) -> Optional[Tuple[_BatchSlot, int]]:
        """(the slot of the batch holding the record now, its offset delta there); None before the append."""
        run = self._run
        segs = run.segs
        if segs is None:
            return None
        i = self._i
        start, _count, first, slot = segs[_bisect(run.starts, i) - 1]
        delta = first + i - start
        while slot.split is not None:
            b, delta = slot.batch.split_into[delta]
            slot = slot.split[b]
        return slot, delta

    def _state(self) -> Optional[_RecordState]:
        extra = self._run.extra
        return None if extra is None else extra.get(self._i)

    def _state_for_update(self) -> _RecordState:
        run = self._run
        extra = run.extra
        if extra is None:
            extra = run.extra = {}
        st = extra.get(self._i)
        if st is None:
            st = extra[self._i] = _RecordState()
        return st

    def _outcome(self) -> Tuple[Optional[RecordMetadata], Optional[BaseException]]:
        """(metadata, error) of a done, not cancelled record."""
        loc = self._locate()
        assert loc is not None
        slot, delta = loc
        b = slot.batch
        if b.error is not None:
            return None, b.error
        run = self._run
        if run.sizes is not None:
            ks, vs = run.sizes
        else:
            k, v = run.keys[self._i], run.values[self._i]
            ks = -1 if k is None else len(k)
            vs = -1 if v is None else len(v)
        base = b.base_offset
        return _tuple_new(RecordMetadata, (b.topic, b.partition, base + delta if base >= 0 else -1,
                                           b.log_append_time if b.log_append_time >= 0 else run.ts, ks, vs)), None

    # -- the Future API ----------------------------------------------------------------------------

    def done(self) -> bool:
        st = self._state()
        if st is not None and st.cancelled:
            return True
        loc = self._locate()
        return loc is not None and loc[0].done

    def cancelled(self) -> bool:
        st = self._state()
        return st is not None and st.cancelled

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        st = self._state()
        msg = None if st is None else st.message
        return asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)

    @property
    def _cancel_message(self) -> Optional[str]:
        st = self._state()
        return None if st is None else st.message

    def result(self) -> RecordMetadata:
        if self.cancelled():
            raise self._make_cancelled_error()
        if not self.done():
            raise asyncio.InvalidStateError("Result is not ready.")
        meta, err = self._outcome()
        if err is not None:
            raise err
        assert meta is not None
        return meta

    def exception(self) -> Optional[BaseException]:
        if self.cancelled():
            raise self._make_cancelled_error()
        if not self.done():
            raise asyncio.InvalidStateError("Exception is not set.")
        return self._outcome()[1]

    def get_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._run.owner._loop
        assert loop is not None
        return loop

    def cancel(self, msg: Optional[str] = None) -> bool:
        """Cancel the future (not the record: it is sent all the same). False when already done."""
        if self.done():
            return False
        st = self._state_for_update()
        st.cancelled = True
        st.message = msg
        self._settle()
        return True

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        """Call ``fn(fut)`` (scheduled with ``loop.call_soon``) when done, as an asyncio future does."""
        if self.done():
            self.get_loop().call_soon(fn, self, context=context)
            return
        self._state_for_update().callbacks.append((fn, context))
        self._run.owner._watch(self)

    def remove_done_callback(self, fn: Any) -> int:
        st = self._state()
        if st is None:
            return 0
        kept = [(f, c) for f, c in st.callbacks if f != fn]
        removed = len(st.callbacks) - len(kept)
        st.callbacks[:] = kept
        return removed

    def _settle(self) -> None:
        """(loop) If done: wake the tasks waiting for it and schedule its callbacks; else watch its batch."""
        st = self._state()
        if st is None or not (st.callbacks or st.waiters):
            return
        if not self.done():
            self._run.owner._watch(self)
            return
        waiters, st.waiters = st.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)
        callbacks, st.callbacks = st.callbacks, []
        if callbacks:
            loop = self.get_loop()
            for fn, ctx in callbacks:
                loop.call_soon(fn, self, context=ctx)

    def _await(self) -> Generator[Any, None, RecordMetadata]:
        run = self._run
        if run.extra is None:
            # the common case, inlined: the batch is done (and was not split), the record has no state
            segs = run.segs
            if segs is not None:
                i = self._i
                start, _count, first, slot = segs[_bisect(run.starts, i) - 1]
                if slot.done and slot.split is None:
                    b = slot.batch
                    if b.error is None:
                        if run.sizes is None:
                            k = run.keys[i]
                            v = run.values[i]
                            ks = -1 if k is None else len(k)
                            vs = -1 if v is None else len(v)
                        else:
                            ks, vs = run.sizes
                        base = b.base_offset
                        lat = b.log_append_time
                        return _tuple_new(RecordMetadata, (
                            b.topic, b.partition, base + first + i - start if base >= 0 else -1,
                            lat if lat >= 0 else run.ts, ks, vs))
        while not self.done():
            waiter: "asyncio.Future[None]" = self.get_loop().create_future()
            self._state_for_update().waiters.append(waiter)
            self._run.owner._watch(self)
            try:
                yield from waiter
            except BaseException:
                st = self._state()
                if st is not None and waiter in st.waiters:
                    st.waiters.remove(waiter)
                raise
        return self.result()

    if TYPE_CHECKING or _CFuture is None:
        __await__ = _await
        __iter__ = _await

    def __repr__(self) -> str:
        if self.cancelled():
            state = "cancelled"
        elif not self.done():
            state = "pending"
        else:
            err = self._outcome()[1]
            state = f"failed: {type(err).__name__}" if err is not None else "done"
        return f"<RecordFuture {self._run.topic} {state}>"


class AsyncProducer:
    """A Kafka producer for asyncio, with aiokafka's habits::

        async with AsyncProducer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as p:
            fut = await p.send("topic", b"value", key=b"k")   # admitted; fut resolves to RecordMetadata
            meta = await fut
            await p.send_and_wait("topic", b"other")
            await p.flush()

    Settings are the synchronous :class:`~kproducer.Producer`'s (Java names or Python aliases), passed
    through unchanged; :attr:`producer` is that producer. One producer serves one event loop (the loop
    that first uses it). ``await send()`` returns a :class:`RecordFuture` (future-like: await it, or give it
    to ``asyncio.gather``/``wait``) for :class:`~kproducer.RecordMetadata`; errors that the synchronous ``send()`` reports through its future
    (``max.block.ms`` passed while waiting for metadata or buffer space, a record over max.request.size, a
    topic's metadata error) fail that future likewise; bad arguments raise from ``send()`` itself.
    """

    def __init__(self, config: Optional[Mapping[str, Any]] = None, *, producer: Optional[Producer] = None,
                 executor_threads: int = 4, **settings: Any) -> None:
        if producer is not None and (config or settings):
            raise TypeError("pass either a Producer or settings, not both")
        self._producer = producer if producer is not None else Producer(config, **settings)
        p = self._producer
        cfg = p.config
        # the producer's send core (kproducer/producer/core.py): everything this class uses of the producer's
        # parts besides its public API
        core = self._core = send_core(p)
        self._batch_size = cfg.batch_size
        # a record of unknown size (not bytes yet: a serializer will make it) may need up to this much
        self._max_record = min(cfg.max_request_size, cfg.buffer_memory)
        self._max_block_ms = cfg.max_block_ms
        self._serializing = cfg.key_serializer is not None or cfg.value_serializer is not None
        # send()'s fast path (staged records) is for plain records of a non-transactional producer
        self._plain = core.plain
        self._size_limit = core.size_limit
        self._system_clock = core.system_clock
        self._staged: Dict[Tuple[str, int], _Run] = {}  # (topic, partition) -> its current run
        self._keyless_run: Optional[_Run] = None  # the current keyless run (of one topic)
        self._ignore_keys = core.ignore_keys
        self._runs: List[_Run] = []
        hot = self._hot = _HotState()
        hot.need = 0  # buffer memory the staged records may take at most (see _flush_staged)
        hot.count = 0  # staged records
        hot.limit = -1  # buffer memory the hot path of send() may stage up to (this loop iteration)
        hot.max_value = self._size_limit - _RECORD_OVERHEAD  # (a value at most this long: admission's size rule)
        hot.stage_max = STAGE_MAX
        hot.bound = _HOT_BOUND
        hot.sends = 0
        self._flush_scheduled = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, executor_threads), thread_name_prefix=f"kproducer-aio | {p.client_id}")
        # the loop's slot of every batch that records (or send_batch groups) wait for, until delivered
        self._slots: Dict[Any, _BatchSlot] = {}
        # slots of batches completed on the network thread, not yet delivered on the loop
        self._done: Deque[_BatchSlot] = deque()
        self._scheduled = False
        self._next_yield = 0.0
        self._space: Optional[asyncio.Event] = None
        self._space_waiters = 0
        self._space_signalled = False
        self._closed = False
        self._executor_down = False
        self._started = False
        #: how many threadsafe wakeups the network thread made (a wakeup covers every batch completed until
        #: the loop ran it)
        self.wakeups = 0

    # -- properties --------------------------------------------------------------------------------

    @property
    def producer(self) -> Producer:
        """The synchronous producer underneath (thread-safe; its blocking calls block the calling thread)."""
        return self._producer

    @property
    def client_id(self) -> str:
        return self._producer.client_id

    def __repr__(self) -> str:
        return f"<AsyncProducer {self.client_id} {self._producer.bootstrap_servers}" \
               f"{' closed' if self._closed else ''}>"

    # -- lifecycle ---------------------------------------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._space = asyncio.Event()
            self._core.on_memory_freed(self._on_pool_free)
        elif self._loop is not loop:
            raise RuntimeError("this AsyncProducer is bound to another event loop (one producer per loop)")
        return loop

    async def start(self) -> None:
        """Bind the producer to the running loop (aiokafka's ``start()``). The network thread already runs;
        connections are made on demand, so this does not wait for a broker."""
        self._bind()
        self._started = True

    async def __aenter__(self) -> "AsyncProducer":
        await self.start()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        loop = self._bind()
        if self._executor_down:
            # after close(): the producer's calls no longer block (they return or raise ProducerClosedError)
            return fn(*args)
        return await loop.run_in_executor(self._executor, partial(fn, *args))

    def _shutdown_executor(self) -> None:
        self._executor_down = True
        self._executor.shutdown(wait=False)

    async def flush(self, timeout: Optional[float] = None) -> None:
        """Send everything queued and wait (in a worker thread, the loop runs on) until it is acknowledged or
        failed, and until the records' futures are resolved on the loop. KafkaTimeoutError after
        ``timeout`` seconds."""
        self._flush_staged()
        await self._in_thread(self._producer.flush, timeout)
        await self._delivered()

    async def close(self, timeout: Optional[float] = None) -> None:
        """Send what is queued (up to ``timeout`` seconds, forever when None) and stop; records still unsent
        then fail with ProducerClosedError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._bind()
        except RuntimeError:
            # closed from another loop: do it without delivering to ours
            self._flush_staged()
            self._producer.close(timeout)
            self._shutdown_executor()
            return
        self._flush_staged()
        if self._space is not None:
            self._space.set()  # sends waiting for buffer space see the producer closed
        try:
            await self._in_thread(self._producer.close, timeout)
        finally:
            self._core.on_memory_freed(None)
            self._shutdown_executor()
        await self._delivered()

    async def _delivered(self) -> None:
        """Wait until every batch completed so far has its futures resolved (delivery runs in chunks)."""
        self._flush_staged()
        while self._done:
            if not self._scheduled:
                self._deliver()
            await asyncio.sleep(0)

    # -- sending -----------------------------------------------------------------------------------

    async def send(self, topic: str, value: Any = None, key: Any = None, *, partition: Optional[int] = None,
                   timestamp_ms: Optional[int] = None,
                   headers: Optional[HeaderInput] = None) -> RecordFuture:
        """Admit one record and return the :class:`RecordFuture` of its :class:`RecordMetadata` (future-like:
        await it, or use it as an :class:`asyncio.Future`).

        Waits (without blocking the loop) for the topic's metadata and for buffer memory, at most
        max.block.ms; the record's future then fails with KafkaTimeoutError / BufferExhaustedError, as
        with the synchronous producer. Cancelling a waiting ``send()`` leaves the record unsent; once
        ``send()`` returned, the record is sent whatever becomes of the returned future.

        With the accelerator, a record that can be staged at once is staged by the call itself, which then
        returns a finished coroutine (see docs/asyncio.md): always ``await`` what send() returns (one that
        is never awaited warns, as a coroutine does, and its record is sent all the same)."""
        if key is None and partition is None and timestamp_ms is None and headers is None and _stage is not None:
            # the hot path below, compiled (_aio.c aio_stage; None when it does not apply)
            rec = _stage(self._hot, self._keyless_run, topic, value)
            if rec is not None:
                return rec  # type: ignore[no-any-return]
        if self._loop is None:
            self._bind()
        sends = self._hot.sends = self._hot.sends + 1
        if not sends & 31 and (sends >= YIELD_EVERY or _perf_counter() >= self._next_yield):
            self._hot.sends = 0
            await asyncio.sleep(0)
            self._next_yield = _perf_counter() + YIELD_AFTER_S
        # The hot path: one more plain keyless record for the current keyless run of this loop iteration, whose
        # first record passed every check below (they hold until the run is appended at the end of the
        # iteration); only its own size, timestamp and the buffer memory are left to check.
        run = self._keyless_run
        if run is not None and run.topic is topic and key is None and partition is None and timestamp_ms is None \
                and headers is None and type(value) is bytes:
            size = len(value)
            hot = self._hot
            if run.ts == int(_wall() * 1000) and size <= hot.max_value:
                need = hot.need + 2 * (size + hot.bound)
                if need <= hot.limit:
                    hot.need = need
                    return self._stage_one(run, None, value)
        loop = self._loop
        assert loop is not None
        if self._closed:
            raise ProducerClosedError("send() called after close(): the producer no longer accepts records")
        # The fast path (a plain record: bytes/None key and value, no headers, nothing configured that a record
        # must go through, not transactional): the synchronous send()'s checks, then the record is staged and
        # appended with the others staged in this loop iteration (see _flush_staged). Anything else, and
        # whatever the checks do not pass, goes through the synchronous send() (which raises or fails the future).
        if self._plain and plain_record(key, value, headers):
            core = self._core
            count = core.partition_count(topic)
            if count is not None and core.accepting():
                if timestamp_ms is None:
                    ts = int(_wall() * 1000) if self._system_clock else core.wall_ms()
                elif valid_timestamp(timestamp_ms):
                    ts = timestamp_ms
                else:
                    ts = -1  # (a bad timestamp: the synchronous send() says what is wrong with it)
                size = record_size(key, value, None)
                if ts >= 0 and size <= self._size_limit:
                    need = self._hot.need + 2 * (size + _BOUND_EXTRA)
                    if partition is None and (key is None or self._ignore_keys):
                        # uniform sticky: the partitions are chosen when the run is appended (as send_batch)
                        run = self._keyless_run
                        if run is None or run.topic is not topic or run.ts != ts:
                            run = self._keyless(loop, topic, ts, need)
                            if run is not None:
                                need = self._hot.need
                    else:
                        run = self._partition_run(loop, topic, key, partition, count, ts, need)
                        if run is not None:
                            need = self._hot.need
                    if run is not None:
                        # (free buffers included: once buffer.memory was all in batches, the memory comes back
                        # as free buffers, and the unallocated part alone would keep every later record off the
                        # staged path, each in a run of its own through the synchronous send())
                        free = core.stageable_memory()
                        if free >= need:
                            self._hot.need = need
                            # (the hot path's memory bound until the end of this loop iteration)
                            self._hot.limit = free if self._system_clock else -1
                            return self._stage_one(run, key, value)
        return await self._send_one(loop, topic, value, key, partition, timestamp_ms, headers)

    if _SendMethod is not None and not TYPE_CHECKING:
        # AsyncProducer.send as a compiled method: a call that the hot path takes (aio_stage) stages its record
        # and returns a finished coroutine (no coroutine object, nothing the cyclic GC tracks); every other call
        # runs the send() above and returns its coroutine (help(), signature and typing are its own)
        send = _compiled_send(send)

    def _stage_one(self, run: _Run, key: Optional[bytes], value: Optional[bytes]) -> RecordFuture:
        """Stage a record that passed the checks in ``run`` (appended at the end of the loop iteration, or now
        when STAGE_MAX records are staged); its future. (The compiled twin of the keyless case: aio_stage.)"""
        values = run.values
        rec = _new_record(RecordFuture)
        rec._run = run
        rec._i = len(values)
        run.keys.append(key)
        values.append(value)
        hot = self._hot
        hot.count += 1
        if hot.count >= hot.stage_max:
            self._flush_staged()
        return rec

    def _keyless(self, loop: asyncio.AbstractEventLoop, topic: str, ts: int, need: int) -> Optional[_Run]:
        """A new keyless run for ``topic`` (None when the pool cannot take it: send() then waits). Later
        records of the topic for a given partition go to new runs (after this one)."""
        need += 2 * self._batch_size  # (its records may open batches on two partitions)
        if not self._core.can_stage(need):
            return None
        staged = self._staged
        if staged:
            for tp in [tp for tp in staged if tp[0] == topic]:
                del staged[tp]
        self._hot.need = need
        run = self._keyless_run = self._new_run(loop, topic, ts, True)
        return run

    def _partition_run(self, loop: asyncio.AbstractEventLoop, topic: str, key: Optional[bytes],
                       partition: Optional[int], count: int, ts: int, need: int) -> Optional[_Run]:
        """The run of the record's partition (explicit, or murmur2 of the key as the synchronous send());
        None when the partition is not a valid one (the synchronous send() says why) or the pool cannot take
        a new run."""
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < count:
                return None
            part = partition
        else:
            assert key is not None
            part = self._core.key_partition(key, count)
        tp = (topic, part)
        run = self._staged.get(tp)
        if run is not None and run.ts == ts:
            return run
        need += self._batch_size
        if not self._core.can_stage(need):
            return None
        run = self._keyless_run
        if run is not None and run.topic is topic:
            self._keyless_run = None  # (later keyless records of the topic go after this one)
        self._hot.need = need
        run = self._staged[tp] = self._new_run(loop, topic, ts, part)
        return run

    async def _send_one(self, loop: asyncio.AbstractEventLoop, topic: str, value: Any, key: Any,
                        partition: Optional[int], timestamp_ms: Optional[int],
                        headers: Optional[HeaderInput]) -> RecordFuture:
        """send() of one record through the synchronous send(), after the staged records (their order)."""
        if self._hot.count:
            self._flush_staged()
        # admit at once when it cannot block: metadata known and room in the buffer pool (read without the
        # pool's lock: only other threads' appends could lower it between this check and the append)
        count = self._core.partition_count(topic)
        if count is None or (partition is not None and type(partition) is int and partition >= count) \
                or (not self._core.can_stage(self._max_record) and not self._has_room(key, value, headers)):
            failed = await self._wait_admissible(topic, key, value, headers, partition)
            if failed is not None:
                return self._failed(topic, partition, failed)
            if self._hot.count:  # (other tasks staged records meanwhile)
                self._flush_staged()
        sf = self._producer.send(topic, value, key, headers=headers, partition=partition, timestamp_ms=timestamp_ms)
        # a run of one record (its sizes are the serialized ones the synchronous send() measured)
        run = _Run(self, sf.timestamp, topic, -1)
        run.sizes = (sf.key_size, sf.value_size)
        batch, delta = record_position(sf)
        run.segs = [(0, 1, delta, self._slot_for(batch))]
        return RecordFuture(run, 0)

    # -- staged records (send()'s fast path) -------------------------------------------------------
    # self._staged[(topic, partition)] is the partition's current run (a _Run: timestamp, keys, values);
    # self._runs holds every run in the order they were started (a partition's runs in its records' order; a
    # new run starts when the timestamp changes). _flush_staged appends each run with one append_many() and
    # records where their batches are; it runs at the end of the loop iteration that staged the first record (one
    # call_soon), when STAGE_MAX records are staged, and before anything that must see them queued (a send()
    # that takes the synchronous path, send_batch, flush, close, the transaction calls).
    # self._hot.need bounds the buffer memory the staged records can take (twice their bytes plus a batch
    # per partition): a record is staged only when the pool has that much free, so the append never waits.

    def _new_run(self, loop: asyncio.AbstractEventLoop, topic: str, ts: int, part: Any) -> _Run:
        """A run of ``topic``'s records with timestamp ``ts``; ``part`` its partition, True for keyless."""
        run = _Run(self, ts, topic, part)
        self._runs.append(run)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush_staged)
        return run

    def _flush_staged(self) -> None:
        """Append the staged records (on the loop; never waits for memory, see above)."""
        self._flush_scheduled = False
        runs = self._runs
        if not runs:
            return
        self._runs = []
        self._staged = {}
        self._keyless_run = None
        self._hot.need = 0
        self._hot.count = 0
        self._hot.limit = -1
        core = self._core
        now = core.monotonic_ms()
        slots = self._slots
        wake = False
        for run in runs:
            keys, values = run.keys, run.values
            ks = None if keys.count(None) == len(values) else keys
            segments: List[Any] = []
            failed: Optional[BaseException] = None
            try:
                # (keyless, part True: batch-sized runs of partitions, as the synchronous send()'s sticky choice)
                if core.append_run(run.topic, None if run.part is True else run.part, run.ts, ks, values, now,
                                   segments):
                    wake = True
            except Exception as e:  # closed meanwhile (or out of memory after all): the rest fail
                # (with why the producer closed when its network thread died)
                failed = core.died_error or e
            segs: List[Tuple[int, int, int, _BatchSlot]] = []
            for batch, first, cnt, idxs in segments:
                slot = slots.get(batch)
                if slot is None:
                    slot = self._slot_for(batch)
                segs.append((idxs.start, cnt, first, slot))
            if failed is not None:
                self._fail_unqueued(run, segs, failed)
            if len(segs) > 1:
                run.starts = [seg[0] for seg in segs]
            run.segs = segs
            watchers = run.watchers
            if watchers is not None:  # (records awaited, or given callbacks, before the append)
                run.watchers = None
                for rec in watchers:
                    rec._settle()
        if wake:
            core.wakeup()

    @staticmethod
    def _fail_unqueued(run: _Run, segs: List[Tuple[int, int, int, _BatchSlot]], error: BaseException) -> None:
        """The records of ``run`` not in ``segs`` (not queued) fail with ``error``."""
        queued = {i for start, cnt, _f, _s in segs for i in range(start, start + cnt)}
        log.debug("async send() could not queue %d records: %s", len(run.values) - len(queued), error)
        slot = _failed_slot(run.topic, error)
        segs.extend((i, 1, 0, slot) for i in range(len(run.values)) if i not in queued)
        segs.sort(key=lambda seg: seg[0])

    def _has_room(self, key: Any, value: Any, headers: Any) -> bool:
        """Whether the buffer pool can give this record a new batch without waiting (as the accumulator
        would size it: ``max(batch.size, the record's size)``). For a record that send()'s staged path takes,
        whether a new run of it fits (two batches and twice its bound, as in ``_keyless``): while the pool
        refills after running out, send() waits until then, so that the records after it are staged again
        instead of being admitted one at a time through the synchronous send() (each with a run of its own,
        kept alive by its future). Not when that is over half of buffer.memory."""
        need = self._batch_size
        if headers or self._serializing or not (value is None or type(value) is bytes) \
                or not (key is None or type(key) is bytes) \
                or (0 if value is None else len(value)) + (0 if key is None else len(key)) > need - 128:
            size = self._record_size(key, value, headers)
            if size > self._max_record:
                return True  # send() refuses it at once (MessageTooLargeError), without asking the pool
            need = max(need, size)
        elif self._plain:
            run_need = 2 * (need + _RECORD_OVERHEAD + _BOUND_EXTRA + (0 if value is None else len(value))
                            + (0 if key is None else len(key)))
            if run_need <= self._core.total_memory // 2:
                need = run_need
        return self._core.has_room(need)

    def _record_size(self, key: Any, value: Any, headers: Any) -> int:
        if (value is None or type(value) is bytes) and (key is None or type(key) is bytes) and not self._serializing:
            try:
                items = list(headers.items()) if isinstance(headers, Mapping) else headers
                return RecordBatchBuilder.estimate_record_size(key, value, items or None)
            except Exception:  # bad headers: send() will say what is wrong with them
                pass
        return self._max_record  # (not known before serialization: the most a record may take, and fit)

    async def _wait_admissible(self, topic: str, key: Any, value: Any, headers: Any,
                               partition: Optional[int]) -> Optional[BaseException]:
        """Wait until ``send()`` of this record cannot block. Returns the error to fail the record with
        when max.block.ms passed first (None when it may be admitted)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_block_ms / 1000.0
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        count = self._core.partition_count(topic)
        if count is None or (partition is not None and type(partition) is int and partition >= count):
            try:
                await self._in_thread(self._core.wait_on_metadata, topic,
                                      partition if type(partition) is int else None, self._max_block_ms)
            except (KafkaError, ProducerClosedError) as e:
                if self._closed or isinstance(e, ProducerClosedError):
                    raise
                return self._admission_failed(e)
        space = self._space
        assert space is not None
        if self._has_room(key, value, headers):
            return None
        # out of memory: like a thread blocked in BufferPool.allocate, make every queued batch sendable now
        # (a batch lingering for linger.ms holds memory this record waits for)
        with self._core.memory_pressure():
            return await self._wait_for_space(loop, deadline, space, key, value, headers)

    async def _wait_for_space(self, loop: asyncio.AbstractEventLoop, deadline: float, space: asyncio.Event,
                              key: Any, value: Any, headers: Any) -> Optional[BaseException]:
        while not self._has_room(key, value, headers):
            if self._closed:
                raise ProducerClosedError("the producer was closed while send() waited for buffer memory")
            remaining = deadline - loop.time()
            if remaining <= 0:
                return self._admission_failed(BufferExhaustedError(
                    f"Failed to allocate buffer memory for a record within max.block.ms={self._max_block_ms:.0f}"
                    f" ms: buffer.memory={self._core.total_memory} is full of records waiting to be sent. "
                    "Increase buffer.memory or max.block.ms, or produce more slowly"))
            space.clear()
            self._space_waiters += 1
            self._space_signalled = False
            try:
                # re-check after arming the wakeup: memory freed before it was armed is seen here
                if self._has_room(key, value, headers):
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(space.wait(), remaining)
            finally:
                self._space_waiters -= 1
        return None

    def _admission_failed(self, error: BaseException) -> BaseException:
        """A record not admitted within max.block.ms: as the synchronous send(), this fails the record (its
        future) and makes an open transaction abortable."""
        self._core.admission_failed(error)
        log.debug("async send() could not admit a record: %s", error)
        return error

    def _failed(self, topic: str, partition: Optional[int], error: BaseException) -> RecordFuture:
        """The future of a record that failed before it was queued."""
        run = _Run(self, -1, topic, -1)
        run.sizes = (-1, -1)
        run.segs = [(0, 1, 0, _failed_slot(topic, error, partition))]
        return RecordFuture(run, 0)

    def _on_pool_free(self) -> None:
        """BufferPool.on_free (network thread): wake the sends waiting for space, once per loop turn."""
        if self._space_waiters and not self._space_signalled:
            self._space_signalled = True
            loop, space = self._loop, self._space
            if loop is not None and space is not None:
                try:
                    loop.call_soon_threadsafe(space.set)
                except RuntimeError:  # the loop is closed
                    pass

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: Optional[int] = None, timestamp_ms: Optional[int] = None,
                            headers: Optional[HeaderInput] = None) -> RecordMetadata:
        """``await (await send(...))``: the record's metadata once acknowledged; raises its error."""
        fut = await self.send(topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers)
        return await fut  # type: ignore[no-any-return]

    async def send_batch(self, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]] = None,
                         headers: Optional[Sequence[Optional[HeaderInput]]] = None,
                         partition: Union[int, Sequence[int], None] = None,
                         timestamp_ms: Optional[int] = None) -> "asyncio.Future[BatchSendFuture]":
        """The bulk path (:meth:`kproducer.Producer.send_batch`), run in a worker thread. Returns an
        :class:`asyncio.Future` resolving to the (completed) :class:`~kproducer.producer.future.BatchSendFuture`
        (``.get()`` / ``.partition_offsets()``) or failing with the first record's error.

        The records are admitted in the worker thread: once this call started, cancelling it does not
        un-send them (their future is then not returned)."""
        loop = self._bind()
        if self._closed:
            raise ProducerClosedError("send_batch() called after close(): the producer no longer accepts records")
        self._flush_staged()
        bf: BatchSendFuture = await asyncio.shield(loop.run_in_executor(
            self._executor, partial(self._producer.send_batch, topic, values, keys, headers, partition,
                                    timestamp_ms)))
        af: "asyncio.Future[BatchSendFuture]" = loop.create_future()
        batches = batches_of(bf)
        group = _BatchGroup(af, bf, len(batches))
        if not batches:
            af.set_result(bf)
        for b in batches:
            self._watch_batch(b, group)
        return af

    # -- completions -------------------------------------------------------------------------------
    # Every batch that records (or send_batch() groups) wait for has one _BatchSlot in self._slots and one
    # completion thunk. The thunk (network thread) queues the slot and wakes the loop once for all slots
    # queued until the loop gets to them; _deliver marks each slot done (one step per batch, nothing per
    # record), then settles the few records that have waiting tasks or callbacks.

    def _slot_for(self, b: Any) -> _BatchSlot:
        """(loop) The slot of batch ``b``, made (with its completion thunk) on first use."""
        slot = self._slots.get(b)
        if slot is None:
            slot = self._slots[b] = _BatchSlot(b)
            if not b.add_thunk(partial(self._batch_done, slot), _FirstRecord(b)):
                self._batch_done(slot, None, None)  # (already complete)
        return slot

    def _watch(self, rec: RecordFuture) -> None:
        """(loop) Settle ``rec`` when its batch is delivered (it has waiting tasks or callbacks)."""
        loc = rec._locate()
        if loc is None:  # not appended yet
            run = rec._run
            if run.watchers is None:
                run.watchers = [rec]
            else:
                run.watchers.append(rec)
            return
        slot = loc[0]
        if slot.done:
            rec._settle()
        elif slot.watchers is None:
            slot.watchers = [rec]
        else:
            slot.watchers.append(rec)

    def _watch_batch(self, b: Any, group: _BatchGroup) -> None:
        slot = self._slot_for(b)
        if slot.groups is None:
            slot.groups = [group]
        else:
            slot.groups.append(group)

    def _batch_done(self, slot: _BatchSlot, _metadata: Any, _error: Any) -> None:
        """The completion thunk of a batch (network thread, or whichever thread completed it)."""
        self._done.append(slot)
        loop = self._loop
        if not self._scheduled and loop is not None:
            self._scheduled = True
            self.wakeups += 1
            try:
                loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop was closed before the producer: nobody is waiting any more
                pass

    def _deliver(self) -> None:
        """Mark completed batches done on the loop; settle at most DELIVER_CHUNK watching records per call."""
        self._scheduled = False
        budget = DELIVER_CHUNK
        done, slots = self._done, self._slots
        while budget > 0:
            try:
                slot = done.popleft()
            except IndexError:
                return
            budget -= 1
            if not slot.done:
                slot.done = True
                b = slot.batch
                if slots.get(b) is slot:
                    del slots[b]
                if b.split_into is not None:
                    # KIP-126: the records live in smaller batches now; they are done when those are
                    split: Dict[Any, _BatchSlot] = {}
                    for nb, _delta in b.split_into:
                        if nb not in split:
                            split[nb] = self._slot_for(nb)
                    slot.split = split
                groups, slot.groups = slot.groups, None
                if groups:
                    for group in groups:
                        self._group_batch_done(group)
            watchers = slot.watchers
            if watchers:
                if len(watchers) > budget:
                    chunk = watchers[:budget]
                    del watchers[:budget]
                    done.appendleft(slot)  # (the rest next time)
                else:
                    chunk = watchers
                    slot.watchers = None
                budget -= len(chunk)
                for rec in chunk:
                    rec._settle()
        if done:
            self._scheduled = True
            self._loop.call_soon(self._deliver)  # type: ignore[union-attr]

    def _group_batch_done(self, group: _BatchGroup) -> None:
        group.remaining -= 1
        if group.remaining > 0:
            return
        unfinished = [b for b in batches_of(group.result) if not b.is_done()]  # (after a split)
        if unfinished:
            group.remaining = len(unfinished)
            for b in unfinished:
                self._watch_batch(b, group)
            return
        af = group.future
        if af.done():
            return
        err = first_error(group.result)
        if err is not None:
            af.set_exception(err)
        else:
            af.set_result(group.result)

    # -- transactions ------------------------------------------------------------------------------

    async def init_transactions(self, timeout: Optional[float] = None) -> None:
        """See :meth:`kproducer.Producer.init_transactions` (runs in a worker thread)."""
        await self._in_thread(self._producer.init_transactions, timeout)

    async def begin_transaction(self) -> None:
        self._bind()
        self._producer.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Union[int, OffsetAndMetadata]],
                                          group_id: Union[str, ConsumerGroupMetadata],
                                          timeout: Optional[float] = None) -> None:
        await self._in_thread(self._producer.send_offsets_to_transaction, offsets, group_id, timeout)

    async def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Flush the transaction's records and commit it (in a worker thread); then waits until the records'
        futures are resolved on the loop."""
        self._flush_staged()
        await self._in_thread(self._producer.commit_transaction, timeout)
        await self._delivered()

    async def abort_transaction(self, timeout: Optional[float] = None) -> None:
        self._flush_staged()
        await self._in_thread(self._producer.abort_transaction, timeout)
        await self._delivered()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator["AsyncProducer"]:
        """``async with p.transaction():`` begins a transaction, commits it when the block ends, aborts it
        (and re-raises) when the block raises or is cancelled."""
        await self.begin_transaction()
        try:
            yield self
        except BaseException:
            try:
                await self.abort_transaction()
            except Exception:
                log.exception("aborting the transaction after an error in its block failed")
            raise
        await self.commit_transaction()

    # -- introspection -----------------------------------------------------------------------------

    async def partitions_for(self, topic: str, timeout: Optional[float] = None) -> List[PartitionInfo]:
        parts = self._core.metadata.cluster.partitions.get(topic)
        if parts:
            return list(parts)
        result: List[PartitionInfo] = await self._in_thread(self._producer.partitions_for, topic, timeout)
        return result

    def metrics(self) -> Dict[str, Union[int, float]]:
        return self._producer.metrics()


class _FirstRecord:
    """Stands in for a record future in a batch's completion thunk (``fire`` passes it nothing useful; a
    split hands the thunk to the batch that got record 0)."""

    __slots__ = ("batch", "_delta")

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self._delta = 0

    def _resolve(self) -> Any:
        return self.batch

    def fire(self, callback: Any, batch: Any) -> None:
        try:
            callback(None, None)
        except Exception:
            log.exception("an asyncio completion hook raised")
        except BaseException:  # noqa: B902 - as FutureRecordMetadata.fire: the network thread carries on
            if not on_network_thread():
                raise
            log.exception("an asyncio completion hook raised")


def _failed_slot(topic: str, error: BaseException, partition: Optional[int] = None) -> _BatchSlot:
    """A done slot standing in for the batch of records that failed before they were queued."""
    slot = _BatchSlot(failed_stand_in(topic, partition, error))
    slot.done = True
    return slot


_new_record = object.__new__ if _CFuture is None else _CFuture.__new__
_HotState: Any = _PyHotState
_stage: Any = None
if _CFuture is not None:
    _HotState = _aio_c.AioHot  # type: ignore[union-attr]
    _stage = _aio_c.aio_stage  # type: ignore[union-attr]
    _aio_c.aio_setup(RecordFuture, _Run, _BatchSlot, ProducerBatch, RecordMetadata)  # type: ignore[union-attr]
    if hasattr(_aio_c, "aio_yield_after"):
        # awaiting done records in a loop yields to the loop once per YIELD_AFTER_S, as send() does
        _aio_c.aio_yield_after(YIELD_AFTER_S)  # type: ignore[union-attr]
    if hasattr(_aio_c, "aio_nogc"):
        # RecordFuture's instances are not GC objects (no collection is counted for them; see _aio.c)
        _aio_c.aio_nogc(RecordFuture)  # type: ignore[union-attr]
    if _SendMethod is not None:
        # what the compiled send() returns when it staged the record at once: a finished coroutine, taken as
        # one by asyncio.iscoroutine (create_task, ensure_future, gather, wait_for)
        collections.abc.Coroutine.register(_aio_c.AioReady)  # type: ignore[union-attr]


__all__ = ["AsyncProducer", "DELIVER_CHUNK", "RecordFuture", "STAGE_MAX", "YIELD_EVERY"]
