"""Crash-safe file primitives: atomic replace (temp, fsync, rename, fsync dir), Kafka's offset checkpoint format,
the clean-shutdown marker, and advisory file locks between processes.

Checkpoint text format (Kafka's OffsetCheckpointFile, version 0)::

    0                 <- version
    2                 <- entry count
    my-topic 0 1234   <- topic partition offset
    my-topic 1 77
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from ..errors import KafkaStorageError, LockTimeoutError, storage_error
from . import failpoints

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise storage_error(e, "fsync directory", path) from None


def unlink_if_exists(path) -> None:
    """Delete ``path``; a missing file is fine, any other error names the path."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise storage_error(e, "delete", path) from None


def fsync_path(path, data_only: bool = False) -> None:
    """fsync a file by name (``data_only``: fdatasync, data and size only)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            if data_only:
                os.fdatasync(fd)
            else:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise storage_error(e, "fsync", path) from None


def make_durable_dir(path: Path, mode: int = 0o777) -> None:
    """Create the data dir (and missing parents) so that it survives a power loss: each new directory's entry is
    made durable by an fsync of its parent (without it a power loss takes the whole store away)."""
    missing = []
    p = path.absolute()
    while not p.exists():
        missing.append(p)
        p = p.parent
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
    except OSError as e:
        raise storage_error(e, "create data dir", path) from None
    for d in reversed(missing):
        fsync_dir(d.parent)


def atomic_write(path: Path, data: bytes, failpoint: str = "atomic-write") -> None:
    """Write ``path`` so that a crash leaves either the old or the new content: temp, fsync, rename, fsync dir."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            failpoints.hit(failpoint + ":before-fsync")
            os.fsync(fd)
        finally:
            os.close(fd)
        failpoints.hit(failpoint + ":before-rename")
        os.replace(tmp, path)
    except OSError as e:
        raise storage_error(e, "write", path) from None
    fsync_dir(path.parent)


def format_checkpoint(entries: dict[tuple[str, int], int]) -> bytes:
    lines = ["0", str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode()


def parse_checkpoint(text: str, path: Path) -> dict[tuple[str, int], int]:
    """Parse Kafka's checkpoint text; raises KafkaStorageError naming the file on any malformed line."""
    lines = text.splitlines()
    if not lines:
        return {}
    try:
        version = int(lines[0].strip())
        if version != 0:
            raise ValueError(f"unsupported checkpoint version {version}")
        count = int(lines[1].strip())
        out = {}
        for line in lines[2:]:
            if not line.strip():
                continue
            topic, part, off = line.split()
            out[(topic, int(part))] = int(off)
        if len(out) != count:
            raise ValueError(f"expected {count} entries, found {len(out)}")
        return out
    except (ValueError, IndexError) as e:
        raise KafkaStorageError(errno.EINVAL, f"malformed checkpoint {path}: {e}") from None


class OffsetCheckpointFile:
    """One of a data dir's checkpoint files. Writes are atomic and fsynced; a read that fails is reported
    as an empty map only by callers that choose to (Kafka warns and starts from zero)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def read(self) -> dict[tuple[str, int], int]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise storage_error(e, "read", self.path) from None
        return parse_checkpoint(text, self.path)

    def write(self, entries: dict[tuple[str, int], int]) -> None:
        atomic_write(self.path, format_checkpoint(entries), failpoint="checkpoint")

    def stamp(self):
        """Cheap change detector for other processes' rewrites (inode, mtime, size)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)


class FileLock:
    """An advisory flock on a file, usable across processes. Not a lock between threads: two threads using one
    FileLock share its descriptor (flock sees one owner), so its users serialise their threads themselves.

    ``acquire(shared=False, timeout=None)``: timeout None blocks, 0 tries once. Locks die with the process, so a
    writer killed while holding one leaves nothing locked.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd = -1
        self._mode = 0

    def _open(self):
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise storage_error(e, "open lock", self.path) from None

    def acquire(self, shared: bool = False, timeout: float | None = None, what: str = "lock") -> None:
        self._open()
        op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        if timeout is None:
            fcntl.flock(self._fd, op)
            self._mode = op
            return
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            try:
                fcntl.flock(self._fd, op | fcntl.LOCK_NB)
                self._mode = op
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(f"{what}: {self.path} is held by another process") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.01)

    def try_acquire(self, shared: bool = False) -> bool:
        try:
            self.acquire(shared, timeout=0)
            return True
        except LockTimeoutError:
            return False

    def release(self) -> None:
        if self._fd >= 0 and self._mode:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._mode = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # also drops the flock
            self._fd = -1
            self._mode = 0


BROKER_LOCK_FILE = ".kafkalog-broker.lock"


class BrokerLock:
    """The data dir's broker lock (Kafka's log-dir lock, for the one thing a single node must refuse: a second
    broker on the same data dir). The holding broker keeps an exclusive flock on ``.kafkalog-broker.lock`` with its
    pid and listener written in it; shared embedded writers and readers ignore it, an exclusive store refuses."""

    def __init__(self, data_dir: Path):
        self.lock = FileLock(Path(data_dir) / BROKER_LOCK_FILE)

    def acquire(self, what: str) -> None:
        if not self.lock.try_acquire():
            holder = broker_holding(self.lock.path.parent)
            self.lock.close()
            raise LockTimeoutError(f"{what}: data dir {self.lock.path.parent} is held by "
                                   f"{holder or 'another kafkalog broker'}")

    def describe(self, text: str) -> None:
        """Write who holds it (read by the refusal another opener prints)."""
        os.ftruncate(self.lock._fd, 0)
        os.pwrite(self.lock._fd, text.encode(), 0)

    def close(self) -> None:
        self.lock.close()


def broker_holding(data_dir: Path) -> str | None:
    """``kafkalog broker pid N listening on HOST:PORT`` when a broker holds the data dir, else None (no file is
    created or locked for long: a shared lock tried once)."""
    path = Path(data_dir) / BROKER_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            text = os.pread(fd, 512, 0).decode(errors="replace").strip()
            return text or "another kafkalog broker"
    finally:
        os.close(fd)
