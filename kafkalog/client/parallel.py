"""Parallel rebalance after a consumer crash (seed 003, ``enable_parallel_rebalance=True``).

When a consumer takes a partition whose previous owner died without revoking it (its ownership marker is still
there and its owner lock is free), and the group's committed offset C is behind the log end L, the consumer does
not go back to C: the primary seeks to L and a second, internal consumer (the "child") processes the gap [C, L) in
parallel. ``poll()`` returns records of both; the child never reads past its ranges.

Files and records::

    <data dir>/.kafkalog-groups/g-<group>/owned/<topic>-<partition>   owner id of the consumer that holds it
    <data dir>/.kafkalog-groups/g-<group>/owner-<owner id>.lock         flock'ed for that consumer's lifetime
    __consumer_offsets, group "<group>"                                  the primary's commit log (Kafka's)
    __consumer_offsets, group "__parallel__.<group>"                     the child's commit log:
        OffsetCommitValue => offset: first unfinished offset, metadata: {"ranges": [[lo, hi], ...]}

The ranges are the checkpointed token: each commit of the child writes its remaining ranges in one record, so a
crash of the child resumes at its own committed offset inside them; a further crash of the primary adds a range
(union, so a range committed twice after a crash between the two commits below is harmless). Order on recovery:
child token (fsync), then the primary's commit at L (fsync) — a crash between them re-adds [C, L) at the next
recovery, never loses it. When the child has no ranges left it stays on standby (``child_consumer_is_alive()``).
At-least-once: an offset of a gap leaves the token only when the child (or the app, through ``commit(offsets)``)
committed past it.

Semantics (the seed's): ``committed()`` is the child's offset while its ranges for the partition are unfinished,
else the primary's; ``position()`` is the primary's; ``commit()`` commits both positions, ``commit(offsets)``
sends an offset below the gap's upper bound L and past the start of a range to the child's log (trimming its ranges
no further than the child has fetched) and the rest, L and above, to the primary's;
``pause``/``resume``/``close`` act on both.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid

from ..structs import OffsetAndMetadata, TopicPartition
from .group import group_dir, lock_holder_alive

CHILD_GROUP_PREFIX = "__parallel__."


def child_group(group: str) -> str:
    return CHILD_GROUP_PREFIX + group


def merge_ranges(ranges) -> list[list[int]]:
    """Sorted union of [lo, hi) ranges, empty ones dropped."""
    out: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges if int(b) > int(a)):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def trim_ranges(ranges, offset: int) -> list[list[int]]:
    """What is left of the ranges once everything below ``offset`` is done."""
    return [[max(lo, offset), hi] for lo, hi in ranges if hi > offset]


class _Gap:
    __slots__ = ("ranges", "committed", "paused", "dirty")

    def __init__(self, ranges):
        self.ranges = merge_ranges(ranges)  # what the child still has to fetch; ranges[0][0] is its position
        self.committed = [list(r) for r in self.ranges]  # what the token on disk says
        self.paused = False
        self.dirty = False


class ParallelRebalance:
    """The child consumer of one KafkaConsumer (same thread; see the module docstring)."""

    def __init__(self, consumer):
        self.c = consumer
        self.group = consumer._group
        self.child_group = child_group(self.group)
        self.dir = group_dir(consumer.store.path, self.group)
        self.owner = uuid.uuid4().hex
        self.gaps: dict[TopicPartition, _Gap] = {}
        self.alive = False
        self._fd = -1

    # -- ownership markers --------------------------------------------------------------------------------------

    def _own(self) -> None:
        if self._fd >= 0:
            return
        (self.dir / "owned").mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / f"owner-{self.owner}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd

    def _marker(self, tp) -> str:
        return str(self.dir / "owned" / f"{tp.topic}-{tp.partition}")

    def _owner_alive(self, owner: str) -> bool:
        path = self.dir / f"owner-{owner}.lock"
        if lock_holder_alive(path):
            return True
        try:
            os.unlink(path)  # a dead owner's file: nobody needs it any more
        except OSError:
            pass
        return False

    def _read_marker(self, tp) -> str | None:
        try:
            with open(self._marker(tp)) as f:
                return f.read().strip() or None
        except FileNotFoundError:
            return None

    # -- assignment ---------------------------------------------------------------------------------------------

    def take(self, tp: TopicPartition) -> None:
        """tp was just assigned to this consumer: load the child's token, detect a crash of the previous owner."""
        if tp in self.gaps:
            return
        self._own()
        offsets = self.c.store.offsets
        token = offsets.committed(self.child_group, tp)
        ranges = []
        if token is not None and token.metadata:
            try:
                ranges = json.loads(token.metadata).get("ranges", [])
            except (ValueError, AttributeError):
                ranges = []
        gap = _Gap(ranges)
        if ranges:
            self.alive = True  # a child left unfinished ranges: it resumes at its committed offset inside them
        prev = self._read_marker(tp)
        # a marker left by another owner means it never revoked (the eager protocol revokes, and releases, before
        # any member takes): it died, or the group evicted it for stalling (heartbeat / max.poll.interval.ms) while
        # it still runs. Both take the gap path; a dead owner's lock file is cleaned up on the way.
        if prev is not None and prev != self.owner:
            self._owner_alive(prev)
            primary = offsets.committed(self.group, tp)
            part = self.c._parts[tp]
            end = part.log.high_watermark
            if primary is not None and 0 <= primary.offset < end:
                gap.ranges = merge_ranges([*gap.ranges, [primary.offset, end]])
                gap.committed = [list(r) for r in gap.ranges]
                offsets.commit(self.child_group, {tp: self._token(gap.committed, end)}, sync=True)
                offsets.commit(self.group, {tp: OffsetAndMetadata(end, primary.metadata, None)}, sync=True)
                part.position = end
                self.alive = True
        with open(self._marker(tp), "w") as f:
            f.write(self.owner)
        self.gaps[tp] = gap

    def release(self, tp: TopicPartition) -> None:
        """tp left this consumer cleanly (its commits are done): the next owner must not see a crash."""
        self.gaps.pop(tp, None)
        if self._read_marker(tp) == self.owner:
            try:
                os.unlink(self._marker(tp))
            except OSError:
                pass

    def close(self) -> None:
        """A clean close: release every partition (no crash for the next owner to see), drop the owner lock."""
        for tp in list(self.gaps):
            self.release(tp)
        if self._fd >= 0:
            try:
                os.unlink(self.dir / f"owner-{self.owner}.lock")
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1

    def pause(self, partitions, paused: bool) -> None:
        for tp in partitions:
            gap = self.gaps.get(TopicPartition(*tp))
            if gap is not None:
                gap.paused = paused

    # -- fetching -----------------------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return any(g.ranges for g in self.gaps.values())

    def has_work(self) -> bool:
        return any(g.ranges and not g.paused for g in self.gaps.values())

    def fetch(self, out: dict, limit: int) -> int:
        got = 0
        for tp, gap in self.gaps.items():
            if got >= limit:
                break
            if gap.paused or not gap.ranges:
                continue
            part = self.c._parts.get(tp)
            if part is None:
                continue
            lo, hi = gap.ranges[0]
            recs, nxt, _ = self.c._read(part, lo, limit - got, self.c._part_bytes, end=hi)
            if recs:
                out.setdefault(tp, []).extend(recs)
                got += len(recs)
            if nxt >= hi:
                gap.ranges.pop(0)
            else:
                gap.ranges[0][0] = max(lo, nxt)
            gap.dirty = gap.dirty or nxt != lo
        return got

    # -- commits ------------------------------------------------------------------------------------------------

    @staticmethod
    def _token(ranges, done: int) -> OffsetAndMetadata:
        return OffsetAndMetadata(ranges[0][0] if ranges else done, json.dumps({"ranges": ranges}), None)

    def commit_positions(self, sync: bool) -> None:
        todo = {}
        for tp, gap in self.gaps.items():
            if gap.committed != gap.ranges:
                done = gap.committed[-1][1] if gap.committed else 0
                gap.committed = [list(r) for r in gap.ranges]
                todo[tp] = self._token(gap.committed, done)
        if todo:
            self._commit_child(todo, sync)

    def split_commit(self, offsets: dict, sync: bool) -> dict:
        """Send offsets inside a gap to the child's log; return the rest (the primary's). An offset at or above the
        gap's upper bound L belongs to the primary (right after a takeover the primary's position is L); the
        child's ranges shrink only up to what the child itself has fetched, never past it."""
        mine = {}
        rest = {}
        for tp, om in offsets.items():
            gap = self.gaps.get(tp)
            upper = gap.committed[-1][1] if gap is not None and gap.committed else None
            if upper is not None and om.offset < upper and any(lo < om.offset for lo, _ in gap.committed):
                fetched = gap.ranges[0][0] if gap.ranges else upper
                trimmed = trim_ranges(gap.committed, min(om.offset, fetched))
                if trimmed != gap.committed:
                    gap.committed = trimmed
                    mine[tp] = self._token(gap.committed, upper)
            else:
                rest[tp] = om
        if mine:
            self._commit_child(mine, sync)
        return rest

    def _commit_child(self, tokens: dict, sync: bool) -> None:
        """The child's tokens, fenced as the primary's commits are: a consumer that lost the partition (evicted
        while stalled, still running) gets CommitFailedError and never overwrites its successor's ranges."""
        member = self.c._member
        if member is None:
            self.c._owns_for_commit(tokens)
            self.c.store.offsets.commit(self.child_group, tokens, sync=sync)
            return
        with member._locked(shared=True):
            self.c._owns_for_commit(tokens)
            self.c.store.offsets.commit(self.child_group, tokens, sync=sync)

    def committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        """The child's committed offset while its ranges for tp are unfinished (None: ask the primary)."""
        gap = self.gaps.get(tp)
        if gap is not None:
            return OffsetAndMetadata(gap.committed[0][0], "", None) if gap.committed else None
        token = self.c.store.offsets.committed(self.child_group, tp)
        if token is None or not token.metadata:
            return None
        try:
            ranges = json.loads(token.metadata).get("ranges", [])
        except (ValueError, AttributeError):
            return None
        return OffsetAndMetadata(ranges[0][0], "", None) if ranges else None
