# Columns of records in Arrow's layouts (the format opens columns.pyx): the C buffers decode_columns fills without
# the GIL and hands to numpy without a copy.
from .framing cimport BatchHeader


cdef struct _BatchRef:                  # one batch of a decode_columns call, after pass 1
    const unsigned char *records        # its plaintext records (decompressed and pinned when compressed)
    Py_ssize_t records_len              # bytes at records
    Py_ssize_t pos                      # the batch's position in the buffer, for messages
    BatchHeader h


cdef struct _Grow:                      # one column's buffer
    unsigned char *p                    # malloc'ed; NULL once handed to numpy
    Py_ssize_t len                      # bytes written
    Py_ssize_t cap                      # bytes allocated


cdef enum:                              # the columns, in the order of the dict decode_columns returns
    _C_OFFSET = 0
    _C_TIMESTAMP
    _C_TIMESTAMP_TYPE
    _C_KEY_OFFSETS
    _C_KEY_VALID
    _C_KEYS
    _C_VALUE_OFFSETS
    _C_VALUE_VALID
    _C_VALUES
    _C_HEADER_OFFSETS
    _C_HEADER_KEY_OFFSETS
    _C_HEADER_KEYS
    _C_HEADER_VALUE_OFFSETS
    _C_HEADER_VALUE_VALID
    _C_HEADER_VALUES
    _C_COUNT


cdef class _Columns:
    cdef _Grow g[_C_COUNT]              # a buffer per column

    cdef int alloc(self, int col, Py_ssize_t cap) except -1             # allocate column col (cap bytes)
    cdef object array(self, int col, int typenum, Py_ssize_t itemsize)  # column col as a numpy array, no copy
