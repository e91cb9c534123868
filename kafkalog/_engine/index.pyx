"""Kafka's two segment indexes, byte for byte, over numpy.memmap files.

Formats (big-endian, packed, no header, no checksum: an index is always rebuildable from its ``.log``)::

    <20-digit base offset>.index       OffsetIndex entry (8 B):  RelativeOffset => Int32 | Position => Int32
    <20-digit base offset>.timeindex   TimeIndex entry (12 B):   Timestamp => Int64 | RelativeOffset => Int32

RelativeOffset = offset - base offset (0..Int32.MAX). Keys strictly increase: offsets in the offset index, timestamps in
the time index (whose offsets never decrease; neither do the offset index's positions). An entry (T, O) of the time index means "the largest timestamp seen
up to offset O is T".

A writable index is created preallocated to ``roundDown(max_index_size, entry_size)`` bytes of zeros and trimmed to
``entries * entry_size`` on close. Kafka infers the entry count of an existing file from its length, which turns the
zero padding of an untrimmed file (a crash before close) into entries (KAFKA-10207); here the count is the length of
the valid prefix: entries are non-zero and ordered, the first all-zero entry ends the index (only slot 0 may be zero,
and only when a valid entry follows it). Discovery reads the file with pread, never through the mapping, so a reader
racing a writer that trims the file cannot fault on a page past the new end of file.

Lookups are Kafka's two-section binary search (``AbstractIndex.indexSlotRangeFor``): the last 8 KiB of entries (the
"warm" section) is searched on its own when the target is in it, so tail lookups, the common case, keep touching the
same few pages instead of the cold middle of the file.
"""
import errno
import os
import pathlib
import weakref

import numpy as np

from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy, memset
from posix.unistd cimport close as c_close

from kafkalog._engine.clib cimport (
    KL_CHECK,
    KL_INDEX_WARM_BYTES,
    KL_INT32_MAX,
    KL_OFFSET_INDEX_ENTRY,
    KL_TIME_INDEX_ENTRY,
    kl_load_i32,
    kl_load_i64,
    kl_store_i32,
    kl_store_i64,
)

from kafkalog.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidConfigError,
    InvalidOffsetError,
    InvalidTimestampError,
    LogClosedError,
    storage_error,
)

__all__ = ["AbstractIndex", "OffsetIndex", "TimeIndex", "OFFSET_INDEX_DTYPE", "TIME_INDEX_DTYPE",
           "DEFAULT_MAX_INDEX_SIZE"]

# numpy views of the two entry formats (packed: itemsize 8 and 12)
OFFSET_INDEX_DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
TIME_INDEX_DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes

# pread chunk for the forward scans of discovery/verify/refresh
cdef Py_ssize_t _SCAN_CHUNK_BYTES = 64 * 1024


# ---------------------------------------------------------------------------------------------------------------------
# C over the mapping: no Python objects, callable without the GIL

cdef enum:
    _KEY = 0      # OffsetIndex: offset, TimeIndex: timestamp (strictly increasing in both)
    _VALUE = 1    # OffsetIndex: position, TimeIndex: offset (never decreasing)


cdef inline int64_t _field(const unsigned char *base, int es, int64_t base_offset, Py_ssize_t slot,
                           int which) noexcept nogil:
    # es and which are constants at every hot call site, so the compiler folds the branches away after inlining
    cdef const unsigned char *p = base + slot * es
    if es == KL_OFFSET_INDEX_ENTRY:
        if which == _KEY:
            return base_offset + kl_load_i32(p)
        return kl_load_i32(p + 4)
    if which == _KEY:
        return kl_load_i64(p)
    return base_offset + kl_load_i32(p + 8)


cdef inline Py_ssize_t _first_hot(Py_ssize_t n, int es) noexcept nogil:
    cdef Py_ssize_t hot = n - 1 - KL_INDEX_WARM_BYTES // es
    return hot if hot > 0 else 0


cdef inline Py_ssize_t _largest_lower_bound(const unsigned char *base, Py_ssize_t n, int es, int64_t base_offset,
                                            int which, int64_t target) noexcept nogil:
    """Largest slot whose field is <= target, -1 when none (Kafka's largestLowerBoundSlotFor)."""
    cdef Py_ssize_t lo, hi, mid, hot, above
    if n <= 0 or base == NULL:
        return -1
    hot = _first_hot(n, es)
    # Kafka's loop (mid = (lo + hi + 1) >> 1, invariant field(lo) <= target) without its early exit on equality, so
    # duplicates (time index offsets) resolve to the last one
    if _field(base, es, base_offset, hot, which) < target:
        # warm section: cached and a handful of levels, so the bounds move by selection (a mispredicted branch costs
        # more than the compare; targets are unpredictable)
        lo = hot
        hi = n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            above = -<Py_ssize_t> (_field(base, es, base_offset, mid, which) > target)  # all ones when above
            hi = (hi & ~above) | ((mid - 1) & above)
            lo = (lo & above) | (mid & ~above)
    elif _field(base, es, base_offset, 0, which) > target:
        return -1
    else:
        # cold section: the loads miss the cache; a branch lets the CPU start the next one speculatively
        lo = 0
        hi = hot
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if _field(base, es, base_offset, mid, which) > target:
                hi = mid - 1
            else:
                lo = mid
    KL_CHECK(0 <= lo < n)
    return lo


cdef inline Py_ssize_t _smallest_upper_bound(const unsigned char *base, Py_ssize_t n, int es, int64_t base_offset,
                                             int which, int64_t target) noexcept nogil:
    """Smallest slot whose field is >= target, -1 when none (Kafka's smallestUpperBoundSlotFor)."""
    cdef Py_ssize_t lo, hi, mid, hot
    if n <= 0 or base == NULL:
        return -1
    hot = _first_hot(n, es)
    if _field(base, es, base_offset, hot, which) < target:
        lo = hot + 1
        hi = n
    else:
        lo = 0
        hi = hot
    # invariant: field(lo - 1) < target <= field(hi), with field(n) = +infinity
    while lo < hi:
        mid = (lo + hi) >> 1
        if _field(base, es, base_offset, mid, which) < target:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < n else -1


cdef inline bint _is_zero(const unsigned char *p, int es) noexcept nogil:
    cdef int i
    for i in range(es):
        if p[i] != 0:
            return False
    return True


cdef inline bint _follows(const unsigned char *prev, const unsigned char *cur, int es) noexcept nogil:
    """Whether entry cur may come right after prev: key strictly greater, value not smaller."""
    if es == KL_OFFSET_INDEX_ENTRY:
        return kl_load_i32(cur) > kl_load_i32(prev) and kl_load_i32(cur + 4) >= kl_load_i32(prev + 4)
    return kl_load_i64(cur) > kl_load_i64(prev) and kl_load_i32(cur + 8) >= kl_load_i32(prev + 8)


cdef inline void _put_offset_entry(unsigned char *p, int32_t rel, int32_t pos) noexcept nogil:
    # built aside and copied as one 8-byte word (a single store on 64-bit targets), so a reader in another process
    # does not see half an entry; refresh() validates what it reads all the same
    cdef unsigned char entry[8]
    kl_store_i32(entry, rel)
    kl_store_i32(entry + 4, pos)
    memcpy(p, entry, 8)


cdef inline void _put_time_entry(unsigned char *p, int64_t timestamp, int32_t rel) noexcept nogil:
    cdef unsigned char entry[12]
    kl_store_i64(entry, timestamp)
    kl_store_i32(entry + 8, rel)
    memcpy(p, entry, 12)


# ---------------------------------------------------------------------------------------------------------------------
# File plumbing (module-level so the .pxd contract stays as small as the C callers need)

cdef inline int _check_open(AbstractIndex idx) except -1:
    if idx._fd < 0:
        raise LogClosedError(f"index {idx.path} is closed")
    return 0


cdef inline int _check_writable(AbstractIndex idx, str operation) except -1:
    _check_open(idx)
    if not idx.writable:
        # a caller's bug, not a storage failure: deliberately not an OSError (those take a log dir offline)
        raise ValueError(f"cannot {operation}: index {idx.path} was opened read-only")
    return 0


cdef Py_ssize_t _file_length(AbstractIndex idx) except -1:
    try:
        return os.fstat(idx._fd).st_size
    except OSError as exc:
        raise storage_error(exc, "stat index", idx.path) from exc


cdef bytes _pread(AbstractIndex idx, Py_ssize_t size, Py_ssize_t offset):
    """Up to size bytes at offset (fewer only at end of file)."""
    cdef list parts = []
    cdef bytes part
    while size > 0:
        try:
            part = os.pread(idx._fd, size, offset)
        except OSError as exc:
            raise storage_error(exc, "read index", idx.path) from exc
        if not part:
            break
        parts.append(part)
        size -= len(part)
        offset += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


cdef int _set_length(AbstractIndex idx, Py_ssize_t new_length) except -1:
    """Set the file length; growth is allocated up front so a full disk fails here, not as SIGBUS on a mapped write."""
    cdef Py_ssize_t current = _file_length(idx)
    try:
        if new_length > current:
            try:
                os.posix_fallocate(idx._fd, current, new_length - current)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
        os.ftruncate(idx._fd, new_length)  # fallocate never shrinks; ftruncate makes the length exact
    except OSError as exc:
        raise storage_error(exc, "resize index", idx.path) from exc
    idx._length = new_length
    return 0


cdef int _map(AbstractIndex idx) except -1:
    """Map roundDown(_length, entry_size) bytes of the file (nothing when that is 0)."""
    cdef Py_ssize_t size = idx._length - idx._length % idx.entry_size
    cdef const unsigned char[::1] ro
    cdef unsigned char[::1] rw
    KL_CHECK(idx._mm is None)
    if size <= 0:
        return 0
    mode = "r+" if idx.writable else "r"
    while True:
        try:
            with open(idx._fd, mode + "b", buffering=0, closefd=False) as f:
                mm = np.memmap(f, dtype=np.uint8, mode=mode, shape=(size,))
            break
        except OSError as exc:
            raise storage_error(exc, "map index", idx.path) from exc
        except ValueError:
            # the file shrank since it was measured: the writer in another process trimmed it on a roll (only down
            # to its valid entries, which a reader keeps). Map what is there now.
            idx._length = _file_length(idx)
            size = idx._length - idx._length % idx.entry_size
            if size <= 0:
                return 0
    if idx.writable:
        rw = mm
        idx._wbase = &rw[0]
        idx._base = idx._wbase
    else:
        ro = mm
        idx._base = &ro[0]
    idx._mm = mm
    idx.max_entries = size // idx.entry_size
    return 0


cdef int _unmap(AbstractIndex idx) except -1:
    """Drop the mapping now rather than at garbage collection (KAFKA-4614)."""
    mm = idx._mm
    idx._mm = None
    idx._base = NULL
    idx._wbase = NULL
    idx.max_entries = 0
    if mm is None:
        return 0
    raw = getattr(mm, "_mmap", None)
    alive = weakref.ref(mm)
    del mm
    # numpy does not pin the mmap's buffer, so closing it under a live to_numpy() view would leave that view dangling;
    # only close it when the memmap is gone (otherwise the last view unmaps it)
    if raw is not None and alive() is None:
        raw.close()
    return 0


cdef int _release(AbstractIndex idx) except -1:
    """Unmap and close the descriptor (no trim)."""
    cdef int fd = idx._fd
    _unmap(idx)
    if fd >= 0:
        idx._fd = -1
        try:
            os.close(fd)
        except OSError as exc:
            raise storage_error(exc, "close index", idx.path) from exc
    return 0


cdef bint _slot_is_zero(AbstractIndex idx, Py_ssize_t slot) except -1:
    cdef bytes data = _pread(idx, idx.entry_size, slot * idx.entry_size)
    return len(data) < idx.entry_size or _is_zero(data, idx.entry_size)


cdef Py_ssize_t _scan_forward(AbstractIndex idx, Py_ssize_t start, Py_ssize_t end) except -1:
    """First slot in [start, end) that does not continue the index (end when all do), read with pread.

    Entries before start are trusted; entry start-1 is read back as the predecessor of entry start."""
    cdef int es = idx.entry_size
    cdef unsigned char prev[12]
    cdef bint have_prev = False, stop = False
    cdef Py_ssize_t slot = start, got, i, chunk = max(1, _SCAN_CHUNK_BYTES // es)
    cdef const unsigned char *buf
    cdef const unsigned char *cur
    cdef bytes data
    if start >= end:
        return start
    if start > 0:
        data = _pread(idx, es, (start - 1) * es)
        if len(data) < es:
            return start
        memcpy(prev, <const unsigned char *> data, es)
        have_prev = True
    while slot < end and not stop:
        data = _pread(idx, min(chunk, end - slot) * es, slot * es)
        got = len(data) // es
        stop = got == 0
        buf = data
        for i in range(got):
            cur = buf + i * es
            # only slot 0 may hold an all-zero entry ((base offset, 0) or (ts 0, base offset)); it counts when a
            # valid entry follows it (checked below)
            if (_is_zero(cur, es) and slot + i != 0) or (have_prev and not _follows(prev, cur, es)):
                stop = True
                got = i
                break
            memcpy(prev, cur, es)
            have_prev = True
        slot += got
    if slot == 1 and start == 0 and _is_zero(prev, es):
        return 0
    return slot


cdef tuple _discover(AbstractIndex idx, Py_ssize_t nslots, bint verify):
    """(entries, extent): entries = length of the valid prefix; extent = slot of the first zero entry past slot 0.

    The zero tail is found by binary search (padding of a preallocated file is all zeros); only the last warm section
    before it is checked for order unless verify is set (Kafka trusts indexes below the recovery point: KIP-263)."""
    cdef Py_ssize_t lo, hi, mid, extent, start
    if nslots <= 0:
        return 0, 0
    if nslots == 1 or not _slot_is_zero(idx, nslots - 1):
        extent = nslots  # a trimmed file: the common case costs one pread
    else:
        lo = 1
        hi = nslots - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if _slot_is_zero(idx, mid):
                hi = mid
            else:
                lo = mid + 1
        extent = lo
    start = 0 if verify else max(0, extent - KL_INDEX_WARM_BYTES // idx.entry_size)
    return _scan_forward(idx, start, extent), extent


cdef int _load_last(AbstractIndex idx) except -1:
    """Cache the last entry from the mapping (entries are always inside it)."""
    cdef const unsigned char *p
    cdef OffsetIndex oi
    cdef TimeIndex ti
    KL_CHECK(idx.entries <= idx.max_entries)
    p = idx._base + (idx.entries - 1) * idx.entry_size if idx.entries > 0 and idx._base != NULL else NULL
    if isinstance(idx, OffsetIndex):
        oi = <OffsetIndex> idx
        oi.last_offset = idx.base_offset + kl_load_i32(p) if p != NULL else idx.base_offset
    else:
        ti = <TimeIndex> idx
        ti.last_timestamp = kl_load_i64(p) if p != NULL else -1
        ti.last_entry_offset = idx.base_offset + kl_load_i32(p + 8) if p != NULL else idx.base_offset
    return 0


cdef int _truncate_to_entries(AbstractIndex idx, Py_ssize_t n) except -1:
    # the dropped slots are zeroed so the file stays "valid prefix + zeros": a crash before the next trim cannot bring
    # them back as entries, and readers in other processes stop at the new end
    if n < idx.entries:
        memset(idx._wbase + n * idx.entry_size, 0, (idx.entries - n) * idx.entry_size)
        idx.entries = n
        _load_last(idx)
    return 0


cdef int _open(AbstractIndex idx, bint verify) except -1:
    cdef int es = idx.entry_size
    cdef Py_ssize_t length, entries = 0, extent = 0
    cdef int flags = (os.O_RDWR | os.O_CREAT) if idx.writable else os.O_RDONLY
    if idx.writable and idx.max_index_size < es:
        raise InvalidConfigError(f"segment.index.bytes: {idx.max_index_size} is smaller than one {es}-byte entry "
                                 f"of {idx.path}")
    try:
        idx._fd = os.open(idx.path, flags | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise storage_error(exc, "open index", idx.path) from exc
    try:
        length = _file_length(idx)
        if idx.writable and length == 0:
            _set_length(idx, idx.max_index_size - idx.max_index_size % es)
        else:
            if idx.writable and length % es:
                _set_length(idx, length - length % es)  # a torn last entry
            else:
                idx._length = length
            entries, extent = _discover(idx, idx._length // es, verify)
        _map(idx)
        idx.entries = min(entries, idx.max_entries)
        if idx.writable and extent > entries:
            # non-zero leftovers past the valid prefix (a torn or reordered tail): clear them so the next crash or
            # a reader in another process cannot take them for entries once appends reach them
            memset(idx._wbase + entries * es, 0, (extent - entries) * es)
        _load_last(idx)
    except BaseException:
        _release(idx)
        raise
    return 0


# ---------------------------------------------------------------------------------------------------------------------

cdef class AbstractIndex:
    """One segment's index file, mapped with numpy.memmap; OffsetIndex and TimeIndex are the two concrete kinds.

    Not thread-safe: the owning LogSegment serialises every call (lookups included: a resize remaps under them).
    Across processes: one writer per file (the storage layer's lock); readers open with ``writable=False``, never
    change the file, and pick up the writer's appends with ``refresh()``.
    """

    def __cinit__(self):
        self._fd = -1
        self._base = NULL
        self._wbase = NULL
        self._mm = None

    def __init__(self, path, int64_t base_offset, Py_ssize_t max_index_size=DEFAULT_MAX_INDEX_SIZE,
                 bint writable=True, *, bint verify=False):
        if self.entry_size == 0:
            raise TypeError("AbstractIndex is abstract: open an OffsetIndex or a TimeIndex")
        if self.path is not None:
            raise TypeError(f"{type(self).__name__} is already initialised")
        self.path = pathlib.Path(os.fspath(path))
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        _open(self, verify)

    def __dealloc__(self):
        if self._fd >= 0:
            c_close(self._fd)  # never trims: an index dropped without close() is an unclean shutdown
            self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self._fd < 0 else ("writable" if self.writable else "read-only")
        return (f"{type(self).__name__}(path={str(self.path)!r}, base_offset={self.base_offset}, "
                f"entries={self.entries}, max_entries={self.max_entries}, {state})")

    cdef Py_ssize_t _slot_lower(self, int64_t key) noexcept nogil:
        return _largest_lower_bound(self._base, self.entries, self.entry_size, self.base_offset, _KEY, key)

    cdef int64_t _key(self, Py_ssize_t slot) noexcept nogil:
        KL_CHECK(0 <= slot < self.entries)
        return _field(self._base, self.entry_size, self.base_offset, slot, _KEY)

    @property
    def closed(self):
        """True after close() or delete()."""
        return self._fd < 0

    @property
    def length(self):
        """File length in bytes as last seen (Kafka's ``length()``): the mapped size, or the trimmed size after close."""
        return self._length

    def is_full(self):
        """True when no slot is left for an append (the segment must roll)."""
        return self.entries >= self.max_entries

    def truncate(self):
        """Drop every entry."""
        _check_writable(self, "truncate")
        _truncate_to_entries(self, 0)

    def resize(self, Py_ssize_t new_size):
        """Set the file length to roundDown(new_size, entry_size) and remap; False when the length already is that.

        Never drops entries: truncate_to() first (ValueError otherwise)."""
        cdef Py_ssize_t rounded
        _check_writable(self, "resize")
        if new_size < 0:
            raise ValueError(f"cannot resize {self.path} to {new_size} bytes")
        rounded = new_size - new_size % self.entry_size
        if rounded == self._length:
            return False
        if rounded < self.entries * self.entry_size:
            raise ValueError(f"cannot resize {self.path} to {rounded} bytes: it holds {self.entries} entries "
                             f"({self.entries * self.entry_size} bytes); truncate_to() first")
        _unmap(self)  # the mapping goes before the file shrinks under it
        try:
            _set_length(self, rounded)
        except BaseException:
            self._length = _file_length(self)
            _map(self)
            raise
        _map(self)
        return True

    def trim_to_valid_size(self):
        """Shrink the file to entries * entry_size (on roll and close); returns whether the length changed."""
        return self.resize(self.entries * self.entry_size)

    def flush(self):
        """msync the mapping and fsync the file (a no-op when read-only)."""
        _check_open(self)
        if not self.writable:
            return
        try:
            if self._mm is not None:
                self._mm.flush()
            os.fsync(self._fd)
        except OSError as exc:
            raise storage_error(exc, "flush index", self.path) from exc

    def close(self, bint trim=True):
        """Trim (when writable and ``trim``), unmap and close the file. Idempotent. ``trim=False`` leaves the file
        as it is: another process may still be appending entries to it through its own mapping (shared writers),
        and cutting the file under that mapping would fault it (SIGBUS)."""
        if self._fd < 0:
            return
        try:
            if self.writable and trim:
                _unmap(self)
                _set_length(self, self.entries * self.entry_size)
        finally:
            _release(self)

    def delete(self):
        """Unmap, close and unlink the file; returns False when it was already gone."""
        _release(self)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise storage_error(exc, "delete index", self.path) from exc
        return True

    def rename_to(self, new_path):
        """Move the file (open or closed); the mapping and descriptor follow it. A missing file only renames the
        object (Kafka's ``renameTo``), so an index that was never written can still take a ``.deleted`` name."""
        new_path = pathlib.Path(os.fspath(new_path))
        try:
            os.replace(self.path, new_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise storage_error(exc, f"rename index to {new_path}", self.path) from exc
        self.path = new_path

    def refresh(self):
        """Pick up entries another process (or another object) appended to this file; returns the new count.

        Reads forward from the current count with pread, stops at the first zero or out-of-order entry, and remaps when
        the file length changed. The mapping is never read past the entries known before the call: the writer may
        have trimmed the file, and a mapped page past the end of file raises SIGBUS. Assumes the writer only appended
        since the last look; after it truncated, open the index again."""
        cdef Py_ssize_t length, entries, es = self.entry_size
        _check_open(self)
        length = _file_length(self)
        entries = min(self.entries, length // es)
        entries = _scan_forward(self, entries, length // es)
        if length - length % es != self.max_entries * es:
            _unmap(self)
            self._length = length
            _map(self)  # may map less: the file can shrink again meanwhile
            entries = min(entries, self.max_entries)
        else:
            self._length = length
        self.entries = entries
        _load_last(self)
        return entries

    def to_numpy(self):
        """The valid entries as a read-only structured array (OFFSET_INDEX_DTYPE / TIME_INDEX_DTYPE), for tools.

        A view of the mapping, not a copy: it is stale after truncate/resize/close, and reading it after the file
        shrank below it raises SIGBUS. Keep ``to_numpy().copy()`` if it must outlive the next change of the index."""
        _check_open(self)
        dtype = OFFSET_INDEX_DTYPE if self.entry_size == KL_OFFSET_INDEX_ENTRY else TIME_INDEX_DTYPE
        if self.entries == 0:
            view = np.empty(0, dtype=dtype)
        else:
            view = np.frombuffer(self._mm, dtype=dtype, count=self.entries)
        view.flags.writeable = False
        return view


cdef class OffsetIndex(AbstractIndex):
    """Offset -> file position of a segment: ``RelativeOffset => Int32 | Position => Int32`` per 8-byte entry.

    Sparse: LogSegment adds one entry per ``index.interval.bytes`` of log, the key being the last offset of a batch and
    the value the position where that batch (or the append holding it) starts; lookups then scan the log forward.

    Not thread-safe: the owning LogSegment serialises access. One writer per file across processes (see
    AbstractIndex).
    """

    def __cinit__(self):
        self.entry_size = KL_OFFSET_INDEX_ENTRY

    cdef int64_t lookup_position(self, int64_t target) noexcept nogil:
        cdef Py_ssize_t slot = _largest_lower_bound(self._base, self.entries, KL_OFFSET_INDEX_ENTRY, self.base_offset,
                                                    _KEY, target)
        if slot < 0:
            return 0
        return kl_load_i32(self._base + slot * KL_OFFSET_INDEX_ENTRY + 4)

    def lookup(self, int64_t target):
        """(offset, position) of the largest entry with offset <= target, else (base_offset, 0)."""
        cdef Py_ssize_t slot
        cdef const unsigned char *p
        _check_open(self)
        slot = _largest_lower_bound(self._base, self.entries, KL_OFFSET_INDEX_ENTRY, self.base_offset, _KEY, target)
        if slot < 0:
            return (self.base_offset, 0)
        p = self._base + slot * KL_OFFSET_INDEX_ENTRY
        return (self.base_offset + kl_load_i32(p), kl_load_i32(p + 4))

    def fetch_upper_bound_offset(self, int64_t start_position, int64_t fetch_size):
        """(offset, position) of the first entry at or past start_position + fetch_size, else None."""
        cdef Py_ssize_t slot
        cdef const unsigned char *p
        _check_open(self)
        slot = _smallest_upper_bound(self._base, self.entries, KL_OFFSET_INDEX_ENTRY, self.base_offset, _VALUE,
                                     start_position + fetch_size)
        if slot < 0:
            return None
        p = self._base + slot * KL_OFFSET_INDEX_ENTRY
        return (self.base_offset + kl_load_i32(p), kl_load_i32(p + 4))

    def entry(self, Py_ssize_t n):
        """The n-th entry as (offset, position)."""
        cdef const unsigned char *p
        _check_open(self)
        if n < 0 or n >= self.entries:
            raise IndexError(f"entry {n} of {self.path}, which holds {self.entries} entries")
        p = self._base + n * KL_OFFSET_INDEX_ENTRY
        return (self.base_offset + kl_load_i32(p), kl_load_i32(p + 4))

    @property
    def last_entry(self):
        """(offset, position) of the last entry, (base_offset, 0) when empty."""
        if self.entries == 0 or self._base == NULL:
            return (self.base_offset, 0)
        return (self.last_offset, kl_load_i32(self._base + (self.entries - 1) * KL_OFFSET_INDEX_ENTRY + 4))

    def append(self, int64_t offset, int64_t position):
        """Add (offset, position): offset above the last one (or >= base_offset for the first entry), position not
        below the last one; both must fit an Int32 once offset is made relative."""
        cdef int64_t rel, last_position
        _check_writable(self, "append")
        if self.entries >= self.max_entries:
            raise IndexFullError(f"Attempt to append to a full index (size = {self.entries}) {self.path}")
        if self.entries > 0 and offset <= self.last_offset:
            raise InvalidOffsetError(f"Attempt to append an offset ({offset}) to position {self.entries} no larger "
                                     f"than the last offset appended ({self.last_offset}) to {self.path}.")
        if self.entries == 0 and offset < self.base_offset:
            raise InvalidOffsetError(f"Attempt to append an offset ({offset}) below the base offset "
                                     f"({self.base_offset}) of {self.path}.")
        rel = offset - self.base_offset
        if rel < 0 or rel > KL_INT32_MAX:
            raise InvalidOffsetError(f"Integer overflow for offset: {offset} ({self.path}): relative offset {rel} to "
                                     f"base offset {self.base_offset} does not fit in 0..{KL_INT32_MAX}")
        last_position = kl_load_i32(self._wbase + (self.entries - 1) * KL_OFFSET_INDEX_ENTRY + 4) \
            if self.entries > 0 else 0
        if position < last_position or position > KL_INT32_MAX:
            raise InvalidOffsetError(f"Attempt to append position {position} for offset {offset} to {self.path}: "
                                     f"positions run from the last one ({last_position}) to {KL_INT32_MAX}")
        _put_offset_entry(self._wbase + self.entries * KL_OFFSET_INDEX_ENTRY, <int32_t> rel, <int32_t> position)
        self.entries += 1
        self.last_offset = offset

    def truncate_to(self, int64_t offset):
        """Drop the entries with offset >= offset."""
        cdef Py_ssize_t slot
        _check_writable(self, "truncate")
        slot = _smallest_upper_bound(self._base, self.entries, KL_OFFSET_INDEX_ENTRY, self.base_offset, _KEY, offset)
        if slot >= 0:
            _truncate_to_entries(self, slot)

    def sanity_check(self):
        """Kafka's checks: a last offset below the base offset, a length that is not a multiple of 8."""
        _check_open(self)
        if self.entries != 0 and self.last_offset < self.base_offset:
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) has non-zero size but the last "
                                    f"offset is {self.last_offset} which is less than the base offset "
                                    f"{self.base_offset}.")
        if self._length % KL_OFFSET_INDEX_ENTRY != 0:
            raise CorruptIndexError(f"Index file {self.path} is corrupt, found {self._length} bytes which is neither "
                                    f"positive nor a multiple of {KL_OFFSET_INDEX_ENTRY}.")


cdef class TimeIndex(AbstractIndex):
    """Timestamp -> offset of a segment: ``Timestamp => Int64 | RelativeOffset => Int32`` per 12-byte entry.

    Entry (T, O): the largest timestamp in the segment up to offset O is T. Timestamps strictly increase; the last
    slot is kept for the entry written on roll/close (``skip_full_check=True``), so the segment's largest timestamp is
    always the last entry.

    Not thread-safe: the owning LogSegment serialises access. One writer per file across processes (see
    AbstractIndex).
    """

    def __cinit__(self):
        self.entry_size = KL_TIME_INDEX_ENTRY

    def is_full(self):
        """True when only the slot reserved for the roll/close entry is left."""
        return self.entries >= self.max_entries - 1

    cdef int64_t lookup_offset(self, int64_t timestamp) noexcept nogil:
        cdef Py_ssize_t slot = _largest_lower_bound(self._base, self.entries, KL_TIME_INDEX_ENTRY, self.base_offset,
                                                    _KEY, timestamp)
        if slot < 0:
            return self.base_offset
        return self.base_offset + kl_load_i32(self._base + slot * KL_TIME_INDEX_ENTRY + 8)

    def lookup(self, int64_t timestamp):
        """(timestamp, offset) of the largest entry with timestamp <= the target, else (-1, base_offset)."""
        cdef Py_ssize_t slot
        cdef const unsigned char *p
        _check_open(self)
        slot = _largest_lower_bound(self._base, self.entries, KL_TIME_INDEX_ENTRY, self.base_offset, _KEY, timestamp)
        if slot < 0:
            return (-1, self.base_offset)
        p = self._base + slot * KL_TIME_INDEX_ENTRY
        return (kl_load_i64(p), self.base_offset + kl_load_i32(p + 8))

    def entry(self, Py_ssize_t n):
        """The n-th entry as (timestamp, offset)."""
        cdef const unsigned char *p
        _check_open(self)
        if n < 0 or n >= self.entries:
            raise IndexError(f"entry {n} of {self.path}, which holds {self.entries} entries")
        p = self._base + n * KL_TIME_INDEX_ENTRY
        return (kl_load_i64(p), self.base_offset + kl_load_i32(p + 8))

    @property
    def last_entry(self):
        """(timestamp, offset) of the last entry, (-1, base_offset) when empty."""
        return (self.last_timestamp, self.last_entry_offset)

    def maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check=False):
        """Add (timestamp, offset) if timestamp is above the last one; an equal timestamp is ignored.

        An offset below the last entry's is an InvalidOffsetError, a timestamp below the last one an
        InvalidTimestampError (both mean the caller lost track of its max timestamp). skip_full_check lets the
        roll/close entry take the reserved last slot."""
        cdef int64_t rel
        _check_writable(self, "append")
        if not skip_full_check and self.is_full():
            raise IndexFullError(f"Attempt to append to a full time index (size = {self.entries}) {self.path}")
        if self.entries > 0 and offset < self.last_entry_offset:
            raise InvalidOffsetError(f"Attempt to append an offset ({offset}) to slot {self.entries} no larger than "
                                     f"the last offset appended ({self.last_entry_offset}) to {self.path}.")
        if self.entries > 0 and timestamp < self.last_timestamp:
            raise InvalidTimestampError(f"Attempt to append a timestamp ({timestamp}) to slot {self.entries} no "
                                        f"larger than the last timestamp appended ({self.last_timestamp}) to "
                                        f"{self.path}.")
        if timestamp <= self.last_timestamp:
            return
        if self.entries >= self.max_entries:
            raise IndexFullError(f"Attempt to append to a full time index (size = {self.entries}) {self.path}")
        rel = offset - self.base_offset
        if rel < 0 or rel > KL_INT32_MAX:
            raise InvalidOffsetError(f"Integer overflow for offset: {offset} ({self.path}): relative offset {rel} to "
                                     f"base offset {self.base_offset} does not fit in 0..{KL_INT32_MAX}")
        _put_time_entry(self._wbase + self.entries * KL_TIME_INDEX_ENTRY, timestamp, <int32_t> rel)
        self.entries += 1
        self.last_timestamp = timestamp
        self.last_entry_offset = offset

    def truncate_to(self, int64_t offset):
        """Drop the entries with offset >= offset."""
        cdef Py_ssize_t slot
        _check_writable(self, "truncate")
        slot = _smallest_upper_bound(self._base, self.entries, KL_TIME_INDEX_ENTRY, self.base_offset, _VALUE, offset)
        if slot >= 0:
            _truncate_to_entries(self, slot)

    def sanity_check(self):
        """Kafka's checks: last timestamp below the first, last offset below the base offset, length not a multiple
        of 12."""
        cdef int64_t first_timestamp
        _check_open(self)
        if self.entries != 0:
            first_timestamp = kl_load_i64(self._base)
            if self.last_timestamp < first_timestamp:
                raise CorruptIndexError(f"Corrupt time index found, time index file ({self.path}) has non-zero size "
                                        f"but the last timestamp is {self.last_timestamp} which is less than the "
                                        f"first timestamp {first_timestamp}")
            if self.last_entry_offset < self.base_offset:
                raise CorruptIndexError(f"Corrupt time index found, time index file ({self.path}) has non-zero size "
                                        f"but the last offset is {self.last_entry_offset} which is less than the "
                                        f"first offset {self.base_offset}")
        if self._length % KL_TIME_INDEX_ENTRY != 0:
            raise CorruptIndexError(f"Time index file {self.path} is corrupt, found {self._length} bytes which is "
                                    f"neither positive nor a multiple of {KL_TIME_INDEX_ENTRY}.")
