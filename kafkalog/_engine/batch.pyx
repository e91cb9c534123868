# Record batches as Python sees them: build (build_batch, BatchBuilder), view (RecordBatch, Record), iterate
# (iter_batches, iter_records, RecordStream) and rewrite in place the fields a log owns. The layout, in Kafka
# notation, opens framing.pyx; what this module writes of it after a batch is built:
#
#   BaseOffset => Int64             set_base_offset: outside the CRC, so a log assigns offsets without a CRC pass
#   PartitionLeaderEpoch => Int32   set_partition_leader_epoch: outside the CRC too
#   Attributes => Int16             set_log_append_time: bit 3 (LogAppendTime), CRC recomputed
#   MaxTimestamp => Int64           set_log_append_time, set_max_timestamp (as Kafka's LogValidator), CRC recomputed
#
# Records are encoded and decoded by the inline writers and readers of framing.pxd, compressed and decompressed
# (within bounds) by codecs.pyx. A RecordBatch is a view of its buffer (bytes, mmap, memoryview): no copy, and no
# Python object per record unless records are asked for. BatchBuilder is declared in batch.pxd so that the
# producer's batch extends it (accumulator.pyx); Spark's columnar reads are in columns.pyx, the cleaner's kernels in
# compaction.pyx.
"""Record batch v2: build, view, validate and iterate Kafka record batches."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Malloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_SIZE, PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

cimport cython

from .clib cimport (
    KL_BASE_OFFSET_OFFSET, KL_CHECK, KL_CODEC_NONE, KL_COMPRESSION_CODEC_MASK, KL_CONTROL_FLAG_MASK, KL_INT32_MAX,
    KL_LOG_OVERHEAD, KL_NOGIL_BYTES, KL_PARTITION_LEADER_EPOCH_OFFSET, KL_RECORD_BATCH_OVERHEAD,
    KL_TIMESTAMP_LOG_APPEND_TIME, KL_TIMESTAMP_TYPE_MASK, KL_TRANSACTIONAL_FLAG_MASK, kl_crc32c, kl_store_i32,
    kl_store_i64, kl_varint_size,
)
from .codecs cimport (
    Pins, check_level, codec_of, compress, decompress, range_end, read_view, walk_compressed,
    walk_compressed_for_append,
)
from .framing cimport (
    KL_BATCH_INCOMPLETE, KL_BATCH_OK, REC_LEFTOVER, REC_OK, BatchHeader, BatchParams, RecordView, Slice, WalkState,
    batch_error, batch_where, body_size, check_batch, check_fields, next_header, parse_batch_header, read_record,
    record_message, slice_size, stamp_log_append_time, stamp_max_timestamp, walk_error, walk_init, walk_part,
    write_header_big, write_record,
)

import functools

from kafkalog._engine.codecs import _CODEC_NAMES
from kafkalog.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    LogClosedError,
    RecordTooLargeError,
)

__all__ = [
    "BatchBuilder", "Record", "RecordBatch", "RecordPool", "RecordStream", "build_batch", "chain_records",
    "count_records", "crc32c", "fields_as_members", "iter_batches", "iter_records", "next_offset_after",
    "set_base_offset", "set_log_append_time", "set_max_timestamp", "set_partition_leader_epoch",
    "take_consumer_records",
]


# ---------------------------------------------------------------------------------------------------------------
# Writing

cdef bytes _seal(bytes raw_obj, const unsigned char *raw, Py_ssize_t raw_len, int codec, object level,
                 const BatchParams *bp):
    """The finished batch from an uncompressed one (header space + records): compress, then header and CRC.

    raw_obj, when given, is a fresh bytes object holding raw that may be finished in place.
    """
    cdef bytes out
    cdef unsigned char *o
    cdef Py_buffer v
    cdef Py_ssize_t size
    if codec == KL_CODEC_NONE:
        out = raw_obj if raw_obj is not None else PyBytes_FromStringAndSize(<const char *>raw, raw_len)
        o = <unsigned char *>PyBytes_AS_STRING(out)
        write_header_big(o, raw_len, bp)
        return out
    comp = compress(codec, level, raw + KL_RECORD_BATCH_OVERHEAD, raw_len - KL_RECORD_BATCH_OVERHEAD)
    PyObject_GetBuffer(comp, &v, PyBUF_SIMPLE)
    try:
        size = KL_RECORD_BATCH_OVERHEAD + v.len
        if size - KL_LOG_OVERHEAD > KL_INT32_MAX:
            raise RecordTooLargeError(f"compressed batch of {size} bytes exceeds 2 GiB")
        out = PyBytes_FromStringAndSize(NULL, size)
        o = <unsigned char *>PyBytes_AS_STRING(out)
        if size >= KL_NOGIL_BYTES:
            with nogil:
                memcpy(o + KL_RECORD_BATCH_OVERHEAD, v.buf, v.len)
        else:
            memcpy(o + KL_RECORD_BATCH_OVERHEAD, v.buf, v.len)
        write_header_big(o, size, bp)
    finally:
        PyBuffer_Release(&v)
    return out


cdef int check_len(Py_ssize_t n, str what) except -1:
    if n > KL_INT32_MAX:
        raise RecordTooLargeError(f"{what} of {n} bytes exceeds the 2 GiB a record batch can hold")
    return 0


cdef class _HeaderTable(Pins):
    """Header (key, value) slices of the records of one build, flattened."""
    cdef Slice *hs
    cdef Py_ssize_t nh, hcap

    def __dealloc__(self):
        free(self.hs)

    cdef Py_ssize_t add(self, object headers, int32_t *count) except -1:
        """Append one record's headers; returns their encoded size (HeaderCount included)."""
        cdef Py_ssize_t total = 0, i, m
        cdef Slice *grown
        seq = PySequence_Fast(headers, "headers must be a sequence of (str, bytes | None) pairs")
        self.keep.append(seq)
        m = PySequence_Fast_GET_SIZE(seq)
        if self.nh + 2 * m > self.hcap:
            grown = <Slice *>realloc(self.hs, (self.hcap * 2 + 2 * m + 8) * sizeof(Slice))
            if grown == NULL:
                raise MemoryError()
            self.hs = grown
            self.hcap = self.hcap * 2 + 2 * m + 8
        for i in range(m):
            pair = <object>PySequence_Fast_ITEMS(seq)[i]
            try:
                k, v = pair
            except (TypeError, ValueError):
                raise TypeError(f"a header must be a (str, bytes | None) pair, not {pair!r}") from None
            self.header_key(k, &self.hs[self.nh])
            self.slice(v, &self.hs[self.nh + 1], "a header value")
            check_len(self.hs[self.nh].n, "a header key")
            check_len(self.hs[self.nh + 1].n, "a header value")
            total += slice_size(self.hs[self.nh]) + slice_size(self.hs[self.nh + 1])
            self.nh += 2
        count[0] = <int32_t>m
        return total + kl_varint_size(<int32_t>m)


cdef struct _Rec:
    Slice key
    Slice value
    int64_t timestamp
    Py_ssize_t header_bytes     # encoded headers, HeaderCount included
    Py_ssize_t first_header     # index of its first slice in the header table
    int32_t header_count
    int32_t body


cdef void _write_records(unsigned char *raw, Py_ssize_t total, const _Rec *recs, Py_ssize_t n, int64_t base_ts,
                         const Slice *headers) noexcept nogil:
    cdef unsigned char *w = raw + KL_RECORD_BATCH_OVERHEAD
    cdef Py_ssize_t i
    for i in range(n):
        w = write_record(w, recs[i].body, recs[i].timestamp - base_ts, <int32_t>i, recs[i].key, recs[i].value,
                         headers + recs[i].first_header, recs[i].header_count)
    KL_CHECK(w == raw + total)


cdef int16_t _attributes(int codec, int timestamp_type, bint transactional) except? -1:
    if timestamp_type != 0 and timestamp_type != 1:
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
    return <int16_t>(codec | (KL_TIMESTAMP_TYPE_MASK if timestamp_type else 0)
                     | (KL_TRANSACTIONAL_FLAG_MASK if transactional else 0))


cdef inline int64_t _timestamp_of(object t, int64_t default) except? -2:
    cdef int64_t ts
    if t is None:
        return default
    ts = t
    if ts == -1:
        return default
    if ts < -1:
        raise InvalidTimestampError(f"invalid negative timestamp {ts}")
    return ts


def build_batch(values, keys=None, timestamps=None, headers=None, *, int64_t base_offset=0, compression=0,
                compression_level=None, int timestamp_type=0, int64_t default_timestamp=-1,
                int64_t producer_id=-1, int producer_epoch=-1, int32_t base_sequence=-1,
                int32_t partition_leader_epoch=-1, bint is_transactional=False):
    """One record batch v2 (bytes) holding ``values`` with their keys, timestamps and headers."""
    cdef int codec = codec_of(compression)
    cdef _HeaderTable pins = _HeaderTable()
    cdef Py_ssize_t n, i, total, body
    cdef PyObject **vitems
    cdef PyObject **kitems = NULL
    cdef PyObject **titems = NULL
    cdef PyObject **hitems = NULL
    cdef _Rec *recs
    cdef _Rec *r
    cdef int64_t base_ts, max_ts
    cdef BatchParams bp
    cdef unsigned char *w
    cdef bytes raw_obj = None
    cdef unsigned char *raw
    level = check_level(codec, compression_level)
    bp.attributes = _attributes(codec, timestamp_type, is_transactional)
    if default_timestamp == -1:
        default_timestamp = now_ms()
    elif default_timestamp < -1:
        raise InvalidTimestampError(f"invalid negative timestamp {default_timestamp}")

    vseq = PySequence_Fast(values, "values must be a sequence")
    n = PySequence_Fast_GET_SIZE(vseq)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    if n > KL_INT32_MAX:
        raise RecordTooLargeError(f"{n} records do not fit one batch")
    vitems = PySequence_Fast_ITEMS(vseq)
    if keys is not None:
        kseq = PySequence_Fast(keys, "keys must be a sequence")
        if PySequence_Fast_GET_SIZE(kseq) != n:
            raise ValueError(f"{PySequence_Fast_GET_SIZE(kseq)} keys for {n} values")
        kitems = PySequence_Fast_ITEMS(kseq)
    if timestamps is not None:
        tseq = PySequence_Fast(timestamps, "timestamps must be a sequence")
        if PySequence_Fast_GET_SIZE(tseq) != n:
            raise ValueError(f"{PySequence_Fast_GET_SIZE(tseq)} timestamps for {n} values")
        titems = PySequence_Fast_ITEMS(tseq)
    if headers is not None:
        hseq = PySequence_Fast(headers, "headers must be a sequence")
        if PySequence_Fast_GET_SIZE(hseq) != n:
            raise ValueError(f"{PySequence_Fast_GET_SIZE(hseq)} header lists for {n} values")
        hitems = PySequence_Fast_ITEMS(hseq)

    recs = <_Rec *>malloc(n * sizeof(_Rec))
    if recs == NULL:
        raise MemoryError()
    try:
        # Pass 1: pin the byte strings, size every record.
        for i in range(n):
            r = &recs[i]
            pins.slice(<object>vitems[i], &r.value, "a value")
            if kitems != NULL:
                pins.slice(<object>kitems[i], &r.key, "a key")
            else:
                r.key.p = NULL
                r.key.n = -1
            r.timestamp = _timestamp_of(<object>titems[i], default_timestamp) if titems != NULL \
                else default_timestamp
            r.first_header = pins.nh
            if hitems != NULL and <object>hitems[i] is not None:
                r.header_bytes = pins.add(<object>hitems[i], &r.header_count)
            else:
                r.header_bytes = 1
                r.header_count = 0
        base_ts = recs[0].timestamp
        max_ts = base_ts
        total = KL_RECORD_BATCH_OVERHEAD
        for i in range(n):
            r = &recs[i]
            check_len(r.key.n, "a key")
            check_len(r.value.n, "a value")
            if r.timestamp > max_ts:
                max_ts = r.timestamp
            body = body_size(r.timestamp - base_ts, <int32_t>i, r.key, r.value, r.header_bytes)
            check_len(body, "a record")
            r.body = <int32_t>body
            total += kl_varint_size(r.body) + body
            check_len(total - KL_LOG_OVERHEAD, "the batch")
        # Pass 2: write. Uncompressed, the records go straight into the bytes object returned.
        if codec == KL_CODEC_NONE:
            raw_obj = PyBytes_FromStringAndSize(NULL, total)
            raw = <unsigned char *>PyBytes_AS_STRING(raw_obj)
        else:
            raw = <unsigned char *>malloc(total)
            if raw == NULL:
                raise MemoryError()
        try:
            if total >= KL_NOGIL_BYTES:
                with nogil:
                    _write_records(raw, total, recs, n, base_ts, pins.hs)
            else:
                _write_records(raw, total, recs, n, base_ts, pins.hs)
            bp.base_offset = base_offset
            bp.partition_leader_epoch = partition_leader_epoch
            bp.count = <int32_t>n
            bp.base_timestamp = base_ts
            bp.max_timestamp = max_ts
            bp.producer_id = producer_id
            bp.producer_epoch = <int16_t>producer_epoch
            bp.base_sequence = base_sequence
            return _seal(raw_obj, raw, total, codec, level, &bp)
        finally:
            if raw_obj is None:
                free(raw)
    finally:
        free(recs)


cdef int _get_buffer(object o, Py_buffer *view, Slice *s, str what) except -1:
    try:
        PyObject_GetBuffer(o, view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like or None, not {type(o).__name__}") from None
    s.p = <const unsigned char *>view.buf
    s.n = view.len
    return 0


cdef class BatchBuilder:
    """Accumulates records one at a time into one record batch v2 (the single-record ``Log.append`` path).

    Records are encoded into an internal C buffer as they are appended; ``build()`` adds the header (and compresses).
    Not thread-safe: one builder belongs to one writer.
    """

    def __cinit__(self):
        self.max_batch_bytes = KL_INT32_MAX
        self.target_bytes = 16384
        self._cap = 4096
        self._buf = <unsigned char *>malloc(self._cap)
        if self._buf == NULL:
            raise MemoryError()
        self._len = KL_RECORD_BATCH_OVERHEAD
        self._first_ts = -1
        self._max_ts = -1

    def __dealloc__(self):
        free(self._buf)

    def __init__(self, compression=0, compression_level=None, int timestamp_type=0, int64_t producer_id=-1,
                 int producer_epoch=-1, int32_t base_sequence=-1, bint is_transactional=False):
        self._codec = codec_of(compression)
        self._level = check_level(self._codec, compression_level)
        self._attributes = _attributes(self._codec, timestamp_type, is_transactional)
        self._producer_id = producer_id
        self._producer_epoch = <int16_t>producer_epoch
        self._base_sequence = base_sequence

    cdef int _reserve(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t cap = self._cap
        cdef unsigned char *grown
        while cap - self._len < extra:
            cap *= 2
        grown = <unsigned char *>realloc(self._buf, cap)
        if grown == NULL:
            raise MemoryError()
        self._buf = grown
        self._cap = cap
        return 0

    def append(self, value, key=None, int64_t timestamp=-1, headers=None):
        """Encode one record; returns its offset delta. timestamp -1 = now (ms)."""
        return self._append(value, key, timestamp, headers)

    def stage(self, value, key=None, int64_t timestamp=-1, headers=None):
        """The Log's staged-append fast path: encode one record and return its absolute offset
        (``base_offset`` + delta), or -1 without encoding it when it would push a non-empty batch past
        ``max_batch_bytes`` (write the batch, then stage again). A record that alone exceeds it raises
        RecordTooLargeError. ``full`` tells when the batch reached ``target_bytes``."""
        cdef int64_t delta
        if self._closed:
            raise LogClosedError("the log was closed")
        delta = self._append(value, key, timestamp, headers)
        return -1 if delta < 0 else self.base_offset + delta

    @property
    def full(self):
        """True once the encoded batch reached ``target_bytes`` (time to write it)."""
        return self._len >= self.target_bytes

    cdef int64_t _append(self, value, key, int64_t timestamp, headers) except -2:
        cdef Py_buffer kv, vv
        cdef Slice k, v
        cdef Py_ssize_t body, header_bytes = 1, need
        cdef int32_t header_count = 0
        cdef _HeaderTable table = None
        cdef const Slice *hs = NULL
        cdef int64_t first_ts
        if timestamp == -1:
            timestamp = now_ms()
        elif timestamp < -1:
            raise InvalidTimestampError(f"invalid negative timestamp {timestamp}")
        if self._count == KL_INT32_MAX:
            raise RecordTooLargeError("a record batch holds at most 2**31 - 1 records")
        memset(&kv, 0, sizeof(Py_buffer))    # PyBuffer_Release of an unfilled (obj NULL) view is a no-op
        memset(&vv, 0, sizeof(Py_buffer))
        try:
            if PyBytes_CheckExact(value):
                v.p = <const unsigned char *>PyBytes_AS_STRING(value)
                v.n = PyBytes_GET_SIZE(value)
            elif value is None:
                v.p = NULL
                v.n = -1
            else:
                _get_buffer(value, &vv, &v, "a value")
            if key is None:
                k.p = NULL
                k.n = -1
            elif PyBytes_CheckExact(key):
                k.p = <const unsigned char *>PyBytes_AS_STRING(key)
                k.n = PyBytes_GET_SIZE(key)
            else:
                _get_buffer(key, &kv, &k, "a key")
            check_len(k.n, "a key")
            check_len(v.n, "a value")
            if headers is not None:
                table = _HeaderTable()
                header_bytes = table.add(headers, &header_count)
                hs = table.hs
            first_ts = self._first_ts if self._count else timestamp
            body = body_size(timestamp - first_ts, self._count, k, v, header_bytes)
            need = kl_varint_size(<int32_t>min(body, KL_INT32_MAX)) + body
            check_len(self._len + need - KL_LOG_OVERHEAD, "the batch")
            if self._len + need > self.max_batch_bytes:
                if self._count:
                    return -1
                raise RecordTooLargeError(f"a record of {need} encoded bytes makes a batch of "
                                          f"{self._len + need} bytes, above max.message.bytes="
                                          f"{self.max_batch_bytes}")
            if self._cap - self._len < need:
                self._reserve(need)
            write_record(self._buf + self._len, <int32_t>body, timestamp - first_ts, self._count, k, v,
                         hs, header_count)
        finally:
            PyBuffer_Release(&kv)
            PyBuffer_Release(&vv)
        self._len += need
        self._first_ts = first_ts
        if self._count == 0 or timestamp > self._max_ts:
            self._max_ts = timestamp
        self._count += 1
        return self._count - 1

    @property
    def count(self):
        """Records appended since the last reset."""
        return self._count

    @property
    def size_in_bytes(self):
        """Exact size of the batch build() would return without compression (header included)."""
        return self._len

    @property
    def first_timestamp(self):
        """Timestamp of the first record (the batch's BaseTimestamp), -1 when empty."""
        return self._first_ts if self._count else -1

    @property
    def max_timestamp(self):
        """Largest record timestamp, -1 when empty."""
        return self._max_ts if self._count else -1

    @property
    def compression(self):
        return self._codec

    cdef int _params(self, BatchParams *bp, int64_t base_offset, int32_t partition_leader_epoch) except -1:
        if self._count == 0:
            raise ValueError("a record batch needs at least one record")
        bp.base_offset = base_offset
        bp.partition_leader_epoch = partition_leader_epoch
        bp.attributes = self._attributes
        bp.count = self._count
        bp.base_timestamp = self._first_ts
        bp.max_timestamp = self._max_ts
        bp.producer_id = self._producer_id
        bp.producer_epoch = self._producer_epoch
        bp.base_sequence = self._base_sequence
        return 0

    def build(self, int64_t base_offset=0, int32_t partition_leader_epoch=-1):
        """The batch (bytes) of the records appended so far; the builder keeps them until reset()."""
        cdef BatchParams bp
        self._params(&bp, base_offset, partition_leader_epoch)
        return _seal(None, self._buf, self._len, self._codec, self._level, &bp)

    # Log.append's fast path stages records without a Python lock: stage(), take(), reserve() and close() each
    # run entirely under the GIL (no GIL release, no Python callbacks once the builder's state is touched), so
    # each is atomic with respect to the others. kafkalog targets GIL builds of CPython (3.11).

    def take(self):
        """Atomically move the staged records into a new builder (returned) and continue at base_offset + count;
        the Log builds and writes the returned one under its lock."""
        cdef BatchBuilder out = BatchBuilder.__new__(BatchBuilder)
        cdef unsigned char *buf = out._buf
        cdef Py_ssize_t cap = out._cap
        out._buf, out._cap, out._len, out._count = self._buf, self._cap, self._len, self._count
        out._first_ts, out._max_ts = self._first_ts, self._max_ts
        out._codec, out._level, out._attributes = self._codec, self._level, self._attributes
        out._producer_id, out._producer_epoch, out._base_sequence = (self._producer_id, self._producer_epoch,
                                                                     self._base_sequence)
        out.base_offset, out.max_batch_bytes, out.target_bytes = (self.base_offset, self.max_batch_bytes,
                                                                  self.target_bytes)
        self._buf, self._cap = buf, cap
        self.base_offset += self._count
        self._len = KL_RECORD_BATCH_OVERHEAD
        self._count = 0
        self._first_ts = -1
        self._max_ts = -1
        return out

    def reserve(self, int64_t n):
        """Atomically claim offsets [base_offset, base_offset + n) for a batch written past the staged path;
        returns the first, or -1 when records are staged (take() them first)."""
        cdef int64_t first = self.base_offset
        if self._count:
            return -1
        self.base_offset += n
        return first

    def close(self):
        """From now on stage() raises LogClosedError (records staged before stay for a last take())."""
        self._closed = True

    def reset(self):
        """Drop the records (the buffer's capacity is kept for the next batch)."""
        self._len = KL_RECORD_BATCH_OVERHEAD
        self._count = 0
        self._first_ts = -1
        self._max_ts = -1

    def __len__(self):
        return self._count

    def __repr__(self):
        return (f"BatchBuilder(count={self._count}, size_in_bytes={self._len}, "
                f"compression={_CODEC_NAMES[self._codec]!r})")


# ---------------------------------------------------------------------------------------------------------------
# Reading: records, batches

@cython.freelist(512)
cdef class Record:
    """One record of a batch: offset, timestamp, timestamp_type, key, value (bytes or None) and headers."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly int timestamp_type
    cdef readonly object key
    cdef readonly object value
    cdef list _headers   # None until asked for when the record has no headers (most records: no allocation)

    def __init__(self, int64_t offset, int64_t timestamp, int timestamp_type=0, key=None, value=None,
                 headers=None):
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self._headers = [] if headers is None else list(headers)

    @property
    def headers(self):
        """list of (str key, bytes-or-None value)."""
        if self._headers is None:
            self._headers = []
        return self._headers

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        cdef Record o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp and self.timestamp_type == o.timestamp_type
                and self.key == o.key and self.value == o.value and self.headers == o.headers)

    __hash__ = None

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, timestamp_type={self.timestamp_type}, "
                f"key={self.key!r}, value={self.value!r}, headers={self.headers!r})")


cdef inline object _bytes_or_none(const unsigned char *p, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char *>p, n)


cdef list headers_list(const unsigned char *p, int32_t count):
    cdef list out = []
    cdef const unsigned char *k
    cdef const unsigned char *v
    cdef int32_t kn = 0, vn = 0, i
    for i in range(count):
        p = next_header(p, &k, &kn, &v, &vn)
        # Java decodes header keys with replacement characters; so do we.
        out.append((PyUnicode_DecodeUTF8(<const char *>k, kn, "replace"), _bytes_or_none(v, vn)))
    return out


cdef class RecordBatch:
    """A view of one record batch v2 inside a buffer (bytes, bytearray, memoryview, mmap, numpy array).

    The view keeps the buffer exported (a bytearray cannot be resized, an mmap not closed) while it lives.
    Reading properties is thread-safe; the batch bytes must not be modified while records are iterated.
    """
    cdef object _mv
    cdef const unsigned char *_p
    cdef Py_ssize_t _pos
    cdef BatchHeader _h

    def __init__(self, buffer, Py_ssize_t offset=0):
        cdef const unsigned char *base
        cdef Py_ssize_t n
        cdef int rc
        mv = read_view(buffer, &base, &n)
        if offset < 0 or offset > n:
            raise ValueError(f"position {offset} is outside the buffer (0..{n})")
        rc = parse_batch_header(base + offset, n - offset, &self._h)
        if rc != KL_BATCH_OK:
            raise batch_error(rc, base + offset, n - offset, offset, &self._h)
        self._mv = mv
        self._p = base + offset
        self._pos = offset

    @property
    def position(self):
        """Byte position of the batch in its buffer."""
        return self._pos

    @property
    def base_offset(self):
        return self._h.base_offset

    @property
    def last_offset(self):
        return self._h.base_offset + self._h.last_offset_delta

    @property
    def next_offset(self):
        return self._h.base_offset + self._h.last_offset_delta + 1

    @property
    def batch_length(self):
        return self._h.batch_length

    @property
    def size_in_bytes(self):
        return <Py_ssize_t>self._h.batch_length + KL_LOG_OVERHEAD

    @property
    def partition_leader_epoch(self):
        return self._h.partition_leader_epoch

    @property
    def magic(self):
        return self._h.magic

    @property
    def crc(self):
        return self._h.crc

    @property
    def attributes(self):
        return self._h.attributes

    @property
    def compression(self):
        return self._h.attributes & KL_COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self):
        return 1 if self._h.attributes & KL_TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self):
        return bool(self._h.attributes & KL_TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self):
        return bool(self._h.attributes & KL_CONTROL_FLAG_MASK)

    @property
    def last_offset_delta(self):
        return self._h.last_offset_delta

    @property
    def base_timestamp(self):
        return self._h.base_timestamp

    @property
    def max_timestamp(self):
        return self._h.max_timestamp

    @property
    def producer_id(self):
        return self._h.producer_id

    @property
    def producer_epoch(self):
        return self._h.producer_epoch

    @property
    def base_sequence(self):
        return self._h.base_sequence

    @property
    def record_count(self):
        return self._h.records_count

    def __len__(self):
        return self._h.records_count

    cdef int _check(self) noexcept:
        cdef BatchHeader h
        cdef int rc
        cdef Py_ssize_t size = <Py_ssize_t>self._h.batch_length + KL_LOG_OVERHEAD
        if size >= KL_NOGIL_BYTES:
            with nogil:
                rc = check_batch(self._p, size, &h)
        else:
            rc = check_batch(self._p, size, &h)
        return rc

    def is_valid(self):
        """CRC and structure (count, codec, record framing when uncompressed); never decompresses."""
        return self._check() == KL_BATCH_OK

    def validate(self, *, bint decompress=False):
        """Raise CorruptRecordError (CRC, length) or InvalidRecordError (count, framing) naming the problem.

        With decompress=True a compressed batch's records are decompressed and their framing checked too, as they
        are decompressed (nothing kept but one record cut by a chunk boundary), within the readers' bound on a
        batch's plaintext (RecordTooLargeError past it). Offset deltas may have gaps (compaction leaves them);
        check_for_append is the stricter check of a produced batch.
        """
        cdef int rc = self._check()
        cdef WalkState w
        if rc != KL_BATCH_OK:
            raise batch_error(rc, self._p, self.size_in_bytes, self._pos, &self._h)
        if decompress and self.compression != KL_CODEC_NONE:
            rc = walk_compressed(self.compression, self._p + KL_RECORD_BATCH_OVERHEAD,
                                 self.size_in_bytes - KL_RECORD_BATCH_OVERHEAD, &self._h, self._pos, &w)
            if rc != REC_OK:
                raise walk_error(rc, &w, &self._h, self._pos, None, 0)

    def check_for_append(self, Py_ssize_t max_message_bytes):
        """Validate a batch a producer sent, in one pass over its records, and return (min_ts, max_ts) of its
        records: min_ts the smallest non-negative record timestamp (-1 when none has one), max_ts the largest.

        Checks the CRC and header fields; RecordsCount = LastOffsetDelta + 1 and every record's offset delta equal
        to its index (0, 1, ... LastOffsetDelta: InvalidRecordError, Kafka's INVALID_RECORD); the framing of every
        record; the record timestamps are computed (BaseTimestamp + delta), the header's MaxTimestamp is not
        trusted (the caller compares: Log.append_records rewrites a CreateTime header that differs, as Kafka's
        LogValidator does). Raises the errors of validate() otherwise.

        A compressed batch is decompressed in steps of 256 KiB, each walked at once and dropped: the memory it
        takes is one step plus the one record a step boundary cuts, whatever the batch claims. Its plaintext may
        be at most max(64 MiB, min(1 GiB, RecordsCount * max_message_bytes)) bytes and one record at most
        max(max_message_bytes, 16 MiB) (RecordTooLargeError, Kafka's MESSAGE_TOO_LARGE, naming the codec, the
        limit and the batch). Kafka itself bounds only the compressed size; clients bound each record's
        uncompressed size by max.request.size (1 MiB by default), so these bounds pass every batch a client with
        sane settings writes while a bomb is refused after one step. A zstd frame that needs a window above 8 MiB
        (levels 20-22 of a streaming compressor) is refused (InvalidRecordError). Snappy's declared length is checked
        against what its block can hold and the bound before anything is allocated; lz4 and zstd content sizes are
        never read.
        """
        cdef const BatchHeader *h = &self._h
        cdef Py_ssize_t size = <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD, used = 0
        cdef int codec = h.attributes & KL_COMPRESSION_CODEC_MASK
        cdef bint counted = <int64_t>h.records_count == <int64_t>h.last_offset_delta + 1
        cdef bint walked = False
        cdef int rc, wrc = REC_OK
        cdef WalkState w
        if size >= KL_NOGIL_BYTES:
            with nogil:     # CRC and the walk of plain records in one GIL-free stretch
                rc = check_fields(self._p, h)
                if rc == KL_BATCH_OK and counted and codec == KL_CODEC_NONE:
                    walk_init(&w, h, True, PY_SSIZE_T_MAX)
                    wrc = walk_part(&w, self._p + KL_RECORD_BATCH_OVERHEAD, self._p + size, True, &used)
                    walked = True
        else:
            rc = check_fields(self._p, h)
        if rc != KL_BATCH_OK:
            raise batch_error(rc, self._p, size, self._pos, h)
        if not counted:
            raise InvalidRecordError(f"{batch_where(h, self._pos)} declares {h.records_count} records with last offset "
                                     f"delta {h.last_offset_delta}: a produced batch has one record per offset")
        if codec == KL_CODEC_NONE:
            if not walked:
                walk_init(&w, h, True, PY_SSIZE_T_MAX)
                wrc = walk_part(&w, self._p + KL_RECORD_BATCH_OVERHEAD, self._p + size, True, &used)
            if wrc != REC_OK:
                raise walk_error(wrc, &w, h, self._pos, None, 0)
        else:
            rc = walk_compressed_for_append(codec, self._p + KL_RECORD_BATCH_OVERHEAD, size - KL_RECORD_BATCH_OVERHEAD,
                                            h, self._pos, max_message_bytes, &w)
            if rc != REC_OK:
                raise walk_error(rc, &w, h, self._pos, _CODEC_NAMES[codec], max_message_bytes)
        return (<int64_t>w.min_ts if <int64_t>w.min_ts >= 0 else -1), (w.max_ts if w.index else -1)

    cdef int _plaintext(self, Pins pins, Slice *s) except -1:
        """The records section, decompressed (and pinned) if needed."""
        cdef Py_ssize_t n = <Py_ssize_t>self._h.batch_length + KL_LOG_OVERHEAD - KL_RECORD_BATCH_OVERHEAD
        cdef int codec = self._h.attributes & KL_COMPRESSION_CODEC_MASK
        if codec == KL_CODEC_NONE:
            s.p = self._p + KL_RECORD_BATCH_OVERHEAD
            s.n = n
            return 0
        return pins.pin(decompress(codec, self._p + KL_RECORD_BATCH_OVERHEAD, n, &self._h, self._pos), s)

    def records(self):
        """Iterate the records lazily: decompressed once when iteration starts, then decoded one by one."""
        return _RecordIterator(self)

    def __iter__(self):
        return _RecordIterator(self)

    def tobytes(self):
        """A copy of the batch's bytes."""
        return PyBytes_FromStringAndSize(<const char *>self._p, self.size_in_bytes)

    def __repr__(self):
        return (f"RecordBatch(base_offset={self._h.base_offset}, last_offset={self.last_offset}, "
                f"record_count={self._h.records_count}, compression={_CODEC_NAMES.get(self.compression)!r}, "
                f"size_in_bytes={self.size_in_bytes}, position={self._pos})")


cdef Record _record_from_view(const BatchHeader *h, bint log_append_time, RecordView *r):
    """A Record of the decoded record r of the batch whose header is h."""
    cdef Record rec = Record.__new__(Record)
    rec.offset = h.base_offset + r.offset_delta
    if log_append_time:
        rec.timestamp = h.max_timestamp
        rec.timestamp_type = KL_TIMESTAMP_LOG_APPEND_TIME
    else:
        rec.timestamp = h.base_timestamp + r.ts_delta
    rec.key = _bytes_or_none(r.key, r.key_len)
    rec.value = _bytes_or_none(r.value, r.value_len)
    if r.header_count:
        rec._headers = headers_list(r.headers, r.header_count)
    return rec


@cython.final
cdef class _RecordIterator:
    cdef RecordBatch batch
    cdef Pins pins
    cdef const unsigned char *p
    cdef const unsigned char *end
    cdef int32_t index
    cdef bint started, log_append_time

    def __cinit__(self, RecordBatch batch):
        self.batch = batch
        self.log_append_time = (batch._h.attributes & KL_TIMESTAMP_TYPE_MASK) != 0

    def __iter__(self):
        return self

    def __next__(self):
        rec = self._next()
        if rec is None:
            raise StopIteration
        return rec

    cdef int _step(self, RecordView *r) except -1:
        """Decode the next record into r (pointers into the batch's plaintext, kept alive by this iterator): 1, or 0
        after the last one. No Python object is made: RecordStream's raw takers build what they need from r."""
        cdef int rc
        cdef const BatchHeader *h = &self.batch._h
        cdef Slice s
        if not self.started:
            self.pins = Pins()
            self.batch._plaintext(self.pins, &s)
            self.p = s.p
            self.end = s.p + s.n
            self.started = True
            if h.records_count == 0 and self.p != self.end:
                raise InvalidRecordError(f"{batch_where(h, self.batch._pos)}: {record_message(REC_LEFTOVER, 0, 0)}")
        if self.index >= h.records_count:
            return 0
        rc = read_record(self.p, self.end, r)
        if rc == REC_OK:
            self.p = r.end
            self.index += 1
            # Kafka checks for leftovers as soon as the last declared record is read.
            if self.index == h.records_count and self.p != self.end:
                rc = REC_LEFTOVER
        if rc != REC_OK:
            self.index = h.records_count
            raise InvalidRecordError(f"{batch_where(h, self.batch._pos)}: "
                                     f"{record_message(rc, self.index, h.records_count)}")
        return 1

    cdef Record _next(self):
        """The next record, or None after the last one (no StopIteration: RecordStream calls this directly)."""
        cdef RecordView r
        cdef const BatchHeader *h = &self.batch._h
        if not self._step(&r):
            return None
        return _record_from_view(h, self.log_append_time, &r)


@cython.final
cdef class _BatchIterator:
    cdef object mv
    cdef const unsigned char *base
    cdef Py_ssize_t pos, end

    def __iter__(self):
        return self

    def __next__(self):
        cdef BatchHeader h
        cdef RecordBatch b
        cdef int rc = parse_batch_header(self.base + self.pos, self.end - self.pos, &h)
        if rc == KL_BATCH_INCOMPLETE:
            self.pos = self.end     # a partial batch can only be the tail: stop there for good
            raise StopIteration
        if rc != KL_BATCH_OK:
            raise batch_error(rc, self.base + self.pos, self.end - self.pos, self.pos, &h)
        b = RecordBatch.__new__(RecordBatch)
        b._mv = self.mv
        b._p = self.base + self.pos
        b._pos = self.pos
        b._h = h
        self.pos += <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
        return b


def iter_batches(buffer, Py_ssize_t start=0, end=None):
    """Shallow iteration over the consecutive batches in buffer[start:end] (no CRC check).

    Stops silently at an incomplete batch at the tail; raises CorruptRecordError at an illegal length or magic.
    """
    cdef _BatchIterator it = _BatchIterator.__new__(_BatchIterator)
    cdef const unsigned char *base
    cdef Py_ssize_t n
    it.mv = read_view(buffer, &base, &n)
    it.base = base
    it.pos = start
    it.end = range_end(end, start, n)
    return it


@cython.final
cdef class RecordStream:
    """Records of consecutive batches with offsets in [min_offset, max_offset), each batch CRC-checked before its
    first record; the whole loop runs in C (see iter_records)."""
    cdef _BatchIterator batches
    cdef _RecordIterator current
    cdef int64_t lo, hi
    cdef bint filter_each
    cdef object source   # iterator of (buffer, min_offset, max_offset) chunks, or None for a single buffer

    def __iter__(self):
        return self

    def __next__(self):
        cdef Record rec = self._take()
        if rec is None:
            raise StopIteration
        return rec

    cdef Record _take(self):
        """The next record, or None at the end of the stream."""
        cdef RecordView r
        cdef const BatchHeader *h
        if not self._take_raw(&r):
            return None
        h = &self.current.batch._h
        return _record_from_view(h, self.current.log_append_time, &r)

    cdef int _take_raw(self, RecordView *r) except -1:
        """The next record as a view into its batch (self.current holds the batch and its header): 1, or 0 at the
        end of the stream. The record's pointers stay valid until the next call."""
        cdef RecordBatch b
        cdef int64_t last, off
        while True:
            if self.current is not None:
                if self.current._step(r):
                    if not self.filter_each:
                        return 1
                    off = self.current.batch._h.base_offset + r.offset_delta
                    if off >= self.hi:
                        self.current = None
                        return 0
                    if off >= self.lo:
                        return 1
                    continue
                self.current = None
            b = next(self.batches, None) if self.batches is not None else None
            if b is None:
                if self.source is None:
                    return 0
                chunk = next(self.source, None)
                if chunk is None:
                    return 0
                buffer, self.lo, self.hi = chunk
                self.batches = iter_batches(buffer)
                continue
            b.validate()
            last = b._h.base_offset + b._h.last_offset_delta
            if last < self.lo:
                continue
            if b._h.base_offset >= self.hi:
                return 0
            if b._h.attributes & KL_CONTROL_FLAG_MASK:
                continue  # a transaction marker (a Kafka log dir): not a record, as Kafka's consumers skip it
            self.filter_each = b._h.base_offset < self.lo or last >= self.hi
            self.current = _RecordIterator(b)


cdef extern from "Python.h":
    # the raw forms for take_consumer_records: new references handed straight to a tuple's slot
    PyObject *_long "PyLong_FromLongLong"(long long v) noexcept
    PyObject *_bytes "PyBytes_FromStringAndSize"(const char *p, Py_ssize_t n) noexcept


cdef extern from *:
    """
    /* A tuple of a tuple subclass with n NULL slots, not tracked by the cycle collector (PyType_GenericAlloc would
       zero more and track it) */
    static inline PyObject *kl_new_tuple(PyObject *tp, Py_ssize_t n) {
        PyObject *t = (PyObject *)_PyObject_GC_NewVar((PyTypeObject *)tp, n);
        if (t != NULL) memset(((PyTupleObject *)t)->ob_item, 0, (size_t)n * sizeof(PyObject *));
        return t;
    }
    /* Slot i of a tuple being filled (new, or refilled: only its filler references it) takes v, a borrowed
       reference (kl_put) or a new one (kl_own); what it held goes. A refilled record's items are ints, bytes, str,
       None and lists of (str, bytes) pairs, whose deallocation runs no Python code; most of its slots (topic,
       partition, sizes...) already hold the object they get again, which then costs nothing. */
    static inline void kl_put(PyObject *t, Py_ssize_t i, PyObject *v) {
        PyObject **slot = &((PyTupleObject *)t)->ob_item[i];
        if (*slot != v) { Py_INCREF(v); Py_XSETREF(*slot, v); }
    }
    static inline void kl_own(PyObject *t, Py_ssize_t i, PyObject *v) {
        Py_XSETREF(((PyTupleObject *)t)->ob_item[i], v);
    }
    /* Slot i of a tuple being refilled takes the int v (kl_put_i64) or a copy of n bytes at p, or None when n < 0
       (kl_put_bytes). When the slot holds an exact int of v's digit count, or exact bytes of length n > 1, that
       only the tuple references (reference count 1: the app dropped it, nobody can see it), its value is
       rewritten in place, as CPython's own in-place concatenation reuses a string only it holds; else a new object
       is made (NULL: allocation failed, the slot is left as it was). Saves an allocation and a deallocation per
       field of a refilled record. The int layout is CPython 3.11's (30-bit digits, ob_size = +digit count); on
       other versions the in-place path is compiled out. A bytes object's cached hash is reset. */
    static inline int kl_put_i64(PyObject *t, Py_ssize_t i, long long v) {
        PyObject **slot = &((PyTupleObject *)t)->ob_item[i];
        PyObject *o = *slot;
    #if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
        if (o != NULL && v > 256 && Py_REFCNT(o) == 1 && PyLong_CheckExact(o)) {
            unsigned long long u = (unsigned long long)v;
            Py_ssize_t nd = 0;
            digit d[3];
            while (u) { d[nd++] = (digit)(u & PyLong_MASK); u >>= PyLong_SHIFT; }
            if (Py_SIZE(o) == nd) {
                for (Py_ssize_t k = 0; k < nd; k++) ((PyLongObject *)o)->ob_digit[k] = d[k];
                return 0;
            }
        }
    #endif
        PyObject *v2 = PyLong_FromLongLong(v);
        if (v2 == NULL) return -1;
        Py_XSETREF(*slot, v2);
        return 0;
    }
    static inline int kl_put_bytes(PyObject *t, Py_ssize_t i, const char *p, Py_ssize_t n) {
        PyObject **slot = &((PyTupleObject *)t)->ob_item[i];
        PyObject *o = *slot;
        PyObject *v2;
        if (n < 0) {
            if (o != Py_None) { Py_INCREF(Py_None); Py_XSETREF(*slot, Py_None); }
            return 0;
        }
        if (n > 1 && o != NULL && Py_REFCNT(o) == 1 && PyBytes_CheckExact(o) && PyBytes_GET_SIZE(o) == n) {
            memcpy(PyBytes_AS_STRING(o), p, (size_t)n);
    #if PY_VERSION_HEX < 0x030D0000
    #pragma GCC diagnostic push
    #pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            ((PyBytesObject *)o)->ob_shash = -1;  /* 3.11-3.12 cache a bytes object's hash here */
    #pragma GCC diagnostic pop
    #endif
            return 0;
        }
        v2 = PyBytes_FromStringAndSize(p, n);
        if (v2 == NULL) return -1;
        Py_XSETREF(*slot, v2);
        return 0;
    }
    """
    object kl_new_tuple(object tp, Py_ssize_t n)
    void kl_put(object t, Py_ssize_t i, object v) noexcept
    void _kl_own "kl_own"(object t, Py_ssize_t i, PyObject *v) noexcept
    int kl_put_i64(object t, Py_ssize_t i, long long v) noexcept
    int kl_put_bytes(object t, Py_ssize_t i, const char *p, Py_ssize_t n) noexcept
    PyObject *PyList_GET_ITEM(object l, Py_ssize_t i) noexcept
    Py_ssize_t _refcnt "Py_REFCNT"(PyObject *o) noexcept
    PyObject *_type "(PyObject *)Py_TYPE"(PyObject *o) noexcept


cdef inline int _own(object t, Py_ssize_t i, PyObject *o) except -1:
    """Hand a new reference (NULL: allocation failed) to slot i of the tuple being filled."""
    if o == NULL:
        raise MemoryError()
    _kl_own(t, i, o)
    return 0


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    object PyDescr_NewMember(PyTypeObject *t, PyMemberDef *m)
    int T_OBJECT_EX
    int READONLY


cdef extern from *:
    Py_ssize_t KL_TUPLE_ITEMS "offsetof(PyTupleObject, ob_item)"


_member_names = []  # the field names' bytes that member descriptors point at: alive for the process's life


def fields_as_members(type cls):
    """Give a NamedTuple class a member descriptor per field, reading the tuple's item in place, instead of its
    _tuplegetter. CPython 3.11 turns a read of a member descriptor into one load (LOAD_ATTR_SLOT, specialized),
    where a _tuplegetter goes through the generic attribute lookup: ``record.value`` about 3x faster, for every
    record an app reads. Sound for NamedTuples only: an instance always has len(_fields) items (the class's
    __new__ and _make refuse any other count). Idempotent."""
    cdef PyMemberDef *defs
    cdef Py_ssize_t i, n
    fields = getattr(cls, "_fields", None)
    if not issubclass(cls, tuple) or not isinstance(fields, tuple) or cls.__dictoffset__ or cls.__weakrefoffset__:
        raise TypeError(f"{cls!r} is not a NamedTuple class without __dict__ and __weakref__")
    n = len(fields)
    if n == 0 or all(type(cls.__dict__.get(f)).__name__ == "member_descriptor" for f in fields):
        return
    defs = <PyMemberDef *>PyMem_Malloc(n * sizeof(PyMemberDef))  # never freed: the class keeps the descriptors
    if defs == NULL:
        raise MemoryError()
    for i in range(n):
        name = (<str>fields[i]).encode()
        _member_names.append(name)
        defs[i].name = <const char *>name
        defs[i].type = T_OBJECT_EX
        defs[i].offset = KL_TUPLE_ITEMS + i * <Py_ssize_t>sizeof(PyObject *)
        defs[i].flags = READONLY
        defs[i].doc = NULL
    for i in range(n):
        setattr(cls, fields[i], PyDescr_NewMember(<PyTypeObject *>cls, &defs[i]))


# records with more key and value bytes than this are not pooled: a pool then keeps at most about 2 x max.poll.records
# x 2 KiB of records alive after the app dropped them, and copying a large value costs more than its allocation
cdef Py_ssize_t _POOLED_BYTES = 2048


@cython.final
cdef class RecordPool:
    """The records take_consumer_records returned in its last two calls with this pool: a record that only the
    pool still references (the app dropped it) is refilled for a later record instead of being freed and
    allocated again, as CPython's zip() and enumerate() reuse a result tuple nobody else holds (nobody can see the
    change). Two calls, not one: an app's loop variable usually still holds the previous poll's list while it
    polls again. Each record is referenced by the pool once at most; large records are not pooled."""
    cdef list prev, prev2
    cdef Py_ssize_t at, at2   # how far reuse() has looked in prev and prev2 since the last rotate()

    def __cinit__(self):
        self.prev = []
        self.prev2 = []

    def __len__(self):
        return len(self.prev) + len(self.prev2)

    cdef inline object _from(self, list src, Py_ssize_t *at, object cls):
        cdef PyObject *cand
        cdef Py_ssize_t i = at[0], n = len(src)
        while i < n:
            cand = PyList_GET_ITEM(src, i)
            i += 1
            if _refcnt(cand) == 1 and _type(cand) == <PyObject *>cls:
                at[0] = i
                t = <object>cand  # two references now: the list's goes away with the None below
                src[i - 1] = None
                return t
        at[0] = n
        return None

    cdef object reuse(self, object cls):
        """A pooled record of type cls that nobody else references, to refill (None when there is none)."""
        t = self._from(self.prev2, &self.at2, cls)
        if t is None:
            t = self._from(self.prev, &self.at, cls)
        return t

    cdef void rotate(self, list fresh) noexcept:
        self.prev2 = self.prev
        self.prev = fresh
        self.at = self.at2 = 0


cdef Py_ssize_t take_made(object stream, list out, Py_ssize_t limit, RecordMaker make, object ctx) except -1:
    cdef RecordStream rs = <RecordStream?>stream
    cdef RecordView r
    cdef Py_ssize_t n = 0
    while n < limit and rs._take_raw(&r):
        out.append(make(&r, &rs.current.batch._h, rs.current.log_append_time, ctx))
        n += 1
    return n


def take_consumer_records(RecordStream stream, list out, Py_ssize_t limit, type cls, object topic,
                          object partition, object leader_epoch, object no_headers=None, RecordPool pool=None):
    """Append up to ``limit`` records of ``stream`` to ``out`` as ``cls`` instances, cls being a 13-field tuple
    subclass with kafka-python's ConsumerRecord layout: (topic, partition, leader_epoch, offset, timestamp,
    timestamp_type, key, value, headers, checksum=None, serialized key, value and header sizes; -1 for None).
    Built in C without calling cls (a namedtuple's __new__ is Python code). Records without headers get
    ``no_headers`` (one shared immutable empty list, say) or, when it is None, a new empty list each. Returns the
    next offset after the last record appended, or -1 when none was. ``pool``: see RecordPool."""
    cdef RecordView r
    cdef list fresh = None
    cdef const BatchHeader *h
    cdef object t, headers
    cdef Py_ssize_t n = 0, hsize
    cdef int64_t off = -1, ts, last_ts = 0
    cdef int ts_type
    cdef object ts_obj = None
    if not issubclass(cls, tuple):
        raise TypeError(f"{cls!r} is not a tuple subclass")
    if pool is not None:
        fresh = []
    # straight from each record's bytes (no Record object in between): a consumer's record costs one tuple, its
    # key and value bytes and two ints
    while n < limit:
        if not stream._take_raw(&r):
            break
        h = &stream.current.batch._h
        off = h.base_offset + r.offset_delta
        if stream.current.log_append_time:
            ts = h.max_timestamp
            ts_type = KL_TIMESTAMP_LOG_APPEND_TIME
        else:
            ts = h.base_timestamp + r.ts_delta
            ts_type = 0
        if r.header_count:
            headers = headers_list(r.headers, r.header_count)
            hsize = 0
            for hk, hv in headers:
                hsize += len((<str>hk).encode()) + (0 if hv is None else len(hv))
        else:
            headers = [] if no_headers is None else no_headers
            hsize = -1
        # allocated untracked, every slot filled below (a failed allocation leaves NULL slots, which the tuple's
        # dealloc skips)
        t = pool.reuse(cls) if pool is not None else None
        if t is None:
            t = kl_new_tuple(cls, 13)
        kl_put(t, 0, topic)
        kl_put(t, 1, partition)
        kl_put(t, 2, leader_epoch)
        if kl_put_i64(t, 3, off) < 0:
            raise MemoryError()
        if ts_obj is not None and ts == last_ts:
            kl_put(t, 4, ts_obj)  # records of one batch often share a millisecond: one int for a run of them
        else:
            if kl_put_i64(t, 4, ts) < 0:
                raise MemoryError()
            ts_obj = <object>PyTuple_GET_ITEM(t, 4)
            last_ts = ts
        kl_put(t, 5, ts_type)
        if (kl_put_bytes(t, 6, <const char *>r.key, r.key_len) < 0
                or kl_put_bytes(t, 7, <const char *>r.value, r.value_len) < 0):
            raise MemoryError()
        kl_put(t, 8, headers)
        kl_put(t, 9, None)
        _own(t, 10, _long(-1 if r.key_len < 0 else r.key_len))
        _own(t, 11, _long(-1 if r.value_len < 0 else r.value_len))
        kl_put(t, 12, hsize)
        # Left untracked by the cycle collector, as CPython untracks tuples of atomic values: every item is a str,
        # int, bytes or None except the headers list (tracked itself; shared and immutable when empty), so the tuple
        # can only be in a cycle if an app puts the record into its own headers. Tracked, each poll's records were
        # promoted through the GC generations and full collections ran again and again (4x slower large polls).
        out.append(t)
        if fresh is not None and r.key_len + r.value_len <= _POOLED_BYTES:
            fresh.append(t)
        n += 1
    if fresh is not None:
        pool.rotate(fresh)
    return off + 1 if n else -1


def iter_records(buffer, Py_ssize_t start=0, end=None, int64_t min_offset=-1,
                 int64_t max_offset=0x7fffffffffffffff):
    """Iterate the records of every batch in buffer[start:end] whose offset is in [min_offset, max_offset),
    validating each batch (CRC, framing) before its first record is returned."""
    cdef RecordStream rs = RecordStream.__new__(RecordStream)
    rs.batches = iter_batches(buffer, start, end)
    rs.lo = min_offset
    rs.hi = max_offset
    return rs


def chain_records(chunks):
    """Like iter_records over each (buffer, min_offset, max_offset) that ``chunks`` yields, in one C-level loop:
    the chunk iterator is only called when a buffer is used up (a Log hands out one view per segment or MiB)."""
    cdef RecordStream rs = RecordStream.__new__(RecordStream)
    rs.source = iter(chunks)
    return rs


def count_records(buffer, Py_ssize_t start=0, end=None):
    """Sum of RecordsCount over the complete batches in buffer[start:end] (headers only, no CRC check)."""
    cdef const unsigned char *base
    cdef Py_ssize_t n, stop, pos = start
    cdef int64_t total = 0
    cdef BatchHeader h
    cdef int rc
    mv = read_view(buffer, &base, &n)
    stop = range_end(end, start, n)
    while True:
        rc = parse_batch_header(base + pos, stop - pos, &h)
        if rc == KL_BATCH_INCOMPLETE:
            return total
        if rc != KL_BATCH_OK:
            raise batch_error(rc, base + pos, stop - pos, pos, &h)
        total += h.records_count
        pos += <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD


def next_offset_after(buffer, int64_t default=-1):
    """Offset after the last complete batch in ``buffer`` (headers only, in C); ``default`` when there is none."""
    cdef const unsigned char *base
    cdef Py_ssize_t n, pos = 0
    cdef BatchHeader h
    cdef int64_t out = default
    mv = read_view(buffer, &base, &n)
    while parse_batch_header(base + pos, n - pos, &h) == KL_BATCH_OK:
        out = h.base_offset + h.last_offset_delta + 1
        pos += <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
    return out


# ---------------------------------------------------------------------------------------------------------------
# In-place rewrites (zero-copy append: only fields the log owns change)

cdef unsigned char *_writable_header(Py_buffer *v, object buf, Py_ssize_t pos, bint whole) except NULL:
    cdef BatchHeader h
    cdef int rc
    PyObject_GetBuffer(buf, v, PyBUF_WRITABLE)
    if pos < 0 or pos > v.len:
        PyBuffer_Release(v)
        raise ValueError(f"position {pos} is outside the buffer (0..{v.len})")
    rc = parse_batch_header(<unsigned char *>v.buf + pos, v.len - pos, &h)
    if rc == KL_BATCH_INCOMPLETE and not whole and v.len - pos >= KL_RECORD_BATCH_OVERHEAD:
        rc = KL_BATCH_OK    # the fields outside the CRC need only the header
    if rc != KL_BATCH_OK:
        err = batch_error(rc, <unsigned char *>v.buf + pos, v.len - pos, pos, &h)
        PyBuffer_Release(v)
        raise err
    return <unsigned char *>v.buf + pos


def set_base_offset(buf, Py_ssize_t pos, int64_t base_offset):
    """Rewrite BaseOffset of the batch at buf[pos] in place (outside the CRC, which stays valid)."""
    cdef Py_buffer v
    kl_store_i64(_writable_header(&v, buf, pos, False) + KL_BASE_OFFSET_OFFSET, base_offset)
    PyBuffer_Release(&v)


def set_partition_leader_epoch(buf, Py_ssize_t pos, int32_t epoch):
    """Rewrite PartitionLeaderEpoch of the batch at buf[pos] in place (outside the CRC, which stays valid)."""
    cdef Py_buffer v
    kl_store_i32(_writable_header(&v, buf, pos, False) + KL_PARTITION_LEADER_EPOCH_OFFSET, epoch)
    PyBuffer_Release(&v)


def set_log_append_time(buf, Py_ssize_t pos, int64_t timestamp):
    """Mark the batch at buf[pos] LogAppendTime with MaxTimestamp = timestamp and recompute its CRC, in place.

    Every record then reads with that timestamp. The existing CRC is not checked first.
    """
    cdef Py_buffer v
    cdef unsigned char *p = _writable_header(&v, buf, pos, True)
    if v.len - pos >= KL_NOGIL_BYTES:
        with nogil:
            stamp_log_append_time(p, v.len - pos, timestamp)
    else:
        stamp_log_append_time(p, v.len - pos, timestamp)
    PyBuffer_Release(&v)


def set_max_timestamp(buf, Py_ssize_t pos, int64_t timestamp):
    """Rewrite MaxTimestamp of the batch at buf[pos] in place and recompute its CRC (nothing is written when it
    already holds timestamp). Kafka's LogValidator does this to a CreateTime batch whose header disagrees with its
    records. The existing CRC is not checked first."""
    cdef Py_buffer v
    cdef unsigned char *p = _writable_header(&v, buf, pos, True)
    if v.len - pos >= KL_NOGIL_BYTES:
        with nogil:
            stamp_max_timestamp(p, v.len - pos, timestamp)
    else:
        stamp_max_timestamp(p, v.len - pos, timestamp)
    PyBuffer_Release(&v)


def crc32c(data, uint32_t crc=0):
    """CRC-32C (Castagnoli) of data; pass a previous result as crc to continue over more bytes."""
    cdef Py_buffer v
    cdef uint32_t out
    PyObject_GetBuffer(data, &v, PyBUF_SIMPLE)
    if v.len >= KL_NOGIL_BYTES:
        with nogil:
            out = kl_crc32c(crc, <const unsigned char *>v.buf, v.len)
    else:
        out = kl_crc32c(crc, <const unsigned char *>v.buf, v.len)
    PyBuffer_Release(&v)
    return out
