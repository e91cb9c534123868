"""The data dir's shared checkpoint files (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``: where each compacted partition's dirty section starts),
read-modify-written under a file lock so that every writer process of the store can update its partitions.

Thread- and process-safe. A log start offset is fsynced before ``set_log_start`` returns (Kafka writes it every
60 s, so a crash could bring deleted records back; here an acknowledged delete-before is durable).
"""

from __future__ import annotations

import threading
from pathlib import Path

from .files import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    FileLock,
    OffsetCheckpointFile,
)


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

    def log_start(self, topic: str, partition: int) -> int:
        """The checkpointed log start offset (0 when none); re-read only when the file changed."""
        with self._lock:
            stamp = self.log_starts.stamp()
            if stamp != self._lso_stamp:
                self._lso_cache = self.log_starts.read()
                self._lso_stamp = stamp
            return self._lso_cache.get((topic, partition), 0)

    def log_start_stamp(self):
        return self.log_starts.stamp()

    def recovery_point(self, topic: str, partition: int) -> int:
        return self.recovery_points.read().get((topic, partition), 0)

    def cleaner_offset(self, topic: str, partition: int) -> int:
        """Where the partition's dirty section starts (-1 when it was never cleaned)."""
        return self.cleaner_offsets.read().get((topic, partition), -1)

    def set_cleaner_offset(self, topic: str, partition: int, offset: int) -> None:
        self._update(self.cleaner_offsets, {(topic, partition): offset}, keep_max=False)

    def _update(self, file: OffsetCheckpointFile, changes: dict, keep_max: bool) -> None:
        with self._lock:
            self._file_lock.acquire(what="checkpoint")
            try:
                entries = file.read()
                for key, value in changes.items():
                    if value is None:
                        entries.pop(key, None)
                    elif keep_max:
                        entries[key] = max(entries.get(key, value), value)
                    else:
                        entries[key] = value
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
