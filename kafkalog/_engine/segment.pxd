# LogSegment: the bytes and files of ONE segment (no policy: roll, retention and locking live in storage/).
from libc.stdint cimport int64_t, uint64_t

from .index cimport OffsetIndex, TimeIndex
from .framing cimport BatchHeader


cdef class Mapping:
    cdef unsigned char *addr        # PROT_READ, MAP_SHARED mapping of the .log (NULL when length is 0)
    cdef size_t length              # bytes mapped; may exceed the file: only [0, segment.size) is ever touched


cdef class LogSegment:
    cdef readonly object dir                    # partition directory (pathlib.Path)
    cdef readonly int64_t base_offset           # first offset this segment may hold (its file name)
    cdef readonly object log_path               # <dir>/<20-digit base>.log (+ file_suffix)
    cdef readonly str file_suffix               # "" or a state suffix of every file: ".cleaned", ".swap"
    cdef readonly OffsetIndex offset_index      # None for a read-only opener when the file is missing
    cdef readonly TimeIndex time_index          # idem
    cdef readonly bint writable                 # opened for appends (O_RDWR); readers never modify files
    cdef readonly int64_t size                  # bytes of complete, valid batches: the logical end of .log
    cdef readonly int64_t next_offset           # last offset of the last batch + 1; base_offset when empty
    cdef readonly int64_t max_timestamp_so_far  # largest batch max timestamp seen, -1 when none
    cdef readonly int64_t offset_of_max_timestamp_so_far  # last offset of the batch holding it ("shallow")
    cdef readonly int64_t rolling_based_timestamp  # max timestamp of the first batch (segment.ms roll), -1
    cdef readonly int64_t index_interval_bytes  # index.interval.bytes: bytes between index entries
    cdef readonly int64_t max_index_size        # segment.index.bytes
    cdef int fd                                 # the .log file descriptor, -1 once closed
    cdef Mapping _map                           # current mapping (replaced, never resized, when too small)
    cdef int64_t _reserve                       # bytes to reserve when mapping (segment.bytes + slack)

    cdef readonly int64_t torn_bytes            # bytes past the last complete batch found at open (a torn write)
    cdef bint _indexes_behind                   # refresh() took in batches: read the indexes again next time too

    cdef int _walk_to(self, int64_t offset, int64_t *pos, int64_t *last, int64_t *bsize) noexcept nogil
    cdef int _zeros_at(self, int64_t pos, int64_t file_size) except -1
    cdef int _complete_at(self, int64_t pos, int64_t length) except -1
    cdef int64_t _size_now(self) except -1
    cdef int _note_batch(self, int64_t pos, int64_t last_offset, int64_t max_ts, int64_t batch_size) except -1
    cdef const unsigned char *_ptr(self, int64_t pos) noexcept nogil
    cdef int64_t _index_position(self, int64_t offset)
    cdef int _search_batch(self, int64_t pos, BatchHeader *h, int64_t target, int64_t min_offset, bint exact,
                           int64_t *found_ts, int64_t *found_offset) except -1
    cdef int _find_time(self, int64_t timestamp, int64_t starting_offset, int64_t *ts, int64_t *off) except -1


cdef class ChangeCounter:
    cdef unsigned char *_addr            # the file's 64 bytes, mapped shared (NULL once closed)
    cdef readonly object path            # <partition dir>/.kafkalog-changes
    cdef readonly bint writable          # mapped for bump/retire (writers); readers only load
    cdef public uint64_t seen            # the counter as the owner's view last took in the files
    cdef public bint trusted             # False: unchanged() always says False (retired, or given up by the owner)

    cdef inline uint64_t *_word(self, int i) noexcept nogil
    cpdef uint64_t load(self) except? 0
