"""The producer's accumulator: what Python sees of accumulator.pyx (Kafka's RecordAccumulator, ProducerBatch,
FutureRecordMetadata, Utils.murmur2), the compiled half of KafkaProducer.send.

_RecordFacts (per record, in memory) => Timestamp Int64 | KeySize Int32 | ValueSize Int32 | HeaderSize Int32
"""

from collections.abc import Sequence
from typing import TypeAlias

from typing_extensions import Buffer

from .batch import BatchBuilder

__all__ = [
    "AccumulatorPartition", "AccumulatorTopic", "FutureRecordMetadata", "ProducerBatch", "RecordAccumulator", "murmur2",
]

BytesLike: TypeAlias = Buffer

def murmur2(data: Buffer) -> int:
    """Kafka's murmur2 (Utils.murmur2, seed 0x9747b28c) of data as an unsigned 32-bit int (Java's int's bits)."""

class ProducerBatch(BatchBuilder):
    """A producer's batch for one partition: records encoded as they are added, plus each record's RecordMetadata
    facts. Not thread-safe by itself (the producer appends under its lock or through RecordAccumulator.send)."""

    size: int  # the producer's batch.size accounting, grown by add()
    def add(self, value: BytesLike | None, key: BytesLike | None = None, timestamp: int = 0,
            headers: Sequence[tuple[str | bytes, BytesLike | None]] | None = None, header_size: int = -1,
            size: int = 0) -> int:
        """Encode one record (timestamp ms >= 0); returns its index. header_size: kafka-python's
        serialized_header_size (-1: none); size is added to ``size``."""
    def add_facts(self, timestamp: int, key_size: int, value_size: int, header_size: int) -> int:
        """Keep a record's facts without encoding it (a record refused before it joined a batch)."""
    def facts(self, i: int) -> tuple[int, int, int, int]:
        """(timestamp, serialized key size, value size, header size) of record i (-1: null / no headers)."""
    @property
    def records_count(self) -> int: ...
    @property
    def dropped(self) -> bool:
        """drop_records() was called."""
    def drop_records(self) -> None:
        """Free the encoded records once written (the buffer is recycled for later batches); facts stay."""
    def build_view(self) -> memoryview | bytes:
        """The finished batch (base offset 0) as a view of the batch's own buffer (bytes when compressed), writable
        so that a log can stamp BaseOffset in place. No record can be added afterwards."""
    def __buffer__(self, flags: int) -> memoryview: ...

class FutureRecordMetadata:
    """kafka-python's FutureRecordMetadata: a (batch, index) pair; the producer's batch subclass answers."""

    @property
    def is_done(self) -> bool: ...
    def succeeded(self) -> bool: ...
    def failed(self) -> bool: ...
    def retriable(self) -> bool: ...
    @property
    def exception(self) -> BaseException | None: ...
    @property
    def value(self) -> object: ...
    def get(self, timeout: float | None = None) -> object:
        """The record's RecordMetadata once acknowledged (waits up to timeout s; None: forever), or raise its error."""
    def add_callback(self, f: object, *args: object, **kwargs: object) -> FutureRecordMetadata: ...
    def add_errback(self, f: object, *args: object, **kwargs: object) -> FutureRecordMetadata: ...
    def add_both(self, f: object, *args: object, **kwargs: object) -> FutureRecordMetadata: ...
    def chain(self, future: object) -> FutureRecordMetadata: ...

class AccumulatorPartition:
    batch: ProducerBatch | None  # the open batch
    limit: int  # batch_size of the partition's batches

class AccumulatorTopic:
    parts: tuple[AccumulatorPartition, ...] | None
    sticky: AccumulatorPartition | None

class RecordAccumulator:
    """The compiled hot path of KafkaProducer.send (KafkaProducer derives from it); anything it does not handle goes
    to the subclass's ``_send``."""

    _topics: dict[str, AccumulatorTopic]
    _fast: bool
    def _init_fast_path(self, record_overhead: int, max_record: int) -> None: ...
    def _topics_changed(self) -> None: ...
    def send(self, topic: str, value: object = None, key: object = None, headers: object = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata: ...
