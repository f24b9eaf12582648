"""OAUTHBEARER with OAuth client credentials (OIDC) against Apache Kafka, issue 28 item 9.

A local identity provider (tests/oauth_idp.py) issues RS256 JWTs at its token endpoint and serves their JWKS; the
broker validates them with Kafka's own ``OAuthBearerValidatorCallbackHandler`` against that JWKS (expected audience
and issuer; Kafka 4.x fetches only URLs listed in the JVM system property
``org.apache.kafka.sasl.oauthbearer.allowed.urls``, given with ``ApacheKafka(jvm_options=...)``). kproducer fetches
its tokens with the client credentials grant (librdkafka's and Java's settings), refreshes them before they expire,
and re-authenticates (KIP-368) with the fresh ones. The authorizer is on: the token's ``sub`` (the client id) is the
principal, allowed to write by an ACL. Records are read back with kafka-python over PLAINTEXT.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Iterator, List

import pytest

from kproducer import Producer
from kproducer.errors import SaslAuthenticationFailedError
from tests.conftest import start_apache_kafka
from tests.oauth_idp import IdentityProvider, other_rsa_key, sign_jwt
from tests.readback import consume
from tests.tansu import topic_name

pytestmark = [pytest.mark.apache_kafka,
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]
pytest.importorskip("cryptography", reason="the test identity provider signs JWTs with cryptography")

CLIENT, SECRET = "producer-app", "cl1ent-S3cret+/=never-logged"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
BROKER_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider({CLIENT: SECRET}) as provider:
        yield provider


@pytest.fixture(scope="module")
def kafka(idp: IdentityProvider) -> Iterator[Any]:
    cluster = start_apache_kafka(
        brokers=1, listeners=("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"), authorizer=True,
        jvm_options=[f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.jwks_url},{idp.token_url}"],
        broker_config={
            # SASL_PLAINTEXT: the JWT's signature (JWKS), audience and issuer are checked
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "listener.name.sasl_plaintext.sasl.oauthbearer.jwt.validator.class": BROKER_VALIDATOR,
            # SASL_SSL: the same handler with Kafka 4.1's default validator (see test_the_default_validator...)
            "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
            "sasl.oauthbearer.expected.audience": idp.audience,
            "sasl.oauthbearer.expected.issuer": idp.issuer,
            "connections.max.reauth.ms": "5000",
        })
    try:
        for operation in ("Write", "Describe"):
            cluster.add_acl(f"User:{CLIENT}", operation, topic="*")
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def topic(kafka: Any) -> str:
    name = topic_name("oidc")
    kafka.create_topic(name, partitions=2, replication_factor=1)
    return name


def librdkafka_settings(kafka: Any, idp: IdentityProvider) -> Dict[str, Any]:
    return {"bootstrap.servers": kafka.bootstrap_servers_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT,
            "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.scope": "kafka.write",
            "sasl.oauthbearer.token.endpoint.url": idp.token_url, "max.block.ms": 30000}


def java_settings(kafka: Any, idp: IdentityProvider) -> Dict[str, Any]:
    return {"bootstrap.servers": kafka.bootstrap_servers_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.login.callback.handler.class": HANDLER,
            "sasl.oauthbearer.token.endpoint.url": idp.token_url, "max.block.ms": 30000,
            "sasl.jaas.config": f'{MODULE} required clientId="{CLIENT}" clientSecret="{SECRET}" scope="kafka.write" '
                                'extension_traceId="kproducer-test";'}


def produce_and_read_back(kafka: Any, settings: Dict[str, Any], topic: str, count: int = 100) -> None:
    values = [f"v{i}".encode() for i in range(count)]
    with Producer(settings) as producer:
        futures = [producer.send(topic, v, key=b"k%d" % (i % 7)) for i, v in enumerate(values)]
        for f in futures:
            f.get(WAIT_S)
        producer.close(10)
    got = consume(kafka.bootstrap_servers, topic, [0, 1], expected=count)
    assert sorted(m.value for m in got) == sorted(values)


@pytest.mark.parametrize("spelling", ["librdkafka", "java"])
def test_produce_with_client_credentials(kafka: Any, idp: IdentityProvider, topic: str, spelling: str,
                                         caplog: pytest.LogCaptureFixture) -> None:
    before = len(idp.issued)
    settings = librdkafka_settings(kafka, idp) if spelling == "librdkafka" else java_settings(kafka, idp)
    produce_and_read_back(kafka, settings, topic)
    assert len(idp.issued) == before + 1
    assert SECRET not in caplog.text and idp.issued[-1] not in caplog.text


@pytest.mark.parametrize("forgery", ["audience", "signature"])
def test_a_token_the_broker_does_not_accept(kafka: Any, idp: IdentityProvider, topic: str, forgery: str) -> None:
    """A token for another audience, or signed by a key not in the JWKS: the broker's validator refuses it, and the
    producer says so (SaslAuthenticationFailedError) instead of waiting for max.block.ms."""
    settings = librdkafka_settings(kafka, idp)
    if forgery == "audience":
        idp.audience = "not-kafka"
    else:
        settings = forged_token_settings(kafka, "SASL_PLAINTEXT")
    try:
        with Producer(settings) as producer:
            # Kafka's OAuthBearerSaslServer answers with the JSON error (the mock cluster does the same)
            with pytest.raises(SaslAuthenticationFailedError, match='OAUTHBEARER.*{"status":"invalid_token"}'):
                producer.send(topic, b"v").get(WAIT_S)
            producer.close(5)
    finally:
        idp.audience = "kafka"


def forged_token_settings(kafka: Any, listener: str) -> Dict[str, Any]:
    """A token provider of a forger: an RS256 JWT for our client, signed with a key the JWKS does not have."""
    now = int(time.time())
    forged = sign_jwt({"sub": CLIENT, "iat": now, "exp": now + 600, "aud": "kafka", "iss": "https://idp.test"},
                      key=other_rsa_key())
    settings: Dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers_for(listener),
                                "security.protocol": listener, "sasl.mechanism": "OAUTHBEARER",
                                "sasl_oauth_token_provider": lambda: (forged, now + 600), "max.block.ms": 30000}
    if listener == "SASL_SSL":
        settings["ssl.truststore.location"] = kafka.ssl_ca_location
    return settings


def test_the_default_validator_of_apache_kafka_4_1_checks_no_signature(kafka: Any, topic: str) -> None:
    """What Apache Kafka 4.1.0 does with OAuthBearerValidatorCallbackHandler and no sasl.oauthbearer.jwt.validator.class:
    its DefaultJwtValidator, made without a key resolver, delegates to ClientJwtValidator, which checks claims but
    not the signature, the audience or the issuer: a forged token authenticates. kproducer's mock cluster
    (JwtValidator) always checks them, as BrokerJwtValidator does. Recorded here so that a change in Kafka shows."""
    with Producer(forged_token_settings(kafka, "SASL_SSL")) as producer:
        try:
            producer.send(topic, b"forged").get(WAIT_S)
            accepted = True
        except SaslAuthenticationFailedError:
            accepted = False
        producer.close(5)
    if kafka.version == "4.1.0":
        assert accepted, "Apache Kafka 4.1.0's default validator refused the forged token: update docs/security.md"
    elif accepted:
        assert kafka.version.startswith("4.1."), f"Apache Kafka {kafka.version} accepted a forged token"


def test_tokens_are_refreshed_and_used_to_reauthenticate(kafka: Any, idp: IdentityProvider, topic: str) -> None:
    """5-second tokens: the refresher fetches new ones before each expires, and the connection re-authenticates
    (KIP-368; the broker ends a session when its token expires) with them; every record is delivered."""
    idp.lifetime_s = 5
    try:
        before = len(idp.issued)
        sent: List[bytes] = []
        with Producer(librdkafka_settings(kafka, idp)) as producer:
            deadline = time.monotonic() + WAIT_S
            while len(idp.issued) < before + 3 and time.monotonic() < deadline:
                value = b"r%d" % len(sent)
                producer.send(topic, value).get(WAIT_S)
                sent.append(value)
                time.sleep(0.2)
            producer.close(10)
        assert len(idp.issued) >= before + 3, "the refresher did not fetch new tokens"
    finally:
        idp.lifetime_s = 3600
    got = consume(kafka.bootstrap_servers, topic, [0, 1], expected=len(sent))
    assert sorted(m.value for m in got) == sorted(sent)
