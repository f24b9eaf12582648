"""Producer settings: Java dotted names, Pythonic aliases, Java's defaults, validation.

Every setting can be given by its Java name (``"linger.ms"``) or its Python alias (``linger_ms``).
Unknown names raise :class:`~kproducer.errors.ConfigError` naming the closest valid setting.
"""
from __future__ import annotations

import difflib
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from .errors import ConfigError
from .protocol.compression import check_codec_available, codec_from_name

Serializer = Callable[[Any], Optional[bytes]]

_INT_MAX = 2147483647


class _Setting:
    __slots__ = ("java", "alias", "default", "kind", "lo", "hi", "choices", "doc")

    def __init__(
        self,
        java: str,
        default: Any,
        kind: str,
        doc: str,
        lo: Optional[int] = None,
        hi: Optional[int] = None,
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


_SETTINGS: List[_Setting] = [
    _Setting("bootstrap.servers", None, "servers", "host:port[,host:port...] of brokers to bootstrap from"),
    _Setting("client.id", "", "str", "a name for this producer in broker logs and metrics"),
    _Setting("acks", "all", "acks", "0, 1 or all (-1)"),
    _Setting("linger.ms", 5, "int", "how long to wait for more records before sending a batch", 0),
    _Setting("batch.size", 16384, "int", "target batch size in bytes per partition", 0),
    _Setting("buffer.memory", 33554432, "int", "bytes of memory for records waiting to be sent", 1),
    _Setting("max.block.ms", 60000, "int", "how long send() may block for metadata or memory", 0),
    _Setting("max.request.size", 1048576, "int", "largest produce request (and record) in bytes", 1),
    _Setting("request.timeout.ms", 30000, "int", "how long to wait for a broker's answer", 0),
    _Setting("delivery.timeout.ms", 120000, "int", "upper bound from send() to success or failure", 0),
    _Setting("retries", _INT_MAX, "int", "how many times a failed batch is retried", 0),
    _Setting("retry.backoff.ms", 100, "int", "first wait before retrying", 0),
    _Setting("retry.backoff.max.ms", 1000, "int", "largest wait between retries", 0),
    _Setting("reconnect.backoff.ms", 50, "int", "first wait before reconnecting to a broker", 0),
    _Setting("reconnect.backoff.max.ms", 1000, "int", "largest wait between reconnection attempts", 0),
    _Setting("max.in.flight.requests.per.connection", 5, "int", "unacknowledged requests per broker", 1),
    _Setting("metadata.max.age.ms", 300000, "int", "refresh metadata at least this often", 0),
    _Setting("metadata.max.idle.ms", 300000, "int", "forget a topic's metadata after this idle time", 5000),
    _Setting("compression.type", "none", "compression", "none, gzip, snappy, lz4 or zstd"),
    _Setting("compression.gzip.level", None, "optint", "gzip level 1-9", 1, 9),
    _Setting("compression.lz4.level", None, "optint", "lz4 level 1-17", 1, 17),
    _Setting("compression.zstd.level", None, "optint", "zstd level -131072-22", -131072, 22),
    _Setting("enable.idempotence", True, "bool", "exactly-once per partition; needs acks=all"),
    _Setting("transactional.id", None, "optstr", "enables transactions under this id"),
    _Setting("transaction.timeout.ms", 60000, "int", "how long a transaction may stay open", 1),
    _Setting("partitioner", None, "callable",
             "callable(topic, key_bytes, value_bytes, num_partitions) -> partition; default murmur2/sticky"),
    _Setting("partitioner.ignore.keys", False, "bool", "spread keyed records like keyless ones"),
    _Setting("key.serializer", None, "callable", "callable(key) -> bytes"),
    _Setting("value.serializer", None, "callable", "callable(value) -> bytes"),
    _Setting("connections.max.idle.ms", 540000, "int", "close connections idle this long", -1),
    _Setting("socket.connection.setup.timeout.ms", 10000, "int", "time to establish a connection", 0),
    _Setting("send.buffer.bytes", 131072, "int", "SO_SNDBUF (-1: OS default)", -1),
    _Setting("receive.buffer.bytes", 32768, "int", "SO_RCVBUF (-1: OS default)", -1),
    _Setting("security.protocol", "PLAINTEXT", "choice", "only PLAINTEXT is supported", choices=("PLAINTEXT",)),
    _Setting("allow.auto.create.topics", True, "bool", "let the broker create unknown topics on metadata requests"),
]

SETTINGS: Dict[str, _Setting] = {s.java: s for s in _SETTINGS}
_ALIASES: Dict[str, str] = {s.alias: s.java for s in _SETTINGS}
_ALIASES.update({"partitioner.class": "partitioner", "partitioner_class": "partitioner"})


def canonical_name(name: str) -> str:
    """The Java dotted name of a setting given as either form; ConfigError for unknown names."""
    if name in SETTINGS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    candidates = list(SETTINGS) + list(_ALIASES)
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown producer setting {name!r}{hint}")


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
        raise ConfigError(f"{s.java} must be at least {s.lo}, got {n}")
    if s.hi is not None and n > s.hi:
        raise ConfigError(f"{s.java} must be at most {s.hi}, got {n}")
    if not -(1 << 31) <= n <= _INT_MAX and s.java not in ("buffer.memory",):
        raise ConfigError(f"{s.java} must fit in 32 bits, got {n}")
    return n


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
    if kind == "int":
        return _parse_int(s, v)
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
        if str(v).upper() not in s.choices:
            raise ConfigError(f"{s.java}={v!r} is not supported; valid: {', '.join(s.choices)}")
        return str(v).upper()
    raise AssertionError(kind)


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
    partitioner: Optional[Callable[[str, Optional[bytes], Optional[bytes], int], int]]
    partitioner_ignore_keys: bool
    key_serializer: Optional[Serializer]
    value_serializer: Optional[Serializer]
    connections_max_idle_ms: int
    socket_connection_setup_timeout_ms: int
    send_buffer_bytes: int
    receive_buffer_bytes: int
    security_protocol: str
    allow_auto_create_topics: bool

    def __init__(self, settings: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        given: Dict[str, Any] = {}
        for source in (settings or {}, kwargs):
            for name, value in source.items():
                if not isinstance(name, str):
                    raise ConfigError(f"setting names must be strings, got {name!r}")
                java = canonical_name(name)
                if java in given and given[java] != value:
                    raise ConfigError(f"{java} is given twice with different values")
                given[java] = value
        self.explicit: Set[str] = set(given)
        for s in _SETTINGS:
            raw = given.get(s.java, s.default)
            if s.java == "bootstrap.servers" and raw is None:
                raise ConfigError("bootstrap.servers is required, e.g. Producer(bootstrap_servers='127.0.0.1:9092')")
            setattr(self, s.alias, None if raw is None else _convert(s, raw))
        self._check_relations()

    def _check_relations(self) -> None:
        explicit = self.explicit
        if self.transactional_id is not None:
            if "enable.idempotence" in explicit and not self.enable_idempotence:
                raise ConfigError(
                    "transactional.id requires enable.idempotence=true; remove enable.idempotence=false"
                )
            self.enable_idempotence = True
        if self.enable_idempotence:
            conflicts = []
            if self.acks != -1:
                conflicts.append(("acks", "all"))
            if self.retries == 0:
                conflicts.append(("retries", "greater than 0"))
            if self.max_in_flight_requests_per_connection > 5:
                conflicts.append(("max.in.flight.requests.per.connection", "at most 5"))
            if conflicts:
                if "enable.idempotence" in explicit or self.transactional_id is not None:
                    name, need = conflicts[0]
                    raise ConfigError(
                        f"enable.idempotence=true requires {name} to be {need}; "
                        f"either set {name} accordingly or set enable.idempotence=false"
                    )
                # idempotence was only the default: the user's explicit settings win, as in Java
                self.enable_idempotence = False
        needed = self.linger_ms + self.request_timeout_ms
        if self.delivery_timeout_ms < needed:
            if "delivery.timeout.ms" in explicit:
                raise ConfigError(
                    f"delivery.timeout.ms={self.delivery_timeout_ms} must be at least linger.ms + "
                    f"request.timeout.ms = {needed}"
                )
            self.delivery_timeout_ms = needed
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            self.retry_backoff_max_ms = self.retry_backoff_ms
        if self.reconnect_backoff_max_ms < self.reconnect_backoff_ms:
            self.reconnect_backoff_max_ms = self.reconnect_backoff_ms

    @property
    def compression_level(self) -> Optional[int]:
        return {1: self.compression_gzip_level, 3: self.compression_lz4_level, 4: self.compression_zstd_level}.get(
            self.compression_type
        )

    def as_dict(self) -> Dict[str, Any]:
        """Every setting by its Java name."""
        return {s.java: getattr(self, s.alias) for s in _SETTINGS}
