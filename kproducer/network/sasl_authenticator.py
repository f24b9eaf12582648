"""The client side of Kafka's SASL exchange on one connection (KIP-152, re-authentication KIP-368).

Sans-IO: :class:`SaslAuthenticator` says which request to send next and takes the decoded response
bodies; the NetworkClient carries them over the connection as internal requests. The exchange runs
after ApiVersions (so the SaslHandshake and SaslAuthenticate versions are known, as in Java):

    SaslHandshake v1 (mechanism)  ->  the broker enables it, or UNSUPPORTED_SASL_MECHANISM
    SaslAuthenticate (token)      ->  challenge, ... until the mechanism is complete, or an error

A failure is an :class:`~kproducer.errors.AuthenticationError` (SaslAuthenticationFailedError for
wrong credentials): the NetworkClient closes the connection and does not retry in a loop.
"""
from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from ..protocol import messages as m
from ..protocol.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    error_for_code,
)
from ..protocol.schema import Api
from .channel_security import SaslClientFactory

if TYPE_CHECKING:
    from ..protocol.sasl import SaslClient

log = logging.getLogger(__name__)

Request = Tuple[Api, int, Dict[str, Any]]

_UNSUPPORTED_SASL_MECHANISM = UnsupportedSaslMechanismError.code
_SASL_AUTHENTICATION_FAILED = SaslAuthenticationFailedError.code
_ILLEGAL_SASL_STATE = IllegalSaslStateError.code


class SaslAuthenticator:
    """One authentication (or re-authentication) of one connection.

    ``versions`` is the broker's ApiVersions answer (api key -> (min, max)). Call :meth:`first_request`,
    send it, feed each response body to :meth:`on_response`, which returns the next request or None.
    Then :attr:`done` is True, or :attr:`error` says why authentication failed.
    """

    def __init__(self, mechanism: str, client_factory: SaslClientFactory, host: str, peer: str,
                 versions: Dict[int, Tuple[int, int]]) -> None:
        self.mechanism = mechanism
        self._factory = client_factory
        self._host = host
        self.peer = peer
        self.done = False
        self.error: Optional[AuthenticationError] = None
        #: the broker's session lifetime (KIP-368); 0 when it sets none
        self.session_lifetime_ms = 0
        self._client: Optional["SaslClient"] = None
        self._handshake_version = self._version(versions, m.SASL_HANDSHAKE, minimum=1)
        self._authenticate_version = self._version(versions, m.SASL_AUTHENTICATE, minimum=0)

    def _version(self, versions: Dict[int, Tuple[int, int]], api: Api, minimum: int) -> int:
        rng = versions.get(api.key)
        if rng is None or rng[1] < minimum:
            self.error = UnsupportedSaslMechanismError(
                f"broker {self.peer} does not support {api.name} v{minimum}+ (KIP-152); kproducer needs a broker "
                "of Kafka 1.0 or newer for SASL")
            return -1
        return min(rng[1], api.max_version)

    def first_request(self) -> Optional[Request]:
        """SaslHandshake; None when the broker cannot do SASL at all (see :attr:`error`)."""
        if self.error is not None:
            return None
        return m.SASL_HANDSHAKE, self._handshake_version, {"mechanism": self.mechanism}

    def on_response(self, api: Api, body: Dict[str, Any]) -> Optional[Request]:
        """The next request, or None when finished (:attr:`done`) or failed (:attr:`error`)."""
        try:
            if api is m.SASL_HANDSHAKE:
                return self._on_handshake(body)
            if api is m.SASL_AUTHENTICATE:
                return self._on_authenticate(body)
            raise IllegalSaslStateError(f"unexpected {api.name} response during SASL authentication")
        except AuthenticationError as e:
            self.error = e
            return None
        except Exception as e:  # a mechanism bug must fail this connection, not the network thread
            log.exception("SASL %s exchange with %s failed unexpectedly", self.mechanism, self.peer)
            self.error = SaslAuthenticationFailedError(
                f"SASL {self.mechanism} authentication with broker {self.peer} failed: {type(e).__name__}")
            return None

    def connection_closed(self, reason: str) -> SaslAuthenticationFailedError:
        """The error for a connection the broker closed before this exchange ended. Brokers older than Kafka
        1.0 (and some Kafka-protocol servers, e.g. tansu with --authentication) refuse credentials, or a
        mechanism they do not serve, by closing the connection instead of answering with an error code."""
        step = "SaslHandshake" if self._client is None else "SaslAuthenticate"
        self.error = SaslAuthenticationFailedError(
            f"authentication failed: connection closed during SASL handshake with broker {self.peer} (SASL "
            f"{self.mechanism}, waiting for the answer to {step}): the broker refused the credentials or the "
            f"mechanism without an error code (as brokers before Kafka 1.0 do), or the connection broke ({reason})")
        return self.error

    def _on_handshake(self, body: Dict[str, Any]) -> Optional[Request]:
        err = body["error_code"]
        if err == _UNSUPPORTED_SASL_MECHANISM:
            mechanisms = body.get("mechanisms") or []
            if self.mechanism in mechanisms:
                # (tansu without authentication refuses every mechanism, listing them all as enabled)
                raise UnsupportedSaslMechanismError(
                    f"broker {self.peer} refused SASL mechanism {self.mechanism} although it lists it as enabled: "
                    "the broker's listener does not speak SASL: check security.protocol (PLAINTEXT or SSL?)")
            enabled = ", ".join(mechanisms) or "none"
            raise UnsupportedSaslMechanismError(
                f"broker {self.peer} does not enable SASL mechanism {self.mechanism} (it enables: {enabled}); "
                "set sasl.mechanism to one of those")
        if err == _ILLEGAL_SASL_STATE:
            # what Kafka's KafkaApis answers to a SaslHandshake on a PLAINTEXT or SSL listener (a SASL listener's
            # authenticator takes the handshake before KafkaApis sees any request)
            raise IllegalSaslStateError(
                f"broker {self.peer} answered SaslHandshake with ILLEGAL_SASL_STATE: the broker's listener does "
                "not speak SASL: check security.protocol (PLAINTEXT or SSL?) and the port")
        if err:
            raise _as_authentication_error(err, None, f"SaslHandshake with broker {self.peer} failed")
        self._client = self._factory(self._host)
        return self._authenticate(self._client.initial_response())

    def _authenticate(self, token: bytes) -> Request:
        return m.SASL_AUTHENTICATE, self._authenticate_version, {"auth_bytes": token}

    def _on_authenticate(self, body: Dict[str, Any]) -> Optional[Request]:
        client = self._client
        if client is None:
            raise IllegalSaslStateError("SaslAuthenticate response before the handshake")
        err = body["error_code"]
        if err:
            raise _as_authentication_error(
                err, body.get("error_message"),
                f"SASL {self.mechanism} authentication with broker {self.peer} failed")
        self.session_lifetime_ms = int(body.get("session_lifetime_ms") or 0)
        # PLAIN and OAUTHBEARER end with the broker's empty answer to the initial response; SCRAM with the
        # server's signature, which the mechanism checks; OAUTHBEARER answers an error challenge with %x01
        token = client.evaluate_challenge(body.get("auth_bytes") or b"")
        if token is None:
            if not client.complete:
                raise SaslAuthenticationFailedError(
                    f"SASL {self.mechanism} exchange with broker {self.peer} ended before it was complete")
            self.done = True
            return None
        return self._authenticate(token)


def _as_authentication_error(code: int, broker_message: Optional[str], context: str) -> AuthenticationError:
    exc = error_for_code(code, broker_message)
    text = f"{context}: {broker_message or exc.message}"
    if code == _SASL_AUTHENTICATION_FAILED:
        text += " (check the SASL username and password, or the token)"
    if isinstance(exc, AuthenticationError):
        return type(exc)(text)
    return SaslAuthenticationFailedError(f"{text} [{exc.name}]")


def reauthentication_delay_ms(session_lifetime_ms: int, rng: Optional[random.Random] = None) -> Optional[float]:
    """When to re-authenticate after a successful authentication: like Java, at a random point between
    85% and 95% of the session lifetime, so that connections do not all re-authenticate at once.
    None when the broker set no lifetime."""
    if session_lifetime_ms <= 0:
        return None
    r = (rng or random).random()
    return session_lifetime_ms * (0.85 + 0.10 * r)
