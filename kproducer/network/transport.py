"""Transport: what :class:`~kproducer.network.client.NetworkClient` needs from the layer that moves frames.

Two implementations: :class:`~kproducer.network.selector.Selector` (sockets, TLS) and
:class:`kproducer.testing.ScriptedTransport` (an in-memory scripted broker for deterministic tests). The
client writes whole request frames with :meth:`Transport.send` and, after each :meth:`Transport.poll`, reads
what happened from the result lists, which it may empty or replace (they are plain attributes).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

from ..protocol.errors import AuthenticationError

NodeId = int
#: a request frame (without its size prefix): bytes, or the buffers that make it up, in order (a Produce
#: request's header parts and its batches' records, which a socket transport writes without joining them)
Payload = Union[bytes, Sequence[Union[bytes, bytearray, memoryview]]]


@runtime_checkable
class Transport(Protocol):
    """Non-blocking connections to brokers, by node id; used by one thread, except :meth:`wakeup`."""

    #: results of the last :meth:`poll`: connections that completed (TCP and TLS) ...
    connected: List[NodeId]
    #: ... requests fully written (one entry per frame) ...
    completed_sends: List[NodeId]
    #: ... frames received (payload without the size prefix) ...
    completed_receives: List[Tuple[NodeId, bytes]]
    #: ... connections lost or refused, with why ...
    disconnected: Dict[NodeId, str]
    #: ... and those that failed for a reason retrying cannot fix (TLS verification, protocol mismatch)
    failures: Dict[NodeId, AuthenticationError]

    def connect(self, node_id: NodeId, host: str, port: int) -> None:
        """Start connecting; a failure shows up in ``disconnected`` after a later poll."""

    def send(self, node_id: NodeId, payload: Payload) -> None:
        """Queue one request frame (without the size prefix) on a connected channel. The buffers of a
        frame given in parts must not change until it is written (its request is answered or failed)."""

    def poll(self, timeout_ms: float) -> None:
        """Do I/O for at most ``timeout_ms`` (less when something happens or :meth:`wakeup` is called)."""

    def close(self, node_id: NodeId, reason: str = "closed by client") -> None:
        """Close one channel (no report in ``disconnected``: the client asked for it)."""

    def close_all(self) -> None:
        """Close every channel and the transport itself."""

    def wakeup(self) -> None:
        """Make a blocked (or the next) :meth:`poll` return at once; safe from any thread."""

    def is_connected(self, node_id: NodeId) -> bool:
        ...

    def has_channel(self, node_id: NodeId) -> bool:
        ...

    def channel_ids(self) -> List[NodeId]:
        ...

    def setup_timeout_error(self, node_id: NodeId) -> Optional[AuthenticationError]:
        """Why a connection that did not finish its setup in time will never work (e.g. a TLS handshake a
        plaintext listener never answers), or None when retrying may help."""

    def connection_ready(self, node_id: NodeId) -> None:
        """The connection is set up (ApiVersions and SASL done): a transport that limits the size of a
        response more tightly until then (the Selector: 512 KiB) lifts that limit."""


__all__ = ["NodeId", "Payload", "Transport"]
