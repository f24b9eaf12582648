"""The errors kproducer raises: import them from here.

Everything in :mod:`kproducer.protocol.errors` is re-exported: :class:`KafkaError` (the base of all
of them), one class per Kafka broker error code (``NotLeaderOrFollowerError``, ...),
:func:`error_for_code` and friends. This module adds the errors that arise in the client itself;
they have ``code == -1`` and are not broker error codes.

Every error has a ``retriable`` flag: True means retrying the same operation later may succeed, and
the category flags ``invalid_metadata``, ``coordinator_moved``, ``fenced``, ``txn_fatal`` and
``txn_abortable`` (all False for the client-side errors; see :mod:`kproducer.protocol.errors`).
"""
from __future__ import annotations

from typing import List, Optional

from .protocol import errors as _protocol_errors
from .protocol.errors import *  # noqa: F401,F403
from .protocol.errors import AuthenticationError, KafkaError
from .protocol.schema import SchemaError

# __all__ is computed at the end of the module: kproducer.protocol.errors's (a literal list, which mypy
# follows through the `+=` below) and every error class defined here.


class KafkaTimeoutError(KafkaError):
    """A client-side time limit expired: ``max.block.ms`` while waiting for metadata or buffer space,
    a ``flush()``/``close()`` timeout, or ``delivery.timeout.ms`` for a record that was never
    acknowledged. Retriable: the same operation may succeed later."""

    name = "KAFKA_TIMEOUT"
    retriable = True
    default_message = (
        "Timed out: a client time limit expired (max.block.ms, delivery.timeout.ms, "
        "or a flush()/close() timeout)."
    )


class BufferExhaustedError(KafkaTimeoutError):
    """The record could not get space in ``buffer.memory`` within ``max.block.ms``.

    Give ``size``, ``max_block_ms`` and ``buffer_memory`` (keyword arguments) to have them in the
    message; they are kept as attributes of the same names.
    """

    name = "BUFFER_EXHAUSTED"
    default_message = (
        "Failed to allocate memory within max.block.ms; buffer.memory is full: "
        "increase buffer.memory or max.block.ms, or produce slower"
    )

    size: Optional[int]
    max_block_ms: Optional[int]
    buffer_memory: Optional[int]

    def __init__(
        self,
        message: Optional[str] = None,
        *,
        size: Optional[int] = None,
        max_block_ms: Optional[int] = None,
        buffer_memory: Optional[int] = None,
    ) -> None:
        if not message and size is not None and max_block_ms is not None and buffer_memory is not None:
            message = (
                f"Failed to allocate {size} bytes within max.block.ms={max_block_ms} ms; "
                f"buffer.memory={buffer_memory} is full: increase buffer.memory or max.block.ms, "
                "or produce slower"
            )
        super().__init__(message)
        self.size = size
        self.max_block_ms = max_block_ms
        self.buffer_memory = buffer_memory


class ConfigError(KafkaError, ValueError):
    """A producer setting is unknown, has a bad value, or conflicts with another setting."""

    name = "CONFIG_ERROR"
    default_message = "Invalid producer configuration: check the setting names and values."


class ProducerClosedError(KafkaError):
    """The producer was used after ``close()``."""

    name = "PRODUCER_CLOSED"
    default_message = (
        "The producer is closed: close() was called, so it cannot send or flush; create a new producer."
    )


class ProducerForkedError(ProducerClosedError):
    """The producer was created in another process and inherited through ``fork()`` (e.g. by a
    ``multiprocessing`` worker): its network thread and connections belong to the parent, so in the
    child it refuses every call. Create a new Producer in the child process."""

    name = "PRODUCER_FORKED"
    default_message = (
        "A producer cannot be used across fork(): this one was created in the parent process; "
        "create a new Producer in the child process."
    )


class SerializationError(KafkaError, TypeError):
    """A key or value could not be turned into bytes (or the serializer raised)."""

    name = "SERIALIZATION_ERROR"
    default_message = (
        "Could not serialize the record: keys and values must be bytes (or None) "
        "unless a key/value serializer is configured."
    )


class KafkaConnectionError(KafkaError):
    """The base of the errors that mean no broker could be reached. Retriable.

    The producer raises it only as :class:`NoBrokersAvailableError`. A connection lost under a request
    is not raised at all: the request fails with :class:`NetworkError` (Kafka's NETWORK_EXCEPTION, as
    in Java's client), which the producer retries until ``delivery.timeout.ms``, so the record's
    future fails with that, or with :class:`KafkaTimeoutError`. kafka-python has the same name.
    """

    name = "CONNECTION_ERROR"
    retriable = True
    default_message = "Could not connect to the broker, or the connection was lost."


class NoBrokersAvailableError(KafkaTimeoutError, KafkaConnectionError):
    """``max.block.ms`` expired while waiting for metadata and no broker (``bootstrap.servers`` or
    known from metadata) was ever reached: the most likely cause of the timeout is a wrong address or
    a broker that is down, not a missing topic. A :class:`KafkaTimeoutError` (what Java's client raises
    in this case, ``TimeoutException``), so handlers of timeouts keep working; the message gives the
    last connection error of each broker. kafka-python raises ``NoBrokersAvailable`` at the same point
    (its producer connects in the constructor)."""

    name = "NO_BROKERS_AVAILABLE"
    default_message = (
        "No broker could be reached: check bootstrap.servers (host:port), that the brokers are "
        "running, and that the network allows the connection."
    )


class TransactionError(KafkaError):
    """The transactional API was used in the wrong order or state, e.g. ``begin_transaction()``
    before ``init_transactions()``, or a transactional call on a producer without
    ``transactional.id``."""

    name = "TRANSACTION_ERROR"
    default_message = (
        "Transactional API misuse: the call is not allowed in the producer's current transaction "
        "state (e.g. begin_transaction() called before init_transactions())."
    )


class IllegalStateError(KafkaError):
    """The producer is in a state that does not allow the operation (an internal invariant broke,
    or the producer failed fatally and must be closed)."""

    name = "ILLEGAL_STATE"
    default_message = "The producer is in a state that does not allow this operation."


class NetworkThreadDiedError(IllegalStateError):
    """The producer's network thread ended on an unexpected error (its ``__cause__``; a bug or an error that
    escaped its loop): the producer cannot send any more. Every record not yet acknowledged fails with it, and
    ``send()``, ``flush()`` and ``close()`` raise it. Close the producer and create a new one."""

    name = "NETWORK_THREAD_DIED"
    default_message = "The producer's network thread died; close this producer and create a new one."


class NetworkThreadWaitError(KafkaTimeoutError):
    """A call made on the producer's network thread (in a send callback) would have had to wait for that
    very thread: ``get()`` on a record that is not done yet, ``flush()``, ``send()`` to a topic whose metadata
    is not known yet. It fails at once instead (a wait that could only end at its timeout, or never). A
    :class:`KafkaTimeoutError` (what the wait would have ended with), but not retriable from the callback."""

    name = "NETWORK_THREAD_WAIT"
    retriable = False
    default_message = (
        "This call cannot wait on the producer's network thread (in a send callback): it would wait for itself."
    )


class TransactionAbortedError(TransactionError):
    """The record belonged to a transaction that was aborted before the record was sent."""

    name = "TRANSACTION_ABORTED"
    default_message = "The transaction was aborted before this record was sent."


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake with a broker failed: its certificate did not verify (unknown CA, hostname
    mismatch, expired), the broker refused ours, or the two sides share no protocol version or cipher.
    The message names the broker and OpenSSL's reason."""

    name = "SSL_AUTHENTICATION_FAILED"
    default_message = "The TLS handshake with the broker failed: check the ssl.* settings."


class SecurityProtocolMismatchError(SslAuthenticationError):
    """One side of a connection speaks TLS and the other does not: ``security.protocol`` does not match
    the broker's listener (SSL or SASL_SSL against a plaintext port, or the reverse)."""

    name = "SECURITY_PROTOCOL_MISMATCH"
    default_message = (
        "The broker's listener and security.protocol disagree about TLS: check security.protocol."
    )


class FrameTooLargeError(AuthenticationError):
    """A broker announced a response frame larger than kproducer takes before the connection is set up:
    512 KiB until its ApiVersions (and SASL) answers are in, which are small. The frame is refused from its
    4-byte size, before anything proportional to it is buffered. No Kafka listener for these settings answers
    so, and retrying cannot change that: as an authentication failure, waits in progress (``send()``,
    ``flush()``, metadata) fail with it at once. ``size`` is the frame's announced size, ``limit`` the limit
    (bytes). (On a connection that is set up, a frame above ``max(max.request.size, 100 MiB)`` closes the
    connection with that reason and it is retried, as Java does.)"""

    name = "FRAME_TOO_LARGE"
    default_message = "A broker sent a response frame larger than kproducer takes before the connection is set up."

    def __init__(self, message: Optional[str] = None, size: int = -1, limit: int = -1) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


def _client_side_error_names() -> List[str]:
    """The error classes defined in this module, in definition order."""
    return [
        name
        for name, obj in globals().items()
        if isinstance(obj, type)
        and issubclass(obj, KafkaError)
        and obj.__module__ == __name__
        and not name.startswith("_")
    ]


__all__: List[str] = []
__all__ += _protocol_errors.__all__
__all__ += _client_side_error_names()
__all__ += ["SchemaError"]
