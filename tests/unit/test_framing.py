"""kproducer.protocol.framing.FrameReader's one-frame-at-a-time mode (a broker's connection), beside
the all-frames feed() the Selector uses (tested in test_selector.py / test_fuzz_decoders.py)."""
from __future__ import annotations

import struct

import pytest

from kproducer.protocol.errors import ProtocolError
from kproducer.protocol.framing import SIZE_PREFIX, FrameError, FrameReader


def frame(payload: bytes) -> bytes:
    return SIZE_PREFIX.pack(len(payload)) + payload


def test_next_frame_takes_one_frame_at_a_time_and_keeps_the_rest_buffered() -> None:
    r = FrameReader(100)
    r.append(frame(b"one") + frame(b"two") + frame(b"thr"))
    assert r.next_frame() == b"one"
    assert r.buffered == 2 * (4 + 3)
    assert r.next_frame() == b"two"
    assert r.next_frame() == b"thr"
    assert r.next_frame() is None
    assert r.buffered == 0


def test_next_frame_waits_for_the_whole_frame_split_anywhere() -> None:
    data = frame(b"hello world")
    for cut in range(len(data)):
        r = FrameReader(100)
        r.append(data[:cut])
        assert r.next_frame() is None
        r.append(data[cut:])
        assert r.next_frame() == b"hello world"


@pytest.mark.parametrize("size", [-1, -(2**31), 101, 2**31 - 1])
def test_a_refused_size_raises_before_the_frame_arrives(size: int) -> None:
    r = FrameReader(100)
    r.append(struct.pack(">i", size))
    with pytest.raises(FrameError, match=f"invalid frame size {size}") as info:
        r.next_frame()
    assert isinstance(info.value, ProtocolError)


def test_empty_frames_and_the_limit_itself_are_accepted() -> None:
    r = FrameReader(5)
    r.append(frame(b"") + frame(b"12345"))
    assert r.next_frame() == b""
    assert r.next_frame() == b"12345"


def test_consumed_bytes_are_dropped_once_many_frames_were_taken() -> None:
    r = FrameReader(100_000)
    payload = b"x" * 1000
    r.append(frame(payload) * 100 + b"\x00\x00")  # 100 frames and a partial size
    for _ in range(100):
        assert r.next_frame() == payload
    assert r.buffered == 2
    assert len(r._buf) < 100 * 1004  # compacted past 64 KiB of consumed bytes
    r.append(b"\x00\x01z")
    assert r.next_frame() == b"z"
