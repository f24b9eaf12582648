"""A broker's network layer, shaped like Kafka's SocketServer.

* The :class:`Acceptor` thread accepts connections on the listening socket and hands each one, round
  robin, to a :class:`~kproducer.mock.processor.Processor`.
* Each Processor thread runs a selector loop over its connections (see :mod:`kproducer.mock.processor`):
  requests go to the RequestChannel, a connection stays muted while its request is handled, hostile
  input closes only its own connection.
* With a :class:`~kproducer.mock.security.ListenerSecurity` the listener serves TLS and/or SASL: the
  processors wrap accepted sockets and give every connection its SASL session.
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from typing import List, Mapping, Optional, Tuple

from .mock_clock import SYSTEM_CLOCK, MockClock
from .processor import POLL_TIMEOUT, Processor
from .request_channel import RequestChannel
from .security import ListenerSecurity

log = logging.getLogger(__name__)


def _peer(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


class Acceptor(threading.Thread):
    """Accepts connections and assigns them to processors round robin."""

    def __init__(self, broker_id: int, server: socket.socket, processors: List[Processor]) -> None:
        super().__init__(name=f"mock-broker-{broker_id}-acceptor", daemon=True)
        self.broker_id = broker_id
        self._server = server
        self._processors = processors
        self._next = 0
        #: connections accepted (only this thread writes it)
        self.accepted = 0
        self._running = True
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._server, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)

    def shutdown(self) -> None:
        self._running = False
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def run(self) -> None:
        try:
            while self._running:
                for key, _mask in self._selector.select(POLL_TIMEOUT):
                    if key.data == "accept":
                        self._accept_pending()
        finally:
            self._selector.close()
            self._server.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept_pending(self) -> None:
        while self._running:
            try:
                sock, addr = self._server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("broker %d: cannot accept connections for now: %s", self.broker_id, e)
                    time.sleep(0.05)
                    return
                log.debug("broker %d: accept failed: %s", self.broker_id, e)
                return
            self.accepted += 1
            processor = self._processors[self._next % len(self._processors)]
            self._next += 1
            processor.accept(sock, _peer(addr))


class SocketServer:
    """The listening socket, its Acceptor and the Processors of one broker."""

    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        channel: RequestChannel,
        served: Mapping[int, Tuple[int, int]],
        num_processors: int = 2,
        max_request_size: int = 100 * 1024 * 1024,
        security: Optional[ListenerSecurity] = None,
        clock: MockClock = SYSTEM_CLOCK,
    ) -> None:
        if num_processors < 1:
            raise ValueError("num_processors must be at least 1")
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self._channel = channel
        self._served = served
        self._num_processors = num_processors
        self._max_request_size = max_request_size
        self._clock = clock
        #: None for a PLAINTEXT listener
        self._security = security if security is not None and (security.tls or security.sasl) else None
        self.processors: List[Processor] = []
        self._acceptor: Optional[Acceptor] = None
        self._accepted_before = 0

    def start(self) -> None:
        """Bind (the configured port, or a free one the first time) and start the threads."""
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((self.host, self.port))
            server.listen(512)
            server.setblocking(False)
        except OSError:
            server.close()
            raise
        self.port = server.getsockname()[1]
        self.processors = [
            Processor(i, self.broker_id, self._channel, self._served, self._max_request_size, self._security,
                      self._clock)
            for i in range(self._num_processors)
        ]
        for processor in self.processors:
            processor.start()
        self._acceptor = Acceptor(self.broker_id, server, self.processors)
        self._acceptor.start()
        log.debug("broker %d listening on %s:%d", self.broker_id, self.host, self.port)

    @property
    def accepted(self) -> int:
        """Connections accepted since start()."""
        return self._accepted_before + (self._acceptor.accepted if self._acceptor is not None else 0)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection and stop the threads."""
        if self._acceptor is not None:
            self._accepted_before += self._acceptor.accepted
            self._acceptor.shutdown()
            self._acceptor.join(timeout)
            self._acceptor = None
        for processor in self.processors:
            processor.shutdown()
        for processor in self.processors:
            processor.join(timeout)
        self.processors = []

    def close_connections(self) -> None:
        for processor in self.processors:
            processor.close_all_connections()

    @property
    def connection_count(self) -> int:
        return sum(p.connection_count for p in self.processors)
