"""The producer's settings -> what the network layer needs to secure its connections.

:class:`~kproducer.config.ProducerConfig` calls :func:`check_tls_settings` and :func:`resolve_sasl_login`
when it is made: the TLS settings are checked together, and the SASL settings (``sasl.jaas.config``, parsed by
kproducer.jaas, or librdkafka's and kafka-python's) resolved to a :class:`~kproducer.config.SaslLogin`. Then
:func:`channel_security` builds a :class:`~kproducer.network.channel_security.ChannelSecurity`: an
``ssl.SSLContext`` for SSL / SASL_SSL and a SASL client factory for SASL_PLAINTEXT / SASL_SSL. Problems
with the files, stores and keys the settings name are :class:`~kproducer.errors.ConfigError` naming the
setting and the file, raised when the producer is created. No message or log line here shows a secret.

TLS notes:

- the context is ``PROTOCOL_TLS_CLIENT``: certificates verified, host names checked unless
  ``ssl.endpoint.identification.algorithm`` is empty, nothing verified at all when
  ``enable.ssl.certificate.verification=false``;
- ``ssl.enabled.protocols`` gives the lowest and highest TLS version (a gap in the list is not kept);
  ``ssl.protocol`` caps the highest one as Java does (``TLS``: no cap);
- ``ssl.cipher.suites`` is an OpenSSL cipher list (``,`` or ``:`` separated) for TLS 1.2 and older.
  Python's ``ssl`` module cannot restrict TLS 1.3 suites: TLS 1.3 names in the list are accepted and
  always enabled; a list of only TLS 1.3 suites makes TLS 1.3 the lowest version;
- PEM text (``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``) and PKCS12 key stores are loaded
  through files, because ``load_cert_chain`` only reads files: they are written with mode 0600 into a
  private temporary directory and deleted right after loading;
- PKCS12 stores need the ``cryptography`` package (``pip install 'kproducer[tls]'``).
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .config import (
    JKS_HINT,
    LOGIN_CALLBACK_HANDLERS,
    SASL_MECHANISMS,
    SETTINGS,
    Password,
    ProducerConfig,
    SaslLogin,
    is_tls_setting,
    parse_sasl_extensions,
)
from .errors import AuthenticationError, ConfigError, SaslAuthenticationFailedError
from .jaas import JaasLoginModule, check_jaas_options, parse_jaas_config
from .network.channel_security import PLAINTEXT, ChannelSecurity, SaslClientFactory

if TYPE_CHECKING:
    import ssl

    from .oauth import ClientCredentials, ClientCredentialsLogin
    from .protocol.sasl import SaslClient

log = logging.getLogger(__name__)

#: setting value -> ssl.TLSVersion member name (``ssl`` itself is imported only when TLS is used)
_TLS_VERSIONS: Dict[str, str] = {
    "TLSv1": "TLSv1",
    "TLSv1.1": "TLSv1_1",
    "TLSv1.2": "TLSv1_2",
    "TLSv1.3": "TLSv1_3",
}
_ORDER = list(_TLS_VERSIONS)
#: TLS 1.3 cipher suites (their OpenSSL and IANA names are the same)
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                           "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
_CRYPTOGRAPHY_HINT = "needs the cryptography package: pip install 'kproducer[tls]' (or pip install cryptography)"


def channel_security(cfg: ProducerConfig) -> ChannelSecurity:
    """TLS context and SASL client factory for ``cfg.security_protocol``; ConfigError for bad files."""
    proto = cfg.security_protocol
    if proto == "PLAINTEXT":
        return PLAINTEXT
    context = ssl_context(cfg) if proto in ("SSL", "SASL_SSL") else None
    if proto.startswith("SASL_"):
        login = cfg.sasl_login
        if login is None:  # pragma: no cover - ProducerConfig resolves it for SASL_*
            raise ConfigError(f"security.protocol={proto} needs SASL settings")
        oauth = oauth_login(login, cfg.client_id or "kproducer")
        security = ChannelSecurity(context, login.mechanism, sasl_client_factory(login, oauth))
        if oauth is not None:
            security.add_closeable(oauth)
        return security
    return ChannelSecurity(context)


def oauth_login(login: SaslLogin, name: str = "kproducer") -> Optional[ClientCredentialsLogin]:
    """For OAuth client credentials: the login, its first token fetched (here, on the caller's thread, as Java's
    producer does in its constructor) and its refresher thread started. OAuthTokenError when no token can be had."""
    if login.oauth is None:
        return None
    from .oauth import ClientCredentialsLogin

    return ClientCredentialsLogin(login.oauth, oauth_ssl_context(login.oauth), name=name).start()


def oauth_ssl_context(creds: ClientCredentials) -> Optional[ssl.SSLContext]:
    """The TLS context of an https token endpoint: its TLS settings (Java's JAAS ssl.* options, librdkafka's
    https.ca.location / https.ca.pem) as a producer's TLS settings are, else the system's default CAs."""
    if not creds.https:
        return None
    import ssl

    if not creds.ssl_settings:
        return ssl.create_default_context()
    try:
        tls = ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SSL",
                              **creds.ssl_settings})
    except ConfigError as e:
        raise ConfigError(f"the TLS settings of the OAuth token endpoint: {e}") from None
    return ssl_context(tls)


def _name(cfg: ProducerConfig, java: str) -> str:
    """A setting as the user spelled it (for messages)."""
    return cfg.spelled.get(java, java)


# -- TLS ----------------------------------------------------------------------------------------------


def check_tls_settings(cfg: ProducerConfig, given: List[str]) -> Tuple[Optional[str], Optional[str]]:
    """Check the TLS settings (``given``: those given explicitly, Java names) together; the trust and key
    store types they resolve to (as given, else from the file suffix: .p12/.pfx PKCS12, else PEM)."""
    if cfg.ssl_context is not None:
        others = [_name(cfg, n) for n in given if n != "ssl.context"]
        if others:
            raise ConfigError(f"{_name(cfg, 'ssl.context')} is used as it is: do not give {', '.join(others)} "
                              "with it (configure the SSLContext instead)")
        return cfg.ssl_truststore_type, cfg.ssl_keystore_type

    def both(a: str, b: str, what: str) -> None:
        if a in cfg.explicit and b in cfg.explicit and getattr(cfg, SETTINGS[a].alias) is not None \
                and getattr(cfg, SETTINGS[b].alias) is not None:
            raise ConfigError(f"{_name(cfg, a)} and {_name(cfg, b)} both give {what}: give one")

    both("ssl.truststore.location", "ssl.truststore.certificates", "the trusted CA certificates")
    both("ssl.keystore.location", "ssl.keystore.certificate.chain", "the client certificate")
    truststore_type = _store_type(cfg, "ssl.truststore.type", cfg.ssl_truststore_location)
    keystore_type = _store_type(cfg, "ssl.keystore.type", cfg.ssl_keystore_location)
    if cfg.ssl_truststore_certificates is not None and truststore_type == "PKCS12":
        raise ConfigError(f"{_name(cfg, 'ssl.truststore.certificates')} is PEM text: it needs "
                          "ssl.truststore.type=PEM")
    if (cfg.ssl_keystore_certificate_chain is None) != (cfg.ssl_keystore_key is None):
        have, need = (("ssl.keystore.certificate.chain", "ssl.keystore.key")
                      if cfg.ssl_keystore_key is None else ("ssl.keystore.key", "ssl.keystore.certificate.chain"))
        raise ConfigError(f"{_name(cfg, have)} needs {need} (the client certificate chain and its key, as "
                          "PEM text)")
    if cfg.ssl_keystore_certificate_chain is not None and keystore_type == "PKCS12":
        raise ConfigError(f"{_name(cfg, 'ssl.keystore.certificate.chain')} is PEM text: it needs "
                          "ssl.keystore.type=PEM")
    if cfg.ssl_key_location is not None:
        if cfg.ssl_keystore_location is None:
            raise ConfigError(f"{_name(cfg, 'ssl.key.location')} needs the client certificate in "
                              "ssl.keystore.location (ssl.certificate.location, ssl_certfile)")
        if keystore_type == "PKCS12":
            raise ConfigError(f"{_name(cfg, 'ssl.key.location')} is for PEM files; a PKCS12 key store "
                              "holds the key itself")
    return truststore_type, keystore_type


def _store_type(cfg: ProducerConfig, type_setting: str, location: Optional[str]) -> Optional[str]:
    """A key or trust store's type: as given, else from the file suffix (.p12/.pfx: PKCS12), else PEM."""
    given = getattr(cfg, SETTINGS[type_setting].alias)
    location_setting = type_setting.replace(".type", ".location")
    suffix = location.rsplit(".", 1)[-1].lower() if location and "." in location else ""
    if suffix == "jks":
        raise ConfigError(f"{_name(cfg, location_setting)} is a JKS file ({location}): {JKS_HINT}")
    if given is not None:
        return str(given)
    if location is None:
        return None
    return "PKCS12" if suffix in ("p12", "pfx") else "PEM"


def ssl_context(cfg: ProducerConfig) -> ssl.SSLContext:
    """The client ``ssl.SSLContext`` the TLS settings describe (``ssl_context`` itself when given)."""
    import ssl  # only a TLS connection needs it (about 5 MiB of RSS)
    if cfg.ssl_context is not None:
        return cfg.ssl_context
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(cfg, ctx)
    if cfg.ssl_cipher_suites:
        _set_ciphers(cfg, ctx, cfg.ssl_cipher_suites)
    if not cfg.enable_ssl_certificate_verification:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        log.warning("%s=false: broker certificates are not verified; anyone on the network path can read and "
                    "change this producer's traffic", _name(cfg, "enable.ssl.certificate.verification"))
    else:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.check_hostname = cfg.ssl_endpoint_identification_algorithm == "https"
        _load_trust(cfg, ctx)
    _load_client_certificate(cfg, ctx)
    return ctx


def _set_versions(cfg: ProducerConfig, ctx: ssl.SSLContext) -> None:
    import ssl
    enabled = cfg.ssl_enabled_protocols
    lowest, highest = enabled[0], enabled[-1]
    if cfg.ssl_protocol != "TLS" and _ORDER.index(cfg.ssl_protocol) < _ORDER.index(highest):
        highest = cfg.ssl_protocol
        if _ORDER.index(highest) < _ORDER.index(lowest):
            raise ConfigError(f"ssl.protocol={cfg.ssl_protocol} is below every version in ssl.enabled.protocols "
                              f"({','.join(enabled)})")
    try:
        ctx.minimum_version = ssl.TLSVersion[_TLS_VERSIONS[lowest]]
        ctx.maximum_version = ssl.TLSVersion[_TLS_VERSIONS[highest]]
    except (ValueError, ssl.SSLError) as e:  # pragma: no cover - an OpenSSL built without these versions
        raise ConfigError(f"ssl.enabled.protocols={','.join(enabled)}: this OpenSSL refuses it ({e})") from None


def _set_ciphers(cfg: ProducerConfig, ctx: ssl.SSLContext, suites: str) -> None:
    import ssl
    name = _name(cfg, "ssl.cipher.suites")
    items = [x.strip() for x in suites.replace(",", ":").replace(" ", ":").split(":") if x.strip()]
    older = [x for x in items if x not in _TLS13_SUITES]
    if not items:
        return
    if not older:
        if "TLSv1.3" not in cfg.ssl_enabled_protocols or (cfg.ssl_protocol not in ("TLS", "TLSv1.3")):
            raise ConfigError(f"{name} lists only TLS 1.3 suites but TLS 1.3 is not enabled")
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        return
    try:
        ctx.set_ciphers(":".join(older))
    except ssl.SSLError:
        hint = ""
        if any("_WITH_" in x for x in older):
            hint = (" (these look like IANA names: give OpenSSL's, e.g. ECDHE-RSA-AES128-GCM-SHA256 for "
                    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; `openssl ciphers -stdname` lists both)")
        raise ConfigError(f"{name}: OpenSSL selects no cipher from {':'.join(older)!r}{hint}") from None


def _check_file(setting: str, path: str, directory_ok: bool = False) -> None:
    if not os.path.exists(path):
        raise ConfigError(f"{setting}: {path} does not exist")
    if os.path.isdir(path) and not directory_ok:
        raise ConfigError(f"{setting}: {path} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{setting}: {path} is not readable by this process")


def _load_trust(cfg: ProducerConfig, ctx: ssl.SSLContext) -> None:
    import ssl
    location = cfg.ssl_truststore_location
    if cfg.ssl_truststore_certificates is not None:
        name = _name(cfg, "ssl.truststore.certificates")
        try:
            ctx.load_verify_locations(cadata=cfg.ssl_truststore_certificates)
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(f"{name} holds no PEM certificate OpenSSL can read ({_reason(e)})") from None
        return
    if location is None:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        return
    name = _name(cfg, "ssl.truststore.location")
    if location.strip().lower() == "probe":  # librdkafka: find the system's CA certificates
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        return
    _check_file(name, location, directory_ok=True)
    if cfg.ssl_truststore_type == "PKCS12":
        _key, certs = _read_pkcs12(name, location, _name(cfg, "ssl.truststore.password"), cfg.ssl_truststore_password)
        if not certs:
            raise ConfigError(f"{name}: the PKCS12 store {location} holds no certificates")
        ctx.load_verify_locations(cadata="".join(c.decode("ascii") for c in certs))
        return
    try:
        if os.path.isdir(location):
            ctx.load_verify_locations(capath=location)
        else:
            ctx.load_verify_locations(cafile=location)
    except ssl.SSLError as e:
        raise ConfigError(f"{name}: {location} holds no PEM certificate OpenSSL can read ({_reason(e)})") from None
    except OSError as e:
        raise ConfigError(f"{name}: cannot read {location} ({e.strerror})") from None


def _reason(e: Exception) -> str:
    reason = getattr(e, "reason", None)
    return str(reason) if reason else type(e).__name__


class _NoPassword(Exception):
    pass


def _load_client_certificate(cfg: ProducerConfig, ctx: ssl.SSLContext) -> None:
    key_password = cfg.ssl_key_password
    key_pw_name = _name(cfg, "ssl.key.password")
    if cfg.ssl_keystore_certificate_chain is not None:
        key = cfg.ssl_keystore_key
        assert key is not None  # ProducerConfig checks they go together
        what = f"{_name(cfg, 'ssl.keystore.certificate.chain')} and {_name(cfg, 'ssl.keystore.key')}"
        with _private_files(cfg.ssl_keystore_certificate_chain.encode("utf-8"), key.value.encode("utf-8")) as paths:
            _load_chain(ctx, what, "the PEM text", paths[0], paths[1], key_pw_name, key_password)
        return
    location = cfg.ssl_keystore_location
    if location is None:
        return
    name = _name(cfg, "ssl.keystore.location")
    _check_file(name, location)
    if cfg.ssl_keystore_type == "PKCS12":
        key_pem, certs = _read_pkcs12(name, location, _name(cfg, "ssl.keystore.password"),
                                      cfg.ssl_keystore_password)
        if key_pem is None or not certs:
            raise ConfigError(f"{name}: the PKCS12 store {location} holds no private key with its certificate")
        with _private_files(b"".join(certs), key_pem) as paths:
            _load_chain(ctx, name, location, paths[0], paths[1], key_pw_name, None)
        return
    keyfile = cfg.ssl_key_location
    if keyfile is not None:
        _check_file(_name(cfg, "ssl.key.location"), keyfile)
        name = f"{name} and {_name(cfg, 'ssl.key.location')}"
        where = f"{location} and {keyfile}"
    else:
        where = location
    _load_chain(ctx, name, where, location, keyfile, key_pw_name, key_password)


def _load_chain(ctx: ssl.SSLContext, name: str, where: str, certfile: str, keyfile: Optional[str],
                password_name: str, password: Optional[Password]) -> None:
    import ssl
    asked: List[bool] = []

    def give_password() -> str:  # never OpenSSL's interactive prompt
        asked.append(True)
        if password is None:
            raise _NoPassword()
        return password.value

    try:
        ctx.load_cert_chain(certfile, keyfile, password=give_password)
    except _NoPassword:
        raise ConfigError(f"{name}: the private key in {where} is encrypted: set {password_name}") from None
    except ssl.SSLError as e:
        if asked:
            raise ConfigError(f"{name}: {password_name} does not decrypt the private key in {where}") from None
        raise ConfigError(f"{name}: cannot load a certificate chain and its private key from {where} "
                          f"({_reason(e)}); PEM with the certificate chain and the key (or give the key "
                          "separately) is needed") from None
    except OSError as e:
        raise ConfigError(f"{name}: cannot read {where} ({e.strerror})") from None


class _private_files:
    """Write PEM data to 0600 files in a private (0700) temporary directory; delete them on exit."""

    def __init__(self, *contents: bytes) -> None:
        self._contents = contents
        self._dir: Optional[str] = None

    def __enter__(self) -> List[str]:
        self._dir = tempfile.mkdtemp(prefix="kproducer-tls-")
        paths = []
        try:
            for i, data in enumerate(self._contents):
                path = os.path.join(self._dir, f"{i}.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                paths.append(path)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        return paths

    def __exit__(self, *exc: Any) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def _read_pkcs12(name: str, path: str, password_name: str,
                 password: Optional[Password]) -> Tuple[Optional[bytes], List[bytes]]:
    """(private key as unencrypted PKCS8 PEM or None, certificates as PEM: the key's first)."""
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise ConfigError(f"{name}: reading the PKCS12 store {path} {_CRYPTOGRAPHY_HINT}") from None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"{name}: cannot read {path} ({e.strerror})") from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            data, None if password is None else password.value.encode("utf-8"))
    except (ValueError, TypeError):
        if password is None:
            raise ConfigError(f"{name}: cannot open the PKCS12 store {path}: it is not PKCS12, or it needs "
                              f"{password_name}") from None
        raise ConfigError(f"{name}: cannot open the PKCS12 store {path}: {password_name} is wrong, or the file is "
                          "not PKCS12") from None
    certs = [c.public_bytes(Encoding.PEM) for c in ([cert] if cert is not None else []) + list(extra)]
    key_pem = None
    if key is not None:
        key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return key_pem, certs


# -- SASL ---------------------------------------------------------------------------------------------


#: the settings of OAUTHBEARER with OAuth client credentials that ask for it when given
_OAUTH_SETTINGS = ("sasl.login.callback.handler.class", "sasl.oauthbearer.method",
                   "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.credentials.client.id",
                   "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.scope")


def resolve_sasl_login(cfg: ProducerConfig) -> SaslLogin:
    """The mechanism and credentials SASL_PLAINTEXT / SASL_SSL authenticate with, from Java's settings
    (sasl.jaas.config) or librdkafka's and kafka-python's (sasl.username, ...); ConfigError when they are
    missing, contradict each other or name what kproducer cannot do."""
    proto = cfg.security_protocol
    jaas = parse_jaas_config(cfg.sasl_jaas_config.value) if cfg.sasl_jaas_config is not None else None
    family = jaas.mechanism_family if jaas is not None else None
    if jaas is not None:
        check_jaas_options(jaas, is_tls_setting)
    oauth_given = sorted(n for n in _OAUTH_SETTINGS if n in cfg.explicit
                         and getattr(cfg, SETTINGS[n].alias) not in (None, "DEFAULT"))
    mech = cfg.sasl_mechanism
    if mech is None:
        if family == "SCRAM":
            raise ConfigError("sasl.jaas.config uses ScramLoginModule: set sasl.mechanism to SCRAM-SHA-256 or "
                              "SCRAM-SHA-512")
        if family is not None:
            mech = family
        elif cfg.sasl_oauth_token_provider is not None or oauth_given:
            mech = "OAUTHBEARER"
        elif cfg.spelled.get("sasl.username") == "sasl_plain_username":
            mech = "PLAIN"  # kafka-python's default sasl_mechanism
        else:
            raise ConfigError(
                f"security.protocol={proto} needs sasl.mechanism: one of {', '.join(SASL_MECHANISMS)} "
                "(Java's default, GSSAPI/Kerberos, is not supported), or a sasl.jaas.config whose login "
                "module names it")
    if mech == "OAUTHBEARER":
        if family is not None and family != "OAUTHBEARER":
            raise ConfigError(f"sasl.mechanism=OAUTHBEARER needs OAuthBearerLoginModule in sasl.jaas.config, "
                              f"not {jaas.simple_name if jaas else family}")
        extensions: Dict[str, str] = {}
        if jaas is not None:
            for key, value in jaas.options.items():
                if key.startswith("unsecuredLoginExtension_"):
                    extensions.update(parse_sasl_extensions("sasl.jaas.config", {key[24:]: value}) or {})
                elif key.startswith("extension_"):  # OAuthBearerLoginCallbackHandler's extensions
                    extensions.update(parse_sasl_extensions("sasl.jaas.config", {key[10:]: value}) or {})
        extensions.update(cfg.sasl_oauthbearer_extensions or {})
        oauth = _resolve_oauth(cfg, jaas)
        if cfg.sasl_oauth_token_provider is not None:
            if oauth is not None:
                raise ConfigError(f"{_name(cfg, 'sasl.oauth.token.provider')} and OAuth client credentials "
                                  f"({', '.join(_name(cfg, n) for n in oauth_given) or 'sasl.jaas.config'}) both "
                                  "give the token: give one")
            return SaslLogin(mech, token_provider=cfg.sasl_oauth_token_provider,
                             extensions=extensions or None)
        if oauth is not None:
            return SaslLogin(mech, oauth=oauth, extensions=extensions or None)
        subject = jaas.options.get("unsecuredLoginStringClaim_sub") if jaas is not None else None
        if not subject:
            raise ConfigError(
                "sasl.mechanism=OAUTHBEARER needs a token: give sasl_oauth_token_provider (a callable returning "
                "(token, expiry_epoch_seconds)), or for tests an unsecured token with sasl.jaas.config="
                "'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                "unsecuredLoginStringClaim_sub=\"alice\";'")
        assert jaas is not None
        lifetime_text = jaas.options.get("unsecuredLoginLifetimeSeconds", "3600")
        try:
            lifetime = float(lifetime_text)
        except ValueError:
            raise ConfigError("sasl.jaas.config: unsecuredLoginLifetimeSeconds must be a number of seconds") \
                from None
        return SaslLogin(mech, unsecured_subject=subject, unsecured_lifetime_s=lifetime,
                         extensions=extensions or None)
    # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512: a user name and a password
    if family == "OAUTHBEARER":
        raise ConfigError(f"sasl.mechanism={mech} needs PlainLoginModule or ScramLoginModule in "
                          "sasl.jaas.config, not OAuthBearerLoginModule")
    if oauth_given:
        raise ConfigError(f"{', '.join(_name(cfg, n) for n in oauth_given)}: OAuth settings need "
                          f"sasl.mechanism=OAUTHBEARER, not {mech}")
    scram_extensions: Optional[Dict[str, str]] = None
    if jaas is not None and "tokenauth" in jaas.options:
        # delegation tokens (KIP-48): ScramLoginModule's tokenauth="true" sends the SCRAM extension
        # tokenauth=true, and the broker checks the token id (username) and HMAC (password) against its tokens
        flag = jaas.options["tokenauth"].strip().lower()
        if flag not in ("true", "false"):
            raise ConfigError("sasl.jaas.config: ScramLoginModule's tokenauth must be \"true\" or \"false\"")
        if flag == "true":
            if family != "SCRAM" or not mech.startswith("SCRAM-"):
                raise ConfigError("sasl.jaas.config: tokenauth=\"true\" (delegation tokens) needs "
                                  "ScramLoginModule and sasl.mechanism SCRAM-SHA-256 or SCRAM-SHA-512")
            scram_extensions = {"tokenauth": "true"}
    from_jaas: Optional[Tuple[str, str]] = None
    if jaas is not None:
        missing = [k for k in ("username", "password") if k not in jaas.options]
        if missing:
            raise ConfigError(f"sasl.jaas.config: {jaas.simple_name} has no {' and no '.join(missing)} option")
        from_jaas = (jaas.options["username"], jaas.options["password"])
    from_settings: Optional[Tuple[str, str]] = None
    if cfg.sasl_username is not None or cfg.sasl_password is not None:
        if cfg.sasl_username is None or cfg.sasl_password is None:
            have, need = (("sasl.username", "sasl.password") if cfg.sasl_password is None
                          else ("sasl.password", "sasl.username"))
            raise ConfigError(f"{_name(cfg, have)} needs {need}")
        from_settings = (cfg.sasl_username, cfg.sasl_password.value)
    if from_jaas is not None and from_settings is not None and from_jaas != from_settings:
        raise ConfigError(f"sasl.jaas.config and {_name(cfg, 'sasl.username')}/{_name(cfg, 'sasl.password')} "
                          "give different credentials: give them once")
    creds = from_jaas or from_settings
    if creds is None:
        raise ConfigError(f"SASL mechanism {mech} needs credentials: set sasl.jaas.config or "
                          "sasl.username/sasl.password")
    return SaslLogin(mech, username=creds[0], password=Password(creds[1]), extensions=scram_extensions)


def _resolve_oauth(cfg: ProducerConfig, jaas: Optional[JaasLoginModule]) -> Optional[ClientCredentials]:
    """OAuth client credentials (kproducer.oauth), from Java's or librdkafka's settings; None when not asked
    for. Java's settings win over the JAAS options clientId/clientSecret/scope (as Java 4.x, which warns)."""
    options = jaas.options if jaas is not None else {}
    handler = cfg.sasl_login_callback_handler_class
    method = cfg.sasl_oauthbearer_method
    url = cfg.sasl_oauthbearer_token_endpoint_url
    wanted = (url is not None or method == "OIDC" or LOGIN_CALLBACK_HANDLERS.get(handler or "") == "oauth"
              or "clientId" in options or "clientSecret" in options)
    if not wanted:
        return None
    if method == "DEFAULT" and url is not None:
        raise ConfigError(f"{_name(cfg, 'sasl.oauthbearer.method')}=default does not use "
                          f"{_name(cfg, 'sasl.oauthbearer.token.endpoint.url')}: set it to oidc")
    if handler is not None and LOGIN_CALLBACK_HANDLERS[handler] == "unsecured":
        raise ConfigError(f"{_name(cfg, 'sasl.login.callback.handler.class')}={handler.rsplit('.', 1)[-1]} "
                          "makes unsecured test tokens; OAuth client credentials need "
                          "OAuthBearerLoginCallbackHandler")
    if url is None:
        raise ConfigError("OAuth client credentials need the token endpoint: set "
                          "sasl.oauthbearer.token.endpoint.url")

    def pick(setting: str, option: str) -> Optional[str]:
        value = getattr(cfg, SETTINGS[setting].alias)
        if value is not None:
            if option in options:
                log.warning("both %s and the JAAS option %s are given: using %s (as Java does)",
                            _name(cfg, setting), option, _name(cfg, setting))
            return str(value.value if isinstance(value, Password) else value)
        return options.get(option)

    client_id = pick("sasl.oauthbearer.client.credentials.client.id", "clientId")
    secret = pick("sasl.oauthbearer.client.credentials.client.secret", "clientSecret")
    missing = [what for what, v in (("client id", client_id), ("client secret", secret)) if not v]
    if missing:
        raise ConfigError(f"OAuth client credentials need the {' and the '.join(missing)}: set "
                          "sasl.oauthbearer.client.credentials.client.id/.client.secret (librdkafka: "
                          "sasl.oauthbearer.client.id/.client.secret), or the JAAS options clientId/clientSecret "
                          "of OAuthBearerLoginModule")
    assert client_id is not None and secret is not None
    ssl_settings: Dict[str, Any] = {k: v for k, v in options.items() if k.startswith("ssl.")}
    if cfg.https_ca_location is not None:
        ssl_settings["ssl.truststore.location"] = cfg.https_ca_location
    if cfg.https_ca_pem is not None:
        ssl_settings["ssl.truststore.certificates"] = cfg.https_ca_pem
    from .oauth import ClientCredentials

    return ClientCredentials(
        url, client_id, secret, scope=pick("sasl.oauthbearer.scope", "scope"),
        sub_claim_name=cfg.sasl_oauthbearer_sub_claim_name,
        scope_claim_name=cfg.sasl_oauthbearer_scope_claim_name,
        urlencode_header=cfg.sasl_oauthbearer_header_urlencode,
        connect_timeout_ms=cfg.sasl_login_connect_timeout_ms, read_timeout_ms=cfg.sasl_login_read_timeout_ms,
        retry_backoff_ms=cfg.sasl_login_retry_backoff_ms, retry_backoff_max_ms=cfg.sasl_login_retry_backoff_max_ms,
        refresh_window_factor=cfg.sasl_login_refresh_window_factor,
        refresh_window_jitter=cfg.sasl_login_refresh_window_jitter,
        refresh_min_period_s=cfg.sasl_login_refresh_min_period_seconds,
        refresh_buffer_s=cfg.sasl_login_refresh_buffer_seconds, ssl_settings=ssl_settings)


def sasl_client_factory(login: SaslLogin, oauth: Optional[ClientCredentialsLogin] = None) -> SaslClientFactory:
    """A factory of fresh SASL clients, called at every authentication (and KIP-368 re-authentication).
    ``oauth`` is the started login of OAuth client credentials (:func:`oauth_login`)."""
    from .protocol.sasl import sasl_client, unsecured_jwt

    mechanism = login.mechanism
    if mechanism == "OAUTHBEARER":
        provider = oauth if oauth is not None else login.token_provider
        if login.oauth is not None and oauth is None:
            raise ValueError("OAuth client credentials need their started login: oauth_login(login)")
        static_extensions = login.extensions
        if provider is not None:
            def from_provider(host: str) -> "SaslClient":
                token, extensions = call_token_provider(provider, static_extensions)
                return _oauth_client(sasl_client, token, extensions)
            return from_provider
        subject = login.unsecured_subject
        lifetime = login.unsecured_lifetime_s
        assert subject is not None

        def unsecured(host: str) -> "SaslClient":
            return _oauth_client(sasl_client, unsecured_jwt(subject, lifetime), static_extensions)
        return unsecured
    username, password = login.username, login.password
    assert username is not None and password is not None
    scram_extensions = login.extensions if mechanism.startswith("SCRAM-") else None

    def with_password(host: str) -> "SaslClient":
        return sasl_client(mechanism, username=username, password=password.value, extensions=scram_extensions)
    return with_password


def _oauth_client(make: Callable[..., "SaslClient"], token: str, extensions: Optional[Dict[str, str]]) -> "SaslClient":
    try:
        return make("OAUTHBEARER", token=token, extensions=extensions or None)
    except ConfigError as e:  # an unusable token or extension: fail this authentication, not the thread
        raise SaslAuthenticationFailedError(f"SASL OAUTHBEARER: {e}") from None


def call_token_provider(provider: Any, extensions: Optional[Dict[str, str]] = None,
                        now: Optional[float] = None) -> Tuple[str, Optional[Dict[str, str]]]:
    """Ask an OAUTHBEARER token provider for a token: a callable returning ``(token, expiry_epoch_s)`` or a
    token, or an object with ``token()`` (and optionally ``extensions()``, as kafka-python's
    AbstractTokenProvider). Any failure is a SaslAuthenticationFailedError naming the exception type only."""
    what = "sasl_oauth_token_provider"
    merged = dict(extensions or {})
    try:
        method = getattr(provider, "token", None)
        result = method() if callable(method) else provider()
        more = getattr(provider, "extensions", None)
        if callable(more):
            got = more()
            if got:
                merged.update({str(k): str(v) for k, v in dict(got).items()})
    except AuthenticationError as e:  # kproducer's own providers (kproducer.oauth) say what is wrong
        raise type(e)(f"SASL OAUTHBEARER: {e.message}") from e
    except Exception as e:
        raise SaslAuthenticationFailedError(
            f"SASL OAUTHBEARER: the {what} raised {type(e).__name__}; no token to authenticate with") from e
    expiry: Any = None
    if isinstance(result, (tuple, list)) and len(result) == 2:
        result, expiry = result
    if isinstance(result, bytes):
        result = result.decode("ascii", "replace")
    if not isinstance(result, str) or not result:
        raise SaslAuthenticationFailedError(
            f"SASL OAUTHBEARER: the {what} returned a {type(result).__name__}; it must return a token string or "
            "(token, expiry_epoch_seconds)")
    if expiry is not None:
        if isinstance(expiry, bool) or not isinstance(expiry, (int, float)):
            raise SaslAuthenticationFailedError(
                f"SASL OAUTHBEARER: the {what} returned an expiry of type {type(expiry).__name__}; it must be "
                "seconds since the epoch")
        current = time.time() if now is None else now
        if expiry <= current:
            raise SaslAuthenticationFailedError(
                f"SASL OAUTHBEARER: the {what} returned a token that expired {current - expiry:.0f} s ago")
    return result, merged or None


__all__ = ["call_token_provider", "channel_security", "check_tls_settings", "oauth_login",
           "oauth_ssl_context", "resolve_sasl_login", "sasl_client_factory", "ssl_context"]
