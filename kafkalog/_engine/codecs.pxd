# Compressed records sections (codec bits 0-2 of a batch's Attributes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd) and
# the buffers C code reads from: the C-level contract batch, columns and compaction cimport. The streams, in the
# notation of framing.pyx, open codecs.pyx; every decompression is bounded there, whatever a batch declares.

from .framing cimport BatchHeader, Slice, WalkState


cdef class Pins:
    """Keeps the byte strings one call reads from C alive (and their buffers exported) until the call ends."""
    cdef Py_buffer *views       # buffers exported by slice(), released with the pins
    cdef Py_ssize_t nviews      # views in use
    cdef Py_ssize_t cap         # views allocated
    cdef list keep              # objects held for the call: pinned plaintexts, header sequences

    cdef int slice(self, object o, Slice *s, str what) except -1    # s = o's bytes (bytes-like or None: n = -1)
    cdef int pin(self, object o, Slice *s) except -1                # slice() of an object nobody else holds
    cdef int header_key(self, object o, Slice *s) except -1         # a str (UTF-8) or bytes-like header key


# A memoryview keeping `buffer` exported while C code reads [p, p + n) (readable, C-contiguous, else ValueError).
cdef object read_view(object buffer, const unsigned char **p, Py_ssize_t *n)

# The end of the byte range [start, end) of an n-byte buffer (end None: n); ValueError outside it.
cdef Py_ssize_t range_end(object end, Py_ssize_t start, Py_ssize_t n) except -1

# A codec number from 0..4, a name ("lz4") or None; UnsupportedCompressionTypeError otherwise.
cdef int codec_of(object compression) except -1

# Kafka's range for compression.<codec>.level (InvalidConfigError outside it); None keeps the codec's default.
cdef object check_level(int codec, object level)

# The compressed records section of plaintext [p, p + n) (a bytes-like object), as Kafka's Java client writes it.
cdef object compress(int codec, object level, const unsigned char *p, Py_ssize_t n)

# A reader's plaintext of the compressed records [p, p + n) of batch h at position pos (errors name the batch), at
# most 1 GiB, its records walked as they arrive past the first MiB.
cdef object decompress(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h, Py_ssize_t pos)

# Walk the compressed records [p, p + n) of batch h as they are decompressed, keeping nothing (w = the walk's state,
# set up here); returns the walk's REC_* code. walk_compressed: a stored batch (offset gaps allowed) within a
# reader's bound; walk_compressed_for_append: a produced batch within the bounds of max_message_bytes.
cdef int walk_compressed(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h, Py_ssize_t pos,
                         WalkState *w) except -1
cdef int walk_compressed_for_append(int codec, const unsigned char *p, Py_ssize_t n, const BatchHeader *h,
                                    Py_ssize_t pos, Py_ssize_t max_message_bytes, WalkState *w) except -1
