"""Certificates for a mock cluster's TLS listeners, made at run time with the ``cryptography`` package.

:func:`make_certificates` creates a throw-away certificate authority and a server certificate it signs
for the mock's host names (``localhost`` and ``127.0.0.1`` by default); :func:`server_context` loads
them into a server-side :class:`ssl.SSLContext`. The standard library loads keys from files only, so
they are written to a private temporary directory (mode 0700) and the directory is removed as soon as
the context has loaded them: no key stays on disk. ``cryptography`` is an optional dependency; without
it a :class:`MissingDependencyError` names the ``pip install`` to run.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Tuple

INSTALL_HINT = "pip install cryptography"


class MissingDependencyError(RuntimeError):
    """An optional package the mock needs for this feature is not installed."""


def _crypto() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise MissingDependencyError(
            "the mock cluster makes its own TLS certificates with the 'cryptography' package, which is not "
            f"installed: {INSTALL_HINT} (or pass ssl_context= with your own server certificate)"
        ) from None
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class IssuedCert:
    """A certificate and its private key, both PEM (the key unencrypted PKCS#8)."""

    cert_pem: str
    key_pem: str = field(repr=False)


@dataclass(frozen=True)
class Certificates:
    """A CA (certificate and key, to issue more certificates) and a server certificate it signed."""

    ca: IssuedCert
    server: IssuedCert

    @property
    def ca_pem(self) -> str:
        return self.ca.cert_pem


def _name(common_name: str) -> Any:
    x509, _h, _s, _e, _eku, NameOID = _crypto()
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kproducer mock cluster"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def _key_pem(key: Any) -> str:
    _x, _h, serialization, _e, _eku, _n = _crypto()
    data: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return data.decode("ascii")


def _cert_pem(cert: Any) -> str:
    _x, _h, serialization, _e, _eku, _n = _crypto()
    data: bytes = cert.public_bytes(serialization.Encoding.PEM)
    return data.decode("ascii")


def _validity(days: float) -> Tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days)


def make_ca(common_name: str = "kproducer mock CA", days: float = 30) -> IssuedCert:
    """A self-signed certificate authority (EC P-256)."""
    x509, hashes, _s, ec, _eku, _n = _crypto()
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    not_before, not_after = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return IssuedCert(_cert_pem(cert), _key_pem(key))


def issue_cert(
    ca: IssuedCert,
    names: Sequence[str],
    *,
    common_name: Optional[str] = None,
    client: bool = False,
    days: float = 30,
) -> IssuedCert:
    """A certificate signed by ``ca`` for ``names`` (DNS names or IP addresses, as subject alternative
    names); ``client`` makes a TLS client certificate (for mutual TLS) instead of a server one."""
    x509, hashes, serialization, ec, ExtendedKeyUsageOID, _n = _crypto()
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode("ascii"))
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode("ascii"), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    sans = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    not_before, not_after = _validity(days)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name or (names[0] if names else "mock")))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return IssuedCert(_cert_pem(cert), _key_pem(key))


def make_certificates(names: Sequence[str] = ("localhost", "127.0.0.1")) -> Certificates:
    """A new CA and a server certificate it signed for ``names``."""
    ca = make_ca()
    return Certificates(ca, issue_cert(ca, names))


def load_cert_chain(context: ssl.SSLContext, cert: IssuedCert) -> None:
    """Load a certificate and key held in memory into ``context`` (through a private temporary
    directory that is removed before returning)."""
    directory = tempfile.mkdtemp(prefix="kproducer-mock-tls-")
    try:
        os.chmod(directory, 0o700)
        cert_path = os.path.join(directory, "cert.pem")
        key_path = os.path.join(directory, "key.pem")
        for path, text in ((cert_path, cert.cert_pem), (key_path, cert.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(text)
        context.load_cert_chain(cert_path, key_path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def server_context(certs: Certificates, client_auth: str = "none") -> ssl.SSLContext:
    """A TLS 1.2+ server context serving ``certs.server``; ``client_auth`` "requested" or "required"
    asks clients for a certificate issued by ``certs.ca`` (mutual TLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    load_cert_chain(context, certs.server)
    if client_auth != "none":
        context.load_verify_locations(cadata=certs.ca.cert_pem)
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context
