"""What ``send_offsets_to_transaction`` takes from a consumer: its group's metadata and the offsets
(with optional metadata strings) to commit (Java's ``ConsumerGroupMetadata`` and ``OffsetAndMetadata``)."""
from __future__ import annotations

from typing import NamedTuple, Optional


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership. With a generation and member id (from the consumer that read the
    records) the group coordinator fences a zombie consumer's offsets (TxnOffsetCommit v3+, KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: Optional[str] = None


class OffsetAndMetadata(NamedTuple):
    """An offset to commit (the next record to read) and an optional metadata string."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


__all__ = ["ConsumerGroupMetadata", "OffsetAndMetadata"]
