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


class RecordMetadata(NamedTuple):
    """What a producer's future resolves to: where the record landed (kafka-python's field names and order).

    ``offset`` is -1 with ``acks=0`` (nothing waited for the write). ``timestamp`` is the record's CreateTime, or the
    log's append time on a LogAppendTime topic. ``checksum`` is always None (record batch v2 has no per-record CRC).
    The ``serialized_*_size`` fields are the uncompressed sizes in bytes, -1 for a null key/value or no headers.
    """

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class ConsumerRecord(NamedTuple):
    """One record as a consumer returns it (kafka-python's field names and order).

    ``timestamp_type`` is 0 for CreateTime, 1 for LogAppendTime; ``headers`` is a list of (str, bytes) pairs;
    ``leader_epoch`` is the batch's partition leader epoch (-1 or None on a single node); ``checksum`` is None.
    """

    topic: str
    partition: int
    leader_epoch: int | None
    offset: int
    timestamp: int
    timestamp_type: int
    key: object
    value: object
    headers: list
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


# ListOffsets special targets (KIP-79, KIP-734)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
