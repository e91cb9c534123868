# Record batch v2 (magic 2): the batch layout, in Kafka notation, opens framing.pyx (whose framing.pxd holds the C
# readers and writers used here); compressed records sections and their bounds are in codecs.pyx. This module is
# what Python sees of batches: build them, view and iterate them, rewrite the fields a log owns in place, and the
# compiled part of the producer (Spark's columnar reads are in columns.pyx, the cleaner's in compaction.pyx).
"""Record batch v2: build, view, validate and iterate Kafka record batches."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_SIZE, PySequence_Fast_ITEMS
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

cimport cython

from .clib cimport (
    KL_BASE_OFFSET_OFFSET, KL_CHECK, KL_CODEC_NONE, KL_COMPRESSION_CODEC_MASK, KL_CONTROL_FLAG_MASK, KL_INT32_MAX,
    KL_LOG_OVERHEAD, KL_NOGIL_BYTES, KL_PARTITION_LEADER_EPOCH_OFFSET, KL_RECORD_BATCH_OVERHEAD,
    KL_TIMESTAMP_LOG_APPEND_TIME, KL_TIMESTAMP_TYPE_MASK, KL_TRANSACTIONAL_FLAG_MASK, kl_crc32c, kl_load_u32le,
    kl_store_i32, kl_store_i64, kl_varint_size,
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
    "BatchBuilder", "Record", "RecordBatch", "build_batch", "count_records", "crc32c", "iter_batches",
    "set_base_offset", "set_log_append_time", "set_max_timestamp", "set_partition_leader_epoch",
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

    def build(self, int64_t base_offset=0, int32_t partition_leader_epoch=-1):
        """The batch (bytes) of the records appended so far; the builder keeps them until reset()."""
        cdef BatchParams bp
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
# Producer accumulation: the compiled half of KafkaProducer.send (kafkalog/client/producer.py subclasses these)
#
# Kafka's producer appends each record to its partition's open batch (RecordAccumulator.append) and returns a
# FutureRecordMetadata. Here the record is encoded into the batch's records section at once (BatchBuilder's
# encoding: bytes are copied, nothing pins the caller's objects), and the facts RecordMetadata reports later
# (timestamp, serialized sizes) go to a side array, so a future is a (batch, index) pair and costs no Python work.
# Policy (opening, closing and writing batches, acks, fsync, callbacks) stays in Python.
#
# Thread safety, GIL builds of CPython only (kafkalog's target, as for BatchBuilder.stage): RecordAccumulator.send's
# fast path takes no lock. Between reading a partition's open batch and appending to it, it runs no Python code and
# allocates no GC-tracked object (the future is taken first: a GC pass may run finalizers, which may switch threads;
# and a reused future lets go of its previous batch only after the append, since freeing a batch runs Python code),
# so the append is atomic with respect to every other thread. The Python side keeps to that contract:
# it detaches a batch (``partition.batch = None``) before building it, so a batch is never built while appended to.

from cpython.buffer cimport PyBuffer_FillInfo
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyCFunction, PyMethodDef, PyTypeObject
from cpython.ref cimport Py_REFCNT
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.type cimport PyType_Modified
from cpython.unicode cimport PyUnicode_CheckExact


cdef extern from "Python.h":
    int METH_FASTCALL
    int METH_KEYWORDS
    object PyDescr_NewMethod(PyTypeObject *cls, PyMethodDef *meth)


cdef struct _RecordFacts:
    int64_t timestamp       # the record's CreateTime (ms), as sent
    int32_t key_size        # serialized key bytes, -1 = null key
    int32_t value_size      # serialized value bytes, -1 = null value
    int32_t header_size     # kafka-python's serialized_header_size: sum of key (UTF-8) + value bytes; -1 = none


cdef uint32_t _murmur2(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """Kafka's Utils.murmur2 (MurmurHash2, seed 0x9747b28c, little-endian words, tail mixed high to low)."""
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = 0x9747B28C
    cdef uint32_t k
    cdef Py_ssize_t i = 0, n4 = n & ~(<Py_ssize_t>3)
    h ^= <uint32_t>n
    while i < n4:
        k = kl_load_u32le(p + i) * m
        k = (k ^ (k >> 24)) * m
        h = (h * m) ^ k
        i += 4
    if n & 3 == 3:
        h ^= (<uint32_t>p[i + 2]) << 16
    if n & 3 >= 2:
        h ^= (<uint32_t>p[i + 1]) << 8
    if n & 3:
        h = (h ^ <uint32_t>p[i]) * m
    h ^= h >> 13
    h *= m
    return h ^ (h >> 15)


def murmur2(data):
    """Kafka's murmur2 of ``data`` (bytes-like) as an unsigned 32-bit int: the same bits as Java's signed int."""
    cdef Py_buffer v
    cdef uint32_t h
    if PyBytes_CheckExact(data):
        return _murmur2(<const unsigned char *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &v, PyBUF_SIMPLE)
    h = _murmur2(<const unsigned char *>v.buf, v.len)
    PyBuffer_Release(&v)
    return h


cdef inline int32_t _nbytes(object o) except? -2:
    cdef Py_buffer v
    cdef Py_ssize_t n
    if o is None:
        return -1
    if PyBytes_CheckExact(o):
        return <int32_t>PyBytes_GET_SIZE(o)
    PyObject_GetBuffer(o, &v, PyBUF_SIMPLE)
    n = v.len
    PyBuffer_Release(&v)
    return <int32_t>min(n, KL_INT32_MAX)


# Spare record buffers of written batches, reused by the next ones (touched only with the GIL held). A batch of
# batch_size=1 MiB otherwise grows a fresh buffer by realloc, and fresh pages cost a page fault each (a 2 MiB clear
# with transparent huge pages): that was a third of the producer's time per record. At most _SPARE_MAX buffers of
# _SPARE_MIN_CAP.._SPARE_MAX_CAP bytes are kept: 16 MiB per process at worst.
cdef enum:
    _SPARE_MAX = 4
cdef Py_ssize_t _SPARE_MIN_CAP = 65536
cdef Py_ssize_t _SPARE_MAX_CAP = 4 << 20
cdef unsigned char *_spare_buf[_SPARE_MAX]
cdef Py_ssize_t _spare_cap[_SPARE_MAX]
cdef int _nspare = 0


cdef class ProducerBatch(BatchBuilder):
    """Records bound for one partition and one log append (Kafka's ProducerBatch): a BatchBuilder that also keeps,
    per record, what its RecordMetadata reports. ``build()`` gives the finished batch (base offset 0: the log assigns
    offsets), ``build_view()`` the same bytes without a copy; ``drop_records()`` frees the encoded records once
    written, keeping the facts.

    Not thread-safe by itself: the producer appends under its lock or through RecordAccumulator's GIL-atomic path.
    """
    cdef _RecordFacts *_facts
    cdef Py_ssize_t _nfacts, _facts_cap
    cdef bint _dropped
    cdef Py_ssize_t _exports        # live buffer exports (build_view): the records may not move or be freed
    cdef public Py_ssize_t size     # the producer's batch.size accounting (estimated bytes), grown by add()

    def __cinit__(self):
        global _nspare
        self._facts_cap = 64
        self._facts = <_RecordFacts *>malloc(self._facts_cap * sizeof(_RecordFacts))
        if self._facts == NULL:
            raise MemoryError()
        if _nspare:
            _nspare -= 1
            free(self._buf)
            self._buf = _spare_buf[_nspare]
            self._cap = _spare_cap[_nspare]

    def __dealloc__(self):
        global _nspare
        free(self._facts)
        if _nspare < _SPARE_MAX and _SPARE_MIN_CAP <= self._cap <= _SPARE_MAX_CAP:
            _spare_buf[_nspare] = self._buf  # BatchBuilder's __dealloc__ then frees NULL
            _spare_cap[_nspare] = self._cap
            _nspare += 1
            self._buf = NULL

    cdef int _grow_facts(self) except -1:
        cdef _RecordFacts *grown
        if self._nfacts < self._facts_cap:
            return 0
        grown = <_RecordFacts *>realloc(self._facts, self._facts_cap * 2 * sizeof(_RecordFacts))
        if grown == NULL:
            raise MemoryError()
        self._facts = grown
        self._facts_cap *= 2
        return 0

    cdef int32_t _add(self, value, key, int64_t timestamp, headers, int32_t key_size, int32_t value_size,
                      int32_t header_size, Py_ssize_t size) except -1:
        """Encode one record (timestamp >= 0) and keep its facts; returns its index. Runs no Python code when value
        and key are bytes or None and headers is None (the GIL-atomic path)."""
        if self._dropped or self._exports:
            raise ValueError("the batch was built or written: it takes no more records")
        if self._nfacts != self._count:
            raise ValueError("a batch holding facts-only entries takes no records")
        self._grow_facts()  # first: a record is never encoded without room for its facts
        if self._append(value, key, timestamp, headers) < 0:
            raise RecordTooLargeError("the batch is full")  # not reached: max_batch_bytes stays 2 GiB
        self._put_facts(timestamp, key_size, value_size, header_size)
        self.size += size
        return <int32_t>(self._nfacts - 1)

    @cython.final
    cdef int32_t _add_plain(self, object value, object key, int64_t timestamp, Py_ssize_t size) except -1:
        """_add for value and key that are exact bytes or None, no headers (RecordAccumulator.send): the same bytes
        as BatchBuilder._append, written here without its buffer and header handling. Runs no Python code."""
        cdef Slice k, v
        cdef Py_ssize_t body, need
        cdef int64_t first_ts
        cdef int32_t i = self._count
        if self._dropped or self._exports or self._nfacts != i:
            raise ValueError("the batch takes no more records")
        if i == KL_INT32_MAX:
            raise RecordTooLargeError("a record batch holds at most 2**31 - 1 records")
        v.p = NULL
        v.n = -1
        k.p = NULL
        k.n = -1
        if value is not None:
            v.p = <const unsigned char *>PyBytes_AS_STRING(value)
            v.n = PyBytes_GET_SIZE(value)
        if key is not None:
            k.p = <const unsigned char *>PyBytes_AS_STRING(key)
            k.n = PyBytes_GET_SIZE(key)
        if k.n > KL_INT32_MAX or v.n > KL_INT32_MAX:
            check_len(k.n, "a key")
            check_len(v.n, "a value")
        if self._nfacts == self._facts_cap:
            self._grow_facts()
        first_ts = self._first_ts if i else timestamp
        body = body_size(timestamp - first_ts, i, k, v, 1)  # 1: the HeaderCount varint of 0
        need = kl_varint_size(<int32_t>min(body, KL_INT32_MAX)) + body
        if body > KL_INT32_MAX or self._len + need - KL_LOG_OVERHEAD > KL_INT32_MAX:
            check_len(body, "a record")
            check_len(self._len + need - KL_LOG_OVERHEAD, "the batch")
        if self._cap - self._len < need:
            self._reserve(need)
        write_record(self._buf + self._len, <int32_t>body, timestamp - first_ts, i, k, v, NULL, 0)
        self._len += need
        self._first_ts = first_ts
        if i == 0 or timestamp > self._max_ts:
            self._max_ts = timestamp
        self._count = i + 1
        self._put_facts(timestamp, <int32_t>k.n, <int32_t>v.n, -1)
        self.size += size
        return i

    @cython.final
    cdef inline void _put_facts(self, int64_t timestamp, int32_t key_size, int32_t value_size,
                                int32_t header_size) noexcept:
        """Keep one record's facts (room was made by _grow_facts)."""
        cdef _RecordFacts *f = &self._facts[self._nfacts]
        f.timestamp = timestamp
        f.key_size = key_size
        f.value_size = value_size
        f.header_size = header_size
        self._nfacts += 1

    def add(self, value, key=None, int64_t timestamp=0, headers=None, int32_t header_size=-1, Py_ssize_t size=0):
        """Encode one record with timestamp (ms, >= 0); returns its index in the batch. ``header_size`` is
        kafka-python's serialized_header_size (-1: no headers); ``size`` is added to ``size``."""
        if timestamp < 0:
            raise InvalidTimestampError(f"invalid negative timestamp {timestamp}")
        return self._add(value, key, timestamp, headers, _nbytes(key), _nbytes(value), header_size, size)

    def add_facts(self, int64_t timestamp, int32_t key_size, int32_t value_size, int32_t header_size):
        """Keep a record's facts without encoding it (a record refused before it could join a batch)."""
        self._grow_facts()
        self._put_facts(timestamp, key_size, value_size, header_size)
        return self._nfacts - 1

    def facts(self, Py_ssize_t i):
        """(timestamp, serialized key size, value size, header size) of record i."""
        if not 0 <= i < self._nfacts:
            raise IndexError(f"record {i} of a batch of {self._nfacts}")
        return (self._facts[i].timestamp, self._facts[i].key_size, self._facts[i].value_size,
                self._facts[i].header_size)

    @property
    def records_count(self):
        """Records in the batch (facts-only entries included)."""
        return self._nfacts

    @property
    def dropped(self):
        """drop_records() was called: the encoded records are gone, the facts stay."""
        return self._dropped

    def drop_records(self):
        """Free the encoded records (after the write): futures keep the batch alive, not the payload. While a
        build_view() is still exported the buffer stays until the batch is deallocated."""
        global _nspare
        cdef unsigned char *small
        if self._dropped:
            return
        self._dropped = True
        if self._exports:
            return
        small = <unsigned char *>malloc(KL_RECORD_BATCH_OVERHEAD)
        if small == NULL:
            return  # keep the records rather than fail: dropping them is an optimization
        if _nspare < _SPARE_MAX and _SPARE_MIN_CAP <= self._cap <= _SPARE_MAX_CAP:
            _spare_buf[_nspare] = self._buf
            _spare_cap[_nspare] = self._cap
            _nspare += 1
        else:
            free(self._buf)
        self._buf = small
        self._cap = KL_RECORD_BATCH_OVERHEAD
        self._len = KL_RECORD_BATCH_OVERHEAD

    def build(self, int64_t base_offset=0, int32_t partition_leader_epoch=-1):
        """The finished batch (bytes) of the records added so far."""
        if self._dropped:
            raise ValueError("the batch was written: its records were dropped")
        return BatchBuilder.build(self, base_offset, partition_leader_epoch)

    def build_view(self):
        """The finished batch (base offset 0) as a memoryview of the batch's own buffer, without a copy when
        uncompressed (compressed: build()'s bytes). No record can be added afterwards. The view is writable so that
        a log may stamp BaseOffset (and the other fields a broker rewrites) in place."""
        cdef BatchParams bp
        if self._codec != KL_CODEC_NONE:
            return self.build()
        if self._dropped:
            raise ValueError("the batch was written: its records were dropped")
        if self._count == 0:
            raise ValueError("a record batch needs at least one record")
        bp.base_offset = 0
        bp.partition_leader_epoch = -1
        bp.attributes = self._attributes
        bp.count = self._count
        bp.base_timestamp = self._first_ts
        bp.max_timestamp = self._max_ts
        bp.producer_id = self._producer_id
        bp.producer_epoch = self._producer_epoch
        bp.base_sequence = self._base_sequence
        self._exports += 1  # no append from here on, even before the view exists (the header write may drop the GIL)
        try:
            write_header_big(self._buf, self._len, &bp)
            return memoryview(self)
        finally:
            self._exports -= 1

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self._dropped:
            raise BufferError("the batch was written: its records were dropped")
        PyBuffer_FillInfo(view, self, self._buf, self._len, 0, flags)
        self._exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self._exports -= 1

    # BatchBuilder's own ways in would add records without facts or reset the count under them
    def append(self, *args, **kwargs):
        raise TypeError("a ProducerBatch takes records through add()")

    def stage(self, *args, **kwargs):
        raise TypeError("a ProducerBatch takes records through add()")

    def take(self):
        raise TypeError("a ProducerBatch is built whole: build() or build_view()")

    def reserve(self, int64_t n):
        raise TypeError("a ProducerBatch is built whole: build() or build_view()")

    def reset(self):
        raise TypeError("a ProducerBatch is not reused: make a new one")

    def __repr__(self):
        return f"ProducerBatch(count={self._nfacts}, size_in_bytes={self._len}, size={self.size})"


@cython.freelist(1024)
cdef class FutureRecordMetadata:
    """The result of one ``KafkaProducer.send()``: kafka-python's FutureRecordMetadata (``get``, ``add_callback``,
    ``add_errback``, ``add_both``, ``chain``, ``succeeded``, ``failed``, ``retriable``, ``is_done``, ``value``,
    ``exception``).

    A future is its record's place in its batch, nothing more: a static type with a free list, so that send() costs
    no Python allocation beyond it. What it answers comes from its batch, which the producer subclasses
    (kafkalog/client/producer.py ``_Batch``) with the policy: ``done()``, ``exception_of(i)``, ``metadata_of(i)``,
    ``wait(timeout)`` and ``add_callback(future, f, errback)``; see there for threads and callbacks.
    """
    cdef readonly ProducerBatch _batch
    cdef readonly int32_t _index

    def __init__(self, ProducerBatch batch, int32_t index):
        self._batch = batch
        self._index = index

    @property
    def is_done(self):
        return bool(self._batch.done())

    def succeeded(self):
        return self.is_done and self.exception is None

    def failed(self):
        return self.is_done and self.exception is not None

    def retriable(self):
        exc = self.exception
        return exc is not None and bool(getattr(exc, "retriable", False))

    @property
    def exception(self):
        """The exception the record failed with; None while pending or after success."""
        return self._batch.exception_of(self._index)

    @property
    def value(self):
        """The record's RecordMetadata once acknowledged; None while pending or after a failure."""
        return self._batch.metadata_of(self._index)

    def get(self, timeout=None):
        """Wait up to ``timeout`` seconds (None: forever) for the record's acknowledgement (see ``acks``); return
        its RecordMetadata or raise the exception it failed with. RequestTimedOutError on timeout."""
        if not self._batch.done():
            self._batch.wait(timeout)
        exc = self.exception
        if exc is not None:
            raise exc
        return self.value

    def add_callback(self, f, *args, **kwargs):
        """Call ``f(*args, record_metadata, **kwargs)`` when the record is acknowledged."""
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        self._batch.add_callback(self, f, False)
        return self

    def add_errback(self, f, *args, **kwargs):
        """Call ``f(*args, exception, **kwargs)`` if the record fails."""
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        self._batch.add_callback(self, f, True)
        return self

    def add_both(self, f, *args, **kwargs):
        self.add_callback(f, *args, **kwargs)
        return self.add_errback(f, *args, **kwargs)

    def chain(self, future):
        """Resolve another kafka-python-style future (``success``/``failure``) with this one's outcome."""
        self.add_callback(future.success)
        return self.add_errback(future.failure)

    def __repr__(self):
        state = "pending" if not self.is_done else ("failed" if self.failed() else "done")
        return f"<FutureRecordMetadata {self._batch.describe()} {state}>"


cdef class AccumulatorPartition:
    """One partition as the accumulator sees it (the producer's per-partition state subclasses it)."""
    cdef public ProducerBatch batch     # the open batch; None: the next record goes through the producer's _send
    cdef public Py_ssize_t limit        # a batch is closed once its ``size`` reaches this (batch_size)


cdef class AccumulatorTopic:
    """One topic as the accumulator sees it (the producer's per-topic state subclasses it)."""
    cdef public tuple parts             # AccumulatorPartition per partition id; None until the producer sets it
    cdef public AccumulatorPartition sticky   # where unkeyed records go (KIP-480); the producer moves it


cdef inline int64_t _plain_int(object o, int64_t high) except? -2:
    """o as an int64 when it is an exact int in [0, high], else -1 (no exception either way)."""
    cdef int overflow = 0
    cdef long long v
    if not PyLong_CheckExact(o):
        return -1
    v = PyLong_AsLongLongAndOverflow(o, &overflow)
    if overflow or v < 0 or v > high:
        return -1
    return v


cdef class RecordAccumulator:
    """The compiled hot path of ``KafkaProducer.send`` (the producer class derives from this one).

    ``send()`` appends a record to its partition's open batch here when everything about it is plain: the fast path
    is on (``_fast``), the topic is known (``_topics``), value and key are bytes or None, no headers, partition None
    or a valid int, timestamp_ms None or an int >= 0, and the record fits the open batch without filling it
    (``size + batch.size < partition.limit``). Everything else goes to the subclass's
    ``_send(topic, value, key, headers, partition, timestamp_ms)``, which also opens, closes and writes batches.
    Unkeyed records go to the topic's sticky partition, keyed ones to ``murmur2(key) & 0x7fffffff`` modulo the
    partition count (Kafka's DefaultPartitioner). See the section comment for thread safety.
    """
    cdef readonly dict _topics          # name -> AccumulatorTopic, filled by the subclass (call _topics_changed())
    cdef public bint _fast              # the fast path is on (no serializer, no custom partitioner, linger > 0...)
    cdef Py_ssize_t _record_overhead    # accounted bytes per record beyond key and value
    cdef Py_ssize_t _max_fast           # larger records (accounted) take _send, which refuses them
    cdef object _last_name              # the topic object of the last fast send, and its entry: most apps send
    cdef AccumulatorTopic _last_topic   # to one topic with one str object, so a pointer compare replaces the dict
    cdef FutureRecordMetadata _spare    # the future send() returned last: reused once nobody else holds it

    def __cinit__(self):
        self._topics = {}

    def _init_fast_path(self, Py_ssize_t record_overhead, Py_ssize_t max_record):
        self._record_overhead = record_overhead
        self._max_fast = max_record

    def _topics_changed(self):
        """Call after removing or replacing an entry of ``_topics``."""
        self._last_name = None
        self._last_topic = None

    # send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None) is _accumulator_send below
    # (its arguments parsed by hand), which calls this.
    @cython.final
    cdef object _send_fast(self, object topic, object value, object key, object headers, object partition,
                           object timestamp_ms):
        cdef PyObject *found
        cdef AccumulatorTopic st
        cdef AccumulatorPartition part
        cdef ProducerBatch b
        cdef FutureRecordMetadata fut
        cdef Py_ssize_t size = self._record_overhead, n, p
        cdef int64_t ts
        cdef int32_t ks = -1, vs = -1, i
        if not self._fast or headers is not None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        if value is not None:
            if not PyBytes_CheckExact(value):
                return self._send(topic, value, key, headers, partition, timestamp_ms)
            vs = <int32_t>PyBytes_GET_SIZE(value)
            size += vs
        if key is not None:
            if not PyBytes_CheckExact(key):
                return self._send(topic, value, key, headers, partition, timestamp_ms)
            ks = <int32_t>PyBytes_GET_SIZE(key)
            size += ks
        elif value is None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        if size > self._max_fast:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        if topic is self._last_name:
            st = self._last_topic
        else:
            found = PyDict_GetItemWithError(self._topics, topic) if PyUnicode_CheckExact(topic) else NULL
            if found == NULL:
                return self._send(topic, value, key, headers, partition, timestamp_ms)
            st = <AccumulatorTopic>found
            self._last_name = topic
            self._last_topic = st
        if st.parts is None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        n = PyTuple_GET_SIZE(st.parts)
        if timestamp_ms is None:
            ts = now_ms()
        else:
            ts = _plain_int(timestamp_ms, 0x7FFFFFFFFFFFFFFF)
            if ts < 0:
                return self._send(topic, value, key, headers, partition, timestamp_ms)
        if partition is None:
            p = -1 if key is None else (0 if n == 1 else
                                        (_murmur2(<const unsigned char *>PyBytes_AS_STRING(key), ks) & 0x7FFFFFFF) % n)
        else:
            p = <Py_ssize_t>_plain_int(partition, n - 1)
            if p < 0:
                return self._send(topic, value, key, headers, partition, timestamp_ms)
        # The future: the one returned last when only self._spare (and now fut) refers to it, as a free list would
        # hand it back (no weak references: nobody can tell), else a new one. Either way before the append.
        fut = self._spare
        if fut is None or Py_REFCNT(fut) != 2:
            fut = FutureRecordMetadata.__new__(FutureRecordMetadata)
            self._spare = fut
        # GIL-atomic from here to the append: no Python code, no GC-tracked allocation
        if p < 0:
            part = st.sticky
        else:
            part = <AccumulatorPartition>PyTuple_GET_ITEM(st.parts, p)
        if part is None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        b = part.batch
        if b is None or b.size + size >= part.limit or b._dropped or b._exports or b._nfacts != b._count:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        i = b._add_plain(value, key, ts, size)
        fut._index = i
        fut._batch = b  # may free the reused future's previous batch: Python code, so after the append
        return fut


# RecordAccumulator.send is this METH_FASTCALL | METH_KEYWORDS function (a method descriptor, as a built-in type's
# methods are: CPython's call specializations reach it directly), its arguments parsed here with borrowed references.
# Cython's generic parsing (an argument array, a reference taken and dropped per argument) cost ~5 ns a call, a
# sixth of what send() itself does.
cdef tuple _SEND_ARGS = ("topic", "value", "key", "headers", "partition", "timestamp_ms")
cdef PyObject *_send_names[6]     # _SEND_ARGS' items (interned, as keyword names at call sites are), without a lookup


cdef int _send_arg_index(object name, Py_ssize_t nargs) except -1:
    """A keyword argument's position when the pointer compare missed: a name built at run time, or an error."""
    if name not in _SEND_ARGS:
        raise TypeError(f"send() got an unexpected keyword argument {name!r}")
    i = _SEND_ARGS.index(name)
    if i < nargs:
        raise TypeError(f"send() got multiple values for argument {name!r}")
    return i


cdef object _accumulator_send(RecordAccumulator self, PyObject **args, Py_ssize_t nargs, PyObject *kwnames):
    cdef PyObject *a[6]
    cdef PyObject *name
    cdef PyObject *topic
    cdef PyObject *value
    cdef PyObject *key
    cdef PyObject *headers
    cdef PyObject *partition
    cdef PyObject *timestamp_ms
    cdef Py_ssize_t i, j
    if nargs > 6:
        raise TypeError(f"send() takes from 1 to 6 positional arguments but {nargs} were given")
    for i in range(6):
        a[i] = args[i] if i < nargs else NULL
    if kwnames != NULL:
        for j in range(PyTuple_GET_SIZE(<tuple>kwnames)):
            name = PyTuple_GET_ITEM(<tuple>kwnames, j)
            i = nargs
            while i < 6 and name != _send_names[i]:
                i += 1
            if i == 6:
                i = _send_arg_index(<object>name, nargs)
            if a[i] != NULL:
                raise TypeError(f"send() got multiple values for argument {_SEND_ARGS[i]!r}")
            a[i] = args[nargs + j]
    if a[0] == NULL:
        raise TypeError("send() missing required argument 'topic' (pos 1)")
    for i in range(1, 6):
        if a[i] == NULL:
            a[i] = <PyObject *>None
    topic, value, key, headers, partition, timestamp_ms = a[0], a[1], a[2], a[3], a[4], a[5]
    return self._send_fast(<object>topic, <object>value, <object>key, <object>headers, <object>partition,
                           <object>timestamp_ms)  # borrowed: the caller's references last the call


cdef PyMethodDef _send_def
_send_def.ml_name = "send"
_send_def.ml_meth = <PyCFunction><void *>_accumulator_send
_send_def.ml_flags = METH_FASTCALL | METH_KEYWORDS
_send_def.ml_doc = (
    "send($self, /, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)\n--\n\n"
    "Send one record; returns a FutureRecordMetadata at once (see the class docstring for when it resolves).\n\n"
    "Raised here, nothing sent (as kafka-python): ``LogClosedError`` after close(); ``ValueError`` when key and\n"
    "value are both None; ``TypeError`` for a serialized key/value that is not bytes-like or malformed headers\n"
    "(a list of (str, bytes) pairs); whatever a serializer raises; ``InvalidTopicError`` for an illegal topic\n"
    "name; ``UnknownTopicOrPartitionError`` for a missing topic without auto-creation or an explicit partition\n"
    "outside the topic; ``InvalidTimestampError`` for a negative timestamp_ms.\n"
    "Reported through the future, nothing else affected: ``RecordTooLargeError`` (above max_request_size or the\n"
    "topic's max.message.bytes), any error the log raises for this record's batch.")


cdef int _install_send() except -1:
    cdef Py_ssize_t i
    for i in range(6):
        _send_names[i] = PyTuple_GET_ITEM(_SEND_ARGS, i)
    PyDict_SetItem(<object>(<PyTypeObject *>RecordAccumulator).tp_dict, "send",
                   PyDescr_NewMethod(<PyTypeObject *>RecordAccumulator, &_send_def))
    PyType_Modified(RecordAccumulator)
    return 0


_install_send()


cdef int _get_buffer(object o, Py_buffer *view, Slice *s, str what) except -1:
    try:
        PyObject_GetBuffer(o, view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like or None, not {type(o).__name__}") from None
    s.p = <const unsigned char *>view.buf
    s.n = view.len
    return 0


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


cdef list _headers_list(const unsigned char *p, int32_t count):
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

    cdef Record _next(self):
        """The next record, or None after the last one (no StopIteration: RecordStream calls this directly)."""
        cdef RecordView r
        cdef Record rec
        cdef Slice s
        cdef int rc
        cdef const BatchHeader *h = &self.batch._h
        if not self.started:
            self.pins = Pins()
            self.batch._plaintext(self.pins, &s)
            self.p = s.p
            self.end = s.p + s.n
            self.started = True
            if h.records_count == 0 and self.p != self.end:
                raise InvalidRecordError(f"{batch_where(h, self.batch._pos)}: {record_message(REC_LEFTOVER, 0, 0)}")
        if self.index >= h.records_count:
            return None
        rc = read_record(self.p, self.end, &r)
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
        rec = Record.__new__(Record)
        rec.offset = h.base_offset + r.offset_delta
        if self.log_append_time:
            rec.timestamp = h.max_timestamp
            rec.timestamp_type = KL_TIMESTAMP_LOG_APPEND_TIME
        else:
            rec.timestamp = h.base_timestamp + r.ts_delta
        rec.key = _bytes_or_none(r.key, r.key_len)
        rec.value = _bytes_or_none(r.value, r.value_len)
        if r.header_count:
            rec._headers = _headers_list(r.headers, r.header_count)
        return rec


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
        cdef Record rec
        cdef RecordBatch b
        cdef int64_t last
        while True:
            if self.current is not None:
                rec = self.current._next()
                if rec is not None:
                    if not self.filter_each:
                        return rec
                    if rec.offset >= self.hi:
                        self.current = None
                        return None
                    if rec.offset >= self.lo:
                        return rec
                    continue
                self.current = None
            b = next(self.batches, None) if self.batches is not None else None
            if b is None:
                if self.source is None:
                    return None
                chunk = next(self.source, None)
                if chunk is None:
                    return None
                buffer, self.lo, self.hi = chunk
                self.batches = iter_batches(buffer)
                continue
            b.validate()
            last = b._h.base_offset + b._h.last_offset_delta
            if last < self.lo:
                continue
            if b._h.base_offset >= self.hi:
                return None
            if b._h.attributes & KL_CONTROL_FLAG_MASK:
                continue  # a transaction marker (a Kafka log dir): not a record, as Kafka's consumers skip it
            self.filter_each = b._h.base_offset < self.lo or last >= self.hi
            self.current = _RecordIterator(b)


cdef extern from "Python.h":
    object PyType_GenericAlloc(type t, Py_ssize_t nitems)
    void PyTuple_SET_ITEM(object p, Py_ssize_t pos, object o)
    void PyObject_GC_UnTrack(object o)


cdef inline void _put(object t, Py_ssize_t i, object v):
    Py_INCREF(v)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(t, i, v)


def take_consumer_records(RecordStream stream, list out, Py_ssize_t limit, type cls, object topic,
                          object partition, object leader_epoch, object no_headers=None):
    """Append up to ``limit`` records of ``stream`` to ``out`` as ``cls`` instances, cls being a 13-field tuple
    subclass with kafka-python's ConsumerRecord layout: (topic, partition, leader_epoch, offset, timestamp,
    timestamp_type, key, value, headers, checksum=None, serialized key, value and header sizes; -1 for None).
    Built in C without calling cls (a namedtuple's __new__ is Python code). Records without headers get
    ``no_headers`` (one shared immutable empty list, say) or, when it is None, a new empty list each. Returns the
    next offset after the last record appended, or -1 when none was."""
    cdef Record rec
    cdef object t, headers
    cdef Py_ssize_t n = 0, hsize
    cdef int64_t nxt = -1
    if not issubclass(cls, tuple):
        raise TypeError(f"{cls!r} is not a tuple subclass")
    while n < limit:
        rec = stream._take()
        if rec is None:
            break
        if rec._headers:
            headers = rec._headers
            hsize = 0
            for hk, hv in headers:
                hsize += len((<str>hk).encode()) + (0 if hv is None else len(hv))
        else:
            headers = [] if no_headers is None else no_headers
            hsize = -1
        t = PyType_GenericAlloc(cls, 13)
        _put(t, 0, topic)
        _put(t, 1, partition)
        _put(t, 2, leader_epoch)
        _put(t, 3, rec.offset)
        _put(t, 4, rec.timestamp)
        _put(t, 5, rec.timestamp_type)
        _put(t, 6, rec.key)
        _put(t, 7, rec.value)
        _put(t, 8, headers)
        _put(t, 9, None)
        _put(t, 10, -1 if rec.key is None else PyBytes_GET_SIZE(rec.key))
        _put(t, 11, -1 if rec.value is None else PyBytes_GET_SIZE(rec.value))
        _put(t, 12, hsize)
        # Untracked by the cycle collector, as CPython untracks tuples of atomic values: every item is a str, int,
        # bytes or None except the headers list (tracked itself; shared and immutable when empty), so the tuple can
        # only be in a cycle if an app puts the record into its own headers. Tracked, each poll's records were
        # promoted through the GC generations and full collections ran again and again (4x slower large polls).
        PyObject_GC_UnTrack(t)
        out.append(t)
        nxt = rec.offset + 1
        n += 1
    return nxt


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
