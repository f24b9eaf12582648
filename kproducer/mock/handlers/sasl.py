"""SaslHandshake (17) and SaslAuthenticate (36) on a mock broker (KIP-43, KIP-152, KIP-368).

The connection's :class:`~kproducer.mock.security.SaslSession` comes with the request. SaslHandshake
picks a mechanism (an unknown one: UNSUPPORTED_SASL_MECHANISM with the enabled list, then the
connection closes); each SaslAuthenticate feeds one client token to the mechanism's server
(:func:`kproducer.protocol.sasl.sasl_server`) and answers its challenge. Wrong credentials answer
SASL_AUTHENTICATION_FAILED with Kafka's message and close the connection once that response is
written. A SaslHandshake v1 on an authenticated connection starts a re-authentication, which must
authenticate the same user with the same mechanism. On a listener without SASL both APIs answer
ILLEGAL_SASL_STATE, as Kafka's KafkaApis does.

SaslHandshake v0 (the mechanism's tokens as raw frames, pre Kafka 1.0 clients) is advertised, as by
Kafka, but not served: such a client gets UNSUPPORTED_SASL_MECHANISM and a log line saying why.
"""
from __future__ import annotations

import logging
from typing import Optional

from ...protocol.errors import (
    NO_ERROR,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from ...protocol.sasl import SaslServer, sasl_server
from ..context import BrokerContext
from ..request_channel import Request
from ..results import CLOSE_CONNECTION, DEFERRED, Body, Result
from ..security import SaslSession

log = logging.getLogger(__name__)


def _auth_response(error_code: int, message: Optional[str] = None, auth_bytes: bytes = b"",
                   lifetime_ms: int = 0) -> Body:
    return {"error_code": error_code, "error_message": message, "auth_bytes": auth_bytes,
            "session_lifetime_ms": lifetime_ms}


def handle_sasl_handshake(ctx: BrokerContext, request: Request) -> Result:

    body = request.body
    assert body is not None
    session = request.session
    if session is None:
        return {"error_code": IllegalSaslStateError.code, "mechanisms": []}
    security = session.security
    mechanism = body["mechanism"]
    if session.state == SaslSession.AUTHENTICATE:
        log.info("broker %d: %s sent a second SaslHandshake during the SASL exchange; closing",
                 ctx.broker_id, request.peer)
        security.stats.add("failures")
        return CLOSE_CONNECTION
    reauthenticating = session.state == SaslSession.AUTHENTICATED
    if reauthenticating and request.version == 0:
        return {"error_code": IllegalSaslStateError.code, "mechanisms": []}
    security.stats.add("attempts")
    refusal: Optional[str] = None
    if request.version == 0:
        refusal = ("SaslHandshake v0 (raw SASL tokens) is not served by the mock broker: use a client that "
                   "authenticates with SaslAuthenticate (Kafka 1.0+ protocol)")
        mechanisms = []
    elif mechanism not in security.mechanisms:
        refusal = f"unsupported SASL mechanism {mechanism!r}; enabled: {', '.join(security.mechanisms)}"
        mechanisms = list(security.mechanisms)
    elif reauthenticating and mechanism != session.mechanism:
        refusal = (f"SASL mechanism {mechanism!r} requested for the re-authentication of a connection "
                   f"authenticated with {session.mechanism}")
        mechanisms = list(security.mechanisms)
    if refusal is not None:
        log.info("broker %d: SASL handshake from %s refused: %s", ctx.broker_id, request.peer, refusal)
        security.stats.add("failures")
        ctx.respond(request, {"error_code": UnsupportedSaslMechanismError.code, "mechanisms": mechanisms},
                     close_after_send=True)
        return DEFERRED
    session.server = sasl_server(mechanism, users=security.users, scram_iterations=security.scram_iterations,
                                 oauth_validator=security.oauth_validator)
    session.mechanism = mechanism
    session.state = SaslSession.AUTHENTICATE
    session.authenticated = False
    session.reauthenticating = reauthenticating
    return {"error_code": NO_ERROR, "mechanisms": list(security.mechanisms)}


def handle_sasl_authenticate(ctx: BrokerContext, request: Request) -> Result:

    body = request.body
    assert body is not None
    session = request.session
    if session is None:
        return _auth_response(IllegalSaslStateError.code, "SaslAuthenticate received on a listener without SASL")
    if session.state == SaslSession.AUTHENTICATED:
        return _auth_response(IllegalSaslStateError.code,
                              "SaslAuthenticate request received after successful authentication")
    security = session.security
    if session.state == SaslSession.HANDSHAKE or session.server is None:
        log.info("broker %d: %s sent SaslAuthenticate before SaslHandshake; closing", ctx.broker_id, request.peer)
        security.stats.add("failures")
        return CLOSE_CONNECTION
    server = session.server
    assert isinstance(server, SaslServer)
    during = "re-authentication" if session.reauthenticating else "authentication"
    try:
        challenge = server.evaluate_response(body["auth_bytes"])
        if server.complete and session.reauthenticating and server.authorization_id != session.principal:
            raise ValueError(f"cannot change principals during re-authentication from User:{session.principal} "
                             f"to User:{server.authorization_id}")
    except Exception as e:  # wrong credentials, a malformed token, an exchange out of order
        # the mechanism servers' messages name what failed, never the secret
        log.info("broker %d: SASL %s %s of %s failed: %s", ctx.broker_id, session.mechanism, during,
                 request.peer, e)
        security.stats.add("failures")
        session.server = None
        # OAUTHBEARER: the JSON error of the refused token, as Apache Kafka's OAuthBearerSaslServer answers
        message = getattr(server, "failure_message", None) or (
            f"Authentication failed during {during} due to invalid credentials with SASL mechanism {session.mechanism}")
        ctx.respond(request, _auth_response(SaslAuthenticationFailedError.code, message), close_after_send=True)
        return DEFERRED
    if not server.complete:
        return _auth_response(NO_ERROR, None, challenge)
    lifetime_ms = security.session_lifetime_ms
    if lifetime_ms > 0 and server.credential_expiry is not None:
        # KIP-368: never beyond the credential's own expiry (an OAUTHBEARER token's exp)
        lifetime_ms = max(0, min(lifetime_ms, int(server.credential_expiry * 1000) - security.clock.wall_ms()))
    session.principal = server.authorization_id
    session.server = None
    session.state = SaslSession.AUTHENTICATED
    session.expires_at_ms = security.clock.monotonic_ms() + lifetime_ms if security.session_lifetime_ms > 0 else 0.0
    security.stats.add("successes")
    if session.reauthenticating:
        security.stats.add("reauthentications")
    session.reauthenticating = False
    session.authenticated = True
    log.debug("broker %d: %s authenticated as %s with SASL %s", ctx.broker_id, request.peer,
              session.principal, session.mechanism)
    return _auth_response(NO_ERROR, None, challenge, lifetime_ms)
