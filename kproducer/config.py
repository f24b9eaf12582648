"""Producer settings: Java dotted names, Pythonic aliases, Java's defaults, validation.

Every setting can be given by its Java name (``"linger.ms"``) or its Python alias (``linger_ms``).
Security settings also take the names librdkafka (confluent-kafka) and kafka-python users know
(``ssl.ca.location``, ``ssl_cafile``, ...); see docs/security.md. Unknown names raise
:class:`~kproducer.errors.ConfigError` naming the closest valid setting.

Secrets (passwords, private keys, ``sasl.jaas.config``) are held as :class:`Password`, which prints as
``[hidden]``; no error message or log line of this module shows a secret value.

The module, in order: the values settings resolve to (:class:`Password`, :class:`SaslLogin`); the kinds of
values (:class:`Kind`: how a given value is read and checked, and its Python type); the table of settings, one
:class:`Setting` each (Java name, Java's default, kind, one line of docs)::

    Setting("linger.ms", 5, Long(0), "how long to wait for more records before sending a batch")

None given for a setting means "not set" where the default is None; otherwise it is refused with a ConfigError
naming the setting, unless the declaration's ``none_means=`` says what None stands for. Then other clients'
names of the settings, and :class:`ProducerConfig`, which converts each setting with its declaration and then
checks the settings that constrain each other. The TLS and SASL settings are checked together, and the SASL
login resolved, by kproducer.security; kproducer.jaas parses ``sasl.jaas.config``.

Adding a setting: a :class:`Setting` in ``_SETTINGS``, its annotation on ProducerConfig (tests/unit/
test_config.py checks that the two agree), then ``python tools/gen_settings_doc.py`` for docs/settings.md.
"""
from __future__ import annotations

import difflib
import logging
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from .errors import ConfigError
from .jaas import JaasLoginModule, parse_jaas_config  # (kproducer.jaas's; importable from here as before)
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
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: the SASL mechanisms kproducer implements
SASL_MECHANISMS = SUPPORTED_MECHANISMS
TLS_VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
JKS_HINT = ("JKS key and trust stores cannot be read from Python: convert the store once with "
            "`keytool -importkeystore -srckeystore client.jks -destkeystore client.p12 -deststoretype PKCS12` "
            "and set the store's type to PKCS12 (or export PEM files)")
#: Java's login callback handlers for OAUTHBEARER: the OAuth one (client credentials), the unsecured one (tests)
LOGIN_CALLBACK_HANDLERS = {
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler": "oauth",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler": "oauth",  # Kafka 3.1-3.3
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredLoginCallbackHandler":
        "unsecured",
}

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


# -- kinds of values ----------------------------------------------------------------------------------------


class Kind:
    """A kind of setting value: ``convert(name, value)`` turns what was given into what the producer uses, or
    raises a ConfigError naming the setting (for a secret, never the value: its type only). :attr:`type` is the Python
    type of the converted value as ProducerConfig annotates it (``Optional[...]`` added where the default is
    None); :attr:`values` says in docs/settings.md what may be given.

    ``secret``: values are :class:`Password`. ``credentials``: values are objects that may hold credentials,
    shown by :meth:`ProducerConfig.as_dict` as a :class:`HiddenObject`. ``objects``: values are objects,
    compared as given when a setting is given twice (converting may load and instantiate classes)."""

    __slots__ = ("type", "values", "convert", "secret", "credentials", "objects")

    def __init__(self, type: str, values: str, convert: Callable[[str, Any], Any], *, secret: bool = False,
                 credentials: bool = False, objects: bool = False) -> None:
        self.type = type
        self.values = values
        #: ``convert(name, value)``: ``value`` (not None) as the producer uses it; ``name`` (the setting's Java
        #: name) is for messages
        self.convert = convert
        self.secret = secret
        self.credentials = credentials
        self.objects = objects

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.values}>"


def _bounds(lo: Optional[float], hi: Optional[float]) -> str:
    if lo is not None and hi is not None:
        return f", {lo}..{hi}"
    if lo is not None:
        return f", >= {lo}"
    return "" if hi is None else f", <= {hi}"


class Int(Kind):
    """Java's int: an int, a string of one or a float without fraction, within ``lo`` and ``hi``. ``below``: why
    a value below ``lo`` is refused where Java accepts it; ``check(name, n)``: a further rule."""

    __slots__ = ("lo", "hi", "below", "check")
    java_type, least, most = "int", _INT_MIN, _INT_MAX

    def __init__(self, lo: Optional[int] = None, hi: Optional[int] = None, *, below: Optional[str] = None,
                 check: Optional[Callable[[str, int], None]] = None) -> None:
        super().__init__("int", self.java_type + _bounds(lo, hi), self._int)
        self.lo, self.hi, self.below, self.check = lo, hi, below, check

    def _int(self, name: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, str, float)):
            raise ConfigError(f"{name} must be an integer, got {v!r}")
        try:
            if isinstance(v, float) and not v.is_integer():
                raise ValueError
            n = int(v)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {v!r}") from None
        if self.lo is not None and n < self.lo:
            raise ConfigError(f"{name} must be at least {self.lo}, got {n}" + (f": {self.below}" if self.below else ""))
        if self.hi is not None and n > self.hi:
            raise ConfigError(f"{name} must be at most {self.hi}, got {n}")
        if not self.least <= n <= self.most:
            bits = 64 if self.most == _LONG_MAX else 32
            raise ConfigError(f"{name} must fit in {bits} bits (Java's {self.java_type}), got {n}")
        if self.check is not None:
            self.check(name, n)
        return n


class Long(Int):
    """Java's long: as :class:`Int`, in 64 bits."""

    __slots__ = ()
    java_type, least, most = "long", _LONG_MIN, _LONG_MAX


class Double(Kind):
    """Java's double: a number (or a string of one) between ``lo`` and ``hi``."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: float, hi: float) -> None:
        super().__init__("float", "number" + _bounds(lo, hi), self._double)
        self.lo, self.hi = lo, hi

    def _double(self, name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ConfigError(f"{name} must be a number, got {v!r}")
        try:
            x = float(v)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {v!r}") from None
        if not self.lo <= x <= self.hi:  # (NaN is neither)
            raise ConfigError(f"{name} must be between {self.lo} and {self.hi}, got {v!r}")
        return x


class Choice(Kind):
    """One of ``choices``, in any case; the value is the choice as spelled here."""

    __slots__ = ("choices",)

    def __init__(self, *choices: str) -> None:
        super().__init__("str", ", ".join(choices), self._choice)
        self.choices = choices

    def _choice(self, name: str, v: Any) -> str:
        text = str(v).strip().lower()
        for choice in self.choices:
            if choice.lower() == text:
                return choice
        raise ConfigError(f"{name}={v!r} is not supported; valid: {', '.join(self.choices)}")


def _parse_bool(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ConfigError(f"{name} must be true or false, got {v!r}")


def _string(name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ConfigError(f"{name} must be a string, got {v!r}")
    return v


def _optional_string(name: str, v: Any) -> Optional[str]:
    if not isinstance(v, str):
        raise ConfigError(f"{name} must be a string or None, got {v!r}")
    return v or None


def _transactional_id(name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ConfigError(f"{name} must be a string or None, got {v!r}")
    if not v:
        # Java's ConfigDef.NonEmptyString: an empty id is an error, not "no transactions"
        raise ConfigError(f"{name} must be non-empty (leave it unset for a producer without transactions)")
    return v


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


def _acks(name: str, v: Any) -> int:
    text = str(v).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ConfigError(f"acks must be 0, 1 or 'all', got {v!r}")


def _compression(name: str, v: Any) -> int:
    try:
        codec = codec_from_name(str(v))
    except ValueError as e:
        raise ConfigError(f"compression.type: {e}") from None
    try:
        check_codec_available(codec)
    except ImportError as e:
        raise ConfigError(f"compression.type={v}: {e}") from None
    return codec


def _gzip_level(name: str, n: int) -> None:
    if n == 0:
        # Java's GZIP level validator: 1..9, or -1 (Deflater.DEFAULT_COMPRESSION)
        raise ConfigError(f"{name} must be -1 (zlib's default) or 1-9, got 0")


def _password(name: str, v: Any) -> Password:
    # never the value in a message: only its type
    if isinstance(v, Password):
        return v
    if isinstance(v, str):
        return Password(v)
    raise ConfigError(f"{name} must be a string, got a {type(v).__name__}")


def _jaas_config(name: str, v: Any) -> Optional[Password]:
    secret = _password(name, v)
    return secret if secret.value.strip() else None


def _store_type(name: str, v: Any) -> Optional[str]:
    text = str(v).strip().upper()
    if text in ("", "NONE"):
        return None
    if text == "JKS":
        raise ConfigError(f"{name}=JKS: {JKS_HINT}")
    if text in ("PKCS12", "P12", "PFX"):
        return "PKCS12"
    if text == "PEM":
        return "PEM"
    raise ConfigError(f"{name}={v!r} is not supported; valid: PEM, PKCS12")


def _tls_versions(name: str, v: Any) -> List[str]:
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


def _tls_protocol(name: str, v: Any) -> str:
    text = str(v).strip()
    if text.upper() == "TLS":
        return "TLS"
    for known in TLS_VERSIONS:
        if text.lower() == known.lower():
            return known
    raise ConfigError(f"{name}={v!r} is not supported; valid: TLS, {', '.join(TLS_VERSIONS)}")


def _endpoint_identification(name: str, v: Any) -> str:
    text = str(v).strip().lower()
    if text in ("", "none"):
        return ""
    if text == "https":
        return "https"
    raise ConfigError(f"{name}={v!r} is not supported: 'https' checks the broker's host name, an empty "
                      "value does not")


def _ssl_context(name: str, v: Any) -> ssl.SSLContext:
    import ssl  # a context was given, so the caller has ssl loaded already

    if not isinstance(v, ssl.SSLContext):
        raise ConfigError(f"{name} must be an ssl.SSLContext, got a {type(v).__name__}")
    return v


def _callable(name: str, v: Any) -> Any:
    if not callable(v):
        raise ConfigError(f"{name} must be callable, got {v!r}")
    return v


def _token_provider(name: str, v: Any) -> Any:
    if callable(v) or callable(getattr(v, "token", None)):
        return v
    raise ConfigError(f"{name} must be a callable returning (token, expiry_epoch_seconds) or a token, or an "
                      f"object with a token() method, got a {type(v).__name__}")


def _mechanism(name: str, v: Any) -> Optional[str]:
    text = str(v).strip().upper()
    if not text:
        return None
    if text == "GSSAPI":
        raise ConfigError(f"{name}=GSSAPI: Kerberos is not supported by kproducer; supported mechanisms: "
                          f"{', '.join(SASL_MECHANISMS)}")
    if text not in SASL_MECHANISMS:
        raise ConfigError(f"{name}={v!r} is not supported; valid: {', '.join(SASL_MECHANISMS)}")
    return text


_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")
_EXTENSION_VALUE = re.compile(r"^[\x21-\x7E \t\r\n]+$")


def parse_sasl_extensions(name: str, v: Any) -> Optional[Dict[str, str]]:
    """SASL/OAUTHBEARER extensions (KIP-342): ``"k=v,k=v"`` (librdkafka's form) or a mapping."""
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


def _login_handler(name: str, v: Any) -> Optional[str]:
    """The handler's full Java class name (also given by its simple name)."""
    text = str(v).strip()
    if not text:
        return None
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


def _partitioner(name: str, v: Any) -> Any:
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


def _interceptors(name: str, v: Any) -> Optional[Tuple[Any, ...]]:
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


BOOL = Kind("bool", "bool", _parse_bool)
STRING = Kind("str", "string", _string)
OPTIONAL_STRING = Kind("str", "string or unset", _optional_string)  # (an empty string is "not set")
TRANSACTIONAL_ID = Kind("str", "non-empty string or unset", _transactional_id)
SERVERS = Kind("List[Tuple[str, int]]", "list of host:port", lambda name, v: parse_servers(v))
ACKS = Kind("int", "0, 1, all (-1)", _acks)
COMPRESSION = Kind("int", "none, gzip, snappy, lz4, zstd", _compression)  # (the codec id of RecordBatch v2)
SECRET = Kind("Password", "password (shown as [hidden])", _password, secret=True)
JAAS_CONFIG = Kind("Password", "password (shown as [hidden])", _jaas_config, secret=True)  # blank: not set
STORE_TYPE = Kind("str", "PEM, PKCS12", _store_type)
TLS_PROTOCOLS = Kind("List[str]", "list of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3", _tls_versions)
TLS_PROTOCOL = Kind("str", "TLS, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3", _tls_protocol)
ENDPOINT_IDENTIFICATION = Kind("str", "https or empty", _endpoint_identification)
SSL_CONTEXT = Kind("ssl.SSLContext", "ssl.SSLContext", _ssl_context, objects=True)
TOKEN_PROVIDER = Kind("Any", "callable or object with token()", _token_provider, credentials=True, objects=True)
SASL_MECHANISM = Kind("str", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER", _mechanism)
SASL_EXTENSIONS = Kind("Dict[str, str]", "'key=value,...' or mapping", parse_sasl_extensions)
LOGIN_HANDLER = Kind("str", "OAuthBearerLoginCallbackHandler (Java class name)", _login_handler)
SERIALIZER = Kind("Any", "callable, object with serialize(), 'str', 'json', 'bytes' or class name", check_serializer,
                  objects=True)
PARTITIONER = Kind("Any", "callable, object with partition() or class name", _partitioner, objects=True)
INTERCEPTORS = Kind("Tuple[Any, ...]", "list of interceptors or class names", _interceptors, objects=True)


class Callback(Kind):
    """A callable; ``type`` is its Python type."""

    __slots__ = ()

    def __init__(self, type: str) -> None:
        super().__init__(type, "callable", _callable, objects=True)


# -- the settings -------------------------------------------------------------------------------------------

_REFUSED: Any = object()


class Setting:
    """One producer setting: its Java name (the Python alias is the same with ``_`` for ``.``), Java's default,
    its :class:`Kind` and one line of documentation (docs/settings.md is generated from the table).

    What None means: where the default is None, "not set"; otherwise ``none_means`` (the value None stands for:
    kafka-python's ``compression_type=None`` is ``none``), and without it None is refused with a ConfigError
    naming the setting as given (Java's validators refuse null for a setting that has a value by default).
    ``required``: the setting must be given (the value is an example for the message)."""

    __slots__ = ("java", "alias", "default", "kind", "doc", "none_means", "required")

    def __init__(self, java: str, default: Any, kind: Kind, doc: str, *, none_means: Any = _REFUSED,
                 required: Optional[str] = None) -> None:
        assert default is not None or none_means is _REFUSED, f"{java}: None is its default, 'not set'"
        self.java = java
        self.alias = java.replace(".", "_")
        self.default = default
        self.kind = kind
        self.doc = doc
        self.none_means = none_means
        self.required = required

    @property
    def secret(self) -> bool:
        return self.kind.secret

    def convert(self, value: Any, spelled: str) -> Any:
        """The value the producer uses for ``value``, given by the name ``spelled`` (or the default)."""
        if value is None:
            if self.required is not None:
                raise ConfigError(f"{self.java} is required, e.g. Producer({self.alias}={self.required!r})")
            if self.default is None:
                return None  # not set
            if self.none_means is _REFUSED:
                # None must not skip the checks either (acks=None used to be accepted, and no record was ever
                # delivered)
                raise ConfigError(f"{spelled} cannot be None: give a value, or leave it out for the default "
                                  f"({self.java}={self.default})")
            value = self.none_means
        return self.kind.convert(self.java, value)

    def __repr__(self) -> str:
        return f"Setting({self.java!r}, {self.default!r}, {self.kind!r})"


#: why a zero timeout is refused, where Java accepts it
_NEVER_ANSWERED = ("with 0 every request times out before its answer can arrive, so the producer never connects "
                   "(Java accepts 0 and expires a request once a millisecond has passed)")
_NEVER_SET_UP = ("with 0 every connection attempt times out before it is set up, so the producer never connects "
                 "(Java accepts 0 and gives up once a millisecond has passed)")

_SETTINGS: List[Setting] = [
    Setting("bootstrap.servers", None, SERVERS,
            "host:port[,host:port...] of brokers to bootstrap from", required="127.0.0.1:9092"),
    Setting("client.id", "", STRING, "a name for this producer in broker logs and metrics"),
    Setting("acks", "all", ACKS, "0, 1 or all (-1)"),
    Setting("linger.ms", 5, Long(0), "how long to wait for more records before sending a batch"),
    Setting("batch.size", 16384, Int(0), "target batch size in bytes per partition"),
    Setting("buffer.memory", 33554432, Long(1), "bytes of memory for records waiting to be sent"),
    Setting("max.block.ms", 60000, Long(0), "how long send() may block for metadata or memory"),
    Setting("max.request.size", 1048576, Int(1), "largest produce request (and record) in bytes"),
    Setting("request.timeout.ms", 30000, Int(1, below=_NEVER_ANSWERED),
            "how long to wait for a broker's answer (at least 1: with 0, "
            "Java's minimum, no request is answered in time)"),
    Setting("delivery.timeout.ms", 120000, Int(0), "upper bound from send() to success or failure"),
    Setting("retries", _INT_MAX, Int(0), "how many times a failed batch is retried"),
    Setting("retry.backoff.ms", 100, Long(0), "first wait before retrying"),
    Setting("retry.backoff.max.ms", 1000, Long(0), "largest wait between retries"),
    Setting("reconnect.backoff.ms", 50, Long(0), "first wait before reconnecting to a broker"),
    Setting("reconnect.backoff.max.ms", 1000, Long(0), "largest wait between reconnection attempts"),
    Setting("max.in.flight.requests.per.connection", 5, Int(1), "unacknowledged requests per broker"),
    Setting("metadata.max.age.ms", 300000, Long(0), "refresh metadata at least this often"),
    Setting("metadata.max.idle.ms", 300000, Long(5000), "forget a topic's metadata after this idle time"),
    Setting("compression.type", "none", COMPRESSION,
            "none, gzip, snappy, lz4 or zstd (None: none, as kafka-python's compression_type=None)",
            none_means="none"),
    Setting("compression.gzip.level", -1, Int(-1, 9, check=_gzip_level),
            "gzip level 1-9, or -1 for zlib's default (6)"),
    Setting("compression.lz4.level", 9, Int(1, 17),
            "lz4 level 1-17; 9 (the default) is the fast compressor, others LZ4-HC"),
    Setting("compression.zstd.level", None, Int(-131072, 22), "zstd level -131072-22"),
    Setting("enable.idempotence", True, BOOL, "exactly-once per partition; needs acks=all"),
    Setting("transactional.id", None, TRANSACTIONAL_ID, "enables transactions under this id (non-empty)"),
    Setting("transaction.timeout.ms", 60000, Int(1), "how long a transaction may stay open"),
    Setting("partitioner", None, PARTITIONER,
            "callable(topic, key_bytes, value_bytes, num_partitions) -> partition, or an object with Java's "
            "partition(topic, key, key_bytes, value, value_bytes, cluster), or its dotted class name "
            "(partitioner.class); default murmur2 for keys, uniform sticky without"),
    Setting("partitioner.ignore.keys", False, BOOL, "spread keyed records like keyless ones"),
    Setting("key.serializer", None, SERIALIZER,
            "callable(key) -> bytes, an object with serialize(topic, key, headers), 'str', 'json', 'bytes' "
            "or a dotted class name"),
    Setting("value.serializer", None, SERIALIZER,
            "callable(value) -> bytes, an object with serialize(topic, value, headers), 'str', 'json', "
            "'bytes' or a dotted class name"),
    Setting("interceptor.classes", None, INTERCEPTORS,
            "interceptors (objects with on_send(record) and/or on_acknowledgement(metadata, exception)), "
            "or their dotted class names (a list or a comma-separated string), called in order"),
    Setting("connections.max.idle.ms", 540000, Long(-1), "close connections idle this long"),
    Setting("socket.connection.setup.timeout.ms", 10000, Long(1, below=_NEVER_SET_UP),
            "time to establish a connection (doubled per consecutive failure, with jitter; at least 1: with 0, "
            "which Java accepts, no connection is set up in time)"),
    Setting("socket.connection.setup.timeout.max.ms", 30000, Long(0),
            "largest connection setup timeout after consecutive failures"),
    Setting("client.dns.lookup", "use_all_dns_ips", Choice(*DNS_LOOKUPS),
            "use_all_dns_ips: try every address of a broker's host name in turn "
            "(resolve_canonical_bootstrap_servers_only is accepted and behaves the same, see docs/network.md)"),
    Setting("metadata.recovery.strategy", "rebootstrap", Choice(*METADATA_RECOVERY_STRATEGIES),
            "rebootstrap: go back to bootstrap.servers when no known broker can be reached; none: do not"),
    Setting("metadata.recovery.rebootstrap.trigger.ms", 300000, Long(0),
            "rebootstrap after this long without metadata while a refresh is wanted"),
    Setting("send.buffer.bytes", 131072, Int(-1), "SO_SNDBUF (-1: OS default)"),
    Setting("receive.buffer.bytes", 32768, Int(-1), "SO_RCVBUF (-1: OS default)"),
    Setting("socket.keepalive.enable", True, BOOL,
            "SO_KEEPALIVE on broker connections (librdkafka's setting, default false there; Java's client always "
            "sets it)"),
    Setting("security.protocol", "PLAINTEXT", Choice(*SECURITY_PROTOCOLS),
            "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    # -- TLS (docs/security.md lists each setting's librdkafka and kafka-python names)
    Setting("ssl.truststore.type", None, STORE_TYPE, "PEM or PKCS12 (default: PEM, or PKCS12 for a .p12/.pfx file)"),
    Setting("ssl.truststore.location", None, OPTIONAL_STRING,
            "CA certificates to trust: a PEM file (or a directory of them), or a PKCS12 store"),
    Setting("ssl.truststore.certificates", None, OPTIONAL_STRING, "CA certificates to trust, as PEM text"),
    Setting("ssl.truststore.password", None, SECRET, "password of a PKCS12 trust store"),
    Setting("ssl.keystore.type", None, STORE_TYPE, "PEM or PKCS12 (default: PEM, or PKCS12 for a .p12/.pfx file)"),
    Setting("ssl.keystore.location", None, OPTIONAL_STRING,
            "client certificate chain (and key, unless ssl.key.location): a PEM file or a PKCS12 store"),
    Setting("ssl.keystore.certificate.chain", None, OPTIONAL_STRING, "client certificate chain as PEM text"),
    Setting("ssl.keystore.key", None, SECRET, "client private key as PEM text"),
    Setting("ssl.keystore.password", None, SECRET, "password of a PKCS12 key store"),
    Setting("ssl.key.location", None, OPTIONAL_STRING, "client private key as a PEM file (librdkafka's name)"),
    Setting("ssl.key.password", None, SECRET, "password of an encrypted private key"),
    Setting("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", TLS_PROTOCOLS, "TLS versions offered"),
    Setting("ssl.protocol", "TLSv1.3", TLS_PROTOCOL,
            "the highest TLS version used (TLS: no limit beyond ssl.enabled.protocols)"),
    Setting("ssl.cipher.suites", None, OPTIONAL_STRING,
            "OpenSSL cipher list for TLS 1.2 and older (TLS 1.3 suites cannot be restricted in Python)"),
    Setting("ssl.endpoint.identification.algorithm", "https", ENDPOINT_IDENTIFICATION,
            "https: check the broker certificate's host name; empty (or None, as Java's null): do not",
            none_means=""),
    Setting("enable.ssl.certificate.verification", True, BOOL,
            "false turns certificate verification off altogether (librdkafka's setting)"),
    Setting("ssl.context", None, SSL_CONTEXT, "an ssl.SSLContext used as is (kafka-python's ssl_context)"),
    # -- SASL
    Setting("sasl.mechanism", None, SASL_MECHANISM,
            "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (default: from sasl.jaas.config)"),
    Setting("sasl.jaas.config", None, JAAS_CONFIG, "Java's login module line with the credentials"),
    Setting("sasl.username", None, OPTIONAL_STRING, "user name for PLAIN and SCRAM (librdkafka's setting)"),
    Setting("sasl.password", None, SECRET, "password for PLAIN and SCRAM (librdkafka's setting)"),
    Setting("sasl.oauth.token.provider", None, TOKEN_PROVIDER,
            "OAUTHBEARER: callable returning (token, expiry_epoch_s) or a token, or an object with .token()"),
    Setting("sasl.oauthbearer.extensions", None, SASL_EXTENSIONS,
            "OAUTHBEARER SASL extensions: 'key=value,key=value' or a mapping"),
    # -- OAUTHBEARER with OAuth 2.0 client credentials (OIDC): kproducer.oauth, docs/security.md
    Setting("sasl.login.callback.handler.class", None, LOGIN_HANDLER,
            "Java's login callback handler: OAuthBearerLoginCallbackHandler fetches OAuth tokens from "
            "sasl.oauthbearer.token.endpoint.url"),
    Setting("sasl.oauthbearer.method", None, Choice("DEFAULT", "OIDC"),
            "librdkafka's: oidc fetches OAuth tokens from sasl.oauthbearer.token.endpoint.url; default does not"),
    Setting("sasl.oauthbearer.token.endpoint.url", None, OPTIONAL_STRING,
            "OAuth token endpoint (http or https) for the client credentials grant"),
    Setting("sasl.oauthbearer.client.credentials.client.id", None, OPTIONAL_STRING,
            "OAuth client id (or the JAAS option clientId)"),
    Setting("sasl.oauthbearer.client.credentials.client.secret", None, SECRET,
            "OAuth client secret (or the JAAS option clientSecret)"),
    Setting("sasl.oauthbearer.scope", None, OPTIONAL_STRING, "OAuth scope asked for (or the JAAS option scope)"),
    Setting("sasl.oauthbearer.scope.claim.name", "scope", STRING, "the token's claim that holds its scope"),
    Setting("sasl.oauthbearer.sub.claim.name", "sub", STRING, "the token's claim that holds its principal"),
    Setting("sasl.oauthbearer.header.urlencode", False, BOOL,
            "URL-encode the client id and secret in the token request's basic auth (RFC 6749 2.3.1)"),
    Setting("sasl.login.connect.timeout.ms", None, Int(1),
            "connect timeout of a token request (unset: 10 s; Java waits without limit)"),
    Setting("sasl.login.read.timeout.ms", None, Int(1),
            "read timeout of a token request (unset: 10 s; Java waits without limit)"),
    Setting("sasl.login.retry.backoff.ms", 100, Long(0), "first wait between token request attempts"),
    Setting("sasl.login.retry.backoff.max.ms", 10000, Long(0),
            "how long a token request is retried (the waits double up to it)"),
    Setting("sasl.login.refresh.window.factor", 0.8, Double(0.5, 1.0),
            "a token is refreshed at this fraction of its lifetime (plus jitter)"),
    Setting("sasl.login.refresh.window.jitter", 0.05, Double(0.0, 0.25),
            "random fraction of the lifetime added to the refresh time"),
    Setting("sasl.login.refresh.min.period.seconds", 60, Int(0, 900),
            "a token is not refreshed sooner than this after the last refresh"),
    Setting("sasl.login.refresh.buffer.seconds", 300, Int(0, 3600),
            "a token is refreshed at least this long before it expires"),
    Setting("https.ca.location", None, OPTIONAL_STRING,
            "CA certificates (PEM file or directory) for an https token endpoint (librdkafka's setting)"),
    Setting("https.ca.pem", None, OPTIONAL_STRING,
            "CA certificates as PEM text for an https token endpoint (librdkafka's setting)"),
    Setting("allow.auto.create.topics", True, BOOL, "let the broker create unknown topics on metadata requests"),
    # -- metrics (docs/metrics.md)
    Setting("metrics.sample.window.ms", 30000, Long(1), "the window of one metrics sample (rates and averages)"),
    Setting("metrics.num.samples", 2, Int(1), "how many sample windows rates and averages are computed over"),
    Setting("statistics.interval.ms", 0, Int(0, 86400000),
            "call stats_cb with every metric (JSON) this often; 0: never (librdkafka's setting)"),
    Setting("stats_cb", None, Callback("Callable[[str], Any]"),
            "callable(json_str) called from the network thread every statistics.interval.ms "
            "(confluent-kafka's setting)"),
    Setting("error_cb", None, Callback("Callable[[Any], Any]"),
            "callable(KafkaError) called from the network thread for errors that belong to no record: a broker "
            "that cannot be reached (rate-limited), an authentication failure, a fatal producer error "
            "(confluent-kafka's setting)"),
]

SETTINGS: Dict[str, Setting] = {s.java: s for s in _SETTINGS}
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


def canonical_name_or_none(name: str) -> Optional[str]:
    try:
        return canonical_name(name)
    except ConfigError:
        return None


def is_tls_setting(name: str) -> bool:
    """Whether the setting of this name (any spelling) is a TLS setting."""
    return canonical_name_or_none(name) in _SSL_SETTINGS


def _same_value(s: Setting, a: Any, b: Any) -> bool:
    """Whether two values given for ``s`` (by different names) configure the same thing."""
    if a is b:
        return True
    try:
        if reveal(a) == reveal(b):
            return True
    except Exception:  # an odd object's __eq__
        return False
    if s.kind.objects:
        return False
    try:
        return bool(s.convert(a, s.java) == s.convert(b, s.java))
    except ConfigError:
        return False


class ProducerConfig:
    """Validated producer settings; attributes use the Python aliases (``cfg.linger_ms``).

    One annotation per setting, of its kind's type (``Optional`` where the default is None):
    tests/unit/test_config.py checks them against the table."""

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
    compression_gzip_level: int
    compression_lz4_level: int
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
        spelled = self.spelled
        for s in _SETTINGS:
            setattr(self, s.alias, s.convert(given.get(s.java, s.default), spelled.get(s.java, s.java)))
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
        if not (tls or sasl):
            return
        from . import security  # (imported here: security.py imports this module)

        if tls:
            self.ssl_truststore_type, self.ssl_keystore_type = security.check_tls_settings(self, ssl_given)
        if sasl:
            self.sasl_login = security.resolve_sasl_login(self)
            self.sasl_mechanism = self.sasl_login.mechanism

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
            if s.kind.credentials and out[s.java] is not None:
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


__all__ = ["HIDDEN", "JKS_HINT", "SASL_MECHANISMS", "SECURITY_PROTOCOLS", "SETTINGS", "HiddenObject",
           "JaasLoginModule", "Kind", "Password", "ProducerConfig", "SaslLogin", "Setting", "canonical_item",
           "canonical_name", "is_secret", "is_tls_setting", "parse_jaas_config", "parse_servers", "reveal",
           "secret_settings"]
