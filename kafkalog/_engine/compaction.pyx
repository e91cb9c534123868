# Compaction kernels: the cleaner's compiled parts (Kafka's LogCleaner: SkimpyOffsetMap and MemoryRecords.filterTo).
#
#   OffsetMap slot (24 bytes, in memory only) =>
#     Digest => Uint64 Uint64     the key's 128-bit digest
#     Offset => Uint64            the key's latest offset + 1; 0 = an empty slot
#
# OffsetMap holds key digest -> latest offset in fixed memory: open addressing over these slots, a power-of-two table
# filled to at most load_factor. The digest is a 128-bit multiply-rotate hash of the key (two lanes over 16-byte
# blocks, each finished by a 64-bit avalanche); Kafka uses MD5's 128 bits. Two different keys are confused only when
# all 128 bits agree.
#
# filter_batches copies batches (framing.pyx's layout) keeping what the map says is latest. A batch it keeps in part
# is rewritten around its kept records: BatchLength, RecordsCount, MaxTimestamp, Attributes (bit 6: a delete horizon,
# KIP-534, held in BaseTimestamp) and the CRC change; BaseOffset, LastOffsetDelta, the producer fields and the
# records' offset deltas stay, so offsets keep their holes.
"""The cleaner's compiled parts: OffsetMap, filter_batches, producer_last_offsets."""

from cpython.buffer cimport PyBUF_READ
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport int16_t, int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from .clib cimport (
    KL_ATTRIBUTES_OFFSET, KL_BASE_TIMESTAMP_OFFSET, KL_CODEC_NONE, KL_COMPRESSION_CODEC_MASK, KL_CONTROL_FLAG_MASK,
    KL_CRC_OFFSET, KL_DELETE_HORIZON_FLAG_MASK, KL_LENGTH_OFFSET, KL_LOG_OVERHEAD, KL_MAX_TIMESTAMP_OFFSET,
    KL_RECORDS_COUNT_OFFSET, KL_RECORD_BATCH_OVERHEAD, KL_TIMESTAMP_TYPE_MASK, kl_crc32c, kl_store_i16, kl_store_i32,
    kl_store_i64, kl_store_u32, kl_varlong_size, kl_write_varint, kl_write_varlong,
)
from .codecs cimport compress, decompress, read_view
from .framing cimport (
    KL_BATCH_OK, REC_OK, BatchHeader, RecordView, batch_error_message, batch_where, parse_batch_header, read_record,
    read_varint, read_varlong, record_message,
)

from kafkalog.errors import InvalidRecordError

__all__ = ["OffsetMap", "filter_batches", "producer_last_offsets"]

cdef extern from "stdlib.h" nogil:
    void *calloc(size_t n, size_t size)

cdef uint64_t _H_C1 = 0x87c37b91114253d5ULL
cdef uint64_t _H_C2 = 0x4cf5ad432745937fULL


cdef inline uint64_t _rotl64(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t _avalanche(uint64_t k) noexcept nogil:
    k ^= k >> 33
    k *= 0xff51afd7ed558ccdULL
    k ^= k >> 33
    k *= 0xc4ceb9fe1a85ec53ULL
    k ^= k >> 33
    return k


cdef inline uint64_t _word(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """Little-endian load of n (<= 8) bytes."""
    cdef uint64_t w = 0
    cdef Py_ssize_t i
    if n == 8:
        memcpy(&w, p, 8)
        return w
    for i in range(n):
        w |= (<uint64_t>p[i]) << (8 * i)
    return w


cdef void _key_digest(const unsigned char *p, Py_ssize_t n, uint64_t *out) noexcept nogil:
    cdef uint64_t h1 = 0x9368e53c2f6af274ULL, h2 = 0x586dcd208f7cd3fdULL, k1, k2
    cdef Py_ssize_t i = 0, rest
    while i + 16 <= n:
        k1 = _word(p + i, 8)
        k2 = _word(p + i + 8, 8)
        k1 *= _H_C1
        k1 = _rotl64(k1, 31)
        k1 *= _H_C2
        h1 ^= k1
        h1 = _rotl64(h1, 27) + h2
        h1 = h1 * 5 + 0x52dce729
        k2 *= _H_C2
        k2 = _rotl64(k2, 33)
        k2 *= _H_C1
        h2 ^= k2
        h2 = _rotl64(h2, 31) + h1
        h2 = h2 * 5 + 0x38495ab5
        i += 16
    rest = n - i
    if rest > 0:
        k1 = _word(p + i, rest if rest < 8 else 8)
        k1 *= _H_C1
        k1 = _rotl64(k1, 31)
        k1 *= _H_C2
        h1 ^= k1
        if rest > 8:
            k2 = _word(p + i + 8, rest - 8)
            k2 *= _H_C2
            k2 = _rotl64(k2, 33)
            k2 *= _H_C1
            h2 ^= k2
    h1 ^= <uint64_t>n
    h2 ^= <uint64_t>n
    h1 += h2
    h2 += h1
    h1 = _avalanche(h1)
    h2 = _avalanche(h2)
    h1 += h2
    h2 += h1
    out[0] = h1
    out[1] = h2


cdef object _records_of(const unsigned char *b, const BatchHeader *h, Py_ssize_t pos, const unsigned char **rp,
                        const unsigned char **rend):
    """[rp, rend) = the records of the batch at b (position pos), decompressed when compressed; returns what keeps
    them alive (None: they are b's)."""
    cdef int codec = h.attributes & KL_COMPRESSION_CODEC_MASK
    cdef Py_ssize_t size = <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD, n
    if codec == KL_CODEC_NONE:
        rp[0] = b + KL_RECORD_BATCH_OVERHEAD
        rend[0] = b + size
        return None
    plain = decompress(codec, b + KL_RECORD_BATCH_OVERHEAD, size - KL_RECORD_BATCH_OVERHEAD, h, pos)
    mv = read_view(plain, rp, &n)
    rend[0] = rp[0] + n
    return mv


cdef class OffsetMap:
    """Key -> latest offset in bounded memory, for the cleaner (Kafka's SkimpyOffsetMap).

    ``OffsetMap(memory_bytes, load_factor=0.9, initial_bytes=None)``: a table of 24-byte slots (a power of two, at
    least 16), filled to at most ``load_factor``. It starts at ``initial_bytes`` (default: all of ``memory_bytes``)
    and doubles while a new key would pass the load factor and the doubled table fits ``memory_bytes`` (the slots
    hold whole digests, so growing needs no keys); then ``put`` refuses new keys (``full`` turns True). A key already
    present is always updated. Memory is proportional to the distinct keys, never above ``memory_bytes``. Not
    thread-safe.
    """

    def __cinit__(self, Py_ssize_t memory_bytes, double load_factor=0.9, initial_bytes=None):
        cdef Py_ssize_t cap = 16, max_cap = 16
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load_factor {load_factor} must be in (0, 1]")
        while max_cap * 2 * 24 <= memory_bytes:
            max_cap *= 2
        if initial_bytes is None:
            cap = max_cap
        else:
            while cap * 2 * 24 <= initial_bytes and cap < max_cap:
                cap *= 2
        self._slots = <uint64_t *>calloc(cap * 3, sizeof(uint64_t))
        if self._slots == NULL:
            raise MemoryError(f"offset map of {cap * 24} bytes")
        self._cap = cap
        self._mask = cap - 1
        self._max_cap = max_cap
        self._load = load_factor
        self.max_entries = max(1, <Py_ssize_t>(cap * load_factor))
        self.size = 0
        self.full = False
        self.latest_offset = -1

    def __dealloc__(self):
        free(self._slots)

    @property
    def capacity(self):
        """Slots in the table now."""
        return self._cap

    @property
    def max_capacity(self):
        """Slots the table may grow to."""
        return self._max_cap

    @property
    def memory_bytes(self):
        return self._cap * 24

    def clear(self):
        memset(self._slots, 0, self._cap * 3 * sizeof(uint64_t))
        self.size = 0
        self.full = False
        self.latest_offset = -1

    cdef inline Py_ssize_t _slot(self, const uint64_t *d) noexcept nogil:
        """Index of d's slot, or of the empty slot where it would go (linear probing)."""
        cdef Py_ssize_t i = <Py_ssize_t>(d[0] & <uint64_t>self._mask)
        cdef uint64_t *s
        while True:
            s = self._slots + 3 * i
            if s[2] == 0 or (s[0] == d[0] and s[1] == d[1]):
                return i
            i = (i + 1) & self._mask

    cdef int _grow(self) noexcept nogil:
        """Double the table (1) when it may; 0 when at its bound or out of memory."""
        cdef Py_ssize_t old_cap = self._cap, i
        cdef uint64_t *old = self._slots
        cdef uint64_t *s
        cdef uint64_t *t
        cdef uint64_t *fresh
        if old_cap >= self._max_cap:
            return 0
        fresh = <uint64_t *>calloc(old_cap * 2 * 3, sizeof(uint64_t))
        if fresh == NULL:
            return 0
        self._slots = fresh
        self._cap = old_cap * 2
        self._mask = self._cap - 1
        self.max_entries = max(1, <Py_ssize_t>(self._cap * self._load))
        for i in range(old_cap):
            s = old + 3 * i
            if s[2] != 0:
                t = self._slots + 3 * self._slot(s)
                t[0] = s[0]
                t[1] = s[1]
                t[2] = s[2]
        free(old)
        return 1

    cdef inline int _put(self, const unsigned char *key, Py_ssize_t n, int64_t offset) noexcept nogil:
        """1 = stored, 0 = refused (a new key and the map is full)."""
        cdef uint64_t d[2]
        cdef uint64_t *s
        _key_digest(key, n, d)
        s = self._slots + 3 * self._slot(d)
        if s[2] == 0:
            if self.size >= self.max_entries:
                if not self._grow():
                    self.full = True
                    return 0
                s = self._slots + 3 * self._slot(d)
            s[0] = d[0]
            s[1] = d[1]
            self.size += 1
        s[2] = <uint64_t>(offset + 1)
        if offset > self.latest_offset:
            self.latest_offset = offset
        return 1

    cdef inline int64_t _get(self, const unsigned char *key, Py_ssize_t n) noexcept nogil:
        cdef uint64_t d[2]
        cdef uint64_t *s
        _key_digest(key, n, d)
        s = self._slots + 3 * self._slot(d)
        return <int64_t>s[2] - 1   # -1 when empty

    def put(self, key, int64_t offset):
        """Map ``key`` (bytes-like) to ``offset``; False when the map is full and ``key`` is new."""
        cdef const unsigned char *p
        cdef Py_ssize_t n
        mv = read_view(key, &p, &n)
        return bool(self._put(p, n, offset))

    def get(self, key):
        """The offset mapped for ``key``, or -1."""
        cdef const unsigned char *p
        cdef Py_ssize_t n
        mv = read_view(key, &p, &n)
        return self._get(p, n)

    def add_batches(self, buffer, int64_t start=0, int64_t stop=0x7fffffffffffffff, Py_ssize_t pos=0,
                    Py_ssize_t max_bytes=-1):
        """Map every keyed record with offset in [start, stop) of the whole batches in ``buffer`` from byte ``pos``
        (a later record replaces an earlier one of the same key), until ``max_bytes`` of input were taken (-1: all;
        at least one batch). Control batches and records without a key are skipped. Uncompressed records are mapped
        without the GIL. Returns (next position, offset reached): the offset is ``stop`` once a batch at or past it
        is seen, else the end of the last batch taken; when a batch's keys did not all fit, it is that batch's base
        offset (``full`` is then True; some of its keys may be in the map, which only ever names offsets that
        exist)."""
        cdef const unsigned char *p
        cdef Py_ssize_t n, size, taken = 0
        cdef BatchHeader h
        cdef int rc
        cdef int64_t reached = start
        cdef const unsigned char *rp
        cdef const unsigned char *rend
        cdef int32_t bad = -1
        mv = read_view(buffer, &p, &n)
        while pos < n and (max_bytes < 0 or taken == 0 or taken < max_bytes):
            rc = parse_batch_header(p + pos, n - pos, &h)
            if rc != KL_BATCH_OK:
                raise InvalidRecordError(f"offset map: {batch_error_message(rc)} at byte {pos}")
            size = <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
            if h.base_offset >= stop:
                return pos, stop
            if h.base_offset + h.last_offset_delta < start or (h.attributes & KL_CONTROL_FLAG_MASK):
                pos += size
                taken += size
                reached = max(reached, min(stop, h.base_offset + h.last_offset_delta + 1))
                continue
            plain = _records_of(p + pos, &h, pos, &rp, &rend)
            with nogil:
                rc = self._map_records(rp, rend, &h, start, stop, &bad)
            if rc == 1:
                return pos, h.base_offset
            if rc != REC_OK:
                raise InvalidRecordError(f"{batch_where(&h, pos)}: {record_message(rc, bad, h.records_count)}")
            pos += size
            taken += size
            reached = max(reached, min(stop, h.base_offset + h.last_offset_delta + 1))
        return pos, reached

    cdef int _map_records(self, const unsigned char *rp, const unsigned char *rend, const BatchHeader *h,
                          int64_t start, int64_t stop, int32_t *bad) noexcept nogil:
        """REC_OK, 1 when the map is full, or a read_record error (bad = the record's index)."""
        cdef RecordView r
        cdef int32_t i
        cdef int rc
        cdef int64_t off
        for i in range(h.records_count):
            rc = read_record(rp, rend, &r)
            if rc != REC_OK:
                bad[0] = i
                return rc
            off = h.base_offset + r.offset_delta
            if r.key_len >= 0 and start <= off < stop:
                if not self._put(r.key, r.key_len, off):
                    return 1
            rp = r.end
        return REC_OK


cdef inline void _patch_header(unsigned char *o, Py_ssize_t size, int32_t count, int64_t max_ts,
                               int16_t attributes) noexcept nogil:
    kl_store_i32(o + KL_LENGTH_OFFSET, <int32_t>(size - KL_LOG_OVERHEAD))
    kl_store_i16(o + KL_ATTRIBUTES_OFFSET, attributes)
    kl_store_i64(o + KL_MAX_TIMESTAMP_OFFSET, max_ts)
    kl_store_i32(o + KL_RECORDS_COUNT_OFFSET, count)
    kl_store_u32(o + KL_CRC_OFFSET, kl_crc32c(0, o + KL_ATTRIBUTES_OFFSET, size - KL_ATTRIBUTES_OFFSET))


def producer_last_offsets(buffer, dict into=None):
    """producer id -> last offset of its last batch in ``buffer`` (headers only; batches without a producer id are
    skipped), merged into ``into`` when given (later batches win)."""
    cdef const unsigned char *p
    cdef Py_ssize_t n, pos = 0
    cdef BatchHeader h
    cdef int rc
    out = {} if into is None else into
    mv = read_view(buffer, &p, &n)
    while pos < n:
        rc = parse_batch_header(p + pos, n - pos, &h)
        if rc != KL_BATCH_OK:
            raise InvalidRecordError(f"producer scan: {batch_error_message(rc)} at byte {pos}")
        if h.producer_id >= 0:
            out[h.producer_id] = h.base_offset + h.last_offset_delta
        pos += <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
    return out


cdef int _choose_records(const unsigned char *rp, const unsigned char *rend, const BatchHeader *h, OffsetMap m,
                         bint drop_tombstones, unsigned char *keep, _Kept *k, int32_t *bad) noexcept nogil:
    """Pass 1 of a batch (no GIL): keep[i] for every record, and what is kept. A read_record code on error."""
    cdef RecordView r
    cdef int32_t i
    cdef int rc
    cdef int64_t off, found
    cdef bint log_append = (h.attributes & KL_TIMESTAMP_TYPE_MASK) != 0
    k.n = 0
    k.tombstone = False
    k.max_ts = h.max_timestamp if log_append else -1
    k.bytes = 0
    for i in range(h.records_count):
        rc = read_record(rp, rend, &r)
        if rc != REC_OK:
            bad[0] = i
            return rc
        off = h.base_offset + r.offset_delta
        if r.key_len < 0:
            found = 0x7fffffffffffffff   # Kafka's cleaner discards records without a key
        else:
            found = m._get(r.key, r.key_len)
        keep[i] = found <= off and not (drop_tombstones and r.value_len < 0)
        if keep[i]:
            k.n += 1
            k.bytes += r.end - rp
            if r.value_len < 0:
                k.tombstone = True
            if not log_append and h.base_timestamp + r.ts_delta > k.max_ts:
                k.max_ts = h.base_timestamp + r.ts_delta
        rp = r.end
    return REC_OK


cdef Py_ssize_t _copy_records(const unsigned char *rp, const unsigned char *rend, const BatchHeader *h,
                              const unsigned char *keep, bint retime, int64_t new_base,
                              unsigned char *w) noexcept nogil:
    """Pass 2 (no GIL): the kept records into w, as they are or with their timestamp delta re-based on new_base
    (their other fields byte for byte). Returns the bytes written (w holds at least kept bytes + 16 per record)."""
    cdef RecordView r
    cdef int32_t i, body
    cdef int k1, k2
    cdef int64_t old_delta
    cdef Py_ssize_t rest
    cdef unsigned char *start = w
    for i in range(h.records_count):
        read_record(rp, rend, &r)
        if keep[i]:
            if not retime:
                memcpy(w, rp, r.end - rp)
                w += r.end - rp
            else:
                k1 = read_varint(rp, r.end, &body)
                k2 = read_varlong(rp + k1 + 1, r.end, &old_delta)
                rest = r.end - (rp + k1 + 1 + k2)  # offset delta, key, value, headers
                w += kl_write_varint(w, <int32_t>(1 + kl_varlong_size(h.base_timestamp + r.ts_delta - new_base)
                                                  + rest))
                w[0] = rp[k1]  # attributes
                w += 1
                w += kl_write_varlong(w, h.base_timestamp + r.ts_delta - new_base)
                memcpy(w, rp + k1 + 1 + k2, rest)
                w += rest
        rp = r.end
    return w - start


def filter_batches(buffer, Py_ssize_t pos, OffsetMap offset_map, int64_t now_ms, int64_t delete_retention_ms,
                   keep_empty=(), Py_ssize_t out_limit=4 << 20, Py_ssize_t in_limit=-1):
    """The cleaner's copy of whole batches from byte ``pos`` of ``buffer``, until ``out_limit`` output bytes, or
    ``in_limit`` input bytes (-1: no limit; at least one batch), or the end (Kafka's MemoryRecords.filterTo with the
    LogCleaner's retention rules). Bounded calls let other threads run between them.

    A record stays when it has a key and no later offset is mapped for its key; a tombstone (null value) also needs
    its batch's delete horizon (KIP-534) not passed: a batch without one keeps its tombstones, and when it keeps any,
    it is rewritten with the horizon ``now_ms + delete_retention_ms`` (attributes bit 6, held in BaseTimestamp, the
    records' timestamp deltas re-based so their timestamps do not change); a batch with one loses them once
    ``now_ms`` reaches it. A batch keeps its base offset, LastOffsetDelta, producer id/epoch/base sequence and leader
    epoch, and its records their offset deltas (offsets keep their holes); a batch whose records all stay and needs
    no horizon is copied byte for byte; one that changes is rewritten with the same codec (MaxTimestamp from the
    kept records, CRC recomputed); one that loses all goes, unless its last offset is in ``keep_empty`` (a producer's
    last batch, whose header keeps the producer's idempotence state): its header stays alone as Kafka's
    writeEmptyHeader leaves it, RecordsCount 0, uncompressed, no delete horizon, BaseTimestamp and MaxTimestamp both
    the batch's MaxTimestamp. Nothing else is kept empty: a Fetch must not answer with headers and no record.
    Control batches are copied.

    Returns (output bytes, next position, records kept, records removed)."""
    cdef const unsigned char *p
    cdef const unsigned char *rp
    cdef const unsigned char *rend
    cdef const unsigned char *src
    cdef Py_ssize_t n, size, m
    cdef BatchHeader h
    cdef RecordView r
    cdef int32_t kept_n
    cdef int rc, codec
    cdef int64_t kept_total = 0, removed_total = 0, horizon, new_base
    cdef bytearray out = bytearray()
    cdef bytes part
    cdef unsigned char *o
    cdef unsigned char *keep = NULL
    cdef unsigned char *w = NULL
    cdef Py_ssize_t wlen
    cdef _Kept kept
    cdef int32_t bad = -1
    cdef bint has_horizon, drop_tombstones, retime
    cdef int16_t attrs
    cdef Py_ssize_t first = pos
    mv = read_view(buffer, &p, &n)
    horizon = now_ms + delete_retention_ms if delete_retention_ms <= 0x7fffffffffffffff - now_ms else -1
    try:
        while pos < n and len(out) < out_limit and (in_limit < 0 or pos == first or pos - first < in_limit):
            rc = parse_batch_header(p + pos, n - pos, &h)
            if rc != KL_BATCH_OK:
                raise InvalidRecordError(f"cleaner: {batch_error_message(rc)} at byte {pos}")
            size = <Py_ssize_t>h.batch_length + KL_LOG_OVERHEAD
            if h.attributes & KL_CONTROL_FLAG_MASK:
                out += PyMemoryView_FromMemory(<char *>(p + pos), size, PyBUF_READ)
                pos += size
                continue
            codec = h.attributes & KL_COMPRESSION_CODEC_MASK
            plain = _records_of(p + pos, &h, pos, &rp, &rend)
            src = rp
            has_horizon = (h.attributes & KL_DELETE_HORIZON_FLAG_MASK) != 0
            drop_tombstones = has_horizon and now_ms >= h.base_timestamp
            free(keep)
            keep = <unsigned char *>malloc(h.records_count + 1)
            if keep == NULL:
                raise MemoryError()
            # pass 1: which records stay
            with nogil:
                rc = _choose_records(rp, rend, &h, offset_map, drop_tombstones, keep, &kept, &bad)
            if rc != REC_OK:
                raise InvalidRecordError(f"{batch_where(&h, pos)}: {record_message(rc, bad, h.records_count)}")
            kept_n = kept.n
            kept_total += kept_n
            removed_total += h.records_count - kept_n
            retime = kept.tombstone and not has_horizon and horizon >= 0
            if kept_n == h.records_count and kept_n > 0 and not retime:
                out += PyMemoryView_FromMemory(<char *>(p + pos), size, PyBUF_READ)
            elif kept_n > 0:
                # pass 2: the kept records, re-based on the new horizon when one is set
                new_base = horizon if retime else h.base_timestamp
                free(w)
                w = <unsigned char *>malloc(kept.bytes + 16 * <Py_ssize_t>kept_n + 1)
                if w == NULL:
                    raise MemoryError()
                with nogil:
                    wlen = _copy_records(src, rend, &h, keep, retime, new_base, w)
                if codec == KL_CODEC_NONE:
                    part = PyBytes_FromStringAndSize(<const char *>w, wlen)
                else:
                    part = bytes(compress(codec, None, w, wlen))
                m = len(out)
                out += PyMemoryView_FromMemory(<char *>(p + pos), KL_RECORD_BATCH_OVERHEAD, PyBUF_READ)
                out += part
                o = <unsigned char *>PyByteArray_AS_STRING(out) + m
                attrs = h.attributes
                if retime:
                    attrs = attrs | KL_DELETE_HORIZON_FLAG_MASK
                    kl_store_i64(o + KL_BASE_TIMESTAMP_OFFSET, horizon)
                _patch_header(o, KL_RECORD_BATCH_OVERHEAD + len(part), kept_n, kept.max_ts, attrs)
            elif (h.base_offset + h.last_offset_delta) in keep_empty:
                m = len(out)
                out += PyMemoryView_FromMemory(<char *>(p + pos), KL_RECORD_BATCH_OVERHEAD, PyBUF_READ)
                o = <unsigned char *>PyByteArray_AS_STRING(out) + m
                kl_store_i64(o + KL_BASE_TIMESTAMP_OFFSET, h.max_timestamp)
                _patch_header(o, KL_RECORD_BATCH_OVERHEAD, 0, h.max_timestamp,
                              h.attributes & ~(KL_COMPRESSION_CODEC_MASK | KL_DELETE_HORIZON_FLAG_MASK))
            pos += size
    finally:
        free(keep)
        free(w)
    return bytes(out), pos, kept_total, removed_total
