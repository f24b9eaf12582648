"""The SASL mechanisms of kproducer.protocol.sasl, sans-IO: RFC test vectors, every client against its
server, the failure cases, and that no password or token ever shows in a message or a repr."""
from __future__ import annotations

import base64
import json
import time
from typing import Any, Callable, Dict, List, Optional

import pytest

from kproducer.errors import ConfigError
from kproducer.protocol.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from kproducer.protocol.sasl import (
    SUPPORTED_MECHANISMS,
    OAuthBearerServer,
    SaslClient,
    SaslServer,
    ScramClient,
    ScramServer,
    sasl_client,
    sasl_server,
    scram_escape_username,
    scram_unescape_username,
    unsecured_jwt,
)

PASSWORD = "s3cret-Pa55word"
USERS = {"alice": PASSWORD, "bob": "bob-password-xyz"}
SECRETS = (PASSWORD, "bob-password-xyz", "not-the-password-9")


def run(client: SaslClient, server: SaslServer) -> List[bytes]:
    """Drive one exchange like the network layer does; returns the server's challenges. Raises the
    first AuthenticationError of either side."""
    challenges: List[bytes] = []
    token: Optional[bytes] = client.initial_response()
    while token is not None:
        challenge = server.evaluate_response(token)
        challenges.append(challenge)
        token = client.evaluate_challenge(challenge)
    if not client.complete:
        raise SaslAuthenticationFailedError("the client ended incomplete")
    return challenges


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in str(text)
            assert secret not in repr(text)


def decode_jwt_part(part: str) -> Dict[str, Any]:
    value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    assert isinstance(value, dict)
    return value


def make_jwt(header: Dict[str, Any], claims: Dict[str, Any], signature: str = "") -> str:
    def enc(obj: Dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{enc(header)}.{enc(claims)}.{signature}"


# ------------------------------------------------------------------------------------------ RFC vectors


def test_rfc7677_scram_sha256_vector() -> None:
    c = ScramClient("user", "pencil", hash_name="sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.mechanism == "SCRAM-SHA-256"
    assert c.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.evaluate_challenge(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert not c.complete
    assert c.evaluate_challenge(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert c.complete


def test_rfc5802_scram_sha1_vector() -> None:
    c = ScramClient("user", "pencil", hash_name="sha1", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert c.mechanism == "SCRAM-SHA-1"
    assert c.initial_response() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = c.evaluate_challenge(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert final == b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    assert c.evaluate_challenge(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=") is None
    assert c.complete


def test_rfc5802_vector_server_side() -> None:
    server = ScramServer({"user": "pencil"}, hash_name="sha1", salt=base64.b64decode("QSXCR+Q6sek8bf92"),
                         nonce="3rfcNHYJY1ZVvWVs7j")
    first = server.evaluate_response(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL")
    assert first == b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    final = server.evaluate_response(
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
    assert final == b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="
    assert server.complete and server.authorization_id == "user"


# ------------------------------------------------------------------------------------------ success


def client_for(mechanism: str, password: str = PASSWORD, user: str = "alice",
               token: Optional[str] = None) -> SaslClient:
    if mechanism == "OAUTHBEARER":
        return sasl_client(mechanism, token=token or unsecured_jwt(user))
    return sasl_client(mechanism, username=user, password=password)


@pytest.mark.parametrize("mechanism", SUPPORTED_MECHANISMS)
def test_client_against_server_succeeds(mechanism: str) -> None:
    client = client_for(mechanism)
    server = sasl_server(mechanism, users=USERS)
    assert client.mechanism == server.mechanism == mechanism
    challenges = run(client, server)
    assert client.complete and server.complete
    assert server.authorization_id == "alice"
    assert len(challenges) == (2 if mechanism.startswith("SCRAM") else 1)
    assert challenges[-1].startswith(b"v=") if mechanism.startswith("SCRAM") else challenges[-1] == b""
    assert_no_secret(client, server)
    # both sides refuse to go on after the end
    with pytest.raises(IllegalSaslStateError):
        server.evaluate_response(b"x")
    with pytest.raises(IllegalSaslStateError):
        client.evaluate_challenge(b"")


def test_plain_wire_format() -> None:
    c = sasl_client("PLAIN", username="alice", password=PASSWORD)
    assert c.initial_response() == b"\x00alice\x00" + PASSWORD.encode()
    assert c.evaluate_challenge(b"") is None and c.complete


def test_plain_unexpected_challenge_fails() -> None:
    c = sasl_client("PLAIN", username="alice", password=PASSWORD)
    c.initial_response()
    with pytest.raises(SaslAuthenticationFailedError):
        c.evaluate_challenge(b"what?")
    assert not c.complete


def test_plain_server_accepts_matching_authzid_and_refuses_another() -> None:
    s = sasl_server("PLAIN", users=USERS)
    assert s.evaluate_response(b"alice\x00alice\x00" + PASSWORD.encode()) == b""
    assert s.authorization_id == "alice"
    s = sasl_server("PLAIN", users=USERS)
    with pytest.raises(SaslAuthenticationFailedError, match="authorization id"):
        s.evaluate_response(b"bob\x00alice\x00" + PASSWORD.encode())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_second_user_and_unicode_password(mechanism: str) -> None:
    users = {"bob": "bob-password-xyz", "żółw": "pässwörd-ü"}
    run(client_for(mechanism, user="bob", password="bob-password-xyz"), sasl_server(mechanism, users=users))
    server = sasl_server(mechanism, users=users)
    run(client_for(mechanism, user="żółw", password="pässwörd-ü"), server)
    assert server.authorization_id == "żółw"


def test_scram_higher_iteration_count_works() -> None:
    server = sasl_server("SCRAM-SHA-256", users=USERS, scram_iterations=8192)
    client = client_for("SCRAM-SHA-256")
    first = server.evaluate_response(client.initial_response())
    assert first.endswith(b",i=8192")
    final = client.evaluate_challenge(first)
    assert final is not None
    assert client.evaluate_challenge(server.evaluate_response(final)) is None
    assert client.complete


def test_scram_extensions_reach_the_server() -> None:
    client = sasl_client("SCRAM-SHA-256", username="alice", password=PASSWORD, extensions={"tokenauth": "true"})
    first = client.initial_response()
    assert first.endswith(b",tokenauth=true")
    server = sasl_server("SCRAM-SHA-256", users=USERS)
    server.evaluate_response(first)
    assert isinstance(server, ScramServer) and server.extensions == {"tokenauth": "true"}


def test_scram_random_nonces_differ() -> None:
    a = sasl_client("SCRAM-SHA-256", username="alice", password=PASSWORD).initial_response()
    b = sasl_client("SCRAM-SHA-256", username="alice", password=PASSWORD).initial_response()
    assert a != b and len(a.split(b",r=")[1]) >= 24


# ------------------------------------------------------------------------------------------ username escaping


def test_username_escaping() -> None:
    assert scram_escape_username("a=b,c") == "a=3Db=2Cc"
    assert scram_escape_username("=2C") == "=3D2C"
    assert scram_unescape_username("a=3Db=2Cc") == "a=b,c"
    assert scram_unescape_username("=3D2C") == "=2C"
    with pytest.raises(ValueError):
        scram_unescape_username("a=b")
    c = ScramClient("us=er,x", PASSWORD, nonce="abc")
    assert c.initial_response() == b"n,,n=us=3Der=2Cx,r=abc"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_escaped_username_round_trip(mechanism: str) -> None:
    users = {"us=er,x": PASSWORD}
    server = sasl_server(mechanism, users=users)
    run(client_for(mechanism, user="us=er,x"), server)
    assert server.authorization_id == "us=er,x"


def test_server_refuses_a_bad_escape() -> None:
    s = sasl_server("SCRAM-SHA-256", users={"a=b": PASSWORD})
    with pytest.raises(SaslAuthenticationFailedError, match="escape"):
        s.evaluate_response(b"n,,n=a=b,r=abcdef")


# ------------------------------------------------------------------------------------------ failures


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_fails_on_the_server(mechanism: str) -> None:
    client = client_for(mechanism, password="not-the-password-9")
    server = sasl_server(mechanism, users=USERS)
    with pytest.raises(SaslAuthenticationFailedError) as info:
        run(client, server)
    assert not server.complete and not client.complete
    assert server.authorization_id is None
    assert_no_secret(info.value, client, server)
    with pytest.raises(IllegalSaslStateError):
        server.evaluate_response(b"again")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_unknown_user_fails_on_the_server(mechanism: str) -> None:
    client = client_for(mechanism, user="mallory")
    with pytest.raises(SaslAuthenticationFailedError) as info:
        run(client, sasl_server(mechanism, users=USERS))
    assert_no_secret(info.value, client)


def test_plain_gives_the_same_message_for_unknown_user_and_wrong_password() -> None:
    msgs = []
    for user, pw in (("mallory", PASSWORD), ("alice", "not-the-password-9")):
        with pytest.raises(SaslAuthenticationFailedError) as info:
            run(client_for("PLAIN", user=user, password=pw), sasl_server("PLAIN", users=USERS))
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1]


@pytest.mark.parametrize("message", [b"", b"alice\x00" + PASSWORD.encode(), b"\x00alice\x00", b"\x00\x00x",
                                     b"\x00alice\x00pw\x00extra", b"\x00al\xffice\x00pw"])
def test_plain_server_refuses_malformed_messages(message: bytes) -> None:
    with pytest.raises(SaslAuthenticationFailedError) as info:
        sasl_server("PLAIN", users=USERS).evaluate_response(message)
    assert_no_secret(info.value)


def scram_exchange_until_final(mechanism: str = "SCRAM-SHA-256") -> tuple[SaslClient, SaslServer, bytes]:
    client = client_for(mechanism)
    server = sasl_server(mechanism, users=USERS)
    final = client.evaluate_challenge(server.evaluate_response(client.initial_response()))
    assert final is not None
    return client, server, final


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_tampered_server_signature_fails_on_the_client(mechanism: str) -> None:
    client, server, final = scram_exchange_until_final(mechanism)
    server_final = server.evaluate_response(final)
    sig = bytearray(base64.b64decode(server_final[2:]))
    sig[0] ^= 1
    with pytest.raises(SaslAuthenticationFailedError, match="server signature") as info:
        client.evaluate_challenge(b"v=" + base64.b64encode(bytes(sig)))
    assert not client.complete
    assert_no_secret(info.value, client)
    with pytest.raises(IllegalSaslStateError):
        client.evaluate_challenge(server_final)


def test_server_signature_of_wrong_length_and_garbage_fail() -> None:
    for answer in (b"v=AAAA", b"v=not base64!", b"x=abc", b"", b"v"):
        client, _, _ = scram_exchange_until_final()
        with pytest.raises(SaslAuthenticationFailedError):
            client.evaluate_challenge(answer)
        assert not client.complete


def test_server_error_in_server_final_fails_naming_the_error() -> None:
    """tansu answers e=unknown-user with no error code: the client must fail on it."""
    client, _, _ = scram_exchange_until_final()
    with pytest.raises(SaslAuthenticationFailedError, match="unknown-user") as info:
        client.evaluate_challenge(b"e=unknown-user")
    assert isinstance(info.value, AuthenticationError)
    assert not client.complete
    assert_no_secret(info.value)


def test_server_error_instead_of_server_first_fails() -> None:
    client = client_for("SCRAM-SHA-512")
    client.initial_response()
    with pytest.raises(SaslAuthenticationFailedError, match="invalid-encoding"):
        client.evaluate_challenge(b"e=invalid-encoding")


@pytest.mark.parametrize("iterations", [1, 1000, 4095])
def test_iteration_count_below_4096_is_refused(iterations: int) -> None:
    client = client_for("SCRAM-SHA-256")
    server = sasl_server("SCRAM-SHA-256", users=USERS, scram_iterations=iterations)
    with pytest.raises(SaslAuthenticationFailedError, match=f"{iterations} iterations") as info:
        run(client, server)
    assert "4096" in str(info.value)
    assert not client.complete


@pytest.mark.parametrize("iterations", ["16385", "60000000", "9999999999"])
def test_iteration_count_above_16384_is_refused_before_any_hashing(iterations: str, monkeypatch: Any) -> None:
    """A hostile broker cannot freeze the network thread in PBKDF2 (or overflow it): Kafka's own SCRAM allows
    at most 16,384 iterations, so more is a typed authentication failure, raised before any key derivation."""
    import hashlib

    def no_hashing(*args: Any) -> bytes:
        raise AssertionError("pbkdf2_hmac must not run")

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", no_hashing)
    client = ScramClient("user", "pencil", nonce="abc")
    client.initial_response()
    with pytest.raises(SaslAuthenticationFailedError, match=f"{iterations} iterations, more than the maximum 16384"):
        client.evaluate_challenge(f"r=abcdef,s=QSXCR+Q6sek8bf92,i={iterations}".encode())
    assert not client.complete


def test_server_nonce_must_extend_the_client_nonce() -> None:
    for first in (b"r=other-nonce-xyz,s=QSXCR+Q6sek8bf92,i=4096", b"r=abc,s=QSXCR+Q6sek8bf92,i=4096"):
        c = ScramClient("user", "pencil", nonce="abc")
        c.initial_response()
        with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
            c.evaluate_challenge(first)


@pytest.mark.parametrize("first", [
    b"r=abcdef,s=QSXCR+Q6sek8bf92",
    b"s=QSXCR+Q6sek8bf92,r=abcdef,i=4096",
    b"r=abcdef,s=***,i=4096",
    b"r=abcdef,s=,i=4096",
    b"r=abcdef,s=QSXCR+Q6sek8bf92,i=lots",
    b"r=abcdef,s=QSXCR+Q6sek8bf92,i=-5000",
    b"m=ext,r=abcdef,s=QSXCR+Q6sek8bf92,i=4096",
    b"garbage",
    b"\xff\xfe",
])
def test_malformed_server_first_fails(first: bytes) -> None:
    c = ScramClient("user", "pencil", nonce="abc")
    c.initial_response()
    with pytest.raises(SaslAuthenticationFailedError):
        c.evaluate_challenge(first)


def test_server_first_with_extensions_is_accepted() -> None:
    c = ScramClient("user", "pencil", nonce="abc")
    c.initial_response()
    assert c.evaluate_challenge(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4096,x=ext") is not None


def test_scram_server_checks_the_client_final_message() -> None:
    _, server, final = scram_exchange_until_final()
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        server.evaluate_response(final.replace(b",r=", b",r=X", 1))
    _, server, final = scram_exchange_until_final()
    with pytest.raises(SaslAuthenticationFailedError, match="channel binding"):
        server.evaluate_response(final.replace(b"c=biws", b"c=eSws", 1))
    _, server, final = scram_exchange_until_final()
    with pytest.raises(SaslAuthenticationFailedError):
        server.evaluate_response(final.split(b",p=")[0])
    _, server, final = scram_exchange_until_final()
    with pytest.raises(SaslAuthenticationFailedError):
        server.evaluate_response(final.split(b",p=")[0] + b",p=AAAA")


@pytest.mark.parametrize("first", [b"", b"n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n,,r=abc,n=alice",
                                   b"n,,m=x,n=alice,r=abc", b"n,,n=alice,r=", b"n,a=bob,n=alice,r=abc"])
def test_scram_server_refuses_malformed_client_first(first: bytes) -> None:
    with pytest.raises(SaslAuthenticationFailedError):
        sasl_server("SCRAM-SHA-256", users=USERS).evaluate_response(first)


def test_scram_server_accepts_matching_authzid() -> None:
    s = sasl_server("SCRAM-SHA-256", users=USERS)
    assert s.evaluate_response(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")


# ------------------------------------------------------------------------------------------ OAUTHBEARER


def test_oauthbearer_wire_format_with_extensions() -> None:
    tok = unsecured_jwt("alice", now=1000.0)
    c = sasl_client("OAUTHBEARER", token=tok, extensions={"traceId": "123", "logicalCluster": "lkc-1"})
    assert c.initial_response() == (
        b"n,,\x01auth=Bearer " + tok.encode() + b"\x01traceId=123\x01logicalCluster=lkc-1\x01\x01")
    c2 = sasl_client("OAUTHBEARER", token=tok)
    assert c2.initial_response() == b"n,,\x01auth=Bearer " + tok.encode() + b"\x01\x01"


def test_oauthbearer_server_records_extensions_scope_and_expiry() -> None:
    now = 1_700_000_000.0
    tok = unsecured_jwt("alice", 60, scope=["read", "write"], now=now)
    server = sasl_server("OAUTHBEARER", users={}, clock=lambda: now + 10)
    run(sasl_client("OAUTHBEARER", token=tok, extensions={"traceId": "abc"}), server)
    assert isinstance(server, OAuthBearerServer)
    assert server.authorization_id == "alice"
    assert server.extensions == {"traceId": "abc"}
    assert server.scope == ("read", "write")
    assert server.credential_expiry == now + 60


def oauth_error_round(token: str, clock: Callable[[], float] = time.time) -> None:
    client = sasl_client("OAUTHBEARER", token=token)
    server = sasl_server("OAUTHBEARER", users=USERS, clock=clock)
    challenge = server.evaluate_response(client.initial_response())
    assert json.loads(challenge) == {"status": "invalid_token"}
    assert not server.complete
    answer = client.evaluate_challenge(challenge)
    assert answer == b"\x01"
    assert not client.complete
    with pytest.raises(SaslAuthenticationFailedError) as info:
        server.evaluate_response(answer)
    assert token not in str(info.value) and token not in repr(server) and token not in repr(client)
    assert not server.complete and server.authorization_id is None
    raise info.value


def test_oauthbearer_expired_token_error_round() -> None:
    tok = unsecured_jwt("alice", 60, now=1000.0)
    with pytest.raises(SaslAuthenticationFailedError, match="expired"):
        oauth_error_round(tok, clock=lambda: 1060.0)


def test_oauthbearer_token_valid_until_exp() -> None:
    tok = unsecured_jwt("alice", 60, now=1000.0)
    server = sasl_server("OAUTHBEARER", users={}, clock=lambda: 1059.5)
    run(sasl_client("OAUTHBEARER", token=tok), server)
    assert server.authorization_id == "alice"


@pytest.mark.parametrize("token, reason", [
    (make_jwt({"alg": "HS256"}, {"sub": "alice", "exp": 4e9}), "alg none"),
    (make_jwt({"alg": "none"}, {"sub": "alice", "exp": 4e9}, signature="c2ln"), "signature"),
    (make_jwt({"alg": "none"}, {"exp": 4e9}), "sub"),
    (make_jwt({"alg": "none"}, {"sub": "", "exp": 4e9}), "sub"),
    (make_jwt({"alg": "none"}, {"sub": "alice"}), "exp"),
    (make_jwt({"alg": "none"}, {"sub": "alice", "exp": "tomorrow"}), "exp"),
    (make_jwt({"alg": "none"}, {"sub": "alice", "exp": True}), "exp"),
    (make_jwt({"alg": "none"}, {"sub": "alice", "exp": 4e9, "iat": 3.9e9}), "iat"),
    (make_jwt({"alg": "none"}, {"sub": "alice", "exp": 4e9, "iat": "x"}), "iat"),
    (make_jwt({"alg": "none"}, {"sub": "alice", "exp": 4e9, "scope": 5}), "scope"),
    ("abc.def", "JWS"),
    ("not-base64-json.e30.", "header"),
    ("e30.bm90LWpzb24.", "alg none"),
    (base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode() + ".WzFd.", "payload"),
])
def test_oauthbearer_malformed_tokens_error_round(token: str, reason: str) -> None:
    with pytest.raises(SaslAuthenticationFailedError, match=reason):
        oauth_error_round(token)


def test_oauthbearer_server_fails_if_client_does_not_acknowledge_the_error() -> None:
    server = sasl_server("OAUTHBEARER", users={}, clock=lambda: 5000.0)
    tok = unsecured_jwt("alice", 60, now=1000.0)
    server.evaluate_response(sasl_client("OAUTHBEARER", token=tok).initial_response())
    with pytest.raises(SaslAuthenticationFailedError, match="acknowledge"):
        server.evaluate_response(b"n,,\x01auth=Bearer x\x01\x01")


def test_oauthbearer_client_fails_on_a_second_challenge() -> None:
    c = sasl_client("OAUTHBEARER", token=unsecured_jwt("alice"))
    c.initial_response()
    assert c.evaluate_challenge(b'{"status":"invalid_token"}') == b"\x01"
    with pytest.raises(SaslAuthenticationFailedError, match="invalid_token"):
        c.evaluate_challenge(b"")
    assert not c.complete


@pytest.mark.parametrize("message", [
    b"", b"n,,auth=Bearer abc\x01\x01", b"n,,\x01auth=Bearer abc\x01", b"n,,\x01\x01",
    b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01auth=Bearer \x01\x01", b"n,,\x01auth=Bearer a\x01bad\x01\x01",
    b"y,,\x01auth=Bearer abc\x01\x01",
])
def test_oauthbearer_server_refuses_malformed_initial_responses(message: bytes) -> None:
    with pytest.raises(SaslAuthenticationFailedError):
        sasl_server("OAUTHBEARER", users={}).evaluate_response(message)


def test_oauthbearer_authzid_must_match_the_subject() -> None:
    tok = unsecured_jwt("alice")
    s = sasl_server("OAUTHBEARER", users={})
    assert s.evaluate_response(b"n,a=alice,\x01auth=Bearer " + tok.encode() + b"\x01\x01") == b""
    assert s.authorization_id == "alice"
    s = sasl_server("OAUTHBEARER", users={})
    challenge = s.evaluate_response(b"n,a=bob,\x01auth=Bearer " + tok.encode() + b"\x01\x01")
    assert json.loads(challenge)["status"] == "invalid_token"


def test_unsecured_jwt_shape() -> None:
    tok = unsecured_jwt("alice", 3600, now=1_700_000_000)
    header, payload, signature = tok.split(".")
    assert signature == "" and "=" not in tok
    assert decode_jwt_part(header) == {"alg": "none"}
    assert decode_jwt_part(payload) == {"sub": "alice", "iat": 1_700_000_000, "exp": 1_700_003_600}
    scoped = unsecured_jwt("bob", 1.5, scope=["a", "b"], now=10.25)
    assert decode_jwt_part(scoped.split(".")[1]) == {"sub": "bob", "iat": 10.25, "exp": 11.75, "scope": ["a", "b"]}
    default = decode_jwt_part(unsecured_jwt("carol").split(".")[1])
    assert abs(default["exp"] - time.time() - 3600) < 5
    with pytest.raises(ValueError):
        unsecured_jwt("")


# ------------------------------------------------------------------------------------------ factories


def test_sasl_client_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="GSSAPI"):
        sasl_client("GSSAPI", username="a", password="b")
    with pytest.raises(ConfigError, match="upper-case"):
        sasl_client("plain", username="a", password="b")
    with pytest.raises(ConfigError, match="password"):
        sasl_client("PLAIN", username="a")
    with pytest.raises(ConfigError, match="username"):
        sasl_client("SCRAM-SHA-256", password=PASSWORD)
    with pytest.raises(ConfigError, match="token"):
        sasl_client("OAUTHBEARER", username="a", password="b")
    with pytest.raises(ConfigError) as info:
        sasl_client("OAUTHBEARER", token="has spaces " + PASSWORD)
    assert_no_secret(info.value)
    with pytest.raises(ConfigError, match="auth"):
        sasl_client("OAUTHBEARER", token=unsecured_jwt("a"), extensions={"auth": "x"})
    with pytest.raises(ConfigError):
        sasl_client("OAUTHBEARER", token=unsecured_jwt("a"), extensions={"k1": "x"})
    with pytest.raises(ConfigError) as info:
        sasl_client("PLAIN", username="a", password="x\x00" + PASSWORD)
    assert_no_secret(info.value)
    assert issubclass(ConfigError, ValueError)


def test_sasl_server_unknown_mechanism() -> None:
    with pytest.raises(UnsupportedSaslMechanismError):
        sasl_server("GSSAPI", users={})


def test_client_calls_out_of_order() -> None:
    c = client_for("SCRAM-SHA-256")
    with pytest.raises(IllegalSaslStateError):
        c.evaluate_challenge(b"r=x")
    c.initial_response()
    with pytest.raises(IllegalSaslStateError):
        c.initial_response()


@pytest.mark.parametrize("mechanism", SUPPORTED_MECHANISMS)
def test_no_secret_in_any_repr_or_message(mechanism: str) -> None:
    token = unsecured_jwt("alice")
    client = client_for(mechanism, token=token)
    texts: List[object] = [client, vars(client).get("username")]
    try:
        run(client, sasl_server(mechanism, users={"alice": "not-the-password-9"}, clock=lambda: 1e12))
    except SaslAuthenticationFailedError as e:
        texts.append(e)
    assert_no_secret(*texts)
    for text in texts:
        assert token not in str(text) and token not in repr(text)
