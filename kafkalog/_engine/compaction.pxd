# Compaction kernels (the cleaner's compiled parts; the slot layout opens compaction.pyx): OffsetMap's C-level
# contract.
from libc.stdint cimport int32_t, int64_t, uint64_t

from .framing cimport BatchHeader


cdef struct _Kept:          # what pass 1 of filter_batches keeps of one batch
    int32_t n               # records kept
    bint tombstone          # one of them is a tombstone
    int64_t max_ts          # their largest timestamp (-1: none)
    Py_ssize_t bytes        # their encoded size as they are


cdef class OffsetMap:
    cdef uint64_t *_slots                   # _cap slots of 3 words: the key's digest (2), its offset + 1 (0 = empty)
    cdef Py_ssize_t _cap                    # slots: a power of two, at least 16
    cdef Py_ssize_t _mask                   # _cap - 1
    cdef Py_ssize_t _max_cap                # slots the table may grow to within memory_bytes
    cdef double _load                       # load_factor: the share of slots filled before the table grows
    cdef readonly Py_ssize_t size           # keys mapped
    cdef readonly Py_ssize_t max_entries    # keys the table holds before it grows, or refuses new ones
    cdef readonly bint full                 # a new key was refused: the map is at its bound
    cdef readonly int64_t latest_offset     # the largest offset put, -1 when none

    cdef inline Py_ssize_t _slot(self, const uint64_t *d) noexcept nogil
    cdef int _grow(self) noexcept nogil
    cdef inline int _put(self, const unsigned char *key, Py_ssize_t n, int64_t offset) noexcept nogil
    cdef inline int64_t _get(self, const unsigned char *key, Py_ssize_t n) noexcept nogil
    cdef int _map_records(self, const unsigned char *rp, const unsigned char *rend, const BatchHeader *h,
                          int64_t start, int64_t stop, int32_t *bad) noexcept nogil
