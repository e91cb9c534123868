"""Share partitions (KIP-932): a share group's view of one topic partition, on the DurableQueue's own state.

A share group G on topic T and ``DurableQueue(path, name=T, group=G)`` are the same group on the same data: the
share-partition of (G, T, p) is the queue state of ``<data dir>/T-p/.kafkalog-queues/G/`` (queue.py's module
docstring has the format), read and written under the same ``state.lock``. Kafka's share-partition states map onto
it as follows::

    Kafka (SharePartition)               the queue state
    SPSO (share-partition start offset)  AckedPrefix: every offset below it is ACKNOWLEDGED or ARCHIVED
    offsets never acquired (> SPEO)      [NextOffset, log end): AVAILABLE, delivery count 0
    AVAILABLE, delivery count n          the Redeliveries set, Deliveries = n
    ACQUIRED by a member, count n        a lease of this broker's worker, Deliveries = n (which member holds it,
                                         and its lock deadline, are the broker's memory: they die with it)
    ACKNOWLEDGED / ARCHIVED              not listed (done; neither comes back). The state keeps no difference
                                         between them: both leave the in-flight window for ever

The broker process is one worker of each group it serves (``worker-<pid>-<hex8>.acks``, flocked for its life,
never written: the broker writes its acknowledgements into the state itself, fsynced before it answers). Power
loss: the state slots alternate, so before a write overwrites the older slot, the slot in force (newer) is fsynced
if this process has not fsynced it yet: a torn write then leaves a durable state that holds every acknowledgement
answered (a DurableQueue worker of the same group does not do this: its acks, and what it writes over, are
at-least-once under power loss, as its table says). An acquisition's write is not fsynced before its answer; the
broker fsyncs it just behind (``sync_behind``), so the acknowledgement that follows usually needs one fsync, and a
ShareFetch's acknowledgements and acquisition of one partition are one write. Its members' acquisitions are its
leases; which member holds which offsets is kept as ranges (an acquired batch is one entry, however many
records). A member's acquisition lock that expires, a RELEASE, a member that leaves and the broker's clean stop
give offsets back to the Redeliveries set with their count (ARCHIVED instead when the count
reached ``group.share.delivery.count.limit``); a kill -9 of the broker leaves its journal unlocked, so the next
worker that reaps (a DurableQueue, or the broker itself when it starts again) gives its leases back. A DurableQueue
worker's ``nack`` can push a count past the limit: such offsets are archived when the broker would acquire them.

Acquisition takes the Redeliveries set first (lowest offsets first), then new offsets from NextOffset, up to
``max_records`` (batch_optimized mode: new offsets run on to the end of the record batch that holds the last one,
as Kafka acquires whole batches; record_limit mode: exactly ``max_records``). A record on its last delivery attempt
(its count reaches the limit with this delivery) is acquired alone, as Kafka delivers it.
"""

from __future__ import annotations

import bisect
import fcntl
import itertools
import os
import secrets
import shutil
import threading
import time

from .._engine.batch import RecordBatch, iter_batches, next_offset_after
from ..errors import (
    InvalidRecordStateError,
    InvalidRequestError,
    NonEmptyGroupError,
    OffsetOutOfRangeError,
    storage_error,
)
from ..storage.files import FileLock, fsync_dir, make_durable_dir
from ..storage.txnformat import marker_of_batch
from .queue import (
    _START,
    JOURNAL_SUFFIX,
    QUEUES_DIR,
    STATE_LOCK,
    _Ranges,
    _State,
    _StateFiles,
    create_journal,
    reap_dead_workers,
)

__all__ = ["ACCEPT", "GAP", "REJECT", "RELEASE", "RENEW", "SharePartition"]

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4  # Kafka's AcknowledgeType codes (0: an offset with no record)
# where a deleted share-partition state goes before it is removed (in the partition directory, beside the queues
# directory: never taken for a group); whatever a crash left there is removed by the next delete
TRASH_DIR = ".kafkalog-queues.deleted"


class _Held:
    """This worker's leases with who holds them: sorted, disjoint [start, end, member, deliveries, lock deadline,
    acquired at (monotonic s)] ranges. An acquisition is one range and an acknowledgement of a run of offsets cuts
    one out, so the bookkeeping costs per range, not per record (Kafka's acquired batches are thousands)."""

    __slots__ = ("r", "n")

    def __init__(self):
        self.r: list[list] = []
        self.n = 0  # offsets held

    def __bool__(self):
        return self.n > 0

    def add(self, start: int, end: int, member: str, deliveries: int, deadline: float, at: float) -> None:
        """A range disjoint from the ones held."""
        bisect.insort(self.r, [start, end, member, deliveries, deadline, at], key=_START)
        self.n += end - start

    def cover(self, a: int, b: int) -> list[list]:
        """The held ranges of [a, b), clipped to it, in order (copies)."""
        r = self.r
        i = max(0, bisect.bisect_right(r, a, key=_START) - 1)
        out = []
        while i < len(r) and r[i][0] < b:
            h = r[i]
            if h[1] > a:
                out.append([max(h[0], a), min(h[1], b), *h[2:]])
            i += 1
        return out

    def cut(self, a: int, b: int) -> list[list]:
        """Remove [a, b); returns the pieces that were held, as ``cover`` lists them."""
        r = self.r
        if not r or b <= r[0][0] or a >= r[-1][1]:
            return []
        lo = max(0, bisect.bisect_right(r, a, key=_START) - 1)
        hi, repl, out = lo, [], []
        while hi < len(r) and r[hi][0] < b:
            h = r[hi]
            if h[1] <= a:
                repl.append(h)
            else:
                out.append([max(h[0], a), min(h[1], b), *h[2:]])
                if h[0] < a:
                    repl.append([h[0], a, *h[2:]])
                if h[1] > b:
                    repl.append([b, h[1], *h[2:]])
            hi += 1
        r[lo:hi] = repl
        self.n -= sum(p[1] - p[0] for p in out)
        return out

    def take_if(self, pred) -> list[list]:
        """Remove and return the ranges ``pred`` holds true of."""
        out, keep = [], []
        for h in self.r:
            (out if pred(h) else keep).append(h)
        if out:
            self.r = keep
            self.n -= sum(h[1] - h[0] for h in out)
        return out

    def clear(self) -> None:
        self.r, self.n = [], 0

    def within(self, ranges: _Ranges) -> None:
        """Keep only the offsets that ``ranges`` (this worker's leases in the state) holds too."""
        keep, j, lr = [], 0, ranges.r
        for h in self.r:
            s, e = h[0], h[1]
            while j < len(lr) and lr[j][1] <= s:
                j += 1
            k = j
            while k < len(lr) and lr[k][0] < e:
                a, b = max(s, lr[k][0]), min(e, lr[k][1])
                if a < b:
                    keep.append([a, b, *h[2:]])
                k += 1
        self.r = keep
        self.n = sum(h[1] - h[0] for h in keep)

    def copy(self) -> _Held:
        c = _Held()
        c.r, c.n = [list(h) for h in self.r], self.n
        return c


class SharePartition:
    """The share-partition of ``group`` on ``log`` (a Log of a writable store), one per broker process.

    ``start``: where a group with no state begins ("latest": the log end; "earliest": the log start; an int: that
    offset). Thread safety: every method takes the object's lock; the state file's flock orders processes."""

    def __init__(self, log, group: str, start="latest", lock_timeout_s: float = 30.0):
        self.log = log
        self.group = group
        self.dir = log.dir / QUEUES_DIR / group
        self._lock = threading.Lock()
        self._timeout = lock_timeout_s
        self.worker = f"worker-{os.getpid()}-{secrets.token_hex(4)}"
        # who holds each of this worker's leases, with its delivery count, lock deadline and time of acquisition
        self.acquired = _Held()
        self.start_offset = 0  # SPSO as last seen
        self.next_offset = 0
        self._jfd = -1
        self._jmap = None
        self._closed = False
        self._synced = [-1, -1]  # the Sequence this object last fsynced in each slot
        self._behind = None  # (slot, Sequence) of this object's last write when it was not fsynced
        # +1 each time offsets become available again here (released, their lock expired, their holder gone, a
        # reset): a waiting ShareFetch tries again at once when it moves
        self.freed = 0
        make_durable_dir(self.dir)  # the entries of a new group's directories survive a power loss
        self._state_lock = FileLock(self.dir / STATE_LOCK)
        self._files = _StateFiles(self.dir)
        try:
            fsync_dir(self.dir)  # and so do those of its state slots
        except BaseException:
            self._release_files()
            raise
        try:
            self._update(lambda st: False, start=start, opening=True)
        except BaseException:
            self._release_files()
            raise

    # -- one read-modify-write of the state ------------------------------------------------------------------------

    def _update(self, fn, sync: bool = False, start=None, opening: bool = False):
        """Under state.lock: read the state, fit it to the log, reap dead workers, apply ``fn(st) -> changed`` and
        write the state if anything changed (fsynced when ``sync``). Returns what fn left in ``self._result``."""
        dead: list = []
        self._state_lock.acquire(timeout=self._timeout, what=f"share group {self.group!r} on {self.log.topic}")
        try:
            if self._jfd < 0:
                self._open_journal()
            st, problems = self._files.read()
            changed = False
            if st is None:
                if start == "earliest" or start is None:
                    first = self.log.log_start_offset
                elif start == "latest":
                    first = self.log.log_end_offset
                else:
                    first = int(start)
                seq = max((int.from_bytes(r, "big") for r in self._files.raw if len(r) == 8), default=0)
                st = _State(first, first, seq)
                changed = True
            changed = st.clamp(self.log.log_start_offset, self.log.log_end_offset) or changed
            changed = reap_dead_workers(self.dir, self.worker, st, dead) or changed
            mine = st.leases.get(self.worker)
            # offsets someone else settled (a power loss reverted this worker's view): no longer this worker's
            if self.acquired:
                if mine is None:
                    self.acquired = _Held()
                else:
                    self.acquired.within(mine)
            saved = self.acquired.copy()
            try:
                changed = fn(st) or changed
                if not st.leases.get(self.worker, True):
                    del st.leases[self.worker]
                if changed:
                    st.advance()
                    st.seq += 1
                    # the slot written now held the state before the one in force: the one in force (the other
                    # slot) must be on disk before it, else a power loss tearing this write could bring back an
                    # older state than an acknowledgement answered as durable
                    other = (st.seq - 1) % 2
                    if self._synced[other] != st.seq - 1:
                        self._files.sync(other)
                        self._synced[other] = st.seq - 1
                    self._files.write(st)
                    if sync:
                        self._files.sync(st.seq % 2)
                        self._synced[st.seq % 2] = st.seq
                        self._behind = None
                    else:
                        self._behind = (st.seq % 2, st.seq)
            except BaseException:
                self.acquired = saved  # the state in force is the one before fn: so is this worker's memory
                raise
            self.start_offset, self.next_offset = st.prefix, st.next
            for w, _fd in dead:
                try:
                    os.unlink(self.dir / (w + JOURNAL_SUFFIX))
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise storage_error(e, "delete", self.dir / (w + JOURNAL_SUFFIX)) from None
        finally:
            for _, fd in dead:
                os.close(fd)
            self._state_lock.release()

    def _open_journal(self) -> None:
        # created and flocked under state.lock, as a DurableQueue worker's: alive while this process is
        self._jfd, self._jmap = create_journal(self.dir / (self.worker + JOURNAL_SUFFIX))

    def sync_behind(self) -> None:
        """fsync the state this object last wrote without fsyncing it (an acquisition), off the answer's path: the
        next write must not overwrite the older slot before the one in force is on disk, so an acknowledgement
        that comes after this needs one fsync (its own) instead of two."""
        with self._lock:
            if self._closed or self._behind is None:
                return
            slot, seq = self._behind
            self._behind = None
            self._files.sync(slot)  # whatever the slot holds now is at least that write: fsynced with it
            if self._synced[slot] < seq:
                self._synced[slot] = seq

    # -- Kafka's operations ----------------------------------------------------------------------------------------

    def acquire(self, member: str, max_records: int, lock_ms: int, limit: int, record_limit: bool = False,
                max_in_flight: int = 2000, read_committed: bool = False) -> list[tuple[int, int, int]]:
        """Acquire up to ``max_records`` offsets for ``member``: [(first, last, delivery count)], last inclusive.
        ``read_committed`` (share.isolation.level): new offsets only below the last stable offset, and the records
        of aborted transactions among them archived, never delivered."""
        out: list[tuple[int, int, int]] = []
        with self._lock:
            self._check_open()
            now = time.monotonic()
            self._update(lambda st: self._take(st, out, now, member, max_records, lock_ms, limit, record_limit,
                                               max_in_flight, read_committed))
        return out

    def acknowledge_and_acquire(self, member: str, batches, limit: int, renew_ok: bool, lock_ms: int,
                                max_records: int, record_limit: bool = False, max_in_flight: int = 2000,
                                read_committed: bool = False):
        """``acknowledge`` then ``acquire`` in one state write (a ShareFetch's piggy-backed acknowledgements of the
        partition it acquires from next: one fsync, one read-modify-write). Returns (the acknowledgements' error or
        None, what was acquired); acknowledgements refused (the error) change nothing and the acquisition goes on,
        as apart. A failed write raises: neither happened."""
        out: list[tuple[int, int, int]] = []
        with self._lock:
            self._check_open()
            try:
                plan = self._plan(member, batches, renew_ok)
                error = None
            except (InvalidRecordStateError, InvalidRequestError) as e:
                plan, error = [], e
            now = time.monotonic()

            def fn(st: _State) -> bool:
                changed = self._settle(st, plan, now, limit, lock_ms)
                return self._take(st, out, now, member, max_records, lock_ms, limit, record_limit, max_in_flight,
                                  read_committed) or changed

            self._update(fn, sync=any(t != RENEW for _, _, t in plan))
        return error, out

    def _take(self, st: _State, out: list, now: float, member: str, max_records: int, lock_ms: int, limit: int,
              record_limit: bool, max_in_flight: int, read_committed: bool) -> bool:
        """``acquire``'s change of the state (appends to ``out``); whether it changed."""
        deadline = now + lock_ms / 1000.0
        changed = self._expire(st, now, limit)
        room = max_in_flight - self.acquired.n
        n = min(max_records, room)
        if n <= 0:
            return changed
        leo = self.log.last_stable_offset if read_committed else self.log.log_end_offset
        taken = []
        alone = False
        while n > 0 and st.redeliver:
            s, e, d = st.redeliver.r[0]
            if d >= limit:  # a count at the limit (a DurableQueue's nacks): archived, not delivered
                st.redeliver.take(e - s)
                changed = True
                continue
            if d + 1 >= limit:  # its last delivery attempt: delivered alone, as Kafka isolates a record
                if not taken:  # that may be what makes its consumers fail
                    st.redeliver.take(1)
                    taken.append((s, s + 1, d + 1))
                    alone = True
                break
            k = min(n, e - s)
            st.redeliver.take(k)
            taken.append((s, s + k, d + 1))
            n -= k
        if n > 0 and st.next < leo and not alone:
            end = min(st.next + n, leo)
            if not record_limit:
                end = max(end, min(self._batch_end(end - 1), leo))
            pieces = _without(st.next, end, self._aborted(st.next, end)) if read_committed else \
                [(st.next, end)]
            taken += [(a, b, 1) for a, b in pieces]
            st.next = end
            changed = True  # aborted records alone: archived, the state moves past them
        if not taken:
            return changed
        mine = st.leases.get(self.worker)
        if mine is None:
            mine = st.leases[self.worker] = _Ranges()
        for s, e, d in taken:
            mine.add(s, e, d)
            self.acquired.add(s, e, member, d, deadline, now)
            out.append((s, e - 1, d))
        return True

    def _aborted(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """[a, b) ranges of the data batches of aborted transactions in [lo, hi) (what a read_committed reader
        drops: Kafka's share-partition archives them)."""
        out: list[tuple[int, int]] = []
        pos = lo
        while pos < hi:
            try:
                _, _, _, view, aborted = self.log.fetch_isolated(pos, 1 << 20, True)
            except OffsetOutOfRangeError:
                break
            if view is None or not len(view):
                break
            out += aborted_batches(view, aborted, hi)
            nxt = next_offset_after(view, pos)
            if nxt <= pos:
                break
            pos = nxt
        return out

    def _batch_end(self, offset: int) -> int:
        """The offset after the record batch that holds ``offset``."""
        try:
            view = self.log.read(offset, 1)
        except OffsetOutOfRangeError:
            return offset + 1
        if not len(view):
            return offset + 1
        return RecordBatch(view, 0).last_offset + 1

    def acknowledge(self, member: str, batches, limit: int, renew_ok: bool = False, lock_ms: int = 30000) -> None:
        """Apply [(first, last, types)] for ``member``, all or nothing, fsynced before it returns.
        InvalidRequestError for a malformed batch, InvalidRecordStateError for an offset the member does not hold."""
        with self._lock:
            self._check_open()
            plan = self._plan(member, batches, renew_ok)
            now = time.monotonic()
            self._update(lambda st: self._settle(st, plan, now, limit, lock_ms), sync=True)

    def _plan(self, member: str, batches, renew_ok: bool) -> list[tuple[int, int, int]]:
        """The acknowledgements checked (all or nothing), as [a, b) runs of one type each."""
        plan = []  # (a, b, type): runs of one type
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                raise InvalidRequestError(f"acknowledgement batch [{first}, {last}] with {len(types)} types")
            for t in set(types):
                if not GAP <= t <= RENEW or (t == RENEW and not renew_ok):
                    raise InvalidRequestError(f"acknowledge type {t} is not valid here")
            if first >= self.next_offset:
                raise InvalidRequestError("Batch record not found. The first offset in request is past acquired "
                                          "records.")
            pos = first
            for h in self.acquired.cover(first, last + 1):
                if h[0] != pos or h[2] != member:
                    break
                pos = h[1]
            if pos != last + 1:
                raise InvalidRecordStateError(
                    "The record state is invalid. The acknowledgement of delivery could not be completed.")
            if len(types) == 1:
                plan.append((first, last + 1, types[0]))
            else:
                a = first
                for t, run in itertools.groupby(types):
                    b = a + sum(1 for _ in run)
                    plan.append((a, b, t))
                    a = b
        return plan

    def _settle(self, st: _State, plan, now: float, limit: int, lock_ms: int) -> bool:
        """The acknowledgements' change of the state; whether it changed."""
        mine = st.leases.get(self.worker)
        changed = False
        for a, b, t in plan:
            pieces = self.acquired.cut(a, b)
            if t == RENEW:
                for p in pieces:
                    p[4] = now + lock_ms / 1000.0
                    self.acquired.add(*p)
                continue
            for p in pieces:
                if mine is not None:
                    mine.remove(p[0], p[1])
                if t == RELEASE and p[3] < limit:
                    st.redeliver.add(p[0], p[1], p[3])
                    self.freed += 1
                changed = True  # GAP, ACCEPT, REJECT, RELEASE at the limit: done for ever
        return changed

    def release_member(self, member: str, limit: int, before: float | None = None) -> int:
        """Give back everything ``member`` holds (it left, its session closed), or what it acquired up to
        ``before`` (a monotonic time: not what it acquired since); returns how many offsets."""
        with self._lock:
            if self._closed:
                return 0
            if not any(h[2] == member and (before is None or h[5] <= before) for h in self.acquired.r):
                return 0
            n = []

            def fn(st: _State) -> bool:
                mine = self.acquired.take_if(lambda h: h[2] == member and (before is None or h[5] <= before))
                n.append(sum(h[1] - h[0] for h in mine))
                return self._give_back(st, mine, limit)

            self._update(fn)
            return n[0] if n else 0

    def expire(self, limit: int) -> int:
        """Acquisition locks past their deadline: the offsets go back (or are archived at the limit)."""
        with self._lock:
            if self._closed:
                return 0
            now = time.monotonic()
            if not any(h[4] <= now for h in self.acquired.r):
                return 0
            n = []
            self._update(lambda st: n.append(1) or self._expire(st, now, limit))
            return len(n)

    def _expire(self, st: _State, now: float, limit: int) -> bool:
        due = self.acquired.take_if(lambda h: h[4] <= now) if self.acquired else []
        return self._give_back(st, due, limit) if due else False

    def _give_back(self, st: _State, pieces, limit: int) -> bool:
        """``pieces`` (ranges taken out of ``acquired``) go back for redelivery, or are archived at the limit."""
        mine = st.leases.get(self.worker)
        for s, e, _m, d, _dl, _at in pieces:
            if mine is not None:
                mine.remove(s, e)
            if d < limit:
                st.redeliver.add(s, e, d)
                self.freed += 1
        return bool(pieces)

    def held_by(self, member: str) -> int:
        return sum(h[1] - h[0] for h in self.acquired.r if h[2] == member)

    def records(self, first: int, last: int, max_bytes: int = 1 << 20) -> bytes:
        """The whole record batches that hold offsets [first, last]."""
        out = []
        pos = first
        while pos <= last:
            try:
                view = self.log.read(pos, max_bytes)
            except OffsetOutOfRangeError:
                break
            if not len(view):
                break
            end = 0
            nxt = pos
            for b in iter_batches(view):
                if b.base_offset > last:
                    break
                end = b.position + b.size_in_bytes
                nxt = b.last_offset + 1
            if end == 0 or nxt <= pos:
                break
            out.append(bytes(view[:end]))
            pos = nxt
        return b"".join(out)

    def summary(self) -> tuple[int, int]:
        """(SPSO, lag): the share-partition start offset and how many records from it on are not done yet
        (available, acquired, or never acquired below the log end), Kafka's DescribeShareGroupOffsets v1 Lag."""
        with self._lock:
            self._check_open()
            out = []
            self._update(lambda st: out.append((st.prefix, st.in_flight() + max(0, self.log.log_end_offset - st.next)))
                         and False)
            return out[0]

    def state(self) -> tuple[int, int]:
        """(SPSO, next offset never acquired) as the state holds them now."""
        with self._lock:
            self._check_open()
            self._update(lambda st: False)
            return self.start_offset, self.next_offset

    # -- the admin's operations (AlterShareGroupOffsets, DeleteShareGroupOffsets) ------------------------------------

    def reset(self, start: int) -> None:
        """A new share-partition start offset (Kafka's AlterShareGroupOffsets, which replaces the state with its
        start offset alone): nothing below ``start`` is delivered, everything from it on is available again with
        delivery count 0. Fsynced before it returns. NonEmptyGroupError when another live worker of the group (a
        DurableQueue) holds offsets; then nothing changes."""
        with self._lock:
            self._check_open()

            def fn(st: _State) -> bool:
                if any(w != self.worker and r for w, r in st.leases.items()):
                    raise NonEmptyGroupError("The group is not empty.")
                self.acquired.clear()
                st.leases.pop(self.worker, None)
                st.redeliver = _Ranges()
                st.prefix = st.next = start
                self.freed += 1
                return True

            self._update(fn, sync=True)

    def delete(self) -> None:
        """The group's state of this partition goes (Kafka's DeleteShareGroupOffsets): the next share-partition of
        the group here starts at share.auto.offset.reset again. The directory is renamed out of the queues
        directory under state.lock (both directories fsynced: the state never comes back half deleted), then
        removed. NonEmptyGroupError when another worker of the group (a DurableQueue) is alive; then nothing
        changes. This object is closed after it."""
        with self._lock:
            self._check_open()
            self._state_lock.acquire(timeout=self._timeout, what=f"share group {self.group!r} on {self.log.topic}")
            try:
                for name in os.listdir(self.dir):
                    if not name.endswith(JOURNAL_SUFFIX) or name == self.worker + JOURNAL_SUFFIX:
                        continue
                    try:
                        fd = os.open(self.dir / name, os.O_RDONLY)
                    except FileNotFoundError:
                        continue
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        raise NonEmptyGroupError("The group is not empty.") from None
                    finally:
                        os.close(fd)
                trash = self.log.dir / TRASH_DIR
                make_durable_dir(trash)
                gone = trash / f"{self.group}-{secrets.token_hex(4)}"
                os.rename(self.dir, gone)
                fsync_dir(self.dir.parent)
                fsync_dir(trash)
            except OSError as e:
                raise storage_error(e, "delete", self.dir) from None
            finally:
                self._state_lock.release()
            self._closed = True
            self.acquired.clear()
            self._release_files()
        shutil.rmtree(trash, ignore_errors=True)  # with whatever an earlier crash left there

    # -- the end ---------------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidRecordStateError(f"share partition {self.log.topic}-{self.log.partition} of group "
                                          f"{self.group} is closed")

    def close(self, limit: int = 1 << 30) -> None:
        """A clean stop: every acquired offset goes back (counts kept), this worker's journal goes away."""
        with self._lock:
            if self._closed:
                return
            try:
                if self.acquired:
                    self._update(lambda st: self._give_back(st, self.acquired.take_if(lambda h: True), limit))
                if self._jfd >= 0:
                    try:
                        os.unlink(self.dir / (self.worker + JOURNAL_SUFFIX))
                    except OSError:
                        pass
            finally:
                self._closed = True
                self._release_files()

    def _release_files(self) -> None:
        if self._jmap is not None:
            self._jmap.close()
            self._jmap = None
        if self._jfd >= 0:
            os.close(self._jfd)
            self._jfd = -1
        self._state_lock.close()
        self._files.close()


def aborted_batches(view, aborted, hi: int) -> list[tuple[int, int]]:
    """[base, last + 1) of the data batches of ``view`` below ``hi`` that belong to the ``aborted`` transactions
    ([(producer id, first offset)], as Log.fetch_isolated lists them): the batches isolation.drop_aborted drops,
    control batches aside."""
    if not aborted:
        return []
    pending = sorted(aborted, key=lambda a: a[1])
    i, n = 0, len(pending)
    active: set[int] = set()
    out: list[tuple[int, int]] = []
    for batch in iter_batches(view):
        if batch.base_offset >= hi:
            break
        pid = batch.producer_id
        if pid < 0:
            continue
        last = batch.last_offset
        while i < n and pending[i][1] <= last:
            active.add(pending[i][0])
            i += 1
        if batch.is_control:
            if pid in active:
                marker = marker_of_batch(view, batch.position)
                if marker is not None and not marker[0]:
                    active.discard(pid)
        elif batch.is_transactional and pid in active:
            out.append((batch.base_offset, last + 1))
    return out


def _without(lo: int, hi: int, holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[lo, hi) less the sorted, disjoint ``holes``, as [a, b) ranges."""
    out, pos = [], lo
    for a, b in holes:
        a, b = max(a, lo), min(b, hi)
        if a >= b:
            continue
        if a > pos:
            out.append((pos, a))
        pos = max(pos, b)
    if pos < hi:
        out.append((pos, hi))
    return out
