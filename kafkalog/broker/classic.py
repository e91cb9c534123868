"""Kafka's classic group coordinator, generic: the leader's SyncGroup assignments passed through untouched, member
metadata and assignments opaque bytes (only a consumer's subscription is read, for the views).

A group takes this path when its first member is of another protocol type than ``consumer`` (Kafka Connect's
``connect``, Schema Registry's, any custom group), is a static member (``group.instance.id``, KIP-345), or offers
neither range nor roundrobin (the group model's assignors: confluent-kafka with
``partition.assignment.strategy=cooperative-sticky`` is the common case). A member of another protocol type than the
group's, or with no protocol every member supports, is refused with INCONSISTENT_GROUP_PROTOCOL. The broker side of
KIP-429's cooperative protocol is the classic one: the incremental logic lives in the clients.

Static members (KIP-345): a member with an instance id joins without the MEMBER_ID_REQUIRED round trip; when it
restarts (an empty member id, its instance id known) it gets a new member id, takes its old incarnation's place and
assignment, and in a Stable group whose protocol it still offers no rebalance happens (a leader gets the members and,
from JoinGroup v9, SkipAssignment). Requests naming the instance id with another member id are answered
FENCED_INSTANCE_ID. A static member that misses a join phase stays in the group until its session timeout. LeaveGroup
v3+ removes members by member id or by instance id. States as Kafka's::

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> (join/leave/expiry) PreparingRebalance ...

- JoinGroup: a new member, or a known member with new metadata, or any join while Stable starts a rebalance; the
  join phase ends when every member re-joined and no KIP-394 member id handed out is still to come (or the
  rebalance timeout removed who did not), and in an empty group once ``group.initial.rebalance.delay.ms`` passed
  with no new member (Kafka's InitialDelayedJoin). The generation goes up, the protocol is the first of the
  leader's that every member offers, and the leader (the longest-standing member) gets every member's metadata.
- SyncGroup: the leader's assignments are stored and sent to every member; a follower waits for them.
- Heartbeat: REBALANCE_IN_PROGRESS (27) while a rebalance is under way, so members re-join; 25 / 22 for an unknown
  member or another generation. Silence for the session timeout removes a member.
- The group is stored in ``__consumer_offsets`` (GroupMetadata, groupstate.py) when a generation completes (the
  members are answered once it is durable), when a static member's restart replaces its member id in a Stable group,
  and when it becomes Empty; the broker loads it when it starts (Stable at that generation, each member's session
  timer started at the load). A failed store is handled as Kafka handles it: a generation's (SyncGroup) leaves no
  member with an assignment of it, every waiting SyncGroup is answered the error and the group rebalances; a static
  replacement's reverts to the old member id; an Empty group's is only logged (no member holds anything of it).
  A storage error is answered NOT_COORDINATOR.
- The group is published in the group model's ``state.json`` (members, protocol, generation) with a member lock
  file held by the broker per member, so ``kafkalog groups`` shows it and an embedded consumer that tries to join
  finds no assignor in common and is refused, instead of taking partitions beside it.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from ..client.group import ASSIGNORS, GroupMember, _make_group_dir, _write_state
from ..errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from . import protocol
from .consumer_groups import write_error_code

log = logging.getLogger("kafkalog.broker")

POLL_S = 0.01


class ClassicMember:
    __slots__ = ("member_id", "instance_id", "gm", "protocols", "session_timeout_ms", "rebalance_timeout_ms",
                 "last_seen", "join_fut", "joined_at", "assignment", "client_id", "topics")

    def __init__(self, member_id: str, gm: GroupMember, client_id: str, instance_id: str | None = None):
        self.member_id = member_id
        self.instance_id = instance_id  # KIP-345: group.instance.id of a static member
        self.gm = gm
        self.client_id = client_id
        self.protocols: list[tuple[str, bytes]] = []
        self.session_timeout_ms = 10000
        self.rebalance_timeout_ms = 300000
        self.last_seen = time.monotonic()
        self.join_fut: asyncio.Future | None = None
        self.joined_at = time.monotonic()
        self.assignment = b""
        self.topics: list[str] = []


class ClassicGroup:
    def __init__(self, coordinator, group_id: str):
        self.c = coordinator
        self.group_id = group_id
        self.state = "Empty"
        self.generation = 0
        self.protocol_type = ""  # the members' kind ("consumer", "connect", "sr", ...): opaque, as Kafka keeps it
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.instances: dict[str, str] = {}  # KIP-345: group.instance.id -> the static member's current member id
        self.pending_ids: dict[str, float] = {}
        self.phase: asyncio.Task | None = None
        self.phase_started = 0.0
        self.initial = False  # the phase began in an empty group: group.initial.rebalance.delay.ms applies
        self.initial_until = 0.0
        self.new_member_added = False  # a new member joined since the initial delay was last extended
        self.synced = asyncio.Event()
        self.sync_failed: tuple[int, int] | None = None  # (generation, error) when storing that generation failed

    # -- the group model's view -----------------------------------------------------------------------------------

    def publish(self) -> None:
        """Write this group into state.json (under the group lock) so other processes see it."""
        any_m = next(iter(self.members.values()), None)
        if any_m is None:
            return
        gm = any_m.gm
        try:
            _make_group_dir(gm.path, gm.group)
            with gm._locked():
                for m in self.members.values():
                    m.gm._hold_member_file_locked()
                state = {"generation": self.generation, "protocol_type": self.protocol_type,
                         "protocol": self.protocol, "leader": self.leader,
                         "members": {m.member_id: {"client_id": m.client_id, "instance_id": m.instance_id,
                                                   "pid": os.getpid(), "topics": m.topics,
                                                   "strategies": [n for n, _ in m.protocols], "joined": time.time(),
                                                   "session_timeout_s": m.session_timeout_ms / 1000.0}
                                     for m in self.members.values()},
                         "partitions": {}, "assignment": self._assignments(), "synced": list(self.members),
                         "stable": self.state == "Stable", "coordinator": "broker (client-side assignment)"}
                _write_state(gm.path, state)
        except Exception as e:  # the wire protocol goes on; the file view is informative
            log.warning("group %s: could not publish the group state: %s", self.group_id, e)

    def _assignments(self) -> dict:
        out = {}
        if self.protocol_type != "consumer":  # another kind's assignments are not partitions: opaque bytes
            return {m.member_id: [] for m in self.members.values()}
        for m in self.members.values():
            try:
                a = protocol.decode_assignment(m.assignment) if m.assignment else {"assigned_partitions": {}}
                out[m.member_id] = [[t, p] for t, ps in a["assigned_partitions"].items() for p in ps]
            except Exception:
                out[m.member_id] = []
        return out

    # -- membership -----------------------------------------------------------------------------------------------

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        """Kafka's validateMember: a static member's requests carry its instance id, which must map to this member
        id (FENCED_INSTANCE_ID when another incarnation replaced it); a dynamic member must be known."""
        if instance_id is not None:
            current = self.instances.get(instance_id)
            if current is None:
                return UnknownMemberIdError.code
            if current != member_id:
                return FencedInstanceIdError.code
            return 0
        return 0 if member_id in self.members else UnknownMemberIdError.code

    def _forget(self, m: ClassicMember) -> None:
        self.c.hosts.pop(m.member_id, None)
        if m.instance_id is not None and self.instances.get(m.instance_id) == m.member_id:
            del self.instances[m.instance_id]
        m.gm._release_member_file()
        m.gm.close()

    def remove(self, member_id: str, why: str) -> None:
        m = self.members.pop(member_id, None)
        if m is None:
            return
        if m.join_fut is not None and not m.join_fut.done():
            m.join_fut.set_result(UnknownMemberIdError.code)
        self._forget(m)
        log.info("group %s: member %s removed (%s)", self.group_id, member_id, why)
        if self.members:
            # published when the rebalance completes (its member file is gone already, so the file view shows it
            # gone): a thousand members leaving are not a thousand writes of the group's state.json
            self.prepare_rebalance()
        else:
            self.state = "Empty"
            self.generation += 1
            self.leader = self.protocol = None
            self.c.state.write_classic(self)  # as Kafka stores an empty group (generation kept)
            self.publish()

    def prepare_rebalance(self) -> None:
        if self.state != "PreparingRebalance":
            self.state = "PreparingRebalance"
            self.synced.clear()
            self.phase_started = time.monotonic()
            self.initial_until = self.phase_started + self.c.initial_delay_s
        if self.phase is None or self.phase.done():
            self.phase = asyncio.get_running_loop().create_task(self._join_phase())

    async def _join_phase(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            if self.state != "PreparingRebalance":
                return
            now = time.monotonic()
            waiting = [m for m in self.members.values() if m.join_fut is not None and not m.join_fut.done()]
            if not self.members:
                return
            timeout = max(m.rebalance_timeout_ms for m in self.members.values()) / 1000.0
            expired = now - self.phase_started >= timeout
            lagging = [mid for mid, m in self.members.items() if m.join_fut is None or m.join_fut.done()]
            if self.initial and not expired:
                # Kafka's InitialDelayedJoin: the delay starts again while new members come (up to the rebalance
                # timeout), then the phase completes with whoever joined
                if now < self.initial_until:
                    continue
                if self.new_member_added:
                    self.new_member_added = False
                    self.initial_until = now + self.c.initial_delay_s
                    continue
            elif (lagging or any(t >= now for t in self.pending_ids.values())) and not expired:
                continue  # Kafka's hasAllMembersJoined: every member joined again, no member id handed out to come
            for mid in lagging:
                if self.members[mid].instance_id is not None:
                    continue  # Kafka keeps a static member that did not re-join: only its session timeout removes it
                m = self.members.pop(mid)
                self._forget(m)
                log.info("group %s: member %s did not re-join within the rebalance timeout", self.group_id, mid)
            if not self.members:  # nobody re-joined: Empty, as Kafka completes a join phase without members
                self.state = "Empty"
                self.generation += 1
                self.leader = self.protocol = None
                self.c.state.write_classic(self)
                return
            if not waiting:
                return
            self.initial = self.new_member_added = False
            self._complete_join()
            return

    def select_protocol(self, members) -> str | None:
        """Kafka's selectProtocol: of the protocols every member supports, each member votes for the first in its own
        order; the most votes win (a tie goes to the leader's order)."""
        leader = min(members, key=lambda m: (m.joined_at, m.member_id))
        names = [n for n, _ in leader.protocols]
        common = [n for n in names if all(n in [x for x, _ in m.protocols] for m in members)]
        if not common:
            return None
        votes = dict.fromkeys(common, 0)
        for m in members:
            votes[next(n for n, _ in m.protocols if n in votes)] += 1
        return max(common, key=lambda n: votes[n])  # max keeps the first of equal counts: the leader's order

    def join_answer(self, m: ClassicMember, skip_assignment: bool = False) -> dict:
        members = []
        if m.member_id == self.leader:
            members = [{"member_id": x.member_id, "group_instance_id": x.instance_id,
                        "metadata": next((md for n, md in x.protocols if n == self.protocol), b"")}
                       for x in self.members.values()]
        return {"throttle_time_ms": 0, "error_code": 0, "generation_id": self.generation,
                "protocol_type": self.protocol_type, "protocol_name": self.protocol, "leader": self.leader,
                "skip_assignment": skip_assignment, "member_id": m.member_id, "members": members}

    def _complete_join(self) -> None:
        members = list(self.members.values())
        joined = [m for m in members if m.join_fut is not None and not m.join_fut.done()]
        leader = min(joined or members, key=lambda m: (m.joined_at, m.member_id))
        selected = self.select_protocol(members)
        if selected is None:  # cannot happen: joins without a protocol in common are refused
            for m in members:
                if m.join_fut is not None and not m.join_fut.done():
                    m.join_fut.set_result(InconsistentGroupProtocolError.code)
            return
        self.generation += 1
        self.protocol = selected
        self.leader = leader.member_id
        self.state = "CompletingRebalance"
        for m in members:
            m.assignment = b""
        for m in members:
            if m.join_fut is not None and not m.join_fut.done():
                m.join_fut.set_result(self.join_answer(m))
        log.info("group %s: generation %d (%s, assigned by the leader %s), %d members", self.group_id,
                 self.generation, self.protocol, self.leader, len(members))
        self.publish()


class ClassicGroups:
    """The broker's groups with client-side assignment."""

    def __init__(self, coordinator):
        self.c = coordinator
        self.groups: dict[str, ClassicGroup] = {}

    @staticmethod
    def wants_classic(req) -> bool:
        """Whether a join goes to this coordinator rather than the group model's: a group of another kind than
        consumers (Kafka Connect's "connect", Schema Registry's, any custom one), a static member (KIP-345), or
        consumers that assign partitions themselves."""
        return (req["protocol_type"] != "consumer" or req.get("group_instance_id") is not None
                or not any(p["name"] in ASSIGNORS for p in req["protocols"]))

    def join(self, ctx, header, req, g: ClassicGroup):
        member_id = req["member_id"] or ""
        instance_id = req.get("group_instance_id")
        protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in req["protocols"]]
        others = [m for mid, m in g.members.items() if mid != member_id]
        if g.members and req["protocol_type"] != g.protocol_type:
            log.warning("group %s: a member of kind %r cannot join a group of kind %r", g.group_id,
                        req["protocol_type"], g.protocol_type)
            return self.c._join_error(header, InconsistentGroupProtocolError.code, member_id)
        if others and not any(all(n in [x for x, _ in m.protocols] for m in others) for n, _ in protocols):
            log.warning("group %s: member %s offers %s, none in common with the group's members", g.group_id,
                        member_id, [n for n, _ in protocols])
            return self.c._join_error(header, InconsistentGroupProtocolError.code, member_id)
        if not member_id:
            if instance_id is not None and instance_id in g.instances:
                return self._replace_static(ctx, header, req, g, protocols)
            member_id = self.c.new_member_id(ctx.client_id)
            if instance_id is None and header.api_version >= 4:
                # Kafka's pending member: expires after the join's session timeout; a join phase waits for it
                g.pending_ids[member_id] = time.monotonic() + req["session_timeout_ms"] / 1000.0
                return self.c._join_error(header, 79, member_id)
            # a static member new to the group (or a client before KIP-394) is added at once
        else:
            code = g.validate_member(member_id, instance_id) if instance_id is not None else 0
            if code:
                return self.c._join_error(header, code, member_id)
            if member_id not in g.members and member_id not in g.pending_ids:
                return self.c._join_error(header, UnknownMemberIdError.code, member_id)
        g.pending_ids.pop(member_id, None)
        m = g.members.get(member_id)
        if m is None:
            m = self._new_member(ctx, req, g, member_id, protocols)
            changed = True
        else:
            changed = m.protocols != protocols
        self._update(m, req, protocols)
        if m.join_fut is not None and not m.join_fut.done():
            m.join_fut.set_result(RebalanceInProgressError.code)
        m.join_fut = self.c.s.loop.create_future()
        if changed or g.state in ("Stable", "CompletingRebalance", "Empty"):
            g.prepare_rebalance()
        elif g.phase is None or g.phase.done():
            g.prepare_rebalance()
        return self.c.await_join(m.join_fut, m.rebalance_timeout_ms, m.member_id, header)

    def _new_member(self, ctx, req, g: ClassicGroup, member_id: str, protocols) -> ClassicMember:
        gm = GroupMember(self.c.s.store, g.group_id, client_id=ctx.client_id or "",
                         strategies=[n for n, _ in protocols], session_timeout_ms=req["session_timeout_ms"],
                         topic_partitions=self.c._topic_partitions)
        gm.member_id = member_id
        m = ClassicMember(member_id, gm, ctx.client_id or "", req.get("group_instance_id"))
        if not g.members:
            g.initial = True
            g.protocol_type = req["protocol_type"]
        g.new_member_added = True
        g.members[member_id] = m
        if m.instance_id is not None:
            g.instances[m.instance_id] = member_id
        self.c.hosts[member_id] = "/" + ctx.connection.peer_host
        return m

    def _update(self, m: ClassicMember, req, protocols) -> None:
        m.protocols = protocols
        m.topics = []
        if req["protocol_type"] == "consumer":  # only a consumer's metadata is read (its topics, for the views)
            try:
                m.topics = sorted({t for n, md in protocols for t in protocol.decode_subscription(md)["topics"]})
            except Exception:  # noqa: BLE001  (opaque to the coordinator, as Kafka takes it)
                m.topics = []
        m.session_timeout_ms = req["session_timeout_ms"]
        m.rebalance_timeout_ms = req.get("rebalance_timeout_ms") or m.session_timeout_ms
        if m.rebalance_timeout_ms < 0:
            m.rebalance_timeout_ms = m.session_timeout_ms
        m.last_seen = time.monotonic()

    def _replace_static(self, ctx, header, req, g: ClassicGroup, protocols):
        """KIP-345: a static member that restarted (its instance id known, its member id new) takes its old
        incarnation's place: a new member id, the old one fenced (FENCED_INSTANCE_ID), the assignment kept. In a
        Stable group whose selected protocol it still offers, without a rebalance: the answer is the current
        generation (with the members for a leader, and SkipAssignment from v9: the assignment stands), once the
        group with the new member id is durable; if that write fails the old member id is back (as Kafka reverts
        it) and the member is answered the error."""
        instance_id = req["group_instance_id"]
        old_id = g.instances[instance_id]
        order = list(g.members)
        old_leader = g.leader
        old_host = self.c.hosts.get(old_id)
        old = g.members.pop(old_id)
        if old.join_fut is not None and not old.join_fut.done():
            old.join_fut.set_result(FencedInstanceIdError.code)
        g._forget(old)
        new_id = self.c.new_member_id(ctx.client_id)
        initial = g.initial
        m = self._new_member(ctx, req, g, new_id, protocols)
        g.initial = initial
        m.joined_at = old.joined_at
        m.assignment = old.assignment
        self._update(m, req, protocols)
        if g.leader == old_id:
            g.leader = new_id
        log.info("group %s: static member %s restarted: member %s replaces %s", g.group_id, instance_id, new_id,
                 old_id)
        if g.state == "Stable" and g.protocol in [n for n, _ in protocols]:
            g.publish()
            answer = g.join_answer(m, skip_assignment=m.member_id == g.leader and header.api_version >= 9)
            if header.api_version < 9:
                answer["members"] = []  # as Kafka: before SkipAssignment, a leader told nothing to assign

            def revert():
                """The write failed: the old incarnation is back in its place (a new GroupMember for it: the old
                one released its member file), the new member id gone."""
                if g.members.get(new_id) is not m or g.instances.get(instance_id) != new_id:
                    return  # the group moved on meanwhile (another incarnation, a rebalance)
                del g.members[new_id]
                g._forget(m)
                gm = GroupMember(self.c.s.store, g.group_id, client_id=old.client_id,
                                 strategies=[n for n, _ in old.protocols], session_timeout_ms=old.session_timeout_ms,
                                 topic_partitions=self.c._topic_partitions)
                gm.member_id = old_id
                old.gm = gm
                old.join_fut = None
                members = dict(g.members)
                members[old_id] = old
                g.members = {mid: members[mid] for mid in order if mid in members}
                g.members.update({mid: x for mid, x in members.items() if mid not in g.members})
                g.instances[instance_id] = old_id
                g.leader = old_leader
                if old_host is not None:
                    self.c.hosts[old_id] = old_host
                g.publish()
                log.warning("group %s: storing static member %s (instance id %s) failed: reverting to the old "
                            "member id %s", g.group_id, new_id, instance_id, old_id)
            return self._answer_when_stored(g, header, answer, revert)
        m.join_fut = self.c.s.loop.create_future()
        g.prepare_rebalance()
        return self.c.await_join(m.join_fut, m.rebalance_timeout_ms, m.member_id, header)

    async def _answer_when_stored(self, g: ClassicGroup, header, answer: dict, revert):
        """The replacing static member's JoinGroup, answered once the group with its new member id is durable (as
        Kafka persists the group before it answers); a failed write reverts and answers as Kafka's
        (appendGroupMetadataErrorToResponseError: a storage error is NOT_COORDINATOR; member id "", the group's
        generation, protocol and leader)."""
        try:
            await self.c.state.write_classic(g)
        except Exception as e:  # noqa: BLE001  (a failed write: the member retries)
            revert()
            return protocol.encode_response(11, header.api_version, header.correlation_id, {
                "throttle_time_ms": 0, "error_code": write_error_code(e), "generation_id": g.generation,
                "protocol_type": g.protocol_type, "protocol_name": g.protocol, "leader": g.leader or "",
                "skip_assignment": False, "member_id": "", "members": []})
        return protocol.encode_response(11, header.api_version, header.correlation_id, answer)

    async def sync(self, header, req, g: ClassicGroup):
        m = g.members.get(req["member_id"])
        code = g.validate_member(req["member_id"], req.get("group_instance_id"))
        if code:
            return self.c._sync_answer(header, code, b"")
        gen = req["generation_id"]
        if gen != g.generation:
            return self.c._sync_answer(header, IllegalGenerationError.code, b"")
        ptype, pname = req.get("protocol_type"), req.get("protocol_name")
        if (ptype is not None and ptype != g.protocol_type) or (pname is not None and pname != g.protocol):
            log.warning("group %s: SyncGroup from %s names protocol %s/%s, the group's is %s/%s", g.group_id,
                        m.member_id, ptype, pname, g.protocol_type, g.protocol)
            return self.c._sync_answer(header, InconsistentGroupProtocolError.code, b"")
        if g.state == "PreparingRebalance":
            return self.c._sync_answer(header, RebalanceInProgressError.code, b"")
        m.last_seen = time.monotonic()
        if m.member_id == g.leader and g.state == "CompletingRebalance":
            given = {a["member_id"]: bytes(a["assignment"] or b"") for a in req["assignments"]}
            for mid, mm in g.members.items():
                mm.assignment = given.get(mid, b"")
            # the generation is stored (GroupMetadata, fsynced) before any member gets its assignment: a member
            # never sees a generation that a restart would take back
            try:
                await self.c.state.write_classic(g)
            except Exception as e:  # noqa: BLE001  (a failed write: as Kafka, the members rebalance again)
                log.error("group %s: storing generation %d failed: %s", g.group_id, gen, e)
                code = write_error_code(e)
                if g.generation == gen and g.state == "CompletingRebalance":
                    # Kafka's resetAndPropagateAssignmentWithError: no member keeps an assignment of the generation,
                    # every SyncGroup waiting for it gets the error, and the group rebalances
                    for mm in g.members.values():
                        mm.assignment = b""
                    g.sync_failed = (gen, code)
                    g.prepare_rebalance()
                return self.c._sync_answer(header, code, b"")
            if g.generation == gen and g.state == "CompletingRebalance":
                g.state = "Stable"
                g.synced.set()
                g.publish()
        deadline = time.monotonic() + m.rebalance_timeout_ms / 1000.0
        while g.state == "CompletingRebalance" and g.generation == gen and g.members.get(m.member_id) is m:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(g.synced.wait(), min(remaining, 0.5))
            except TimeoutError:
                pass
        if g.members.get(m.member_id) is not m:  # removed meanwhile, or replaced by a new static incarnation
            code = g.validate_member(m.member_id, m.instance_id) or UnknownMemberIdError.code
            return self.c._sync_answer(header, code, b"")
        if g.sync_failed is not None and g.sync_failed[0] == gen and g.generation == gen:
            return self.c._sync_answer(header, g.sync_failed[1], b"")  # the store of this generation failed
        if g.generation != gen or g.state != "Stable":
            return self.c._sync_answer(header, RebalanceInProgressError.code, b"")
        return self.c._sync_answer(header, 0, m.assignment, g.protocol_type, g.protocol)

    @staticmethod
    def heartbeat(g: ClassicGroup, member_id: str, generation: int, instance_id: str | None = None) -> int:
        code = g.validate_member(member_id, instance_id)
        if code:
            return code
        m = g.members[member_id]
        m.last_seen = time.monotonic()
        m.gm.heartbeat()
        if generation != g.generation:
            return IllegalGenerationError.code
        if g.state == "PreparingRebalance":
            return RebalanceInProgressError.code
        return 0

    @staticmethod
    def check_commit(g: ClassicGroup, member_id: str, generation: int, instance_id: str | None = None) -> int:
        code = g.validate_member(member_id, instance_id)
        if code:
            return code
        if generation != g.generation:
            return IllegalGenerationError.code
        if g.state == "CompletingRebalance":
            return RebalanceInProgressError.code
        return 0  # Stable, or PreparingRebalance at the current generation (commit on revoke)

    @staticmethod
    def leave(g: ClassicGroup, member_id: str, instance_id: str | None, reason: str | None = None) -> int:
        """One member of a LeaveGroup (v3+ batches them): a static member by its instance id (member id "" is an
        admin's removal, kafka-consumer-groups --remove-members), a dynamic one by its member id."""
        if instance_id is not None:
            current = g.instances.get(instance_id)
            if current is None:
                return UnknownMemberIdError.code
            if member_id and member_id != current:
                return FencedInstanceIdError.code
            member_id = current
        elif member_id not in g.members:
            return UnknownMemberIdError.code
        g.remove(member_id, "left the group" + (f" ({reason})" if reason else ""))
        return 0

    def sweep(self) -> None:
        now = time.monotonic()
        for gid, g in list(self.groups.items()):
            for mid in [k for k, t in g.pending_ids.items() if t < now]:
                del g.pending_ids[mid]
            for mid, m in list(g.members.items()):
                if m.join_fut is not None and not m.join_fut.done():
                    continue
                if now - m.last_seen > m.session_timeout_ms / 1000.0:
                    g.remove(mid, f"no heartbeat for {m.session_timeout_ms} ms (session timeout)")
            if not g.members and not g.pending_ids and (g.phase is None or g.phase.done()):
                del self.groups[gid]

    def close(self) -> None:
        for g in self.groups.values():
            if g.phase is not None:
                g.phase.cancel()
            for m in g.members.values():
                m.gm.close()
        self.groups.clear()
