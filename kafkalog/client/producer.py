"""KafkaProducer: kafka-python's producer, writing to a LogStore in this process instead of to a cluster.

Data path::

    send() -> serialize -> partition -+- linger_ms == 0: a batch of one record, written at once (caller's thread)
                                      +- linger_ms  > 0: encoded into the partition's open batch (ProducerBatch)
                                           batch full (batch_size)  -> Log.append_built(batch)  , caller's thread
                                           linger_ms expired        -> Log.append_built(batch)  , sender thread
    acks='all': a written batch resolves after Log.flush() (fsync), group-committed by the sender thread;
                get() and flush() run the fsync at once instead of waiting for the group.

Every batch is one record batch v2, built by the producer and handed whole to ``Log.append_built``. A record is
encoded into its batch when it is sent (its bytes are copied: nothing pins the caller's objects), and a future is a
(batch, index) pair whose RecordMetadata is built only when asked for.

``send()`` is compiled: KafkaProducer derives from the engine's ``RecordAccumulator``, whose ``send`` appends a plain
record (bytes, no headers, default partitioner, known topic, room in the open batch) to its batch in C, without the
producer's lock, and hands everything else to ``_send`` here. That fast path is atomic under the GIL (see
kafkalog/_engine/accumulator.pyx, "Thread safety"); the Python code below keeps its side of the contract: an
open batch is detached from its partition (``part.batch = None``, under the lock) before it is built, and every
append (``ProducerBatch.add``) is one C call.
"""

from __future__ import annotations

import atexit
import functools
import logging
import operator
import random
import struct
import threading
import time
import weakref
from collections import deque
from itertools import count

from .._engine.accumulator import (
    AccumulatorPartition,
    AccumulatorTopic,
    FutureRecordMetadata,
    ProducerBatch,
    RecordAccumulator,
)
from .._engine.batch import RecordBatch, crc32c, iter_batches
from .._engine.framing import RECORD_BATCH_OVERHEAD
from ..errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTimestampError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    LogClosedError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from ..storage import LogStore
from ..storage.log import CODECS, READ
from ..structs import OffsetAndMetadata, RecordMetadata, TopicPartition
from .partitioner import hash_partition

__all__ = ["FutureRecordMetadata", "KafkaProducer"]

_log = logging.getLogger("kafkalog.producer")
_ids = count(1)

# Bytes a small record adds to a batch beyond its key and value: length, attributes, timestamp and offset deltas,
# key/value lengths, header count (varints: ~7-12 for records < 16 KiB). Used for batch_size accounting only;
# the hard limit (max.message.bytes) is the engine's, and a batch it rejects is split to isolate the culprit.
_RECORD_OVERHEAD = 12
_HEADER_OVERHEAD = 2

# batch states
_OPEN, _CLOSED, _WRITTEN, _DONE, _FAILED = 0, 1, 2, 3, 4

_BYTES_LIKE = (bytes, bytearray, memoryview)
_time_ns = time.time_ns
_monotonic = time.monotonic
_random = random.random

# kafka-python 3.0.12 producer keys that only concern a network client or a cluster: accepted so that the same
# config dict works against a real cluster, and ignored here.
IGNORED_CONFIGS = frozenset({
    "bootstrap_servers", "client_dns_lookup", "connections_max_idle_ms", "reconnect_backoff_ms",
    "reconnect_backoff_max_ms", "request_timeout_ms", "retry_backoff_ms", "retries",
    "max_in_flight_requests_per_connection", "receive_buffer_bytes", "send_buffer_bytes",
    "receive_message_max_bytes", "socket_options", "security_protocol", "ssl_context", "ssl_check_hostname",
    "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile", "ssl_password", "ssl_ciphers", "sasl_mechanism",
    "sasl_plain_username", "sasl_plain_password", "sasl_kerberos_name", "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name", "sasl_oauth_token_provider", "proxy_url", "socks5_proxy", "api_version",
    "bootstrap_timeout_ms", "metadata_max_age_ms", "metric_reporters", "metrics_enabled", "metrics_num_samples",
    "metrics_sample_window_ms", "selector", "kafka_client", "max_block_ms", "delivery_timeout_ms",
    # writes are never retried, so every record is written once: idempotent whatever this says
    "enable_idempotence",
})

_COMPRESSION = {None: None, "none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}


def _now_ms() -> int:
    return _time_ns() // 1_000_000


class _Topic(AccumulatorTopic):
    """Per-topic producer state. ``parts`` (a tuple, one _Partition per id) and ``sticky`` (KIP-480's partition for
    unkeyed records, moved under the producer's lock) are read by the compiled send() path."""

    __slots__ = ("name", "n", "partition_set")

    def __init__(self, name: str, n: int):
        self.name = name
        self.n = n
        self.partition_set = frozenset(range(n))


class _Partition(AccumulatorPartition):
    """Per-partition producer state. ``batch`` is the open batch (set and cleared under the producer's lock; the
    compiled send() path appends to it without the lock, see the module docstring); ``limit`` is its batch_size;
    ``ready`` holds closed batches in order; ``wlock`` makes their writes happen in that order whichever thread
    writes them."""

    __slots__ = ("topic", "partition", "tp", "log", "ready", "wlock", "codec", "append_time", "producer")

    def __init__(self, producer, topic: _Topic, partition: int, log, codec: int, limit: int, append_time: bool):
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.tp = TopicPartition(topic.name, partition)
        self.log = log
        self.ready: deque[_Batch] = deque()
        self.wlock = threading.RLock()  # re-entrant: a callback run after a write may send and write again
        self.codec = codec
        self.limit = limit
        self.append_time = append_time


class _Batch(ProducerBatch):
    """Records bound for one ``Log.append_built`` call (encoded as they are sent, with each record's
    RecordMetadata facts), and the outcome every future of the batch reads. ``size`` is the batch_size accounting.

    The futures (``FutureRecordMetadata``, compiled: a (batch, index) pair) answer through the methods below.
    Thread-safe. Callbacks run once, in the thread that completes the record's batch (the sender thread, or the
    thread whose ``send``/``flush`` wrote or fsynced it), or at once in the caller if the future is already done.
    An exception raised by a callback is logged and swallowed, as kafka-python does. Do not call ``get()`` or the
    producer's ``flush()`` from a callback of an ``acks='all'`` producer: the batch you wait for may be the one
    that called you.
    """

    __slots__ = ("part", "created", "state", "base", "pieces", "error", "callbacks", "append_time", "early")

    def __init__(self, part: _Partition, early: bool, created: float = 0.0):
        ProducerBatch.__init__(self, part.codec)
        self.part = part
        self.created = created
        self.state = _OPEN
        self.base = -1
        self.pieces: list | None = None  # after a split: [(lo, hi, base offset or exception)] in index order
        self.error: BaseException | None = None
        self.callbacks: list | None = None
        self.append_time = -1
        self.early = early  # acks=0: every future of the batch counts as done from send() on

    def done(self) -> bool:
        return self.early or self.state >= _DONE

    def exception_of(self, i: int) -> BaseException | None:
        if self.early or self.state < _DONE:
            return None  # acks=0 reports nothing after send(), as in Kafka (write errors are logged)
        return self.outcome(i)[1]

    def metadata_of(self, i: int) -> RecordMetadata | None:
        if self.early:
            offset = -1  # acks=0: nobody waited for the offset (kafka-python and Java report -1 too)
        elif self.state < _DONE:
            return None
        else:
            offset, exc = self.outcome(i)
            if exc is not None:
                return None
        tp = self.part.tp
        ts, ks, vs, hs = self.facts(i)
        if self.append_time >= 0:
            ts = self.append_time
        return RecordMetadata(tp.topic, tp.partition, tp, offset, ts, None, ks, vs, hs)

    def wait(self, timeout: float | None) -> None:
        self.part.producer._await(self, timeout)

    def add_callback(self, future: FutureRecordMetadata, f, errback: bool) -> None:
        with self.part.producer._lock:
            if not (self.early or self.state >= _DONE):
                if self.callbacks is None:
                    self.callbacks = []
                self.callbacks.append((future._index, f, errback))
                return
        _run_callback(future, f, errback)

    def describe(self) -> str:
        return f"{self.part.tp.topic}-{self.part.partition}"

    def outcome(self, i: int):
        """(offset, None) or (-1, exception) for record i of a finished batch."""
        if self.state == _FAILED:
            return -1, self.error
        if self.pieces is None:
            return self.base + i, None
        for lo, hi, res in self.pieces:
            if lo <= i < hi:
                return (-1, res) if isinstance(res, BaseException) else (res + i - lo, None)
        return -1, self.error  # not reached: pieces cover every index


def _run_callback(future: FutureRecordMetadata, f, errback: bool) -> None:
    exc = future.exception
    if errback != (exc is not None):
        return
    try:
        f(exc if errback else future.value)
    except Exception:
        _log.exception("error in a producer %s", "errback" if errback else "callback")


class _Cluster:
    """What a kafka-python partitioner asks of ClusterMetadata, answered from the store."""

    def __init__(self, producer: KafkaProducer):
        self._producer = producer

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        return set(self._producer._store.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        st = self._producer._topics.get(topic)
        if st is not None:
            return set(st.partition_set)
        try:
            return set(range(self._producer._store.partitions_for(topic)))
        except UnknownTopicOrPartitionError:
            return None

    available_partitions_for_topic = partitions_for_topic  # a single node: every partition's leader is here


class KafkaProducer(RecordAccumulator):
    """kafka-python's KafkaProducer over a local LogStore: ``KafkaProducer(store_or_path, **configs)``.

    ``store_or_path`` is an open ``LogStore`` (the app keeps owning it) or a data directory: then the producer opens
    ``LogStore(path)`` in shared mode (other processes may produce to it at the same time) and closes it in
    ``close()``. Configs are kafka-python 3.0.12's names and defaults (Kafka's dotted names are accepted too):

    ==========================  =============  ==================================================================
    key                         default        meaning here
    ==========================  =============  ==================================================================
    acks                        'all' (-1)     when a future resolves: see the durability table below
    linger_ms                   0              0: each send() is written at once; > 0: batches wait up to this
    batch_size                  16384          bytes (of keys, values, headers + ~12 per record) per batch
    compression_type            None           None, 'gzip', 'snappy', 'lz4', 'zstd' (a topic whose
                                               compression.type is not 'producer' keeps its own codec)
    key_serializer              None           callable(key) -> bytes, or an object with serialize(topic, headers,
    value_serializer            None           data); like kafka-python, called for None too
    max_request_size            1048576        a larger record fails its future with RecordTooLargeError
    partitioner                 None           None: murmur2 for keys, KIP-480 sticky otherwise; or a kafka-python
                                               Partitioner (partition(topic, key, serialized_key, value,
                                               serialized_value, cluster), optional on_new_batch)
    allow_auto_create_topics    True           send()/partitions_for() to a missing topic creates it with the
    (alias auto_create_topics)                 store's num.partitions, like auto.create.topics.enable=true
    client_id                   generated      'kafkalog-producer-N'
    transactional_id            None           a str: a transactional producer (KIP-98; needs acks='all'):
                                               init_transactions(), begin_transaction(), send_offsets_to_
                                               transaction(), commit_transaction(), abort_transaction()
    transaction_timeout_ms      60000          an open transaction older than this is aborted (and the
                                               producer fenced) by the coordinator
    ==========================  =============  ==================================================================

    Network and cluster keys (``IGNORED_CONFIGS``: bootstrap_servers, security_protocol, ssl_*, sasl_*, retries,
    request_timeout_ms, max_in_flight_requests_per_connection, enable_idempotence, ...) are accepted and ignored.
    Any other key raises ``InvalidConfigError`` naming it.

    **Durability: what a resolved future means** (``acks`` keeps kafka-python's default, ``'all'``)

    ===========  ================================================  =================================================
    acks         the future resolves                               the record then survives
    ===========  ================================================  =================================================
    0            at once, in send(); offset -1 (as in Kafka)       nothing is promised: it may still be in this
                                                                   producer's batch (linger_ms); write errors are
                                                                   logged, not reported
    1            after its batch is written to the segment file    kill -9 of this process (the OS page cache has
                                                                   it); not a power loss or OS crash
    'all' / -1   after its batch is written AND fsynced            power loss: ``Log.flush()`` covered it
                 (``log.recovery_point`` > its offset)
    ===========  ================================================  =================================================

    ``acks='all'`` is the one setting under which a resolved future means fsynced. Its fsyncs are group commits: the
    sender thread fsyncs every partition with newly written batches at once, waiting for more writes only while
    nobody waits (about twice the last fsync's duration); ``get()`` and ``flush()`` fsync at once.
    ``flush()`` returns when every record sent before it is resolved in that sense (written for acks 0/1).

    Threads: at most one background sender thread (daemon), started only when ``linger_ms > 0`` (to write batches
    whose linger expired) or ``acks='all'`` (group fsync). With ``linger_ms=0`` and acks 0/1 there is none, and
    ``send()`` writes its record (one ``append_batch``) before returning. Full batches are written by the thread
    whose ``send()`` filled them.

    Thread safety: every method may be called from any thread; records of one thread keep their order per
    partition. ``send()`` of a plain record takes no lock (it is atomic under the GIL, see the module docstring).
    Process safety: with a store opened shared (a path, or ``LogStore(path)``), producers in several processes write
    to the same partitions; the engine's partition lock gives each batch its own offsets.
    """

    DEFAULT_CONFIG = {
        "client_id": None,
        "key_serializer": None,
        "value_serializer": None,
        "acks": -1,
        "compression_type": None,
        "batch_size": 16384,
        "linger_ms": 0,
        "partitioner": None,
        "max_request_size": 1048576,
        "allow_auto_create_topics": True,
        "transactional_id": None,
        "transaction_timeout_ms": 60000,
    }

    def __new__(cls, *args, **configs):
        # a transactional_id makes a _TransactionalProducer: the plain producer's paths stay as they are
        if cls is KafkaProducer and (configs.get("transactional_id") is not None
                                     or configs.get("transactional.id") is not None):
            cls = _TransactionalProducer
        return super().__new__(cls)

    def __init__(self, store_or_path, **configs):
        self.config = self._parse_config(configs)
        c = self.config
        self._acks = c["acks"]
        self._acks_all = self._acks == -1
        self._early = self._acks == 0
        self._linger = c["linger_ms"] / 1000.0
        self._batch_size = c["batch_size"]
        self._codec = c["compression_type"]
        self._max_request_size = c["max_request_size"]
        self._auto_create = c["allow_auto_create_topics"]
        self._partitioner = c["partitioner"]
        self._key_ser = _serializer(c["key_serializer"])
        self._value_ser = _serializer(c["value_serializer"])
        self._serializing = self._key_ser is not None or self._value_ser is not None
        # send()'s compiled fast path (RecordAccumulator): batching on, no serializers, default partitioner
        self._init_fast_path(_RECORD_OVERHEAD, self._max_request_size - RECORD_BATCH_OVERHEAD)
        self._fast = self._linger > 0 and not self._serializing and self._partitioner is None

        if isinstance(store_or_path, LogStore):
            self._store = store_or_path
            self._owns_store = False
        else:
            self._store = LogStore(store_or_path)
            self._owns_store = True
        if self._store.mode == READ:
            raise KafkaStorageError(30, f"store {self._store.path} is opened read-only: a producer needs a writer")

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._meta_lock = threading.Lock()
        # self._topics (name -> _Topic) is the compiled base's dict: send() looks topics up in it
        self._cluster = _Cluster(self)
        self._closed = False
        self._open: dict[_Partition, None] = {}  # partitions with an open batch (linger_ms > 0), oldest first
        self._incomplete: set[_Batch] = set()
        self._unsynced: dict[_Partition, list[_Batch]] = {}  # acks='all': written, waiting for an fsync
        self._unsynced_since = 0.0
        self._last_fsync = 0.0
        self._waiters = 0
        self._stopping = False
        self._sender_deadline: float | None = None  # when the sleeping sender wakes by itself (None: never)
        self._metrics = {"record-send-total": 0, "record-error-total": 0, "batch-total": 0, "byte-total": 0,
                         "fsync-total": 0, "flush-total": 0}
        self._sender = None
        if self._linger > 0 or self._acks_all:
            self._sender = threading.Thread(target=self._run, name=f"{c['client_id']}-sender", daemon=True)
            self._sender.start()
        # like kafka-python: records still lingering when the interpreter exits are written, not dropped
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    # ------------------------------------------------------------------------------------------------ config

    @classmethod
    def _parse_config(cls, configs: dict) -> dict:
        c = dict(cls.DEFAULT_CONFIG)
        alias = None
        for raw_key, value in configs.items():
            key = raw_key.replace(".", "_")
            if key == "auto_create_topics":
                alias = value
                continue
            if key in IGNORED_CONFIGS:
                continue
            if key not in c:
                raise InvalidConfigError(f"unknown KafkaProducer config {raw_key!r}")
            c[key] = value
        if alias is not None:
            if "allow_auto_create_topics" in {k.replace(".", "_") for k in configs} and \
                    bool(alias) != bool(c["allow_auto_create_topics"]):
                raise InvalidConfigError("auto_create_topics and allow_auto_create_topics disagree")
            c["allow_auto_create_topics"] = alias
        c["allow_auto_create_topics"] = bool(c["allow_auto_create_topics"])
        acks = c["acks"]
        acks = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(acks, acks) if isinstance(acks, str) else acks
        if isinstance(acks, bool) or acks not in (0, 1, -1):
            raise InvalidConfigError(f"acks={c['acks']!r}: must be 0, 1 or 'all' (-1)")
        c["acks"] = acks
        for key, low in (("batch_size", 0), ("max_request_size", 1)):
            v = c[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidConfigError(f"{key}={v!r}: must be an integer >= {low}")
        linger = c["linger_ms"]
        if isinstance(linger, bool) or not isinstance(linger, int | float) or linger < 0:
            raise InvalidConfigError(f"linger_ms={linger!r}: must be a number >= 0")
        ctype = c["compression_type"]
        if not (ctype is None or isinstance(ctype, str)) or ctype not in _COMPRESSION:
            raise InvalidConfigError(f"compression_type={ctype!r}: must be None, 'gzip', 'snappy', 'lz4' or 'zstd'")
        c["compression_type"] = _COMPRESSION[ctype]
        txn = c["transactional_id"]
        if txn is not None:
            if not isinstance(txn, str) or not txn:
                raise InvalidConfigError(f"transactional_id={txn!r}: must be a non-empty string or None")
            if acks != -1:
                raise InvalidConfigError(f"acks={c['acks']!r}: a transactional producer needs acks='all' (Kafka "
                                         "requires it of idempotent and transactional producers)")
        t = c["transaction_timeout_ms"]
        if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
            raise InvalidConfigError(f"transaction_timeout_ms={t!r}: must be an integer > 0")
        for key in ("key_serializer", "value_serializer"):
            s = c[key]
            if s is not None and not callable(s) and not callable(getattr(s, "serialize", None)):
                raise InvalidConfigError(f"{key}={s!r}: must be a callable or have serialize(topic, headers, data)")
        p = c["partitioner"]
        if p is not None and not callable(getattr(p, "partition", None)):
            raise InvalidConfigError(f"partitioner={p!r}: must have partition(topic, key, serialized_key, value, "
                                     "serialized_value, cluster)")
        if c["client_id"] is None:
            c["client_id"] = f"kafkalog-producer-{next(_ids)}"
        return c

    # ------------------------------------------------------------------------------------------------ topics

    def _topic(self, topic) -> _Topic:
        """The producer's view of a topic (loaded once): partitions, logs, limits; auto-created if allowed."""
        st = self._topics.get(topic)
        if st is not None:
            return st
        with self._meta_lock:
            st = self._topics.get(topic)
            if st is not None:
                return st
            if self._closed:
                raise LogClosedError("KafkaProducer already closed")
            store = self._store
            try:
                n = store.partitions_for(topic)
            except UnknownTopicOrPartitionError:
                if not self._auto_create:
                    raise UnknownTopicOrPartitionError(
                        f"topic {topic!r} does not exist in {store.path} (allow_auto_create_topics=False)") from None
                try:
                    store.create_topic(topic)  # validates the name: InvalidTopicError (a ValueError) from send()
                except TopicAlreadyExistsError:
                    pass  # another producer (thread or process) created it first
                n = store.partitions_for(topic)
            cfg = store.topic_config(topic)
            # a topic codec other than 'producer' wins, as when a broker recompresses: batches are built with it,
            # so Log.append_built stores them as they are
            ctype = cfg["compression.type"]
            codec = CODECS[self._codec] if ctype == "producer" else CODECS[ctype]
            limit = max(1, min(self._batch_size, cfg["max.message.bytes"] - RECORD_BATCH_OVERHEAD))
            append_time = cfg["message.timestamp.type"] == "LogAppendTime"
            st = _Topic(topic, n)
            st.parts = tuple(_Partition(self, st, p, store.log(topic, p), codec, limit, append_time)
                             for p in range(n))
            st.sticky = st.parts[int(_random() * n)]
            self._topics[topic] = st
            return st

    def _forget_topic(self, st: _Topic) -> None:
        """The topic's logs were closed under us (deleted topic, closed store): reload it on the next send."""
        with self._meta_lock:
            if self._topics.get(st.name) is st:
                del self._topics[st.name]
                self._topics_changed()

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids (creating the topic if allow_auto_create_topics, like a metadata request)."""
        return set(self._topic(topic).partition_set)

    # ------------------------------------------------------------------------------------------------ send

    # send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None) is RecordAccumulator.send
    # (compiled): plain records join their open batch there; everything else, and every state change, comes here.

    def _send(self, topic, value, key, headers, partition, timestamp_ms):
        if self._closed:
            raise LogClosedError("KafkaProducer already closed")
        key0, value0 = key, value
        if self._serializing:
            hs = headers if headers is not None else []
            if self._key_ser is not None:
                key = self._key_ser(topic, hs, key)
            if self._value_ser is not None:
                value = self._value_ser(topic, hs, value)
        if value is not None and type(value) is not bytes and not isinstance(value, _BYTES_LIKE):
            raise TypeError(f"Unsupported type for serialized value: {type(value)}")
        if key is not None:
            if type(key) is not bytes and not isinstance(key, _BYTES_LIKE):
                raise TypeError(f"Unsupported type for serialized key: {type(key)}")
            size = len(key) + _RECORD_OVERHEAD
        elif value is None:
            raise ValueError("Need at least one: key or value")
        else:
            size = _RECORD_OVERHEAD
        if value is not None:
            size += len(value)
        if headers:
            hsize, header_size = _check_headers(headers)
            size += hsize
        else:
            headers = None
            header_size = -1
        if timestamp_ms is None:
            ts = _time_ns() // 1_000_000
        elif type(timestamp_ms) is int and timestamp_ms >= 0:
            ts = timestamp_ms
        else:
            ts = _timestamp(timestamp_ms)

        st = self._topics.get(topic)
        if st is None:
            st = self._topic(topic)
        sticky = False
        if partition is not None:
            if partition not in st.partition_set:
                raise UnknownTopicOrPartitionError(
                    f"partition {partition!r} of topic {topic!r} does not exist (it has {st.n} partitions: "
                    f"0..{st.n - 1})")
            part = st.parts[partition]
        elif self._partitioner is not None:
            part = self._custom_partition(st, key0, key, value0, value, size)
        elif key is not None:
            part = st.parts[hash_partition(key, st.n)]
        else:
            part = st.sticky
            sticky = True

        if size + RECORD_BATCH_OVERHEAD > self._max_request_size:
            return self._reject(part, value, key, ts, header_size, RecordTooLargeError(
                f"the record is {size + RECORD_BATCH_OVERHEAD} bytes when serialized, more than "
                f"max_request_size={self._max_request_size}"))

        if not self._linger:
            b = _Batch(part, self._early)
            b.add(value, key, ts, headers, header_size, size)
            b.state = _CLOSED
            if sticky and st.n > 1:
                _rotate(st, part)  # each send is a batch of its own: KIP-480 moves on after every one
            self._write(part, b)
            return FutureRecordMetadata(b, 0)

        drain = None
        lock = self._lock
        lock.acquire()
        try:
            b = part.batch
            if b is not None and b.size + size > part.limit:
                self._close_locked(part)
                drain = part
                if sticky:
                    part = st.sticky  # KIP-480: the record that needs a new batch goes to the next partition
                    b = part.batch
                    if b is not None and b.size + size > part.limit:
                        self._close_locked(part)
                        drain = [drain, part]
                        b = None
                else:
                    b = None
            if b is None:
                b = self._new_batch_locked(part)
            i = b.add(value, key, ts, headers, header_size, size)  # one C call: atomic for the compiled path too
            if b.size >= part.limit:
                self._close_locked(part)
                drain = part if drain is None else [*drain, part] if type(drain) is list else [drain, part]
        finally:
            lock.release()
        if drain is not None:
            if type(drain) is list:
                for p in drain:
                    self._drain(p)
            else:
                self._drain(drain)
        return FutureRecordMetadata(b, i)

    def _custom_partition(self, st: _Topic, key0, key, value0, value, size: int) -> _Partition:
        p = self._partitioner.partition(st.name, key0, key, value0, value, self._cluster)
        on_new_batch = getattr(self._partitioner, "on_new_batch", None) if key is None else None
        if on_new_batch is not None and p in st.partition_set:
            b = st.parts[p].batch  # read without the lock: a stale answer only moves one record
            if b is None or b.size + size > st.parts[p].limit:
                # kafka-python's abort-for-new-batch: a null-key record that needs a new batch (always, with
                # linger_ms=0) lets a sticky partitioner move on first, and goes where it moved
                on_new_batch(st.name, self._cluster, p)
                p = self._partitioner.partition(st.name, key0, key, value0, value, self._cluster)
        if p not in st.partition_set:
            raise UnknownTopicOrPartitionError(
                f"partitioner returned partition {p!r} for topic {st.name!r}, which has {st.n} partitions")
        return st.parts[p]

    def _reject(self, part, value, key, ts, header_size, exc) -> FutureRecordMetadata:
        """A future that failed before its record joined a batch; nothing else is affected."""
        b = _Batch(part, False)
        b.add_facts(ts, _nbytes(key), _nbytes(value), header_size)
        b.drop_records()
        b.state = _FAILED
        b.error = exc
        with self._lock:
            self._metrics["record-error-total"] += 1
        return FutureRecordMetadata(b, 0)

    # ------------------------------------------------------------------------------------------------ batches

    def _new_batch_locked(self, part: _Partition) -> _Batch:
        now = _monotonic()
        b = _Batch(part, self._early, now)
        part.batch = b
        self._open[part] = None
        self._incomplete.add(b)
        if self._sender_deadline is None:
            self._cond.notify()  # the sender sleeps without a deadline: give it this batch's
        return b

    def _close_locked(self, part: _Partition) -> None:
        """Move the open batch of ``part`` to its ready queue (lock held). The caller then drains the partition."""
        b = part.batch
        part.batch = None
        del self._open[part]
        b.state = _CLOSED
        part.ready.append(b)
        st = part.topic
        if st.sticky is part and st.n > 1:
            _rotate(st, part)

    def _drain(self, part: _Partition) -> None:
        """Write the ready batches of ``part`` in order. Whoever holds wlock writes everything queued so far."""
        ready = part.ready
        with part.wlock:
            while ready:
                try:
                    b = ready.popleft()
                except IndexError:
                    return
                self._write(part, b)

    def _write(self, part: _Partition, b: _Batch) -> None:
        """One Log.append_built of the built batch; a batch the log refuses for a record's sake is split to find
        the records at fault."""
        data = None
        try:
            # the batch's own buffer, no copy; built with the topic's codec, so the log stores it as it is
            data = b.build_view()
            b.base = part.log.append_built(data, b.records_count, b.max_timestamp)
        except (TypeError, ValueError):
            # record-level refusals (RecordTooLargeError, InvalidTimestampError...) are ValueErrors: isolate the
            # records at fault, write the others in order (Kafka splits batches too)
            pieces: list = []
            if data is not None:
                recs = list(RecordBatch(bytes(data)).records())
                if isinstance(data, memoryview):  # a compressed batch is built as bytes
                    data.release()
                self._write_split(part, recs, 0, b.records_count, pieces)
            else:  # cannot happen (the records were encoded when sent); fail the batch rather than lose it quietly
                pieces.append((0, b.records_count, ValueError("the producer could not build the batch")))
            b.pieces = pieces
            if not any(isinstance(res, int) for _, _, res in pieces):
                b.error = pieces[0][2]
                self._fail(b, b.error, count=b.records_count)
                return
            b.error = next((res for _, _, res in pieces if isinstance(res, BaseException)), None)
        except Exception as e:
            if isinstance(e, LogClosedError):
                self._forget_topic(part.topic)
            self._fail(b, e, count=b.records_count)
            return
        finally:
            if isinstance(data, memoryview):
                data.release()  # lets drop_records() recycle the buffer for the next batch
        if part.append_time:
            b.append_time = self._append_time(part, b)
        if self._acks_all:
            with self._lock:
                b.state = _WRITTEN
                if not self._unsynced:
                    self._unsynced_since = _monotonic()
                self._unsynced.setdefault(part, []).append(b)
                self._incomplete.add(b)
                due = self._unsynced_since + self._sync_window()
                if self._waiters or self._sender_deadline is None or self._sender_deadline > due:
                    self._cond.notify()
        else:
            self._complete(b)

    def _write_split(self, part: _Partition, recs: list, lo: int, hi: int, out: list) -> None:
        """Write recs[lo:hi] (records decoded from the refused batch) as one batch, or split it in halves."""
        piece = recs[lo:hi]
        try:
            base = part.log.append_batch([r.value for r in piece], [r.key for r in piece],
                                         [r.timestamp for r in piece], [r.headers for r in piece],
                                         compression=part.codec)
        except (TypeError, ValueError) as e:
            if hi - lo == 1:
                out.append((lo, hi, e))
                return
            mid = (lo + hi) // 2
            self._write_split(part, recs, lo, mid, out)
            self._write_split(part, recs, mid, hi, out)
            return
        out.append((lo, hi, base))

    def _append_time(self, part: _Partition, b: _Batch) -> int:
        """LogAppendTime topics: the log stamped the batch; read the stamp back for RecordMetadata.timestamp."""
        base = b.base if b.pieces is None else next(res for _, _, res in b.pieces if isinstance(res, int))
        try:
            for batch in iter_batches(part.log.read(base, 1)):
                if batch.base_offset <= base <= batch.last_offset:
                    return batch.max_timestamp
        except Exception as e:  # metadata only: the records are written; fall back to the clock
            _log.warning("could not read back the append time of %s at %d: %s", part.tp, base, e)
        return _now_ms()

    def _complete(self, b: _Batch) -> None:
        n = b.records_count
        failed = 0 if b.pieces is None else sum(hi - lo for lo, hi, res in b.pieces if isinstance(res, BaseException))
        with self._lock:
            b.state = _DONE
            self._incomplete.discard(b)
            m = self._metrics
            m["record-send-total"] += n - failed
            m["record-error-total"] += failed
            m["batch-total"] += 1
            m["byte-total"] += b.size
            callbacks, b.callbacks = b.callbacks, None
            if self._waiters:
                self._cond.notify_all()
        if failed and b.early:
            _log.warning("acks=0: %d records for %s were refused by the log: %s", failed, b.part.tp, b.error)
        b.drop_records()  # written: futures held by the app keep the sizes, not the payload (as kafka-python's)
        if callbacks:
            self._callbacks(b, callbacks)

    def _fail(self, b: _Batch, exc: BaseException, count: int) -> None:
        with self._lock:
            b.state = _FAILED
            b.error = exc
            self._incomplete.discard(b)
            self._metrics["record-error-total"] += count
            callbacks, b.callbacks = b.callbacks, None
            if self._waiters:
                self._cond.notify_all()
        if b.early:
            _log.warning("acks=0: a batch of %d records for %s was not written: %s", count, b.part.tp, exc)
        b.drop_records()  # failed futures keep their sizes, not the payload
        if callbacks:
            self._callbacks(b, callbacks)

    @staticmethod
    def _callbacks(b: _Batch, callbacks) -> None:
        for i, f, errback in callbacks:
            _run_callback(FutureRecordMetadata(b, i), f, errback)

    # ------------------------------------------------------------------------------------------------ fsync

    def _sync_window(self) -> float:
        # While nobody waits, let writes gather for about twice the last fsync: Log.flush holds the log's lock
        # during its fsync, so back-to-back fsyncs would stall the writers on every record.
        return min(0.05, max(0.0005, 2 * self._last_fsync))

    def _sync(self, todo: dict) -> None:
        """fsync each partition of ``todo`` once; every batch written before it is then durable."""
        for part, batches in todo.items():
            t = _monotonic()
            try:
                part.log.flush()
            except Exception as e:
                for b in batches:
                    self._fail(b, e, count=b.records_count)
                continue
            self._last_fsync = _monotonic() - t
            with self._lock:
                self._metrics["fsync-total"] += 1
            for b in batches:
                self._complete(b)

    def _sync_pending(self) -> None:
        with self._lock:
            todo, self._unsynced = self._unsynced, {}
        if todo:
            self._sync(todo)

    def _await(self, b: _Batch, timeout: float | None) -> None:
        """Block until batch ``b`` is done (get()). acks='all': a written batch is fsynced now, not after the
        group-commit window."""
        if self._acks_all and b.state == _WRITTEN:
            self._sync_pending()
        deadline = None if timeout is None else _monotonic() + timeout
        with self._cond:
            self._waiters += 1
            try:
                while not (b.early or b.state >= _DONE):
                    if deadline is None:
                        self._cond.wait()
                        continue
                    remaining = deadline - _monotonic()
                    if remaining <= 0:
                        raise RequestTimedOutError(f"Timeout after waiting for {timeout} secs.")
                    self._cond.wait(remaining)
            finally:
                self._waiters -= 1

    # ------------------------------------------------------------------------------------------------ sender

    def _run(self) -> None:
        """The sender thread: write batches whose linger expired; group-fsync written batches (acks='all')."""
        linger = self._linger
        cond = self._cond
        while True:
            try:
                expired = []
                todo = None
                with cond:
                    while True:
                        now = _monotonic()
                        deadline = None
                        if self._open:
                            for part in self._open:  # insertion order: oldest batch first
                                due = part.batch.created + linger
                                if due <= now or self._stopping:
                                    expired.append(part)
                                else:
                                    deadline = due
                                    break
                            for part in expired:
                                self._close_locked(part)
                        if self._unsynced:
                            due = self._unsynced_since + self._sync_window()
                            if self._waiters or self._stopping or due <= now:
                                todo, self._unsynced = self._unsynced, {}
                            elif deadline is None or due < deadline:
                                deadline = due
                        if expired or todo:
                            self._sender_deadline = now  # busy: writers need not wake it
                            break
                        if self._stopping:
                            return
                        self._sender_deadline = deadline
                        cond.wait(None if deadline is None else deadline - now)
                for part in expired:
                    self._drain(part)
                if todo:
                    self._sync(todo)
            except Exception:  # the thread must survive anything a batch or a callback throws
                _log.exception("producer sender thread")

    # ------------------------------------------------------------------------------------------------ flush/close

    def flush(self, timeout: float | None = None) -> None:
        """Write every buffered record now (even before linger_ms) and wait until every record sent before this
        call is resolved per ``acks`` (acks='all': fsynced). RequestTimedOutError after ``timeout`` seconds.
        Records sent by other threads meanwhile may or may not be included (kafka-python's guarantee)."""
        deadline = None if timeout is None else _monotonic() + timeout
        with self._lock:
            for part in list(self._open):
                self._close_locked(part)
            waiting = list(self._incomplete)
            self._metrics["flush-total"] += 1
        for part in {b.part for b in waiting}:
            self._drain(part)
        if self._acks_all:
            self._sync_pending()
        with self._cond:
            self._waiters += 1
            try:
                for b in waiting:
                    while b.state < _DONE:
                        remaining = None if deadline is None else deadline - _monotonic()
                        if remaining is not None and remaining <= 0:
                            raise RequestTimedOutError(f"flush did not complete within {timeout} secs")
                        self._cond.wait(remaining)
            finally:
                self._waiters -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), stop the sender thread, close serializers and, if the producer opened
        the store from a path, the store. Records not written by the timeout fail with LogClosedError.
        Idempotent; send() raises LogClosedError afterwards."""
        with self._meta_lock:
            if self._closed:
                return
            self._closed = True
            self._fast = False
        atexit.unregister(self._atexit)
        in_sender = threading.current_thread() is self._sender
        try:
            self.flush(0 if in_sender else timeout)
        except RequestTimedOutError:
            _log.warning("%s: closing with records not yet acknowledged after %s secs", self.config["client_id"],
                         timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._sender is not None and not in_sender:
            self._sender.join(timeout)
        with self._lock:
            leftovers = [b for b in self._incomplete if b.state < _WRITTEN]
        for b in leftovers:
            self._fail(b, LogClosedError("the producer was closed before the record was written"),
                       count=b.records_count)
        for ser in (self.config["key_serializer"], self.config["value_serializer"]):
            close = getattr(ser, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    _log.exception("closing a serializer")
        if self._owns_store:
            self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------------------------------------ transactions

    def _not_transactional(self, what: str):
        return IllegalStateError(f"{what}: transactional method invoked on a non-transactional producer (set "
                                 "transactional_id)")

    def init_transactions(self, timeout: float | None = None) -> None:
        """See the class docstring: needs ``transactional_id``."""
        raise self._not_transactional("init_transactions()")

    def begin_transaction(self) -> None:
        raise self._not_transactional("begin_transaction()")

    def send_offsets_to_transaction(self, offsets, consumer_group_id, timeout: float | None = None) -> None:
        raise self._not_transactional("send_offsets_to_transaction()")

    def commit_transaction(self, timeout: float | None = None) -> None:
        raise self._not_transactional("commit_transaction()")

    def abort_transaction(self, timeout: float | None = None) -> None:
        raise self._not_transactional("abort_transaction()")

    # ------------------------------------------------------------------------------------------------ info

    def metrics(self, raw: bool = False) -> dict:
        """A few counters in kafka-python's shape: ``{"producer-metrics": {name: value}}``."""
        with self._lock:
            m = dict(self._metrics)
        batches = m["batch-total"]
        m["records-per-batch-avg"] = (m["record-send-total"] / batches) if batches else 0.0
        m["batch-size-avg"] = (m["byte-total"] / batches) if batches else 0.0
        return {"producer-metrics": m}

    @property
    def store(self) -> LogStore:
        return self._store

    def __repr__(self):
        return f"<KafkaProducer client_id={self.config['client_id']!r} store={str(self._store.path)!r}>"


# -------------------------------------------------------------------------------------------------------- transactions

# Java's TransactionManager states (their names appear in the errors)
_UNINITIALIZED, _READY, _IN_TRANSACTION, _COMMITTING, _ABORTING, _ABORTABLE_ERROR, _FATAL_ERROR = (
    "UNINITIALIZED", "READY", "IN_TRANSACTION", "COMMITTING_TRANSACTION", "ABORTING_TRANSACTION", "ABORTABLE_ERROR",
    "FATAL_ERROR")
_FENCED = (ProducerFencedError, InvalidProducerEpochError, InvalidProducerIdMappingError)
_TXN_RETRY_S = 60.0  # ConcurrentTransactionsError is retried this long (Java: max.block.ms)

# record batch v2 header fields a transactional batch carries (framing.pyi: Kafka's DefaultRecordBatch)
_CRC_AT, _ATTRIBUTES_AT, _PRODUCER_AT = 17, 21, 43
_TRANSACTIONAL_BIT = 0x10
_pack_ids = struct.Struct(">qhi").pack_into  # ProducerId Int64, ProducerEpoch Int16, BaseSequence Int32
_attributes = struct.Struct(">h")
_crc = struct.Struct(">I")


def _stamp(data, producer_id: int, epoch: int, base_sequence: int) -> None:
    """Make the built batch ``data`` (writable) a transactional batch of (producer id, epoch) from
    ``base_sequence``: ProducerId, ProducerEpoch, BaseSequence and the transactional bit of Attributes, CRC-32C
    (Attributes to the end) recomputed."""
    _pack_ids(data, _PRODUCER_AT, producer_id, epoch, base_sequence)
    (attrs,) = _attributes.unpack_from(data, _ATTRIBUTES_AT)
    _attributes.pack_into(data, _ATTRIBUTES_AT, attrs | _TRANSACTIONAL_BIT)
    with memoryview(data) as mv:
        _crc.pack_into(data, _CRC_AT, crc32c(mv[_ATTRIBUTES_AT:]))


class _TransactionalProducer(KafkaProducer):
    """``KafkaProducer(..., transactional_id=...)``: KIP-98 transactions through the data dir's one coordinator
    (``LogStore.transactions``), the same one the broker's clients use, so an embedded transaction and a Java
    client's are the same kind of transaction in the same format.

    Each record sent in a transaction is written in a transactional batch of (producer id, epoch), with
    sequences from 0 per partition per epoch. A partition joins the transaction (AddPartitionsToTxn) before its
    first batch is written; the batch is checked against the coordinator (``check_produce``) and appended while the
    coordinator's lock is held, so a producer fenced by another process (a newer instance of the same
    transactional id, or the timeout) never writes. Errors put the producer in Java's states: a failed write makes
    the transaction abortable (``commit_transaction`` raises it, ``abort_transaction`` recovers), fencing is fatal
    (``ProducerFencedError`` from every later call: close it).
    """

    def __init__(self, store_or_path, **configs):
        super().__init__(store_or_path, **configs)
        c = self.config
        self._txn_id: str = c["transactional_id"]
        self._txn_timeout: int = c["transaction_timeout_ms"]
        self._coord = None
        self._pid = -1
        self._epoch = -1
        self._txn_state = _UNINITIALIZED
        self._txn_error: BaseException | None = None
        self._txn_parts: set[TopicPartition] = set()  # partitions of the open transaction (AddPartitionsToTxn)
        self._txn_groups: set[str] = set()  # groups whose offsets it holds (AddOffsetsToTxn)
        self._seqs: dict[TopicPartition, int] = {}  # next base sequence per partition, for this epoch
        self._tv = 0  # 2: transactions v2 (KIP-890 part 2), the data dir's transaction.version level
        self._txn_lock = threading.RLock()  # state changes, and every transactional write (in write order)

    # -- states --------------------------------------------------------------------------------------------------

    def _state_error(self, what: str) -> KafkaError:
        st = self._txn_state
        if st == _FATAL_ERROR:
            return self._txn_error
        if st == _UNINITIALIZED:
            return IllegalStateError(f"{what}: transactional id {self._txn_id!r}: call init_transactions() first")
        if st == _READY:
            return IllegalStateError(f"{what}: transactional id {self._txn_id!r} has no transaction in progress: "
                                     "call begin_transaction() first")
        if st == _ABORTABLE_ERROR:
            return IllegalStateError(f"{what}: the transaction of {self._txn_id!r} failed ({self._txn_error!r}): "
                                     "call abort_transaction()")
        return IllegalStateError(f"{what}: transactional id {self._txn_id!r} is in state {st}")

    def _fenced(self, e: BaseException) -> ProducerFencedError:
        """Fencing is fatal: every later call raises it."""
        err = e if isinstance(e, ProducerFencedError) else ProducerFencedError(
            f"transactional id {self._txn_id!r}: producer {self._pid} epoch {self._epoch} was fenced by a newer "
            f"instance (or its transaction timed out): {e}")
        with self._txn_lock:
            self._txn_state = _FATAL_ERROR
            self._txn_error = err
            self._fast = False  # every later send() comes to _send, which raises it
        return err

    def _abortable(self, e: BaseException) -> None:
        with self._txn_lock:
            if self._txn_state in (_IN_TRANSACTION, _COMMITTING):
                self._txn_state = _ABORTABLE_ERROR
                self._txn_error = e

    def _call(self, fn, *args):
        """A coordinator call, ConcurrentTransactionsError retried (the coordinator is completing a transaction of
        this id); fencing errors become ProducerFencedError (fatal)."""
        deadline = _monotonic() + _TXN_RETRY_S
        pause = 0.005
        while True:
            try:
                return fn(*args)
            except ConcurrentTransactionsError:
                if _monotonic() >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
            except _FENCED as e:
                raise self._fenced(e) from e
            except InvalidTxnStateError as e:
                # transactions v2: an EndTxn after the coordinator ended this producer's transaction itself (a
                # newer instance's InitProducerId, or the timeout, bumped the epoch: the commit of the aborted
                # transaction is INVALID_TXN_STATE, as from Kafka): the producer was fenced
                meta = self._coord.describe(self._txn_id) if self._tv >= 2 and self._coord is not None else None
                if meta is not None and (meta.producer_id, meta.epoch) != (self._pid, self._epoch):
                    raise self._fenced(e) from e
                raise

    # -- the API ---------------------------------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Get the producer id and a new epoch of ``transactional_id`` from the data dir's coordinator, fencing any
        older producer with the same id (its open transaction is aborted; its next send or commit raises
        ProducerFencedError). Call once, before the first begin_transaction()."""
        with self._txn_lock:
            if self._closed:
                raise LogClosedError("KafkaProducer already closed")
            if self._txn_state == _FATAL_ERROR:
                raise self._txn_error
            if self._txn_state != _UNINITIALIZED:
                raise IllegalStateError(f"init_transactions(): transactional id {self._txn_id!r} is already "
                                        f"initialized (state {self._txn_state})")
            coord = self._coord = self._store.transactions
            try:
                coord.expire()  # a transaction left open by a producer that died is aborted after its timeout
            except KafkaError as e:
                _log.warning("aborting timed-out transactions: %s", e)
            self._pid, self._epoch = self._call(coord.init_producer_id, self._txn_id, self._txn_timeout)
            self._seqs.clear()
            # as Java's client: transactions v2 where the transaction.version level is 2 (an epoch bump at every end
            # of a transaction, the markers carrying it)
            self._tv = 2 if getattr(coord, "transaction_version", 0) >= 2 else 0
            self._txn_state = _READY

    def begin_transaction(self) -> None:
        """Start a transaction: every record sent until commit_transaction() or abort_transaction() belongs to it."""
        with self._txn_lock:
            if self._txn_state != _READY:
                raise self._state_error("begin_transaction()")
            self._txn_parts.clear()
            self._txn_groups.clear()
            self._txn_error = None
            self._txn_state = _IN_TRANSACTION

    def send_offsets_to_transaction(self, offsets, consumer_group_id, timeout: float | None = None) -> None:
        """Commit ``offsets`` ({TopicPartition: OffsetAndMetadata | int}) for the consumer group (a group id, or an
        object with ``group_id`` such as Java's ConsumerGroupMetadata) as part of the transaction: they take effect
        when it commits (KIP-98's consume-transform-produce), never if it aborts. Until then a read_committed
        consumer of the group sees them as unstable (see KafkaConsumer)."""
        group = consumer_group_id if isinstance(consumer_group_id, str) else getattr(consumer_group_id, "group_id",
                                                                                    None)
        if not isinstance(group, str) or not group:
            raise TypeError(f"consumer_group_id={consumer_group_id!r}: a group id or an object with group_id")
        checked = {}
        for tp, om in offsets.items():
            tp = TopicPartition(*tp)
            if not isinstance(om, int | OffsetAndMetadata) and hasattr(om, "offset"):
                om = OffsetAndMetadata(om.offset, getattr(om, "metadata", "") or "", None)
            checked[tp] = om
        with self._txn_lock:
            if self._txn_state != _IN_TRANSACTION:
                raise self._state_error("send_offsets_to_transaction()")
            coord = self._coord
            try:
                # AddOffsetsToTxn (in the coordinator's log before any offset of the transaction is written; fsynced
                # with the decision); then check and write as one step under the coordinator's lock (no fencing in
                # between)
                self._call(coord.add_offsets, self._txn_id, self._pid, self._epoch, group, self._tv)
                self._txn_groups.add(group)
                with coord.locked():
                    self._call(coord.check_offsets, self._txn_id, self._pid, self._epoch, group)
                    self._store.offsets.commit_transactional(group, checked, self._pid, self._epoch)
            except ProducerFencedError:
                raise
            except (KafkaError, OSError) as e:
                self._abortable(e)
                raise

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Write every record still buffered (flush), then commit: returns once the records are fsynced, the
        transaction's fate is durable and its COMMIT markers are written on every partition it touched (records and
        offsets are then visible to read_committed readers, and survive kill -9 and power loss; the markers are
        fsynced behind the return, a power loss before that leaves the decision, which the next load completes).
        Raises the error of a failed send (the transaction must then be aborted), ProducerFencedError when another
        producer took the transactional id over."""
        with self._txn_lock:
            if self._txn_state not in (_IN_TRANSACTION, _COMMITTING):  # COMMITTING: a retry after a timeout
                if self._txn_state == _ABORTABLE_ERROR:
                    raise KafkaError(f"cannot commit the transaction of {self._txn_id!r}: a send failed "
                                     f"({self._txn_error!r}); call abort_transaction()") from self._txn_error
                raise self._state_error("commit_transaction()")
            self._txn_state = _COMMITTING
        self.flush(timeout)  # may raise RequestTimedOutError: the state stays COMMITTING, commit again
        with self._txn_lock:
            if self._txn_state == _FATAL_ERROR:
                raise self._txn_error
            if self._txn_state == _ABORTABLE_ERROR:
                raise KafkaError(f"cannot commit the transaction of {self._txn_id!r}: a send failed "
                                 f"({self._txn_error!r}); call abort_transaction()") from self._txn_error
            if self._txn_parts or self._txn_groups:  # an empty transaction never reached the coordinator
                try:
                    self._ended(self._call(self._coord.end_txn, self._txn_id, self._pid, self._epoch, True, self._tv))
                except ProducerFencedError:
                    raise
                except KafkaError as e:
                    self._abortable(e)
                    raise
            self._txn_state = _READY

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort: records still buffered are dropped (their futures fail with TransactionAbortedError), records
        already written stay in the log behind an ABORT marker (written before this returns, fsynced behind it), which
        hides them and the transaction's offsets from read_committed readers for good."""
        with self._txn_lock:
            if self._txn_state not in (_IN_TRANSACTION, _ABORTABLE_ERROR, _COMMITTING, _ABORTING):
                raise self._state_error("abort_transaction()")
            self._txn_state = _ABORTING  # from here on no batch of the transaction is written
        self._discard_buffered()
        parts = [part for st in list(self._topics.values()) for part in st.parts]
        for part in parts:
            with part.wlock:  # a batch being written as we got here is done with
                pass
        with self._txn_lock:
            if self._txn_parts or self._txn_groups:
                self._ended(self._call(self._coord.end_txn, self._txn_id, self._pid, self._epoch, False, self._tv))
            self._txn_error = None
            self._txn_state = _READY

    def _ended(self, new) -> None:
        """After EndTxn: transactions v2 go on with the producer id and epoch it answered (sequences from 0)."""
        if self._tv >= 2 and new is not None and tuple(new) != (self._pid, self._epoch):
            self._pid, self._epoch = new
            self._seqs.clear()

    def _discard_buffered(self) -> None:
        dropped = []
        with self._lock:
            for part in list(self._open):
                b = part.batch
                part.batch = None
                del self._open[part]
                b.state = _CLOSED
                dropped.append(b)
            for st in list(self._topics.values()):
                for part in st.parts:
                    while part.ready:
                        dropped.append(part.ready.popleft())
        for b in dropped:
            self._fail(b, TransactionAbortedError(f"the transaction of {self._txn_id!r} was aborted before the "
                                                  "record was written"), count=b.records_count)

    # -- send and write ---------------------------------------------------------------------------------------

    def _send(self, topic, value, key, headers, partition, timestamp_ms):
        if self._txn_state != _IN_TRANSACTION:
            if self._closed:
                raise LogClosedError("KafkaProducer already closed")
            raise self._state_error("send()")
        future = KafkaProducer._send(self, topic, value, key, headers, partition, timestamp_ms)
        if self._txn_state == _FATAL_ERROR:  # fenced while writing it (linger_ms=0 writes in send)
            raise self._txn_error
        return future

    def _reject(self, part, value, key, ts, header_size, exc) -> FutureRecordMetadata:
        self._abortable(exc)  # as Java's: a record refused by send() fails the transaction
        return KafkaProducer._reject(self, part, value, key, ts, header_size, exc)

    def _write(self, part: _Partition, b: _Batch) -> None:
        """One transactional batch: join the partition to the transaction if new (durably), then check the epoch
        with the coordinator and append, as one step under the coordinator's lock (no other process can fence the
        producer between the check and the write; the partition also refuses an epoch older than its markers')."""
        tp = part.tp
        data = None
        with self._txn_lock:
            if self._txn_state not in (_IN_TRANSACTION, _COMMITTING):
                err = self._txn_error if self._txn_state == _FATAL_ERROR else TransactionAbortedError(
                    f"the transaction of {self._txn_id!r} ended before the record was written ({self._txn_state})")
                self._fail(b, err, count=b.records_count)
                return
            coord = self._coord
            seq = self._seqs.get(tp, 0)
            try:
                data = b.build_view()
                if isinstance(data, bytes):  # compressed: built as bytes
                    data = bytearray(data)
                _stamp(data, self._pid, self._epoch, seq)
                if tp not in self._txn_parts:
                    # AddPartitionsToTxn: the coordinator knows the partition (and will write its marker) before any
                    # batch of the transaction can reach it; its record is fsynced with the decision (a power loss
                    # before that: the coordinator's load aborts the batches it does not know of)
                    self._call(coord.add_partitions, self._txn_id, self._pid, self._epoch, [tp], self._tv)
                    self._txn_parts.add(tp)
                with coord.locked():  # check and append as one step: no fencing in between
                    coord.check_produce(self._txn_id, self._pid, self._epoch, tp)
                    b.base = part.log.append_records(data)[0]
            except _FENCED as e:
                self._fail(b, self._fenced(e), count=b.records_count)
                return
            except Exception as e:
                if isinstance(e, LogClosedError):
                    self._forget_topic(part.topic)
                self._abortable(e)
                self._fail(b, e, count=b.records_count)
                return
            finally:
                if isinstance(data, memoryview):
                    try:
                        data.release()  # lets drop_records() recycle the buffer for the next batch
                    except BufferError:
                        pass
            self._seqs[tp] = (seq + b.records_count) & 0x7FFFFFFF  # Kafka's sequences wrap to 0 after Int32.MAX
        if part.append_time:
            b.append_time = self._append_time(part, b)
        with self._lock:  # acks='all' (a transactional producer's only setting): durable after the group fsync
            b.state = _WRITTEN
            if not self._unsynced:
                self._unsynced_since = _monotonic()
            self._unsynced.setdefault(part, []).append(b)
            self._incomplete.add(b)
            due = self._unsynced_since + self._sync_window()
            if self._waiters or self._sender_deadline is None or self._sender_deadline > due:
                self._cond.notify()

    def close(self, timeout: float | None = None) -> None:
        """An open transaction is aborted first (its buffered records dropped), then the producer closes as any."""
        if not self._closed and self._txn_state in (_IN_TRANSACTION, _ABORTABLE_ERROR, _COMMITTING):
            try:
                self.abort_transaction()
            except KafkaError as e:
                _log.warning("%s: aborting the open transaction on close: %s", self.config["client_id"], e)
        super().close(timeout)

    def __repr__(self):
        return (f"<KafkaProducer client_id={self.config['client_id']!r} transactional_id={self._txn_id!r} "
                f"state={self._txn_state} store={str(self._store.path)!r}>")


def _rotate(st: _Topic, part: _Partition) -> None:
    """KIP-480: move the topic's sticky partition to another one, chosen at random."""
    i = int(_random() * (st.n - 1))
    st.sticky = st.parts[i + 1 if i >= part.partition else i]


def _timestamp(value) -> int:
    """timestamp_ms other than a plain non-negative int: any integer type (numpy's too), never a bool."""
    if isinstance(value, bool):
        raise TypeError(f"timestamp_ms={value!r}: must be an int (epoch milliseconds)")
    try:
        ts = operator.index(value)
    except TypeError:
        raise TypeError(f"timestamp_ms={value!r}: must be an int (epoch milliseconds)") from None
    if ts < 0:
        raise InvalidTimestampError(f"timestamp_ms={ts}: must be >= 0 (epoch milliseconds)")
    return ts


def _check_headers(headers) -> tuple[int, int]:
    """kafka-python's rule: a list of (str, bytes) pairs (None values allowed, as in Kafka). Returns the batch_size
    accounting size and kafka-python's serialized_header_size (UTF-8 keys + values)."""
    if not isinstance(headers, list | tuple):
        raise TypeError("headers must be a list of (str, bytes) tuples")
    size = 1
    serialized = 0
    for h in headers:
        if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)
                and (h[1] is None or isinstance(h[1], _BYTES_LIKE))):
            raise TypeError(f"All headers items must be (str, bytes) tuples, got {h!r}")
        n = len(h[0].encode()) + (_nbytes(h[1]) if h[1] is not None else 0)
        size += n + _HEADER_OVERHEAD
        serialized += n
    return size, serialized


def _nbytes(data) -> int:
    """Serialized size as RecordMetadata reports it: -1 for None."""
    if data is None:
        return -1
    return data.nbytes if type(data) is memoryview else len(data)


def _serializer(s):
    """kafka-python accepts a callable(data) or a Serializer (serialize(topic, headers, data)): one calling form."""
    if s is None:
        return None
    serialize = getattr(s, "serialize", None)
    if callable(serialize):
        return serialize
    return lambda topic, headers, data: s(data)


def _close_at_exit(ref) -> None:
    producer = ref()
    if producer is not None:
        try:
            producer.close()
        except Exception:
            _log.exception("closing a producer at exit")

