"""Record batches: what Python sees of batch.pyx.

Build (build_batch, BatchBuilder), view (RecordBatch, Record), iterate (iter_batches, iter_records, chain_records) and
rewrite in place the fields a log owns: BaseOffset and PartitionLeaderEpoch (outside the CRC), the LogAppendTime bit
of Attributes and MaxTimestamp (CRC recomputed). The layout is framing's (framing.pyi), the codecs codecs'
(0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
"""

from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Literal, TypeAlias

from typing_extensions import Buffer

from .codecs import Compression

__all__ = [
    "BatchBuilder", "Record", "RecordBatch", "RecordPool", "RecordStream", "build_batch", "chain_records",
    "count_records", "crc32c", "fields_as_members", "iter_batches", "iter_records", "next_offset_after",
    "set_base_offset", "set_log_append_time", "set_max_timestamp", "set_partition_leader_epoch",
    "take_consumer_records",
]

Header: TypeAlias = tuple[str, bytes | None]
BytesLike: TypeAlias = Buffer

def crc32c(data: Buffer, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of data; pass a previous result as crc to continue over more bytes."""

def build_batch(
    values: Sequence[BytesLike | None] | Iterable[BytesLike | None],
    keys: Sequence[BytesLike | None] | None = None,
    timestamps: Sequence[int | None] | None = None,
    headers: Sequence[Sequence[tuple[str | bytes, BytesLike | None]] | None] | None = None,
    *,
    base_offset: int = 0,
    compression: Compression = 0,
    compression_level: int | None = None,
    timestamp_type: Literal[0, 1] = 0,
    default_timestamp: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """One record batch v2 holding values (with keys, timestamps, headers: each None or one item per value).

    A timestamp of None or -1 takes default_timestamp; default_timestamp -1 means now (ms, read once per batch).
    BaseTimestamp is the first record's timestamp (deltas may be negative), MaxTimestamp the largest.
    compression_level: gzip 1..9 (default zlib's 6), lz4 1..17 (default 9 = the fast compressor, others HC),
    zstd -131072..22 (default 3). Raises ValueError for no values or mismatched lengths, TypeError for non-bytes
    items, UnsupportedCompressionTypeError for an unknown codec, InvalidConfigError for a level out of range,
    InvalidTimestampError below -1, RecordTooLargeError past 2 GiB.
    """

class BatchBuilder:
    """Accumulates records one at a time into one batch (the single-record Log.append path). Not thread-safe.

    build_batch() and a BatchBuilder fed the same records produce the same bytes.
    """

    def __init__(
        self,
        compression: Compression = 0,
        compression_level: int | None = None,
        timestamp_type: Literal[0, 1] = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
    ) -> None: ...
    def append(self, value: BytesLike | None, key: BytesLike | None = None, timestamp: int = -1,
               headers: Sequence[tuple[str | bytes, BytesLike | None]] | None = None) -> int:
        """Encode one record; returns its offset delta. timestamp -1 = now (ms). A failed append changes nothing."""
    base_offset: int
    max_batch_bytes: int
    target_bytes: int
    def stage(self, value: BytesLike | None, key: BytesLike | None = None, timestamp: int = -1,
              headers: Sequence[tuple[str | bytes, BytesLike | None]] | None = None) -> int:
        """Encode one record and return base_offset + delta; -1 (nothing encoded) when the record would push a
        non-empty batch past max_batch_bytes. A record alone above it raises RecordTooLargeError."""
    @property
    def full(self) -> bool:
        """The batch reached target_bytes."""
    def take(self) -> BatchBuilder:
        """Atomically move the staged records into a new builder; continue at base_offset + count."""
    def reserve(self, n: int) -> int:
        """Atomically claim n offsets when nothing is staged (returns the first), else -1."""
    def close(self) -> None:
        """stage() raises LogClosedError from now on."""
    @property
    def count(self) -> int: ...
    @property
    def size_in_bytes(self) -> int:
        """Exact size of the batch without compression, header included."""
    @property
    def first_timestamp(self) -> int:
        """BaseTimestamp (the first record's), -1 when empty."""
    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp, -1 when empty."""
    @property
    def compression(self) -> int: ...
    def build(self, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
        """The batch of the records so far (ValueError when empty); the records stay until reset()."""
    def reset(self) -> None: ...
    def __len__(self) -> int: ...

class Record:
    """One decoded record. timestamp is the batch MaxTimestamp for LogAppendTime batches."""

    offset: Final[int]
    timestamp: Final[int]
    timestamp_type: Final[Literal[0, 1]]
    key: Final[bytes | None]
    value: Final[bytes | None]
    headers: Final[list[Header]]
    def __init__(self, offset: int, timestamp: int, timestamp_type: int = 0, key: bytes | None = None,
                 value: bytes | None = None, headers: Iterable[Header] | None = None) -> None: ...
    def __eq__(self, other: object) -> bool: ...

class RecordBatch:
    """A view of one batch at byte position offset of any buffer (bytes, bytearray, memoryview, mmap, numpy).

    Raises CorruptRecordError when the header is truncated, has an illegal length or a magic other than 2.
    The view keeps the buffer exported while it lives.
    """

    def __init__(self, buffer: Buffer, offset: int = 0) -> None: ...
    @property
    def position(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def batch_length(self) -> int: ...
    @property
    def size_in_bytes(self) -> int:
        """batch_length + 12."""
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def magic(self) -> int: ...
    @property
    def crc(self) -> int:
        """The stored CRC."""
    @property
    def attributes(self) -> int: ...
    @property
    def compression(self) -> int: ...
    @property
    def timestamp_type(self) -> Literal[0, 1]: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def record_count(self) -> int: ...
    def __len__(self) -> int: ...
    def is_valid(self) -> bool:
        """CRC, codec, count and (uncompressed) record framing; never decompresses."""
    def validate(self, *, decompress: bool = False) -> None:
        """Raise CorruptRecordError (CRC, length, magic), InvalidRecordError (count, framing) or
        UnsupportedCompressionTypeError, naming the problem, the base offset and the position. With decompress=True a
        compressed batch's record framing is checked too, as it is decompressed (bounded: RecordTooLargeError past
        the readers' 1 GiB bound on a batch's plaintext). Offset deltas may have gaps (compacted batches)."""
    def check_for_append(self, max_message_bytes: int) -> tuple[int, int]:
        """Validate a batch a producer sent in one pass over its records; returns (min_ts, max_ts) of the records
        (min_ts: the smallest non-negative timestamp, -1 when none; max_ts: the largest; the header's MaxTimestamp
        is not trusted). Beyond validate(): RecordsCount = LastOffsetDelta + 1 and offset deltas 0, 1, ...
        (InvalidRecordError). Compressed records are decompressed in 256 KiB steps walked at once (memory: one step
        and one record, whatever the batch claims); the plaintext may be at most
        max(64 MiB, min(1 GiB, RecordsCount * max_message_bytes)) and one record max(max_message_bytes, 16 MiB)
        (RecordTooLargeError naming the codec, the bound and the batch); a zstd window above 8 MiB and a snappy
        block declaring more than 22 times its size are refused (InvalidRecordError)."""
    def records(self) -> Iterator[Record]:
        """Lazily decoded records (decompressed once when iteration starts, at most 1 GiB: RecordTooLargeError
        past it; past the first MiB the records are walked as they are decompressed, so bad framing stops the
        decompression there); InvalidRecordError on bad framing."""
    def __iter__(self) -> Iterator[Record]: ...
    def tobytes(self) -> bytes: ...

def iter_batches(buffer: Buffer, start: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
    """Consecutive batches of buffer[start:end], no CRC check; stops silently at an incomplete tail batch and raises
    CorruptRecordError at an illegal length or magic."""

def count_records(buffer: Buffer, start: int = 0, end: int | None = None) -> int:
    """Sum of RecordsCount over the complete batches of buffer[start:end] (headers only)."""

def set_base_offset(buf: Buffer, pos: int, base_offset: int) -> None:
    """Rewrite BaseOffset of the batch at buf[pos] in place (outside the CRC)."""

def set_partition_leader_epoch(buf: Buffer, pos: int, epoch: int) -> None:
    """Rewrite PartitionLeaderEpoch of the batch at buf[pos] in place (outside the CRC)."""

def set_log_append_time(buf: Buffer, pos: int, timestamp: int) -> None:
    """Set the LogAppendTime bit and MaxTimestamp of the complete batch at buf[pos], recomputing its CRC."""

def set_max_timestamp(buf: Buffer, pos: int, timestamp: int) -> None:
    """Set MaxTimestamp of the complete batch at buf[pos], recomputing its CRC (nothing written when equal)."""

def fields_as_members(cls: type) -> None:
    """Give a NamedTuple class a member descriptor per field (CPython 3.11 specializes reads of those: about 3x
    faster than its _tuplegetter). Idempotent."""

class RecordPool:
    """Records take_consumer_records returned in its last two calls: those only the pool still references are refilled
    for later records instead of being freed and allocated again."""
    def __init__(self) -> None: ...
    def __len__(self) -> int: ...

class RecordStream(Iterator[Record]):
    def __iter__(self) -> RecordStream: ...
    def __next__(self) -> Record: ...

def take_consumer_records(stream: RecordStream, out: list, limit: int, cls: type, topic: object, partition: object,
                          leader_epoch: object, no_headers: list | None = None,
                          pool: RecordPool | None = None) -> int:
    """Append up to limit records of stream to out as cls (a 13-field tuple subclass laid out like kafka-python's
    ConsumerRecord), built in C straight from the records' bytes; records without headers get no_headers (None: a
    new list each). pool (see RecordPool) keeps a reference to the records of its last two calls,
    and records only the pool still references are refilled instead of allocated. Returns the offset after the
    last one appended, -1 when none was."""

def iter_records(buffer: BytesLike, start: int = 0, end: int | None = None, min_offset: int = -1,
                 max_offset: int = 0x7FFFFFFFFFFFFFFF) -> RecordStream:
    """Records of every batch in buffer[start:end] with offset in [min_offset, max_offset); each batch is validated
    (CRC, framing) before its first record is returned."""

def chain_records(chunks: Iterable[tuple[BytesLike, int, int]]) -> RecordStream:
    """iter_records over each (buffer, min_offset, max_offset) chunk, in one C-level loop."""

def next_offset_after(buffer: BytesLike, default: int = -1) -> int:
    """Offset after the last complete batch in buffer (headers only); default when there is none."""
