"""TLS and SASL settings: every spelling (Java, librdkafka, kafka-python) builds the same SSLContext,
PEM files and text, PKCS12 stores, JKS and file errors, the "given twice" rule, sasl.jaas.config parsing,
mechanism inference, token providers, and secrets that never show (Password, repr, as_dict, errors).

Certificates and keys are made here with trustme and cryptography; TLS handshakes run in memory
(ssl.MemoryBIO) between the context under test and a trustme server."""
from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import ssl
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

trustme = pytest.importorskip("trustme")
pytest.importorskip("cryptography")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.serialization import pkcs12  # noqa: E402

from kproducer.config import (  # noqa: E402
    Password,
    ProducerConfig,
    canonical_item,
    is_secret,
    secret_settings,
)
from kproducer.errors import ConfigError, SaslAuthenticationFailedError  # noqa: E402
from kproducer.jaas import parse_jaas_config  # noqa: E402
from kproducer.network.channel_security import PLAINTEXT  # noqa: E402
from kproducer.network.sasl_authenticator import SaslAuthenticator  # noqa: E402
from kproducer.protocol import messages as m  # noqa: E402
from kproducer.security import call_token_provider, channel_security, ssl_context  # noqa: E402

SECRET = "Sup3r-s3cret-pw"
KEY_PASSWORD = "k3y-pa55word"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
              f'password="{SECRET}";')
SCRAM_JAAS = PLAIN_JAAS.replace("plain.PlainLoginModule", "scram.ScramLoginModule")
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="alice";')


# -- certificates ------------------------------------------------------------------------------------


class Certs:
    def __init__(self, tmp: Path) -> None:
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        self.server = self.ca.issue_cert("localhost", "127.0.0.1")
        self.client = self.ca.issue_cert("client.example")
        self.dir = tmp
        self.ca_file = str(tmp / "ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        self.ca_pem = self.ca.cert_pem.bytes().decode()
        self.other_ca_file = str(tmp / "other-ca.pem")
        self.other_ca.cert_pem.write_to_path(self.other_ca_file)
        # Java's PEM key store file: chain and key together
        self.client_combined = str(tmp / "client.pem")
        self.client.private_key_and_cert_chain_pem.write_to_path(self.client_combined)
        self.client_cert_file = str(tmp / "client-cert.pem")
        self.client_chain_pem = "".join(b.bytes().decode() for b in self.client.cert_chain_pems)
        Path(self.client_cert_file).write_text(self.client_chain_pem)
        self.client_key_file = str(tmp / "client-key.pem")
        self.client_key_pem = self.client.private_key_pem.bytes().decode()
        Path(self.client_key_file).write_text(self.client_key_pem)
        key = serialization.load_pem_private_key(self.client.private_key_pem.bytes(), None)
        self.encrypted_key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(KEY_PASSWORD.encode())).decode()
        self.encrypted_key_file = str(tmp / "client-key-enc.pem")
        Path(self.encrypted_key_file).write_text(self.encrypted_key_pem)
        self.client_key = key

    def server_context(self, require_client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server.configure_cert(ctx)
        if require_client_cert:
            self.ca.configure_trust(ctx)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def keystore_p12(self, password: Optional[str], name: str = "client.p12") -> str:
        cert = x509.load_pem_x509_certificate(self.client.cert_chain_pems[0].bytes())
        chain = [x509.load_pem_x509_certificate(b.bytes()) for b in self.client.cert_chain_pems[1:]]
        enc = (serialization.BestAvailableEncryption(password.encode()) if password
               else serialization.NoEncryption())
        data = pkcs12.serialize_key_and_certificates(b"client", self.client_key, cert, chain or None, enc)
        path = self.dir / name
        path.write_bytes(data)
        return str(path)

    def truststore_p12(self, password: Optional[str], name: str = "trust.p12") -> str:
        ca_cert = x509.load_pem_x509_certificate(self.ca.cert_pem.bytes())
        enc = (serialization.BestAvailableEncryption(password.encode()) if password
               else serialization.NoEncryption())
        data = pkcs12.serialize_key_and_certificates(None, None, None, [ca_cert], enc)
        path = self.dir / name
        path.write_bytes(data)
        return str(path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


def handshake(client_ctx: ssl.SSLContext, server_ctx: ssl.SSLContext,
              hostname: str = "localhost") -> Tuple[ssl.SSLObject, ssl.SSLObject]:
    """A TLS handshake in memory; raises the client's or the server's ssl.SSLError."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=hostname)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, obj in (("c", client), ("s", server)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if done["c"] and done["s"]:
            # TLS 1.3: the server checks the client certificate after the client finished
            try:
                client.write(b"x")
                s_in.write(c_out.read())
                server.read(1)
            except ssl.SSLWantReadError:
                pass
            return client, server
    raise AssertionError("the handshake did not finish")


def cfg(**settings: Any) -> ProducerConfig:
    return ProducerConfig({"bootstrap.servers": "localhost:9093", **settings})


def tls(**settings: Any) -> ssl.SSLContext:
    return ssl_context(cfg(**{"security.protocol": "SSL", **settings}))


def assert_no_secret(text: str, *secrets: str) -> None:
    for s in secrets or (SECRET, KEY_PASSWORD):
        assert s not in text, f"a secret shows in {text!r}"


# -- trust stores ------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["ssl.truststore.location", "ssl_truststore_location", "ssl.ca.location",
                                      "ssl_ca_location", "ssl_cafile", "ssl.truststore.certificates", "ssl.ca.pem",
                                      "ssl_ca_pem"])
def test_every_truststore_spelling_builds_the_same_context(certs: Certs, spelling: str) -> None:
    value = certs.ca_pem if spelling.replace("_", ".") in ("ssl.truststore.certificates", "ssl.ca.pem") \
        else certs.ca_file
    ctx = tls(**{spelling: value})
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname is True
    assert len(ctx.get_ca_certs()) == 1
    assert ctx.get_ca_certs()[0]["subject"] == ssl._ssl._test_decode_cert(certs.ca_file)["subject"]  # type: ignore
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    client, _ = handshake(ctx, certs.server_context(require_client_cert=False))
    assert client.version() in ("TLSv1.2", "TLSv1.3")


def test_explicit_pem_type_and_a_directory_of_cas(certs: Certs, tmp_path: Path) -> None:
    assert len(tls(**{"ssl.truststore.type": "pem", "ssl.truststore.location": certs.ca_file}).get_ca_certs()) == 1
    # librdkafka's ssl.ca.location may be a directory (hashed names, as c_rehash makes them)
    ctx = tls(**{"ssl.ca.location": str(tmp_path)})
    assert ctx.verify_mode == ssl.CERT_REQUIRED


def test_without_a_truststore_the_system_cas_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[Any] = []
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", lambda self, purpose=None: calls.append(purpose))
    ctx = tls()
    assert calls == [ssl.Purpose.SERVER_AUTH]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    calls.clear()
    tls(**{"ssl.ca.location": "probe"})
    assert calls == [ssl.Purpose.SERVER_AUTH]


def test_another_ca_does_not_verify_the_broker(certs: Certs) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tls(ssl_cafile=certs.other_ca_file), certs.server_context(require_client_cert=False))


# -- host name checks and verification ----------------------------------------------------------------


@pytest.mark.parametrize("settings,check_hostname", [
    ({}, True),
    ({"ssl.endpoint.identification.algorithm": "https"}, True),
    ({"ssl.endpoint.identification.algorithm": "HTTPS"}, True),
    ({"ssl.endpoint.identification.algorithm": ""}, False),
    ({"ssl.endpoint.identification.algorithm": None}, False),
    ({"ssl.endpoint.identification.algorithm": "none"}, False),  # librdkafka's value
    ({"ssl_check_hostname": True}, True),
    ({"ssl_check_hostname": False}, False),
    ({"ssl_check_hostname": "false"}, False),
])
def test_endpoint_identification(certs: Certs, settings: Dict[str, Any], check_hostname: bool) -> None:
    ctx = tls(ssl_cafile=certs.ca_file, **settings)
    assert ctx.check_hostname is check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    server = certs.server_context(require_client_cert=False)
    if check_hostname:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|match"):
            handshake(ctx, server, hostname="wrong.example")
    else:
        handshake(ctx, server, hostname="wrong.example")


def test_certificate_verification_off(certs: Certs, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kproducer")
    ctx = tls(**{"enable.ssl.certificate.verification": "false"})
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    handshake(ctx, certs.server_context(require_client_cert=False), hostname="any.example")
    assert any("not verified" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match="enable.ssl.certificate.verification must be true or false"):
        tls(enable_ssl_certificate_verification="maybe")


def test_unknown_endpoint_identification_value() -> None:
    with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm='http' is not supported"):
        cfg(ssl_endpoint_identification_algorithm="http")
    with pytest.raises(ConfigError, match="ssl_check_hostname must be true or false"):
        cfg(ssl_check_hostname="perhaps")


# -- versions and ciphers ---------------------------------------------------------------------------------


def test_enabled_protocols_and_ssl_protocol() -> None:
    ctx = tls(**{"ssl.enabled.protocols": "TLSv1.3"})
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3 and ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    ctx = tls(**{"ssl.enabled.protocols": ["tlsv1.2"]})
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    # as Java: ssl.protocol=TLSv1.2 keeps TLS 1.3 off even when enabled
    ctx = tls(**{"ssl.protocol": "TLSv1.2"})
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert tls(**{"ssl.protocol": "TLS"}).maximum_version == ssl.TLSVersion.TLSv1_3
    assert cfg(ssl_enabled_protocols="TLSv1.3, TLSv1.2").ssl_enabled_protocols == ["TLSv1.2", "TLSv1.3"]
    with pytest.raises(ConfigError, match="'SSLv3' is not a TLS version"):
        cfg(ssl_enabled_protocols="SSLv3")
    with pytest.raises(ConfigError, match="ssl.enabled.protocols is empty"):
        cfg(ssl_enabled_protocols=" , ")
    with pytest.raises(ConfigError, match="below every version"):
        tls(ssl_protocol="TLSv1.2", ssl_enabled_protocols="TLSv1.3")


def test_cipher_suites(certs: Certs) -> None:
    ctx = tls(ssl_cafile=certs.ca_file, ssl_enabled_protocols="TLSv1.2",
              ssl_cipher_suites="ECDHE-RSA-AES128-GCM-SHA256,ECDHE-ECDSA-AES128-GCM-SHA256")
    names = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"}
    client, _ = handshake(ctx, certs.server_context(require_client_cert=False))
    cipher = client.cipher()
    assert cipher is not None and cipher[0] in names
    # kafka-python's name; ':'-separated OpenSSL lists
    assert tls(ssl_ciphers="ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384").get_ciphers()
    # only TLS 1.3 suites: they cannot be restricted, and TLS 1.2 has none left
    assert tls(ssl_cipher_suites="TLS_AES_128_GCM_SHA256").minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError, match="IANA names.*ECDHE-RSA-AES128-GCM-SHA256"):
        tls(ssl_cipher_suites="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    with pytest.raises(ConfigError, match="OpenSSL selects no cipher"):
        tls(ssl_cipher_suites="NO-SUCH-CIPHER")


# -- client certificates ------------------------------------------------------------------------------


def client_settings(certs: Certs) -> Dict[str, Dict[str, Any]]:
    return {
        "java-pem-file": {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.client_combined},
        "java-pem-file-no-type": {"ssl.keystore.location": certs.client_combined},
        "java-pem-text": {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": certs.client_chain_pem,
                          "ssl.keystore.key": certs.client_key_pem},
        "librdkafka-files": {"ssl.certificate.location": certs.client_cert_file,
                             "ssl.key.location": certs.client_key_file},
        "librdkafka-pem": {"ssl.certificate.pem": certs.client_chain_pem, "ssl.key.pem": certs.client_key_pem},
        "kafka-python": {"ssl_certfile": certs.client_cert_file, "ssl_keyfile": certs.client_key_file},
        "kafka-python-combined": {"ssl_certfile": certs.client_combined},
        "encrypted-java": {"ssl.keystore.location": certs.client_cert_file,
                           "ssl.key.location": certs.encrypted_key_file, "ssl.key.password": KEY_PASSWORD},
        "encrypted-kafka-python": {"ssl_certfile": certs.client_cert_file, "ssl_keyfile": certs.encrypted_key_file,
                                   "ssl_password": KEY_PASSWORD},
        "encrypted-pem-text": {"ssl.keystore.certificate.chain": certs.client_chain_pem,
                               "ssl.keystore.key": certs.encrypted_key_pem, "ssl.key.password": KEY_PASSWORD},
    }


CLIENT_CASES = ["java-pem-file", "java-pem-file-no-type", "java-pem-text", "librdkafka-files", "librdkafka-pem",
                "kafka-python", "kafka-python-combined", "encrypted-java", "encrypted-kafka-python",
                "encrypted-pem-text"]


@pytest.mark.parametrize("case", CLIENT_CASES)
def test_every_client_certificate_spelling_authenticates(certs: Certs, case: str) -> None:
    ctx = tls(ssl_cafile=certs.ca_file, **client_settings(certs)[case])
    _, server = handshake(ctx, certs.server_context())
    peer = server.getpeercert()
    assert peer is not None
    assert any(v == "client.example" for _, v in peer.get("subjectAltName", ()))


def test_pem_text_goes_through_private_files_that_are_deleted(certs: Certs, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    import tempfile

    seen: List[Tuple[str, int, int]] = []
    real = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: Any, keyfile: Any = None, password: Any = None) -> None:
        for path in (certfile, keyfile):
            seen.append((path, os.stat(path).st_mode & 0o777, os.stat(os.path.dirname(path)).st_mode & 0o777))
        real(self, certfile, keyfile, password)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    tls(ssl_cafile=certs.ca_file, **client_settings(certs)["java-pem-text"])
    assert len(seen) == 2
    for path, mode, dir_mode in seen:
        assert mode == 0o600 and dir_mode == 0o700
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    assert list(tmp_path.iterdir()) == []


def test_encrypted_key_errors_name_the_setting_and_file_never_the_password(certs: Certs) -> None:
    base = {"ssl.keystore.location": certs.client_cert_file, "ssl.key.location": certs.encrypted_key_file}
    with pytest.raises(ConfigError) as info:
        tls(**base)
    assert "is encrypted: set ssl.key.password" in str(info.value) and certs.encrypted_key_file in str(info.value)
    wrong = "not-" + KEY_PASSWORD
    with pytest.raises(ConfigError) as info:
        tls(ssl_certfile=certs.client_cert_file, ssl_keyfile=certs.encrypted_key_file, ssl_password=wrong)
    msg = str(info.value)
    assert "ssl_password does not decrypt the private key" in msg and certs.encrypted_key_file in msg
    assert_no_secret(msg, wrong, KEY_PASSWORD)
    with pytest.raises(ConfigError) as info:
        tls(**{"ssl.keystore.certificate.chain": certs.client_chain_pem, "ssl.keystore.key": certs.encrypted_key_pem,
               "ssl.key.password": wrong})
    assert "does not decrypt" in str(info.value) and "BEGIN" not in str(info.value)


def test_file_errors_name_the_setting_and_the_file(certs: Certs, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError, match=r"ssl_cafile: .*nope.pem does not exist"):
        tls(ssl_cafile=missing)
    with pytest.raises(ConfigError, match=r"ssl.certificate.location: .*nope.pem does not exist"):
        tls(**{"ssl.certificate.location": missing})
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"ssl.truststore.location: .*garbage.pem holds no PEM certificate"):
        tls(**{"ssl.truststore.location": str(garbage)})
    with pytest.raises(ConfigError, match="ssl.ca.pem holds no PEM certificate"):
        tls(**{"ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"})
    # a certificate without its key
    with pytest.raises(ConfigError, match=r"ssl.keystore.location: cannot load .*client-cert.pem"):
        tls(**{"ssl.keystore.location": certs.client_cert_file})


def test_key_store_relations() -> None:
    with pytest.raises(ConfigError, match="ssl.keystore.key needs ssl.keystore.certificate.chain"):
        cfg(security_protocol="SSL", ssl_keystore_key="x")
    with pytest.raises(ConfigError, match="ssl.certificate.pem needs ssl.keystore.key"):
        cfg(**{"security.protocol": "SSL", "ssl.certificate.pem": "x"})
    with pytest.raises(ConfigError, match="ssl_keyfile needs the client certificate"):
        cfg(security_protocol="SSL", ssl_keyfile="k.pem")
    with pytest.raises(ConfigError, match="ssl.ca.location and ssl.truststore.certificates both give"):
        cfg(**{"security.protocol": "SSL", "ssl.ca.location": "a.pem", "ssl.truststore.certificates": "x"})
    with pytest.raises(ConfigError, match="needs ssl.truststore.type=PEM"):
        cfg(security_protocol="SSL", ssl_truststore_type="PKCS12", ssl_truststore_certificates="x")


# -- PKCS12 and JKS ---------------------------------------------------------------------------------


def test_pkcs12_round_trip(certs: Certs) -> None:
    keystore = certs.keystore_p12("ks-pass")
    truststore = certs.truststore_p12("ts-pass")
    ctx = tls(**{"ssl.truststore.type": "PKCS12", "ssl.truststore.location": truststore,
                 "ssl.truststore.password": "ts-pass", "ssl.keystore.type": "PKCS12",
                 "ssl.keystore.location": keystore, "ssl.keystore.password": "ks-pass"})
    assert len(ctx.get_ca_certs()) == 1
    _, server = handshake(ctx, certs.server_context())
    assert server.getpeercert() is not None


def test_pkcs12_type_from_the_file_suffix(certs: Certs) -> None:
    keystore = certs.keystore_p12("ks-pass", name="client.pfx")
    truststore = certs.truststore_p12(None, name="trust.p12")
    c = cfg(security_protocol="SSL", ssl_truststore_location=truststore, ssl_keystore_location=keystore,
            ssl_keystore_password="ks-pass")
    assert c.ssl_truststore_type == "PKCS12" and c.ssl_keystore_type == "PKCS12"
    handshake(ssl_context(c), certs.server_context())


def test_pkcs12_wrong_or_missing_password(certs: Certs) -> None:
    keystore = certs.keystore_p12("ks-pass", name="pw.p12")
    with pytest.raises(ConfigError) as info:
        tls(ssl_keystore_location=keystore, ssl_keystore_password=SECRET)
    msg = str(info.value)
    assert "ssl_keystore_password is wrong" in msg and keystore in msg  # named as the user spelled it
    assert_no_secret(msg)
    with pytest.raises(ConfigError, match="it needs ssl.keystore.password"):
        tls(**{"ssl.keystore.location": keystore})


def test_pkcs12_without_cryptography_names_the_extra(certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    keystore = certs.keystore_p12("ks-pass", name="nocrypto.p12")
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.serialization", None)
    with pytest.raises(ConfigError) as info:
        tls(ssl_keystore_location=keystore, ssl_keystore_password="ks-pass")
    assert "pip install 'kproducer[tls]'" in str(info.value) and "pip install cryptography" in str(info.value)


def test_jks_names_the_conversion_command() -> None:
    command = "keytool -importkeystore -srckeystore client.jks -destkeystore client.p12 -deststoretype PKCS12"
    for settings in ({"ssl.keystore.type": "JKS"}, {"ssl.truststore.type": "jks"},
                     {"security.protocol": "SSL", "ssl.truststore.location": "/etc/kafka/truststore.jks"}):
        with pytest.raises(ConfigError) as info:
            cfg(**settings)
        assert command in str(info.value)


# -- ssl_context -----------------------------------------------------------------------------------


def test_an_ssl_context_is_used_as_it_is(certs: Certs) -> None:
    mine = ssl.create_default_context(cafile=certs.ca_file)
    sec = channel_security(cfg(security_protocol="SSL", ssl_context=mine))
    assert sec.ssl_context is mine and sec.protocol == "SSL"
    with pytest.raises(ConfigError) as info:
        cfg(security_protocol="SSL", ssl_context=mine, ssl_cafile=certs.ca_file, ssl_check_hostname=False)
    assert "ssl_context is used as it is" in str(info.value) and "ssl_cafile" in str(info.value)
    assert "ssl_check_hostname" in str(info.value)
    with pytest.raises(ConfigError, match="ssl.context must be an ssl.SSLContext, got a str"):
        cfg(ssl_context="ctx")


# -- the "given twice" rule --------------------------------------------------------------------------


@pytest.mark.parametrize("a,b", [
    ("ssl.ca.location", "ssl_cafile"),
    ("ssl.truststore.location", "ssl.ca.location"),
    ("ssl.keystore.location", "ssl_certfile"),
    ("ssl.key.password", "ssl_password"),
    ("sasl.mechanism", "sasl.mechanisms"),
    ("sasl.username", "sasl_plain_username"),
    ("sasl.password", "sasl_plain_password"),
])
def test_two_spellings_with_different_values_name_both(a: str, b: str) -> None:
    first, second = ("PLAIN", "SCRAM-SHA-256") if "mechanism" in a else ("v-one", "v-two")
    with pytest.raises(ConfigError) as info:
        ProducerConfig({"bootstrap.servers": "h:1", a: first}, **{b: second})
    msg = str(info.value)
    assert f"{a} and {b} are the same setting" in msg and "with different values" in msg
    assert "v-one" not in msg and "v-two" not in msg
    # the same value twice is fine
    ProducerConfig({"bootstrap.servers": "h:1", a: first}, **{b: first})


def test_equal_values_in_different_forms_are_the_same() -> None:
    c = ProducerConfig({"bootstrap.servers": "h:1", "ssl.endpoint.identification.algorithm": ""},
                       ssl_check_hostname=False)
    assert c.ssl_endpoint_identification_algorithm == ""
    ProducerConfig({"bootstrap.servers": "h:1", "ssl.endpoint.identification.algorithm": "https"},
                   ssl_check_hostname=True)
    with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm and ssl_check_hostname"):
        ProducerConfig({"bootstrap.servers": "h:1", "ssl.endpoint.identification.algorithm": "https"},
                       ssl_check_hostname=False)
    ProducerConfig({"bootstrap.servers": "h:1", "sasl.password": Password("x")}, sasl_plain_password="x")
    assert canonical_item("ssl_check_hostname", False) == ("ssl.endpoint.identification.algorithm", "")


# -- sasl.jaas.config ------------------------------------------------------------------------------


def test_jaas_plain_scram_and_oauthbearer_modules() -> None:
    plain = parse_jaas_config(PLAIN_JAAS)
    assert plain.module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert plain.flag == "required" and plain.mechanism_family == "PLAIN"
    assert plain.options == {"username": "alice", "password": SECRET}
    assert parse_jaas_config(SCRAM_JAAS).mechanism_family == "SCRAM"
    oauth = parse_jaas_config(OAUTH_JAAS)
    assert oauth.mechanism_family == "OAUTHBEARER" and oauth.options == {"unsecuredLoginStringClaim_sub": "alice"}
    assert SECRET not in repr(plain) and "password" in repr(plain)


@pytest.mark.parametrize("text,options,flag", [
    ('a.PlainLoginModule required username="a b" password="p\\"q\\\\r";', {"username": "a b", "password": 'p"q\\r'},
     "required"),
    ("a.PlainLoginModule REQUISITE username=alice password='s;e=c\"ret';",
     {"username": "alice", "password": 's;e=c"ret'}, "requisite"),
    ('  a.PlainLoginModule\n  sufficient\n  username = "alice"\n  password = "x\\ty" ;  ',
     {"username": "alice", "password": "x\ty"}, "sufficient"),
    ('a.PlainLoginModule optional /* a comment */ username="alice" // another\n password="p";',
     {"username": "alice", "password": "p"}, "optional"),
    ("a.PlainLoginModule required;", {}, "required"),
    ('a.PlainLoginModule required password="\\101";', {"password": "A"}, "required"),
    ('a.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=alice unsecuredLoginLifetimeSeconds=60;',
     {"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginLifetimeSeconds": "60"}, "required"),
])
def test_jaas_quoting_and_flags(text: str, options: Dict[str, str], flag: str) -> None:
    module = parse_jaas_config(text)
    assert module.options == options and module.flag == flag


@pytest.mark.parametrize("text,fragment", [
    (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{SECRET}"',
     "must end with ';'"),
    (f'org.apache.kafka.common.security.plain.PlainLoginModule username="alice" password="{SECRET}";',
     "must be followed by a control flag"),
    (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{SECRET};',
     "is not closed"),
    (f'org.apache.kafka.common.security.plain.PlainLoginModule required username=alice password={SECRET}@x;',
     "unexpected character at position"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password;',
     "must be followed by '='"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password=;',
     "has no value"),
    (f'{PLAIN_JAAS} {PLAIN_JAAS}', "has 2 login modules"),
    (f'"{SECRET}" required;', "expected a login module class name"),
    (f'x.PlainLoginModule required /* {SECRET}', "comment at position"),
])
def test_malformed_jaas_never_echoes_the_secret(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_jaas_config(text)
    assert fragment in str(info.value)
    assert_no_secret(str(info.value))
    with pytest.raises(ConfigError) as info:
        cfg(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_jaas_config=text)
    assert_no_secret(str(info.value))
    assert_no_secret(repr(info.value))


# -- mechanism inference and credentials -------------------------------------------------------------


@pytest.mark.parametrize("settings,mechanism", [
    ({"sasl.jaas.config": PLAIN_JAAS}, "PLAIN"),
    ({"sasl.jaas.config": OAUTH_JAAS}, "OAUTHBEARER"),
    ({"sasl.jaas.config": SCRAM_JAAS, "sasl.mechanism": "scram-sha-512"}, "SCRAM-SHA-512"),
    ({"sasl.jaas.config": PLAIN_JAAS, "sasl.mechanism": "SCRAM-SHA-256"}, "SCRAM-SHA-256"),  # Java allows it
    ({"sasl_oauth_token_provider": lambda: "tok"}, "OAUTHBEARER"),
    ({"sasl_plain_username": "alice", "sasl_plain_password": SECRET}, "PLAIN"),  # kafka-python's default
    ({"sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": SECRET}, "PLAIN"),
])
def test_mechanism_inference(settings: Dict[str, Any], mechanism: str) -> None:
    c = cfg(security_protocol="SASL_SSL", **settings)
    assert c.sasl_mechanism == mechanism
    assert c.sasl_login is not None and c.sasl_login.mechanism == mechanism
    assert_no_secret(repr(c.sasl_login))


@pytest.mark.parametrize("settings,fragment", [
    ({"sasl.jaas.config": SCRAM_JAAS}, "set sasl.mechanism to SCRAM-SHA-256 or SCRAM-SHA-512"),
    ({"sasl.username": "alice", "sasl.password": SECRET},
     "needs sasl.mechanism: one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"),
    ({}, "GSSAPI/Kerberos, is not supported"),
    ({"sasl.mechanism": "GSSAPI"}, "Kerberos is not supported"),
    ({"sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;'},
     "Kerberos (GSSAPI) is not supported"),
    ({"sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"}, "sasl_oauth_token_provider"),
    ({"sasl.jaas.config": "com.example.MyLoginModule required;", "sasl.mechanism": "PLAIN"},
     "login module com.example.MyLoginModule"),
    ({"sasl.mechanism": "PLAIN"}, "set sasl.jaas.config or sasl.username/sasl.password"),
    ({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice"}, "sasl.username needs sasl.password"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": "a.PlainLoginModule required username=alice;"},
     "has no password option"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": OAUTH_JAAS}, "not OAuthBearerLoginModule"),
    ({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": PLAIN_JAAS}, "needs OAuthBearerLoginModule"),
    ({"sasl.mechanism": "OAUTHBEARER"}, "needs a token: give sasl_oauth_token_provider"),
    ({"sasl.mechanism": "MD5"}, "sasl.mechanism='MD5' is not supported"),
    ({"sasl.jaas.config": PLAIN_JAAS, "sasl.username": "bob", "sasl.password": SECRET},
     "give different credentials"),
])
def test_sasl_configuration_errors(settings: Dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg(security_protocol="SASL_PLAINTEXT", **settings)
    assert fragment in str(info.value)
    assert_no_secret(str(info.value))


def test_same_credentials_from_jaas_and_username_are_fine() -> None:
    c = cfg(security_protocol="SASL_SSL", sasl_jaas_config=PLAIN_JAAS, sasl_username="alice", sasl_password=SECRET)
    assert c.sasl_login is not None and c.sasl_login.username == "alice"


def test_settings_for_another_protocol_are_ignored_with_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kproducer.config")
    c = cfg(ssl_cafile="/nonexistent/ca.pem", sasl_jaas_config="not even parsed", sasl_mechanism="PLAIN")
    assert c.security_protocol == "PLAINTEXT" and c.sasl_login is None
    assert channel_security(c) is PLAINTEXT
    lines = [r.getMessage() for r in caplog.records if r.name == "kproducer.config"]
    assert len(lines) == 2
    assert "ignoring ssl_cafile" in lines[0]
    assert "ignoring sasl_jaas_config, sasl_mechanism (SASL settings apply to" in lines[1]
    caplog.clear()
    c = cfg(security_protocol="SASL_PLAINTEXT", sasl_jaas_config=PLAIN_JAAS, ssl_check_hostname=False)
    assert channel_security(c).ssl_context is None
    assert [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()] == [
        "security.protocol=SASL_PLAINTEXT: ignoring ssl_check_hostname (TLS settings apply to SSL and SASL_SSL)"]


# -- SASL client factories ------------------------------------------------------------------------


def test_plain_and_scram_factories_make_fresh_clients() -> None:
    sec = channel_security(cfg(security_protocol="SASL_PLAINTEXT", sasl_jaas_config=PLAIN_JAAS))
    assert sec.sasl_mechanism == "PLAIN" and sec.protocol == "SASL_PLAINTEXT"
    assert sec.sasl_client_factory is not None
    a, b = sec.sasl_client_factory("h1"), sec.sasl_client_factory("h2")
    assert a is not b
    assert a.initial_response() == b"\0alice\0" + SECRET.encode()
    assert_no_secret(repr(sec))
    sec = channel_security(cfg(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                               sasl_username="alice", sasl_password=SECRET))
    assert sec.protocol == "SASL_SSL" and sec.ssl_context is not None
    assert sec.sasl_client_factory is not None
    first = sec.sasl_client_factory("h").initial_response()
    assert first.startswith(b"n,,n=alice,r=")


def _jwt_claims(initial_response: bytes) -> Dict[str, Any]:
    token = initial_response.split(b"auth=Bearer ")[1].split(b"\x01")[0].decode()
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def test_unsecured_jaas_token_is_made_at_each_authentication() -> None:
    jaas = OAUTH_JAAS.replace(";", " unsecuredLoginLifetimeSeconds=120 unsecuredLoginExtension_traceId=abc;")
    sec = channel_security(cfg(security_protocol="SASL_PLAINTEXT", sasl_jaas_config=jaas))
    assert sec.sasl_mechanism == "OAUTHBEARER" and sec.sasl_client_factory is not None
    first = sec.sasl_client_factory("h").initial_response()
    claims = _jwt_claims(first)
    assert claims["sub"] == "alice" and claims["exp"] - claims["iat"] == 120
    assert b"traceId=abc\x01" in first


class KafkaPythonStyleProvider:
    """Like kafka-python's AbstractTokenProvider."""

    def __init__(self) -> None:
        self.calls = 0

    def token(self) -> str:
        self.calls += 1
        from kproducer.protocol.sasl import unsecured_jwt

        return unsecured_jwt("bob")

    def extensions(self) -> Dict[str, str]:
        return {"logicalCluster": "lkc-1"}


def test_token_provider_forms() -> None:
    from kproducer.protocol.sasl import unsecured_jwt

    now = time.time()
    tuple_calls: List[float] = []

    def tuple_provider() -> Tuple[str, float]:
        tuple_calls.append(time.time())
        return unsecured_jwt("alice"), now + 3600

    for provider, subject in ((tuple_provider, "alice"), (lambda: unsecured_jwt("carol"), "carol"),
                              (KafkaPythonStyleProvider(), "bob")):
        sec = channel_security(cfg(security_protocol="SASL_SSL", sasl_oauth_token_provider=provider,
                                   sasl_oauthbearer_extensions="env=test"))
        assert sec.sasl_client_factory is not None
        for _ in range(2):
            first = sec.sasl_client_factory("h").initial_response()
            assert _jwt_claims(first)["sub"] == subject
            assert b"env=test\x01" in first
    assert len(tuple_calls) == 2  # asked at every authentication
    obj = KafkaPythonStyleProvider()
    token, ext = call_token_provider(obj, {"env": "x"})
    assert obj.calls == 1 and ext == {"env": "x", "logicalCluster": "lkc-1"}
    assert call_token_provider(lambda: (b"abc", now + 10))[0] == "abc"


class ProviderFailure(RuntimeError):
    pass


@pytest.mark.parametrize("provider,fragment", [
    (lambda: (_ for _ in ()).throw(ProviderFailure(f"client secret {SECRET} rejected")), "raised ProviderFailure"),
    (lambda: ("tok", time.time() - 100), "expired"),
    (lambda: 42, "returned a int"),
    (lambda: ("tok", "tomorrow"), "expiry of type str"),
    (lambda: "not a token!", "not a valid bearer token"),
])
def test_token_provider_failures_fail_the_authentication_not_the_thread(provider: Any, fragment: str) -> None:
    sec = channel_security(cfg(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                               sasl_oauth_token_provider=provider))
    assert sec.sasl_client_factory is not None
    auth = SaslAuthenticator("OAUTHBEARER", sec.sasl_client_factory, "h", "h:9092",
                             {m.SASL_HANDSHAKE.key: (0, 1), m.SASL_AUTHENTICATE.key: (0, 2)})
    assert auth.first_request() is not None
    assert auth.on_response(m.SASL_HANDSHAKE, {"error_code": 0, "mechanisms": ["OAUTHBEARER"]}) is None
    assert isinstance(auth.error, SaslAuthenticationFailedError)
    assert fragment in str(auth.error)
    assert_no_secret(str(auth.error))


def test_token_provider_must_be_usable() -> None:
    with pytest.raises(ConfigError, match="must be a callable returning"):
        cfg(sasl_oauth_token_provider="my_module.token")
    with pytest.raises(ConfigError, match="extension name 'auth'"):
        cfg(sasl_oauthbearer_extensions="auth=x")
    with pytest.raises(ConfigError, match="must be 'key=value,key=value'"):
        cfg(sasl_oauthbearer_extensions="novalue")
    assert cfg(sasl_oauthbearer_extensions={"a": "1"}).sasl_oauthbearer_extensions == {"a": "1"}


# -- Password: secrets never show ---------------------------------------------------------------------


def test_password_type() -> None:
    p = Password(SECRET)
    assert str(p) == repr(p) == f"{p}" == f"{p:>8}".strip() == "[hidden]"
    assert p.value == SECRET
    assert p == Password(SECRET) and p != Password("other") and p != SECRET
    assert hash(p) == hash(Password(SECRET))
    assert pickle.loads(pickle.dumps(p)) == p
    assert Password(p).value == SECRET
    with pytest.raises(TypeError):
        Password(5)  # type: ignore[arg-type]


ALL_SECRETS: Dict[str, Any] = {
    "security.protocol": "SASL_SSL",
    "sasl.jaas.config": PLAIN_JAAS,
    "sasl.username": "alice",
    "sasl.password": SECRET,
    "ssl.key.password": KEY_PASSWORD,
    "ssl.keystore.password": KEY_PASSWORD,
    "ssl.truststore.password": KEY_PASSWORD,
}


def test_every_secret_setting_is_a_password_and_never_printed() -> None:
    assert secret_settings() == {"ssl.truststore.password", "ssl.keystore.key", "ssl.keystore.password",
                                 "ssl.key.password", "sasl.jaas.config", "sasl.password",
                                 "sasl.oauthbearer.client.credentials.client.secret"}
    assert is_secret("ssl_password") and is_secret("sasl_plain_password") and is_secret("ssl.key.pem")
    assert not is_secret("ssl.ca.location") and not is_secret("no.such.setting")
    c = cfg(**ALL_SECRETS)
    for name in ("sasl.jaas.config", "sasl.password", "ssl.key.password"):
        assert isinstance(c.as_dict()[name], Password)
    assert c.sasl_password is not None and c.sasl_password.value == SECRET
    for text in (repr(c.as_dict()), str(c.as_dict()), repr(c), repr(c.sasl_login), repr(channel_security(c))):
        assert_no_secret(text)
    key_text = cfg(security_protocol="SSL", ssl_keystore_certificate_chain="chain", ssl_keystore_key="KEYTEXT")
    assert "KEYTEXT" not in repr(key_text.as_dict())


@pytest.mark.parametrize("name", ["sasl.password", "ssl.key.password", "sasl.jaas.config", "ssl.keystore.key"])
def test_type_errors_of_secret_settings_show_no_value(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg(**{name: 123456789})
    assert "123456789" not in str(info.value) and "must be a string, got a int" in str(info.value)
