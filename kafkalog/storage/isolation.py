"""Isolation levels for readers of a partition: what a read_committed reader keeps of the batches below the last
stable offset (Kafka's ``isolation.level``; KIP-98).

``read_uncommitted`` (the default, as in Kafka) reads every data batch up to the high watermark. ``read_committed``
reads only below the last stable offset (``Log.last_stable_offset``: the first offset of the earliest open
transaction) and drops the records of aborted transactions. Control batches (COMMIT/ABORT markers) are never records
in either mode: every iterator of the engine skips them.

How aborted records are found (Kafka's Fetcher, ``CompletedFetch.nextFetchedRecord``): a Fetch answers the batches
with the list of aborted transactions they may hold, ``[(producer id, first offset)]`` (``Log.fetch_isolated``).
Walking the batches in offset order, an entry becomes active when a batch reaches its first offset; while a
producer id is active, its transactional data batches are dropped; its ABORT control batch deactivates it. Only
batch headers are read (and the one record of an ABORT marker), never data records.
"""

from __future__ import annotations

from collections.abc import Iterator

from .._engine.batch import iter_batches, next_offset_after
from ..errors import InvalidConfigError, OffsetOutOfRangeError
from .txnformat import marker_of_batch

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def is_read_committed(isolation_level) -> bool:
    """True for 'read_committed', False for 'read_uncommitted' (also Kafka's wire values 1 and 0);
    InvalidConfigError (a ValueError) naming the allowed values otherwise."""
    if isolation_level == READ_COMMITTED or (type(isolation_level) is int and isolation_level == 1):
        return True
    if isolation_level == READ_UNCOMMITTED or (type(isolation_level) is int and isolation_level == 0):
        return False
    raise InvalidConfigError(f"isolation_level={isolation_level!r}: must be 'read_uncommitted' or 'read_committed'")


def drop_aborted(view, aborted):
    """The batches of ``view`` (whole batches, as ``Log.fetch_isolated`` returns them) that a read_committed reader
    keeps: without the data batches of the ``aborted`` transactions ([(producer id, first offset)]) and without
    control batches. ``view`` itself when nothing is dropped (no copy), else one bytes object of the kept batches."""
    if not aborted:
        return view
    pending = sorted(aborted, key=lambda a: a[1])
    i, n = 0, len(pending)
    active: set[int] = set()
    keep: list[tuple[int, int]] = []
    dropped = False
    for batch in iter_batches(view):
        pos = batch.position
        end = pos + batch.size_in_bytes
        pid = batch.producer_id
        drop = False
        if pid >= 0:
            last = batch.last_offset
            while i < n and pending[i][1] <= last:
                active.add(pending[i][0])
                i += 1
            if batch.is_control:
                drop = True
                if pid in active:
                    marker = marker_of_batch(view, pos)
                    if marker is not None and not marker[0]:
                        active.discard(pid)  # its ABORT marker: later batches of pid are a new transaction
            elif batch.is_transactional and pid in active:
                drop = True
        if drop:
            dropped = True
        elif keep and keep[-1][1] == pos:
            keep[-1] = (keep[-1][0], end)
        else:
            keep.append((pos, end))
    if not dropped:
        return view
    mv = memoryview(view)
    return b"".join(mv[s:e] for s, e in keep)


def committed_chunks(log, start_offset: int | None, end_offset: int | None, chunk_bytes: int = 1 << 20
                     ) -> Iterator[tuple[object, int, int]]:
    """(buffer, start, stop) chunks of ``log`` for a read_committed reader: whole batches from ``start_offset``
    (default: the log start) below ``end_offset`` and the last stable offset (as of each chunk), aborted
    transactions' batches dropped. Like ``Log.records``' chunks: a start below the log start offset raises
    OffsetOutOfRangeError; a delete-before while iterating moves on to the new log start."""
    pos = log.log_start_offset if start_offset is None else start_offset
    first = True
    while True:
        try:
            _, _, lso, view, aborted = log.fetch_isolated(pos, chunk_bytes, True)
        except OffsetOutOfRangeError:
            start, end = log.log_start_offset, log.log_end_offset
            if pos < start:
                if first:
                    raise OffsetOutOfRangeError(f"offset {pos} is below the log start offset {start} of "
                                                f"{log.topic}-{log.partition}") from None
                pos = start  # never return records below the new log start
                continue
            if pos > end:
                return
            raise
        first = False
        stop = lso if end_offset is None else min(end_offset, lso)
        if view is None or pos >= stop or not len(view):
            return
        nxt = next_offset_after(view, pos)
        yield drop_aborted(view, aborted), pos, stop
        if nxt <= pos:
            return
        pos = nxt


__all__ = ["ISOLATION_LEVELS", "READ_COMMITTED", "READ_UNCOMMITTED", "committed_chunks", "drop_aborted",
           "is_read_committed"]
