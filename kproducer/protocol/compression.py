"""Compression codecs for the records section of a RecordBatch v2.

Codec ids are Kafka's attribute bits 0-2.  gzip uses the standard library; snappy, lz4 and zstd
use optional third-party packages that are imported lazily on first use, so a producer that never
compresses with them does not need them installed.  :func:`check_codec_available` lets the
producer fail at construction time instead of on the first batch.

Wire formats (what the Java client writes and reads):

* gzip   -- a gzip stream (RFC 1952); readers accept concatenated members.
* snappy -- Xerial's framed format: an 8-byte magic, int32 version, int32 compatible version,
  then blocks of ``int32 big-endian compressed length + raw snappy data``, each block holding at
  most 32 KiB of input.  Readers accept Xerial framing and plain raw snappy.
* lz4    -- the standard LZ4 frame format with independent 64 KiB blocks, no block checksums,
  no content size and no content checksum (exactly what Kafka's Java client writes).
* zstd   -- a standard zstd frame; readers accept frames without a content size and
  concatenated frames.

Corrupt compressed input raises :class:`ProtocolError`.  A missing optional package raises
:class:`UnsupportedCodecError`, whose message says which extra to install.
"""

from __future__ import annotations

import importlib
import struct
import threading
import zlib
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import ProtocolError

__all__ = [
    "CODEC_NONE",
    "CODEC_GZIP",
    "CODEC_SNAPPY",
    "CODEC_LZ4",
    "CODEC_ZSTD",
    "CODEC_NAMES",
    "UnsupportedCodecError",
    "codec_from_name",
    "codec_name",
    "check_codec_available",
    "is_codec_available",
    "validate_level",
    "compress",
    "decompress",
]

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4

#: codec id -> name, as used by the ``compression.type`` setting
CODEC_NAMES: Dict[int, str] = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}
_CODECS_BY_NAME: Dict[str, int] = {name: codec for codec, name in CODEC_NAMES.items()}

# Optional packages: codec -> (module to import, pip package, extra name)
_OPTIONAL: Dict[int, Tuple[str, str, str]] = {
    CODEC_SNAPPY: ("snappy", "python-snappy", "snappy"),
    CODEC_LZ4: ("lz4.frame", "lz4", "lz4"),
    CODEC_ZSTD: ("zstandard", "zstandard", "zstd"),
}

# Level ranges accepted per codec (None always means "the codec's default").
_LEVEL_RANGES: Dict[int, Tuple[int, int]] = {
    CODEC_GZIP: (-1, 9),  # -1 = zlib's default (6), like Java's Deflater.DEFAULT_COMPRESSION
    CODEC_LZ4: (1, 17),  # Kafka's compression.lz4.level range; None = the fast compressor
    CODEC_ZSTD: (-131072, 22),  # Kafka's compression.zstd.level range
}
_GZIP_DEFAULT_LEVEL = 6
_ZSTD_DEFAULT_LEVEL = 3

# Xerial snappy framing
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_VERSION = 1
_XERIAL_COMPAT_VERSION = 1
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", _XERIAL_VERSION, _XERIAL_COMPAT_VERSION)
_XERIAL_HEADER_LEN = len(_XERIAL_HEADER)  # 16
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


class UnsupportedCodecError(ImportError):
    """The optional package a compression codec needs is not installed."""


def codec_from_name(name: str) -> int:
    """Map a ``compression.type`` name ("none", "gzip", "snappy", "lz4", "zstd") to its codec id."""
    if isinstance(name, str):
        codec = _CODECS_BY_NAME.get(name.strip().lower())
        if codec is not None:
            return codec
    valid = ", ".join(repr(n) for n in _CODECS_BY_NAME)
    raise ValueError(f"unknown compression type {name!r}; valid choices are {valid}")


def codec_name(codec: int) -> str:
    """The name of a codec id (ValueError if unknown)."""
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise ValueError(f"unknown compression codec id {codec!r}") from None


# --------------------------------------------------------------------------------------------
# Lazy loading of the optional libraries
# --------------------------------------------------------------------------------------------

_modules: Dict[int, ModuleType] = {}
_load_lock = threading.Lock()


def _load(codec: int) -> ModuleType:
    mod = _modules.get(codec)
    if mod is not None:
        return mod
    module_name, package, extra = _OPTIONAL[codec]
    with _load_lock:
        mod = _modules.get(codec)
        if mod is None:
            try:
                mod = importlib.import_module(module_name)
            except ImportError as exc:
                raise UnsupportedCodecError(
                    f"{CODEC_NAMES[codec]} compression requires the '{package}' package, which is "
                    f"not installed: pip install kproducer[{extra}]  (or: pip install {package})"
                ) from exc
            _modules[codec] = mod
    return mod


def check_codec_available(codec: int) -> None:
    """Raise if ``codec`` cannot be used here.

    ValueError for an unknown codec id, :class:`UnsupportedCodecError` when the optional package
    it needs is missing.  Cheap after the first call; meant for config validation.
    """
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown compression codec id {codec!r}; valid ids are 0-4")
    if codec in _OPTIONAL:
        _load(codec)


def is_codec_available(codec: int) -> bool:
    """True when ``codec`` is known and its library is importable."""
    try:
        check_codec_available(codec)
    except (ValueError, ImportError):
        return False
    return True


def validate_level(codec: int, level: Optional[int]) -> None:
    """Raise ValueError if ``level`` is not a valid compression level for ``codec``.

    None always means the codec's default.  gzip: -1 or 1..9 (-1 = zlib's default, 6); lz4: 1..17
    (None or 9, Java's default, = the fast compressor; other levels use LZ4 HC, as Java's
    Lz4BlockOutputStream does); zstd: -131072..22 (default 3).
    "none" and snappy have no levels: only None is accepted.
    """
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown compression codec id {codec!r}; valid ids are 0-4")
    if level is None:
        return
    if isinstance(level, bool) or not isinstance(level, int):
        raise ValueError(f"compression level must be an int or None, got {level!r}")
    bounds = _LEVEL_RANGES.get(codec)
    if bounds is None:
        raise ValueError(f"{CODEC_NAMES[codec]} compression has no levels (got level {level})")
    low, high = bounds
    if codec == CODEC_GZIP and level == 0:
        # Java's GZIP level validator: 1..9 or -1 (Deflater.DEFAULT_COMPRESSION); 0 (store) is refused
        raise ValueError("gzip compression level must be -1 (zlib's default) or in [1, 9], got 0")
    if not low <= level <= high:
        raise ValueError(
            f"{CODEC_NAMES[codec]} compression level must be in [{low}, {high}], got {level}"
        )


# --------------------------------------------------------------------------------------------
# gzip
# --------------------------------------------------------------------------------------------


def _gzip_compress(data: bytes, level: Optional[int]) -> bytes:
    lvl = _GZIP_DEFAULT_LEVEL if level is None or level == -1 else level
    # wbits 31 = gzip container with a minimal header (mtime 0), like java.util.zip.GZIPOutputStream
    comp = zlib.compressobj(lvl, zlib.DEFLATED, 31)
    return comp.compress(data) + comp.flush()


def _gzip_decompress(data: bytes) -> bytes:
    out: List[bytes] = []
    rest = data
    if not rest:
        raise ProtocolError("corrupt gzip data: empty input")
    try:
        while rest:
            d = zlib.decompressobj(31)
            out.append(d.decompress(rest))
            out.append(d.flush())
            if not d.eof:
                raise ProtocolError("corrupt gzip data: truncated stream")
            rest = d.unused_data
    except zlib.error as exc:
        raise ProtocolError(f"corrupt gzip data: {exc}") from exc
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# snappy (Xerial framing)
# --------------------------------------------------------------------------------------------


def _snappy_compress(data: bytes) -> bytes:
    snappy = _load(CODEC_SNAPPY)
    raw_compress: Callable[[bytes], bytes] = snappy.compress
    parts: List[bytes] = [_XERIAL_HEADER]
    pack = _INT32.pack
    mv = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
        block = raw_compress(bytes(mv[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes) -> bytes:
    snappy = _load(CODEC_SNAPPY)
    raw_uncompress: Callable[[bytes], bytes] = snappy.uncompress
    try:
        if not data.startswith(_XERIAL_MAGIC):
            return bytes(raw_uncompress(data))
        out: List[bytes] = []
        pos = 0
        end = len(data)
        unpack_from = _INT32.unpack_from
        mv = memoryview(data)
        while pos < end:
            if data.startswith(_XERIAL_MAGIC, pos):
                # a (possibly concatenated) stream header: magic, version, compatible version
                if end - pos < _XERIAL_HEADER_LEN:
                    raise ProtocolError("corrupt snappy data: truncated Xerial header")
                pos += _XERIAL_HEADER_LEN
                continue
            if end - pos < 4:
                raise ProtocolError("corrupt snappy data: truncated Xerial block length")
            (size,) = unpack_from(data, pos)
            pos += 4
            if size < 0 or size > end - pos:
                raise ProtocolError(
                    f"corrupt snappy data: Xerial block length {size} with {end - pos} bytes left"
                )
            out.append(raw_uncompress(bytes(mv[pos : pos + size])))
            pos += size
        return b"".join(out)
    except ProtocolError:
        raise
    except Exception as exc:  # the library raises its own UncompressError and others
        raise ProtocolError(f"corrupt snappy data: {exc or type(exc).__name__}") from exc


# --------------------------------------------------------------------------------------------
# lz4 (frame format)
# --------------------------------------------------------------------------------------------


#: Java's default lz4 level: Lz4BlockOutputStream uses lz4-java's fast compressor for it, and the
#: high-compression (HC) compressor at the given level for every other level
LZ4_DEFAULT_LEVEL = 9


def _lz4_frame_level(level: Optional[int]) -> int:
    """The ``lz4.frame`` compression level for a Kafka lz4 level: 0 (the fast compressor) for the default
    (None or 9), the level itself (LZ4-HC) otherwise. lz4.frame treats levels 1 and 2 as fast mode as
    well, where lz4-java would run HC with very few searches (see docs/network.md)."""
    if level is None or level == LZ4_DEFAULT_LEVEL:
        return 0
    return level


def _lz4_compress(data: bytes, level: Optional[int]) -> bytes:
    lz4f = _load(CODEC_LZ4)
    result: bytes = lz4f.compress(
        data,
        compression_level=_lz4_frame_level(level),
        block_size=lz4f.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    return result


def _lz4_decompress(data: bytes) -> bytes:
    lz4f = _load(CODEC_LZ4)
    if not data:
        raise ProtocolError("corrupt lz4 data: empty input")
    out: List[bytes] = []
    rest = data
    try:
        while rest:
            d = lz4f.LZ4FrameDecompressor()
            out.append(d.decompress(rest))
            if not d.eof:
                raise ProtocolError("corrupt lz4 data: truncated frame")
            rest = d.unused_data
    except ProtocolError:
        raise
    except Exception as exc:  # lz4 raises RuntimeError for corrupt frames
        raise ProtocolError(f"corrupt lz4 data: {exc}") from exc
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# zstd
# --------------------------------------------------------------------------------------------

_zstd_local = threading.local()  # ZstdCompressor objects are not thread-safe: one per thread


def _zstd_compress(data: bytes, level: Optional[int]) -> bytes:
    zstd = _load(CODEC_ZSTD)
    lvl = _ZSTD_DEFAULT_LEVEL if level is None else level
    cache: Optional[Dict[int, Any]] = getattr(_zstd_local, "compressors", None)
    if cache is None:
        cache = {}
        _zstd_local.compressors = cache
    comp = cache.get(lvl)
    if comp is None:
        comp = zstd.ZstdCompressor(level=lvl)
        cache[lvl] = comp
    result: bytes = comp.compress(data)
    return result


def _zstd_decompress(data: bytes) -> bytes:
    zstd = _load(CODEC_ZSTD)
    if not data:
        raise ProtocolError("corrupt zstd data: empty input")
    out: List[bytes] = []
    rest = data
    try:
        dctx = zstd.ZstdDecompressor()
        while rest:
            # decompressobj copes with frames that do not record their content size (the Java
            # client's streaming encoder writes such frames)
            d = dctx.decompressobj()
            out.append(d.decompress(rest))
            if not d.eof:
                raise ProtocolError("corrupt zstd data: truncated frame")
            rest = d.unused_data
    except ProtocolError:
        raise
    except Exception as exc:  # zstandard.ZstdError
        raise ProtocolError(f"corrupt zstd data: {exc}") from exc
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def compress(codec: int, data: bytes, level: Optional[int] = None) -> bytes:
    """Compress ``data`` with ``codec`` (a CODEC_* id) in Kafka's wire format for that codec.

    ValueError for an unknown codec or an invalid level; UnsupportedCodecError when the codec's
    optional package is missing.
    """
    if codec == CODEC_NONE:
        if level is not None:
            validate_level(codec, level)
        return bytes(data)
    validate_level(codec, level)
    if codec == CODEC_GZIP:
        return _gzip_compress(data, level)
    if codec == CODEC_SNAPPY:
        return _snappy_compress(data)
    if codec == CODEC_LZ4:
        return _lz4_compress(data, level)
    return _zstd_compress(data, level)  # validate_level rejected unknown codecs


def decompress(codec: int, data: bytes) -> bytes:
    """Decompress ``data`` compressed with ``codec``.

    ProtocolError for an unknown codec id (it comes off the wire) or corrupt data;
    UnsupportedCodecError when the codec's optional package is missing.
    """
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return _gzip_decompress(data)
    if codec == CODEC_SNAPPY:
        return _snappy_decompress(data)
    if codec == CODEC_LZ4:
        return _lz4_decompress(data)
    if codec == CODEC_ZSTD:
        return _zstd_decompress(data)
    raise ProtocolError(f"unknown compression codec id {codec} (valid ids are 0-4)")
