"""Cython hot path of the broker codec: what Python sees of _wire.pyx.

ProduceRequest v3-11 => transactional_id NULLABLE_STRING | acks INT16 | timeout_ms INT32 |
    [name STRING | [index INT32 | records NULLABLE_RECORDS]]
ProduceResponse v3-11 => [name STRING | [index INT32 | error_code INT16 | base_offset INT64 | log_append_time_ms INT64 |
    log_start_offset INT64 (v5+) | [batch_index INT32 | batch_index_error_message NULLABLE_STRING] (v8+) |
    error_message NULLABLE_STRING (v8+)]] | throttle_time_ms INT32
FetchRequest v4-18 => replica_id INT32 (v4-14) | max_wait_ms INT32 | min_bytes INT32 | max_bytes INT32 |
    isolation_level INT8 | session_id INT32 (v7+) | session_epoch INT32 (v7+) | [topic STRING (v4-12) |
    topic_id UUID (v13+) | [partition INT32 | current_leader_epoch INT32 (v9+) | fetch_offset INT64 |
    last_fetched_epoch INT32 (v12+) | log_start_offset INT64 (v5+) | partition_max_bytes INT32]] |
    [topic STRING (v7-12) | topic_id UUID (v13+) | [partition INT32]] (v7+) | rack_id STRING (v11+)
FetchResponse v4-18 => throttle_time_ms INT32 | error_code INT16 (v7+) | session_id INT32 (v7+) |
    [topic STRING (v4-12) | topic_id UUID (v13+) | [partition_index INT32 | error_code INT16 | high_watermark INT64 |
    last_stable_offset INT64 | log_start_offset INT64 (v5+) | aborted_transactions [producer_id INT64 |
    first_offset INT64] | preferred_read_replica INT32 (v11+) | records NULLABLE_RECORDS]]
Flexible from Produce v9 / Fetch v12 (compact lengths, tag buffers: skipped when read, none written).
Byte-for-byte what kafkalog.broker.protocol produces and accepts; malformed frames raise the same
InvalidRequestError (kafkalog.errors) the table codec raises.
"""

import uuid
from collections.abc import Sequence
from typing import Any, TypeAlias

from typing_extensions import Buffer

__all__ = ["encode_fetch_response", "encode_produce_response", "parse_fetch", "parse_produce"]

ProducePartition: TypeAlias = tuple[int, memoryview | None]
ProduceTopic: TypeAlias = tuple[str, list[ProducePartition]]
# (partition, error_code, base_offset, log_append_time_ms, log_start_offset[, record_errors[, error_message]])
ProduceResult: TypeAlias = (
    tuple[int, int, int, int, int]
    | tuple[int, int, int, int, int, Sequence[tuple[int, str | None]] | None]
    | tuple[int, int, int, int, int, Sequence[tuple[int, str | None]] | None, str | None]
)
# (partition, error_code, high_watermark, last_stable_offset, log_start_offset, records[, aborted])
FetchPartition: TypeAlias = tuple[int, int, int, int, int, Buffer | Sequence[Buffer] | None] | tuple[
    int, int, int, int, int, Buffer | Sequence[Buffer] | None, Sequence[tuple[int, int]] | None]

def parse_produce(frame: Buffer, offset: int, version: int) -> tuple[str | None, int, int, list[ProduceTopic]]: ...
def encode_produce_response(
    version: int, correlation_id: int, topics: Sequence[tuple[str, Sequence[ProduceResult]]], throttle_time_ms: int
) -> bytes: ...
def encode_fetch_response(
    version: int,
    correlation_id: int,
    throttle_time_ms: int,
    error_code: int,
    session_id: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[FetchPartition]]],
) -> list[Buffer]: ...
def parse_fetch(frame: Buffer, offset: int, version: int) -> dict[str, Any]: ...
