# DurableQueue's compiled half: the per-message work of get() and ack(), which kafkalog/client/queue.py subclasses
# (QueueCore) and falls back to for everything else. The ack journal it stores into is the worker's own file,
# memory-mapped; its format, in Kafka notation (queue.py's docstring has the rest of the queue's files):
#
#   AckRecord => Offset Int64 | Check Int64 (~Offset, the bitwise complement)   big-endian, back to back; the first
#                record whose Check does not match (the zero fill after the last one, a store torn by kill -9)
#                ends the journal
#
# A claim reads its records into Messages here, straight from the records' bytes (one object per message). get()
# hands out the next one and adds it to the held set; ack() takes it out of the held set and stores one AckRecord
# into the journal's mapping: page cache, so it outlives a kill -9, with no system call and no lock.
#
# Thread safety, GIL builds of CPython only (kafkalog's target, as accumulator.pyx's send): get() and ack() take no
# lock on their fast path. From their first look at the buffer, the held set or the journal to their last change,
# they run no Python code and allocate no GC-tracked object (a GC pass may run finalizers, which may switch
# threads), so each is atomic with respect to every other thread. The Python half raises ``_busy`` whenever it
# holds its lock, before it touches any of them, and lowers it before it lets go: a fast path that finds ``_busy``
# raised, or anything else it does not handle (an empty buffer, a full journal, a fold due, failpoints on, a
# closed queue, a message of another type), calls the Python half's ``_get_slow`` / ``_ack_slow``, which take the
# lock and do it all as before.
"""DurableQueue's compiled half: Message, and get()/ack() without a lock for the common case."""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.set cimport PySet_Add, PySet_Discard
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cimport cython

from .batch cimport headers_list, take_made
from .clib cimport kl_load_i64, kl_store_i64
from .framing cimport BatchHeader, RecordView

__all__ = ["ACK_RECORD_BYTES", "Message", "QueueCore", "journal_offsets"]

ACK_RECORD_BYTES = 16
cdef Py_ssize_t _ACK = 16


@cython.freelist(256)
@cython.no_gc  # its fields are ints, bytes, None and a headers list of (str, bytes) pairs: no cycle through it
cdef class Message:
    """One delivery of a queued record: ``value``, ``key`` (bytes or None), ``offset``, ``timestamp`` (ms),
    ``headers`` (list of (str, bytes)), ``delivery_count`` (1 on the first delivery), ``redelivered``."""

    @property
    def headers(self):
        if self._headers is None:
            self._headers = []
        return self._headers

    @property
    def redelivered(self):
        return self.delivery_count > 1

    def __repr__(self):
        return (f"Message(offset={self.offset}, key={self.key!r}, value={self.value!r}, "
                f"timestamp={self.timestamp}, delivery_count={self.delivery_count})")


cdef inline object _bytes_or_none(const unsigned char *p, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char *>p, n)


cdef object _make_message(const RecordView *r, const BatchHeader *h, bint log_append_time, object deliveries):
    cdef Message m = Message.__new__(Message)
    m.offset = h.base_offset + r.offset_delta
    m.timestamp = h.max_timestamp if log_append_time else h.base_timestamp + r.ts_delta
    m.key = _bytes_or_none(r.key, r.key_len)
    m.value = _bytes_or_none(r.value, r.value_len)
    m.delivery_count = <int>deliveries
    if r.header_count:
        m._headers = headers_list(r.headers, r.header_count)
    return m


cdef inline double _monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)  # time.monotonic()'s clock
    return ts.tv_sec + ts.tv_nsec * 1e-9


def journal_offsets(data) -> list:
    """Offsets of a journal's AckRecords (bytes-like), up to the first torn or damaged one."""
    cdef const unsigned char[::1] v = data
    cdef Py_ssize_t pos = 0, n = v.shape[0]
    cdef int64_t off
    cdef list out = []
    while pos + _ACK <= n:
        off = kl_load_i64(&v[pos])
        if off < 0 or kl_load_i64(&v[pos + 8]) != ~off:
            break
        out.append(off)
        pos += _ACK
    return out


cdef class QueueCore:
    """The compiled half of DurableQueue: its delivery buffer, held set and ack journal, and get()/ack() fast paths
    (see the module's comment for the thread-safety contract the Python half keeps)."""

    def __cinit__(self, *args, **kwargs):
        self._buf = []
        self._held = set()
        self._failpoints = {}

    # ------------------------------------------------------------------------------------------------ fast paths

    def get(self, timeout=None):
        """The next message (redeliveries first): waits up to ``timeout`` seconds (None: for ever; 0: not at all),
        then raises ``queue.Empty``."""
        cdef Message m
        if timeout is not None and not timeout >= 0:
            raise ValueError("'timeout' must be a non-negative number or None")
        if self._busy == 0 and not self._closed and self._bufpos < len(self._buf):
            m = <Message>self._buf[self._bufpos]
            self._bufpos += 1
            PySet_Add(self._held, m)
            return m
        return self._get_slow(timeout)

    def ack(self, message):
        """The message is done: it is never delivered again (journaled before this returns)."""
        cdef Message m
        cdef unsigned char *p
        if (type(message) is not Message or self._busy or self._closed or self._failpoints
                or self._jpos + _ACK > self._jcap):
            return self._ack_slow(message)
        m = <Message>message
        if PySet_Discard(self._held, m) != 1:
            return self._ack_slow(message)  # not held: it raises
        p = self._jp + self._jpos
        kl_store_i64(p, m.offset)
        kl_store_i64(p + 8, ~m.offset)
        self._jpos += _ACK
        if self._jpos >= self._fold_bytes or (
                not self._held and self._bufpos >= len(self._buf) and _monotonic() >= self._next_idle_fold):
            self._after_ack()

    # ------------------------------------------------------------------------------------------------ for the Python half (its lock held, _busy raised)

    def _take(self, stream, int deliveries, Py_ssize_t limit):
        """Append up to limit records of stream (iter_records) to the buffer as Messages; returns how many."""
        if self._bufpos:
            del self._buf[:self._bufpos]
            self._bufpos = 0
        return take_made(stream, self._buf, limit, _make_message, deliveries)

    def _pop(self):
        """The next buffered message, now held; None when the buffer is empty."""
        cdef Message m
        if self._bufpos >= len(self._buf):
            return None
        m = <Message>self._buf[self._bufpos]
        self._bufpos += 1
        self._held.add(m)
        return m

    def _buffered(self) -> list:
        """The messages claimed and not handed out yet."""
        return self._buf[self._bufpos:]

    def _buffer_len(self) -> int:
        return len(self._buf) - self._bufpos

    def _clear_buffer(self) -> None:
        self._buf = []
        self._bufpos = 0

    def _journal_attach(self, mapping) -> None:
        """Store acks into this writable mapping (the worker's journal file) from offset 0."""
        cdef unsigned char[::1] v = mapping
        self._jmv = v
        self._jp = &v[0]
        self._jcap = v.shape[0]
        self._jpos = 0

    def _journal_detach(self) -> None:
        self._jmv = None
        self._jp = NULL
        self._jcap = 0

    def _journal_store(self, int64_t offset) -> bool:
        """Store one AckRecord; False when the journal is full (fold it first)."""
        if self._jpos + _ACK > self._jcap:
            return False
        kl_store_i64(self._jp + self._jpos, offset)
        kl_store_i64(self._jp + self._jpos + 8, ~offset)
        self._jpos += _ACK
        return True

    def _journal_runs(self) -> list:
        """The journaled offsets as sorted [a, b) runs of consecutive offsets."""
        cdef Py_ssize_t pos
        cdef int64_t o, a = -1, b = -1
        cdef bint ordered = True
        offs = []
        for pos in range(0, self._jpos, _ACK):
            o = kl_load_i64(self._jp + pos)
            if a < 0:
                a = b = o
            elif o == b + 1 and ordered:
                b = o
            else:
                ordered = False
            offs.append(o)
        if not offs:
            return []
        if ordered:
            return [(a, b + 1)]  # in-order acks, the common case: one run
        offs.sort()
        runs = []
        a = b = offs[0]
        for o in offs[1:]:
            if o == b or o == b + 1:
                b = o
            else:
                runs.append((a, b + 1))
                a = b = o
        runs.append((a, b + 1))
        return runs

    def _journal_clear(self) -> None:
        """Zero the stored AckRecords (a zero record ends a journal) and start again at offset 0."""
        if self._jpos:
            memset(self._jp, 0, self._jpos)
        self._jpos = 0
