"""The log cleaner: Kafka's log compaction for topics whose ``cleanup.policy`` includes ``compact``.

One round over one partition (``clean_log``, called by ``Log.run_cleaner``):

1. **Choose.** The dirty section runs from the partition's entry in ``cleaner-offset-checkpoint`` (Kafka's file;
   the log start when none) to the first uncleanable offset: the active segment's base, or the base of the first
   segment holding a record newer than ``min.compaction.lag.ms``. The round runs when dirty bytes / (clean + dirty)
   bytes >= ``min.cleanable.dirty.ratio``, or when the dirty section's first record is older than
   ``max.compaction.lag.ms`` (``force`` runs it whenever something is dirty).
2. **Map.** An ``OffsetMap`` (compiled; bounded by ``log.cleaner.dedupe.buffer.size``, sized to the dirty records)
   maps each key of the dirty section to its latest offset. When it fills, the round cleans up to the segment
   where it stopped, as Kafka does.
3. **Copy.** Segments from the log start up to the mapped end are cleaned in groups (consecutive segments whose
   sizes add up to at most ``segment.bytes``). Each group is copied into one ``<base>.log.cleaned`` segment (and
   its ``.index.cleaned``, ``.timeindex.cleaned``) keeping a record when no later offset is mapped for its key;
   records without a key go (Kafka's cleaner drops them). Tombstones (null values) follow KIP-534: the first
   cleaning that keeps one stamps its batch with a delete horizon, now + ``delete.retention.ms``; a cleaning after
   the horizon removes them. Batches keep their offsets (holes stay), producer id/epoch/sequence and record
   timestamps (``filter_batches``). A batch that loses all its records goes, except a producer's last batch, which
   stays as an empty header (Kafka's writeEmptyHeader) so that idempotence state survives: what Kafka keeps, and
   nothing more (a segment of empty batches would answer a Fetch with headers and no record). A cleaned segment may
   therefore end below the next segment's base offset, or be empty. The copy runs without the partition's locks:
   appends and reads go on.
4. **Swap** (under the Log's lock and, in shared mode, the partition file lock; a few renames and fsyncs):
   ``.cleaned`` fsynced → ``<base>.swap-end`` written and fsynced (the end of the old segments the swap replaces:
   the next segment's base offset, which the cleaned segment's own last offset need not reach) → index files renamed
   ``.swap``, directory fsynced → ``.log.cleaned`` renamed ``.log.swap``, directory fsynced (**the commit
   point**) → the old group's files renamed ``.deleted``, directory fsynced → ``.swap`` files renamed to their
   final names (indexes first), directory fsynced, ``.swap-end`` removed. The
   loader finishes a swap that has its ``.log.swap`` (removing the old segments in [base, swap end)) and undoes one
   that has not (Log._complete_swaps). A ``.log.swap`` without its ``.swap-end`` (written before the end file existed,
   when a group always kept its last batch) ends at its own next offset. Other processes' views see a
   per-partition generation counter (``.kafkalog-clean-gen``) change and list the directory again.
5. **Checkpoint.** The mapped end is written to ``cleaner-offset-checkpoint``.

Failpoints (storage/failpoints.py): ``clean:during-copy``, ``clean:after-cleaned``, ``clean:before-commit``,
``clean:after-commit``, ``clean:after-old-deleted``, ``clean:after-index-renamed``, ``clean:after-swap``,
``clean:before-checkpoint``.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass, field

from .._engine.batch import iter_batches
from .._engine.compaction import OffsetMap, filter_batches, producer_last_offsets
from .._engine.segment import LogSegment, segment_file_name
from ..errors import storage_error
from . import failpoints
from .files import FileLock, fsync_dir, fsync_path
from .files import unlink_if_exists as _unlink

_log = logging.getLogger("kafkalog")

CLEANED, SWAP = ".cleaned", ".swap"
SWAP_END = ".swap-end"  # <base>.swap-end: "<end offset>\n", the end of the old segments a committed swap replaces
SUFFIXES = (".log", ".index", ".timeindex")
GENERATION_FILE = ".kafkalog-clean-gen"
CLEANER_LOCK = ".kafkalog-cleaner.lock"
_COPY_CHUNK = 4 << 20  # output bytes of one filter_batches call
_IN_CHUNK = 1 << 20    # input bytes of one compiled call: other threads take the GIL between calls
_MAP_START = 1 << 20   # the offset map starts here and doubles up to log.cleaner.dedupe.buffer.size
_INT32_MAX = 2**31 - 1


@dataclass
class CleanerStats:
    """What one round did (Kafka's CleanerStats, the parts that are measured here)."""
    topic: str = ""
    partition: int = 0
    first_dirty: int = 0
    end_offset: int = 0              # the mapped end: the new cleaner checkpoint
    groups: int = 0
    segments_in: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    records_removed: int = 0
    map_entries: int = 0
    map_bytes: int = 0
    seconds: float = 0.0
    aborted: str = ""                # why a group was not swapped in (the log changed under the copy)
    swaps: list = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0


class _Changed(Exception):
    """A segment the round planned on is gone or shorter (a delete-before, retention): the round stops."""


class _Snap:
    """A segment as the round saw it (under the Log's lock). The round reads it through a mapping of its own, opened
    for one pass and released after it, so the pages it touches do not stay in this process's memory."""
    __slots__ = ("dir", "base", "size", "end", "largest_ts", "_seg", "aborted")

    def __init__(self, seg: LogSegment, end: int, aborted=None):
        self.aborted = aborted or {}  # producer id -> [(first offset, ABORT marker offset)]
        self.dir = seg.dir
        self.base = seg.base_offset
        self.size = seg.size
        self.end = end  # the next segment's base (a cleaned segment's own last offset may lie below it)
        self.largest_ts = seg.largest_timestamp
        self._seg = None

    def open(self, sealed: bool = True):
        """A view of the segment's first ``size`` bytes (what the round saw). A sealed segment must be exactly as
        long as the round saw it: a different length means another cleaner replaced it (the round's view was
        stale)."""
        try:
            seg = LogSegment(self.dir, self.base, writable=False, reserve_bytes=0)
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise _Changed(f"segment {self.base} was removed") from None
            raise
        if seg.size < self.size or (sealed and seg.size != self.size):
            seg.close_without_finalizing()
            raise _Changed(f"segment {self.base} is not what the round saw ({seg.size} bytes, not {self.size})")
        self._seg = seg
        view = seg.view(0, self.size)
        return _without_aborted(view, self.aborted) if self.aborted else view

    def close(self) -> None:
        if self._seg is not None:
            self._seg.close_without_finalizing()  # the mapping goes with the last view
            self._seg = None


def _without_aborted(view, aborted: dict):
    """``view``'s batches without those of aborted transactions (a copy, only when it holds any)."""
    keep, dropped = [], False
    for b in iter_batches(view):
        ranges = aborted.get(b.producer_id) if b.is_transactional and not b.is_control else None
        if ranges and any(first <= b.base_offset < last for first, last in ranges):
            dropped = True
            continue
        keep.append((b.position, b.size_in_bytes))
    if not dropped:
        return view
    out = bytearray()
    for pos, size in keep:
        out += view[pos:pos + size]
    return out


def bump_generation(dir_path) -> int:
    """Tell other processes' views of this partition that its segments changed (in place: they pread it).
    Returns the new generation."""
    path = os.path.join(dir_path, GENERATION_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        raw = os.pread(fd, 8, 0)
        gen = int.from_bytes(raw, "little") + 1 if len(raw) == 8 else 1
        os.pwrite(fd, gen.to_bytes(8, "little"), 0)
    finally:
        os.close(fd)
    return gen


def read_generation(fd: int) -> int:
    raw = os.pread(fd, 8, 0)
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def _cleaned_name(base: int, suffix: str, state: str) -> str:
    return segment_file_name(base, suffix) + state


def clean_log(log, now_ms: int, *, force: bool = False, dedupe_buffer_bytes: int = 134217728,
              load_factor: float = 0.9, should_stop=None) -> CleanerStats | None:
    """One cleaning round over ``log`` (a writable Log whose policy includes compact); None when nothing was due
    or another process is cleaning it. ``should_stop()`` is asked between copied chunks: when it says True (the
    store closes) the round stops, its ``.cleaned`` files go and nothing is swapped. See the module docstring."""
    t0 = time.monotonic()
    lock = FileLock(log.dir / CLEANER_LOCK)
    if not lock.try_acquire():
        return None  # another process's cleaner has this partition
    try:
        return _clean(log, now_ms, force, dedupe_buffer_bytes, load_factor, t0, should_stop or _never)
    finally:
        lock.close()


def _never() -> bool:
    return False


class _Stopped(Exception):
    pass


def _clean(log, now_ms, force, dedupe_buffer_bytes, load_factor, t0, should_stop):
    cfg = log.config
    with log._lock:
        log._check_writable()
        log._sync()
        segs = log._segments
        if len(segs) < 2:
            return None
        lso = log._lso
        ckpt = log._checkpoints.cleaner_offset(log.topic, log.partition)
        first_dirty = ckpt if lso <= ckpt <= segs[-1].base_offset else lso
        min_lag = cfg["min.compaction.lag.ms"]
        first_uncleanable = segs[-1].base_offset
        # a sealed segment's offsets run to the next segment's base: a cleaned one may end below it, or be empty
        ends = {s.base_offset: nxt.base_offset for s, nxt in zip(segs, segs[1:])}
        ends[segs[-1].base_offset] = segs[-1].next_offset
        for seg in segs[:-1]:
            if ends[seg.base_offset] > first_dirty and now_ms - seg.largest_timestamp < min_lag:
                first_uncleanable = seg.base_offset
                break
        aborted: dict[int, list[tuple[int, int]]] = {}
        txns = log._txn_state()
        if txns is not None:
            # transactions (Kafka's cleaner does the same): a segment holding records at or past the last stable
            # offset is not cleaned (an open transaction's record may yet be aborted: mapped as its key's latest it
            # would remove the committed value before it); aborted transactions' records are neither mapped nor
            # kept; markers are kept (control batches are copied as they are)
            stable = txns.last_stable_offset(lso, log._leo)
            for seg in segs[:-1]:
                if seg.base_offset >= first_uncleanable:
                    break
                if ends[seg.base_offset] > stable:
                    first_uncleanable = seg.base_offset
                    break
            for a in txns.aborted:
                aborted.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
        sealed = [s for s in segs[:-1] if s.base_offset < first_uncleanable and ends[s.base_offset] > lso]
        dirty = [s for s in sealed if ends[s.base_offset] > first_dirty and s.size > 0]
        if not dirty:
            return None
        dirty_bytes = sum(s.size for s in dirty)
        clean_bytes = sum(s.size for s in sealed if ends[s.base_offset] <= first_dirty)
        ratio = dirty_bytes / max(1, dirty_bytes + clean_bytes)
        first_ts = dirty[0].rolling_based_timestamp if dirty[0].rolling_based_timestamp >= 0 else \
            dirty[0].largest_timestamp
        overdue = first_ts >= 0 and now_ms - first_ts > cfg["max.compaction.lag.ms"]
        if not (force or overdue or ratio >= float(cfg["min.cleanable.dirty.ratio"])):
            return None
        snaps = [_Snap(s, ends[s.base_offset], aborted) for s in sealed]
        later = [_Snap(s, ends[s.base_offset], aborted) for s in segs if s.base_offset >= first_uncleanable]
        seg_bytes = log._segment_bytes
    stats = CleanerStats(log.topic, log.partition, first_dirty=first_dirty)
    try:
        return _clean_snapshot(log, now_ms, dedupe_buffer_bytes, load_factor, t0, should_stop, stats, snaps, later,
                               first_dirty, first_uncleanable, seg_bytes)
    except _Changed as e:
        stats.aborted = str(e)
        stats.seconds = time.monotonic() - t0
        if log.mode == "shared":
            with log._lock:  # this view may be stale: take the directory as it is (finishing a swap left behind)
                if not log._closed:
                    with log._locked_append():
                        log._reload_segments()
        return stats


def _clean_snapshot(log, now_ms, dedupe_buffer_bytes, load_factor, t0, should_stop, stats, snaps, later,
                    first_dirty, first_uncleanable, seg_bytes):
    cfg = log.config
    # 2. the offset map over the dirty section: it grows with the distinct keys, up to the configured bound
    dirty_snaps = [s for s in snaps if s.end > first_dirty]
    omap = OffsetMap(dedupe_buffer_bytes, load_factor, initial_bytes=min(_MAP_START, dedupe_buffer_bytes))
    end = first_uncleanable
    for s in dirty_snaps:
        view = s.open()
        try:
            pos, n = 0, len(view)
            while pos < n and not omap.full:
                pos, reached = omap.add_batches(view, first_dirty, first_uncleanable, pos, _IN_CHUNK)
                if reached >= first_uncleanable:
                    break
        finally:
            del view
            s.close()
        if omap.full:
            end = s.base  # the round cleans up to the first segment whose keys did not all fit
            break
    if end <= first_dirty:
        _log.warning("log cleaner: %s-%d: segment %d has more distinct keys than log.cleaner.dedupe.buffer.size "
                     "holds (%d entries); not cleaned", log.topic, log.partition, dirty_snaps[0].base,
                     omap.max_entries)
        return None
    stats.end_offset = end
    stats.map_entries = omap.size
    stats.map_bytes = omap.memory_bytes

    # a producer's last batch stays (empty if need be): idempotence state is read from the batches
    last_of_pid: dict[int, int] = {}
    for s in snaps + later:
        view = s.open(sealed=s in snaps)
        try:
            producer_last_offsets(view, last_of_pid)
        finally:
            del view
            s.close()
    keep_pids = set(last_of_pid.values())

    # 3. groups of whole segments below the mapped end
    cleanable = [s for s in snaps if s.base < end]
    groups, cur, size = [], [], 0
    for s in cleanable:
        if cur and (size + s.size > seg_bytes or s.end - 1 - cur[0].base > _INT32_MAX):
            groups.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += s.size
    if cur:
        groups.append(cur)
    drm = cfg["delete.retention.ms"]
    for group in groups:
        try:
            swapped = _clean_group(log, group, omap, keep_pids, now_ms, drm, stats, should_stop)
        except _Stopped:
            stats.aborted = "stopped (the store is closing)"
            swapped = False
        if not swapped:
            break
    else:
        failpoints.hit("clean:before-checkpoint")
        log._checkpoints.set_cleaner_offset(log.topic, log.partition, end)
    stats.seconds = time.monotonic() - t0
    return stats


def _clean_group(log, group: list[_Snap], omap: OffsetMap, keep_pids: set, now_ms: int, drm: int,
                 stats: CleanerStats, should_stop) -> bool:
    base = group[0].base
    d = log.dir
    names = {sfx: d / _cleaned_name(base, sfx, CLEANED) for sfx in SUFFIXES}
    for p in names.values():
        _unlink(p)
    total = sum(s.size for s in group)
    for s in group:  # a stale .deleted of an earlier round would be freed inside the swap's rename: free it now
        for sfx in SUFFIXES:
            _unlink(d / (segment_file_name(s.base, sfx) + ".deleted"))
    cleaned = LogSegment(d, base, index_interval_bytes=log._index_interval, max_index_size=log._index_bytes,
                         writable=True, reserve_bytes=total + 4096, create=True, file_suffix=CLEANED)
    try:
        for s in group:
            view = s.open()
            try:
                pos, n = 0, len(view)
                while pos < n:
                    out, pos, kept, removed = filter_batches(view, pos, omap, now_ms, drm, keep_pids, _COPY_CHUNK,
                                                             _IN_CHUNK)
                    stats.records_kept += kept
                    stats.records_removed += removed
                    if out:
                        cleaned.append(out)
                    failpoints.hit("clean:during-copy")
                    if should_stop() or log._closed:
                        raise _Stopped()
            finally:
                del view
                s.close()
            stats.bytes_read += s.size
        stats.bytes_written += cleaned.size
        cleaned.flush()
        cleaned.close()  # final time-index entry, indexes trimmed
        for p in names.values():
            fsync_path(p)
    except BaseException:
        cleaned.close_without_finalizing()
        for p in names.values():
            _unlink(p)
        raise
    failpoints.hit("clean:after-cleaned")
    swapped = log._swap_in_cleaned(group, names)
    if not swapped:
        stats.aborted = f"the segments of [{base}, {group[-1].end}) changed during the copy"
        for p in names.values():
            _unlink(p)
        return False
    stats.groups += 1
    stats.segments_in += len(group)
    stats.swaps.append((base, group[-1].end, len(group)))
    return True


def swap_end_path(dir_path, base: int):
    return dir_path / segment_file_name(base, SWAP_END)


def write_swap_end(dir_path, base: int, end: int) -> None:
    """The end offset of the old segments the swap at ``base`` replaces, fsynced (its directory entry is made
    durable by the directory fsync before the commit point)."""
    path = swap_end_path(dir_path, base)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"%d\n" % end)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise storage_error(e, "write", path) from None


def read_swap_end(dir_path, base: int) -> int | None:
    """The end written by ``write_swap_end``; None when there is no end file. A committed swap's end file is whole
    (fsynced before the commit point): anything else in it is a storage error naming the file."""
    path = swap_end_path(dir_path, base)
    try:
        with open(path, "rb") as f:
            raw = f.read(64)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise storage_error(e, "read", path) from None
    try:
        end = int(raw.decode("ascii").strip())
    except ValueError:
        raise storage_error(OSError(errno.EINVAL, f"malformed swap end {raw[:32]!r}"), "read", path) from None
    if end <= base:
        raise storage_error(OSError(errno.EINVAL, f"swap end {end} is not above the base offset {base}"), "read",
                            path)
    return end


def commit_swap(dir_path, base: int, names: dict, end: int) -> dict:
    """Steps 1-2 of the swap: the swap's end offset (the next segment's base) written, then ``.cleaned`` →
    ``.swap`` (indexes first, then the .log: the commit point), each step made durable. Returns the ``.swap``
    paths. Caller holds the partition's locks."""
    swaps = {sfx: dir_path / _cleaned_name(base, sfx, SWAP) for sfx in SUFFIXES}
    write_swap_end(dir_path, base, end)
    for sfx in (".index", ".timeindex"):
        _rename(names[sfx], swaps[sfx])
    fsync_dir(dir_path)
    failpoints.hit("clean:before-commit")
    _rename(names[".log"], swaps[".log"])
    fsync_dir(dir_path)
    failpoints.hit("clean:after-commit")
    return swaps


def finish_swap(dir_path, base: int) -> None:
    """Last step: the ``.swap`` files take their final names (indexes first, the .log last), then made durable.
    A ``.swap`` already renamed is skipped (the loader may finish what a killed cleaner began)."""
    for sfx in (".index", ".timeindex"):
        src = dir_path / _cleaned_name(base, sfx, SWAP)
        if src.exists():
            _rename(src, dir_path / segment_file_name(base, sfx))
    failpoints.hit("clean:after-index-renamed")
    _rename(dir_path / _cleaned_name(base, ".log", SWAP), dir_path / segment_file_name(base, ".log"))
    fsync_dir(dir_path)
    failpoints.hit("clean:after-swap")
    _unlink(swap_end_path(dir_path, base))  # not needed once the .log.swap is gone; the loader removes a leftover


def _rename(src, dst) -> None:
    try:
        os.replace(src, dst)
    except OSError as e:
        raise storage_error(e, "rename", src) from None
