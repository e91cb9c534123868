# Kafka's two segment indexes over numpy.memmap files, preallocated to segment.index.bytes, trimmed on roll/close.
#   OffsetIndex entry (8 B):  RelativeOffset => Int32 | Position => Int32
#   TimeIndex entry (12 B):   Timestamp => Int64 | RelativeOffset => Int32
# All big-endian. Not thread-safe: the owning LogSegment serialises access.
from libc.stdint cimport int64_t


cdef class AbstractIndex:
    cdef readonly object path            # pathlib.Path of the index file (changes on rename_to)
    cdef readonly int64_t base_offset    # the segment's base offset; entries store offset - base_offset
    cdef readonly Py_ssize_t max_index_size  # bytes the file is preallocated to while writable
    cdef readonly bint writable          # False: opened read-only (append/truncate/resize raise)
    cdef readonly Py_ssize_t entries     # valid entries (never inferred from the file length alone)
    cdef readonly Py_ssize_t max_entries # slots in the current mapping
    cdef readonly int entry_size         # 8 or 12
    cdef object _mm                      # numpy.memmap (uint8) of the file, or None when the file is empty
    cdef const unsigned char *_base      # start of the mapping (NULL when _mm is None)
    cdef int _fd                         # file descriptor kept for pread-based refresh() and fsync
    cdef unsigned char *_wbase           # writable alias of _base (NULL when read-only or unmapped)
    cdef Py_ssize_t _length              # file length in bytes as this object last saw it (fstat at open/refresh)

    cdef Py_ssize_t _slot_lower(self, int64_t key) noexcept nogil   # largest slot with key <= target, -1 if none
    cdef int64_t _key(self, Py_ssize_t slot) noexcept nogil


cdef class OffsetIndex(AbstractIndex):
    cdef readonly int64_t last_offset    # offset of the last entry, base_offset when empty

    # position of the largest entry with offset <= target, 0 when none (the fast path of LogSegment reads)
    cdef int64_t lookup_position(self, int64_t target) noexcept nogil


cdef class TimeIndex(AbstractIndex):
    cdef readonly int64_t last_timestamp # timestamp of the last entry, -1 when empty
    cdef readonly int64_t last_entry_offset  # offset of the last entry, base_offset when empty

    # offset of the largest entry with timestamp <= target, base_offset when none (the time seek's fast path)
    cdef int64_t lookup_offset(self, int64_t timestamp) noexcept nogil
