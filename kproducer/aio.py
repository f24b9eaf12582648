"""The asyncio producer: :class:`AsyncProducer`, a thin layer over :class:`kproducer.Producer`.

It shares the synchronous producer's accumulator, buffer pool and network thread (there is no second
implementation of anything that talks to Kafka); what it adds is the bridge to one event loop:

* ``await send()`` admits a record only when that cannot block: the topic's metadata is known and the
  buffer pool has room (then the synchronous ``send()`` appends without waiting). Otherwise it waits on the
  loop -- for metadata in a worker thread, for buffer space on an :class:`asyncio.Event` that the pool's
  ``on_free`` hook sets -- and tries again, bounded by ``max.block.ms`` as in Java.
* Completions reach the loop in groups. Each batch carries one completion thunk (not one per record); the
  network thread queues the completed batch and wakes the loop with one ``call_soon_threadsafe`` for all
  batches completed until the loop gets to them (so about one per produce response). On the loop, the
  records' :class:`asyncio.Future` objects are resolved at most :data:`DELIVER_CHUNK` per callback, so a
  response carrying thousands of records never holds the loop for long.
* Blocking calls of the synchronous producer (``flush``, ``close``, the transaction calls,
  ``send_batch``) run in a small thread pool of the producer's own.

Cancellation (documented in docs/asyncio.md): ``send()`` admits the record as its last step, without
suspending after it. Cancelling it while it waits (for metadata, buffer space, or its periodic yield to
the loop) means the record was never admitted and is never sent. Once ``send()`` has returned, the record
is on its way: cancelling the returned future (e.g. ``asyncio.wait_for`` timing out) does not un-send it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections import deque
from functools import partial
from time import perf_counter as _perf_counter
from time import time as _wall
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Deque,
    Dict,
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
from .producer.admission import BOUND_EXTRA, RECORD_OVERHEAD, key_hash_miss
from .producer.consumer_group import ConsumerGroupMetadata, OffsetAndMetadata
from .producer.future import BatchSendFuture, RecordMetadata
from .producer.kafka_producer import _TOPIC_TOUCH_MS, HeaderInput, Producer
from .protocol.records import RecordBatchBuilder

log = logging.getLogger(__name__)

#: record futures resolved per loop callback (then the rest waits for the next loop iteration)
DELIVER_CHUNK = 1024
#: ``send()`` yields to the loop (``await asyncio.sleep(0)``) once YIELD_AFTER_S seconds passed since its last
#: yield, and at least once per YIELD_EVERY calls, so that a task sending in a tight loop lets the loop's
#: other tasks run (a send that does not wait would otherwise never suspend). Not more often: each yield
#: lets the event loop poll its selector, which hands the GIL to the network thread for a while.
YIELD_AFTER_S = 0.002
YIELD_EVERY = 4096
#: staged records (send()'s fast path) appended at once at the latest
STAGE_MAX = 1024
_RECORD_OVERHEAD = RECORD_OVERHEAD
_BOUND_EXTRA = BOUND_EXTRA
_NEVER = 1 << 62  # (a size no record passes)

_tuple_new = tuple.__new__
_STRIDE = 5  # items per record in AsyncProducer._pending lists
_Future = asyncio.Future
InvalidStateError = asyncio.InvalidStateError


class _BatchGroup:
    """Resolves the future of one ``send_batch()`` once every batch its records went into is done."""

    __slots__ = ("future", "result", "remaining")

    def __init__(self, future: "asyncio.Future[BatchSendFuture]", result: BatchSendFuture, remaining: int) -> None:
        self.future = future
        self.result = result
        self.remaining = remaining


class AsyncProducer:
    """A Kafka producer for asyncio, with aiokafka's habits::

        async with AsyncProducer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as p:
            fut = await p.send("topic", b"value", key=b"k")   # admitted; fut resolves to RecordMetadata
            meta = await fut
            await p.send_and_wait("topic", b"other")
            await p.flush()

    Settings are the synchronous :class:`~kproducer.Producer`'s (Java names or Python aliases), passed
    through unchanged; :attr:`producer` is that producer. One producer serves one event loop (the loop
    that first uses it). ``await send()`` returns an :class:`asyncio.Future` for
    :class:`~kproducer.RecordMetadata`; errors that the synchronous ``send()`` reports through its future
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
        self._pool = p._pool
        self._metadata = p._metadata
        self._batch_size = cfg.batch_size
        # a record of unknown size (not bytes yet: a serializer will make it) may need up to this much
        self._max_record = min(cfg.max_request_size, cfg.buffer_memory)
        self._max_block_ms = cfg.max_block_ms
        self._serializing = cfg.key_serializer is not None or cfg.value_serializer is not None
        adm = self._adm = p._admission
        # send()'s fast path (staged records) is for plain records of a non-transactional producer
        self._plain = adm.plain and adm.txn is None
        self._max_request = adm.max_request_size
        self._system_clock = p._system_clock
        self._staged: Dict[Tuple[str, int], List[Any]] = {}  # (topic, partition) -> its current run
        self._keyless_run: Optional[List[Any]] = None  # the current keyless run (of one topic)
        self._ignore_keys = adm.ignore_keys
        self._runs: List[List[Any]] = []
        self._staged_need = 0
        self._staged_count = 0
        self._flush_scheduled = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, executor_threads), thread_name_prefix=f"kproducer-aio | {p.client_id}")
        # record futures waiting for their batch (see _watch)
        self._pending: Dict[Any, List[Any]] = {}
        self._groups: Dict[Any, List[_BatchGroup]] = {}
        # staged records' futures waiting for their batch, per append segment (see _flush_staged)
        self._segs: Dict[Any, List[List[Any]]] = {}
        # batches completed on the network thread, not yet delivered on the loop
        self._done: Deque[Any] = deque()
        self._scheduled = False
        self._sends = 0
        self._next_yield = 0.0
        self._space: Optional[asyncio.Event] = None
        self._space_waiters = 0
        self._space_signalled = False
        self._closed = False
        self._executor_down = False
        self._started = False
        #: loop callbacks that delivered completions, and how many threadsafe wakeups the network thread
        #: made (a wakeup covers every batch completed until the loop ran it)
        self.delivery_callbacks = 0
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
            self._pool.on_free = self._on_pool_free
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
            self._pool.on_free = None
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
                   headers: Optional[HeaderInput] = None) -> "asyncio.Future[RecordMetadata]":
        """Admit one record and return the :class:`asyncio.Future` of its :class:`RecordMetadata`.

        Waits (without blocking the loop) for the topic's metadata and for buffer memory, at most
        max.block.ms; the record's future then fails with KafkaTimeoutError / BufferExhaustedError, as
        with the synchronous producer. Cancelling a waiting ``send()`` leaves the record unsent; once
        ``send()`` returned, the record is sent whatever becomes of the returned future."""
        loop = self._loop
        if loop is None:
            loop = self._bind()
        if self._closed:
            raise ProducerClosedError("send() called after close(): the producer no longer accepts records")
        sends = self._sends = self._sends + 1
        if not sends & 31 and (sends >= YIELD_EVERY or _perf_counter() >= self._next_yield):
            self._sends = 0
            await asyncio.sleep(0)
            self._next_yield = _perf_counter() + YIELD_AFTER_S
        # The fast path (a plain record: bytes/None key and value, no headers, nothing configured that a record
        # must go through, not transactional): the synchronous send()'s checks, then the record is staged and
        # appended with the others staged in this loop iteration (see _flush_staged). Anything else, and
        # whatever the checks do not pass, goes through the synchronous send() (which raises or fails the future).
        if (value is None or type(value) is bytes) and not headers and self._plain:
            count = self._metadata.cluster.partition_counts.get(topic)
            p = self._producer
            if count is not None and not p._closed and p._sender.fatal_error is None:
                if timestamp_ms is None:
                    ts = int(_wall() * 1000) if self._system_clock else p._wall_ms()
                elif type(timestamp_ms) is int and timestamp_ms >= 0:
                    ts = timestamp_ms
                else:
                    ts = -1  # (a bad timestamp: the synchronous send() says what is wrong with it)
                size = _RECORD_OVERHEAD + (0 if value is None else len(value))
                if key is not None:
                    size = size + len(key) if type(key) is bytes else _NEVER
                if ts >= 0 and size + _BOUND_EXTRA <= self._max_request:
                    need = self._staged_need + 2 * (size + _BOUND_EXTRA)
                    if partition is None and (key is None or self._ignore_keys):
                        # uniform sticky: the partitions are chosen when the run is appended (as send_batch)
                        run = self._keyless_run
                        if run is None or run[4] is not topic or run[0] != ts:
                            run = self._keyless(loop, topic, ts, need)
                            if run is not None:
                                need = self._staged_need
                    else:
                        run = self._partition_run(loop, topic, key, partition, count, ts, need)
                        if run is not None:
                            need = self._staged_need
                    if run is not None:
                        pool = self._pool
                        if not pool._waiters and pool._available >= need:
                            self._staged_need = need
                            af: "asyncio.Future[RecordMetadata]" = _Future(loop=loop)
                            run[1].append(key)
                            run[2].append(value)
                            run[3].append(af)
                            self._staged_count += 1
                            if self._staged_count >= STAGE_MAX:
                                self._flush_staged()
                            return af
        return await self._send_one(loop, topic, value, key, partition, timestamp_ms, headers)

    def _keyless(self, loop: asyncio.AbstractEventLoop, topic: str, ts: int, need: int) -> Optional[List[Any]]:
        """A new keyless run for ``topic`` (None when the pool cannot take it: send() then waits). Later
        records of the topic for a given partition go to new runs (after this one)."""
        need += 2 * self._batch_size  # (its records may open batches on two partitions)
        pool = self._pool
        if pool._waiters or pool._available < need:
            return None
        staged = self._staged
        if staged:
            for tp in [tp for tp in staged if tp[0] == topic]:
                del staged[tp]
        self._staged_need = need
        run = self._keyless_run = self._new_run(loop, topic, ts, True)
        return run

    def _partition_run(self, loop: asyncio.AbstractEventLoop, topic: str, key: Optional[bytes],
                       partition: Optional[int], count: int, ts: int, need: int) -> Optional[List[Any]]:
        """The run of the record's partition (explicit, or murmur2 of the key as the synchronous send());
        None when the partition is not a valid one (the synchronous send() says why) or the pool cannot take
        a new run."""
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < count:
                return None
            part = partition
        else:
            assert key is not None
            cache = self._adm.hash_cache
            h = cache.get(key)
            if h is None:
                h = key_hash_miss(cache, key)
            part = h % count
        tp = (topic, part)
        run = self._staged.get(tp)
        if run is not None and run[0] == ts:
            return run
        need += self._batch_size
        pool = self._pool
        if pool._waiters or pool._available < need:
            return None
        run = self._keyless_run
        if run is not None and run[4] is topic:
            self._keyless_run = None  # (later keyless records of the topic go after this one)
        self._staged_need = need
        run = self._staged[tp] = self._new_run(loop, topic, ts, part)
        return run

    async def _send_one(self, loop: asyncio.AbstractEventLoop, topic: str, value: Any, key: Any,
                        partition: Optional[int], timestamp_ms: Optional[int],
                        headers: Optional[HeaderInput]) -> "asyncio.Future[RecordMetadata]":
        """send() of one record through the synchronous send(), after the staged records (their order)."""
        if self._staged_count:
            self._flush_staged()
        # admit at once when it cannot block: metadata known and room in the buffer pool (read without the
        # pool's lock: only other threads' appends could lower it between this check and the append)
        count = self._metadata.cluster.partition_counts.get(topic)
        pool = self._pool
        if count is None or (partition is not None and type(partition) is int and partition >= count) \
                or pool._waiters or (pool._available < self._max_record and not self._has_room(key, value, headers)):
            failed = await self._wait_admissible(topic, key, value, headers, partition)
            if failed is not None:
                return self._failed(loop, failed)
            if self._staged_count:  # (other tasks staged records meanwhile)
                self._flush_staged()
        sf = self._producer.send(topic, value, key, headers=headers, partition=partition, timestamp_ms=timestamp_ms)
        af: "asyncio.Future[RecordMetadata]" = _Future(loop=loop)
        # (_watch, inlined)
        b = sf._batch
        lst = self._pending.get(b)
        if lst is not None:
            lst += (af, sf._delta, sf.timestamp, sf.key_size, sf.value_size)
        else:
            self._watch(b, sf, af, sf._delta, sf.timestamp, sf.key_size, sf.value_size)
        return af

    # -- staged records (send()'s fast path) -------------------------------------------------------
    # self._staged[(topic, partition)] is the partition's current run: [timestamp, keys, values, futures];
    # self._runs holds every run in the order they were started (a partition's runs in its records' order; a
    # new run starts when the timestamp changes). _flush_staged appends each run with one append_many() and
    # registers its futures; it runs at the end of the loop iteration that staged the first record (one
    # call_soon), when STAGE_MAX records are staged, and before anything that must see them queued (a send()
    # that takes the synchronous path, send_batch, flush, close, the transaction calls).
    # self._staged_need bounds the buffer memory the staged records can take (twice their bytes plus a batch
    # per partition): a record is staged only when the pool has that much free, so the append never waits.

    def _new_run(self, loop: asyncio.AbstractEventLoop, topic: str, ts: int, part: Any) -> List[Any]:
        """A run: ``[timestamp, keys, values, futures, topic, partition (True: keyless)]``."""
        run: List[Any] = [ts, [], [], [], topic, part]
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
        self._staged_need = 0
        self._staged_count = 0
        p = self._producer
        acc = p._accumulator
        now = p._monotonic_ms()
        touched = p._topic_touched
        max_block = self._max_block_ms
        wake = False
        last_topic = None
        for ts, keys, values, afs, topic, part in runs:
            if topic is not last_topic:
                last_topic = topic
                if now - touched.get(topic, -1e18) > _TOPIC_TOUCH_MS:
                    touched[topic] = now
                    self._metadata.add_topic(topic)
            n = len(values)
            ks = None if keys.count(None) == n else keys
            segments: List[Any] = []
            try:
                if part is True:
                    # keyless: batch-sized runs of partitions, as the synchronous send()'s sticky choice
                    try:
                        sizes: List[int] = [_RECORD_OVERHEAD + len(v) for v in values]
                    except TypeError:  # (None values)
                        sizes = [_RECORD_OVERHEAD + (0 if v is None else len(v)) for v in values]
                    if ks is not None:
                        sizes = [sz + (0 if k is None else len(k)) for sz, k in zip(sizes, ks)]
                    cluster = self._metadata.cluster
                    count = cluster.partition_counts.get(topic) or 1
                    for pt, a, b in self._adm.sticky.runs(topic, sizes, cluster.available.get(topic, ()), count):
                        if acc.append_many(topic, pt, ts, ks, values, None, range(a, b), max_block, now, segments):
                            wake = True
                elif acc.append_many(topic, part, ts, ks, values, None, range(n), max_block, now, segments):
                    wake = True
            except Exception as e:  # closed meanwhile (or out of memory after all): the rest fail
                self._fail_unqueued(afs, segments, e)
            segs_by_batch = self._segs
            for batch, first, cnt, idxs in segments:
                seg = [afs, keys, values, idxs.start, cnt, first, ts]
                lst = segs_by_batch.get(batch)
                if lst is not None:
                    lst.append(seg)
                    continue
                segs_by_batch[batch] = [seg]
                if batch not in self._pending and batch not in self._groups \
                        and not batch.add_thunk(partial(self._batch_done, batch), _FirstRecord(batch)):
                    self._batch_done(batch, None, None)  # (already complete)
        if wake:
            p._wakeup()

    @staticmethod
    def _fail_unqueued(afs: List[Any], segments: List[Any], error: BaseException) -> None:
        queued = {i for seg in segments for i in seg[3]}
        log.debug("async send() could not queue %d records: %s", len(afs) - len(queued), error)
        for i, af in enumerate(afs):
            if i not in queued and not af.done():
                af.set_exception(error)

    def _has_room(self, key: Any, value: Any, headers: Any) -> bool:
        """Whether the buffer pool can give this record a new batch without waiting (as the accumulator
        would size it: ``max(batch.size, the record's size)``)."""
        pool = self._pool
        need = self._batch_size
        if headers or self._serializing or not (value is None or type(value) is bytes) \
                or not (key is None or type(key) is bytes) \
                or (0 if value is None else len(value)) + (0 if key is None else len(key)) > need - 128:
            size = self._record_size(key, value, headers)
            if size > self._max_record:
                return True  # send() refuses it at once (MessageTooLargeError), without asking the pool
            need = max(need, size)
        return pool.queued() == 0 and pool.available_memory() >= need

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
        count = self._metadata.cluster.partition_counts.get(topic)
        if count is None or (partition is not None and type(partition) is int and partition >= count):
            try:
                await self._in_thread(self._producer._wait_on_metadata, topic,
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
        acc = self._producer._accumulator
        acc.begin_flush()
        self._producer._sender.wakeup()
        try:
            return await self._wait_for_space(loop, deadline, space, key, value, headers)
        finally:
            acc.end_flush()

    async def _wait_for_space(self, loop: asyncio.AbstractEventLoop, deadline: float, space: asyncio.Event,
                              key: Any, value: Any, headers: Any) -> Optional[BaseException]:
        while not self._has_room(key, value, headers):
            if self._closed:
                raise ProducerClosedError("the producer was closed while send() waited for buffer memory")
            remaining = deadline - loop.time()
            if remaining <= 0:
                return self._admission_failed(BufferExhaustedError(
                    f"Failed to allocate buffer memory for a record within max.block.ms={self._max_block_ms:.0f}"
                    f" ms: buffer.memory={self._pool.total_memory} is full of records waiting to be sent. "
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
        txn = self._producer._txn
        if txn is not None and txn.is_transactional:
            txn.maybe_transition_to_error_state(error)
        log.debug("async send() could not admit a record: %s", error)
        return error

    @staticmethod
    def _failed(loop: asyncio.AbstractEventLoop, error: BaseException) -> "asyncio.Future[RecordMetadata]":
        af: "asyncio.Future[RecordMetadata]" = loop.create_future()
        af.set_exception(error)
        return af

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
        return await fut

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
        batches = bf._batches()
        group = _BatchGroup(af, bf, len(batches))
        if not batches:
            af.set_result(bf)
        for b in batches:
            self._watch_batch(b, group)
        return af

    # -- completions -------------------------------------------------------------------------------
    # self._pending[batch] is a flat list of _STRIDE items per record: [asyncio future, offset delta,
    # timestamp, key size, value size, ...] -- no tuple and no sync future kept per record, so that the
    # garbage collector has one object to track per record (the asyncio future) rather than three.
    # self._groups[batch]: the send_batch() groups waiting for it. A batch is registered once, with one
    # completion thunk.

    def _watch(self, b: Any, thunk_future: Any, af: "asyncio.Future[RecordMetadata]", delta: int, timestamp: int,
               key_size: int, value_size: int) -> None:
        lst = self._pending.get(b)
        if lst is not None:
            lst += (af, delta, timestamp, key_size, value_size)
            return
        self._pending[b] = [af, delta, timestamp, key_size, value_size]
        if b not in self._groups and b not in self._segs and not b.add_thunk(partial(self._batch_done, b), thunk_future):
            self._batch_done(b, None, None)  # (already complete)

    def _watch_batch(self, b: Any, group: _BatchGroup) -> None:
        groups = self._groups.get(b)
        if groups is not None:
            groups.append(group)
            return
        self._groups[b] = [group]
        if b not in self._pending and b not in self._segs \
                and not b.add_thunk(partial(self._batch_done, b), _FirstRecord(b)):
            self._batch_done(b, None, None)

    def _batch_done(self, batch: Any, _metadata: Any, _error: Any) -> None:
        """The completion thunk of a batch (network thread, or whichever thread completed it)."""
        self._done.append(batch)
        loop = self._loop
        if not self._scheduled and loop is not None:
            self._scheduled = True
            self.wakeups += 1
            try:
                loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop was closed before the producer: nobody is waiting any more
                pass

    def _deliver(self) -> None:
        """Resolve the futures of completed batches, at most DELIVER_CHUNK records per call (on the loop)."""
        self._scheduled = False
        self.delivery_callbacks += 1
        budget = DELIVER_CHUNK
        done, pending, segs_by_batch = self._done, self._pending, self._segs
        while budget > 0:
            try:
                batch = done.popleft()
            except IndexError:
                return
            entries = pending.pop(batch, None)
            if entries:
                if len(entries) > _STRIDE * budget:
                    pending[batch] = entries[_STRIDE * budget:]
                    entries = entries[:_STRIDE * budget]
                    done.appendleft(batch)
                    self._resolve(batch, entries)
                    break
                budget -= len(entries) // _STRIDE
                self._resolve(batch, entries)
            segs = segs_by_batch.pop(batch, None)
            if segs:
                budget = self._resolve_segments(batch, segs, budget)
                if segs:  # (out of budget: the rest next time)
                    segs_by_batch[batch] = segs
                    done.appendleft(batch)
                    break
            groups = self._groups.pop(batch, None)
            if groups:
                for group in groups:
                    self._group_batch_done(group)
        if done:
            self._scheduled = True
            self._loop.call_soon(self._deliver)  # type: ignore[union-attr]

    def _resolve_segments(self, batch: Any, segs: List[List[Any]], budget: int) -> int:
        """Resolve staged records of ``batch`` (segments ``[futures, keys, values, start, count, first delta,
        timestamp]``), at most ``budget``; resolved segments are removed from ``segs`` (a partly resolved one
        is shortened). Returns the budget left."""
        if batch.split_into is not None or batch.error is not None:
            # (rare: a failed or split batch) through the per-record path
            while segs and budget > 0:
                afs, keys, values, start, count, first, ts = segs.pop(0)
                entries: List[Any] = []
                for j in range(count):
                    k, v = keys[start + j], values[start + j]
                    entries += (afs[start + j], first + j, ts, -1 if k is None else len(k), -1 if v is None else len(v))
                self._resolve(batch, entries)
                budget -= count
            return budget
        topic, part, base = batch.topic, batch.partition, batch.base_offset
        append_time = batch.log_append_time
        while segs and budget > 0:
            seg = segs[0]
            afs, keys, values, start, count, first, ts = seg
            if count > budget:
                seg[3], seg[4], seg[5] = start + budget, count - budget, first + budget
                count = budget
            else:
                segs.pop(0)
            budget -= count
            if append_time >= 0:
                ts = append_time
            offset = base + first if base >= 0 else -1
            for i in range(start, start + count):
                af = afs[i]
                k = keys[i]
                v = values[i]
                try:
                    af.set_result(_tuple_new(RecordMetadata, (
                        topic, part, offset, ts, -1 if k is None else len(k), -1 if v is None else len(v))))
                except InvalidStateError:
                    pass  # cancelled by its owner: the record was sent all the same
                if offset >= 0:
                    offset += 1
        return budget

    def _resolve(self, batch: Any, entries: List[Any]) -> None:
        afs, deltas, timestamps = entries[0::_STRIDE], entries[1::_STRIDE], entries[2::_STRIDE]
        key_sizes, value_sizes = entries[3::_STRIDE], entries[4::_STRIDE]
        if batch.split_into is not None:
            # KIP-126: the batch was split; follow each record to the batch that holds it now
            for af, delta, ts, ks, vs in zip(afs, deltas, timestamps, key_sizes, value_sizes):
                b = batch
                while b.split_into is not None:
                    b, delta = b.split_into[delta]
                if not b.is_done():
                    self._watch(b, _FirstRecord(b), af, delta, ts, ks, vs)
                elif not af.done():
                    if b.error is not None:
                        af.set_exception(b.error)
                    else:
                        af.set_result(_metadata(b, delta, ts, ks, vs))
            return
        err = batch.error
        if err is not None:
            for af in afs:
                if not af.done():
                    af.set_exception(err)
            return
        topic, part, base = batch.topic, batch.partition, batch.base_offset
        append_time = batch.log_append_time
        for af, delta, ts, ks, vs in zip(afs, deltas, timestamps, key_sizes, value_sizes):
            try:
                af.set_result(_tuple_new(RecordMetadata, (
                    topic, part, base + delta if base >= 0 else -1, append_time if append_time >= 0 else ts, ks, vs)))
            except InvalidStateError:
                pass  # cancelled by its owner: the record was sent all the same

    def _group_batch_done(self, group: _BatchGroup) -> None:
        group.remaining -= 1
        if group.remaining > 0:
            return
        unfinished = [b for b in group.result._batches() if not b.is_done()]  # (after a split)
        if unfinished:
            group.remaining = len(unfinished)
            for b in unfinished:
                self._watch_batch(b, group)
            return
        af = group.future
        if af.done():
            return
        err = group.result._first_error()
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
        parts = self._metadata.cluster.partitions.get(topic)
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


def _metadata(batch: Any, delta: int, timestamp: int, key_size: int, value_size: int) -> RecordMetadata:
    base = batch.base_offset
    return RecordMetadata(batch.topic, batch.partition, base + delta if base >= 0 else -1,
                          batch.log_append_time if batch.log_append_time >= 0 else timestamp, key_size, value_size)


__all__ = ["AsyncProducer", "DELIVER_CHUNK", "STAGE_MAX", "YIELD_EVERY"]
