"""Non-blocking connections with Kafka's size-prefixed framing, multiplexed over ``selectors``.

Each frame is a 4-byte big-endian length followed by that many payload bytes, however TCP splits or
joins them. One :class:`Selector.poll` call connects, writes and reads whatever the sockets allow and
reports what completed: connections, sent frames, received frames and disconnections.

With an ``ssl_context`` every connection is TLS: after the TCP connect the channel runs the TLS
handshake, driven by the same poll loop (never a blocking handshake), and is reported as connected only
once the handshake is done. A failure that retrying with the same settings cannot fix (the broker's
certificate does not verify, or one side speaks TLS and the other does not) is reported in
:attr:`Selector.failures` as well as :attr:`Selector.disconnected`, with an
:class:`~kproducer.errors.AuthenticationError` that names the broker and the reason.
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Tuple, Type, Union

from ..errors import AuthenticationError, FrameTooLargeError, SecurityProtocolMismatchError, SslAuthenticationError
from ..protocol.accel import MODULES, load
from ..protocol.framing import SIZE_PREFIX, FrameError, FrameReader
from .timer import WakeTimer
from .transport import Payload

if TYPE_CHECKING:
    import ssl

_netio_c = load(MODULES["network"])

log = logging.getLogger(__name__)

__all__ = ["SETUP_MAX_RECEIVE_SIZE", "FrameError", "FrameReader", "Selector", "KafkaChannel", "ChannelState",
           "resolve"]

_SIZE = SIZE_PREFIX
_READ_CHUNK = 256 * 1024
#: the largest response frame the producer takes on a connection that is not set up yet (before
#: :meth:`Selector.connection_ready`): its ApiVersions answer (a few KiB) and SASL answers are small. The
#: value of the broker's own limit for what it takes before authentication (Java's
#: ``sasl.server.max.receive.size``); Java's client has no limit at all.
SETUP_MAX_RECEIVE_SIZE = 512 * 1024

NodeId = int
#: one address of a host, as socket.getaddrinfo gives it: (family, type, proto, canonname, sockaddr)
AddrInfo = Tuple[Any, Any, int, str, Any]
Resolver = Callable[[str, int], List[AddrInfo]]


def resolve(host: str, port: int) -> List[AddrInfo]:
    """Every TCP address of ``host`` (socket.getaddrinfo), de-duplicated, in the resolver's order."""
    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    seen = set()
    out: List[AddrInfo] = []
    for info in infos:
        if info[4] not in seen:
            seen.add(info[4])
            out.append(info)
    return out


class _HostAddresses:
    """The resolved addresses of one broker host and the one to try next (Java's NodeConnectionState
    addresses: ``client.dns.lookup=use_all_dns_ips``)."""

    __slots__ = ("addresses", "index", "last_attempted")

    def __init__(self) -> None:
        self.addresses: List[AddrInfo] = []
        self.index = 0
        self.last_attempted: Optional[Any] = None


class ChannelState:
    CONNECTING = "connecting"  # TCP connect in progress
    HANDSHAKING = "handshaking"  # TLS handshake in progress
    CONNECTED = "connected"
    CLOSED = "closed"


Sock = Union[socket.socket, "ssl.SSLSocket"]

# The exceptions the I/O paths catch. ``ssl`` (about 5 MiB of RSS) is imported only when a TLS channel is
# made (:func:`_load_tls`), which adds its classes here; until then the TLS entries are empty tuples, which
# match nothing, so a plaintext producer never imports ssl and an except clause costs one global lookup.
_ExcTypes = Tuple[Type[BaseException], ...]
#: the socket cannot take / give more now
_WOULD_BLOCK: _ExcTypes = (BlockingIOError, InterruptedError)
#: the TLS peer closed the TLS session (close_notify): end of stream
_TLS_CLOSED: _ExcTypes = ()
#: any other TLS failure
_TLS_ERROR: _ExcTypes = ()
# the first bytes of a TLS record (handshake 0x16 or alert 0x15, then major version 3): what a TLS
# listener answers to a plaintext Kafka request, and never the start of a Kafka response frame that
# we accept (that would be a frame of over 350 MB)
_TLS_RECORD_TYPES = (0x15, 0x16)


# sendmsg takes at most IOV_MAX (1024 on Linux) buffers; a frame of more parts is joined
_MAX_PARTS = 512


def _frame(payload: Payload, tls: bool) -> Union[memoryview, List[memoryview]]:
    """``payload`` behind its size prefix, as one buffer or (scatter-gather) a list of byte views."""
    if isinstance(payload, (bytes, bytearray)):
        return memoryview(_SIZE.pack(len(payload)) + payload)
    views = []
    size = 0
    for b in payload:  # (a loop, not a comprehension and sum() of a generator: a frame each, for every request)
        v = memoryview(b).cast("B")
        views.append(v)
        size += v.nbytes
    if tls or len(views) >= _MAX_PARTS:
        return memoryview(b"".join([_SIZE.pack(size), *views]))
    views.insert(0, memoryview(_SIZE.pack(size)))
    return views


def _unwritten(views: List[memoryview], n: int) -> List[memoryview]:
    """What is left of a scatter-gather frame after ``n`` bytes of it were written (empty: all of it)."""
    for i, v in enumerate(views):
        size = v.nbytes
        if n < size:
            rest = views[i:]
            if n:
                rest[0] = v[n:]
            return rest
        n -= size
    return []


class KafkaChannel:
    """One connection: socket, outgoing frame queue, incoming frame reassembly."""

    __slots__ = ("node_id", "sock", "state", "address", "sends", "current", "frames_written",
                 "reader", "registered_events", "tls", "handshake_events", "received_any", "sockaddr")

    def __init__(self, node_id: NodeId, sock: Sock, address: Tuple[str, int], max_receive: int) -> None:
        self.node_id = node_id
        self.sock: Sock = sock
        self.address = address
        self.state = ChannelState.CONNECTING
        # frames to write: one buffer, or a list of buffers (scatter-gather: written by sendmsg, not joined)
        self.sends: Deque[Union[memoryview, List[memoryview]]] = deque()
        self.current: Optional[Union[memoryview, List[memoryview]]] = None
        self.frames_written = 0
        self.reader = FrameReader(max_receive)
        self.registered_events = 0
        self.tls = False
        self.handshake_events = selectors.EVENT_READ  # what the TLS handshake waits for
        self.received_any = False
        self.sockaddr: Any = None  # the address connected to

    @property
    def peer(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def has_pending_writes(self) -> bool:
        return self.current is not None or bool(self.sends)


class Selector:
    """Non-blocking multi-connection I/O. Not thread-safe except :meth:`wakeup`."""

    def __init__(
        self,
        max_receive_size: int = 100 * 1024 * 1024,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        ssl_context: Optional[ssl.SSLContext] = None,
        resolver: Resolver = resolve,
        client_dns_lookup: str = "use_all_dns_ips",
        setup_max_receive_size: Optional[int] = None,
        keepalive: bool = True,
    ) -> None:
        """``max_receive_size``: the largest frame taken on a connection; ``setup_max_receive_size``: a lower
        limit until :meth:`connection_ready` (None: the same), refused with :class:`FrameTooLargeError` as a
        failure of the connection (the producer passes :data:`SETUP_MAX_RECEIVE_SIZE`)."""
        self.max_receive_size = max_receive_size
        self.setup_max_receive_size = max_receive_size if setup_max_receive_size is None else \
            min(setup_max_receive_size, max_receive_size)
        self.resolver = resolver
        #: use_all_dns_ips (Java's default) or resolve_canonical_bootstrap_servers_only: both try every
        #: address of a host in turn (the latter's canonical-name expansion of bootstrap servers is not done)
        self.client_dns_lookup = client_dns_lookup
        if client_dns_lookup == "resolve_canonical_bootstrap_servers_only":
            log.info("client.dns.lookup=resolve_canonical_bootstrap_servers_only: bootstrap servers are used as "
                     "given (no canonical-name expansion, which only Kerberos needs); every address of a host "
                     "is tried in turn, as with use_all_dns_ips")
        self._hosts: Dict[Tuple[str, int], _HostAddresses] = {}
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.keepalive = keepalive  # SO_KEEPALIVE (socket.keepalive.enable)
        self.ssl_context = ssl_context
        # until one broker has answered (a TLS handshake done, or a plaintext answer), a peer that closes
        # during the TLS handshake (or before answering a plaintext request) most likely speaks the other
        # protocol: say so, and fail fast
        self._peer_answered = False
        self._sel = selectors.DefaultSelector()
        # every read lands here first (recv_into), and the frame reader copies it out: one buffer for the
        # selector's life, instead of a 256 KiB bytes object made (mmap), shrunk (mremap) and freed per read
        self._recv_view = memoryview(bytearray(_READ_CHUNK))
        self._channels: Dict[NodeId, KafkaChannel] = {}
        # closed by the peer right after frames the last poll reported: closed by the next poll
        self._closing: List[Tuple[KafkaChannel, str]] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        # wakeup_at()'s timer (Linux: a timerfd), watched beside the wakeup socket
        self._timer = WakeTimer.create()
        if self._timer is not None:
            self._sel.register(self._timer.fd, selectors.EVENT_READ, self._timer)
        # Linux, compiled accelerator: this (network) thread gives up the GIL only to wait in epoll_wait, and
        # writes and reads plain sockets (non-blocking: they never wait) holding it, so that it does not queue
        # for the GIL behind a busy send() loop after each call (network/_netio.c).
        # Else (and for TLS sockets) the selectors module and the socket methods.
        self._fd_to_key: Optional[Dict[int, selectors.SelectorKey]] = getattr(self._sel, "_fd_to_key", None)
        self._nogil = (_netio_c is not None and hasattr(_netio_c, "epoll_wait_io")
                       and isinstance(self._sel, getattr(selectors, "EpollSelector", ())) and self._fd_to_key is not None)
        self._epoll_fd = self._sel.fileno() if self._nogil else -1
        self._closed = False
        self._wakeup_pending = False
        # results of the last poll()
        self.connected: List[NodeId] = []
        self.completed_sends: List[NodeId] = []
        self.completed_receives: List[Tuple[NodeId, bytes]] = []
        self.disconnected: Dict[NodeId, str] = {}
        #: connections that failed for a reason retrying cannot fix (TLS verification, protocol mismatch)
        self.failures: Dict[NodeId, AuthenticationError] = {}

    # -- connections ---------------------------------------------------------------------------

    def connect(self, node_id: NodeId, host: str, port: int) -> None:
        """Start a non-blocking connection. Failures show up as a disconnection in the next poll."""
        if node_id in self._channels:
            raise ValueError(f"already connected or connecting to node {node_id}")
        try:
            family, stype, proto, _name, addr = self._next_address(host, port)
        except OSError as e:
            self.disconnected[node_id] = f"cannot resolve {host}:{port}: {e}"
            return
        sock = socket.socket(family, stype, proto)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.keepalive:  # as Java's Selector.configureSocketChannel (librdkafka: socket.keepalive.enable)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        except OSError:
            pass
        ch = KafkaChannel(node_id, sock, (host, port), self.setup_max_receive_size)
        ch.sockaddr = addr
        self._channels[node_id] = ch
        rc = sock.connect_ex(addr)
        if rc == 0:
            ch.state = ChannelState.CONNECTED
            self.connected.append(node_id)
            self._update_interest(ch)
        elif rc in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            self._update_interest(ch)
        else:
            self._close_channel(ch, f"connect to {host}:{port} ({_format_sockaddr(addr)}) failed: "
                                    f"{errno.errorcode.get(rc, rc)}")

    def _next_address(self, host: str, port: int) -> AddrInfo:
        """The address to try for ``host``: each new attempt takes the next address of the last
        resolution, and once all were tried the name is resolved again (Java's ClusterConnectionStates
        ``moveToNextAddress``/``currentAddress``). Like Java's ClientUtils.resolve, only addresses of the
        first address's family (IPv4 or IPv6) are kept. OSError when the name does not resolve."""
        entry = self._hosts.get((host, port))
        if entry is None:
            entry = self._hosts[(host, port)] = _HostAddresses()
        elif entry.addresses:
            entry.index += 1
            if entry.index >= len(entry.addresses):
                entry.addresses = []  # exhausted: resolve again
        if not entry.addresses:
            infos = self.resolver(host, port)
            if not infos:
                raise OSError(f"no address for {host}")
            family = infos[0][0]
            entry.addresses = [i for i in infos if i[0] == family]
            entry.index = 0
            # do not try the address that just failed first again when there is another one
            if len(entry.addresses) > 1 and entry.addresses[0][4] == entry.last_attempted:
                entry.index = 1
            log.debug("resolved %s to %s", host, [a[4] for a in entry.addresses])
        info = entry.addresses[entry.index]
        entry.last_attempted = info[4]
        return info

    def forget_addresses(self, host: str, port: int) -> None:
        """Resolve ``host`` again at the next connection (after an established connection is lost, its
        broker may have moved: Java clears the addresses then too)."""
        entry = self._hosts.get((host, port))
        if entry is not None:
            entry.addresses = []

    def is_connected(self, node_id: NodeId) -> bool:
        ch = self._channels.get(node_id)
        return ch is not None and ch.state == ChannelState.CONNECTED

    def setup_timeout_error(self, node_id: NodeId) -> Optional[AuthenticationError]:
        """Why a connection whose setup timed out most likely failed, when retrying cannot help: a TLS
        handshake that got no answer at all from a broker never reached before (a plaintext listener
        waiting for the rest of what it took for a huge request). None when the timeout says nothing."""
        ch = self._channels.get(node_id)
        if ch is None or ch.state != ChannelState.HANDSHAKING or self._peer_answered or ch.received_any:
            return None
        return SecurityProtocolMismatchError(
            f"broker {ch.peer} (node {ch.node_id}) never answered the TLS handshake: its listener is probably "
            "PLAINTEXT or SASL_PLAINTEXT; check security.protocol")

    def has_channel(self, node_id: NodeId) -> bool:
        return node_id in self._channels

    def close(self, node_id: NodeId, reason: str = "closed by client") -> None:
        ch = self._channels.get(node_id)
        if ch is not None:
            self._close_channel(ch, reason, report=False)

    def close_all(self) -> None:
        self._closing = []
        for ch in list(self._channels.values()):
            self._close_channel(ch, "selector closed", report=False)
        if not self._closed:
            self._closed = True
            try:
                self._sel.unregister(self._wake_r)
            except (KeyError, ValueError):
                pass
            self._wake_r.close()
            self._wake_w.close()
            if self._timer is not None:
                try:
                    self._sel.unregister(self._timer.fd)
                except (KeyError, ValueError):
                    pass
                self._timer.close()
            self._sel.close()

    def _fail_channel(self, ch: KafkaChannel, error: AuthenticationError) -> None:
        """Close a connection for a reason that retrying with the same settings cannot fix."""
        log.error("connection to node %s (%s) failed: %s", ch.node_id, ch.peer, error)
        self._close_channel(ch, str(error))
        self.failures[ch.node_id] = error

    def _close_channel(self, ch: KafkaChannel, reason: str, report: bool = True) -> None:
        if ch.state == ChannelState.CLOSED:
            return
        ch.state = ChannelState.CLOSED
        if ch.registered_events:
            try:
                self._sel.unregister(ch.sock)
            except (KeyError, ValueError):
                pass
        try:
            ch.sock.close()
        except OSError:
            pass
        self._channels.pop(ch.node_id, None)
        if ch.received_any:
            # an established connection was lost: the broker's addresses may have changed
            self.forget_addresses(ch.address[0], ch.address[1])
        if report:
            self.disconnected[ch.node_id] = reason
        log.debug("connection to node %s (%s:%s) closed: %s", ch.node_id, ch.address[0], ch.address[1], reason)

    # -- sending -------------------------------------------------------------------------------

    def send(self, node_id: NodeId, payload: Payload) -> None:
        """Queue one frame (the size prefix is added here): bytes, or a list of buffers that make it up in
        order (a Produce request's header parts and its batches' records), written from where they are with
        one sendmsg (no copy of the records in user space; joined for TLS, whose sockets have no sendmsg)."""
        ch = self._channels.get(node_id)
        if ch is None or ch.state != ChannelState.CONNECTED:
            if ch is None and node_id in self.disconnected:
                # the connection died since the caller last consumed the results (e.g. an eager write
                # of an earlier send failed): the frame is lost with it, and the pending disconnection
                # makes the caller fail every request it had for this node, this one included
                return
            raise ConnectionError(f"node {node_id} is not connected")
        ch.sends.append(_frame(payload, ch.tls))
        if ch.current is None and len(ch.sends) == 1:
            # nothing queued before it: write now, and only ask the selector about writability for
            # what the socket did not take (saves two epoll updates and a poll round per request)
            self._write(ch)
        elif not ch.registered_events & selectors.EVENT_WRITE:
            self._update_interest(ch)

    def _update_interest(self, ch: KafkaChannel) -> None:
        if ch.state == ChannelState.CONNECTING:
            events = selectors.EVENT_WRITE
        elif ch.state == ChannelState.HANDSHAKING:
            events = ch.handshake_events
        else:
            events = selectors.EVENT_READ
            if ch.has_pending_writes():
                events |= selectors.EVENT_WRITE
        if events == ch.registered_events:
            return
        if ch.registered_events:
            self._sel.modify(ch.sock, events, ch)
        else:
            self._sel.register(ch.sock, events, ch)
        ch.registered_events = events

    def _write(self, ch: KafkaChannel) -> None:
        sock = ch.sock
        while True:
            cur = ch.current
            if cur is None:
                if not ch.sends:
                    break
                cur = ch.current = ch.sends.popleft()
            try:
                # (a list only on a plain socket: _frame joins the parts for TLS)
                if type(cur) is memoryview:
                    n = sock.send(cur)
                elif self._nogil:
                    n = _netio_c.sendmsg_nogil(sock.fileno(), cur)  # type: ignore[union-attr]
                else:
                    n = sock.sendmsg(cur)  # type: ignore[arg-type]
            except _WOULD_BLOCK:
                break
            except OSError as e:
                self._close_channel(ch, f"write failed: {e}")
                return
            if type(cur) is memoryview:
                if n < len(cur):
                    ch.current = cur[n:]
                    break
            else:
                rest = _unwritten(cur, n)
                if rest:
                    ch.current = rest
                    break
            ch.current = None
            ch.frames_written += 1
            self.completed_sends.append(ch.node_id)
        self._update_interest(ch)

    def _read(self, ch: KafkaChannel) -> None:
        sock = ch.sock
        tls = ch.tls
        into = self._recv_view
        nogil = self._nogil and not tls
        delivered = False  # frames of this read were reported: a close found after them waits a poll
        while True:
            try:
                n = _netio_c.recv_into_nogil(sock.fileno(), into) if nogil else sock.recv_into(into)  # type: ignore[union-attr]
            except _WOULD_BLOCK:
                return
            except _TLS_CLOSED:
                n = 0
            except _TLS_ERROR as e:
                # TLS 1.3: a broker that refuses our certificate says so after the handshake, in an alert
                if not ch.received_any:
                    self._fail_channel(ch, SslAuthenticationError(
                        f"TLS connection to broker {ch.peer} (node {ch.node_id}) failed: {_ssl_reason(e)}"))
                else:
                    self._read_ended(ch, f"TLS read failed: {_ssl_reason(e)}", delivered, self._close_channel)
                return
            except ConnectionResetError as e:
                self._read_ended(ch, f"read failed: {e}", delivered, self._closed_by_peer)
                return
            except OSError as e:
                self._read_ended(ch, f"read failed: {e}", delivered, self._close_channel)
                return
            if not n:
                self._read_ended(ch, "connection closed by the broker", delivered, self._closed_by_peer)
                return
            data = into[:n]  # (the reader copies what it keeps: the buffer is read into again)
            if not ch.received_any:
                ch.received_any = True
                self._peer_answered = True
                if not tls and len(data) >= 2 and data[0] in _TLS_RECORD_TYPES and data[1] == 3:
                    self._fail_channel(ch, SecurityProtocolMismatchError(
                        f"broker {ch.peer} (node {ch.node_id}) answered with TLS, but security.protocol is "
                        "not SSL or SASL_SSL: set security.protocol=SSL (or SASL_SSL) and the ssl.* settings"))
                    return
            try:
                frames = ch.reader.feed(data)
            except FrameError as e:
                if e.size > e.limit and e.limit < self.max_receive_size:
                    # (refused from its size prefix, before the payload is buffered)
                    self._fail_channel(ch, FrameTooLargeError(
                        f"broker {ch.peer} (node {ch.node_id}) sent a frame of {e.size} bytes before the connection "
                        f"was set up, more than the {e.limit} allowed until then (the ApiVersions and SASL answers "
                        "of a Kafka broker are small): this is not a Kafka listener for these security settings",
                        size=e.size, limit=e.limit))
                else:
                    self._close_channel(ch, str(e))
                return
            for frame in frames:
                self.completed_receives.append((ch.node_id, frame))
                delivered = True
            # TLS decrypts a record at a time and buffers the rest where the selector cannot see it: read
            # until the socket says it would block
            if not tls and n < _READ_CHUNK:
                return

    def _read_ended(self, ch: KafkaChannel, reason: str, delivered: bool,
                    close: Callable[[KafkaChannel, str], None]) -> None:
        """The connection broke or was closed by the peer while reading: ``close`` it now, or, when this read
        already reported frames of it (``delivered``), at the next poll (:meth:`_close_after_receives`)."""
        if delivered:
            self._close_after_receives(ch, reason)
        else:
            close(ch, reason)

    def _close_after_receives(self, ch: KafkaChannel, reason: str) -> None:
        """The peer closed (or broke) a connection right after frames this poll reports (a TLS read goes on
        until it would block, so it meets the close in the same poll: Apache Kafka answers a failed SASL
        authentication and closes at once). The caller handles the frames of channels that still exist
        only, so the channel stays until the next poll, which reports the disconnection first thing (Java's
        Selector also hands out what it read from a closing channel before the close)."""
        if ch.registered_events:
            try:
                self._sel.unregister(ch.sock)
            except (KeyError, ValueError):
                pass
            ch.registered_events = 0
        self._closing.append((ch, reason))

    def _closed_by_peer(self, ch: KafkaChannel, reason: str) -> None:
        if not ch.received_any and not ch.tls and not self._peer_answered and ch.frames_written:
            # the first request to the first broker got no answer but a close: the usual sign of a TLS
            # listener (it cannot parse our plaintext request as a TLS handshake and drops the connection)
            self._fail_channel(ch, SecurityProtocolMismatchError(
                f"broker {ch.peer} (node {ch.node_id}) closed the connection without answering the first "
                "request: if its listener expects TLS, set security.protocol=SSL (or SASL_SSL); otherwise "
                "check that this is a Kafka broker's address"))
        else:
            self._close_channel(ch, reason)

    def connection_ready(self, node_id: NodeId) -> None:
        """The connection is set up (ApiVersions and SASL done): from now on it takes frames up to
        ``max_receive_size`` (until then ``setup_max_receive_size``)."""
        ch = self._channels.get(node_id)
        if ch is not None:
            ch.reader.max_size = self.max_receive_size

    def _finish_connect(self, ch: KafkaChannel) -> None:
        err = ch.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._close_channel(
                ch, f"connect to {ch.address[0]}:{ch.address[1]} ({_format_sockaddr(ch.sockaddr)}) failed: "
                    f"{errno.errorcode.get(err, err)}"
            )
            return
        if self.ssl_context is not None:
            self._start_tls(ch)
            return
        self._set_connected(ch)

    def _set_connected(self, ch: KafkaChannel) -> None:
        ch.state = ChannelState.CONNECTED
        if ch.tls:
            self._peer_answered = True
        self.connected.append(ch.node_id)
        self._update_interest(ch)

    # -- TLS -----------------------------------------------------------------------------------------

    def _start_tls(self, ch: KafkaChannel) -> None:
        assert self.ssl_context is not None
        _load_tls()
        import ssl
        if ch.registered_events:
            # the wrapped socket takes over the file descriptor: register it anew
            self._sel.unregister(ch.sock)
            ch.registered_events = 0
        try:
            ch.sock = self.ssl_context.wrap_socket(ch.sock, server_side=False, do_handshake_on_connect=False,
                                                   server_hostname=ch.address[0])
        except (ssl.SSLError, ValueError, OSError) as e:
            self._fail_channel(ch, SslAuthenticationError(
                f"cannot start TLS with broker {ch.peer} (node {ch.node_id}): {e}"))
            return
        ch.tls = True
        ch.state = ChannelState.HANDSHAKING
        self._handshake(ch)

    def _handshake(self, ch: KafkaChannel) -> None:
        import ssl  # loaded by _start_tls

        sock = ch.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            ch.handshake_events = selectors.EVENT_READ
            self._update_interest(ch)
            return
        except ssl.SSLWantWriteError:
            ch.handshake_events = selectors.EVENT_WRITE
            self._update_interest(ch)
            return
        except ssl.SSLCertVerificationError as e:
            self._fail_channel(ch, SslAuthenticationError(
                f"TLS handshake with broker {ch.peer} (node {ch.node_id}) failed: its certificate did not "
                f"verify ({_ssl_reason(e)}; check ssl.truststore.* / ssl.ca.location, and "
                "that the broker's certificate names the host in bootstrap.servers)"))
            return
        except (ssl.SSLEOFError, ConnectionError) as e:
            if not self._peer_answered:
                self._fail_channel(ch, SecurityProtocolMismatchError(
                    f"broker {ch.peer} (node {ch.node_id}) closed the connection during the TLS handshake "
                    f"({_ssl_reason(e)}): if its listener is PLAINTEXT or SASL_PLAINTEXT, set security.protocol "
                    "accordingly; otherwise the broker refused this client's TLS settings"))
            else:
                self._close_channel(ch, f"connection closed during the TLS handshake: {_ssl_reason(e)}")
            return
        except ssl.SSLError as e:
            reason = _ssl_reason(e)
            if "WRONG_VERSION_NUMBER" in reason.upper().replace(" ", "_") or "RECORD_LAYER" in reason.upper():
                self._fail_channel(ch, SecurityProtocolMismatchError(
                    f"broker {ch.peer} (node {ch.node_id}) did not answer the TLS handshake with TLS "
                    f"({reason}): its listener is probably PLAINTEXT or SASL_PLAINTEXT; check security.protocol"))
            else:
                self._fail_channel(ch, SslAuthenticationError(
                    f"TLS handshake with broker {ch.peer} (node {ch.node_id}) failed: {reason}"))
            return
        except OSError as e:
            self._close_channel(ch, f"TLS handshake failed: {e}")
            return
        log.debug("node %s (%s): TLS handshake done (%s, %s)", ch.node_id, ch.peer, sock.version(),
                  (sock.cipher() or ("?",))[0])
        self._set_connected(ch)

    # -- polling -------------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Interrupt a poll() blocked in another thread. Cheap when a wakeup is already pending: only the
        first call writes to the wakeup socket until poll() consumes it."""
        if self._wakeup_pending:
            return
        self._wakeup_pending = True
        try:
            self._wake_w.send(b"\x00")
        except OSError:
            pass

    @property
    def has_timer(self) -> bool:
        """Whether wakeup_at() has a timer (else it wakes the poll at once)."""
        return self._timer is not None

    def wakeup_at(self, deadline_ms: float) -> None:
        """Make a poll() blocked in another thread (or the next one) return at ``deadline_ms``
        (``time.monotonic()`` in ms) at the latest, without ending it sooner: a timer in the epoll set. Where
        there is none, a wakeup now."""
        timer = self._timer
        if timer is None:
            self.wakeup()
            return
        try:
            timer.arm(deadline_ms)
        except OSError:
            self.wakeup()

    def poll(self, timeout_ms: float) -> None:
        """Wait up to ``timeout_ms`` for I/O and do it. Results replace the previous poll's.

        Connections and disconnections reported by :meth:`connect` since the last poll are kept.
        """
        # connect() and send() may have completed things since the last poll: those are kept (connected,
        # disconnected, failures, completed_sends); only the receives are the previous poll's
        self.completed_receives = []
        connected, sent = self.connected, self.completed_sends
        if self._closed:
            return
        if self._closing:
            closing, self._closing = self._closing, []
            for ch, reason in closing:
                self._close_channel(ch, reason)  # (nothing when the caller closed it meanwhile)
        timeout = max(0.0, timeout_ms) / 1000.0
        if connected or self.disconnected or sent:
            timeout = 0.0
        # the selector's select(timeout in seconds); compiled: epoll_wait_io, which gives up the GIL only to wait
        # (see __init__; here, not in a method of its own: one frame less per poll)
        fd_to_key = self._fd_to_key
        events: List[Tuple[selectors.SelectorKey, int]]
        if not self._nogil or fd_to_key is None:
            events = self._sel.select(timeout)
        else:
            assert _netio_c is not None
            # (at most 4096 events a call, as many as the module takes; the rest come at the next poll)
            ready = _netio_c.epoll_wait_io(self._epoll_fd, timeout * 1000.0, min(max(len(fd_to_key), 1), 4096))
            events = []
            for fd, ev in ready:
                key = fd_to_key.get(fd)
                if key is not None:  # (unregistered meanwhile: as selectors, skipped)
                    events.append((key, ev & key.events))
        timer = self._timer
        for key, mask in events:
            ch = key.data
            if ch is None:
                try:
                    if self._nogil:
                        assert _netio_c is not None
                        fd, into = self._wake_r.fileno(), self._recv_view[:4096]
                        while _netio_c.recv_into_nogil(fd, into):
                            pass
                    else:
                        while self._wake_r.recv(4096):
                            pass
                except OSError:
                    pass
                # cleared after draining: a wakeup racing with this poll is seen by the caller's next
                # iteration, which starts after this poll returns
                self._wakeup_pending = False
                continue
            if timer is not None and ch is timer:
                timer.fired()  # (wakeup_at's time came)
                continue
            if ch.state == ChannelState.CLOSED:
                continue
            if ch.state == ChannelState.CONNECTING:
                self._finish_connect(ch)
                if ch.state != ChannelState.CONNECTED:
                    continue
                mask = selectors.EVENT_WRITE if ch.has_pending_writes() else 0
            elif ch.state == ChannelState.HANDSHAKING:
                self._handshake(ch)
                if ch.state != ChannelState.CONNECTED:
                    continue
                mask = selectors.EVENT_WRITE if ch.has_pending_writes() else 0
            if mask & selectors.EVENT_READ:
                self._read(ch)
                if ch.state == ChannelState.CLOSED:
                    continue
            if mask & selectors.EVENT_WRITE:
                self._write(ch)

    def channel_ids(self) -> List[NodeId]:
        return list(self._channels)


def _format_sockaddr(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr)


def _load_tls() -> None:
    """Import ssl and add its exception classes to the ones the I/O paths catch (once; a TLS channel
    is about to be made)."""
    global _WOULD_BLOCK, _TLS_CLOSED, _TLS_ERROR
    if _TLS_ERROR:
        return
    import ssl

    _WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
    _TLS_CLOSED = (ssl.SSLZeroReturnError,)
    _TLS_ERROR = (ssl.SSLError,)


def _ssl_reason(e: BaseException) -> str:
    """OpenSSL's reason for a TLS failure, in words ("certificate verify failed: unable to get local
    issuer certificate", "wrong version number", ...)."""
    import ssl  # only TLS failures come here
    if isinstance(e, ssl.SSLCertVerificationError) and e.verify_message:
        return f"certificate verify failed: {e.verify_message}"
    reason = getattr(e, "reason", None)
    text = str(e)
    if reason and reason not in text:
        return f"{reason}: {text}"
    return text or type(e).__name__
