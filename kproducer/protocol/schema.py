"""A small schema language for Kafka messages and a codec compiled from it per version.

A message is described once, as Kafka's JSON message definitions describe it (fields with the versions
they exist in, nullable versions, tagged fields, flexible versions). From that description this module
compiles, for one version, an encoder (``dict`` -> bytes) and a decoder (bytes -> ``dict``). Field names
are snake_case. Decoding fills every field of the schema: fields the version lacks get their default, so
callers can read ``resp["log_start_offset"]`` whatever version was spoken.

Encoding is strict, so a typo cannot reach the wire as a zero: a key that is no field of the message (in
any version) raises :class:`SchemaError` naming the closest field, and so does a missing field that the
version has and that has no default. Fields with a default may be left out: tagged fields, fields declared
with ``default=`` (``default=None`` for an optional nullable field, as Kafka's ``"default": "null"``), and
fields the version does not have (a body may carry them for other versions; they are not written).

Decoding a request is strict: bytes after its last field are a ProtocolError. Decoding a response is liberal
in that one respect, as Java's client is (it reads the fields and ignores what follows): bytes after the last
field are skipped, and logged once per API (librdkafka's mock cluster sends a Metadata v12 answer with one such
byte). A response cut short, or malformed within its fields, is still a ProtocolError.
"""
from __future__ import annotations

import difflib
import logging
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from . import primitives as p
from .errors import ProtocolError

Encoder = Callable[[bytearray, Any], None]
Decoder = Callable[[p.Reader], Any]
Versions = Tuple[int, int]

log = logging.getLogger(__name__)
#: the API keys whose responses came with bytes after their last field (each logged once)
_TRAILING_LOGGED: Set[int] = set()

MAX_VERSION = 0x7FFF
ZERO_UUID = uuid.UUID(int=0)


class _Missing:
    """The type of :data:`MISSING`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: ``Field(default=MISSING)`` (the default): the field has no declared default, so encoding a body
#: without it is an error in every version that has the field (decoding still fills a zero value)
MISSING: Any = _Missing()


class SchemaError(ProtocolError, ValueError):
    """A message body does not match its schema at encode time: a key that is no field of the message
    (the message names the closest field), or a field without a default left out. A bug in the code
    that built the body, never a broker's fault; a ``ValueError`` too."""

_SCALARS = ("int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "bool", "uuid")
_LENGTHED = ("string", "bytes", "records")


def parse_versions(spec: str) -> Versions:
    """``"3+"`` -> (3, MAX), ``"8-10"`` -> (8, 10), ``"5"`` -> (5, 5), ``"none"`` -> empty range."""
    spec = spec.strip()
    if spec == "none":
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), MAX_VERSION)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def _in(v: int, r: Versions) -> bool:
    return r[0] <= v <= r[1]


class Struct:
    """A nested structure (a list of fields), used as a field type or as an array's element type."""

    __slots__ = ("fields",)

    def __init__(self, fields: Sequence["Field"]) -> None:
        self.fields = list(fields)


FieldType = Union[str, Struct, List["Field"]]


class Field:
    """One field of a message: ``type`` is a primitive name (``"int32"``, ``"string"``, ``"records"``,
    ``"[]int32"`` ...), a :class:`Struct`, or a list of fields (an array of structs).

    ``default``: the value an encoder writes when a body leaves the field out (``None`` for an optional
    nullable field). Without one (:data:`MISSING`) the field is required in the versions that have it;
    tagged fields need none (they are omitted when at their zero value)."""

    __slots__ = ("name", "type", "versions", "nullable", "tag", "tagged_versions", "default")

    def __init__(
        self,
        name: str,
        type: FieldType,
        versions: str = "0+",
        *,
        nullable: str = "none",
        tag: Optional[int] = None,
        tagged_versions: Optional[str] = None,
        default: Any = MISSING,
    ) -> None:
        self.name = name
        self.type = type
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        self.tagged_versions = parse_versions(tagged_versions or versions) if tag is not None else (1, 0)
        self.default = default

    def default_value(self, version: int) -> Any:
        """The declared default, or else the zero value of the type (what a decoder fills in for a
        field the version lacks)."""
        if self.default is not MISSING:
            return self.default
        t = self.type
        if isinstance(t, list) or (isinstance(t, str) and t.startswith("[]")):
            return None if _in(version, self.nullable) else []
        if isinstance(t, Struct):
            return _defaults(t.fields, version)
        if t in ("string", "bytes", "records"):
            if _in(version, self.nullable):
                return None
            if not _in(version, self.versions) and self.nullable[0] <= self.nullable[1]:
                # absent in this version but nullable where it exists (Metadata ClusterId before v2,
                # Produce ErrorMessage before v8...): Kafka's schemas give these a null default
                return None
            return "" if t == "string" else b""
        if t == "bool":
            return False
        if t == "float64":
            return 0.0
        if t == "uuid":
            return ZERO_UUID
        return 0


def _defaults(fields: Sequence[Field], version: int) -> Dict[str, Any]:
    return {f.name: f.default_value(version) for f in fields}


# --------------------------------------------------------------------------------------------
# primitive codecs


def _scalar(name: str) -> Tuple[Encoder, Decoder]:
    table: Dict[str, Tuple[Encoder, Decoder]] = {
        "int8": (p.write_int8, p.Reader.int8),
        "int16": (p.write_int16, p.Reader.int16),
        "uint16": (p.write_uint16, p.Reader.uint16),
        "int32": (p.write_int32, p.Reader.int32),
        "uint32": (p.write_uint32, p.Reader.uint32),
        "int64": (p.write_int64, p.Reader.int64),
        "float64": (p.write_float64, p.Reader.float64),
        "bool": (p.write_bool, p.Reader.bool),
        "uuid": (p.write_uuid, p.Reader.uuid),
    }
    return table[name]


def _lengthed(name: str, flexible: bool, nullable: bool) -> Tuple[Encoder, Decoder]:
    if name == "string":
        if flexible:
            return (
                (p.write_compact_nullable_string, p.Reader.compact_nullable_string)
                if nullable
                else (p.write_compact_string, p.Reader.compact_string)
            )
        return (
            (p.write_nullable_string, p.Reader.nullable_string)
            if nullable
            else (p.write_string, p.Reader.string)
        )
    # bytes and records share the wire form (records are always nullable on the wire)
    if name == "records":
        nullable = True
    if flexible:
        return (
            (p.write_compact_nullable_bytes, p.Reader.compact_nullable_bytes)
            if nullable
            else (p.write_compact_bytes, p.Reader.compact_bytes)
        )
    return (
        (p.write_nullable_bytes, p.Reader.nullable_bytes) if nullable else (p.write_bytes, p.Reader.bytes_)
    )


def _array(item_enc: Encoder, item_dec: Decoder, flexible: bool, nullable: bool, name: str) -> Tuple[Encoder, Decoder]:
    def enc(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"field {name!r} is not nullable in this version")
            p.write_array_length(out, None, flexible)
            return
        p.write_array_length(out, len(value), flexible)
        for item in value:
            item_enc(out, item)

    def dec(r: p.Reader) -> Any:
        n = r.array_length(flexible, nullable)
        if n < 0:
            return None
        return [item_dec(r) for _ in range(n)]

    return enc, dec


def _type_codec(
    t: FieldType, version: int, flexible: bool, nullable: bool, name: str, where: str = ""
) -> Tuple[Encoder, Decoder]:
    if isinstance(t, list):
        se, sd = compile_struct(t, version, flexible, where=f"{where}, in {name}[]")
        return _array(se, sd, flexible, nullable, name)
    if isinstance(t, Struct):
        return compile_struct(t.fields, version, flexible, where=f"{where}, in {name}")
    if t.startswith("[]"):
        ie, idec = _type_codec(t[2:], version, flexible, False, name, where)
        return _array(ie, idec, flexible, nullable, name)
    if t in _SCALARS:
        return _scalar(t)
    if t in _LENGTHED:
        return _lengthed(t, flexible, nullable)
    raise ValueError(f"unknown field type {t!r}")


# --------------------------------------------------------------------------------------------
# struct codec


def _fresh(value: Any) -> Any:
    """A copy of a default made of lists, dicts and immutable scalars (much cheaper than deepcopy)."""
    if type(value) is list:
        return [_fresh(v) for v in value]
    if type(value) is dict:
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _unknown_fields(value: Dict[str, Any], known: Sequence[str], version: int, where: str) -> SchemaError:
    """The error for keys of ``value`` that are not in ``known`` (the slow path: only on error)."""
    problems = []
    for key in value:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{key!r}{hint}")
    return SchemaError(
        f"{where}: unknown field {', '.join(problems)}; "
        f"the fields are {', '.join(repr(k) for k in known)}"
    )


def _wrap(e: Exception, name: str) -> Exception:
    """A primitive's TypeError/ValueError with the field's name in front (a SchemaError from a nested
    struct already names its place and passes unchanged)."""
    if isinstance(e, SchemaError):
        return e
    # (not type(e)(...): subclasses such as UnicodeEncodeError take other constructor arguments)
    return (TypeError if isinstance(e, TypeError) else ValueError)(f"field {name!r}: {e}")


def compile_struct(
    fields: Sequence[Field], version: int, flexible: bool, *, where: str = ""
) -> Tuple[Encoder, Decoder]:
    """Compile an encoder and a decoder of ``fields`` at ``version``. ``where`` names the message (and
    the path to a nested struct, ``"Produce v9 request, in topic_data[]"``) in encoding errors."""
    where = where or f"message v{version}"
    regular: List[Tuple[str, Encoder, Decoder, Any]] = []
    tagged: Dict[int, Tuple[str, Encoder, Decoder, Any]] = {}
    absent: Dict[str, Any] = {}
    for f in fields:
        present = _in(version, f.versions)
        is_tagged = f.tag is not None
        if is_tagged and not (flexible and _in(version, f.tagged_versions)):
            present = False
        if not present:
            absent[f.name] = f.default_value(version)
            continue
        enc, dec = _type_codec(f.type, version, flexible, _in(version, f.nullable), f.name, where)
        if is_tagged:
            assert f.tag is not None
            tagged[f.tag] = (f.name, enc, dec, f.default_value(version))
        else:
            # MISSING (no declared default) makes the encoder refuse a body without the field
            regular.append((f.name, enc, dec, f.default))
    tag_order = sorted(tagged)
    # every name of the message in any version: a body built for several versions may carry fields
    # this version lacks, but a key outside this set is a typo
    known = frozenset(f.name for f in fields)
    known_list = [f.name for f in fields]
    # Defaults that are lists or dicts must not be shared between decoded messages (a caller mutating
    # one response would otherwise change every later one): those are deep-copied per decode.
    absent_mutable = [name for name, v in absent.items() if isinstance(v, (list, dict))]
    tagged_defaults = [(tagged[t][0], tagged[t][3], isinstance(tagged[t][3], (list, dict))) for t in tag_order]

    def encode(out: bytearray, value: Dict[str, Any]) -> None:
        if not known.issuperset(value):
            if not isinstance(value, dict):
                raise TypeError(f"{where}: expected a dict, got {type(value).__name__}")
            raise _unknown_fields(value, known_list, version, where)
        get = value.get
        for name, enc, _dec, default in regular:
            v = get(name, default)
            if v is MISSING:
                raise SchemaError(
                    f"{where}: field {name!r} is missing "
                    "(it has no default: give it a value)"
                )
            try:
                enc(out, v)
            except (TypeError, ValueError) as e:
                raise _wrap(e, name) from None
        if flexible:
            extra: List[Tuple[int, bytes]] = []
            for tag in tag_order:
                name, enc, _dec, default = tagged[tag]
                v = get(name, default)
                if v is None or v == default:
                    continue
                buf = bytearray()
                try:
                    enc(buf, v)
                except (TypeError, ValueError) as e:
                    raise _wrap(e, name) from None
                extra.append((tag, bytes(buf)))
            p.write_tagged_fields(out, extra)

    def decode(r: p.Reader) -> Dict[str, Any]:
        result: Dict[str, Any] = dict(absent)
        for name in absent_mutable:
            result[name] = _fresh(absent[name])
        for name, _enc, dec, _default in regular:
            result[name] = dec(r)
        if flexible:
            for name, default, mutable in tagged_defaults:
                result[name] = _fresh(default) if mutable else default
            for tag, data in r.tagged_fields():
                known = tagged.get(tag)
                if known is None:
                    continue  # unknown tags are skipped, as the protocol requires
                sub = p.Reader(data)
                result[known[0]] = known[2](sub)
                if sub.remaining():
                    raise ProtocolError(f"tagged field {known[0]!r} has {sub.remaining()} trailing bytes")
        return result

    return encode, decode


# --------------------------------------------------------------------------------------------
# APIs


class Api:
    """A Kafka API: its key, the versions we implement, the first flexible version, and both schemas.

    ``client_max``: the highest version kproducer's client negotiates unless it asks for more (None: every
    implemented version). Versions above it are implemented -- the mock broker serves them -- but change
    what the request means, so a client speaks them only when it implements that meaning: Produce v12,
    EndTxn v5 and TxnOffsetCommit v5 are transactions v2 (KIP-890), see
    :data:`kproducer.protocol.messages.TRANSACTION_V2_VERSIONS`."""

    def __init__(
        self,
        key: int,
        name: str,
        versions: str,
        flexible: str,
        request: Sequence[Field],
        response: Sequence[Field],
        *,
        client_max: Optional[int] = None,
    ) -> None:
        self.key = key
        self.name = name
        self.min_version, self.max_version = parse_versions(versions)
        if client_max is not None and not self.min_version <= client_max <= self.max_version:
            raise ValueError(f"{name}: client_max v{client_max} is outside v{self.min_version}-v{self.max_version}")
        #: the highest version a client negotiates by default (see the class doc)
        self.client_max_version = self.max_version if client_max is None else client_max
        self.flexible = parse_versions(flexible)
        self.request_fields = list(request)
        self.response_fields = list(response)
        self._cache: Dict[Tuple[str, int], Tuple[Encoder, Decoder]] = {}

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name!r}, v{self.min_version}-{self.max_version})"

    def is_flexible(self, version: int) -> bool:
        return _in(version, self.flexible)

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions responses always use header v0 so a client can read them whatever it asked for.
        if self.key == 18:
            return 0
        return 1 if self.is_flexible(version) else 0

    def _codec(self, kind: str, version: int) -> Tuple[Encoder, Decoder]:
        key = (kind, version)
        codec = self._cache.get(key)
        if codec is None:
            if not self.min_version <= version <= self.max_version:
                raise ValueError(
                    f"{self.name} v{version} is not implemented (supported: v{self.min_version}-v{self.max_version})"
                )
            fields = self.request_fields if kind == "request" else self.response_fields
            where = f"{self.name} v{version} {kind}"
            codec = compile_struct(fields, version, self.is_flexible(version), where=where)
            self._cache[key] = codec
        return codec

    def encode_request(self, version: int, body: Dict[str, Any]) -> bytes:
        out = bytearray()
        self._codec("request", version)[0](out, body)
        return bytes(out)

    def encode_request_parts(self, version: int, body: Dict[str, Any]) -> List[Any]:
        """The request body as a list of byte strings to be joined (an API whose body carries large buffers
        gives them as they are, so that the request is copied once, header and all)."""
        return [self.encode_request(version, body)]

    def decode_request(self, version: int, data: bytes, pos: int = 0) -> Dict[str, Any]:
        return _decode_all(self._codec("request", version)[1], data, pos, f"{self.name} v{version} request")

    def encode_response(self, version: int, body: Dict[str, Any]) -> bytes:
        out = bytearray()
        self._codec("response", version)[0](out, body)
        return bytes(out)

    def decode_response(self, version: int, data: bytes, pos: int = 0) -> Dict[str, Any]:
        """The response body at ``data[pos:]``; bytes after its last field are ignored (see the module doc)."""
        return _decode_all(self._codec("response", version)[1], data, pos, f"{self.name} v{version} response",
                           self.key)

    def request_defaults(self, version: int) -> Dict[str, Any]:
        """A request body with every field of ``version`` at its default or zero value: a base to fill
        in when leaving most fields at zero is what is meant (the encoder refuses missing fields)."""
        return _defaults(self.request_fields, version)

    def response_defaults(self, version: int) -> Dict[str, Any]:
        """The response twin of :meth:`request_defaults`."""
        return _defaults(self.response_fields, version)


def _decode_all(dec: Decoder, data: bytes, pos: int, what: str, liberal_api: Optional[int] = None) -> Dict[str, Any]:
    """Decode all of ``data[pos:]``; with ``liberal_api`` (a response's API key) bytes after the last field are
    skipped (logged once per API), else a ProtocolError."""
    r = p.Reader(data, pos)
    try:
        result: Dict[str, Any] = dec(r)
    except ProtocolError as e:
        raise ProtocolError(f"malformed {what}: {e.message}") from None
    if r.remaining():
        if liberal_api is None:
            raise ProtocolError(f"malformed {what}: {r.remaining()} unexpected trailing bytes")
        if liberal_api not in _TRAILING_LOGGED:
            _TRAILING_LOGGED.add(liberal_api)
            log.info("a broker's %s has %d bytes after its last field: ignored, as Java's client does (logged "
                     "once per API)", what, r.remaining())
    return result
