"""SASL/OAUTHBEARER with OAuth 2.0 client credentials (OIDC), issue 28 item 9.

Java's settings (``sasl.oauthbearer.token.endpoint.url`` with ``sasl.login.callback.handler.class`` and the JAAS
options ``clientId``/``clientSecret``/``scope``, or Kafka 4.x's ``sasl.oauthbearer.client.credentials.*``) and
librdkafka's (``sasl.oauthbearer.method=oidc``, ``.client.id``, ``.client.secret``, ``.scope``,
``.token.endpoint.url``) were refused as unknown settings. Here: the settings, the token request against a local
identity provider (tests/oauth_idp.py: http and https), its retries and typed errors, the refresh before expiry off
the network thread (Java's sasl.login.refresh.* arithmetic), and a producer authenticating to the mock cluster,
whose OAUTHBEARER checks the signed JWT against the provider's JWKS (kproducer.mock.security.JwtValidator).
"""
from __future__ import annotations

import base64
import logging
import random
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator

import pytest

from kproducer import Producer
from kproducer.config import ProducerConfig
from kproducer.errors import AuthenticationError, ConfigError, SaslAuthenticationFailedError
from kproducer.mock import MockCluster
from kproducer.mock.security import JwtValidator
from kproducer.oauth import (
    AccessToken,
    ClientCredentials,
    ClientCredentialsLogin,
    OAuthTokenError,
    parse_access_token,
    refresh_time,
    request_token,
)
from kproducer.security import channel_security, oauth_ssl_context
from tests.oauth_idp import IdentityProvider, jwks, other_rsa_key, sign_jwt

pytest.importorskip("cryptography", reason="the test identity provider signs JWTs with cryptography")

SECRET = "cl1ent-S3cret+/=never-logged"
CLIENT = "producer-app"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
BASE: Dict[str, Any] = {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_PLAINTEXT"}
#: a bound for waits that should end in well under a second (the suite may run beside a CPU load)
WAIT_S = 30.0


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider({CLIENT: SECRET}) as provider:
        yield provider


def creds(url: str, **more: Any) -> ClientCredentials:
    more.setdefault("retry_backoff_ms", 10)
    more.setdefault("retry_backoff_max_ms", 300)
    return ClientCredentials(url, CLIENT, SECRET, **more)


def no_secret(text: str) -> None:
    assert SECRET not in text
    assert base64.b64encode(f"{CLIENT}:{SECRET}".encode()).decode() not in text


# -- the settings, in each spelling ---------------------------------------------------------------------


def test_java_settings_with_the_jaas_options(idp: IdentityProvider) -> None:
    cfg = ProducerConfig(BASE, **{
        "sasl.mechanism": "OAUTHBEARER", "sasl.login.callback.handler.class": HANDLER,
        "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.jaas.config": f'{MODULE} required clientId="{CLIENT}" clientSecret="{SECRET}" scope="kafka.write" '
                            'extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";'})
    login = cfg.sasl_login
    assert login is not None and login.oauth is not None
    assert login.oauth.client_id == CLIENT and login.oauth.scope == "kafka.write"
    assert login.oauth.token_endpoint_url == idp.token_url
    assert login.extensions == {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}
    no_secret(repr(login) + repr(login.oauth) + repr(cfg))


def test_java_4_settings_win_over_the_jaas_options(idp: IdentityProvider, caplog: pytest.LogCaptureFixture) -> None:
    cfg = ProducerConfig(BASE, **{
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.oauthbearer.client.credentials.client.id": CLIENT,
        "sasl.oauthbearer.client.credentials.client.secret": SECRET, "sasl.oauthbearer.scope": "a b",
        "sasl.jaas.config": f'{MODULE} required clientId="someone-else";'})
    assert cfg.sasl_login is not None and cfg.sasl_login.oauth is not None
    assert cfg.sasl_login.oauth.client_id == CLIENT and cfg.sasl_login.oauth.scope == "a b"
    assert any("clientId" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.parametrize("separator", [".", "_"])
def test_librdkafka_settings(idp: IdentityProvider, separator: str) -> None:
    def name(dotted: str) -> str:
        return dotted.replace(".", separator)

    cfg = ProducerConfig(BASE, **{
        name("sasl.mechanisms"): "OAUTHBEARER", name("sasl.oauthbearer.method"): "oidc",
        name("sasl.oauthbearer.client.id"): CLIENT, name("sasl.oauthbearer.client.secret"): SECRET,
        name("sasl.oauthbearer.scope"): "kafka", name("sasl.oauthbearer.token.endpoint.url"): idp.token_url,
        name("sasl.oauthbearer.extensions"): "logicalCluster=lkc-1"})
    login = cfg.sasl_login
    assert login is not None and login.oauth is not None
    assert (login.oauth.client_id, login.oauth.scope) == (CLIENT, "kafka")
    assert login.extensions == {"logicalCluster": "lkc-1"}


def test_the_mechanism_follows_from_the_oauth_settings(idp: IdentityProvider) -> None:
    cfg = ProducerConfig(BASE, **{"sasl.oauthbearer.method": "OIDC", "sasl.oauthbearer.client.id": CLIENT,
                                  "sasl.oauthbearer.client.secret": SECRET,
                                  "sasl.oauthbearer.token.endpoint.url": idp.token_url})
    assert cfg.sasl_mechanism == "OAUTHBEARER"


@pytest.mark.parametrize("settings, message", [
    ({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET}, "sasl.oauthbearer.token.endpoint.url"),
    ({"sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token", "sasl.oauthbearer.client.id": CLIENT},
     "client secret"),
    ({"sasl.oauthbearer.token.endpoint.url": "file:///tmp/token.jwt", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET}, "sasl_oauth_token_provider"),
    ({"sasl.login.callback.handler.class": "com.example.MyHandler"}, "cannot load Java classes"),
    ({"sasl.oauthbearer.method": "default", "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/t"},
     "set it to oidc"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
      "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/t"}, "need sasl.mechanism=OAUTHBEARER"),
    ({"sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/t", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET, "sasl_oauth_token_provider": lambda: "t"}, "give one"),
    ({"sasl.login.refresh.window.factor": "0.3"}, "between 0.5 and 1.0"),
    ({"sasl.login.retry.backoff.ms": "500", "sasl.login.retry.backoff.max.ms": "100",
      "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/t", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET}, "sasl.login.retry.backoff.max.ms"),
])
def test_incomplete_or_contradictory_oauth_settings(settings: Dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig(BASE, **{"sasl.mechanism": "OAUTHBEARER", **settings})
    assert message in str(info.value)
    no_secret(str(info.value))


# -- one token request ----------------------------------------------------------------------------------


def test_a_token_request_is_javas_client_credentials_post(idp: IdentityProvider) -> None:
    token = request_token(creds(idp.token_url, scope="kafka.write"))
    (req,) = idp.token_requests()
    assert req["form"] == {"grant_type": "client_credentials", "scope": "kafka.write"}
    assert req["content_type"] == "application/x-www-form-urlencoded"
    assert req["authorization"] == "Basic " + base64.b64encode(f"{CLIENT}:{SECRET}".encode()).decode()
    assert token.value == idp.issued[-1] and token.principal == CLIENT and token.scope == ("kafka.write",)
    assert token.expiry > time.time() + 3000
    no_secret(repr(token))
    assert token.value not in repr(token)


def test_urlencoded_basic_authentication(idp: IdentityProvider) -> None:
    request_token(creds(idp.token_url, urlencode_header=True))
    (req,) = idp.token_requests()
    encoded = f"{urllib.parse.quote_plus(CLIENT)}:{urllib.parse.quote_plus(SECRET)}"
    assert req["authorization"] == "Basic " + base64.b64encode(encoded.encode()).decode()
    assert req["status"] == 200


def test_refused_credentials_fail_at_once_without_retries(idp: IdentityProvider,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kproducer")
    bad = ClientCredentials(idp.token_url, CLIENT, "wrong-" + SECRET, retry_backoff_ms=10, retry_backoff_max_ms=5000)
    with pytest.raises(OAuthTokenError) as info:
        request_token(bad)
    assert isinstance(info.value, AuthenticationError)
    assert "HTTP 401" in str(info.value) and "invalid_client" in str(info.value)
    assert "check the client id and secret" in str(info.value)
    assert len(idp.token_requests()) == 1
    no_secret(str(info.value) + caplog.text)


def test_a_server_error_is_retried_with_backoff(idp: IdentityProvider, caplog: pytest.LogCaptureFixture) -> None:
    idp.fail_next(503, count=2)
    token = request_token(creds(idp.token_url, retry_backoff_max_ms=5000))
    assert [r["status"] for r in idp.token_requests()] == [503, 503, 200]
    assert token.principal == CLIENT
    assert sum("OAuth token request" in r.getMessage() for r in caplog.records) == 2
    no_secret(caplog.text)


def test_an_unreachable_endpoint_fails_typed_after_the_retry_budget() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(OAuthTokenError) as info:
        request_token(creds(f"http://127.0.0.1:{port}/token", retry_backoff_max_ms=200))
    assert "cannot reach the token endpoint" in str(info.value)
    assert time.monotonic() - start < WAIT_S


@pytest.mark.parametrize("claims, message", [
    ({"exp": 4e9}, "no principal"),
    ({"sub": "x"}, "no numeric 'exp'"),
    ({"sub": "x", "exp": 4e9, "iat": "yesterday"}, "'iat'"),
    ({"sub": "x", "exp": 4e9, "scope": ["ok", ""]}, "empty or non-string scope"),
])
def test_the_token_is_checked_as_javas_client_validator(claims: Dict[str, Any], message: str) -> None:
    with pytest.raises(OAuthTokenError, match=message):
        parse_access_token(sign_jwt(claims))


def test_the_principal_claim_name_is_a_setting() -> None:
    token = parse_access_token(sign_jwt({"client_id": "app", "exp": 4e9, "roles": ["a", "b"]}),
                               sub_claim_name="client_id", scope_claim_name="roles")
    assert token.principal == "app" and token.scope == ("a", "b")
    with pytest.raises(OAuthTokenError, match="not a JWT"):
        parse_access_token("opaque-token")


def test_an_answer_without_a_token_names_its_keys_only(idp: IdentityProvider) -> None:
    idp.fail_next(200, body=b'{"refresh_token":"r-secret","token_type":"Bearer"}')
    with pytest.raises(OAuthTokenError) as info:
        request_token(creds(idp.token_url))
    assert "no access_token" in str(info.value) and "refresh_token" in str(info.value)
    assert "r-secret" not in str(info.value)


# -- https ------------------------------------------------------------------------------------------------


@pytest.fixture
def https_idp() -> Iterator[IdentityProvider]:
    with IdentityProvider({CLIENT: SECRET}, tls=True) as provider:
        yield provider


@pytest.mark.parametrize("how", ["librdkafka-location", "librdkafka-pem", "jaas"])
def test_an_https_endpoint_with_its_ca(https_idp: IdentityProvider, how: str) -> None:
    settings: Dict[str, Any] = {"sasl.mechanism": "OAUTHBEARER",
                                "sasl.oauthbearer.token.endpoint.url": https_idp.token_url}
    if how == "librdkafka-location":
        settings.update({"https.ca.location": https_idp.ca_file, "sasl.oauthbearer.client.id": CLIENT,
                         "sasl.oauthbearer.client.secret": SECRET})
    elif how == "librdkafka-pem":
        settings.update({"https.ca.pem": https_idp.ca_pem, "sasl.oauthbearer.client.id": CLIENT,
                         "sasl.oauthbearer.client.secret": SECRET})
    else:
        settings.update({"sasl.login.callback.handler.class": HANDLER,
                         "sasl.jaas.config": f'{MODULE} required clientId="{CLIENT}" clientSecret="{SECRET}" '
                                             f'ssl.truststore.type="PEM" ssl.truststore.location="{https_idp.ca_file}";'})
    login = ProducerConfig(BASE, **settings).sasl_login
    assert login is not None and login.oauth is not None
    token = request_token(login.oauth, oauth_ssl_context(login.oauth))
    assert token.principal == CLIENT


def test_an_https_endpoint_whose_certificate_does_not_verify(https_idp: IdentityProvider) -> None:
    c = creds(https_idp.token_url, retry_backoff_max_ms=5000)
    with pytest.raises(OAuthTokenError) as info:
        request_token(c, oauth_ssl_context(c))  # the system's CAs: not this test CA
    assert "TLS with the token endpoint" in str(info.value) and "certificate verify failed" in str(info.value)
    assert https_idp.token_requests() == []


# -- the refresh ------------------------------------------------------------------------------------------


def _token(iat: float, exp: float) -> AccessToken:
    return AccessToken("t", exp, iat, "p", ())


@pytest.mark.parametrize("iat, exp, now, expected", [
    # an hour's token: 80 % of its lifetime (no jitter here)
    (0, 3600, 0, 2880),
    # the refresh would fall into the buffer (300 s before expiry): at the buffer's start
    (0, 1200, 0, 900),
    # sooner than the minimum period (60 s from now): then
    (0, 10000, 7990, 8050),
    # a lifetime shorter than minimum period + buffer: 80 % of what is left
    (0, 200, 0, 160),
    (0, 200, 100, 180),
])
def test_refresh_time_is_javas(iat: float, exp: float, now: float, expected: float) -> None:
    c = creds("http://127.0.0.1:1/t", refresh_window_jitter=0.0)
    assert refresh_time(now, _token(iat, exp), c) == pytest.approx(expected)


def test_refresh_time_jitter_stays_in_its_window() -> None:
    c = creds("http://127.0.0.1:1/t", refresh_window_factor=0.8, refresh_window_jitter=0.05,
              refresh_min_period_s=0, refresh_buffer_s=0)
    rng = random.Random(7)
    times = [refresh_time(0, _token(0, 1000), c, rng) for _ in range(200)]
    assert 800 <= min(times) < max(times) <= 850


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        time.sleep(0.05)


def test_the_token_is_refreshed_before_it_expires_off_the_caller_thread(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kproducer")
    with IdentityProvider({CLIENT: SECRET}, lifetime_s=3) as idp:
        login = ClientCredentialsLogin(creds(idp.token_url)).start()
        try:
            first, first_expiry = login.token()
            assert login.fetches == 1 and len(idp.token_requests()) == 1
            # reading the token never asks the endpoint
            for _ in range(100):
                assert login.token()[0] == first
            assert len(idp.token_requests()) == 1
            _wait_for(lambda: login.next_refresh is not None, "the refresher's plan")
            assert login.next_refresh is not None and login.next_refresh < first_expiry
            _wait_for(lambda: login.fetches >= 2, "the refresh")
            second, second_expiry = login.token()
            assert second != first and second_expiry > first_expiry
            refresher = [t for t in threading.enumerate() if t.name.startswith("kproducer-oauth-refresh")]
            assert refresher and all(t.daemon for t in refresher)
        finally:
            login.close()
        assert not any(t.name.startswith("kproducer-oauth-refresh") and t.is_alive() for t in threading.enumerate())
    no_secret(caplog.text)
    assert first not in caplog.text and second not in caplog.text


def test_a_failing_refresh_keeps_the_token_and_says_why_once_it_expired(caplog: pytest.LogCaptureFixture) -> None:
    with IdentityProvider({CLIENT: SECRET}, lifetime_s=2) as idp:
        login = ClientCredentialsLogin(creds(idp.token_url)).start()
        try:
            idp.fail_next(401, count=100, body=b'{"error":"invalid_client","error_description":"revoked"}')
            token, expiry = login.token()
            _wait_for(lambda: any("refreshing the OAuth access token failed" in r.getMessage()
                                  for r in caplog.records), "the failed refresh")
            if time.time() < expiry:
                assert login.token()[0] == token  # still the old one
            _wait_for(lambda: time.time() > expiry, "the token's expiry")
            with pytest.raises(OAuthTokenError) as info:
                login.token()
            assert "expired" in str(info.value) and "revoked" in str(info.value)
        finally:
            login.close()
    no_secret(caplog.text)


# -- a producer, against the mock cluster with signed tokens -------------------------------------------


def _oidc_producer_settings(cluster: MockCluster, idp: IdentityProvider, **more: Any) -> Dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": CLIENT, "sasl.oauthbearer.client.secret": SECRET,
            "sasl.oauthbearer.token.endpoint.url": idp.token_url, "sasl.oauthbearer.scope": "kafka.write",
            "max.block.ms": 30000, **more}


def test_a_producer_authenticates_with_a_fetched_token(idp: IdentityProvider,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kproducer")
    validator = JwtValidator(jwks(), expected_audience="kafka", expected_issuer=idp.issuer)
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["OAUTHBEARER"],
                     oauthbearer_validator=validator) as cluster:
        cluster.create_topic("t", 2)
        with Producer(_oidc_producer_settings(cluster, idp)) as producer:
            futures = [producer.send("t", f"v{i}".encode(), key=b"k%d" % (i % 5)) for i in range(100)]
            for f in futures:
                f.get(WAIT_S)
            producer.close(10)
        values = sorted(bytes(r.value or b"") for p in (0, 1) for r in cluster.records("t", p))
        assert values == sorted(f"v{i}".encode() for i in range(100))
        assert validator.accepted >= 1 and validator.refused == 0
        assert cluster.auth_stats["failures"] == 0
    assert not any(t.name.startswith("kproducer-oauth-refresh") and t.is_alive() for t in threading.enumerate())
    no_secret(caplog.text)
    assert all(token not in caplog.text for token in idp.issued)


def test_the_mock_refuses_a_token_it_cannot_verify(idp: IdentityProvider) -> None:
    validator = JwtValidator(jwks(), expected_audience="kafka")
    now = int(time.time())
    good = {"sub": "app", "iat": now, "exp": now + 600, "aud": "kafka"}
    assert validator(sign_jwt(good))[0] == "app"
    for token, why in [(sign_jwt(good, key=other_rsa_key()), "signature"),
                       (sign_jwt(dict(good, aud="other")), "audience"),
                       (sign_jwt(dict(good, exp=now - 60)), "expired"),
                       (sign_jwt({k: v for k, v in good.items() if k != "iat"}), "'iat'"),
                       (sign_jwt(good, kid="unknown"), "key id"),
                       ("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhcHAifQ.", "algorithm")]:
        with pytest.raises(ValueError, match=why):
            validator(token)
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["OAUTHBEARER"],
                     oauthbearer_validator=validator) as cluster:
        cluster.create_topic("t", 1)
        settings = {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "OAUTHBEARER", "max.block.ms": 30000,
                    "sasl_oauth_token_provider": lambda: sign_jwt(dict(good, aud="other"))}
        with Producer(settings) as producer:
            # the broker's answer as Apache Kafka gives it (tests/apache_kafka/test_oidc_ak.py): the JSON error
            with pytest.raises(SaslAuthenticationFailedError, match='OAUTHBEARER.*{"status":"invalid_token"}'):
                producer.send("t", b"v").get(WAIT_S)
            producer.close(5)


def test_tokens_are_renewed_for_kip368_reauthentication(caplog: pytest.LogCaptureFixture) -> None:
    """4-second tokens, a 2-second session: the producer keeps delivering on re-authenticated connections, each
    time with a token the broker accepts as unexpired (1 s of clock skew allowed, not Kafka's 30), fetched by the
    refresher."""
    with IdentityProvider({CLIENT: SECRET}, lifetime_s=4) as idp:
        validator = JwtValidator(jwks(), expected_audience="kafka", clock_skew_s=1)
        with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["OAUTHBEARER"],
                         session_lifetime_ms=2000, oauthbearer_validator=validator) as cluster:
            cluster.create_topic("t", 1)
            with Producer(_oidc_producer_settings(cluster, idp)) as producer:
                sent = 0
                deadline = time.monotonic() + WAIT_S
                while (len(idp.issued) < 3 or cluster.auth_stats["reauthentications"] < 2) \
                        and time.monotonic() < deadline:
                    producer.send("t", b"r%d" % sent).get(WAIT_S)
                    sent += 1
                    time.sleep(0.1)
                producer.close(10)
            assert len(idp.issued) >= 3, "the refresher did not fetch new tokens"
            assert cluster.auth_stats["reauthentications"] >= 2
            assert cluster.auth_stats["failures"] == 0 and validator.refused == 0
            assert len(cluster.records("t", 0)) == sent
    no_secret(caplog.text)


def test_a_producer_whose_credentials_are_refused_fails_at_creation(idp: IdentityProvider) -> None:
    settings = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
                "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT,
                "sasl.oauthbearer.client.secret": "wrong", "sasl.oauthbearer.token.endpoint.url": idp.token_url}
    with pytest.raises(OAuthTokenError) as info:
        Producer(settings)
    assert "HTTP 401" in str(info.value)
    assert not any(t.name.startswith("kproducer-oauth-refresh") and t.is_alive() for t in threading.enumerate())


def test_channel_security_closes_the_refresher(idp: IdentityProvider) -> None:
    cfg = ProducerConfig(BASE, **{"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT,
                                  "sasl.oauthbearer.client.secret": SECRET,
                                  "sasl.oauthbearer.token.endpoint.url": idp.token_url})
    security = channel_security(cfg)
    assert security.sasl_mechanism == "OAUTHBEARER"
    client = security.sasl_client_factory("127.0.0.1") if security.sasl_client_factory else None
    assert client is not None and idp.issued[-1].encode() in client.initial_response()
    no_secret(repr(security))
    security.close()
    assert not any(t.name.startswith("kproducer-oauth-refresh") and t.is_alive() for t in threading.enumerate())


def test_a_producer_that_fails_after_its_first_token_stops_the_refresher(
        idp: IdentityProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first token is fetched (and its refresher thread started) early in Producer(); a failure later in the
    constructor must not leave that thread running for the life of the process."""
    from kproducer.producer import kafka_producer

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a failure after the token was fetched")

    monkeypatch.setattr(kafka_producer, "wire_producer", broken)
    settings = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
                "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT,
                "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.token.endpoint.url": idp.token_url}
    before = {t for t in threading.enumerate() if t.name.startswith("kproducer-oauth-refresh")}
    with pytest.raises(RuntimeError, match="after the token was fetched"):
        Producer(settings)
    assert len(idp.issued) == 1  # (the token was fetched: the refresher had started)
    left = [t for t in threading.enumerate()
            if t.name.startswith("kproducer-oauth-refresh") and t.is_alive() and t not in before]
    assert left == [], "the OAuth refresher of the failed producer still runs"
