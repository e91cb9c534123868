# DurableQueue's compiled half (kafkalog/client/queue.py subclasses QueueCore): Message, built from a claimed
# record's bytes, and get()/ack() fast paths over the worker's delivery buffer, held set and ack journal. The
# journal's format (AckRecord) opens queue.py; the thread-safety contract of the lock-free fast paths opens
# delivery.pyx.
from libc.stdint cimport int64_t


cdef class Message:
    cdef readonly int64_t offset        # the record's offset in the queue's partition
    cdef readonly int64_t timestamp     # ms (CreateTime, or the batch's LogAppendTime)
    cdef readonly object key            # bytes or None
    cdef readonly object value          # bytes or None
    cdef readonly int delivery_count    # 1 on the first delivery, +1 per claim since
    cdef list _headers                  # None when the record has none (most: no list until asked for)


cdef class QueueCore:
    cdef list _buf                      # claimed messages; _buf[_bufpos:] are not handed out yet (offset order)
    cdef Py_ssize_t _bufpos
    cdef public set _held               # messages handed out and not acked or nacked yet
    cdef unsigned char *_jp             # the ack journal's shared mapping (exported from the mmap while attached)
    cdef Py_ssize_t _jcap               # its bytes
    cdef object _jmv                    # the memoryview that holds the export
    cdef public Py_ssize_t _jpos        # bytes of AckRecords stored in the journal since its last fold
    cdef public Py_ssize_t _fold_bytes  # an ack that brings _jpos to this folds the journal (the Python half)
    cdef public int _busy               # > 0 while the Python half works on buffer, held set or journal
    cdef public bint _closed
    cdef public double _next_idle_fold  # time.monotonic() from which a worker that holds nothing folds at once
    cdef public dict _failpoints        # storage.failpoints' enabled ones (the Python half sets it): while not
                                        # empty, acks take the slow path (which hits them)
