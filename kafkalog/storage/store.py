"""LogStore: a data directory of topics, laid out like a Kafka log dir.

::

    <data dir>/
      <topic>-<partition>/                 one Log per partition (segments, indexes)
      recovery-point-offset-checkpoint     Kafka's checkpoint format (see files.py)
      log-start-offset-checkpoint
      cleaner-offset-checkpoint            (the three read leniently: see checkpoints.py)
      <checkpoint>.malformed-<crc32>       a malformed checkpoint as it was found (kept, never removed by kafkalog)
      .kafka_cleanshutdown                 present only while no writer has the store open after a clean close
      .lock                                Kafka's log-dir lock: exclusive writer = LOCK_EX, shared writers = LOCK_SH
      .kafkalog-topics.json                topics, partition counts and per-topic config overrides
      meta.properties

Opening modes: ``LogStore(path)`` is a *shared* writer (any number of processes append; each append call takes the
partition's lock); ``exclusive=True`` holds the locks for the store's lifetime (fastest; a second writer process
gets LockTimeoutError); ``read_only=True`` never writes and sees the writers' complete batches.

The first writer to open a store after an unclean shutdown recovers every partition before the open returns
(from each recovery point on); after a clean shutdown nothing is scanned. The last writer to close writes the
checkpoints and the clean-shutdown marker. Thread-safe: one LogStore can be shared by the threads of a process.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

from ..config import TOPIC, Config
from ..errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    LockTimeoutError,
    LogClosedError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    storage_error,
)
from . import failpoints
from .checkpoints import Checkpoints
from .files import (
    CLEAN_SHUTDOWN_FILE,
    SESSION_FILE,
    FileLock,
    atomic_write,
    broker_holding,
    fsync_dir,
    make_durable_dir,
    read_replaced,
)
from .log import EXCLUSIVE, READ, SHARED, Log, retire_changes
from .offsets import OffsetStore
from .transactions import TXN_SWEEP_FILE, TXN_TOPIC, ProducerIds, TransactionCoordinator

_log = logging.getLogger("kafkalog")
# fullmatch, never match with "$": "$" also matches before a final newline, and a topic named "t\n" (accepted that way
# by CreateTopics, Metadata auto-create and create_topic) split its checkpoint lines in two (issue 21)
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_LENGTH = 249
_TOPICS_FILE = ".kafkalog-topics.json"
_JSON = json.JSONEncoder(sort_keys=True)
_PARTITION_DIR_RE = re.compile(r"(.+)-(\d+)")
NULL_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID in its base64 form
_PARTITION_METADATA = "partition.metadata"
# directories of a Kafka log dir that hold no topic: KRaft's metadata log
_NOT_TOPICS = frozenset({"__cluster_metadata"})


def new_topic_id() -> str:
    """A random topic id in Kafka's form (URL-safe base64 of 16 bytes, no padding); never the null or the
    metadata-topic id, and never starting with '-' (Kafka's Uuid.randomUuid rules)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if text != NULL_TOPIC_ID and text != "AAAAAAAAAAAAAAAAAAAAAQ" and not text.startswith("-"):
            return text


def write_partition_metadata(d: Path, topic_id: str) -> None:
    """Kafka's ``partition.metadata`` (``version: 0`` / ``topic_id: <id>``), whole or not at all (temp, rename).

    Not fsynced: the registry (written atomically and fsynced) is where kafkalog reads a topic's id; this copy is
    for Kafka's tools and is rewritten when it is missing or differs (one fsync per partition would make creating a
    topic of thousands of partitions take seconds)."""
    if read_partition_metadata(d) == topic_id:
        return
    tmp = d / (_PARTITION_METADATA + ".tmp")
    tmp.write_bytes(f"version: 0\ntopic_id: {topic_id}\n".encode())
    os.replace(tmp, d / _PARTITION_METADATA)


def read_partition_metadata(d: Path) -> str | None:
    try:
        text = (d / _PARTITION_METADATA).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    tid = fields.get("topic_id", "").strip()
    return tid or None


def validate_topic_name(name) -> None:
    """Kafka's rules: 1-249 characters of [a-zA-Z0-9._-], not '.' or '..' (nothing that escapes the dir)."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"topic name {name!r}: must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name of {len(name)} characters: the maximum is {MAX_TOPIC_LENGTH}")
    if not _TOPIC_RE.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' are legal")


def _has_segments(d: Path) -> bool:
    try:
        with os.scandir(d) as it:
            return any(e.name.endswith((".log", ".swap", ".cleaned")) for e in it)
    except FileNotFoundError:
        return False


class LogStore:
    """A data dir of topics. See the module docstring for modes, recovery and thread/process safety."""

    def __init__(self, path, config=None, *, read_only: bool = False, exclusive: bool = False,
                 maintenance: bool = True):
        if read_only and exclusive:
            raise ValueError("a store is opened read_only or exclusive, not both")
        self.path = Path(path)
        self.mode = READ if read_only else (EXCLUSIVE if exclusive else SHARED)
        self.config = config if isinstance(config, Config) else Config(config)
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._offsets: OffsetStore | None = None
        self._transactions = None
        self._producer_ids = None
        self._topics: dict[str, dict] = {}
        self._topics_stamp = None
        self._registry_raw: bytes | None = None  # the registry's bytes self._topics came from (read or written)
        self._registry_lines: dict[str, tuple[dict, str]] = {}  # name -> (its entry, the entry's line as written)
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._names_by_id_of: dict | None = None  # the registry dict _names_by_id was made from
        self._closed = False
        self._stop = threading.Event()
        self._thread = None
        self._dir_lock = None
        self._session = 0  # the open session's id (_open_session; a read-only store reads the writers')
        self.had_clean_shutdown = True
        if self.mode == READ:
            if not self.path.is_dir():
                raise KafkaStorageError(2, f"no kafkalog data dir at {self.path}")
            self._checkpoints = Checkpoints(self.path, read_only=True)
            # without the marker a writer is running or crashed: readers CRC-check what follows recovery points
            self.had_clean_shutdown = (self.path / CLEAN_SHUTDOWN_FILE).exists()
            self._session = self._open_session(False)  # the writers' session: their published log ends
            self._reload_topics()
            return
        make_durable_dir(self.path)
        self._checkpoints = Checkpoints(self.path)
        self._open_writer()
        if maintenance:
            self._thread = threading.Thread(target=self._maintenance_loop, name="kafkalog-maintenance", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------------------------------------ open/close

    def _open_writer(self) -> None:
        init = FileLock(self.path / ".kafkalog-init.lock")
        init.acquire(what="open store")
        try:
            self._dir_lock = FileLock(self.path / ".lock")
            timeout = self.config["lock.timeout.ms"] / 1000.0
            first = self._dir_lock.try_acquire(shared=False)
            if not first:
                holder = broker_holding(self.path) if self.mode == EXCLUSIVE else None
                if holder is not None:
                    # a broker serves this data dir for its lifetime: refuse at once, naming it
                    self._dir_lock.close()
                    raise LockTimeoutError(f"open exclusively: data dir {self.path} is held by {holder}")
                if self.mode == EXCLUSIVE:
                    self._dir_lock.acquire(shared=False, timeout=timeout,
                                           what="open exclusively (another process has this store open)")
                    first = True
                else:
                    try:
                        self._dir_lock.acquire(shared=True, timeout=timeout,
                                               what="open (another process has this store open exclusively)")
                    except LockTimeoutError:
                        self._dir_lock.close()
                        raise
            marker = self.path / CLEAN_SHUTDOWN_FILE
            if first:
                self.had_clean_shutdown = marker.exists() or not any(self.path.iterdir())
                if marker.exists():
                    # deleted first: a crash while we run (or while loading) must read as unclean (KAFKA-10471)
                    marker.unlink()
                    fsync_dir(self.path)
                elif self.had_clean_shutdown is False and (self.path / f"{TXN_TOPIC}-0").is_dir():
                    # a power loss may have lost AddPartitionsToTxn records (not fsynced before their answer):
                    # the transaction coordinator's next load looks for the transactions they leave hanging
                    atomic_write(self.path / TXN_SWEEP_FILE, b"")
                self._write_meta()
            self._session = self._open_session(first)
            self._reload_topics()
            if first and not self.had_clean_shutdown:
                points = {}
                for topic, partition in self._partition_dirs():
                    if not _has_segments(self.partition_dir(topic, partition)):
                        continue  # never used: nothing to recover, and no files (or descriptors) to make for it
                    # recovered, then closed: the data dir reopens whatever its partition count (one partition's
                    # descriptors at a time); a partition opens again on its first use, from this recovery point
                    log = self._open_log(topic, partition, recover=True)
                    points[(topic, partition)] = log.recovery_point
                    log.close(finalize=False)
                self._checkpoints.set_recovery_points(points, replace=True)
            if first and self.mode == SHARED:
                self._dir_lock.acquire(shared=True)  # downgrade; the init lock keeps other openers out meanwhile
        finally:
            init.release()
            init.close()

    def _open_session(self, first: bool) -> int:
        """The id of the store's open session (init lock held): the first opener draws a new one, later openers read
        it. Writers publish log ends under it in the partitions' change counters (see ChangeCounter), so an end from
        before the last crash is never compared. Never fsynced: a lost or unreadable file only turns the check off
        (0) until the next first opener."""
        path = self.path / SESSION_FILE
        if first:
            session = int.from_bytes(os.urandom(8), "little") | 1
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, session.to_bytes(8, "little"))
                finally:
                    os.close(fd)
            except OSError as e:
                raise storage_error(e, "write", path) from None
            return session
        try:
            data = read_replaced(path)
        except OSError:
            return 0
        return int.from_bytes(data, "little") if len(data) == 8 else 0

    def _write_meta(self) -> None:
        meta = self.path / "meta.properties"
        if not meta.exists():
            atomic_write(meta, b"version=0\nbroker.id=0\n")

    def close(self) -> None:
        """Flush every log, write checkpoints; the last writer to close also writes the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._transactions is not None:
            self._transactions.close()
        if self._offsets is not None:
            self._offsets.close()
        if self.mode == READ:
            for log in self._logs.values():
                log.close()
            return
        init = FileLock(self.path / ".kafkalog-init.lock")
        init.acquire(what="close store")
        try:
            # the last writer (no other process holds the store: the init lock keeps new openers out) seals the
            # active segments; an earlier one must not trim indexes others are still appending to
            last = self.mode == EXCLUSIVE or self._dir_lock.try_acquire(shared=False)
            points = {}
            for log in self._logs.values():
                log.close(finalize=last)
                points[(log.topic, log.partition)] = log.recovery_point
            self._checkpoints.set_recovery_points(points)
            failpoints.hit("close:before-marker")
            if last:
                atomic_write(self.path / CLEAN_SHUTDOWN_FILE, b'{"version":0,"brokerEpoch":0}')
        finally:
            self._checkpoints.close()
            self._dir_lock.close()
            init.release()
            init.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"store {self.path} is closed")

    # ------------------------------------------------------------------------------------------------ topics

    def _topics_path(self) -> Path:
        return self.path / _TOPICS_FILE

    def _reload_topics(self) -> None:
        p = self._topics_path()
        try:
            st = p.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._topics_stamp and self._topics_stamp is not None:
            return
        topics: dict[str, dict] = {}
        raw = None
        if stamp is not None:
            try:
                raw = read_replaced(p)
                if raw == self._registry_raw:  # rewritten with the same topics (or the stamp could not tell)
                    self._topics_stamp = stamp
                    return
                topics = json.loads(raw.decode())
            except (OSError, ValueError) as e:
                raise KafkaStorageError(5, f"unreadable topic registry {p}: {e}") from None
        # a Kafka log dir (or partitions created by another tool) carries topics as directories only
        for topic, partition in self._partition_dirs():
            entry = topics.setdefault(topic, {"partitions": 0, "config": {}})
            entry["partitions"] = max(entry["partitions"], partition + 1)
        self._topics = topics
        self._topics_stamp = stamp
        self._registry_raw = raw

    def _write_registry(self, topics: dict) -> None:
        """The registry replaced whole (atomic_write), one topic per line, by json's compiled encoder (indented
        output takes its pure-Python one); the line of an entry written before is reused (the registry's entries
        are replaced on change, never changed in place). A topic create or delete costs O(topics) bytes, not
        O(topics) encodings."""
        cache = self._registry_lines
        lines = []
        for name in sorted(topics):
            entry = topics[name]
            hit = cache.get(name)
            if hit is None or hit[0] is not entry:
                hit = cache[name] = (entry, f"{_JSON.encode(name)}: {_JSON.encode(entry)}")
            lines.append(hit[1])
        for name in [n for n in cache if n not in topics]:
            del cache[name]
        data = ("{\n" + ",\n".join(lines) + "\n}\n").encode()
        p = self._topics_path()
        atomic_write(p, data)
        # under the init lock, so the file is ``topics`` (the caller sets them as self._topics): the next reload
        # need not read it back (a create's answer asks for the topic's config at once)
        st = p.stat()
        self._topics_stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        self._registry_raw = data

    @contextlib.contextmanager
    def _registry_locked(self, what: str):
        """The topic registry read fresh and changed under the store's init lock (across processes): read again
        whatever its stamp says (a file's mtime can be coarser than two writes), parsed only when its bytes are not
        the ones this process last read or wrote."""
        init = FileLock(self.path / ".kafkalog-init.lock")
        init.acquire(what=what)
        try:
            # a full reload: the registry parsed and the partition directories listed again, whatever this process
            # last read. A listing made without the lock may hold a directory another process's delete_topic had
            # not renamed yet (its registry already written without the topic): kept, that topic would be written
            # back into the registry by this change, deleted (acknowledged) yet back
            self._topics_stamp = None
            self._registry_raw = None
            self._reload_topics()
            yield
        finally:
            init.release()
            init.close()

    def _partition_dirs(self):
        """(topic, partition) of every partition directory. One directory listing: its entries' types come with
        it (no stat per entry), since every registry change makes each process list the data dir again."""
        out = []
        try:
            entries = os.scandir(self.path)
        except FileNotFoundError:
            return out
        with entries:
            for entry in entries:
                m = _PARTITION_DIR_RE.fullmatch(entry.name)
                if m is None or m.group(1) in _NOT_TOPICS or not _TOPIC_RE.fullmatch(m.group(1)):
                    continue
                try:
                    if not entry.is_dir():
                        continue
                except OSError:  # gone meanwhile (a topic deleted by another process)
                    continue
                out.append((m.group(1), int(m.group(2))))
        return sorted(out)

    def topics(self) -> list[str]:
        with self._lock:
            self._check_open()
            self._reload_topics()
            return sorted(self._topics)

    def partition_count(self) -> int:
        """Partitions of every topic together."""
        with self._lock:
            self._check_open()
            self._reload_topics()
            return sum(t.get("partitions", 0) for t in self._topics.values())

    def partition_dir(self, topic: str, partition: int) -> Path:
        """Where a partition's files are: ``<data dir>/<topic>-<partition>`` (Kafka's log dir layout)."""
        return self.path / f"{topic}-{partition}"

    def partitions_for(self, topic: str) -> int:
        with self._lock:
            self._check_open()
            self._reload_topics()
            if topic not in self._topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic!r} in {self.path}")
            return self._topics[topic]["partitions"]

    def topic_config(self, topic: str) -> Config:
        with self._lock:
            self._reload_topics()
            if topic not in self._topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic!r} in {self.path}")
            return self.config.with_overrides(self._topics[topic].get("config", {}))

    def create_topic(self, name: str, partitions: int | None = None, config=None) -> None:
        """Create a topic with ``partitions`` partitions (default num.partitions) and per-topic config overrides
        (Kafka topic keys, validated; persisted with the topic)."""
        validate_topic_name(name)
        if partitions is None:
            partitions = self.config["num.partitions"]
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise InvalidPartitionsError(f"topic {name!r}: partitions must be a positive integer, got {partitions!r}")
        topic_config = Config(config, scope=TOPIC)  # validates: unknown/invalid keys raise InvalidConfigError
        if self.mode == READ:
            raise KafkaStorageError(30, f"store {self.path} is opened read-only")
        with self._lock:
            self._check_open()
            with self._registry_locked("create topic"):
                if name in self._topics:
                    raise TopicAlreadyExistsError(f"topic {name!r} already exists in {self.path}")
                norm = name.replace(".", "_")
                for other in self._topics:
                    if other.replace(".", "_") == norm:
                        raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r} "
                                                "('.' and '_' collide in metric names)")
                # checkpoint entries of a same-named topic whose delete was cut off after its directories went:
                # the new topic starts at offset 0
                self._checkpoints.forget(name, range(partitions))
                topics = dict(self._topics)
                topic_id = new_topic_id()
                topics[name] = {"partitions": partitions, "config": topic_config.overrides, "topic_id": topic_id}
                self._write_registry(topics)
                self._topics = topics
                # directories only: a partition's files (and file descriptors) exist from its first use on, so a
                # topic of many partitions costs no descriptor until it is used
                self._make_partition_dirs(name, range(partitions), topic_id)
                fsync_dir(self.path)

    def _make_partition_dirs(self, name: str, partitions, topic_id: str) -> None:
        """Partition directories, each with Kafka's ``partition.metadata`` naming the topic id (KIP-516)."""
        for p in partitions:
            d = self.partition_dir(name, p)
            try:
                d.mkdir(exist_ok=True)
                write_partition_metadata(d, topic_id)
            except OSError as e:
                raise storage_error(e, "create partition dir", d) from None

    def create_partitions(self, name: str, count: int) -> None:
        """Grow a topic to ``count`` partitions (Kafka's CreatePartitions: never fewer; existing partitions and
        their records are untouched, new ones start empty at offset 0)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidPartitionsError(f"topic {name!r}: partition count must be a positive integer, got {count!r}")
        if self.mode == READ:
            raise KafkaStorageError(30, f"store {self.path} is opened read-only")
        with self._lock:
            self._check_open()
            with self._registry_locked("create partitions"):
                if name not in self._topics:
                    raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.path}")
                entry = self._topics[name]
                have = entry["partitions"]
                if count < have:
                    raise InvalidPartitionsError(f"topic {name!r} has {have} partitions; the count can only grow "
                                                 f"(asked for {count})")
                if count == have:
                    raise InvalidPartitionsError(f"topic {name!r} already has {have} partitions")
                topic_id = entry.get("topic_id") or self._read_topic_id(name) or new_topic_id()
                # a leftover checkpoint entry of an earlier topic of this name must not give a new partition a start
                self._checkpoints.forget(name, range(have, count))
                topics = dict(self._topics)
                topics[name] = dict(entry, partitions=count, topic_id=topic_id)
                # the directories first: a crash in between leaves unregistered directories, which the registry's
                # reload counts as partitions (a Kafka log dir's topics are directories only), never a registered
                # partition without its directory
                self._make_partition_dirs(name, range(have, count), topic_id)
                fsync_dir(self.path)
                self._write_registry(topics)
                self._topics = topics

    def _read_topic_id(self, name: str) -> str | None:
        for p in range(self._topics.get(name, {}).get("partitions", 0) or 1):
            tid = read_partition_metadata(self.partition_dir(name, p))
            if tid is not None:
                return tid
        return None

    def cached_topic_id(self, name: str) -> str | None:
        """The topic's id as the registry last read holds it, without touching a file (None when it has none: ask
        ``topic_id``)."""
        with self._lock:
            entry = self._topics.get(name)
            return entry.get("topic_id") if entry is not None else None

    def topics_by_id(self) -> dict[uuid.UUID, str]:
        """{topic id (uuid.UUID): name} of every topic whose id the registry holds, without writing anything (a topic
        of an older kafkalog, or a Kafka log dir's, is missing until ``topic_id`` gives or reads its id). Costs one
        stat of the registry when no topic changed; the dict returned is shared: do not change it."""
        with self._lock:
            self._check_open()
            self._reload_topics()
            topics = self._topics
            if self._names_by_id_of is not topics:
                by_id = {}
                for name, entry in topics.items():
                    tid = entry.get("topic_id")
                    if tid:
                        try:
                            by_id[uuid.UUID(bytes=base64.urlsafe_b64decode(tid + "=="))] = name
                        except ValueError:
                            continue  # not an id Kafka could have written: no fetch can name it
                self._names_by_id, self._names_by_id_of = by_id, topics
            return self._names_by_id

    def topic_id(self, name: str) -> str:
        """The topic's id (KIP-516; Kafka's base64 form of a random UUID), made when the topic was created. A topic of
        an older kafkalog gets one on first ask (kept in the registry and in each partition's ``partition.metadata``);
        a Kafka log dir's topic has its ``partition.metadata``; a read-only store without either reports the null id."""
        with self._lock:
            self._check_open()
            self._reload_topics()
            if name not in self._topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.path}")
            tid = self._topics[name].get("topic_id") or self._read_topic_id(name)
            if tid is not None:
                return tid
            if self.mode == READ:
                return NULL_TOPIC_ID
            with self._registry_locked("assign topic id"):
                entry = self._topics.get(name)
                if entry is None:
                    raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.path}")
                tid = entry.get("topic_id") or self._read_topic_id(name) or new_topic_id()
                self._make_partition_dirs(name, range(entry["partitions"]), tid)
                topics = dict(self._topics)
                topics[name] = dict(entry, topic_id=tid)
                self._write_registry(topics)
                self._topics = topics
                return tid

    def delete_topic(self, name: str) -> None:
        """Remove a topic and all its data (directories renamed to ``-delete`` first, then removed)."""
        if self.mode == READ:
            raise KafkaStorageError(30, f"store {self.path} is opened read-only")
        with self._lock:
            self._check_open()
            # the registry is read, changed and written under the init lock, as create_topic does: without it a
            # concurrent create in another process lost its entry (or its temp file, mid-rename)
            with self._registry_locked("delete topic"):
                if name not in self._topics:
                    raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.path}")
                n = self._topics[name]["partitions"]
                for p in range(n):
                    log = self._logs.pop((name, p), None)
                    if log is not None:
                        log.close()
                topics = dict(self._topics)
                del topics[name]
                self._write_registry(topics)
                self._topics = topics
                failpoints.hit("delete-topic:after-registry")
                self._remove_partition_dirs(name, range(n))
                # the renames are durable before the log start offsets are forgotten: a power loss in between must
                # not bring a partition dir back without its log start (records deleted before it would come back)
                fsync_dir(self.path)
                self._checkpoints.forget(name, range(n))

    def _remove_partition_dirs(self, name: str, partitions) -> None:
        for p in partitions:
            d = self.partition_dir(name, p)
            if d.exists():
                retire_changes(d)
                gone = self.path / f"{name}-{p}.{uuid.uuid4().hex}-delete"
                try:
                    os.replace(d, gone)
                    shutil.rmtree(gone)
                except OSError as e:
                    raise storage_error(e, "delete topic", d) from None

    def alter_topic_config(self, name: str, overrides) -> Config:
        """Replace a topic's per-topic config overrides (validated like create_topic's; keys not given fall back
        to the store's config). Persisted with the topic registry and applied to this process's open logs of the
        topic; other processes' open logs keep their config until reopened. Returns the effective config."""
        topic_config = Config(overrides, scope=TOPIC)  # validates: unknown/invalid keys raise InvalidConfigError
        if self.mode == READ:
            raise KafkaStorageError(30, f"store {self.path} is opened read-only")
        with self._lock:
            self._check_open()
            with self._registry_locked("alter topic config"):
                if name not in self._topics:
                    raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.path}")
                topics = dict(self._topics)
                topics[name] = dict(topics[name], config=topic_config.overrides)
                self._write_registry(topics)
                self._topics = topics
            effective = self.config.with_overrides(topic_config.overrides)
            for (topic, _), log in list(self._logs.items()):
                if topic == name:
                    log.reconfigure(effective)
            return effective

    # ------------------------------------------------------------------------------------------------ logs

    def _open_log(self, topic: str, partition: int, recover: bool, create: bool = False) -> Log:
        d = self.partition_dir(topic, partition)
        if create:
            try:
                d.mkdir(exist_ok=True)
            except OSError as e:
                raise storage_error(e, "create partition dir", d) from None
        config = self.config.with_overrides(self._topics.get(topic, {}).get("config", {}))
        # only a process that owns the store (exclusive, or the first writer under the init lock) may repair files
        return Log(d, topic, partition, config, mode=self.mode, checkpoints=self._checkpoints,
                   had_clean_shutdown=self.had_clean_shutdown, recover=recover, session=self._session)

    def log(self, topic: str, partition: int = 0) -> Log:
        """The Log of one partition (opened on first use and cached)."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            return log
        with self._lock:
            self._check_open()
            log = self._logs.get(key)
            if log is not None:
                return log
            self._reload_topics()
            n = self._topics.get(topic, {}).get("partitions", 0)
            if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < n:
                raise UnknownTopicOrPartitionError(
                    f"unknown topic or partition {topic}-{partition} in {self.path}"
                    + (f" (topic has {n} partitions)" if n else ""))
            log = self._open_log(topic, partition, recover=self.mode == EXCLUSIVE, create=self.mode != READ)
            self._logs[key] = log
            return log

    @property
    def offsets(self) -> OffsetStore:
        """Committed offsets of consumer groups (``__consumer_offsets``), shared by the client and the broker."""
        with self._lock:
            self._check_open()
            if self._offsets is None:
                self._offsets = OffsetStore(self)
            return self._offsets

    @property
    def producer_ids(self):
        """Producer ids for idempotent and transactional producers, never given twice (transactions.ProducerIds)."""
        with self._lock:
            self._check_open()
            if self._producer_ids is None:
                self._producer_ids = ProducerIds(self.path)
            return self._producer_ids

    @property
    def transactions(self):
        """The transaction coordinator of this data dir (``__transaction_state``), shared by the broker and embedded
        transactional producers (transactions.TransactionCoordinator)."""
        with self._lock:
            self._check_open()
            if self.mode == READ:
                raise KafkaStorageError(30, f"store {self.path} is opened read-only: no transactions")
            if self._transactions is None:
                self._transactions = TransactionCoordinator(self)
            return self._transactions

    # ------------------------------------------------------------------------------------------------ maintenance

    def run_maintenance(self, now_ms: int | None = None, *, clean: bool = True) -> dict:
        """One round of what the store runs periodically: retention, the log cleaner (compacted topics, when
        log.cleaner.enable), flush.ms, recovery-point checkpoint, purge of ``.deleted`` files. Tests call it
        directly. Returns counts."""
        with self._lock:
            if self._closed or self.mode == READ:
                return {}
            logs = list(self._logs.values())
        removed = 0
        cleaned = 0
        points = {}
        for log in logs:
            removed += log.run_retention(now_ms)
            if clean:
                cleaned += self._clean(log, now_ms)
            log.maybe_flush()
            cp = log.checkpoint_recovery_point()
            if cp is not None:
                points[cp[0]] = cp[1]
            log.purge_deleted()
        self._checkpoints.set_recovery_points(points)
        return {"segments_deleted": removed, "segments_cleaned": cleaned, "checkpointed": len(points)}

    def expire_transactions(self, now_ms: int | None = None) -> int:
        """Abort the transactions open longer than their transaction.timeout.ms (their producers are fenced), for
        embedded producers as the broker does for its clients; returns how many. The store's maintenance calls it
        every transaction.abort.timed.out.transaction.cleanup.interval.ms when the data dir has transactions."""
        with self._lock:
            if self._closed or self.mode == READ:
                return 0
            if self._transactions is None:
                self._reload_topics()
                if TXN_TOPIC not in self._topics:
                    return 0
        return self.transactions.expire(now_ms)

    def run_cleaner(self, now_ms: int | None = None) -> int:
        """One round of the log cleaner over this process's open compacted partitions (what the maintenance
        thread runs every log.cleaner.backoff.ms). Returns the number of segments cleaned."""
        with self._lock:
            if self._closed or self.mode == READ:
                return 0
            logs = list(self._logs.values())
        return sum(self._clean(log, now_ms) for log in logs)

    def _clean(self, log, now_ms) -> int:
        if not self.config["log.cleaner.enable"] or self.config["log.cleaner.threads"] == 0:
            return 0  # Kafka: no cleaner threads, no cleaning
        try:
            stats = log.run_cleaner(now_ms, should_stop=self._stop.is_set)
        except LogClosedError:
            return 0
        except Exception as e:  # noqa: BLE001  (Kafka marks the partition uncleanable and goes on)
            _log.warning("log cleaner: %s-%d: %s", log.topic, log.partition, e)
            return 0
        if stats is None:
            return 0
        _log.info("log cleaner: %s-%d: %d segments in %d groups, %.1f MB read, %.1f MB written, %d records "
                  "removed, %.1f MB/s", log.topic, log.partition, stats.segments_in, stats.groups,
                  stats.bytes_read / 1e6, stats.bytes_written / 1e6, stats.records_removed, stats.mb_per_s)
        return stats.segments_in

    def _maintenance_loop(self) -> None:
        c = self.config
        period = min(c["log.retention.check.interval.ms"], c["log.flush.scheduler.interval.ms"],
                     c["log.flush.offset.checkpoint.interval.ms"], c["log.cleaner.backoff.ms"]) / 1000.0
        next_retention = time.monotonic() + c["log.retention.check.interval.ms"] / 1000.0
        next_clean = time.monotonic() + c["log.cleaner.backoff.ms"] / 1000.0
        txn_interval = c["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000.0
        next_txn = time.monotonic() + txn_interval
        while not self._stop.wait(min(period, txn_interval)):
            try:
                now = time.monotonic()
                if now >= next_txn:
                    next_txn = now + txn_interval
                    self.expire_transactions()
                with self._lock:
                    logs = list(self._logs.values())
                for log in logs:
                    log.maybe_flush()
                if now >= next_retention:
                    next_retention = now + c["log.retention.check.interval.ms"] / 1000.0
                    next_clean = now + c["log.cleaner.backoff.ms"] / 1000.0
                    self.run_maintenance()
                elif now >= next_clean:
                    next_clean = now + c["log.cleaner.backoff.ms"] / 1000.0
                    self.run_cleaner()
            except LogClosedError:
                return
            except Exception as e:  # a maintenance failure must not kill the app; it is reported once per round
                _log.warning("maintenance round failed: %s", e)

    def __repr__(self):
        return f"LogStore({str(self.path)!r}, mode={self.mode})"

