"""Partitioners: Java-compatible murmur2 for keyed records, uniform sticky (KIP-794) for keyless ones, the
cluster view a custom partitioner gets, and Java's RoundRobinPartitioner."""
from __future__ import annotations

import bisect
import itertools
import random
import struct
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..protocol.accel import MODULES, load
from ..protocol.accel import records as _records_c

if TYPE_CHECKING:
    from ..network.metadata import Cluster, PartitionInfo

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def _murmur2_py(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` as a signed 32-bit integer (same value as Java's Utils.murmur2)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for k in struct.unpack_from("<%dI" % n4, data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


murmur2: Callable[[bytes], int] = _records_c.murmur2 if _records_c is not None else _murmur2_py
#: sticky_cut(values, keys, overhead, start, budget) -> (stop, used): StickyPartitioner._runs' cut over records
_sticky_cut: Optional[Callable[..., Tuple[int, int]]] = getattr(load(MODULES["producer"]), "sticky_cut", None)


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Keyless records stick to one partition until about a batch's worth of bytes went to it, then move to
    another partition chosen at random among those with a leader (uniform sticky, KIP-794).

    A batch's worth is ``batch_size`` bytes, or ``batch_bytes(topic)`` when given: with compression a batch holds
    more than batch.size uncompressed bytes (the accumulator's estimate, as Java counts estimated compressed
    bytes); it is read again at each switch.

    ``state`` maps a topic to ``[partition, bytes sent to it, bytes before switching]``; Producer.send() reads and
    updates it inline (the per-record hot path), everything else goes through the methods."""

    def __init__(self, batch_size: int, rng: Optional[random.Random] = None,
                 batch_bytes: Optional[Callable[[str], int]] = None) -> None:
        self.batch_size = max(1, batch_size)
        self._rng = rng or random.Random()
        self._batch_bytes = batch_bytes
        self.state: Dict[str, List[int]] = {}

    def limit(self, topic: str) -> int:
        """Bytes of keyless records that go to one partition before switching."""
        return self.batch_size if self._batch_bytes is None else max(1, self._batch_bytes(topic))

    def current(self, topic: str, available: Sequence[int], num_partitions: int) -> List[int]:
        """The topic's ``[partition, bytes]`` state, (re)started when unknown or out of range."""
        st = self.state.get(topic)
        if st is None or st[0] >= num_partitions:
            st = self.state[topic] = [self._next(available, num_partitions, -1), 0, self.limit(topic)]
        return st

    def partition(self, topic: str, available: Sequence[int], num_partitions: int) -> int:
        return self.current(topic, available, num_partitions)[0]

    def record_appended(self, topic: str, size: int, available: Sequence[int], num_partitions: int) -> None:
        """Account ``size`` bytes to the sticky partition and switch once a batch's worth went there."""
        st = self.state.get(topic)
        if st is None:
            return
        st[1] += size
        if st[1] >= st[2]:
            st[0] = self._next(available, num_partitions, st[0])
            st[1] = 0
            st[2] = self.limit(topic)

    def runs(self, topic: str, sizes: Sequence[int], available: Sequence[int],
             num_partitions: int) -> List[Tuple[int, int, int]]:
        """Partitions for consecutive records of ``sizes`` bytes, as ``(partition, start, stop)`` runs: the
        same choices as one :meth:`partition` + :meth:`record_appended` per record, computed per run."""
        return self.runs_cumulative(topic, list(itertools.accumulate(sizes)), available, num_partitions)

    def runs_cumulative(self, topic: str, cum: Sequence[int], available: Sequence[int],
                        num_partitions: int) -> List[Tuple[int, int, int]]:
        """:meth:`runs` given the running totals of the sizes (``cum[i]`` = bytes of records 0..i)."""
        n = len(cum)

        def cut(start: int, budget: int) -> Tuple[int, int]:
            base = cum[start - 1] if start else 0
            stop = bisect.bisect_left(cum, base + budget, start) + 1
            return (n, cum[-1] - base) if stop > n else (stop, cum[stop - 1] - base)

        return self._runs(topic, n, cut, available, num_partitions)

    def record_runs(self, topic: str, keys: Optional[Sequence[Optional[bytes]]], values: Sequence[Optional[bytes]],
                    overhead: int, available: Sequence[int], num_partitions: int) -> List[Tuple[int, int, int]]:
        """:meth:`runs` of records of bytes (or None) ``keys`` (None: no keys) and ``values``, each of
        ``overhead + len(key) + len(value)`` bytes; with the accelerator the sizes are summed in compiled code
        (``sticky_cut``), never listed."""
        if _sticky_cut is None:
            sizes = [overhead + (0 if v is None else len(v)) for v in values]
            if keys is not None:
                sizes = [sz + (0 if k is None else len(k)) for sz, k in zip(sizes, keys)]
            return self.runs(topic, sizes, available, num_partitions)
        cut: Callable[[int, int], Tuple[int, int]] = partial(_sticky_cut, values, keys, overhead)
        return self._runs(topic, len(values), cut, available, num_partitions)

    def _runs(self, topic: str, n: int, cut: Callable[[int, int], Tuple[int, int]], available: Sequence[int],
              num_partitions: int) -> List[Tuple[int, int, int]]:
        """The one sticky walk over ``n`` records: ``cut(start, budget)`` is ``(stop, used)``, the records from
        ``start`` up to and including the one whose bytes reach ``budget`` (the record that reaches the limit
        still goes to this partition, as in :meth:`record_appended`) and their bytes; ``(n, bytes)`` with
        ``bytes < budget`` when the rest stays below it."""
        out: List[Tuple[int, int, int]] = []
        start = 0
        while start < n:
            st = self.current(topic, available, num_partitions)
            budget = st[2] - st[1]
            stop, used = cut(start, budget)
            out.append((st[0], start, stop))
            if used < budget:
                st[1] += used
                break
            st[0] = self._next(available, num_partitions, st[0])
            st[1] = 0
            st[2] = self.limit(topic)
            start = stop
        return out

    def next_partition(self, available: Sequence[int], num_partitions: int, previous: int) -> int:
        """A partition other than ``previous`` (when there is a choice), uniformly at random."""
        return self._next(available, num_partitions, previous)

    def _next(self, available: Sequence[int], num_partitions: int, previous: int) -> int:
        choices: Sequence[int] = available if available else range(num_partitions)
        if len(choices) == 1:
            return choices[0]
        while True:
            p = choices[self._rng.randrange(len(choices))]
            if p != previous:
                return p


class ClusterView:
    """What a custom partitioner sees of the cluster (the role of Java's Cluster argument): a read-only
    view of the metadata snapshot the record's partition is chosen from."""

    __slots__ = ("_cluster",)

    def __init__(self, cluster: "Cluster") -> None:
        self._cluster = cluster

    def partition_count(self, topic: str) -> Optional[int]:
        """The topic's number of partitions (None when unknown)."""
        return self._cluster.partition_counts.get(topic)

    def available_partitions(self, topic: str) -> Tuple[int, ...]:
        """The topic's partitions that have a leader now (Java's availablePartitionsForTopic)."""
        return self._cluster.available.get(topic, ())

    def partitions(self, topic: str) -> Tuple["PartitionInfo", ...]:
        """Every partition of the topic with its leader, replicas and ISR (Java's partitionsForTopic)."""
        return self._cluster.partitions.get(topic, ())

    def leader(self, topic: str, partition: int) -> Optional[int]:
        """The node id leading the partition (None when it has no leader)."""
        return self._cluster.leaders.get((topic, partition))

    def __repr__(self) -> str:
        return f"<ClusterView topics={sorted(self._cluster.partition_counts)}>"


#: a custom partitioner in the one shape the producer calls:
#: (topic, key, key_bytes, value, value_bytes, num_partitions, cluster) -> partition
PartitionFn = Callable[[str, Any, Optional[bytes], Any, Optional[bytes], int, ClusterView], Any]


def partition_fn(spec: Any) -> Optional[PartitionFn]:
    """The configured partitioner as a :data:`PartitionFn`: an object with Java's
    ``partition(topic, key, key_bytes, value, value_bytes, cluster)``, or a plain callable
    ``(topic, key_bytes, value_bytes, num_partitions)``. None: the default (murmur2 / uniform sticky)."""
    if spec is None:
        return None
    method = getattr(spec, "partition", None)
    if callable(method):
        java: Callable[..., Any] = method

        def with_cluster(topic: str, key: Any, key_bytes: Optional[bytes], value: Any, value_bytes: Optional[bytes],
                         num_partitions: int, cluster: ClusterView) -> Any:
            return java(topic, key, key_bytes, value, value_bytes, cluster)

        return with_cluster
    plain: Callable[[str, Optional[bytes], Optional[bytes], int], Any] = spec

    def counted(topic: str, key: Any, key_bytes: Optional[bytes], value: Any, value_bytes: Optional[bytes],
                num_partitions: int, cluster: ClusterView) -> Any:
        return plain(topic, key_bytes, value_bytes, num_partitions)

    return counted


class RoundRobinPartitioner:
    """Java's RoundRobinPartitioner: every record to the next partition of its topic in turn, keys ignored,
    over the partitions that have a leader (all of them when none has). ``partitioner.class`` =
    ``org.apache.kafka.clients.producer.RoundRobinPartitioner`` selects it."""

    def __init__(self) -> None:
        self._counters: Dict[str, "itertools.count[int]"] = {}

    def partition(self, topic: str, key: Any, key_bytes: Optional[bytes], value: Any, value_bytes: Optional[bytes],
                  cluster: ClusterView) -> int:
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters.setdefault(topic, itertools.count())
        n = next(counter)
        available = cluster.available_partitions(topic)
        if available:
            return available[n % len(available)]
        return n % (cluster.partition_count(topic) or 1)

    def close(self) -> None:
        pass


__all__: Tuple[str, ...] = ("ClusterView", "PartitionFn", "RoundRobinPartitioner", "StickyPartitioner", "murmur2",
                            "partition_fn", "partition_for_key", "to_positive")
