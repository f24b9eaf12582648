"""Issue 30 item 7: a SASL client against a listener without SASL is told so ("the broker's listener does
not speak SASL: check security.protocol"), whichever way the broker answers the SaslHandshake."""
from __future__ import annotations

from kproducer.errors import AuthenticationError
from kproducer.network.sasl_authenticator import SaslAuthenticator
from kproducer.protocol import messages as m

VERSIONS = {m.SASL_HANDSHAKE.key: (0, 1), m.SASL_AUTHENTICATE.key: (0, 2)}


def _handshake_answer(body: dict) -> AuthenticationError:  # type: ignore[type-arg]
    auth = SaslAuthenticator("PLAIN", lambda host: None, "127.0.0.1", "127.0.0.1:9092", VERSIONS)  # type: ignore[arg-type, return-value]
    assert auth.first_request() is not None
    assert auth.on_response(m.SASL_HANDSHAKE, body) is None
    assert auth.error is not None
    return auth.error


def test_illegal_sasl_state_to_the_first_handshake_means_no_sasl_on_the_listener() -> None:
    # Apache Kafka's KafkaApis.handleSaslHandshakeRequest on a PLAINTEXT or SSL listener
    error = _handshake_answer({"error_code": 34, "mechanisms": []})
    text = str(error)
    assert "broker 127.0.0.1:9092" in text
    assert "listener does not speak SASL" in text and "check security.protocol" in text
    assert "ILLEGAL_SASL_STATE" in text


def test_a_refusal_of_a_mechanism_the_broker_lists_as_enabled_means_no_sasl_on_the_listener() -> None:
    # tansu without authentication: UNSUPPORTED_SASL_MECHANISM, "enabled: PLAIN"
    error = _handshake_answer({"error_code": 33, "mechanisms": ["PLAIN"]})
    text = str(error)
    assert "does not enable SASL mechanism PLAIN (it enables: PLAIN)" not in text
    assert "listener does not speak SASL" in text and "check security.protocol" in text


def test_a_mechanism_the_broker_does_not_enable_is_still_named() -> None:
    error = _handshake_answer({"error_code": 33, "mechanisms": ["SCRAM-SHA-512"]})
    assert "does not enable SASL mechanism PLAIN (it enables: SCRAM-SHA-512)" in str(error)
