"""Record batch v2 framing (magic 2): what Python sees of framing.pyx, the header and record layout in C.

RecordBatch => BaseOffset Int64 | BatchLength Int32 | PartitionLeaderEpoch Int32 | Magic Int8 | CRC Uint32 |
    Attributes Int16 | LastOffsetDelta Int32 | BaseTimestamp Int64 | MaxTimestamp Int64 | ProducerId Int64 |
    ProducerEpoch Int16 | BaseSequence Int32 | RecordsCount Int32 | Records
Record => Length Varint | Attributes Int8 | TimestampDelta Varlong | OffsetDelta Varint | Key (Varint length, -1 null) |
    Value (Varint length, -1 null) | HeaderCount Varint | [HeaderKey String | HeaderValue Bytes]
Big-endian; CRC-32C over [Attributes, end); with a codec only the records section is compressed (codecs).
"""

from typing import Final

__all__ = ["LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "debug_build"]

RECORD_BATCH_OVERHEAD: Final[int]  # 61: the v2 batch header
LOG_OVERHEAD: Final[int]  # 12: BaseOffset + BatchLength, the bytes BatchLength does not count

def debug_build() -> bool:
    """True when compiled with KAFKALOG_DEBUG=1 (bounds checks and C-level KL_CHECK asserts)."""
