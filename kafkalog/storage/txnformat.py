"""Byte formats of Kafka transactions (KIP-98): ``__transaction_state`` records, end-transaction markers, the
``.txnindex`` file and the producer-state ``.snapshot`` file. Pure codecs plus the one small file class Kafka has
for them (``TransactionIndex``); no policy: the coordinator and ``Log`` decide when to write what.

All big-endian. String => Int16 length + UTF-8; flexible versions use CompactString / CompactArray (UVarint
length + 1, 0 = null) and end each struct with TaggedFields (UVarint count, then per field UVarint tag, UVarint
size, bytes). Schemas are Kafka 4.4's (``TransactionLogKey.json``, ``TransactionLogValue.json``,
``EndTxnMarker.json``, ``AbortedTxn.json``, ``ProducerSnapshot.json``); the golden bytes in the tests were produced
by Kafka 4.4.0's own serializers.

``__transaction_state`` record (a compacted topic; Kafka's ``TransactionLog``)::

    Key   => RecordType Int16 (0 = TRANSACTION_LOG, which is also the key version) | TransactionalId String
             (any other RecordType: not a transaction-log key, skipped by readers as Kafka's UnknownKeyVersion)
    Value => Version Int16 (0, or 1 when the transaction.version feature >= 1) |
             ProducerId Int64 | ProducerEpoch Int16 | TransactionTimeoutMs Int32 |
             TransactionStatus Int8 (state id, STATE_NAMES) |
             TransactionPartitions nullable [Topic String | PartitionIds [Int32]]   (null exactly when Empty) |
             TransactionLastUpdateTimestampMs Int64 | TransactionStartTimestampMs Int64 (-1 = none)
        v1 (flexible): the array and strings compact, each partition struct and the value end with TaggedFields;
             tag 0 PreviousProducerId Int64 (default -1), 1 NextProducerId Int64 (-1), 2 ClientTransactionVersion
             Int16 (0), 3 NextProducerEpoch Int16 (-1); a tagged field is written only when not at its default
             (which is why a v0 value cannot carry a non-default one: Kafka refuses to write it, so do we).
        other versions: Kafka's UnknownValueVersion, skipped (decode_txn_log_value answers None).
    null value => tombstone: the transactional id expired (Dead is never written as a value).

End-transaction marker: a control batch (record batch v2 whose Attributes have bit 4 transactional and bit 5
control set, 0x0030) with the transaction's ProducerId/ProducerEpoch, BaseSequence -1, LastOffsetDelta 0 and one
record (Kafka's ``MemoryRecords.withEndTransactionMarker``)::

    Key   => Version Int16 (0) | Type Int16 (ControlRecordType: 0 ABORT, 1 COMMIT; 2-6 are KRaft's)
    Value => Version Int16 (0) | CoordinatorEpoch Int32   (EndTxnMarker; the coordinator's epoch fences a stale one)

``<20-digit base offset>.txnindex`` (Kafka's ``TransactionIndex``): no header, a flat run of 34-byte entries, one per
ABORTED transaction whose marker lies in the segment, in increasing LastOffset (a fetch walks them in order)::

    AbortedTxn => Version Int16 (0) | ProducerId Int64 | FirstOffset Int64 (may lie in an older segment) |
                  LastOffset Int64 (the ABORT marker's offset) | LastStableOffset Int64 (the LSO once aborted)

The file exists only once a segment has an abort (created on first append). A torn trailing partial entry (a crash
mid-write) is ignored by readers and cut by the next append.

``<20-digit offset>.snapshot`` (Kafka's ``ProducerStateManager`` snapshot; the offset is the end offset of the
producer state it covers)::

    ProducerSnapshot => Version Int16 (1) | Crc Uint32 (CRC-32C over bytes [6, end): the count and the entries) |
                        Count Int32 | Count x ProducerEntry
    ProducerEntry (46 bytes) => ProducerId Int64 | Epoch Int16 | LastSequence Int32 | LastOffset Int64 |
                                OffsetDelta Int32 | Timestamp Int64 | CoordinatorEpoch Int32 |
                                CurrentTxnFirstOffset Int64 (-1 = no open transaction)

A snapshot of another version, a short file or a CRC mismatch raises ``CorruptSnapshotError`` (Kafka's
``CorruptSnapshotException``: the loader deletes it and rebuilds the state from the log).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._engine.batch import RecordBatch, crc32c
from .._engine.segment import segment_file_name
from ..errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    storage_error,
)
from .files import fsync_path

__all__ = [
    "ABORT", "COMMIT", "STATE_NAMES", "TXN_INDEX_SUFFIX", "SNAPSHOT_SUFFIX", "AbortedTxn", "CorruptSnapshotError",
    "ProducerSnapshotEntry", "TxnIndex", "TxnLogValue", "build_marker_batch", "decode_producer_snapshot",
    "decode_txn_log_key", "decode_txn_log_value", "encode_producer_snapshot", "encode_txn_log_key",
    "encode_txn_log_value", "marker_of_batch", "parse_marker", "snapshot_path", "txn_index_path",
]

TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"

# TransactionState ids (the Int8 TransactionStatus) and the names DescribeTransactions/ListTransactions show
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES: dict[int, str] = {
    EMPTY: "Empty",
    ONGOING: "Ongoing",
    PREPARE_COMMIT: "PrepareCommit",
    PREPARE_ABORT: "PrepareAbort",
    COMPLETE_COMMIT: "CompleteCommit",
    COMPLETE_ABORT: "CompleteAbort",
    DEAD: "Dead",
    PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

# ControlRecordType ids (a control record's key); only ABORT and COMMIT end a transaction
ABORT = 0
COMMIT = 1
CONTROL_TYPE_NAMES: dict[int, str] = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                                      4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}

TXN_LOG_RECORD_TYPE = 0       # CoordinatorRecordType TRANSACTION_LOG: key prefix, and the key's version
TXN_LOG_VALUE_VERSIONS = (0, 1)
MARKER_ATTRIBUTES = 0x0030    # transactional (bit 4) + control (bit 5); CreateTime, no compression
MARKER_BATCH_SIZE = 78
ABORTED_TXN_SIZE = 34
SNAPSHOT_VERSION = 1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# Value v0/v1 fixed head: version, producer id, epoch, timeout, status
_VALUE_HEAD = struct.Struct(">hqhib")
_VALUE_TAIL = struct.Struct(">qq")  # last update, start
# Record batch v2 header up to RecordsCount (61 bytes): BaseOffset, BatchLength, PartitionLeaderEpoch, Magic, CRC,
# Attributes, LastOffsetDelta, BaseTimestamp, MaxTimestamp, ProducerId, ProducerEpoch, BaseSequence, RecordsCount
_BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21  # Attributes: the CRC covers the batch from here to its end
# The marker's one record: Length 16 (zigzag 0x20) | Attributes 0 | TimestampDelta 0 | OffsetDelta 0 |
# KeyLength 4 (0x08) | Key | ValueLength 6 (0x0c) | Value | Headers 0
_MARKER_RECORD = struct.Struct(">bbbbbhhbhib")
_ABORTED_TXN = struct.Struct(">hqqqq")
_SNAP_HEAD = struct.Struct(">hIi")  # version, crc, count
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
_SNAP_CRC_FROM = 6


class CorruptSnapshotError(KafkaError, ValueError, register=False):
    """A producer-state snapshot that cannot be trusted: unknown version, short, or its CRC does not hold (Kafka's
    CorruptSnapshotException). The snapshot holds nothing the log does not: the answer is to delete it and rebuild
    the producer state from the segments."""


# ----------------------------------------------------------------------------------------------- primitive codec

def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Readers below raise IndexError/struct.error/UnicodeDecodeError on bad bytes; the public decoders turn them into
# one CorruptRecordError. storage/offsets.py reads its flexible records with this module's _read_uvarint (its string
# readers differ: a null offset metadata reads as "" there).

def _read_uvarint(data, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ValueError("unsigned varint longer than 5 bytes")


def _take(data, pos: int, n: int, what: str) -> tuple[bytes, int]:
    if n < 0 or pos + n > len(data):
        raise ValueError(f"{what} of {n} bytes runs past the end ({len(data)} bytes)")
    return bytes(data[pos:pos + n]), pos + n


def _string(s: str, what: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 32767:
        raise ValueError(f"{what} of {len(b)} bytes does not fit Kafka's String (at most 32767 bytes)")
    return _I16.pack(len(b)) + b


def _read_string(data, pos: int, what: str) -> tuple[str, int]:
    (n,) = _I16.unpack_from(data, pos)
    if n < 0:
        raise ValueError(f"{what} is null")
    b, pos = _take(data, pos + 2, n, what)
    return b.decode("utf-8"), pos


def _read_compact_string(data, pos: int, what: str) -> tuple[str, int]:
    n, pos = _read_uvarint(data, pos)
    if n == 0:
        raise ValueError(f"{what} is null")
    b, pos = _take(data, pos, n - 1, what)
    return b.decode("utf-8"), pos


def _skip_tagged_fields(data, pos: int) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        _, pos = _take(data, pos, size, "tagged field")
    return pos


# ------------------------------------------------------------------------------------------ __transaction_state

@dataclass
class TxnLogValue:
    """One ``TransactionLogValue`` (v0 or v1): a transactional id's TransactionMetadata as the coordinator logs it.

    ``partitions``: topic -> partition ids. Kafka writes a null array exactly when the state is Empty (None or {}
    here; both encode as null, and null decodes as None) and an array otherwise, empty included ({} after
    CompleteCommit/CompleteAbort). The four last fields are v1's tagged fields, at their defaults when absent.
    """

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: dict[str, list[int]] | None
    last_update_ms: int
    start_ms: int
    prev_producer_id: int = -1
    next_producer_id: int = -1
    client_tv: int = 0
    next_producer_epoch: int = -1

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, f"Unknown({self.state})")


# (tag, field, struct, default) of v1's tagged fields, in tag order (the order they are written in)
_TAGGED = (
    (0, "prev_producer_id", _I64, -1),
    (1, "next_producer_id", _I64, -1),
    (2, "client_tv", _I16, 0),
    (3, "next_producer_epoch", _I16, -1),
)


def encode_txn_log_key(transactional_id: str) -> bytes:
    """The ``__transaction_state`` key of a transactional id: ``0000`` + String."""
    if not transactional_id:
        raise ValueError("a transactional id must not be empty")
    return _I16.pack(TXN_LOG_RECORD_TYPE) + _string(transactional_id, "transactional id")


def decode_txn_log_key(data) -> str | None:
    """The transactional id of a ``__transaction_state`` key; None for a key of another record type (Kafka's
    UnknownKeyVersion: readers skip the record). CorruptRecordError for a truncated or non-UTF-8 key."""
    try:
        (rtype,) = _I16.unpack_from(data, 0)
        if rtype != TXN_LOG_RECORD_TYPE:
            return None
        tid, _ = _read_string(data, 2, "transactional id")
        return tid
    except (struct.error, IndexError, ValueError) as e:
        raise CorruptRecordError(f"malformed __transaction_state key ({len(data)} bytes): {e}") from None


def encode_txn_log_value(v: TxnLogValue, version: int = 0) -> bytes:
    """A ``TransactionLogValue`` of the given version (0, or 1 when the transaction.version feature is >= 1).

    ValueError when the state is unknown, when an Empty state lists partitions (Kafka: IllegalStateException), or
    when version 0 is asked to carry a tagged field that is not at its default (Kafka: UnsupportedVersionException).
    """
    if version not in TXN_LOG_VALUE_VERSIONS:
        raise ValueError(f"TransactionLogValue version {version} is not one Kafka defines (0 or 1)")
    if v.state not in STATE_NAMES:
        raise ValueError(f"unknown transaction state id {v.state} (known: 0-7)")
    if v.state == EMPTY and v.partitions:
        raise ValueError(f"transaction state Empty with partitions {v.partitions}: Kafka writes none in Empty")
    partitions = None if v.state == EMPTY else (v.partitions or {})
    try:
        out = [_VALUE_HEAD.pack(version, v.producer_id, v.producer_epoch, v.timeout_ms, v.state)]
        if version == 0:
            for tag, name, _, default in _TAGGED:
                if getattr(v, name) != default:
                    raise ValueError(f"TransactionLogValue v0 cannot carry {name}={getattr(v, name)} (tagged field "
                                     f"{tag} of v1, default {default}): write version 1")
            if partitions is None:
                out.append(_I32.pack(-1))
            else:
                out.append(_I32.pack(len(partitions)))
                for topic, ids in partitions.items():
                    out.append(_string(topic, "topic"))
                    out.append(_I32.pack(len(ids)))
                    out.extend(_I32.pack(p) for p in ids)
            out.append(_VALUE_TAIL.pack(v.last_update_ms, v.start_ms))
        else:
            if partitions is None:
                out.append(b"\x00")
            else:
                out.append(_uvarint(len(partitions) + 1))
                for topic, ids in partitions.items():
                    b = topic.encode("utf-8")
                    if len(b) > 32767:
                        raise ValueError(f"topic of {len(b)} bytes does not fit Kafka's String (at most 32767)")
                    out.append(_uvarint(len(b) + 1) + b)
                    out.append(_uvarint(len(ids) + 1))
                    out.extend(_I32.pack(p) for p in ids)
                    out.append(b"\x00")  # the partition struct's tagged fields: none
            out.append(_VALUE_TAIL.pack(v.last_update_ms, v.start_ms))
            tagged = [(tag, st.pack(getattr(v, name))) for tag, name, st, default in _TAGGED
                      if getattr(v, name) != default]
            out.append(_uvarint(len(tagged)))
            for tag, b in tagged:
                out.append(_uvarint(tag) + _uvarint(len(b)) + b)
    except struct.error as e:
        raise ValueError(f"TransactionLogValue field out of range ({e}): {v}") from None
    return b"".join(out)


def decode_txn_log_value(data) -> TxnLogValue | None:
    """Decode a ``TransactionLogValue``; None for a version other than 0 and 1 (Kafka's UnknownValueVersion, the
    record is skipped). CorruptRecordError for truncated or malformed bytes or an unknown state id; bytes after the
    value are ignored, as Kafka's reader does. A tombstone (null value) is the caller's to handle: TypeError."""
    if data is None:
        raise TypeError("a null value is a tombstone (the transactional id expired), not a TransactionLogValue")
    try:
        version, pid, epoch, timeout, state = _VALUE_HEAD.unpack_from(data, 0)
    except struct.error:
        if len(data) >= 2 and _I16.unpack_from(data, 0)[0] not in TXN_LOG_VALUE_VERSIONS:
            return None
        raise CorruptRecordError(f"TransactionLogValue of {len(data)} bytes is shorter than its fixed head "
                                 f"({_VALUE_HEAD.size} bytes)") from None
    if version not in TXN_LOG_VALUE_VERSIONS:
        return None
    if state not in STATE_NAMES:
        raise CorruptRecordError(f"TransactionLogValue v{version} has an unknown transaction state id {state}")
    pos = _VALUE_HEAD.size
    partitions: dict[str, list[int]] | None
    tagged = {}
    try:
        if version == 0:
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            partitions = None if n < 0 else {}
            for _ in range(max(n, 0)):
                topic, pos = _read_string(data, pos, "topic")
                (m,) = _I32.unpack_from(data, pos)
                pos += 4
                if m < 0:
                    raise ValueError(f"partition ids of topic {topic!r} are null")
                ids = list(struct.unpack_from(f">{m}i", data, pos))
                pos += 4 * m
                partitions.setdefault(topic, []).extend(ids)
            last_update, start = _VALUE_TAIL.unpack_from(data, pos)
        else:
            n, pos = _read_uvarint(data, pos)
            partitions = None if n == 0 else {}
            for _ in range(max(n - 1, 0)):
                topic, pos = _read_compact_string(data, pos, "topic")
                m, pos = _read_uvarint(data, pos)
                if m == 0:
                    raise ValueError(f"partition ids of topic {topic!r} are null")
                ids = list(struct.unpack_from(f">{m - 1}i", data, pos))
                pos += 4 * (m - 1)
                pos = _skip_tagged_fields(data, pos)
                partitions.setdefault(topic, []).extend(ids)
            last_update, start = _VALUE_TAIL.unpack_from(data, pos)
            pos += _VALUE_TAIL.size
            count, pos = _read_uvarint(data, pos)
            known = {tag: (name, st) for tag, name, st, _ in _TAGGED}
            for _ in range(count):
                tag, pos = _read_uvarint(data, pos)
                size, pos = _read_uvarint(data, pos)
                b, pos = _take(data, pos, size, f"tagged field {tag}")
                if tag in known:
                    name, st = known[tag]
                    if size != st.size:
                        raise ValueError(f"tagged field {tag} ({name}) has {size} bytes, not {st.size}")
                    tagged[name] = st.unpack(b)[0]
    except (struct.error, IndexError, ValueError) as e:
        raise CorruptRecordError(f"malformed TransactionLogValue v{version} ({len(data)} bytes): {e}") from None
    return TxnLogValue(pid, epoch, timeout, state, partitions, last_update, start, **tagged)


# ------------------------------------------------------------------------------------------ end-transaction markers

def build_marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       timestamp_ms: int, base_offset: int = 0, partition_leader_epoch: int = 0) -> bytearray:
    """The control batch that ends ``producer_id``'s transaction on a partition: Kafka's
    ``MemoryRecords.withEndTransactionMarker`` byte for byte (78 bytes; BaseTimestamp = MaxTimestamp =
    ``timestamp_ms``, CreateTime). A bytearray, so a log can rewrite BaseOffset/PartitionLeaderEpoch in place."""
    try:
        record = _MARKER_RECORD.pack(0x20, 0, 0, 0, 0x08, 0, COMMIT if commit else ABORT, 0x0C, 0, coordinator_epoch,
                                     0)
        buf = bytearray(_BATCH_HEAD.pack(base_offset, MARKER_BATCH_SIZE - 12, partition_leader_epoch, 2, 0,
                                         MARKER_ATTRIBUTES, 0, timestamp_ms, timestamp_ms, producer_id,
                                         producer_epoch, -1, 1))
    except struct.error as e:
        raise ValueError(f"end-transaction marker field out of range ({e}): producer {producer_id} epoch "
                         f"{producer_epoch}, coordinator epoch {coordinator_epoch}, timestamp {timestamp_ms}, "
                         f"base offset {base_offset}, leader epoch {partition_leader_epoch}") from None
    buf += record
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[_CRC_START:]))
    return buf


def parse_marker(key, value) -> tuple[int, int]:
    """(control type, coordinator epoch) of a control record: type 0 ABORT / 1 COMMIT with the marker's coordinator
    epoch, any other type (KRaft's) with -1. As Kafka (``ControlRecordType.parse``, ``EndTransactionMarker``): a
    version above 0 is read as version 0; a null or short key or value, or a negative version, raises
    InvalidRecordError."""
    if key is None or len(key) < 4:
        raise InvalidRecordError(f"control record key of {0 if key is None else len(key)} bytes: it must have at "
                                 f"least 4 (version, type)")
    kversion, ctype = struct.unpack_from(">hh", key, 0)
    if kversion < 0:
        raise InvalidRecordError(f"control record key has a negative version {kversion}")
    if ctype not in (ABORT, COMMIT):
        return ctype, -1
    if value is None or len(value) < 6:
        raise InvalidRecordError(f"end-transaction marker ({CONTROL_TYPE_NAMES[ctype]}) value of "
                                 f"{'null' if value is None else len(value)} bytes: it must have at least 6 "
                                 f"(version, coordinator epoch)")
    vversion, coordinator_epoch = struct.unpack_from(">hi", value, 0)
    if vversion < 0:
        raise InvalidRecordError(f"end-transaction marker value has a negative version {vversion}")
    return ctype, coordinator_epoch


def marker_of_batch(buf, pos: int = 0) -> tuple[bool, int] | None:
    """For the control batch at ``buf[pos:]``: (commit?, coordinator epoch) when its record is an ABORT or COMMIT
    marker; None for other control types and for a control batch left empty by compaction (Kafka: the whole
    transaction was cleaned). InvalidRecordError when the batch is not a control batch or its record is malformed;
    the batch's CRC is not checked here (the log validated it on append or recovery)."""
    batch = RecordBatch(buf, pos)
    if not batch.is_control:
        raise InvalidRecordError(f"batch at position {pos} (base offset {batch.base_offset}) is not a control batch "
                                 f"(attributes 0x{batch.attributes:04x})")
    for record in batch.records():
        ctype, coordinator_epoch = parse_marker(record.key, record.value)
        if ctype not in (ABORT, COMMIT):
            return None
        return ctype == COMMIT, coordinator_epoch
    return None


# --------------------------------------------------------------------------------------------------- .txnindex

@dataclass(frozen=True)
class AbortedTxn:
    """One ``.txnindex`` entry: an aborted transaction of ``producer_id`` spanning [first_offset, last_offset]
    (last_offset = its ABORT marker), with the LSO right after the abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ABORTED_TXN.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def txn_index_path(dir: Path, base_offset: int) -> Path:
    """``<dir>/<20-digit base offset>.txnindex``."""
    return Path(dir) / segment_file_name(base_offset, TXN_INDEX_SUFFIX)


class TxnIndex:
    """A segment's ``.txnindex`` (Kafka's ``TransactionIndex``): aborted transactions in increasing last offset.

    The file is created by the first append only, so a segment without aborts has none. Reads go to the file each
    time (the index is small and read per fetch that needs it). Not thread-safe: the owning log's lock guards it,
    as Kafka's LogSegment does. OSError leaves as KafkaStorageError naming the path.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd = -1
        self._size = 0              # bytes of whole entries in the file, valid while _fd is open
        self._last_offset: int | None = None
        self._last_known = False   # _last_offset reflects the file (read lazily: opening costs no read)

    # -- reading

    def _read(self) -> bytes:
        try:
            if self._fd >= 0:
                return os.pread(self._fd, self._size, 0)
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""
        except OSError as e:
            raise storage_error(e, "read transaction index", self.path) from None

    def _iter(self):
        """(position, AbortedTxn) of each whole entry; CorruptIndexError for an entry of an unknown version."""
        data = self._read()
        whole = len(data) - len(data) % ABORTED_TXN_SIZE
        for pos in range(0, whole, ABORTED_TXN_SIZE):
            version, pid, first, last, lso = _ABORTED_TXN.unpack_from(data, pos)
            if version != 0:
                raise CorruptIndexError(f"aborted transaction entry at position {pos} of {self.path} has version "
                                        f"{version}; only version 0 exists")
            yield pos, AbortedTxn(pid, first, last, lso)

    def entries(self) -> list[AbortedTxn]:
        """Every whole entry of the file, in file order ([] when there is no file); a torn tail is ignored."""
        return [txn for _, txn in self._iter()]

    @property
    def last_offset(self) -> int | None:
        """The last entry's last offset, None when there is none."""
        if not self._last_known:
            last = None
            for _, txn in self._iter():
                last = txn.last_offset
            self._last_offset, self._last_known = last, True
        return self._last_offset

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's ``collectAbortedTxns``: the entries with last_offset >= fetch_offset and first_offset <
        upper_bound, in index order, and whether the search is complete (an entry with last_stable_offset >=
        upper_bound was seen: no later segment can hold an abort that overlaps the fetch)."""
        out = []
        for _, txn in self._iter():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def sanity_check(self, base_offset: int) -> None:
        """Kafka's ``sanityCheck``: CorruptIndexError when an entry's last offset lies below the segment's base
        offset (or an entry has an unknown version); the loader rebuilds the index from the segment then."""
        for pos, txn in self._iter():
            if txn.last_offset < base_offset:
                raise CorruptIndexError(f"last offset of aborted transaction {txn} at position {pos} of {self.path} "
                                        f"is less than the segment's base offset {base_offset}")

    # -- writing

    def _open(self) -> None:
        if self._fd >= 0:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size % ABORTED_TXN_SIZE:  # a torn entry from a crash mid-append: cut it, appends stay aligned
                    size -= size % ABORTED_TXN_SIZE
                    os.ftruncate(fd, size)
            except BaseException:
                os.close(fd)
                raise
        except OSError as e:
            raise storage_error(e, "open transaction index", self.path) from None
        self._fd, self._size = fd, size

    def append(self, entry: AbortedTxn) -> None:
        """Append one entry (creating the file); ValueError unless its last offset is above the last entry's."""
        last = self.last_offset
        if last is not None and entry.last_offset <= last:
            raise ValueError(f"the last offset of appended aborted transactions must increase: {entry.last_offset} "
                             f"is not above the current last offset {last} of {self.path}")
        data = entry.encode()
        self._open()
        try:
            os.pwrite(self._fd, data, self._size)
        except OSError as e:
            raise storage_error(e, "append to transaction index", self.path) from None
        self._size += len(data)
        self._last_offset, self._last_known = entry.last_offset, True

    def flush(self) -> None:
        """fsync the file if it exists (Kafka: ``force(true)``)."""
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise storage_error(e, "fsync transaction index", self.path) from None
        elif self.path.exists():
            fsync_path(self.path)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries with last offset >= offset (and a torn tail), then fsync; no file, nothing to do."""
        if self._fd < 0 and not self.path.exists():
            return
        self._open()
        keep, last = self._size, None
        for pos, txn in self._iter():
            if txn.last_offset >= offset:
                keep = pos
                break
            last = txn.last_offset
        try:
            if keep != self._size:
                os.ftruncate(self._fd, keep)
            os.fsync(self._fd)
        except OSError as e:
            raise storage_error(e, "truncate transaction index", self.path) from None
        self._size = keep
        self._last_offset, self._last_known = last, True

    def reset(self) -> None:
        """Empty the index (Kafka's ``reset``: recovery rebuilds it from the segment)."""
        self.truncate_to(-(1 << 63))

    def rename_to(self, path: Path) -> None:
        """Rename the file (if there is one) and follow it (segment deletion's ``.deleted``, the cleaner's swap)."""
        path = Path(path)
        try:
            os.replace(self.path, path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise storage_error(e, f"rename transaction index to {path}", self.path) from None
        self.path = path

    def delete_if_exists(self) -> bool:
        """Close and delete the file; whether there was one."""
        self.close()
        try:
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False
        except OSError as e:
            raise storage_error(e, "delete transaction index", self.path) from None
        finally:
            self._last_offset, self._last_known = None, True

    def close(self) -> None:
        """Close the file handle (reads still work, through the path)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                os.close(fd)
            except OSError as e:
                raise storage_error(e, "close transaction index", self.path) from None

    def __enter__(self) -> TxnIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TxnIndex({str(self.path)!r})"


# ----------------------------------------------------------------------------------------- producer snapshots

@dataclass(frozen=True)
class ProducerSnapshotEntry:
    """One producer's state in a ``.snapshot`` (Kafka's ProducerStateEntry as snapshotted: the last batch only)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1 = no open transaction


def snapshot_path(dir: Path, offset: int) -> Path:
    """``<dir>/<20-digit offset>.snapshot``."""
    return Path(dir) / segment_file_name(offset, SNAPSHOT_SUFFIX)


def encode_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """A ProducerSnapshot v1 of the entries (in the order given; Kafka's is a hash map's)."""
    body = bytearray(_SNAP_HEAD.size)
    count = 0
    for e in entries:
        try:
            body += _SNAP_ENTRY.pack(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta,
                                     e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
        except struct.error as err:
            raise ValueError(f"producer snapshot entry field out of range ({err}): {e}") from None
        count += 1
    struct.pack_into(">h", body, 0, SNAPSHOT_VERSION)
    struct.pack_into(">i", body, 6, count)
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[_SNAP_CRC_FROM:]))
    return bytes(body)


def decode_producer_snapshot(data) -> list[ProducerSnapshotEntry]:
    """The entries of a ProducerSnapshot v1; CorruptSnapshotError for another version, a short file, a CRC
    mismatch, a negative count or a length that is not the count's."""
    if len(data) < _SNAP_HEAD.size:
        raise CorruptSnapshotError(f"producer snapshot of {len(data)} bytes is shorter than its header "
                                   f"({_SNAP_HEAD.size} bytes)")
    version, crc, count = _SNAP_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"producer snapshot has the unknown version {version} (only 1 exists)")
    computed = crc32c(memoryview(data)[_SNAP_CRC_FROM:])
    if computed != crc:
        raise CorruptSnapshotError(f"producer snapshot CRC mismatch: stored 0x{crc:08x}, computed 0x{computed:08x}")
    expected = _SNAP_HEAD.size + count * _SNAP_ENTRY.size
    if count < 0 or len(data) != expected:
        raise CorruptSnapshotError(f"producer snapshot of {len(data)} bytes holds {count} entries: that needs "
                                   f"{expected} bytes ({_SNAP_ENTRY.size} per entry)")
    return [ProducerSnapshotEntry(*fields) for fields in _SNAP_ENTRY.iter_unpack(memoryview(data)[_SNAP_HEAD.size:])]
