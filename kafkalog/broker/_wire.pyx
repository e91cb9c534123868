# Kafka wire protocol hot path (Produce v3-13 request/response: v12 is v11's bytes (KIP-890 part 2), v13 names
# topics by id; Fetch v4-18 request/response), in Kafka notation:
#
#   ProduceRequest v3-13 => transactional_id(NULLABLE_STRING) acks(INT16) timeout_ms(INT32)
#     [topic_data => name(STRING, v3-12) topic_id(UUID, v13+) [partition_data => index(INT32)
#     records(NULLABLE RECORDS)]]
#   ProduceResponse v3-13 => [responses => name(STRING, v3-12) topic_id(UUID, v13+) [partition_responses =>
#     index(INT32) error_code(INT16)
#     base_offset(INT64) log_append_time_ms(INT64) log_start_offset(INT64, v5+)
#     [record_errors => batch_index(INT32) batch_index_error_message(NULLABLE_STRING)] (v8+)
#     error_message(NULLABLE_STRING, v8+)]] throttle_time_ms(INT32)
#   FetchRequest v4-18 => replica_id(INT32, v4-14) max_wait_ms(INT32) min_bytes(INT32) max_bytes(INT32)
#     isolation_level(INT8) session_id(INT32, v7+) session_epoch(INT32, v7+)
#     [topics => topic(STRING, v4-12) topic_id(UUID, v13+) [partitions => partition(INT32)
#       current_leader_epoch(INT32, v9+) fetch_offset(INT64) last_fetched_epoch(INT32, v12+)
#       log_start_offset(INT64, v5+) partition_max_bytes(INT32)]]
#     [forgotten_topics_data => topic(STRING, v7-12) topic_id(UUID, v13+) [partitions(INT32)]] (v7+)
#     rack_id(STRING, v11+)
#   FetchResponse v4-18 => throttle_time_ms(INT32) error_code(INT16, v7+) session_id(INT32, v7+)
#     [responses => topic(STRING, v4-12) topic_id(UUID, v13+) [partitions => partition_index(INT32) error_code(INT16)
#       high_watermark(INT64) last_stable_offset(INT64) log_start_offset(INT64, v5+) [aborted_transactions =>
#       producer_id(INT64) first_offset(INT64)] preferred_read_replica(INT32, v11+) records(NULLABLE RECORDS)]]
#
# Flexible versions (KIP-482: Produce 9+, Fetch 12+) write STRING / ARRAY / RECORDS lengths as UNSIGNED_VARINT
# length + 1 (0 = null), end every struct with a TAG_BUFFER and use response header v1 (correlation id + TAG_BUFFER).
# Tagged fields are skipped when read (Fetch's cluster_id, replica_state, replica_directory_id, high_watermark) and
# none is written: the ones Kafka defines for these responses (current_leader, node_endpoints, diverging_epoch,
# snapshot_id) are set by Kafka only after a leader change or for followers, which one node without replicas never
# has, and Kafka writes a tagged field only when it is set. The bytes must be the table codec's (protocol.py) bytes; on any malformed input
# the table codec is asked to decode the same frame, so both raise the same InvalidRequestError naming API, version
# and field.
"""Cython hot path of the broker codec: Produce request parse and response build, Fetch response build and request
parse, zero copy for record data."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.memoryview cimport PyMemoryView_Check, PyMemoryView_GET_BUFFER
from cpython.sequence cimport PySequence_GetSlice
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from kafkalog._engine.clib cimport (
    kl_load_i16,
    kl_load_i32,
    kl_load_i64,
    kl_store_i16,
    kl_store_i32,
    kl_store_i64,
    kl_uvarint_size,
    kl_write_uvarint,
)

import uuid

from kafkalog.errors import InvalidRequestError, UnsupportedVersionError

__all__ = ["encode_fetch_response", "encode_produce_response", "parse_fetch", "parse_produce"]

_UUID = uuid.UUID
# topic ids met in requests, so a fetch loop does not build the same UUID object every time (bounded: ids are
# whatever a client sends)
_uuids = {}
_UUID_CACHE_MAX = 4096


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


cdef uint64_t read_uvarint(Cursor *c) noexcept nogil:
    """UNSIGNED_VARINT of at most 5 bytes (the table codec's limit, and Kafka's readUnsignedVarint's)."""
    cdef uint64_t value = 0
    cdef unsigned char b
    cdef int shift = 0, i
    for i in range(5):
        if c.pos >= c.end:
            c.bad = True
            return 0
        b = c.buf[c.pos]
        c.pos += 1
        value |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    c.bad = True
    return 0


cdef Py_ssize_t read_compact_len(Cursor *c, bint nullable) noexcept nogil:
    """COMPACT_STRING / COMPACT_BYTES / COMPACT_ARRAY length (varint n + 1, 0 = null): -1 for null (only when
    nullable), else a length that fits in what is left; sets c.bad otherwise."""
    cdef uint64_t n = read_uvarint(c)
    if c.bad:
        return 0
    if n == 0:
        if nullable:
            return -1
        c.bad = True
        return 0
    n -= 1
    if n > <uint64_t>(c.end - c.pos):
        c.bad = True
        return 0
    return <Py_ssize_t>n


cdef void skip_tags(Cursor *c) noexcept nogil:
    """TAG_BUFFER => count [tag size data]: every tagged field skipped, as the table codec does."""
    cdef uint64_t count = read_uvarint(c)
    cdef uint64_t i, size
    if c.bad:
        return
    if count > <uint64_t>(c.end - c.pos):
        c.bad = True
        return
    for i in range(count):
        read_uvarint(c)
        size = read_uvarint(c)
        if c.bad:
            return
        if size > <uint64_t>(c.end - c.pos):
            c.bad = True
            return
        c.pos += <Py_ssize_t>size


cdef inline Py_ssize_t read_len(Cursor *c, bint flexible, bint nullable) noexcept nogil:
    """An array's or records' length in either format."""
    if flexible:
        return read_compact_len(c, nullable)
    return read_len32(c, nullable)


cdef object read_str(Cursor *c, bint flexible, bint nullable):
    """STRING or COMPACT_STRING → str, or None for null / on c.bad."""
    cdef Py_ssize_t n
    if not flexible:
        return read_string(c, nullable)
    n = read_compact_len(c, nullable)
    if c.bad or n < 0:
        return None
    c.pos += n
    return PyUnicode_DecodeUTF8(<const char *>c.buf + c.pos - n, n, NULL)


cdef object read_uuid(Cursor *c):
    if c.end - c.pos < 16:
        c.bad = True
        return None
    raw = PyBytes_FromStringAndSize(<const char *>c.buf + c.pos, 16)
    c.pos += 16
    value = _uuids.get(raw)
    if value is None:
        if len(_uuids) >= _UUID_CACHE_MAX:
            _uuids.clear()
        value = _uuids[raw] = _UUID(bytes=raw)
    return value


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


cdef inline unsigned char *_put_uvarint(unsigned char *p, uint32_t v) noexcept nogil:
    return p + kl_write_uvarint(p, v)


cdef inline unsigned char *_put_len(unsigned char *p, Py_ssize_t n, bint flexible, bint wide) noexcept nogil:
    """A length (-1 = null) as INT16 / INT32, or as a compact UNSIGNED_VARINT n + 1 (0 = null)."""
    if flexible:
        return _put_uvarint(p, <uint32_t>(n + 1))
    if wide:
        return _put_i32(p, <int32_t>n)
    return _put_i16(p, <int16_t>n)


cdef inline Py_ssize_t _len_size(Py_ssize_t n, bint flexible, bint wide) noexcept nogil:
    if flexible:
        return kl_uvarint_size(<uint32_t>(n + 1))
    return 4 if wide else 2


cdef const char *_utf8(object name, Py_ssize_t *size) except NULL:
    if not isinstance(name, str):
        raise ValueError(f"topic name must be str, got {type(name).__name__}")
    cdef const char *s = PyUnicode_AsUTF8AndSize(name, size)
    if size[0] > 32767:
        raise ValueError(f"topic name of {size[0]} bytes is longer than 32767")
    return s


cdef const char *_topic_id(object topic_id) except NULL:
    """The 16 bytes of a topic id (uuid.UUID, or 16 bytes) for a v13+ response."""
    if isinstance(topic_id, _UUID):
        raw = topic_id.bytes
    elif PyBytes_CheckExact(topic_id) and PyBytes_GET_SIZE(topic_id) == 16:
        raw = topic_id
    else:
        raise ValueError(f"topic id must be a uuid.UUID, got {type(topic_id).__name__}")
    return PyBytes_AS_STRING(raw)


cdef inline Py_ssize_t _topic_key_size(object name, bint ids, bint fx) except -1:
    """Bytes of a response topic's key: its id (v13+: 16 bytes, checked here) or its name (a STRING)."""
    cdef Py_ssize_t name_len
    if ids:
        _topic_id(name)
        return 16
    _utf8(name, &name_len)
    return _len_size(name_len, fx, False) + name_len


cdef inline unsigned char *_put_topic_key(unsigned char *p, object name, bint ids, bint fx) except NULL:
    """Write a response topic's key: its id (v13+) or its name (a STRING)."""
    cdef Py_ssize_t name_len
    cdef const char *name_p
    if ids:
        memcpy(p, _topic_id(name), 16)
        return p + 16
    name_p = _utf8(name, &name_len)
    p = _put_len(p, name_len, fx, False)
    memcpy(p, name_p, name_len)
    return p + name_len


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
    """ProduceRequest v3-13 body at ``offset`` → (transactional_id, acks, timeout_ms, topics), topics =
    [(name, [(partition, records memoryview or None), ...]), ...]; records are slices of ``frame``."""
    if version < 3 or version > 13:
        raise UnsupportedVersionError(f"Produce v{version} is not supported (supported 3-13)")
    return _parse(0, frame, offset, version)


cdef object _parse(int api_key, object frame, Py_ssize_t offset, int version):
    """Run the C parser of ``api_key`` over ``frame``'s buffer; a frame it refuses is decoded again by the table
    codec, which raises the InvalidRequestError naming the field (both paths fail alike)."""
    cdef Py_buffer view
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        if api_key == 0:
            result = _parse_produce(<const unsigned char *>view.buf, view.len, offset, frame, version >= 9,
                                    version >= 13)
        else:
            result = _parse_fetch(<const unsigned char *>view.buf, view.len, offset, version)
    except UnicodeDecodeError:
        result = None
    finally:
        PyBuffer_Release(&view)
    if result is None:
        _reraise(api_key, version, frame, offset)
    return result


cdef object _parse_produce(const unsigned char *buf, Py_ssize_t size, Py_ssize_t offset, object frame, bint fx,
                           bint ids):
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
    transactional_id = read_str(&c, fx, True)
    acks = read_i16(&c)
    timeout_ms = read_i32(&c)
    n_topics = read_len(&c, fx, False)
    if c.bad:
        return None
    topics = []
    for i in range(n_topics):
        name = read_uuid(&c) if ids else read_str(&c, fx, False)  # v13+: the topic id (KIP-516)
        n_parts = read_len(&c, fx, False)
        if c.bad:
            return None
        parts = []
        for j in range(n_parts):
            index = read_i32(&c)
            n = read_len(&c, fx, True)
            if c.bad:
                return None
            if n < 0:
                PyList_Append(parts, (index, None))
            else:
                PyList_Append(parts, (index, PySequence_GetSlice(mv, c.pos, c.pos + n)))
                c.pos += n
            if fx:
                skip_tags(&c)
        if fx:
            skip_tags(&c)
        PyList_Append(topics, (name, parts))
    if fx:
        skip_tags(&c)  # bytes after the last tag buffer are ignored, as Kafka (and the table codec) ignore them
        if c.bad:
            return None
    elif c.pos != c.end:
        return None
    return (transactional_id, acks, timeout_ms, topics)


cdef Py_ssize_t _nullable_str_size(object s, bint fx, const char **data, Py_ssize_t *n) except -1:
    """Bytes of a NULLABLE_STRING / COMPACT_NULLABLE_STRING; ``data``/``n`` the UTF-8 (n = -1 for None)."""
    if s is None:
        n[0] = -1
        return 1 if fx else 2
    if not isinstance(s, str):
        raise ValueError(f"expected str or None, got {type(s).__name__}")
    data[0] = PyUnicode_AsUTF8AndSize(s, n)
    if n[0] > 32767:
        raise ValueError(f"string of {n[0]} bytes is longer than 32767")
    return _len_size(n[0], fx, False) + n[0]


cdef unsigned char *_put_nullable_str(unsigned char *p, object s, bint fx):
    cdef const char *data = NULL
    cdef Py_ssize_t n
    _nullable_str_size(s, fx, &data, &n)
    p = _put_len(p, n, fx, False)
    if n > 0:
        memcpy(p, data, n)
        p += n
    return p


def encode_produce_response(int version, int32_t correlation_id, topics, int32_t throttle_time_ms):
    """ProduceResponse v3-13 with size prefix and header (v1, with its tag buffer, from v9); topics = [(name (v13+:
    the topic id, uuid.UUID),
    [(partition, error_code, base_offset, log_append_time_ms, log_start_offset[, record_errors[, error_message]]),
    ...]), ...] (log_start_offset unused before v5; record_errors = [(batch_index, message or None)] and
    error_message (str or None) from v8, empty / None when left out)."""
    if version < 3 or version > 13:
        raise UnsupportedVersionError(f"Produce v{version} is not supported (supported 3-13)")
    cdef bint fx = version >= 9
    cdef bint ids = version >= 13
    cdef bint v8 = version >= 8
    cdef Py_ssize_t part_fixed = (30 if version >= 5 else 22) + (1 if fx else 0)
    cdef Py_ssize_t total = 4 + 4 + (1 if fx else 0) + _len_size(len(topics), fx, True) + 4 + (1 if fx else 0)
    cdef Py_ssize_t n
    cdef const char *data = NULL
    cdef unsigned char *p
    topics = topics if isinstance(topics, (list, tuple)) else list(topics)
    try:
        for topic in topics:
            name, parts = topic
            total += _topic_key_size(name, ids, fx)
            total += _len_size(len(parts), fx, True) + part_fixed * len(parts) + (1 if fx else 0)
            if v8:
                for part in parts:
                    record_errors = part[5] if len(part) > 5 else None
                    total += _len_size(len(record_errors) if record_errors else 0, fx, True)
                    if record_errors:
                        for batch_index, message in record_errors:
                            total += 4 + _nullable_str_size(message, fx, &data, &n) + (1 if fx else 0)
                    total += _nullable_str_size(part[6] if len(part) > 6 else None, fx, &data, &n)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"Produce v{version} response: {exc}") from None
    out = PyBytes_FromStringAndSize(NULL, total)
    p = <unsigned char *>PyBytes_AS_STRING(out)
    p = _put_i32(p, <int32_t>(total - 4))
    p = _put_i32(p, correlation_id)
    if fx:
        p[0] = 0  # response header v1: no tagged fields
        p += 1
    p = _put_len(p, len(topics), fx, True)
    try:
        for topic in topics:
            name, parts = topic
            p = _put_topic_key(p, name, ids, fx)
            p = _put_len(p, len(parts), fx, True)
            for part in parts:
                partition, error_code, base_offset, log_append_time_ms, log_start_offset = part[:5]
                p = _put_i32(p, partition)
                p = _put_i16(p, error_code)
                p = _put_i64(p, base_offset)
                p = _put_i64(p, log_append_time_ms)
                if version >= 5:
                    p = _put_i64(p, log_start_offset)
                if v8:
                    record_errors = part[5] if len(part) > 5 else None
                    p = _put_len(p, len(record_errors) if record_errors else 0, fx, True)
                    if record_errors:
                        for batch_index, message in record_errors:
                            p = _put_i32(p, batch_index)
                            p = _put_nullable_str(p, message, fx)
                            if fx:
                                p[0] = 0
                                p += 1
                    p = _put_nullable_str(p, part[6] if len(part) > 6 else None, fx)
                if fx:
                    p[0] = 0
                    p += 1
            if fx:
                p[0] = 0
                p += 1
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"Produce v{version} response: {exc}") from None
    p = _put_i32(p, throttle_time_ms)
    if fx:
        p[0] = 0
        p += 1
    if p != <unsigned char *>PyBytes_AS_STRING(out) + total:
        raise ValueError("Produce response: topics changed while being encoded")
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Fetch

def encode_fetch_response(int version, int32_t correlation_id, int32_t throttle_time_ms, int16_t error_code,
                          int32_t session_id, topics):
    """FetchResponse v4-18 → [bytes, record buffer, ..., bytes] for writelines: size prefix and header first (v1, with
    its tag buffer, from v12), each partition's record buffers handed over uncopied; topics = [(topic, [(partition,
    error_code, high_watermark, last_stable_offset, log_start_offset, records[, aborted]), ...]), ...]: topic is the
    name (str) before v13 and the topic id (uuid.UUID) from v13; records = None, a buffer or a list of buffers;
    aborted (read_committed) = [(producer id, first offset), ...], or None / absent: an empty array (kafkalog
    answered an empty array to read_uncommitted fetches before it served transactions, and clients take both).
    preferred_read_replica is -1; no tagged field is written."""
    if version < 4 or version > 18:
        raise UnsupportedVersionError(f"Fetch v{version} is not supported (supported 4-18)")
    cdef bint fx = version >= 12
    cdef bint ids = version >= 13
    cdef Py_ssize_t part_size = 4 + 2 + 8 + 8 + (8 if version >= 5 else 0) + (5 if fx else 4) \
        + (4 if version >= 11 else 0) + (5 if fx else 4) + (1 if fx else 0)
    cdef Py_ssize_t aborted_size = 16 + (1 if fx else 0)
    # an upper bound: varint lengths are counted at their 5-byte maximum, the bytes written are cut to size after
    cdef Py_ssize_t meta = 4 + 4 + (1 if fx else 0) + 4 + (6 if version >= 7 else 0) + (5 if fx else 4) \
        + (1 if fx else 0)
    cdef Py_ssize_t records_total = 0, n, pos, prev, used
    cdef unsigned char *scratch
    cdef unsigned char *p
    topics = topics if isinstance(topics, (list, tuple)) else list(topics)
    for topic in topics:
        name, parts = topic
        meta += _topic_key_size(name, ids, fx)
        meta += (5 if fx else 4) + part_size * len(parts) + (1 if fx else 0)
        for part in parts:
            if len(part) > 6 and part[6]:
                meta += aborted_size * len(part[6])
    scratch = <unsigned char *>malloc(meta)
    if scratch == NULL:
        raise MemoryError()
    cuts = []  # (position in scratch, [buffers]) where record data goes between our bytes
    try:
        p = scratch + 4
        p = _put_i32(p, correlation_id)
        if fx:
            p[0] = 0  # response header v1: no tagged fields
            p += 1
        p = _put_i32(p, throttle_time_ms)
        if version >= 7:
            p = _put_i16(p, error_code)
            p = _put_i32(p, session_id)
        p = _put_len(p, len(topics), fx, True)
        try:
            for topic in topics:
                name, parts = topic
                p = _put_topic_key(p, name, ids, fx)
                p = _put_len(p, len(parts), fx, True)
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
                        if len(aborted) * aborted_size > scratch + meta - p:
                            raise ValueError("Fetch response: topics changed while being encoded")
                        p = _put_len(p, len(aborted), fx, True)
                        for producer_id, first_offset in aborted:
                            p = _put_i64(p, producer_id)
                            p = _put_i64(p, first_offset)
                            if fx:
                                p[0] = 0
                                p += 1
                    else:
                        p = _put_len(p, 0, fx, True)  # aborted_transactions: empty, not null (clients iterate it)
                    if version >= 11:
                        p = _put_i32(p, -1)  # preferred_read_replica: none, read from the leader
                    if records is None:
                        p = _put_len(p, -1, fx, True)
                    else:
                        if not isinstance(records, (list, tuple)):
                            records = (records,)
                        n = 0
                        for b in records:
                            n += _buffer_size(b)
                        if n > 0x7FFFFFFE:
                            raise ValueError(f"records of {n} bytes do not fit a Fetch response")
                        p = _put_len(p, n, fx, True)
                        if n:
                            records_total += n
                            PyList_Append(cuts, (p - scratch, records))
                    if fx:
                        p[0] = 0  # the partition's tag buffer (comes after its records)
                        p += 1
                if fx:
                    p[0] = 0
                    p += 1
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"Fetch v{version} response: {exc}") from None
        if fx:
            p[0] = 0
            p += 1
        used = p - scratch
        if used > meta or (not fx and used != meta):
            raise ValueError("Fetch response: topics changed while being encoded")
        if used - 4 + records_total > 0x7FFFFFFF:
            raise ValueError(f"Fetch response of {used + records_total} bytes is larger than a frame")
        kl_store_i32(scratch, <int32_t>(used - 4 + records_total))
        out = []
        prev = 0
        for cut in cuts:
            pos = cut[0]
            PyList_Append(out, PyBytes_FromStringAndSize(<char *>scratch + prev, pos - prev))
            for b in cut[1]:
                if _buffer_size(b):
                    PyList_Append(out, b)
            prev = pos
        if prev < used:
            PyList_Append(out, PyBytes_FromStringAndSize(<char *>scratch + prev, used - prev))
        return out
    finally:
        free(scratch)


def parse_fetch(frame, Py_ssize_t offset, int version):
    """FetchRequest v4-18 body at ``offset`` → the dict protocol.decode_request(1, version, ...) returns, with the
    fields this version carries (tagged ones skipped) and only those, but for the ones the broker reads of every
    version, with their defaults when the version lacks them: session_id / session_epoch (0 / -1 before v7),
    forgotten_topics_data ([]), rack_id (""), current_leader_epoch and log_start_offset (-1)."""
    if version < 4 or version > 18:
        raise UnsupportedVersionError(f"Fetch v{version} is not supported (supported 4-18)")
    return _parse(1, frame, offset, version)


cdef object _parse_fetch(const unsigned char *buf, Py_ssize_t size, Py_ssize_t offset, int version):
    cdef Cursor c
    cdef Py_ssize_t n_topics, n_parts, i, j, k
    cdef bint fx = version >= 12
    cdef bint ids = version >= 13
    cdef int32_t partition, leader_epoch, last_fetched_epoch, max_bytes
    cdef int64_t fetch_offset, log_start_offset
    c.buf = buf
    c.end = size
    c.pos = offset
    c.bad = offset < 0 or offset > size
    if c.bad:
        return None
    out = {}
    if version <= 14:
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
    n_topics = read_len(&c, fx, False)
    if c.bad:
        return None
    topics = []
    for i in range(n_topics):
        topic = read_uuid(&c) if ids else read_str(&c, fx, False)
        n_parts = read_len(&c, fx, False)
        if c.bad:
            return None
        parts = []
        for j in range(n_parts):
            partition = read_i32(&c)
            leader_epoch = read_i32(&c) if version >= 9 else -1
            fetch_offset = read_i64(&c)
            last_fetched_epoch = read_i32(&c) if fx else -1
            log_start_offset = read_i64(&c) if version >= 5 else -1
            max_bytes = read_i32(&c)
            if fx:
                skip_tags(&c)
            if c.bad:
                return None
            # one presized dict (its fields read first): the fetch hot path builds one per partition
            if fx:
                PyList_Append(parts, {"partition": partition, "current_leader_epoch": leader_epoch,
                                      "fetch_offset": fetch_offset, "last_fetched_epoch": last_fetched_epoch,
                                      "log_start_offset": log_start_offset, "partition_max_bytes": max_bytes})
            else:
                PyList_Append(parts, {"partition": partition, "current_leader_epoch": leader_epoch,
                                      "fetch_offset": fetch_offset, "log_start_offset": log_start_offset,
                                      "partition_max_bytes": max_bytes})
        if fx:
            skip_tags(&c)
        PyList_Append(topics, {"topic_id" if ids else "topic": topic, "partitions": parts})
    out["topics"] = topics
    forgotten = []
    if version >= 7:
        n_topics = read_len(&c, fx, False)
        if c.bad:
            return None
        for i in range(n_topics):
            topic = read_uuid(&c) if ids else read_str(&c, fx, False)
            n_parts = read_len(&c, fx, False)
            if c.bad or n_parts * 4 > c.end - c.pos:
                return None
            partitions = [read_i32(&c) for k in range(n_parts)]
            if fx:
                skip_tags(&c)
            PyList_Append(forgotten, {"topic_id" if ids else "topic": topic, "partitions": partitions})
    out["forgotten_topics_data"] = forgotten
    out["rack_id"] = read_str(&c, fx, False) if version >= 11 else ""
    if fx:
        skip_tags(&c)  # bytes after the last tag buffer are ignored, as Kafka (and the table codec) ignore them
        if c.bad:
            return None
    elif c.bad or c.pos != c.end:
        return None
    return out
