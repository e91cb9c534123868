# Record batch v2 (magic 2): the C-level contract other compiled modules (segment) cimport.
# Byte layout in Kafka notation (61-byte header, then records):
#   BaseOffset => Int64 | BatchLength => Int32 | PartitionLeaderEpoch => Int32 | Magic => Int8 | CRC => Uint32 |
#   Attributes => Int16 | LastOffsetDelta => Int32 | BaseTimestamp => Int64 | MaxTimestamp => Int64 |
#   ProducerId => Int64 | ProducerEpoch => Int16 | BaseSequence => Int32 | RecordsCount => Int32 | Records
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t


cdef struct BatchHeader:
    int64_t base_offset             # offset of the first record (the broker rewrites it on append)
    int32_t batch_length            # bytes after the BatchLength field: total size = batch_length + 12
    int32_t partition_leader_epoch  # -1 = none; not covered by the CRC
    int8_t magic                    # 2 for every batch this module builds or accepts
    uint32_t crc                    # CRC-32C of bytes [21, end)
    int16_t attributes              # codec bits 0-2, timestamp type bit 3, transactional 4, control 5
    int32_t last_offset_delta       # last record offset - base_offset
    int64_t base_timestamp          # timestamp of the first record
    int64_t max_timestamp           # largest record timestamp (or the append time with LogAppendTime)
    int64_t producer_id             # -1 = none
    int16_t producer_epoch          # -1 = none
    int32_t base_sequence           # -1 = none
    int32_t records_count           # number of records; plaintext even when the records are compressed


# Result codes of parse_batch_header / check_batch (0 = ok). KL_BATCH_INCOMPLETE is not corruption at a log
# tail (a partial write), every positive code is; batch_error_message() names each.
cdef enum:
    KL_BATCH_OK = 0
    KL_BATCH_INCOMPLETE = -1        # fewer than 17 header bytes, or the batch extends past the bytes available
    KL_BATCH_BAD_LENGTH = 1         # batch_length < 49 (smaller than a v2 header) or > INT32_MAX
    KL_BATCH_BAD_MAGIC = 2          # magic != 2
    KL_BATCH_BAD_CRC = 3            # stored CRC != CRC-32C of [21, end)
    KL_BATCH_BAD_COUNT = 4          # records_count < 0, or last_offset_delta < 0 / inconsistent with the count
    KL_BATCH_BAD_CODEC = 5          # codec bits name no codec (5, 6, 7)
    KL_BATCH_BAD_RECORDS = 6        # (uncompressed only) record framing does not add up to the batch length


# Read the header at p (avail readable bytes) into h without checking the CRC. Returns KL_BATCH_OK,
# KL_BATCH_INCOMPLETE or KL_BATCH_BAD_LENGTH / KL_BATCH_BAD_MAGIC.
cdef int parse_batch_header(const unsigned char *p, Py_ssize_t avail, BatchHeader *h) noexcept nogil

# parse_batch_header + CRC + count/delta/codec checks (+ record framing when uncompressed), never decompressing.
cdef int check_batch(const unsigned char *p, Py_ssize_t avail, BatchHeader *h) noexcept nogil

cdef str batch_error_message(int code)

# Stamp the complete batch at p LogAppendTime in place: attributes bit 3, MaxTimestamp = timestamp, CRC recomputed
# (skipped when nothing changes, as Kafka's setMaxTimestamp does). Returns a parse_batch_header code.
cdef int stamp_log_append_time(unsigned char *p, Py_ssize_t avail, int64_t timestamp) noexcept nogil
