# The producer's accumulator (Kafka's RecordAccumulator, ProducerBatch, FutureRecordMetadata): the compiled half of
# KafkaProducer.send, which kafkalog/client/producer.py subclasses. A ProducerBatch is a BatchBuilder (batch.pxd)
# that also keeps, per record, what its RecordMetadata reports (_RecordFacts); the thread-safety contract of the
# GIL-atomic send() is at the top of accumulator.pyx.
cimport cython
from libc.stdint cimport int32_t, int64_t

from .batch cimport BatchBuilder


cdef struct _RecordFacts:
    int64_t timestamp       # the record's CreateTime (ms), as sent
    int32_t key_size        # serialized key bytes, -1 = null key
    int32_t value_size      # serialized value bytes, -1 = null value
    int32_t header_size     # kafka-python's serialized_header_size: sum of key (UTF-8) + value bytes; -1 = none


cdef class ProducerBatch(BatchBuilder):
    cdef _RecordFacts *_facts       # per record, encoded or facts-only, in order
    cdef Py_ssize_t _nfacts         # records in the batch (facts-only entries included)
    cdef Py_ssize_t _facts_cap      # _RecordFacts allocated at _facts
    cdef bint _dropped              # drop_records() was called: the encoded records are gone, the facts stay
    cdef Py_ssize_t _exports        # live buffer exports (build_view): the records may not move or be freed
    cdef public Py_ssize_t size     # the producer's batch.size accounting (estimated bytes), grown by add()

    cdef int _grow_facts(self) except -1
    cdef int32_t _add(self, value, key, int64_t timestamp, headers, int32_t key_size, int32_t value_size,
                      int32_t header_size, Py_ssize_t size) except -1
    @cython.final
    cdef int32_t _add_plain(self, object value, object key, int64_t timestamp, Py_ssize_t size) except -1
    @cython.final
    cdef inline void _put_facts(self, int64_t timestamp, int32_t key_size, int32_t value_size,
                                int32_t header_size) noexcept


cdef class FutureRecordMetadata:
    cdef readonly ProducerBatch _batch  # the record's batch, whose subclass answers for it
    cdef readonly int32_t _index        # the record's index in it


cdef class AccumulatorPartition:
    cdef public ProducerBatch batch     # the open batch; None: the next record goes through the producer's _send
    cdef public Py_ssize_t limit        # a batch is closed once its ``size`` reaches this (batch_size)


cdef class AccumulatorTopic:
    cdef public tuple parts             # AccumulatorPartition per partition id; None until the producer sets it
    cdef public AccumulatorPartition sticky   # where unkeyed records go (KIP-480); the producer moves it


cdef class RecordAccumulator:
    cdef readonly dict _topics          # name -> AccumulatorTopic, filled by the subclass (call _topics_changed())
    cdef public bint _fast              # the fast path is on (no serializer, no custom partitioner, linger > 0...)
    cdef Py_ssize_t _record_overhead    # accounted bytes per record beyond key and value
    cdef Py_ssize_t _max_fast           # larger records (accounted) take _send, which refuses them
    cdef object _last_name              # the topic object of the last fast send, and its entry: most apps send
    cdef AccumulatorTopic _last_topic   # to one topic with one str object, so a pointer compare replaces the dict
    cdef FutureRecordMetadata _spare    # the future send() returned last: reused once nobody else holds it

    @cython.final
    cdef object _send_fast(self, object topic, object value, object key, object headers, object partition,
                           object timestamp_ms)
