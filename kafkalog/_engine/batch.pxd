# Record batches as Python sees them (built, viewed, iterated): the C-level contract of what other engine modules
# build on. The layout is framing.pxd's; BatchBuilder is declared here so that a ProducerBatch can extend it.
from libc.stdint cimport int16_t, int32_t, int64_t
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from .framing cimport BatchHeader, BatchParams, RecordView


cdef class BatchBuilder:
    cdef unsigned char *_buf                # KL_RECORD_BATCH_OVERHEAD bytes of header space, then the encoded records
    cdef Py_ssize_t _len                    # bytes of _buf in use (header space included): the batch's plain size
    cdef Py_ssize_t _cap                    # bytes allocated at _buf
    cdef int32_t _count                     # records encoded
    cdef bint _closed                       # close() was called: stage() refuses
    cdef public int64_t base_offset         # absolute offset of record 0, for stage()
    cdef public Py_ssize_t max_batch_bytes  # stage()/append() refuse to grow the batch past this (max.message.bytes)
    cdef public Py_ssize_t target_bytes     # ``full`` once the batch holds this many bytes (Kafka's batch.size)
    cdef int64_t _first_ts                  # the first record's timestamp: the batch's BaseTimestamp
    cdef int64_t _max_ts                    # the largest record timestamp: MaxTimestamp
    cdef int _codec                         # KL_CODEC_*
    cdef object _level                      # the codec's compression level, None for its default
    cdef int16_t _attributes                # the batch's Attributes (codec, timestamp type, transactional)
    cdef int64_t _producer_id               # -1 = none
    cdef int16_t _producer_epoch            # -1 = none
    cdef int32_t _base_sequence             # -1 = none

    cdef int _reserve(self, Py_ssize_t extra) except -1     # room for extra more bytes at _buf + _len
    # Encode one record (timestamp -1 = now); its offset delta, or -1 when it would pass max_batch_bytes.
    cdef int64_t _append(self, value, key, int64_t timestamp, headers) except -2
    # The header fields of a batch of the records so far (ValueError when there is none).
    cdef int _params(self, BatchParams *bp, int64_t base_offset, int32_t partition_leader_epoch) except -1


# RecordTooLargeError when n bytes of `what` (a key, a value, a record, the batch) pass the 2 GiB a batch can hold.
cdef int check_len(Py_ssize_t n, str what) except -1


cdef inline int64_t now_ms() noexcept nogil:
    """The wall clock in ms: the timestamp of a record sent without one."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


# A record of another shape than Record (a queue's Message) made from a record's view (pointers into its batch's
# plaintext), its batch's header and whether that batch has LogAppendTime; ctx is take_made's caller's. A new
# reference, or NULL with an exception set.
ctypedef object (*RecordMaker)(const RecordView *r, const BatchHeader *h, bint log_append_time, object ctx)

# Append up to limit records of stream (a RecordStream: iter_records, chain_records) to out, each made by make, in
# C with no Record in between; returns how many.
cdef Py_ssize_t take_made(object stream, list out, Py_ssize_t limit, RecordMaker make, object ctx) except -1

# A record's headers, already checked by read_record: [(str key, bytes-or-None value)].
cdef list headers_list(const unsigned char *p, int32_t count)
