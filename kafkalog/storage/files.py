"""Crash-safe file primitives: atomic replace (temp, fsync, rename, fsync dir), Kafka's offset checkpoint format,
the clean-shutdown marker, and advisory file locks between processes.

Checkpoint text format (Kafka's OffsetCheckpointFile, version 0)::

    0                 <- version
    2                 <- entry count
    my-topic 0 1234   <- topic partition offset
    my-topic 1 77

``format_checkpoint`` refuses an entry that would not read back as itself; ``read_checkpoint`` takes every
well-formed entry and names each malformed line (what a malformed file then means is checkpoints.py's policy).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import time
from pathlib import Path

from ..errors import KafkaStorageError, LockTimeoutError, storage_error
from . import failpoints

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
SESSION_FILE = ".kafkalog-session"  # the id of the store's open session (LogStore._open_session; never fsynced)
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


def read_replaced(path: Path, tries: int = 50) -> bytes:
    """The bytes of a file that other processes replace whole (atomic_write: temp, rename over it). On a network or
    FUSE file system an open or read racing with the rename can fail with ESTALE (the name's old inode went away
    between the lookup and the read), where a local file system gives the old or the new file: read again, the
    name then holds a whole file (at most ``tries`` times)."""
    for i in range(tries):
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            if e.errno != errno.ESTALE or i == tries - 1:
                raise
    raise AssertionError("unreachable")


def checkpoint_topic_writable(topic) -> bool:
    """Whether ``topic`` can be one field of a checkpoint line: no whitespace (a line is split on whitespace) and
    nothing a line reader splits lines on. The one exception is the legacy form below."""
    if not isinstance(topic, str) or not topic or any(0xD800 <= ord(c) <= 0xDFFF for c in topic):
        return False
    return topic.split() == [topic] or _legacy_topic(topic)


# a name of legal characters ending in one "\n": kafkalog before issue 21 accepted it ("$" matched before the final
# newline), so a data dir of that time can hold "t\n 0 5" as one entry split over two lines; it is read and written
# back in that form (dropping it would lose a log start offset and bring deleted records back)
_LEGACY_TOPIC = re.compile(r"[a-zA-Z0-9._-]+\n")
_INT = re.compile(r"-?[0-9]{1,19}")  # ASCII digits only (int() also takes "1_0", "+1" and other scripts' digits)


def _legacy_topic(topic: str) -> bool:
    return _LEGACY_TOPIC.fullmatch(topic) is not None


def format_checkpoint(entries: dict[tuple[str, int], int]) -> bytes:
    """Kafka's checkpoint text. Raises ValueError for an entry that would not read back as itself (a topic name with
    whitespace, a non-integer partition or offset): the caller keeps the previous file."""
    lines = ["0", str(len(entries))]
    for (t, p), o in sorted(entries.items()):
        if not checkpoint_topic_writable(t) or type(p) is not int or type(o) is not int:
            raise ValueError(f"entry {t!r} {p!r} {o!r} cannot be written as one 'topic partition offset' line")
        lines.append(f"{t} {p} {o}")
    return ("\n".join(lines) + "\n").encode()


def read_checkpoint(data: bytes) -> tuple[dict[tuple[str, int], int], list[str]]:
    """Parse Kafka's checkpoint text leniently: every well-formed entry, and one problem per malformed line
    (``"line 5: 'foo' (...)"``, 1-based). An empty file has no entries and no problems."""
    text = data.decode("utf-8", "surrogateescape")  # an undecodable byte spoils its line only
    lines = text.splitlines()
    if not lines:
        return {}, []
    problems: list[str] = []

    def bad(i: int, why: str) -> None:
        problems.append(f"line {i + 1}: {lines[i][:80]!r} ({why})")

    if lines[0].strip() != "0":
        bad(0, "expected version 0")
    count = None
    if len(lines) < 2:
        problems.append("line 2: missing (expected the entry count)")
    else:
        if _INT.fullmatch(lines[1].strip()):
            count = int(lines[1].strip())
        else:
            bad(1, "expected the entry count")
    out: dict[tuple[str, int], int] = {}
    found = 0
    i = 2
    while i < len(lines):
        line = lines[i]
        fields = line.split()
        nxt = lines[i + 1].split() if i + 1 < len(lines) else []
        if len(fields) == 1 and len(nxt) == 2 and lines[i + 1][:1].isspace() and _legacy_topic(line + "\n"):
            fields = [line + "\n"] + nxt  # the legacy form of a name ending in a newline: one entry on two lines
            i += 1
        i += 1
        if not fields:
            continue
        if len(fields) != 3:
            bad(i - 1, f"{len(fields)} fields, expected 'topic partition offset'")
            continue
        topic, part, off = fields
        if not (_INT.fullmatch(part) and _INT.fullmatch(off)):
            bad(i - 1, "partition and offset must be integers")
            continue
        key, value = (topic, int(part)), int(off)
        if not (-(1 << 63) <= value < 1 << 63 and -(1 << 31) <= key[1] < 1 << 31):
            bad(i - 1, "partition or offset out of range")
            continue
        if any(0xD800 <= ord(c) <= 0xDFFF for c in topic):
            bad(i - 1, "not UTF-8")
            continue
        if key in out:
            bad(i - 1, f"a second entry for {topic}-{key[1]}")  # Kafka's reader keeps the later one; so do we
        out[key] = value
        found += 1
    if count is not None and count != found:
        problems.append(f"line 2: says {count} entries, {found} found")
    return out, problems


def parse_checkpoint(data: bytes, path: Path) -> dict[tuple[str, int], int]:
    """Parse Kafka's checkpoint text strictly; raises KafkaStorageError naming the file and the first malformed
    line."""
    entries, problems = read_checkpoint(data)
    if problems:
        raise KafkaStorageError(errno.EINVAL, f"malformed checkpoint {path}: {problems[0]}")
    return entries


class OffsetCheckpointFile:
    """One of a data dir's checkpoint files. Writes are atomic and fsynced, and never of text that would not read
    back as the entries given; what to do with a malformed file is the caller's choice (``read_checked``)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def read_bytes(self) -> bytes:
        try:
            return read_replaced(self.path)
        except FileNotFoundError:
            return b""
        except OSError as e:
            raise storage_error(e, "read", self.path) from None

    def read_checked(self) -> tuple[dict[tuple[str, int], int], list[str], bytes]:
        """(the well-formed entries, the problems, the file's bytes); a missing file is empty."""
        data = self.read_bytes()
        entries, problems = read_checkpoint(data)
        return entries, problems, data

    def read(self) -> dict[tuple[str, int], int]:
        """The entries; raises KafkaStorageError naming the file and line when it is malformed."""
        return parse_checkpoint(self.read_bytes(), self.path)

    def write(self, entries: dict[tuple[str, int], int]) -> None:
        try:
            data = format_checkpoint(entries)
        except ValueError as e:
            raise KafkaStorageError(errno.EINVAL, f"checkpoint {self.path} not written: {e}") from None
        atomic_write(self.path, data, failpoint="checkpoint")

    def stamp(self):
        """Cheap change detector for other processes' rewrites (inode, mtime, size)."""
        for _ in range(50):
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                return None
            except OSError as e:
                if e.errno != errno.ESTALE:
                    raise
                continue  # replaced under the lookup (see read_replaced): look again
            return (st.st_ino, st.st_mtime_ns, st.st_size)
        return None  # never settled: the caller reads the file again, which is always safe


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
