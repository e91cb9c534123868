# Kafka wire protocol hot path (Produce v3-7 request/response, Fetch v4-11 request/response), in Kafka notation:
#
#   ProduceRequest v3-7 => transactional_id(NULLABLE_STRING) acks(INT16) timeout_ms(INT32)
#     [topic_data => name(STRING) [partition_data => index(INT32) records(NULLABLE RECORDS)]]
#   ProduceResponse v3-7 => [responses => name(STRING) [partition_responses => index(INT32) error_code(INT16)
#     base_offset(INT64) log_append_time_ms(INT64) log_start_offset(INT64, v5+)]] throttle_time_ms(INT32)
#   FetchRequest v4-11 => replica_id(INT32) max_wait_ms(INT32) min_bytes(INT32) max_bytes(INT32)
#     isolation_level(INT8) session_id(INT32, v7+) session_epoch(INT32, v7+)
#     [topics => topic(STRING) [partitions => partition(INT32) current_leader_epoch(INT32, v9+) fetch_offset(INT64)
#       log_start_offset(INT64, v5+) partition_max_bytes(INT32)]]
#     [forgotten_topics_data => topic(STRING) [partitions(INT32)]] (v7+) rack_id(STRING, v11+)
#   FetchResponse v4-11 => throttle_time_ms(INT32) error_code(INT16, v7+) session_id(INT32, v7+)
#     [responses => topic(STRING) [partitions => partition_index(INT32) error_code(INT16) high_watermark(INT64)
#       last_stable_offset(INT64) log_start_offset(INT64, v5+) [aborted_transactions => producer_id(INT64)
#       first_offset(INT64)] preferred_read_replica(INT32, v11+) records(NULLABLE RECORDS)]]
#
# None of these versions is flexible (Produce 9+, Fetch 12+), so no varints or tag buffers here. The bytes must be
# the table codec's (protocol.py) bytes; on any malformed input the table codec is asked to decode the same frame,
# so both raise the same InvalidRequestError naming API, version and field.
"""Cython hot path of the broker codec: Produce request parse and response build, Fetch response build and request
parse, zero copy for record data."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.memoryview cimport PyMemoryView_Check, PyMemoryView_GET_BUFFER
from cpython.sequence cimport PySequence_GetSlice
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from kafkalog._engine.clib cimport kl_load_i16, kl_load_i32, kl_load_i64, kl_store_i16, kl_store_i32, kl_store_i64

from kafkalog.errors import InvalidRequestError, UnsupportedVersionError

__all__ = ["encode_fetch_response", "encode_produce_response", "parse_fetch", "parse_produce"]


# ---------------------------------------------------------------------------------------------------------------------
# Cursor

cdef int8_t read_i8(Cursor *c) noexcept nogil:
    if c.end - c.pos < 1:
        c.bad = True
        return 0
    c.pos += 1
    return <int8_t>c.buf[c.pos - 1]


cdef int16_t read_i16(Cursor *c) noexcept nogil:
    if c.end - c.pos < 2:
        c.bad = True
        return 0
    c.pos += 2
    return kl_load_i16(c.buf + c.pos - 2)


cdef int32_t read_i32(Cursor *c) noexcept nogil:
    if c.end - c.pos < 4:
        c.bad = True
        return 0
    c.pos += 4
    return kl_load_i32(c.buf + c.pos - 4)


cdef int64_t read_i64(Cursor *c) noexcept nogil:
    if c.end - c.pos < 8:
        c.bad = True
        return 0
    c.pos += 8
    return kl_load_i64(c.buf + c.pos - 8)


cdef inline Py_ssize_t _check_len(Cursor *c, Py_ssize_t n, bint nullable) noexcept nogil:
    if c.bad:
        return 0
    if n < 0:
        if n == -1 and nullable:
            return -1
        c.bad = True
        return 0
    if n > c.end - c.pos:
        c.bad = True
        return 0
    return n


cdef Py_ssize_t read_len16(Cursor *c, bint nullable) noexcept nogil:
    return _check_len(c, read_i16(c), nullable)


cdef Py_ssize_t read_len32(Cursor *c, bint nullable) noexcept nogil:
    return _check_len(c, read_i32(c), nullable)


cdef object read_string(Cursor *c, bint nullable):
    cdef Py_ssize_t n = read_len16(c, nullable)
    if c.bad or n < 0:
        return None
    c.pos += n
    return PyUnicode_DecodeUTF8(<const char *>c.buf + c.pos - n, n, NULL)


# ---------------------------------------------------------------------------------------------------------------------
# helpers

cdef object _view(object frame):
    """A 1-D byte memoryview of frame: records are returned as slices of it (zero copy, keeps frame alive)."""
    mv = frame if PyMemoryView_Check(frame) else memoryview(frame)
    if mv.ndim != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B")
    return mv


cdef object _reraise(int api_key, int version, object frame, Py_ssize_t offset):
    """The fast path found the frame malformed: let the table codec name the field (same error either way)."""
    from kafkalog.broker import protocol
    protocol.decode_request(api_key, version, frame, offset)
    raise InvalidRequestError(f"{protocol.API_NAMES[api_key]} v{version} request: malformed")


cdef inline unsigned char *_put_i16(unsigned char *p, int16_t v) noexcept nogil:
    kl_store_i16(p, v)
    return p + 2


cdef inline unsigned char *_put_i32(unsigned char *p, int32_t v) noexcept nogil:
    kl_store_i32(p, v)
    return p + 4


cdef inline unsigned char *_put_i64(unsigned char *p, int64_t v) noexcept nogil:
    kl_store_i64(p, v)
    return p + 8


cdef const char *_utf8(object name, Py_ssize_t *size) except NULL:
    if not isinstance(name, str):
        raise ValueError(f"topic name must be str, got {type(name).__name__}")
    cdef const char *s = PyUnicode_AsUTF8AndSize(name, size)
    if size[0] > 32767:
        raise ValueError(f"topic name of {size[0]} bytes is longer than 32767")
    return s


cdef Py_ssize_t _buffer_size(object b) except -1:
    cdef Py_buffer view
    if PyBytes_CheckExact(b):
        return PyBytes_GET_SIZE(b)
    if PyMemoryView_Check(b):
        return PyMemoryView_GET_BUFFER(b).len
    PyObject_GetBuffer(b, &view, PyBUF_SIMPLE)
    n = view.len
    PyBuffer_Release(&view)
    return n


# ---------------------------------------------------------------------------------------------------------------------
# Produce

def parse_produce(frame, Py_ssize_t offset, int version):
    """ProduceRequest v3-7 body at ``offset`` → (transactional_id, acks, timeout_ms, topics), topics =
    [(name, [(partition, records memoryview or None), ...]), ...]; records are slices of ``frame``."""
    if version < 3 or version > 7:
        raise UnsupportedVersionError(f"Produce v{version} is not supported (supported 3-7)")
    return _parse(0, frame, offset, version)


cdef object _parse(int api_key, object frame, Py_ssize_t offset, int version):
    """Run the C parser of ``api_key`` over ``frame``'s buffer; a frame it refuses is decoded again by the table
    codec, which raises the InvalidRequestError naming the field (both paths fail alike)."""
    cdef Py_buffer view
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        if api_key == 0:
            result = _parse_produce(<const unsigned char *>view.buf, view.len, offset, frame)
        else:
            result = _parse_fetch(<const unsigned char *>view.buf, view.len, offset, version)
    except UnicodeDecodeError:
        result = None
    finally:
        PyBuffer_Release(&view)
    if result is None:
        _reraise(api_key, version, frame, offset)
    return result


cdef object _parse_produce(const unsigned char *buf, Py_ssize_t size, Py_ssize_t offset, object frame):
    cdef Cursor c
    cdef Py_ssize_t n_topics, n_parts, n, i, j
    cdef int32_t index
    c.buf = buf
    c.end = size
    c.pos = offset
    c.bad = offset < 0 or offset > size
    if c.bad:
        return None
    mv = _view(frame)
    transactional_id = read_string(&c, True)
    acks = read_i16(&c)
    timeout_ms = read_i32(&c)
    n_topics = read_len32(&c, False)
    if c.bad:
        return None
    topics = []
    for i in range(n_topics):
        name = read_string(&c, False)
        n_parts = read_len32(&c, False)
        if c.bad:
            return None
        parts = []
        for j in range(n_parts):
            index = read_i32(&c)
            n = read_len32(&c, True)
            if c.bad:
                return None
            if n < 0:
                PyList_Append(parts, (index, None))
            else:
                PyList_Append(parts, (index, PySequence_GetSlice(mv, c.pos, c.pos + n)))
                c.pos += n
        PyList_Append(topics, (name, parts))
    if c.pos != c.end:
        return None
    return (transactional_id, acks, timeout_ms, topics)


def encode_produce_response(int version, int32_t correlation_id, topics, int32_t throttle_time_ms):
    """ProduceResponse v3-7 with size prefix and header v0; topics = [(name, [(partition, error_code,
    base_offset, log_append_time_ms, log_start_offset), ...]), ...] (log_start_offset unused before v5)."""
    if version < 3 or version > 7:
        raise UnsupportedVersionError(f"Produce v{version} is not supported (supported 3-7)")
    cdef Py_ssize_t part_size = 30 if version >= 5 else 22
    cdef Py_ssize_t total = 4 + 4 + 4 + 4  # size, correlation id, topic count, throttle
    cdef Py_ssize_t name_len
    cdef const char *name_p
    cdef unsigned char *p
    topics = topics if isinstance(topics, (list, tuple)) else list(topics)
    for topic in topics:
        name, parts = topic
        _utf8(name, &name_len)
        total += 2 + name_len + 4 + part_size * len(parts)
    out = PyBytes_FromStringAndSize(NULL, total)
    p = <unsigned char *>PyBytes_AS_STRING(out)
    p = _put_i32(p, <int32_t>(total - 4))
    p = _put_i32(p, correlation_id)
    p = _put_i32(p, <int32_t>len(topics))
    try:
        for topic in topics:
            name, parts = topic
            name_p = _utf8(name, &name_len)
            p = _put_i16(p, <int16_t>name_len)
            memcpy(p, name_p, name_len)
            p += name_len
            p = _put_i32(p, <int32_t>len(parts))
            for part in parts:
                partition, error_code, base_offset, log_append_time_ms, log_start_offset = part
                p = _put_i32(p, partition)
                p = _put_i16(p, error_code)
                p = _put_i64(p, base_offset)
                p = _put_i64(p, log_append_time_ms)
                if version >= 5:
                    p = _put_i64(p, log_start_offset)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"Produce v{version} response: {exc}") from None
    p = _put_i32(p, throttle_time_ms)
    if p != <unsigned char *>PyBytes_AS_STRING(out) + total:
        raise ValueError("Produce response: topics changed while being encoded")
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Fetch

def encode_fetch_response(int version, int32_t correlation_id, int32_t throttle_time_ms, int16_t error_code,
                          int32_t session_id, topics):
    """FetchResponse v4-11 → [bytes, record buffer, ..., bytes] for writelines: size prefix and header v0 first,
    each partition's record buffers handed over uncopied; topics = [(name, [(partition, error_code, high_watermark,
    last_stable_offset, log_start_offset, records[, aborted]), ...]), ...], records = None, a buffer or a list of
    buffers; aborted (read_committed) = [(producer id, first offset), ...], or None / absent: an empty array (kafkalog
    answered an empty array to read_uncommitted fetches before it served transactions, and clients take both).
    preferred_read_replica is -1."""
    if version < 4 or version > 11:
        raise UnsupportedVersionError(f"Fetch v{version} is not supported (supported 4-11)")
    cdef Py_ssize_t part_size = 4 + 2 + 8 + 8 + (8 if version >= 5 else 0) + 4 + (4 if version >= 11 else 0) + 4
    cdef Py_ssize_t meta = 4 + 4 + 4 + (6 if version >= 7 else 0) + 4
    cdef Py_ssize_t name_len, records_total = 0, n, pos, prev
    cdef const char *name_p
    cdef unsigned char *scratch
    cdef unsigned char *p
    topics = topics if isinstance(topics, (list, tuple)) else list(topics)
    for topic in topics:
        name, parts = topic
        _utf8(name, &name_len)
        meta += 2 + name_len + 4 + part_size * len(parts)
        for part in parts:
            if len(part) > 6 and part[6]:
                meta += 16 * len(part[6])
    scratch = <unsigned char *>malloc(meta)
    if scratch == NULL:
        raise MemoryError()
    cuts = []  # (position in scratch, [buffers]) where record data goes between our bytes
    try:
        p = scratch + 4
        p = _put_i32(p, correlation_id)
        p = _put_i32(p, throttle_time_ms)
        if version >= 7:
            p = _put_i16(p, error_code)
            p = _put_i32(p, session_id)
        p = _put_i32(p, <int32_t>len(topics))
        try:
            for topic in topics:
                name, parts = topic
                name_p = _utf8(name, &name_len)
                p = _put_i16(p, <int16_t>name_len)
                memcpy(p, name_p, name_len)
                p += name_len
                p = _put_i32(p, <int32_t>len(parts))
                for part in parts:
                    partition, part_error, high_watermark, last_stable_offset, log_start_offset, records = part[:6]
                    aborted = part[6] if len(part) > 6 else None
                    p = _put_i32(p, partition)
                    p = _put_i16(p, part_error)
                    p = _put_i64(p, high_watermark)
                    p = _put_i64(p, last_stable_offset)
                    if version >= 5:
                        p = _put_i64(p, log_start_offset)
                    if aborted:
                        p = _put_i32(p, <int32_t>len(aborted))
                        for producer_id, first_offset in aborted:
                            p = _put_i64(p, producer_id)
                            p = _put_i64(p, first_offset)
                    else:
                        p = _put_i32(p, 0)  # aborted_transactions: empty, not null (clients iterate it)
                    if version >= 11:
                        p = _put_i32(p, -1)  # preferred_read_replica: none, read from the leader
                    if records is None:
                        p = _put_i32(p, -1)
                        continue
                    if not isinstance(records, (list, tuple)):
                        records = (records,)
                    n = 0
                    for b in records:
                        n += _buffer_size(b)
                    if n > 0x7FFFFFFF:
                        raise ValueError(f"records of {n} bytes do not fit a Fetch response")
                    p = _put_i32(p, <int32_t>n)
                    if n:
                        records_total += n
                        PyList_Append(cuts, (p - scratch, records))
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"Fetch v{version} response: {exc}") from None
        if p != scratch + meta:
            raise ValueError("Fetch response: topics changed while being encoded")
        if meta - 4 + records_total > 0x7FFFFFFF:
            raise ValueError(f"Fetch response of {meta + records_total} bytes is larger than a frame")
        kl_store_i32(scratch, <int32_t>(meta - 4 + records_total))
        out = []
        prev = 0
        for cut in cuts:
            pos = cut[0]
            PyList_Append(out, PyBytes_FromStringAndSize(<char *>scratch + prev, pos - prev))
            for b in cut[1]:
                if _buffer_size(b):
                    PyList_Append(out, b)
            prev = pos
        if prev < meta:
            PyList_Append(out, PyBytes_FromStringAndSize(<char *>scratch + prev, meta - prev))
        return out
    finally:
        free(scratch)


def parse_fetch(frame, Py_ssize_t offset, int version):
    """FetchRequest v4-11 body at ``offset`` → the dict protocol.decode_request(1, version, ...) returns."""
    if version < 4 or version > 11:
        raise UnsupportedVersionError(f"Fetch v{version} is not supported (supported 4-11)")
    return _parse(1, frame, offset, version)


cdef object _parse_fetch(const unsigned char *buf, Py_ssize_t size, Py_ssize_t offset, int version):
    cdef Cursor c
    cdef Py_ssize_t n_topics, n_parts, i, j, k
    c.buf = buf
    c.end = size
    c.pos = offset
    c.bad = offset < 0 or offset > size
    if c.bad:
        return None
    out = {}
    out["replica_id"] = read_i32(&c)
    out["max_wait_ms"] = read_i32(&c)
    out["min_bytes"] = read_i32(&c)
    out["max_bytes"] = read_i32(&c)
    out["isolation_level"] = read_i8(&c)
    if version >= 7:
        out["session_id"] = read_i32(&c)
        out["session_epoch"] = read_i32(&c)
    else:
        out["session_id"] = 0
        out["session_epoch"] = -1
    n_topics = read_len32(&c, False)
    if c.bad:
        return None
    topics = []
    for i in range(n_topics):
        topic = read_string(&c, False)
        n_parts = read_len32(&c, False)
        if c.bad:
            return None
        parts = []
        for j in range(n_parts):
            part = {"partition": read_i32(&c)}
            part["current_leader_epoch"] = read_i32(&c) if version >= 9 else -1
            part["fetch_offset"] = read_i64(&c)
            part["log_start_offset"] = read_i64(&c) if version >= 5 else -1
            part["partition_max_bytes"] = read_i32(&c)
            if c.bad:
                return None
            PyList_Append(parts, part)
        PyList_Append(topics, {"topic": topic, "partitions": parts})
    out["topics"] = topics
    forgotten = []
    if version >= 7:
        n_topics = read_len32(&c, False)
        if c.bad:
            return None
        for i in range(n_topics):
            topic = read_string(&c, False)
            n_parts = read_len32(&c, False)
            if c.bad or n_parts * 4 > c.end - c.pos:
                return None
            partitions = [read_i32(&c) for k in range(n_parts)]
            PyList_Append(forgotten, {"topic": topic, "partitions": partitions})
    out["forgotten_topics_data"] = forgotten
    out["rack_id"] = read_string(&c, False) if version >= 11 else ""
    if c.bad or c.pos != c.end:
        return None
    return out
