"""RecordBatch v2 builder benchmarks (pytest-benchmark).

Run:  python -m pytest benchmarks/bench_records.py --benchmark-enable -q
(setup.cfg disables benchmarks by default; without --benchmark-enable each runs once as a test.)

Each round appends 10,000 records (8-byte key, 100-byte value, no headers) into a fresh builder;
divide the mean by 10,000 for the per-record cost.
"""

from __future__ import annotations

from typing import Any

import pytest

from kproducer.protocol.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
)
from kproducer.protocol.records import RecordBatchBuilder

N_RECORDS = 10_000
KEY = b"k" * 8
VALUE = b"v" * 100
TS = 1_700_000_000_000
CAPACITY = 16 * 1024 * 1024  # large enough that all 10,000 records fit

OPTIONAL_MODULES = {CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4.frame", CODEC_ZSTD: "zstandard"}


def fill(builder: RecordBatchBuilder) -> RecordBatchBuilder:
    append = builder.try_append
    key, value = KEY, VALUE
    for i in range(N_RECORDS):
        append(TS + (i >> 6), key, value, None)
    return builder


def append_only() -> RecordBatchBuilder:
    return fill(RecordBatchBuilder(CAPACITY))


def append_and_build(codec: int = CODEC_NONE) -> bytes:
    return fill(RecordBatchBuilder(CAPACITY, codec)).build(1, 0, 0)


def _note(benchmark: Any) -> None:
    benchmark.extra_info["records_per_round"] = N_RECORDS


def test_append_10k(benchmark: Any) -> None:
    """try_append only: the per-record hot path."""
    _note(benchmark)
    builder = benchmark(append_only)
    assert builder.record_count == N_RECORDS


def test_append_and_build_10k(benchmark: Any) -> None:
    """try_append x 10,000 then build() (uncompressed): header, CRC32C over ~1.2 MB, join."""
    _note(benchmark)
    data = benchmark(append_and_build)
    assert len(data) > N_RECORDS * len(VALUE)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_append_and_build_10k_compressed(benchmark: Any, codec: int) -> None:
    """As above with a codec (the values are highly compressible)."""
    module = OPTIONAL_MODULES.get(codec)
    if module is not None:
        pytest.importorskip(module)
    _note(benchmark)
    data = benchmark(append_and_build, codec)
    assert len(data) < N_RECORDS * len(VALUE)
