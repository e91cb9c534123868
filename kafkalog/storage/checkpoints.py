"""The data dir's shared checkpoint files (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``: where each compacted partition's dirty section starts),
read-modify-written under a file lock so that every writer process of the store can update its partitions.

Thread- and process-safe. A log start offset is fsynced before ``set_log_start`` returns (Kafka writes it every
60 s, so a crash could bring deleted records back; here an acknowledged delete-before is durable).

Malformed files. kafkalog never writes one: a file is only ever replaced whole (temp, fsync, rename, fsync of the
directory) under the lock, and an entry that would not read back as itself (a topic name with whitespace) is refused
with KafkaStorageError, the previous file left as it was. A file malformed by anything else (a hand edit, a damaged
disk, a kafkalog before issue 21, which accepted topic names ending in a newline) never stops an open or a
maintenance round: its well-formed entries are taken, a warning names the file and every bad line, and a writer keeps
the file as it was beside it (``<name>.malformed-<crc32 of its bytes>``, never removed by kafkalog) and rewrites it
with those entries. An entry on an unreadable line is lost: a lost recovery point makes the next recovery scan more,
a lost cleaner offset cleans the partition again from its start, and a lost log start offset falls back to the
partition's first segment (Kafka falls back so for the whole file), so records below it that are still in that
segment can be read again; the warning says so. Entries written as ``t\\n 0 5`` by a kafkalog before issue 21 are
read as the one entry they are and written back in that form, so their log start offsets are kept.
"""

from __future__ import annotations

import logging
import threading
import zlib
from pathlib import Path

from .files import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    FileLock,
    OffsetCheckpointFile,
    atomic_write,
)

_log = logging.getLogger("kafkalog")
MALFORMED_SUFFIX = ".malformed-"


class Checkpoints:
    def __init__(self, root: Path, read_only: bool = False):
        self.recovery_points = OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT)
        self.log_starts = OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT)
        self.cleaner_offsets = OffsetCheckpointFile(root / CLEANER_OFFSET_CHECKPOINT)
        self._read_only = read_only
        self._file_lock = None if read_only else FileLock(root / ".kafkalog-checkpoint.lock")
        self._lock = threading.Lock()
        self._lso_stamp = None
        self._lso_cache: dict[tuple[str, int], int] = {}
        self._reported: set[tuple[Path, int]] = set()  # (file, crc32 of its bytes): each malformed file warned once

    def log_start(self, topic: str, partition: int) -> int:
        """The checkpointed log start offset (0 when none); re-read only when the file changed."""
        with self._lock:
            stamp = self.log_starts.stamp()
            if stamp != self._lso_stamp:
                self._lso_cache = self._read(self.log_starts)
                self._lso_stamp = stamp
            return self._lso_cache.get((topic, partition), 0)

    def log_start_stamp(self):
        return self.log_starts.stamp()

    def recovery_point(self, topic: str, partition: int) -> int:
        with self._lock:
            return self._read(self.recovery_points).get((topic, partition), 0)

    def cleaner_offset(self, topic: str, partition: int) -> int:
        """Where the partition's dirty section starts (-1 when it was never cleaned)."""
        with self._lock:
            return self._read(self.cleaner_offsets).get((topic, partition), -1)

    def set_cleaner_offset(self, topic: str, partition: int, offset: int) -> None:
        self._update(self.cleaner_offsets, {(topic, partition): offset}, keep_max=False)

    def _read(self, file: OffsetCheckpointFile) -> dict:
        """The file's well-formed entries (``self._lock`` held); a malformed file is reported and, by a writer,
        kept aside and rewritten (under the file lock: another process may be rewriting it)."""
        entries, problems, data = file.read_checked()
        if not problems:
            return entries
        if self._read_only:
            self._report(file, problems, data, len(entries), None)
            return entries
        self._file_lock.acquire(what="checkpoint")
        try:
            return self._read_locked(file)
        finally:
            self._file_lock.release()

    def _read_locked(self, file: OffsetCheckpointFile) -> dict:
        """The file's entries, both locks held: a malformed file is copied aside as it is, then rewritten with its
        well-formed entries (whole or not at all: a crash in between leaves the old file and maybe the copy)."""
        entries, problems, data = file.read_checked()
        if problems:
            aside = file.path.with_name(f"{file.path.name}{MALFORMED_SUFFIX}{zlib.crc32(data):08x}")
            if not aside.exists():
                atomic_write(aside, data, failpoint="checkpoint-aside")
            file.write(entries)
            self._report(file, problems, data, len(entries), aside)
        return entries

    def _report(self, file: OffsetCheckpointFile, problems: list[str], data: bytes, taken: int, aside) -> None:
        key = (file.path, zlib.crc32(data))
        if key in self._reported:
            return
        self._reported.add(key)
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        where = (f"the file as it was is kept as {aside.name} and was rewritten with them" if aside is not None else
                 "the file is left as it is (a read-only store)")
        lost = ("; a partition whose line was unreadable starts at its first segment, so records below its lost log "
                "start may be read again") if file is self.log_starts else ""
        _log.warning("malformed checkpoint %s: %s%s; took its %d well-formed entries; %s%s", file.path,
                     "; ".join(problems[:5]), more, taken, where, lost)

    def _update(self, file: OffsetCheckpointFile, changes: dict, keep_max: bool) -> None:
        with self._lock:
            self._file_lock.acquire(what="checkpoint")
            try:
                before = self._read_locked(file)
                entries = dict(before)
                for key, value in changes.items():
                    if value is None:
                        entries.pop(key, None)
                    elif keep_max:
                        entries[key] = max(entries.get(key, value), value)
                    else:
                        entries[key] = value
                if entries == before:  # nothing to change (e.g. forgetting a topic never checkpointed): the file
                    return             # stays as it is, one atomic write (two fsyncs) saved
                file.write(entries)
                if file is self.log_starts:
                    self._lso_cache, self._lso_stamp = entries, file.stamp()
            finally:
                self._file_lock.release()

    def set_log_start(self, topic: str, partition: int, offset: int) -> None:
        self._update(self.log_starts, {(topic, partition): offset}, keep_max=True)

    def set_recovery_points(self, points: dict[tuple[str, int], int], replace: bool = False) -> None:
        """Merge recovery points (each only moves forward unless ``replace``, used after a recovery truncated)."""
        if points:
            self._update(self.recovery_points, points, keep_max=not replace)

    def forget(self, topic: str, partitions) -> None:
        gone = {(topic, p): None for p in partitions}
        self._update(self.recovery_points, gone, keep_max=False)
        self._update(self.log_starts, gone, keep_max=False)
        if self.cleaner_offsets.path.exists():
            self._update(self.cleaner_offsets, gone, keep_max=False)

    def close(self) -> None:
        if self._file_lock is not None:
            self._file_lock.close()
