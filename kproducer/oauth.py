"""SASL/OAUTHBEARER with OAuth 2.0 client credentials (OIDC), as Java's ``OAuthBearerLoginCallbackHandler``.

The settings (docs/security.md "OAuth / OIDC"): Java's ``sasl.oauthbearer.token.endpoint.url`` with
``sasl.login.callback.handler.class=...OAuthBearerLoginCallbackHandler`` and the client id and secret as
``sasl.oauthbearer.client.credentials.client.id/secret`` or the JAAS options ``clientId``/``clientSecret``/``scope``
of ``OAuthBearerLoginModule``; or librdkafka's ``sasl.oauthbearer.method=oidc`` with ``sasl.oauthbearer.client.id``,
``.client.secret``, ``.scope``, ``.token.endpoint.url``. :class:`kproducer.config.ProducerConfig` resolves them to a
:class:`ClientCredentials`.

* :func:`request_token` makes one token request as Java's ``HttpJwtRetriever``: an HTTP POST of
  ``grant_type=client_credentials[&scope=...]`` with the client id and secret as HTTP basic authentication
  (URL-encoded first with ``sasl.oauthbearer.header.urlencode``), retried with a doubling wait from
  ``sasl.login.retry.backoff.ms`` for up to ``sasl.login.retry.backoff.max.ms`` (an HTTP status that cannot get
  better, 400, 401, 403, 404 ..., is not retried). The answer's ``access_token`` (or ``id_token``) is checked as
  Java's ``ClientJwtValidator`` does (a JWT with ``exp`` and a principal in ``sasl.oauthbearer.sub.claim.name``;
  the signature is the broker's business).
* :class:`ClientCredentialsLogin` is the token provider the producer uses: :meth:`~ClientCredentialsLogin.start`
  fetches the first token (on the caller's thread, when the producer is created, as Java's login does; a failure
  is an :class:`OAuthTokenError` from the constructor), and a background thread fetches the next one before the
  current one expires, at the time Java's ``ExpiringCredentialRefreshingLogin`` picks (``sasl.login.refresh.*``).
  The network thread only reads the current token: it never waits for the token endpoint.

No client secret, token or ``Authorization`` header appears in a message, a log line or a ``repr``; the token
endpoint's error answer is shown as RFC 6749 section 5.2 defines it (``error`` and ``error_description``, which hold
no secret).
"""
from __future__ import annotations

import base64
import json
import logging
import math
import random
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from .errors import SaslAuthenticationFailedError

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

#: HTTP statuses that point at the client's credentials (bad request, unauthorized, forbidden)
CREDENTIAL_HTTP_CODES = frozenset({400, 401, 403})
#: HTTP statuses of a token request that are not retried (Java's HttpJwtRetriever.UNRETRYABLE_HTTP_CODES)
UNRETRYABLE_HTTP_CODES = frozenset({400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413, 414, 415,
                                    501, 505})
#: the wait before the next attempt when a refresh failed (Java's DELAY_SECONDS_BEFORE_NEXT_RETRY_WHEN_RELOGIN_FAILS)
RETRY_AFTER_FAILED_REFRESH_S = 10.0
#: a token request's connect and read timeout when sasl.login.connect/read.timeout.ms are unset (Java: no limit)
DEFAULT_TIMEOUT_S = 10.0
#: the largest token endpoint answer read
MAX_RESPONSE_BYTES = 1 << 20


class OAuthTokenError(SaslAuthenticationFailedError):
    """No usable OAuth access token: the token endpoint could not be reached, refused the client credentials, or
    answered something that is not a usable JWT. An :class:`~kproducer.errors.AuthenticationError`; the message
    names the endpoint (without any credentials in its URL) and the cause, never the secret or the token."""


def safe_url(url: str) -> str:
    """``url`` without user information, query or fragment (for messages)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class ClientCredentials:
    """What a client credentials login needs (resolved from the producer's settings). ``repr()`` shows the
    endpoint, the client id and the scope, never the secret."""

    __slots__ = ("token_endpoint_url", "client_id", "_client_secret", "scope", "sub_claim_name",
                 "scope_claim_name", "urlencode_header", "connect_timeout_ms", "read_timeout_ms", "retry_backoff_ms",
                 "retry_backoff_max_ms", "refresh_window_factor", "refresh_window_jitter", "refresh_min_period_s",
                 "refresh_buffer_s", "ssl_settings")

    def __init__(self, token_endpoint_url: str, client_id: str, client_secret: str, *, scope: Optional[str] = None,
                 sub_claim_name: str = "sub", scope_claim_name: str = "scope", urlencode_header: bool = False,
                 connect_timeout_ms: Optional[int] = None, read_timeout_ms: Optional[int] = None,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 10000,
                 refresh_window_factor: float = 0.8, refresh_window_jitter: float = 0.05,
                 refresh_min_period_s: float = 60, refresh_buffer_s: float = 300,
                 ssl_settings: Optional[Mapping[str, Any]] = None) -> None:
        from .errors import ConfigError

        parts = urllib.parse.urlsplit(token_endpoint_url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            hint = (": a token in a file is not read by kproducer (give sasl_oauth_token_provider, a callable that "
                    "reads it)" if parts.scheme.lower() == "file" else "")
            raise ConfigError(f"sasl.oauthbearer.token.endpoint.url must be an http or https URL, not "
                              f"{safe_url(token_endpoint_url)!r}{hint}")
        if not client_id.strip():
            raise ConfigError("the OAuth client id is empty (sasl.oauthbearer.client.credentials.client.id, "
                              "sasl.oauthbearer.client.id or the JAAS option clientId)")
        if not client_secret.strip():
            raise ConfigError("the OAuth client secret is empty (sasl.oauthbearer.client.credentials.client.secret, "
                              "sasl.oauthbearer.client.secret or the JAAS option clientSecret)")
        if retry_backoff_max_ms < retry_backoff_ms:
            raise ConfigError(f"sasl.login.retry.backoff.max.ms ({retry_backoff_max_ms}) is less than "
                              f"sasl.login.retry.backoff.ms ({retry_backoff_ms})")
        self.token_endpoint_url = token_endpoint_url
        self.client_id = client_id.strip()
        self._client_secret = client_secret.strip()
        self.scope = scope.strip() if scope and scope.strip() else None
        self.sub_claim_name = sub_claim_name
        self.scope_claim_name = scope_claim_name
        self.urlencode_header = urlencode_header
        self.connect_timeout_ms = connect_timeout_ms
        self.read_timeout_ms = read_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.refresh_window_factor = refresh_window_factor
        self.refresh_window_jitter = refresh_window_jitter
        self.refresh_min_period_s = refresh_min_period_s
        self.refresh_buffer_s = refresh_buffer_s
        #: TLS settings (Java names) for an https token endpoint: Java's JAAS ssl.* options, librdkafka's
        #: https.ca.location / https.ca.pem; empty: the system's default CAs
        self.ssl_settings: Dict[str, Any] = dict(ssl_settings or {})

    @property
    def https(self) -> bool:
        return urllib.parse.urlsplit(self.token_endpoint_url).scheme.lower() == "https"

    def request_headers(self) -> Dict[str, str]:
        """Java's ClientCredentialsRequestFormatter.formatHeaders: basic authentication (standard base64, RFC 7617;
        the id and secret URL-encoded first with sasl.oauthbearer.header.urlencode, RFC 6749 2.3.1)."""
        client_id, secret = self.client_id, self._client_secret
        if self.urlencode_header:
            client_id, secret = urllib.parse.quote_plus(client_id), urllib.parse.quote_plus(secret)
        basic = base64.b64encode(f"{client_id}:{secret}".encode("utf-8")).decode("ascii")
        return {"Accept": "application/json", "Authorization": f"Basic {basic}", "Cache-Control": "no-cache",
                "Content-Type": "application/x-www-form-urlencoded"}

    def request_body(self) -> bytes:
        """``grant_type=client_credentials`` and the scope, form-encoded."""
        fields = [("grant_type", "client_credentials")]
        if self.scope is not None:
            fields.append(("scope", self.scope))
        return urllib.parse.urlencode(fields).encode("ascii")

    def __repr__(self) -> str:
        return (f"ClientCredentials({safe_url(self.token_endpoint_url)}, client_id={self.client_id!r}, "
                f"scope={self.scope!r})")


class AccessToken:
    """An access token from the token endpoint: the JWT (:attr:`value`, never in ``repr``), its expiry and issue
    time (seconds since the epoch), principal and scope."""

    __slots__ = ("_value", "expiry", "issued_at", "principal", "scope")

    def __init__(self, value: str, expiry: float, issued_at: Optional[float], principal: str,
                 scope: Tuple[str, ...]) -> None:
        self._value = value
        self.expiry = expiry
        self.issued_at = issued_at
        self.principal = principal
        self.scope = scope

    @property
    def value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"AccessToken(principal={self.principal!r}, expiry={self.expiry:.0f}, scope={list(self.scope)})"


def _b64url_json(text: str, what: str) -> Dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise OAuthTokenError(f"the access token's {what} is not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise OAuthTokenError(f"the access token's {what} is not a JSON object")
    return value


def _number(value: Any) -> Optional[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def parse_access_token(jwt: str, sub_claim_name: str = "sub", scope_claim_name: str = "scope") -> AccessToken:
    """Check a JWT as Java's ClientJwtValidator: three base64url parts, a JSON payload with a numeric ``exp``, a
    non-blank principal in ``sub_claim_name``, an optional numeric ``iat``, and a scope (a string or a list of
    strings) in ``scope_claim_name``. The signature is not checked (the broker does that). OAuthTokenError naming
    what is wrong, never the token."""
    parts = jwt.split(".")
    if len(parts) != 3:
        raise OAuthTokenError(f"the access token is not a JWT (it has {len(parts)} dot-separated parts, not 3)")
    claims = _b64url_json(parts[1], "payload")
    exp = _number(claims.get("exp"))
    if exp is None or exp < 0:
        raise OAuthTokenError("the access token has no numeric 'exp' claim")
    sub = claims.get(sub_claim_name)
    if not isinstance(sub, str) or not sub.strip():
        raise OAuthTokenError(f"the access token has no principal: its '{sub_claim_name}' claim "
                              "(sasl.oauthbearer.sub.claim.name) is missing or empty")
    iat_claim = claims.get("iat")
    iat = _number(iat_claim)
    if iat_claim is not None and (iat is None or iat < 0):
        raise OAuthTokenError("the access token's 'iat' claim is not a number of seconds")
    scope_claim = claims.get(scope_claim_name)
    scope: Tuple[str, ...] = ()
    if isinstance(scope_claim, str):
        scope = (scope_claim,)  # as Java: one scope, not split
    elif isinstance(scope_claim, list):
        if not all(isinstance(x, str) and x.strip() for x in scope_claim):
            raise OAuthTokenError(f"the access token's '{scope_claim_name}' claim has an empty or non-string scope")
        scope = tuple(scope_claim)
    return AccessToken(jwt, exp, iat, sub.strip(), scope)


def _error_summary(body: bytes) -> str:
    """RFC 6749 5.2's error and error_description (or Okta's errorCode/errorSummary) of an error answer."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "no JSON error"
    if not isinstance(doc, dict):
        return "no JSON error"
    for code_key, text_key in (("error", "error_description"), ("errorCode", "errorSummary")):
        if code_key in doc:
            code, text = str(doc.get(code_key))[:100], doc.get(text_key)
            return f"{code}: {str(text)[:300]}" if text else code
    return "no error code in the answer"


class _Unretryable(Exception):
    pass


def _post(creds: ClientCredentials, context: Optional[ssl.SSLContext]) -> bytes:
    """One POST to the token endpoint; the answer's body. _Unretryable or OSError (retried) on failure."""
    import urllib.error
    import urllib.request

    url = creds.token_endpoint_url
    timeouts = [t / 1000.0 for t in (creds.connect_timeout_ms, creds.read_timeout_ms) if t is not None]
    timeout = max(timeouts) if timeouts else DEFAULT_TIMEOUT_S
    request = urllib.request.Request(url, data=creds.request_body(), headers=creds.request_headers(), method="POST")
    handlers: List[Any] = []
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    where = safe_url(url)
    try:
        with opener.open(request, timeout=timeout) as response:
            status = response.status
            body = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as e:
        try:
            summary = _error_summary(e.read(MAX_RESPONSE_BYTES))
        except OSError:
            summary = "no answer body"
        finally:
            e.close()
        text = f"the token endpoint {where} answered HTTP {e.code} ({summary})"
        if e.code in UNRETRYABLE_HTTP_CODES:
            if e.code in CREDENTIAL_HTTP_CODES:
                text += ": check the client id and secret (and the scope)"
            raise _Unretryable(text) from None
        raise OSError(text) from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, BaseException) and type(reason).__name__.startswith("SSL"):
            raise _Unretryable(f"TLS with the token endpoint {where} failed: {reason}") from None
        raise OSError(f"cannot reach the token endpoint {where}: {reason}") from None
    except (OSError, ValueError) as e:  # a timeout, a reset, a malformed answer
        raise OSError(f"the request to the token endpoint {where} failed: {type(e).__name__}: {e}") from None
    if status not in (200, 201):
        raise OSError(f"the token endpoint {where} answered HTTP {status}")
    if len(body) > MAX_RESPONSE_BYTES:
        raise _Unretryable(f"the token endpoint {where} answered more than {MAX_RESPONSE_BYTES} bytes")
    if not body:
        raise OSError(f"the token endpoint {where} answered HTTP {status} with an empty body")
    return bytes(body)


def _token_from_answer(creds: ClientCredentials, body: bytes) -> AccessToken:
    """Java's JwtResponseParser (access_token, else id_token), then the JWT's claims."""
    where = safe_url(creds.token_endpoint_url)
    try:
        doc = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise OAuthTokenError(f"the token endpoint {where} answered something that is not JSON") from None
    if not isinstance(doc, dict):
        raise OAuthTokenError(f"the token endpoint {where} answered JSON that is not an object")
    for key in ("access_token", "id_token"):
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            try:
                return parse_access_token(value.strip(), creds.sub_claim_name, creds.scope_claim_name)
            except OAuthTokenError as e:
                raise OAuthTokenError(f"the token endpoint {where} answered an unusable {key}: {e}") from None
    keys = ", ".join(sorted(str(k) for k in doc)[:20]) or "none"
    raise OAuthTokenError(f"the token endpoint {where} answered no access_token (its keys: {keys})")


def request_token(creds: ClientCredentials, context: Optional[ssl.SSLContext] = None,
                  sleep: Any = time.sleep, clock: Any = time.monotonic) -> AccessToken:
    """Fetch an access token (Java's HttpJwtRetriever with its Retry): attempts until one succeeds, an
    unretryable failure, or ``retry_backoff_max_ms`` has passed, waiting ``retry_backoff_ms`` doubled per attempt
    in between. OAuthTokenError with the first failure's cause."""
    end = clock() + creds.retry_backoff_max_ms / 1000.0
    attempt = 0
    first: Optional[str] = None
    while True:
        attempt += 1
        try:
            return _token_from_answer(creds, _post(creds, context))
        except _Unretryable as e:
            first = first or str(e)
            break
        except OSError as e:
            first = first or str(e)
            wait = min(creds.retry_backoff_ms / 1000.0 * 2 ** (attempt - 1), end - clock())
            if wait <= 0:
                break
            log.warning("OAuth token request %d failed (%s); trying again in %.0f ms", attempt, e, wait * 1000)
            sleep(wait)
    raise OAuthTokenError(f"no OAuth access token after {attempt} attempt{'s' if attempt > 1 else ''}: {first}")


def refresh_time(now: float, token: AccessToken, creds: ClientCredentials,
                 rng: Optional[random.Random] = None) -> float:
    """When to fetch the next token (seconds since the epoch), as Java's ExpiringCredentialRefreshingLogin.refreshMs:
    at ``window factor + jitter * random`` of the token's lifetime (from its ``iat``, else from ``now``), but not
    later than ``buffer`` seconds before it expires nor sooner than ``min period`` seconds from ``now``; when the
    rest of the lifetime is shorter than those two together, at that fraction of the rest."""
    pct = creds.refresh_window_factor + creds.refresh_window_jitter * (rng or random).random()
    expiry = token.expiry
    if now > expiry:
        return now + RETRY_AFTER_FAILED_REFRESH_S
    if now + creds.refresh_min_period_s + creds.refresh_buffer_s > expiry:
        return now + (expiry - now) * pct
    start = token.issued_at if token.issued_at is not None else now
    proposed = start + (expiry - start) * pct
    if proposed > expiry - creds.refresh_buffer_s:
        return expiry - creds.refresh_buffer_s
    return max(proposed, now + creds.refresh_min_period_s)


class ClientCredentialsLogin:
    """The OAUTHBEARER token provider of a producer with client credentials: :meth:`token` returns the current
    token and its expiry (as ``sasl_oauth_token_provider`` does) without ever waiting. :meth:`start` fetches the
    first token and starts the refresher thread; :meth:`close` stops it."""

    def __init__(self, creds: ClientCredentials, ssl_context: Optional[ssl.SSLContext] = None, *,
                 name: str = "kproducer", rng: Optional[random.Random] = None) -> None:
        self.creds = creds
        self._context = ssl_context
        self._name = name
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._token: Optional[AccessToken] = None
        self._last_error: Optional[str] = None
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None
        #: tokens fetched so far (the first included)
        self.fetches = 0
        #: when the refresher fetches next (seconds since the epoch)
        self.next_refresh: Optional[float] = None

    def start(self) -> "ClientCredentialsLogin":
        """Fetch the first token (here, on the caller's thread) and start the refresher; OAuthTokenError when no
        token can be had."""
        self._store(request_token(self.creds, self._context))
        thread = threading.Thread(target=self._refresh_loop, name=f"kproducer-oauth-refresh | {self._name}",
                                  daemon=True)
        self._thread = thread
        thread.start()
        return self

    def _store(self, token: AccessToken) -> None:
        now = time.time()
        if token.expiry <= now:
            raise OAuthTokenError(f"the token endpoint {safe_url(self.creds.token_endpoint_url)} answered a token "
                                  f"that expired {now - token.expiry:.0f} s ago (check this host's clock)")
        with self._lock:
            self._token = token
            self._last_error = None
            self.fetches += 1
        log.info("OAuth access token for %s fetched (principal %s, expires in %.0f s)", self.creds.client_id,
                 token.principal, token.expiry - now)

    def token(self) -> Tuple[str, float]:
        """The current token and its expiry (seconds since the epoch). OAuthTokenError when it has expired and no
        new one could be fetched (saying why)."""
        with self._lock:
            current, error = self._token, self._last_error
        if current is None:
            raise OAuthTokenError("no OAuth access token yet: ClientCredentialsLogin.start() was not called")
        if current.expiry <= time.time():
            raise OAuthTokenError(f"the OAuth access token expired and no new one could be fetched: "
                                  f"{error or 'the refresh has not run yet'}")
        return current.value, current.expiry

    @property
    def current(self) -> Optional[AccessToken]:
        with self._lock:
            return self._token

    def _refresh_loop(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                token = self._token
            assert token is not None
            now = time.time()
            at = refresh_time(now, token, self.creds, self._rng)
            self.next_refresh = at
            log.debug("next OAuth token refresh in %.1f s", at - now)
            if self._closed.wait(max(0.0, at - now)):
                return
            while not self._closed.is_set():
                try:
                    self._store(request_token(self.creds, self._context, sleep=self._sleep))
                    break
                except OAuthTokenError as e:
                    with self._lock:
                        self._last_error = str(e)
                    log.warning("refreshing the OAuth access token failed (trying again in %.0f s; the current token "
                                "expires in %.0f s): %s", RETRY_AFTER_FAILED_REFRESH_S, token.expiry - time.time(), e)
                    if self._closed.wait(RETRY_AFTER_FAILED_REFRESH_S):
                        return
                except Exception:  # a bug must not end the refresher silently
                    log.exception("unexpected error refreshing the OAuth access token")
                    if self._closed.wait(RETRY_AFTER_FAILED_REFRESH_S):
                        return

    def _sleep(self, seconds: float) -> None:
        self._closed.wait(seconds)

    def close(self) -> None:
        """Stop the refresher thread (the current token stays readable)."""
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def __repr__(self) -> str:
        return f"ClientCredentialsLogin({self.creds!r}, fetches={self.fetches})"


__all__ = ["AccessToken", "ClientCredentials", "ClientCredentialsLogin", "OAuthTokenError", "parse_access_token",
           "refresh_time", "request_token", "safe_url"]
