"""Kafka's size-prefixed framing, sans I/O: a 4-byte big-endian signed length, then that many bytes.

:class:`FrameReader` reassembles frames from the chunks a byte stream arrives in, however TCP splits or
joins them, and refuses a negative size or one above its limit (:class:`FrameError`) before buffering
anything proportional to it. The client's Selector takes every completed frame at once
(:meth:`FrameReader.feed`); a broker that reads one request at a time per connection appends
(:meth:`FrameReader.append`) and takes one frame when it is ready for it (:meth:`FrameReader.next_frame`).
"""
from __future__ import annotations

import struct
from typing import List, Optional, Union

from .errors import ProtocolError

__all__ = ["SIZE_PREFIX", "FrameError", "FrameReader"]

#: the 4-byte big-endian signed size in front of every request and response
SIZE_PREFIX = struct.Struct(">i")
_PREFIX_LEN = SIZE_PREFIX.size
_unpack_size = SIZE_PREFIX.unpack_from
#: consumed bytes are dropped from the front of the buffer once there are this many (or all are)
_COMPACT_AT = 65536


class FrameError(ProtocolError):
    """The peer sent a frame size we refuse (negative or above the configured maximum): ``size`` is the size
    it announced, ``limit`` the reader's maximum (bytes)."""

    def __init__(self, message: Optional[str] = None, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class FrameReader:
    """Reassembles size-prefixed frames (payloads without the size prefix) from a byte stream."""

    __slots__ = ("max_size", "_buf", "_start")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._start = 0

    def _refuse(self, size: int) -> FrameError:
        return FrameError(
            f"invalid frame size {size} (allowed 0..{self.max_size}); the peer is not speaking "
            "the Kafka protocol or the data is corrupt", size, self.max_size
        )

    def feed(self, data: Union[bytes, bytearray, memoryview]) -> List[bytes]:
        """Add bytes (copied: the caller may reuse ``data``'s buffer); return every frame completed by them."""
        # the client's receive path: locals and the literal prefix length (4) keep the loop lean
        buf = self._buf
        buf += data
        frames = []
        start = self._start
        end = len(buf)
        max_size = self.max_size
        unpack = _unpack_size
        while end - start >= 4:
            (size,) = unpack(buf, start)
            if size < 0 or size > max_size:
                raise self._refuse(size)
            if end - start - 4 < size:
                break
            frames.append(bytes(buf[start + 4:start + 4 + size]))
            start += 4 + size
        if start:  # inline _compact: no method call per receive
            if start == end:
                buf.clear()
                start = 0
            elif start > _COMPACT_AT:
                del buf[:start]
                start = 0
            self._start = start
        return frames

    def append(self, data: bytes) -> None:
        """Add bytes without taking frames (see :meth:`next_frame`)."""
        self._buf += data

    def next_frame(self) -> Optional[bytes]:
        """The next complete frame, or None if it has not all arrived yet."""
        buf = self._buf
        start = self._start
        end = len(buf)
        if end - start < _PREFIX_LEN:
            return None
        (size,) = _unpack_size(buf, start)
        if size < 0 or size > self.max_size:
            raise self._refuse(size)
        frame_end = start + _PREFIX_LEN + size
        if frame_end > end:
            return None
        frame = bytes(buf[start + _PREFIX_LEN:frame_end])
        self._compact(frame_end, end)
        return frame

    def _compact(self, start: int, end: int) -> None:
        if start == end:
            self._buf.clear()
            start = 0
        elif start > _COMPACT_AT:
            del self._buf[:start]
            start = 0
        self._start = start

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a frame."""
        return len(self._buf) - self._start
