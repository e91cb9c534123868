# Record batch v2 (magic 2), all integers big-endian, in Kafka notation:
#
#   RecordBatch =>
#     BaseOffset => Int64             the log rewrites it on append, so it is outside the CRC
#     BatchLength => Int32            bytes after this field: total size = BatchLength + 12
#     PartitionLeaderEpoch => Int32   stamped by the leader, also outside the CRC
#     Magic => Int8                   2
#     CRC => Uint32                   CRC-32C (Castagnoli) of [Attributes, end)
#     Attributes => Int16             bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control, 6 delete horizon
#     LastOffsetDelta => Int32
#     BaseTimestamp => Int64          timestamp of the FIRST record (not the minimum): deltas may be negative
#     MaxTimestamp => Int64           largest record timestamp, or the append time with LogAppendTime
#     ProducerId => Int64
#     ProducerEpoch => Int16
#     BaseSequence => Int32
#     RecordsCount => Int32           plaintext even when the records are compressed
#     Records => [Record]             with a codec: ONE compressed stream holding all the records (codecs.pyx)
#
#   Record =>
#     Length => Varint                bytes after this field
#     Attributes => Int8              unused, 0
#     TimestampDelta => Varlong       record timestamp - BaseTimestamp
#     OffsetDelta => Varint           record offset - BaseOffset
#     KeyLength => Varint             -1 = null key
#     Key => Bytes
#     ValueLength => Varint           -1 = null value
#     Value => Bytes
#     HeaderCount => Varint
#     Headers => [HeaderKeyLength => Varint | HeaderKey => String (UTF-8, never null) |
#                 HeaderValueLength => Varint (-1 = null) | HeaderValue => Bytes]
#
# Varints are zigzag LEB128 (include/kafkalog/kl_varint.h). This module is the layout and nothing above it: parse and
# check a header, read and walk records, write a header and records, name what is wrong. No Python object is made
# per record here; the per-record readers and writers are inline in framing.pxd so that every hot loop of the
# engine compiles its own copy. Python objects over batches are in batch.pyx, compressed records in codecs.pyx.
"""Record batch v2 framing: the header and the record layout, parsed, checked, walked and written in C."""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint64_t
from libc.string cimport memset

from .clib cimport (
    KL_ATTRIBUTES_OFFSET, KL_BASE_OFFSET_OFFSET, KL_BASE_SEQUENCE_OFFSET, KL_BASE_TIMESTAMP_OFFSET,
    KL_CODEC_NONE, KL_COMPRESSION_CODEC_MASK, KL_CRC_OFFSET, KL_DEBUG_ENABLED, KL_HEADER_SIZE_UP_TO_MAGIC,
    KL_LAST_OFFSET_DELTA_OFFSET, KL_LENGTH_OFFSET, KL_LOG_OVERHEAD, KL_MAGIC_OFFSET, KL_MAGIC_V2,
    KL_MAX_TIMESTAMP_OFFSET, KL_MIN_BATCH_LENGTH, KL_NOGIL_BYTES, KL_PARTITION_LEADER_EPOCH_OFFSET,
    KL_PRODUCER_EPOCH_OFFSET, KL_PRODUCER_ID_OFFSET, KL_RECORD_BATCH_OVERHEAD, KL_RECORDS_COUNT_OFFSET,
    KL_TIMESTAMP_TYPE_MASK, kl_crc32c, kl_load_i16, kl_load_i32, kl_load_i64, kl_load_u32, kl_store_i16,
    kl_store_i32, kl_store_i64, kl_store_u32,
)

from kafkalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

__all__ = ["LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "debug_build"]

RECORD_BATCH_OVERHEAD = KL_RECORD_BATCH_OVERHEAD
LOG_OVERHEAD = KL_LOG_OVERHEAD

# A v2 batch is at least its header; Kafka's smaller KL_MIN_BATCH_LENGTH is the legacy (magic 0) floor.
cdef int32_t _MIN_V2_LENGTH = KL_RECORD_BATCH_OVERHEAD - KL_LOG_OVERHEAD


def debug_build():
    """True when compiled with KAFKALOG_DEBUG=1 (bounds checks and C-level KL_CHECK asserts)."""
    return bool(KL_DEBUG_ENABLED)


# ---------------------------------------------------------------------------------------------------------------
# Header parse and checks (check_fields is inline in framing.pxd)

cdef int parse_batch_header(const unsigned char *p, Py_ssize_t avail, BatchHeader *h) noexcept nogil:
    memset(h, 0, sizeof(BatchHeader))
    if avail < KL_HEADER_SIZE_UP_TO_MAGIC:
        return KL_BATCH_INCOMPLETE
    h.base_offset = kl_load_i64(p + KL_BASE_OFFSET_OFFSET)
    h.batch_length = kl_load_i32(p + KL_LENGTH_OFFSET)
    h.partition_leader_epoch = kl_load_i32(p + KL_PARTITION_LEADER_EPOCH_OFFSET)
    h.magic = <int8_t>p[KL_MAGIC_OFFSET]
    # Kafka's order: a length below any format's minimum is corruption before the magic means anything.
    if h.batch_length < KL_MIN_BATCH_LENGTH:
        return KL_BATCH_BAD_LENGTH
    if h.magic != KL_MAGIC_V2:
        return KL_BATCH_BAD_MAGIC
    if h.batch_length < _MIN_V2_LENGTH:
        return KL_BATCH_BAD_LENGTH
    if avail >= KL_RECORD_BATCH_OVERHEAD:
        h.crc = kl_load_u32(p + KL_CRC_OFFSET)
        h.attributes = kl_load_i16(p + KL_ATTRIBUTES_OFFSET)
        h.last_offset_delta = kl_load_i32(p + KL_LAST_OFFSET_DELTA_OFFSET)
        h.base_timestamp = kl_load_i64(p + KL_BASE_TIMESTAMP_OFFSET)
        h.max_timestamp = kl_load_i64(p + KL_MAX_TIMESTAMP_OFFSET)
        h.producer_id = kl_load_i64(p + KL_PRODUCER_ID_OFFSET)
        h.producer_epoch = kl_load_i16(p + KL_PRODUCER_EPOCH_OFFSET)
        h.base_sequence = kl_load_i32(p + KL_BASE_SEQUENCE_OFFSET)
        h.records_count = kl_load_i32(p + KL_RECORDS_COUNT_OFFSET)
    if avail - KL_LOG_OVERHEAD < h.batch_length:
        return KL_BATCH_INCOMPLETE
    return KL_BATCH_OK

cdef int check_batch(const unsigned char *p, Py_ssize_t avail, BatchHeader *h) noexcept nogil:
    cdef int rc = parse_batch_header(p, avail, h)
    cdef int32_t done
    if rc != KL_BATCH_OK:
        return rc
    rc = check_fields(p, h)
    if rc != KL_BATCH_OK:
        return rc
    if (h.attributes & KL_COMPRESSION_CODEC_MASK) == KL_CODEC_NONE:
        if walk_records(p + KL_RECORD_BATCH_OVERHEAD, p + <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD,
                        h.records_count, &done) != REC_OK:
            return KL_BATCH_BAD_RECORDS
    return KL_BATCH_OK


cdef str batch_error_message(int code):
    if code == KL_BATCH_OK:
        return "ok"
    if code == KL_BATCH_INCOMPLETE:
        return "incomplete batch (the bytes end inside it)"
    if code == KL_BATCH_BAD_LENGTH:
        return "illegal batch length (smaller than a v2 batch header)"
    if code == KL_BATCH_BAD_MAGIC:
        return "unsupported magic (only record batch v2 is supported)"
    if code == KL_BATCH_BAD_CRC:
        return "CRC-32C mismatch"
    if code == KL_BATCH_BAD_COUNT:
        return "records count inconsistent with the last offset delta"
    if code == KL_BATCH_BAD_CODEC:
        return "unknown compression codec"
    if code == KL_BATCH_BAD_RECORDS:
        return "Incorrect declared batch size: record framing does not add up to the batch length"
    return f"unknown batch error {code}"


cdef int stamp_log_append_time(unsigned char *p, Py_ssize_t avail, int64_t timestamp) noexcept nogil:
    cdef BatchHeader h
    cdef int rc = parse_batch_header(p, avail, &h)
    cdef int16_t attrs
    if rc != KL_BATCH_OK:
        return rc
    attrs = h.attributes | KL_TIMESTAMP_TYPE_MASK
    if attrs == h.attributes and h.max_timestamp == timestamp:
        return KL_BATCH_OK      # Kafka's setMaxTimestamp skips the CRC pass when nothing changes
    kl_store_i16(p + KL_ATTRIBUTES_OFFSET, attrs)
    kl_store_i64(p + KL_MAX_TIMESTAMP_OFFSET, timestamp)
    kl_store_u32(p + KL_CRC_OFFSET, kl_crc32c(0, p + KL_ATTRIBUTES_OFFSET,
                                             <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD - KL_ATTRIBUTES_OFFSET))
    return KL_BATCH_OK

cdef int stamp_max_timestamp(unsigned char *p, Py_ssize_t avail, int64_t timestamp) noexcept nogil:
    cdef BatchHeader h
    cdef int rc = parse_batch_header(p, avail, &h)
    if rc != KL_BATCH_OK:
        return rc
    if h.max_timestamp == timestamp:
        return KL_BATCH_OK
    kl_store_i64(p + KL_MAX_TIMESTAMP_OFFSET, timestamp)
    kl_store_u32(p + KL_CRC_OFFSET, kl_crc32c(0, p + KL_ATTRIBUTES_OFFSET,
                                             <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD - KL_ATTRIBUTES_OFFSET))
    return KL_BATCH_OK


# ---------------------------------------------------------------------------------------------------------------
# Record walks and errors (the per-record readers are inline in framing.pxd)

cdef int walk_records(const unsigned char *p, const unsigned char *end, int32_t count, int32_t *done) noexcept nogil:
    cdef RecordView r
    cdef int rc
    cdef int32_t i
    for i in range(count):
        done[0] = i
        rc = read_record(p, end, &r)
        if rc != REC_OK:
            return rc
        p = r.end
    done[0] = count
    return REC_OK if p == end else REC_LEFTOVER


cdef int walk_part(WalkState *w, const unsigned char *p, const unsigned char *end, bint final,
                   Py_ssize_t *used) noexcept nogil:
    """Read the complete records at the front of [p, end) in one pass: each checked as read_record does (plus its
    size against record_limit and, strict, its offset delta against its index), its timestamp folded into
    min_ts / max_ts. used = bytes of the records read.

    Returns REC_MORE when the bytes end inside a record and more may follow (final false), REC_OK when all `count`
    records were read and no byte follows, or an error. Over complete bytes (final) the codes are the ones
    walk_records gives, so a chunked walk and a whole one name the same problem."""
    cdef const unsigned char *start = p
    cdef RecordView r
    cdef int32_t body
    cdef int k
    cdef int rc = REC_OK
    cdef int64_t ts
    while w.index < w.count:
        rc = read_record(p, end, &r)
        if rc == REC_OK:
            if r.end - p > w.record_limit:
                w.bad = r.end - p
                rc = REC_TOO_LARGE
                break
        elif rc == REC_EOF:
            rc = REC_EOF if final else REC_MORE
            break
        elif rc == REC_BAD_SIZE:
            # the record runs past `end`: a bad length, or one the next bytes complete (not final)
            k = read_varint(p, end, &body)
            if k < 0:
                # a varlong is at most 10 bytes: fewer may be a varint cut by the chunk boundary
                rc = REC_MORE if not final and end - p < 10 else REC_BAD_SIZE
            elif body >= 0 and <Py_ssize_t>body > w.record_limit - k:
                w.bad = <int64_t>body + k
                rc = REC_TOO_LARGE
            elif body >= 0 and not final:
                rc = REC_MORE
            break
        else:
            break       # the record is complete and its fields are wrong
        if w.strict and r.offset_delta != w.index:
            w.bad = r.offset_delta
            rc = REC_BAD_OFFSET
            break
        ts = <int64_t>(<uint64_t>w.base_ts + <uint64_t>r.ts_delta)    # wraps like Java's long
        if ts > w.max_ts:
            w.max_ts = ts
        if <uint64_t>ts < w.min_ts:
            w.min_ts = <uint64_t>ts
        p = r.end
        w.index += 1
    if rc == REC_OK and p != end:
        rc = REC_LEFTOVER
    used[0] = p - start
    return rc


cdef str record_message(int rc, int32_t index, int32_t count):
    if rc == REC_EOF:
        return f"Incorrect declared batch size, premature EOF reached (read {index} of {count} records)"
    if rc == REC_LEFTOVER:
        return f"Incorrect declared batch size, records still remaining after the {count} declared records"
    if rc == REC_BAD_SIZE:
        return f"Invalid record size in record {index}: its length runs past the end of the records"
    if rc == REC_BAD_HEADERS:
        return f"Found invalid number of record headers (or a negative header key size) in record {index}"
    if rc == REC_OVERFLOW:
        return "decoded columns exceed 2 GiB (int32 offsets)"
    return f"Invalid record {index}: its fields do not add up to its length"


cdef str batch_where(const BatchHeader *h, Py_ssize_t pos):
    return f"record batch at offset {h.base_offset} (position {pos})"


cdef object batch_error(int code, const unsigned char *p, Py_ssize_t avail, Py_ssize_t pos, const BatchHeader *h):
    """The exception for a KL_BATCH_* code, naming the problem, the batch's offset and its position."""
    cdef int32_t done = 0
    cdef int rc
    cdef Py_ssize_t size = <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
    if code == KL_BATCH_INCOMPLETE:
        if avail < KL_HEADER_SIZE_UP_TO_MAGIC:
            return CorruptRecordError(f"truncated record batch at position {pos}: {avail} bytes, "
                                      f"a batch header needs {KL_HEADER_SIZE_UP_TO_MAGIC}")
        return CorruptRecordError(f"truncated {batch_where(h, pos)}: {size} bytes declared, {avail} available")
    if code == KL_BATCH_BAD_LENGTH:
        return CorruptRecordError(f"{batch_where(h, pos)} has illegal batch length {h.batch_length} "
                                  f"(a v2 batch needs at least {_MIN_V2_LENGTH})")
    if code == KL_BATCH_BAD_MAGIC:
        return CorruptRecordError(f"{batch_where(h, pos)} has magic {h.magic}; "
                                  "only record batch v2 (magic 2) is supported")
    if code == KL_BATCH_BAD_CRC:
        return CorruptRecordError(
            f"{batch_where(h, pos)} is corrupt: stored CRC 0x{h.crc:08x}, computed 0x"
            f"{kl_crc32c(0, p + KL_ATTRIBUTES_OFFSET, size - KL_ATTRIBUTES_OFFSET):08x}")
    if code == KL_BATCH_BAD_CODEC:
        return UnsupportedCompressionTypeError(
            f"{batch_where(h, pos)} uses unknown compression codec {h.attributes & KL_COMPRESSION_CODEC_MASK}")
    if code == KL_BATCH_BAD_COUNT:
        return InvalidRecordError(f"{batch_where(h, pos)} declares {h.records_count} records with last offset "
                                  f"delta {h.last_offset_delta}")
    if code == KL_BATCH_BAD_RECORDS:
        rc = walk_records(p + KL_RECORD_BATCH_OVERHEAD, p + size, h.records_count, &done)
        return InvalidRecordError(f"{batch_where(h, pos)}: {record_message(rc, done, h.records_count)}")
    return CorruptRecordError(f"{batch_where(h, pos)}: {batch_error_message(code)}")


cdef object walk_error(int rc, const WalkState *w, const BatchHeader *h, Py_ssize_t pos, str codec,
                       Py_ssize_t max_message_bytes):
    """The exception for a walk_part code; codec names the compressed records it was found in (None: plain)."""
    cdef str where = batch_where(h, pos) if codec is None else f"{batch_where(h, pos)}, in its {codec} records"
    if rc == REC_BAD_OFFSET:
        return InvalidRecordError(f"{where}: record {w.index} has offset delta {w.bad}, expected {w.index}: the "
                                  f"records of a produced batch have offset deltas 0, 1, ... {h.last_offset_delta}")
    if rc == REC_TOO_LARGE:
        return RecordTooLargeError(f"{where}: record {w.index} is {w.bad} bytes, above the {w.record_limit}-byte "
                                   f"bound on one record: max(max.message.bytes={max_message_bytes}, 16 MiB)")
    return InvalidRecordError(f"{where}: {record_message(rc, w.index, w.count)}")


# ---------------------------------------------------------------------------------------------------------------
# Writing a header (records are written by the inline writers of framing.pxd)

cdef void write_header(unsigned char *p, Py_ssize_t size, const BatchParams *bp) noexcept nogil:
    kl_store_i64(p + KL_BASE_OFFSET_OFFSET, bp.base_offset)
    kl_store_i32(p + KL_LENGTH_OFFSET, <int32_t>(size - KL_LOG_OVERHEAD))
    kl_store_i32(p + KL_PARTITION_LEADER_EPOCH_OFFSET, bp.partition_leader_epoch)
    p[KL_MAGIC_OFFSET] = KL_MAGIC_V2
    kl_store_i16(p + KL_ATTRIBUTES_OFFSET, bp.attributes)
    kl_store_i32(p + KL_LAST_OFFSET_DELTA_OFFSET, bp.count - 1)
    kl_store_i64(p + KL_BASE_TIMESTAMP_OFFSET, bp.base_timestamp)
    kl_store_i64(p + KL_MAX_TIMESTAMP_OFFSET, bp.max_timestamp)
    kl_store_i64(p + KL_PRODUCER_ID_OFFSET, bp.producer_id)
    kl_store_i16(p + KL_PRODUCER_EPOCH_OFFSET, bp.producer_epoch)
    kl_store_i32(p + KL_BASE_SEQUENCE_OFFSET, bp.base_sequence)
    kl_store_i32(p + KL_RECORDS_COUNT_OFFSET, bp.count)
    kl_store_u32(p + KL_CRC_OFFSET, kl_crc32c(0, p + KL_ATTRIBUTES_OFFSET, size - KL_ATTRIBUTES_OFFSET))


cdef void write_header_big(unsigned char *p, Py_ssize_t size, const BatchParams *bp) noexcept:
    if size >= KL_NOGIL_BYTES:
        with nogil:
            write_header(p, size, bp)
    else:
        write_header(p, size, bp)
