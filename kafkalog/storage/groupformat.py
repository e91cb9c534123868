"""Byte formats of the group coordinator's records in ``__consumer_offsets`` (besides offset commits, offsets.py):
classic groups' GroupMetadata and KIP-848 consumer groups' records. Pure codecs; the coordinators decide what to
write when, and ``OffsetStore`` keeps the latest value per key.

Schemas are Kafka 4.4's (group-coordinator ``common/message/*.json``). Every key starts with Int16 RecordType (Kafka
calls it the key version) and is never flexible; every value starts with Int16 Version. Non-flexible: String =>
Int16 length + UTF-8 (-1 = null), Bytes => Int32 length, Array => Int32 count. Flexible (F): CompactString /
CompactBytes / CompactArray => UVarint length + 1 (0 = null), each struct ends with TaggedFields (UVarint count, then
per field UVarint tag, UVarint size, data); Uuid => 16 bytes. A null value is a tombstone::

    2  GroupMetadataKey => Group String
       GroupMetadataValue => Version Int16 (3, what 4.4 writes; 0-4 read) | ProtocolType String |
           Generation Int32 | Protocol nullable String | Leader nullable String |
           CurrentStateTimestamp Int64 (v2+, -1 = none) |
           Members [MemberId String | GroupInstanceId nullable String (v3+) | ClientId String | ClientHost String |
                    RebalanceTimeout Int32 (v1+) | SessionTimeout Int32 | Subscription Bytes | Assignment Bytes]
           (v4 is the same, flexible)
    3  ConsumerGroupMetadataKey => GroupId String
       ConsumerGroupMetadataValue (F, v0) => Epoch Int32 | tag 0: MetadataHash Int64 (default 0)
    4  ConsumerGroupPartitionMetadata (GroupId): replaced by MetadataHash in 4.1; read and ignored, never written
    5  ConsumerGroupMemberMetadataKey => GroupId String | MemberId String
       ConsumerGroupMemberMetadataValue (F, v0) => InstanceId nullable | RackId nullable | ClientId | ClientHost |
           SubscribedTopicNames [String] | SubscribedTopicRegex nullable ("" for none, as 4.4 writes) |
           RebalanceTimeoutMs Int32 | ServerAssignor nullable |
           tag 0: ClassicMemberMetadata (null, a consumer-protocol member: 4.4 writes the tag, data 0x00; set, a
           classic-protocol member of the group: 0x01 | SessionTimeoutMs Int32 |
           SupportedProtocols [Name String | Metadata Bytes])
    6  ConsumerGroupTargetAssignmentMetadataKey => GroupId String
       ConsumerGroupTargetAssignmentMetadataValue (F, v0) => AssignmentEpoch Int32 | tag 0: AssignmentTimestamp Int64
    7  ConsumerGroupTargetAssignmentMemberKey => GroupId String | MemberId String
       ConsumerGroupTargetAssignmentMemberValue (F, v0) => TopicPartitions [TopicId Uuid | Partitions [Int32]]
    8  ConsumerGroupCurrentMemberAssignmentKey => GroupId String | MemberId String
       ConsumerGroupCurrentMemberAssignmentValue (F, v0) => MemberEpoch Int32 | PreviousMemberEpoch Int32 |
           State Int8 (0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS, 127 UNKNOWN) |
           AssignedPartitions [TopicPartitions] | PartitionsPendingRevocation [TopicPartitions]
           TopicPartitions => TopicId Uuid | Partitions [Int32] | tag 0: AssignmentEpochs nullable [Int32]
    16 ConsumerGroupRegularExpressionKey => GroupId String | RegularExpression String  (read and ignored: the
       broker resolves a regex again when it loads the group)

A decoder raises ValueError for bytes that are not its record (a reader skips that record, as Kafka's loader
refuses an unknown version).
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from .txnformat import _read_uvarint, _uvarint

__all__ = [
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT", "CONSUMER_GROUP_MEMBER_METADATA", "CONSUMER_GROUP_METADATA",
    "CONSUMER_GROUP_PARTITION_METADATA", "CONSUMER_GROUP_REGULAR_EXPRESSION",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER", "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA", "GROUP_METADATA",
    "GROUP_METADATA_VALUE_VERSION", "MEMBER_STATES", "ClassicGroupRecord", "ClassicMemberRecord", "GroupKey",
    "decode_current_assignment", "decode_group_key", "decode_group_metadata_value", "decode_member_metadata",
    "decode_target_member", "decode_epoch_value", "encode_current_assignment", "encode_group_key",
    "encode_group_metadata_value", "encode_consumer_group_metadata", "encode_member_metadata",
    "encode_target_member", "encode_target_metadata",
]

GROUP_METADATA = 2
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16
_MEMBER_KEYED = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                 CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CONSUMER_GROUP_REGULAR_EXPRESSION)
GROUP_METADATA_VALUE_VERSION = 3
MEMBER_STATES = {"STABLE": 0, "UNREVOKED_PARTITIONS": 1, "UNRELEASED_PARTITIONS": 2, "UNKNOWN": 127}
_STATE_NAMES = {v: k for k, v in MEMBER_STATES.items()}

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------------- writer/reader

class _W:
    __slots__ = ("parts", "flexible")

    def __init__(self, flexible: bool):
        self.parts: list[bytes] = []
        self.flexible = flexible

    def i8(self, v: int):
        self.parts.append(_I8.pack(v))

    def i16(self, v: int):
        self.parts.append(_I16.pack(v))

    def i32(self, v: int):
        self.parts.append(_I32.pack(v))

    def i64(self, v: int):
        self.parts.append(_I64.pack(v))

    def uuid(self, v: uuid.UUID):
        self.parts.append(v.bytes)

    def string(self, s: str | None):
        if s is None:
            self.parts.append(b"\x00" if self.flexible else _I16.pack(-1))
            return
        b = s.encode("utf-8")
        if len(b) > 32767:
            raise ValueError(f"a string of {len(b)} bytes does not fit Kafka's String")
        self.parts.append(_uvarint(len(b) + 1) if self.flexible else _I16.pack(len(b)))
        self.parts.append(b)

    def bytes_(self, b: bytes):
        self.parts.append(_uvarint(len(b) + 1) if self.flexible else _I32.pack(len(b)))
        self.parts.append(bytes(b))

    def count(self, n: int | None):
        if n is None:
            self.parts.append(b"\x00" if self.flexible else _I32.pack(-1))
        else:
            self.parts.append(_uvarint(n + 1) if self.flexible else _I32.pack(n))

    def tags(self, fields: dict[int, bytes] | None = None):
        """The struct's TaggedFields (flexible only): {tag: encoded data}, in tag order."""
        fields = fields or {}
        self.parts.append(_uvarint(len(fields)))
        for tag in sorted(fields):
            self.parts.append(_uvarint(tag))
            self.parts.append(_uvarint(len(fields[tag])))
            self.parts.append(fields[tag])

    def done(self) -> bytes:
        return b"".join(self.parts)


class _R:
    __slots__ = ("data", "pos", "flexible")

    def __init__(self, data, pos: int, flexible: bool):
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("record runs past its end")
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b

    def _unpack(self, s: struct.Struct) -> int:
        (v,) = s.unpack(self._take(s.size))
        return v

    def i8(self) -> int:
        return self._unpack(_I8)

    def i16(self) -> int:
        return self._unpack(_I16)

    def i32(self) -> int:
        return self._unpack(_I32)

    def i64(self) -> int:
        return self._unpack(_I64)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def _len(self, wide: bool) -> int:
        if self.flexible:
            n, self.pos = _read_uvarint(self.data, self.pos)
            return n - 1
        return self.i32() if wide else self.i16()

    def string(self) -> str | None:
        n = self._len(False)
        return None if n < 0 else self._take(n).decode("utf-8")

    def bytes_(self) -> bytes:
        n = self._len(True)
        return b"" if n < 0 else self._take(n)

    def count(self) -> int:
        return self._len(True)

    def tags(self) -> dict[int, _R]:
        """The struct's TaggedFields: {tag: a reader over its data}."""
        if not self.flexible:
            return {}
        out = {}
        n, self.pos = _read_uvarint(self.data, self.pos)
        for _ in range(n):
            tag, self.pos = _read_uvarint(self.data, self.pos)
            size, self.pos = _read_uvarint(self.data, self.pos)
            out[tag] = _R(self._take(size), 0, True)
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{len(self.data) - self.pos} bytes past the record's end")


def _decoding(fn):
    def wrapper(data, *args):
        try:
            return fn(data, *args)
        except (struct.error, IndexError, UnicodeDecodeError, TypeError) as e:
            raise ValueError(f"malformed {fn.__name__[7:]}: {e}") from None
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


# ---------------------------------------------------------------------------------------------------- keys

class GroupKey(NamedTuple):
    """A decoded group-record key: ``sub`` is the member id (types 5, 7, 8) or the regex (16), else None."""

    type: int
    group: str
    sub: str | None = None


def encode_group_key(record_type: int, group: str, sub: str | None = None) -> bytes:
    w = _W(False)
    w.i16(record_type)
    w.string(group)
    if record_type in _MEMBER_KEYED:
        if sub is None:
            raise ValueError(f"record type {record_type} is keyed by a member id")
        w.string(sub)
    return w.done()


@_decoding
def decode_group_key(data) -> GroupKey:
    r = _R(data, 0, False)
    t = r.i16()
    group = r.string()
    if group is None:
        raise ValueError("null group id")
    sub = r.string() if t in _MEMBER_KEYED else None
    return GroupKey(t, group, sub)


# ---------------------------------------------------------------------------------------------------- classic

class ClassicMemberRecord(NamedTuple):
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class ClassicGroupRecord(NamedTuple):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[ClassicMemberRecord]


def encode_group_metadata_value(g: ClassicGroupRecord, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue has versions 0-4, not {version}")
    w = _W(version >= 4)
    w.i16(version)
    w.string(g.protocol_type)
    w.i32(g.generation)
    w.string(g.protocol)
    w.string(g.leader)
    if version >= 2:
        w.i64(g.state_timestamp)
    w.count(len(g.members))
    for m in g.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        if version >= 4:
            w.tags()
    if version >= 4:
        w.tags()
    return w.done()


@_decoding
def decode_group_metadata_value(data) -> ClassicGroupRecord:
    version = _I16.unpack_from(data, 0)[0]
    if not 0 <= version <= 4:
        raise ValueError(f"unknown GroupMetadataValue version {version}")
    r = _R(data, 2, version >= 4)
    ptype = r.string()
    generation = r.i32()
    proto = r.string()
    leader = r.string()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.count(), 0)):
        mid = r.string()
        iid = r.string() if version >= 3 else None
        cid = r.string()
        host = r.string()
        rto = r.i32() if version >= 1 else -1
        sto = r.i32()
        sub = r.bytes_()
        asg = r.bytes_()
        r.tags()
        if mid is None or cid is None or host is None:
            raise ValueError("null member id, client id or client host")
        members.append(ClassicMemberRecord(mid, iid, cid, host, rto, sto, sub, asg))
    r.tags()
    r.end()
    return ClassicGroupRecord(ptype or "", generation, proto, leader, ts, members)


# ---------------------------------------------------------------------------------------------------- consumer groups

def _value(version: int = 0) -> _W:
    w = _W(True)
    w.i16(version)
    return w


def _flex(data, what: str) -> _R:
    version = _I16.unpack_from(data, 0)[0]
    if version != 0:
        raise ValueError(f"unknown {what} version {version}")
    return _R(data, 2, True)


def encode_consumer_group_metadata(epoch: int, metadata_hash: int = 0) -> bytes:
    w = _value()
    w.i32(epoch)
    w.tags({0: _I64.pack(metadata_hash)} if metadata_hash else None)
    return w.done()


def encode_target_metadata(assignment_epoch: int, timestamp_ms: int = 0) -> bytes:
    w = _value()
    w.i32(assignment_epoch)
    w.tags({0: _I64.pack(timestamp_ms)} if timestamp_ms else None)
    return w.done()


@_decoding
def decode_epoch_value(data) -> tuple[int, int]:
    """ConsumerGroupMetadataValue or ConsumerGroupTargetAssignmentMetadataValue: (epoch, the tag-0 Int64 or 0)."""
    r = _flex(data, "epoch value")
    epoch = r.i32()
    tags = r.tags()
    r.end()
    extra = tags[0].i64() if 0 in tags else 0
    return epoch, extra


def encode_member_metadata(*, instance_id: str | None, rack_id: str | None, client_id: str, client_host: str,
                           topic_names, topic_regex: str | None, rebalance_timeout_ms: int,
                           server_assignor: str | None, classic: tuple | None = None) -> bytes:
    """``classic``: a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat inside a consumer
    group, KIP-848's online migration): (session timeout ms, [(protocol name, metadata bytes)])."""
    w = _value()
    w.string(instance_id)
    w.string(rack_id)
    w.string(client_id)
    w.string(client_host)
    names = list(topic_names)
    w.count(len(names))
    for n in names:
        w.string(n)
    w.string(topic_regex or "")  # Kafka 4.4 writes "" for no regex
    w.i32(rebalance_timeout_ms)
    w.string(server_assignor)
    if classic is None:
        w.tags({0: b"\x00"})  # ClassicMemberMetadata null: Kafka 4.4 writes the tag with its null marker
    else:
        session_ms, protocols = classic
        c = _W(True)
        c.parts.append(b"\x01")  # a nullable struct's presence marker
        c.i32(session_ms)
        c.count(len(protocols))
        for name, metadata in protocols:
            c.string(name)
            c.bytes_(metadata)
            c.tags()
        c.tags()
        w.tags({0: c.done()})
    return w.done()


@_decoding
def decode_member_metadata(data) -> dict:
    """{instance_id, rack_id, client_id, client_host, topic_names, topic_regex, rebalance_timeout_ms,
    server_assignor, classic} (classic: ClassicMemberMetadata as (session timeout ms, [(name, metadata)]) for a
    member that uses the classic protocol, else None)."""
    r = _flex(data, "ConsumerGroupMemberMetadataValue")
    out = {"instance_id": r.string(), "rack_id": r.string(), "client_id": r.string() or "",
           "client_host": r.string() or ""}
    out["topic_names"] = [r.string() for _ in range(max(r.count(), 0))]
    out["topic_regex"] = r.string() or None
    out["rebalance_timeout_ms"] = r.i32()
    out["server_assignor"] = r.string()
    tags = r.tags()
    out["classic"] = None
    if 0 in tags:
        c = tags[0]
        present, c.pos = _read_uvarint(c.data, c.pos)
        if present:
            session_ms = c.i32()
            protocols = []
            for _ in range(max(c.count(), 0)):
                name = c.string()
                metadata = c.bytes_()
                c.tags()
                protocols.append((name or "", metadata))
            c.tags()
            out["classic"] = (session_ms, protocols)
    r.end()
    return out


def _write_topic_partitions(w: _W, a: dict, epochs: dict | None = None) -> None:
    """``a``: {topic id (UUID): partitions}; ``epochs``: {(topic id, partition): epoch} for AssignmentEpochs."""
    items = sorted(((t, sorted(ps)) for t, ps in a.items() if ps), key=lambda x: str(x[0]))
    w.count(len(items))
    for t, ps in items:
        w.uuid(t)
        w.count(len(ps))
        for p in ps:
            w.i32(p)
        if epochs is None:
            w.tags()
        else:
            e = _W(True)
            e.count(len(ps))
            for p in ps:
                e.i32(epochs.get((t, p), -1))
            w.tags({0: e.done()})


def _read_topic_partitions(r: _R, epochs: dict | None = None) -> dict:
    out = {}
    for _ in range(max(r.count(), 0)):
        t = r.uuid()
        ps = [r.i32() for _ in range(max(r.count(), 0))]
        tags = r.tags()
        if ps:
            out.setdefault(t, set()).update(ps)
        if epochs is not None and 0 in tags:
            er = tags[0]
            n = er.count()
            for i in range(max(n, 0)):
                e = er.i32()
                if i < len(ps):
                    epochs[(t, ps[i])] = e
    return out


def encode_target_member(assignment: dict) -> bytes:
    w = _value()
    _write_topic_partitions(w, assignment)
    w.tags()
    return w.done()


@_decoding
def decode_target_member(data) -> dict:
    r = _flex(data, "ConsumerGroupTargetAssignmentMemberValue")
    out = _read_topic_partitions(r)
    r.tags()
    r.end()
    return out


def encode_current_assignment(*, epoch: int, previous_epoch: int, state: str, assigned: dict, pending: dict,
                              assigned_at: dict | None = None) -> bytes:
    w = _value()
    w.i32(epoch)
    w.i32(previous_epoch)
    w.i8(MEMBER_STATES.get(state, 127))
    _write_topic_partitions(w, assigned, assigned_at)
    _write_topic_partitions(w, pending)
    w.tags()
    return w.done()


@_decoding
def decode_current_assignment(data) -> dict:
    """{epoch, previous_epoch, state (name), assigned, pending, assigned_at {(topic id, partition): epoch}}."""
    r = _flex(data, "ConsumerGroupCurrentMemberAssignmentValue")
    epoch, previous = r.i32(), r.i32()
    state = _STATE_NAMES.get(r.i8(), "UNKNOWN")
    at: dict = {}
    assigned = _read_topic_partitions(r, at)
    pending = _read_topic_partitions(r)
    r.tags()
    r.end()
    return {"epoch": epoch, "previous_epoch": previous, "state": state, "assigned": assigned, "pending": pending,
            "assigned_at": at}
