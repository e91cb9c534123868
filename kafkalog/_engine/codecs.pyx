# Compressed records sections: with a codec (Attributes bits 0-2) a batch's Records are ONE compressed stream holding
# all its records (the header, RecordsCount included, stays plaintext: framing.pyx). The streams, as Kafka's Java
# client writes them:
#   gzip   one gzip member (readers accept several)
#   snappy xerial framing: 82 'SNAPPY' 00 | Version => Int32 (1) | Compat => Int32 (1) | [Length => Int32 | raw block]
#   lz4    LZ4 frame, independent 64 KB blocks, no content size or checksum (Kafka rejects linked blocks)
#   zstd   zstd frame(s), streamed, so usually WITHOUT a content size
#
# Decompression bounds. Kafka bounds only the compressed size of a batch (max.message.bytes), so a small batch may
# claim any plaintext: a decompression bomb. A produced batch's plaintext may be at most
#   max(_PLAINTEXT_FLOOR, min(_PLAINTEXT_CAP, records_count * max.message.bytes))
# (what records_count records of at most max.message.bytes each can hold: every client bounds a record's
# uncompressed size by its max.request.size, 1 MiB by default), and one record at most
#   max(max.message.bytes, _RECORD_FLOOR).
# Validation walks the records as they are decompressed (RecordBatch.check_for_append), holding at most one
# incomplete record and one decompressed chunk (a raw snappy block, which cannot be streamed, whole: at most
# _SNAPPY_MAX_RATIO times its compressed size), so a bomb costs a few MiB whatever it claims. Readers keep the whole
# plaintext (they return it): they are bounded by _READ_LIMIT, and past the first _READ_CHUNK bytes they walk the
# records as they arrive, so a bad stored batch (zeros, bytes after the last record) stops there.
#
# Also here: the buffers C code reads from (Pins, read_view), which the compressed plaintexts join.
"""Compression codecs of record batches: compress, decompress within bounds, pin the buffers C code reads."""

from cpython.buffer cimport PyBUF_READ, PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory, PyMemoryView_GET_BUFFER
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_Check
from libc.stdint cimport int32_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memmove

from .clib cimport (
    KL_CODEC_GZIP, KL_CODEC_LZ4, KL_CODEC_NONE, KL_CODEC_SNAPPY, KL_CODEC_ZSTD, KL_NOGIL_BYTES, kl_load_i32,
    kl_load_u32le, kl_store_i32,
)
from .framing cimport (
    REC_BAD_SIZE, REC_EOF, REC_LEFTOVER, REC_MORE, REC_OK, BatchHeader, Slice, WalkState, batch_where, read_varint,
    record_message, walk_init, walk_part,
)

import threading
import zlib

import importlib


class _OnFirstUse:
    """A codec library imported when a batch first needs it (about 8 ms of every process's start otherwise, most of
    which never meets a compressed batch); each name it gives is kept on the instance, so later uses are plain
    attribute reads."""

    def __init__(self, module):
        self._module_name = module

    def __getattr__(self, name):
        value = getattr(importlib.import_module(self._module_name), name)
        setattr(self, name, value)
        return value


cramjam = _OnFirstUse("cramjam")
_lz4_frame = _OnFirstUse("lz4.frame")
_zstd = _OnFirstUse("zstandard")

from kafkalog.errors import (
    InvalidConfigError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

__all__ = ["COMPRESSION_CODECS"]

COMPRESSION_CODECS = {"none": KL_CODEC_NONE, "gzip": KL_CODEC_GZIP, "snappy": KL_CODEC_SNAPPY,
                      "lz4": KL_CODEC_LZ4, "zstd": KL_CODEC_ZSTD}
_CODEC_NAMES = {v: k for k, v in COMPRESSION_CODECS.items()}

cdef Py_ssize_t _XERIAL_BLOCK = 32768     # xerial SnappyOutputStream's default block size
cdef uint32_t _LZ4_MAGIC = 0x184D2204

# The bounds of the header comment.
cdef Py_ssize_t _PLAINTEXT_FLOOR = 64 << 20
cdef Py_ssize_t _PLAINTEXT_CAP = 1 << 30
cdef Py_ssize_t _RECORD_FLOOR = 16 << 20
cdef Py_ssize_t _READ_LIMIT = 1 << 30     # = _PLAINTEXT_CAP: whatever an append accepted stays readable
cdef Py_ssize_t _CHECK_CHUNK = 256 << 10  # validation: decompressed bytes per step
cdef Py_ssize_t _READ_CHUNK = 1 << 20     # readers: decompressed bytes per step
cdef Py_ssize_t _IN_CHUNK = 64 << 10      # compressed bytes per zlib / lz4 call (each copies what it leaves over)
# A zstd frame declares the window its decoder must hold (and fill, for a bomb). Levels 1-19 of a streaming
# compressor (Kafka's producers stream) need at most 8 MiB; only the "ultra" levels 20-22 ask for more.
cdef Py_ssize_t _ZSTD_MAX_WINDOW = 8 << 20
# A snappy element of 3 bytes copies at most 64: no snappy block decompresses to more than 64/3 of its size.
cdef Py_ssize_t _SNAPPY_MAX_RATIO = 22


# ---------------------------------------------------------------------------------------------------------------
# Buffers

cdef class Pins:
    """Keeps the byte strings one call reads from C alive (and their buffers exported) until the call ends."""

    def __cinit__(self):
        self.keep = []

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.nviews):
            PyBuffer_Release(&self.views[i])
        free(self.views)

    cdef int slice(self, object o, Slice *s, str what) except -1:
        cdef Py_buffer *v
        if o is None:
            s.p = NULL
            s.n = -1
            return 0
        if PyBytes_CheckExact(o):
            s.p = <const unsigned char *>PyBytes_AS_STRING(o)
            s.n = PyBytes_GET_SIZE(o)
            return 0
        if self.nviews == self.cap:
            v = <Py_buffer *>realloc(self.views, (self.cap * 2 + 4) * sizeof(Py_buffer))
            if v == NULL:
                raise MemoryError()
            self.views = v
            self.cap = self.cap * 2 + 4
        v = &self.views[self.nviews]
        try:
            PyObject_GetBuffer(o, v, PyBUF_SIMPLE)
        except TypeError:
            raise TypeError(f"{what} must be bytes-like or None, not {type(o).__name__}") from None
        self.nviews += 1
        s.p = <const unsigned char *>v.buf
        s.n = v.len
        return 0

    cdef int pin(self, object o, Slice *s) except -1:
        """slice() for an object nobody else holds (a decompressed records section)."""
        self.keep.append(o)
        return self.slice(o, s, "records")

    cdef int header_key(self, object o, Slice *s) except -1:
        if PyUnicode_Check(o):
            s.p = <const unsigned char *>PyUnicode_AsUTF8AndSize(o, &s.n)
            return 0
        if o is None:
            raise TypeError("a header key must be a str, not None")
        return self.slice(o, s, "a header key")


cdef object read_view(object buffer, const unsigned char **p, Py_ssize_t *n):
    """A memoryview that keeps `buffer` exported while C code holds p (readable, C-contiguous)."""
    cdef object mv = memoryview(buffer)
    cdef Py_buffer *v = PyMemoryView_GET_BUFFER(mv)
    if not mv.c_contiguous:
        raise ValueError("record batches need a C-contiguous buffer")
    p[0] = <const unsigned char *>v.buf
    n[0] = v.len
    return mv


cdef Py_ssize_t range_end(object end, Py_ssize_t start, Py_ssize_t n) except -1:
    cdef Py_ssize_t stop = n if end is None else end
    if start < 0 or stop < start or stop > n:
        raise ValueError(f"byte range [{start}, {stop}) is outside the buffer (0..{n})")
    return stop


# ---------------------------------------------------------------------------------------------------------------
# Codecs

cdef int codec_of(object compression) except -1:
    cdef long c
    if compression is None:
        return KL_CODEC_NONE
    if isinstance(compression, str):
        c = COMPRESSION_CODECS.get(compression.lower(), -1)
    else:
        c = compression
    if c < KL_CODEC_NONE or c > KL_CODEC_ZSTD:
        raise UnsupportedCompressionTypeError(f"unknown compression codec {compression!r} "
                                              "(0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")
    return c


cdef object check_level(int codec, object level):
    """Kafka's ranges for compression.<codec>.level; None keeps the codec's default."""
    if level is None or codec == KL_CODEC_NONE or codec == KL_CODEC_SNAPPY:
        return None
    level = int(level)
    lo, hi = {KL_CODEC_GZIP: (-1, 9), KL_CODEC_LZ4: (1, 17), KL_CODEC_ZSTD: (-131072, 22)}[codec]
    if not lo <= level <= hi:
        raise InvalidConfigError(f"compression level {level} is out of range for {_CODEC_NAMES[codec]}: {lo}..{hi}")
    return level


_tls = threading.local()


cdef object _zstd_compressor(int level):
    # A compression context is costly to set up relative to a small batch: reuse one per thread and level.
    cache = getattr(_tls, "zstd_c", None)
    if cache is None:
        cache = _tls.zstd_c = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = _zstd.ZstdCompressor(level=level)
    return c


cdef object _zstd_decompressor():
    d = getattr(_tls, "zstd_d", None)
    if d is None:
        d = _tls.zstd_d = _zstd.ZstdDecompressor()
    return d


cdef object _xerial_compress(const unsigned char *p, Py_ssize_t n):
    cdef Py_ssize_t nblocks = (n + _XERIAL_BLOCK - 1) // _XERIAL_BLOCK
    cdef Py_ssize_t cap = 16 + nblocks * (4 + 32 + _XERIAL_BLOCK + _XERIAL_BLOCK // 6)
    cdef Py_ssize_t pos = 16, i, m, w
    cdef unsigned char *o
    out = bytearray(cap)
    o = <unsigned char *>PyByteArray_AS_STRING(out)
    memcpy(o, b"\x82SNAPPY\x00", 8)
    kl_store_i32(o + 8, 1)
    kl_store_i32(o + 12, 1)
    src = PyMemoryView_FromMemory(<char *>p, n, PyBUF_READ)
    dst = memoryview(out)
    try:
        for i in range(0, n, _XERIAL_BLOCK):
            m = min(_XERIAL_BLOCK, n - i)
            w = cramjam.snappy.compress_raw_into(src[i:i + m], dst[pos + 4:])
            kl_store_i32(o + pos, <int32_t>w)
            pos += 4 + w
    finally:
        src.release()
    return dst[:pos]


cdef object compress(int codec, object level, const unsigned char *p, Py_ssize_t n):
    """The compressed records section (a bytes-like object)."""
    if codec == KL_CODEC_SNAPPY:
        return _xerial_compress(p, n)
    src = PyMemoryView_FromMemory(<char *>p, n, PyBUF_READ)
    try:
        if codec == KL_CODEC_GZIP:
            return zlib.compress(src, -1 if level is None else level, 31)
        if codec == KL_CODEC_LZ4:
            # Kafka's default level 9 means the fast compressor; other levels pick LZ4 HC.
            return _lz4_frame.compress(src, compression_level=0 if level is None or level == 9 else level,
                                       block_size=_lz4_frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                       content_checksum=False, store_size=False)
        if codec == KL_CODEC_ZSTD:
            return _zstd_compressor(3 if level is None else level).compress(src)
    finally:
        src.release()
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}")


cdef object _zstd_checker():
    """The decompressor of validation: windows above _ZSTD_MAX_WINDOW refused before anything is decoded."""
    d = getattr(_tls, "zstd_check", None)
    if d is None:
        d = _tls.zstd_check = _zstd.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
    return d


# ---------------------------------------------------------------------------------------------------------------
# Bounded decompression: every codec decompresses in steps of at most `chunk` bytes handed to a sink, which counts
# them against its limit and may stop the decompression early. No declared size is trusted: snappy's preamble is
# checked against what its block can hold and the sink's room before anything is allocated, lz4's content size and
# zstd's frame content size are never read (only zstd's window, against _ZSTD_MAX_WINDOW when validating).

cdef class _Sink:
    """Where a bounded decompression puts its output."""
    cdef Py_ssize_t total, limit
    cdef str codec          # the codec's name, for messages
    cdef str why            # how the limit was derived, for messages

    cdef inline Py_ssize_t room(self, Py_ssize_t chunk):
        """The most the next step may produce: a chunk, or one byte past the limit (so that passing it shows)."""
        cdef Py_ssize_t left = self.limit - self.total + 1
        return chunk if chunk < left else left

    cdef str too_large(self):
        return f"its {self.codec} records decompress to more than {self.limit} bytes ({self.why})"

    cdef int reserve(self, Py_ssize_t n) except -1:
        """Refuse before allocating n more bytes past the limit."""
        if n > self.limit - self.total:
            raise RecordTooLargeError(self.too_large())
        return 0

    cdef int put(self, object chunk) except -1:
        """Take one decompressed chunk; returns 1 when the decompression may stop (the sink has seen enough)."""
        cdef Py_ssize_t n = len(chunk)
        if n == 0:
            return 0
        self.total += n
        if self.total > self.limit:
            raise RecordTooLargeError(self.too_large())
        return self.take(chunk, n)

    cdef int take(self, object chunk, Py_ssize_t n) except -1:
        return 0

    cdef int put_ptr(self, const unsigned char *p, Py_ssize_t n) except -1:
        """put() of bytes the caller reuses after the call (only a _Walker, which keeps what it needs, takes them)."""
        if n == 0:
            return 0
        self.total += n
        if self.total > self.limit:
            raise RecordTooLargeError(self.too_large())
        return (<_Walker?>self).feed(p, n)


cdef class _Walker(_Sink):
    """Validation's sink: walks the records as they are decompressed and keeps nothing but the one record a chunk
    boundary cut (the carry, at most record_limit bytes). Stops the decompression at the first bad record, or at
    the first byte after the last declared record."""
    cdef WalkState w
    cdef int rc
    cdef unsigned char *carry
    cdef Py_ssize_t clen, ccap

    def __dealloc__(self):
        free(self.carry)

    cdef int keep(self, const unsigned char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t need = self.clen + n, cap
        cdef unsigned char *grown
        if need > self.ccap:
            cap = self.ccap * 2
            if cap > self.w.record_limit + 16:
                cap = self.w.record_limit + 16
            if cap < need:
                cap = need
            grown = <unsigned char *>realloc(self.carry, cap)
            if grown == NULL:
                raise MemoryError()
            self.carry = grown
            self.ccap = cap
        memcpy(self.carry + self.clen, p, n)
        self.clen = need
        return 0

    cdef Py_ssize_t pending(self, Py_ssize_t n) noexcept:
        """How many of the next n bytes the incomplete record in the carry still needs."""
        cdef int32_t body
        cdef int k = read_varint(self.carry, self.carry + self.clen, &body)
        cdef Py_ssize_t want
        if k < 0:
            want = 10 - self.clen       # enough for any varint; walk_part refuses what still is not one
        elif body < 0 or <Py_ssize_t>body > self.w.record_limit - k:
            want = 0                    # walk_part names the error
        else:
            want = k + body - self.clen
        if want < 0:
            want = 0
        return want if want < n else n

    cdef int take(self, object chunk, Py_ssize_t n) except -1:
        cdef Py_buffer v
        PyObject_GetBuffer(chunk, &v, PyBUF_SIMPLE)
        try:
            return self.feed(<const unsigned char *>v.buf, v.len)
        finally:
            PyBuffer_Release(&v)

    cdef int feed(self, const unsigned char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t used, t
        cdef int rc
        while n > 0:
            if self.rc != REC_MORE and self.rc != REC_OK:
                return 1
            if self.w.index == self.w.count:
                self.rc = REC_LEFTOVER
                return 1
            if self.clen == 0:
                # the common case: walk the chunk where it is, carry only the record its end cuts
                if n >= KL_NOGIL_BYTES:
                    with nogil:
                        rc = walk_part(&self.w, p, p + n, False, &used)
                else:
                    rc = walk_part(&self.w, p, p + n, False, &used)
                self.rc = rc
                if rc == REC_MORE and used < n:
                    self.keep(p + used, n - used)
                return rc != REC_MORE and rc != REC_OK
            # complete the carried record with what it still needs, then go on in place
            t = self.pending(n)
            self.keep(p, t)
            p += t
            n -= t
            rc = walk_part(&self.w, self.carry, self.carry + self.clen, False, &used)
            self.rc = rc
            if rc == REC_MORE:
                if used == 0 and t == 0:
                    self.rc = REC_BAD_SIZE     # no progress: cannot happen (pending() takes what walk_part needs)
                    return 1
                if used:
                    memmove(self.carry, self.carry + used, self.clen - used)
                    self.clen -= used
            elif rc == REC_OK:
                self.clen = 0
            else:
                return 1
        return 0

    cdef int finish(self) except? -1:
        """The walk's result once the decompression ended: a record cut by the end of the plaintext is an error."""
        cdef Py_ssize_t used
        if self.rc == REC_MORE or self.rc == REC_OK:
            if self.clen:
                self.rc = walk_part(&self.w, self.carry, self.carry + self.clen, True, &used)
            elif self.w.index < self.w.count:
                self.rc = REC_EOF
            else:
                self.rc = REC_OK
        free(self.carry)
        self.carry = NULL
        self.clen = self.ccap = 0
        return self.rc


cdef class _Collect(_Sink):
    """A reader's sink: gathers the plaintext. Past the first _READ_CHUNK bytes it also walks the records as they
    arrive, so a batch whose plaintext goes bad (a bomb of zeros, bytes after the last record) stops there rather
    than at the limit; a batch up to _READ_CHUNK is walked once only, by its reader."""
    cdef object first           # the only chunk so far
    cdef bytearray buf          # from the second chunk on
    cdef Py_ssize_t walked
    cdef WalkState w
    cdef int rc

    cdef int take(self, object chunk, Py_ssize_t n) except -1:
        cdef Py_ssize_t used, size
        cdef const unsigned char *p
        cdef int rc
        if self.buf is None:
            if self.first is None:
                self.first = chunk
                return 0
            self.buf = bytearray(self.first)
            self.first = None
        self.buf += chunk
        if self.total <= _READ_CHUNK:
            return 0
        p = <const unsigned char *>PyByteArray_AS_STRING(self.buf)
        size = PyByteArray_GET_SIZE(self.buf)
        with nogil:
            rc = walk_part(&self.w, p + self.walked, p + size, False, &used)
        self.walked += used
        self.rc = rc
        return rc != REC_MORE and rc != REC_OK

    cdef object result(self):
        if self.buf is not None:
            return self.buf
        return self.first if self.first is not None else b""


cdef int _inflate_gzip(object src, Py_ssize_t n, _Sink sink, Py_ssize_t chunk) except -1:
    cdef Py_ssize_t at = 0, start
    while True:
        d = zlib.decompressobj(47)      # 32 + 15: gzip or zlib header, detected
        while not d.eof:
            data = d.unconsumed_tail
            if not data and at < n:
                data = src[at:at + _IN_CHUNK]
                at += len(data)
            out = d.decompress(data, sink.room(chunk))
            if out:
                if sink.put(out):
                    return 0
            elif not d.eof and not d.unconsumed_tail and at >= n:
                raise InvalidRecordError("truncated gzip stream")
        # Java's GZIPInputStream reads concatenated members and ignores anything else that follows.
        start = at - len(d.unused_data)
        if n - start < 2 or src[start] != 0x1f or src[start + 1] != 0x8b:
            return 0
        at = start


cdef Py_ssize_t _snappy_len(object block, Py_ssize_t blen) except -1:
    """The decompressed length a raw snappy block declares, refused when the block cannot hold that much."""
    cdef Py_ssize_t m = cramjam.snappy.decompress_raw_len(block)
    if m > _SNAPPY_MAX_RATIO * blen:
        raise InvalidRecordError(f"a snappy block of {blen} bytes declares {m} decompressed bytes, more than "
                                 f"{_SNAPPY_MAX_RATIO} times its size (no snappy block expands that much)")
    return m


cdef int _snappy_into(object block, Py_ssize_t blen, object dst, Py_ssize_t m) except -1:
    if cramjam.snappy.decompress_raw_into(block, dst) != m:
        raise InvalidRecordError(f"a snappy block of {blen} bytes does not decompress to the {m} bytes it declares")
    return 0


cdef int _inflate_snappy(const unsigned char *p, Py_ssize_t n, object src, _Sink sink, bint whole) except -1:
    """Raw snappy (one block) or xerial framing. whole (a reader): every block's declared length is checked
    first, then one buffer holds them all; otherwise each block goes to the sink as it is decompressed."""
    cdef Py_ssize_t pos = 0, total = 0, m
    cdef int32_t blen
    cdef bytearray scratch = None   # one buffer for every block (a walker keeps what it needs)
    if n < 16 or memcmp8(p, b"\x82SNAPPY\x00"):
        m = _snappy_len(src, n)     # raw snappy, one block
        sink.reserve(m)
        out = PyByteArray_FromStringAndSize(NULL, m)
        _snappy_into(src, n, out, m)
        sink.put(out)
        return 0
    blocks = []
    while pos < n:
        if n - pos >= 16 and not memcmp8(p + pos, b"\x82SNAPPY\x00"):
            pos += 16           # xerial streams may be concatenated; each repeats the header
            continue
        if n - pos < 4:
            raise InvalidRecordError("truncated snappy (xerial) block length")
        blen = kl_load_i32(p + pos)
        pos += 4
        if blen < 0 or blen > n - pos:
            raise InvalidRecordError(f"snappy (xerial) block of {blen} bytes runs past the records")
        block = src[pos:pos + blen]
        m = _snappy_len(block, blen)
        if whole:
            total += m
            sink.reserve(total)
            blocks.append((block, blen, m))
        else:
            sink.reserve(m)
            if scratch is None or PyByteArray_GET_SIZE(scratch) < m:
                scratch = PyByteArray_FromStringAndSize(NULL, m)
            _snappy_into(block, blen, scratch, m)
            if sink.put_ptr(<const unsigned char *>PyByteArray_AS_STRING(scratch), m):
                return 0
        pos += blen
    if whole:
        out = PyByteArray_FromStringAndSize(NULL, total)
        dst = memoryview(out)
        pos = 0
        try:
            for block, blen, m in blocks:
                _snappy_into(block, blen, dst[pos:pos + m], m)
                pos += m
        finally:
            dst.release()
        sink.put(out)
    return 0


cdef inline bint memcmp8(const unsigned char *a, const char *b) noexcept:
    cdef int i
    for i in range(8):
        if a[i] != <unsigned char>b[i]:
            return True
    return False


cdef int _inflate_lz4(const unsigned char *p, Py_ssize_t n, object src, _Sink sink, Py_ssize_t chunk) except -1:
    cdef unsigned char flg, bd
    cdef Py_ssize_t at = 0, used
    if n < 7 or kl_load_u32le(p) != _LZ4_MAGIC:
        raise InvalidRecordError("lz4 records section does not start with an LZ4 frame")
    flg = p[4]
    bd = p[5]
    if (flg >> 6) != 1 or (flg & 0x02) or (bd & 0x8F) or ((bd >> 4) & 7) < 4:
        raise InvalidRecordError(f"unsupported LZ4 frame descriptor FLG 0x{flg:02x} BD 0x{bd:02x}")
    if not (flg & 0x20):
        raise InvalidRecordError("Dependent block stream is unsupported: the LZ4 frame uses linked blocks, "
                                 "which Kafka rejects (write with block_linked=False)")
    ctx = _lz4_frame.create_decompression_context()
    while True:
        # one frame, as lz4.frame.decompress reads it: what follows the end mark is ignored
        out, used, eof = _lz4_frame.decompress_chunk(ctx, src[at:at + _IN_CHUNK], max_length=sink.room(chunk))
        at += used
        if out:
            if sink.put(out):
                return 0
        elif used == 0 and not eof:
            raise InvalidRecordError("truncated lz4 frame")
        if eof:
            return 0


cdef enum:
    _ZSTD_FRAMES_OK = 0
    _ZSTD_TRUNCATED = 1
    _ZSTD_NOT_A_FRAME = 2


cdef int _zstd_frames(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, uint64_t *window) noexcept nogil:
    """Walk the frame and block headers of a zstd stream (no decoding): whether it is whole frames, and the largest
    window any frame declares. A streaming decoder returns what it has when a frame is cut short, silently."""
    cdef Py_ssize_t pos = 0, size
    cdef uint32_t magic, bh
    cdef unsigned char fhd, wd
    cdef uint64_t w, fcs
    cdef int fcs_bytes, i
    window[0] = 0
    while pos < n:
        at[0] = pos
        if n - pos < 4:
            return _ZSTD_TRUNCATED
        magic = kl_load_u32le(p + pos)
        if (magic & 0xFFFFFFF0u) == 0x184D2A50u:        # skippable frame
            if n - pos < 8:
                return _ZSTD_TRUNCATED
            size = kl_load_u32le(p + pos + 4)
            if size > n - pos - 8:
                return _ZSTD_TRUNCATED
            pos += 8 + size
            continue
        if magic != 0xFD2FB528u:
            return _ZSTD_NOT_A_FRAME
        pos += 4
        if pos >= n:
            return _ZSTD_TRUNCATED
        fhd = p[pos]
        pos += 1
        if fhd & 0x08:                                  # reserved bit
            return _ZSTD_NOT_A_FRAME
        fcs_bytes = (1 if fhd & 0x20 else 0) if (fhd >> 6) == 0 else (1 << (fhd >> 6))
        size = (0 if fhd & 0x20 else 1) + ((fhd & 3) if (fhd & 3) < 3 else 4) + fcs_bytes
        if size > n - pos:
            return _ZSTD_TRUNCATED
        if fhd & 0x20:                                  # single segment: the window is the content size
            fcs = 0
            for i in range(fcs_bytes):
                fcs |= (<uint64_t>p[pos + size - fcs_bytes + i]) << (8 * i)
            if fcs_bytes == 2:
                fcs += 256
            w = fcs
        else:
            wd = p[pos]
            w = (<uint64_t>1) << (10 + (wd >> 3))
            w += (w >> 3) * (wd & 7)
        if w > window[0]:
            window[0] = w
        pos += size
        while True:
            if n - pos < 3:
                return _ZSTD_TRUNCATED
            bh = p[pos] | (<uint32_t>p[pos + 1] << 8) | (<uint32_t>p[pos + 2] << 16)
            pos += 3
            if ((bh >> 1) & 3) == 3:                    # reserved block type
                return _ZSTD_NOT_A_FRAME
            size = 1 if ((bh >> 1) & 3) == 1 else (bh >> 3)     # an RLE block holds one byte
            if size > n - pos:
                return _ZSTD_TRUNCATED
            pos += size
            if bh & 1:                                  # last block
                break
        if fhd & 0x04:                                  # content checksum
            if n - pos < 4:
                return _ZSTD_TRUNCATED
            pos += 4
    return _ZSTD_FRAMES_OK


cdef int _inflate_zstd(const unsigned char *p, Py_ssize_t n, object src, _Sink sink, Py_ssize_t chunk,
                       bint checking) except -1:
    cdef Py_ssize_t at = 0
    cdef uint64_t window = 0
    cdef int rc = _zstd_frames(p, n, &at, &window)
    if rc == _ZSTD_TRUNCATED:
        raise InvalidRecordError("truncated zstd frame")
    if rc == _ZSTD_NOT_A_FRAME:
        raise InvalidRecordError(f"byte {at} of the zstd records is not a zstd frame")
    if checking and window > <uint64_t>_ZSTD_MAX_WINDOW:
        raise InvalidRecordError(f"a zstd frame needs a {window}-byte window, above the {_ZSTD_MAX_WINDOW} bytes "
                                 "accepted (zstd levels 20-22 of a streaming compressor)")
    # Kafka streams zstd, so frames usually carry no content size; a reader across frames reads them all.
    reader = (_zstd_checker() if checking else _zstd_decompressor()).stream_reader(src, read_across_frames=True)
    while True:
        out = reader.read(sink.room(chunk))
        if not out or sink.put(out):
            return 0


cdef int _inflate(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h, Py_ssize_t pos,
                  _Sink sink, Py_ssize_t chunk, bint checking) except -1:
    """Decompress the records section [p, p + n) of a batch into sink, in steps of at most chunk bytes; errors name
    the batch. checking: validation's stricter zstd window."""
    sink.codec = _CODEC_NAMES.get(codec, str(codec))
    src = PyMemoryView_FromMemory(<char *>p, n, PyBUF_READ)
    try:
        if codec == KL_CODEC_GZIP:
            _inflate_gzip(src, n, sink, chunk)
        elif codec == KL_CODEC_SNAPPY:
            _inflate_snappy(p, n, src, sink, isinstance(sink, _Collect))
        elif codec == KL_CODEC_LZ4:
            _inflate_lz4(p, n, src, sink, chunk)
        elif codec == KL_CODEC_ZSTD:
            _inflate_zstd(p, n, src, sink, chunk, checking)
        else:
            raise UnsupportedCompressionTypeError(f"{batch_where(h, pos)} uses unknown compression codec {codec}")
    except RecordTooLargeError as e:
        raise RecordTooLargeError(f"{batch_where(h, pos)}: {e}") from None
    except InvalidRecordError as e:
        raise InvalidRecordError(f"{batch_where(h, pos)}: {e}") from None
    except UnsupportedCompressionTypeError:
        raise
    except (zlib.error, RuntimeError, ValueError, _zstd.ZstdError, cramjam.DecompressionError) as e:
        raise InvalidRecordError(f"{batch_where(h, pos)}: cannot decompress {_CODEC_NAMES[codec]} records: {e}") from e
    finally:
        src.release()
    return 0


cdef object decompress(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h, Py_ssize_t pos):
    """A reader's plaintext records of a compressed batch, as a bytes-like object (at most _READ_LIMIT bytes)."""
    cdef _Collect sink = _Collect()
    sink.limit = _READ_LIMIT
    sink.why = "the bound on one batch's plaintext"
    walk_init(&sink.w, h, False, PY_SSIZE_T_MAX)
    sink.rc = REC_MORE
    _inflate(codec, p, n, h, pos, sink, _READ_CHUNK, False)
    if sink.rc != REC_MORE and sink.rc != REC_OK:
        raise InvalidRecordError(f"{batch_where(h, pos)}: {record_message(sink.rc, sink.w.index, h.records_count)}")
    return sink.result()


cdef int _walk(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h, Py_ssize_t pos, WalkState *w,
               Py_ssize_t limit, str why, bint checking) except -1:
    """Decompress [p, p + n) in steps of _CHECK_CHUNK bytes, each walked at once (from w, set up by walk_init) and
    dropped, within limit (why: how it was derived, for messages); returns the walk's code, w its state."""
    cdef _Walker walker = _Walker()
    cdef int rc
    walker.limit = limit
    walker.why = why
    walker.w = w[0]
    walker.rc = REC_MORE
    _inflate(codec, p, n, h, pos, walker, _CHECK_CHUNK, checking)
    rc = walker.finish()
    w[0] = walker.w
    return rc


cdef int walk_compressed(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h, Py_ssize_t pos,
                         WalkState *w) except -1:
    walk_init(w, h, False, _READ_LIMIT)
    return _walk(codec, p, n, h, pos, w, _READ_LIMIT, "the bound on one batch's plaintext", False)


cdef int walk_compressed_for_append(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h,
                                    Py_ssize_t pos, Py_ssize_t max_message_bytes, WalkState *w) except -1:
    cdef Py_ssize_t per = max_message_bytes if max_message_bytes > 0 else 1, limit, record_limit
    limit = _PLAINTEXT_CAP if h.records_count >= _PLAINTEXT_CAP // per else h.records_count * per
    if limit < _PLAINTEXT_FLOOR:
        limit = _PLAINTEXT_FLOOR
    record_limit = max_message_bytes if max_message_bytes > _RECORD_FLOOR else _RECORD_FLOOR
    if record_limit > limit:
        record_limit = limit
    walk_init(w, h, True, record_limit)
    return _walk(codec, p, n, h, pos, w, limit,
                 f"the bound for {h.records_count} records with max.message.bytes={max_message_bytes}: "
                 "max(64 MiB, min(1 GiB, records x max.message.bytes))", True)
