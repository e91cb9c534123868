# The C headers in include/kafkalog/, as Cython sees them: byte order, CRC-32C, varints, constants, debug checks.
# Every compiled module cimports from here; constants are defined once, in kl_constants.h.
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t


cdef extern from "kafkalog/kl_byteorder.h" nogil:
    int16_t kl_load_i16(const unsigned char *p)
    int32_t kl_load_i32(const unsigned char *p)
    uint32_t kl_load_u32(const unsigned char *p)
    int64_t kl_load_i64(const unsigned char *p)
    void kl_store_i16(unsigned char *p, int16_t x)
    void kl_store_i32(unsigned char *p, int32_t x)
    void kl_store_u32(unsigned char *p, uint32_t x)
    void kl_store_i64(unsigned char *p, int64_t x)
    uint32_t kl_load_u32le(const unsigned char *p)
    void kl_store_u32le(unsigned char *p, uint32_t x)

cdef extern from "kafkalog/kl_crc32c.h" nogil:
    # crc = 0 for a fresh checksum, or a previous result to continue over more bytes
    uint32_t kl_crc32c(uint32_t crc, const unsigned char *p, size_t n)

cdef extern from "kafkalog/kl_varint.h" nogil:
    size_t kl_varint_size(int32_t v)
    size_t kl_varlong_size(int64_t v)
    size_t kl_write_varint(unsigned char *p, int32_t v)
    size_t kl_write_varlong(unsigned char *p, int64_t v)
    # return bytes read, or -1 if the input ends early / the varint is malformed
    int kl_read_varint(const unsigned char *p, const unsigned char *end, int32_t *out)
    int kl_read_varlong(const unsigned char *p, const unsigned char *end, int64_t *out)
    # cursor decoding for hot scans: advances *pp, 0 on a truncated/over-long varint
    int kl_next_uvarint(const unsigned char **pp, const unsigned char *end, uint64_t *out)
    int64_t kl_unzigzag(uint64_t z)
    # unsigned varints of the protocol's flexible versions (compact lengths, tag buffers)
    size_t kl_uvarint_size(uint32_t v)
    size_t kl_write_uvarint(unsigned char *p, uint32_t v)

cdef extern from "kafkalog/kl_debug.h" nogil:
    int KL_DEBUG_ENABLED
    void KL_CHECK(bint cond)

cdef extern from "kafkalog/kl_constants.h" nogil:
    int KL_BASE_OFFSET_OFFSET
    int KL_LENGTH_OFFSET
    int KL_PARTITION_LEADER_EPOCH_OFFSET
    int KL_MAGIC_OFFSET
    int KL_CRC_OFFSET
    int KL_ATTRIBUTES_OFFSET
    int KL_LAST_OFFSET_DELTA_OFFSET
    int KL_BASE_TIMESTAMP_OFFSET
    int KL_MAX_TIMESTAMP_OFFSET
    int KL_PRODUCER_ID_OFFSET
    int KL_PRODUCER_EPOCH_OFFSET
    int KL_BASE_SEQUENCE_OFFSET
    int KL_RECORDS_COUNT_OFFSET
    int KL_RECORD_BATCH_OVERHEAD
    int KL_LOG_OVERHEAD
    int KL_HEADER_SIZE_UP_TO_MAGIC
    int KL_MIN_BATCH_LENGTH
    int KL_MAX_RECORD_OVERHEAD
    int KL_MAGIC_V2
    int KL_COMPRESSION_CODEC_MASK
    int KL_TIMESTAMP_TYPE_MASK
    int KL_TRANSACTIONAL_FLAG_MASK
    int KL_CONTROL_FLAG_MASK
    int KL_DELETE_HORIZON_FLAG_MASK
    int KL_CODEC_NONE
    int KL_CODEC_GZIP
    int KL_CODEC_SNAPPY
    int KL_CODEC_LZ4
    int KL_CODEC_ZSTD
    int KL_TIMESTAMP_CREATE_TIME
    int KL_TIMESTAMP_LOG_APPEND_TIME
    long long KL_NO_TIMESTAMP
    int KL_OFFSET_INDEX_ENTRY
    int KL_TIME_INDEX_ENTRY
    int KL_INDEX_WARM_BYTES
    long long KL_INT32_MAX
    int KL_NOGIL_BYTES

cdef extern from "kafkalog/kl_atomic.h" nogil:
    # words of a MAP_SHARED mapping other processes update: acquire load, sequentially consistent store and add
    uint64_t kl_atomic_load_u64(const uint64_t *p)
    void kl_atomic_store_u64(uint64_t *p, uint64_t v)
    uint64_t kl_atomic_fetch_add_u64(uint64_t *p, uint64_t v)  # returns the value before
    uint64_t kl_atomic_max_u64(uint64_t *p, uint64_t v)  # raises *p to v; returns the value before
