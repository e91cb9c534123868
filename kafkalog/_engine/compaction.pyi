"""The cleaner's compiled parts: what Python sees of compaction.pyx (Kafka's SkimpyOffsetMap and
MemoryRecords.filterTo with the LogCleaner's retention rules).

OffsetMap slot (24 bytes, in memory only) => Digest Uint64 Uint64 (the key's 128-bit digest) | Offset Uint64
(latest offset + 1, 0 = empty).
"""

from collections.abc import Container
from typing import TypeAlias

from typing_extensions import Buffer

__all__ = ["OffsetMap", "filter_batches", "producer_last_offsets"]

BytesLike: TypeAlias = Buffer

class OffsetMap:
    """Key -> latest offset in bounded memory, for the cleaner (Kafka's SkimpyOffsetMap)."""
    size: int
    max_entries: int
    full: bool
    latest_offset: int
    capacity: int
    memory_bytes: int
    max_capacity: int
    def __init__(self, memory_bytes: int, load_factor: float = 0.9, initial_bytes: int | None = None) -> None: ...
    def clear(self) -> None: ...
    def put(self, key: BytesLike, offset: int) -> bool: ...
    def get(self, key: BytesLike) -> int: ...
    def add_batches(self, buffer: BytesLike, start: int = 0, stop: int = ..., pos: int = 0,
                    max_bytes: int = -1) -> tuple[int, int]: ...

def producer_last_offsets(buffer: BytesLike, into: dict[int, int] | None = None) -> dict[int, int]:
    """producer id -> last offset of its last batch in ``buffer`` (headers only)."""

def filter_batches(buffer: BytesLike, pos: int, offset_map: OffsetMap, now_ms: int, delete_retention_ms: int,
                   keep_empty: Container[int] = (), out_limit: int = 4194304,
                   in_limit: int = -1) -> tuple[bytes, int, int, int]:
    """The cleaner's copy of whole batches from byte ``pos``: (output, next position, kept, removed)."""
