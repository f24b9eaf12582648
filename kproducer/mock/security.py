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

import base64
import json
import math
import ssl
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..protocol.messages import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from ..protocol.sasl import SUPPORTED_MECHANISMS, TokenValidator
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
        oauth_validator: Optional[TokenValidator] = None,
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
        #: OAUTHBEARER: the validator of signed tokens (e.g. :class:`JwtValidator`); None: unsecured JWTs
        self.oauth_validator = oauth_validator

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


# ---------------------------------------------------------------------------------------------- signed JWTs


def _b64url(text: str) -> bytes:
    if not all(c.isalnum() or c in "-_" for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _json_object(text: str, what: str) -> Dict[str, Any]:
    try:
        value = json.loads(_b64url(text).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"the token's {what} is not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"the token's {what} is not a JSON object")
    return value


def _int_from_b64url(text: Any) -> int:
    if not isinstance(text, str):
        raise ValueError("not a base64url string")
    return int.from_bytes(_b64url(text), "big")


class JwtValidator:
    """The broker side of OAUTHBEARER with signed tokens, as Apache Kafka's ``OAuthBearerValidatorCallbackHandler``
    (its BrokerJwtValidator): an RS256 JWS whose key (by ``kid``) is in ``jwks`` (a JWK Set, or a callable returning
    one, as a JWKS endpoint would), with ``exp`` and ``iat`` (``clock_skew_s`` allowed), the ``expected_audience``
    (one of them, when given) in ``aud``, the ``expected_issuer`` (when given) as ``iss``, and a principal in
    ``sub_claim_name``. Returns (principal, expiry, scope); ValueError saying why a token is refused. Pass it to
    ``MockCluster(oauthbearer_validator=...)``. Needs the ``cryptography`` package."""

    def __init__(self, jwks: Union[Mapping[str, Any], Callable[[], Mapping[str, Any]]], *,
                 expected_audience: Union[None, str, Sequence[str]] = None, expected_issuer: Optional[str] = None,
                 clock_skew_s: float = 30.0, sub_claim_name: str = "sub", scope_claim_name: str = "scope",
                 clock: Callable[[], float] = time.time) -> None:
        self._jwks = jwks
        if isinstance(expected_audience, str):
            expected_audience = [expected_audience]
        self.expected_audience = tuple(expected_audience or ())
        self.expected_issuer = expected_issuer
        self.clock_skew_s = clock_skew_s
        self.sub_claim_name = sub_claim_name
        self.scope_claim_name = scope_claim_name
        self._clock = clock
        #: tokens validated and refused so far
        self.accepted = 0
        self.refused = 0

    def _key(self, kid: Optional[str]) -> Any:
        from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicNumbers

        jwks = self._jwks() if callable(self._jwks) else self._jwks
        keys = [k for k in jwks.get("keys", []) if isinstance(k, dict) and k.get("kty") == "RSA"
                and k.get("use", "sig") == "sig"]
        if kid is not None:
            keys = [k for k in keys if k.get("kid") == kid]
        elif len(keys) > 1:
            keys = []
        if not keys:
            raise ValueError(f"no key of the JWKS matches the token's key id {kid!r}")
        try:
            return RSAPublicNumbers(_int_from_b64url(keys[0].get("e")), _int_from_b64url(keys[0].get("n"))).public_key()
        except ValueError:
            raise ValueError("the JWKS key is not a valid RSA public key") from None

    def __call__(self, token: str) -> Tuple[str, float, Tuple[str, ...]]:
        try:
            result = self._validate(token)
        except ValueError:
            self.refused += 1
            raise
        self.accepted += 1
        return result

    def _validate(self, token: str) -> Tuple[str, float, Tuple[str, ...]]:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.padding import PKCS1v15
        from cryptography.hazmat.primitives.hashes import SHA256

        parts = token.split(".")
        if len(parts) != 3:
            raise ValueError("the token is not a JWS compact serialization (header.payload.signature)")
        header = _json_object(parts[0], "header")
        if header.get("alg") != "RS256":
            raise ValueError(f"the token's algorithm {str(header.get('alg'))[:20]!r} is not allowed (RS256)")
        kid = header.get("kid")
        key = self._key(kid if isinstance(kid, str) else None)
        try:
            key.verify(_b64url(parts[2]), f"{parts[0]}.{parts[1]}".encode("ascii"), PKCS1v15(), SHA256())
        except (InvalidSignature, ValueError):
            raise ValueError("the token's signature does not verify") from None
        claims = _json_object(parts[1], "payload")
        now = self._clock()
        times: Dict[str, float] = {}
        for name in ("exp", "iat"):
            value = claims.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"the token has no numeric '{name}' claim")
            times[name] = float(value)
        exp = times["exp"]
        if now >= exp + self.clock_skew_s:
            raise ValueError("the token has expired")
        if times["iat"] > now + self.clock_skew_s:
            raise ValueError("the token's issue time 'iat' is in the future")
        if self.expected_audience:
            aud = claims.get("aud")
            audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(a in self.expected_audience for a in audiences):
                raise ValueError("the token's audience 'aud' is not an expected one")
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise ValueError("the token's issuer 'iss' is not the expected one")
        sub = claims.get(self.sub_claim_name)
        if not isinstance(sub, str) or not sub.strip():
            raise ValueError(f"the token has no '{self.sub_claim_name}' claim (the principal)")
        scope_claim = claims.get(self.scope_claim_name)
        scope: Tuple[str, ...] = ()
        if isinstance(scope_claim, str):
            scope = (scope_claim,)
        elif isinstance(scope_claim, list):
            scope = tuple(str(x) for x in scope_claim)
        return sub.strip(), exp, scope

    def __repr__(self) -> str:
        return (f"JwtValidator(audience={list(self.expected_audience)}, issuer={self.expected_issuer!r}, "
                f"accepted={self.accepted}, refused={self.refused})")
