"""The producer's gate: one byte that says whether it takes records (docs/design.md, "The send path").

Made by the accumulator (``RecordAccumulator.gate``), closed by whichever part stops taking records first, read by
the send paths above it: the compiled ``FastSend``, ``SendCore.accepting()``. It lives below both so that the
accumulator imports nothing from the send facade.
"""
from __future__ import annotations

__all__ = ["Gate"]


class Gate:
    """Whether a producer takes records: open while the producer is open, has no fatal error and its accumulator
    takes records; closed by whichever of them closes first (``RecordAccumulator.close``, ``Sender.fatal_error``,
    ``Producer._refuse_records``), never reopened. Made by the accumulator. Its one byte, :attr:`flag`, is what
    the compiled send() reads (FastSend's ``gate``) instead of three attribute lookups per record, and what
    :meth:`SendCore.accepting` reads."""

    __slots__ = ("flag",)

    def __init__(self) -> None:
        #: nonzero while open (a bytearray of one byte: read by the compiled send() without a call)
        self.flag = bytearray(b"\x01")

    def close(self) -> None:
        self.flag[0] = 0
