"""DurableQueue: put / get / ack over partition 0 of a LogStore topic, shared by the threads and processes of a host.

On disk, the messages are the topic's own Kafka files (``<data dir>/<name>-0/*.log``: one put_many = one record
batch v2). Each consumer group adds one hidden directory inside the partition directory, which Kafka's log loader
skips (it reads only the files of a partition directory; a directory at the top of a log dir that is not
``<topic>-<partition>`` would stop a Kafka broker), and which goes away with the topic::

    <data dir>/<name>-0/.kafkalog-queues/<group>/
      state.0, state.1            QueueState slots, overwritten in place in turn; the valid one with the higher
                                  Sequence is the state (a write torn by kill -9 leaves the other one in force)
      state.lock                  flock: one process at a time reads-modifies-writes the state
      worker-<pid>-<hex8>.acks    one per open DurableQueue: its ack journal (16 KiB, memory-mapped); the owner
                                  holds an exclusive flock on it for its lifetime

    QueueState => Magic "KLQSTATE" (8 bytes) | Version Int16 (0) | Crc Uint32 (CRC-32C of the Length bytes after
                  Length) | Length Int32 | Sequence Int64 (+1 per write) |
                  AckedPrefix Int64 (every offset below it is acked) |
                  NextOffset Int64 (no offset from here on was ever delivered) |
                  Redeliveries => Count Int32 | [Start Int64 | End Int64 | Deliveries Int32] |
                  WorkerCount Int32 | [Worker String | Leases => Count Int32 | [Start Int64 | End Int64 |
                                                                              Deliveries Int32]]
    AckRecord  => Offset Int64 | Check Int64 (~Offset, the bitwise complement)  (the .acks journal, back to back;
                  the first record whose Check does not match, e.g. the zero fill after the last one or a store
                  torn by kill -9, ends the journal)

    big-endian; String => Int16 length + UTF-8; a range is the offsets [Start, End), sorted and disjoint;
    Deliveries = how many times the range's offsets were claimed so far

Each offset in [AckedPrefix, NextOffset) is exactly one of: leased to one worker, waiting for redelivery, or acked.
Acked offsets are the ones not listed, so the state is as small as the set of messages in flight, and smaller: a
claim leases a range, in-order acks shrink it, so a state update costs per range, not per message.

Delivery. ``get()`` hands out messages from a local prefetch buffer. When it is empty, one *claim* takes
``state.lock``, folds this worker's journaled acks into the state, leases up to ``prefetch`` offsets to this worker
(waiting redeliveries first, lowest offset first, then new offsets from NextOffset up to the log end), writes the
state and releases the lock; the leased ranges are then read with ``Log.read`` (whole batches, CRC-checked) into
Messages built in C from the records' bytes (kafkalog/_engine/delivery.pyx, the queue's compiled half).
A worker keeps the state it last read or wrote: while both slots' Sequence fields are still the ones it saw
(two 8-byte reads under the lock), nobody else wrote and it skips reading and decoding the state.
Leased offsets stay leased while in the buffer, so a dead worker's prefetched messages are redelivered too. A
``get`` that finds nothing waits without spinning: appends through the same Log set its event at once; every
millisecond it checks ``Log.has_data_after`` (other processes' appends) and the state slots' Sequence fields
(nacks, workers closing); at least every 50 ms it claims again.

Acks. ``ack()`` stores one AckRecord into the worker's own journal through a shared memory mapping: no system call,
no lock, no fsync, and it is in the page cache, so it outlives a kill -9 of the process. Acks never reach the state
one by one: the journal is folded into the state (then zeroed) at the next claim (in the claim's one state write),
``nack``, ``qsize`` or ``close``, and every 512 acks; also as soon as the worker holds nothing (every message it got
is acked and its buffer is empty) unless its last state update was less than 50 ms before: a worker that loops on
``get`` folds those acks with its next claim, one state write instead of two (until then, other workers' ``qsize``
counts them and deletion waits for them). ``nack()`` returns the message at once (one state update): the next claim
of any worker delivers it again, with ``delivery_count`` + 1.

Dead workers. A worker whose journal can be flocked by someone else is dead (flocks die with the process, so
``kill -9`` is detected). Under ``state.lock``, opening, ``qsize``, a claim that would come back empty and any claim
50 ms after the last such *reap* try the other workers' journals: a dead worker's acks are folded, its leases go to
the redelivery set, the state is written, then its journal is unlinked. A worker creates and flocks its journal
under ``state.lock``, so it is never taken for dead while it starts. Deliveries are at-least-once: only messages a
worker got (or prefetched) and had not acked when it died are delivered twice.

Crash safety (kill -9 at any point loses no message and no completed ack). A state write never touches the slot
in force (a torn write fails its CRC and the previous state stays in force; slots are overwritten in place because
ext4 turns a rename over an existing file into a synchronous write-out); every change to the state is idempotent
against the journals (folding an ack twice does nothing, acked offsets never come back); a journal is zeroed or
unlinked only after the state that holds its acks is written. Named failpoints (``queue:session:after-write``,
``queue:fold:before-zero``, ``queue:ack:after-journal``, ``queue:reap:before-unlink``,
``queue:close:before-unlink``) let the tests kill a worker at each of these steps.

Deletion (KIP-107). When a state update moves AckedPrefix (checked at most every 50 ms per worker, and at once by
``qsize`` and ``close``) and the log's second segment starts at or below it, the updating worker commits
AckedPrefix as the group's offset in the store's ``__consumer_offsets`` (``store.offsets``; Kafka's "next offset to
consume") and calls ``Log.delete_records_before`` with the lowest AckedPrefix of every group of the topic (a group's
directory keeps deletion back until that group has acked). Whole segments below it leave the disk at once (queue
topics are created with ``file.delete.delay.ms=0`` and 16 MiB segments); acked records of the active segment stay
until it rolls. ``close`` commits AckedPrefix as well. The committed offset is a floor: a missing or damaged state
restarts the group from max(committed offset, log start offset), redelivering what was in flight; a new group
starts there too (the log start offset when nothing was committed).

What is durable when:

==================================  ==================================  ===============================================
after this returns                  survives kill -9 of the process     survives power loss / OS crash
==================================  ==================================  ===============================================
put / put_many, ``durable=True``    yes                                 yes (``Log.flush()``: fsynced before return)
put / put_many, ``durable=False``   yes (OS page cache)                 no
ack / nack / a claim                yes (ack: the journal's page)       not fsynced: a power loss can redeliver, never
                                                                        lose (at-least-once holds)
==================================  ==================================  ===============================================

After a power loss, open the queue before anything else appends to its topic: opening clamps a state that got ahead
of the recovered log (records of ``durable=False`` puts that were lost) so that new records are not skipped.

Thread safety: one DurableQueue may be shared by any number of threads (a lock orders them; a blocked ``get``
holds no lock; ``put`` takes only the Log's locks). The common ``get`` (a buffered message) and ``ack`` (a journal
store) take no lock: they are compiled and atomic under the GIL, and leave everything to the lock while another
thread holds it (the contract opens delivery.pyx). Process safety: any number of processes (or DurableQueue
objects) may open the same queue, each one worker. A worker's flock is shared by processes it forks, so a forked
child keeps its parent looking alive: open the queue after forking.
"""

from __future__ import annotations

import bisect
import fcntl
import itertools
import logging
import mmap
import os
import queue
import re
import secrets
import struct
import threading
import time
from operator import itemgetter

from .._engine.batch import crc32c, iter_records, next_offset_after
from .._engine.delivery import Message, QueueCore, journal_offsets
from ..errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordStateError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    storage_error,
)
from ..storage import LogStore, failpoints
from ..storage.files import FileLock
from ..storage.log import READ
from ..structs import OffsetAndMetadata, TopicPartition

__all__ = ["DurableQueue", "InvalidRecordStateError", "Message", "QUEUES_DIR", "TOPIC_CONFIG"]

_log = logging.getLogger("kafkalog.queue")

QUEUES_DIR = ".kafkalog-queues"
STATE_FILES = ("state.0", "state.1")
STATE_LOCK = "state.lock"
STATE_MAGIC = b"KLQSTATE"
STATE_VERSION = 0
JOURNAL_SUFFIX = ".acks"
DEFAULT_PREFETCH = 100

# Config of a queue topic that DurableQueue creates: a queue never drops unacked messages by age or size, and
# acked segments leave the disk at once. 16 MiB segments bound the acked data that waits for its segment to roll;
# 1 MiB indexes cover them (at index.interval.bytes) and are cheap to preallocate at each roll.
TOPIC_CONFIG = {
    "retention.ms": -1,
    "retention.bytes": -1,
    "segment.bytes": 16 << 20,
    "segment.index.bytes": 1 << 20,
    "file.delete.delay.ms": 0,
    "preallocate": True,  # each put's fdatasync overwrites zeros: no file size change to commit (Log, segment.pyx)
}

JOURNAL_BYTES = 16384  # a journal holds this many bytes of AckRecords (1024) before a fold must empty it
_FOLD_ACKS = 512  # journaled acks that trigger a fold even while the worker still holds messages
_POLL_S = 0.001  # a waiting get() checks has_data_after / the state file this often
_RECLAIM_S = 0.05  # ... and tries a claim (dead workers, redeliveries) at least this often
_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")

_HEAD = struct.Struct(">8shIi")  # magic, version, crc, length
_BODY_HEAD = struct.Struct(">qqq")  # sequence, prefix, next
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_RANGE = struct.Struct(">qqi")  # start, end, deliveries
_ACK_SIZE = 16  # AckRecord: offset, ~offset (zero fill and torn stores never match); stored by QueueCore


# ---------------------------------------------------------------------------------------------------- state

class _Ranges:
    """A set of offsets as sorted, disjoint, non-empty [start, end, deliveries] ranges: a claim of 100 new offsets
    is one range and 100 in-order acks remove one run, so a state update costs per range, not per message."""

    __slots__ = ("r",)

    def __init__(self, ranges=None):
        self.r: list[list[int]] = ranges if ranges is not None else []

    def __bool__(self):
        return bool(self.r)

    def count(self) -> int:
        return sum(e - s for s, e, _ in self.r)

    def low(self, default: int) -> int:
        return self.r[0][0] if self.r else default

    def add(self, start: int, end: int, deliveries: int) -> None:
        """Insert a range disjoint from the set, merging it with equal neighbours."""
        r = self.r
        i = bisect.bisect_right(r, start, key=_START)
        if i and r[i - 1][1] == start and r[i - 1][2] == deliveries:
            r[i - 1][1] = end
            if i < len(r) and r[i][0] == end and r[i][2] == deliveries:
                r[i - 1][1] = r.pop(i)[1]
        elif i < len(r) and r[i][0] == end and r[i][2] == deliveries:
            r[i][0] = start
        else:
            r.insert(i, [start, end, deliveries])

    def remove(self, a: int, b: int) -> int:
        """Remove [a, b) from the set; returns how many offsets were in it."""
        r = self.r
        if not r or b <= r[0][0] or a >= r[-1][1]:
            return 0
        lo = max(0, bisect.bisect_right(r, a, key=_START) - 1)
        hi, removed, repl = lo, 0, []
        while hi < len(r) and r[hi][0] < b:
            s, e, d = r[hi]
            if e <= a:
                repl.append(r[hi])
            else:
                removed += min(e, b) - max(s, a)
                if s < a:
                    repl.append([s, a, d])
                if e > b:
                    repl.append([b, e, d])
            hi += 1
        r[lo:hi] = repl
        return removed

    def take(self, n: int) -> list[tuple[int, int, int]]:
        """Remove and return up to n of the lowest offsets, as (start, end, deliveries) ranges."""
        r, out = self.r, []
        while n > 0 and r:
            s, e, d = r[0]
            k = min(n, e - s)
            out.append((s, s + k, d))
            if k == e - s:
                r.pop(0)
            else:
                r[0][0] = s + k
            n -= k
        return out


_START = itemgetter(0)  # bisect key of a range (C, not a Python call per probe)


class _State:
    """QueueState in memory: ``redeliver`` and each worker's ``leases`` are _Ranges."""

    __slots__ = ("seq", "prefix", "next", "redeliver", "leases")

    def __init__(self, prefix: int, next_offset: int, seq: int = 0):
        self.seq = seq
        self.prefix = prefix
        self.next = next_offset
        self.redeliver = _Ranges()
        self.leases: dict[str, _Ranges] = {}

    def encode(self) -> bytes:
        parts = [_BODY_HEAD.pack(self.seq, self.prefix, self.next), _pack_ranges(self.redeliver)]
        workers = [(w, d) for w, d in self.leases.items() if d.r]
        parts.append(_I32.pack(len(workers)))
        for w, d in workers:
            name = w.encode()
            parts += (_I16.pack(len(name)), name, _pack_ranges(d))
        body = b"".join(parts)
        return _HEAD.pack(STATE_MAGIC, STATE_VERSION, crc32c(body), len(body)) + body

    @classmethod
    def decode(cls, data: bytes) -> _State:
        """Parse and check one slot; ValueError says what is wrong."""
        if len(data) < _HEAD.size:
            raise ValueError(f"{len(data)} bytes is too short")
        magic, version, crc, length = _HEAD.unpack_from(data)
        if magic != STATE_MAGIC or version != STATE_VERSION:
            raise ValueError(f"magic {magic!r} version {version}, expected {STATE_MAGIC!r} version {STATE_VERSION}")
        body = memoryview(data)[_HEAD.size:_HEAD.size + max(0, length)]
        if len(body) != length or length < _BODY_HEAD.size + 8:
            raise ValueError(f"length {length} does not fit in {len(data)} bytes")
        if crc32c(body) != crc:
            raise ValueError("CRC mismatch (a torn or damaged write)")
        try:
            seq, prefix, nxt = _BODY_HEAD.unpack_from(body)
            st = cls(prefix, nxt, seq)
            pos, st.redeliver = _unpack_ranges(body, _BODY_HEAD.size)
            (count,), pos = _I32.unpack_from(body, pos), pos + 4
            for _ in range(count):
                (n,), pos = _I16.unpack_from(body, pos), pos + 2
                worker = bytes(body[pos:pos + n]).decode()
                pos, st.leases[worker] = _unpack_ranges(body, pos + n)
        except (struct.error, UnicodeDecodeError) as e:
            raise ValueError(f"truncated or malformed: {e}") from None
        if pos != len(body) or not 0 <= prefix <= nxt:
            raise ValueError(f"inconsistent: prefix {prefix}, next {nxt}, {len(body) - pos} trailing bytes")
        ranges = sorted(rng for d in (st.redeliver, *st.leases.values()) for rng in d.r)
        end = prefix
        for s, e, d in ranges:
            if s < end or e <= s or d < 0:
                raise ValueError(f"range [{s}, {e}) overlaps another, is empty or lies below prefix {prefix}")
            end = e
        if end > nxt:
            raise ValueError(f"a range ends at {end}, past next offset {nxt}")
        return st

    def sets(self):
        return (self.redeliver, *self.leases.values())

    def ack_runs(self, runs, worker: str) -> bool:
        """Mark [a, b) runs acked, whoever holds them (after a power loss reverted the state, someone else may);
        False if they all were already."""
        mine = self.leases.get(worker)
        changed = False
        for a, b in runs:
            n = mine.remove(a, b) if mine is not None else 0
            if n < b - a:
                for d in self.sets():
                    n += d.remove(a, b)
            changed = changed or n > 0
        return changed

    def give_back(self, worker: str, offset: int, deliveries: int) -> bool:
        """A leased offset goes back for redelivery (nack, close); False if worker did not hold it."""
        mine = self.leases.get(worker)
        if mine is None or not mine.remove(offset, offset + 1):
            return False
        self.redeliver.add(offset, offset + 1, deliveries)
        return True

    def take(self, worker: str, n: int, leo: int) -> list[tuple[int, int, int]]:
        """Lease up to n offsets to worker: redeliveries (lowest first), then new ones below leo. Returns
        (start, end, deliveries) ranges, deliveries counting this claim."""
        taken = [(s, e, d + 1) for s, e, d in self.redeliver.take(n)] if self.redeliver else []
        new = min(n - sum(e - s for s, e, _ in taken), leo - self.next)
        if new > 0:
            taken.append((self.next, self.next + new, 1))
            self.next += new
        if taken:
            mine = self.leases.get(worker)
            if mine is None:
                mine = self.leases[worker] = _Ranges()
            for s, e, d in taken:
                mine.add(s, e, d)
        return taken

    def clamp(self, lso: int, leo: int) -> bool:
        """Fit the state to the log: offsets below the log start offset are gone (acked, or deleted by someone
        else); offsets at or past the log end were lost with the log's tail (power loss) and will be reused."""
        lo, hi = max(self.prefix, lso), min(self.next, leo)
        if lo == self.prefix and hi == self.next:
            return False
        hi = max(hi, lo)
        for d in self.sets():
            d.remove(self.prefix, lo)
            d.remove(hi, max(self.next, hi))
        self.prefix, self.next = lo, hi
        return True

    def advance(self) -> None:
        self.prefix = min(d.low(self.next) for d in self.sets())

    def in_flight(self) -> int:
        return sum(d.count() for d in self.sets())


def _pack_ranges(d: _Ranges) -> bytes:
    """Count Int32 | [Start Int64 | End Int64 | Deliveries Int32]"""
    return struct.pack(">i" + "qqi" * len(d.r), len(d.r), *itertools.chain.from_iterable(d.r))


def _unpack_ranges(body, pos: int) -> tuple[int, _Ranges]:
    (count,) = _I32.unpack_from(body, pos)
    pos += 4
    end = pos + count * _RANGE.size
    if count < 0 or end > len(body):
        raise struct.error(f"{count} ranges do not fit")
    return end, _Ranges([list(t) for t in _RANGE.iter_unpack(body[pos:end])])


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted [a, b) runs of consecutive offsets."""
    a, b = offsets[0], offsets[-1] + 1
    if b - a == len(offsets) and offsets == list(range(a, b)):
        return [(a, b)]  # in-order acks, the common case: one run, no loop in Python
    runs = []
    offsets = sorted(offsets)
    a = prev = offsets[0]
    for o in offsets[1:]:
        if o != prev + 1:
            if o == prev:
                continue
            runs.append((a, prev + 1))
            a = o
        prev = o
    runs.append((a, prev + 1))
    return runs


class _StateFiles:
    """The two QueueState slots of a group, kept open: read both, decode the newest that is valid, write the
    other one."""

    def __init__(self, dir, writable: bool = True):
        self.paths = [dir / n for n in STATE_FILES]
        self.fds: list[int] = []
        self.raw = [b"", b""]  # each slot's Sequence bytes as last read or written (peek's change detector)
        self.sizes = [0, 0]
        try:
            for p in self.paths:
                self.fds.append(os.open(p, os.O_RDWR | os.O_CREAT, 0o644) if writable else os.open(p, os.O_RDONLY))
        except OSError as e:
            self.close()
            raise storage_error(e, "open", p) from None

    def _slot(self, i: int) -> bytes:
        fd = self.fds[i]
        try:
            data = os.pread(fd, 65536, 0)
            if len(data) >= _HEAD.size:
                need = _HEAD.size + _HEAD.unpack_from(data)[3]
                if need > len(data):
                    data = os.pread(fd, need, 0)
        except OSError as e:
            raise storage_error(e, "read", self.paths[i]) from None
        self.raw[i] = data[_HEAD.size:_HEAD.size + 8]
        self.sizes[i] = max(self.sizes[i], len(data)) if len(data) >= 65536 else len(data)
        return data

    def read(self) -> tuple[_State | None, list[str]]:
        """The state in force (None if neither slot holds one) and what was wrong with the slots that were not
        empty and did not decode."""
        slots = [self._slot(0), self._slot(1)]
        order = sorted((0, 1), key=lambda i: self.raw[i] if len(self.raw[i]) == 8 else b"", reverse=True)
        problems = []
        for i in order:
            if not slots[i]:
                continue
            try:
                return _State.decode(slots[i]), problems  # the newest valid slot: a torn newer write is skipped
            except ValueError as e:
                problems.append(f"{self.paths[i].name}: {e}")
        return None, problems

    def write(self, st: _State) -> None:
        data = st.encode()
        i = st.seq % 2
        fd = self.fds[i]
        try:
            view, pos = memoryview(data), 0
            while pos < len(data):
                pos += os.pwrite(fd, view[pos:], pos)
            if self.sizes[i] > len(data) + 4096:
                os.ftruncate(fd, len(data))  # the bytes past Length are ignored; this only bounds reads
                self.sizes[i] = len(data)
        except OSError as e:
            raise storage_error(e, "write", self.paths[i]) from None
        self.raw[i] = data[_HEAD.size:_HEAD.size + 8]
        self.sizes[i] = max(self.sizes[i], len(data))

    def sync(self, i: int) -> None:
        """fsync slot ``i`` (the broker's acknowledgements are durable before they are answered)."""
        try:
            os.fsync(self.fds[i])
        except OSError as e:
            raise storage_error(e, "fsync", self.paths[i]) from None

    def stamp(self) -> tuple:
        """What ``peek`` returns while nobody else has written since this object's last read or write."""
        return tuple(self.raw)

    def peek(self) -> tuple:
        """The two slots' Sequence fields: a cheap change detector (two 8-byte preads)."""
        try:
            fd0, fd1 = self.fds
            return os.pread(fd0, 8, _HEAD.size), os.pread(fd1, 8, _HEAD.size)
        except (OSError, ValueError):
            return ()

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def create_journal(path) -> tuple[int, mmap.mmap]:
    """A new worker journal at ``path`` (state.lock held: a reaper never finds it unlocked): created, flocked for
    the worker's lifetime, sized and mapped. Returns (fd, mapping). Shared by DurableQueue and the broker's share
    partitions (share.py)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as e:
        raise storage_error(e, "create", path) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, JOURNAL_BYTES)
        return fd, mmap.mmap(fd, JOURNAL_BYTES)
    except OSError as e:
        os.close(fd)
        raise storage_error(e, "create", path) from None


def reap_dead_workers(dir, me: str, st: _State, dead: list) -> bool:
    """Fold the journals of the dead workers of the group in ``dir`` and give their leases back (state.lock held):
    a worker is dead when someone else can flock its journal. Their journals stay flocked in ``dead`` until the
    state that holds their acks is written, then they are unlinked. Shared by DurableQueue and the broker's share
    partitions (share.py), which are workers of the same groups."""
    try:
        names = os.listdir(dir)
    except OSError as e:
        raise storage_error(e, "list", dir) from None
    workers = {n[:-len(JOURNAL_SUFFIX)] for n in names if n.startswith("worker-") and n.endswith(JOURNAL_SUFFIX)}
    workers.update(st.leases)
    workers.discard(me)
    workers.difference_update(w for w, _ in dead)
    changed = False
    for w in sorted(workers):
        path = dir / (w + JOURNAL_SUFFIX)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1  # gone with its worker: only leases are left
        except OSError as e:
            raise storage_error(e, "open", path) from None
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # alive
            dead.append((w, fd))
            try:
                data = os.pread(fd, JOURNAL_BYTES, 0)
            except OSError as e:
                raise storage_error(e, "read", path) from None
            acked = journal_offsets(data)
            if acked:
                changed = st.ack_runs(_runs(acked), w) or changed
        leases = st.leases.pop(w, None)
        if leases:
            for start, end, deliveries in leases.r:
                st.redeliver.add(start, end, deliveries)
            changed = True
    return changed


# ---------------------------------------------------------------------------------------------------- the queue

class _Guard:
    """``with queue._guard``: the queue's lock, with QueueCore's ``_busy`` raised while it is held, so that the
    lock-free fast paths of get() and ack() leave everything to the holder (delivery.pyx)."""

    __slots__ = ("_q", "_lock")

    def __init__(self, q: DurableQueue):
        self._q = q
        self._lock = q._lock

    def __enter__(self):
        self._lock.acquire()
        self._q._busy += 1

    def __exit__(self, *exc):
        self._q._busy -= 1
        self._lock.release()


class DurableQueue(QueueCore):
    """A persistent work queue: ``DurableQueue(path, name="queue", group="workers", *, durable=True,
    prefetch=100, topic_config=None)``.

    ``path`` is a LogStore data directory (created if needed, opened shared so that other processes can use it at
    the same time) or an open, writable ``LogStore`` (the caller keeps owning it). The queue is partition 0 of topic
    ``name``, created with ``TOPIC_CONFIG`` updated by ``topic_config`` if it does not exist (an existing topic must
    have one partition). ``group`` names the set of workers that share the messages: every group gets every message
    once (at least once), the workers of a group split them. ``durable``: put/put_many return only after fsync
    (see the module docstring's table). ``prefetch``: how many messages one claim leases to this worker at most.

    ``put(value, key=None, headers=None)`` -> offset; ``put_many(values, keys=None)`` -> list of offsets (one record
    batch, one fsync; split into several batches only if it exceeds max.message.bytes or segment.bytes);
    ``get(timeout=None)`` -> Message, raising ``queue.Empty`` after ``timeout`` seconds (None: wait for ever, 0:
    do not wait), like ``queue.Queue.get``; ``get_nowait()``; ``ack(message)``; ``nack(message)`` (deliver again);
    ``qsize()``: messages put and not yet acked (approximate: other workers' acks count once they are folded);
    ``close()`` (returns the messages it holds for redelivery), also as a context manager. Values and keys are
    bytes-like or None.

    See the module docstring for the files, the locking, durability and thread/process safety.
    """

    def __init__(self, path, name: str = "queue", group: str = "workers", *, durable: bool = True,
                 prefetch: int = DEFAULT_PREFETCH, topic_config=None):
        if not isinstance(group, str) or not _NAME_RE.match(group) or group in (".", "..") or len(group) > 249:
            raise InvalidConfigError(f"group {group!r}: use 1-249 characters of [a-zA-Z0-9._-] (not '.' or '..'); "
                                     "it names a directory")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise InvalidConfigError(f"prefetch {prefetch!r}: must be an integer >= 1")
        self.name = name
        self.group = group
        self.durable = bool(durable)
        self._prefetch = prefetch
        self._lock = threading.RLock()
        self._guard = _Guard(self)  # the lock, with the fast paths kept out (see QueueCore)
        self._event = threading.Event()
        self._closed = False
        # QueueCore holds the buffer (claimed, not handed out), the held set (handed out, not acked or nacked) and
        # the journal's position: acks stored since the last fold
        self._fold_bytes = _FOLD_ACKS * _ACK_SIZE
        self._failpoints = failpoints._active
        self._jfd = -1
        self._jmap = None
        self._stamp = ()
        self._cached: _State | None = None  # the state as this worker last read or wrote it (valid while _stamp is)
        self._files = None
        self._state_lock = None
        self._seen_leo = 0  # a log end offset this worker saw (never above the real one)
        self._seen_prefix = -1
        self._checked_prefix = -1
        self._size = 0
        self._next_reap = 0.0
        self._next_delete_check = 0.0
        self._next_idle_fold = 0.0  # a worker that holds nothing folds its acks at once from then on
        self._committed = -1
        self._delete = True
        self._worker = f"worker-{os.getpid()}-{secrets.token_hex(4)}"
        if isinstance(path, LogStore):
            if path.mode == READ:
                raise KafkaStorageError(30, f"store {path.path} is opened read-only: a queue needs a writable store")
            self._store, self._owns_store = path, False
        else:
            self._store, self._owns_store = LogStore(path), True
        try:
            self._log = self._open_topic(topic_config)
            self._dir = self._log.dir / QUEUES_DIR / group
            try:
                self._dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise storage_error(e, "create queue directory", self._dir) from None
            self._lock_timeout = self._store.config["lock.timeout.ms"] / 1000.0
            self._state_lock = FileLock(self._dir / STATE_LOCK)
            self._files = _StateFiles(self._dir)
            self._session(opening=True)  # creates this worker's journal, fits the state to the log, reaps
            self._log.add_waiter(self._event)
        except BaseException:
            self._release_files()
            if self._owns_store:
                self._store.close()
            raise

    def _open_topic(self, topic_config):
        store = self._store
        if self.name not in store.topics():
            try:
                store.create_topic(self.name, 1, {**TOPIC_CONFIG, **(topic_config or {})})
            except TopicAlreadyExistsError:
                pass  # another process created it meanwhile
        n = store.partitions_for(self.name)
        if n != 1:
            raise InvalidPartitionsError(f"queue topic {self.name!r} in {store.path} has {n} partitions: a "
                                         "DurableQueue is one partition")
        return store.log(self.name, 0)

    # ------------------------------------------------------------------------------------------------ guards

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"queue {self.name!r} (group {self.group!r}) in {self._store.path} is closed")

    def _held_message(self, message) -> int:
        if type(message) is Message and message in self._held:
            return message.offset
        offset = getattr(message, "offset", None)
        if not isinstance(message, Message):
            raise TypeError(f"ack/nack take a Message from get(), not {type(message).__name__}")
        raise InvalidRecordStateError(
                f"message at offset {offset} of queue {self.name!r} is not held by this DurableQueue (already acked "
                "or nacked, or got from another queue object)")

    # ------------------------------------------------------------------------------------------------ put

    def put(self, value, key=None, headers=None) -> int:
        """Append one message; returns its offset. Durable per ``durable`` when it returns."""
        self._check_open()
        base = self._log.append_batch([value], None if key is None else [key], None,
                                      None if headers is None else [headers])
        if self.durable:
            self._log.flush()
        if base + 1 > self._seen_leo:
            self._seen_leo = base + 1
        return base

    def put_many(self, values, keys=None) -> list[int]:
        """Append many messages as one record batch (one fsync when durable); returns their offsets."""
        self._check_open()
        values = list(values)
        if not values:
            return []
        keys = None if keys is None else list(keys)
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"put_many: {len(keys)} keys for {len(values)} values")
        offsets = self._append(values, keys)
        if self.durable:
            self._log.flush()
        if offsets[-1] + 1 > self._seen_leo:
            self._seen_leo = offsets[-1] + 1
        return offsets

    def _append(self, values, keys) -> list[int]:
        try:
            base = self._log.append_batch(values, keys)
            return list(range(base, base + len(values)))
        except (RecordTooLargeError, RecordBatchTooLargeError):
            if len(values) == 1:
                raise
        half = len(values) // 2
        return (self._append(values[:half], None if keys is None else keys[:half])
                + self._append(values[half:], None if keys is None else keys[half:]))

    # ------------------------------------------------------------------------------------------------ get

    # get(timeout=None) and ack(message) are QueueCore's: a buffered message, a journal store, no lock; anything
    # else comes here

    def _get_slow(self, timeout: float | None) -> Message:
        return self._get(None if timeout is None else time.monotonic() + timeout)

    def _get(self, deadline: float | None) -> Message:
        while True:
            with self._guard:
                if self._closed:
                    self._check_open()
                if not self._buffer_len():
                    self._claim()
                m = self._pop()
                if m is not None:
                    return m
                self._event.clear()  # appends from now on set it; earlier ones are below seen_leo
                seen_leo, stamp = self._seen_leo, self._stamp
            self._wait(deadline, seen_leo, stamp)

    def get_nowait(self) -> Message:
        return self.get(0)

    def _wait(self, deadline, seen_leo: int, stamp) -> None:
        """Return when a claim may find something (or at least every _RECLAIM_S); raise Empty at the deadline."""
        reclaim = time.monotonic() + _RECLAIM_S
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise queue.Empty(f"queue {self.name!r} (group {self.group!r}) had no message to deliver")
            if now >= reclaim or self._closed:
                return
            if self._event.wait(_POLL_S if deadline is None else min(_POLL_S, deadline - now)):
                return
            if self._log.has_data_after(seen_leo) or self._files.peek() != stamp:
                return

    def _claim(self) -> None:
        taken = self._session(claim=self._prefetch)
        if taken:
            self._read(taken)

    def _read(self, taken: list[tuple[int, int, int]]) -> None:
        """Buffer the messages of claimed (start, end, deliveries) ranges, in offset order (built from the records'
        bytes by QueueCore._take). Offsets the log no longer has (deleted by someone else) are acked so that they
        leave the state."""
        log = self._log
        for lo, hi, deliveries in taken:
            first = self._buffer_len()
            got = 0
            pos = lo
            try:
                while pos < hi:
                    view = log.read(pos)
                    if not len(view):
                        break
                    got += self._take(iter_records(view, min_offset=pos, max_offset=hi), deliveries, hi - lo)
                    nxt = next_offset_after(view, pos)
                    if nxt <= pos:
                        break
                    pos = nxt
            except OffsetOutOfRangeError:
                pass
            if got != hi - lo:
                have = {m.offset for m in self._buffered()[first:]}
                for o in range(lo, hi):
                    if o not in have:
                        self._journal(o)

    # ------------------------------------------------------------------------------------------------ ack

    def _ack_slow(self, message) -> None:
        """ack() when QueueCore's fast path left it here (another thread holds the lock, the journal is full,
        failpoints are on, or the message is not held: then it raises)."""
        with self._guard:
            self._check_open()
            offset = self._held_message(message)  # raises
            self._held.discard(message)
            self._journal(offset)
            if self._failpoints:
                failpoints.hit("queue:ack:after-journal")
            self._fold_if_due()

    def _after_ack(self) -> None:
        # QueueCore.ack stored an ack that may make a fold due
        with self._guard:
            if not self._closed:
                self._fold_if_due()

    def _fold_if_due(self) -> None:
        """Fold the journal every _FOLD_ACKS acks, and once the worker holds nothing (unless it folded in the last
        _RECLAIM_S: a worker that loops on get folds with its next claim, one state write instead of two)."""
        if self._jpos >= self._fold_bytes or (not self._held and not self._buffer_len()
                                              and time.monotonic() >= self._next_idle_fold):
            self._session()

    def nack(self, message: Message) -> None:
        """Give the message back: the next claim of any worker of the group (this one included) delivers it again."""
        with self._guard:
            self._check_open()
            offset = self._held_message(message)
            self._held.discard(message)
            self._session(nacks={offset: message.delivery_count})
        self._event.set()  # this object's waiting threads may take it

    def _journal(self, offset: int) -> None:
        # a store into the journal's shared mapping: page cache, so it outlives a kill -9 of this process
        if not self._journal_store(offset):
            self._session()  # folds and empties the journal
            self._journal_store(offset)

    def qsize(self) -> int:
        """Messages put and not acked yet (delivered or not). Approximate, as ``queue.Queue.qsize``: other workers'
        acks are counted once folded into the state (see the module docstring). Also deletes acked segments now."""
        with self._guard:
            self._check_open()
            self._session(measure=True, reap=True, force_delete=True)
            return self._size

    # ------------------------------------------------------------------------------------------------ the state

    def _journal_path(self, worker: str):
        return self._dir / (worker + JOURNAL_SUFFIX)

    def _read_state(self) -> tuple[_State, bool]:
        """(state, fresh): fresh when there is no usable state (then it starts at the committed offset)."""
        st, problems = self._files.read()
        if st is not None:
            return st, False
        if problems:
            _log.warning("queue state of group %r in %s is unusable (%s): the group restarts from its committed "
                         "offset and redelivers what was in flight", self.group, self._dir, "; ".join(problems))
        committed = self._store.offsets.committed(self.group, TopicPartition(self.name, 0))
        start = 0 if committed is None else committed.offset
        seq = max((int.from_bytes(r, "big") for r in self._files.raw if len(r) == 8), default=0)
        return _State(start, start, seq), True

    def _session(self, claim: int = 0, measure: bool = False, reap: bool = False, nacks=None, closing: bool = False,
                 opening: bool = False, force_delete: bool = False) -> list[tuple[int, int, int]]:
        """One read-modify-write of the state under state.lock (self._lock held): fold this worker's journal; then
        as asked, reap dead workers, apply nacks, give back everything held (closing) and claim up to ``claim``
        offsets. The state is written only if it changed. Returns the claimed (start, end, deliveries) ranges."""
        me = self._worker
        dead: list[tuple[str, int]] = []
        taken: list[tuple[int, int, int]] = []
        self._state_lock.acquire(timeout=self._lock_timeout, what=f"queue {self.name!r} group {self.group!r}")
        try:
            if self._jfd < 0:
                self._open_journal()
            st, self._cached = self._cached, None  # an exception from here on leaves no cached state
            if st is not None and self._files.peek() == self._stamp:
                changed = False  # nobody wrote since this worker's last read or write: its copy is the state
            else:
                st, changed = self._read_state()
            if opening or changed or measure:
                self._seen_leo = self._log.log_end_offset
                # the log start moves only below the prefix of every group, or by someone else's delete-before
                # (which _read copes with): only a new or rebuilt state needs it
                lso = self._log.log_start_offset if opening or changed else 0
                changed = st.clamp(lso, self._seen_leo) or changed
            folded = self._jpos > 0
            if folded:
                changed = st.ack_runs(self._journal_runs(), me) or changed
            reap = reap or opening or (claim and time.monotonic() >= self._next_reap)
            if reap:
                changed = self._reap(st, dead) or changed
            if nacks:
                for o, d in nacks.items():
                    changed = st.give_back(me, o, d) or changed
            if closing and me in st.leases:
                for m in self._buffered():  # never handed out: that claim does not count as a delivery
                    st.give_back(me, m.offset, m.delivery_count - 1)
                for m in self._held:
                    st.give_back(me, m.offset, m.delivery_count)
                for start, end, deliveries in st.leases.pop(me).r:  # claimed, but a failed read lost track of it
                    st.redeliver.add(start, end, deliveries)
                changed = True
            if claim:
                if st.redeliver.count() + self._seen_leo - st.next < claim:
                    self._seen_leo = self._log.log_end_offset
                taken = st.take(me, claim, self._seen_leo)
                if not taken and not reap:  # nothing to do: look for dead workers' messages now
                    reap = True
                    if self._reap(st, dead):
                        changed = True
                        taken = st.take(me, claim, self._seen_leo)
                changed = changed or bool(taken)
            if not st.leases.get(me, True):
                del st.leases[me]
            if changed:
                st.advance()
                st.seq += 1
                self._files.write(st)
                failpoints.hit("queue:session:after-write")
            self._stamp = self._files.stamp()
            self._cached = st
            if folded:
                failpoints.hit("queue:fold:before-zero")
                self._journal_clear()  # a zero record ends a journal (its Check fails)
            if dead:
                failpoints.hit("queue:reap:before-unlink")
                for w, _fd in dead:
                    try:
                        os.unlink(self._journal_path(w))
                    except FileNotFoundError:
                        pass
                    except OSError as e:
                        raise storage_error(e, "delete", self._journal_path(w)) from None
        finally:
            for _, fd in dead:
                os.close(fd)
            self._state_lock.release()
        now = time.monotonic()
        self._next_idle_fold = now + _RECLAIM_S
        if reap:
            self._next_reap = now + _RECLAIM_S
        if measure:
            self._size = max(0, self._seen_leo - st.next) + st.in_flight()
        self._seen_prefix = st.prefix
        if st.prefix > self._checked_prefix and (force_delete or now >= self._next_delete_check):
            self._after_advance(st.prefix)
        return taken

    def _open_journal(self) -> None:
        # created and flocked under state.lock: a reaper never finds it unlocked
        self._jfd, self._jmap = create_journal(self._journal_path(self._worker))
        self._journal_attach(self._jmap)

    def _reap(self, st: _State, dead: list) -> bool:
        """Fold the journals of dead workers and give their leases back (state.lock held). Their journals stay
        flocked in ``dead`` until the state that holds their acks is written, then they are unlinked."""
        return reap_dead_workers(self._dir, self._worker, st, dead)

    def _after_advance(self, prefix: int) -> None:
        """The acked prefix moved: delete whole segments below it and below every other group's prefix (checked
        at most every 50 ms, and at once by qsize and close)."""
        self._next_delete_check = time.monotonic() + _RECLAIM_S
        self._checked_prefix = prefix
        if not self._delete:
            return
        segs = self._log.segments()
        if len(segs) < 2 or segs[1].base_offset > prefix:
            return
        self._commit(prefix)
        upto = min(prefix, self._other_groups_floor())
        if upto < segs[1].base_offset:
            return
        try:
            self._log.delete_records_before(upto)
        except PolicyViolationError as e:
            self._delete = False
            _log.warning("queue %r: acked records stay on disk: %s", self.name, e)

    def _other_groups_floor(self) -> int:
        floor = 1 << 62
        root = self._dir.parent
        try:
            groups = os.listdir(root)
        except OSError as e:
            raise storage_error(e, "list", root) from None
        for g in groups:
            if g == self.group:
                continue
            try:
                files = _StateFiles(root / g, writable=False)
            except KafkaStorageError:
                return -1  # a group that is being created
            try:
                st, _ = files.read()
            finally:
                files.close()
            if st is None:
                return -1  # a group whose state is unreadable keeps everything
            floor = min(floor, st.prefix)
        return floor

    def _commit(self, prefix: int) -> None:
        if prefix > self._committed:
            self._store.offsets.commit(self.group, {TopicPartition(self.name, 0): OffsetAndMetadata(prefix)},
                                       sync=False)
            self._committed = prefix

    # ------------------------------------------------------------------------------------------------ close

    def close(self) -> None:
        """Give back every message held (got and not acked, or prefetched) for redelivery, fold the acks, remove
        this worker's journal, delete acked segments, close the store if the queue opened it. Idempotent."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            try:
                self._session(closing=True, force_delete=True)
                self._clear_buffer()
                self._held.clear()
                failpoints.hit("queue:close:before-unlink")
                try:
                    os.unlink(self._journal_path(self._worker))
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise storage_error(e, "delete", self._journal_path(self._worker)) from None
                self._commit(self._seen_prefix)
            finally:
                self._log.remove_waiter(self._event)
                self._release_files()
                if self._owns_store:
                    self._store.close()
                self._event.set()

    def _release_files(self) -> None:
        if self._jmap is not None:
            self._journal_detach()
            self._jmap.close()
            self._jmap = None
        if self._jfd >= 0:
            os.close(self._jfd)
            self._jfd = -1
        if self._state_lock is not None:
            self._state_lock.close()
        if self._files is not None:
            self._files.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------------------------------------ properties

    @property
    def store(self) -> LogStore:
        return self._store

    @property
    def log(self):
        """The topic partition's Log (log_start_offset, log_end_offset, recovery_point, ...)."""
        return self._log

    @property
    def worker_id(self) -> str:
        """This object's worker name: its journal is ``<worker_id>.acks`` in the group's directory."""
        return self._worker

    def __repr__(self):
        state = "closed" if self._closed else f"holding {len(self._held) + self._buffer_len()}"
        return f"DurableQueue({str(self._store.path)!r}, name={self.name!r}, group={self.group!r}, {state})"
