# Columns of records, as Arrow lays out n records and their h headers (Spark's columnar reads, Log.read_columns):
#
#   offset => Int64[n] | timestamp => Int64[n] | timestamp_type => Int8[n]
#   key => Binary:   key_offsets => Int32[n + 1] | key_valid => Bool[n] (false = null) | keys => UInt8[]
#   value => Binary: value_offsets => Int32[n + 1] | value_valid => Bool[n] | values => UInt8[]
#   headers => List<Struct<key: Utf8, value: Binary>>:
#     header_offsets => Int32[n + 1]          record i owns headers [header_offsets[i], header_offsets[i + 1])
#     header_key_offsets => Int32[h + 1] | header_keys => UInt8[]                  (a header key is never null)
#     header_value_offsets => Int32[h + 1] | header_value_valid => Bool[h] | header_values => UInt8[]
#
# Offsets are Int32, Arrow's Binary (not LargeBinary): one call decodes at most 2 GiB into a column (REC_OVERFLOW
# past it). Pass 1 reads the headers, checks the CRCs, decompresses and sizes the columns by the records' bytes;
# pass 2 decodes every record into them without the GIL and without a Python object per record. Each column is one
# malloc'ed buffer that numpy takes over as it is (a capsule frees it with the array).
"""decode_columns: the records of consecutive batches as numpy columns in Arrow's layouts."""

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

cimport numpy as cnp

cdef extern from "kafkalog/kl_alloc.h" nogil:
    void *kl_malloc_large(size_t n)

from .clib cimport (
    KL_CODEC_NONE, KL_COMPRESSION_CODEC_MASK, KL_CONTROL_FLAG_MASK, KL_INT32_MAX, KL_LOG_OVERHEAD, KL_NOGIL_BYTES,
    KL_RECORD_BATCH_OVERHEAD, KL_TIMESTAMP_LOG_APPEND_TIME, KL_TIMESTAMP_TYPE_MASK,
)
from .codecs cimport Pins, decompress, range_end, read_view
from .framing cimport (
    KL_BATCH_INCOMPLETE, KL_BATCH_OK, REC_LEFTOVER, REC_NOMEM, REC_OK, REC_OVERFLOW, BatchHeader, RecordView, Slice,
    batch_error, batch_where, check_fields, next_header, parse_batch_header, read_record, record_message,
    walk_records,
)

from kafkalog.errors import InvalidRecordError

cnp.import_array()

__all__ = ["decode_columns"]

# Smallest encoded record (length, attributes, timestamp delta, offset delta, key/value lengths, header count):
# bounds the record count a records section can hold before anything is allocated for it.
cdef Py_ssize_t _MIN_RECORD_SIZE = 7


cdef inline int _grow_put(_Grow *g, const void *src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t cap
    cdef unsigned char *q
    if g.cap - g.len < n:
        cap = g.cap * 2 + n + 64
        q = <unsigned char *>realloc(g.p, cap)
        if q == NULL:
            return -1
        g.p = q
        g.cap = cap
    memcpy(g.p + g.len, src, n)
    g.len += n
    return 0


cdef class _Columns:
    """The C buffers of one decode_columns call; freed here unless handed over to numpy."""

    def __dealloc__(self):
        cdef int i
        for i in range(_C_COUNT):
            free(self.g[i].p)

    cdef int alloc(self, int col, Py_ssize_t cap) except -1:
        self.g[col].p = <unsigned char *>kl_malloc_large(cap)
        if self.g[col].p == NULL:
            raise MemoryError()
        self.g[col].cap = cap
        return 0

    cdef object array(self, int col, int typenum, Py_ssize_t itemsize):
        cdef _Grow *g = &self.g[col]
        cdef cnp.npy_intp dim = g.len // itemsize
        cdef unsigned char *p = <unsigned char *>realloc(g.p, g.len if g.len > 0 else 1)
        if p == NULL:
            p = g.p     # shrinking failed: keep the larger block
        g.p = NULL
        cap = PyCapsule_New(p, NULL, _free_capsule)
        arr = cnp.PyArray_SimpleNewFromData(1, &dim, typenum, p)
        cnp.set_array_base(<cnp.ndarray>arr, cap)
        return arr


cdef void _free_capsule(object cap) noexcept:
    free(PyCapsule_GetPointer(cap, NULL))


cdef inline int _put_var(_Grow *data, _Grow *offsets, _Grow *valid, const unsigned char *p,
                         int32_t n) noexcept nogil:
    """Append one variable-length item (n = -1: null) to Arrow-style data/offsets/validity buffers."""
    cdef uint8_t ok = n >= 0
    cdef int32_t end
    if ok:
        if data.len + n > KL_INT32_MAX:
            return REC_OVERFLOW
        if _grow_put(data, p, n) < 0:
            return REC_NOMEM
    end = <int32_t>data.len
    if _grow_put(offsets, &end, 4) < 0 or (valid != NULL and _grow_put(valid, &ok, 1) < 0):
        return REC_NOMEM
    return REC_OK


cdef int _fill_columns(const _BatchRef *refs, Py_ssize_t nb, _Grow *g, Py_ssize_t *bad_batch,
                       int32_t *bad_record) noexcept nogil:
    cdef Py_ssize_t b
    cdef int32_t i, j, kn = 0, vn = 0
    cdef int rc
    cdef RecordView r
    cdef const unsigned char *p
    cdef const unsigned char *end
    cdef const unsigned char *hp
    cdef const unsigned char *k
    cdef const unsigned char *v
    cdef int64_t *offsets = <int64_t *>g[_C_OFFSET].p
    cdef int64_t *timestamps = <int64_t *>g[_C_TIMESTAMP].p
    cdef int8_t *types = <int8_t *>g[_C_TIMESTAMP_TYPE].p
    cdef int32_t *key_offsets = <int32_t *>g[_C_KEY_OFFSETS].p
    cdef int32_t *value_offsets = <int32_t *>g[_C_VALUE_OFFSETS].p
    cdef int32_t *header_offsets = <int32_t *>g[_C_HEADER_OFFSETS].p
    cdef uint8_t *key_valid = <uint8_t *>g[_C_KEY_VALID].p
    cdef uint8_t *value_valid = <uint8_t *>g[_C_VALUE_VALID].p
    cdef unsigned char *keys = g[_C_KEYS].p
    cdef unsigned char *values = g[_C_VALUES].p
    cdef Py_ssize_t n = 0, key_len = 0, value_len = 0, nheaders = 0
    cdef bint append_time
    cdef int8_t tstype
    key_offsets[0] = 0
    value_offsets[0] = 0
    header_offsets[0] = 0
    for b in range(nb):
        bad_batch[0] = b
        p = refs[b].records
        end = p + refs[b].records_len
        append_time = (refs[b].h.attributes & KL_TIMESTAMP_TYPE_MASK) != 0
        tstype = KL_TIMESTAMP_LOG_APPEND_TIME if append_time else 0
        for i in range(refs[b].h.records_count):
            bad_record[0] = i
            rc = read_record(p, end, &r)
            if rc != REC_OK:
                return rc
            p = r.end
            offsets[n] = refs[b].h.base_offset + r.offset_delta
            timestamps[n] = refs[b].h.max_timestamp if append_time else refs[b].h.base_timestamp + r.ts_delta
            types[n] = tstype
            # keys/values hold at most the records bytes (sized in pass 1), so no growth checks here
            key_valid[n] = r.key_len >= 0
            if r.key_len > 0:
                memcpy(keys + key_len, r.key, r.key_len)
                key_len += r.key_len
            value_valid[n] = r.value_len >= 0
            if r.value_len > 0:
                memcpy(values + value_len, r.value, r.value_len)
                value_len += r.value_len
            if key_len > KL_INT32_MAX or value_len > KL_INT32_MAX:
                return REC_OVERFLOW
            n += 1
            key_offsets[n] = <int32_t>key_len
            value_offsets[n] = <int32_t>value_len
            hp = r.headers
            for j in range(r.header_count):
                hp = next_header(hp, &k, &kn, &v, &vn)
                rc = _put_var(&g[_C_HEADER_KEYS], &g[_C_HEADER_KEY_OFFSETS], NULL, k, kn)
                if rc == REC_OK:
                    rc = _put_var(&g[_C_HEADER_VALUES], &g[_C_HEADER_VALUE_OFFSETS], &g[_C_HEADER_VALUE_VALID],
                                  v, vn)
                if rc != REC_OK:
                    return rc
            nheaders += r.header_count
            if nheaders > KL_INT32_MAX:
                return REC_OVERFLOW
            header_offsets[n] = <int32_t>nheaders
        if p != end:
            bad_record[0] = refs[b].h.records_count
            return REC_LEFTOVER
    g[_C_OFFSET].len = n * 8
    g[_C_TIMESTAMP].len = n * 8
    g[_C_TIMESTAMP_TYPE].len = n
    g[_C_KEY_OFFSETS].len = (n + 1) * 4
    g[_C_VALUE_OFFSETS].len = (n + 1) * 4
    g[_C_HEADER_OFFSETS].len = (n + 1) * 4
    g[_C_KEY_VALID].len = n
    g[_C_VALUE_VALID].len = n
    g[_C_KEYS].len = key_len
    g[_C_VALUES].len = value_len
    return REC_OK


def decode_columns(buffer, Py_ssize_t start=0, end=None):
    """Decode every record of the consecutive batches in buffer[start:end] into numpy columns.

    Each batch's CRC is checked and compressed batches are decompressed; stops silently at an incomplete tail
    batch. Keys, values and header keys/values use Arrow's binary layout: int32 offsets (n + 1), a bool validity
    array (False = null) and a uint8 data buffer. Returns a dict: offset, timestamp (int64), timestamp_type (int8),
    key_offsets, key_valid, keys, value_offsets, value_valid, values, header_offsets (int32, n + 1: record i owns
    headers [header_offsets[i], header_offsets[i+1])), header_key_offsets, header_keys, header_value_offsets,
    header_value_valid, header_values, plus batches (int) and next_position (byte position after the last batch).
    """
    cdef const unsigned char *base
    cdef Py_ssize_t n, stop, pos = start, size, nb = 0, cap = 0, total_records = 0, total_bytes = 0
    cdef Py_ssize_t bad_batch = 0
    cdef int32_t bad_record = 0
    cdef _BatchRef *refs = NULL
    cdef _BatchRef *grown
    cdef _BatchRef *ref
    cdef BatchHeader h
    cdef int rc, codec
    cdef Slice s
    cdef Pins pins = Pins()
    cdef _Columns cols = _Columns()
    mv = read_view(buffer, &base, &n)
    stop = range_end(end, start, n)
    try:
        # Pass 1: headers, CRCs, decompression; sizes every column.
        while True:
            rc = parse_batch_header(base + pos, stop - pos, &h)
            if rc == KL_BATCH_INCOMPLETE:
                break
            if rc == KL_BATCH_OK:
                if h.batch_length >= KL_NOGIL_BYTES:
                    with nogil:
                        rc = check_fields(base + pos, &h)
                else:
                    rc = check_fields(base + pos, &h)
            if rc != KL_BATCH_OK:
                raise batch_error(rc, base + pos, stop - pos, pos, &h)
            if h.attributes & KL_CONTROL_FLAG_MASK:  # a transaction marker (CRC checked above): not a record
                pos += <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
                continue
            if nb == cap:
                grown = <_BatchRef *>realloc(refs, (cap * 2 + 16) * sizeof(_BatchRef))
                if grown == NULL:
                    raise MemoryError()
                refs = grown
                cap = cap * 2 + 16
            ref = &refs[nb]
            size = <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
            ref.h = h
            ref.pos = pos
            ref.records = base + pos + KL_RECORD_BATCH_OVERHEAD
            ref.records_len = size - KL_RECORD_BATCH_OVERHEAD
            codec = h.attributes & KL_COMPRESSION_CODEC_MASK
            if codec != KL_CODEC_NONE:
                pins.pin(decompress(codec, ref.records, ref.records_len, &h, pos), &s)
                ref.records = s.p
                ref.records_len = s.n
            if h.records_count > ref.records_len // _MIN_RECORD_SIZE:
                # cannot fit: name the same framing error iteration would, before sizing columns by the count
                rc = walk_records(ref.records, ref.records + ref.records_len, h.records_count, &bad_record)
                raise InvalidRecordError(f"{batch_where(&h, pos)}: {record_message(rc, bad_record, h.records_count)}")
            total_records += h.records_count
            total_bytes += ref.records_len
            nb += 1
            pos += size
        cols.alloc(_C_OFFSET, total_records * 8)
        cols.alloc(_C_TIMESTAMP, total_records * 8)
        cols.alloc(_C_TIMESTAMP_TYPE, total_records)
        cols.alloc(_C_KEY_OFFSETS, (total_records + 1) * 4)
        cols.alloc(_C_VALUE_OFFSETS, (total_records + 1) * 4)
        cols.alloc(_C_HEADER_OFFSETS, (total_records + 1) * 4)
        cols.alloc(_C_KEY_VALID, total_records)
        cols.alloc(_C_VALUE_VALID, total_records)
        cols.alloc(_C_KEYS, total_bytes)
        cols.alloc(_C_VALUES, total_bytes)
        cols.alloc(_C_HEADER_KEY_OFFSETS, 4)
        cols.alloc(_C_HEADER_VALUE_OFFSETS, 4)
        (<int32_t *>cols.g[_C_HEADER_KEY_OFFSETS].p)[0] = 0
        cols.g[_C_HEADER_KEY_OFFSETS].len = 4
        (<int32_t *>cols.g[_C_HEADER_VALUE_OFFSETS].p)[0] = 0
        cols.g[_C_HEADER_VALUE_OFFSETS].len = 4
        # Pass 2: decode into the columns, without the GIL.
        with nogil:
            rc = _fill_columns(refs, nb, cols.g, &bad_batch, &bad_record)
        if rc == REC_NOMEM:
            raise MemoryError()
        if rc != REC_OK:
            raise InvalidRecordError(f"{batch_where(&refs[bad_batch].h, refs[bad_batch].pos)}: "
                                     f"{record_message(rc, bad_record, refs[bad_batch].h.records_count)}")
    finally:
        free(refs)
    return {
        "offset": cols.array(_C_OFFSET, cnp.NPY_INT64, 8),
        "timestamp": cols.array(_C_TIMESTAMP, cnp.NPY_INT64, 8),
        "timestamp_type": cols.array(_C_TIMESTAMP_TYPE, cnp.NPY_INT8, 1),
        "key_offsets": cols.array(_C_KEY_OFFSETS, cnp.NPY_INT32, 4),
        "key_valid": cols.array(_C_KEY_VALID, cnp.NPY_BOOL, 1),
        "keys": cols.array(_C_KEYS, cnp.NPY_UINT8, 1),
        "value_offsets": cols.array(_C_VALUE_OFFSETS, cnp.NPY_INT32, 4),
        "value_valid": cols.array(_C_VALUE_VALID, cnp.NPY_BOOL, 1),
        "values": cols.array(_C_VALUES, cnp.NPY_UINT8, 1),
        "header_offsets": cols.array(_C_HEADER_OFFSETS, cnp.NPY_INT32, 4),
        "header_key_offsets": cols.array(_C_HEADER_KEY_OFFSETS, cnp.NPY_INT32, 4),
        "header_keys": cols.array(_C_HEADER_KEYS, cnp.NPY_UINT8, 1),
        "header_value_offsets": cols.array(_C_HEADER_VALUE_OFFSETS, cnp.NPY_INT32, 4),
        "header_value_valid": cols.array(_C_HEADER_VALUE_VALID, cnp.NPY_BOOL, 1),
        "header_values": cols.array(_C_HEADER_VALUES, cnp.NPY_UINT8, 1),
        "batches": nb,
        "next_position": pos,
    }
