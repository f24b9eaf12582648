"""Bookkeeping of the records a test sent through a Producer: futures, and what each callback reported."""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from kproducer import Producer


class Sent:
    """The records one test sent: their futures and what each callback reported (and how often)."""

    def __init__(self, topic: str, partitions: int, wait: float = 30.0) -> None:
        self.topic = topic
        self.partition_count = partitions
        self.wait_s = wait
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)
        self.values: List[bytes] = []
        self.partitions: List[int] = []
        self.futures: List[Any] = []
        self.calls: "Counter[int]" = Counter()  # index -> callback calls
        self.results: Dict[int, Tuple[Any, Optional[BaseException]]] = {}

    def send(self, producer: Producer, value: bytes, partition: int, key: Optional[bytes] = None,
             topic: Optional[str] = None) -> int:
        with self.lock:
            i = len(self.values)
            self.values.append(value)
            self.partitions.append(partition)

        def callback(md: Any, exc: Optional[BaseException]) -> None:
            with self.lock:
                self.calls[i] += 1
                self.results[i] = (md, exc)
                self.done.notify_all()

        fut = producer.send(topic or self.topic, value, key=key, partition=partition, callback=callback)
        with self.lock:
            self.futures.append(fut)
        return i

    def send_many(self, producer: Producer, tag: str, count: int, partitions: Optional[int] = None,
                  size: int = 0) -> List[int]:
        """``count`` records spread round robin over ``partitions`` partitions (all by default)."""
        partitions = partitions or self.partition_count
        pad = b"." * size
        return [self.send(producer, b"%s-%06d%s" % (tag.encode(), j, pad), partition=j % partitions)
                for j in range(count)]

    def wait_callbacks(self, timeout: Optional[float] = None) -> None:
        deadline = time.monotonic() + (self.wait_s if timeout is None else timeout)
        with self.lock:
            while len(self.results) < len(self.values):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [i for i in range(len(self.values)) if i not in self.results]
                    raise AssertionError(f"{len(missing)} callbacks never ran, e.g. record {missing[:5]}")
                self.done.wait(left)

    def succeeded(self) -> List[int]:
        return sorted(i for i, (_md, exc) in self.results.items() if exc is None)

    def failed(self) -> Dict[int, BaseException]:
        return {i: exc for i, (_md, exc) in self.results.items() if exc is not None}

    def check_callbacks_once(self) -> None:
        """Every record's callback ran exactly once, and its future agrees with it."""
        self.wait_callbacks()
        assert len(self.calls) == len(self.values), "some callbacks never ran"
        bad = {i: n for i, n in self.calls.items() if n != 1}
        assert not bad, f"callbacks not called exactly once: {bad}"
        for i, fut in enumerate(self.futures):
            md, exc = self.results[i]
            assert fut.done()
            if exc is None:
                got = fut.get(0)
                assert got == md
            else:
                assert fut.exception(0) is exc

    def by_partition(self, indices: List[int]) -> Dict[int, List[bytes]]:
        """The values of the records at ``indices``, per partition, in send order."""
        out: Dict[int, List[bytes]] = {p: [] for p in range(self.partition_count)}
        for i in indices:
            out[self.partitions[i]].append(self.values[i])
        return out
