"""Value types shared by every layer; field names match kafka-python's so apps move between the two unchanged."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndTimestamp(NamedTuple):
    """Result of a timestamp search: the offset found and the timestamp of that record (-1 for -1/-2 lookups)."""

    offset: int
    timestamp: int
    leader_epoch: int | None = None


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


# ListOffsets special targets (KIP-79, KIP-734)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
