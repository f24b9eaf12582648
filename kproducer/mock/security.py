"""A mock cluster's listener security: TLS settings, SASL settings and per-connection SASL sessions.

* :class:`ListenerSecurity` is what every broker of a cluster shares: the security protocol, the
  server-side :class:`ssl.SSLContext` (TLS listeners), the enabled SASL mechanisms, the users and the
  session lifetime (KIP-368), and the authentication counters.
* :class:`SaslSession` is one connection's SASL state. The processor creates it with the connection
  (SASL listeners only) and hands it along with every request of that connection; the API layer's
  SaslHandshake and SaslAuthenticate handlers move it forward; the processor refuses (closes) any other
  request until it is authenticated, and closes a connection whose session expired at its next request,
  as Kafka's SocketServer does. A connection is muted while one of its requests is handled, so only one
  thread at a time touches its session.
"""
from __future__ import annotations

import ssl
import threading
from typing import Dict, List, Mapping, Optional, Sequence

from ..protocol.messages import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from ..protocol.sasl import SUPPORTED_MECHANISMS
from .mock_clock import SYSTEM_CLOCK, MockClock

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
ALL_MECHANISMS = SUPPORTED_MECHANISMS
CLIENT_AUTH = ("none", "requested", "required")

#: the only API keys a SASL connection may use before it has authenticated
PRE_AUTH_API_KEYS = frozenset({API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key})
SASL_HANDSHAKE_KEY = SASL_HANDSHAKE.key


class AuthStats:
    """Authentication counters of a cluster (all brokers): SaslHandshake requests (re-authentications
    included), successful and failed authentications."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = {"attempts": 0, "successes": 0, "failures": 0, "reauthentications": 0,
                                        "expired_connections": 0}

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def snapshot(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._counts)


class ListenerSecurity:
    """The security of a cluster's listeners (the same for every broker)."""

    def __init__(
        self,
        protocol: str = "PLAINTEXT",
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        sasl_mechanisms: Sequence[str] = (),
        users: Optional[Mapping[str, str]] = None,
        session_lifetime_ms: int = 0,
        scram_iterations: int = 4096,
        clock: MockClock = SYSTEM_CLOCK,
    ) -> None:
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, not {protocol!r}")
        if session_lifetime_ms < 0:
            raise ValueError("session_lifetime_ms must be 0 (no expiry) or positive")
        self.protocol = protocol
        self.tls = protocol in ("SSL", "SASL_SSL")
        self.sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        if self.tls and ssl_context is None:
            raise ValueError(f"{protocol} needs a server ssl_context")
        self.ssl_context = ssl_context if self.tls else None
        mechanisms: List[str] = []
        for m in sasl_mechanisms if self.sasl else ():
            upper = m.upper()
            if upper not in ALL_MECHANISMS:
                raise ValueError(f"unsupported SASL mechanism {m!r}: the mock serves {', '.join(ALL_MECHANISMS)}")
            if upper not in mechanisms:
                mechanisms.append(upper)
        if self.sasl and not mechanisms:
            raise ValueError("a SASL listener needs at least one mechanism")
        self.mechanisms = mechanisms
        self.users: Dict[str, str] = dict(users or {})
        self.session_lifetime_ms = session_lifetime_ms
        self.scram_iterations = scram_iterations
        self.stats = AuthStats()
        #: the cluster's clock (session expiry)
        self.clock = clock

    def new_session(self) -> Optional["SaslSession"]:
        """A connection's SASL session; None on listeners without SASL."""
        return SaslSession(self) if self.sasl else None

    def __repr__(self) -> str:  # never the passwords
        return (f"ListenerSecurity({self.protocol}, mechanisms={self.mechanisms}, users={sorted(self.users)}, "
                f"session_lifetime_ms={self.session_lifetime_ms})")


class SaslSession:
    """One connection's SASL state: HANDSHAKE (waiting for SaslHandshake), AUTHENTICATE (SaslAuthenticate
    rounds of the chosen mechanism) or AUTHENTICATED; ``reauthenticating`` during a KIP-368 renewal."""

    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    AUTHENTICATED = "AUTHENTICATED"

    __slots__ = ("security", "state", "mechanism", "server", "principal", "expires_at_ms", "reauthenticating",
                 "authenticated")

    def __init__(self, security: ListenerSecurity) -> None:
        self.security = security
        self.state = self.HANDSHAKE
        #: True while the connection may send any request (authenticated and not re-authenticating)
        self.authenticated = False
        self.mechanism: Optional[str] = None
        #: the mechanism's server (kproducer.protocol.sasl.SaslServer) during an exchange
        self.server: Optional[object] = None
        #: the authenticated user (kept across re-authentications, which must not change it)
        self.principal: Optional[str] = None
        #: the cluster clock's monotonic_ms() after which the session has expired (0: never)
        self.expires_at_ms = 0.0
        self.reauthenticating = False

    def allows(self, api_key: int) -> Optional[str]:
        """None if a request of ``api_key`` may be handled now; else why the connection must close."""
        if self.authenticated:
            expires = self.expires_at_ms
            if expires and self.security.clock.monotonic_ms() >= expires and api_key != SASL_HANDSHAKE_KEY:
                return "the SASL session expired (no re-authentication in time)"
            return None
        if api_key in PRE_AUTH_API_KEYS:
            return None
        return f"API key {api_key} requested before SASL authentication completed"

    def __repr__(self) -> str:
        return f"SaslSession({self.state}, mechanism={self.mechanism}, principal={self.principal})"
