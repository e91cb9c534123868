"""Log: one partition — an ordered list of LogSegments with roll, retention, delete-before, flush and recovery.

Directory ``<topic>-<partition>/`` holds Kafka's files: ``<20-digit base>.log/.index/.timeindex`` per segment,
plus ``.kafkalog.lock`` (the per-partition append lock of shared writers). The log start offset and recovery point
live in the data dir's checkpoint files (see checkpoints.py).

Three ways to open a Log (chosen by the LogStore):

* ``exclusive``: this process is the only writer for the store's lifetime. ``append()`` stages records in a batch
  builder (written when 16 KiB fill up, and before any read, flush or other append kind), the fastest path.
* ``shared``: several processes append; each append call takes the partition's file lock, first takes in what
  others appended (so offsets never collide), then writes. Nothing is staged.
* ``read``: read-only; never changes a file; sees other processes' complete batches (never a torn one) on each call.

Other processes' changes (shared and read views): every writer counts each change of the partition's files in the
partition's change counter (``.kafkalog-changes``, engine segment.pyx) once the change is visible: appends (every
kind: ``_write``), rolls, a torn tail cut, an open (recovery, leftovers removed, swaps completed), a log start moved
(counted once checkpointed and again once the segments below are gone), retention, cleaner swaps. A view loads the
counter before it takes the files in and calls that value seen; a call finding the counter still there skips the
files (and, shared, the partition lock): one memory load. The counter is a hint: never fsynced, never needed to open;
without a valid one (missing, short, garbage, retired by delete_topic) a view takes the files in on every call as it
always did, and maps the counter again once it saw the partition change (a writer repairs the file in place, never
replacing it: a view that mapped the old file would wait on it forever). A writer that cannot map it does not open.

Thread safety: every public method takes the Log's lock; threads of one process share a Log freely. Iterators
(``records``) take the lock per chunk, not for their lifetime.

What is durable when: an append is in the OS page cache when the call returns (it survives kill -9 of this process,
not a power loss) — except records staged by ``append()`` in exclusive mode, which reach the page cache at the next
flush/read/16 KiB. After ``flush()`` returns (or per ``flush.messages`` / ``flush.ms``), everything appended before
it is fsynced and survives power loss. ``delete_records_before`` is fsynced before it returns.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import random
import threading
import time
from pathlib import Path

import numpy as np

from .._engine.batch import (
    BatchBuilder,
    RecordBatch,
    build_batch,
    chain_records,
    count_records,
    iter_batches,
    next_offset_after,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
)
from .._engine.columns import decode_columns
from .._engine.segment import CHANGE_COUNTER_FILE, ChangeCounter, LogSegment, segment_file_name
from .._engine.segment import offset_for_time as _offset_for_time
from ..config import LONG_MAX, Config
from ..errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    storage_error,
)
from ..structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, OffsetAndTimestamp
from . import cleaner, failpoints
from .checkpoints import Checkpoints
from .files import FileLock, atomic_write, fsync_dir
from .files import fsync_path as _fsync_path
from .files import unlink_if_exists as _unlink
from .isolation import committed_chunks, is_read_committed
from .txnformat import (
    ProducerSnapshotEntry,
    TxnIndex,
    build_marker_batch,
    decode_producer_snapshot,
    encode_producer_snapshot,
    snapshot_path,
    txn_index_path,
)
from .txnstate import TXN_MARKER_FILE, PartitionTxns

EXCLUSIVE, SHARED, READ = "exclusive", "shared", "read"
CODECS = {None: 0, "none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
STAGED_BATCH_BYTES = 16384  # Kafka's batch.size: a staged append() batch is written when it reaches this
RECORD_BATCH_OVERHEAD = 61
# ``preallocate=true`` (Kafka's topic config): the active segment keeps up to this many zero-written bytes past its
# last batch (LogSegment.preallocate), so a durable append's fdatasync has no size change to commit
PREALLOCATE_BYTES = 1 << 20
INT32_MAX = 2**31 - 1
_PARTITION_LOCK = ".kafkalog.lock"
_log = logging.getLogger("kafkalog")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def codec_id(compression) -> int:
    if isinstance(compression, int) and 0 <= compression <= 4:
        return compression
    try:
        return CODECS[compression]
    except (KeyError, TypeError):
        raise UnsupportedCompressionTypeError(f"unknown compression {compression!r}; use one of "
                                              "none, gzip, snappy, lz4, zstd") from None


class Log:
    """One partition of a topic. See the module docstring for modes, thread safety and durability."""

    def __init__(self, dir: Path, topic: str, partition: int, config: Config, *, mode: str = EXCLUSIVE,
                 checkpoints: Checkpoints, had_clean_shutdown: bool = True, recover: bool = False,
                 session: int = 0):
        self.dir = Path(dir)
        # the store's open session (LogStore draws it; 0: none): writers publish their log end under it in the change
        # counter, and a shared writer never hands out an offset from a view that ends below the published end
        self._session = session
        self._dir_str = str(self.dir)
        self.topic = topic
        self.partition = partition
        self.config = config
        self.mode = mode
        self._checkpoints = checkpoints
        self._lock = threading.RLock()
        self._closed = False
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._lso = 0
        self._leo = 0
        self._recovery_point = 0
        self._checkpointed_recovery_point = 0
        self._unflushed = 0
        self._last_flush = time.monotonic()
        # highest segment base whose directory entry this process made durable (fsync of the dir): -1 at open,
        # since segments created by other processes, or by an earlier run killed before it flushed, may not be
        self._dir_synced_base = -1
        self._lso_stamp = None
        self._staged: BatchBuilder | None = None
        self._ts_lo, self._ts_hi = 0, LONG_MAX
        self._deleted_files: list[tuple[float, Path]] = []
        self._waiters: list = []  # threading.Event objects set on every append (consumers blocked in poll)
        self._swapped: dict[int, str] = {}  # base -> ".swap": a committed cleaner swap the listing stands on
        self._gen_fd = -1  # the partition's clean generation file (other processes' cleaners), opened lazily
        self._clean_gen = 0
        # the partition's change counter (see _sync): writers bump it after every change, views refresh only when it
        # moved. None for a view without a valid one (missing, not ours, given up): it refreshes on every call
        self._changes: ChangeCounter | None = None
        self._changes_retry = True  # a view without a counter maps it again at its next refresh
        self._cleaning = threading.Lock()
        self._txns: PartitionTxns | None = None  # open and aborted transactions, built when first needed
        self._txn_known = False  # True once the partition is known to have held a transactional batch
        self._txn_probed = False  # Kafka's .txnindex files looked for (once)
        self._txn_absent_at = -1  # the log end when the partition was last found without transactions
        self._apply_config(config)
        self._plock = None
        try:
            if mode == SHARED:
                # a shared opener maps the active segment writable: never while another writer rolls (trims its
                # indexes), truncates a torn tail or deletes segments
                self.dir.mkdir(parents=True, exist_ok=True)
                self._plock = FileLock(self.dir / _PARTITION_LOCK)
                self._plock.acquire(timeout=config.get("lock.timeout.ms", 30000) / 1000.0,
                                    what=f"open {topic}-{partition}")
                try:
                    self._load(had_clean_shutdown, recover)
                except BaseException:
                    self._plock.close()
                    raise
                self._plock.release()
            else:
                self._load(had_clean_shutdown, recover)
        except OSError as e:
            if isinstance(e, KafkaStorageError):
                raise
            raise storage_error(e, "load", self.dir) from None

    # ------------------------------------------------------------------------------------------------ config

    def _apply_config(self, config: Config) -> None:
        c = config
        self._segment_bytes = c["segment.bytes"]
        self._segment_ms = c["segment.ms"]
        self._jitter_ms = c["segment.jitter.ms"]
        self._index_bytes = c["segment.index.bytes"]
        self._index_interval = c["index.interval.bytes"]
        self._retention_ms = c["retention.ms"]
        self._retention_bytes = c["retention.bytes"]
        self._delete_delay_s = c["file.delete.delay.ms"] / 1000.0
        self._flush_messages = c["flush.messages"]
        self._flush_ms = c["flush.ms"]
        self._max_message_bytes = c["max.message.bytes"]
        self._log_append_time = c["message.timestamp.type"] == "LogAppendTime"
        self._ts_before = c["message.timestamp.before.max.ms"]
        self._ts_after = c["message.timestamp.after.max.ms"]
        ctype = c["compression.type"]
        self._topic_codec = None if ctype == "producer" else codec_id(ctype)
        self._delete_policy = "delete" in c["cleanup.policy"]
        self._compact = "compact" in c["cleanup.policy"]
        self._prealloc = PREALLOCATE_BYTES if c["preallocate"] else 0
        self._prealloc_failed = -1  # the base offset of a segment whose room could not be written

    def reconfigure(self, config: Config) -> None:
        """Run with a new topic config from now on (LogStore.alter_topic_config): segment size, retention, flush,
        timestamp and cleanup policy apply to the next append, roll and retention round."""
        with self._lock:
            self._drain()
            self.config = config
            self._apply_config(config)
            if self._staged is not None:
                self._size_staged()

    def _size_staged(self) -> None:
        # a staged batch must fit both max.message.bytes and a segment (a batch never spans two)
        limit = min(self._max_message_bytes, self._segment_bytes)
        self._staged.max_batch_bytes = limit
        self._staged.target_bytes = min(STAGED_BATCH_BYTES, limit)

    def _reserve(self) -> int:
        return self._segment_bytes + self._max_message_bytes + RECORD_BATCH_OVERHEAD

    # ------------------------------------------------------------------------------------------------ loading

    def _open_segment(self, base: int, writable: bool, create: bool = False) -> LogSegment:
        suffix = "" if (create or writable) else self._swapped.get(base, "")
        return LogSegment(self.dir, base, index_interval_bytes=self._index_interval,
                          max_index_size=self._index_bytes, writable=writable,
                          reserve_bytes=self._reserve() if writable else 0, create=create, file_suffix=suffix)

    def _clean_leftovers(self) -> list[int]:
        """The loader is the one place that cleans: ``.deleted`` and ``.tmp`` files go, interrupted swaps
        complete, ``.cleaned`` files go, orphan indexes go. Returns the sorted base offsets of the .log files."""
        names = os.listdir(self.dir)
        for name in names:
            if name.endswith((".deleted", ".tmp", ".cleaned")):
                _unlink(self.dir / name)
        self._complete_swaps()
        names = os.listdir(self.dir)
        logs = sorted(int(n[:20]) for n in names if n.endswith(".log") and n[:20].isdigit() and len(n) == 24)
        have = set(logs)
        for n in names:
            if n.endswith((".index", ".timeindex", ".txnindex", ".snapshot")) and n[:20].isdigit() \
                    and int(n[:20]) not in have:
                _unlink(self.dir / n)
        return logs

    def _load(self, had_clean_shutdown: bool, recover: bool) -> None:
        """Open the segments as the directory holds them (``_load_files``) between two looks at the change counter:
        the value before the load is what this view holds, so a change made while it loads is taken in by the
        next call. A writer bumps it once loaded (recovery may have cut, completed swaps or removed segments)."""
        if self.mode != READ:
            self.dir.mkdir(parents=True, exist_ok=True)
        self._map_changes()
        before = self._changes.load() if self._changes is not None else 0
        self._load_files(had_clean_shutdown, recover)
        if self._changes is not None:
            self._changes.seen = before
            if self.mode != READ:
                self._changes.revive()
                if (recover or self.mode == EXCLUSIVE) and self._session:
                    self._changes.publish_end(self._leo, self._session)  # alone: its view is the partition
                self._changed(current=True)  # a shared opener holds the partition lock: its view is current

    def _map_changes(self) -> None:
        """Map the partition's change counter: a writer creates or repairs it (a writer that cannot must not
        write: views that trust the counter would miss its changes); a view takes only a valid one, else it
        refreshes on every call and maps again after a refresh that found the partition changed."""
        self._changes_retry = False
        path = os.path.join(self._dir_str, CHANGE_COUNTER_FILE)
        if self.mode != READ:
            try:
                self._changes = ChangeCounter(path, True)
            except OSError as e:
                if isinstance(e, KafkaStorageError):
                    raise
                raise storage_error(e, "open", path) from None
            return
        try:
            counter = ChangeCounter(path, False)
        except (OSError, ValueError):
            return  # missing (no writer of this version opened it yet), short or not ours
        if counter.retired:
            counter.close()  # its directory is being deleted: never trusted again
            return
        self._changes = counter

    def _changed(self, current: bool = False) -> None:
        """Count a change of the partition's files for other processes' views, once it is visible in the files
        (every writer path that changes what a view must see calls this before it returns). ``current``: this
        view holds the change and everything before it (a shared writer under the partition lock): when nobody
        else counted one meanwhile, its own next read needs no refresh."""
        c = self._changes
        if c is not None:
            if current and self.mode == SHARED:
                c.advance()
            else:
                c.bump()

    def _load_files(self, had_clean_shutdown: bool, recover: bool) -> None:
        writer = self.mode != READ
        ckpt_lso = self._checkpoints.log_start(self.topic, self.partition)
        rp = self._checkpoints.recovery_point(self.topic, self.partition)
        self._lso_stamp = self._checkpoints.log_start_stamp()
        self._clean_generation_changed()  # before the listing: a swap after it is seen by the next refresh
        if writer:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not recover:
                self._complete_swaps()  # a cleaner killed after its commit point (partition lock held)
            bases = self._clean_leftovers() if recover else self._list_bases()
        else:
            bases = self._list_bases()
        segments: list[LogSegment] = []
        looks = 0
        while True:
            try:
                for i, base in enumerate(bases):
                    last = i == len(bases) - 1
                    segments.append(self._open_loaded(base, writer and last, recover))
                if self.mode == SHARED and not recover:
                    # under the partition lock the log end cannot have gone back since a writer of this session
                    # published it: a view ending below it listed the directory wrong (never start a segment there)
                    view_end = segments[-1].next_offset if segments else ckpt_lso
                    published = self._published_end()
                    if view_end < published:
                        looks += 1
                        self._listed_behind(view_end, published, looks, bases)
                        raise FileNotFoundError(errno.ENOENT, "listing behind the published log end")
                break
            except OSError as e:
                # without the init lock (shared, read) another process may delete a segment between the listing
                # and its opening: list again
                for seg in segments:
                    seg.close_without_finalizing()
                segments = []
                if recover or e.errno != errno.ENOENT:
                    raise
                if looks:
                    ckpt_lso = self._checkpoints.log_start(self.topic, self.partition)
                    rp = self._checkpoints.recovery_point(self.topic, self.partition)
                bases = self._list_bases()
        segments = self._skip_below_start(segments, ckpt_lso, remove=writer)
        if recover:
            segments, rp = self._recover(segments, rp, had_clean_shutdown)
        elif self.mode == READ and not had_clean_shutdown:
            # nobody recovered this store yet: check every batch past the recovery point (in memory only)
            for seg in segments:
                if seg.next_offset > rp:
                    seg.revalidate_from(max(rp, seg.base_offset))
        if writer and segments and segments[-1].next_offset < ckpt_lso:
            # everything below the checkpointed start is gone: start fresh there (testLogEndLessThanStartAfterReopen)
            for seg in segments:
                self._remove_files(seg, delay=False)
            segments = []
        if not segments:
            if not writer:
                self._segments, self._bases = [], []
                self._lso = self._leo = ckpt_lso
                return
            segments = [self._open_segment(ckpt_lso, True, create=True)]
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._leo = segments[-1].next_offset
        self._lso = max(ckpt_lso, segments[0].base_offset)
        # Only the exclusive owner after a clean shutdown may take the log end for fsynced: a shared opener cannot
        # know what other processes appended and never flushed, so it starts from the checkpointed recovery point,
        # which holds only offsets some process really fsynced (every writer checkpoints what its flush covered)
        self._recovery_point = self._leo if (had_clean_shutdown and self.mode == EXCLUSIVE) else \
            min(max(rp, self._lso), self._leo)
        self._checkpointed_recovery_point = self._recovery_point
        self._new_active()
        if self.mode == EXCLUSIVE:
            self._staged = BatchBuilder(compression=self._topic_codec or 0)
            self._staged.base_offset = self._leo
            self._size_staged()
            self._refresh_time_bounds()

    _LOOKS = 20  # how often a shared writer lists its directory again while its view ends below the published end

    def _published_end(self) -> int:
        c = self._changes
        return c.published_end(self._session) if (c is not None and self._session) else -1

    def _listed_behind(self, view_end: int, published: int, looks: int, bases: list[int]) -> None:
        """A shared writer's view ends at ``view_end`` below the end ``published`` by a writer of this session: the
        directory listing (or a checkpoint read) missed what is there. Named loudly; after ``_LOOKS`` looks the
        writer refuses (KafkaStorageError) rather than hand out offsets another writer already did."""
        _log.error("%s-%d: this writer's view of the partition ends at offset %d, but a writer published the log end "
                   "%d (segments listed: %s); listing the directory again (look %d of %d)", self.topic,
                   self.partition, view_end, published, bases[-4:], looks, self._LOOKS)
        if looks >= self._LOOKS:
            raise KafkaStorageError(errno.EIO, f"{self.topic}-{self.partition}: the partition directory {self.dir} "
                                               f"lists segments ending at offset {view_end}, below the log end "
                                               f"{published} another writer made visible; not appending")
        time.sleep(0.001 * looks)

    def _check_published_end(self) -> None:
        """Before a shared writer hands out offsets (partition lock held, view refreshed): its view must reach the
        published end; else the directory is listed again (see _listed_behind)."""
        looks = 0
        while True:
            published = self._published_end()
            if self._segments and self._leo >= published:
                return
            looks += 1
            self._listed_behind(self._leo if self._segments else -1, published, looks, self._bases)
            self._reload_segments()

    def _skip_below_start(self, segments: list[LogSegment], lso: int, remove: bool) -> list[LogSegment]:
        """Segments wholly below the log start offset are garbage: a delete-before or retention was killed after
        its checkpoint and before it removed them. A writer removes them (crash-safe rename first), a reader only
        leaves them out of its view. The last segment always stays (the writer's active one)."""
        n = 0
        # by file names only: a header-only load of a damaged segment may end early, its names never lie
        while n < len(segments) - 1 and segments[n + 1].base_offset <= lso:
            n += 1
        for seg in segments[:n]:
            if remove:
                self._remove_files(seg, delay=False)
            else:
                seg.close_without_finalizing()
        return segments[n:]

    def _remove_files_below(self, base: int) -> None:
        """Remove the files of every segment on disk below ``base`` that this view does not hold: left behind by
        a deleter killed after its checkpoint, or below a start another process advanced. A delete must never
        leave older segments behind a gap (partition lock held)."""
        for b in self._list_bases():
            if b >= base:
                break
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                p = self.dir / segment_file_name(b, suffix)
                try:
                    os.replace(p, p.with_name(p.name + ".deleted"))
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise storage_error(e, "rename", p) from None
                _unlink(p.with_name(p.name + ".deleted"))

    def _list_bases(self) -> list[int]:
        """Base offsets of the segments as the directory holds them now. A cleaner's committed swap (a
        ``<base>.log.swap``) stands for the old segments in its offset range, whose files may still be there or be
        gone already; it is opened under its ``.swap`` name (``self._swapped``). A read-only view takes no lock, so
        it lists until two listings agree: a rename racing with one listing never reads as a missing segment."""
        prev = None
        while True:
            try:
                names = os.listdir(self.dir)
            except FileNotFoundError:
                return []
            bases = sorted(int(n[:20]) for n in names if n.endswith(".log") and len(n) == 24 and n[:20].isdigit())
            swaps = sorted(int(n[:20]) for n in names if n.endswith(".log.swap") and len(n) == 29
                           and n[:20].isdigit())
            swapped: dict[int, str] = {}
            try:
                for s in swaps:
                    nxt = self._swap_end(s)
                    bases = sorted({b for b in bases if not s <= b < nxt} | {s})
                    swapped[s] = cleaner.SWAP
            except FileNotFoundError:
                prev = None
                continue  # the swap finished meanwhile: list again
            if self.mode != READ or (bases, swapped) == prev:
                self._swapped = swapped
                return bases
            prev = (bases, swapped)

    def _swap_end(self, base: int) -> int:
        """The end of the old segments the committed ``.swap`` segment at ``base`` replaces: its ``.swap-end``
        (written before the commit point), or, for a swap committed without one by an earlier version (whose
        cleaned groups always kept their last batch), the swap segment's own next offset. FileNotFoundError when
        the swap finished meanwhile (the end file goes only after the ``.log.swap`` is renamed)."""
        end = cleaner.read_swap_end(self.dir, base)
        if end is not None:
            return end
        try:
            seg = LogSegment(self.dir, base, writable=False, reserve_bytes=0, file_suffix=cleaner.SWAP)
        except KafkaStorageError as e:
            if e.errno == errno.ENOENT:
                raise FileNotFoundError(str(e)) from None
            raise
        except OSError:
            raise
        try:
            return seg.next_offset
        finally:
            seg.close_without_finalizing()

    def _complete_swaps(self) -> None:
        """Finish or undo what a killed cleaner left (writers: exclusive, or the partition lock held). A
        ``.log.swap`` is committed: the old segments in its range go and the ``.swap`` files take their final
        names. Index ``.swap`` files without their ``.log.swap`` were never committed and go."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return
        if not any(n.endswith((cleaner.SWAP, cleaner.SWAP_END)) for n in names):
            return
        committed = {int(n[:20]) for n in names if n.endswith(".log.swap") and n[:20].isdigit()}
        for n in names:
            if n.endswith((".index.swap", ".timeindex.swap", cleaner.SWAP_END)) and n[:20].isdigit() \
                    and int(n[:20]) not in committed:
                _unlink(self.dir / n)  # never committed, or an end file left after its swap finished
        for s in sorted(committed):
            nxt = self._swap_end(s)
            for n in names:
                if n.endswith((".log", ".index", ".timeindex")) and n[:20].isdigit() and s < int(n[:20]) < nxt:
                    _unlink(self.dir / n)
            cleaner.finish_swap(self.dir, s)
            _log.info("%s-%d: finished the swap of cleaned segment %d left by a stopped cleaner", self.topic,
                      self.partition, s)
        self._swapped = {}
        if committed:
            cleaner.bump_generation(self.dir)  # read-only views that listed the unfinished swap list again
            self._changed()

    def _clean_generation_changed(self) -> bool:
        """True when another process's cleaner swapped segments of this partition since this view last looked
        (one pread of an 8-byte counter the cleaner bumps in place)."""
        fd = self._gen_fd
        if fd < 0:
            if not self._compact:
                return False  # only a compacted topic's partitions are ever cleaned
            try:
                fd = self._gen_fd = os.open(os.path.join(self._dir_str, cleaner.GENERATION_FILE), os.O_RDONLY)
            except FileNotFoundError:
                return False
        gen = cleaner.read_generation(fd)
        if gen != self._clean_gen:
            self._clean_gen = gen
            return True
        return False

    def _open_loaded(self, base: int, active: bool, recover: bool) -> LogSegment:
        seg = self._open_segment(base, writable=active)
        if not active and recover and self.mode != READ and (
                _index_missing(self.dir, base) or not seg.indexes_consistent()):
            # a sealed segment lost its index files or they disagree with the .log: rebuild them from the .log,
            # never cutting the .log (its batches are validated by recovery from the recovery point on, and by
            # every read's CRC check)
            seg.close()
            seg = self._open_segment(base, writable=True)
            seg.recover(self._max_message_bytes, LONG_MAX, truncate=False)
            seg.close()
            seg = self._open_segment(base, writable=False)
        return seg

    def _recover(self, segments: list[LogSegment], rp: int, clean: bool) -> tuple[list[LogSegment], int]:
        """Unclean shutdown: validate every segment from the one holding the recovery point on, each truncated at
        its first invalid byte; later segments are validated too, never dropped. Clean shutdown: only an active
        segment with a torn tail (never expected) is repaired."""
        if not segments:
            return segments, rp
        start = 0
        if clean:
            if segments[-1].torn_bytes == 0:
                return segments, rp
            start = len(segments) - 1
        else:
            start = max(0, bisect.bisect_right([s.base_offset for s in segments], rp) - 1)
        for i in range(start, len(segments)):
            seg = segments[i]
            if not seg.writable:
                seg.close()
                seg = self._open_segment(seg.base_offset, writable=True)
            from_offset = rp if seg.base_offset < rp else -1
            truncated = seg.recover(self._max_message_bytes, from_offset)
            failpoints.hit("recover:after-segment")
            if i < len(segments) - 1:
                seg.close()
                seg = self._open_segment(seg.base_offset, writable=False)
            segments[i] = seg
            # .txnindex entries are fsynced when their ABORT marker is appended, before the marker's segment: a power
            # loss can keep an entry whose marker is gone (the coordinator writes that marker again, maybe at another
            # offset): entries at or past the segment's recovered end go
            index_path = txn_index_path(self.dir, seg.base_offset)
            if index_path.exists():
                idx = TxnIndex(index_path)
                try:
                    last = idx.last_offset
                    if last is not None and last >= seg.next_offset:
                        idx.truncate_to(seg.next_offset)
                finally:
                    idx.close()
            if truncated > 0:
                for x in self._txn_snapshots():  # they may describe batches that are gone now
                    _unlink(snapshot_path(self.dir, x))
                _log.warning("recovery of %s-%d cut %d invalid bytes at the end of segment %d (offsets from %d on: "
                             "never fsynced)", self.topic, self.partition, truncated, seg.base_offset,
                             seg.next_offset)
            # Later segments stay, whatever happened here: each is validated on its own, and a valid, CRC-clean
            # segment above the log start is never dropped for a gap (Kafka's compacted logs have gaps too)
            if i + 1 < len(segments) and segments[i + 1].base_offset > seg.next_offset and not self._compact:
                _log.warning("%s-%d has no records in offsets [%d, %d) (a gap between segments); the segments "
                             "around it are kept", self.topic, self.partition, seg.next_offset,
                             segments[i + 1].base_offset)
        for i in range(len(segments) - 1):
            seg, nxt = segments[i], segments[i + 1]
            if nxt.base_offset < seg.next_offset:
                # Never made by a roll, which starts the next segment at the log end: the later segment holds the
                # later history (written after a roll at its base), so the earlier one's batches from there on go
                # (one view, every offset once), durably before anything is appended
                end = seg.next_offset
                seg.close_without_finalizing()
                seg = self._open_segment(seg.base_offset, writable=True)
                seg.truncate_to(nxt.base_offset)
                seg.flush()
                _log.error("%s-%d: segment %d held offsets up to %d, past the start of the next segment %d "
                           "(overlapping segments): its batches from offset %d on were cut; it ends at %d now",
                           self.topic, self.partition, seg.base_offset, end - 1, nxt.base_offset,
                           nxt.base_offset, seg.next_offset)
                seg.close()
                segments[i] = self._open_segment(seg.base_offset, writable=False)
        end = segments[-1].next_offset
        for x in self._txn_snapshots():
            if x > end:  # beyond the recovered log end: written before a power loss took the batches below it
                _unlink(snapshot_path(self.dir, x))
        # the active segment must be writable and its indexes full-size again
        return segments, min(rp, end)

    def _new_active(self) -> None:
        active = self._segments[-1]
        if active.writable and not self._closed:
            # the active segment's indexes are full size again (KAFKA-6388): a view that (re)opens an existing
            # active segment, e.g. after another process rolled or deleted, must be able to index into it
            active.offset_index.resize(self._index_bytes)
            active.time_index.resize(self._index_bytes)
        self._active_created_ms = _now_ms()
        self._roll_jitter = random.randint(0, min(self._jitter_ms, self._segment_ms)) if self._jitter_ms else 0
        self._active_base = active.base_offset

    # ------------------------------------------------------------------------------------------------ guards

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.topic}-{self.partition} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.mode == READ:
            raise KafkaStorageError(30, f"log {self.topic}-{self.partition} is opened read-only")

    # ------------------------------------------------------------------------------------------------ other processes

    def _sync(self) -> None:
        """Make this process's view current: write staged records (exclusive) or take in what other processes
        appended, rolled and deleted (shared/read)."""
        if self.mode == EXCLUSIVE:
            if self._staged is not None and self._staged.count:
                self._drain()
            return
        c = self._changes
        if c is not None and c.unchanged():
            return  # nobody changed the partition since this view last took it in: one memory load, no system call
        if self.mode == SHARED:
            # a shared writer's view changes open segments writable (reopen, resize the active indexes): only
            # under the partition lock, never while another writer rolls, trims or deletes
            with _PartitionLock(self):
                return
        self._refresh()

    def _refresh(self) -> None:
        """Take in what other processes changed. The change counter is read before the files: a change made during
        the refresh moves it past what this view records as seen, so the next call refreshes again."""
        c = self._changes
        if c is None and self._changes_retry:
            self._map_changes()
            c = self._changes
        if c is not None and c.trusted:
            now = c.load()
            if c.retired:
                c.trusted = False  # the directory is being deleted: refresh on every call from now on
        before = (self._leo, self._lso, len(self._segments))
        # read before the files: a writer publishes once its append is in them, so a view that took the files in
        # after this load and still ends below it missed something (a lock-free reader racing with an append never
        # reads as behind an end published after its look)
        published = self._published_end() if self._session else -1
        self._refresh_files()
        if self._segments and self._leo < published:
            # this view did not follow every roll another writer made (a lookup of the next segment missed it: the
            # power-loss soak saw it once a file system was gone under a running writer, before _segment_exists
            # raised such failures): the log end a writer published is the truth; take the directory in
            _log.warning("%s-%d: the view ended at offset %d below the published log end %d; listing the segments "
                         "again", self.topic, self.partition, self._leo, published)
            self._reload_segments()
        if c is not None and c.trusted:
            c.seen = now
        elif c is None and (self._leo, self._lso, len(self._segments)) != before:
            self._changes_retry = True  # a writer of this version may have made the counter meanwhile

    def _refresh_files(self) -> None:
        if self._clean_generation_changed():
            self._reload_segments()  # another process's cleaner replaced segments this view has open
        stamp = self._checkpoints.log_start_stamp()
        if stamp != self._lso_stamp:
            self._lso_stamp = stamp
            lso = self._checkpoints.log_start(self.topic, self.partition)
            if lso > self._lso:
                self._lso = lso
                self._drop_segments_below(lso)
                if self._segments and lso >= self._segments[-1].next_offset:
                    # another process's delete-before or retention removed every segment this view knows (it rolls
                    # an active segment that is entirely below the new start): take the directory as it is now
                    self._reload_segments()
        if not self._segments:
            bases = self._list_bases()
            if not bases:
                return
            self._segments = [self._open_segment(b, False) for b in bases]
            self._bases = list(bases)
        while True:
            active = self._segments[-1]
            grown = active.refresh()
            if grown < 0:  # truncated under us by another process's recovery: reopen it
                active.close()
                self._segments[-1] = self._open_segment(active.base_offset, self.mode == SHARED)
                continue
            self._leo = active.next_offset
            if self._leo == active.base_offset or not _segment_exists(
                    os.path.join(self._dir_str, segment_file_name(self._leo))):
                break
            # another process rolled: our active is sealed now (it already wrote the final entries and trimmed)
            active.close_without_finalizing()
            try:
                self._segments[-1] = self._open_segment(active.base_offset, False)
            except OSError as e:  # ... and deleted it since (delete-before, retention): start over
                if e.errno != errno.ENOENT:
                    raise
                self._reload_segments()
                if not self._segments:
                    return
                continue
            seg = self._open_segment(self._leo, self.mode == SHARED)
            self._segments.append(seg)
            self._bases.append(seg.base_offset)
            self._new_active()
        self._lso = max(self._lso, self._segments[0].base_offset)

    def _reload_segments(self) -> None:
        """Drop this view's segments and open what the directory holds now (another process deleted segments
        this view still had open). A file that goes away between the listing and its opening means another
        deletion ran meanwhile (read-only openers take no lock): list again."""
        for seg in self._segments:
            seg.close_without_finalizing()
        self._segments, self._bases = [], []
        if self.mode != READ:
            self._complete_swaps()  # shared writers reload under the partition lock
        while True:
            bases = self._list_bases()
            segs = []
            try:
                for i, base in enumerate(bases):
                    segs.append(self._open_segment(base, self.mode == SHARED and i == len(bases) - 1))
            except OSError as e:
                for seg in segs:
                    seg.close_without_finalizing()
                if e.errno != errno.ENOENT:
                    raise
                continue
            break
        self._segments, self._bases = segs, list(bases)
        if segs:
            self._leo = segs[-1].next_offset
            self._lso = max(self._lso, segs[0].base_offset)
            self._new_active()

    def _drop_segments_below(self, lso: int) -> None:
        while len(self._segments) > 1 and self._segments[1].base_offset <= lso:
            self._segments.pop(0).close_without_finalizing()
            self._bases.pop(0)

    def _locked_append(self):
        """Context for one append: in shared mode, the partition file lock plus a refresh."""
        return _PartitionLock(self) if self.mode == SHARED else _NOOP

    # ------------------------------------------------------------------------------------------------ append

    def _check_timestamp(self, ts: int) -> None:
        if ts < 0:
            return
        now = _now_ms()
        if (self._ts_before != LONG_MAX and ts < now - self._ts_before) or \
                (self._ts_after != LONG_MAX and ts > now + self._ts_after):
            raise InvalidTimestampError(
                f"timestamp {ts} of a record for {self.topic}-{self.partition} is out of range: "
                f"message.timestamp.before.max.ms={self._ts_before}, after.max.ms={self._ts_after}, now={now}")

    def append(self, value, key=None, timestamp: int | None = None, headers=None) -> int:
        """Append one record; returns its offset. In exclusive mode it is staged (see the module docstring)."""
        if key is None and self._compact:
            raise self._keyless()
        # Fast path without the Log's lock: BatchBuilder.stage/take/reserve are atomic under the GIL, and every
        # writer of the segment (the drain included) holds the lock and claims its offsets through the builder.
        staged = self._staged
        if staged is not None and (timestamp is None or self._ts_lo <= timestamp <= self._ts_hi):
            off = staged.stage(value, key, -1 if timestamp is None else timestamp, headers)
            if off >= 0:
                if staged.full:
                    with self._lock:
                        self._drain()
                if self._waiters:
                    self._wake()
                return off
        with self._lock:
            self._check_writable()
            if timestamp is not None and not self._log_append_time:
                self._check_timestamp(timestamp)
            if self._staged is None:
                return self.append_batch([value], None if key is None else [key],
                                         None if timestamp is None else [timestamp],
                                         None if headers is None else [headers])
            ts = -1 if timestamp is None else timestamp
            off = self._staged.stage(value, key, ts, headers)
            if off < 0:  # the staged batch is as large as max.message.bytes allows: write it, stage again
                self._drain()
                off = self._staged.stage(value, key, ts, headers)
            if self._staged.full:
                self._drain()
            if self._waiters:
                self._wake()
            return off

    def _keyless(self) -> InvalidRecordError:
        # Kafka's LogValidator, word for word: INVALID_RECORD (87) on the wire, nothing of the call appended
        return InvalidRecordError(f"Compacted topic cannot accept message without key in topic partition "
                                  f"{self.topic}-{self.partition}")

    def _rejected_records(self, buf, pos: int, batch) -> KafkaError:
        """Kafka's RecordValidationException for the batch at ``pos`` (LogValidator): each of its records without a
        key (compacted topic) or with a CreateTime timestamp out of range is listed in ``record_errors`` as (index in
        the batch, message): Produce v8+ answers them (KIP-467). INVALID_TIMESTAMP when some timestamp is out of
        range, else INVALID_RECORD; nothing of the call is appended."""
        cols = decode_columns(buf, pos, pos + batch.size_in_bytes)
        keys, stamps = cols["key_valid"], cols["timestamp"]
        now = _now_ms()
        lo = now - self._ts_before if self._ts_before != LONG_MAX else None
        hi = now + self._ts_after if self._ts_after != LONG_MAX else None
        errors, bad_time = [], False
        for i in range(len(stamps)):
            ts = int(stamps[i])
            if self._compact and not keys[i]:
                errors.append((i, self._keyless().args[0]))
            elif not self._log_append_time and ts >= 0 and ((lo is not None and ts < lo) or
                                                             (hi is not None and ts > hi)):
                bad_time = True
                errors.append((i, f"Timestamp {ts} of message with offset {batch.base_offset + i} is out of range. "
                                  f"The timestamp should be within [{now - self._ts_before}, {now + self._ts_after}]"))
        if bad_time:
            e = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
        else:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            e = InvalidRecordError(f"One or more records have been rejected due to {len(errors)} record errors in "
                                   f"total, and only showing the first three errors at most: [{shown}]")
        e.record_errors = errors
        return e

    def _refresh_time_bounds(self) -> None:
        """Timestamp bounds the staged fast path checks without reading the clock. They only ever err on the
        strict side (a record outside them takes the exact check), so a stale bound never admits a bad timestamp."""
        if self._log_append_time:
            self._ts_lo, self._ts_hi = -1, LONG_MAX
            return
        now = _now_ms()
        self._ts_lo = 0 if self._ts_before == LONG_MAX else LONG_MAX
        self._ts_hi = LONG_MAX if self._ts_after == LONG_MAX else now + self._ts_after

    def _drain(self) -> None:
        """Write the staged records (lock held). take() is atomic, so records staged meanwhile by other threads
        land in the next batch with the next offsets."""
        staged = self._staged
        if staged is None or not staged.count:
            return
        batch = staged.take()
        self._refresh_time_bounds()
        data = batch.build(batch.base_offset)
        max_ts = batch.max_timestamp
        if self._log_append_time:  # stamped as it is written to the log, and segment.ms rolls by that stamp
            data = bytearray(data)
            max_ts = _now_ms()
            set_log_append_time(data, 0, max_ts)
        self._write(data, batch.base_offset + batch.count - 1, max_ts, batch.count)

    def _claim(self, n: int, size: int) -> int:
        """First of n offsets for ``size`` bytes written now (lock held, after _sync): the staged path's builder
        hands them out, so a record staged concurrently by another thread cannot take the same offsets. What would
        be refused is refused first: offsets once claimed are gone (a refusal after it would leave a gap)."""
        if size > self._segment_bytes:
            raise RecordBatchTooLargeError(f"append of {size} bytes exceeds segment.bytes={self._segment_bytes} "
                                           f"for {self.topic}-{self.partition}")
        if self._staged is None:
            return self._leo
        while True:
            first = self._staged.reserve(n)
            if first >= 0:
                return first
            self._drain()

    def append_batch(self, values, keys=None, timestamps=None, headers=None, compression=None) -> int:
        """Append many records as one batch in one call; returns the base offset."""
        if not len(values):
            raise ValueError("append_batch needs at least one value")
        # a topic whose compression.type names a codec stores that codec whatever the producer used (Kafka's broker
        # recompresses); 'producer' keeps the caller's choice
        codec = self._topic_codec if self._topic_codec is not None else codec_id(compression)
        if self._compact and (keys is None or any(k is None for k in keys)):
            raise self._keyless()
        with self._lock:
            self._check_writable()
            if timestamps is not None and not self._log_append_time and (
                    self._ts_before != LONG_MAX or self._ts_after != LONG_MAX):
                self._check_timestamp(min(timestamps))
                self._check_timestamp(max(timestamps))
            with self._locked_append():
                self._drain()  # shared mode: the partition lock already took in other processes' appends
                now = _now_ms()
                built_base = self._leo
                data = build_batch(values, keys, None if self._log_append_time else timestamps, headers,
                                   base_offset=built_base, compression=codec or 0, default_timestamp=now,
                                   timestamp_type=1 if self._log_append_time else 0)
                if len(data) > self._max_message_bytes:
                    raise RecordTooLargeError(
                        f"record batch of {len(data)} bytes exceeds max.message.bytes={self._max_message_bytes} "
                        f"for {self.topic}-{self.partition}")
                base = self._claim(len(values), len(data))  # only once nothing can fail before the write
                if base != built_base:  # records staged by other threads were written first
                    data = bytearray(data)
                    set_base_offset(data, 0, base)
                batch = RecordBatch(data)
                self._write(data, base + len(values) - 1, batch.max_timestamp, len(values))
                return base

    def append_records(self, data) -> tuple[int, int]:
        """Append raw v2 batches as a producer sent them; offsets are assigned by rewriting each batch's base
        offset (no recompression unless the topic's compression.type names another codec). Every batch is
        validated first, an invalid one rejects the whole call and nothing is appended: its compressed size
        against max.message.bytes, then in one pass over its records (RecordBatch.check_for_append) the CRC,
        the framing, offset deltas 0..n-1 (InvalidRecordError otherwise), a bounded decompression (a batch whose
        plaintext passes max(64 MiB, min(1 GiB, records x max.message.bytes)), or one record max(max.message.bytes,
        16 MiB), is refused with RecordTooLargeError) and every record's timestamp, whose smallest and largest must be
        within message.timestamp.before/after.max.ms (InvalidTimestampError). The header's MaxTimestamp is not
        trusted: a CreateTime batch whose header differs from its records' largest timestamp is stored with the
        records' (its header rewritten, CRC recomputed, as Kafka's LogValidator does), so the time index and
        offset_for_time see every record. Returns (first offset, last offset). A writable buffer (bytearray,
        writable memoryview: the broker's receive buffer) is stamped in place and written without a copy; anything
        else is copied once."""
        if isinstance(data, bytearray):
            buf = data
        elif isinstance(data, memoryview) and not data.readonly and data.contiguous:
            buf = data.cast("B") if data.format != "B" else data
        else:
            buf = bytearray(data)
        batches = []
        total = len(buf)
        pos = 0
        transactional = False
        for batch in iter_batches(buf):
            # Kafka's order: the compressed size first, so that nothing larger is decompressed
            if batch.size_in_bytes > self._max_message_bytes:
                raise RecordTooLargeError(f"batch at byte {pos} of {batch.size_in_bytes} bytes exceeds "
                                          f"max.message.bytes={self._max_message_bytes}")
            # CRC, framing, offset deltas and the records' timestamps, compressed records included (bounded)
            min_ts, max_ts = batch.check_for_append(self._max_message_bytes)
            if batch.magic != 2:
                raise InvalidRecordError(f"batch at byte {pos}: magic {batch.magic} (only v2 batches are accepted)")
            if batch.record_count <= 0 or batch.last_offset_delta != batch.record_count - 1:
                raise InvalidRecordError(f"batch at byte {pos}: {batch.record_count} records but last offset "
                                         f"delta {batch.last_offset_delta}")
            if batch.is_control:
                raise InvalidRecordError(f"batch at byte {pos}: control batches cannot be produced")
            transactional |= batch.is_transactional
            if not self._log_append_time:
                if batch.timestamp_type == 1:
                    raise InvalidTimestampError(f"batch at byte {pos}: LogAppendTime set by the producer on a "
                                                f"CreateTime topic")
                try:
                    self._check_timestamp(min_ts)
                    self._check_timestamp(max_ts)
                except InvalidTimestampError:
                    raise self._rejected_records(buf, pos, batch) from None
            batches.append((pos, batch, max_ts))
            pos += batch.size_in_bytes
        if pos != total or not batches:
            raise InvalidRecordError(f"{total - pos} trailing bytes do not form a complete record batch")
        if self._compact and not decode_columns(buf)["key_valid"].all():
            for pos, batch, _ in batches:
                if not decode_columns(buf, pos, pos + batch.size_in_bytes)["key_valid"].all():
                    raise self._rejected_records(buf, pos, batch)
            raise self._keyless()
        with self._lock:
            self._check_writable()
            with self._locked_append():
                self._drain()
                now = _now_ms()
                max_ts = -1
                if self._topic_codec is not None and any(b.compression != self._topic_codec for _, b, _ in batches):
                    buf, batches = _recompress(batches, self._topic_codec)
                if transactional:
                    txns = self._txn_state(create=True)  # caught up to the log end before the write
                    for _, b, _ in batches:
                        if b.is_transactional:
                            fence = txns.stale_epoch(b.producer_id, b.producer_epoch)
                            if fence is not None:
                                raise InvalidProducerEpochError(
                                    f"producer {b.producer_id} epoch {b.producer_epoch} is fenced on "
                                    f"{self.topic}-{self.partition} by epoch {fence}")
                first = nxt = self._claim(sum(b.record_count for _, b, _ in batches), len(buf))
                for pos, batch, records_max in batches:
                    set_base_offset(buf, pos, nxt)
                    if self._log_append_time:
                        set_log_append_time(buf, pos, now)
                    elif records_max != batch.max_timestamp:
                        set_max_timestamp(buf, pos, records_max)  # the header carries the records' largest
                    max_ts = max(max_ts, now if self._log_append_time else records_max)
                    nxt += batch.record_count
                self._write(buf, nxt - 1, max_ts, nxt - first)
                txns = self._txns
                if txns is not None and txns.scanned == first:
                    txns.observe(buf, first)  # our own batches: no need to read them back
                return first, nxt - 1

    def append_built(self, batch, count: int, max_timestamp: int) -> int:
        """Append one v2 batch built in this process by a trusted builder (the producer's ProducerBatch: CRC and
        framing right by construction, base offset 0, CreateTime, the topic's codec), given as a writable buffer
        that is stamped in place (base offset; LogAppendTime). No copy and no re-validation, unlike
        append_records. Returns the base offset. A topic with a lower timestamp bound (message.timestamp.before.max.ms)
        takes the validating path: only a look at every record finds the smallest timestamp; so does a compacted
        topic (every record must have a key)."""
        if self._ts_before != LONG_MAX or self._compact:
            return self.append_records(batch)[0]
        if not self._log_append_time and self._ts_after != LONG_MAX:
            self._check_timestamp(max_timestamp)
        with memoryview(batch) as mv:
            if mv.readonly:  # e.g. a compressed batch handed over as bytes
                batch = bytearray(batch)
        size = len(batch)
        if size > self._max_message_bytes:
            raise RecordTooLargeError(f"record batch of {size} bytes exceeds max.message.bytes="
                                      f"{self._max_message_bytes} for {self.topic}-{self.partition}")
        with self._lock:
            self._check_writable()
            with self._locked_append():
                self._drain()
                base = self._claim(count, size)
                set_base_offset(batch, 0, base)
                if self._log_append_time:
                    max_timestamp = _now_ms()
                    set_log_append_time(batch, 0, max_timestamp)
                self._write(batch, base + count - 1, max_timestamp, count)
                return base

    def _write(self, data, last_offset: int, max_ts: int, count: int) -> None:
        seg = self._maybe_roll(len(data), max_ts, last_offset)
        failpoints.hit("append:before-write")
        seg.append(data, self._leo)
        failpoints.hit("append:after-write")
        self._leo = last_offset + 1
        if self._prealloc and seg.base_offset != self._prealloc_failed:
            self._preallocate(seg)
        if self._session and self._changes is not None:
            self._changes.publish_end(self._leo, self._session)
        self._changed(current=True)
        self._unflushed += count
        if self._unflushed >= self._flush_messages:
            self._flush_locked()
        if self._waiters:
            self._wake()

    def _preallocate(self, seg: LogSegment) -> None:
        """More zero-written room past the batch just written (``preallocate``): an optimisation only. A failure
        (the disk full, say) leaves the file as it was and the append done; the next appends go on without room."""
        try:
            seg.preallocate(self._prealloc, self._segment_bytes)
        except (OSError, KafkaStorageError) as e:
            self._prealloc_failed = seg.base_offset  # not tried again in this segment (by this view)
            _log.warning("%s-%d: preallocating room in segment %d failed (appends go on without it): %s",
                         self.topic, self.partition, seg.base_offset, e)

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int) -> LogSegment:
        seg = self._segments[-1]
        if seg.size == 0:
            return seg
        roll_ts = seg.rolling_based_timestamp
        waited = (max_ts - roll_ts) if (roll_ts >= 0 and max_ts >= 0) else (_now_ms() - self._active_created_ms)
        if (seg.size > self._segment_bytes - size
                or waited > self._segment_ms - self._roll_jitter
                or seg.offset_index.is_full() or seg.time_index.is_full()
                or last_offset - seg.base_offset > INT32_MAX):
            return self._roll()
        return seg

    def _roll(self) -> LogSegment:
        old = self._segments[-1]
        old.on_become_inactive()
        failpoints.hit("roll:after-trim")
        seg = self._open_segment(self._leo, writable=True, create=True)
        failpoints.hit("roll:after-create")  # the next segment exists, its change not counted yet
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._new_active()
        if self._txns is not None and self.mode != READ:
            self._write_txn_snapshot()
        self._changed(current=True)
        return seg

    def roll(self) -> None:
        """Start a new segment now (if the active one holds data)."""
        with self._lock:
            self._check_writable()
            with self._locked_append():
                self._drain()  # shared: the partition lock already refreshed
                if self._segments[-1].size:
                    self._roll()

    # ------------------------------------------------------------------------------------------------ waiting

    def add_waiter(self, event) -> None:
        """Have ``event.set()`` called after every append through this object (any thread of this process).
        Appends by other processes (or other LogStore objects) are seen by ``has_data_after``, not by the event."""
        with self._lock:
            if event not in self._waiters:
                self._waiters = [*self._waiters, event]  # copy on write: _wake iterates without the lock

    def remove_waiter(self, event) -> None:
        with self._lock:
            self._waiters = [e for e in self._waiters if e is not event]

    def _wake(self) -> None:
        for e in self._waiters:
            e.set()

    def has_data_after(self, offset: int) -> bool:
        """Cheap check that a record at ``offset`` or later exists or is staged, including appends by other
        processes since this view last looked (one memory load while the change counter has not moved, else one
        lseek plus one stat; no lock, no read). A True answer may precede the view catching up: read through
        ``read``/``records``, which do."""
        if self._leo > offset or (self._staged is not None and self._staged.count):
            return True
        if self.mode == EXCLUSIVE or self._closed:
            return False
        c = self._changes
        if c is not None and c.unchanged():
            return False  # nothing changed since the view took the files in (one memory load)
        segs = self._segments
        if not segs:
            return bool(self._list_bases())
        active = segs[-1]
        try:
            if active.torn_bytes_now() > 0:  # the file holds bytes past our view: another process appended
                return True
        except Exception:  # noqa: BLE001  (closed or deleted under us: let the reader's refresh sort it out)
            return True
        try:
            return _segment_exists(os.path.join(self._dir_str, segment_file_name(self._leo)))
        except KafkaStorageError:
            return True  # the reader's refresh meets the error itself

    # ------------------------------------------------------------------------------------------------ flush

    def flush(self) -> None:
        """Write staged records and fsync everything appended so far (.log files, then the directory when a
        segment was created): it survives power loss once this returns."""
        with self._lock:
            self._check_writable()
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._drain()
        leo = self._leo
        dir_behind = self._segments[-1].base_offset > self._dir_synced_base
        if self._recovery_point >= leo and not dir_behind:
            return
        i = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
        for seg in self._segments[i:]:
            if seg.writable:
                seg.flush(False)
            else:
                try:
                    _fsync_path(seg.log_path)
                except KafkaStorageError as e:
                    if e.errno != errno.ENOENT:
                        raise  # ENOENT: another process deleted it (delete-before): nothing left to make durable
        if dir_behind:
            # every segment up to the flushed offset must be found after a power loss, whoever created it
            fsync_dir(self.dir)
            self._dir_synced_base = self._segments[-1].base_offset
        failpoints.hit("flush:after-fsync")
        self._recovery_point = leo
        self._unflushed = 0
        self._last_flush = time.monotonic()

    def sync(self) -> int:
        """What ``flush`` promises, with the fsyncs made outside the log's lock, so appends go on while the disk
        works: the broker's group commit for acks=all (every append made before this call is durable when it
        returns, and so is whatever others appended before the fsyncs started). Returns the offset below which
        everything is durable."""
        with self._lock:
            self._check_writable()
            self._drain()
            leo = self._leo
            top = self._segments[-1].base_offset
            dir_behind = top > self._dir_synced_base
            if self._recovery_point >= leo and not dir_behind:
                return leo
            i = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
            paths = [seg.log_path for seg in self._segments[i:]]
        for path in paths:  # every byte below ``leo`` is in these files, whoever rolls or appends meanwhile
            try:
                _fsync_path(path, data_only=True)
            except KafkaStorageError as e:
                if e.errno != errno.ENOENT:
                    raise  # ENOENT: deleted below a new log start meanwhile: nothing left to make durable
        if dir_behind:
            fsync_dir(self.dir)
        failpoints.hit("flush:after-fsync")
        with self._lock:
            if dir_behind and top > self._dir_synced_base:
                self._dir_synced_base = top
            if leo > self._recovery_point:
                self._recovery_point = leo
                if leo == self._leo:
                    self._unflushed = 0
                self._last_flush = time.monotonic()
        return leo

    def maybe_flush(self) -> None:
        """flush.ms: flush when the last flush is older than it (called by the store's maintenance)."""
        with self._lock:
            if self._closed or self.mode == READ or self._flush_ms == LONG_MAX:
                return
            if (time.monotonic() - self._last_flush) * 1000 >= self._flush_ms and \
                    (self._unflushed or (self._staged is not None and self._staged.count)):
                self._flush_locked()

    def checkpoint_recovery_point(self) -> tuple[tuple[str, int], int] | None:
        """Make the indexes below the recovery point durable; returns the (topic, partition) → offset the store
        writes to recovery-point-offset-checkpoint (None when nothing changed)."""
        with self._lock:
            if self._closed or self.mode == READ:
                return None
            rp = self._recovery_point
            if rp <= self._checkpointed_recovery_point:
                return None
            i = max(0, bisect.bisect_right(self._bases, self._checkpointed_recovery_point) - 1)
            for seg in self._segments[i:]:
                if seg.writable:
                    seg.offset_index.flush()
                    seg.time_index.flush()
            self._checkpointed_recovery_point = rp
            return (self.topic, self.partition), rp

    # ------------------------------------------------------------------------------------------------ read

    @property
    def log_start_offset(self) -> int:
        with self._lock:
            if self.mode != EXCLUSIVE and not self._closed:
                self._sync()
            return self._lso

    @property
    def log_end_offset(self) -> int:
        with self._lock:
            if self.mode != EXCLUSIVE and not self._closed:
                self._sync()
            staged = self._staged.count if self._staged is not None else 0
            return self._leo + staged

    @property
    def high_watermark(self) -> int:
        """Offsets below it are readable by every consumer: a single node acknowledges what it has written."""
        return self.log_end_offset

    @property
    def log_append_time(self) -> bool:
        """True when the topic stamps LogAppendTime (message.timestamp.type): appends carry the broker's clock."""
        return self._log_append_time

    @property
    def closed(self) -> bool:
        """True once closed (or deleted with its topic): open the partition again through the store."""
        return self._closed

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    def segments(self) -> list[LogSegment]:
        """A snapshot of the segment list (for tools and tests)."""
        with self._lock:
            if not self._closed:
                self._sync()
            return list(self._segments)

    # ------------------------------------------------------------------------------------------------ transactions

    def _txn_state(self, create: bool = False) -> PartitionTxns | None:
        """The partition's transactions, caught up to the log end (lock held, view synced); None when the partition
        never held a transactional batch. ``create``: a transactional batch is about to be written: mark the
        partition durably first, so that every process (and every later open) knows to look (txnstate.py)."""
        t = self._txns
        if t is None or t.scanned < 0:
            if not self._txn_known:
                if not create and self._leo == self._txn_absent_at:
                    return None  # nothing appended since the last look: still none (no stat on a fetch's path)
                marker = os.path.join(self._dir_str, TXN_MARKER_FILE)
                if create:
                    if not os.path.exists(marker):
                        fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644)
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
                        fsync_dir(self.dir)
                    self._txn_known = True
                elif os.path.exists(marker):
                    self._txn_known = True
                elif not self._txn_probed:
                    self._txn_probed = True  # a log written by Kafka: its aborted transactions left .txnindex files
                    self._txn_known = any(n.endswith(".txnindex") for n in os.listdir(self.dir))
                if not self._txn_known:
                    self._txn_absent_at = self._leo
                    return None
            t = self._txns = PartitionTxns()
            self._txn_from_snapshot(t)
        if t.scanned < 0 or t.scanned > self._leo:  # not built yet, or the log was cut below what was seen
            t.reset(self._lso)
        elif t.scanned < self._lso:
            t.scanned = self._lso  # records below the start are gone; their open transactions stay open
        t.trim(self._lso)
        pos = t.scanned
        while pos < self._leo:
            view = self._read_locked(pos, 8 << 20)
            if not len(view):
                break
            nxt = t.observe(view, pos)
            if nxt <= pos:
                break
            pos = nxt
        return t

    def _txn_snapshots(self) -> list[int]:
        return sorted(int(n[:20]) for n in os.listdir(self.dir)
                      if n.endswith(".snapshot") and len(n) == 29 and n[:20].isdigit())

    def _txn_from_snapshot(self, t: PartitionTxns) -> None:
        """Start ``t`` from the newest usable producer snapshot (txnstate.py); leaves it unbuilt when there is none."""
        for x in reversed(self._txn_snapshots()):
            if not self._lso <= x <= self._leo:
                continue
            try:
                entries = decode_producer_snapshot(snapshot_path(self.dir, x).read_bytes())
                aborted = []
                for base in self._bases:
                    if base >= x:
                        break
                    path = txn_index_path(self.dir, base)
                    if path.exists():
                        idx = TxnIndex(path)
                        try:
                            aborted.extend(idx.entries())
                        finally:
                            idx.close()
            except (OSError, KafkaError, ValueError) as e:
                _log.warning("%s-%d: producer snapshot %d not used (%s): reading the log from its start", self.topic,
                             self.partition, x, e)
                return
            t.load({e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0},
                   {e.producer_id: e.epoch for e in entries}, sorted(aborted, key=lambda a: a.last_offset), x,
                   {e.producer_id: e.coordinator_epoch for e in entries if e.coordinator_epoch >= 0})
            return

    def _write_txn_snapshot(self) -> None:
        """At a roll (lock held; the log end is the new segment's base): the partition's transactions as of the
        log end, in Kafka's snapshot format; the two newest snapshots are kept."""
        try:
            t = self._txn_state()
            if t is None or t.scanned != self._leo:
                return
            older = [x for x in self._txn_snapshots() if self._lso <= x < self._leo]
            self._complete_txn_indexes(t, older[-1] if older else self._lso)
            entries = [ProducerSnapshotEntry(pid, t.epochs.get(pid, 0), -1, -1, 0, -1,
                                             t.coordinator_epochs.get(pid, -1), t.ongoing.get(pid, -1))
                       for pid in sorted(set(t.epochs) | set(t.ongoing))]
            atomic_write(snapshot_path(self.dir, self._leo), encode_producer_snapshot(entries))
            for x in self._txn_snapshots()[:-2]:
                _unlink(snapshot_path(self.dir, x))
        except (OSError, KafkaError) as e:  # a snapshot only saves work at the next open
            _log.warning("%s-%d: producer snapshot at %d not written: %s", self.topic, self.partition, self._leo, e)

    def _complete_txn_indexes(self, t: PartitionTxns, since: int) -> None:
        """Before a producer snapshot at the log end is written (a roll, partition lock held): every aborted
        transaction whose ABORT marker lies in a segment from the one holding ``since`` (the previous snapshot,
        whose writer did the same below it) up to the log end has its ``.txnindex`` entry. An open from the snapshot
        takes the aborted transactions below it from these files only, and one can be missing: the process that
        appended the marker was killed before it wrote the entry (other processes' scans see the marker; the
        coordinator's retry finds the transaction ended and writes none). Benign ones too: a writer whose state was
        built after a delete-before moved the log start past the first batch of a transaction (and that had no batch
        above it) does not know it is open, and writes no entry for its ABORT marker; a process that saw the first
        batch does (Kafka's entry, its first offset below the log start). ``t`` holds them all: scanned from the
        previous snapshot (or the log start) on. A file missing some is rewritten whole (atomic_write: entries in
        increasing last offset, as Kafka's TransactionIndex wants); one that holds them is only read."""
        bases = self._bases
        for j in range(max(0, bisect.bisect_right(bases, since) - 1), len(bases) - 1):
            want = t.aborted_in(bases[j], bases[j + 1])
            if not want:
                continue
            path = txn_index_path(self.dir, bases[j])
            idx = TxnIndex(path)
            try:
                have = idx.entries()
            finally:
                idx.close()
            known = {a.last_offset for a in have}
            missing = [a for a in want if a.last_offset not in known]
            if missing:
                _log.info("%s-%d: %d aborted transaction(s) (ABORT markers at %s) missing from %s: written from the "
                          "log", self.topic, self.partition, len(missing), [a.last_offset for a in missing], path.name)
                atomic_write(path, b"".join(a.encode() for a in sorted(have + missing, key=lambda a: a.last_offset)))

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the high watermark (Kafka's LSO): a
        read_committed reader sees only records below it."""
        with self._lock:
            self._check_open()
            self._sync()
            t = self._txn_state()
            return self._leo if t is None else t.last_stable_offset(self._lso, self._leo)

    def open_transactions(self) -> dict[int, int]:
        """{producer id: first offset} of the transactions open on this partition."""
        with self._lock:
            self._check_open()
            self._sync()
            t = self._txn_state()
            return {} if t is None else dict(t.ongoing)

    def transactional_producers(self) -> dict[int, tuple[int, int, int]]:
        """{producer id: (the latest epoch of its transactional batches and markers, the coordinator epoch of its
        last marker or -1, the first offset of its open transaction or -1)} on this partition (DescribeProducers)."""
        with self._lock:
            self._check_open()
            self._sync()
            t = self._txn_state()
            if t is None:
                return {}
            return {pid: (t.epochs.get(pid, -1), t.coordinator_epochs.get(pid, -1), t.ongoing.get(pid, -1))
                    for pid in set(t.epochs) | set(t.ongoing)}

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
        """Append the COMMIT or ABORT marker (a control batch, Kafka's bytes) that ends ``producer_id``'s
        transaction on this partition; returns its offset. An ABORT marker that ends an open transaction adds its
        entry to the segment's ``.txnindex`` (fsynced). Durable like any append: ``flush()`` makes it survive power
        loss. A marker for a producer without an open transaction (a coordinator completing again after a crash)
        is written and changes nothing."""
        with self._lock:
            self._check_writable()
            with self._locked_append():
                self._drain()
                t = self._txn_state(create=True)
                fence = t.stale_epoch(producer_id, producer_epoch)
                if fence is not None:
                    raise InvalidProducerEpochError(f"a marker of producer {producer_id} epoch {producer_epoch} is "
                                                    f"fenced on {self.topic}-{self.partition} by epoch {fence}")
                now = _now_ms()
                data = build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)
                failpoints.hit("marker:before-claim")
                base = self._claim(1, len(data))
                set_base_offset(data, 0, base)
                self._write(data, base, now, 1)
                if t.scanned == base:
                    entry = t.complete(producer_id, commit, base)
                    if producer_epoch > t.epochs.get(producer_id, -1):
                        t.epochs[producer_id] = producer_epoch
                    t.coordinator_epochs[producer_id] = coordinator_epoch
                    t.scanned = base + 1
                else:
                    # records staged by other threads (append() takes no lock) went first: _claim wrote them
                    # before the marker; take them and the marker in from the log
                    t = self._txn_state()
                    entry = t.aborted[-1] if t.aborted and t.aborted[-1].last_offset == base else None
                if entry is not None:
                    self._index_aborted(entry)
                return base

    def _index_aborted(self, entry) -> None:
        """Add the entry of an ABORT marker just appended to the active segment's ``.txnindex`` (fsynced)."""
        base = entry.last_offset
        path = txn_index_path(self.dir, self._segments[-1].base_offset)
        created = not path.exists()
        idx = TxnIndex(path)
        try:
            last = idx.last_offset
            if last is not None and last >= base:
                idx.truncate_to(base)  # entries past the log end: their markers were lost
            idx.append(entry)
            idx.flush()
        finally:
            idx.close()
        if created:
            # the new file's directory entry too, before the marker can be durable: an open from a producer
            # snapshot takes the aborted transactions below it from these files
            fsync_dir(self.dir)
        self._changed(current=True)

    def fetch_isolated(self, offset: int, max_bytes: int, read_committed: bool):
        """A Fetch's look at the partition with its isolation level: (log start offset, high watermark, last stable
        offset, whole batches from ``offset`` or None, aborted transactions). read_committed: the batches end
        before the last stable offset, and the aborted list holds (producer id, first offset) of every aborted
        transaction the batches may hold records of (the reader drops those records); read_uncommitted: as
        ``fetch``, and the aborted list is None. OffsetOutOfRangeError outside [log start, high watermark]."""
        with self._lock:
            self._check_open()
            self._sync()
            start, hwm = self._lso, self._leo
            if offset < start or offset > hwm:
                raise OffsetOutOfRangeError(f"fetch offset {offset} is outside [{start}, {hwm}] of "
                                            f"{self.topic}-{self.partition}")
            t = self._txn_state()
            lso = hwm if t is None else t.last_stable_offset(start, hwm)
            limit = lso if read_committed else hwm
            aborted = [] if read_committed else None
            if offset >= limit or max_bytes <= 0:
                return start, hwm, lso, None, aborted
            data = self._read_locked(offset, max_bytes)
            if read_committed and limit < hwm:
                data = _cut_before(data, limit)
            if read_committed and t is not None and len(data):
                aborted = t.aborted_between(offset, next_offset_after(data, offset))
            return start, hwm, lso, data, aborted

    def _read_locked(self, offset: int, max_bytes: int) -> memoryview:
        if offset < self._lso or offset > self._leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"log start offset {self._lso}, log end offset {self._leo}")
        if offset == self._leo:
            return memoryview(b"")
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        segs = self._segments
        for j in range(i, len(segs)):
            view = segs[j].read(offset, max_bytes, True)
            if view is None:
                continue  # nothing at or past the offset here (a compacted segment's hole): the next one
            if count_records(view):
                return view
            return self._read_on(view, j, max_bytes)
        return memoryview(b"")

    def _read_on(self, view: memoryview, j: int, max_bytes: int) -> memoryview:
        """``view`` (from segment ``j``) holds only batches without records (a producer's last batch kept empty by
        the cleaner): go on from its end, in the same segment and then the next ones, up to and including the next
        batch with records, so that no read answers with headers alone while later records exist (librdkafka takes
        such an answer for a message too large to fetch and grows its fetch size). The one copy is of these rare
        answers only."""
        parts, used = [view], len(view)
        nxt = next_offset_after(view)
        segs = self._segments
        while j < len(segs):
            more = segs[j].read(nxt, max(max_bytes - used, 1), True)
            if more is None:
                j += 1
                continue
            parts.append(more)
            used += len(more)
            if count_records(more):
                break
            nxt = next_offset_after(more)
        return memoryview(b"".join(parts)) if len(parts) > 1 else view

    def read(self, offset: int, max_bytes: int = 1048576) -> memoryview:
        """Whole batches from the one containing ``offset``: at most ``max_bytes``, but at least one batch when one
        exists (KIP-74). A zero-copy read-only view of the segment file; empty at the log end. The first batch may
        hold records below ``offset`` (and below the log start offset): callers skip them, as Kafka clients do."""
        with self._lock:
            c = self._changes
            if self.mode == EXCLUSIVE or c is None or not c.unchanged() or self._closed:
                self._check_open()
                self._sync()
            return self._read_locked(offset, max_bytes)

    def fetch(self, offset: int, max_bytes: int) -> tuple[int, int, memoryview | None]:
        """What a Fetch needs in one look (one sync, one lock): (log start offset, high watermark, whole batches
        from ``offset`` as ``read`` returns them, or None at the high watermark or when ``max_bytes`` <= 0).
        OffsetOutOfRangeError outside [log start, high watermark]."""
        with self._lock:
            c = self._changes
            if self.mode == EXCLUSIVE or c is None or not c.unchanged() or self._closed:
                self._check_open()
                self._sync()
            lso, hwm = self._lso, self._leo
            if offset < lso or offset > hwm:
                raise OffsetOutOfRangeError(f"fetch offset {offset} is outside [{lso}, {hwm}] of "
                                            f"{self.topic}-{self.partition}")
            if offset == hwm or max_bytes <= 0:
                return lso, hwm, None
            return lso, hwm, self._read_locked(offset, max_bytes)

    @property
    def last_known_log_start_offset(self) -> int:
        """The log start offset as this process last saw it (no I/O): exact right after an append or a read
        through this object."""
        return self._lso

    def _chunks(self, start_offset, end_offset, chunk_bytes=1 << 20):
        """Yield (view, start, stop): views of whole batches covering [start, stop), taking the lock per chunk."""
        pos = None
        while True:
            with self._lock:
                self._check_open()
                self._sync()
                if pos is None:
                    pos = self._lso if start_offset is None else start_offset
                    if pos < self._lso:
                        raise OffsetOutOfRangeError(
                            f"offset {pos} is below the log start offset {self._lso} of {self.topic}-{self.partition}")
                pos = max(pos, self._lso)  # a delete-before while iterating: never return records below it
                stop = self._leo if end_offset is None else min(end_offset, self._leo)
                if pos >= stop:
                    return
                view = self._read_locked(pos, chunk_bytes)
            if not len(view):
                return
            yield view, pos, stop
            pos = max(pos, next_offset_after(view, pos))

    def records(self, start_offset: int | None = None, end_offset: int | None = None, *,
                isolation_level: str = "read_uncommitted"):
        """Iterate records with offset in [start_offset, end_offset) (default: log start to log end at each chunk),
        each batch CRC-checked first. Records have .offset .timestamp .timestamp_type .key .value .headers.
        ``isolation_level="read_committed"``: only below the last stable offset, without the records of aborted
        transactions (isolation.py). Transaction markers are never records."""
        if is_read_committed(isolation_level):
            return chain_records(committed_chunks(self, start_offset, end_offset))
        return chain_records(self._chunks(start_offset, end_offset))

    def read_columns(self, start_offset: int | None = None, end_offset: int | None = None, *,
                     isolation_level: str = "read_uncommitted") -> dict:
        """Records in [start, end) as numpy columns (Arrow binary layout for keys/values), no per-record objects:
        offset, timestamp, key_offsets, keys, key_valid, value_offsets, values, value_valid.
        ``isolation_level`` as for ``records``."""
        parts = []
        chunks = (committed_chunks(self, start_offset, end_offset, INT32_MAX) if is_read_committed(isolation_level)
                  else self._chunks(start_offset, end_offset, chunk_bytes=INT32_MAX))
        for view, start, stop in chunks:
            cols = decode_columns(view)
            off = cols["offset"]
            if len(off) and (off[0] < start or off[-1] >= stop):
                lo, hi = np.searchsorted(off, [start, stop])
                cols = _slice_columns(cols, int(lo), int(hi))
            parts.append(cols)
            if len(cols["offset"]) and cols["offset"][-1] >= stop - 1:
                break
        return _concat_columns(parts)

    def offset_for_time(self, timestamp: int) -> OffsetAndTimestamp | None:
        """Kafka's ListOffsets: the first offset whose record timestamp >= ``timestamp`` (None past the end);
        -1 latest (high watermark), -2 earliest (log start offset), -3 the record with the max timestamp."""
        with self._lock:
            c = self._changes
            if self.mode == EXCLUSIVE or c is None or not c.unchanged() or self._closed:
                self._check_open()
                self._sync()  # (inlined above: a current shared or read view skips both calls)
            if timestamp >= 0:  # the time index, the offset index and the scan inside the batch: one compiled call
                return _offset_for_time(self._segments, timestamp, self._lso, self._leo)
            if timestamp == LATEST_TIMESTAMP:
                return OffsetAndTimestamp(self._leo, -1)
            if timestamp == EARLIEST_TIMESTAMP:
                return OffsetAndTimestamp(self._lso, -1)
            if timestamp == MAX_TIMESTAMP:
                best = None
                for seg in self._segments:
                    if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far >
                                                          best.max_timestamp_so_far):
                        best = seg
                found = best.find_max_timestamp() if best is not None else None
                if found is None or found[1] < self._lso:
                    return None
                return OffsetAndTimestamp(found[1], found[0])
            raise ValueError(f"timestamp {timestamp}: use >= 0, or -1 latest, -2 earliest, -3 max timestamp")

    # ------------------------------------------------------------------------------------------------ delete

    def delete_records_before(self, offset: int) -> int:
        """KIP-107: advance the log start offset to ``offset`` (-1 = high watermark); records below it are never
        returned again. Checkpointed and fsynced before returning; whole segments below it are removed.
        Returns the new log start offset. O(segments), independent of the data size."""
        with self._lock:
            self._check_writable()
            if not self._delete_policy:
                raise PolicyViolationError(f"delete-records on {self.topic}-{self.partition} needs cleanup.policy "
                                           f"to include 'delete' (it is {self.config['cleanup.policy']!r})")
            with self._locked_append():
                self._drain()  # shared: the partition lock already refreshed
                hw = self._leo
                if offset == -1:
                    offset = hw
                if offset < -1 or offset > hw:
                    raise OffsetOutOfRangeError(
                        f"delete-records offset {offset} for {self.topic}-{self.partition} is out of range: "
                        f"high watermark {hw} (use -1 for the high watermark)")
                if offset <= self._lso:
                    return self._lso
                self._advance_log_start(offset)
                return self._lso

    def _advance_log_start(self, offset: int) -> None:
        self._checkpoints.set_log_start(self.topic, self.partition, offset)
        failpoints.hit("delete-records:before-count")
        # the checkpoint keeps the highest start ever set: one a deleter killed before it counted its change set
        # there is the start now, even when this view (current by the counter) never took it in
        offset = max(offset, self._checkpoints.log_start(self.topic, self.partition))
        self._lso = offset
        self._lso_stamp = self._checkpoints.log_start_stamp()
        self._changed()  # the new start is checkpointed: views take it in now, before the files go
        failpoints.hit("delete-records:after-checkpoint")
        active = self._segments[-1]
        if active.size and active.next_offset <= offset:
            self._roll()  # the active segment is entirely below: roll so it can go too
        victims = []
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            victims.append(self._segments.pop(0))
            self._bases.pop(0)
        for seg in victims:
            self._remove_files(seg)
        self._remove_files_below(self._segments[0].base_offset)
        self._changed(current=True)

    def _remove_files(self, seg: LogSegment, delay: bool = True) -> None:
        """Crash-safe delete: rename to ``.deleted`` first; unlink now or after file.delete.delay.ms."""
        renamed = seg.rename_deleted()
        txn_index = txn_index_path(self.dir, seg.base_offset)
        if self._txn_known and txn_index.exists():
            os.replace(txn_index, txn_index.with_name(txn_index.name + ".deleted"))
            renamed.append(txn_index.with_name(txn_index.name + ".deleted"))
        failpoints.hit("delete:after-rename")
        if delay and self._delete_delay_s > 0:
            due = time.monotonic() + self._delete_delay_s
            self._deleted_files.extend((due, p) for p in renamed)
        else:
            for p in renamed:
                _unlink(p)

    def purge_deleted(self, force: bool = False) -> int:
        """Unlink ``.deleted`` files whose delay has passed (or all with ``force``); returns how many."""
        with self._lock:
            now = time.monotonic()
            due = [p for t, p in self._deleted_files if force or t <= now]
            self._deleted_files = [(t, p) for t, p in self._deleted_files if not (force or t <= now)]
        for p in due:
            _unlink(p)
        return len(due)

    def run_retention(self, now_ms: int | None = None) -> int:
        """Kafka's deleteOldSegments: log-start breach, then retention.bytes, then retention.ms, deleting a prefix
        of whole segments and advancing the log start offset. Returns the number of segments removed."""
        with self._lock:
            if self._closed or self.mode == READ or not self._delete_policy:
                return 0
            with self._locked_append():
                self._drain()  # shared: the partition lock already refreshed
                now = _now_ms() if now_ms is None else now_ms
                segs = self._segments
                n = 0
                # log start offset breach
                while n < len(segs) - 1 and segs[n + 1].base_offset <= self._lso:
                    n += 1
                if self._retention_bytes >= 0:
                    diff = sum(s.size for s in segs) - self._retention_bytes
                    for s in segs[:n]:
                        diff -= s.size
                    while n < len(segs) and diff - segs[n].size >= 0 and segs[n].size > 0:
                        diff -= segs[n].size
                        n += 1
                if self._retention_ms >= 0:
                    while n < len(segs) and segs[n].size > 0 and now - segs[n].largest_timestamp > self._retention_ms:
                        n += 1
                if n == 0:
                    return 0
                if n == len(segs):
                    self._roll()
                new_lso = max(self._lso, self._segments[n].base_offset)
                if new_lso > self._lso:
                    self._checkpoints.set_log_start(self.topic, self.partition, new_lso)
                    self._lso = new_lso
                    self._lso_stamp = self._checkpoints.log_start_stamp()
                    self._changed()
                victims = self._segments[:n]
                del self._segments[:n]
                del self._bases[:n]
                for seg in victims:
                    self._remove_files(seg)
                self._remove_files_below(self._segments[0].base_offset)
                self._changed(current=True)
                return n

    # ------------------------------------------------------------------------------------------------ compaction

    def run_cleaner(self, now_ms: int | None = None, *, force: bool = False,
                    dedupe_buffer_bytes: int | None = None, should_stop=None):
        """One round of log compaction when the topic's cleanup.policy includes compact and the dirty section is
        due (``force``: whenever anything is dirty). Returns the round's CleanerStats, or None when nothing ran.
        Appends and reads go on during the copy; the swap holds the locks for a few renames and fsyncs."""
        if self._closed or self.mode == READ or not self._compact or self.topic == "__consumer_offsets":
            # __consumer_offsets is bounded by the OffsetStore's snapshots and delete-before instead: a tombstone
            # removed above a snapshot would bring back the offset it deleted (storage/offsets.py)
            return None
        if not self._cleaning.acquire(blocking=False):
            return None
        try:
            buf = dedupe_buffer_bytes if dedupe_buffer_bytes is not None else \
                self.config["log.cleaner.dedupe.buffer.size"]
            return cleaner.clean_log(self, _now_ms() if now_ms is None else now_ms, force=force,
                                     dedupe_buffer_bytes=buf,
                                     load_factor=float(self.config["log.cleaner.io.buffer.load.factor"]),
                                     should_stop=should_stop)
        finally:
            self._cleaning.release()

    def _swap_in_cleaned(self, group, names: dict) -> bool:
        """The cleaner's swap (cleaner.py, step 4) of the ``.cleaned`` files for the group's segments, when they
        are still what the copy read. False (nothing changed) when a delete-before or retention removed or moved
        them meanwhile."""
        base = group[0].base
        with self._lock:
            if self._closed:
                return False
            with self._locked_append():  # shared: the partition lock, the view refreshed
                i = bisect.bisect_left(self._bases, base)
                cur = self._segments[i:i + len(group)]
                if len(cur) != len(group) or i + len(group) >= len(self._segments) or any(
                        c.base_offset != g.base or c.size != g.size for c, g in zip(cur, group)) or \
                        self._segments[i + len(group)].base_offset != group[-1].end or self._lso >= group[-1].end:
                    return False
                # other views list again whatever happens next: a cleaner killed past its commit point leaves the
                # generation changed, so every other view finishes the swap (writers) or lists it (readers)
                self._clean_gen = cleaner.bump_generation(self.dir)
                self._changed()
                # the old group ends where the next segment begins (the cleaned one may end below it)
                cleaner.commit_swap(self.dir, base, names, group[-1].end)
                try:
                    renamed = []
                    for seg in cur:
                        renamed += seg.rename_deleted()
                    failpoints.hit("clean:after-old-deleted")
                    fsync_dir(self.dir)
                    cleaner.finish_swap(self.dir, base)
                    self._swapped.pop(base, None)
                    new = self._open_segment(base, False)
                except BaseException:
                    # committed on disk: finish it from the files, or take this view out of service
                    try:
                        self._complete_swaps()
                        new = self._open_segment(base, False)
                    except BaseException:
                        self._closed = True
                        raise
                    self._segments[i:i + len(group)] = [new]
                    self._bases[i:i + len(group)] = [base]
                    self._changed()
                    raise
                self._segments[i:i + len(group)] = [new]
                self._bases[i:i + len(group)] = [base]
                self._clean_gen = cleaner.bump_generation(self.dir)  # this view is current already
                self._changed(current=True)
                if self._delete_delay_s > 0:
                    due = time.monotonic() + self._delete_delay_s
                    self._deleted_files.extend((due, p) for p in renamed)
                else:
                    for p in renamed:
                        _unlink(p)
                return True

    # ------------------------------------------------------------------------------------------------ close

    def close(self, finalize: bool | None = None) -> None:
        """Flush (writers), write the final time-index entries, trim indexes, release files. Idempotent.

        ``finalize`` (default: only in exclusive mode) seals the active segment's indexes; a shared writer must
        not, while other processes may still be appending to that segment (the store passes True when it is the
        last writer to close)."""
        if finalize is None:
            finalize = self.mode == EXCLUSIVE
        with self._lock:
            if self._closed:
                return
            try:
                if self._staged is not None:
                    self._staged.close()  # atomic: nothing is staged after this; what is staged is flushed next
                if self.mode != READ:
                    self._flush_locked()
                    self.checkpoint_recovery_point()
            finally:
                self._closed = True
                self._staged = None
                for seg in self._segments:
                    if self.mode == READ or not seg.writable or not finalize:
                        seg.close_without_finalizing()
                    else:
                        seg.close()
                if self._plock is not None:
                    self._plock.close()
                if self._gen_fd >= 0:
                    os.close(self._gen_fd)
                    self._gen_fd = -1
                if self._changes is not None:
                    self._changes.close()
        self.purge_deleted(force=True)

    def __repr__(self):
        return (f"Log({self.topic}-{self.partition}, mode={self.mode}, start={self._lso}, end={self._leo}, "
                f"segments={len(self._segments)})")


def retire_changes(partition_dir: Path) -> None:
    """Before a partition directory is deleted (delete_topic): other processes' views of it stop trusting its change
    counter (nobody bumps it again) and take the files in on every call, as views without a counter do."""
    try:
        counter = ChangeCounter(os.path.join(partition_dir, CHANGE_COUNTER_FILE), True, create=False)
    except FileNotFoundError:
        return
    except OSError as e:
        if isinstance(e, KafkaStorageError) and e.errno == errno.ENOENT:
            return
        raise
    try:
        counter.retire()
    finally:
        counter.close()


class _PartitionLock:
    __slots__ = ("log",)

    def __init__(self, log: Log):
        self.log = log

    def __enter__(self):
        log = self.log
        timeout = log.config.get("lock.timeout.ms", 30000) / 1000.0
        log._plock.acquire(timeout=timeout, what=f"append to {log.topic}-{log.partition}")
        try:
            c = log._changes
            if not (c is not None and log._segments and c.unchanged()
                    and not _segment_exists(os.path.join(log._dir_str, segment_file_name(log._leo)))):
                log._refresh()
            # else the view is the partition: every writer counts its change before it lets go of this lock, so
            # the counter unmoved since this view took the files in leaves only what a writer that died may have
            # left uncounted: a segment it created rolling (looked for above), bytes past the view's end (a batch,
            # whole or torn: the torn-tail check below takes whole ones in and cuts the rest) or, from a recovery
            # killed before its count, a file shorter than the view (below)
            if log._session:
                log._check_published_end()  # before anything is cut: bytes past a view behind it are batches
            active = log._segments[-1]
            torn = active.torn_bytes_now()
            if torn < 0:
                log._refresh()  # the active segment is shorter than the view: reopen it
                if log._session:
                    log._check_published_end()
                active = log._segments[-1]
                torn = active.torn_bytes_now()
            if torn > 0:
                active.truncate_torn_tail()  # a writer died mid-append: cut its partial batch before ours
                log._refresh()  # the view's log end follows what the segment took in before it cut
                log._changed(current=True)
        except BaseException:
            log._plock.release()
            raise
        return self

    def __exit__(self, *exc):
        self.log._plock.release()


class _Noop:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


_NOOP = _Noop()


def _cut_before(view: memoryview, limit: int) -> memoryview:
    """The batches of ``view`` that start below ``limit`` (a last stable offset is always a batch's base)."""
    for batch in iter_batches(view):
        if batch.base_offset >= limit:
            return view[:batch.position]
    return view


def _segment_exists(path: str) -> bool:
    """Whether another writer started the segment at ``path`` (a roll): False only when the file system says no
    (ENOENT). Any other failure (EIO, ESTALE, a mount gone) is raised as KafkaStorageError, never taken for "not
    rolled": a view that stopped there would end below the log end, and a shared writer would append below it."""
    try:
        failpoints.hit("refresh:look-next-segment")
        os.stat(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        raise storage_error(e, "stat", path) from None


def _index_missing(dir: Path, base: int) -> bool:
    for suffix in (".index", ".timeindex"):
        p = dir / segment_file_name(base, suffix)
        try:
            size = p.stat().st_size
        except FileNotFoundError:
            return True
        if size % (8 if suffix == ".index" else 12):
            return True
    return False


def _recompress(batches, codec: int):
    out = bytearray()
    placed = []
    for _, batch, _ in batches:
        recs = list(batch)
        pos = len(out)
        out += build_batch([r.value for r in recs], [r.key for r in recs], [r.timestamp for r in recs],
                           [r.headers for r in recs], compression=codec, producer_id=batch.producer_id,
                           producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                           is_transactional=batch.is_transactional)
        placed.append(pos)
    # views into the finished buffer only: a bytearray cannot grow while a batch view holds it; build_batch wrote
    # each header's MaxTimestamp from the records
    return out, [(pos, b, b.max_timestamp) for pos, b in ((pos, RecordBatch(out, pos)) for pos in placed)]


# Layout of decode_columns' output: per-record arrays, Arrow binary columns (offsets n+1 + data), and headers
# (header_offsets n+1 pointing into per-header binary columns).
_PER_RECORD = ("offset", "timestamp", "timestamp_type", "key_valid", "value_valid")
_BINARY = (("key_offsets", "keys"), ("value_offsets", "values"))
_HEADER_BINARY = (("header_key_offsets", "header_keys"), ("header_value_offsets", "header_values"))


def _cut_binary(offs, data, lo, hi):
    a, b = int(offs[lo]), int(offs[hi])
    return offs[lo:hi + 1] - offs[lo], data[a:b]


def _slice_columns(cols: dict, lo: int, hi: int) -> dict:
    out = {k: cols[k][lo:hi] for k in _PER_RECORD}
    for o, d in _BINARY:
        out[o], out[d] = _cut_binary(cols[o], cols[d], lo, hi)
    h0, h1 = int(cols["header_offsets"][lo]), int(cols["header_offsets"][hi])
    out["header_offsets"] = cols["header_offsets"][lo:hi + 1] - h0
    for o, d in _HEADER_BINARY:
        out[o], out[d] = _cut_binary(cols[o], cols[d], h0, h1)
    out["header_value_valid"] = cols["header_value_valid"][h0:h1]
    return out


def _join_offsets(arrays) -> np.ndarray:
    total = sum(int(a[-1]) for a in arrays)
    dtype = np.int32 if total <= INT32_MAX else np.int64
    pieces, shift = [arrays[0].astype(dtype)], int(arrays[0][-1])
    for a in arrays[1:]:
        pieces.append(a[1:].astype(dtype) + shift)
        shift += int(a[-1])
    return np.concatenate(pieces)


def _concat_columns(parts: list[dict]) -> dict:
    if not parts:
        return {k: v for k, v in decode_columns(b"").items() if isinstance(v, np.ndarray)}
    keep = _PER_RECORD + ("header_offsets", "header_value_valid") + tuple(x for pair in _BINARY + _HEADER_BINARY
                                                                          for x in pair)
    if len(parts) == 1:
        return {k: parts[0][k] for k in keep}
    out = {k: np.concatenate([p[k] for p in parts]) for k in _PER_RECORD + ("header_value_valid",)}
    for o, d in _BINARY + _HEADER_BINARY:
        out[o] = _join_offsets([p[o] for p in parts])
        out[d] = np.concatenate([p[d] for p in parts])
    out["header_offsets"] = _join_offsets([p["header_offsets"] for p in parts])
    return out
