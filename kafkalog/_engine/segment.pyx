# cython: language_level=3
"""LogSegment: one segment of a partition, its ``.log`` file and its two indexes.

On disk (Kafka's layout, byte for byte)::

    <20-digit base offset>.log        RecordBatch*  (v2 batches back to back, no file header)
    <20-digit base offset>.index      (RelativeOffset => Int32 | Position => Int32)*
    <20-digit base offset>.timeindex  (Timestamp => Int64 | RelativeOffset => Int32)*

Index rule (Kafka's, stated per batch so every process derives it from the files alone): a batch starting at
position P gets the entry (batch.lastOffset, P) when ``P - position of the last entry > index.interval.bytes``
(the first batch of a segment never does); the time index then gets (max timestamp so far, offset of the batch
holding it) if that timestamp is larger than its last entry. On roll/close the final (max timestamp, offset) entry is
appended so the segment's largest timestamp survives a restart.

Reads are zero-copy: the ``.log`` is mapped once (PROT_READ, MAP_SHARED, reserving room to grow) and ``read()``
hands out read-only memoryviews of whole batches. Only bytes below ``size`` — complete batches that this process
wrote or validated — are ever touched through the mapping, so a concurrent truncation of a torn tail by another
process cannot fault us. Bytes appended by other processes are discovered with ``refresh()``, which reads them with
pread() and validates each batch's CRC before moving ``size``: a reader never sees a torn batch.

Not thread-safe: the owning ``Log`` serialises calls. Views returned by ``read()`` stay valid after the segment is
closed or deleted (the mapping is released when the last view goes).

Also here, the byte-level halves of two partition-wide things (the policy is the Log's, storage/log.py):

``offset_for_time(segments, ...)``: the time seek across a partition's segments in one call (time index binary
search, offset index lookup, the scan inside the found batch), no Python object before the result.

``ChangeCounter``: the partition's change counter, a hint shared by the processes of one machine through a
MAP_SHARED mapping (native byte order; never fsynced, never trusted across a restart)::

    <partition dir>/.kafkalog-changes   64 bytes
      Magic => 4 bytes "KLCC" | Version => UInt32 (1) | Changes => UInt64 | Retired => UInt64 | End => UInt64
      | Session => UInt64 | 24 bytes zero

``Changes`` is incremented (atomic add) by every writer after each change of the partition's files is visible:
appends, rolls, torn tails cut, opens (recovery), log start moves, removed segments, cleaner swaps. A view compares
it with the value it loaded before it last took the files in: equal means nothing changed, with one memory load and
no system call. ``Retired`` is set when the directory is about to be deleted: views stop trusting the file.
``End`` is the highest log end a writer of the store's open session ``Session`` (a random id the store's first
opener draws, see LogStore) made visible: the log end of a running store never goes back, so a shared writer whose
fresh view ends below it has listed the directory wrong and must look again before it hands out an offset (a value
of an earlier session, from before a crash and its recovery, is never compared). A later version may only add words
after these: every version's writers count in ``Changes``.
"""

import os
import pathlib

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer, PyBUF_SIMPLE
from libc.errno cimport errno, EINTR
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, strerror
from posix.fcntl cimport O_CREAT, O_RDONLY, O_RDWR
from posix.fcntl cimport open as c_open
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap
from posix.stat cimport fstat, struct_stat
from posix.unistd cimport close as c_close
from posix.unistd cimport SEEK_END, fdatasync, ftruncate, lseek, pread, pwrite

from .clib cimport (KL_CHECK, KL_CODEC_NONE, KL_COMPRESSION_CODEC_MASK, KL_HEADER_SIZE_UP_TO_MAGIC, KL_INT32_MAX,
                    KL_LOG_OVERHEAD, KL_RECORD_BATCH_OVERHEAD, KL_TIMESTAMP_TYPE_MASK, kl_atomic_fetch_add_u64,
                    kl_atomic_max_u64,
                    kl_atomic_load_u64, kl_atomic_store_u64, kl_next_uvarint, kl_unzigzag)
from .index cimport OffsetIndex, TimeIndex
from .framing cimport KL_BATCH_INCOMPLETE, BatchHeader, batch_error_message, check_batch, parse_batch_header

from kafkalog.errors import CorruptRecordError, IndexFullError, InvalidOffsetError, InvalidRecordError, storage_error
from kafkalog.structs import OffsetAndTimestamp
from kafkalog._engine.batch import RecordBatch

cdef extern from "sys/mman.h" nogil:
    int madvise(void *addr, size_t length, int advice)
    int MADV_WILLNEED

cdef extern from * nogil:
    void __builtin_prefetch(const void *addr)

cdef int64_t PAGE = 4096
cdef enum:
    # the time seek's scan inside a batch walks record by record (each length gives the next record's place): asking
    # for the bytes this far ahead keeps the memory busy while the walk decodes (a batch not yet in the CPU's cache
    # scanned ~1.5x faster). A prefetch is a hint: it never faults, past the batch or the mapping it does nothing
    _PREFETCH_AHEAD = 2048
    _PREFETCH_FIRST = 1024  # the first bytes of the batch, all at once
cdef int64_t _CHUNK = 4 << 20
# refresh() reads 64 KiB first, doubling up to _CHUNK while whole chunks hold batches: past the last batch of a
# preallocated segment lie up to segment.bytes of zeros, which a refresh must not read through
cdef int64_t _FIRST_CHUNK = 64 << 10
cdef Py_ssize_t _ZEROS_LEN = 64 << 10
cdef unsigned char _ZEROS[65536]  # zero-initialised (static storage)


def segment_file_name(int64_t base_offset, str suffix=".log"):
    """``00000000000000000042.log`` for base offset 42 (Kafka's 20-digit zero padding)."""
    return "%020d%s" % (base_offset, suffix)


cdef object _os_error(str operation, object path):
    cdef int err = errno
    return storage_error(OSError(err, strerror(err).decode()), operation, path)


cdef int64_t _file_size(int fd) noexcept nogil:
    """The file's size, or -1 (errno set). lseek(SEEK_END), not fstat: a .log's size is asked on every append and
    every refresh, and on Linux 6.13+ (multigrain timestamps) a stat that reports the file's times makes the next
    write stamp a new fine-grained mtime, an inode change the append's fdatasync then waits for (measured here, an
    11 KB overwrite + fdatasync: median 134-166 us without, 188-291 us with an fstat before the write). Descriptors
    of .log files are only used with pread/pwrite, so the offset lseek moves is never used."""
    return <int64_t>lseek(fd, 0, SEEK_END)


cdef Py_ssize_t _pwrite_full(int fd, const unsigned char *p, Py_ssize_t n, int64_t offset) noexcept nogil:
    """pwrite until n bytes are written or an error stops it (errno set): the bytes written."""
    cdef Py_ssize_t done = 0
    cdef ssize_t w
    while done < n:
        w = pwrite(fd, p + done, n - done, offset + done)
        if w < 0:
            if errno == EINTR:
                continue
            break
        done += w
    return done


cdef Py_ssize_t _pread_full(int fd, unsigned char *p, Py_ssize_t n, int64_t offset) noexcept nogil:
    """pread until n bytes or end of file; -1 on error (errno set)."""
    cdef Py_ssize_t done = 0
    cdef ssize_t r
    while done < n:
        r = pread(fd, p + done, n - done, offset + done)
        if r < 0:
            if errno == EINTR:
                continue
            return -1
        if r == 0:
            break
        done += r
    return done


cdef class Mapping:
    """A read-only shared mapping of a .log; unmapped when the last holder (segment or view) is released."""

    def __dealloc__(self):
        if self.addr != NULL:
            munmap(self.addr, self.length)
            self.addr = NULL


cdef Mapping _map_file(int fd, int64_t length, object path):
    cdef Mapping m = Mapping.__new__(Mapping)
    cdef void *p
    m.length = <size_t>(((length + PAGE - 1) // PAGE) * PAGE)
    if m.length == 0:
        return m
    p = mmap(NULL, m.length, PROT_READ, MAP_SHARED, fd, 0)
    if p == MAP_FAILED:
        raise _os_error("mmap", path)
    m.addr = <unsigned char *>p
    return m


cdef class SegmentView:
    """Exposes bytes [start, start+length) of a Mapping through the buffer protocol (read-only, zero-copy)."""
    cdef Mapping _m
    cdef Py_ssize_t _start
    cdef Py_ssize_t _length

    def __getbuffer__(self, Py_buffer *buf, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("kafkalog segment views are read-only")
        PyBuffer_FillInfo(buf, self, <void *>(self._m.addr + self._start), self._length, 1, flags)

    def __releasebuffer__(self, Py_buffer *buf):
        pass

    def __len__(self):
        return self._length


cdef object _view(Mapping m, int64_t start, int64_t length):
    cdef SegmentView v = SegmentView.__new__(SegmentView)
    v._m = m
    v._start = <Py_ssize_t>start
    v._length = <Py_ssize_t>length
    return memoryview(v)


cdef inline bint _sane(BatchHeader *h, int64_t base_offset, int64_t prev_next) noexcept nogil:
    """Header checks that need no CRC: offsets inside the segment, in order, counts consistent. Applied even to
    batches below the recovery point, whose CRC is trusted (KIP-263), so a damaged header can never place a
    batch at a wrong offset."""
    cdef int64_t last = h.base_offset + h.last_offset_delta
    return (h.last_offset_delta >= 0 and h.records_count >= 0 and h.base_offset >= base_offset
            and last - base_offset <= KL_INT32_MAX and (prev_next < 0 or h.base_offset >= prev_next))


cdef int64_t _scan_records(const unsigned char *p, const unsigned char *end, int32_t count, int64_t base_ts,
                           int64_t target, int64_t base_offset, int64_t min_offset, bint exact,
                           int64_t *found_offset) noexcept nogil:
    """Timestamp search inside one uncompressed batch, decoding only what it needs per record (length and
    timestamp delta; the offset delta only for a candidate). Sets *found_offset (-1 when none); returns its ts."""
    cdef uint64_t z
    cdef const unsigned char *rec_end
    cdef int64_t ts, off
    cdef int32_t i
    cdef int k
    for k in range(0, _PREFETCH_FIRST, 64):
        __builtin_prefetch(p + k)
    for i in range(count):
        __builtin_prefetch(p + _PREFETCH_AHEAD)
        __builtin_prefetch(p + _PREFETCH_AHEAD + 64)  # records are ~100 B and up: two cache lines a record
        if not kl_next_uvarint(&p, end, &z) or z & 1:
            break  # truncated, or a negative length
        rec_end = p + (z >> 1)  # a length is never negative: no unzigzag on the chain from record to record
        if rec_end > end or rec_end <= p:
            break
        p += 1  # record attributes
        if not kl_next_uvarint(&p, rec_end, &z):
            break
        ts = base_ts + kl_unzigzag(z)
        if (ts == target) if exact else (ts >= target):
            if not kl_next_uvarint(&p, rec_end, &z):
                break
            off = base_offset + kl_unzigzag(z)
            if off >= min_offset:
                found_offset[0] = off
                return ts
        p = rec_end
    found_offset[0] = -1
    return -1


cdef class LogSegment:
    """One segment: ``.log`` + ``OffsetIndex`` + ``TimeIndex``. Not thread-safe (the Log serialises).

    ``LogSegment(dir, base_offset, index_interval_bytes=4096, max_index_size=10485760, writable=True,
    reserve_bytes=1<<30, create=False, file_suffix="")`` opens an existing segment (``create=True`` makes missing
    files; ``file_suffix`` is added to every file name: a cleaner's ``.cleaned`` or ``.swap`` segment). The tail
    is loaded from the last index entry (no full scan); ``torn_bytes`` tells how many bytes past the last complete
    batch the file holds (a torn write: the Log recovers or ignores them).
    """
    def __cinit__(self):
        self.fd = -1

    def __init__(self, dir, int64_t base_offset, *, int64_t index_interval_bytes=4096,
                 int64_t max_index_size=10485760, bint writable=True, int64_t reserve_bytes=1 << 30,
                 bint create=False, str file_suffix=""):
        cdef int64_t file_size
        self.dir = pathlib.Path(dir)
        self.file_suffix = file_suffix
        self.base_offset = base_offset
        self.writable = writable
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.log_path = self.dir / (segment_file_name(base_offset) + file_suffix)
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = base_offset
        self.rolling_based_timestamp = -1
        self.next_offset = base_offset
        cdef bytes bpath = os.fsencode(self.log_path)
        cdef int flags = (O_RDWR | (O_CREAT if create else 0)) if writable else O_RDONLY
        self.fd = c_open(bpath, flags, 0o644)
        if self.fd < 0:
            raise _os_error("open", self.log_path)
        file_size = self._size_now()
        self._reserve = max(file_size, reserve_bytes)
        self._map = _map_file(self.fd, self._reserve, self.log_path)
        self._open_indexes(create)
        self._load_tail(file_size)
        self._indexes_behind = True  # the first refresh() reads the indexes (entries written after we opened)

    def _open_indexes(self, bint create):
        index_path = self.dir / (segment_file_name(self.base_offset, ".index") + self.file_suffix)
        time_path = self.dir / (segment_file_name(self.base_offset, ".timeindex") + self.file_suffix)
        if self.writable:
            self.offset_index = OffsetIndex(index_path, self.base_offset, self.max_index_size, True)
            self.time_index = TimeIndex(time_path, self.base_offset, self.max_index_size, True)
        else:
            # A reader takes what exists; a missing index only makes lookups scan from the segment start.
            self.offset_index = (OffsetIndex(index_path, self.base_offset, self.max_index_size, False)
                                 if index_path.exists() else None)
            self.time_index = (TimeIndex(time_path, self.base_offset, self.max_index_size, False)
                               if time_path.exists() else None)

    cdef int _note_batch(self, int64_t pos, int64_t last_offset, int64_t max_ts, int64_t batch_size) except -1:
        """Account for a complete batch at ``pos`` (already in the file): index rule, max timestamp, end."""
        cdef int64_t last_pos
        if pos == 0:
            self.rolling_based_timestamp = max_ts
        if max_ts > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_ts
            self.offset_of_max_timestamp_so_far = last_offset
        if self.writable and self.offset_index is not None and pos > 0:
            last_pos = self.offset_index.lookup_position(0x7fffffffffffffff)
            if pos - last_pos > self.index_interval_bytes and not self.offset_index.is_full() \
                    and last_offset > self.offset_index.last_offset:
                self.offset_index.append(last_offset, pos)
                if not self.time_index.is_full():
                    self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
        self.next_offset = last_offset + 1
        self.size = pos + batch_size
        return 0

    cdef inline const unsigned char *_ptr(self, int64_t pos) noexcept nogil:
        return self._map.addr + pos

    def _ensure_mapped(self, int64_t length):
        if <size_t>length > self._map.length:
            self._reserve = max(length, self._reserve * 2)
            self._map = _map_file(self.fd, self._reserve, self.log_path)

    def _load_tail(self, int64_t file_size):
        """Find the logical end from the last index entry (headers only; the CRC is the recovery's job)."""
        cdef BatchHeader h
        cdef int64_t pos = 0
        cdef int rc
        self._ensure_mapped(file_size)
        if self.offset_index is not None and self.offset_index.entries > 0:
            off, pos = self.offset_index.last_entry
            # the index is only a hint: its last entry must name the start of the batch ending at its offset, or
            # the scan starts at the segment's start (a damaged or stale index must never shorten the view: a
            # shared writer would cut what lies past it as a torn tail)
            if not (0 < pos < file_size and parse_batch_header(self._ptr(pos), file_size - pos, &h) == 0
                    and h.base_offset + h.last_offset_delta == off and _sane(&h, self.base_offset, -1)):
                pos = 0
        if self.time_index is not None and self.time_index.entries > 0:
            ts, off = self.time_index.last_entry
            self.max_timestamp_so_far = ts
            self.offset_of_max_timestamp_so_far = off
        if file_size > 0 and pos > 0:
            rc = parse_batch_header(self._ptr(0), file_size, &h)
            if rc == 0:
                self.rolling_based_timestamp = h.max_timestamp
        self.size = pos
        cdef int64_t last_pos = -1, prev_next = 0, prev_max_ts = 0, prev_off_max = 0, prev_rolling = 0
        cdef int64_t scan_start = pos
        while pos < file_size:
            rc = parse_batch_header(self._ptr(pos), file_size - pos, &h)
            if rc != 0 or not _sane(&h, self.base_offset, self.next_offset if pos > 0 else -1):
                break
            # the log end before this batch: the previous batch's end, or (the first batch of the scan, which may
            # start at the index's last entry) this batch's base offset
            last_pos, prev_next = pos, self.next_offset if pos > scan_start else h.base_offset
            prev_max_ts = self.max_timestamp_so_far
            prev_off_max, prev_rolling = self.offset_of_max_timestamp_so_far, self.rolling_based_timestamp
            # loading writes nothing: an entry missing after a crash only makes the index sparser
            self._note_batch_foreign(pos, h.base_offset + h.last_offset_delta, h.max_timestamp, h.batch_length + 12)
            pos = self.size
        if last_pos >= 0 and self.size < file_size and not self._complete_at(last_pos, self.size - last_pos):
            # bytes follow the last batch (preallocated room, say), so its length alone does not prove it was
            # written whole: a writer may be writing it now, or have died writing it. Its CRC decides; without it
            # the view ends before it (refresh() takes it in once it is whole)
            self.size, self.next_offset, self.max_timestamp_so_far = last_pos, prev_next, prev_max_ts
            self.offset_of_max_timestamp_so_far, self.rolling_based_timestamp = prev_off_max, prev_rolling
        # zeros where the next batch would start are preallocated room (``preallocate``), not a torn write
        self.torn_bytes = 0 if self._zeros_at(self.size, file_size) else file_size - self.size

    cdef int _complete_at(self, int64_t pos, int64_t length) except -1:
        """1 when the ``length`` bytes at ``pos`` (read with pread, never through the mapping) are one whole batch
        whose CRC holds."""
        cdef BatchHeader h
        cdef bytearray buf = bytearray(length)
        cdef Py_ssize_t got = _pread_full(self.fd, <unsigned char *>(<char *>buf), length, pos)
        if got < 0:
            raise _os_error("read", self.log_path)
        return got == length and check_batch(<const unsigned char *>(<char *>buf), length, &h) == 0

    # ------------------------------------------------------------------------------------------------ append

    def append(self, data, int64_t expected_next_offset=-1):
        """Write complete batches (offsets already assigned, already validated) at the end; index per batch.

        A failed write is rolled back (the file is truncated to its old end) and raised as KafkaStorageError.
        Returns the new size.
        """
        cdef Py_buffer buf
        cdef BatchHeader h
        cdef const unsigned char *p
        cdef Py_ssize_t n, q = 0, written = 0
        cdef ssize_t w
        cdef int64_t start = self.size
        cdef int rc
        if not self.writable:
            raise storage_error(OSError(9, "segment is read-only"), "append", self.log_path)
        PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
        try:
            p = <const unsigned char *>buf.buf
            n = buf.len
            # check framing before the first byte goes to disk: offsets must continue the segment
            while q < n:
                rc = parse_batch_header(p + q, n - q, &h)
                if rc != 0:
                    raise CorruptRecordError("append: %s at byte %d of the appended data" % (
                        batch_error_message(rc), q))
                if h.base_offset + h.last_offset_delta - self.base_offset > KL_INT32_MAX or \
                        h.base_offset < self.base_offset:
                    raise InvalidOffsetError("append: offset %d does not fit segment %d" % (
                        h.base_offset, self.base_offset))
                if q == 0 and (h.base_offset < expected_next_offset or h.base_offset < self.next_offset):
                    # never two batches at one offset: a stale view must fail here, not write a duplicate
                    raise InvalidOffsetError("append: base offset %d below the log end %d of segment %d" % (
                        h.base_offset, max(expected_next_offset, self.next_offset), self.base_offset))
                q += h.batch_length + KL_LOG_OVERHEAD
            self._ensure_mapped(start + n)
            with nogil:
                written = _pwrite_full(self.fd, p, n, start)
            if written < n:
                err = _os_error("write", self.log_path)
                ftruncate(self.fd, start)
                raise err
            q = 0
            while q < n:
                parse_batch_header(p + q, n - q, &h)
                self._note_batch(start + q, h.base_offset + h.last_offset_delta, h.max_timestamp,
                                 h.batch_length + KL_LOG_OVERHEAD)
                q += h.batch_length + KL_LOG_OVERHEAD
        finally:
            PyBuffer_Release(&buf)
        return self.size

    # ------------------------------------------------------------------------------------------------ read

    cdef int _walk_to(self, int64_t offset, int64_t *pos, int64_t *last, int64_t *bsize) noexcept nogil:
        """From *pos, find the first batch whose last offset >= offset. 1 = found (pos/last/bsize set), 0 = none."""
        cdef BatchHeader h
        cdef int64_t p = pos[0]
        while p < self.size:
            if parse_batch_header(self._ptr(p), self.size - p, &h) != 0:
                return 0
            if h.base_offset + h.last_offset_delta >= offset:
                pos[0] = p
                last[0] = h.base_offset + h.last_offset_delta
                bsize[0] = h.batch_length + KL_LOG_OVERHEAD
                return 1
            p += h.batch_length + KL_LOG_OVERHEAD
        return 0

    cdef int64_t _index_position(self, int64_t offset):
        if self.offset_index is None:
            return 0
        cdef int64_t p = self.offset_index.lookup_position(offset)
        return p if 0 <= p < self.size else 0

    def translate_offset(self, int64_t offset, int64_t starting_position=0):
        """(last offset, position, size) of the first batch whose last offset >= offset, or None."""
        cdef int64_t pos = max(self._index_position(offset), starting_position), last = 0, bsize = 0
        if self._walk_to(offset, &pos, &last, &bsize):
            return (last, pos, bsize)
        return None

    def read(self, int64_t start_offset, int64_t max_size, bint min_one_message=True, int64_t max_position=-1):
        """Whole batches from the one containing ``start_offset``, at most ``max_size`` bytes (at least one batch
        when ``min_one_message``), as a zero-copy memoryview; None when no batch has last offset >= start."""
        cdef int64_t pos = self._index_position(start_offset), last = 0, bsize = 0, end, p
        cdef BatchHeader h
        if max_position < 0 or max_position > self.size:
            max_position = self.size
        if not self._walk_to(start_offset, &pos, &last, &bsize) or pos >= max_position:
            return None
        end = pos + bsize
        if bsize > max_size and not min_one_message:
            return _view(self._map, pos, 0)
        while end < max_position:
            if parse_batch_header(self._ptr(end), max_position - end, &h) != 0:
                break
            if end + h.batch_length + KL_LOG_OVERHEAD - pos > max_size:
                break
            end += h.batch_length + KL_LOG_OVERHEAD
        return _view(self._map, pos, end - pos)

    def view(self, int64_t start=0, int64_t end=-1):
        """Zero-copy view of bytes [start, end) of the valid region (end -1 = size)."""
        if end < 0 or end > self.size:
            end = self.size
        if start < 0 or start > end:
            raise ValueError("view [%d, %d) outside [0, %d)" % (start, end, self.size))
        return _view(self._map, start, end - start)

    def batch_positions(self, int64_t start=0):
        """Yield (position, RecordBatch) for every complete batch from ``start`` (tools: dump, check)."""
        cdef BatchHeader h
        cdef int64_t pos = start
        while pos < self.size:
            if parse_batch_header(self._ptr(pos), self.size - pos, &h) != 0:
                return
            yield pos, RecordBatch(_view(self._map, pos, h.batch_length + KL_LOG_OVERHEAD))
            pos += h.batch_length + KL_LOG_OVERHEAD

    # ------------------------------------------------------------------------------------------------ time

    @property
    def largest_timestamp(self):
        """Largest record timestamp, or the file's mtime when no record has one (Kafka's retention key)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        try:
            return os.stat(self.log_path).st_mtime_ns // 1000000
        except OSError:
            return -1

    def find_offset_by_timestamp(self, int64_t timestamp, int64_t starting_offset):
        """(timestamp, offset) of the first record, in offset order from the time index hint, whose timestamp is
        >= ``timestamp`` and offset >= ``starting_offset``; None when there is none in this segment."""
        cdef int64_t ts = -1, off = -1
        if self._find_time(timestamp, starting_offset, &ts, &off):
            return (ts, off)
        return None

    cdef int _find_time(self, int64_t timestamp, int64_t starting_offset, int64_t *ts, int64_t *off) except -1:
        """find_offset_by_timestamp without Python objects (but for a compressed batch): 1 = found (*ts, *off)."""
        cdef int64_t hint = self.base_offset, pos, last = 0, bsize = 0
        cdef BatchHeader h
        if self.time_index is not None:
            hint = self.time_index.lookup_offset(timestamp)
        pos = self._index_position(max(hint, starting_offset))
        if not self._walk_to(starting_offset, &pos, &last, &bsize):
            return 0
        while pos < self.size:
            if parse_batch_header(self._ptr(pos), self.size - pos, &h) != 0:
                return 0
            if h.max_timestamp >= timestamp:
                if self._search_batch(pos, &h, timestamp, starting_offset, False, ts, off):
                    return 1
            pos += h.batch_length + KL_LOG_OVERHEAD
        return 0

    def find_max_timestamp(self):
        """(max timestamp, exact offset of the first record carrying it) — ListOffsets -3 (KAFKA-16310)."""
        cdef int64_t pos = 0, last = 0, bsize = 0, ts = -1, off = -1
        cdef BatchHeader h
        if self.max_timestamp_so_far < 0:
            return None
        pos = self._index_position(self.offset_of_max_timestamp_so_far)
        # the shallow offset from a time index may predate this process's view; scan from the hint, then from 0
        for start in (pos, 0):
            pos = start
            while pos < self.size:
                if parse_batch_header(self._ptr(pos), self.size - pos, &h) != 0:
                    break
                if h.max_timestamp == self.max_timestamp_so_far:
                    if self._search_batch(pos, &h, self.max_timestamp_so_far, -1, True, &ts, &off):
                        return (ts, off)
                    return None
                pos += h.batch_length + KL_LOG_OVERHEAD
        return None

    cdef int _search_batch(self, int64_t pos, BatchHeader *h, int64_t target, int64_t min_offset, bint exact,
                           int64_t *found_ts, int64_t *found_offset) except -1:
        """First record of the batch at pos with ts >= target (== target when exact) and offset >= min_offset:
        1 = found (*found_ts, *found_offset), 0 = none."""
        cdef const unsigned char *p
        cdef const unsigned char *end
        cdef int64_t ts, off = -1
        if h.attributes & KL_TIMESTAMP_TYPE_MASK:
            # LogAppendTime: every record reads as the batch's max timestamp
            if h.max_timestamp >= target and (not exact or h.max_timestamp == target):
                off = max(h.base_offset, min_offset)
                if off <= h.base_offset + h.last_offset_delta:
                    found_ts[0], found_offset[0] = h.max_timestamp, off
                    return 1
            return 0
        if (h.attributes & KL_COMPRESSION_CODEC_MASK) != KL_CODEC_NONE:
            for rec in RecordBatch(_view(self._map, pos, h.batch_length + KL_LOG_OVERHEAD)):
                if rec.offset >= min_offset and (rec.timestamp == target if exact else rec.timestamp >= target):
                    found_ts[0], found_offset[0] = rec.timestamp, rec.offset
                    return 1
            return 0
        p = self._ptr(pos + KL_RECORD_BATCH_OVERHEAD)
        end = self._ptr(pos + h.batch_length + KL_LOG_OVERHEAD)
        ts = _scan_records(p, end, h.records_count, h.base_timestamp, target, h.base_offset, min_offset, exact, &off)
        if off < 0:
            return 0
        found_ts[0], found_offset[0] = ts, off
        return 1

    # ------------------------------------------------------------------------------------------------ recovery

    def indexes_consistent(self):
        """Cheap checks that a sealed segment's index files agree with its .log (O(1) reads): trimmed to whole
        entries, first and last offset entries pointing at the start of the batch ending at their offset, time
        entries inside the segment and ordered. False means: rebuild them with recover()."""
        cdef BatchHeader h
        cdef int64_t pos, off
        if self.offset_index is None or self.time_index is None:
            return False
        oi, ti = self.offset_index, self.time_index
        if os.path.getsize(oi.path) != oi.entries * 8 or os.path.getsize(ti.path) != ti.entries * 12:
            return False
        for i in ((0, oi.entries - 1) if oi.entries else ()):
            off, pos = oi.entry(i)
            if pos < 0 or pos >= self.size or parse_batch_header(self._ptr(pos), self.size - pos, &h) != 0:
                return False
            if h.base_offset + h.last_offset_delta != off:
                return False
        if ti.entries:
            first_ts, first_off = ti.entry(0)
            last_ts, last_off = ti.entry(ti.entries - 1)
            if first_ts > last_ts or first_off < self.base_offset or last_off >= self.next_offset or \
                    last_ts != self.max_timestamp_so_far:
                return False
        return True

    def recover(self, int64_t max_message_size=0x7fffffff, int64_t from_offset=-1, bint truncate=True):
        """Validate batches (CRC, framing, offsets) and rebuild the indexes; truncate at the first invalid byte.

        Batches whose last offset is below ``from_offset`` (the recovery point: fsynced before) are trusted and
        only their headers are read; index entries from there on are dropped and rebuilt. Returns truncated bytes
        (``truncate=False``: the indexes are rebuilt from the segment's start, the .log is never cut; returns the
        bytes past the last batch taken in).
        """
        cdef BatchHeader h
        cdef int64_t pos = 0, last = 0, bsize = 0, file_size, prev_next
        cdef int rc
        file_size = self._size_now()
        self._ensure_mapped(file_size)
        # a sealed (trimmed) or damaged index gets its full preallocated size back before it is rebuilt
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        self.size = file_size
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.rolling_based_timestamp = -1
        self.next_offset = self.base_offset
        if truncate and from_offset > self.base_offset and self.offset_index.entries > 0:
            self.offset_index.truncate_to(from_offset)
            self.time_index.truncate_to(from_offset)
            if self.offset_index.entries > 0:
                off, pos = self.offset_index.last_entry
                # the index is only a hint: its last entry must name the start of the batch ending at its offset,
                # or the index is damaged and rebuilt from the segment start (never trust a position blindly)
                if not (0 < pos < file_size and parse_batch_header(self._ptr(pos), file_size - pos, &h) == 0
                        and h.base_offset + h.last_offset_delta == off and _sane(&h, self.base_offset, -1)):
                    pos = -1
            if pos > 0 and self.time_index.entries > 0:
                ts, ts_off = self.time_index.last_entry
                if self.base_offset <= ts_off <= off:
                    self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = ts, ts_off
                else:
                    pos = -1
        if pos <= 0:
            pos = 0
            self.max_timestamp_so_far = -1
            self.offset_of_max_timestamp_so_far = self.base_offset
            self.offset_index.truncate()
            self.time_index.truncate()
        if pos > 0 and parse_batch_header(self._ptr(0), file_size, &h) == 0:
            self.rolling_based_timestamp = h.max_timestamp
        self.size = pos
        prev_next = -1
        while pos < file_size:
            rc = parse_batch_header(self._ptr(pos), file_size - pos, &h)
            if rc != 0:
                break
            last = h.base_offset + h.last_offset_delta
            if last < from_offset:
                pass  # trusted: flushed before the recovery point
            elif check_batch(self._ptr(pos), file_size - pos, &h) != 0:
                break
            elif h.batch_length + KL_LOG_OVERHEAD > max_message_size + KL_LOG_OVERHEAD + KL_RECORD_BATCH_OVERHEAD \
                    and max_message_size < 0x7fffffff:
                break
            if not _sane(&h, self.base_offset, prev_next):
                break
            prev_next = last + 1
            self._note_batch(pos, last, h.max_timestamp, h.batch_length + KL_LOG_OVERHEAD)
            pos = self.size
        truncated = file_size - self.size
        if truncated > 0 and truncate:
            if ftruncate(self.fd, self.size) != 0:
                raise _os_error("truncate", self.log_path)
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, True)
        self.torn_bytes = 0
        return truncated

    def truncate_to(self, int64_t offset):
        """Drop every batch whose last offset >= offset (a batch containing ``offset`` goes whole). Returns bytes."""
        cdef int64_t pos = self._index_position(offset), last = 0, bsize = 0, old = self.size
        if not self._walk_to(offset, &pos, &last, &bsize):
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        if ftruncate(self.fd, pos) != 0:
            raise _os_error("truncate", self.log_path)
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.rolling_based_timestamp = -1
        self._load_tail(pos)  # from the last remaining index entry, as at open
        return old - pos

    # ------------------------------------------------------------------------------------------------ other processes

    def refresh(self):
        """Take in complete, CRC-valid batches that other processes appended after ``size``.

        Reads with pread() in chunks; a batch that crosses a chunk's end is read again from its start with the
        next chunk (sized to hold it), so the view stops only where the file really stops holding a complete,
        valid batch: at its end, at a batch still being written (or torn by a writer that died), or at invalid
        bytes. Returns the number of new bytes (0 when none), or -1 when the file is now shorter than our view
        (another process truncated it: the caller must reopen the segment).
        """
        cdef BatchHeader h
        cdef int64_t file_size, pos, start = self.size, want, need, chunk_len = _FIRST_CHUNK
        cdef bytearray chunk
        cdef const unsigned char *p
        cdef Py_ssize_t got, q, k
        cdef int rc
        file_size = self._size_now()
        if file_size < self.size:
            return -1
        pos = self.size
        while pos < file_size:
            if self._zeros_at(pos, file_size):
                break  # preallocated room (or nothing written there yet): 61 bytes read, not a chunk of zeros
            want = min(file_size - pos, chunk_len)
            chunk = bytearray(want)
            p = <const unsigned char *>(<char *>chunk)
            got = _pread_full(self.fd, <unsigned char *>p, want, pos)
            if got < 0:
                raise _os_error("read", self.log_path)
            q = 0
            rc = 0
            while q < got:
                rc = check_batch(p + q, got - q, &h)
                if rc != 0:
                    break
                q += h.batch_length + KL_LOG_OVERHEAD
            # what the batch that stops the chunk needs (h is reused below)
            need = h.batch_length + KL_LOG_OVERHEAD if got - q >= KL_HEADER_SIZE_UP_TO_MAGIC else \
                KL_HEADER_SIZE_UP_TO_MAGIC
            if q > 0:
                self._ensure_mapped(pos + q)
                # account per batch, with the index rule; entries written by the other process are picked up below
                k = 0
                while k < q:
                    parse_batch_header(p + k, q - k, &h)
                    self._note_batch_foreign(pos + k, h.base_offset + h.last_offset_delta, h.max_timestamp,
                                             h.batch_length + KL_LOG_OVERHEAD)
                    k += h.batch_length + KL_LOG_OVERHEAD
                pos += q
            if q == got or rc != KL_BATCH_INCOMPLETE or got < want:
                # read to the end, an invalid batch (preallocated zeros too), or the file shrank meanwhile: the view
                # ends here
                if q < got or got < want:
                    break
                chunk_len = min(chunk_len * 2, _CHUNK)  # a whole chunk of batches: read on in larger ones
                continue
            # the bytes end inside a batch: when the file holds all of it, read on from its start
            if pos + need > file_size:
                break  # incomplete at the end of the file: being written now, or torn by a writer that died
            chunk_len = max(chunk_len, need)
        # The index files only change when the .log does: read them when batches came in, and once more at the
        # next call (a writer in another process writes its entries just after its batch). An unchanged segment
        # costs one lseek, not a scan of the index files' preallocated tails.
        if self.size != start or self._indexes_behind:
            if self.offset_index is not None:
                self.offset_index.refresh()
            if self.time_index is not None:
                self.time_index.refresh()
            self._indexes_behind = self.size != start
        return self.size - start

    def revalidate_from(self, int64_t offset):
        """For a reader of a store nobody has recovered yet: forget what the header-only load took in from the
        batch holding ``offset`` on, and take it in again through refresh(), which checks every CRC. Files are
        not touched. Returns the bytes accepted again."""
        cdef int64_t pos = self._index_position(offset), last = 0, bsize = 0
        cdef BatchHeader h
        if not self._walk_to(offset, &pos, &last, &bsize):
            return 0
        parse_batch_header(self._ptr(pos), self.size - pos, &h)
        self.size = pos
        self.next_offset = h.base_offset
        return max(self.refresh(), 0)

    def _note_batch_foreign(self, int64_t pos, int64_t last_offset, int64_t max_ts, int64_t batch_size):
        # the writer that appended these batches also wrote their index entries: do not index them twice
        if pos == 0:
            self.rolling_based_timestamp = max_ts
        if max_ts > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_ts
            self.offset_of_max_timestamp_so_far = last_offset
        self.next_offset = last_offset + 1
        self.size = pos + batch_size

    # ------------------------------------------------------------------------------------------------ lifecycle

    def flush(self, bint indexes=True):
        """fsync the .log (its data and size), then the indexes unless ``indexes`` is False: indexes above the
        checkpointed recovery point are rebuilt by recovery anyway, so a durable append needs the .log only."""
        cdef int rc
        if self.fd < 0 or not self.writable:
            return
        with nogil:
            rc = fdatasync(self.fd)  # data and the file size (what a reader needs); not mtime
        if rc != 0:
            raise _os_error("fdatasync", self.log_path)
        if indexes:
            self.offset_index.flush()
            self.time_index.flush()

    def on_become_inactive(self):
        """At roll: final time-index entry (largest timestamp survives restarts), indexes trimmed to their entries."""
        if not self.writable:
            return
        if self.max_timestamp_so_far >= 0:
            try:
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, True)
            except IndexFullError:
                pass  # another process sealed this segment first: its final entry is already there
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.trim_padding()

    def close(self):
        """Final time-index entry and trimmed indexes (writable), then release files. Idempotent."""
        if self.fd < 0:
            return
        try:
            self.on_become_inactive()
        finally:
            if self.offset_index is not None:
                self.offset_index.close()
            if self.time_index is not None:
                self.time_index.close()
            c_close(self.fd)
            self.fd = -1
            self._map = Mapping.__new__(Mapping)

    def close_without_finalizing(self):
        """Release files without the final time-index entry: for a read-only opener, or a segment that another
        process sealed (it already wrote the final entries)."""
        if self.fd < 0:
            return
        if self.offset_index is not None:
            self.offset_index.close(False)  # never cut a file another process may still be indexing into
        if self.time_index is not None:
            self.time_index.close(False)
        c_close(self.fd)
        self.fd = -1
        self._map = Mapping.__new__(Mapping)

    def torn_bytes_now(self):
        """Bytes in the file past the last complete batch of our view (another process appended, or a writer died
        mid-append); 0 when the file holds only zeros there (preallocated room: see ``preallocate``)."""
        cdef int64_t file_size = self._size_now()
        if file_size > self.size and self._zeros_at(self.size, file_size):
            return 0
        return file_size - self.size

    cdef int64_t _size_now(self) except -1:
        """The .log's size now (``_file_size``: lseek, never fstat)."""
        cdef int64_t size = _file_size(self.fd)
        if size < 0:
            raise _os_error("lseek", self.log_path)
        return size

    cdef int _zeros_at(self, int64_t pos, int64_t file_size) except -1:
        """1 when the batch header that would start at ``pos`` is all zeros in the file (read with pread, never
        through the mapping), or the file ends at ``pos``. A writer's pwrite fills the page cache from its first byte
        on, so a writer killed mid-append leaves a prefix of its batch: zeros at the header mean it wrote nothing
        (or only zeros) there. A power loss can leave other bytes further on; the recovery that follows an unclean
        shutdown validates and cuts everything past the last valid batch."""
        cdef unsigned char buf[64]
        cdef Py_ssize_t n = <Py_ssize_t>min(file_size - pos, <int64_t>61), got, i  # 61: a batch's header
        if n <= 0:
            return 1
        got = _pread_full(self.fd, buf, n, pos)
        if got < 0:
            raise _os_error("read", self.log_path)
        for i in range(got):
            if buf[i] != 0:
                return 0
        return 1

    def preallocate(self, int64_t chunk, int64_t limit):
        """Keep zero-written room past the last batch (the ``preallocate`` topic config): when less than half of
        ``chunk`` bytes of zeros are left, write ``chunk`` more (not past ``limit`` bytes of file, segment.bytes).
        Appends then overwrite blocks the file already has, so their fdatasync writes the data alone: no size
        change and no block allocation to commit to the file system's journal (an fdatasync of a size-changing
        append costs that commit besides the data). The zeros go at the end of the file, never over a batch; only
        a writer calls this, under the partition lock. Nothing is fsynced here: the next durable append's fdatasync
        carries the new size once. Returns the bytes written."""
        cdef int64_t end, target, at
        cdef Py_ssize_t n, w
        if not self.writable or chunk <= 0:
            return 0
        end = self._size_now()
        if end < self.size or end - self.size >= chunk // 2:
            return 0
        target = min(self.size + chunk, max(limit, self.size))
        if target <= end:
            return 0
        at = end
        with nogil:
            while at < target:
                n = <Py_ssize_t>min(target - at, <int64_t>_ZEROS_LEN)
                w = _pwrite_full(self.fd, _ZEROS, n, at)
                at += w
                if w < n:
                    break  # an error (errno set)
        if at < target:
            err = _os_error("write", self.log_path)
            ftruncate(self.fd, end)  # never past what was there: a reader meets the same file as before
            raise err
        return target - end

    def trim_padding(self):
        """Cut preallocated zeros past the last batch (at roll and at an exclusive close: a sealed segment is
        exactly its batches, as Kafka trims). Bytes that are not zeros are never cut here. Returns the bytes cut."""
        cdef int64_t file_size
        if not self.writable or self.fd < 0:
            return 0
        file_size = self._size_now()
        if file_size <= self.size or not self._zeros_at(self.size, file_size):
            return 0
        if ftruncate(self.fd, self.size) != 0:
            raise _os_error("truncate", self.log_path)
        return file_size - self.size

    def truncate_torn_tail(self):
        """Cut what follows the last complete, valid batch (only under the partition lock: no live writer can be
        appending, so an incomplete or invalid batch there was torn by a writer that died). Everything valid is
        taken in first: bytes are cut only when they really are torn. Returns the bytes cut."""
        cdef int64_t file_size
        if self.refresh() < 0:
            return 0  # another process's recovery truncated the file under us: the caller reopens the segment
        file_size = self._size_now()
        if file_size <= self.size or self._zeros_at(self.size, file_size):
            return 0  # nothing past the view, or preallocated zeros: nothing torn
        if ftruncate(self.fd, self.size) != 0:
            raise _os_error("truncate", self.log_path)
        self.torn_bytes = 0
        return file_size - self.size

    @property
    def closed(self):
        return self.fd < 0

    def files(self):
        """Paths of this segment's files that exist."""
        return [p for p in (self.log_path,
                            self.dir / (segment_file_name(self.base_offset, ".index") + self.file_suffix),
                            self.dir / (segment_file_name(self.base_offset, ".timeindex") + self.file_suffix))
                if p.exists()]

    def rename_deleted(self):
        """Close and rename every file to ``<name>.deleted`` (crash-safe delete, step 1); returns the new paths."""
        paths = self.files()
        self.close()
        out = []
        for p in paths:
            q = p.with_name(p.name + ".deleted")
            try:
                os.replace(p, q)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise storage_error(e, "rename", p) from None
            out.append(q)
        return out

    def __repr__(self):
        return "LogSegment(%s, base=%d, size=%d, next=%d)" % (self.dir.name, self.base_offset, self.size,
                                                               self.next_offset)


# ---------------------------------------------------------------------------------------------------------------------
# across the segments of a partition


cdef object _new_tuple = tuple.__new__
cdef object _OffsetAndTimestamp = OffsetAndTimestamp


def offset_for_time(list segments, int64_t timestamp, int64_t log_start, int64_t log_end):
    """Kafka's ListOffsets by timestamp over a partition's segments (in base offset order) in one call: the segment
    holding ``log_start``, then each one whose largest timestamp reaches ``timestamp``: its time index, its offset
    index, then the scan inside the batch. ``OffsetAndTimestamp`` of the first record at or past ``log_start`` whose
    timestamp is >= ``timestamp``; None when there is none below ``log_end``. No Python object is made before the
    result (but for a compressed batch, whose records are decoded)."""
    cdef Py_ssize_t n = len(segments), lo = 0, hi = n - 1, mid, i
    cdef LogSegment seg
    cdef int64_t ts = -1, off = -1, largest
    while lo < hi:  # the last segment whose base offset <= log_start (the first when none)
        mid = (lo + hi + 1) >> 1
        if (<LogSegment>segments[mid]).base_offset <= log_start:
            lo = mid
        else:
            hi = mid - 1
    for i in range(lo, n):
        seg = <LogSegment>segments[i]
        largest = seg.max_timestamp_so_far
        if largest < 0:
            largest = seg.largest_timestamp  # no record timestamps: the file's mtime (Kafka's retention key)
        if largest >= timestamp and seg._find_time(timestamp, log_start, &ts, &off):
            if off >= log_end:
                return None
            return _new_tuple(_OffsetAndTimestamp, (off, ts, None))  # the NamedTuple without its Python __new__
    return None


# ---------------------------------------------------------------------------------------------------------------------
# the partition's change counter


CHANGE_COUNTER_FILE = ".kafkalog-changes"
CHANGE_COUNTER_VERSION = 1
cdef uint32_t _CC_MAGIC = 0x43434c4b   # b"KLCC" read as a native (little-endian) UInt32
cdef size_t _CC_SIZE = 64


cdef class ChangeCounter:
    """The partition's change counter file (``<partition dir>/.kafkalog-changes``), mapped shared.

    ``ChangeCounter(path, writable, create=True)``: a writer (``writable``) creates a missing file, gives a short one
    its 64 bytes and writes a bad header in place (never a new file: a view that mapped the old one would wait on it
    forever); a reader maps a file with a valid header, else raises ValueError (OSError when it is missing). Layout
    in the module docstring. ``seen`` and ``trusted`` belong to the owning Log (which serialises its calls);
    ``unchanged()``, ``bump()`` and ``retire()`` are atomic against other processes and threads."""

    def __cinit__(self):
        self._addr = NULL

    def __dealloc__(self):
        if self._addr != NULL:
            munmap(self._addr, _CC_SIZE)
            self._addr = NULL

    def __init__(self, path, bint writable, bint create=True):
        cdef struct_stat st
        cdef bytes bpath = os.fsencode(path)
        cdef int fd
        cdef void *p
        cdef uint32_t head[2]
        self.path = path
        self.writable = writable
        self.trusted = False
        fd = c_open(bpath, (O_RDWR | (O_CREAT if create else 0)) if writable else O_RDONLY, 0o644)
        if fd < 0:
            raise _os_error("open", path)
        try:
            if fstat(fd, &st) != 0:
                raise _os_error("fstat", path)
            if <size_t>st.st_size < _CC_SIZE:
                if not writable:
                    raise ValueError(f"{path}: {st.st_size} bytes, not a change counter")
                if ftruncate(fd, _CC_SIZE) != 0:  # only ever grows it: a mapping never reaches past the end
                    raise _os_error("truncate", path)
            p = mmap(NULL, _CC_SIZE, (PROT_READ | PROT_WRITE) if writable else PROT_READ, MAP_SHARED, fd, 0)
            if p == MAP_FAILED:
                raise _os_error("mmap", path)
        finally:
            c_close(fd)
        self._addr = <unsigned char *>p
        memcpy(head, self._addr, 8)
        if head[0] != _CC_MAGIC or head[1] < CHANGE_COUNTER_VERSION:
            # zeros (a file cut short by a crash, or just made), garbage: a reader refreshes on every call; a writer
            # writes the header in place (the Changes word keeps counting: views that mapped it before see a move)
            if not writable:
                self.close()
                raise ValueError(f"{path}: not a change counter")
            head[0], head[1] = _CC_MAGIC, CHANGE_COUNTER_VERSION
            memcpy(self._addr, head, 8)
            self.bump()
        self.seen = self.load()
        self.trusted = True

    cdef inline uint64_t *_word(self, int i) noexcept nogil:
        # the words are 8-byte aligned (the mapping is page aligned): atomics need their own type
        return <uint64_t *>(self._addr + 8 * i)

    cpdef uint64_t load(self) except? 0:
        """The counter now (acquire)."""
        if self._addr == NULL:
            raise ValueError("change counter closed")
        return kl_atomic_load_u64(self._word(1))

    def unchanged(self):
        """True when the counter is trusted and still what ``seen`` says: one memory load, no system call."""
        return self.trusted and kl_atomic_load_u64(self._word(1)) == self.seen

    def bump(self):
        """Count one change (after it is visible in the files); returns the counter before."""
        if self._addr == NULL or not self.writable:
            raise ValueError("change counter closed or read-only")
        return kl_atomic_fetch_add_u64(self._word(1), 1)

    def advance(self):
        """bump(), and when nobody else counted a change since ``seen``, take this one as seen (the caller's view
        holds every change up to its own: a shared writer under the partition lock)."""
        cdef uint64_t before = self.bump()
        if before == self.seen:
            self.seen = before + 1
        return before

    @property
    def retired(self):
        """True once the partition directory is being deleted (``retire()``): the counter says nothing any more."""
        return self._addr != NULL and kl_atomic_load_u64(self._word(2)) != 0

    def retire(self):
        """The partition directory goes (topic deletion): views mapping this file stop trusting it."""
        if self._addr == NULL or not self.writable:
            raise ValueError("change counter closed or read-only")
        kl_atomic_store_u64(self._word(2), 1)
        kl_atomic_fetch_add_u64(self._word(1), 1)

    def publish_end(self, int64_t end, uint64_t session):
        """A writer of the store's open ``session`` made offsets below ``end`` visible. Callers are serialised per
        partition (shared writers hold the partition lock, an exclusive store is alone)."""
        if self._addr == NULL or not self.writable:
            raise ValueError("change counter closed or read-only")
        if session == 0 or end < 0:
            return
        if kl_atomic_load_u64(self._word(4)) != session:
            kl_atomic_store_u64(self._word(3), <uint64_t>end)  # the first of this session: earlier ends say nothing
            kl_atomic_store_u64(self._word(4), session)
        else:
            kl_atomic_max_u64(self._word(3), <uint64_t>end)

    def published_end(self, uint64_t session):
        """The highest log end published in ``session``; -1 when none was (``session`` 0, or retired)."""
        if self._addr == NULL or session == 0 or kl_atomic_load_u64(self._word(4)) != session \
                or kl_atomic_load_u64(self._word(2)) != 0:
            return -1  # none in this session, or retired: the directory is going, its end says nothing
        return <int64_t>kl_atomic_load_u64(self._word(3))

    def revive(self):
        """A writer opens a partition whose deletion was cut off after ``retire()``: trusted again by new views."""
        if self._addr == NULL or not self.writable:
            raise ValueError("change counter closed or read-only")
        if kl_atomic_load_u64(self._word(2)) != 0:
            kl_atomic_store_u64(self._word(4), 0)  # the partition starts again: no end published yet
            kl_atomic_store_u64(self._word(2), 0)
            kl_atomic_fetch_add_u64(self._word(1), 1)

    def close(self):
        self.trusted = False
        if self._addr != NULL:
            munmap(self._addr, _CC_SIZE)
            self._addr = NULL

    def __repr__(self):
        return "ChangeCounter(%s, %s, seen=%d)" % (self.path, "writable" if self.writable else "read-only",
                                                   self.seen)
