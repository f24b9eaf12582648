"""One client connection of a mock broker: size-prefixed framing in, queued response bytes out.

A frame is a 4-byte big-endian size followed by that many bytes, reassembled by
:class:`kproducer.protocol.framing.FrameReader` (the client's Selector uses the same). A negative size
or one above the configured maximum is hostile or garbage input: :class:`FramingError` (the reader's
FrameError) tells the processor to close the connection. Bytes that arrive while the connection is
muted stay buffered; the next frame is taken from the buffer only when the processor unmutes the
connection.

:class:`TlsConnection` is the same over a non-blocking :class:`ssl.SSLSocket`: the processor drives its
server-side handshake on readiness (:meth:`TlsConnection.handshake`), and its reads drain what the SSL
object has already decrypted (``pending()``), which the selector would never signal.
"""
from __future__ import annotations

import selectors
import socket
import ssl
from collections import deque
from typing import ClassVar, Deque, Optional, Tuple, Type

from ..protocol.framing import SIZE_PREFIX, FrameError, FrameReader
from .security import SaslSession

_SIZE = SIZE_PREFIX
_RECV_CHUNK = 256 * 1024
_JOIN_LIMIT = 64 * 1024


#: the peer sent a frame size we refuse (negative or above the limit)
FramingError = FrameError


class Connection:
    __slots__ = (
        "id",
        "sock",
        "peer",
        "max_frame",
        "muted",
        "closed",
        "handshaking",
        "session",
        "principal",
        "close_after_send",
        "reader",
        "_out",
        "_out_pos",
    )

    #: what send() raises when the socket cannot take more now (write() retries on writability)
    _WOULD_BLOCK: ClassVar[Tuple[Type[BaseException], ...]] = (BlockingIOError, InterruptedError)

    def __init__(self, conn_id: int, sock: socket.socket, peer: str, max_frame: int) -> None:
        self.id = conn_id
        self.sock = sock
        self.peer = peer
        self.max_frame = max_frame
        #: True while a request from this connection is being handled (no further frame is read)
        self.muted = False
        self.closed = False
        #: True until the TLS handshake has completed (always False for a plaintext connection)
        self.handshaking = False
        #: the connection's SASL state on a SASL listener, else None
        self.session: Optional[SaslSession] = None
        #: the principal before SASL (kproducer.mock.acl): a verified TLS client certificate's subject
        self.principal = "User:ANONYMOUS"
        #: close the connection once the queued output has been written (failed authentication)
        self.close_after_send = False
        #: the incoming bytes, reassembled into request frames
        self.reader = FrameReader(max_frame)
        self._out: Deque[memoryview] = deque()
        self._out_pos = 0

    # ---------------------------------------------------------------------------------- input

    def read(self) -> bool:
        """Read what the socket has. Returns False when the peer closed the connection."""
        try:
            data = self.sock.recv(_RECV_CHUNK)
        except (BlockingIOError, InterruptedError):
            return True
        if not data:
            return False
        self.reader.append(data)
        return True

    def next_frame(self) -> Optional[bytes]:
        """The next complete frame's payload from the buffer, or None if it is not all here yet."""
        return self.reader.next_frame()

    def buffered(self) -> int:
        return self.reader.buffered

    # --------------------------------------------------------------------------------- output

    def enqueue(self, payload: bytes) -> None:
        """Queue one response frame (the size prefix is added here)."""
        if len(payload) <= _JOIN_LIMIT:  # one send() for the usual small response
            self._out.append(memoryview(_SIZE.pack(len(payload)) + payload))
        else:
            self._out.append(memoryview(_SIZE.pack(len(payload))))
            self._out.append(memoryview(payload))

    def enqueue_raw(self, data: bytes) -> None:
        """Queue bytes as they are, with no size prefix (fault injection)."""
        self._out.append(memoryview(data))

    def has_pending_send(self) -> bool:
        return bool(self._out)

    def write(self) -> bool:
        """Write as much queued output as the socket takes. True when everything was written."""
        out = self._out
        while out:
            view = out[0]
            try:
                sent = self.sock.send(view[self._out_pos:])
            except self._WOULD_BLOCK:  # only looked up when send() raised
                return False
            self._out_pos += sent
            if self._out_pos < len(view):
                return False
            out.popleft()
            self._out_pos = 0
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class TlsConnection(Connection):
    """A connection over a non-blocking server-side :class:`ssl.SSLSocket` (wrapped with
    ``do_handshake_on_connect=False``)."""

    __slots__ = ("handshake_events",)

    # an SSL write may also have to wait for the peer (renegotiation, or a record still to be read)
    _WOULD_BLOCK = (ssl.SSLWantWriteError, ssl.SSLWantReadError, *Connection._WOULD_BLOCK)

    def __init__(self, conn_id: int, sock: ssl.SSLSocket, peer: str, max_frame: int) -> None:
        super().__init__(conn_id, sock, peer, max_frame)
        self.handshaking = True
        #: the selector events the handshake waits for
        self.handshake_events = selectors.EVENT_READ

    def handshake(self) -> bool:
        """One step of the TLS handshake. True when it has completed; False when it waits for the
        socket (``handshake_events`` says for what). Raises ssl.SSLError / OSError when it fails."""
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self.handshake_events = selectors.EVENT_READ
            return False
        except ssl.SSLWantWriteError:
            self.handshake_events = selectors.EVENT_READ | selectors.EVENT_WRITE
            return False
        self.handshaking = False
        return True

    def read(self) -> bool:
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            data = sock.recv(_RECV_CHUNK)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return True
        except ssl.SSLZeroReturnError:  # the peer sent close_notify
            return False
        if not data:
            return False
        self.reader.append(data)
        # the SSL object may hold more decrypted bytes than one recv returned: the selector will not
        # report them (they are no longer in the kernel), so take them now
        while True:
            pending = sock.pending()
            if not pending:
                return True
            try:
                more = sock.recv(max(pending, _RECV_CHUNK))
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return True
            except ssl.SSLZeroReturnError:
                return False
            if not more:
                return False
            self.reader.append(more)
