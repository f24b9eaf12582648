"""How well record batches compress, per (topic, codec): lets compressed batches fill to batch.size *compressed*.

Records are appended to a batch uncompressed and the batch is compressed once, when it is sent. To cut a batch
at ``batch.size`` bytes on the wire, the accumulator must guess the compressed size while it appends. Like the
Java client (``CompressionRatioEstimator``, ``MemoryRecordsBuilder.estimatedBytesWritten``):

* the estimate is kept per topic and codec, starts at 1.0 (no compression), and is updated with the ratio each
  batch really got when it is built (compressed records bytes / uncompressed records bytes);
* a batch's estimated size is ``61 + uncompressed records bytes * ratio * 1.05`` (5% margin), so a batch is full
  when that reaches batch.size: it holds about ``(batch.size - 61) / (ratio * 1.05)`` uncompressed bytes;
* when the broker refuses a batch as too large (MESSAGE_TOO_LARGE) and it is split, the estimate goes back to
  ``max(1.0, that batch's ratio)``.

Deliberate differences (see docs/batching.md for the measurements behind them):

* Improving: Java lowers the estimate by a constant 0.005 per batch, so going from 1.0 to a typical 0.2 (gzip on
  JSON) takes ~160 batches, all under-filled. Here each batch closes a quarter of the gap (at least 0.005):
  ~15 batches.
* Worsening: Java raises the estimate by at least 0.05 whenever a batch compresses even slightly worse than
  estimated: at a ratio of 0.2 that is 25% too pessimistic, and batches come out ~75% full for the next ten
  batches. Here the estimate becomes the observed ratio (never lower than it, as in Java), and the 5% margin
  absorbs the batch-to-batch noise. With both, batches stay within 10% of batch.size (measured: 93-96%).
* Only full batches (closed because the estimate said batch.size) may raise the estimate; a batch sent earlier
  (linger.ms, flush) compresses worse because it is smaller, and may only lower it.
* Cold start: the first full batch's ratio replaces the initial 1.0, and before it, batches that fill up measure
  their own ratio (:meth:`CompressionRatioEstimator.sample`, :class:`BatchSizing`), so that a burst queued
  before anything was sent fills too.

The estimator is per producer (Java's is one static map per JVM), thread-safe, and never goes below
:data:`MIN_RATIO`.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..protocol.compression import CODEC_NONE
from ..protocol.records import RECORD_BATCH_OVERHEAD

__all__ = ["BatchSizing", "CompressionRatioEstimator", "ESTIMATION_FACTOR", "INITIAL_RATIO", "MIN_RATIO"]

#: the estimate of a (topic, codec) nothing was observed for yet
INITIAL_RATIO = 1.0
#: the margin on the estimate when deciding whether a batch is full (Java's COMPRESSION_RATE_ESTIMATION_FACTOR)
ESTIMATION_FACTOR = 1.05
#: the smallest step the estimate improves by (Java's COMPRESSION_RATIO_IMPROVING_STEP, its only step)
IMPROVING_STEP = 0.005
#: the part of the gap between the estimate and a better observed ratio closed per batch
IMPROVING_FRACTION = 0.25
#: a floor, so that a batch of zeros cannot make the next batch's uncompressed limit unbounded
MIN_RATIO = 0.001


#: states of an estimate: the initial guess (perhaps lowered by small batches), a batch's own measurement while
#: it grew (:class:`BatchSizing`), the ratio of a full batch as built for sending
GUESSED, SAMPLED, OBSERVED = 0, 1, 2


class CompressionRatioEstimator:
    """Estimated compression ratio (compressed / uncompressed record bytes) per (topic, codec)."""

    def __init__(self) -> None:
        # (topic, codec) -> [estimate, GUESSED | SAMPLED | OBSERVED]
        self._ratios: Dict[Tuple[str, int], List[Any]] = {}
        self._lock = threading.Lock()

    def estimate(self, topic: str, codec: int) -> float:
        """The current estimate (1.0 for no compression and for a pair nothing was observed for)."""
        if codec == CODEC_NONE:
            return 1.0
        entry = self._ratios.get((topic, codec))
        return INITIAL_RATIO if entry is None else float(entry[0])

    def state(self, topic: str, codec: int) -> int:
        """GUESSED, SAMPLED or OBSERVED: where the estimate comes from."""
        entry = self._ratios.get((topic, codec))
        return GUESSED if entry is None else int(entry[1])

    def observe(self, topic: str, codec: int, observed: float, full: bool = True) -> float:
        """Take the ratio a batch got when built for sending into account; returns the new estimate.

        ``full``: the batch was closed because the estimate said it had reached batch.size. Its ratio is the
        one that matters. The first one replaces a guessed or sampled estimate; after that, worse than the
        estimate, the estimate becomes it at once; better, the estimate closes a quarter of the gap (at least
        0.005). A batch sent before it was full (linger.ms, flush) compresses worse *because* it is smaller:
        it may only lower the estimate that way (a full batch would compress at least as well), never raise it."""
        if codec == CODEC_NONE or not observed > 0.0:  # (also refuses NaN)
            return self.estimate(topic, codec)
        key = (topic, codec)
        with self._lock:
            entry = self._ratios.get(key)
            if entry is None:
                entry = self._ratios[key] = [INITIAL_RATIO, GUESSED]
            current = float(entry[0])
            if full and entry[1] != OBSERVED:
                new = observed
            elif observed > current:
                new = observed if full else current  # worse than expected: at once
            elif observed < current:
                new = max(observed, current - max(IMPROVING_STEP, (current - observed) * IMPROVING_FRACTION))
            else:
                new = current
            entry[0] = max(MIN_RATIO, new)
            if full:
                entry[1] = OBSERVED
            return float(entry[0])

    def sample(self, topic: str, codec: int, measured: float) -> None:
        """A growing batch's own ratio, measured while no full batch was built yet: it replaces the estimate
        (ignored once a full batch was observed)."""
        if codec == CODEC_NONE or not measured > 0.0:
            return
        with self._lock:
            entry = self._ratios.get((topic, codec))
            if entry is None or entry[1] != OBSERVED:
                self._ratios[(topic, codec)] = [max(MIN_RATIO, measured), SAMPLED]

    def set(self, topic: str, codec: int, ratio: float) -> None:
        """Force the estimate, as observed (after a split: ``max(1.0, the big batch's ratio)``, as Java)."""
        if codec == CODEC_NONE:
            return
        with self._lock:
            self._ratios[(topic, codec)] = [max(MIN_RATIO, ratio), OBSERVED]

    def reset(self, topic: Optional[str] = None) -> None:
        """Forget what was observed, for one topic or all."""
        with self._lock:
            if topic is None:
                self._ratios.clear()
            else:
                for key in [k for k in self._ratios if k[0] == topic]:
                    del self._ratios[key]

    @staticmethod
    def estimated_size(uncompressed_records: int, ratio: float) -> int:
        """Estimated bytes on the wire of a batch holding ``uncompressed_records`` bytes of encoded records."""
        return RECORD_BATCH_OVERHEAD + int(uncompressed_records * ratio * ESTIMATION_FACTOR)

    @staticmethod
    def batch_limit(batch_size: int, ratio: float, max_size: Optional[int] = None) -> int:
        """The uncompressed size (61-byte header included, as ``RecordBatchBuilder.estimated_size()``) at which
        a batch compressing at ``ratio`` is estimated to reach ``batch_size`` on the wire; never more than
        ``max_size`` (max.request.size: then even incompressible records stay within it), never less than one
        byte of records."""
        room = max(1, batch_size - RECORD_BATCH_OVERHEAD)
        limit = RECORD_BATCH_OVERHEAD + int(room / (max(ratio, MIN_RATIO) * ESTIMATION_FACTOR))
        if max_size is not None and limit > max_size:
            limit = max(max_size, RECORD_BATCH_OVERHEAD + 1)
        return limit


class BatchSizing:
    """What the compressed batches of one accumulator share to decide how far they fill (see
    ``ProducerBatch.grow``): the estimator, batch.size, the cap (max.request.size) and the BufferPool's
    non-blocking ``try_allocate``.

    A new compressed batch starts with room for ``limit(estimate)`` uncompressed bytes, at most batch.size (the
    memory it reserved). When a record does not fit, it grows once to ``limit(estimate)``, reserving the extra
    memory if the pool has it free right now (never blocking under the accumulator's lock); else it is full.

    Cold start: before a full batch of a (topic, codec) was built for sending, the estimate is only the initial
    1.0, and a burst of records may fill many batches before the first is sent. So, until then, a batch that
    reaches its room measures itself (compresses what it holds; the result is cached for sending if nothing is
    appended after it) and the estimator takes that ratio (:meth:`CompressionRatioEstimator.sample`): the first
    time at batch.size uncompressed, then at the limit that gave, where it compresses better (a larger batch).
    A batch at its first room while the estimate is already sampled grows by it without measuring.
    """

    __slots__ = ("estimator", "codec", "batch_size", "max_size", "try_allocate")

    def __init__(self, estimator: CompressionRatioEstimator, codec: int, batch_size: int, max_size: Optional[int],
                 try_allocate: Callable[[int], bool]) -> None:
        self.estimator = estimator
        self.codec = codec
        self.batch_size = batch_size
        self.max_size = max_size
        self.try_allocate = try_allocate

    def limit(self, ratio: float) -> int:
        """Uncompressed size (header included) of a batch estimated at batch.size on the wire."""
        return CompressionRatioEstimator.batch_limit(self.batch_size, ratio, self.max_size)
