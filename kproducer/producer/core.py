"""The send core: the narrow internal API between the producer's parts and the send paths that are not the
producer's own ``send()`` (``send_batch()``, ``send_columns()``, the asyncio producer), and the owner of the
rules they share besides the admission checks (:mod:`kproducer.producer.admission` owns those; docs/design.md,
"The send path: which file owns which rule"):

* **touching a topic** (:meth:`SendCore.touch`, also for ``send()``'s Python path): a topic records go to is
  noted in the metadata (``add_topic``: fetched when new, kept from expiring while in use) at most once per
  :data:`TOPIC_TOUCH_MS`. The compiled ``send()`` only reads :attr:`SendCore.touched` and leaves a topic not
  touched recently to the Python path;
* **the key's partition** (:meth:`SendCore.key_partition`): murmur2 through the producer's one hash cache;
* **room in the buffer pool without waiting** (:meth:`SendCore.can_stage`, :meth:`SendCore.has_room`);
* **appending a run of records** to a partition, or keyless records over batch-sized sticky runs
  (:meth:`SendCore.append_rows`, :meth:`SendCore.append_run`), waking the network thread;
* **a record that could not be admitted** (:meth:`SendCore.admission_failed`): an open transaction becomes
  abortable, as for a record ``send()`` fails.

The asyncio producer (``kproducer/aio.py``) uses only this class (got with
:func:`kproducer.producer.kafka_producer.send_core`) and the public :class:`~kproducer.Producer` API; it reads
no private attribute of the producer's parts (``tests/unit/test_send_core.py`` checks that).
"""
from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ..clock import Clock
from ..errors import ProducerClosedError
from .admission import RECORD_OVERHEAD, Header, RecordAdmission
from .future import BatchSendFuture, FutureRecordMetadata, Segment, _FailedSend

if TYPE_CHECKING:
    from ..network.metadata import Metadata
    from .accumulator import RecordAccumulator
    from .batch import ProducerBatch
    from .buffer_pool import BufferPool
    from .sender import Sender
    from .transaction_manager import TransactionManager

#: a topic is touched (``Metadata.add_topic``) at most once per this many ms by the send paths
TOPIC_TOUCH_MS = 1000.0


class SendCore:
    """One producer's send core (made by :class:`~kproducer.Producer`; see the module docstring)."""

    __slots__ = ("metadata", "admission", "touched", "system_clock", "max_block_ms", "wall_ms", "monotonic_ms",
                 "wakeup", "plain", "ignore_keys", "size_limit", "total_memory", "_pool", "_accumulator",
                 "_sender", "_txn", "_gate", "_wait")

    def __init__(self, *, metadata: "Metadata", admission: RecordAdmission, pool: "BufferPool",
                 accumulator: "RecordAccumulator", sender: "Sender", txn: Optional["TransactionManager"],
                 clock: Clock, max_block_ms: float,
                 wait_on_metadata: Callable[[str, Optional[int], float], int], wakeup: Callable[[], None]) -> None:
        self.metadata = metadata
        self.admission = admission
        #: {topic: monotonic ms of its last touch} (read by the compiled send(): a topic touched within
        #: TOPIC_TOUCH_MS needs no touch)
        self.touched: Dict[str, float] = {}
        #: the system clock (its time read without a Python-level call), not a test's clock
        self.system_clock = type(clock) is Clock
        self.wall_ms = clock.wall_ms
        self.monotonic_ms = clock.monotonic_ms
        self.max_block_ms = max_block_ms
        #: wakes the network thread (a batch was opened or filled; the selector's wakeup)
        self.wakeup = wakeup
        #: a record of plain bytes/None may be appended without the admission steps that cannot change it (no
        #: serializer, interceptor or custom partitioner; not transactional)
        self.plain = admission.plain and admission.txn is None
        self.ignore_keys = admission.ignore_keys
        #: admission's size rule: a record whose record_size() is at most this is admitted
        self.size_limit = admission.size_limit
        self.total_memory = pool.total_memory
        self._pool = pool
        self._accumulator = accumulator
        self._sender = sender
        self._txn = txn
        self._gate = accumulator.gate.flag  # (the Gate's byte: accepting() reads it without a call)
        # (weakly: the producer holds this core, and is collected when dropped without close(); lifecycle.py)
        self._wait: Callable[[], Optional[Callable[[str, Optional[int], float], int]]] = \
            weakref.WeakMethod(wait_on_metadata)  # type: ignore[arg-type]

    # -- state ------------------------------------------------------------------------------------

    def accepting(self) -> bool:
        """Records are taken: the producer is open and has no fatal error (the accumulator's gate)."""
        return self._gate[0] != 0

    @property
    def died_error(self) -> Optional[BaseException]:
        """Why the network thread died (NetworkThreadDiedError), or None."""
        return self._sender.died_error

    def partition_count(self, topic: str) -> Optional[int]:
        """The topic's partition count as known now (None: its metadata is not known)."""
        return self.metadata.cluster.partition_counts.get(topic)

    # -- the shared rules -------------------------------------------------------------------------

    def touch(self, topic: str, now: float) -> None:
        """Note that records go to ``topic`` (at most once per TOPIC_TOUCH_MS; ``now``: monotonic ms)."""
        touched = self.touched
        if now - touched.get(topic, -1e18) > TOPIC_TOUCH_MS:
            touched[topic] = now
            self.metadata.add_topic(topic)

    def key_partition(self, key: bytes, num_partitions: int) -> int:
        """The partition of a keyed record: murmur2 of the key (through the one hash cache) modulo the count."""
        return self.admission.key_hash(key) % num_partitions

    def stageable_memory(self) -> int:
        """Memory the pool has free (free buffers included) for records appended without waiting; -1 while a
        sender waits for memory (read without the pool's lock: only other threads' appends lower it meanwhile)."""
        return self._pool.free_unless_waited()

    def can_stage(self, need: int) -> bool:
        """:meth:`stageable_memory` is at least ``need`` bytes."""
        return self._pool.free_unless_waited() >= need

    def has_room(self, need: int) -> bool:
        """The pool could reserve ``need`` bytes now without waiting (nobody waits; under its lock)."""
        return self._pool.can_take(need)

    def on_memory_freed(self, hook: Optional[Any]) -> None:
        """Set the pool's ``on_free`` hook (called on the freeing thread after memory came back)."""
        self._pool.on_free = hook

    @contextlib.contextmanager
    def memory_pressure(self) -> Iterator[None]:
        """While a sender waits for buffer memory: every queued batch is sendable now (as for a thread blocked
        in BufferPool.allocate, a batch lingering for linger.ms holds memory that is waited for)."""
        acc = self._accumulator
        acc.begin_flush()
        self._sender.wakeup()
        try:
            yield
        finally:
            acc.end_flush()

    def admission_failed(self, error: BaseException) -> None:
        """A record failed before it was queued: an open transaction becomes abortable (as in send())."""
        txn = self._txn
        if txn is not None and txn.is_transactional:
            txn.maybe_transition_to_error_state(error)

    def wait_on_metadata(self, topic: str, partition: Optional[int], max_wait_ms: float) -> int:
        """Block until the topic's partitions (and ``partition``) are known; their count (the producer's wait,
        with its errors)."""
        wait = self._wait()
        if wait is None:  # (the producer was collected: nothing can send any more)
            raise ProducerClosedError("the producer was closed")
        return wait(topic, partition, max_wait_ms)

    # -- appends ----------------------------------------------------------------------------------

    def append_rows(self, topic: str, partition: int, timestamp: int, keys: Optional[Sequence[Optional[bytes]]],
                    values: Sequence[Optional[bytes]], headers: Optional[Sequence[Optional[Sequence[Header]]]],
                    rows: Sequence[int], max_block_ms: float, now: float, segments: List[Segment]) -> bool:
        """Append the records at positions ``rows`` to the partition (RecordAccumulator.append_many); whether
        the network thread should be woken."""
        return self._accumulator.append_many(topic, partition, timestamp, keys, values, headers, rows, max_block_ms,
                                             now, segments)

    def append_run(self, topic: str, partition: Optional[int], timestamp: int,
                   keys: Optional[Sequence[Optional[bytes]]], values: Sequence[Optional[bytes]], now: float,
                   segments: List[Segment]) -> bool:
        """Append a run of plain records (no headers) staged by the asyncio producer: all to ``partition``, or
        (None) keyless over batch-sized sticky runs of partitions as ``send()``/``send_batch()`` choose them.
        Touches the topic. Whether the network thread should be woken."""
        self.touch(topic, now)
        acc = self._accumulator
        max_block = self.max_block_ms
        if partition is not None:
            return acc.append_many(topic, partition, timestamp, keys, values, None, range(len(values)), max_block,
                                   now, segments)
        cluster = self.metadata.cluster
        count = cluster.partition_counts.get(topic) or 1
        wake = False
        for part, start, stop in self.admission.sticky.record_runs(topic, keys, values, RECORD_OVERHEAD,
                                                                   cluster.available.get(topic, ()), count):
            if acc.append_many(topic, part, timestamp, keys, values, None, range(start, stop), max_block, now,
                               segments):
                wake = True
        return wake


# -- what the asyncio producer reads of the futures the synchronous calls return -------------------------

def record_position(fut: FutureRecordMetadata) -> Tuple["ProducerBatch", int]:
    """(the batch holding a record queued by ``send()``, the record's offset delta in it)."""
    return fut._batch, fut._delta


def batches_of(result: BatchSendFuture) -> List["ProducerBatch"]:
    """The batches holding a ``send_batch()``'s records now (after a split: the batches split into)."""
    return result._batches()


def first_error(result: BatchSendFuture) -> Optional[BaseException]:
    """The first error among a completed ``send_batch()``'s batches (None: all succeeded)."""
    return result._first_error()


def failed_stand_in(topic: str, partition: Optional[int], error: BaseException) -> Any:
    """A done stand-in for the batch of a record that failed before it was queued (as send()'s)."""
    return _FailedSend(topic, -1 if partition is None else partition, error)


__all__ = ["SendCore", "TOPIC_TOUCH_MS", "batches_of", "failed_stand_in", "first_error", "record_position"]
