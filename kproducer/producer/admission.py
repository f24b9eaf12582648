"""Record admission: the rules a record passes before it is queued, shared by ``send()`` and ``send_batch()``.

One pipeline, in this order (as Java's KafkaProducer.doSend):

1. the producer is open (ProducerClosedError) and has no fatal error;
2. interceptors' ``on_send`` (:mod:`kproducer.producer.interceptors`), on the record as given;
3. key and value to bytes: the configured serializer (SerializationError when it fails or returns something
   else than bytes/None), else bytes-like or None (TypeError with a hint for str);
4. headers: ``(str, bytes | None)`` pairs or a dict (TypeError);
5. timestamp: None (now) or an int in ``[0, 2**63 - 1]`` (Java's long; ValueError naming ``timestamp_ms``;
   a bool is not a timestamp);
6. the topic: a non-empty str (TypeError), a legal name (InvalidTopicError), its metadata within
   max.block.ms (KafkaTimeoutError, or the topic's metadata error);
7. the size bound: the record *with its headers*, worst-case varints and the batch header, within
   max.request.size (and buffer.memory): MessageTooLargeError;
8. the partition: an explicit one is an int (a bool is not) in ``[0, partitions)`` (ValueError; one beyond
   the known count may be new: wait for metadata as Java does, unless it is beyond Java's int, which no topic
   has: ValueError at once); else the custom partitioner's answer, checked
   the same way; else murmur2 of the key (:attr:`RecordAdmission.hash_cache`, the one cache) or uniform sticky
   (:class:`~kproducer.producer.partitioner.StickyPartitioner`, the one sticky state);
9. a transactional producer must be in a transaction (TransactionError).

Where the errors go (the documented contract, kept from Java): ``send()`` reports the errors that are about
this record and the cluster — :data:`FUTURE_ERRORS`: a metadata or buffer-memory timeout, a record too large,
a topic's metadata error — through the record's future and callback, and raises the others (bad arguments,
serialization, misuse, a closed or failed producer). ``send_batch()`` checks every record before it queues
any and raises every error (there is no per-record future to carry it); the exception types are the same.

``send()`` keeps a short path for a record of plain bytes/None without headers (:func:`plain_record`) when no
serializer, interceptor or custom partitioner is configured (:attr:`RecordAdmission.plain`); it applies the same
rules through the same functions and limit (:func:`valid_timestamp`, :func:`record_size`,
:attr:`RecordAdmission.size_limit`), and the tests run every invalid input through both calls.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..errors import (
    BrokerResponseError,
    KafkaTimeoutError,
    MessageTooLargeError,
    SerializationError,
)
from ..protocol.accel import records as _records_c
from ..protocol.records import RecordBatchBuilder
from ..serialization import SerializeFn, serialize_fn
from .interceptors import Interceptors
from .partitioner import ClusterView, PartitionFn, StickyPartitioner, murmur2, partition_fn

if TYPE_CHECKING:
    from ..config import ProducerConfig
    from ..network.metadata import Cluster
    from .transaction_manager import TransactionManager

log = logging.getLogger(__name__)

Header = Tuple[str, Optional[bytes]]
HeaderInput = Union[Sequence[Tuple[str, Optional[bytes]]], Mapping[str, Optional[bytes]]]
#: ``(partition, record positions)``, each group in input order (a partition may come twice)
Groups = List[Tuple[int, Sequence[int]]]

#: errors send() reports through the record's future and callback rather than raising (Java's ApiException:
#: metadata wait timeout, buffer exhausted, record too large, a topic's metadata error)
FUTURE_ERRORS = (KafkaTimeoutError, BrokerResponseError)

# a record without headers: about 10 bytes of varints and attributes on top of key and value; the upper
# bound (worst-case varints and the batch header) is BOUND_EXTRA more
RECORD_OVERHEAD = 10
BOUND_EXTRA = RecordBatchBuilder.estimate_record_size(None, None, None) - RECORD_OVERHEAD
HASH_CACHE_SIZE = 65536  # keys whose murmur2 hash is remembered (most workloads repeat keys)

_BYTES = (bytes, bytearray, memoryview)
_BYTES_OR_NONE = {bytes, type(None)}
#: the largest record timestamp (Java's Long.MAX_VALUE: the record batch's int64 fields) and partition (a
#: partition number is a Java int)
MAX_TIMESTAMP = (1 << 63) - 1
MAX_PARTITION = (1 << 31) - 1


def key_hash_miss(cache: Dict[bytes, int], key: bytes) -> int:
    """The positive murmur2 hash of ``key`` (Java's ``toPositive(murmur2(key))``), stored in ``cache``, the
    producer's one key-hash cache (:attr:`RecordAdmission.hash_cache`), which starts over when full. Callers
    look the key up first (``cache.get(key)``, one C call on a plain dict) and come here on a miss."""
    h = murmur2(key) & 0x7FFFFFFF
    if len(cache) >= HASH_CACHE_SIZE:
        cache.clear()
    cache[key] = h
    return h


# -- the rules, as functions (send()'s fast path raises through the same ones) --------------------------

def to_bytes(what: str, obj: Any) -> Optional[bytes]:
    """A key or value without a serializer: bytes-like or None (TypeError, with a hint for str)."""
    if obj is None or type(obj) is bytes:
        return obj  # type: ignore[no-any-return]
    if isinstance(obj, (bytearray, memoryview)):
        return bytes(obj)
    hint = ""
    if isinstance(obj, str):
        hint = (f"; encode it (e.g. {what}={what}.encode()) or set {what}_serializer=str.encode (or 'str') when "
                "creating the Producer")
    elif isinstance(obj, (dict, list, tuple, int, float, bool)):
        hint = (f"; to send it as JSON set {what}_serializer=\"json\" when creating the Producer (or pass a "
                f"callable that makes bytes of it)")
    else:
        hint = f"; set {what}_serializer= (a callable returning bytes) when creating the Producer"
    raise TypeError(f"{what} must be bytes or None, got {type(obj).__name__}{hint}")


def serialized(what: str, fn: SerializeFn, topic: str, obj: Any, headers: List[Header]) -> Optional[bytes]:
    """``obj`` through the configured serializer: bytes or None, else SerializationError."""
    try:
        out = fn(topic, obj, headers)
    except Exception as e:
        raise SerializationError(f"the {what}_serializer failed on {obj!r}: {e}") from e
    if out is None or type(out) is bytes:
        return out
    if isinstance(out, (bytearray, memoryview)):
        return bytes(out)
    raise SerializationError(f"the {what}_serializer returned {type(out).__name__}, not bytes")


def check_headers(headers: Any) -> Optional[List[Header]]:
    """Headers as a list of ``(str, bytes | None)`` pairs (None when there are none); TypeError otherwise. Given
    as pairs or a dict; a str value is encoded as UTF-8 (as confluent-kafka does)."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: List[Header] = []
    try:
        for k, v in items:
            if not isinstance(k, str):
                raise TypeError(f"header keys must be str, got {type(k).__name__} ({k!r})")
            if v is not None and type(v) is not bytes:
                if isinstance(v, str):
                    v = v.encode("utf-8")
                elif isinstance(v, (bytearray, memoryview)):
                    v = bytes(v)
                else:
                    raise TypeError(f"header {k!r}: value must be bytes, str or None, got {type(v).__name__}")
            out.append((k, v))
    except (TypeError, ValueError) as e:
        if isinstance(e, TypeError) and str(e).startswith("header"):
            raise
        raise TypeError(f"headers must be a list of (str, bytes) pairs or a dict: {e}") from None
    return out or None


def bad_timestamp(timestamp_ms: Any) -> ValueError:
    return ValueError(f"timestamp_ms must be an int in [0, 2**63 - 1] (ms since the epoch, a Java long), got "
                      f"{timestamp_ms!r}")


def valid_timestamp(timestamp_ms: Any) -> bool:
    """The timestamp rule: an explicit timestamp is an int in ``[0, MAX_TIMESTAMP]`` (a bool is not one).
    Used by :func:`check_timestamp`, send() and the asyncio producer's staging; the compiled copies (_send.c,
    _aio.c) are kept equal by the differential tests."""
    return type(timestamp_ms) is int and 0 <= timestamp_ms <= MAX_TIMESTAMP


def check_timestamp(timestamp_ms: Any) -> int:
    """An explicit timestamp, checked by :func:`valid_timestamp` (ValueError when it is not valid)."""
    if not valid_timestamp(timestamp_ms):
        raise bad_timestamp(timestamp_ms)
    return timestamp_ms  # type: ignore[no-any-return]


def plain_record(key: Any, value: Any, headers: Any) -> bool:
    """The plain-record rule: bytes/None key and value and no headers (an empty list or dict is none). With
    :attr:`RecordAdmission.plain` settings such a record skips interceptors and serialization. Used by send()
    and the asyncio producer's staging; the compiled copies (_send.c, _aio.c) are kept equal by the
    differential tests."""
    return not headers and (value is None or type(value) is bytes) and (key is None or type(key) is bytes)


def check_topic(topic: Any) -> None:
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"topic must be a non-empty str, got {topic!r}")


def bad_partition(partition: Any, num_partitions: int, topic: str, record: Optional[int] = None) -> ValueError:
    which = "" if record is None else f"record {record}: "
    return ValueError(f"{which}partition {partition!r} is not in the range [0..{num_partitions}) of topic {topic!r}"
                      " (a partition is an int)")


def beyond_any_topic(partition: int, topic: Optional[str] = None, record: Optional[int] = None) -> ValueError:
    """An int partition above :data:`MAX_PARTITION`: no topic has it (partition numbers are Java ints), so
    there is no metadata to wait for."""
    which = "" if record is None else f"record {record}: "
    of = "" if topic is None else f" of topic {topic!r}"
    return ValueError(f"{which}partition {partition}{of} cannot exist: a partition is an int in [0, 2**31 - 1] "
                      "(a Java int)")


def bad_partitioner_result(partition: Any, num_partitions: int, topic: str, record: Optional[int] = None) -> ValueError:
    which = "" if record is None else f" for record {record}"
    return ValueError(f"the partitioner returned {partition!r}{which}, not a partition of {topic!r} "
                      f"(0..{num_partitions - 1})")


def record_size(key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[Header]]) -> int:
    """The record's size about as encoded (it feeds sticky switching); ``+ BOUND_EXTRA`` is the upper bound
    checked against max.request.size."""
    if headers:
        return RecordBatchBuilder.estimate_record_size(key, value, headers) - BOUND_EXTRA
    return RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)


def _longest(items: Sequence[Optional[bytes]]) -> int:
    """Length of the longest item (None counts as 0)."""
    try:
        return max(map(len, items), default=0)  # type: ignore[arg-type]
    except TypeError:  # there are None items
        return max((len(x) for x in items if x is not None), default=0)


def _bytes_longest_py(items: Sequence[Any]) -> int:
    """The length of the longest item when every item is ``bytes`` or None (None counts as 0), else -1."""
    if not set(map(type, items)) <= _BYTES_OR_NONE:  # (one pass in C)
        return -1
    return _longest(items)


#: send_batch()'s check of a column of keys or values: compiled (one pass), else the Python twin (two)
bytes_longest: Callable[[Sequence[Any]], int] = getattr(_records_c, "bytes_longest", None) or _bytes_longest_py
#: the longest of a column already checked to hold only bytes or None (the size bound): the compiled pass, or
#: without it the length pass alone (the type pass was done by bytes_longest already)
_checked_longest: Callable[[Sequence[Any]], int] = getattr(_records_c, "bytes_longest", None) or _longest


class RecordAdmission:
    """A producer's admission state and rules: its serializers, interceptors and partitioner, the size bound,
    the key-hash cache and the sticky state. Producer.send() and send_batch() both go through it."""

    __slots__ = ("key_serializer", "value_serializer", "interceptors", "partitioner", "ignore_keys", "plain",
                 "hash_cache", "sticky", "batch_size", "max_request_size", "size_limit", "size_setting", "txn",
                 "_view")

    def __init__(self, cfg: "ProducerConfig", txn: Optional["TransactionManager"] = None,
                 sticky: Optional[StickyPartitioner] = None) -> None:
        self.key_serializer: Optional[SerializeFn] = serialize_fn(cfg.key_serializer)
        self.value_serializer: Optional[SerializeFn] = serialize_fn(cfg.value_serializer)
        self.interceptors: Optional[Interceptors] = (
            Interceptors(cfg.interceptor_classes) if cfg.interceptor_classes else None)
        self.partitioner: Optional[PartitionFn] = partition_fn(cfg.partitioner)
        self.ignore_keys = cfg.partitioner_ignore_keys
        #: nothing configured that a record must go through besides the rules: a plain bytes record may take
        #: send()'s inlined fast path
        self.plain = (self.key_serializer is None and self.value_serializer is None and self.interceptors is None
                      and self.partitioner is None)
        #: key -> positive murmur2 hash, for the last few thousand keys (most workloads repeat keys); a plain
        #: dict (a subclass with __missing__ costs more per lookup): misses go through key_hash_miss
        self.hash_cache: Dict[bytes, int] = {}
        self.sticky = sticky or StickyPartitioner(cfg.batch_size)
        self.batch_size = cfg.batch_size
        self.max_request_size = min(cfg.max_request_size, cfg.buffer_memory)
        #: the size rule: a record whose :func:`record_size` is at most this is admitted (its upper bound on the
        #: wire, ``size + BOUND_EXTRA`` for worst-case varints and the batch header, fits ``max_request_size``).
        #: Read by send(), check_sizes (send_batch()) and the asyncio producer's staging (SendCore.size_limit);
        #: the compiled copies (_send.c, _aio.c) are kept equal by the differential tests
        self.size_limit = self.max_request_size - BOUND_EXTRA
        self.size_setting = "max.request.size" if cfg.max_request_size <= cfg.buffer_memory else "buffer.memory"
        self.txn = txn if txn is not None and txn.is_transactional else None
        self._view: Tuple[Optional["Cluster"], Optional[ClusterView]] = (None, None)

    # -- one record ------------------------------------------------------------------------------

    def serialize(self, topic: str, key: Any, value: Any, headers: Any
                  ) -> Tuple[Optional[bytes], Optional[bytes], Optional[List[Header]]]:
        """Steps 3 and 4: key and value bytes, and the headers list (a serializer may add headers)."""
        hdrs = check_headers(headers)
        kser, vser = self.key_serializer, self.value_serializer
        if kser is None and vser is None:
            return to_bytes("key", key), to_bytes("value", value), hdrs
        lst: List[Header] = hdrs if hdrs is not None else []
        given = len(lst)
        kb = serialized("key", kser, topic, key, lst) if kser is not None else to_bytes("key", key)
        vb = serialized("value", vser, topic, value, lst) if vser is not None else to_bytes("value", value)
        if len(lst) != given:  # what a serializer added must be a header too
            return kb, vb, check_headers(lst)
        return kb, vb, lst or None

    def too_large(self, bound: int, record: Optional[int] = None) -> MessageTooLargeError:
        which = "The record" if record is None else f"Record {record}"
        return MessageTooLargeError(
            f"{which} is {bound} bytes when serialized, which is larger than {self.size_setting} "
            f"({self.max_request_size}); raise that setting or send a smaller record")

    def key_hash(self, key: bytes) -> int:
        """The key's positive murmur2 hash, through the cache."""
        h = self.hash_cache.get(key)
        return key_hash_miss(self.hash_cache, key) if h is None else h

    def cluster_view(self, cluster: "Cluster") -> ClusterView:
        cached, view = self._view
        if cached is not cluster or view is None:
            view = ClusterView(cluster)
            self._view = (cluster, view)
        return view

    def custom_partition(self, topic: str, key: Any, key_bytes: Optional[bytes], value: Any,
                         value_bytes: Optional[bytes], num_partitions: int, cluster: "Cluster",
                         record: Optional[int] = None) -> int:
        assert self.partitioner is not None
        part = self.partitioner(topic, key, key_bytes, value, value_bytes, num_partitions, self.cluster_view(cluster))
        if type(part) is not int or not 0 <= part < num_partitions:
            raise bad_partitioner_result(part, num_partitions, topic, record)
        return part  # type: ignore[no-any-return]

    # -- many records (send_batch) ---------------------------------------------------------------

    def bulk_bytes(self, what: str, topic: str, items: Sequence[Any],
                   headers: Optional[List[Optional[List[Header]]]]) -> Sequence[Optional[bytes]]:
        """Step 4 for a column of keys or values (``headers``: each record's mutable list, when a serializer
        is configured)."""
        fn = self.key_serializer if what == "key" else self.value_serializer
        if fn is not None:
            assert headers is not None
            out: List[Optional[bytes]] = []
            for x, h in zip(items, headers):
                out.append(serialized(what, fn, topic, x, h))  # type: ignore[arg-type]
            return out
        if bytes_longest(items) >= 0:
            return items
        # convert bytearray/memoryview, or raise a helpful TypeError
        return [x if x is None or type(x) is bytes else to_bytes(what, x) for x in items]

    def check_sizes(self, keys: Optional[Sequence[Optional[bytes]]], values: Sequence[Optional[bytes]],
                    headers: Optional[Sequence[Optional[List[Header]]]]) -> None:
        """Step 7 for every record; the index of the first one too large is in the message."""
        limit = self.max_request_size - RECORD_OVERHEAD - BOUND_EXTRA
        if headers is None:
            longest_value = _checked_longest(values)
            longest_key = _checked_longest(keys) if keys is not None else 0
            if 0 <= longest_value and 0 <= longest_key and longest_value + longest_key <= limit:
                return  # even the longest key with the longest value fits
        for i in range(len(values)):
            size = record_size(keys[i] if keys is not None else None, values[i],
                               headers[i] if headers is not None else None)
            if size > self.size_limit:
                raise self.too_large(size + BOUND_EXTRA, i)

    @staticmethod
    def explicit_partitions(n: int, partition: Any) -> Tuple[Optional[int], Optional[List[int]]]:
        """Step 8's argument check for send_batch(): ``(one partition for all, None)`` or ``(None, one per
        record)``; the range is checked against the metadata by :meth:`groups`."""
        if type(partition) is int:
            return partition, None
        if isinstance(partition, (bool, str, bytes)) or not isinstance(partition, Sequence):
            raise ValueError(f"partition must be an int (one for every record), a sequence of ints (one per "
                             f"record) or None, got {partition!r} (a bool is not a partition)")
        if len(partition) != n:
            raise ValueError(f"partition has {len(partition)} items but values has {n}")
        parts = list(partition)
        for i, p in enumerate(parts):
            if type(p) is not int:
                raise ValueError(f"record {i}: partition {p!r} is not an int")
            if p > MAX_PARTITION:
                raise beyond_any_topic(p, record=i)
        return None, parts

    def groups(self, topic: str, n: int, single: Optional[int], per_record: Optional[List[int]],
               raw_keys: Optional[Sequence[Any]], keys: Optional[Sequence[Optional[bytes]]],
               raw_values: Sequence[Any], values: Sequence[Optional[bytes]],
               headers: Optional[Sequence[Optional[List[Header]]]], num_partitions: int,
               cluster: "Cluster") -> Groups:
        """Step 8 for send_batch(): the records' partitions as ``(partition, positions)`` groups."""
        if single is not None:
            if not 0 <= single < num_partitions:
                raise bad_partition(single, num_partitions, topic)
            return [(single, range(n))]
        grouped: Dict[int, List[int]] = {}
        if per_record is not None:
            for i, p in enumerate(per_record):
                if not 0 <= p < num_partitions:
                    raise bad_partition(p, num_partitions, topic, i)
                grouped.setdefault(p, []).append(i)
            return list(grouped.items())
        if self.partitioner is not None:
            for i in range(n):
                p = self.custom_partition(topic, raw_keys[i] if raw_keys is not None else None,
                                          keys[i] if keys is not None else None, raw_values[i], values[i],
                                          num_partitions, cluster, i)
                grouped.setdefault(p, []).append(i)
            return list(grouped.items())
        available = cluster.available.get(topic, ())
        sticky = self.sticky
        if keys is None or self.ignore_keys:
            # keyless: consecutive runs of about batch.size bytes per partition (uniform sticky)
            if keys is None and headers is None:
                runs = sticky.record_runs(topic, None, values, RECORD_OVERHEAD, available, num_partitions)
            else:
                runs = sticky.runs(topic, [record_size(keys[i] if keys is not None else None, values[i],
                                                       headers[i] if headers is not None else None)
                                           for i in range(n)], available, num_partitions)
            return [(p, range(a, b)) for p, a, b in runs]
        cache = self.hash_cache
        for i, k in enumerate(keys):
            if k is not None:
                h = cache.get(k)
                if h is None:
                    h = key_hash_miss(cache, k)
                p = h % num_partitions
            else:
                p = sticky.partition(topic, available, num_partitions)
                sticky.record_appended(topic, record_size(None, values[i], headers[i] if headers is not None else None),
                                       available, num_partitions)
            grouped.setdefault(p, []).append(i)
        return list(grouped.items())

    def check_can_send(self, topic: str, partitions: Sequence[int]) -> None:
        """Step 9 (TransactionError outside a transaction); registers the partitions with the transaction."""
        txn = self.txn
        if txn is not None:
            for part in partitions:
                txn.check_can_send((topic, part))


__all__ = ["BOUND_EXTRA", "FUTURE_ERRORS", "MAX_PARTITION", "MAX_TIMESTAMP", "RECORD_OVERHEAD", "RecordAdmission",
           "bad_partition", "bad_partitioner_result", "bad_timestamp", "beyond_any_topic", "check_headers",
           "check_timestamp", "check_topic", "key_hash_miss", "plain_record", "record_size", "to_bytes",
           "valid_timestamp"]
