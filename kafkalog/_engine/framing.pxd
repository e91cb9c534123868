# Record batch v2 framing (magic 2): the C-level contract every engine module that reads or writes batches cimports
# (batch, codecs, columns, compaction, accumulator, segment). The format in Kafka notation opens framing.pyx; here:
#   BaseOffset => Int64 | BatchLength => Int32 | PartitionLeaderEpoch => Int32 | Magic => Int8 | CRC => Uint32 |
#   Attributes => Int16 | LastOffsetDelta => Int32 | BaseTimestamp => Int64 | MaxTimestamp => Int64 |
#   ProducerId => Int64 | ProducerEpoch => Int16 | BaseSequence => Int32 | RecordsCount => Int32 | Records
#   Record => Length => Varint | Attributes => Int8 | TimestampDelta => Varlong | OffsetDelta => Varint |
#             KeyLength => Varint | Key | ValueLength => Varint | Value | HeaderCount => Varint | Headers
# The per-record readers and writers are inline here, not called through the module: every hot loop (iteration,
# columns, the cleaner, the producer's append) gets its own copy, as when they all lived in one module.
from libc.stdint cimport INT64_MIN, int8_t, int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from .clib cimport (
    KL_ATTRIBUTES_OFFSET, KL_CODEC_ZSTD, KL_COMPRESSION_CODEC_MASK, KL_LOG_OVERHEAD, kl_crc32c, kl_read_varint,
    kl_read_varlong, kl_varint_size, kl_varlong_size, kl_write_varint, kl_write_varlong,
)


cdef struct BatchHeader:
    int64_t base_offset             # offset of the first record (the broker rewrites it on append)
    int32_t batch_length            # bytes after the BatchLength field: total size = batch_length + 12
    int32_t partition_leader_epoch  # -1 = none; not covered by the CRC
    int8_t magic                    # 2 for every batch this engine builds or accepts
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

# Rewrite MaxTimestamp of the complete batch at p in place, CRC recomputed (nothing written when it already holds
# timestamp). Returns a parse_batch_header code.
cdef int stamp_max_timestamp(unsigned char *p, Py_ssize_t avail, int64_t timestamp) noexcept nogil


cdef inline int check_fields(const unsigned char *p, const BatchHeader *h) noexcept nogil:
    """CRC, codec and count checks of a complete, parsed batch (everything but record framing)."""
    cdef Py_ssize_t size = <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
    if kl_crc32c(0, p + KL_ATTRIBUTES_OFFSET, size - KL_ATTRIBUTES_OFFSET) != h.crc:
        return KL_BATCH_BAD_CRC
    if (h.attributes & KL_COMPRESSION_CODEC_MASK) > KL_CODEC_ZSTD:
        return KL_BATCH_BAD_CODEC
    # Compaction may drop records but keeps LastOffsetDelta, so the count may be smaller, never larger.
    if h.records_count < 0 or h.last_offset_delta < 0 or h.records_count > <int64_t>h.last_offset_delta + 1:
        return KL_BATCH_BAD_COUNT
    return KL_BATCH_OK


# ---------------------------------------------------------------------------------------------------------------
# Records: reading

# Result codes of the record readers and walks (0 = ok); record_message() names each.
cdef enum:
    REC_OK = 0
    REC_EOF = 1             # the records end before `count` records were read
    REC_BAD_SIZE = 2        # a record's Length is malformed, negative or runs past the records
    REC_BAD_BODY = 3        # the fields inside a record do not add up to its Length
    REC_BAD_HEADERS = 4     # negative header count / key length, or more headers than bytes
    REC_LEFTOVER = 5        # bytes remain after `count` records
    REC_OVERFLOW = 6        # decode_columns: a column passed the int32 offsets of the Arrow layout
    REC_NOMEM = 7
    REC_BAD_OFFSET = 8      # a produced record whose offset delta is not its index (walk_part, strict)
    REC_TOO_LARGE = 9       # a record above the walk's record_limit
    REC_MORE = 10           # walk_part: the bytes end inside a record and more may follow


cdef struct RecordView:
    int64_t ts_delta
    int32_t offset_delta
    int32_t key_len             # -1 = null
    int32_t value_len           # -1 = null
    int32_t header_count
    const unsigned char *key
    const unsigned char *value
    const unsigned char *headers    # first header; they are already checked by read_record
    const unsigned char *end        # end of this record = start of the next


cdef struct WalkState:
    int32_t count               # records declared
    int32_t index               # records read so far
    bint strict                 # offset deltas must run 0, 1, 2... (a produced batch; compaction leaves gaps)
    int64_t base_ts
    uint64_t min_ts             # smallest record timestamp as unsigned: a non-negative one wins over any negative
    int64_t max_ts              # largest record timestamp, INT64_MIN while no record was read
    Py_ssize_t record_limit     # largest record (Length varint included) accepted
    int64_t bad                 # REC_BAD_OFFSET: the delta found; REC_TOO_LARGE: the record's size


cdef inline int read_varint(const unsigned char *p, const unsigned char *end, int32_t *out) noexcept nogil:
    # Most record fields fit one or two bytes (small deltas and lengths): skip the general loop for them.
    cdef uint32_t z
    if p < end and p[0] < 0x80:
        z = p[0]
    elif end - p >= 2 and p[1] < 0x80:
        z = (p[0] & 0x7f) | (<uint32_t>p[1] << 7)
        out[0] = <int32_t>(z >> 1) ^ -<int32_t>(z & 1)
        return 2
    else:
        return kl_read_varint(p, end, out)
    out[0] = <int32_t>(z >> 1) ^ -<int32_t>(z & 1)
    return 1


cdef inline int read_varlong(const unsigned char *p, const unsigned char *end, int64_t *out) noexcept nogil:
    cdef uint32_t z
    if p < end and p[0] < 0x80:
        z = p[0]
    elif end - p >= 2 and p[1] < 0x80:
        z = (p[0] & 0x7f) | (<uint32_t>p[1] << 7)
        out[0] = <int64_t>(z >> 1) ^ -<int64_t>(z & 1)
        return 2
    else:
        return kl_read_varlong(p, end, out)
    out[0] = <int64_t>(z >> 1) ^ -<int64_t>(z & 1)
    return 1


cdef inline int read_record(const unsigned char *p, const unsigned char *end, RecordView *r) noexcept nogil:
    cdef int32_t body
    cdef int k = read_varint(p, end, &body)
    if k < 0:
        return REC_EOF if p == end else REC_BAD_SIZE
    p += k
    if body < 0 or body > end - p:
        return REC_BAD_SIZE
    end = p + body
    r.end = end
    if p >= end:
        return REC_BAD_BODY
    p += 1                      # attributes
    k = read_varlong(p, end, &r.ts_delta)
    if k < 0:
        return REC_BAD_BODY
    p += k
    k = read_varint(p, end, &r.offset_delta)
    if k < 0:
        return REC_BAD_BODY
    p += k
    # Like Kafka, any negative key/value length reads as null.
    k = read_varint(p, end, &r.key_len)
    if k < 0:
        return REC_BAD_BODY
    p += k
    r.key = p
    if r.key_len >= 0:
        if r.key_len > end - p:
            return REC_BAD_BODY
        p += r.key_len
    else:
        r.key_len = -1
    k = read_varint(p, end, &r.value_len)
    if k < 0:
        return REC_BAD_BODY
    p += k
    r.value = p
    if r.value_len >= 0:
        if r.value_len > end - p:
            return REC_BAD_BODY
        p += r.value_len
    else:
        r.value_len = -1
    k = read_varint(p, end, &r.header_count)
    if k < 0:
        return REC_BAD_BODY
    p += k
    if r.header_count < 0 or r.header_count > end - p:
        return REC_BAD_HEADERS
    r.headers = p
    if r.header_count:
        return check_headers(p, end, r.header_count)
    return REC_OK if p == end else REC_BAD_BODY


cdef inline int check_headers(const unsigned char *p, const unsigned char *end, int32_t count) noexcept nogil:
    """The headers of one record fill [p, end) exactly."""
    cdef int32_t i, hk, hv
    cdef int k
    for i in range(count):
        k = read_varint(p, end, &hk)
        if k < 0:
            return REC_BAD_BODY
        p += k
        if hk < 0:
            return REC_BAD_HEADERS
        if hk > end - p:
            return REC_BAD_BODY
        p += hk
        k = read_varint(p, end, &hv)
        if k < 0:
            return REC_BAD_BODY
        p += k
        if hv >= 0:
            if hv > end - p:
                return REC_BAD_BODY
            p += hv
    return REC_OK if p == end else REC_BAD_BODY


cdef inline const unsigned char *next_header(const unsigned char *p, const unsigned char **key, int32_t *key_len,
                                             const unsigned char **value, int32_t *value_len) noexcept nogil:
    """Decode one header that read_record already checked (so no bounds checks here)."""
    p += kl_read_varint(p, p + 5, key_len)
    key[0] = p
    p += key_len[0]
    p += kl_read_varint(p, p + 5, value_len)
    value[0] = p
    if value_len[0] >= 0:
        p += value_len[0]
    else:
        value_len[0] = -1
    return p


cdef inline void walk_init(WalkState *w, const BatchHeader *h, bint strict, Py_ssize_t record_limit) noexcept nogil:
    w.count = h.records_count
    w.index = 0
    w.strict = strict
    w.base_ts = h.base_timestamp
    w.min_ts = <uint64_t>-1
    w.max_ts = INT64_MIN
    w.record_limit = record_limit
    w.bad = 0


# Read `count` records of [p, end): REC_OK when they fill it exactly; done = the records read.
cdef int walk_records(const unsigned char *p, const unsigned char *end, int32_t count, int32_t *done) noexcept nogil

# Read the complete records at the front of [p, end), checked and folded into w (see framing.pyx).
cdef int walk_part(WalkState *w, const unsigned char *p, const unsigned char *end, bint final,
                   Py_ssize_t *used) noexcept nogil

# Messages and exceptions naming a problem, the batch's offset and its position.
cdef str record_message(int rc, int32_t index, int32_t count)
cdef str batch_where(const BatchHeader *h, Py_ssize_t pos)
cdef object batch_error(int code, const unsigned char *p, Py_ssize_t avail, Py_ssize_t pos, const BatchHeader *h)
cdef object walk_error(int rc, const WalkState *w, const BatchHeader *h, Py_ssize_t pos, str codec,
                       Py_ssize_t max_message_bytes)


# ---------------------------------------------------------------------------------------------------------------
# Records and headers: writing

cdef struct Slice:
    const unsigned char *p  # the bytes (NULL when null)
    Py_ssize_t n            # -1 = null


cdef struct BatchParams:    # the header fields a writer chooses; write_header derives the rest
    int64_t base_offset
    int32_t partition_leader_epoch
    int16_t attributes
    int32_t count           # records: RecordsCount, and LastOffsetDelta = count - 1
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence


# The header of the size-byte batch at p, its CRC over the records already written after it; write_header_big
# drops the GIL for a large batch.
cdef void write_header(unsigned char *p, Py_ssize_t size, const BatchParams *bp) noexcept nogil
cdef void write_header_big(unsigned char *p, Py_ssize_t size, const BatchParams *bp) noexcept


cdef inline Py_ssize_t slice_size(Slice s) noexcept nogil:
    return kl_varint_size(<int32_t>s.n) + (s.n if s.n > 0 else 0)


cdef inline unsigned char *put_slice(unsigned char *w, Slice s) noexcept nogil:
    w += kl_write_varint(w, <int32_t>s.n)
    if s.n > 0:
        memcpy(w, s.p, s.n)
        w += s.n
    return w


cdef inline Py_ssize_t body_size(int64_t ts_delta, int32_t offset_delta, Slice key, Slice value,
                                 Py_ssize_t header_bytes) noexcept nogil:
    return (1 + kl_varlong_size(ts_delta) + kl_varint_size(offset_delta) + slice_size(key) + slice_size(value)
            + header_bytes)


cdef inline unsigned char *write_record(unsigned char *w, int32_t body, int64_t ts_delta, int32_t offset_delta,
                                        Slice key, Slice value, const Slice *headers,
                                        int32_t header_count) noexcept nogil:
    cdef int32_t j
    w += kl_write_varint(w, body)
    w[0] = 0
    w += 1
    w += kl_write_varlong(w, ts_delta)
    w += kl_write_varint(w, offset_delta)
    w = put_slice(w, key)
    w = put_slice(w, value)
    w += kl_write_varint(w, header_count)
    for j in range(2 * header_count):
        w = put_slice(w, headers[j])
    return w
