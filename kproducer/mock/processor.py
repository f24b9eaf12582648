"""A mock broker's network thread (Kafka's SocketServer.Processor).

Each processor owns its connections and runs one ``selectors`` loop: configure new connections,
process new responses, poll, process completed receives, completed sends and disconnects. A completed
receive is parsed (header and body) and put on the RequestChannel, and its connection is muted until
the response has been sent, so responses leave in request order even when a client pipelines
requests. Anything it cannot parse (a refused frame size, a malformed header or body, an unknown API
key, an unsupported version of an API other than ApiVersions) closes that one connection and is logged.

On a TLS listener each accepted socket is wrapped server side without a handshake; the handshake is a
connection state driven on selector readiness (a client that does not speak TLS fails it and is
closed). On a SASL listener each connection carries a :class:`~kproducer.mock.security.SaslSession`
with its requests: until it has authenticated only ApiVersions, SaslHandshake and SaslAuthenticate
pass, and an expired session closes the connection at its next request (KIP-368), as Kafka's
SocketServer does. A response may ask to close the connection once it has been written (a failed
authentication). On a PLAINTEXT listener all of this costs a few flag checks.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from typing import Deque, Dict, List, Mapping, Optional, Set, Tuple

from ..protocol.messages import API_VERSIONS, decode_request_header
from .acl import tls_principal
from .connection import Connection, FramingError, TlsConnection
from .mock_clock import SYSTEM_CLOCK, MockClock, real_wait
from .request_channel import Request, RequestChannel, Response
from .security import ListenerSecurity

log = logging.getLogger(__name__)

POLL_TIMEOUT = 0.5
#: how long a connection closed after its last response stays open after the end of the stream was sent
_CLOSE_AFTER_SHUTDOWN_MS = 100.0
_conn_ids = itertools.count(1)


class Processor(threading.Thread):
    """A network thread: one selector loop over the connections it was given."""

    def __init__(
        self,
        processor_id: int,
        broker_id: int,
        channel: RequestChannel,
        served: Mapping[int, Tuple[int, int]],
        max_request_size: int,
        security: Optional[ListenerSecurity] = None,
        clock: MockClock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(name=f"mock-broker-{broker_id}-network-{processor_id}", daemon=True)
        self.processor_id = processor_id
        self.broker_id = broker_id
        self._channel = channel
        self._served = served
        self._max_request_size = max_request_size
        self._security = security
        self._clock = clock
        self._ssl_context: Optional[ssl.SSLContext] = security.ssl_context if security is not None else None
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
        #: (close at clock monotonic_ms(), connection): connections to close once their last response went out
        self._closing: List[Tuple[float, Connection]] = []
        #: (unmute at clock monotonic_ms(), connection): connections muted by a quota throttle; and the
        #: throttle end of a connection whose throttled response is still being written
        self._throttled: List[Tuple[float, Connection]] = []
        self._throttle_ends: Dict[int, float] = {}
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
        if self._closing:
            self._close_delayed()
        if self._throttled:
            self._end_throttles()

    def _end_throttles(self) -> None:
        now = self._clock.monotonic_ms()
        keep = []
        for at, conn in self._throttled:
            if at > now:
                keep.append((at, conn))
            elif not conn.closed:
                self._unmute(conn)
        self._throttled = keep

    def _unmute_after(self, conn: Connection, at_ms: float) -> None:
        """Unmute now, or once a quota throttle ending at ``at_ms`` is over (as Kafka's MUTED_AND_THROTTLED)."""
        if at_ms > self._clock.monotonic_ms():
            self._throttled.append((at_ms, conn))
        else:
            self._unmute(conn)

    def _close_delayed(self) -> None:
        now = self._clock.monotonic_ms()
        keep = []
        for at, conn in self._closing:
            if at <= now:
                self._close(conn, "closed after its last response (authentication failed)", logging.INFO)
            else:
                keep.append((at, conn))
        self._closing = keep

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
            conn = self._new_connection(sock, peer)
            if conn is None:
                continue
            self._connections[conn.id] = conn
            self._update_interest(conn)
            log.debug("broker %d: connection %d from %s", self.broker_id, conn.id, peer)

    def _new_connection(self, sock: socket.socket, peer: str) -> Optional[Connection]:
        conn: Connection
        if self._ssl_context is None:
            conn = Connection(next(_conn_ids), sock, peer, self._max_request_size)
        else:
            try:
                tls_sock = self._ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (ssl.SSLError, OSError) as e:
                log.info("broker %d: could not start TLS with %s: %s", self.broker_id, peer, e)
                sock.close()
                return None
            conn = TlsConnection(next(_conn_ids), tls_sock, peer, self._max_request_size)
        if self._security is not None:
            conn.session = self._security.new_session()
        return conn

    def _process_new_responses(self) -> None:
        now = self._clock.monotonic_ms()
        for response in self._channel.take_responses(self.processor_id):
            if response.send_at_ms > now:
                heapq.heappush(self._delayed, (response.send_at_ms, next(self._delay_seq), response))
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
            self._unmute_after(conn, response.muted_until_ms)
            return
        if response.muted_until_ms:
            self._throttle_ends[conn.id] = response.muted_until_ms
        if response.close_after_send:
            conn.close_after_send = True
        if response.raw:
            conn.enqueue_raw(response.data)
        else:
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
            timeout = POLL_TIMEOUT
            if self._delayed or self._closing or self._throttled:
                now = self._clock.monotonic_ms()
                if self._throttled:
                    timeout = max(0.0, min(timeout, (min(at for at, _ in self._throttled) - now) / 1000.0))
                if self._delayed:
                    timeout = max(0.0, min(timeout, (self._delayed[0][0] - now) / 1000.0))
                if self._closing:
                    timeout = max(0.0, min(timeout, (min(at for at, _ in self._closing) - now) / 1000.0))
                timeout = real_wait(self._clock, timeout)
        events = self._selector.select(timeout)
        for key, mask in events:
            conn = key.data
            if conn is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except OSError:
                    pass
                # cleared after draining: a wakeup() between the two would otherwise leave the flag set with
                # no byte in the socket, and every later wakeup() would be skipped. One that races with this
                # drain is still seen, as the loop processes new work right after this poll.
                self._woken = False
                continue
            assert isinstance(conn, Connection)
            if conn.closed:
                continue
            if conn.handshaking:
                self._handshake(conn)
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

    def _handshake(self, conn: Connection) -> None:
        """One step of a TLS connection's server-side handshake; once it completes, read what the client
        may already have sent after it."""
        assert isinstance(conn, TlsConnection)
        try:
            done = conn.handshake()
        except (ssl.SSLError, OSError) as e:
            # e.g. a plaintext Kafka client on the TLS port: "wrong version number" / "http request"
            reason = getattr(e, "reason", None) or str(e) or type(e).__name__
            hint = " (a client without TLS? check its security.protocol)" if "VERSION" in reason else ""
            self._disconnected.append((conn, f"TLS handshake failed: {reason}{hint}", logging.INFO))
            return
        self._update_interest(conn)
        if not done:
            return
        log.debug("broker %d: TLS established with %s", self.broker_id, conn.peer)
        conn.principal = tls_principal(conn.sock.getpeercert())  # type: ignore[attr-defined]
        try:
            alive = conn.read()
        except OSError as e:
            self._disconnected.append((conn, f"read failed: {e}", logging.DEBUG))
            return
        if not alive:
            self._disconnected.append((conn, "peer closed the connection", logging.DEBUG))
            return
        if conn.buffered() >= 4:
            self._check_buffer.add(conn.id)

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
        session = conn.session
        if session is not None:
            refused = session.allows(header.api_key)
            if refused is not None:
                if session.authenticated:
                    session.security.stats.add("expired_connections")
                self._disconnected.append((conn, refused, logging.INFO))
                return None
        lo, hi = self._served[header.api_key]
        body = None
        if lo <= header.api_version <= hi and header.api_version < api.min_version:
            # an older broker's version that the mock advertises but has no codec for (restricted versions)
            self._disconnected.append(
                (conn, f"{api.name} v{header.api_version} is advertised but the mock cannot decode it "
                       f"(implemented: v{api.min_version}-v{api.max_version})", logging.WARNING)
            )
            return None
        if lo <= header.api_version <= hi:
            try:
                body = api.decode_request(header.api_version, frame, pos)
            except Exception as e:
                self._disconnected.append(
                    (conn, f"malformed {api.name} v{header.api_version} request: {e}", logging.WARNING)
                )
                return None
        elif api.key != API_VERSIONS.key:
            # ApiVersions of an unknown version is answered (UNSUPPORTED_VERSION, as v0); others close, as
            # Kafka's SocketServer does (InvalidRequestException "... which is not enabled")
            self._disconnected.append(
                (conn, f"unsupported {api.name} version {header.api_version} (served: v{lo}-v{hi})", logging.WARNING)
            )
            return None
        return Request(self.processor_id, conn.id, header, api, body, len(frame), conn.peer, session,
                       self._clock.monotonic_ms(), conn.principal)

    def _process_completed_sends(self) -> None:
        sends, self._completed_sends = self._completed_sends, []
        for conn in sends:
            if not conn.closed:
                if conn.close_after_send:
                    # as Kafka, the end of the stream right behind the last response (which was held back:
                    # context.FAILED_AUTHENTICATION_DELAY_MS); the socket itself is closed a little later, so
                    # that anything the client sent meanwhile cannot turn the close into a reset that
                    # discards the response before the client read it
                    try:
                        conn.sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    self._closing.append((self._clock.monotonic_ms() + _CLOSE_AFTER_SHUTDOWN_MS, conn))
                else:
                    self._unmute_after(conn, self._throttle_ends.pop(conn.id, 0.0))

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
        if conn.handshaking:
            assert isinstance(conn, TlsConnection)
            events = conn.handshake_events
        else:
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
        self._throttle_ends.pop(conn.id, None)
        # logged before the socket closes, so that whoever sees the close can also see why
        log.log(level, "broker %d: closed connection %d from %s: %s", self.broker_id, conn.id, conn.peer, reason)
        conn.close()
