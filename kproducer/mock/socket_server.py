"""A broker's network layer, shaped like Kafka's SocketServer.

* The :class:`Acceptor` thread accepts connections on the listening socket and hands each one, round
  robin, to a :class:`Processor`.
* Each :class:`Processor` thread owns its connections and runs one ``selectors`` loop: configure new
  connections, process new responses, poll, process completed receives, completed sends and
  disconnects. A completed receive is parsed (header and body) and put on the RequestChannel, and its
  connection is muted until the response has been sent, so responses leave in request order even when
  a client pipelines requests.
* Anything a processor cannot parse (a refused frame size, a malformed header or body, an unknown API
  key, an unsupported version of an API other than ApiVersions) closes that one connection and is
  logged; every other connection is unaffected.
"""
from __future__ import annotations

import errno
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time
from collections import deque
from typing import Deque, Dict, List, Mapping, Optional, Set, Tuple

from ..protocol.messages import API_VERSIONS, decode_request_header
from .connection import Connection, FramingError
from .request_channel import Request, RequestChannel, Response

log = logging.getLogger(__name__)

_POLL_TIMEOUT = 0.5
_conn_ids = itertools.count(1)


def _peer(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


class Processor(threading.Thread):
    """A network thread: one selector loop over the connections it was given."""

    def __init__(
        self,
        processor_id: int,
        broker_id: int,
        channel: RequestChannel,
        served: Mapping[int, Tuple[int, int]],
        max_request_size: int,
    ) -> None:
        super().__init__(name=f"mock-broker-{broker_id}-network-{processor_id}", daemon=True)
        self.processor_id = processor_id
        self.broker_id = broker_id
        self._channel = channel
        self._served = served
        self._max_request_size = max_request_size
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._woken = False
        self._running = True
        self._close_all = False
        self._new_connections: Deque[Tuple[socket.socket, str]] = deque()
        self._connections: Dict[int, Connection] = {}
        self._interest: Dict[int, int] = {}
        self._delayed: List[Tuple[float, int, Response]] = []
        self._delay_seq = itertools.count()
        self._check_buffer: Set[int] = set()
        self._completed_receives: List[Tuple[Connection, bytes]] = []
        self._completed_sends: List[Connection] = []
        self._disconnected: List[Tuple[Connection, str, int]] = []
        channel.add_processor(processor_id, self.wakeup)

    # ------------------------------------------------------------------ called by other threads

    def accept(self, sock: socket.socket, peer: str) -> None:
        self._new_connections.append((sock, peer))
        self.wakeup()

    def wakeup(self) -> None:
        if self._woken:
            return
        self._woken = True
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the buffer is full (a wakeup is pending anyway) or we are shutting down
            pass

    def close_all_connections(self) -> None:
        self._close_all = True
        self.wakeup()

    def shutdown(self) -> None:
        self._running = False
        self.wakeup()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    # ------------------------------------------------------------------------------ the loop

    def run(self) -> None:
        try:
            while self._running:
                try:
                    self._run_once()
                except Exception:  # a bug must not take the broker down: log it and go on
                    log.exception("broker %d processor %d: unexpected error", self.broker_id, self.processor_id)
                    time.sleep(0.01)
        finally:
            for conn in list(self._connections.values()):
                self._close(conn, "broker shutting down", logging.DEBUG)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _run_once(self) -> None:
        if self._close_all:
            self._close_all = False
            for conn in list(self._connections.values()):
                self._close(conn, "connections dropped on request", logging.INFO)
        self._configure_new_connections()
        self._process_new_responses()
        self._poll()
        self._process_completed_receives()
        self._process_completed_sends()
        self._process_disconnected()

    def _configure_new_connections(self) -> None:
        while self._new_connections:
            sock, peer = self._new_connections.popleft()
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as e:
                log.debug("broker %d: could not configure connection from %s: %s", self.broker_id, peer, e)
                sock.close()
                continue
            conn = Connection(next(_conn_ids), sock, peer, self._max_request_size)
            self._connections[conn.id] = conn
            self._update_interest(conn)
            log.debug("broker %d: connection %d from %s", self.broker_id, conn.id, peer)

    def _process_new_responses(self) -> None:
        now = time.monotonic()
        for response in self._channel.take_responses(self.processor_id):
            if response.send_at > now:
                heapq.heappush(self._delayed, (response.send_at, next(self._delay_seq), response))
            else:
                self._apply_response(response)
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            self._apply_response(heapq.heappop(delayed)[2])

    def _apply_response(self, response: Response) -> None:
        conn = self._connections.get(response.request.connection_id)
        if conn is None:
            log.debug("broker %d: dropping response to closed connection: %r", self.broker_id, response.request)
            return
        if response.close:
            self._close(conn, f"closing instead of answering {response.request.api.name}", logging.INFO)
            return
        if response.data is None:
            self._unmute(conn)
            return
        conn.enqueue(response.data)
        try:
            done = conn.write()
        except OSError as e:
            self._disconnected.append((conn, f"write failed: {e}", logging.DEBUG))
            return
        if done:
            self._completed_sends.append(conn)
        else:
            self._update_interest(conn)

    def _poll(self) -> None:
        if self._check_buffer or self._completed_sends or self._disconnected:
            timeout: Optional[float] = 0.0
        else:
            timeout = _POLL_TIMEOUT
            if self._delayed:
                timeout = max(0.0, min(timeout, self._delayed[0][0] - time.monotonic()))
        events = self._selector.select(timeout)
        for key, mask in events:
            conn = key.data
            if conn is None:
                self._woken = False
                try:
                    while self._wake_r.recv(4096):
                        pass
                except OSError:
                    pass
                continue
            assert isinstance(conn, Connection)
            if conn.closed:
                continue
            if mask & selectors.EVENT_WRITE:
                try:
                    if conn.write():
                        self._completed_sends.append(conn)
                except OSError as e:
                    self._disconnected.append((conn, f"write failed: {e}", logging.DEBUG))
                    continue
            if mask & selectors.EVENT_READ and not conn.muted:
                try:
                    alive = conn.read()
                except OSError as e:
                    self._disconnected.append((conn, f"read failed: {e}", logging.DEBUG))
                    continue
                if not alive:
                    self._disconnected.append((conn, "peer closed the connection", logging.DEBUG))
                    continue
                self._take_frame(conn)
        if self._check_buffer:
            ids, self._check_buffer = self._check_buffer, set()
            for conn_id in ids:
                found = self._connections.get(conn_id)
                if found is not None and not found.muted:
                    self._take_frame(found)

    def _take_frame(self, conn: Connection) -> None:
        try:
            frame = conn.next_frame()
        except FramingError as e:
            self._disconnected.append((conn, f"bad frame: {e}", logging.WARNING))
            return
        if frame is not None:
            conn.muted = True  # no further frame until this request is answered
            self._completed_receives.append((conn, frame))

    def _process_completed_receives(self) -> None:
        receives, self._completed_receives = self._completed_receives, []
        for conn, frame in receives:
            if conn.closed:
                continue
            request = self._parse(conn, frame)
            if request is None:
                continue
            self._update_interest(conn)
            self._channel.send_request(request)

    def _parse(self, conn: Connection, frame: bytes) -> Optional[Request]:
        try:
            header, api, pos = decode_request_header(frame)
        except Exception as e:
            self._disconnected.append((conn, f"malformed request header: {e}", logging.WARNING))
            return None
        if api is None or header.api_key not in self._served:
            self._disconnected.append(
                (conn, f"unknown or unserved API key {header.api_key} (v{header.api_version})", logging.WARNING)
            )
            return None
        lo, hi = self._served[header.api_key]
        body = None
        if lo <= header.api_version <= hi:
            try:
                body = api.decode_request(header.api_version, frame, pos)
            except Exception as e:
                self._disconnected.append(
                    (conn, f"malformed {api.name} v{header.api_version} request: {e}", logging.WARNING)
                )
                return None
        elif api.key != API_VERSIONS.key:
            # ApiVersions of an unknown version is answered (UNSUPPORTED_VERSION, as v0); others close
            self._disconnected.append(
                (conn, f"unsupported {api.name} version {header.api_version} (served: v{lo}-v{hi})", logging.WARNING)
            )
            return None
        return Request(self.processor_id, conn.id, header, api, body, len(frame), conn.peer)

    def _process_completed_sends(self) -> None:
        sends, self._completed_sends = self._completed_sends, []
        for conn in sends:
            if not conn.closed:
                self._unmute(conn)

    def _process_disconnected(self) -> None:
        disconnected, self._disconnected = self._disconnected, []
        for conn, reason, level in disconnected:
            self._close(conn, reason, level)

    # ------------------------------------------------------------------------------ helpers

    def _unmute(self, conn: Connection) -> None:
        conn.muted = False
        self._update_interest(conn)
        if conn.buffered() >= 4:
            self._check_buffer.add(conn.id)

    def _update_interest(self, conn: Connection) -> None:
        if conn.closed:
            return
        events = 0
        if not conn.muted:
            events |= selectors.EVENT_READ
        if conn.has_pending_send():
            events |= selectors.EVENT_WRITE
        current = self._interest.get(conn.id, 0)
        if events == current:
            return
        try:
            if current == 0:
                self._selector.register(conn.sock, events, conn)
            elif events == 0:
                self._selector.unregister(conn.sock)
            else:
                self._selector.modify(conn.sock, events, conn)
        except (OSError, ValueError, KeyError) as e:
            self._disconnected.append((conn, f"selector error: {e}", logging.DEBUG))
            return
        if events:
            self._interest[conn.id] = events
        else:
            self._interest.pop(conn.id, None)

    def _close(self, conn: Connection, reason: str, level: int) -> None:
        if conn.closed:
            return
        if self._interest.pop(conn.id, 0):
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        self._connections.pop(conn.id, None)
        self._check_buffer.discard(conn.id)
        conn.close()
        log.log(level, "broker %d: closed connection %d from %s: %s", self.broker_id, conn.id, conn.peer, reason)


class Acceptor(threading.Thread):
    """Accepts connections and assigns them to processors round robin."""

    def __init__(self, broker_id: int, server: socket.socket, processors: List[Processor]) -> None:
        super().__init__(name=f"mock-broker-{broker_id}-acceptor", daemon=True)
        self.broker_id = broker_id
        self._server = server
        self._processors = processors
        self._next = 0
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
                for key, _mask in self._selector.select(_POLL_TIMEOUT):
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
        self.processors: List[Processor] = []
        self._acceptor: Optional[Acceptor] = None

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
            Processor(i, self.broker_id, self._channel, self._served, self._max_request_size)
            for i in range(self._num_processors)
        ]
        for processor in self.processors:
            processor.start()
        self._acceptor = Acceptor(self.broker_id, server, self.processors)
        self._acceptor.start()
        log.debug("broker %d listening on %s:%d", self.broker_id, self.host, self.port)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection and stop the threads."""
        if self._acceptor is not None:
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
