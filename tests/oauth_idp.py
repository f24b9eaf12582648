"""A tiny OAuth 2.0 identity provider for tests, on 127.0.0.1: a token endpoint for the client credentials grant
that issues RS256-signed JWTs, and the JWKS that verifies them (for Apache Kafka's OAuthBearerValidatorCallbackHandler
and the mock cluster's :class:`kproducer.mock.security.JwtValidator`). Optionally over https with a CA of its own.

Used by tests/unit/test_oidc.py, tests/apache_kafka/test_oidc_ak.py (and only by tests).
"""
from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Mapping, Optional, Tuple

_KEY_LOCK = threading.Lock()
_KEYS: List[Any] = []


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def rsa_key() -> Any:
    """An RSA private key (made once per process: generating one takes a while)."""
    with _KEY_LOCK:
        if not _KEYS:
            from cryptography.hazmat.primitives.asymmetric import rsa

            _KEYS.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
        return _KEYS[0]


def other_rsa_key() -> Any:
    """A second RSA key (a token signed by it does not verify with the provider's JWKS)."""
    with _KEY_LOCK:
        while len(_KEYS) < 2:
            from cryptography.hazmat.primitives.asymmetric import rsa

            _KEYS.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
        return _KEYS[1]


def sign_jwt(claims: Mapping[str, Any], key: Any = None, kid: str = "test-key-1", alg: str = "RS256") -> str:
    """An RS256 JWS of ``claims``."""
    from cryptography.hazmat.primitives.asymmetric.padding import PKCS1v15
    from cryptography.hazmat.primitives.hashes import SHA256

    key = key or rsa_key()
    header = _b64url(json.dumps({"alg": alg, "typ": "JWT", "kid": kid}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(dict(claims), separators=(",", ":")).encode())
    signature = key.sign(f"{header}.{payload}".encode("ascii"), PKCS1v15(), SHA256())
    return f"{header}.{payload}.{_b64url(signature)}"


def jwks(key: Any = None, kid: str = "test-key-1") -> Dict[str, Any]:
    """The JWK Set of ``key``'s public key."""
    numbers = (key or rsa_key()).public_key().public_numbers()

    def b64int(n: int) -> str:
        return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))

    return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": b64int(numbers.n),
                      "e": b64int(numbers.e)}]}


class IdentityProvider:
    """Token endpoint ``/token`` (POST, client credentials in HTTP basic authentication, ``grant_type`` and
    ``scope`` form-encoded) and JWKS ``/jwks`` (GET). ``clients``: client id -> secret. Tokens: ``sub`` the client
    id, ``aud`` :attr:`audience`, ``iss`` :attr:`issuer`, ``scope`` the scope asked for, ``iat`` now, ``exp`` now +
    :attr:`lifetime_s`. ``tls``: serve https with a CA of its own (:attr:`ca_file`, :attr:`ca_pem`)."""

    def __init__(self, clients: Mapping[str, str], *, lifetime_s: float = 3600.0, audience: str = "kafka",
                 issuer: str = "https://idp.test", tls: bool = False) -> None:
        self.clients = dict(clients)
        self.lifetime_s = lifetime_s
        self.audience = audience
        self.issuer = issuer
        self.tls = tls
        self.lock = threading.Lock()
        #: every token request: {"path", "authorization" (the raw header), "form" (dict), "status"}
        self.requests: List[Dict[str, Any]] = []
        self.issued: List[str] = []
        self._faults: List[Tuple[int, bytes]] = []
        self.ca_pem = ""
        self.ca_file = ""
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path == "/jwks":
                    self._answer(200, json.dumps(jwks()).encode())
                else:
                    self._answer(404, b'{"error":"not_found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8")
                form = dict(urllib.parse.parse_qsl(raw))
                status, body = provider._token_answer(self.path, self.headers.get("Authorization", ""),
                                                      self.headers.get("Content-Type", ""), form)
                self._answer(status, body)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls:
            from kproducer.mock.certs import issue_cert, load_cert_chain, make_ca

            ca = make_ca("kproducer test identity provider CA")
            cert = issue_cert(ca, ["127.0.0.1", "localhost"], common_name="127.0.0.1")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            load_cert_chain(context, cert)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.ca_pem = ca.cert_pem
            fd, self.ca_file = tempfile.mkstemp(prefix="idp-ca-", suffix=".pem")
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(self.ca_pem)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="test-idp", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    def fail_next(self, status: int, count: int = 1, body: bytes = b'{"error":"temporarily_unavailable"}') -> None:
        """Answer the next ``count`` token requests with ``status`` and ``body``."""
        with self.lock:
            self._faults.extend([(status, body)] * count)

    def token_requests(self) -> List[Dict[str, Any]]:
        with self.lock:
            return list(self.requests)

    def _token_answer(self, path: str, authorization: str, content_type: str,
                      form: Dict[str, str]) -> Tuple[int, bytes]:
        with self.lock:
            entry: Dict[str, Any] = {"path": path, "authorization": authorization, "form": form,
                                     "content_type": content_type}
            self.requests.append(entry)
            if self._faults:
                entry["status"], body = self._faults.pop(0)
                return entry["status"], body
        if path != "/token":
            entry["status"] = 404
            return 404, b'{"error":"not_found"}'
        client = self._client(authorization)
        if form.get("grant_type") != "client_credentials" or "x-www-form-urlencoded" not in content_type:
            entry["status"] = 400
            return 400, b'{"error":"unsupported_grant_type","error_description":"client_credentials only"}'
        if client is None:
            entry["status"] = 401
            return 401, b'{"error":"invalid_client","error_description":"bad client id or secret"}'
        now = int(time.time())
        claims: Dict[str, Any] = {"sub": client, "iat": now, "exp": now + self.lifetime_s, "aud": self.audience,
                                  "iss": self.issuer}
        if form.get("scope"):
            claims["scope"] = form["scope"]
        token = sign_jwt(claims)
        with self.lock:
            self.issued.append(token)
        entry["status"] = 200
        return 200, json.dumps({"access_token": token, "token_type": "Bearer",
                                "expires_in": int(self.lifetime_s)}).encode()

    def _client(self, authorization: str) -> Optional[str]:
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            client_id, _, secret = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except ValueError:
            return None
        if self.clients.get(client_id) == secret:
            return client_id
        client_id, secret = urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)
        return client_id if self.clients.get(client_id) == secret else None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
        if self.ca_file:
            os.unlink(self.ca_file)

    def __enter__(self) -> "IdentityProvider":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["IdentityProvider", "jwks", "other_rsa_key", "rsa_key", "sign_jwt"]
