"""Producer interceptors, as Java's ProducerInterceptor.

An interceptor is any object with (one or both of)

- ``on_send(record: ProducerRecord) -> ProducerRecord``: called by send() (and send_batch(), once per record)
  before the key and value are serialized and the partition is chosen; it may return a changed record
  (``record._replace(value=...)``). Interceptors run in the order given, each on the previous one's result.
- ``on_acknowledgement(metadata: RecordMetadata, exception: Optional[BaseException])``: called once per
  record when it was acknowledged or failed, on the producer's network thread (or on the sending thread for
  a record that failed before it was queued), before the record's own callback. As in Java, ``metadata`` is
  never None: after a failure it holds the topic, the partition (-1 when none was chosen yet) and -1 for the
  rest. Keep it quick: it delays every other acknowledgement.
- optionally ``close()``, called once when the producer closes.

An interceptor that raises is logged (with its traceback) and skipped: the record goes on as the previous
interceptor left it. It never fails the record or the producer.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from .future import Callback, RecordMetadata

log = logging.getLogger(__name__)


class ProducerRecord(NamedTuple):
    """A record as the application handed it to send(), before serialization (what interceptors see)."""

    topic: str
    value: Any = None
    key: Any = None
    headers: Optional[Union[Sequence[Tuple[str, Optional[bytes]]], Mapping[str, Optional[bytes]]]] = None
    partition: Optional[int] = None
    timestamp_ms: Optional[int] = None


class Interceptors:
    """The configured interceptors, called in order; each failure is logged and skipped."""

    __slots__ = ("items", "_on_send", "_on_ack")

    def __init__(self, items: Sequence[Any]) -> None:
        self.items: Tuple[Any, ...] = tuple(items)
        self._on_send: List[Tuple[Any, Callable[[ProducerRecord], Any]]] = [
            (i, i.on_send) for i in self.items if callable(getattr(i, "on_send", None))]
        self._on_ack: List[Tuple[Any, Callable[[RecordMetadata, Optional[BaseException]], Any]]] = [
            (i, i.on_acknowledgement) for i in self.items if callable(getattr(i, "on_acknowledgement", None))]

    @property
    def acknowledges(self) -> bool:
        """Whether any interceptor wants on_acknowledgement calls."""
        return bool(self._on_ack)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        for interceptor, fn in self._on_send:
            try:
                out = fn(record)
                if not isinstance(out, ProducerRecord):
                    raise TypeError(f"on_send returned a {type(out).__name__}, not a ProducerRecord "
                                    "(return record._replace(...))")
                record = out
            except Exception:
                log.warning("producer interceptor %s.on_send raised; skipping it for this record",
                            type(interceptor).__name__, exc_info=True)
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, exception: Optional[BaseException]) -> None:
        for interceptor, fn in self._on_ack:
            try:
                fn(metadata, exception)
            except Exception:
                log.warning("producer interceptor %s.on_acknowledgement raised; skipping it",
                            type(interceptor).__name__, exc_info=True)

    def callback(self, callback: Optional[Callback], topic: str, partition: int) -> Optional[Callback]:
        """``callback`` preceded by the interceptors' on_acknowledgement (``callback`` itself when no
        interceptor wants acknowledgements)."""
        if not self._on_ack:
            return callback
        return _AcknowledgingCallback(self, callback, topic, partition)

    def close(self) -> None:
        for interceptor in self.items:
            close = getattr(interceptor, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    log.warning("producer interceptor %s.close raised", type(interceptor).__name__, exc_info=True)

    def __repr__(self) -> str:
        return f"Interceptors({', '.join(type(i).__name__ for i in self.items)})"


def failure_metadata(topic: str, partition: int) -> RecordMetadata:
    """What interceptors get for a failed record (Java: topic and partition, -1 for the rest)."""
    return RecordMetadata(topic, partition, -1, -1, -1, -1)


class _AcknowledgingCallback:
    """A record's callback that first tells the interceptors (Java's InterceptorCallback)."""

    __slots__ = ("interceptors", "user", "topic", "partition")

    def __init__(self, interceptors: Interceptors, user: Optional[Callback], topic: str, partition: int) -> None:
        self.interceptors = interceptors
        self.user = user
        self.topic = topic
        self.partition = partition

    def __call__(self, metadata: Optional[RecordMetadata], exception: Optional[BaseException]) -> None:
        self.interceptors.on_acknowledgement(
            metadata if metadata is not None else failure_metadata(self.topic, self.partition), exception)
        if self.user is not None:
            self.user(metadata, exception)


__all__ = ["Interceptors", "ProducerRecord", "failure_metadata"]
