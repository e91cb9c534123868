# Producer accumulation: the compiled half of KafkaProducer.send (kafkalog/client/producer.py subclasses these).
#
# Kafka's producer appends each record to its partition's open batch (RecordAccumulator.append) and returns a
# FutureRecordMetadata. Here the record is encoded into the batch's records section at once (BatchBuilder's
# encoding, batch.pyx: bytes are copied, nothing pins the caller's objects), and the facts RecordMetadata reports
# later go to a side array, so a future is a (batch, index) pair and costs no Python work:
#
#   _RecordFacts => Timestamp => Int64 | KeySize => Int32 | ValueSize => Int32 | HeaderSize => Int32
#                   (per record, in memory only; -1 = null key / null value / no headers)
#
# Keyed records are partitioned as Kafka's DefaultPartitioner does: murmur2(key) & 0x7fffffff modulo the partition
# count (murmur2 is Kafka's Utils.murmur2, here for send() and for kafkalog/client/partitioner.py alike). Policy
# (opening, closing and writing batches, acks, fsync, callbacks) stays in Python.
#
# Thread safety, GIL builds of CPython only (kafkalog's target, as for BatchBuilder.stage): RecordAccumulator.send's
# fast path takes no lock. Between reading a partition's open batch and appending to it, it runs no Python code and
# allocates no GC-tracked object (the future is taken first: a GC pass may run finalizers, which may switch threads;
# and a reused future lets go of its previous batch only after the append, since freeing a batch runs Python code),
# so the append is atomic with respect to every other thread. The Python side keeps to that contract:
# it detaches a batch (``partition.batch = None``) before building it, so a batch is never built while appended to.
"""The producer's accumulator: ProducerBatch, FutureRecordMetadata, RecordAccumulator.send, murmur2."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyCFunction, PyMethodDef, PyObject, PyTypeObject
from cpython.ref cimport Py_REFCNT
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.type cimport PyType_Modified
from cpython.unicode cimport PyUnicode_CheckExact
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc, realloc

cimport cython

from .clib cimport KL_CODEC_NONE, KL_INT32_MAX, KL_LOG_OVERHEAD, KL_RECORD_BATCH_OVERHEAD, kl_load_u32le, kl_varint_size
from .framing cimport BatchParams, Slice, body_size, write_header_big, write_record
from .batch cimport BatchBuilder, check_len, now_ms

import functools

from kafkalog.errors import InvalidTimestampError, RecordTooLargeError

__all__ = [
    "AccumulatorPartition", "AccumulatorTopic", "FutureRecordMetadata", "ProducerBatch", "RecordAccumulator", "murmur2",
]


cdef extern from "Python.h":
    int METH_FASTCALL
    int METH_KEYWORDS
    object PyDescr_NewMethod(PyTypeObject *cls, PyMethodDef *meth)


cdef uint32_t _murmur2(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """Kafka's Utils.murmur2 (MurmurHash2, seed 0x9747b28c, little-endian words, tail mixed high to low)."""
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = 0x9747B28C
    cdef uint32_t k
    cdef Py_ssize_t i = 0, n4 = n & ~(<Py_ssize_t>3)
    h ^= <uint32_t>n
    while i < n4:
        k = kl_load_u32le(p + i) * m
        k = (k ^ (k >> 24)) * m
        h = (h * m) ^ k
        i += 4
    if n & 3 == 3:
        h ^= (<uint32_t>p[i + 2]) << 16
    if n & 3 >= 2:
        h ^= (<uint32_t>p[i + 1]) << 8
    if n & 3:
        h = (h ^ <uint32_t>p[i]) * m
    h ^= h >> 13
    h *= m
    return h ^ (h >> 15)


def murmur2(data):
    """Kafka's murmur2 of ``data`` (bytes-like) as an unsigned 32-bit int: the same bits as Java's signed int."""
    cdef Py_buffer v
    cdef uint32_t h
    if PyBytes_CheckExact(data):
        return _murmur2(<const unsigned char *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &v, PyBUF_SIMPLE)
    h = _murmur2(<const unsigned char *>v.buf, v.len)
    PyBuffer_Release(&v)
    return h


cdef inline int32_t _nbytes(object o) except? -2:
    cdef Py_buffer v
    cdef Py_ssize_t n
    if o is None:
        return -1
    if PyBytes_CheckExact(o):
        return <int32_t>PyBytes_GET_SIZE(o)
    PyObject_GetBuffer(o, &v, PyBUF_SIMPLE)
    n = v.len
    PyBuffer_Release(&v)
    return <int32_t>min(n, KL_INT32_MAX)


# Spare record buffers of written batches, reused by the next ones (touched only with the GIL held). A batch of
# batch_size=1 MiB otherwise grows a fresh buffer by realloc, and fresh pages cost a page fault each (a 2 MiB clear
# with transparent huge pages): that was a third of the producer's time per record. At most _SPARE_MAX buffers of
# _SPARE_MIN_CAP.._SPARE_MAX_CAP bytes are kept: 16 MiB per process at worst.
cdef enum:
    _SPARE_MAX = 4
cdef Py_ssize_t _SPARE_MIN_CAP = 65536
cdef Py_ssize_t _SPARE_MAX_CAP = 4 << 20
cdef unsigned char *_spare_buf[_SPARE_MAX]
cdef Py_ssize_t _spare_cap[_SPARE_MAX]
cdef int _nspare = 0


cdef class ProducerBatch(BatchBuilder):
    """Records bound for one partition and one log append (Kafka's ProducerBatch): a BatchBuilder that also keeps,
    per record, what its RecordMetadata reports. ``build()`` gives the finished batch (base offset 0: the log assigns
    offsets), ``build_view()`` the same bytes without a copy; ``drop_records()`` frees the encoded records once
    written, keeping the facts.

    Not thread-safe by itself: the producer appends under its lock or through RecordAccumulator's GIL-atomic path.
    """

    def __cinit__(self):
        global _nspare
        self._facts_cap = 64
        self._facts = <_RecordFacts *>malloc(self._facts_cap * sizeof(_RecordFacts))
        if self._facts == NULL:
            raise MemoryError()
        if _nspare:
            _nspare -= 1
            free(self._buf)
            self._buf = _spare_buf[_nspare]
            self._cap = _spare_cap[_nspare]

    def __dealloc__(self):
        global _nspare
        free(self._facts)
        if _nspare < _SPARE_MAX and _SPARE_MIN_CAP <= self._cap <= _SPARE_MAX_CAP:
            _spare_buf[_nspare] = self._buf  # BatchBuilder's __dealloc__ then frees NULL
            _spare_cap[_nspare] = self._cap
            _nspare += 1
            self._buf = NULL

    cdef int _grow_facts(self) except -1:
        cdef _RecordFacts *grown
        if self._nfacts < self._facts_cap:
            return 0
        grown = <_RecordFacts *>realloc(self._facts, self._facts_cap * 2 * sizeof(_RecordFacts))
        if grown == NULL:
            raise MemoryError()
        self._facts = grown
        self._facts_cap *= 2
        return 0

    cdef int32_t _add(self, value, key, int64_t timestamp, headers, int32_t key_size, int32_t value_size,
                      int32_t header_size, Py_ssize_t size) except -1:
        """Encode one record (timestamp >= 0) and keep its facts; returns its index. Runs no Python code when value
        and key are bytes or None and headers is None (the GIL-atomic path)."""
        if self._dropped or self._exports:
            raise ValueError("the batch was built or written: it takes no more records")
        if self._nfacts != self._count:
            raise ValueError("a batch holding facts-only entries takes no records")
        self._grow_facts()  # first: a record is never encoded without room for its facts
        if self._append(value, key, timestamp, headers) < 0:
            raise RecordTooLargeError("the batch is full")  # not reached: max_batch_bytes stays 2 GiB
        self._put_facts(timestamp, key_size, value_size, header_size)
        self.size += size
        return <int32_t>(self._nfacts - 1)

    @cython.final
    cdef int32_t _add_plain(self, object value, object key, int64_t timestamp, Py_ssize_t size) except -1:
        """_add for value and key that are exact bytes or None, no headers (RecordAccumulator.send): the same bytes
        as BatchBuilder._append, written here without its buffer and header handling. Runs no Python code."""
        cdef Slice k, v
        cdef Py_ssize_t body, need
        cdef int64_t first_ts
        cdef int32_t i = self._count
        if self._dropped or self._exports or self._nfacts != i:
            raise ValueError("the batch takes no more records")
        if i == KL_INT32_MAX:
            raise RecordTooLargeError("a record batch holds at most 2**31 - 1 records")
        v.p = NULL
        v.n = -1
        k.p = NULL
        k.n = -1
        if value is not None:
            v.p = <const unsigned char *>PyBytes_AS_STRING(value)
            v.n = PyBytes_GET_SIZE(value)
        if key is not None:
            k.p = <const unsigned char *>PyBytes_AS_STRING(key)
            k.n = PyBytes_GET_SIZE(key)
        if k.n > KL_INT32_MAX or v.n > KL_INT32_MAX:
            check_len(k.n, "a key")
            check_len(v.n, "a value")
        if self._nfacts == self._facts_cap:
            self._grow_facts()
        first_ts = self._first_ts if i else timestamp
        body = body_size(timestamp - first_ts, i, k, v, 1)  # 1: the HeaderCount varint of 0
        need = kl_varint_size(<int32_t>min(body, KL_INT32_MAX)) + body
        if body > KL_INT32_MAX or self._len + need - KL_LOG_OVERHEAD > KL_INT32_MAX:
            check_len(body, "a record")
            check_len(self._len + need - KL_LOG_OVERHEAD, "the batch")
        if self._cap - self._len < need:
            self._reserve(need)
        write_record(self._buf + self._len, <int32_t>body, timestamp - first_ts, i, k, v, NULL, 0)
        self._len += need
        self._first_ts = first_ts
        if i == 0 or timestamp > self._max_ts:
            self._max_ts = timestamp
        self._count = i + 1
        self._put_facts(timestamp, <int32_t>k.n, <int32_t>v.n, -1)
        self.size += size
        return i

    @cython.final
    cdef inline void _put_facts(self, int64_t timestamp, int32_t key_size, int32_t value_size,
                                int32_t header_size) noexcept:
        """Keep one record's facts (room was made by _grow_facts)."""
        cdef _RecordFacts *f = &self._facts[self._nfacts]
        f.timestamp = timestamp
        f.key_size = key_size
        f.value_size = value_size
        f.header_size = header_size
        self._nfacts += 1

    def add(self, value, key=None, int64_t timestamp=0, headers=None, int32_t header_size=-1, Py_ssize_t size=0):
        """Encode one record with timestamp (ms, >= 0); returns its index in the batch. ``header_size`` is
        kafka-python's serialized_header_size (-1: no headers); ``size`` is added to ``size``."""
        if timestamp < 0:
            raise InvalidTimestampError(f"invalid negative timestamp {timestamp}")
        return self._add(value, key, timestamp, headers, _nbytes(key), _nbytes(value), header_size, size)

    def add_facts(self, int64_t timestamp, int32_t key_size, int32_t value_size, int32_t header_size):
        """Keep a record's facts without encoding it (a record refused before it could join a batch)."""
        self._grow_facts()
        self._put_facts(timestamp, key_size, value_size, header_size)
        return self._nfacts - 1

    def facts(self, Py_ssize_t i):
        """(timestamp, serialized key size, value size, header size) of record i."""
        if not 0 <= i < self._nfacts:
            raise IndexError(f"record {i} of a batch of {self._nfacts}")
        return (self._facts[i].timestamp, self._facts[i].key_size, self._facts[i].value_size,
                self._facts[i].header_size)

    @property
    def records_count(self):
        """Records in the batch (facts-only entries included)."""
        return self._nfacts

    @property
    def dropped(self):
        """drop_records() was called: the encoded records are gone, the facts stay."""
        return self._dropped

    def drop_records(self):
        """Free the encoded records (after the write): futures keep the batch alive, not the payload. While a
        build_view() is still exported the buffer stays until the batch is deallocated."""
        global _nspare
        cdef unsigned char *small
        if self._dropped:
            return
        self._dropped = True
        if self._exports:
            return
        small = <unsigned char *>malloc(KL_RECORD_BATCH_OVERHEAD)
        if small == NULL:
            return  # keep the records rather than fail: dropping them is an optimization
        if _nspare < _SPARE_MAX and _SPARE_MIN_CAP <= self._cap <= _SPARE_MAX_CAP:
            _spare_buf[_nspare] = self._buf
            _spare_cap[_nspare] = self._cap
            _nspare += 1
        else:
            free(self._buf)
        self._buf = small
        self._cap = KL_RECORD_BATCH_OVERHEAD
        self._len = KL_RECORD_BATCH_OVERHEAD

    def build(self, int64_t base_offset=0, int32_t partition_leader_epoch=-1):
        """The finished batch (bytes) of the records added so far."""
        if self._dropped:
            raise ValueError("the batch was written: its records were dropped")
        return BatchBuilder.build(self, base_offset, partition_leader_epoch)

    def build_view(self):
        """The finished batch (base offset 0) as a memoryview of the batch's own buffer, without a copy when
        uncompressed (compressed: build()'s bytes). No record can be added afterwards. The view is writable so that
        a log may stamp BaseOffset (and the other fields a broker rewrites) in place."""
        cdef BatchParams bp
        if self._codec != KL_CODEC_NONE:
            return self.build()
        if self._dropped:
            raise ValueError("the batch was written: its records were dropped")
        self._params(&bp, 0, -1)
        self._exports += 1  # no append from here on, even before the view exists (the header write may drop the GIL)
        try:
            write_header_big(self._buf, self._len, &bp)
            return memoryview(self)
        finally:
            self._exports -= 1

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self._dropped:
            raise BufferError("the batch was written: its records were dropped")
        PyBuffer_FillInfo(view, self, self._buf, self._len, 0, flags)
        self._exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self._exports -= 1

    # BatchBuilder's own ways in would add records without facts or reset the count under them
    def append(self, *args, **kwargs):
        raise TypeError("a ProducerBatch takes records through add()")

    def stage(self, *args, **kwargs):
        raise TypeError("a ProducerBatch takes records through add()")

    def take(self):
        raise TypeError("a ProducerBatch is built whole: build() or build_view()")

    def reserve(self, int64_t n):
        raise TypeError("a ProducerBatch is built whole: build() or build_view()")

    def reset(self):
        raise TypeError("a ProducerBatch is not reused: make a new one")

    def __repr__(self):
        return f"ProducerBatch(count={self._nfacts}, size_in_bytes={self._len}, size={self.size})"


@cython.freelist(1024)
cdef class FutureRecordMetadata:
    """The result of one ``KafkaProducer.send()``: kafka-python's FutureRecordMetadata (``get``, ``add_callback``,
    ``add_errback``, ``add_both``, ``chain``, ``succeeded``, ``failed``, ``retriable``, ``is_done``, ``value``,
    ``exception``).

    A future is its record's place in its batch, nothing more: a static type with a free list, so that send() costs
    no Python allocation beyond it. What it answers comes from its batch, which the producer subclasses
    (kafkalog/client/producer.py ``_Batch``) with the policy: ``done()``, ``exception_of(i)``, ``metadata_of(i)``,
    ``wait(timeout)`` and ``add_callback(future, f, errback)``; see there for threads and callbacks.
    """

    def __init__(self, ProducerBatch batch, int32_t index):
        self._batch = batch
        self._index = index

    @property
    def is_done(self):
        return bool(self._batch.done())

    def succeeded(self):
        return self.is_done and self.exception is None

    def failed(self):
        return self.is_done and self.exception is not None

    def retriable(self):
        exc = self.exception
        return exc is not None and bool(getattr(exc, "retriable", False))

    @property
    def exception(self):
        """The exception the record failed with; None while pending or after success."""
        return self._batch.exception_of(self._index)

    @property
    def value(self):
        """The record's RecordMetadata once acknowledged; None while pending or after a failure."""
        return self._batch.metadata_of(self._index)

    def get(self, timeout=None):
        """Wait up to ``timeout`` seconds (None: forever) for the record's acknowledgement (see ``acks``); return
        its RecordMetadata or raise the exception it failed with. RequestTimedOutError on timeout."""
        if not self._batch.done():
            self._batch.wait(timeout)
        exc = self.exception
        if exc is not None:
            raise exc
        return self.value

    def add_callback(self, f, *args, **kwargs):
        """Call ``f(*args, record_metadata, **kwargs)`` when the record is acknowledged."""
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        self._batch.add_callback(self, f, False)
        return self

    def add_errback(self, f, *args, **kwargs):
        """Call ``f(*args, exception, **kwargs)`` if the record fails."""
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        self._batch.add_callback(self, f, True)
        return self

    def add_both(self, f, *args, **kwargs):
        self.add_callback(f, *args, **kwargs)
        return self.add_errback(f, *args, **kwargs)

    def chain(self, future):
        """Resolve another kafka-python-style future (``success``/``failure``) with this one's outcome."""
        self.add_callback(future.success)
        return self.add_errback(future.failure)

    def __repr__(self):
        state = "pending" if not self.is_done else ("failed" if self.failed() else "done")
        return f"<FutureRecordMetadata {self._batch.describe()} {state}>"


cdef class AccumulatorPartition:
    """One partition as the accumulator sees it (the producer's per-partition state subclasses it)."""


cdef class AccumulatorTopic:
    """One topic as the accumulator sees it (the producer's per-topic state subclasses it)."""


cdef inline int64_t _plain_int(object o, int64_t high) except? -2:
    """o as an int64 when it is an exact int in [0, high], else -1 (no exception either way)."""
    cdef int overflow = 0
    cdef long long v
    if not PyLong_CheckExact(o):
        return -1
    v = PyLong_AsLongLongAndOverflow(o, &overflow)
    if overflow or v < 0 or v > high:
        return -1
    return v


cdef class RecordAccumulator:
    """The compiled hot path of ``KafkaProducer.send`` (the producer class derives from this one).

    ``send()`` appends a record to its partition's open batch here when everything about it is plain: the fast path
    is on (``_fast``), the topic is known (``_topics``), value and key are bytes or None, no headers, partition None
    or a valid int, timestamp_ms None or an int >= 0, and the record fits the open batch without filling it
    (``size + batch.size < partition.limit``). Everything else goes to the subclass's
    ``_send(topic, value, key, headers, partition, timestamp_ms)``, which also opens, closes and writes batches.
    Unkeyed records go to the topic's sticky partition, keyed ones to ``murmur2(key) & 0x7fffffff`` modulo the
    partition count (Kafka's DefaultPartitioner). See the section comment for thread safety.
    """

    def __cinit__(self):
        self._topics = {}

    def _init_fast_path(self, Py_ssize_t record_overhead, Py_ssize_t max_record):
        self._record_overhead = record_overhead
        self._max_fast = max_record

    def _topics_changed(self):
        """Call after removing or replacing an entry of ``_topics``."""
        self._last_name = None
        self._last_topic = None

    # send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None) is _accumulator_send below
    # (its arguments parsed by hand), which calls this.
    @cython.final
    cdef object _send_fast(self, object topic, object value, object key, object headers, object partition,
                           object timestamp_ms):
        cdef PyObject *found
        cdef AccumulatorTopic st
        cdef AccumulatorPartition part
        cdef ProducerBatch b
        cdef FutureRecordMetadata fut
        cdef Py_ssize_t size = self._record_overhead, n, p
        cdef int64_t ts
        cdef int32_t ks = -1, vs = -1, i
        if not self._fast or headers is not None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        if value is not None:
            if not PyBytes_CheckExact(value):
                return self._send(topic, value, key, headers, partition, timestamp_ms)
            vs = <int32_t>PyBytes_GET_SIZE(value)
            size += vs
        if key is not None:
            if not PyBytes_CheckExact(key):
                return self._send(topic, value, key, headers, partition, timestamp_ms)
            ks = <int32_t>PyBytes_GET_SIZE(key)
            size += ks
        elif value is None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        if size > self._max_fast:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        if topic is self._last_name:
            st = self._last_topic
        else:
            found = PyDict_GetItemWithError(self._topics, topic) if PyUnicode_CheckExact(topic) else NULL
            if found == NULL:
                return self._send(topic, value, key, headers, partition, timestamp_ms)
            st = <AccumulatorTopic>found
            self._last_name = topic
            self._last_topic = st
        if st.parts is None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        n = PyTuple_GET_SIZE(st.parts)
        if timestamp_ms is None:
            ts = now_ms()
        else:
            ts = _plain_int(timestamp_ms, 0x7FFFFFFFFFFFFFFF)
            if ts < 0:
                return self._send(topic, value, key, headers, partition, timestamp_ms)
        if partition is None:
            p = -1 if key is None else (0 if n == 1 else
                                        (_murmur2(<const unsigned char *>PyBytes_AS_STRING(key), ks) & 0x7FFFFFFF) % n)
        else:
            p = <Py_ssize_t>_plain_int(partition, n - 1)
            if p < 0:
                return self._send(topic, value, key, headers, partition, timestamp_ms)
        # The future: the one returned last when only self._spare (and now fut) refers to it, as a free list would
        # hand it back (no weak references: nobody can tell), else a new one. Either way before the append.
        fut = self._spare
        if fut is None or Py_REFCNT(fut) != 2:
            fut = FutureRecordMetadata.__new__(FutureRecordMetadata)
            self._spare = fut
        # GIL-atomic from here to the append: no Python code, no GC-tracked allocation
        if p < 0:
            part = st.sticky
        else:
            part = <AccumulatorPartition>PyTuple_GET_ITEM(st.parts, p)
        if part is None:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        b = part.batch
        if b is None or b.size + size >= part.limit or b._dropped or b._exports or b._nfacts != b._count:
            return self._send(topic, value, key, headers, partition, timestamp_ms)
        i = b._add_plain(value, key, ts, size)
        fut._index = i
        fut._batch = b  # may free the reused future's previous batch: Python code, so after the append
        return fut


# RecordAccumulator.send is this METH_FASTCALL | METH_KEYWORDS function (a method descriptor, as a built-in type's
# methods are: CPython's call specializations reach it directly), its arguments parsed here with borrowed references.
# Cython's generic parsing (an argument array, a reference taken and dropped per argument) cost ~5 ns a call, a
# sixth of what send() itself does.
cdef tuple _SEND_ARGS = ("topic", "value", "key", "headers", "partition", "timestamp_ms")
cdef PyObject *_send_names[6]     # _SEND_ARGS' items (interned, as keyword names at call sites are), without a lookup


cdef int _send_arg_index(object name, Py_ssize_t nargs) except -1:
    """A keyword argument's position when the pointer compare missed: a name built at run time, or an error."""
    if name not in _SEND_ARGS:
        raise TypeError(f"send() got an unexpected keyword argument {name!r}")
    i = _SEND_ARGS.index(name)
    if i < nargs:
        raise TypeError(f"send() got multiple values for argument {name!r}")
    return i


cdef object _accumulator_send(RecordAccumulator self, PyObject **args, Py_ssize_t nargs, PyObject *kwnames):
    cdef PyObject *a[6]
    cdef PyObject *name
    cdef PyObject *topic
    cdef PyObject *value
    cdef PyObject *key
    cdef PyObject *headers
    cdef PyObject *partition
    cdef PyObject *timestamp_ms
    cdef Py_ssize_t i, j
    if nargs > 6:
        raise TypeError(f"send() takes from 1 to 6 positional arguments but {nargs} were given")
    for i in range(6):
        a[i] = args[i] if i < nargs else NULL
    if kwnames != NULL:
        for j in range(PyTuple_GET_SIZE(<tuple>kwnames)):
            name = PyTuple_GET_ITEM(<tuple>kwnames, j)
            i = nargs
            while i < 6 and name != _send_names[i]:
                i += 1
            if i == 6:
                i = _send_arg_index(<object>name, nargs)
            if a[i] != NULL:
                raise TypeError(f"send() got multiple values for argument {_SEND_ARGS[i]!r}")
            a[i] = args[nargs + j]
    if a[0] == NULL:
        raise TypeError("send() missing required argument 'topic' (pos 1)")
    for i in range(1, 6):
        if a[i] == NULL:
            a[i] = <PyObject *>None
    topic, value, key, headers, partition, timestamp_ms = a[0], a[1], a[2], a[3], a[4], a[5]
    return self._send_fast(<object>topic, <object>value, <object>key, <object>headers, <object>partition,
                           <object>timestamp_ms)  # borrowed: the caller's references last the call


cdef PyMethodDef _send_def
_send_def.ml_name = "send"
_send_def.ml_meth = <PyCFunction><void *>_accumulator_send
_send_def.ml_flags = METH_FASTCALL | METH_KEYWORDS
_send_def.ml_doc = (
    "send($self, /, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)\n--\n\n"
    "Send one record; returns a FutureRecordMetadata at once (see the class docstring for when it resolves).\n\n"
    "Raised here, nothing sent (as kafka-python): ``LogClosedError`` after close(); ``ValueError`` when key and\n"
    "value are both None; ``TypeError`` for a serialized key/value that is not bytes-like or malformed headers\n"
    "(a list of (str, bytes) pairs); whatever a serializer raises; ``InvalidTopicError`` for an illegal topic\n"
    "name; ``UnknownTopicOrPartitionError`` for a missing topic without auto-creation or an explicit partition\n"
    "outside the topic; ``InvalidTimestampError`` for a negative timestamp_ms.\n"
    "Reported through the future, nothing else affected: ``RecordTooLargeError`` (above max_request_size or the\n"
    "topic's max.message.bytes), any error the log raises for this record's batch.")


cdef int _install_send() except -1:
    cdef Py_ssize_t i
    for i in range(6):
        _send_names[i] = PyTuple_GET_ITEM(_SEND_ARGS, i)
    PyDict_SetItem(<object>(<PyTypeObject *>RecordAccumulator).tp_dict, "send",
                   PyDescr_NewMethod(<PyTypeObject *>RecordAccumulator, &_send_def))
    PyType_Modified(RecordAccumulator)
    return 0


_install_send()
