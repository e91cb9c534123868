"""OffsetStore: the committed offsets of consumer groups, kept where Kafka keeps them — the internal topic
``__consumer_offsets`` of the same data dir — plus a snapshot per partition so that opening never replays history.
The embedded consumer and the broker facade use this one model ("one store, two doors").

Records, Kafka's own schemas (group-coordinator/src/main/resources/common/message/OffsetCommitKey.json,
OffsetCommitValue.json, GroupMetadataKey.json); big-endian; String => Int16 length + UTF-8::

    OffsetCommitKey   => Version Int16 (1; version 0 reads the same) | Group String | Topic String | Partition Int32
    OffsetCommitValue => Version Int16 (3) | Offset Int64 | LeaderEpoch Int32 (-1 = none) | Metadata String |
                         CommitTimestamp Int64
        read too: v0, v2 => Offset | Metadata | CommitTimestamp;  v1 => v0 + ExpireTimestamp Int64;
                  v4 (KIP-915, flexible) => v3 with a compact string (UVarint length + 1) and tagged fields
    null value        => tombstone: that (group, topic, partition) has no committed offset any more
    GroupMetadataKey  => Version Int16 (2) | Group String    (membership: the value is the group model's business)

Every key version from 2 up (GroupMetadataKey; KIP-848 consumer-group records in a data dir written by Kafka) starts
with the group id. Those records are the group coordinator's state (their formats: groupformat.py): kept verbatim,
latest per key, carried through snapshots, removed by tombstones and by ``delete_group``. ``put_group_metadata``
writes a GroupMetadataKey (type 2) record, ``put_group_records`` any batch of them.

Each commit is one record batch (v2, uncompressed, CreateTime = commit time): all partitions of a commit land
together or not at all. A group lives on partition ``abs(java_hash(group)) % partitions`` (Kafka's
``Utils.abs(groupId.hashCode())``, MIN_VALUE -> 0). kafkalog creates the topic with ONE partition: partitions exist in
Kafka to spread coordinators over brokers, and a data dir has one node; one partition is one log to tail and one
snapshot to load, and a commit is one small append, so it is never the bottleneck. An existing topic with more
partitions (Kafka's default 50) is used as it is, with Kafka's mapping.

Snapshot ``<data dir>/__consumer_offsets-<p>/kafkalog-offsets-snapshot`` (not ``*.snapshot``: Kafka's loader parses
those names as producer-state snapshots)::

    OffsetsSnapshot => Magic "KLOFFSET" (8 bytes) | Version Int16 (0) | Crc Uint32 (CRC-32C of the rest) |
                       NextOffset Int64 (X) | Count Int32 | [KeyLength Int32 | Key | ValueLength Int32 | Value]

Key and Value are the record key/value bytes above (live entries only): the state of the partition's records below
X. Opening loads it and replays only records >= X. Every ``snapshot_interval_records`` records (or
``snapshot_interval_bytes`` of keys and values) a writer flushes the log, writes a new snapshot with
``files.atomic_write`` and, when truncation is on, ``delete_records_before(X)`` (KIP-107) so old commits leave the
disk. Invariants that make kill -9 at any step safe: a snapshot covers only fsynced records (X <= durable log end); a
snapshot's X only grows (written under ``kafkalog-offsets.lock`` after catching up); records are deleted only below
the X of a snapshot already on disk. A snapshot is used only if its CRC holds and X <= the log end; otherwise the
log is replayed from its start (and a warning names what a damaged snapshot may have lost).
"""

from __future__ import annotations

import functools
import logging
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from .._engine.batch import build_batch, crc32c, iter_batches
from ..config import INT_MAX, LONG_MAX
from ..errors import (
    KafkaStorageError,
    LogClosedError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    storage_error,
)
from ..structs import OffsetAndMetadata, TopicPartition
from . import failpoints
from .files import FileLock, atomic_write
from .log import READ, Log
from .txnformat import _read_uvarint, marker_of_batch

__all__ = [
    "GROUP_METADATA_KEY_VERSION", "OFFSETS_TOPIC", "OFFSET_COMMIT_KEY_VERSION", "OFFSET_COMMIT_VALUE_VERSION",
    "SNAPSHOT_FILE", "OffsetMetadataTooLargeError", "OffsetStore", "OffsetsKey", "decode_key",
    "decode_offset_commit_value", "encode_group_metadata_key", "encode_offset_commit_key",
    "encode_offset_commit_value", "java_string_hash", "partition_for",
]

_log = logging.getLogger("kafkalog")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
SNAPSHOT_FILE = "kafkalog-offsets-snapshot"
SNAPSHOT_LOCK = "kafkalog-offsets.lock"
SNAPSHOT_MAGIC = b"KLOFFSET"
SNAPSHOT_VERSION = 0
DEFAULT_PARTITIONS = 1
DEFAULT_SNAPSHOT_RECORDS = 1000
DEFAULT_SNAPSHOT_BYTES = 1 << 20
DEFAULT_MAX_METADATA = 4096  # Kafka's offset.metadata.max.bytes (compared, as Kafka does, in UTF-16 units)

# The internal topic, as created by kafkalog. "compact" records the intent (latest value per key, tombstones, and
# keyless records refused) as Kafka declares it, but the log cleaner leaves this topic alone (Log.run_cleaner): its
# snapshots bound it, and an expired tombstone removed above a snapshot would bring back the offset it deleted;
# "delete" is what lets the store truncate below a snapshot. Retention is off: only snapshots remove
# commits. Segments are Kafka's offsets.topic.segment.bytes; 1 MiB indexes still cover a full segment (at
# index.interval.bytes) and are cheap to preallocate at each roll; a commit of many partitions must fit one batch.
TOPIC_CONFIG = {
    "cleanup.policy": "compact,delete",
    "retention.ms": -1,
    "retention.bytes": -1,
    "segment.bytes": 104857600,
    "segment.index.bytes": 1 << 20,
    "max.message.bytes": 16 << 20,
    "file.delete.delay.ms": 0,
    "compression.type": "producer",
}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SNAP_HEAD = struct.Struct(">8shI")  # magic, version, crc
_SNAP_BODY = struct.Struct(">qi")  # next offset, count
_VALUE_V3_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch
_READ_CHUNK = 1 << 20
_MAX_RELOADS = 100


# ---------------------------------------------------------------------------------------------------- record codec

class OffsetsKey(NamedTuple):
    """A decoded ``__consumer_offsets`` key: version 0/1 = an offset commit (topic, partition set); version 2 and up
    = a group record (topic None, partition -1)."""

    version: int
    group: str
    topic: str | None = None
    partition: int = -1


def _string(s: str, what: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 32767:
        raise ValueError(f"{what} of {len(b)} bytes does not fit Kafka's String (at most 32767 bytes)")
    return _I16.pack(len(b)) + b


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (_I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group, "group id") + _string(topic, "topic")
            + _I32.pack(partition))


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group, "group id")


def encode_offset_commit_value(offset: int, metadata: str = "", leader_epoch: int | None = None,
                               commit_timestamp: int = -1) -> bytes:
    return (_VALUE_V3_HEAD.pack(OFFSET_COMMIT_VALUE_VERSION, offset, -1 if leader_epoch is None else leader_epoch)
            + _string(metadata, "metadata") + _I64.pack(commit_timestamp))


def _read_string(data, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        return "", pos  # null: Kafka's schemas say non-null, old writers stored null metadata anyway
    if pos + n > len(data):
        raise ValueError("string runs past the end")
    return bytes(data[pos:pos + n]).decode("utf-8"), pos + n


def _read_compact_string(data, pos: int) -> tuple[str, int]:
    n, pos = _read_uvarint(data, pos)
    if n == 0:
        return "", pos
    n -= 1
    if pos + n > len(data):
        raise ValueError("string runs past the end")
    return bytes(data[pos:pos + n]).decode("utf-8"), pos + n


def decode_key(data) -> OffsetsKey:
    """Decode a ``__consumer_offsets`` record key; ValueError when it is not one."""
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version < 0:
            raise ValueError(f"negative key version {version}")
        group, pos = _read_string(data, 2)
        if version >= GROUP_METADATA_KEY_VERSION:
            return OffsetsKey(version, group)
        topic, pos = _read_string(data, pos)
        (partition,) = _I32.unpack_from(data, pos)
        return OffsetsKey(version, group, topic, partition)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed {OFFSETS_TOPIC} key: {e}") from None


def decode_offset_commit_value(data) -> tuple[OffsetAndMetadata, int]:
    """Decode an OffsetCommitValue of any version 0-4: (OffsetAndMetadata, commit timestamp ms)."""
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version == 3:
            _, offset, epoch = _VALUE_V3_HEAD.unpack_from(data, 0)
            metadata, pos = _read_string(data, 14)
        elif version == 4:
            _, offset, epoch = _VALUE_V3_HEAD.unpack_from(data, 0)
            metadata, pos = _read_compact_string(data, 14)
        elif version in (0, 1, 2):
            (offset,) = _I64.unpack_from(data, 2)
            epoch = -1
            metadata, pos = _read_string(data, 10)
        else:
            raise ValueError(f"unknown OffsetCommitValue version {version}")
        (ts,) = _I64.unpack_from(data, pos)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed OffsetCommitValue: {e}") from None
    return OffsetAndMetadata(offset, metadata, None if epoch < 0 else epoch), ts


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: 31-based over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# ---------------------------------------------------------------------------------------------------- snapshot codec

def _encode_snapshot(next_offset: int, records: Iterable[tuple[bytes, bytes]]) -> bytes:
    parts = []
    count = 0
    for key, value in records:
        parts.append(_I32.pack(len(key)))
        parts.append(key)
        parts.append(_I32.pack(len(value)))
        parts.append(value)
        count += 1
    body = _SNAP_BODY.pack(next_offset, count) + b"".join(parts)
    return _SNAP_HEAD.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, crc32c(body)) + body


def _decode_snapshot(data: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    """(X, [(key, value)]); ValueError for anything but a complete, CRC-valid snapshot of a known version."""
    if len(data) < _SNAP_HEAD.size + _SNAP_BODY.size:
        raise ValueError(f"{len(data)} bytes: shorter than the header")
    magic, version, crc = _SNAP_HEAD.unpack_from(data, 0)
    if magic != SNAPSHOT_MAGIC:
        raise ValueError("bad magic")
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"unknown snapshot version {version}")
    body = memoryview(data)[_SNAP_HEAD.size:]
    if crc32c(body) != crc:
        raise ValueError("CRC mismatch")
    next_offset, count = _SNAP_BODY.unpack_from(body, 0)
    pos = _SNAP_BODY.size
    out = []
    try:
        for _ in range(count):
            (n,) = _I32.unpack_from(body, pos)
            key = bytes(body[pos + 4:pos + 4 + n])
            pos += 4 + n
            (m,) = _I32.unpack_from(body, pos)
            value = bytes(body[pos + 4:pos + 4 + m])
            pos += 4 + m
            out.append((key, value))
    except struct.error as e:
        raise ValueError(f"entry list truncated: {e}") from None
    if pos != len(body) or next_offset < 0:
        raise ValueError("entry list does not match the file length")
    return next_offset, out


def _read_snapshot(path: Path) -> tuple[int, list[tuple[bytes, bytes]]] | None:
    """The snapshot at ``path``, or None when missing or damaged (damage is logged)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise storage_error(e, "read", path) from None
    try:
        return _decode_snapshot(data)
    except ValueError as e:
        _log.warning("ignoring damaged offsets snapshot %s: %s", path, e)
        return None


# ---------------------------------------------------------------------------------------------------- state

class _Partition:
    """State of one ``__consumer_offsets`` partition as of log offset ``next_offset`` (everything below applied)."""

    __slots__ = ("index", "log", "snapshot_path", "file_lock", "next_offset", "snapshot_offset", "bytes_since",
                 "offsets", "others", "replayed", "pending", "pending_first")

    def __init__(self, index: int, log: Log, writable: bool):
        self.index = index
        self.log = log
        self.snapshot_path = log.dir / SNAPSHOT_FILE
        self.file_lock = FileLock(log.dir / SNAPSHOT_LOCK) if writable else None
        self.next_offset = 0
        self.snapshot_offset = -1
        self.bytes_since = 0
        # group -> TopicPartition -> (OffsetAndMetadata, commit timestamp)
        self.offsets: dict[str, dict[TopicPartition, tuple[OffsetAndMetadata, int]]] = {}
        # group -> key bytes -> value bytes: records of key version >= 2 (group metadata), verbatim
        self.others: dict[str, dict[bytes, bytes]] = {}
        self.replayed = 0
        # transactional commits (TxnOffsetCommit) waiting for their producer's marker: producer id -> records, and
        # the offset of the first one (a snapshot never covers them: see OffsetStore._snapshot)
        self.pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.pending_first: dict[int, int] = {}

    def reset(self) -> None:
        self.offsets = {}
        self.others = {}
        self.pending = {}
        self.pending_first = {}
        self.replayed = 0
        self.bytes_since = 0

    def end_transaction(self, producer_id: int, commit: bool) -> None:
        """The COMMIT or ABORT marker of ``producer_id``: its pending commits take effect, or are dropped."""
        records = self.pending.pop(producer_id, ())
        self.pending_first.pop(producer_id, None)
        if commit:
            for key, value in records:
                self.apply(key, value)

    def pending_for(self, group: str) -> set[TopicPartition]:
        """The partitions ``group`` has a transactional commit pending for (KIP-447's unstable offsets)."""
        out = set()
        for records in self.pending.values():
            for key, _value in records:
                try:
                    k = decode_key(key)
                except ValueError:
                    continue
                if k.version < GROUP_METADATA_KEY_VERSION and k.group == group:
                    out.add(TopicPartition(k.topic, k.partition))
        return out

    def apply(self, key, value) -> None:
        """Apply one record (key/value bytes or None) in log order: the one place records become state."""
        if key is None:
            return
        try:
            k = decode_key(key)
            if k.version < GROUP_METADATA_KEY_VERSION:
                _put(self.offsets, k.group, TopicPartition(k.topic, k.partition),
                     None if value is None else decode_offset_commit_value(value))
            else:
                _put(self.others, k.group, bytes(key), None if value is None else bytes(value))
        except ValueError as e:  # Kafka's coordinator would refuse to load; one bad record must not lose the rest
            _log.warning("%s-%d: skipping a record that is not an offsets record: %s", OFFSETS_TOPIC, self.index, e)
            return
        self.bytes_since += len(key) + (len(value) if value is not None else 0)

    def live_records(self):
        for group, committed in self.offsets.items():
            for tp, (om, ts) in committed.items():
                yield (encode_offset_commit_key(group, tp.topic, tp.partition),
                       encode_offset_commit_value(om.offset, om.metadata, om.leader_epoch, ts))
        for records in self.others.values():
            yield from records.items()

    def groups(self) -> set[str]:
        return set(self.offsets) | set(self.others)


# ---------------------------------------------------------------------------------------------------- the store

def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _setting(store, key: str, default):
    """A store config key when config.py declares it, else the default (keys: offsets.topic.num.partitions,
    offset.metadata.max.bytes, offsets.snapshot.interval.records, offsets.snapshot.interval.bytes)."""
    try:
        return store.config[key]
    except KeyError:
        return default


class OffsetStore:
    """Committed offsets of consumer groups in a LogStore (see the module docstring for formats and crash safety).

    ``OffsetStore(store, *, num_partitions=None, snapshot_interval_records=None, snapshot_interval_bytes=None,
    truncate=None, max_metadata_size=None)``, ``store`` the LogStore (store.py, which makes this object: not
    imported here, so that the two modules import in one direction). ``num_partitions`` only applies when this
    store creates the topic (default 1). Each setting left None comes from the store's config when config.py
    declares its key (see ``_setting``), else from the default here. ``truncate``: delete records below each
    snapshot (default: on whenever the store is writable; the other processes' views follow a delete-before that
    removes the segment they have open, see ``Log._refresh``).

    Durability: ``commit(..., sync=True)`` returns after the commit's batch is fsynced (it survives power loss);
    with ``sync=False`` it is in the OS page cache when the call returns (it survives kill -9 of this process, not a
    power loss) and becomes durable with the next sync commit, flush or ``flush.ms``.

    Thread-safe: one lock orders the threads of a process. Process-safe: in a shared store any number of processes
    commit; each call first takes in what the others appended (one stat when nothing changed), so every process sees
    every other's commits on its next call. A read-only store serves ``committed``/``groups`` beside a writer.
    Last writer wins per (group, partition), in log order, as in Kafka.
    """

    def __init__(self, store, *, num_partitions: int | None = None,
                 snapshot_interval_records: int | None = None, snapshot_interval_bytes: int | None = None,
                 truncate: bool | None = None, max_metadata_size: int | None = None):
        self._store = store
        self._writable = store.mode != READ
        chosen = {}
        for name, given, key, default, low in (
                ("num_partitions", num_partitions, "offsets.topic.num.partitions", DEFAULT_PARTITIONS, 1),
                ("snapshot_interval_records", snapshot_interval_records, "offsets.snapshot.interval.records",
                 DEFAULT_SNAPSHOT_RECORDS, 1),
                ("snapshot_interval_bytes", snapshot_interval_bytes, "offsets.snapshot.interval.bytes",
                 DEFAULT_SNAPSHOT_BYTES, 1),
                ("max_metadata_size", max_metadata_size, "offset.metadata.max.bytes", DEFAULT_MAX_METADATA, 0)):
            v = _setting(store, key, default) if given is None else given
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
            chosen[name] = v
        self._num_partitions = chosen["num_partitions"]
        self._snapshot_records = chosen["snapshot_interval_records"]
        self._snapshot_bytes = chosen["snapshot_interval_bytes"]
        self._max_metadata = chosen["max_metadata_size"]
        self._truncate = self._writable if truncate is None else bool(truncate) and self._writable
        self._lock = threading.RLock()
        self._parts: list[_Partition] | None = None
        self._closed = False

    # ------------------------------------------------------------------------------------------------ guards

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"offsets store of {self._store.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if not self._writable:
            raise KafkaStorageError(30, f"store {self._store.path} is opened read-only: no commits")

    # ------------------------------------------------------------------------------------------------ public API

    def commit(self, group: str, offsets: Mapping, *, sync: bool = True, any_offset: bool = False) -> None:
        """Commit ``{TopicPartition: OffsetAndMetadata | int}`` for ``group`` as one batch (all or nothing).
        See the class docstring for what ``sync`` guarantees. An offset must be >= 0 unless ``any_offset`` (the
        broker: Kafka stores whatever int64 an OffsetCommit carries, -1 and -2 included, and OffsetFetch returns
        it; consumers read a negative committed offset as "no position", so auto_offset_reset applies)."""
        _check_group(group)
        now = _now_ms()
        keys, values, entries = [], [], {}
        for tp, value in offsets.items():
            topic, partition = _check_tp(tp)
            om = self._check_offset(value, topic, partition, any_offset)
            keys.append(encode_offset_commit_key(group, topic, partition))
            values.append(encode_offset_commit_value(om.offset, om.metadata, om.leader_epoch, now))
            entries[TopicPartition(topic, partition)] = (om, now)
        if not keys:
            return
        with self._lock:
            self._check_writable()
            self._append(self._partition_of(group, create=True), keys, values, now, sync, (group, entries))

    def commit_transactional(self, group: str, offsets: Mapping, producer_id: int, producer_epoch: int, *,
                             sync: bool = True) -> None:
        """TxnOffsetCommit: ``offsets`` as ``commit`` takes them, written as one transactional batch of
        ``producer_id`` (Kafka's bytes): they take effect when the transaction's COMMIT marker lands on the same
        partition, and never if it aborts. Until then ``pending(group)`` names them."""
        _check_group(group)
        now = _now_ms()
        keys, values = [], []
        for tp, value in offsets.items():
            topic, partition = _check_tp(tp)
            om = self._check_offset(value, topic, partition, True)
            keys.append(encode_offset_commit_key(group, topic, partition))
            values.append(encode_offset_commit_value(om.offset, om.metadata, om.leader_epoch, now))
        if not keys:
            return
        # base sequence 0, as Kafka's group coordinator writes a transactional offset commit (seen on the wire)
        batch = build_batch(values, keys, [now] * len(keys), producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=0, is_transactional=True)
        with self._lock:
            self._check_writable()
            p = self._partition_of(group, create=True)
            p.log.append_records(batch)
            if sync:
                p.log.flush()
            self._catch_up(p)

    def pending(self, group: str) -> set[TopicPartition]:
        """Partitions for which ``group`` has a transactional commit not yet committed or aborted."""
        _check_group(group)
        with self._lock:
            self._check_open()
            p = self._partition_of(group)
            if p is None:
                return set()
            self._catch_up(p)
            return p.pending_for(group)

    def committed(self, group: str, tp) -> OffsetAndMetadata | None:
        """The last offset committed by ``group`` for ``tp`` (any process), or None."""
        _check_group(group)
        tp = TopicPartition(*_check_tp(tp))
        with self._lock:
            self._check_open()
            p = self._partition_of(group)
            if p is None:
                return None
            self._catch_up(p)
            entry = p.offsets.get(group, {}).get(tp)
            return None if entry is None else entry[0]

    def _group_entries(self, group: str) -> dict:
        """{TopicPartition: (OffsetAndMetadata, commit timestamp)} of ``group``, after taking in other writers."""
        _check_group(group)
        with self._lock:
            self._check_open()
            p = self._partition_of(group)
            if p is None:
                return {}
            self._catch_up(p)
            return dict(p.offsets.get(group, {}))

    def committed_all(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every partition ``group`` has a committed offset for."""
        return {tp: om for tp, (om, _) in self._group_entries(group).items()}

    def commit_timestamps(self, group: str) -> dict[TopicPartition, int]:
        """Commit time (ms) per partition of ``group`` (for offsets retention and describe-group tools)."""
        return {tp: ts for tp, (_, ts) in self._group_entries(group).items()}

    def groups(self) -> list[str]:
        """Groups with committed offsets or group metadata, sorted."""
        with self._lock:
            self._check_open()
            parts = self._partitions()
            out: set[str] = set()
            for p in parts or ():
                self._catch_up(p)
                out |= p.groups()
            return sorted(out)

    def delete_group(self, group: str, *, sync: bool = True) -> None:
        """Tombstone every offset and group record of ``group`` (one batch). A commit another process makes
        between this call's catch-up and its append survives, as a commit after the delete would."""
        _check_group(group)
        with self._lock:
            self._check_writable()
            p = self._partition_of(group)
            if p is None:
                return
            self._catch_up(p)
            keys = [encode_offset_commit_key(group, tp.topic, tp.partition) for tp in p.offsets.get(group, {})]
            # group records from the highest record type down: a consumer group's member records before its epoch
            # record (ConsumerGroupMetadata, type 3) and a classic group's GroupMetadata (type 2) last, the order
            # Kafka's loader accepts when it replays the tombstones
            keys += sorted(p.others.get(group, {}), key=lambda k: -_I16.unpack_from(k, 0)[0])
            if keys:
                self._append(p, keys, [None] * len(keys), _now_ms(), sync)

    def delete_offsets(self, group: str, partitions: Iterable, *, sync: bool = True) -> None:
        """Tombstone the committed offsets of ``group`` for ``partitions`` (Kafka's OffsetDelete, KIP-496)."""
        _check_group(group)
        tps = [TopicPartition(*_check_tp(tp)) for tp in partitions]
        with self._lock:
            self._check_writable()
            p = self._partition_of(group)
            if p is None:
                return
            self._catch_up(p)
            have = p.offsets.get(group, {})
            keys = [encode_offset_commit_key(group, tp.topic, tp.partition) for tp in dict.fromkeys(tps)
                    if tp in have]
            if keys:
                self._append(p, keys, [None] * len(keys), _now_ms(), sync)

    def put_group_metadata(self, group: str, value: bytes | None, *, sync: bool = True) -> None:
        """Extension point for group membership: write Kafka's GroupMetadataKey (version 2) with ``value`` (a
        GroupMetadataValue encoded by the group model), or a tombstone when None."""
        _check_group(group)
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"group metadata must be bytes, got {type(value).__name__}")
        with self._lock:
            self._check_writable()
            p = self._partition_of(group, create=True)
            self._append(p, [encode_group_metadata_key(group)], [None if value is None else bytes(value)],
                         _now_ms(), sync)

    def put_group_records(self, group: str, records, *, sync: bool = True) -> None:
        """Write the group coordinator's records of ``group`` as one batch (all or nothing): ``records`` is
        [(key bytes, value bytes or None for a tombstone)], keys of version >= 2 naming ``group`` (groupformat.py).
        Latest value per key wins, as for GroupMetadataKey."""
        _check_group(group)
        keys, values = [], []
        for key, value in records:
            k = decode_key(key)
            if k.version < GROUP_METADATA_KEY_VERSION or k.group != group:
                raise ValueError(f"{bytes(key)!r} is not a group record key of group {group!r}")
            keys.append(bytes(key))
            values.append(None if value is None else bytes(value))
        if not keys:
            return
        with self._lock:
            self._check_writable()
            self._append(self._partition_of(group, create=True), keys, values, _now_ms(), sync)

    def all_group_records(self) -> dict[str, dict[bytes, bytes]]:
        """{group: {key bytes: value bytes}} of every group that has records of key version >= 2 (what a
        coordinator loads at start)."""
        with self._lock:
            self._check_open()
            out: dict[str, dict[bytes, bytes]] = {}
            for p in self._partitions() or ():
                self._catch_up(p)
                for group, records in p.others.items():
                    out.setdefault(group, {}).update(records)
            return out

    def group_metadata(self, group: str) -> bytes | None:
        """The value of ``group``'s GroupMetadataKey record (version 2), or None."""
        _check_group(group)
        with self._lock:
            self._check_open()
            p = self._partition_of(group)
            if p is None:
                return None
            self._catch_up(p)
            return p.others.get(group, {}).get(encode_group_metadata_key(group))

    def group_records(self, group: str) -> dict[bytes, bytes]:
        """Every record of key version >= 2 for ``group`` (key bytes -> value bytes), verbatim."""
        _check_group(group)
        with self._lock:
            self._check_open()
            p = self._partition_of(group)
            if p is None:
                return {}
            self._catch_up(p)
            return dict(p.others.get(group, {}))

    def partition_for(self, group: str) -> int:
        """The ``__consumer_offsets`` partition that holds ``group`` (what FindCoordinator derives from)."""
        _check_group(group)
        with self._lock:
            parts = self._partitions()
            return partition_for(group, len(parts) if parts else self._num_partitions)

    def snapshot(self) -> None:
        """Write a snapshot of every partition now (and truncate below it when truncation is on)."""
        with self._lock:
            self._check_writable()
            for p in self._partitions() or ():
                self._snapshot(p, force=True)

    def stats(self) -> list[dict]:
        """Per partition: log start/end, the offset state is current to, the snapshot's offset, and how many
        records were replayed from the log since the state was last loaded (a measure of open cost)."""
        with self._lock:
            self._check_open()
            out = []
            for p in self._partitions() or ():
                self._catch_up(p)
                out.append({"partition": p.index, "log_start_offset": p.log.log_start_offset,
                            "log_end_offset": p.log.log_end_offset, "next_offset": p.next_offset,
                            "snapshot_offset": p.snapshot_offset, "records_replayed": p.replayed,
                            "groups": len(p.groups())})
            return out

    def close(self) -> None:
        """Release the snapshot locks (the LogStore stays open; it is the caller's). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for p in self._parts or ():
                if p.file_lock is not None:
                    p.file_lock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        n = len(self._parts) if self._parts is not None else 0
        return f"OffsetStore({str(self._store.path)!r}, partitions={n}, truncate={self._truncate})"

    # ------------------------------------------------------------------------------------------------ workers

    def check_offset(self, value, topic: str, partition: int, any_offset: bool = False) -> OffsetAndMetadata:
        """What ``commit`` would store for one partition's ``value``; raises what it would raise
        (ValueError/TypeError, OffsetMetadataTooLargeError past offset.metadata.max.bytes)."""
        _check_tp((topic, partition))
        return self._check_offset(value, topic, partition, any_offset)

    def _check_offset(self, value, topic: str, partition: int, any_offset: bool = False) -> OffsetAndMetadata:
        if isinstance(value, int) and not isinstance(value, bool):
            offset, metadata, epoch = value, "", None
        elif hasattr(value, "offset"):  # ours or kafka-python's OffsetAndMetadata
            offset = value.offset
            metadata = getattr(value, "metadata", "") or ""
            epoch = getattr(value, "leader_epoch", None)
        else:
            raise TypeError(f"{topic}-{partition}: commit an OffsetAndMetadata or an int, not {type(value).__name__}")
        if isinstance(offset, bool) or not isinstance(offset, int) or \
                not (-LONG_MAX - 1 if any_offset else 0) <= offset <= LONG_MAX:
            raise ValueError(f"{topic}-{partition}: offset {offset!r} is not an offset (0 <= offset < 2**63)")
        if not isinstance(metadata, str):
            raise TypeError(f"{topic}-{partition}: metadata must be a str, not {type(metadata).__name__}")
        if len(metadata.encode("utf-16-le")) // 2 > self._max_metadata:
            raise OffsetMetadataTooLargeError(
                f"{topic}-{partition}: metadata of {len(metadata)} characters exceeds offset.metadata.max.bytes="
                f"{self._max_metadata}")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int) or not -1 <= epoch <= INT_MAX):
            raise ValueError(f"{topic}-{partition}: leader epoch {epoch!r} is not an int32 >= -1")
        return OffsetAndMetadata(offset, metadata, None if epoch is None or epoch < 0 else epoch)

    def _partitions(self, create: bool = False) -> list[_Partition] | None:
        """The partitions' states (loaded on first use); None while the topic does not exist and not ``create``."""
        if self._parts is not None:
            return self._parts
        store = self._store
        try:
            n = store.partitions_for(OFFSETS_TOPIC)
        except UnknownTopicOrPartitionError:
            if not create:
                return None
            try:
                store.create_topic(OFFSETS_TOPIC, self._num_partitions, TOPIC_CONFIG)
            except TopicAlreadyExistsError:
                pass  # another process created it first
            n = store.partitions_for(OFFSETS_TOPIC)
        parts = []
        for i in range(n):
            p = _Partition(i, store.log(OFFSETS_TOPIC, i), self._writable)
            self._load(p)
            parts.append(p)
        self._parts = parts
        if self._writable:
            for p in parts:  # e.g. a data dir that has no snapshot yet: write one now, not after N more commits
                self._maybe_snapshot(p)
        return parts

    def _partition_of(self, group: str, create: bool = False) -> _Partition | None:
        parts = self._partitions(create)
        if parts is None:
            return None
        return parts[partition_for(group, len(parts))]

    def _load(self, p: _Partition) -> None:
        """Rebuild ``p`` from its snapshot (when usable), positioned to replay the log from the snapshot's X."""
        log = p.log
        previous = None
        while True:
            snap = _read_snapshot(p.snapshot_path)
            # read after the snapshot: records are deleted only below a snapshot already on disk, so a log start
            # above X means that a newer snapshot was written meanwhile: read it again (once the file no longer
            # changes, the records between were deleted by something else)
            lso, leo = log.log_start_offset, log.log_end_offset
            x = snap[0] if snap is not None else -1
            if snap is None or x >= lso or x > leo or x == previous:
                break
            previous = x
        p.reset()
        start = lso
        if snap is not None and x > leo:
            _log.warning("%s: snapshot at offset %d is beyond the log end %d (the log was replaced?): ignored; "
                         "replaying the log from %d", p.snapshot_path, x, leo, lso)
            p.snapshot_offset = -1
        elif snap is not None:
            for key, value in snap[1]:
                p.apply(key, value)
            p.snapshot_offset = x
            if x < lso:
                _log.warning("%s: records [%d, %d) of %s-%d were deleted without a snapshot covering them: commits "
                             "made there are lost", p.snapshot_path, x, lso, OFFSETS_TOPIC, p.index)
            start = max(x, lso)
        else:
            p.snapshot_offset = -1
            if lso > 0:
                _log.warning("%s-%d: no usable snapshot and the log starts at %d: commits below it are lost",
                             OFFSETS_TOPIC, p.index, lso)
        p.bytes_since = 0
        p.next_offset = start

    def _catch_up(self, p: _Partition) -> None:
        """Apply what was appended since ``p.next_offset`` (by any process). Records deleted before this process
        read them are covered by a newer snapshot: reload from it."""
        for _ in range(_MAX_RELOADS):
            try:
                self._tail(p)
                return
            except OffsetOutOfRangeError:
                self._load(p)
        raise KafkaStorageError(5, f"{OFFSETS_TOPIC}-{p.index}: the log kept moving below this reader "
                                   f"({_MAX_RELOADS} reloads)")

    def _tail(self, p: _Partition) -> None:
        log = p.log
        if log.log_end_offset == p.next_offset:
            return  # the common case: a stat or two (shared/read mode), nothing at all (exclusive mode)
        pos = p.next_offset
        while True:
            # each read checks pos >= log start atomically (OffsetOutOfRangeError otherwise): no record is skipped
            view = log.read(pos, _READ_CHUNK)
            if not len(view):
                return
            for batch in iter_batches(view):
                nxt = batch.next_offset
                if nxt <= pos:
                    continue
                batch.validate()
                if batch.is_control:
                    marker = marker_of_batch(view, batch.position) if batch.is_transactional else None
                    if marker is not None:
                        p.end_transaction(batch.producer_id, marker[0])
                elif batch.is_transactional:  # a TxnOffsetCommit: pending until its producer's marker
                    pid = batch.producer_id
                    p.pending_first.setdefault(pid, batch.base_offset)
                    p.pending.setdefault(pid, []).extend(
                        (bytes(rec.key), None if rec.value is None else bytes(rec.value))
                        for rec in batch if rec.offset >= pos and rec.key is not None)
                else:
                    for rec in batch:
                        if rec.offset >= pos:
                            p.apply(rec.key, rec.value)
                            p.replayed += 1
                pos = nxt
                p.next_offset = pos

    def _append(self, p: _Partition, keys: list, values: list, now: int, sync: bool, commit=None) -> None:
        """Append one batch; then bring the state up to it. ``commit``: (group, {tp: (om, ts)}) of a commit, which
        is applied as it is instead of decoding the records just encoded from it."""
        failpoints.hit("offsets:before-append")
        base = p.log.append_batch(values, keys, [now] * len(keys))
        if sync:
            p.log.flush()
        if base == p.next_offset:  # nothing came between: no need to read our own batch back
            if commit is not None:
                p.offsets.setdefault(commit[0], {}).update(commit[1])
                p.bytes_since += sum(map(len, keys)) + sum(map(len, values))
            else:
                for key, value in zip(keys, values):
                    p.apply(key, value)
            p.next_offset = base + len(keys)
        else:
            self._catch_up(p)  # others appended first: read theirs and ours in log order
        self._maybe_snapshot(p)

    def _maybe_snapshot(self, p: _Partition) -> None:
        if p.next_offset - max(p.snapshot_offset, 0) >= self._snapshot_records or \
                p.bytes_since >= self._snapshot_bytes:
            self._snapshot(p, force=False)

    def _snapshot(self, p: _Partition, force: bool) -> None:
        lock = p.file_lock
        if force:
            lock.acquire(timeout=_setting(self._store, "lock.timeout.ms", 30000) / 1000.0,
                         what="write the offsets snapshot")
        elif not lock.try_acquire():
            return  # another process is writing one right now
        try:
            current = _read_snapshot(p.snapshot_path)
            cur = current[0] if current is not None else -1
            if cur > p.snapshot_offset:
                p.snapshot_offset = cur
                p.bytes_since = 0
            self._catch_up(p)
            x = p.next_offset
            if p.pending_first:
                # commits still pending in a transaction must be replayed from the log after a restart (a snapshot
                # holds committed state only): the snapshot covers no further than the first of them. Records past
                # X that the state already holds are applied again on replay, which changes nothing (the latest
                # value per key wins, in log order)
                x = min(x, min(p.pending_first.values()))
            if x <= cur or (not force and x - max(cur, 0) < self._snapshot_records
                            and p.bytes_since < self._snapshot_bytes):
                return
            p.log.flush()  # X never exceeds the durable log end, even after a power loss
            failpoints.hit("offsets:before-snapshot")
            atomic_write(p.snapshot_path, _encode_snapshot(x, p.live_records()), failpoint="offsets-snapshot")
            p.snapshot_offset = x
            p.bytes_since = 0
            failpoints.hit("offsets:after-snapshot")
            if self._truncate and x > p.log.log_start_offset:
                try:
                    p.log.delete_records_before(x)
                except PolicyViolationError as e:
                    _log.warning("%s: not truncating below offsets snapshots: %s", OFFSETS_TOPIC, e)
                    self._truncate = False
        finally:
            lock.release()


def _check_group(group) -> None:
    # Kafka allows the empty group id in OffsetCommit/OffsetFetch (GroupCoordinator.isValidGroupId)
    if not isinstance(group, str):
        raise ValueError(f"group id {group!r}: must be a string")


def _check_tp(tp) -> tuple[str, int]:
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise TypeError(f"{tp!r} is not a TopicPartition") from None
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"{tp!r}: the topic must be a non-empty string")
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= INT_MAX:
        raise ValueError(f"{tp!r}: the partition must be an int32 >= 0")
    return topic, partition


def _put(by_group: dict, group: str, key, value) -> None:
    """Latest value per (group, key); None is a tombstone, and a group left with nothing is dropped."""
    if value is not None:
        by_group.setdefault(group, {})[key] = value
        return
    entries = by_group.get(group)
    if entries is not None:
        entries.pop(key, None)
        if not entries:
            del by_group[group]
