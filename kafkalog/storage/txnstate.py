"""The transactions of one partition: which are open (and so the last stable offset) and which were aborted.

Kafka keeps this in its ProducerStateManager (rebuilt from ``.snapshot`` files and the log) and in the ``.txnindex``
file of each segment. kafkalog derives it from the log itself, the one truth every process shares: the batch headers
say everything (a data batch with the transactional bit opens its producer's transaction at its base offset, if none
is open; a control batch with an ABORT or COMMIT marker closes it). Only headers are read, never records.

* A partition that never held a transactional batch costs nothing: the first transactional append (data or marker)
  creates ``.kafkalog-txn`` in the partition directory (fsynced) before it writes, and a partition without that file
  (nor a ``.txnindex`` written by Kafka) is known to hold none: its last stable offset is its log end.
* Otherwise the state is built the first time it is needed, then kept up to date with each append (this process's,
  or other processes' seen on refresh) by scanning only the new batch headers. Building starts from the newest
  producer snapshot (``<offset>.snapshot``, Kafka's ProducerSnapshot v1: each producer's epoch and the first offset
  of its open transaction), written at every segment roll of a partition that holds transactions, plus the
  ``.txnindex`` entries below it, then scans from the snapshot's offset: opening costs one segment's headers, not
  the log's. Without a usable snapshot (none yet, a bad CRC, one beyond the log end) it scans from the log start.
  A recovery that cut anything from the log removes every snapshot (they may describe batches that are gone).
* ``.txnindex`` files (Kafka's format, one entry per aborted transaction, in the segment that holds its ABORT marker)
  are written when this process appends an ABORT marker, for Kafka's tools and for a Kafka broker opening the data
  dir, and for the open from a snapshot, which takes the aborted transactions below the snapshot from them (and only
  those: everything above it from the scan). So a snapshot vouches for the files below it: an entry can be missing
  (the process that appended the marker was killed before it wrote the entry; the other processes' scans see the
  marker, and the coordinator's retry finds the transaction ended and writes none), and the roll that writes a
  snapshot first completes the files of the segments since the previous snapshot from its own scan.

Fields of the state:

    ongoing  {producer id: first offset}   the open transactions, each since its first data batch
    epochs   {producer id: epoch}          the highest epoch of each producer's transactional batches and markers:
                                           a transactional batch of an older epoch is refused (a fenced producer's
                                           batch must not open a transaction after its ABORT marker, which carries
                                           the bumped epoch), as Kafka's ProducerStateManager does
    aborted  [AbortedTxn]                  ascending last offset (the ABORT marker's offset)
    scanned  int                           every batch below it has been taken in (-1: not built yet)
"""

from __future__ import annotations

import bisect

from .._engine.batch import iter_batches
from .txnformat import AbortedTxn, marker_of_batch

TXN_MARKER_FILE = ".kafkalog-txn"


class PartitionTxns:
    __slots__ = ("ongoing", "epochs", "coordinator_epochs", "aborted", "scanned", "_aborted_last")

    def __init__(self):
        self.ongoing: dict[int, int] = {}
        self.epochs: dict[int, int] = {}
        self.coordinator_epochs: dict[int, int] = {}  # producer id -> coordinator epoch of its last marker here
        self.aborted: list[AbortedTxn] = []
        self._aborted_last: list[int] = []  # last offsets of ``aborted`` (for bisect)
        self.scanned = -1

    def reset(self, start: int) -> None:
        self.ongoing.clear()
        self.epochs.clear()
        self.coordinator_epochs.clear()
        self.aborted.clear()
        self._aborted_last.clear()
        self.scanned = start

    def load(self, ongoing: dict, epochs: dict, aborted: list, scanned: int, coordinator_epochs=None) -> None:
        """The state as of ``scanned`` from a producer snapshot and the ``.txnindex`` entries below it."""
        self.reset(scanned)
        self.ongoing.update(ongoing)
        self.epochs.update(epochs)
        self.coordinator_epochs.update(coordinator_epochs or {})
        for a in aborted:
            if a.last_offset < scanned and (not self._aborted_last or a.last_offset > self._aborted_last[-1]):
                self.aborted.append(a)
                self._aborted_last.append(a.last_offset)

    def stale_epoch(self, pid: int, epoch: int) -> int | None:
        """The epoch that fences ``pid``'s ``epoch`` on this partition, or None."""
        current = self.epochs.get(pid, -1)
        return current if epoch < current else None

    def first_unstable(self) -> int | None:
        """The first offset of the earliest open transaction, or None."""
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset(self, log_start: int, log_end: int) -> int:
        first = self.first_unstable()
        if first is None:
            return log_end
        return min(max(first, log_start), log_end)

    def observe(self, buf, start: int) -> int:
        """Take in the batches of ``buf`` (whole batches as the log holds them) whose offsets reach ``start`` or
        beyond; returns the offset after the last one (``start`` when none)."""
        nxt = start
        for batch in iter_batches(buf):
            end = batch.next_offset
            if end <= nxt:
                continue  # taken in already (a read starts with the batch holding its offset)
            if batch.is_transactional:
                pid = batch.producer_id
                if batch.producer_epoch > self.epochs.get(pid, -1):
                    self.epochs[pid] = batch.producer_epoch
                if batch.is_control:
                    marker = marker_of_batch(buf, batch.position)
                    if marker is not None:
                        self.coordinator_epochs[pid] = marker[1]
                        self.complete(pid, marker[0], batch.base_offset)
                elif pid not in self.ongoing:
                    self.ongoing[pid] = batch.base_offset
            nxt = end
        self.scanned = max(self.scanned, nxt)
        return nxt

    def complete(self, pid: int, commit: bool, marker_offset: int) -> AbortedTxn | None:
        """A marker at ``marker_offset`` ends ``pid``'s open transaction (if any); the aborted entry it makes."""
        first = self.ongoing.pop(pid, None)
        if first is None or commit:
            return None
        others = self.first_unstable()
        entry = AbortedTxn(pid, first, marker_offset, others if others is not None else marker_offset + 1)
        if not self._aborted_last or marker_offset > self._aborted_last[-1]:
            self.aborted.append(entry)
            self._aborted_last.append(marker_offset)
        return entry

    def aborted_between(self, fetch_offset: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a read of [fetch_offset, upper) must be told
        about: those that end at or after ``fetch_offset`` and start before ``upper`` (Kafka's collectAbortedTxns),
        in the order of their markers."""
        i = bisect.bisect_left(self._aborted_last, fetch_offset)
        return [(a.producer_id, a.first_offset) for a in self.aborted[i:] if a.first_offset < upper]

    def aborted_in(self, lo: int, hi: int) -> list[AbortedTxn]:
        """The aborted transactions whose ABORT marker lies in [lo, hi) (one segment's ``.txnindex`` entries)."""
        return self.aborted[bisect.bisect_left(self._aborted_last, lo):bisect.bisect_left(self._aborted_last, hi)]

    def trim(self, log_start: int) -> None:
        """Forget aborted transactions wholly below the log start (their records are gone)."""
        i = bisect.bisect_left(self._aborted_last, log_start)
        if i:
            del self.aborted[:i]
            del self._aborted_last[:i]


__all__ = ["TXN_MARKER_FILE", "PartitionTxns"]
