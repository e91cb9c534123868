# Kafka wire protocol hot path: the C-level reader other compiled modules may cimport.
# A request body is read through a Cursor over the frame (the request without its 4-byte size prefix); every
# integer is big-endian; lengths are INT16 (STRING) or INT32 (BYTES/RECORDS/ARRAY), -1 = null.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t


cdef struct Cursor:
    const unsigned char *buf  # the frame (borrowed from a Py_buffer the caller holds)
    Py_ssize_t pos            # next byte to read
    Py_ssize_t end            # bytes in the frame
    bint bad                  # a read ran past the end or met an invalid length; values read since are junk (0)


cdef int8_t read_i8(Cursor *c) noexcept nogil
cdef int16_t read_i16(Cursor *c) noexcept nogil
cdef int32_t read_i32(Cursor *c) noexcept nogil
cdef int64_t read_i64(Cursor *c) noexcept nogil
# INT16 string / INT32 bytes or array length: -1 for null (only when nullable), else a length that fits in what is
# left (arrays: count <= bytes left); sets c.bad otherwise
cdef Py_ssize_t read_len16(Cursor *c, bint nullable) noexcept nogil
cdef Py_ssize_t read_len32(Cursor *c, bint nullable) noexcept nogil
# STRING (UTF-8, strict) → str, or None for null / on c.bad
cdef object read_string(Cursor *c, bint nullable)
