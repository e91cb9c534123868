"""The transaction coordinator (KIP-98, KIP-447): transactional ids, producer epochs, and the two-phase end of a
transaction, kept in ``__transaction_state`` as Kafka keeps it.

One data dir is one node: this coordinator and the leader of every partition are the same process, so the
"WriteTxnMarkers" step is a local append of a marker (``Log.append_marker``) to every partition of the transaction.

``__transaction_state`` (compacted, one partition: the coordinator's log; Kafka's routing by ``abs(hash) % 50``
only spreads coordinators over brokers) holds one record per change, Kafka's bytes (txnformat.py):
key TransactionLogKey v0 (the transactional id), value TransactionLogValue v0 (producer id, epoch, timeout, state,
partitions, timestamps); a tombstone removes an expired id. Opening replays it (the last value per key wins).

The state machine (Kafka's TransactionMetadata): Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) ->
PrepareCommit | PrepareAbort (EndTxn) -> CompleteCommit | CompleteAbort (markers written) -> Ongoing (next
transaction) ... InitProducerId bumps the epoch (fencing the previous holder of the id); with a transaction
Ongoing it first aborts it.

What makes each step safe, and the first law hold (no acknowledged transaction lost or half visible):

1. Every change is appended to ``__transaction_state`` and fsynced before it is answered or acted upon, but
   AddPartitionsToTxn / AddOffsetsToTxn (fsynced with the PrepareX that follows them in the file) and CompleteX.
   A power loss can so keep a partition's transactional batches and lose the record that put the partition in
   the transaction: the load's sweep (``_abort_hanging``) aborts such a transaction, fencing its producer.
2. EndTxn answers once PrepareCommit/PrepareAbort is durable (that record is the transaction's fate) and its
   markers are appended to every partition (visible to every reader). Behind the answer the markers are fsynced
   (``_behind_run``), and only after that CompleteCommit/CompleteAbort is written; the next call for the same
   transactional id finishes that first (``_settle``), so an id's records stay in order. A crash anywhere in
   between leaves PrepareX in the log; opening completes it (markers again: a marker for a producer with no open
   transaction is harmless) before any request is served, but never on a partition where the producer's next
   transaction already wrote (``_complete``).
   EndTxns that arrive together take these steps together (``end_many``; ``end_txn`` gathers the calls of
   concurrent threads): their PrepareX records in one append and one fsync, every marker before any CompleteX.
3. A transaction left Ongoing by a producer that vanished is aborted after ``transaction.timeout.ms`` (its epoch
   bumped first, so the producer is fenced), by ``expire()``, which the broker calls every
   ``transaction.abort.timed.out.transaction.cleanup.interval.ms``.
4. Data batches are accepted only from the current epoch of a transactional id whose transaction is Ongoing and
   holds the partition (``check_produce``): a fenced or confused producer never writes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from dataclasses import dataclass, field

from ..errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    LogClosedError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from ..structs import TopicPartition
from . import failpoints
from .files import FileLock, atomic_write, fsync_dir, make_durable_dir
from .txnformat import (
    STATE_NAMES,
    TxnLogValue,
    decode_txn_log_key,
    decode_txn_log_value,
    encode_txn_log_key,
    encode_txn_log_value,
)
from .txnstate import TXN_MARKER_FILE

TXN_TOPIC = "__transaction_state"
# left by a store's first opener after an unclean shutdown of a data dir with transactions; the coordinator's next
# load sweeps for hanging transactions (TransactionCoordinator._abort_hanging), then removes it
TXN_SWEEP_FILE = ".kafkalog-txn-sweep"
TXN_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 << 20), "compression.type": "none"}

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
_MAX_EPOCH = 32766  # Short.MAX_VALUE - 1: an id whose epoch reaches it gets a new producer id (isEpochExhausted)
# a PrepareCommit/PrepareAbort this old in another process's name is an orphan: its process writes its markers within
# milliseconds of deciding (a second completion beside a live one would only write markers that change nothing)
_ORPHAN_PREPARE_MS = 5000

_log = logging.getLogger("kafkalog.transactions")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _synchronized(fn):
    """A coordinator call: under the coordinator's locks, after taking in other processes' changes."""
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        with self._locked():
            return fn(self, *args, **kwargs)
    return call


@dataclass
class TxnMeta:
    """One transactional id's state (Kafka's TransactionMetadata)."""

    txn_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set = field(default_factory=set)  # TopicPartition
    last_update_ms: int = -1
    start_ms: int = -1
    last_epoch: int = -1  # the epoch before the last bump (a retried InitProducerId); not persisted, as in Kafka
    # transactions v2 (KIP-890 part 2), persisted in TransactionLogValue v1's tagged fields:
    prev_producer_id: int = -1  # the producer id before the last Empty/CompleteX transition (a rotation's old id)
    next_producer_id: int = -1  # PrepareX of an exhausted epoch: the id CompleteX moves to (with epoch 0)
    client_tv: int = 0  # the transaction version of the client's last Add/EndTxn (2: Produce v12 / EndTxn v5)

    def value(self, version: int = 1, prev_producer_id: int | None = None) -> TxnLogValue:
        """The record of this state. ``prev_producer_id``: the id before this transition (Kafka writes the
        transition's previous id in every v1 record: the current id unless the id rotates)."""
        parts: dict[str, list[int]] = {}
        for tp in sorted(self.partitions):
            parts.setdefault(tp.topic, []).append(tp.partition)
        if version == 0:  # v0 has no tagged fields (Kafka at transaction.version 0)
            return TxnLogValue(self.producer_id, self.epoch, self.timeout_ms, self.state, parts or None,
                               self.last_update_ms, self.start_ms)
        return TxnLogValue(self.producer_id, self.epoch, self.timeout_ms, self.state, parts or None,
                           self.last_update_ms, self.start_ms,
                           prev_producer_id=self.producer_id if prev_producer_id is None else prev_producer_id,
                           next_producer_id=self.next_producer_id, client_tv=self.client_tv)

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]


class _EndReq:
    """One EndTxn waiting for (or in) a step of ``TransactionCoordinator._end_batch``."""

    __slots__ = ("txn_id", "pid", "epoch", "commit", "client_tv", "done", "error", "result", "want", "partitions",
                 "marker")

    def __init__(self, txn_id, pid, epoch, commit, client_tv):
        self.txn_id, self.pid, self.epoch, self.commit, self.client_tv = txn_id, pid, epoch, commit, client_tv
        self.done = False
        self.error = None
        self.result = None
        self.want = -1
        self.partitions = []
        self.marker = None


class _Behind:
    """The ends of one step of ``_end_batch`` whose markers are appended, waiting for their partitions' fsyncs
    before their CompleteX records are written (by the background thread, or by ``_settle``)."""

    __slots__ = ("reqs", "logs", "synced")

    def __init__(self, reqs, logs):
        self.reqs = reqs  # _EndReq: txn_id, want (PrepareX state), marker (pid, epoch)
        self.logs = logs  # the Logs holding their markers
        self.synced = False


class ProducerIds:
    """Producer ids of one data dir, for idempotent and transactional producers of every process (the broker's and
    embedded ones): handed out in blocks of 1000 from ``.kafkalog-broker/producer-ids`` (the next free id, written and
    fsynced under a file lock before a block is used), so no id is given twice, across processes and restarts."""

    BLOCK = 1000

    def __init__(self, path):
        self.path = path / ".kafkalog-broker" / "producer-ids"
        self._lock = threading.Lock()
        self._next = 0
        self._limit = 0

    def next(self) -> int:
        with self._lock:
            if self._next >= self._limit:
                make_durable_dir(self.path.parent)
                flock = FileLock(self.path.with_name("producer-ids.lock"))
                flock.acquire(what="allocate producer ids")
                try:
                    try:
                        start = int(self.path.read_text())
                    except (OSError, ValueError):
                        start = 1
                    atomic_write(self.path, str(start + self.BLOCK).encode())
                finally:
                    flock.close()
                self._next, self._limit = start, start + self.BLOCK
            pid = self._next
            self._next += 1
            return pid


class TransactionCoordinator:
    """The coordinator of one data dir (``LogStore.transactions``), shared by the broker and embedded producers.

    Thread and process safe: each call takes the coordinator's lock (a thread lock, and a file lock when the store is
    shared by processes) and first takes in what other processes wrote to ``__transaction_state``; the log is the
    one state every process sees. ``logs(topic, partition)`` returns a partition's Log; ``offsets_partition(group)``
    names the ``__consumer_offsets`` partition of a group; ``new_producer_id()`` hands out producer ids."""

    def __init__(self, store, new_producer_id=None, logs=None, offsets_partition=None, *,
                 max_timeout_ms: int | None = None, coordinator_epoch: int = 0):
        self.store = store
        self.new_producer_id = new_producer_id or store.producer_ids.next
        self.logs = logs or store.log
        self.offsets_partition = offsets_partition or (
            lambda group: TopicPartition("__consumer_offsets", store.offsets.partition_for(group)))
        if max_timeout_ms is None:
            try:
                max_timeout_ms = int(store.config.get("transaction.max.timeout.ms", 900_000))
            except (KeyError, TypeError, ValueError):
                max_timeout_ms = 900_000
        self.max_timeout_ms = max_timeout_ms
        try:
            self.id_expiration_ms = int(store.config.get("transactional.id.expiration.ms", 604_800_000))
        except (KeyError, TypeError, ValueError):
            self.id_expiration_ms = 604_800_000
        try:
            # the transaction.version feature's finalized level: 1 (and 2) write TransactionLogValue v1, as Kafka
            self.transaction_version = int(store.config.get("transaction.version", 2))
        except (KeyError, TypeError, ValueError):
            self.transaction_version = 2
        self.coordinator_epoch = coordinator_epoch
        self.txns: dict[str, TxnMeta] = {}
        self._log = None
        self._next = 0  # every record of __transaction_state below it is taken in
        self._tlock = threading.RLock()
        self._depth = 0
        self._need_sync = False
        self._completing: set[str] = set()  # ids whose markers this process is writing now (EndTxn, locks released)
        self._end_cv = threading.Condition(threading.Lock())  # EndTxns waiting for a step of _end_batch
        self._end_pending: list[_EndReq] = []
        self._end_running = False
        self._pool = None  # threads fsyncing several partitions' markers side by side
        # ends whose markers are appended but not yet fsynced (their CompleteX waits for that): txn id -> the step
        # (_Behind) that holds it; finished by a background thread, or by the next call for the id (_settle)
        self._behind: dict[str, _Behind] = {}
        # exclusive store: ids completed in memory (the next transaction began) while their markers' fsyncs still
        # run: their records (CompleteX first) wait here, appended in order once those fsyncs are done
        self._deferred: dict[str, list] = {}
        # transactions v0: the log end after an id's CompleteX, until its next AddPartitionsToTxn
        self._complete_at: dict[str, int] = {}
        self._behind_pool = None
        self._flock = FileLock(store.path / ".kafkalog-txn-coordinator.lock") \
            if getattr(store, "mode", "shared") != "exclusive" else None
        with self._locked(catch_up=False):
            self._load()

    @contextlib.contextmanager
    def _locked(self, catch_up: bool = True):
        """The coordinator's locks; records appended under them with ``_write(sync=True)`` are fsynced right after
        they are released (so concurrent calls share one fsync) and before the call returns."""
        with self._tlock:
            if self._depth:  # a call from inside a locked one
                yield
                return
            if self._flock is not None:
                self._flock.acquire(what="transaction coordinator")
            self._depth += 1
            try:
                if catch_up:
                    self._catch_up()
                yield
            finally:
                self._depth -= 1
                need_sync, self._need_sync = self._need_sync, False
                if self._flock is not None:
                    self._flock.release()
        if need_sync:
            self._txn_log().sync()

    def locked(self):
        """The coordinator's locks, taken in for a caller's step that must not interleave with another process's
        change (the embedded producer checks its transaction and appends its batch under them)."""
        return self._locked()

    def close(self) -> None:
        if self._behind_pool is not None:
            self._behind_pool.shutdown(wait=True)
        if self._behind:
            try:
                self.settle()
            except (KafkaError, OSError) as e:  # left decided: the next load completes them
                _log.warning("completing transactions on close: %s", e)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self._flock is not None:
            self._flock.close()

    # -- the log ----------------------------------------------------------------------------------------------

    def _txn_log(self):
        if self._log is None or self._log.closed:
            try:
                self.store.partitions_for(TXN_TOPIC)
            except UnknownTopicOrPartitionError:
                try:
                    self.store.create_topic(TXN_TOPIC, 1, TXN_TOPIC_CONFIG)
                except TopicAlreadyExistsError:
                    pass
            self._log = self.logs(TXN_TOPIC, 0)
        return self._log

    def _catch_up(self) -> None:
        """Take in the records appended to __transaction_state since the last look (by any process)."""
        if self._log is None:
            try:
                self.store.partitions_for(TXN_TOPIC)
            except UnknownTopicOrPartitionError:
                return  # no transaction ever
        lg = self._txn_log()
        end = lg.log_end_offset
        if end <= self._next:
            return
        for rec in lg.records(max(self._next, lg.log_start_offset), end):
            self._apply(rec)
        self._next = end

    def _apply(self, rec) -> None:
        if rec.key is None:
            return
        try:
            txn_id = decode_txn_log_key(rec.key)
            if txn_id is None:
                return
            if rec.value is None:
                self.txns.pop(txn_id, None)
                return
            v = decode_txn_log_value(rec.value)
        except (KafkaError, ValueError) as e:
            _log.warning("%s: skipping the record at offset %d: %s", TXN_TOPIC, rec.offset, e)
            return
        if v is None:
            _log.warning("%s: skipping the record at offset %d: unknown value version", TXN_TOPIC, rec.offset)
            return
        old = self.txns.get(txn_id)
        self.txns[txn_id] = TxnMeta(
            txn_id, v.producer_id, v.producer_epoch, v.timeout_ms, v.state,
            {TopicPartition(t, p) for t, ps in (v.partitions or {}).items() for p in ps},
            v.last_update_ms, v.start_ms,
            old.last_epoch if old is not None and old.producer_id == v.producer_id else -1,
            v.prev_producer_id, v.next_producer_id, v.client_tv)

    def _load(self) -> None:
        self._catch_up()
        # a transaction whose fate was decided (PrepareX durable) but whose markers may not all be written
        for meta in list(self.txns.values()):
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                _log.info("transactional id %r: completing its %s after a restart", meta.txn_id, meta.state_name)
                self._complete(meta, recovered=True)
        sweep = self.store.path / TXN_SWEEP_FILE
        if sweep.exists():  # an unclean shutdown (LogStore): the hanging transactions a power loss can leave
            self._abort_hanging()
            sweep.unlink()
            fsync_dir(self.store.path)

    def _abort_hanging(self) -> None:
        """The load's sweep for hanging transactions (locks held, every PrepareX completed), after an unclean
        shutdown (the store's first opener then leaves ``TXN_SWEEP_FILE``; removed once a sweep is done).
        AddPartitionsToTxn and AddOffsetsToTxn records are not fsynced before their answer, so a power loss can keep
        a partition's transactional batches and lose the record that put the partition in their transaction.
        Nothing would ever end that transaction there (its LSO stuck). A partition holding an open transaction of a
        producer whose transaction here does not hold the partition gets it aborted: the producer's transaction
        (with that partition added) is aborted with its epoch bumped, as one that timed out (the producer died with
        the power; were it alive it is fenced); a producer id the coordinator does not know at all gets an ABORT
        marker of its epoch there.

        Cheap: only partitions kafkalog ever wrote a transactional batch to are opened (their directory holds the
        mark a partition gets, fsynced, before its first one: txnstate.py), and each one's open transactions come
        from its producer state (the newest producer snapshot and the records after it), not from a scan of the
        log; and only after an unclean shutdown, when the store's own recovery looks at every partition too. No
        race with a live producer of another process: its AddPartitionsToTxn record is appended under these locks
        before its batches, so a batch seen here has its record taken in."""
        found: dict[int, set] = {}
        epochs: dict[tuple, int] = {}
        root = self.store.path
        by_pid = {m.producer_id: m for m in self.txns.values()}  # the scan changes nothing: one index for it
        for topic in self.store.topics():
            if topic == TXN_TOPIC:
                continue
            try:
                n = self.store.partitions_for(topic)
            except UnknownTopicOrPartitionError:
                continue
            for p in range(n):
                if not os.path.exists(os.path.join(root, f"{topic}-{p}", TXN_MARKER_FILE)):
                    continue  # never a transactional batch here
                try:
                    producers = self.logs(topic, p).transactional_producers()
                except (UnknownTopicOrPartitionError, LogClosedError):
                    continue
                tp = TopicPartition(topic, p)
                for pid, (epoch, _coord_epoch, first) in producers.items():
                    if first < 0:
                        continue
                    meta = by_pid.get(pid)
                    if meta is None or meta.state not in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT) \
                            or tp not in meta.partitions:
                        found.setdefault(pid, set()).add(tp)
                        epochs[(pid, tp)] = epoch
        now = _now_ms()
        for pid, tps in sorted(found.items()):
            meta = self._by_pid(pid)
            names = sorted(f"{tp.topic}-{tp.partition}" for tp in tps)
            if meta is None:
                _log.warning("producer %d: aborting its open transaction on %s: no transactional id holds it", pid,
                             names)
                failed = self._write_markers_many([(pid, max(epochs[(pid, tp)], 0), False, [tp])
                                                   for tp in sorted(tps)])
                if failed:
                    raise next(iter(failed.values()))
                continue
            _log.warning("transactional id %r: aborting its transaction on %s, which the coordinator lost (a power "
                         "loss before its AddPartitionsToTxn record was fsynced)", meta.txn_id, names)
            self._settle(meta.txn_id)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                self._complete(meta, recovered=True)  # decided: its own partitions first, then the lost ones aborted
            if meta.state != ONGOING:
                meta.partitions = set()
                meta.start_ms = now
            meta.partitions |= tps
            self._abort_fenced(meta, now)

    def _by_pid(self, pid: int) -> TxnMeta | None:
        for m in self.txns.values():
            if m.producer_id == pid:
                return m
        return None

    def _write(self, meta: TxnMeta, sync: bool = True, prev_producer_id: int | None = None) -> None:
        """Append ``meta``'s state to __transaction_state (and fsync it before anyone acts on it)."""
        self._write_many([(meta, prev_producer_id)])
        if sync:
            self._need_sync = True  # fsynced as the locks are released (_locked), before the call returns

    def _write_many(self, metas) -> None:
        """Append the states of ``metas`` (pairs of a TxnMeta and the previous producer id of its transition, or
        None) to __transaction_state in one batch, not fsynced (the caller fsyncs when it must). The record of an
        id whose CompleteX waits for its markers' fsyncs (``_deferred``) waits behind it."""
        version = 1 if self.transaction_version >= 1 else 0
        values, keys, stamps = [], [], []
        for m, prev in metas:
            value = encode_txn_log_value(m.value(version, prev), version)
            later = self._deferred.get(m.txn_id)
            if later is not None:
                later.append((value, m.last_update_ms))
                continue
            values.append(value)
            keys.append(encode_txn_log_key(m.txn_id))
            stamps.append(m.last_update_ms)
        if values:
            self._append(values, keys, stamps)

    def _append(self, values, keys, stamps) -> None:
        offset = self._txn_log().append_batch(values, keys, stamps)
        if offset == self._next:
            self._next = offset + len(values)  # our own records: the state already holds them

    # -- the APIs ---------------------------------------------------------------------------------------------

    @_synchronized
    def init_producer_id(self, txn_id: str, timeout_ms: int, expected_pid: int = -1,
                         expected_epoch: int = -1) -> tuple[int, int]:
        """InitProducerId with a transactional id: (producer id, epoch). Raises the Kafka error otherwise."""
        if txn_id == "":
            raise InvalidRequestError("the transactional id must not be empty")
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} is not in (0, transaction.max.timeout.ms="
                f"{self.max_timeout_ms}]")
        now = _now_ms()
        self._settle(txn_id)
        meta = self.txns.get(txn_id)
        if meta is None:
            pid = self.new_producer_id()
            meta = TxnMeta(txn_id, pid, 0, timeout_ms, EMPTY, set(), now, -1, prev_producer_id=pid)
            self._write(meta)
            self.txns[txn_id] = meta
            return meta.producer_id, meta.epoch
        if expected_pid >= 0:  # KIP-360: a producer re-initializing asks for a bump of the epoch it has
            if expected_pid != meta.producer_id:
                raise ProducerFencedError(f"transactional id {txn_id!r}: producer {expected_pid} is not the "
                                          f"current one ({meta.producer_id})")
            if expected_epoch != meta.epoch:
                if expected_epoch == meta.last_epoch:
                    return meta.producer_id, meta.epoch  # a retry of the bump that already happened
                raise ProducerFencedError(f"transactional id {txn_id!r}: epoch {expected_epoch} is not the "
                                          f"current one ({meta.epoch})")
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and meta.txn_id not in self._completing \
                and meta.last_update_ms + _ORPHAN_PREPARE_MS <= now:
            self._complete(meta, recovered=True)  # an orphan decision (its process died writing markers): finish it
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise ConcurrentTransactionsError(f"transactional id {txn_id!r}: the last transaction is completing")
        if meta.state == ONGOING:
            # a new instance takes the id over: the open transaction is aborted with a bumped epoch (fencing the
            # old producer); the caller retries and gets the next epoch
            self._abort_fenced(meta, now)
            raise ConcurrentTransactionsError(f"transactional id {txn_id!r}: its open transaction was aborted; "
                                              f"retry")
        meta.last_epoch = meta.epoch
        old_pid = meta.producer_id
        if meta.epoch >= _MAX_EPOCH:
            meta.producer_id, meta.epoch, meta.last_epoch = self.new_producer_id(), 0, -1
        else:
            meta.epoch += 1
        meta.timeout_ms = timeout_ms
        meta.state = EMPTY
        meta.partitions = set()
        meta.start_ms = -1
        meta.last_update_ms = now
        meta.prev_producer_id, meta.next_producer_id, meta.client_tv = old_pid, -1, 0
        self._write(meta, prev_producer_id=old_pid)
        return meta.producer_id, meta.epoch

    def _check(self, txn_id: str, pid: int, epoch: int) -> TxnMeta:
        if not txn_id:
            raise InvalidRequestError("the transactional id must not be empty")
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != pid:
            raise InvalidProducerIdMappingError(
                f"transactional id {txn_id!r} is not held by producer {pid}"
                + ("" if meta is None else f" (it is held by {meta.producer_id})"))
        if epoch != meta.epoch:
            raise ProducerFencedError(f"transactional id {txn_id!r}: producer {pid} epoch {epoch} was fenced "
                                      f"by epoch {meta.epoch}")
        return meta

    @_synchronized
    def add_partitions(self, txn_id: str, pid: int, epoch: int, partitions, client_tv: int = 0) -> None:
        """AddPartitionsToTxn (and AddOffsetsToTxn through ``add_offsets``): the transaction holds them.
        ``client_tv`` 2: a transactions-v2 add (Produce v12 / TxnOffsetCommit v5's implicit add, AddPartitionsToTxn
        v4+ from a leader), recorded with the transaction as Kafka records it."""
        meta = self._add(txn_id, pid, epoch, partitions, client_tv)
        if meta is not None:
            self._write(meta, sync=False)  # see add_many

    def add_many(self, adds) -> list:
        """Several AddPartitionsToTxn in one step (the broker gathers the ones that arrive while a step runs):
        ``adds`` are ``(txn_id, pid, epoch, partitions, client_tv)``; their records in one append and one fsync
        (before this returns, as for one add); returns, per add, None or the Kafka error that refused it."""
        out: list = []
        with self._locked():
            changed: dict[int, TxnMeta] = {}
            for txn_id, pid, epoch, partitions, client_tv in adds:
                try:
                    meta = self._add(txn_id, pid, epoch, partitions, client_tv)
                except KafkaError as e:
                    out.append(e)
                    continue
                out.append(None)
                if meta is not None:
                    changed[id(meta)] = meta
            if changed:
                # not fsynced: the PrepareX fsync of the transaction's end covers them (same file, appended
                # before it); a power loss before that loses them with the producer, and the load's sweep
                # (_abort_hanging) aborts the batches a partition holds of a transaction the coordinator lost
                self._write_many([(m, None) for m in changed.values()])
        return out

    def _add(self, txn_id: str, pid: int, epoch: int, partitions, client_tv: int = 0) -> TxnMeta | None:
        """AddPartitionsToTxn's change (locks held): the TxnMeta to write, or None when nothing changed."""
        self._settle(txn_id, defer=True)
        end = self._complete_at.pop(txn_id, None)
        if end is not None and self._txn_log().recovery_point < end:
            # transactions v0: the last transaction's CompleteX is durable before this one's batches can be
            # (a PrepareX left alone would end this transaction with the last one's markers: _complete)
            self._need_sync = True
        meta = self._check(txn_id, pid, epoch)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise ConcurrentTransactionsError(f"transactional id {txn_id!r}: the last transaction is completing")
        if meta.state == PREPARE_EPOCH_FENCE or meta.state == DEAD:
            raise InvalidTxnStateError(f"transactional id {txn_id!r} is {meta.state_name}")
        new = set(partitions)
        if meta.state == ONGOING and new <= meta.partitions:
            return
        now = _now_ms()
        if meta.state != ONGOING:
            meta.start_ms = now
            meta.partitions = set()
        meta.partitions |= new
        meta.state = ONGOING
        meta.last_update_ms = now
        meta.client_tv = client_tv
        return meta

    @_synchronized
    def add_offsets(self, txn_id: str, pid: int, epoch: int, group: str, client_tv: int = 0) -> None:
        self.add_partitions(txn_id, pid, epoch, [self.offsets_partition(group)], client_tv)

    def in_transaction(self, txn_id: str, pid: int, epoch: int, tp: TopicPartition) -> bool:
        """Whether ``tp`` is already in the open transaction of this producer (no lock: the fast path of Produce
        v12's implicit add; anything else goes through ``add_partitions``)."""
        meta = self.txns.get(txn_id)
        return meta is not None and meta.producer_id == pid and meta.epoch == epoch and meta.state == ONGOING \
            and tp in meta.partitions

    def _end_check(self, txn_id: str, pid: int, epoch: int, commit: bool, client_tv: int):
        """EndTxn's checks (Kafka 4.4's TransactionCoordinator.endTransaction): "prepare" when the transaction is
        to be decided now, "retry" when the request repeats an EndTxn already done (answered with the current
        producer id and epoch), else the Kafka error raised."""
        if not txn_id:
            raise InvalidRequestError("the transactional id must not be empty")
        self._settle(txn_id)
        meta = self.txns.get(txn_id)
        what = "commit" if commit else "abort"
        if meta is None:
            raise InvalidProducerIdMappingError(f"transactional id {txn_id!r} is not held by producer {pid}")
        v2 = meta.client_tv >= 2  # the transaction's own version decides how a retry looks (Kafka: the stored one)
        retry_overflow = v2 and meta.prev_producer_id == pid and epoch == _MAX_EPOCH and meta.epoch == 0
        retry_bump = v2 and meta.epoch == epoch + 1
        if meta.producer_id != pid and not retry_overflow:
            raise InvalidProducerIdMappingError(f"transactional id {txn_id!r} is not held by producer {pid} (it is "
                                                f"held by {meta.producer_id})")
        if v2:
            if meta.state in (ONGOING, EMPTY, DEAD, PREPARE_EPOCH_FENCE):
                valid = epoch == meta.epoch
            elif meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                valid = retry_bump
            else:
                valid = retry_bump or retry_overflow or epoch == meta.epoch
        else:
            valid = epoch == meta.epoch
        if not valid:
            raise ProducerFencedError(f"transactional id {txn_id!r}: producer {pid} epoch {epoch} was fenced by "
                                      f"epoch {meta.epoch}")
        retry = retry_bump or retry_overflow
        invalid = InvalidTxnStateError(f"transactional id {txn_id!r}: cannot {what} in state {meta.state_name}")
        if meta.state == ONGOING:
            return meta, "prepare"
        if meta.state == COMPLETE_COMMIT:
            if commit:
                if retry or not v2:
                    return meta, "retry"
                raise invalid
            if retry:
                raise invalid
            if client_tv >= 2:
                return meta, "prepare"  # a new, empty transaction aborted (transactions v2)
            raise invalid
        if meta.state == COMPLETE_ABORT:
            if commit:
                raise invalid
            if retry or not v2 and client_tv < 2:
                return meta, "retry"
            return meta, "prepare"  # a new, empty abort
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            if (meta.state == PREPARE_COMMIT) == commit:
                raise ConcurrentTransactionsError(f"transactional id {txn_id!r}: the transaction is completing")
            raise invalid
        if meta.state == EMPTY and not commit and client_tv >= 2:
            return meta, "prepare"  # transactions v2: abort with nothing added
        raise invalid

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool, client_tv: int = 0) -> tuple[int, int]:
        """EndTxn: decide the transaction (PrepareX, durable), write its markers (each partition fsynced), complete
        it; returns the producer id and epoch the producer goes on with (EndTxn v5's answer). A request for this id
        meanwhile gets CONCURRENT_TRANSACTIONS (PrepareX), as from Kafka.

        EndTxns of this process are ended together (group commit): the calls that arrive while an end is under
        way wait, and the next of them ends them all in one step (``_end_batch``): their PrepareX records in one
        append and ONE fsync of __transaction_state, their markers appended, each partition fsynced once for
        every marker of the step (the partitions' fsyncs run side by side), their CompleteX records in one append.

        Transactions v2 (``client_tv`` 2, EndTxn v5; KIP-890 part 2): PrepareX carries the epoch bumped by one,
        the markers are written with it (a batch of the old epoch is then refused by every partition of the
        transaction), and the producer goes on with it; at an exhausted epoch (32766) PrepareX names a new
        producer id (NextProducerId), which CompleteX takes with epoch 0."""
        req = _EndReq(txn_id, pid, epoch, commit, client_tv)
        with self._end_cv:
            self._end_pending.append(req)
            while not req.done and self._end_running:
                self._end_cv.wait()
            if not req.done:  # this thread ends every EndTxn waiting now (its own among them)
                batch, self._end_pending = self._end_pending, []
                self._end_running = True
            else:
                batch = None
        if batch is not None:
            exc = None
            try:
                self._end_batch(batch)
            except BaseException as e:  # noqa: BLE001  (raised to every EndTxn of the step: a failing disk, a failpoint)
                exc = e
            finally:
                with self._end_cv:
                    for r in batch:
                        if not r.done:
                            r.done = True
                            r.error = r.error or exc or KafkaError("the transaction's end was interrupted")
                    self._end_running = False
                    self._end_cv.notify_all()
        if req.error is not None:
            raise req.error
        return req.result

    def end_many(self, ends) -> list:
        """Several EndTxns ended in one step (the broker gathers the ones that arrive while a step runs: one worker
        thread per step, none waiting): ``ends`` are ``(txn_id, pid, epoch, commit, client_tv)``; returns, per end,
        the producer id and epoch it goes on with, or the Kafka error that refused or stopped it. Anything else (a
        failing disk) is raised."""
        batch = [_EndReq(*e) for e in ends]
        self._end_batch(batch)
        return [r.error if r.error is not None else r.result for r in batch]

    def _end_batch(self, batch: list[_EndReq]) -> None:
        """One step of ``end_txn`` for several EndTxns (the order of the single end, for all at once)."""
        prepared: list[_EndReq] = []
        with self._locked():
            metas = []
            for r in batch:
                try:
                    meta, step = self._end_check(r.txn_id, r.pid, r.epoch, r.commit, r.client_tv)
                except KafkaError as e:
                    r.error, r.done = e, True
                    continue
                if step == "retry":
                    r.result, r.done = (meta.producer_id, meta.epoch), True
                    continue
                now = _now_ms()
                if meta.state != ONGOING:  # transactions v2's empty abort: no partition, started now
                    meta.partitions = set()
                    meta.start_ms = now
                if r.client_tv >= 2:
                    if meta.epoch >= _MAX_EPOCH:
                        meta.next_producer_id = self.new_producer_id()
                    meta.last_epoch = meta.epoch
                    meta.epoch += 1  # at most 32767 (Short.MAX_VALUE): the producer never writes with it
                meta.client_tv = r.client_tv
                meta.state = PREPARE_COMMIT if r.commit else PREPARE_ABORT
                meta.last_update_ms = now
                r.want = meta.state
                r.partitions = sorted(meta.partitions)
                r.marker = (meta.producer_id, meta.epoch)
                # what the producer goes on with (Kafka answers it from PrepareX: CompleteX's id and epoch)
                r.result = (meta.next_producer_id, 0) if meta.client_tv >= 2 and meta.next_producer_id >= 0 else \
                    (meta.producer_id, meta.epoch)
                self._completing.add(r.txn_id)
                metas.append((meta, None))
                prepared.append(r)
            if metas:
                self._write_many(metas)
        if not prepared:
            return
        behind = None
        try:
            # the fate of the transactions, fsynced (with whatever else was appended meanwhile)
            self._txn_log().sync()
            failpoints.hit("txn:after-prepare")
            failed, to_sync = self._append_markers_many(
                [(r.marker[0], r.marker[1], r.commit, r.partitions) for r in prepared])
            ok = []
            for i, r in enumerate(prepared):
                if i in failed:
                    r.error = failed[i]
                else:
                    ok.append(r)
            if ok:
                # decided (PrepareX durable) and visible (markers appended): the answer goes now; the markers'
                # fsyncs and then CompleteX happen behind it (a power loss before them leaves PrepareX, which the
                # next load completes: markers again, idempotent)
                mine = {i for i, r in enumerate(prepared) if i not in failed}
                logs = [lg for lg, ids in to_sync.values() if any(i in mine for i in ids)]
                behind = _Behind(ok, logs)
                with self._tlock:
                    for r in ok:
                        self._behind[r.txn_id] = behind
            for r in prepared:
                r.done = True
        finally:
            for r in prepared:
                if behind is None or r not in behind.reqs:
                    self._completing.discard(r.txn_id)
        if behind is not None:
            self._behind_submit(behind)

    # -- the markers' fsyncs and CompleteX, behind the answer -------------------------------------------------

    def _behind_submit(self, behind: _Behind) -> None:
        with self._tlock:
            if self._behind_pool is None:
                from concurrent.futures import ThreadPoolExecutor
                self._behind_pool = ThreadPoolExecutor(1, thread_name_prefix="kafkalog-txn-complete")
            pool = self._behind_pool
        try:
            pool.submit(self._behind_run, behind)
        except RuntimeError:  # closed meanwhile: close() settles what is left
            pass

    def _behind_run(self, behind: _Behind) -> None:
        """The background step: fsync the markers' partitions (outside the locks), then write CompleteX."""
        try:
            err = self._sync_logs(behind.logs)
            with self._locked():
                self._finish_behind(behind, err)
        except BaseException as e:  # noqa: BLE001  (a closed store, a failpoint: PrepareX stays; load completes it)
            _log.warning("completing transactions %s: %s", [r.txn_id for r in behind.reqs], e)

    def _sync_logs(self, logs):
        """fsync ``logs`` (side by side when there are several); the first error, or None."""
        return next((e for e in self._sync_each(logs) if e is not None), None)

    def _sync_each(self, logs) -> list:
        """fsync ``logs``, side by side when there are several: each one's error, or None."""
        if len(logs) <= 1:
            return [self._sync_quietly(lg) for lg in logs]
        return list(self._sync_pool().map(self._sync_quietly, logs))

    def _finish_behind(self, behind: _Behind, err=None) -> None:
        """(locks held) The markers of ``behind`` are fsynced (``err`` None): write the CompleteX of every end of it
        not yet completed (and the records deferred behind it). With ``err`` the ends stay PrepareX (an orphan
        decision, completed by ``expire`` or the next load), or, completed in memory already, stay deferred."""
        mine = [r for r in behind.reqs if self._behind.get(r.txn_id) is behind]
        if not mine:
            return
        if err is not None:
            _log.warning("transaction markers not fsynced (%s): %s stay decided, completed later", err,
                         [r.txn_id for r in mine])
            for r in mine:
                if r.txn_id not in self._deferred:
                    del self._behind[r.txn_id]
                    self._completing.discard(r.txn_id)
            return
        behind.synced = True
        done, later = [], []
        for r in mine:
            recs = self._deferred.get(r.txn_id)
            if recs is not None:
                later.append((r.txn_id, recs))
                continue
            meta = self.txns.get(r.txn_id)
            if meta is not None and meta.state == r.want and (meta.producer_id, meta.epoch) == r.marker:
                done.append((meta, self._completed(meta)))
        if done or later:
            failpoints.hit("txn:before-complete")
        if done:
            # not fsynced: lost, they leave PrepareX, which the next start completes again (markers are
            # idempotent); transactions v0's are fsynced soon (at the release of the locks), as their next
            # transaction needs them durable (_complete)
            self._write_many(done)
            end = self._txn_log().log_end_offset
            for meta, _ in done:
                if meta.client_tv < 2:
                    self._complete_at[meta.txn_id] = end
                    self._need_sync = True
        if later:
            values, keys, stamps = [], [], []
            for txn_id, recs in later:
                key = encode_txn_log_key(txn_id)
                for value, ts in recs:
                    values.append(value)
                    keys.append(key)
                    stamps.append(ts)
            self._append(values, keys, stamps)
            for txn_id, _ in later:
                del self._deferred[txn_id]
        for r in mine:
            del self._behind[r.txn_id]
            self._completing.discard(r.txn_id)

    def _settle(self, txn_id: str, defer: bool = False) -> None:
        """(locks held) Before a call acts on ``txn_id``: an end of it whose markers' fsyncs run behind is finished
        here first (its markers fsynced, its CompleteX written), so its records stay in order. ``defer`` (the next
        transaction's AddPartitionsToTxn, in an exclusive store: no other process reads the state) completes it in
        memory only, its CompleteX and what follows appended once the fsyncs are done (usually by the next
        transaction's own data fsync of the same partitions, before its PrepareX: ``_end_check`` settles fully)."""
        behind = self._behind.get(txn_id)
        if behind is None or txn_id in self._deferred and defer:
            return
        if defer and self._flock is None and not behind.synced:
            r = next(r for r in behind.reqs if r.txn_id == txn_id)
            meta = self.txns.get(txn_id)
            if meta is not None and meta.state == r.want and (meta.producer_id, meta.epoch) == r.marker \
                    and meta.client_tv >= 2:  # v2 only: v0's CompleteX is durable before the next transaction (_add)
                version = 1 if self.transaction_version >= 1 else 0
                prev = self._completed(meta)
                self._deferred[txn_id] = [(encode_txn_log_value(meta.value(version, prev), version),
                                           meta.last_update_ms)]
                return
        err = self._sync_logs(behind.logs)
        self._finish_behind(behind, err)
        if err is not None:
            raise err

    def wait_behind(self) -> None:
        """Block until the background steps submitted so far have run (tests)."""
        with self._tlock:
            pool = self._behind_pool
        if pool is not None:
            with contextlib.suppress(RuntimeError):
                pool.submit(int).result()

    def settle(self) -> None:
        """Finish every end whose markers' fsyncs run behind (close(), tests): markers fsynced, CompleteX written."""
        with self._locked():
            self._settle_all()

    def _settle_all(self) -> None:
        """(locks held) ``_settle`` for every id with an end behind its answer; an id whose fsync fails stays
        decided (completed later)."""
        for txn_id in list(self._behind):
            with contextlib.suppress(KafkaError):
                self._settle(txn_id)

    def check_produce(self, txn_id: str, pid: int, epoch: int, tp: TopicPartition) -> None:
        """Before a transactional batch is appended (Kafka's verification, KIP-890 part 1). A batch that matches
        what this process knows is accepted without the locks (the broker calls this for every produce on its
        loop thread): a producer fenced meanwhile by another process is refused by the partition itself, whose
        ABORT marker carries the bumped epoch (txnstate.py). Anything else is checked again under the locks,
        after taking in other processes' changes."""
        meta = self.txns.get(txn_id)
        if meta is not None and meta.producer_id == pid and meta.epoch == epoch and meta.state == ONGOING \
                and tp in meta.partitions:
            return
        self._check_produce(txn_id, pid, epoch, tp)

    @_synchronized
    def _check_produce(self, txn_id: str, pid: int, epoch: int, tp: TopicPartition) -> None:
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != pid:
            raise InvalidProducerIdMappingError(f"transactional id {txn_id!r} is not held by producer {pid}")
        if epoch < meta.epoch:
            raise InvalidProducerEpochError(f"producer {pid} epoch {epoch} is older than {meta.epoch}")
        if epoch > meta.epoch or meta.state != ONGOING or tp not in meta.partitions:
            raise InvalidTxnStateError(f"the batch for {tp.topic}-{tp.partition} is not part of an ongoing "
                                       f"transaction of {txn_id!r}")

    @_synchronized
    def check_offsets(self, txn_id: str, pid: int, epoch: int, group: str) -> None:
        """Before TxnOffsetCommit: the group's offsets partition must be in the open transaction."""
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != pid:
            raise InvalidProducerIdMappingError(f"transactional id {txn_id!r} is not held by producer {pid}")
        if epoch != meta.epoch:
            raise ProducerFencedError(f"producer {pid} epoch {epoch} was fenced by epoch {meta.epoch}")
        if meta.state != ONGOING or self.offsets_partition(group) not in meta.partitions:
            raise InvalidTxnStateError(f"offsets of group {group!r} were not added to the transaction of "
                                       f"{txn_id!r} (AddOffsetsToTxn first)")

    # -- completion and timeouts ------------------------------------------------------------------------------

    def _complete(self, meta: TxnMeta, recovered: bool = False) -> None:
        """PrepareX is durable: write the markers everywhere, fsync them, then CompleteX (locks held).

        A PrepareX found without its CompleteX (a load, an orphan) may be one whose end returned and whose producer
        went on: CompleteX is not fsynced, and neither are the next transaction's AddPartitionsToTxn records. Its
        markers must not end that next transaction where its batches are durable. Transactions v2: PrepareX's epoch
        is one above the transaction's batches, and the next transaction writes with it; a partition whose producer
        state holds that epoch has the marker already (the next batches come after it in the file, so they are
        durable only with it), and gets none. Transactions v0 keep the epoch: there the next transaction's first
        AddPartitionsToTxn makes CompleteX durable first (``_add``). ``recovered``: such a PrepareX, found (not one
        ``_abort_fenced`` just wrote: at an exhausted epoch its epoch is the batches' own)."""
        parts = sorted(meta.partitions)
        if recovered and meta.client_tv >= 2:
            parts = [tp for tp in parts if not self._has_epoch(meta.producer_id, meta.epoch, tp)]
        failed = self._write_markers_many([(meta.producer_id, meta.epoch, meta.state == PREPARE_COMMIT, parts)])
        if failed:
            raise failed[0]
        self._mark_complete(meta)

    def _has_epoch(self, pid: int, epoch: int, tp: TopicPartition) -> bool:
        try:
            lg = self.logs(tp.topic, tp.partition)
        except UnknownTopicOrPartitionError:
            return False
        return lg.transactional_producers().get(pid, (-1,))[0] >= epoch

    def _write_markers_many(self, ends) -> dict:
        """The markers of several ends (``(pid, epoch, commit, partitions)`` each): every marker appended, then
        each partition fsynced once for all of its markers (side by side when there are several), before any
        CompleteX. Returns {index of an end: the error that stopped it} for the ends whose markers failed."""
        failed, to_sync = self._append_markers_many(ends)
        # before CompleteX: a marker lost to a power loss would leave the transaction open forever
        items = list(to_sync.values())
        for (_lg, ids), err in zip(items, self._sync_each([lg for lg, _ in items])):
            if err is not None:
                for i in ids:
                    failed.setdefault(i, err)
        return failed

    def _append_markers_many(self, ends) -> tuple[dict, dict]:
        """Append the markers of several ends (not fsynced): ({index of an end: the error that stopped it},
        {partition: (its Log, the indexes of the ends with a marker there)})."""
        failed: dict[int, BaseException] = {}
        to_sync: dict[TopicPartition, tuple] = {}  # partition -> (log, the ends with a marker there)
        for i, (pid, epoch, commit, partitions) in enumerate(ends):
            for tp in partitions:
                try:
                    lg = self.logs(tp.topic, tp.partition)
                except UnknownTopicOrPartitionError:
                    continue  # the topic was deleted with its records
                try:
                    lg.append_marker(pid, epoch, commit, self.coordinator_epoch)
                except InvalidProducerEpochError as e:
                    # a newer epoch already ended the producer's transaction there (Kafka's coordinator stops
                    # sending on INVALID_PRODUCER_EPOCH too: the transaction was superseded)
                    _log.warning("transaction marker not written: %s", e)
                    continue
                except KafkaError as e:
                    failed[i] = e
                    continue
                failpoints.hit("txn:after-marker")
                to_sync.setdefault(tp, (lg, []))[1].append(i)
        return failed, to_sync

    @staticmethod
    def _sync_quietly(lg):
        try:
            lg.sync()
        except KafkaError as e:
            return e
        return None

    def _sync_pool(self):
        with self._tlock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor
                self._pool = ThreadPoolExecutor(32, thread_name_prefix="kafkalog-txn-sync")
            return self._pool

    def _completed(self, meta: TxnMeta) -> int:
        """Move ``meta`` from PrepareX to CompleteX (in memory); returns the previous producer id of the
        transition, for its record."""
        meta.state = COMPLETE_COMMIT if meta.state == PREPARE_COMMIT else COMPLETE_ABORT
        meta.partitions = set()
        meta.last_update_ms = _now_ms()
        old_pid = meta.producer_id
        if meta.client_tv >= 2:
            meta.prev_producer_id = old_pid
            if meta.next_producer_id >= 0:  # the epoch was exhausted: the producer goes on with a new id
                meta.producer_id, meta.epoch = meta.next_producer_id, 0
            meta.next_producer_id = -1
        return old_pid

    def _mark_complete(self, meta: TxnMeta) -> None:
        failpoints.hit("txn:before-complete")
        old_pid = self._completed(meta)
        # not fsynced: lost, it leaves PrepareX, which the next start completes again (markers are idempotent)
        self._write(meta, sync=False, prev_producer_id=old_pid)

    def _abort_fenced(self, meta: TxnMeta, now: int) -> None:
        meta.last_epoch = meta.epoch
        if meta.epoch < _MAX_EPOCH:
            meta.epoch += 1
        meta.state = PREPARE_ABORT
        meta.last_update_ms = now
        self._write(meta)
        self._txn_log().sync()  # the abort is decided before any marker says so
        self._complete(meta)

    @_synchronized
    def expire(self, now_ms: int | None = None) -> int:
        """Abort every Ongoing transaction older than its timeout (its producer is fenced); returns how many. And
        forget every transactional id idle (Empty, CompleteCommit, CompleteAbort) for transactional.id.expiration.ms:
        a tombstone in __transaction_state (Kafka's Dead state is never written)."""
        now = _now_ms() if now_ms is None else now_ms
        n = 0
        self._settle_all()  # ends behind their answers: finished first (records in order)
        for meta in list(self.txns.values()):
            if meta.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and \
                    meta.last_update_ms + self.id_expiration_ms <= now:
                _log.info("transactional id %r: expired after %d ms without a transaction", meta.txn_id,
                          now - meta.last_update_ms)
                self._txn_log().append_batch([None], [encode_txn_log_key(meta.txn_id)], [_now_ms()])
                self._need_sync = True
                del self.txns[meta.txn_id]
                continue
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and meta.txn_id not in self._completing \
                    and meta.last_update_ms + _ORPHAN_PREPARE_MS <= now:
                # decided, but the process that decided it died before its markers were all written (another
                # process's coordinator: this one would have finished it): finish it here
                _log.info("transactional id %r: completing its %s, left by a process that stopped %d ms ago",
                          meta.txn_id, meta.state_name, now - meta.last_update_ms)
                self._complete(meta, recovered=True)
                continue
            if meta.state == ONGOING and meta.start_ms >= 0 and meta.start_ms + meta.timeout_ms < now:
                _log.info("transactional id %r: aborting its transaction open since %d ms (timeout %d ms)",
                          meta.txn_id, now - meta.start_ms, meta.timeout_ms)
                self._abort_fenced(meta, now)
                n += 1
        return n

    @_synchronized
    def describe(self, txn_id: str) -> TxnMeta | None:
        with contextlib.suppress(KafkaError):
            self._settle(txn_id)  # an end of it behind its answer shows as Kafka shows it once answered
        return self.txns.get(txn_id)

    @_synchronized
    def all(self) -> list[TxnMeta]:
        """Every transactional id's state (ListTransactions)."""
        self._settle_all()
        return list(self.txns.values())


__all__ = ["TXN_TOPIC", "TransactionCoordinator", "TxnMeta"]
