"""Produce (key 0): record batches to partition leaders. v3+ carries RecordBatch v2.

v12 has v11's fields; it is transactions v2 (KIP-890 part 2): the partition leader adds the partitions of a
transactional request to the producer's transaction itself (no AddPartitionsToTxn from the client). Java sends
v12+ in a transaction only when the cluster's ``transaction.version`` is 2 or more (v11 at most otherwise), so
kproducer's client negotiates at most v11 unless it asks for more. v13 (topic ids, KIP-516) is not implemented."""
from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Tuple

from ..accel import records as _records_c
from ..schema import Api, Field, Struct

# --------------------------------------------------------------------------------------------
# Fast paths: one Produce request per drain and per broker, one response back -- the sender's per-batch
# path. Both produce exactly what the generic schema codec does (the unit tests compare them over every
# version); anything unusual (a type the fast path does not expect, tagged fields, record errors, malformed
# data) goes to the generic codec, which also raises its errors.

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_REQ_FIXED = struct.Struct(">hi")  # acks, timeout_ms
_PART_V2 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PART_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
_NO_TAGS = b"\x00"


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_UVARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_UVARINTS = [bytes((i,)) for i in range(0x80)]


def _is_flat(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return not any(isinstance(v, (list, dict)) for v in items)


def _join_record_parts(body: Dict[str, Any]) -> Dict[str, Any]:
    """``body`` with every records value given in parts (a tuple) joined into bytes, for the schema codec."""
    topics = body.get("topic_data")
    if type(topics) is not list or not any(
            type(t) is dict and type(t.get("partition_data")) is list
            and any(type(pd) is dict and type(pd.get("records")) is tuple for pd in t["partition_data"])
            for t in topics):
        return body
    joined = []
    for t in topics:
        if type(t) is dict and type(t.get("partition_data")) is list:
            t = {**t, "partition_data": [
                {**pd, "records": b"".join(pd["records"])} if type(pd) is dict and type(pd.get("records")) is tuple
                else pd for pd in t["partition_data"]]}
        joined.append(t)
    return {**body, "topic_data": joined}


class _Fallback(Exception):
    """The fast path does not handle this message: use the generic codec."""


def _string_length(n: int, flexible: bool) -> bytes:
    """The length prefix of a non-null string of ``n`` bytes (compact in flexible versions); _Fallback when a
    classic string cannot hold it (the schema codec reports that)."""
    if flexible:
        return _uvarint(n + 1)
    if n > 32767:
        raise _Fallback
    return _I16.pack(n)


class ProduceApi(Api):
    """The Produce API with a hand-written request encoder and response decoder for the common case."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fast_cache: Dict[Any, Any] = {}

    def encode_request(self, version: int, body: Dict[str, Any]) -> bytes:
        return b"".join(self.encode_request_parts(version, body))

    def encode_request_parts(self, version: int, body: Dict[str, Any]) -> List[Any]:
        if not 3 <= version <= 12:
            return [super().encode_request(version, body)]
        if _records_c is not None:  # the compiled twin (fewer, larger parts; the same bytes)
            parts: Optional[List[Any]] = _records_c.encode_produce_request(version, body)
            if parts is not None:
                return parts
        else:
            try:
                return self._encode_request_parts(version, body)
            except _Fallback:
                pass
        return [super().encode_request(version, _join_record_parts(body))]

    def _encode_request_parts(self, version: int, body: Dict[str, Any]) -> List[Any]:
        """The request body as a list of byte strings (the records as given: bytes or memoryviews of the
        built batches, not copied until the join)."""
        flexible = version >= 9
        tid = body.get("transactional_id")
        acks = body.get("acks")
        timeout = body.get("timeout_ms")
        topics = body.get("topic_data")
        if len(body) != 4 or type(acks) is not int or type(timeout) is not int or type(topics) is not list \
                or not -32768 <= acks <= 32767 or not -2**31 <= timeout < 2**31:
            raise _Fallback
        parts: List[Any] = []
        append = parts.append
        if tid is None:
            append(b"\x00" if flexible else b"\xff\xff")
        elif type(tid) is str:
            raw = tid.encode("utf-8")
            append(_string_length(len(raw), flexible))
            append(raw)
        else:
            raise _Fallback
        append(_REQ_FIXED.pack(acks, timeout))
        append(_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics)))
        for topic in topics:
            if type(topic) is not dict or len(topic) != 2:
                raise _Fallback
            name = topic.get("name")
            partitions = topic.get("partition_data")
            if type(name) is not str or type(partitions) is not list:
                raise _Fallback
            raw = name.encode("utf-8")
            append(_string_length(len(raw), flexible))
            append(raw)
            append(_uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions)))
            for part in partitions:
                if type(part) is not dict or len(part) != 2:
                    raise _Fallback
                index = part.get("index")
                records = part.get("records")
                if type(index) is not int or not -2**31 <= index < 2**31:
                    raise _Fallback
                append(_I32.pack(index))
                if records is None:
                    append(b"\x00" if flexible else b"\xff\xff\xff\xff")
                elif type(records) is tuple:  # a batch in parts (header, view of its records): not copied here
                    n = 0
                    for piece in records:
                        if type(piece) is memoryview:
                            n += piece.nbytes
                        elif type(piece) is bytes or type(piece) is bytearray:
                            n += len(piece)
                        else:
                            raise _Fallback
                    if flexible:
                        append(_uvarint(n + 1))
                    else:
                        if n > 2**31 - 1:
                            raise _Fallback
                        append(_I32.pack(n))
                    parts.extend(records)
                elif type(records) is bytes or type(records) is memoryview or type(records) is bytearray:
                    n = len(records) if type(records) is not memoryview else records.nbytes
                    if flexible:
                        append(_uvarint(n + 1))
                    else:
                        if n > 2**31 - 1:
                            raise _Fallback
                        append(_I32.pack(n))
                    append(records)
                else:
                    raise _Fallback
                if flexible:
                    append(_NO_TAGS)
            if flexible:
                append(_NO_TAGS)
        if flexible:
            append(_NO_TAGS)
        return parts

    def decode_response(self, version: int, data: bytes, pos: int = 0) -> Dict[str, Any]:
        if 3 <= version <= 12:
            try:
                if _records_c is None:
                    return self._decode_response_fast(version, data, pos)
                # its compiled twin (None: not the common case)
                part, mutable, top = self._partition_defaults(version)
                decoded: Optional[Dict[str, Any]] = _records_c.decode_produce_response(data, pos, version, part,
                                                                                     mutable, top)
                if decoded is not None:
                    return decoded
            except Exception:  # anything unusual or malformed: the generic decoder decides (and raises)
                pass
        return super().decode_response(version, data, pos)

    def _partition_defaults(self, version: int) -> Tuple[Dict[str, Any], Tuple[str, ...], Dict[str, Any]]:
        """What the generic decoder puts in a partition response and in the response besides the fields the
        fast path reads (defaults of absent and tagged fields), from decoding a minimal response once."""
        key = ("fast-defaults", version)
        cached = self._fast_cache.get(key)
        if cached is None:
            sample = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0,
                                                                         "base_offset": 0}]}]}
            decoded = super().decode_response(version, super().encode_response(version, sample))
            part = decoded["responses"][0]["partition_responses"][0]
            # defaults made of lists and dicts are copied per decode (flat ones by a shallow copy)
            mutable = tuple(k for k, v in part.items() if isinstance(v, (list, dict))
                            and k != "record_errors" or (k == "record_errors" and version < 8))
            assert all(_is_flat(part[k]) for k in mutable)
            top = {k: v for k, v in decoded.items() if k not in ("responses", "throttle_time_ms")}
            assert all(_is_flat(v) for v in top.values() if isinstance(v, (list, dict)))
            cached = (part, mutable, top)
            self._fast_cache[key] = cached
        return cached

    def _decode_response_fast(self, version: int, data: bytes, pos: int) -> Dict[str, Any]:
        flexible = version >= 9
        part_defaults, mutable, top_defaults = self._partition_defaults(version)
        unpack_i32 = _I32.unpack_from
        part_struct = _PART_V5 if version >= 5 else _PART_V2
        part_size = part_struct.size
        unpack_part = part_struct.unpack_from
        v5 = version >= 5
        v8 = version >= 8
        mem = memoryview(data)

        def length(pos: int) -> Tuple[int, int]:
            """An array count or string length (compact: minus one); returns (n, new pos)."""
            if flexible:
                b = data[pos]
                if b < 0x80:
                    return b - 1, pos + 1
                raise _Fallback
            return unpack_i32(data, pos)[0], pos + 4

        def tags(pos: int) -> int:
            if data[pos] != 0:
                raise _Fallback  # tagged fields present (e.g. a KIP-951 leader hint): the generic decoder
            return pos + 1

        count, pos = length(pos)
        if count < 0:
            raise _Fallback
        responses = []
        for _ in range(count):
            if flexible:
                n, pos = length(pos)
            else:
                n = _I16.unpack_from(data, pos)[0]
                pos += 2
            if n < 0:
                raise _Fallback
            name = str(mem[pos:pos + n], "utf-8")
            pos += n
            pcount, pos = length(pos)
            if pcount < 0:
                raise _Fallback
            parts = []
            for _ in range(pcount):
                fields = unpack_part(data, pos)
                pos += part_size
                d = part_defaults.copy()
                for k in mutable:
                    d[k] = d[k].copy()
                d["index"], d["error_code"], d["base_offset"], d["log_append_time_ms"] = fields[:4]
                if v5:
                    d["log_start_offset"] = fields[4]
                if v8:
                    ecount, pos = length(pos)
                    if ecount != 0:
                        raise _Fallback  # record errors: rare, the generic decoder
                    d["record_errors"] = []
                    if flexible:
                        if data[pos] != 0:
                            n, pos = length(pos)
                            if n < 0:
                                raise _Fallback
                            d["error_message"] = str(mem[pos:pos + n], "utf-8")
                            pos += n
                        else:
                            d["error_message"] = None
                            pos += 1
                    else:
                        n = _I16.unpack_from(data, pos)[0]
                        pos += 2
                        if n < 0:
                            if n != -1:
                                raise _Fallback
                            d["error_message"] = None
                        else:
                            d["error_message"] = str(mem[pos:pos + n], "utf-8")
                            pos += n
                    if flexible:
                        pos = tags(pos)
                parts.append(d)
            if flexible:
                pos = tags(pos)
            responses.append({"name": name, "partition_responses": parts})
        result = {k: v.copy() if isinstance(v, (list, dict)) else v for k, v in top_defaults.items()}
        result["responses"] = responses
        result["throttle_time_ms"] = unpack_i32(data, pos)[0]
        pos += 4
        if flexible:
            pos = tags(pos)
        if pos != len(data):
            raise _Fallback
        return result


PRODUCE = ProduceApi(
    0,
    "Produce",
    versions="3-12",
    flexible="9+",
    request=[
        Field("transactional_id", "string", "3+", nullable="3+", default=None),
        Field("acks", "int16"),
        Field("timeout_ms", "int32"),
        Field("topic_data", [
            Field("name", "string"),
            Field("partition_data", [
                Field("index", "int32"),
                Field("records", "records"),
            ]),
        ]),
    ],
    response=[
        Field("responses", [
            Field("name", "string"),
            Field("partition_responses", [
                Field("index", "int32"),
                Field("error_code", "int16"),
                Field("base_offset", "int64"),
                Field("log_append_time_ms", "int64", "2+", default=-1),
                Field("log_start_offset", "int64", "5+", default=-1),
                Field("record_errors", [
                    Field("batch_index", "int32"),
                    Field("batch_index_error_message", "string", nullable="8+"),
                ], "8+", default=[]),
                Field("error_message", "string", "8+", nullable="8+", default=None),
                Field("current_leader", Struct([
                    Field("leader_id", "int32", default=-1),
                    Field("leader_epoch", "int32", default=-1),
                ]), "10+", tag=0),
            ]),
        ]),
        Field("throttle_time_ms", "int32", "1+", default=0),
        Field("node_endpoints", [
            Field("node_id", "int32"),
            Field("host", "string"),
            Field("port", "int32"),
            Field("rack", "string", nullable="10+"),
        ], "10+", tag=0),
    ],
    client_max=11,
)
