"""The public Producer: send(), flush(), close(), partitions_for(), metrics(), transactions."""
from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
from time import monotonic as _monotonic
from time import time as _wall
from types import FunctionType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple, Union

from .._version import __version__
from ..clock import SYSTEM_CLOCK, Clock
from ..config import ProducerConfig
from ..errors import (
    AuthenticationError,
    KafkaError,
    KafkaTimeoutError,
    NetworkThreadDiedError,
    NoBrokersAvailableError,
    ProducerClosedError,
    ProducerForkedError,
    TransactionAbortedError,
    TransactionError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from ..network.metadata import PartitionInfo
from ..network.selector import SETUP_MAX_RECEIVE_SIZE, Selector
from ..network.transport import Transport
from ..protocol.accel import MODULES, load
from ..protocol.topic import check_topic_name
from ..security import channel_security
from . import lifecycle
from .admission import (
    BOUND_EXTRA,
    FUTURE_ERRORS,
    HASH_CACHE_SIZE,
    MAX_PARTITION,
    RECORD_OVERHEAD,
    Header,
    HeaderInput,
    RecordAdmission,
    bad_partition,
    beyond_any_topic,
    check_headers,
    check_timestamp,
    check_topic,
    key_hash_miss,
    plain_record,
    record_size,
)
from .batch import ProducerBatch
from .consumer_group import ConsumerGroupMetadata, OffsetAndMetadata
from .core import TOPIC_TOUCH_MS, SendCore
from .future import (
    CALLBACK_CODES,
    BatchSendFuture,
    Callback,
    FutureRecordMetadata,
    check_callback,
    check_timeout,
    failed_future,
    network_thread_wait_error,
    on_network_thread,
)
from .interceptors import Interceptors, ProducerRecord, failure_metadata
from .metrics import Metric
from .partitioner import StickyPartitioner
from .plugins import close_plugins, configure_plugins
from .transaction_manager import TransactionalRequestResult, TransactionManager
from .wiring import wire_producer

_send_c = load(MODULES["producer"])

log = logging.getLogger(__name__)

_ids = itertools.count(1)
_RECORD_OVERHEAD = RECORD_OVERHEAD
_BOUND_EXTRA = BOUND_EXTRA
_CALLBACK_CODES = CALLBACK_CODES
_FunctionType = FunctionType


class Producer:
    """A thread-safe Kafka producer. Settings use Java's names (``{"linger.ms": 5}``) or Python aliases
    (``linger_ms=5``); see :mod:`kproducer.config` for the full list and defaults."""

    def __init__(self, config: Optional[Mapping[str, Any]] = None, *, clock: Optional[Clock] = None,
                 transport: Optional[Transport] = None, **settings: Any) -> None:
        """``clock`` and ``transport`` are for tests (kproducer.testing: a FakeClock, a scripted transport);
        by default the system clock and a socket Selector."""
        cfg = self.config = ProducerConfig(config, **settings)
        self._clock = clock or SYSTEM_CLOCK
        self.client_id = cfg.client_id or f"kproducer-{next(_ids)}"
        configure_plugins(cfg, self.client_id)  # plug-ins made from class names, as Java configures them
        clk = self._clock
        security = channel_security(cfg)
        # (what is opened from here on is closed again when the constructor fails: the OAuth token's refresher
        # thread, started by channel_security(), and the selector's sockets)
        selector: Optional[Transport] = None
        try:
            selector = transport if transport is not None else Selector(
                max(cfg.max_request_size, 100 * 1024 * 1024), cfg.send_buffer_bytes, cfg.receive_buffer_bytes,
                ssl_context=security.ssl_context, client_dns_lookup=cfg.client_dns_lookup,
                setup_max_receive_size=SETUP_MAX_RECEIVE_SIZE, keepalive=cfg.socket_keepalive_enable)
            # the parts are wired by the one function the test harness uses too (kproducer.testing)
            parts = self._parts = wire_producer(cfg, clk, selector, client_id=self.client_id, security=security)
            self._metadata = parts.metadata
            self._txn: Optional[TransactionManager] = parts.transaction_manager
            self._pool = parts.pool
            self._accumulator = parts.accumulator
            self._client = parts.client
            self._sender = parts.sender
            # serializers, interceptors, partitioning, checks; the sticky partitioner moves on after a batch's worth
            # (compressed batches hold more: the accumulator's ratio estimate)
            self._admission = RecordAdmission(
                cfg, self._txn, sticky=StickyPartitioner(cfg.batch_size, batch_bytes=self._accumulator.batch_limit))
            self._max_block_ms = cfg.max_block_ms
            # the send core: the rules every send path shares (touching a topic, appending runs, room in the pool)
            # and the narrow API the asyncio producer uses (send_core(); kproducer/producer/core.py)
            core = self._core = SendCore(metadata=self._metadata, admission=self._admission, pool=self._pool,
                                         accumulator=self._accumulator, sender=self._sender, txn=self._txn, clock=clk,
                                         max_block_ms=cfg.max_block_ms, wait_on_metadata=self._wait_on_metadata,
                                         wakeup=selector.wakeup)
            self._touch = core.touch
            self._wall_ms = clk.wall_ms
            self._monotonic_ms = clk.monotonic_ms
            self._system_clock = core.system_clock
            self._wake_for_new_batch = self._sender.wakeup_for_new_batch
            self._closed = False
            self._forked = False  # True in a child process that inherited this producer through fork()
            self._pid = os.getpid()
            self._close_lock = threading.Lock()
            self._plugins_closed = False
            #: the compiled fast path's gate (RecordAccumulator.gate)
            self._gate = self._accumulator.gate
            #: what send()'s compiled fast path reads (None: every record takes the Python send())
            self._fast = self._fast_path()
        except BaseException:
            if transport is None and selector is not None:
                selector.close_all()
            security.close()
            raise
        self._sender.start()
        # (the network thread references no Producer: dropped without close(), this object is collected,
        # the finalizer warns and the thread delivers what is queued; see lifecycle.py)
        self._finalizer = lifecycle.register(self, self._sender,
                                             lifecycle.exit_flush_seconds(cfg.delivery_timeout_ms))
        log.info("kproducer %s started (client.id=%s, bootstrap=%s, acks=%s, idempotence=%s)", __version__,
                 self.client_id, ",".join(f"{h}:{p}" for h, p in cfg.bootstrap_servers), cfg.acks,
                 cfg.enable_idempotence)

    # -- sending ---------------------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Optional[HeaderInput] = None,
             partition: Optional[int] = None, timestamp_ms: Optional[int] = None,
             callback: Optional[Callback] = None) -> FutureRecordMetadata:
        """Queue one record; returns its future. ``callback(metadata, exception)`` runs on the producer's
        network thread once the record is acknowledged or has failed (exactly one argument is None).

        Blocks at most max.block.ms for metadata or buffer memory. As Java's send(), errors about this
        record complete its future and callback instead of being raised (KafkaTimeoutError when metadata or
        buffer memory did not come within max.block.ms, MessageTooLargeError for a record over
        max.request.size, a topic's metadata error) and make an open transaction abortable. Raises
        TypeError/ValueError for bad arguments (e.g. a str key or value without a serializer),
        SerializationError, TransactionError outside a transaction, ProducerClosedError after close().
        The rules are those of kproducer.producer.admission, shared with send_batch()."""
        # This is the per-record hot path: every line here costs throughput. A record of plain bytes/None
        # without headers, when no serializer, interceptor or custom partitioner is configured, skips the
        # steps that cannot change it (admission.plain, admission.plain_record); every check below applies to
        # every record, through admission.py's functions (plain_record, check_timestamp, record_size and
        # size_limit: the Python paths' one copy of each rule). With the accelerator, Producer.send is a
        # _send.SendMethod: its fast_send() (_send.c) runs the plain case first with a compiled copy of these
        # rules (a record the partition's open batch has no room for goes on through _open_batch, the queueing
        # below: _append and _send_failed) and calls this function for everything else: a change to these rules
        # needs the same change there (tests/unit/test_fast_send.py compares the two).
        if self._closed or self._sender.fatal_error is not None:
            self._raise_unusable()
        if callback is not None and (type(callback) is not _FunctionType or
                                     id(callback.__code__) not in _CALLBACK_CODES):
            check_callback(callback)  # (a TypeError now rather than at every completion; checked once per code)
        adm = self._admission
        interceptors: Optional[Interceptors] = None
        try:
            if not (adm.plain and plain_record(key, value, headers)):
                interceptors = adm.interceptors
                if interceptors is not None:
                    topic, value, key, headers, partition, timestamp_ms = interceptors.on_send(
                        ProducerRecord(topic, value, key, headers, partition, timestamp_ms))
                raw_key, raw_value = key, value  # what a custom partitioner sees besides the bytes
                key, value, headers = adm.serialize(topic, key, value, headers)
            else:
                headers = None
            if self._system_clock:  # the real clock, read without a Python-level call
                now = _monotonic() * 1000.0
                if timestamp_ms is None:
                    timestamp = int(_wall() * 1000)
                else:
                    timestamp = check_timestamp(timestamp_ms)
            else:
                now = self._monotonic_ms()
                timestamp = self._wall_ms() if timestamp_ms is None else check_timestamp(timestamp_ms)
            waited: Optional[float] = None
            cluster = self._metadata.cluster
            num_partitions = cluster.partition_counts.get(topic)
            if num_partitions is None or (partition is not None and type(partition) is int
                                          and partition >= num_partitions):
                check_topic(topic)
                num_partitions = self._wait_on_metadata(topic, partition, self._max_block_ms)
                cluster = self._metadata.cluster
                waited = self._max_block_ms - (self._monotonic_ms() - now)
            else:
                self._touch(topic, now)
            # the record's size, about as encoded: it feeds sticky switching; its bound on the wire is checked
            # against max.request.size
            size = record_size(key, value, headers)
            if size > adm.size_limit:
                raise adm.too_large(size + _BOUND_EXTRA)
            sticky = None
            if partition is not None:
                if type(partition) is not int or not 0 <= partition < num_partitions:
                    raise bad_partition(partition, num_partitions, topic)
                part = partition
            elif adm.partitioner is not None:
                part = adm.custom_partition(topic, raw_key, key, raw_value, value, num_partitions, cluster)
            elif key is not None and not adm.ignore_keys:
                h = adm.hash_cache.get(key)
                if h is None:
                    h = key_hash_miss(adm.hash_cache, key)
                part = h % num_partitions
            else:
                # uniform sticky (KIP-794): stay on one partition until about batch.size bytes went to it
                sticky = adm.sticky.state.get(topic)
                if sticky is None or sticky[0] >= num_partitions:
                    sticky = adm.sticky.current(topic, cluster.available.get(topic, ()), num_partitions)
                part = sticky[0]
            if adm.txn is not None:
                adm.txn.check_can_send((topic, part))
            # (time spent above only counts against max.block.ms when metadata had to be fetched)
            fut = self._append(topic, part, timestamp, key, value, headers,
                               callback if interceptors is None else interceptors.callback(callback, topic, part),
                               self._max_block_ms if waited is None else waited, now)
            if sticky is not None:
                sticky[1] += size
                if sticky[1] >= sticky[2]:  # a batch's worth (compressed batches hold more: partitioner.py)
                    sticky[0] = adm.sticky.next_partition(cluster.available.get(topic, ()), num_partitions,
                                                          sticky[0])
                    sticky[1] = 0
                    sticky[2] = adm.sticky.limit(topic)
            return fut
        except FUTURE_ERRORS as e:
            # Java's doSend: an ApiException fails this record's future and callback (and makes an open
            # transaction abortable) instead of being thrown; programming errors still raise
            if interceptors is None:
                return self._send_failed(e, topic, partition, timestamp_ms, key, value, callback)
            return self._send_failed_intercepted(interceptors, e, topic, partition, timestamp_ms, key, value,
                                                 callback)
        except Exception as e:
            if interceptors is not None:  # Java's onSendError: the interceptors hear of it too
                interceptors.on_acknowledgement(
                    failure_metadata(topic, partition if type(partition) is int else -1), e)
            raise

    def _append(self, topic: str, part: int, timestamp: int, key: Optional[bytes], value: Optional[bytes],
                headers: Optional[Sequence[Header]], callback: Optional[Callback], max_block_ms: float,
                now: float) -> FutureRecordMetadata:
        """Queue a record that passed send()'s checks (RecordAccumulator.append: into the partition's open batch,
        or a new one, waiting up to ``max_block_ms`` for memory) and wake the network thread for a new batch."""
        result = self._accumulator.append(topic, part, timestamp, key, value, headers, callback, max_block_ms, now)
        if result[2]:
            # A new batch: the one before it is full, or this is the first of the partition. Java also wakes the
            # sender on every append while a partition has more than one batch; here each wakeup can cost a GIL
            # handoff, and the sender re-checks the queues after every response anyway.
            self._wake_for_new_batch(now, result[1])
        return result[0]

    def _open_batch(self, topic: str, part: int, timestamp: int, key: Optional[bytes], value: Optional[bytes],
                    callback: Optional[Callback], now: float, partition: Optional[int],
                    timestamp_ms: Optional[int]) -> FutureRecordMetadata:
        """The rest of send() for a record the compiled send() checked and placed (``part``) but could not append:
        the partition has no open batch with room. Queues it as send() does (:meth:`_append`, max.block.ms) and
        reports send()'s future errors through its future (:meth:`_send_failed`; ``partition`` and
        ``timestamp_ms``: send()'s arguments). The compiled send() counts the sticky bytes once it is queued."""
        try:
            return self._append(topic, part, timestamp, key, value, None, callback, self._max_block_ms, now)
        except FUTURE_ERRORS as e:
            return self._send_failed(e, topic, partition, timestamp_ms, key, value, callback)

    if _send_c is not None and not TYPE_CHECKING:
        # Producer.send as a compiled method: a plain record (see _fast_path) is queued in C without a Python
        # frame; every other call runs the send() above, unchanged (help(), signature and typing are its own)
        send = functools.update_wrapper(_send_c.SendMethod(send), send)

    def _fast_path(self) -> Any:
        """The compiled fast path's view of this producer (``_send.FastSend``), or None when the settings
        send every record through the Python send(): no accelerator, serializers, interceptors, a custom
        partitioner, or transactions. The fast path takes a record of bytes/None key and value without
        headers, for a topic whose metadata is known, and appends it to the partition's open batch, or hands it
        to :meth:`_open_batch` when that has no room; it falls back to the Python send() for anything else before
        changing anything, so the rules stay those of send()."""
        adm = self._admission
        if _send_c is None or not adm.plain or adm.txn is not None or self._txn is not None \
                and self._txn.is_transactional:
            return None
        acc = self._accumulator
        return _send_c.FastSend(
            sender=self._sender, metadata=self._metadata, accumulator=acc, batches=acc._batches, lock=acc._lock,
            hash_cache=adm.hash_cache, sticky=adm.sticky, topic_touched=self._core.touched,
            future_type=FutureRecordMetadata, batch_type=ProducerBatch,
            monotonic_ms=None if self._system_clock else self._monotonic_ms,
            wall_ms=None if self._system_clock else self._wall_ms, max_request_size=adm.max_request_size,
            record_overhead=_RECORD_OVERHEAD, bound_extra=_BOUND_EXTRA, hash_cache_size=HASH_CACHE_SIZE,
            touch_ms=TOPIC_TOUCH_MS, ignore_keys=adm.ignore_keys, gate=self._gate.flag, callback_codes=_CALLBACK_CODES,
            open_batch=type(self)._open_batch)  # (unbound: a bound method here would make a cycle with the producer)

    def _send_failed_intercepted(self, interceptors: Interceptors, error: KafkaError, topic: str,
                                 partition: Optional[int], timestamp_ms: Optional[int], key: Any, value: Any,
                                 callback: Optional[Callback]) -> FutureRecordMetadata:
        """_send_failed with interceptors: they hear of the error through the callback, or here when it is
        raised after all."""
        failed_part = partition if type(partition) is int else -1
        try:
            return self._send_failed(error, topic, partition, timestamp_ms, key, value,
                                     interceptors.callback(callback, topic, failed_part))
        except Exception as raised:
            interceptors.on_acknowledgement(failure_metadata(topic, failed_part), raised)
            raise

    def _send_failed(self, error: KafkaError, topic: str, partition: Optional[int], timestamp_ms: Optional[int],
                     key: Any, value: Any, callback: Optional[Callback]) -> FutureRecordMetadata:
        if isinstance(error, (AuthenticationError, TransactionError)) or self._closed \
                or error is self._sender.fatal_error:
            raise error  # a misconfiguration, misuse, a fatal producer error or close(): not about this record
        log.debug("send() to %s failed: %s", topic, error)
        txn = self._txn
        if txn is not None and txn.is_transactional:
            txn.maybe_transition_to_error_state(error)
        self._sender.metrics.record_errors(None, 1)
        timestamp = timestamp_ms if type(timestamp_ms) is int else self._wall_ms()
        return failed_future(topic, partition if type(partition) is int else None, timestamp,
                             len(key) if isinstance(key, bytes) else -1, len(value) if isinstance(value, bytes) else -1,
                             error, callback)

    def _raise_unusable(self) -> None:
        if self._closed:
            self._raise_closed("send()")
        assert self._sender.fatal_error is not None
        raise self._sender.fatal_error

    def send_batch(self, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]] = None,
                   headers: Optional[Sequence[Optional[HeaderInput]]] = None,
                   partition: Union[int, Sequence[int], None] = None,
                   timestamp_ms: Optional[int] = None) -> BatchSendFuture:
        """Queue many records for one topic in one call (the bulk path used by the Spark sink).

        ``keys`` and ``headers``, when given, are sequences as long as ``values``. ``partition`` is one
        partition for all records, a sequence with one partition per record, or None (keyed records go by
        murmur2, keyless ones are spread over the partitions in batch-sized runs). Every record passes the
        rules send() applies (kproducer.producer.admission) before any is queued: a bad one raises — also
        the errors send() would report through the record's future (a metadata timeout, a record too
        large) — and nothing is sent. Returns a :class:`BatchSendFuture`.
        """
        if self._closed:
            self._raise_closed("send_batch()")
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error
        check_topic(topic)
        adm = self._admission
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError(f"keys has {len(keys)} items but values has {n}")
        if headers is not None and len(headers) != n:
            raise ValueError(f"headers has {len(headers)} items but values has {n}")
        interceptors = adm.interceptors
        if interceptors is not None:
            values, keys, headers, partition = self._intercept_batch(interceptors, topic, values, keys, headers,
                                                                     partition, timestamp_ms)
        try:
            return self._admit_batch(adm, topic, n, values, keys, headers, partition, timestamp_ms)
        except Exception as e:
            if interceptors is not None:  # Java's onSendError, for each record
                md = failure_metadata(topic, partition if type(partition) is int else -1)
                for _ in range(n):
                    interceptors.on_acknowledgement(md, e)
            raise

    def _admit_batch(self, adm: RecordAdmission, topic: str, n: int, values: Sequence[Any],
                     keys: Optional[Sequence[Any]], headers: Optional[Sequence[Optional[HeaderInput]]],
                     partition: Union[int, Sequence[int], None], timestamp_ms: Optional[int]) -> BatchSendFuture:
        hs: Optional[List[Optional[List[Header]]]] = None
        if headers is not None:
            hs = [check_headers(h) for h in headers]
        if adm.key_serializer is not None or adm.value_serializer is not None:
            # serializers see (and may add to) each record's own headers list
            lists: List[Optional[List[Header]]] = [h if h is not None else [] for h in (hs or [None] * n)]
            ks = adm.bulk_bytes("key", topic, keys, lists) if keys is not None else None
            vals = adm.bulk_bytes("value", topic, values, lists)
            hs = [check_headers(h) for h in lists]
        else:
            ks = adm.bulk_bytes("key", topic, keys, None) if keys is not None else None
            vals = adm.bulk_bytes("value", topic, values, None)
        if hs is not None and not any(hs):
            hs = None
        clock = self._clock
        timestamp = clock.wall_ms() if timestamp_ms is None else check_timestamp(timestamp_ms)
        start = clock.monotonic_ms()
        single, per_record = (None, None) if partition is None else adm.explicit_partitions(n, partition)
        if n == 0:
            return BatchSendFuture(topic, 0, [], timestamp)
        adm.check_sizes(ks, vals, hs)
        cluster = self._metadata.cluster
        num_partitions = cluster.partition_counts.get(topic)
        highest = single if per_record is None else max(per_record)
        if num_partitions is None or (highest is not None and highest >= num_partitions):
            # a partition beyond the known count may be new: wait for metadata, as send() does
            num_partitions = self._wait_on_metadata(topic, highest, self._max_block_ms)
            cluster = self._metadata.cluster
        else:
            self._touch(topic, start)
        groups = adm.groups(topic, n, single, per_record, keys, ks, values, vals, hs, num_partitions, cluster)
        adm.check_can_send(topic, [part for part, _idxs in groups])
        append = self._core.append_rows
        try:
            segments = self._append_groups(groups, start, lambda part, idxs, remaining, now, segs: append(
                topic, part, timestamp, ks, vals, hs, idxs, remaining, now, segs))
        except KafkaError as e:
            # (e.g. no buffer memory within max.block.ms) records before the failing one may be queued already:
            # an open transaction must not commit them without the others (as a failed send() makes it abortable)
            if adm.txn is not None:
                adm.txn.maybe_transition_to_error_state(e)
            raise
        if adm.interceptors is not None and adm.interceptors.acknowledges:
            self._acknowledge_each(adm.interceptors, segments, timestamp, ks, vals)
        return BatchSendFuture(topic, n, segments, timestamp, ks, vals)

    def _append_groups(self, groups: Sequence[Tuple[int, Sequence[int]]], start: float,
                       append: Callable[[int, Sequence[int], float, float, List[Any]], bool]) -> List[Any]:
        """Append each partition's rows with ``append(partition, rows, remaining max.block.ms, now, segments)``
        (an accumulator append returning whether the sender should wake), max.block.ms counted from ``start``
        for the whole call; wakes the sender once at the end. The segments, for the BatchSendFuture."""
        segments: List[Any] = []
        wake = False
        clock = self._clock
        for part, rows in groups:
            now = clock.monotonic_ms()
            if append(part, rows, self._max_block_ms - (now - start), now, segments):
                wake = True
        if wake:
            self._sender.wakeup()
        return segments

    @staticmethod
    def _intercept_batch(interceptors: Interceptors, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]],
                         headers: Optional[Sequence[Optional[HeaderInput]]], partition: Union[int, Sequence[int], None],
                         timestamp_ms: Optional[int]) -> Tuple[Sequence[Any], Optional[Sequence[Any]],
                                                               Optional[Sequence[Optional[HeaderInput]]],
                                                               Union[int, Sequence[int], None]]:
        """Each record through the interceptors' on_send. send_batch() has one topic and one timestamp: an
        interceptor's change to those is not honoured there (logged); a changed partition is."""
        per_record = partition if partition is not None and type(partition) is not int else None
        records = [interceptors.on_send(ProducerRecord(
            topic, v, keys[i] if keys is not None else None, headers[i] if headers is not None else None,
            per_record[i] if per_record is not None else partition, timestamp_ms))  # type: ignore[arg-type,index]
            for i, v in enumerate(values)]
        if any(r.topic != topic or r.timestamp_ms != timestamp_ms for r in records):
            log.warning("a producer interceptor changed the topic or timestamp of records given to send_batch(), "
                        "which sends to one topic with one timestamp: those changes are ignored (use send())")
        parts = [r.partition for r in records]
        new_partition: Union[int, Sequence[int], None] = partition
        if per_record is not None or any(p != partition for p in parts):
            new_partition = parts  # type: ignore[assignment]  # (checked by the admission rules)
        return ([r.value for r in records], None if keys is None and all(r.key is None for r in records)
                else [r.key for r in records],
                None if headers is None and all(not r.headers for r in records) else [r.headers for r in records],
                new_partition)

    @staticmethod
    def _acknowledge_each(interceptors: Interceptors, segments: List[Any], timestamp: int,
                          keys: Optional[Sequence[Optional[bytes]]], values: Sequence[Optional[bytes]]) -> None:
        """on_acknowledgement for every record of a send_batch(), when its batch completes."""
        for batch, first, count, idxs in segments:
            for j in range(count):
                i = idxs[j]
                k, v = keys[i] if keys is not None else None, values[i]
                fut = FutureRecordMetadata(batch, first + j, timestamp, -1 if k is None else len(k),
                                           -1 if v is None else len(v))
                fut.add_callback(interceptors.callback(None, batch.topic, batch.partition))  # type: ignore[arg-type]

    def _wait_on_metadata(self, topic: str, partition: Optional[int], max_wait_ms: float) -> int:
        """Block until the topic's partitions are known; return their count. An illegal topic name fails at
        once (InvalidTopicError), as no broker would ever know it."""
        check_topic_name(topic)
        if partition is not None and partition > MAX_PARTITION:
            raise beyond_any_topic(partition, topic)  # (no metadata will ever list it: do not wait)
        md = self._metadata
        count = md.cluster.partition_counts.get(topic)
        if count is not None and (partition is None or partition < count):
            md.add_topic(topic)
            return count  # known: no wait (and, as Java, no metadata-wait time)
        clock = self._clock
        started = clock.monotonic_ms()
        md.add_topic(topic)
        if on_network_thread():
            # (a send callback): only this thread fetches metadata; ask for it, for a later send, but do not wait
            md.request_update_for_topic(topic)
            raise network_thread_wait_error(
                f"a wait for the metadata of topic {topic!r} (send(), send_batch(), partitions_for())",
                "the topic's metadata is not known yet" if partition is None
                else f"the topic's metadata does not have partition {partition} yet",
                "call partitions_for(topic) before, outside the callback, so that its metadata is known")
        deadline = started + max_wait_ms
        auth_failures = md.auth_failures
        # a topic error is raised from an answer that came during this wait, never from an older one (Java
        # asks for fresh metadata first): a topic refused before may have been granted (an ACL added) since
        refreshed = False
        answered_at = md.version  # (a metadata answer came during this wait when md.version moved past it)
        warned = False
        while True:
            auth_error = md.authentication_error_since(auth_failures)
            if auth_error is not None:
                raise auth_error
            cluster = md.cluster
            count = cluster.partition_counts.get(topic)
            if count is not None and (partition is None or partition < count):
                # metadata-wait-time-ns-total (as Java: a wait that found the topic)
                self._sender.metrics.record_call_time("metadata-wait", clock.monotonic_ms() - started)
                return count
            exc = md.topic_exception(topic)
            if exc is not None and refreshed:
                raise exc
            if not warned and count is None and refreshed and md.version > answered_at and \
                    cluster.topic_errors.get(topic) == UnknownTopicOrPartitionError.code:
                warned = True  # (Java logs each such answer at WARN; here once per wait)
                log.warning("Topic %r: %s; waiting up to max.block.ms=%.0f for it to be created", topic,
                            self._unknown_topic_reason(), max_wait_ms)
            if self._closed:
                raise ProducerClosedError("the producer was closed while waiting for metadata")
            if self._sender.fatal_error is not None:
                raise self._sender.fatal_error
            remaining = deadline - clock.monotonic_ms()
            if remaining <= 0:
                if exc is not None:
                    raise exc
                if count is not None:
                    raise KafkaTimeoutError(
                        f"Partition {partition} of topic {topic!r} with partition count {count} is not present "
                        f"in metadata after {max_wait_ms:.0f} ms (max.block.ms)")
                code = cluster.topic_errors.get(topic)
                if code is not None and md.version > answered_at:
                    # the broker answered: say what, not "or no broker is reachable"
                    broker_error = error_for_code(code)
                    reason = self._unknown_topic_reason() if code == UnknownTopicOrPartitionError.code else \
                        f"{self._answered_by()} answered {broker_error.name} for it"
                    raise KafkaTimeoutError(
                        f"Topic {topic!r} not present in metadata after {max_wait_ms:.0f} ms (max.block.ms): "
                        f"{reason}") from broker_error
                errors = self._client.describe_connection_errors()
                if not self._client.ever_connected:
                    raise NoBrokersAvailableError(
                        f"Topic {topic!r} not present in metadata after {max_wait_ms:.0f} ms (max.block.ms): no "
                        "broker is reachable (check bootstrap.servers and that the brokers are up)"
                        + (f"; last connection errors: {errors}" if errors else ""))
                raise KafkaTimeoutError(
                    f"Topic {topic!r} not present in metadata after {max_wait_ms:.0f} ms (max.block.ms): no "
                    "broker answered a metadata request during the wait"
                    + (f"; last connection errors: {errors}" if errors else ""))
            version = md.request_update_for_topic(topic)
            self._sender.wakeup()
            md.await_update(version, remaining, auth_failures)
            refreshed = True

    def _answered_by(self) -> str:
        answered = self._metadata.answered_by
        return f"broker {answered[0]} ({answered[1]})" if answered is not None else "the broker"

    def _unknown_topic_reason(self) -> str:
        """What an UNKNOWN_TOPIC_OR_PARTITION answer for a topic means: it does not exist and the broker did
        not create it, because this producer or the broker has auto-creation off."""
        why = "this producer has allow.auto.create.topics=false" if not self.config.allow_auto_create_topics \
            else "the broker does not create topics on metadata requests (auto.create.topics.enable=false)"
        return (f"{self._answered_by()} answered UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist and {why}; "
                "create it first (kafka-topics.sh --create), or check its name")

    # -- flush / close ---------------------------------------------------------------------------

    def flush(self, timeout: Optional[float] = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed. ``timeout`` in seconds (None
        or inf: no limit); KafkaTimeoutError when it passes first."""
        timeout = check_timeout(timeout, "flush()")
        if self._forked:
            self._raise_closed("flush()")
        if on_network_thread():
            raise network_thread_wait_error("flush()", "the records are not acknowledged yet",
                                            "flush outside the callback")
        died = self._sender.died_error
        if died is not None:
            raise died
        acc = self._accumulator
        auth_failures = self._sender.authentication_failures
        started = self._monotonic_ms()
        acc.begin_flush()
        try:
            self._sender.wakeup()
            if not acc.await_flush_completion(timeout):
                raise KafkaTimeoutError(f"flush() timed out after {timeout} s with records still unacknowledged")
        finally:
            acc.end_flush()
            # flush-time-ns-total (Java records it however the wait ends)
            self._sender.metrics.record_call_time("flush", self._monotonic_ms() - started)
        died = self._sender.died_error
        if died is not None:  # (the network thread died during the flush: it failed the records)
            raise died
        # records that could not be delivered because a broker refused our credentials or TLS settings
        # failed with that error: say so here too, as a misconfiguration is not a per-record problem;
        # likewise when no broker can be reached at all because of it (records may have failed earlier)
        auth_error = self._sender.last_authentication_error
        if self._sender.authentication_failures != auth_failures and auth_error is not None:
            raise auth_error
        current = self._metadata.current_authentication_error()
        if current is not None and not self._client.states.any_ready():
            raise current

    def close(self, timeout: Optional[float] = None) -> None:
        """Send what is queued (waiting up to ``timeout`` seconds, forever when None), then stop. Records
        still unsent after the timeout fail with ProducerClosedError.

        In a child process that inherited this producer through fork(), close() only drops the child's
        copy: nothing is sent (the connections belong to the parent) and nothing is raised."""
        timeout = check_timeout(timeout, "close()")
        if self._forked:
            log.debug("close() of %s in a forked child: dropping the inherited producer", self.client_id)
            return
        with self._close_lock:
            done = self._closed and not self._sender.is_alive()
            self._refuse_records()
        if done:
            self._close_plugins()  # (no-op unless a close() from a callback left them open)
            return
        self._finalizer.detach()
        lifecycle.closing(self._sender)
        if threading.current_thread() is self._sender:
            log.warning("close() called from a producer callback: closing without waiting")
            self._sender.force_stop()
            return
        self._sender.initiate_close()
        if timeout is None or timeout > 0:
            self._sender.join(timeout)
        if self._sender.is_alive():
            if self._accumulator.has_incomplete():
                log.warning("close(timeout=%s) expired with records pending: failing them", timeout)
            else:  # (nothing was sent, or everything is acknowledged: no record is failed)
                log.debug("close(timeout=%s): stopping the network thread", timeout)
            self._sender.force_stop()
            self._sender.join(30)
        self._metadata.close()
        self._pool.close()
        self._close_plugins()
        log.info("kproducer %s closed", self.client_id)
        died = self._sender.died_error
        if died is not None:  # (said by the first close(); the records not acknowledged failed with it)
            raise died

    def _close_plugins(self) -> None:
        """Interceptors, serializers and partitioner with a close(): closed once, errors logged (plugins.py)."""
        with self._close_lock:
            if self._plugins_closed:
                return
            self._plugins_closed = True
        close_plugins(self.config)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        except NetworkThreadDiedError:
            if exc[0] is None:
                raise  # (else the exception leaving the block is the one to see)

    # -- fork (see lifecycle.py) -----------------------------------------------------------------

    def _mark_forked(self) -> None:
        """Called in a child process right after fork(): this producer belongs to the parent. Takes no lock
        (one may have been held by another parent thread at the fork)."""
        self._forked = True
        self._refuse_records()  # (send() checks only _closed on its hot path, then finds _forked)
        self._finalizer.detach()

    def _refuse_records(self) -> None:
        """No record is taken from now on (close(), exit, fork): set ``_closed`` and close the compiled
        send()'s gate. Every place that closes the producer goes through here."""
        self._closed = True
        self._gate.close()

    def _raise_closed(self, call: str) -> NoReturn:
        if self._forked:
            raise ProducerForkedError(
                f"{call} on a producer inherited through fork() (created in process {self._pid}, this is "
                f"process {os.getpid()}): a producer cannot be used across fork(); create a new Producer "
                "in the child process")
        raise ProducerClosedError(f"{call} called after close(): the producer no longer accepts records")

    # -- transactions ----------------------------------------------------------------------------

    def _block_s(self, timeout: Optional[float]) -> Optional[float]:
        """A transactional call's wait: max.block.ms, or ``timeout`` seconds (inf: no limit)."""
        return self._max_block_ms / 1000.0 if timeout is None else check_timeout(timeout, "the transactional call")

    def _transactions(self) -> TransactionManager:
        self._check_open()
        txn = self._txn
        if txn is None or not txn.is_transactional:
            raise TransactionError("transactions need a transactional_id: Producer(..., transactional_id='my-app-1')")
        return txn

    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Register the transactional.id with its coordinator (fencing older producers with the same id)
        and get a producer id. Call once, before the first transaction; waits up to max.block.ms. After a
        timeout call it again (it continues in the background; the retry gets its outcome). When the
        coordinator refuses it (TransactionalIdAuthorizationFailedError, ClusterAuthorizationFailedError) it
        may be called again once the ACLs allow it, as in Java."""
        txn = self._transactions()
        started = self._monotonic_ms()
        self._await_result(txn.init_transactions(), timeout, "txn-init", started)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent until commit/abort belong to it."""
        txn = self._transactions()
        started = self._monotonic_ms()
        txn.begin_transaction()
        self._sender.metrics.record_call_time("txn-begin", self._monotonic_ms() - started)

    def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Union[int, OffsetAndMetadata]],
                                    group_id: Union[str, ConsumerGroupMetadata], timeout: Optional[float] = None,
                                    generation_id: int = -1, member_id: str = "",
                                    group_instance_id: Optional[str] = None) -> None:
        """Commit consumer offsets (``{(topic, partition): next offset to read}``, or
        ``{(topic, partition): OffsetAndMetadata(offset, metadata)}``) for a consumer group as part of the
        transaction (consume-transform-produce). ``group_id`` is the consumer's :class:`ConsumerGroupMetadata`
        (its generation and member ids let the coordinator fence a zombie consumer, TxnOffsetCommit v3+),
        or a bare group id (then ``generation_id``, ``member_id`` and ``group_instance_id`` may be given).
        No offsets (``{}``): nothing is sent, as in Java."""
        txn = self._transactions()
        group = group_id
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group, generation_id, member_id, group_instance_id)
        if not offsets:
            if not isinstance(group, ConsumerGroupMetadata):
                raise TypeError(f"group_id must be a group id (str) or a ConsumerGroupMetadata, got "
                                f"{type(group).__name__}")
            return  # (Java's sendOffsetsToTransaction: no AddOffsetsToTxn, no TxnOffsetCommit, no metric)
        started = self._monotonic_ms()
        self._await_result(txn.send_offsets_to_transaction(offsets, group), timeout, "txn-send-offsets", started)

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Flush the transaction's records and commit it. Raises TransactionError when a record failed
        (the record's error is its ``__cause__``; then call abort_transaction()). After a timeout
        (KafkaTimeoutError) the commit goes on in the background: call commit_transaction() again to get its
        outcome (also when it completed meanwhile); no other transactional call is accepted until then
        (PendingCallError), as in Java."""
        txn = self._transactions()
        started = self._monotonic_ms()
        self._await_result(txn.begin_commit(), timeout, "txn-commit", started)

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort the transaction: unsent records fail with TransactionAbortedError; what was written is
        marked aborted for read_committed consumers. Refused (IllegalStateError) while a commit is pending.
        A timeout is retried as commit_transaction()'s is."""
        txn = self._transactions()
        started = self._monotonic_ms()
        result = txn.begin_abort()
        # (without an epoch bump a record sent before and awaiting its retry is sent still, before EndTxn)
        self._accumulator.abort_undrained_batches(TransactionAbortedError(
            "the transaction was aborted before this record was sent"), keep_sequenced=txn.abort_keeps_sent_batches())
        self._await_result(result, timeout, "txn-abort", started)

    def _await_result(self, result: TransactionalRequestResult, timeout: Optional[float], timer: Optional[str],
                      started: float) -> None:
        """Wake the network thread for a transactional request and wait for its result (raising its error);
        on success, the call's time since ``started`` goes to the ``<timer>-time-ns-total`` metric (Java's
        KafkaProducerMetrics)."""
        self._sender.wakeup()
        result.wait(self._block_s(timeout))
        if timer is not None:
            self._sender.metrics.record_call_time(timer, self._monotonic_ms() - started)

    def _check_open(self, call: str = "a transactional call") -> None:
        if self._closed:
            if self._forked:
                self._raise_closed(call)
            raise ProducerClosedError("the producer is closed")

    # -- introspection ---------------------------------------------------------------------------

    def partitions_for(self, topic: str, timeout: Optional[float] = None) -> List[PartitionInfo]:
        """The topic's partitions (waiting up to max.block.ms, or ``timeout`` seconds, for metadata)."""
        if self._forked:
            self._raise_closed("partitions_for()")
        if timeout is None:
            wait_ms = float(self._max_block_ms)
        else:
            seconds = check_timeout(timeout, "partitions_for()")
            wait_ms = float("inf") if seconds is None else seconds * 1000.0
        self._wait_on_metadata(topic, None, wait_ms)
        return list(self._metadata.cluster.partitions.get(topic, ()))

    def metrics(self) -> Dict[str, Union[int, float]]:
        """Every metric, measured now, by name: Java's producer-metrics by their bare names
        (``record-send-rate``, ``request-latency-avg``, ...), per-topic ones as ``record-send-rate{topic=orders}``
        and per-node ones as ``request-latency-avg{node-id=node-1}``. Rates are per second and, with averages
        and maxima, cover the last metrics.num.samples x metrics.sample.window.ms (NaN when nothing was
        recorded there); ``-total`` metrics count from the start. See docs/metrics.md."""
        if self._forked:
            self._raise_closed("metrics()")
        return self._sender.metrics.snapshot()

    def metric_list(self) -> List[Metric]:
        """Every metric, measured now, as :class:`~kproducer.producer.metrics.Metric` (name, group, tags,
        description, value): what monitoring bridges such as kproducer.metrics_prometheus read."""
        return self._sender.metrics.metric_list()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.config.bootstrap_servers)

    def __repr__(self) -> str:
        state = " forked" if self._forked else " closed" if self._closed else ""
        return f"<Producer {self.client_id} {self.bootstrap_servers}{state}>"


def send_core(producer: Producer) -> SendCore:
    """The producer's send core (kproducer/producer/core.py): the internal API the asyncio producer uses."""
    return producer._core


__all__ = ["HeaderInput", "Producer", "send_core"]
