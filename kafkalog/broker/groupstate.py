"""The group coordinator's state in ``__consumer_offsets``, as Kafka keeps it: written when it changes, loaded when
the broker starts, so that a restart (clean, kill -9 or power loss) on the same data dir finds its groups again.

What is written (formats: storage/groupformat.py), when, as Kafka 4.4's GroupMetadataManager does:

- a classic group's GroupMetadata (protocol type, generation, protocol, leader, each member with its ids, client id
  and host, timeouts, the subscription of the selected protocol and its assignment): when a generation completes
  (the leader's SyncGroup: members are answered once it is durable), when a static member's restart replaces its
  member id in a Stable group (its JoinGroup is answered once durable), and when the group becomes Empty (no
  members, generation kept). DeleteGroups tombstones it (Dead).
- a group of the group model's GroupMetadata (client.group: members offering range or roundrobin, over the wire
  and embedded; their state is ``state.json``, shared with embedded consumers): once per generation, when its first
  wire member's SyncGroup is answered (every member's answer waits for that write), and Empty when its last wire
  member leaves. Embedded members are written with the subscription and assignment the model holds for them and
  client host ``pid:<pid>``.
- a KIP-848 consumer group's records, each written when its value changes (a heartbeat is answered once its
  records are durable): ConsumerGroupMemberMetadata per member, ConsumerGroupMetadata (group epoch and a hash of
  the subscribed topics' metadata), ConsumerGroupTargetAssignmentMember per member and
  ConsumerGroupTargetAssignmentMetadata (assignment epoch), ConsumerGroupCurrentMemberAssignment per member (epoch,
  previous epoch, state, assigned and pending partitions, the epoch each partition was assigned at). A member that
  leaves or is fenced gets tombstones (current assignment, target, metadata: Kafka's order); a group converted to
  a classic one loses all its records (an empty one when a JoinGroup replaces it; one whose last consumer-protocol
  member left, KIP-848's online downgrade: in the same write as its GroupMetadata). A member that uses the classic
  protocol has its ClassicMemberMetadata (session timeout, the protocols of its JoinGroup); a classic group
  upgraded by a ConsumerGroupHeartbeat has its GroupMetadata tombstoned in the write of its first records.
  ConsumerGroupPartitionMetadata is not written (4.1+ replaced it by the hash); ConsumerGroupRegularExpression
  neither: the broker resolves a regex again when it loads the group.

The MetadataHash is kafkalog's own 64-bit hash of (topic name, topic id, partition count) of the subscribed topics,
not Kafka's (KIP-1101's Murmur3 over its metadata image): a loader compares it with what it computes itself, so a
Kafka broker loading a kafkalog data dir rebalances such a group once, which is harmless.

Loading (at broker start, before it listens): a classic group with members comes back Stable at its generation with
each member's assignment, an empty one Empty; a consumer group with its epochs, members and assignments; a
group-model group's wire members (GroupCoordinator.load_model_group) when its ``state.json`` still shows that
generation with them (restored from the record when it is older: lost in a power loss), else it is left to the
model (its embedded members went on without the broker). Every
member's session timer starts at load (members that never come back are removed by it, as on Kafka). A static member
that comes back within its session timeout keeps its assignment without a rebalance (classic: its JoinGroup with an
empty member id and its instance id takes its old member id's place; KIP-848: its heartbeat at its member id and
epoch continues at that epoch).

Writes go through ONE worker thread, in the order the loop made them (so the log holds the latest state last), each
batch fsynced; a batch holds only the records whose value differs from what the store holds.

Loop thread only, except the worker's jobs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import time

from ..client.group import ASSIGNORS as MODEL_ASSIGNORS
from ..client.group import GroupMember
from ..errors import KafkaError, NotCoordinatorError
from ..storage import failpoints
from ..storage import groupformat as gf
from . import protocol
from .classic import ClassicGroup, ClassicMember
from .consumer_groups import ConsumerGroup, ConsumerMember

log = logging.getLogger("kafkalog.broker")

_CONSUMER_TYPES = (gf.CONSUMER_GROUP_METADATA, gf.CONSUMER_GROUP_PARTITION_METADATA, gf.CONSUMER_GROUP_MEMBER_METADATA,
                   gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                   gf.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gf.CONSUMER_GROUP_REGULAR_EXPRESSION)
# tombstones of a whole consumer group, in the order Kafka's loader accepts: members' current assignments, targets
# and metadata first, the group's epoch last
_DELETE_ORDER = {gf.CONSUMER_GROUP_REGULAR_EXPRESSION: 0, gf.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: 1,
                 gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: 2, gf.CONSUMER_GROUP_MEMBER_METADATA: 3,
                 gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: 4, gf.CONSUMER_GROUP_PARTITION_METADATA: 5,
                 gf.CONSUMER_GROUP_METADATA: 6}


def metadata_hash(metadata: dict | None) -> int:
    """kafkalog's hash of a consumer group's subscribed topics ({name: (topic id, partitions)}), a signed int64;
    0 for none (Kafka's default: no topics)."""
    if not metadata:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(metadata):
        tid, n = metadata[name]
        h.update(name.encode("utf-8") + b"\x00" + tid.bytes + n.to_bytes(4, "big"))
    v = int.from_bytes(h.digest(), "big", signed=True)
    return v or 1


def _of_the_group_model(rec: gf.ClassicGroupRecord) -> bool:
    """Whether a GroupMetadata record is a group-model group's (consumers assigned by range or roundrobin, no
    static member): those are not the classic coordinator's (GroupCoordinator.join sends them to the model)."""
    return (rec.protocol_type == "consumer" and rec.protocol in MODEL_ASSIGNORS and bool(rec.members)
            and all(m.instance_id is None for m in rec.members))


def _write_job(offsets, group: str, records: list, delete_types=None, chain=None, tombstones=()) -> None:
    """Worker thread: append the records of ``records`` whose value differs from the store's (and, with
    ``delete_types``, tombstones for every record of those types the group has; ``tombstones``: keys tombstoned
    whether the store has them or not, as Kafka writes some), fsynced. ``chain`` (a consumer group's WriteChain):
    refused without writing once an earlier write of the chain failed, and marked failed when this one fails."""
    if chain is not None and chain.failed:
        raise NotCoordinatorError(f"group {group}: an earlier write of its records failed")
    try:
        _write(offsets, group, records, delete_types, tombstones)
    except BaseException:
        if chain is not None:
            chain.failed = True
        raise


def _write(offsets, group: str, records: list, delete_types=None, tombstones=()) -> None:
    current = offsets.group_records(group)
    out = []
    if delete_types is not None:
        doomed = {}
        for key in current:
            try:
                k = gf.decode_group_key(key)
            except ValueError:
                continue
            if k.type in delete_types:
                doomed[key] = _DELETE_ORDER.get(k.type, 0)
        for key in tombstones:
            doomed[key] = _DELETE_ORDER.get(gf.decode_group_key(key).type, 0)
        out += [(key, None) for key, _ in sorted(doomed.items(), key=lambda x: (x[1], x[0]))]
    for key, value in records:
        if value is None:
            if key in current:
                out.append((key, None))
        elif current.get(key) != value:
            out.append((key, value))
    if out:
        failpoints.hit("groups:before-store")
        offsets.put_group_records(group, out, sync=True)
        failpoints.hit("groups:after-store")


class GroupStateStore:
    """The coordinators' door to ``__consumer_offsets``: ordered, durable writes and the load at start."""

    def __init__(self, coordinator):
        self.c = coordinator
        self.offsets = coordinator.s.store.offsets
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkalog-groups")
        self.failed = 0  # writes that failed (logged; the coordinators take back what the write was for)
        # classic group -> the generation of its last GroupMetadata written or loaded (no store read on the loop)
        self.generations: dict[str, int] = {}
        # a group of the group model -> (generation, the write of its record): its members' SyncGroups wait for it
        self._model_writes: dict[str, tuple[int, asyncio.Future]] = {}

    def close(self) -> None:
        self._worker.shutdown(wait=True)

    def barrier(self) -> asyncio.Future:
        """Done once every write submitted before it is (DeleteGroups waits for it: a tombstone written beside a
        pending write could land before it)."""
        return asyncio.wrap_future(self._worker.submit(lambda: None), loop=self.c.s.loop)

    def _submit(self, group: str, records: list, delete_types=None, chain=None, tombstones=()) -> asyncio.Future:
        fut = asyncio.wrap_future(self._worker.submit(_write_job, self.offsets, group, records, delete_types, chain,
                                                      tombstones), loop=self.c.s.loop)
        fut.add_done_callback(lambda f, g=group: self._done(f, g))
        return fut

    def _done(self, fut, group: str) -> None:
        if fut.cancelled():
            return
        e = fut.exception()
        if e is not None:
            self.failed += 1
            log.error("group %s: writing its state to __consumer_offsets failed: %s", group, e)

    # -- classic groups -------------------------------------------------------------------------------------------

    def classic_value(self, g: ClassicGroup) -> bytes:
        members = []
        for m in g.members.values():
            meta = next((md for n, md in m.protocols if n == g.protocol), b"")
            members.append(gf.ClassicMemberRecord(
                m.member_id, m.instance_id, m.client_id, self.c.hosts.get(m.member_id, ""), m.rebalance_timeout_ms,
                m.session_timeout_ms, meta, m.assignment))
        return gf.encode_group_metadata_value(gf.ClassicGroupRecord(
            g.protocol_type, g.generation, g.protocol if members else None, g.leader if members else None,
            int(time.time() * 1000), members))

    def write_classic(self, g: ClassicGroup) -> asyncio.Future:
        """The group's GroupMetadata record as it is now (the caller awaits it to answer only once durable)."""
        self.generations[g.group_id] = max(self.generations.get(g.group_id, 0), g.generation)
        return self._submit(g.group_id, [(gf.encode_group_key(gf.GROUP_METADATA, g.group_id), self.classic_value(g))])

    # -- groups of the group model (client.group: range / roundrobin over the wire, embedded members) --------------

    def model_value(self, group: str, state: dict, wire) -> bytes:
        """GroupMetadata of a group-model group from its state.json ``state`` (``wire``: the broker's WireGroup or
        None): a wire member with the subscription bytes it sent, an embedded one with its subscription and every
        member's assignment in the consumer protocol."""
        members = []
        proto = state.get("protocol")
        wire_members = wire.members if wire is not None else {}
        for mid, info in state["members"].items():
            wm = wire_members.get(mid)
            by_topic: dict[str, list[int]] = {}
            for t, p in state["assignment"].get(mid, []):
                by_topic.setdefault(t, []).append(p)
            session_ms = int(info.get("session_timeout_s", 45.0) * 1000)
            if wm is not None:
                members.append(gf.ClassicMemberRecord(
                    mid, None, info.get("client_id") or "", self.c.hosts.get(mid, ""), wm.rebalance_timeout_ms,
                    wm.session_timeout_ms, wm.metadata(proto), protocol.encode_assignment(by_topic)))
            else:
                members.append(gf.ClassicMemberRecord(
                    mid, None, info.get("client_id") or "", f"pid:{info.get('pid')}", session_ms, session_ms,
                    protocol.encode_subscription(sorted(info.get("topics", []))),
                    protocol.encode_assignment(by_topic)))
        return gf.encode_group_metadata_value(gf.ClassicGroupRecord(
            "consumer", state["generation"], proto if members else None, state.get("leader") if members else None,
            int(time.time() * 1000), members))

    def write_model(self, group: str, state: dict, wire) -> asyncio.Future:
        """The record of the group model's generation in ``state`` (once per generation: every member's SyncGroup
        awaits the same write)."""
        gen = state["generation"]
        known = self._model_writes.get(group)
        if known is not None and known[0] == gen:
            return known[1]
        fut = self._submit(group, [(gf.encode_group_key(gf.GROUP_METADATA, group),
                                    self.model_value(group, state, wire))])
        self._model_writes[group] = (gen, fut)

        def failed(f, g=group):
            if not f.cancelled() and f.exception() is not None and self._model_writes.get(g, (None, None))[1] is f:
                del self._model_writes[g]  # the next SyncGroup tries again
        fut.add_done_callback(failed)
        return fut

    def drop_classic(self, group: str) -> asyncio.Future:
        """A classic group that becomes a consumer group: its GroupMetadata tombstoned."""
        self.generations.pop(group, None)
        return self._submit(group, [], (gf.GROUP_METADATA,))

    def stored_generation(self, group: str) -> int:
        """The generation of the group's last GroupMetadata record (0 when none): a classic group made again after
        it was forgotten while empty starts from it, so a generation never goes back."""
        return self.generations.get(group, 0)

    def forget(self, group: str) -> None:
        """DeleteGroups tombstoned the group (a new group of that id starts at generation 0, as on Kafka)."""
        self.generations.pop(group, None)
        self._model_writes.pop(group, None)

    # -- consumer groups ------------------------------------------------------------------------------------------

    def consumer_records(self, g: ConsumerGroup, members, removed) -> list:
        gid = g.group_id
        key = gf.encode_group_key
        out = []
        for mid in removed:
            if mid in g.members:
                continue
            out += [(key(gf.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, mid), None),
                    (key(gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, mid), None),
                    (key(gf.CONSUMER_GROUP_MEMBER_METADATA, gid, mid), None)]
        live = [g.members[mid] for mid in members if mid in g.members]
        for m in live:
            out.append((key(gf.CONSUMER_GROUP_MEMBER_METADATA, gid, m.member_id), gf.encode_member_metadata(
                instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                topic_names=m.topic_names, topic_regex=m.topic_regex, rebalance_timeout_ms=m.rebalance_timeout_ms,
                server_assignor=m.server_assignor, classic=m.classic)))
        out.append((key(gf.CONSUMER_GROUP_METADATA, gid),
                    gf.encode_consumer_group_metadata(g.group_epoch, metadata_hash(g.metadata))))
        for m in live:
            out.append((key(gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, m.member_id),
                        gf.encode_target_member(g.target.get(m.member_id, {}))))
        out.append((key(gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gid),
                    gf.encode_target_metadata(g.assignment_epoch, g.assigned_ms)))
        for m in live:  # (a static member's temporary leave is stored as its epoch -2, as Kafka does)
            out.append((key(gf.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id),
                        gf.encode_current_assignment(epoch=m.epoch, previous_epoch=m.previous_epoch, state=m.state,
                                                     assigned=m.assigned, pending=m.pending_revocation,
                                                     assigned_at=m.assigned_at)))
        return out

    def write_consumer(self, g: ConsumerGroup, members=(), removed=(), chain=None,
                       drop_classic: bool = False) -> asyncio.Future:
        """``drop_classic``: the group was a classic one until this write (KIP-848's online upgrade): its
        GroupMetadata is tombstoned in the same write, first, as Kafka's conversion writes it."""
        records = self.consumer_records(g, members, removed)
        if drop_classic:
            self.generations.pop(g.group_id, None)
            self._model_writes.pop(g.group_id, None)
            records.insert(0, (gf.encode_group_key(gf.GROUP_METADATA, g.group_id), None))
        return self._submit(g.group_id, records, chain=chain)

    def write_downgrade(self, group: str, cg: ClassicGroup, chain=None) -> asyncio.Future:
        """A consumer group that became the classic group ``cg`` (KIP-848's online downgrade): every record of the
        consumer group tombstoned and the classic group's GroupMetadata, in one write."""
        self.generations[group] = max(self.generations.get(group, 0), cg.generation)
        # Kafka's ConsumerGroup.createGroupTombstoneRecords tombstones its ConsumerGroupPartitionMetadata too, written
        # or not (4.1+ no longer writes it)
        return self._submit(group, [(gf.encode_group_key(gf.GROUP_METADATA, group), self.classic_value(cg))],
                            _CONSUMER_TYPES, chain=chain,
                            tombstones=[gf.encode_group_key(gf.CONSUMER_GROUP_PARTITION_METADATA, group)])

    def drop_consumer(self, group: str) -> asyncio.Future:
        """A consumer group that goes (converted to a classic one): every record of it tombstoned."""
        return self._submit(group, [], _CONSUMER_TYPES)

    # -- load -----------------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the coordinators' groups from the store (broker start, loop thread, before listening)."""
        t0 = time.monotonic()
        try:
            everything = self.offsets.all_group_records()
        except KafkaError as e:
            log.error("could not read the groups' state from __consumer_offsets: %s", e)
            return
        classic = consumer = 0
        for gid, records in everything.items():
            by_type: dict[int, list] = {}
            for key, value in records.items():
                try:
                    k = gf.decode_group_key(key)
                except ValueError as e:
                    log.warning("group %s: skipping a record with an unreadable key: %s", gid, e)
                    continue
                by_type.setdefault(k.type, []).append((k, value))
            try:
                if gf.GROUP_METADATA in by_type:
                    rec = gf.decode_group_metadata_value(by_type[gf.GROUP_METADATA][0][1])
                    if _of_the_group_model(rec):
                        self.c.load_model_group(gid, rec)
                    else:
                        self._load_classic(gid, rec)
                    classic += 1
                elif gf.CONSUMER_GROUP_METADATA in by_type:
                    self._load_consumer(gid, by_type)
                    consumer += 1
            except ValueError as e:  # one unreadable group must not keep the others from loading
                log.error("group %s: its state in __consumer_offsets cannot be read (%s): not loaded", gid, e)
        if classic or consumer:
            log.info("loaded %d classic and %d consumer groups from __consumer_offsets in %.0f ms", classic,
                     consumer, (time.monotonic() - t0) * 1000)

    def _load_classic(self, gid: str, rec: gf.ClassicGroupRecord) -> None:
        self.generations[gid] = rec.generation
        g = ClassicGroup(self.c, gid)
        g.generation = rec.generation
        g.protocol_type = rec.protocol_type
        now = time.monotonic()
        if rec.members:
            g.state = "Stable"
            g.protocol = rec.protocol
            g.leader = rec.leader
            g.synced.set()
        for i, mr in enumerate(rec.members):
            gm = GroupMember(self.c.s.store, gid, client_id=mr.client_id, strategies=[rec.protocol or ""],
                             session_timeout_ms=mr.session_timeout_ms, topic_partitions=self.c._topic_partitions)
            gm.member_id = mr.member_id
            m = ClassicMember(mr.member_id, gm, mr.client_id, mr.instance_id)
            m.protocols = [(rec.protocol or "", mr.subscription)]
            m.session_timeout_ms = mr.session_timeout_ms
            m.rebalance_timeout_ms = mr.rebalance_timeout_ms if mr.rebalance_timeout_ms > 0 else \
                mr.session_timeout_ms
            m.assignment = mr.assignment
            m.last_seen = now  # the session timer starts at load
            m.joined_at = now - len(rec.members) + i  # the stored order (the leader's choice among equals)
            if rec.protocol_type == "consumer":
                try:
                    m.topics = sorted(protocol.decode_subscription(mr.subscription)["topics"])
                except Exception:  # noqa: BLE001  (opaque bytes, as Kafka takes them)
                    m.topics = []
            g.members[m.member_id] = m
            if m.instance_id is not None:
                g.instances[m.instance_id] = m.member_id
            self.c.hosts[m.member_id] = mr.client_host
        self.c.classic.groups[gid] = g
        if g.members:
            g.publish()
        log.info("group %s: loaded (classic %r, generation %d, %s, %d members)", gid, g.protocol_type, g.generation,
                 g.state, len(g.members))

    def _load_consumer(self, gid: str, by_type: dict) -> None:
        g = ConsumerGroup(gid)
        stored_hash = 0
        for _k, value in by_type.get(gf.CONSUMER_GROUP_METADATA, ()):
            g.group_epoch, stored_hash = gf.decode_epoch_value(value)
        for _k, value in by_type.get(gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, ()):
            g.assignment_epoch, _ = gf.decode_epoch_value(value)
        now = time.monotonic()
        for k, value in by_type.get(gf.CONSUMER_GROUP_MEMBER_METADATA, ()):
            d = gf.decode_member_metadata(value)
            m = ConsumerMember(k.sub)
            m.instance_id, m.rack_id = d["instance_id"], d["rack_id"]
            m.client_id, m.client_host = d["client_id"], d["client_host"]
            m.topic_names, m.topic_regex = d["topic_names"], d["topic_regex"]
            m.rebalance_timeout_ms, m.server_assignor = d["rebalance_timeout_ms"], d["server_assignor"]
            if d["classic"] is not None:  # a member that uses the classic protocol (KIP-848's online migration)
                m.classic = (d["classic"][0], tuple(d["classic"][1]))
            m.last_seen = now  # the session timer starts at load
            g.members[m.member_id] = m
            if m.instance_id is not None:
                g.instances[m.instance_id] = m.member_id
            self.c.hosts[m.member_id] = m.client_host
        for k, value in by_type.get(gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, ()):
            if k.sub in g.members:
                g.target[k.sub] = gf.decode_target_member(value)
        for k, value in by_type.get(gf.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, ()):
            m = g.members.get(k.sub)
            if m is None:
                continue
            d = gf.decode_current_assignment(value)
            m.epoch, m.previous_epoch, m.state = d["epoch"], d["previous_epoch"], d["state"]
            m.assigned_at = d["assigned_at"]
            g.set_current(m, d["assigned"], d["pending"])
            if m.state == "UNREVOKED_PARTITIONS":
                m.revoke_deadline = now + m.rebalance_timeout_ms / 1000.0
        groups = self.c.consumer
        groups.groups[gid] = g
        groups._resolve(g, force=True)
        if metadata_hash(g.metadata) != stored_hash:
            # the subscribed topics changed while the broker was down: the next heartbeat sees it (epoch bump)
            g.metadata = None
            g.metadata_checked = 0.0
        g.assignor = groups.assignor_for(g)
        log.info("group %s: loaded (consumer, group epoch %d, assignment epoch %d, %d members)", gid, g.group_epoch,
                 g.assignment_epoch, len(g.members))
