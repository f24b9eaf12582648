"""SASL mechanisms for Kafka, client and server side, sans-IO.

Each mechanism exchanges opaque tokens; the network layer (``kproducer.network.sasl_authenticator``)
carries them in SaslAuthenticate requests. Nothing here touches a socket or a clock other than the
one it is given.

* :func:`sasl_client` makes the client side of one authentication: ``PLAIN`` (RFC 4616),
  ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802, RFC 7677, Kafka KIP-84) and ``OAUTHBEARER``
  (RFC 7628, Kafka KIP-255).
* :func:`sasl_server` makes the server side of one authentication, for the embedded mock broker and
  tests. Its OAUTHBEARER side validates tokens like Kafka's *unsecured* JWT validator.
* :func:`unsecured_jwt` makes an unsecured JWT (``alg`` ``none``) like Kafka's unsecured login
  callback handler does, for tests and the mock broker.

Passwords and tokens never appear in an exception message, a log line or a ``repr``.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import os
import re
import time
from typing import Any, Callable, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple

# hashlib, hmac and secrets are imported in the functions that use them: they load OpenSSL's libcrypto
# (about 3.5 MiB of RSS), which only SCRAM (and the mock's PLAIN server) needs
from .errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError

__all__ = [
    "SUPPORTED_MECHANISMS",
    "SCRAM_MIN_ITERATIONS",
    "SaslClient",
    "SaslServer",
    "PlainClient",
    "ScramClient",
    "OAuthBearerClient",
    "PlainServer",
    "ScramServer",
    "OAuthBearerServer",
    "sasl_client",
    "sasl_server",
    "unsecured_jwt",
    "scram_escape_username",
    "scram_unescape_username",
    "TokenValidator",
]

log = logging.getLogger(__name__)

SUPPORTED_MECHANISMS: Tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

#: the lowest SCRAM iteration count a client accepts (Kafka's ScramMechanism minIterations)
SCRAM_MIN_ITERATIONS = 4096
#: the highest (Kafka's ScramMechanism maxIterations): the client's key derivation runs on the network thread,
#: so a broker must not choose how long it blocks (60,000,000 iterations took 14 s)
SCRAM_MAX_ITERATIONS = 16384

_SCRAM_HASHES: Dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

_GS2_HEADER = "n,,"
_OAUTH_SEP = "\x01"
# RFC 6750 b64token, which Kafka requires of the bearer token
_BEARER_TOKEN_RE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# Kafka's SaslExtensions rules (OAuthBearerClientInitialResponse): key [A-Za-z]+, value printable
_EXTENSION_KEY_RE = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE_RE = re.compile(r"[\x21-\x7E \t\r\n]+")
_SCRAM_EXTENSION_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*")


# --------------------------------------------------------------------------------------------- errors


def _config_error(message: str) -> Exception:
    """:class:`kproducer.errors.ConfigError` (a ValueError). Imported here, not at module level: the
    protocol package otherwise depends only on itself, and kproducer.errors only on protocol.errors."""
    from ..errors import ConfigError

    return ConfigError(message)


def _fail(mechanism: str, what: str) -> NoReturn:
    """A client-side failure: the server's answer is bad."""
    raise SaslAuthenticationFailedError(f"SASL {mechanism} authentication failed: {what}")


def _refuse(mechanism: str, what: str) -> NoReturn:
    """A server-side failure, worded like Kafka's broker (the client adds the mechanism and broker)."""
    raise SaslAuthenticationFailedError(f"Authentication failed: {what}")


_Fail = Callable[[str, str], NoReturn]


# --------------------------------------------------------------------------------------------- helpers


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    """Strict standard base64 (RFC 5802 uses it with padding); ValueError when malformed."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ValueError("not valid base64") from e


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text) or len(text) % 4 == 1:
        raise ValueError("not valid base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def _decode_utf8(data: bytes, mechanism: str, what: str, fail: _Fail = _fail) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        fail(mechanism, f"the {what} is not valid UTF-8")


# --------------------------------------------------------------------------------------------- SCRAM core


def scram_escape_username(username: str) -> str:
    """RFC 5802 saslname: ``=`` becomes ``=3D`` and ``,`` becomes ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def scram_unescape_username(saslname: str) -> str:
    """The inverse of :func:`scram_escape_username`; ValueError for any other ``=`` sequence."""
    if re.search(r"=(?!3D|2C)", saslname):
        raise ValueError("invalid '=' escape in the SCRAM user name")
    return saslname.replace("=2C", ",").replace("=3D", "=")


class _ScramKeys:
    """The keys RFC 5802 derives from a password: SaltedPassword, ClientKey, StoredKey, ServerKey."""

    __slots__ = ("hash_name", "stored_key", "server_key", "client_key")

    def __init__(self, hash_name: str, password: bytes, salt: bytes, iterations: int) -> None:
        import hashlib
        import hmac
        self.hash_name = hash_name
        salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
        self.client_key = hmac.new(salted, b"Client Key", hash_name).digest()
        self.stored_key = hashlib.new(hash_name, self.client_key).digest()
        self.server_key = hmac.new(salted, b"Server Key", hash_name).digest()

    def __repr__(self) -> str:
        return f"_ScramKeys({self.hash_name})"

    def client_proof(self, auth_message: bytes) -> bytes:
        import hmac
        signature = hmac.new(self.stored_key, auth_message, self.hash_name).digest()
        return _xor(self.client_key, signature)

    def server_signature(self, auth_message: bytes) -> bytes:
        import hmac
        return hmac.new(self.server_key, auth_message, self.hash_name).digest()


def _parse_scram_attributes(message: str, mechanism: str, what: str,
                            fail: _Fail = _fail) -> List[Tuple[str, str]]:
    """``a=value,b=value,...`` as (name, value) pairs, in order; fails on a malformed attribute. RFC 5802
    attributes are single letters; Kafka's SCRAM extensions (e.g. ``tokenauth=true``) are longer names."""
    pairs: List[Tuple[str, str]] = []
    for part in message.split(","):
        name, eq, value = part.partition("=")
        if not eq or not _SCRAM_EXTENSION_KEY_RE.fullmatch(name):
            fail(mechanism, f"malformed {what}: expected attribute=value pairs")
        pairs.append((name, value))
    return pairs


def _scram_server_error(mechanism: str, pairs: List[Tuple[str, str]]) -> None:
    """RFC 5802 server-error: ``e=<reason>`` (e.g. ``e=unknown-user``, ``e=invalid-proof``)."""
    if pairs and pairs[0][0] == "e":
        _fail(mechanism, f"the server refused the SCRAM exchange with the error {pairs[0][1]!r}")


def _scram_mechanism_name(hash_name: str) -> str:
    digits = hash_name.lower().replace("sha", "")
    return f"SCRAM-SHA-{digits}"


# --------------------------------------------------------------------------------------------- clients


class SaslClient:
    """The client side of one SASL authentication.

    Call :meth:`initial_response` once and send its token; feed each server answer to
    :meth:`evaluate_challenge`, which returns the next token to send, or None when there is nothing
    more to send (then :attr:`complete` is True when the exchange succeeded). A bad server answer raises
    :class:`~kproducer.protocol.errors.SaslAuthenticationFailedError`; calls out of order raise
    :class:`~kproducer.protocol.errors.IllegalSaslStateError`.
    """

    mechanism: str = ""

    def __init__(self) -> None:
        self.complete = False
        self._started = False
        self._finished = False  # complete or failed: no more tokens

    def initial_response(self) -> bytes:
        if self._started:
            raise IllegalSaslStateError(f"SASL {self.mechanism}: the initial response was already made")
        self._started = True
        return self._initial_response()

    def evaluate_challenge(self, challenge: bytes) -> Optional[bytes]:
        if not self._started:
            raise IllegalSaslStateError(f"SASL {self.mechanism}: a challenge before the initial response")
        if self._finished:
            raise IllegalSaslStateError(f"SASL {self.mechanism}: a challenge after the exchange ended")
        try:
            token = self._evaluate(bytes(challenge))
        except Exception:
            self._finished = True
            raise
        if token is None:
            self._finished = True
        return token

    def _initial_response(self) -> bytes:
        raise NotImplementedError

    def _evaluate(self, challenge: bytes) -> Optional[bytes]:
        raise NotImplementedError

    def __repr__(self) -> str:  # never the password or the token
        return f"<{type(self).__name__} {self.mechanism} complete={self.complete}>"


class PlainClient(SaslClient):
    """PLAIN (RFC 4616): one message, ``authzid NUL authcid NUL passwd`` with an empty authzid."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        super().__init__()
        if "\x00" in username or "\x00" in password:
            raise _config_error("SASL PLAIN: the username and password must not contain NUL characters")
        self.username = username
        self._password = password

    def _initial_response(self) -> bytes:
        return b"\x00" + self.username.encode("utf-8") + b"\x00" + self._password.encode("utf-8")

    def _evaluate(self, challenge: bytes) -> Optional[bytes]:
        if challenge:
            _fail(self.mechanism, "the broker answered the credentials with an unexpected challenge")
        self.complete = True
        return None

    def __repr__(self) -> str:
        return f"<PlainClient user={self.username!r} complete={self.complete}>"


class ScramClient(SaslClient):
    """SCRAM (RFC 5802) as Kafka does it (KIP-84): no channel binding (``n,,``), no SASLprep,
    optional Kafka extensions (e.g. ``tokenauth=true`` for delegation tokens) in the client-first message.

    ``hash_name`` is a :mod:`hashlib` name (``sha256``, ``sha512``; ``sha1`` only for the RFC 5802
    test vector). ``nonce`` fixes the client nonce, for tests; by default it is random.
    """

    def __init__(self, username: str, password: str, *, hash_name: str = "sha256",
                 extensions: Optional[Mapping[str, str]] = None, nonce: Optional[str] = None,
                 min_iterations: int = SCRAM_MIN_ITERATIONS, max_iterations: int = SCRAM_MAX_ITERATIONS) -> None:
        import hashlib
        import secrets
        super().__init__()
        self.mechanism = _scram_mechanism_name(hash_name)
        hashlib.new(hash_name)  # ValueError for an unknown hash
        self._hash_name = hash_name
        self.username = username
        self._password = password
        self._min_iterations = min_iterations
        self._max_iterations = max_iterations
        if nonce is None:
            nonce = secrets.token_urlsafe(24)
        if not nonce or not all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self._nonce = nonce
        ext = ""
        for key, value in (extensions or {}).items():
            if not _SCRAM_EXTENSION_KEY_RE.fullmatch(key) or key in ("n", "r", "m") or "," in value:
                raise _config_error(
                    f"SASL {self.mechanism}: invalid extension {key!r}: names are letters and digits "
                    "(not n, r or m) and values have no ','")
            ext += f",{key}={value}"
        self._client_first_bare = f"n={scram_escape_username(username)},r={nonce}{ext}"
        self._server_signature: Optional[bytes] = None

    def _initial_response(self) -> bytes:
        return (_GS2_HEADER + self._client_first_bare).encode("utf-8")

    def _evaluate(self, challenge: bytes) -> Optional[bytes]:
        if self._server_signature is None:
            return self._client_final(challenge)
        self._verify_server_final(challenge)
        return None

    def _client_final(self, challenge: bytes) -> bytes:
        mech = self.mechanism
        server_first = _decode_utf8(challenge, mech, "server-first message")
        pairs = _parse_scram_attributes(server_first, mech, "server-first message")
        _scram_server_error(mech, pairs)
        if pairs[0][0] == "m":
            _fail(mech, "the server requires a SCRAM extension this client does not know")
        if len(pairs) < 3 or [k for k, _ in pairs[:3]] != ["r", "s", "i"]:
            _fail(mech, "malformed server-first message: expected r=...,s=...,i=...")
        server_nonce, salt_text, iterations_text = (v for _, v in pairs[:3])
        if not server_nonce.startswith(self._nonce) or len(server_nonce) <= len(self._nonce):
            _fail(mech, "the server nonce does not extend the client nonce")
        if "," in server_nonce or not server_nonce.isprintable():
            _fail(mech, "malformed server nonce")
        try:
            salt = _b64decode(salt_text)
        except ValueError:
            _fail(mech, "the server's salt is not valid base64")
        if not salt:
            _fail(mech, "the server sent an empty salt")
        if not re.fullmatch(r"[1-9][0-9]{0,9}", iterations_text):
            _fail(mech, f"the server's iteration count {iterations_text[:20]!r} is not a positive integer")
        iterations = int(iterations_text)
        if iterations < self._min_iterations:
            _fail(mech, f"the server asked for {iterations} iterations, fewer than the minimum "
                        f"{self._min_iterations}")
        if iterations > self._max_iterations:
            _fail(mech, f"the server asked for {iterations} iterations, more than the maximum "
                        f"{self._max_iterations} that Kafka's SCRAM allows")
        keys = _ScramKeys(self._hash_name, self._password.encode("utf-8"), salt, iterations)
        without_proof = f"c={_b64encode(_GS2_HEADER.encode('ascii'))},r={server_nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode("utf-8")
        proof = keys.client_proof(auth_message)
        self._server_signature = keys.server_signature(auth_message)
        return f"{without_proof},p={_b64encode(proof)}".encode("ascii")

    def _verify_server_final(self, challenge: bytes) -> None:
        import hmac
        mech = self.mechanism
        server_final = _decode_utf8(challenge, mech, "server-final message")
        pairs = _parse_scram_attributes(server_final, mech, "server-final message")
        _scram_server_error(mech, pairs)
        if pairs[0][0] != "v":
            _fail(mech, "malformed server-final message: expected v=<signature> or e=<error>")
        try:
            signature = _b64decode(pairs[0][1])
        except ValueError:
            _fail(mech, "the server signature is not valid base64")
        assert self._server_signature is not None
        if not hmac.compare_digest(signature, self._server_signature):
            _fail(mech, "the server signature did not verify: the broker does not know the password, or "
                        "it is not the broker it claims to be")
        self.complete = True

    def __repr__(self) -> str:
        return f"<ScramClient {self.mechanism} user={self.username!r} complete={self.complete}>"


class OAuthBearerClient(SaslClient):
    """OAUTHBEARER (RFC 7628) as Kafka does it (KIP-255, SASL extensions KIP-342).

    The initial response carries the token; the broker's empty answer means success. A non-empty answer
    is the broker's JSON error: the client answers ``%x01`` as RFC 7628 requires, stays incomplete, and
    the broker then fails the exchange. The error JSON is kept in :attr:`server_error`.
    """

    mechanism = "OAUTHBEARER"

    def __init__(self, token: str, extensions: Optional[Mapping[str, str]] = None) -> None:
        super().__init__()
        if not _BEARER_TOKEN_RE.fullmatch(token):
            raise _config_error(
                "SASL OAUTHBEARER: the token is not a valid bearer token (RFC 6750 b64token: letters, "
                "digits and -._~+/ , optionally followed by '=')")
        self._token = token
        self.extensions: Dict[str, str] = {}
        for key, value in (extensions or {}).items():
            if not _EXTENSION_KEY_RE.fullmatch(key) or key == "auth":
                raise _config_error(
                    f"SASL OAUTHBEARER: invalid extension name {key!r}: letters only, and not 'auth'")
            if not _EXTENSION_VALUE_RE.fullmatch(value):
                raise _config_error(f"SASL OAUTHBEARER: the value of extension {key!r} is empty or not "
                                    "printable ASCII")
            self.extensions[key] = value
        self.server_error: Optional[str] = None

    def _initial_response(self) -> bytes:
        sep = _OAUTH_SEP
        ext = "".join(f"{key}={value}{sep}" for key, value in self.extensions.items())
        return f"{_GS2_HEADER}{sep}auth=Bearer {self._token}{sep}{ext}{sep}".encode("utf-8")

    def _evaluate(self, challenge: bytes) -> Optional[bytes]:
        if self.server_error is not None:
            _fail(self.mechanism, f"the broker refused the token: {self.server_error}")
        if not challenge:
            self.complete = True
            return None
        self.server_error = challenge.decode("utf-8", "replace")[:1000]
        log.debug("SASL OAUTHBEARER: the broker refused the token: %s", self.server_error)
        return _OAUTH_SEP.encode("ascii")


def sasl_client(mechanism: str, *, username: Optional[str] = None, password: Optional[str] = None,
                token: Optional[str] = None, extensions: Optional[Mapping[str, str]] = None) -> SaslClient:
    """A fresh client for one authentication with ``mechanism`` (one of :data:`SUPPORTED_MECHANISMS`,
    case-sensitive as in Kafka). PLAIN and SCRAM need ``username`` and ``password``; OAUTHBEARER needs
    ``token``. ``extensions`` are Kafka SASL extensions (OAUTHBEARER, and SCRAM e.g. ``tokenauth``).
    Raises :class:`kproducer.errors.ConfigError` naming what to set."""
    if mechanism not in SUPPORTED_MECHANISMS:
        hint = ""
        if mechanism.upper() in SUPPORTED_MECHANISMS:
            hint = f" (mechanism names are upper-case: {mechanism.upper()})"
        raise _config_error(
            f"unsupported sasl.mechanism {mechanism!r}{hint}: kproducer supports {', '.join(SUPPORTED_MECHANISMS)}")
    if mechanism == "OAUTHBEARER":
        if not token:
            raise _config_error("sasl.mechanism=OAUTHBEARER needs a token: set a token provider "
                                "(sasl_oauth_token_provider)")
        return OAuthBearerClient(token, extensions)
    if not username or password is None or password == "":
        missing = " and ".join(n for n, v in (("username", username), ("password", password)) if not v)
        raise _config_error(
            f"sasl.mechanism={mechanism} needs a {missing}: set sasl.username and sasl.password "
            "(or sasl.jaas.config)")
    if mechanism == "PLAIN":
        if extensions:
            raise _config_error("SASL extensions are not supported with sasl.mechanism=PLAIN")
        return PlainClient(username, password)
    return ScramClient(username, password, hash_name=_SCRAM_HASHES[mechanism], extensions=extensions)


# --------------------------------------------------------------------------------------------- servers


class SaslServer:
    """The server side of one SASL authentication (for the mock broker and tests).

    Feed each client token to :meth:`evaluate_response`; it returns the challenge to send back (``b""``
    when there is none). Once :attr:`complete`, :attr:`authorization_id` is the authenticated user.
    Wrong credentials or malformed client messages raise
    :class:`~kproducer.protocol.errors.SaslAuthenticationFailedError`; a call after the exchange ended
    raises :class:`~kproducer.protocol.errors.IllegalSaslStateError`.
    """

    mechanism: str = ""

    def __init__(self) -> None:
        self.complete = False
        self.authorization_id: Optional[str] = None
        #: when the credential expires (seconds since the epoch), for the session lifetime; None if never
        self.credential_expiry: Optional[float] = None
        self._failed = False

    def evaluate_response(self, response: bytes) -> bytes:
        if self.complete or self._failed:
            raise IllegalSaslStateError(f"SASL {self.mechanism}: a client message after the exchange ended")
        try:
            return self._evaluate(bytes(response))
        except Exception:
            self._failed = True
            raise

    def _evaluate(self, response: bytes) -> bytes:
        raise NotImplementedError

    def _succeed(self, user: str) -> None:
        self.complete = True
        self.authorization_id = user

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.mechanism} complete={self.complete} "
                f"user={self.authorization_id!r}>")


def _check_authzid(mechanism: str, authzid: str, user: str) -> None:
    if authzid and authzid != user:
        _refuse(mechanism, "the client requested an authorization id different from its user name")


class PlainServer(SaslServer):
    """PLAIN (RFC 4616) against a table of plaintext passwords; Kafka answers success with no bytes."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        super().__init__()
        self._users = users

    def _evaluate(self, response: bytes) -> bytes:
        import hmac
        parts = response.split(b"\x00")
        if len(parts) != 3:
            _refuse(self.mechanism, "malformed message: expected authzid NUL username NUL password")
        authzid, user, password = (_decode_utf8(p, self.mechanism, "client message", _refuse) for p in parts)
        if not user:
            _refuse(self.mechanism, "no username given")
        if not password:
            _refuse(self.mechanism, "no password given")
        expected = self._users.get(user)
        # the same message for an unknown user and a wrong password, like Kafka
        if expected is None or not hmac.compare_digest(expected.encode("utf-8"), password.encode("utf-8")):
            _refuse(self.mechanism, "invalid username or password")
        _check_authzid(self.mechanism, authzid, user)
        self._succeed(user)
        return b""


class ScramServer(SaslServer):
    """SCRAM (RFC 5802) against a table of plaintext passwords: the salted credential of the user is
    derived with a random salt for this exchange, like a broker's stored SCRAM credential."""

    def __init__(self, users: Mapping[str, str], *, hash_name: str = "sha256", iterations: int = 4096,
                 salt: Optional[bytes] = None, nonce: Optional[str] = None) -> None:
        import hashlib
        super().__init__()
        self.mechanism = _scram_mechanism_name(hash_name)
        hashlib.new(hash_name)
        if iterations < 1:
            raise ValueError("the SCRAM iteration count must be positive")
        self._hash_name = hash_name
        self._users = users
        self._iterations = iterations
        self._salt = salt
        self._nonce_suffix = nonce
        #: Kafka SCRAM extensions the client sent (e.g. tokenauth); not acted upon
        self.extensions: Dict[str, str] = {}
        self._step = 0
        self._user = ""
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._keys: Optional[_ScramKeys] = None

    def _evaluate(self, response: bytes) -> bytes:
        if self._step == 0:
            self._step = 1
            return self._server_first_message(response)
        return self._server_final_message(response)

    def _server_first_message(self, response: bytes) -> bytes:
        import secrets
        mech = self.mechanism
        message = _decode_utf8(response, mech, "client-first message", _refuse)
        m = re.fullmatch(r"([nyp])(=[^,]*)?,(a=[^,]*)?,(.*)", message, re.DOTALL)
        if m is None:
            _refuse(mech, "malformed client-first message: expected a GS2 header")
        if m.group(1) == "p":
            _refuse(mech, "channel binding is not supported")
        if m.group(2) is not None:
            _refuse(mech, "malformed GS2 header")
        authzid_text = m.group(3)[2:] if m.group(3) else ""
        bare = m.group(4)
        self._gs2_header = message[:len(message) - len(bare)]
        pairs = _parse_scram_attributes(bare, mech, "client-first message", _refuse)
        if pairs[0][0] == "m":
            _refuse(mech, "the client requires a SCRAM extension this server does not know")
        if len(pairs) < 2 or pairs[0][0] != "n" or pairs[1][0] != "r":
            _refuse(mech, "malformed client-first message: expected n=<user>,r=<nonce>")
        try:
            user = scram_unescape_username(pairs[0][1])
            authzid = scram_unescape_username(authzid_text)
        except ValueError:
            _refuse(mech, "malformed user name: bad '=' escape")
        client_nonce = pairs[1][1]
        if not client_nonce or not all(0x21 <= ord(ch) <= 0x7E for ch in client_nonce):
            _refuse(mech, "malformed client nonce")
        self.extensions = dict(pairs[2:])
        password = self._users.get(user)
        if password is None:
            _refuse(mech, "invalid user credentials")
        _check_authzid(mech, authzid, user)
        salt = self._salt if self._salt is not None else os.urandom(16)
        self._keys = _ScramKeys(self._hash_name, password.encode("utf-8"), salt, self._iterations)
        self._user = user
        self._client_first_bare = bare
        self._nonce = client_nonce + (self._nonce_suffix or secrets.token_urlsafe(18))
        self._server_first = f"r={self._nonce},s={_b64encode(salt)},i={self._iterations}"
        return self._server_first.encode("utf-8")

    def _server_final_message(self, response: bytes) -> bytes:
        import hashlib
        import hmac
        mech = self.mechanism
        message = _decode_utf8(response, mech, "client-final message", _refuse)
        pairs = _parse_scram_attributes(message, mech, "client-final message", _refuse)
        if len(pairs) < 3 or pairs[0][0] != "c" or pairs[1][0] != "r" or pairs[-1][0] != "p":
            _refuse(mech, "malformed client-final message: expected c=...,r=...,p=...")
        if pairs[0][1] != _b64encode(self._gs2_header.encode("utf-8")):
            _refuse(mech, "the channel binding does not match the client-first message's GS2 header")
        if pairs[1][1] != self._nonce:
            _refuse(mech, "the nonce does not match")
        try:
            proof = _b64decode(pairs[-1][1])
        except ValueError:
            _refuse(mech, "the client proof is not valid base64")
        keys = self._keys
        assert keys is not None
        without_proof = message[:message.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        signature = hmac.new(keys.stored_key, auth_message, self._hash_name).digest()
        if len(proof) != len(signature):
            _refuse(mech, "invalid credentials")
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(hashlib.new(self._hash_name, client_key).digest(), keys.stored_key):
            _refuse(mech, "invalid credentials")
        self._succeed(self._user)
        return f"v={_b64encode(keys.server_signature(auth_message))}".encode("ascii")


class _InvalidToken(Exception):
    """Why an OAUTHBEARER token was refused (never contains the token)."""


#: validates a signed OAUTHBEARER token: (principal, expiry in seconds since the epoch, scope), or ValueError saying
#: why the token is refused (never containing it); e.g. kproducer.mock.security.JwtValidator
TokenValidator = Callable[[str], Tuple[str, float, Tuple[str, ...]]]


class OAuthBearerServer(SaslServer):
    """OAUTHBEARER (RFC 7628) with Kafka's *unsecured* JWT validator semantics: the token is an
    unsecured JWS (header ``{"alg":"none"}``, empty signature) whose payload has ``sub`` (the principal)
    and ``exp`` (seconds since the epoch, after ``clock()``); optional ``iat`` (not after ``clock()``)
    and ``scope`` (a string or a list of strings). With ``token_validator`` the token is checked by it
    instead (signed JWTs, as Kafka's OAuthBearerValidatorCallbackHandler).

    A bad token gets the challenge ``{"status":"invalid_token"}``; the client must answer ``%x01``,
    and then the exchange fails with :class:`SaslAuthenticationFailedError`.
    """

    mechanism = "OAUTHBEARER"

    def __init__(self, *, clock: Callable[[], float] = time.time, allowable_clock_skew_s: float = 0.0,
                 token_validator: Optional[TokenValidator] = None) -> None:
        super().__init__()
        self._clock = clock
        self._skew = allowable_clock_skew_s
        self._validator = token_validator
        self._error: Optional[str] = None
        #: once a token was refused: the error message Apache Kafka's OAuthBearerSaslServer answers SaslAuthenticate
        #: with (the JSON error of the challenge, e.g. {"status":"invalid_token"})
        self.failure_message: Optional[str] = None
        #: the Kafka SASL extensions the client sent
        self.extensions: Dict[str, str] = {}
        #: the token's scope, once complete
        self.scope: Tuple[str, ...] = ()

    def _evaluate(self, response: bytes) -> bytes:
        mech = self.mechanism
        if self._error is not None:
            if response != _OAUTH_SEP.encode("ascii"):
                _refuse(mech, f"the token was refused ({self._error}), and the client did not acknowledge the "
                            "error with %x01")
            _refuse(mech, f"the token was refused: {self._error}")
        message = _decode_utf8(response, mech, "client message", _refuse)
        m = re.fullmatch(r"n,(a=[^,\x01]*)?,\x01(.*)\x01\x01", message, re.DOTALL)
        if m is None:
            _refuse(mech, "malformed client initial response (RFC 7628)")
        authzid = m.group(1)[2:] if m.group(1) else ""
        fields: Dict[str, str] = {}
        for kv in m.group(2).split(_OAUTH_SEP):
            key, eq, value = kv.partition("=")
            if not eq or not _EXTENSION_KEY_RE.fullmatch(key) or key in fields:
                _refuse(mech, "malformed key=value pair in the client initial response")
            fields[key] = value
        auth = fields.pop("auth", None)
        if auth is None:
            _refuse(mech, "no auth=Bearer <token> in the client initial response")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token:
            _refuse(mech, "the auth value is not 'Bearer <token>'")
        for key, value in fields.items():
            if not _EXTENSION_VALUE_RE.fullmatch(value):
                _refuse(mech, f"the value of extension {key!r} is not printable ASCII")
        self.extensions = fields
        try:
            subject, expiry, scope = self._validate(token)
            if authzid and authzid != subject:
                raise _InvalidToken("the authorization id differs from the token's principal")
        except _InvalidToken as e:
            self._error = str(e)
            log.debug("SASL OAUTHBEARER: refusing a token: %s", self._error)
            self.failure_message = json.dumps({"status": "invalid_token"}, separators=(",", ":"))
            return self.failure_message.encode("utf-8")
        self.credential_expiry = expiry
        self.scope = scope
        self._succeed(subject)
        return b""

    def _validate(self, token: str) -> Tuple[str, float, Tuple[str, ...]]:
        if self._validator is not None:
            try:
                return self._validator(token)
            except ValueError as e:
                raise _InvalidToken(str(e)) from None
        parts = token.split(".")
        if len(parts) != 3:
            raise _InvalidToken("the token is not a JWS compact serialization (header.payload.signature)")
        if parts[2]:
            raise _InvalidToken("the token has a signature; an unsecured JWT has none")
        header = self._json_part(parts[0], "header")
        if header.get("alg") != "none":
            raise _InvalidToken("the token's header does not say alg none (unsecured JWT)")
        claims = self._json_part(parts[1], "payload")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.strip():
            raise _InvalidToken("the token has no 'sub' claim (the principal)")
        exp = _number(claims.get("exp"))
        if exp is None:
            raise _InvalidToken("the token has no numeric 'exp' claim")
        iat_claim = claims.get("iat")
        iat = _number(iat_claim)
        if iat_claim is not None and iat is None:
            raise _InvalidToken("the token's 'iat' claim is not a number")
        now = self._clock()
        if now >= exp + self._skew:
            raise _InvalidToken("the token has expired")
        if iat is not None:
            if iat > now + self._skew:
                raise _InvalidToken("the token's issue time 'iat' is in the future")
            if exp < iat:
                raise _InvalidToken("the token expires before it was issued")
        scope_claim = claims.get("scope")
        scope: Tuple[str, ...] = ()
        if isinstance(scope_claim, str):
            scope = tuple(scope_claim.split())
        elif isinstance(scope_claim, list) and all(isinstance(s, str) for s in scope_claim):
            scope = tuple(scope_claim)
        elif scope_claim is not None:
            raise _InvalidToken("the token's 'scope' claim is neither a string nor a list of strings")
        return sub, exp, scope

    @staticmethod
    def _json_part(text: str, what: str) -> Dict[str, Any]:
        try:
            value = json.loads(_b64url_decode(text).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise _InvalidToken(f"the token's {what} is not base64url-encoded JSON") from None
        if not isinstance(value, dict):
            raise _InvalidToken(f"the token's {what} is not a JSON object")
        return value


def _number(value: object) -> Optional[float]:
    """A JSON number as a float; None for anything else (booleans, strings, NaN, infinity)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def sasl_server(mechanism: str, *, users: Mapping[str, str], scram_iterations: int = 4096,
                clock: Callable[[], float] = time.time,
                oauth_validator: Optional[TokenValidator] = None) -> SaslServer:
    """A fresh server side for one authentication with ``mechanism``.

    ``users`` maps user names to plaintext passwords (PLAIN, SCRAM; the SCRAM credential is derived with a
    random salt and ``scram_iterations``). OAUTHBEARER ignores ``users`` and validates unsecured JWTs
    with ``clock`` (seconds since the epoch), or signed ones with ``oauth_validator``. Raises
    UnsupportedSaslMechanismError for another mechanism.
    """
    if mechanism == "PLAIN":
        return PlainServer(users)
    if mechanism in _SCRAM_HASHES:
        return ScramServer(users, hash_name=_SCRAM_HASHES[mechanism], iterations=scram_iterations)
    if mechanism == "OAUTHBEARER":
        return OAuthBearerServer(clock=clock, token_validator=oauth_validator)
    raise UnsupportedSaslMechanismError(
        f"unsupported SASL mechanism {mechanism!r}: supported are {', '.join(SUPPORTED_MECHANISMS)}")


# --------------------------------------------------------------------------------------------- tokens


def _numeric_date(t: float) -> float:
    """Seconds with at most millisecond precision, rounded down (an ``iat`` must never be in the future);
    an int when whole."""
    ms = math.floor(t * 1000)
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def unsecured_jwt(subject: str, lifetime_s: float = 3600.0, *, scope: Optional[Sequence[str]] = None,
                  now: Optional[float] = None) -> str:
    """An unsecured JWT (RFC 7519 section 6: header ``{"alg":"none"}``, empty signature), base64url
    without padding, with the claims ``sub``, ``iat`` and ``exp`` (and ``scope`` when given), like
    Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes. ``now`` defaults to ``time.time()``."""
    if not subject or subject != subject.strip():
        raise ValueError("the JWT subject must be non-empty, without leading or trailing whitespace")
    issued = _numeric_date(time.time() if now is None else now)
    claims: Dict[str, Any] = {"sub": subject, "iat": issued, "exp": _numeric_date(issued + lifetime_s)}
    if scope is not None:
        if isinstance(scope, str):
            raise TypeError("scope is a sequence of scope names, not a string")
        claims["scope"] = list(scope)
    compact = (",", ":")
    header = _b64url_encode(json.dumps({"alg": "none"}, separators=compact).encode("utf-8"))
    payload = _b64url_encode(json.dumps(claims, separators=compact).encode("utf-8"))
    return f"{header}.{payload}."
