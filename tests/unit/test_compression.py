"""Tests for kproducer.protocol.compression."""

from __future__ import annotations

import gzip
import os
import random
import struct
import sys
from typing import Iterator, List

import pytest

from kproducer.protocol import compression
from kproducer.protocol.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    UnsupportedCodecError,
    check_codec_available,
    codec_from_name,
    codec_name,
    compress,
    decompress,
    is_codec_available,
    validate_level,
)
from kproducer.protocol.errors import KafkaError, ProtocolError

OPTIONAL_MODULES = {CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4.frame", CODEC_ZSTD: "zstandard"}
ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]


def require(codec: int) -> None:
    """Skip the calling test when the codec's optional library is missing."""
    module = OPTIONAL_MODULES.get(codec)
    if module is not None:
        pytest.importorskip(module)


def sample_payloads() -> List[bytes]:
    rnd = random.Random(1234)
    text = b"".join(
        b"record-%06d: the quick brown fox jumps over the lazy dog\n" % i for i in range(3000)
    )
    return [
        b"",
        b"x",
        b"hello world",
        bytes(range(256)),
        b"\x00" * 100_000,
        text,  # ~180 KB, compressible, several snappy blocks and lz4 blocks
        bytes(rnd.getrandbits(8) for _ in range(70_000)),  # incompressible
    ]


# --------------------------------------------------------------------------------------------
# names and constants
# --------------------------------------------------------------------------------------------


def test_codec_ids_match_kafka_attribute_bits() -> None:
    assert (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD) == (0, 1, 2, 3, 4)


@pytest.mark.parametrize(
    "name,codec",
    [("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), ("GZIP", 1), (" Zstd ", 4)],
)
def test_codec_from_name(name: str, codec: int) -> None:
    assert codec_from_name(name) == codec


@pytest.mark.parametrize("bad", ["", "zip", "lz4hc", "brotli", None, 3])
def test_codec_from_name_rejects_unknown_names_listing_choices(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        codec_from_name(bad)  # type: ignore[arg-type]
    message = str(info.value)
    for name in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert name in message


def test_codec_name() -> None:
    assert [codec_name(c) for c in ALL_CODECS] == ["none", "gzip", "snappy", "lz4", "zstd"]
    with pytest.raises(ValueError):
        codec_name(9)


# --------------------------------------------------------------------------------------------
# round trips
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip(codec: int) -> None:
    require(codec)
    for data in sample_payloads():
        packed = compress(codec, data)
        assert isinstance(packed, bytes)
        assert decompress(codec, packed) == data


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_accepts_bytearray_input(codec: int) -> None:
    require(codec)
    data = bytearray(b"abc" * 1000)
    assert decompress(codec, compress(codec, bytes(data))) == bytes(data)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_compressible_data_gets_smaller(codec: int) -> None:
    require(codec)
    data = b"0123456789abcdef" * 10_000
    assert len(compress(codec, data)) < len(data) // 4


def test_none_codec_is_identity() -> None:
    assert compress(CODEC_NONE, b"abc") == b"abc"
    assert decompress(CODEC_NONE, b"abc") == b"abc"


# --------------------------------------------------------------------------------------------
# levels
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "codec,levels",
    [
        (CODEC_GZIP, [-1, 1, 6, 9]),
        (CODEC_LZ4, [1, 9, 12, 17]),
        (CODEC_ZSTD, [-5, 1, 3, 19, 22]),
    ],
)
def test_levels_round_trip(codec: int, levels: List[int]) -> None:
    require(codec)
    data = b"some moderately compressible data " * 500
    for level in levels:
        validate_level(codec, level)
        assert decompress(codec, compress(codec, data, level)) == data


def test_higher_gzip_level_is_not_larger() -> None:
    data = b"".join(b"line %d of some text that repeats a bit\n" % (i % 97) for i in range(5000))
    assert len(compress(CODEC_GZIP, data, 9)) <= len(compress(CODEC_GZIP, data, 1))


@pytest.mark.parametrize(
    "codec,level",
    [
        (CODEC_GZIP, 10),
        (CODEC_GZIP, -2),
        (CODEC_GZIP, 0),  # Java: -1 or 1..9
        (CODEC_LZ4, 0),
        (CODEC_LZ4, 18),
        (CODEC_ZSTD, 23),
        (CODEC_ZSTD, -131073),
        (CODEC_SNAPPY, 1),
        (CODEC_NONE, 1),
    ],
)
def test_invalid_levels_raise_value_error(codec: int, level: int) -> None:
    with pytest.raises(ValueError):
        validate_level(codec, level)
    with pytest.raises(ValueError):
        compress(codec, b"data", level)


def test_lz4_level_9_is_the_fast_compressor_like_javas_default() -> None:
    """Java's Lz4BlockOutputStream: the default level (9) uses the fast compressor, any other level LZ4-HC."""
    require(CODEC_LZ4)
    from kproducer.protocol.compression import LZ4_DEFAULT_LEVEL, _lz4_frame_level

    assert LZ4_DEFAULT_LEVEL == 9
    assert _lz4_frame_level(None) == _lz4_frame_level(9) == 0
    assert _lz4_frame_level(12) == 12 and _lz4_frame_level(17) == 17
    data = b"".join(b"record %d with a value that repeats now and then\n" % (i % 211) for i in range(4000))
    assert compress(CODEC_LZ4, data, 9) == compress(CODEC_LZ4, data, None)
    assert len(compress(CODEC_LZ4, data, 12)) <= len(compress(CODEC_LZ4, data, 9))


def test_validate_level_rejects_non_int() -> None:
    with pytest.raises(ValueError):
        validate_level(CODEC_GZIP, "5")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        validate_level(CODEC_GZIP, True)
    with pytest.raises(ValueError):
        validate_level(7, None)
    for codec in ALL_CODECS:
        validate_level(codec, None)


# --------------------------------------------------------------------------------------------
# gzip wire format
# --------------------------------------------------------------------------------------------


def test_gzip_writes_a_gzip_stream_readable_by_stdlib() -> None:
    data = b"hello gzip " * 100
    packed = compress(CODEC_GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"  # gzip magic + deflate
    assert gzip.decompress(packed) == data


def test_gzip_reads_stdlib_output_and_concatenated_members() -> None:
    a, b = b"first member " * 10, b"second member " * 10
    assert decompress(CODEC_GZIP, gzip.compress(a)) == a
    assert decompress(CODEC_GZIP, gzip.compress(a) + gzip.compress(b)) == a + b


# --------------------------------------------------------------------------------------------
# snappy (Xerial framing)
# --------------------------------------------------------------------------------------------


def parse_xerial(packed: bytes) -> Iterator[bytes]:
    """Yield the raw snappy blocks of a Xerial stream, checking the header."""
    assert packed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    pos = 16
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        pos += 4
        yield packed[pos : pos + size]
        pos += size
    assert pos == len(packed)


def test_snappy_writes_xerial_framing_with_32k_blocks() -> None:
    snappy = pytest.importorskip("snappy")
    data = bytes(random.Random(7).getrandbits(8) for _ in range(100_000))
    packed = compress(CODEC_SNAPPY, data)
    blocks = [snappy.uncompress(b) for b in parse_xerial(packed)]
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


def test_snappy_empty_input_is_header_only() -> None:
    pytest.importorskip("snappy")
    packed = compress(CODEC_SNAPPY, b"")
    assert packed == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    assert decompress(CODEC_SNAPPY, packed) == b""


def test_snappy_reads_raw_snappy() -> None:
    snappy = pytest.importorskip("snappy")
    data = b"raw snappy block " * 50
    assert decompress(CODEC_SNAPPY, snappy.compress(data)) == data


def test_snappy_reads_concatenated_xerial_streams() -> None:
    pytest.importorskip("snappy")
    a, b = b"a" * 40_000, b"b" * 10
    assert decompress(CODEC_SNAPPY, compress(CODEC_SNAPPY, a) + compress(CODEC_SNAPPY, b)) == a + b


def test_snappy_interoperates_with_kafka_python() -> None:
    pytest.importorskip("snappy")
    codec = pytest.importorskip("kafka.codec")
    data = b"interop " * 20_000
    assert codec.snappy_decode(compress(CODEC_SNAPPY, data)) == data
    assert decompress(CODEC_SNAPPY, codec.snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(CODEC_SNAPPY, codec.snappy_encode(data, xerial_compatible=False)) == data


@pytest.mark.parametrize(
    "corrupt",
    [
        b"\x82SNAPPY\x00\x00\x00\x00\x01",  # truncated header
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00",  # truncated block length
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x10abc",  # block past end
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xffabc",  # negative block
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x04\xff\xff\xff\xff",
        b"\xff\xff\xff\xff\x0fgarbage",  # raw snappy claiming a huge length
        b"",
    ],
)
def test_snappy_corrupt_input_raises_protocol_error(corrupt: bytes) -> None:
    pytest.importorskip("snappy")
    with pytest.raises(ProtocolError):
        decompress(CODEC_SNAPPY, corrupt)


# --------------------------------------------------------------------------------------------
# lz4 (frame format)
# --------------------------------------------------------------------------------------------


def test_lz4_frame_descriptor_matches_kafka() -> None:
    lz4f = pytest.importorskip("lz4.frame")
    data = b"lz4 frame " * 30_000
    packed = compress(CODEC_LZ4, data)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # frame magic 0x184D2204, little-endian
    # FLG: version 01, independent blocks, no block checksum, no content size, no content checksum
    assert packed[4] == 0x60
    assert packed[5] == 0x40  # BD: 64 KiB maximum block size
    assert packed[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum after it
    assert lz4f.decompress(packed) == data


def test_lz4_reads_frames_with_checksums_and_content_size() -> None:
    lz4f = pytest.importorskip("lz4.frame")
    data = b"other lz4 writers " * 5000
    packed = lz4f.compress(data, content_checksum=True, block_checksum=True, store_size=True)
    assert decompress(CODEC_LZ4, packed) == data
    linked = lz4f.compress(data, block_linked=True)
    assert decompress(CODEC_LZ4, linked) == data


def test_lz4_reads_concatenated_frames() -> None:
    pytest.importorskip("lz4.frame")
    assert (
        decompress(CODEC_LZ4, compress(CODEC_LZ4, b"one") + compress(CODEC_LZ4, b"two"))
        == b"onetwo"
    )


def test_lz4_interoperates_with_kafka_python() -> None:
    pytest.importorskip("lz4.frame")
    codec = pytest.importorskip("kafka.codec")
    data = b"interop lz4 " * 20_000
    assert codec.lz4_decode(compress(CODEC_LZ4, data)) == data
    assert decompress(CODEC_LZ4, codec.lz4_encode(data)) == data


@pytest.mark.parametrize("cut", [1, 5, 7, 12, 30])
def test_lz4_truncated_input_raises_protocol_error(cut: int) -> None:
    pytest.importorskip("lz4.frame")
    packed = compress(CODEC_LZ4, b"truncate me " * 1000)
    with pytest.raises(ProtocolError):
        decompress(CODEC_LZ4, packed[:-cut])


@pytest.mark.parametrize("corrupt", [b"", b"garbage garbage", b"\x04\x22\x4d\x18\x60\x40\x00"])
def test_lz4_corrupt_input_raises_protocol_error(corrupt: bytes) -> None:
    pytest.importorskip("lz4.frame")
    with pytest.raises(ProtocolError):
        decompress(CODEC_LZ4, corrupt)


# --------------------------------------------------------------------------------------------
# zstd
# --------------------------------------------------------------------------------------------


def test_zstd_reads_frames_without_content_size() -> None:
    zstandard = pytest.importorskip("zstandard")
    data = b"streamed zstd frame " * 10_000
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(CODEC_ZSTD, packed) == data
    # the streaming API (as the Java client uses) also omits the size
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(data) + cobj.flush()
    assert decompress(CODEC_ZSTD, streamed) == data


def test_zstd_reads_concatenated_frames() -> None:
    pytest.importorskip("zstandard")
    assert (
        decompress(CODEC_ZSTD, compress(CODEC_ZSTD, b"ab") + compress(CODEC_ZSTD, b"cd")) == b"abcd"
    )


def test_zstd_writes_a_standard_frame() -> None:
    zstandard = pytest.importorskip("zstandard")
    data = b"standard frame " * 1000
    packed = compress(CODEC_ZSTD, data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(packed) == data


def test_zstd_interoperates_with_kafka_python() -> None:
    pytest.importorskip("zstandard")
    codec = pytest.importorskip("kafka.codec")
    data = b"interop zstd " * 20_000
    assert codec.zstd_decode(compress(CODEC_ZSTD, data)) == data
    assert decompress(CODEC_ZSTD, codec.zstd_encode(data)) == data


@pytest.mark.parametrize("cut", [1, 4, 10])
def test_zstd_truncated_input_raises_protocol_error(cut: int) -> None:
    pytest.importorskip("zstandard")
    packed = compress(CODEC_ZSTD, os.urandom(5000))
    with pytest.raises(ProtocolError):
        decompress(CODEC_ZSTD, packed[:-cut])


@pytest.mark.parametrize("corrupt", [b"", b"not zstd at all", b"\x28\xb5\x2f\xfd\xff\xff\xff"])
def test_zstd_corrupt_input_raises_protocol_error(corrupt: bytes) -> None:
    pytest.importorskip("zstandard")
    with pytest.raises(ProtocolError):
        decompress(CODEC_ZSTD, corrupt)


# --------------------------------------------------------------------------------------------
# gzip corruption and unknown codecs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "corrupt",
    [b"", b"not gzip", gzip.compress(b"x" * 1000)[:-5], gzip.compress(b"x") + b"trailing junk"],
)
def test_gzip_corrupt_input_raises_protocol_error(corrupt: bytes) -> None:
    with pytest.raises(ProtocolError):
        decompress(CODEC_GZIP, corrupt)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_random_garbage_never_escapes_as_another_exception(codec: int) -> None:
    require(codec)
    rnd = random.Random(codec)
    good = compress(codec, b"some payload to damage " * 200)
    for _ in range(200):
        damaged = bytearray(good)
        for _ in range(rnd.randint(1, 4)):
            damaged[rnd.randrange(len(damaged))] = rnd.getrandbits(8)
        try:
            decompress(codec, bytes(damaged))
        except ProtocolError:
            pass


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(ProtocolError):
        decompress(codec, b"data")
    with pytest.raises(ValueError):
        compress(codec, b"data")
    with pytest.raises(ValueError):
        check_codec_available(codec)
    assert not is_codec_available(codec)


def test_protocol_error_is_a_kafka_error() -> None:
    assert issubclass(ProtocolError, KafkaError)


# --------------------------------------------------------------------------------------------
# missing optional libraries
# --------------------------------------------------------------------------------------------


@pytest.fixture
def forget_loaded_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear compression's module cache for the test (restored afterwards)."""
    monkeypatch.setattr(compression, "_modules", {})


@pytest.mark.parametrize(
    "codec,module,extra",
    [
        (CODEC_SNAPPY, "snappy", "snappy"),
        (CODEC_LZ4, "lz4.frame", "lz4"),
        (CODEC_ZSTD, "zstandard", "zstd"),
    ],
)
def test_missing_library_raises_unsupported_codec_error(
    monkeypatch: pytest.MonkeyPatch,
    forget_loaded_modules: None,
    codec: int,
    module: str,
    extra: str,
) -> None:
    # a None entry in sys.modules makes the import raise ImportError
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(UnsupportedCodecError) as info:
        check_codec_available(codec)
    assert f"pip install kproducer[{extra}]" in str(info.value)
    assert isinstance(info.value, ImportError)
    assert not is_codec_available(codec)
    with pytest.raises(UnsupportedCodecError):
        compress(codec, b"data")
    with pytest.raises(UnsupportedCodecError):
        decompress(codec, b"data")


def test_builtin_codecs_are_always_available() -> None:
    check_codec_available(CODEC_NONE)
    check_codec_available(CODEC_GZIP)
    assert is_codec_available(CODEC_NONE) and is_codec_available(CODEC_GZIP)


@pytest.mark.parametrize("codec", [CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_installed_optional_codecs_are_available(codec: int) -> None:
    require(codec)
    check_codec_available(codec)
    assert is_codec_available(codec)
