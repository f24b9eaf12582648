"""Producer settings: Java dotted names, Pythonic aliases, Java's defaults, validation.

Every setting can be given by its Java name (``"linger.ms"``) or its Python alias (``linger_ms``).
Security settings also take the names librdkafka (confluent-kafka) and kafka-python users know
(``ssl.ca.location``, ``ssl_cafile``, ...); see docs/security.md. Unknown names raise
:class:`~kproducer.errors.ConfigError` naming the closest valid setting.

Secrets (passwords, private keys, ``sasl.jaas.config``) are held as :class:`Password`, which prints as
``[hidden]``; no error message or log line of this module shows a secret value.
"""
from __future__ import annotations

import difflib
import logging
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from .errors import ConfigError
from .protocol.compression import check_codec_available, codec_from_name
from .protocol.sasl import SUPPORTED_MECHANISMS
from .serialization import check_serializer, instantiate, load_object

if TYPE_CHECKING:
    import ssl  # imported at run time only when a TLS setting needs it

    from .oauth import ClientCredentials

log = logging.getLogger(__name__)

_INT_MAX = 2147483647
_INT_MIN = -(1 << 31)
_LONG_MAX = (1 << 63) - 1
_LONG_MIN = -(1 << 63)
#: Java's values of client.dns.lookup (the old "default" was removed in Kafka 3.0)
DNS_LOOKUPS = ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")
METADATA_RECOVERY_STRATEGIES = ("none", "rebootstrap")

HIDDEN = "[hidden]"


class Password:
    """A secret setting value, as Java's ``org.apache.kafka.common.config.types.Password``:
    ``str()`` and ``repr()`` give ``[hidden]``, :attr:`value` the secret; equal when the secrets are."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if isinstance(value, Password):
            value = value.value
        if not isinstance(value, str):
            raise TypeError(f"a Password holds a str, not {type(value).__name__}")
        self._value = value

    @property
    def value(self) -> str:
        """The secret itself."""
        return self._value

    def __str__(self) -> str:
        return HIDDEN

    def __repr__(self) -> str:
        return HIDDEN

    def __format__(self, spec: str) -> str:
        return format(HIDDEN, spec)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Password):
            return self._value == other._value
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, Password):
            return self._value != other._value
        return NotImplemented

    def __hash__(self) -> int:
        return hash((Password, self._value))

    def __reduce__(self) -> Tuple[Any, ...]:  # picklable (Spark, multiprocessing), still by value
        return (Password, (self._value,))


class HiddenObject:
    """An object-valued setting that holds credentials (an OAUTHBEARER token provider) as
    :meth:`ProducerConfig.as_dict` gives it: ``repr()`` and ``str()`` name its type only, never its own
    ``repr`` (a ``functools.partial`` or a dataclass shows the client secret it holds); :attr:`value` is the
    object itself."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    @property
    def value(self) -> Any:
        return self._value

    def __repr__(self) -> str:
        return f"<{type(self._value).__name__} {HIDDEN}>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HiddenObject):
            return self._value is other._value or bool(self._value == other._value)
        return NotImplemented

    def __hash__(self) -> int:
        return id(self._value)


def reveal(value: Any) -> Any:
    """The secret inside a :class:`Password` (or a :class:`HiddenObject`); other values as they are."""
    return value.value if isinstance(value, (Password, HiddenObject)) else value


class _Setting:
    __slots__ = ("java", "alias", "default", "kind", "lo", "hi", "choices", "doc")

    def __init__(
        self,
        java: str,
        default: Any,
        kind: str,
        doc: str,
        lo: Optional[float] = None,
        hi: Optional[float] = None,
        choices: Optional[Tuple[str, ...]] = None,
    ) -> None:
        self.java = java
        self.alias = java.replace(".", "_")
        self.default = default
        self.kind = kind
        self.lo = lo
        self.hi = hi
        self.choices = choices
        self.doc = doc

    @property
    def secret(self) -> bool:
        return self.kind == "secret"


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: the SASL mechanisms kproducer implements
SASL_MECHANISMS = SUPPORTED_MECHANISMS
TLS_VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
JKS_HINT = ("JKS key and trust stores cannot be read from Python: convert the store once with "
            "`keytool -importkeystore -srckeystore client.jks -destkeystore client.p12 -deststoretype PKCS12` "
            "and set the store's type to PKCS12 (or export PEM files)")

_SETTINGS: List[_Setting] = [
    _Setting("bootstrap.servers", None, "servers", "host:port[,host:port...] of brokers to bootstrap from"),
    _Setting("client.id", "", "str", "a name for this producer in broker logs and metrics"),
    _Setting("acks", "all", "acks", "0, 1 or all (-1)"),
    _Setting("linger.ms", 5, "long", "how long to wait for more records before sending a batch", 0),
    _Setting("batch.size", 16384, "int", "target batch size in bytes per partition", 0),
    _Setting("buffer.memory", 33554432, "long", "bytes of memory for records waiting to be sent", 1),
    _Setting("max.block.ms", 60000, "long", "how long send() may block for metadata or memory", 0),
    _Setting("max.request.size", 1048576, "int", "largest produce request (and record) in bytes", 1),
    _Setting("request.timeout.ms", 30000, "int", "how long to wait for a broker's answer (at least 1: with 0, "
             "Java's minimum, no request is answered in time)", 1),
    _Setting("delivery.timeout.ms", 120000, "int", "upper bound from send() to success or failure", 0),
    _Setting("retries", _INT_MAX, "int", "how many times a failed batch is retried", 0),
    _Setting("retry.backoff.ms", 100, "long", "first wait before retrying", 0),
    _Setting("retry.backoff.max.ms", 1000, "long", "largest wait between retries", 0),
    _Setting("reconnect.backoff.ms", 50, "long", "first wait before reconnecting to a broker", 0),
    _Setting("reconnect.backoff.max.ms", 1000, "long", "largest wait between reconnection attempts", 0),
    _Setting("max.in.flight.requests.per.connection", 5, "int", "unacknowledged requests per broker", 1),
    _Setting("metadata.max.age.ms", 300000, "long", "refresh metadata at least this often", 0),
    _Setting("metadata.max.idle.ms", 300000, "long", "forget a topic's metadata after this idle time", 5000),
    _Setting("compression.type", "none", "compression",
             "none, gzip, snappy, lz4 or zstd (None: none, as kafka-python's compression_type=None)"),
    _Setting("compression.gzip.level", -1, "optint", "gzip level 1-9, or -1 for zlib's default (6)", -1, 9),
    _Setting("compression.lz4.level", 9, "optint", "lz4 level 1-17; 9 (the default) is the fast compressor, "
             "others LZ4-HC", 1, 17),
    _Setting("compression.zstd.level", None, "optint", "zstd level -131072-22", -131072, 22),
    _Setting("enable.idempotence", True, "bool", "exactly-once per partition; needs acks=all"),
    _Setting("transactional.id", None, "txnid", "enables transactions under this id (non-empty)"),
    _Setting("transaction.timeout.ms", 60000, "int", "how long a transaction may stay open", 1),
    _Setting("partitioner", None, "partitioner",
             "callable(topic, key_bytes, value_bytes, num_partitions) -> partition, or an object with Java's "
             "partition(topic, key, key_bytes, value, value_bytes, cluster), or its dotted class name "
             "(partitioner.class); default murmur2 for keys, uniform sticky without"),
    _Setting("partitioner.ignore.keys", False, "bool", "spread keyed records like keyless ones"),
    _Setting("key.serializer", None, "serializer",
             "callable(key) -> bytes, an object with serialize(topic, key, headers), 'str', 'json', 'bytes' "
             "or a dotted class name"),
    _Setting("value.serializer", None, "serializer",
             "callable(value) -> bytes, an object with serialize(topic, value, headers), 'str', 'json', "
             "'bytes' or a dotted class name"),
    _Setting("interceptor.classes", None, "interceptors",
             "interceptors (objects with on_send(record) and/or on_acknowledgement(metadata, exception)), "
             "or their dotted class names (a list or a comma-separated string), called in order"),
    _Setting("connections.max.idle.ms", 540000, "long", "close connections idle this long", -1),
    _Setting("socket.connection.setup.timeout.ms", 10000, "long",
             "time to establish a connection (doubled per consecutive failure, with jitter; at least 1: with 0, "
             "which Java accepts, no connection is set up in time)", 1),
    _Setting("socket.connection.setup.timeout.max.ms", 30000, "long",
             "largest connection setup timeout after consecutive failures", 0),
    _Setting("client.dns.lookup", "use_all_dns_ips", "dnslookup",
             "use_all_dns_ips: try every address of a broker's host name in turn "
             "(resolve_canonical_bootstrap_servers_only is accepted and behaves the same, see docs/network.md)"),
    _Setting("metadata.recovery.strategy", "rebootstrap", "recovery",
             "rebootstrap: go back to bootstrap.servers when no known broker can be reached; none: do not"),
    _Setting("metadata.recovery.rebootstrap.trigger.ms", 300000, "long",
             "rebootstrap after this long without metadata while a refresh is wanted", 0),
    _Setting("send.buffer.bytes", 131072, "int", "SO_SNDBUF (-1: OS default)", -1),
    _Setting("receive.buffer.bytes", 32768, "int", "SO_RCVBUF (-1: OS default)", -1),
    _Setting("socket.keepalive.enable", True, "bool",
             "SO_KEEPALIVE on broker connections (librdkafka's setting, default false there; Java's client always "
             "sets it)"),
    _Setting("security.protocol", "PLAINTEXT", "choice", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
             choices=SECURITY_PROTOCOLS),
    # -- TLS (docs/security.md lists each setting's librdkafka and kafka-python names)
    _Setting("ssl.truststore.type", None, "storetype", "PEM or PKCS12 (default: PEM, or PKCS12 for a .p12/.pfx file)"),
    _Setting("ssl.truststore.location", None, "optstr",
             "CA certificates to trust: a PEM file (or a directory of them), or a PKCS12 store"),
    _Setting("ssl.truststore.certificates", None, "optstr", "CA certificates to trust, as PEM text"),
    _Setting("ssl.truststore.password", None, "secret", "password of a PKCS12 trust store"),
    _Setting("ssl.keystore.type", None, "storetype", "PEM or PKCS12 (default: PEM, or PKCS12 for a .p12/.pfx file)"),
    _Setting("ssl.keystore.location", None, "optstr",
             "client certificate chain (and key, unless ssl.key.location): a PEM file or a PKCS12 store"),
    _Setting("ssl.keystore.certificate.chain", None, "optstr", "client certificate chain as PEM text"),
    _Setting("ssl.keystore.key", None, "secret", "client private key as PEM text"),
    _Setting("ssl.keystore.password", None, "secret", "password of a PKCS12 key store"),
    _Setting("ssl.key.location", None, "optstr", "client private key as a PEM file (librdkafka's name)"),
    _Setting("ssl.key.password", None, "secret", "password of an encrypted private key"),
    _Setting("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", "protocols", "TLS versions offered"),
    _Setting("ssl.protocol", "TLSv1.3", "tlsprotocol",
             "the highest TLS version used (TLS: no limit beyond ssl.enabled.protocols)"),
    _Setting("ssl.cipher.suites", None, "optstr",
             "OpenSSL cipher list for TLS 1.2 and older (TLS 1.3 suites cannot be restricted in Python)"),
    _Setting("ssl.endpoint.identification.algorithm", "https", "endpoint",
             "https: check the broker certificate's host name; empty (or None, as Java's null): do not"),
    _Setting("enable.ssl.certificate.verification", True, "bool",
             "false turns certificate verification off altogether (librdkafka's setting)"),
    _Setting("ssl.context", None, "sslcontext", "an ssl.SSLContext used as is (kafka-python's ssl_context)"),
    # -- SASL
    _Setting("sasl.mechanism", None, "mechanism",
             "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (default: from sasl.jaas.config)"),
    _Setting("sasl.jaas.config", None, "secret", "Java's login module line with the credentials"),
    _Setting("sasl.username", None, "optstr", "user name for PLAIN and SCRAM (librdkafka's setting)"),
    _Setting("sasl.password", None, "secret", "password for PLAIN and SCRAM (librdkafka's setting)"),
    _Setting("sasl.oauth.token.provider", None, "provider",
             "OAUTHBEARER: callable returning (token, expiry_epoch_s) or a token, or an object with .token()"),
    _Setting("sasl.oauthbearer.extensions", None, "extensions",
             "OAUTHBEARER SASL extensions: 'key=value,key=value' or a mapping"),
    # -- OAUTHBEARER with OAuth 2.0 client credentials (OIDC): kproducer.oauth, docs/security.md
    _Setting("sasl.login.callback.handler.class", None, "loginhandler",
             "Java's login callback handler: OAuthBearerLoginCallbackHandler fetches OAuth tokens from "
             "sasl.oauthbearer.token.endpoint.url"),
    _Setting("sasl.oauthbearer.method", None, "choice",
             "librdkafka's: oidc fetches OAuth tokens from sasl.oauthbearer.token.endpoint.url; default does not",
             choices=("DEFAULT", "OIDC")),
    _Setting("sasl.oauthbearer.token.endpoint.url", None, "optstr",
             "OAuth token endpoint (http or https) for the client credentials grant"),
    _Setting("sasl.oauthbearer.client.credentials.client.id", None, "optstr",
             "OAuth client id (or the JAAS option clientId)"),
    _Setting("sasl.oauthbearer.client.credentials.client.secret", None, "secret",
             "OAuth client secret (or the JAAS option clientSecret)"),
    _Setting("sasl.oauthbearer.scope", None, "optstr", "OAuth scope asked for (or the JAAS option scope)"),
    _Setting("sasl.oauthbearer.scope.claim.name", "scope", "str", "the token's claim that holds its scope"),
    _Setting("sasl.oauthbearer.sub.claim.name", "sub", "str", "the token's claim that holds its principal"),
    _Setting("sasl.oauthbearer.header.urlencode", False, "bool",
             "URL-encode the client id and secret in the token request's basic auth (RFC 6749 2.3.1)"),
    _Setting("sasl.login.connect.timeout.ms", None, "optint",
             "connect timeout of a token request (unset: 10 s; Java waits without limit)", 1),
    _Setting("sasl.login.read.timeout.ms", None, "optint",
             "read timeout of a token request (unset: 10 s; Java waits without limit)", 1),
    _Setting("sasl.login.retry.backoff.ms", 100, "long", "first wait between token request attempts", 0),
    _Setting("sasl.login.retry.backoff.max.ms", 10000, "long",
             "how long a token request is retried (the waits double up to it)", 0),
    _Setting("sasl.login.refresh.window.factor", 0.8, "double",
             "a token is refreshed at this fraction of its lifetime (plus jitter)", 0.5, 1.0),
    _Setting("sasl.login.refresh.window.jitter", 0.05, "double",
             "random fraction of the lifetime added to the refresh time", 0.0, 0.25),
    _Setting("sasl.login.refresh.min.period.seconds", 60, "int",
             "a token is not refreshed sooner than this after the last refresh", 0, 900),
    _Setting("sasl.login.refresh.buffer.seconds", 300, "int",
             "a token is refreshed at least this long before it expires", 0, 3600),
    _Setting("https.ca.location", None, "optstr",
             "CA certificates (PEM file or directory) for an https token endpoint (librdkafka's setting)"),
    _Setting("https.ca.pem", None, "optstr",
             "CA certificates as PEM text for an https token endpoint (librdkafka's setting)"),
    _Setting("allow.auto.create.topics", True, "bool", "let the broker create unknown topics on metadata requests"),
    # -- metrics (docs/metrics.md)
    _Setting("metrics.sample.window.ms", 30000, "long", "the window of one metrics sample (rates and averages)", 1),
    _Setting("metrics.num.samples", 2, "int", "how many sample windows rates and averages are computed over", 1),
    _Setting("statistics.interval.ms", 0, "int",
             "call stats_cb with every metric (JSON) this often; 0: never (librdkafka's setting)", 0, 86400000),
    _Setting("stats_cb", None, "callable",
             "callable(json_str) called from the network thread every statistics.interval.ms "
             "(confluent-kafka's setting)"),
    _Setting("error_cb", None, "callable",
             "callable(KafkaError) called from the network thread for errors that belong to no record: a broker "
             "that cannot be reached (rate-limited), an authentication failure, a fatal producer error "
             "(confluent-kafka's setting)"),
]

SETTINGS: Dict[str, _Setting] = {s.java: s for s in _SETTINGS}
_ALIASES: Dict[str, str] = {s.alias: s.java for s in _SETTINGS}
_ALIASES.update({"partitioner.class": "partitioner", "partitioner_class": "partitioner",
                 "interceptors": "interceptor.classes"})


def _check_hostname_value(v: Any) -> Any:
    """kafka-python's ssl_check_hostname (a bool) as ssl.endpoint.identification.algorithm."""
    return "https" if _parse_bool("ssl_check_hostname", v) else ""


def _is_zero(v: Any) -> bool:
    try:
        return not isinstance(v, bool) and int(v) == 0
    except (TypeError, ValueError):
        return False


def _message_timeout_value(v: Any) -> Any:
    """librdkafka's message.timeout.ms; its 0 (no limit) is Java's largest delivery.timeout.ms."""
    return _INT_MAX if _is_zero(v) else v


def _kbytes_value(v: Any) -> Any:
    """librdkafka's queue.buffering.max.kbytes: kilobytes, times 1024."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ConfigError(f"queue.buffering.max.kbytes must be an integer (kilobytes), got {v!r}")
    try:
        return int(v) * 1024
    except ValueError:
        raise ConfigError(f"queue.buffering.max.kbytes must be an integer (kilobytes), got {v!r}") from None


def _socket_buffer_value(v: Any) -> Any:
    """librdkafka's 0 (the OS default) is Java's -1."""
    return -1 if _is_zero(v) else v


#: other projects' names of the same settings (librdkafka, kafka-python, aiokafka); each also with underscores,
#: and with a function turning that project's value into ours where the two differ
_SPELLINGS: Dict[str, Tuple[str, Optional[Callable[[Any], Any]]]] = {
    # librdkafka (confluent-kafka)
    "queue.buffering.max.ms": ("linger.ms", None),
    "compression.codec": ("compression.type", None),
    "message.timeout.ms": ("delivery.timeout.ms", _message_timeout_value),
    "message.max.bytes": ("max.request.size", None),
    "message.send.max.retries": ("retries", None),
    "queue.buffering.max.kbytes": ("buffer.memory", _kbytes_value),
    "request.required.acks": ("acks", None),
    "socket.timeout.ms": ("request.timeout.ms", None),
    "socket.send.buffer.bytes": ("send.buffer.bytes", _socket_buffer_value),
    "socket.receive.buffer.bytes": ("receive.buffer.bytes", _socket_buffer_value),
    # aiokafka
    "max_batch_size": ("batch.size", None),
    # security (librdkafka, kafka-python)
    "ssl.ca.location": ("ssl.truststore.location", None),
    "ssl_cafile": ("ssl.truststore.location", None),
    "ssl.ca.pem": ("ssl.truststore.certificates", None),
    "ssl.certificate.location": ("ssl.keystore.location", None),
    "ssl_certfile": ("ssl.keystore.location", None),
    "ssl_keyfile": ("ssl.key.location", None),
    "ssl.certificate.pem": ("ssl.keystore.certificate.chain", None),
    "ssl.key.pem": ("ssl.keystore.key", None),
    "ssl_password": ("ssl.key.password", None),
    "ssl_ciphers": ("ssl.cipher.suites", None),
    "ssl_check_hostname": ("ssl.endpoint.identification.algorithm", _check_hostname_value),
    "sasl.mechanisms": ("sasl.mechanism", None),
    "sasl_plain_username": ("sasl.username", None),
    "sasl_plain_password": ("sasl.password", None),
    "sasl.oauthbearer.client.id": ("sasl.oauthbearer.client.credentials.client.id", None),
    "sasl.oauthbearer.client.secret": ("sasl.oauthbearer.client.credentials.client.secret", None),
}

#: other clients' settings kproducer has no equivalent for: refused (an unknown name), with what to do instead
NO_EQUIVALENT: Dict[str, str] = {
    "batch.num.messages": "librdkafka's record count per batch has no equivalent: batches are bounded by "
                          "batch.size (bytes); remove it",
    "queue.buffering.max.messages": "librdkafka's record count limit has no equivalent: the queue is bounded by "
                                    "buffer.memory (bytes; librdkafka's queue.buffering.max.kbytes is accepted)",
    "compression.level": "give the level of the codec in use: compression.gzip.level, compression.lz4.level or "
                         "compression.zstd.level",
    "api_version": "not needed: protocol versions are negotiated with each broker (ApiVersions); remove it",
    "api_version_auto_timeout_ms": "not needed: protocol versions are negotiated with each broker; remove it",
    "loop": "not needed: kproducer.aio.AsyncProducer uses the loop that first uses it",
    "log_cb": "kproducer logs with the logging module (logger 'kproducer'): add a handler there",
    "throttle_cb": "read produce-throttle-time-avg/-max from metrics(), or statistics.interval.ms with stats_cb",
    "debug": "use logging.getLogger('kproducer').setLevel(logging.DEBUG)",
    "on_delivery": "give the callback to each send(): send(topic, value, callback=fn), fn(metadata, exception)",
    "dr_msg_cb": "give the callback to each send(): send(topic, value, callback=fn), fn(metadata, exception)",
    "dr_cb": "give the callback to each send(): send(topic, value, callback=fn), fn(metadata, exception)",
    "oauth_cb": "use sasl.oauth.token.provider: a callable returning (token, expiry_epoch_seconds)",
    "metric_reporters": "read metrics() or metric_list(), or use kproducer.metrics_prometheus",
    "metrics_enabled": "metrics are always kept (recorded per batch, not per record)",
    "sasl_kerberos_name": "SASL GSSAPI (Kerberos) is not supported",
    "sasl_kerberos_service_name": "SASL GSSAPI (Kerberos) is not supported",
    "sasl_kerberos_domain_name": "SASL GSSAPI (Kerberos) is not supported",
    "ssl_crlfile": "give an ssl.SSLContext with the CRL loaded as ssl_context",
    "socks5_proxy": "connections through a SOCKS proxy are not supported",
}
for _name, (_java, _fn) in list(_SPELLINGS.items()):
    _SPELLINGS.setdefault(_name.replace(".", "_"), (_java, _fn))
for _name, (_java, _fn) in _SPELLINGS.items():
    _ALIASES[_name] = _java
_VALUE_MAPS: Dict[str, Callable[[Any], Any]] = {n: fn for n, (_, fn) in _SPELLINGS.items() if fn is not None}

#: the settings that only matter with TLS, and those that only matter with SASL
_SSL_SETTINGS = frozenset(s.java for s in _SETTINGS if s.java.startswith("ssl.") or s.java ==
                          "enable.ssl.certificate.verification")
_SASL_SETTINGS = frozenset(s.java for s in _SETTINGS if s.java.startswith("sasl."))
#: the settings of OAUTHBEARER with OAuth client credentials that ask for it when given
_OAUTH_SETTINGS = ("sasl.login.callback.handler.class", "sasl.oauthbearer.method",
                   "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.credentials.client.id",
                   "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.scope")


def canonical_name(name: str) -> str:
    """The Java dotted name of a setting given as either form; ConfigError for unknown names."""
    if name in SETTINGS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    hint_text = NO_EQUIVALENT.get(name) or NO_EQUIVALENT.get(name.replace("_", "."))
    if hint_text:
        raise ConfigError(f"unknown producer setting {name!r}: {hint_text}")
    candidates = list(SETTINGS) + list(_ALIASES)
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown producer setting {name!r}{hint}")


def canonical_item(name: str, value: Any) -> Tuple[str, Any]:
    """``(Java name, value)`` of a setting given by any of its names: another project's value where it
    differs is turned into ours (kafka-python's ``ssl_check_hostname=False`` is
    ``ssl.endpoint.identification.algorithm=""``). ConfigError for unknown names."""
    java = canonical_name(name)
    value_map = _VALUE_MAPS.get(name)
    return java, (value_map(value) if value_map is not None else value)


def _parse_bool(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ConfigError(f"{name} must be true or false, got {v!r}")


def _parse_int(s: _Setting, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str, float)):
        raise ConfigError(f"{s.java} must be an integer, got {v!r}")
    try:
        if isinstance(v, float):
            if not v.is_integer():
                raise ValueError
            n = int(v)
        else:
            n = int(v)
    except ValueError:
        raise ConfigError(f"{s.java} must be an integer, got {v!r}") from None
    if s.lo is not None and n < s.lo:
        why = _BELOW_MINIMUM.get(s.java)
        raise ConfigError(f"{s.java} must be at least {s.lo}, got {n}" + (f": {why}" if why else ""))
    if s.hi is not None and n > s.hi:
        raise ConfigError(f"{s.java} must be at most {s.hi}, got {n}")
    if s.kind == "long":
        if not _LONG_MIN <= n <= _LONG_MAX:
            raise ConfigError(f"{s.java} must fit in 64 bits (Java's long), got {n}")
    elif not _INT_MIN <= n <= _INT_MAX:
        raise ConfigError(f"{s.java} must fit in 32 bits (Java's int), got {n}")
    if s.java == "compression.gzip.level" and n == 0:
        # Java's GZIP level validator: 1..9, or -1 (Deflater.DEFAULT_COMPRESSION)
        raise ConfigError(f"{s.java} must be -1 (zlib's default) or 1-9, got 0")
    return n


#: why a value below a setting's minimum is refused, where Java accepts it
_BELOW_MINIMUM = {
    "request.timeout.ms": "with 0 every request times out before its answer can arrive, so the producer never "
                          "connects (Java accepts 0 and expires a request once a millisecond has passed)",
    "socket.connection.setup.timeout.ms": "with 0 every connection attempt times out before it is set up, so the "
                                          "producer never connects (Java accepts 0 and gives up once a "
                                          "millisecond has passed)",
}


_SERVER_RE = re.compile(r"^\[?([^\[\]]+?)\]?:(\d{1,5})$")


def parse_servers(value: Any) -> List[Tuple[str, int]]:
    """``"h1:9092,h2:9093"`` or a list of ``"host:port"`` -> [(host, port), ...]."""
    if isinstance(value, str):
        items = [x.strip() for x in value.split(",") if x.strip()]
    elif isinstance(value, (list, tuple)):
        items = [str(x).strip() for x in value]
    else:
        raise ConfigError(f"bootstrap.servers must be 'host:port,...' or a list, got {value!r}")
    if not items:
        raise ConfigError("bootstrap.servers is empty: give at least one host:port")
    out = []
    for item in items:
        m = _SERVER_RE.match(item)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(f"bootstrap.servers entry {item!r} is not host:port")
        out.append((m.group(1), int(m.group(2))))
    return out


def _convert(s: _Setting, v: Any) -> Any:
    kind = s.kind
    if kind == "int" or kind == "long":
        return _parse_int(s, v)
    if kind == "txnid":
        if v is None:
            return None
        if not isinstance(v, str):
            raise ConfigError(f"{s.java} must be a string or None, got {v!r}")
        if not v:
            # Java's ConfigDef.NonEmptyString: an empty id is an error, not "no transactions"
            raise ConfigError(f"{s.java} must be non-empty (leave it unset for a producer without transactions)")
        return v
    if kind == "dnslookup":
        text = str(v).strip().lower()
        if text not in DNS_LOOKUPS:
            raise ConfigError(f"{s.java}={v!r} is not supported; valid: {', '.join(DNS_LOOKUPS)}")
        return text
    if kind == "recovery":
        text = str(v).strip().lower()
        if text not in METADATA_RECOVERY_STRATEGIES:
            raise ConfigError(f"{s.java}={v!r} is not supported; valid: {', '.join(METADATA_RECOVERY_STRATEGIES)}")
        return text
    if kind == "optint":
        return None if v is None else _parse_int(s, v)
    if kind == "bool":
        return _parse_bool(s.java, v)
    if kind == "str":
        if not isinstance(v, str):
            raise ConfigError(f"{s.java} must be a string, got {v!r}")
        return v
    if kind == "optstr":
        if v is not None and not isinstance(v, str):
            raise ConfigError(f"{s.java} must be a string or None, got {v!r}")
        return v or None
    if kind == "callable":
        if v is not None and not callable(v):
            raise ConfigError(f"{s.java} must be callable, got {v!r}")
        return v
    if kind == "serializer":
        return check_serializer(s.java, v)
    if kind == "partitioner":
        return _check_partitioner(s.java, v)
    if kind == "interceptors":
        return _check_interceptors(s.java, v)
    if kind == "servers":
        return parse_servers(v)
    if kind == "acks":
        text = str(v).strip().lower()
        if text in ("all", "-1"):
            return -1
        if text in ("0", "1"):
            return int(text)
        raise ConfigError(f"acks must be 0, 1 or 'all', got {v!r}")
    if kind == "compression":
        try:
            codec = codec_from_name(str(v))
        except ValueError as e:
            raise ConfigError(f"compression.type: {e}") from None
        try:
            check_codec_available(codec)
        except ImportError as e:
            raise ConfigError(f"compression.type={v}: {e}") from None
        return codec
    if kind == "choice":
        assert s.choices is not None
        if str(v).strip().upper() not in s.choices:
            raise ConfigError(f"{s.java}={v!r} is not supported; valid: {', '.join(s.choices)}")
        return str(v).strip().upper()
    if kind == "secret":
        # never the value in a message: only its type
        if isinstance(v, Password):
            secret = v
        elif isinstance(v, str):
            secret = Password(v)
        else:
            raise ConfigError(f"{s.java} must be a string, got a {type(v).__name__}")
        if s.java == "sasl.jaas.config" and not secret.value.strip():
            return None
        return secret
    if kind == "storetype":
        text = str(v).strip().upper()
        if text in ("", "NONE"):
            return None
        if text == "JKS":
            raise ConfigError(f"{s.java}=JKS: {JKS_HINT}")
        if text in ("PKCS12", "P12", "PFX"):
            return "PKCS12"
        if text == "PEM":
            return "PEM"
        raise ConfigError(f"{s.java}={v!r} is not supported; valid: PEM, PKCS12")
    if kind == "protocols":
        return _parse_protocols(s.java, v)
    if kind == "tlsprotocol":
        text = str(v).strip()
        if text.upper() == "TLS":
            return "TLS"
        for known in TLS_VERSIONS:
            if text.lower() == known.lower():
                return known
        raise ConfigError(f"{s.java}={v!r} is not supported; valid: TLS, {', '.join(TLS_VERSIONS)}")
    if kind == "endpoint":
        if v is None:
            return ""
        text = str(v).strip().lower()
        if text in ("", "none"):
            return ""
        if text == "https":
            return "https"
        raise ConfigError(f"{s.java}={v!r} is not supported: 'https' checks the broker's host name, an empty "
                          "value does not")
    if kind == "sslcontext":
        if v is None:
            return None
        import ssl  # a context was given, so the caller has ssl loaded already

        if not isinstance(v, ssl.SSLContext):
            raise ConfigError(f"{s.java} must be an ssl.SSLContext, got a {type(v).__name__}")
        return v
    if kind == "provider":
        if v is None or callable(v) or callable(getattr(v, "token", None)):
            return v
        raise ConfigError(f"{s.java} must be a callable returning (token, expiry_epoch_seconds) or a token, or an "
                          f"object with a token() method, got a {type(v).__name__}")
    if kind == "mechanism":
        text = str(v).strip().upper()
        if not text:
            return None
        if text == "GSSAPI":
            raise ConfigError(f"{s.java}=GSSAPI: Kerberos is not supported by kproducer; supported mechanisms: "
                              f"{', '.join(SASL_MECHANISMS)}")
        if text not in SASL_MECHANISMS:
            raise ConfigError(f"{s.java}={v!r} is not supported; valid: {', '.join(SASL_MECHANISMS)}")
        return text
    if kind == "extensions":
        return _parse_extensions(s.java, v)
    if kind == "double":
        return _parse_double(s, v)
    if kind == "loginhandler":
        return _check_login_handler(s.java, v)
    raise AssertionError(kind)


def _parse_double(s: _Setting, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ConfigError(f"{s.java} must be a number, got {v!r}")
    try:
        x = float(v)
    except ValueError:
        raise ConfigError(f"{s.java} must be a number, got {v!r}") from None
    if (s.lo is not None and not x >= s.lo) or (s.hi is not None and not x <= s.hi):
        raise ConfigError(f"{s.java} must be between {s.lo} and {s.hi}, got {v!r}")
    return x


#: Java's login callback handlers for OAUTHBEARER: the OAuth one (client credentials), the unsecured one (tests)
LOGIN_CALLBACK_HANDLERS = {
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler": "oauth",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler": "oauth",  # Kafka 3.1-3.3
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredLoginCallbackHandler":
        "unsecured",
}


def _check_login_handler(name: str, v: Any) -> Optional[str]:
    """The handler's full Java class name (also given by its simple name)."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    text = str(v).strip()
    if text in LOGIN_CALLBACK_HANDLERS:
        return text
    simple = text.rsplit(".", 1)[-1]
    for java in LOGIN_CALLBACK_HANDLERS:
        if java.rsplit(".", 1)[-1] == simple:
            return java
    raise ConfigError(f"{name}={text}: kproducer cannot load Java classes; it knows OAuthBearerLoginCallbackHandler "
                      "(OAuth client credentials from sasl.oauthbearer.token.endpoint.url). For another way to get "
                      "tokens give sasl_oauth_token_provider (a callable returning (token, expiry_epoch_seconds))")


#: Java's partitioner class names: the built-in default ones mean kproducer's default (None)
_JAVA_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": None,
    "org.apache.kafka.clients.producer.UniformStickyPartitioner": None,
    "org.apache.kafka.clients.producer.RoundRobinPartitioner": "kproducer.producer.partitioner.RoundRobinPartitioner",
    # librdkafka's murmur2_random is Java's default: murmur2 for keys, spread without (KIP-794's sticky here)
    "murmur2_random": None,
}
#: librdkafka's other partitioners: no equivalent (keyed records would land elsewhere than with Java)
_LIBRDKAFKA_PARTITIONERS = ("random", "consistent", "consistent_random", "murmur2", "fnv1a", "fnv1a_random")
_PARTITIONER_WHAT = ("callable(topic, key_bytes, value_bytes, num_partitions), an object with "
                     "partition(topic, key, key_bytes, value, value_bytes, cluster), or a dotted class name")


def _check_partitioner(name: str, v: Any) -> Any:
    if isinstance(v, str):
        if v.strip() in _LIBRDKAFKA_PARTITIONERS:
            raise ConfigError(f"{name}={v.strip()!r} is librdkafka's, which kproducer does not have: kproducer's "
                              "default is Java's (murmur2 of the key, librdkafka's murmur2_random); give a "
                              "partitioner object or callable for another placement")
        dotted = _JAVA_PARTITIONERS.get(v.strip(), v.strip())
        if dotted is None:
            return None
        v = load_object(dotted, name, _PARTITIONER_WHAT)
    elif isinstance(v, type) and callable(getattr(v, "partition", None)):
        v = instantiate(v, name)  # a Partitioner class rather than an instance, as Java configures it
    if v is None or callable(getattr(v, "partition", None)) or callable(v):
        return v
    raise ConfigError(f"{name} must be {_PARTITIONER_WHAT}, got a {type(v).__name__}")


def _check_interceptors(name: str, v: Any) -> Optional[Tuple[Any, ...]]:
    if v is None:
        return None
    items = [x.strip() for x in v.split(",") if x.strip()] if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{name} must be a list of interceptors or class names, got a {type(v).__name__}")
    out: List[Any] = []
    for item in items:
        if isinstance(item, str):
            item = load_object(item, name, "a list of interceptors or their dotted class names")
        elif isinstance(item, type):
            item = instantiate(item, name)
        if not (callable(getattr(item, "on_send", None)) or callable(getattr(item, "on_acknowledgement", None))):
            raise ConfigError(f"{name}: {type(item).__name__} has neither on_send(record) nor "
                              "on_acknowledgement(metadata, exception)")
        out.append(item)
    return tuple(out) or None


def _parse_protocols(name: str, v: Any) -> List[str]:
    if isinstance(v, str):
        items = [x.strip() for x in v.split(",") if x.strip()]
    elif isinstance(v, (list, tuple)):
        items = [str(x).strip() for x in v]
    else:
        raise ConfigError(f"{name} must be a comma-separated list such as 'TLSv1.2,TLSv1.3', got {v!r}")
    out: List[str] = []
    for item in items:
        match = [known for known in TLS_VERSIONS if known.lower() == item.lower()]
        if not match:
            raise ConfigError(f"{name}: {item!r} is not a TLS version kproducer knows; valid: "
                              f"{', '.join(TLS_VERSIONS)}")
        if match[0] not in out:
            out.append(match[0])
    if not out:
        raise ConfigError(f"{name} is empty: give at least one of {', '.join(TLS_VERSIONS)}")
    return sorted(out, key=TLS_VERSIONS.index)


_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")
_EXTENSION_VALUE = re.compile(r"^[\x21-\x7E \t\r\n]+$")


def _parse_extensions(name: str, v: Any) -> Optional[Dict[str, str]]:
    """SASL/OAUTHBEARER extensions (KIP-342): ``"k=v,k=v"`` (librdkafka's form) or a mapping."""
    if v is None:
        return None
    pairs: List[Tuple[str, str]] = []
    if isinstance(v, str):
        for item in v.split(","):
            if not item.strip():
                continue
            k, sep, val = item.partition("=")
            if not sep:
                raise ConfigError(f"{name} must be 'key=value,key=value'; an entry has no '='")
            pairs.append((k.strip(), val.strip()))
    elif isinstance(v, Mapping):
        pairs = [(str(k), str(val)) for k, val in v.items()]
    else:
        raise ConfigError(f"{name} must be 'key=value,key=value' or a mapping, got a {type(v).__name__}")
    out: Dict[str, str] = {}
    for k, val in pairs:
        if not _EXTENSION_KEY.match(k) or k == "auth":
            raise ConfigError(f"{name}: extension name {k!r} must be letters only and not 'auth' (KIP-342)")
        if not _EXTENSION_VALUE.match(val):
            raise ConfigError(f"{name}: the value of extension {k!r} must be non-empty printable ASCII")
        out[k] = val
    return out or None


# -- sasl.jaas.config -------------------------------------------------------------------------------

_JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")
_JAAS_WORD = re.compile(r"[A-Za-z0-9_.$\-]+")
_JAAS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}
#: login module (simple class name) -> the mechanism family it supplies credentials for
_LOGIN_MODULES = {"PlainLoginModule": "PLAIN", "ScramLoginModule": "SCRAM", "OAuthBearerLoginModule": "OAUTHBEARER"}
_JAAS_EXAMPLE = ('e.g. org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                 'password="...";')


class JaasLoginModule:
    """One login module of a ``sasl.jaas.config`` value. ``repr()`` shows the option names, never values."""

    __slots__ = ("module", "flag", "options")

    def __init__(self, module: str, flag: str, options: Dict[str, str]) -> None:
        self.module = module
        self.flag = flag
        self.options = options

    @property
    def simple_name(self) -> str:
        return self.module.rsplit(".", 1)[-1]

    @property
    def mechanism_family(self) -> str:
        """PLAIN, SCRAM or OAUTHBEARER; ConfigError for login modules kproducer cannot use."""
        family = _LOGIN_MODULES.get(self.simple_name)
        if family is not None:
            return family
        if self.simple_name == "Krb5LoginModule":
            raise ConfigError("sasl.jaas.config uses Krb5LoginModule: Kerberos (GSSAPI) is not supported by "
                              f"kproducer; supported mechanisms: {', '.join(SASL_MECHANISMS)}")
        if self.simple_name == "IAMLoginModule":
            raise ConfigError("sasl.jaas.config uses Amazon MSK's IAMLoginModule, a Java class: with kproducer use "
                              "sasl.mechanism=OAUTHBEARER and a sasl_oauth_token_provider (e.g. from "
                              "aws-msk-iam-sasl-signer-python); see docs/security.md")
        raise ConfigError(f"sasl.jaas.config uses login module {self.module}, which kproducer does not know; "
                          "it knows PlainLoginModule, ScramLoginModule and OAuthBearerLoginModule")

    def __repr__(self) -> str:
        return f"JaasLoginModule({self.module} {self.flag} options={sorted(self.options)})"


def _jaas_error(what: str) -> ConfigError:
    return ConfigError(f"sasl.jaas.config is malformed: {what} ({_JAAS_EXAMPLE})")


def _jaas_tokens(text: str) -> List[Tuple[str, str, int]]:
    """(kind, text, position) with kind word, string, '=' or ';'. Errors name positions, never the text."""
    out: List[Tuple[str, str, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise _jaas_error(f"a /* comment at position {i} is not closed")
            i = j + 2
        elif c in "=;":
            out.append((c, c, i))
            i += 1
        elif c in "\"'":
            start = i
            i += 1
            chars: List[str] = []
            while True:
                if i >= n:
                    raise _jaas_error(f"the quoted value at position {start} is not closed")
                ch = text[i]
                if ch == c:
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    if nxt in "01234567":
                        j = i + 1
                        while j < n and j < i + 4 and text[j] in "01234567":
                            j += 1
                        chars.append(chr(int(text[i + 1:j], 8)))
                        i = j
                        continue
                    chars.append(_JAAS_ESCAPES.get(nxt, nxt))
                    i += 2
                    continue
                chars.append(ch)
                i += 1
            out.append(("string", "".join(chars), start))
        else:
            m = _JAAS_WORD.match(text, i)
            if m is None:
                raise _jaas_error(f"unexpected character at position {i} (quote values that are not plain words)")
            out.append(("word", m.group(), i))
            i = m.end()
    return out


def parse_jaas_config(text: str) -> JaasLoginModule:
    """Parse a ``sasl.jaas.config`` value: exactly one ``<LoginModule class> <flag> [name=value ...];``
    with values plain words or quoted (``\"`` and ``\\`` escapes). ConfigError that never shows a value."""
    tokens = _jaas_tokens(text)
    modules: List[JaasLoginModule] = []
    i = 0
    while i < len(tokens):
        kind, module, pos = tokens[i]
        if kind != "word":
            raise _jaas_error(f"expected a login module class name at position {pos}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in _JAAS_FLAGS:
            raise _jaas_error(f"the login module {module} must be followed by a control flag "
                              f"({', '.join(_JAAS_FLAGS)})")
        flag = tokens[i + 1][1].lower()
        i += 2
        options: Dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise _jaas_error("the login module's options must end with ';'")
            kind, key, pos = tokens[i]
            if kind == ";":
                i += 1
                break
            if kind != "word":
                raise _jaas_error(f"expected an option name at position {pos}")
            if i + 1 >= len(tokens) or tokens[i + 1][0] != "=":
                raise _jaas_error(f"option {key} must be followed by '=' and a value")
            if i + 2 >= len(tokens) or tokens[i + 2][0] not in ("word", "string"):
                raise _jaas_error(f"option {key} has no value")
            options[key] = tokens[i + 2][1]
            i += 3
        modules.append(JaasLoginModule(module, flag, options))
    if not modules:
        raise _jaas_error("no login module")
    if len(modules) > 1:
        raise ConfigError(f"sasl.jaas.config has {len(modules)} login modules; a client takes exactly one")
    return modules[0]


#: the options each login module reads, as Java's (Java ignores any other option without a word)
_JAAS_OPTIONS: Dict[str, Tuple[str, ...]] = {
    "PlainLoginModule": ("username", "password"),
    "ScramLoginModule": ("username", "password", "tokenauth"),
    "OAuthBearerLoginModule": ("clientId", "clientSecret", "scope", "unsecuredLoginStringClaim_sub",
                               "unsecuredLoginLifetimeSeconds"),
}
#: OAuthBearerLoginModule's option families: SASL extensions (OAuth, unsecured) and the token endpoint's TLS
_JAAS_OPTION_PREFIXES = ("extension_", "unsecuredLoginExtension_", "ssl.")
#: options Java's unsecured login handler knows that kproducer's unsecured test tokens do not make
_JAAS_UNSUPPORTED = ("unsecuredLoginStringClaim_", "unsecuredLoginNumberClaim_", "unsecuredLoginListClaim_",
                     "unsecuredLoginPrincipalClaimName", "unsecuredLoginScopeClaimName")


def check_jaas_options(jaas: JaasLoginModule) -> None:
    """Options the login module does not read: a ConfigError for a near miss of one it reads (``tokenAuth``,
    ``usename``, ``clientID``: Java would ignore it, and authenticate otherwise than meant), a warning for the
    others (ignored, as Java does). TLS options of the OAuth token endpoint must be TLS settings kproducer knows.
    Messages name options, never their values."""
    module = jaas.simple_name
    known = _JAAS_OPTIONS.get(module, ())
    for option in jaas.options:
        if option in known or (module == "OAuthBearerLoginModule" and option.startswith(_JAAS_OPTION_PREFIXES)
                               and option not in _JAAS_OPTION_PREFIXES):
            if option.startswith("ssl.") and canonical_name_or_none(option) not in _SSL_SETTINGS:
                raise ConfigError(f"sasl.jaas.config: {module} option {option!r} is not a TLS setting kproducer "
                                  "knows (the token endpoint's TLS takes ssl.truststore.*, ssl.keystore.* ...)")
            continue
        if module == "OAuthBearerLoginModule" and option.startswith(_JAAS_UNSUPPORTED):
            log.warning("sasl.jaas.config: OAuthBearerLoginModule option %s is not supported by kproducer (its "
                        "unsecured test tokens carry sub, iat and exp only): ignored", option)
            continue
        close = [k for k in known if k.lower() == option.lower()] or \
            difflib.get_close_matches(option, known, n=1, cutoff=0.75)
        if close:
            raise ConfigError(f"sasl.jaas.config: {module} has no option {option!r}; did you mean {close[0]!r}? "
                              "(option names are case-sensitive; Java would ignore it silently)")
        log.warning("sasl.jaas.config: %s ignores the option %s (as Java does); it reads %s", module, option,
                    ", ".join(known) or "no options")


def canonical_name_or_none(name: str) -> Optional[str]:
    try:
        return canonical_name(name)
    except ConfigError:
        return None


class SaslLogin:
    """What a SASL authentication needs, resolved from the settings. ``repr()`` hides the secrets."""

    __slots__ = ("mechanism", "username", "password", "token_provider", "unsecured_subject",
                 "unsecured_lifetime_s", "extensions", "oauth")

    def __init__(self, mechanism: str, username: Optional[str] = None, password: Optional[Password] = None,
                 token_provider: Any = None, unsecured_subject: Optional[str] = None,
                 unsecured_lifetime_s: float = 3600.0, extensions: Optional[Dict[str, str]] = None,
                 oauth: Optional[ClientCredentials] = None) -> None:
        self.mechanism = mechanism
        self.username = username
        self.password = password
        self.token_provider = token_provider
        self.unsecured_subject = unsecured_subject
        self.unsecured_lifetime_s = unsecured_lifetime_s
        #: SASL extensions: OAUTHBEARER's (KIP-342), SCRAM's (tokenauth=true for delegation tokens, KIP-48)
        self.extensions = extensions
        #: OAUTHBEARER with OAuth client credentials (kproducer.oauth)
        self.oauth = oauth

    def __repr__(self) -> str:
        if self.username is not None:
            who = f"username={self.username!r}"
            if self.extensions and self.extensions.get("tokenauth") == "true":
                who += ", delegation token"
        elif self.oauth is not None:
            who = repr(self.oauth)
        elif self.token_provider is not None:
            who = "token_provider"
        else:
            who = f"unsecured sub={self.unsecured_subject!r}"
        return f"SaslLogin({self.mechanism}, {who})"


def _same_value(s: _Setting, a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        if reveal(a) == reveal(b):
            return True
    except Exception:  # an odd object's __eq__
        return False
    if s.kind in ("callable", "provider", "sslcontext", "serializer", "partitioner", "interceptors"):
        return False
    try:
        return bool(_convert(s, a) == _convert(s, b))
    except ConfigError:
        return False


class ProducerConfig:
    """Validated producer settings; attributes use the Python aliases (``cfg.linger_ms``)."""

    bootstrap_servers: List[Tuple[str, int]]
    client_id: str
    acks: int
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    max_request_size: int
    request_timeout_ms: int
    delivery_timeout_ms: int
    retries: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    max_in_flight_requests_per_connection: int
    metadata_max_age_ms: int
    metadata_max_idle_ms: int
    compression_type: int
    compression_gzip_level: Optional[int]
    compression_lz4_level: Optional[int]
    compression_zstd_level: Optional[int]
    enable_idempotence: bool
    transactional_id: Optional[str]
    transaction_timeout_ms: int
    partitioner: Any  # a callable or an object with partition() (see kproducer.producer.partitioner)
    partitioner_ignore_keys: bool
    key_serializer: Any  # a callable or an object with serialize() (see kproducer.serialization)
    value_serializer: Any
    interceptor_classes: Optional[Tuple[Any, ...]]
    connections_max_idle_ms: int
    socket_connection_setup_timeout_ms: int
    socket_connection_setup_timeout_max_ms: int
    client_dns_lookup: str
    metadata_recovery_strategy: str
    metadata_recovery_rebootstrap_trigger_ms: int
    send_buffer_bytes: int
    receive_buffer_bytes: int
    socket_keepalive_enable: bool
    security_protocol: str
    allow_auto_create_topics: bool
    ssl_truststore_type: Optional[str]
    ssl_truststore_location: Optional[str]
    ssl_truststore_certificates: Optional[str]
    ssl_truststore_password: Optional[Password]
    ssl_keystore_type: Optional[str]
    ssl_keystore_location: Optional[str]
    ssl_keystore_certificate_chain: Optional[str]
    ssl_keystore_key: Optional[Password]
    ssl_keystore_password: Optional[Password]
    ssl_key_location: Optional[str]
    ssl_key_password: Optional[Password]
    ssl_enabled_protocols: List[str]
    ssl_protocol: str
    ssl_cipher_suites: Optional[str]
    ssl_endpoint_identification_algorithm: str
    enable_ssl_certificate_verification: bool
    ssl_context: Optional[ssl.SSLContext]
    sasl_mechanism: Optional[str]
    sasl_jaas_config: Optional[Password]
    sasl_username: Optional[str]
    sasl_password: Optional[Password]
    sasl_oauth_token_provider: Any
    sasl_oauthbearer_extensions: Optional[Dict[str, str]]
    sasl_login_callback_handler_class: Optional[str]
    sasl_oauthbearer_method: Optional[str]
    sasl_oauthbearer_token_endpoint_url: Optional[str]
    sasl_oauthbearer_client_credentials_client_id: Optional[str]
    sasl_oauthbearer_client_credentials_client_secret: Optional[Password]
    sasl_oauthbearer_scope: Optional[str]
    sasl_oauthbearer_scope_claim_name: str
    sasl_oauthbearer_sub_claim_name: str
    sasl_oauthbearer_header_urlencode: bool
    sasl_login_connect_timeout_ms: Optional[int]
    sasl_login_read_timeout_ms: Optional[int]
    sasl_login_retry_backoff_ms: int
    sasl_login_retry_backoff_max_ms: int
    sasl_login_refresh_window_factor: float
    sasl_login_refresh_window_jitter: float
    sasl_login_refresh_min_period_seconds: int
    sasl_login_refresh_buffer_seconds: int
    https_ca_location: Optional[str]
    https_ca_pem: Optional[str]
    metrics_sample_window_ms: int
    metrics_num_samples: int
    statistics_interval_ms: int
    stats_cb: Optional[Callable[[str], Any]]
    error_cb: Optional[Callable[[Any], Any]]

    def __init__(self, settings: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        given: Dict[str, Any] = {}
        #: each explicit setting (Java name) -> the name the user gave it by
        self.spelled: Dict[str, str] = {}
        for source in (settings or {}, kwargs):
            for name, value in source.items():
                if not isinstance(name, str):
                    raise ConfigError(f"setting names must be strings, got {name!r}")
                java, value = canonical_item(name, value)
                if java in given and not _same_value(SETTINGS[java], given[java], value):
                    first = self.spelled[java]
                    if first == name:
                        raise ConfigError(f"{java} is given twice with different values")
                    also = "" if java in (first, name) else f" ({java})"
                    raise ConfigError(f"{first} and {name} are the same setting{also} with different values; "
                                      "give it once")
                given[java] = value
                self.spelled.setdefault(java, name)
        self.explicit: Set[str] = set(given)
        for s in _SETTINGS:
            raw = given.get(s.java, s.default)
            if s.java == "bootstrap.servers" and raw is None:
                raise ConfigError("bootstrap.servers is required, e.g. Producer(bootstrap_servers='127.0.0.1:9092')")
            # (kafka-python passes compression_type=None for "none")
            if raw is None and s.default is not None and s.kind not in ("endpoint", "compression"):
                # Java's validators refuse null for a setting that has a value by default; None must not
                # skip the checks either (acks=None used to be accepted, and no record was ever delivered)
                raise ConfigError(f"{self.spelled.get(s.java, s.java)} cannot be None: give a value, or leave it "
                                  f"out for the default ({s.java}={s.default})")
            keep_none = raw is None and s.kind not in ("endpoint", "compression")
            setattr(self, s.alias, None if keep_none else _convert(s, raw))
        #: (setting, object) of each plug-in made here from a dotted name or a class: the producer calls their
        #: configure(configs) as Java does (kproducer.producer.plugins)
        self.loaded_plugins: Tuple[Tuple[str, Any], ...] = self._find_loaded_plugins(given)
        #: the resolved SASL login (mechanism and credentials) for SASL_PLAINTEXT / SASL_SSL, else None
        self.sasl_login: Optional[SaslLogin] = None
        self._check_relations()
        self._check_security()

    def _find_loaded_plugins(self, given: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
        out: List[Tuple[str, Any]] = []
        for java in ("key.serializer", "value.serializer", "partitioner"):
            obj = getattr(self, SETTINGS[java].alias)
            if isinstance(given.get(java), (str, type)) and obj is not None:
                out.append((java, obj))
        raw = given.get("interceptor.classes")
        made = self.interceptor_classes or ()
        if isinstance(raw, str):
            out.extend(("interceptor.classes", i) for i in made)
        elif isinstance(raw, (list, tuple)) and len(raw) == len(made):
            out.extend(("interceptor.classes", i) for r, i in zip(raw, made) if isinstance(r, (str, type)))
        return tuple(out)

    def _named(self, java: str) -> str:
        """A setting as the user spelled it (for messages)."""
        return self.spelled.get(java, java)

    def _check_security(self) -> None:
        proto = self.security_protocol
        tls = proto in ("SSL", "SASL_SSL")
        sasl = proto.startswith("SASL_")
        ssl_given = sorted(self.explicit & _SSL_SETTINGS)
        sasl_given = sorted(self.explicit & _SASL_SETTINGS)
        if ssl_given and not tls:
            log.info("security.protocol=%s: ignoring %s (TLS settings apply to SSL and SASL_SSL)", proto,
                     ", ".join(self._named(n) for n in ssl_given))
        if sasl_given and not sasl:
            log.info("security.protocol=%s: ignoring %s (SASL settings apply to SASL_PLAINTEXT and SASL_SSL)",
                     proto, ", ".join(self._named(n) for n in sasl_given))
        if tls:
            self._check_tls(ssl_given)
        if sasl:
            self.sasl_login = self._resolve_sasl()

    def _check_tls(self, ssl_given: List[str]) -> None:
        if self.ssl_context is not None:
            others = [self._named(n) for n in ssl_given if n != "ssl.context"]
            if others:
                raise ConfigError(f"{self._named('ssl.context')} is used as it is: do not give {', '.join(others)} "
                                  "with it (configure the SSLContext instead)")
            return

        def both(a: str, b: str, what: str) -> None:
            if a in self.explicit and b in self.explicit and getattr(self, SETTINGS[a].alias) is not None \
                    and getattr(self, SETTINGS[b].alias) is not None:
                raise ConfigError(f"{self._named(a)} and {self._named(b)} both give {what}: give one")

        both("ssl.truststore.location", "ssl.truststore.certificates", "the trusted CA certificates")
        both("ssl.keystore.location", "ssl.keystore.certificate.chain", "the client certificate")
        self.ssl_truststore_type = _store_type(self, "ssl.truststore.type", self.ssl_truststore_location)
        self.ssl_keystore_type = _store_type(self, "ssl.keystore.type", self.ssl_keystore_location)
        if self.ssl_truststore_certificates is not None and self.ssl_truststore_type == "PKCS12":
            raise ConfigError(f"{self._named('ssl.truststore.certificates')} is PEM text: it needs "
                              "ssl.truststore.type=PEM")
        if (self.ssl_keystore_certificate_chain is None) != (self.ssl_keystore_key is None):
            have, need = (("ssl.keystore.certificate.chain", "ssl.keystore.key")
                          if self.ssl_keystore_key is None else ("ssl.keystore.key", "ssl.keystore.certificate.chain"))
            raise ConfigError(f"{self._named(have)} needs {need} (the client certificate chain and its key, as "
                              "PEM text)")
        if self.ssl_keystore_certificate_chain is not None and self.ssl_keystore_type == "PKCS12":
            raise ConfigError(f"{self._named('ssl.keystore.certificate.chain')} is PEM text: it needs "
                              "ssl.keystore.type=PEM")
        if self.ssl_key_location is not None:
            if self.ssl_keystore_location is None:
                raise ConfigError(f"{self._named('ssl.key.location')} needs the client certificate in "
                                  "ssl.keystore.location (ssl.certificate.location, ssl_certfile)")
            if self.ssl_keystore_type == "PKCS12":
                raise ConfigError(f"{self._named('ssl.key.location')} is for PEM files; a PKCS12 key store "
                                  "holds the key itself")

    def _resolve_sasl(self) -> SaslLogin:
        proto = self.security_protocol
        jaas = parse_jaas_config(self.sasl_jaas_config.value) if self.sasl_jaas_config is not None else None
        family = jaas.mechanism_family if jaas is not None else None
        if jaas is not None:
            check_jaas_options(jaas)
        oauth_given = sorted(n for n in _OAUTH_SETTINGS if n in self.explicit
                             and getattr(self, SETTINGS[n].alias) not in (None, "DEFAULT"))
        mech = self.sasl_mechanism
        if mech is None:
            if family == "SCRAM":
                raise ConfigError("sasl.jaas.config uses ScramLoginModule: set sasl.mechanism to SCRAM-SHA-256 or "
                                  "SCRAM-SHA-512")
            if family is not None:
                mech = family
            elif self.sasl_oauth_token_provider is not None or oauth_given:
                mech = "OAUTHBEARER"
            elif self.spelled.get("sasl.username") == "sasl_plain_username":
                mech = "PLAIN"  # kafka-python's default sasl_mechanism
            else:
                raise ConfigError(
                    f"security.protocol={proto} needs sasl.mechanism: one of {', '.join(SASL_MECHANISMS)} "
                    "(Java's default, GSSAPI/Kerberos, is not supported), or a sasl.jaas.config whose login "
                    "module names it")
            self.sasl_mechanism = mech
        if mech == "OAUTHBEARER":
            if family is not None and family != "OAUTHBEARER":
                raise ConfigError(f"sasl.mechanism=OAUTHBEARER needs OAuthBearerLoginModule in sasl.jaas.config, "
                                  f"not {jaas.simple_name if jaas else family}")
            extensions: Dict[str, str] = {}
            if jaas is not None:
                for key, value in jaas.options.items():
                    if key.startswith("unsecuredLoginExtension_"):
                        extensions.update(_parse_extensions("sasl.jaas.config", {key[24:]: value}) or {})
                    elif key.startswith("extension_"):  # OAuthBearerLoginCallbackHandler's extensions
                        extensions.update(_parse_extensions("sasl.jaas.config", {key[10:]: value}) or {})
            extensions.update(self.sasl_oauthbearer_extensions or {})
            oauth = self._resolve_oauth(jaas, oauth_given)
            if self.sasl_oauth_token_provider is not None:
                if oauth is not None:
                    raise ConfigError(f"{self._named('sasl.oauth.token.provider')} and OAuth client credentials "
                                      f"({', '.join(self._named(n) for n in oauth_given) or 'sasl.jaas.config'}) both "
                                      "give the token: give one")
                return SaslLogin(mech, token_provider=self.sasl_oauth_token_provider,
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
            raise ConfigError(f"{', '.join(self._named(n) for n in oauth_given)}: OAuth settings need "
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
        if self.sasl_username is not None or self.sasl_password is not None:
            if self.sasl_username is None or self.sasl_password is None:
                have, need = (("sasl.username", "sasl.password") if self.sasl_password is None
                              else ("sasl.password", "sasl.username"))
                raise ConfigError(f"{self._named(have)} needs {need}")
            from_settings = (self.sasl_username, self.sasl_password.value)
        if from_jaas is not None and from_settings is not None and from_jaas != from_settings:
            raise ConfigError(f"sasl.jaas.config and {self._named('sasl.username')}/{self._named('sasl.password')} "
                              "give different credentials: give them once")
        creds = from_jaas or from_settings
        if creds is None:
            raise ConfigError(f"SASL mechanism {mech} needs credentials: set sasl.jaas.config or "
                              "sasl.username/sasl.password")
        return SaslLogin(mech, username=creds[0], password=Password(creds[1]), extensions=scram_extensions)

    def _resolve_oauth(self, jaas: Optional[JaasLoginModule], given: List[str]) -> Optional[ClientCredentials]:
        """OAuth client credentials (kproducer.oauth), from Java's or librdkafka's settings; None when not asked
        for. Java's settings win over the JAAS options clientId/clientSecret/scope (as Java 4.x, which warns)."""
        options = jaas.options if jaas is not None else {}
        handler = self.sasl_login_callback_handler_class
        method = self.sasl_oauthbearer_method
        url = self.sasl_oauthbearer_token_endpoint_url
        wanted = (url is not None or method == "OIDC" or LOGIN_CALLBACK_HANDLERS.get(handler or "") == "oauth"
                  or "clientId" in options or "clientSecret" in options)
        if not wanted:
            return None
        if method == "DEFAULT" and url is not None:
            raise ConfigError(f"{self._named('sasl.oauthbearer.method')}=default does not use "
                              f"{self._named('sasl.oauthbearer.token.endpoint.url')}: set it to oidc")
        if handler is not None and LOGIN_CALLBACK_HANDLERS[handler] == "unsecured":
            raise ConfigError(f"{self._named('sasl.login.callback.handler.class')}={handler.rsplit('.', 1)[-1]} "
                              "makes unsecured test tokens; OAuth client credentials need "
                              "OAuthBearerLoginCallbackHandler")
        if url is None:
            raise ConfigError("OAuth client credentials need the token endpoint: set "
                              "sasl.oauthbearer.token.endpoint.url")

        def pick(setting: str, option: str, secret: bool = False) -> Optional[str]:
            value = getattr(self, SETTINGS[setting].alias)
            if value is not None:
                if option in options:
                    log.warning("both %s and the JAAS option %s are given: using %s (as Java does)",
                                self._named(setting), option, self._named(setting))
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
        if self.https_ca_location is not None:
            ssl_settings["ssl.truststore.location"] = self.https_ca_location
        if self.https_ca_pem is not None:
            ssl_settings["ssl.truststore.certificates"] = self.https_ca_pem
        from .oauth import ClientCredentials

        return ClientCredentials(
            url, client_id, secret, scope=pick("sasl.oauthbearer.scope", "scope"),
            sub_claim_name=self.sasl_oauthbearer_sub_claim_name,
            scope_claim_name=self.sasl_oauthbearer_scope_claim_name,
            urlencode_header=self.sasl_oauthbearer_header_urlencode,
            connect_timeout_ms=self.sasl_login_connect_timeout_ms, read_timeout_ms=self.sasl_login_read_timeout_ms,
            retry_backoff_ms=self.sasl_login_retry_backoff_ms, retry_backoff_max_ms=self.sasl_login_retry_backoff_max_ms,
            refresh_window_factor=self.sasl_login_refresh_window_factor,
            refresh_window_jitter=self.sasl_login_refresh_window_jitter,
            refresh_min_period_s=self.sasl_login_refresh_min_period_seconds,
            refresh_buffer_s=self.sasl_login_refresh_buffer_seconds, ssl_settings=ssl_settings)

    def _check_relations(self) -> None:
        explicit = self.explicit
        if self.transactional_id is not None:
            if "enable.idempotence" in explicit and not self.enable_idempotence:
                raise ConfigError(
                    "transactional.id requires enable.idempotence=true; remove enable.idempotence=false"
                )
            self.enable_idempotence = True
        if self.enable_idempotence:
            # Java's ProducerConfig.postProcessAndValidateIdempotenceConfigs (Kafka 4.0): with idempotence only
            # the default, retries=0 or acks other than all turn it off (logged); max.in.flight above 5 is an
            # error either way (KAFKA-17927: Kafka 3.x turned idempotence off, 4.0 raises)
            explicit_idempotence = "enable.idempotence" in explicit or self.transactional_id is not None
            if self.retries == 0:
                if explicit_idempotence:
                    raise ConfigError("enable.idempotence=true requires retries to be greater than 0; "
                                      "either set retries accordingly or set enable.idempotence=false")
                log.info("idempotence is disabled because retries is set to 0")
                self.enable_idempotence = False
            if self.acks != -1:
                if explicit_idempotence:
                    raise ConfigError("enable.idempotence=true requires acks to be all; "
                                      "either set acks accordingly or set enable.idempotence=false")
                log.info("idempotence is disabled because acks is set to %s, not all", self.acks)
                self.enable_idempotence = False
            in_flight = self.max_in_flight_requests_per_connection
            if in_flight > 5:
                raise ConfigError(
                    f"max.in.flight.requests.per.connection={in_flight}: at most 5 with the idempotent producer "
                    "(the default since Kafka 3.0; Kafka 4.0 refuses more, as kproducer does); set "
                    "max.in.flight.requests.per.connection to at most 5, or set enable.idempotence=false")
            if self.transactional_id is not None and not self.enable_idempotence:
                raise ConfigError("transactional.id requires idempotence, which acks or retries turned off")
        needed = self.linger_ms + self.request_timeout_ms
        if self.delivery_timeout_ms < needed:
            if "delivery.timeout.ms" in explicit:
                spelled = self._named("delivery.timeout.ms")
                given_as = "" if spelled in ("delivery.timeout.ms", "delivery_timeout_ms") else f" (given as {spelled})"
                raise ConfigError(
                    f"delivery.timeout.ms={self.delivery_timeout_ms}{given_as} must be at least linger.ms + "
                    f"request.timeout.ms = {needed}"
                )
            # Java's KafkaProducer.configureDeliveryTimeout: an int, so at most Integer.MAX_VALUE
            self.delivery_timeout_ms = min(needed, _INT_MAX)
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            self.retry_backoff_max_ms = self.retry_backoff_ms
        if "reconnect.backoff.ms" in explicit and "reconnect.backoff.max.ms" not in explicit:
            # Java's CommonClientConfigs.postProcessReconnectBackoffConfigs
            log.warning("disabling exponential reconnect backoff because reconnect.backoff.ms is set, but "
                        "reconnect.backoff.max.ms is not")
            self.reconnect_backoff_max_ms = self.reconnect_backoff_ms
        if self.reconnect_backoff_max_ms < self.reconnect_backoff_ms:
            # Java's ExponentialBackoff: a maximum below the initial value means a constant initial value
            self.reconnect_backoff_max_ms = self.reconnect_backoff_ms
        if self.socket_connection_setup_timeout_max_ms < self.socket_connection_setup_timeout_ms:
            self.socket_connection_setup_timeout_max_ms = self.socket_connection_setup_timeout_ms

    @property
    def compression_level(self) -> Optional[int]:
        return {1: self.compression_gzip_level, 3: self.compression_lz4_level, 4: self.compression_zstd_level}.get(
            self.compression_type
        )

    def as_dict(self) -> Dict[str, Any]:
        """Every setting by its Java name (secrets as :class:`Password`, which print as ``[hidden]``; a token
        provider as a :class:`HiddenObject`, whose repr does not show the credentials the provider holds)."""
        out = {s.java: getattr(self, s.alias) for s in _SETTINGS}
        for s in _SETTINGS:
            if s.kind == "provider" and out[s.java] is not None:
                out[s.java] = HiddenObject(out[s.java])
        return out

    def __repr__(self) -> str:
        return f"ProducerConfig({self.as_dict()!r})"


def secret_settings() -> Set[str]:
    """Java names of the settings whose values are secrets."""
    return {s.java for s in _SETTINGS if s.secret}


def is_secret(name: str) -> bool:
    """Whether the setting of this name (any spelling) holds a secret; False for unknown names."""
    try:
        return SETTINGS[canonical_name(name)].secret
    except ConfigError:
        return False


def _store_type(cfg: ProducerConfig, type_setting: str, location: Optional[str]) -> Optional[str]:
    """A key or trust store's type: as given, else from the file suffix (.p12/.pfx: PKCS12), else PEM."""
    given = getattr(cfg, SETTINGS[type_setting].alias)
    location_setting = type_setting.replace(".type", ".location")
    suffix = location.rsplit(".", 1)[-1].lower() if location and "." in location else ""
    if suffix == "jks":
        raise ConfigError(f"{cfg._named(location_setting)} is a JKS file ({location}): {JKS_HINT}")
    if given is not None:
        return str(given)
    if location is None:
        return None
    return "PKCS12" if suffix in ("p12", "pfx") else "PEM"


__all__ = ["HIDDEN", "JKS_HINT", "SASL_MECHANISMS", "SECURITY_PROTOCOLS", "SETTINGS", "HiddenObject", "JaasLoginModule",
           "Password", "ProducerConfig", "SaslLogin", "canonical_item", "canonical_name", "is_secret", "parse_jaas_config",
           "parse_servers", "reveal", "secret_settings"]
