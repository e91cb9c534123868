"""Consumer groups over the wire, on the embedded client's group model (one group state, two doors).

A wire member (a kafka-python, librdkafka or aiokafka consumer talking JoinGroup/SyncGroup/Heartbeat) is a
``client.group.GroupMember`` held by the broker: its member lock file is flock'ed by the broker process and its
mtime is touched by the member's Heartbeat requests, so embedded ``KafkaConsumer`` members in other processes see
wire members (and the reverse) in the same ``state.json``, and one generation and one assignment cover both.

Kafka's wire protocol is mapped onto the file protocol (``client/group.py``) like this:

- JoinGroup (KIP-394 from v4: an empty member id is answered MEMBER_ID_REQUIRED with the id to use) registers the
  member's subscription (the topics of its ConsumerProtocolSubscription) and the assignors it offers, in memory: the
  joins that arrive together are one join phase, as Kafka's PreparingRebalance holds them, and the group's state.json
  is written once when the phase completes (the joins in, one new generation, the members answered marked synced),
  not once per join: a group of 1,000 raw members took 1,000 generations and 2,000 writes of a 1,000-member file to
  form. A phase that changes the membership completes when every wire member joined again and no member id handed
  out is still to come (Kafka's hasAllMembersJoined), or at the rebalance timeout (laggards are removed); in an empty
  group once ``group.initial.rebalance.delay.ms`` passed with no new member. A join that changes nothing (a member
  re-joining after a generation embedded members made) starts no generation. Meanwhile Heartbeat and SyncGroup
  answer REBALANCE_IN_PROGRESS (27), as Kafka's do.
- The assignment is computed by the group model (range or roundrobin, Kafka's algorithms): a wire leader still gets
  the members' metadata and sends its assignments in SyncGroup, but the model's assignment is what every member
  gets, so an embedded member and a wire member can never disagree. A group whose first member offers neither
  assignor (sticky, cooperative-sticky, a custom one) is run by ``classic.py`` instead: Kafka's coordinator with the
  leader's assignments passed through; a member offering only those to a group already running on the model is
  refused with INCONSISTENT_GROUP_PROTOCOL (23).
- SyncGroup answers with the model's assignment encoded as a ConsumerProtocolAssignment v0 once every member of the
  generation gave up its old partitions (a wire member revoked everything before joining, the eager protocol, so
  the join phase marked it synced; an embedded member syncs itself), after the generation's GroupMetadata record is
  durable; a newer generation meanwhile answers REBALANCE_IN_PROGRESS (27).
- Heartbeat touches the lock file, evicts dead members (a dead embedded process's flock is free), and answers 27
  when a newer generation exists, 25 when the member was evicted. A wire member silent for its session timeout is
  removed by the broker's sweep.
- OffsetCommit from a member is fenced like an embedded commit: under the group lock (shared), the member must be
  in the group and at its generation (25 / 22 otherwise). Commits with generation -1 (assign()-only consumers,
  admin tools) are not fenced.

JoinGroup, SyncGroup, Heartbeat and LeaveGroup to a KIP-848 consumer group go to migration.py (its members that use
the classic protocol); a ConsumerGroupHeartbeat that joins a group of either classic coordinator upgrades it there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid

from ..client.group import (
    ASSIGNORS,
    GroupMember,
    _make_group_dir,
    _rebalance,
    _write_state,
    describe_group,
    group_dir,
    read_state,
)
from ..errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    KafkaError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from . import protocol
from .classic import ClassicGroup, ClassicGroups
from .consumer_groups import ConsumerGroups, write_error_code
from .groupstate import GroupStateStore
from .migration import Migration

log = logging.getLogger("kafkalog.broker")

_nothing = contextlib.nullcontext
POLL_S = 0.01


class WireMember:
    __slots__ = ("gm", "protocols", "session_timeout_ms", "rebalance_timeout_ms", "last_seen", "join_waiter",
                 "join_header", "joined_generation", "synced_generation", "topics", "strategies", "joined_at",
                 "assignment", "dirty", "joined_wall")

    def __init__(self, gm: GroupMember):
        self.gm = gm
        self.protocols: list[tuple[str, bytes]] = []
        self.session_timeout_ms = 10000
        self.rebalance_timeout_ms = 300000
        self.last_seen = time.monotonic()
        self.join_waiter: asyncio.Future | None = None
        self.join_header = None
        self.joined_generation = -1
        self.synced_generation = -1
        self.topics: list[str] = []
        self.strategies: list[str] = []
        self.joined_at = time.monotonic()
        self.joined_wall = time.time()  # state.json's "joined" of a new member (the longest-standing leads)
        self.assignment = b""  # the assignment bytes this member got in its last SyncGroup (DescribeGroups)
        self.dirty = False  # a join of it waits to be written into state.json (new, or a new subscription)

    def metadata(self, protocol_name: str | None) -> bytes:
        """The subscription bytes this member sent for ``protocol_name`` (else its first), as Kafka keeps them."""
        for name, data in self.protocols:
            if name == protocol_name:
                return data
        return self.protocols[0][1] if self.protocols else b""


class WireGroup:
    __slots__ = ("group_id", "members", "pending_ids", "phase", "phase_started", "initial", "initial_until",
                 "new_member_added", "preparing", "pending_counts", "pending_n", "state_counts", "leader",
                 "departed")

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.members: dict[str, WireMember] = {}
        self.pending_ids: dict[str, float] = {}  # KIP-394 member ids handed out, not joined yet
        self.phase: asyncio.Task | None = None
        self.phase_started = 0.0
        self.initial = False  # the phase began in an empty group: group.initial.rebalance.delay.ms applies
        self.initial_until = 0.0
        self.new_member_added = False  # a new member joined since the initial delay was last extended
        self.preparing = False  # a join waits to change the membership (Kafka's PreparingRebalance)
        self.pending_counts: dict[str, int] = {}  # assignor -> how many of the joins waiting to be written offer it
        self.pending_n = 0  # the joins waiting to be written (members with ``dirty``)
        self.state_counts: tuple[dict, dict[str, int]] | None = None  # (a state, assignor -> its members offering it)
        self.leader: str | None = None  # the wire member answered as the leader of the last join phase
        # members that left or expired while other wire members remain: removed from state.json by the phase's write
        self.departed: dict[str, WireMember] = {}


class GroupCoordinator:
    """The broker's coordinator for every group of its data dir. Loop thread only."""

    def __init__(self, services):
        self.s = services
        self.groups: dict[str, WireGroup] = {}
        self.hosts: dict[str, str] = {}  # member id -> "/<address>" of its connection (DescribeGroups' client_host)
        self.classic = ClassicGroups(self)  # groups whose members assign partitions themselves
        self.consumer = ConsumerGroups(self)  # KIP-848 consumer groups (ConsumerGroupHeartbeat)
        self.migration = Migration(self)  # KIP-848's online migration between the two kinds of group
        self.initial_delay_s = services.config["group.initial.rebalance.delay.ms"] / 1000.0
        self.min_session = services.config["group.min.session.timeout.ms"]
        self.max_session = services.config["group.max.session.timeout.ms"]
        self.state = GroupStateStore(self)  # the groups' records in __consumer_offsets
        self.state.load()

    def _topic_partitions(self, topics) -> dict[str, int]:
        out = {}
        for t in topics:
            n = self.s.partitions(t)
            if n:
                out[t] = n
        return out

    def close(self) -> None:
        self.classic.close()
        self.consumer.close()
        self.state.close()
        for g in self.groups.values():
            if g.phase is not None:
                g.phase.cancel()
            for m in (*g.members.values(), *g.departed.values()):
                m.gm.close()
        self.groups.clear()

    def _member(self, group_id: str, member_id: str) -> WireMember | None:
        g = self.groups.get(group_id)
        return g.members.get(member_id) if g is not None else None

    def _detach(self, g: WireGroup, member_id: str) -> WireMember | None:
        """Take a wire member out of the broker's view of ``g`` (its pending join uncounted, a join waiting for an
        answer answered UNKNOWN_MEMBER_ID); its files are the caller's."""
        m = g.members.pop(member_id, None)
        self.hosts.pop(member_id, None)
        if m is None:
            return None
        if m.dirty:
            self._count_pending(g, m, -1)
            m.dirty = False
        if m.join_waiter is not None and not m.join_waiter.done():
            m.join_waiter.set_result(UnknownMemberIdError.code)
        return m

    def _drop(self, g: WireGroup, member_id: str, leave: bool, why: str) -> None:
        m = self._detach(g, member_id)
        if m is None:
            return
        try:
            if leave:
                m.gm.leave()
                if not m.gm.state["members"]:  # the last member: the group is stored Empty, as Kafka stores it
                    self.state.write_model(g.group_id, m.gm.state, None)
            else:
                m.gm.close()
        except KafkaError as e:
            log.warning("group %s: member %s: %s", g.group_id, member_id, e)
        log.info("group %s: member %s removed (%s)", g.group_id, member_id, why)

    def _depart(self, g: WireGroup, member_id: str, why: str) -> None:
        """A member leaves (LeaveGroup, its session timeout). With other wire members in the group it is Kafka's
        PreparingRebalance: they join again and the phase's one write removes it with one new generation (a
        restarted consumer, a leave and a join, is one generation as on Kafka, and a thousand members leaving are
        not a thousand writes of the group); alone among the wire members it is written at once, so the embedded
        members rebalance without it."""
        m = g.members.get(member_id)
        if m is None:
            return
        m.gm.refresh()
        if not any(x != member_id for x in g.members) or member_id not in m.gm.state["members"]:
            self._drop(g, member_id, True, why)
            return
        del g.members[member_id]
        self.hosts.pop(member_id, None)
        if m.dirty:
            self._count_pending(g, m, -1)
            m.dirty = False
        if m.join_waiter is not None and not m.join_waiter.done():
            m.join_waiter.set_result(UnknownMemberIdError.code)
        g.departed[member_id] = m
        self._prepare(g)
        if g.phase is None or g.phase.done():
            g.phase = self.s.loop.create_task(self._join_phase(g))
        log.info("group %s: member %s leaves (%s)", g.group_id, member_id, why)

    def load_model_group(self, gid: str, rec) -> None:
        """A group-model group's GroupMetadata record at broker start (groupstate.py): its wire members come back
        (the broker holds their member files again, their session timers start now) when the group files still
        show that generation with them, so they heartbeat on without a rebalance; when the files are older (lost
        in a power loss) they are restored from the record first. A group that moved on meanwhile (embedded
        members rebalanced without the broker) is left as it is: its wire members join again."""
        path = group_dir(self.s.store.path, gid)
        state = read_state(path)
        if state["generation"] > rec.generation:
            return
        wire = [m for m in rec.members if m.client_host.startswith("/")]
        if state["generation"] == rec.generation and not all(m.member_id in state["members"] for m in wire):
            return
        g = self.groups.get(gid) or WireGroup(gid)
        gms = []
        for mr in wire:
            gm = GroupMember(self.s.store, gid, client_id=mr.client_id, strategies=[rec.protocol],
                             session_timeout_ms=mr.session_timeout_ms, topic_partitions=self._topic_partitions)
            gm.member_id = mr.member_id
            gms.append(gm)
        try:
            _make_group_dir(path, gid)
            with gms[0]._locked() if gms else _nothing():
                if state["generation"] < rec.generation:
                    state = self._restored_state(rec)
                    _write_state(path, state)
                for gm in gms:
                    gm._hold_member_file_locked()
        except (KafkaError, OSError) as e:
            log.warning("group %s: not loaded: %s", gid, e)
            for gm in gms:
                gm._release_member_file()
                gm.close()
            return
        now = time.monotonic()
        for mr, gm in zip(wire, gms):
            m = WireMember(gm)
            m.protocols = [(rec.protocol, mr.subscription)]
            m.session_timeout_ms = mr.session_timeout_ms
            m.rebalance_timeout_ms = mr.rebalance_timeout_ms if mr.rebalance_timeout_ms > 0 else mr.session_timeout_ms
            m.last_seen = now  # the session timer starts at load
            m.joined_generation = m.synced_generation = rec.generation
            m.strategies = [rec.protocol]
            try:
                m.topics = sorted(protocol.decode_subscription(mr.subscription)["topics"])
            except Exception:  # noqa: BLE001  (unreadable: the member's next join says)
                m.topics = []
            gm.topics = m.topics
            m.assignment = mr.assignment
            gm.refresh()
            g.members[mr.member_id] = m
            self.hosts[mr.member_id] = mr.client_host
        self.groups[gid] = g
        self.state.generations[gid] = rec.generation
        log.info("group %s: loaded (generation %d, %s, %d wire members)", gid, rec.generation, rec.protocol,
                 len(wire))

    def _restored_state(self, rec) -> dict:
        """state.json of a group-model group as its GroupMetadata record has it (every member synced: the record is
        written once a generation is answered)."""
        members, assignment = {}, {}
        for mr in rec.members:
            try:
                topics = sorted(protocol.decode_subscription(mr.subscription)["topics"])
                assigned = protocol.decode_assignment(mr.assignment)["assigned_partitions"] if mr.assignment else {}
            except Exception:  # noqa: BLE001
                topics, assigned = [], {}
            members[mr.member_id] = {"client_id": mr.client_id, "pid": os.getpid(), "topics": topics,
                                     "strategies": [rec.protocol], "joined": time.time(),
                                     "session_timeout_s": mr.session_timeout_ms / 1000.0}
            assignment[mr.member_id] = [[t, p] for t, ps in assigned.items() for p in ps]
        return {"generation": rec.generation, "protocol": rec.protocol, "leader": rec.leader, "members": members,
                "partitions": self._topic_partitions(sorted({t for m in members.values() for t in m["topics"]})),
                "assignment": assignment, "synced": list(members), "stable": True}

    # -- JoinGroup ------------------------------------------------------------------------------------------------

    def join(self, ctx, header, req):
        v = header.api_version
        gid = req["group_id"]
        err = self._validate_join(req)
        member_id = req["member_id"] or ""
        if err:
            return self._join_error(header, err, member_id)
        kg = self.consumer.groups.get(gid)
        if kg is not None:
            if kg.members:  # a classic member of a consumer group (KIP-848's online migration)
                return self.migration.join(ctx, header, req, kg)
            del self.consumer.groups[gid]  # an empty consumer group becomes a classic one, as Kafka converts it
            self.state.drop_consumer(gid)
        cg = self.classic.groups.get(gid)
        if cg is not None and not cg.members and not ClassicGroups.wants_classic(req):
            # only a KIP-394 member id was handed out: a member of the group model's kind takes the group over
            # (the other client gets UNKNOWN_MEMBER_ID and starts again)
            del self.classic.groups[gid]
            cg = None
        if cg is None and ClassicGroups.wants_classic(req) and not self._has_members(gid):
            cg = self.classic.groups[gid] = ClassicGroup(self, gid)
            cg.generation = self.state.stored_generation(gid)  # an empty group forgotten in memory goes on from it
        if cg is not None:
            return self.classic.join(ctx, header, req, cg)
        if req["protocol_type"] != "consumer":
            log.warning("group %s: a member of kind %r cannot join a consumer group", gid, req["protocol_type"])
            return self._join_error(header, InconsistentGroupProtocolError.code, member_id)
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = WireGroup(gid)
        if not member_id:
            member_id = self.new_member_id(ctx.client_id)
            if v >= 4:
                # Kafka's pending member: expires after the join's session timeout; a join phase waits for it
                g.pending_ids[member_id] = time.monotonic() + req["session_timeout_ms"] / 1000.0
                return self._join_error(header, MemberIdRequiredError.code, member_id)
        elif member_id not in g.members and member_id not in g.pending_ids:
            return self._join_error(header, UnknownMemberIdError.code, member_id)
        try:
            topics = self._subscription(req)
        except InvalidRequestError as e:
            log.warning("group %s: JoinGroup from %s: %s", gid, ctx.peer, e)
            return self._join_error(header, InconsistentGroupProtocolError.code, member_id)
        strategies = [p["name"] for p in req["protocols"] if p["name"] in ASSIGNORS]
        if not strategies:
            log.warning("group %s: member %s offers only %s; kafkalog assigns with %s", gid, member_id,
                        [p["name"] for p in req["protocols"]], " or ".join(sorted(ASSIGNORS)))
            return self._join_error(header, InconsistentGroupProtocolError.code, member_id)
        m = g.members.get(member_id)
        fresh = m is None
        if fresh:
            gm = GroupMember(self.s.store, gid, client_id=ctx.client_id or "", strategies=strategies,
                             session_timeout_ms=req["session_timeout_ms"], topic_partitions=self._topic_partitions)
            gm.member_id = member_id
            m = WireMember(gm)
        gm = m.gm
        gm.refresh()
        state = gm.state
        changes = fresh or m.dirty or topics != m.topics or strategies != m.strategies \
            or member_id not in state["members"]
        if changes and not self._assignor_in_common(g, state, member_id, strategies):
            log.warning("group %s: member %s refused: none of its assignors %s is offered by every member", gid,
                        member_id, strategies)
            return self._join_error(header, InconsistentGroupProtocolError.code, member_id)
        m.protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in req["protocols"]]
        m.session_timeout_ms = req["session_timeout_ms"]
        m.rebalance_timeout_ms = req.get("rebalance_timeout_ms", req["session_timeout_ms"]) or m.session_timeout_ms
        m.last_seen = time.monotonic()
        if changes:
            # applied with every other join of the phase in one write of the group (_complete_phase)
            if m.dirty:
                self._count_pending(g, m, -1)
            m.topics, m.strategies, m.dirty = topics, strategies, True
            self._count_pending(g, m, +1)
            gm.strategies = strategies
            gm.session_timeout_s = m.session_timeout_ms / 1000.0
            gm.topics = topics
            if not any(x != member_id for x in state["members"]) and not any(x != member_id for x in g.members):
                g.initial = True  # an empty group: group.initial.rebalance.delay.ms for the others to come
            if fresh:
                g.new_member_added = True
            self._prepare(g)
        else:
            gm.heartbeat()
        g.pending_ids.pop(member_id, None)
        g.members[member_id] = m
        self.hosts[member_id] = "/" + ctx.connection.peer_host
        if m.join_waiter is not None and not m.join_waiter.done():
            m.join_waiter.set_result(RebalanceInProgressError.code)
        m.join_waiter = self.s.loop.create_future()
        m.join_header = header
        if g.phase is None or g.phase.done():
            g.phase_started = time.monotonic()
            g.initial_until = g.phase_started + self.initial_delay_s
            g.phase = self.s.loop.create_task(self._join_phase(g))
        return self.await_join(m.join_waiter, m.rebalance_timeout_ms, member_id, header)

    def _prepare(self, g: WireGroup) -> None:
        """Kafka's PreparingRebalance: a join changed the membership; every wire member has to join again (a
        Heartbeat or a SyncGroup is answered REBALANCE_IN_PROGRESS) before the phase completes with one generation."""
        if not g.preparing:
            g.preparing = True
            g.phase_started = time.monotonic()
            g.initial_until = g.phase_started + self.initial_delay_s

    def _assignor_in_common(self, g: WireGroup, state: dict, member_id: str, strategies: list[str]) -> bool:
        """Whether the group model can assign with one of ``strategies`` once the pending joins are in: one that
        every other member of state.json and every other join waiting to be written offers. Counted per assignor
        (state.json's members once per state, the pending joins as they come), not by comparing the member with
        every member: a group of 1,000 forming compared a million pairs."""
        known = g.state_counts
        if known is None or known[0] is not state:
            counts: dict[str, int] = {}
            for info in state["members"].values():
                for name in set(info["strategies"]):
                    counts[name] = counts.get(name, 0) + 1
            known = g.state_counts = (state, counts)
        counts = known[1]
        mine = state["members"].get(member_id)
        own_state = set(mine["strategies"]) if mine is not None else ()
        n_state = len(state["members"]) - (mine is not None)
        m = g.members.get(member_id)
        own_pending = set(m.strategies) if m is not None and m.dirty else ()
        n_pending = g.pending_n - (m is not None and m.dirty)
        return any(counts.get(name, 0) - (name in own_state) == n_state
                   and g.pending_counts.get(name, 0) - (name in own_pending) == n_pending for name in set(strategies))

    @staticmethod
    def _count_pending(g: WireGroup, m: WireMember, sign: int) -> None:
        """A join waiting to be written enters (+1) or leaves (-1) the group's count of offered assignors."""
        g.pending_n += sign
        for name in set(m.strategies):
            g.pending_counts[name] = g.pending_counts.get(name, 0) + sign

    def classic_has_members(self, gid: str) -> bool:
        """Whether a classic group (of either coordinator) has members: a KIP-848 heartbeat cannot take it."""
        cg = self.classic.groups.get(gid)
        if cg is not None and (cg.members or cg.pending_ids):
            return True
        return self._has_members(gid)

    def forget_empty_classic(self, gid: str) -> None:
        """An empty classic group becomes a consumer group (Kafka's maybeDeleteEmptyClassicGroup)."""
        cg = self.classic.groups.pop(gid, None)
        if cg is not None and cg.phase is not None:
            cg.phase.cancel()
        self.state.drop_classic(gid)
        g = self.groups.get(gid)
        if g is not None and not g.members:
            del self.groups[gid]

    def _has_members(self, gid: str) -> bool:
        """Whether the group has members here or in the group model (live ones, in any process)."""
        g = self.groups.get(gid)
        if g is not None and g.members:
            return True
        try:
            return bool(describe_group(self.s.store, gid)["members"])
        except KafkaError:
            return False

    def _validate_join(self, req) -> int:
        if not req["group_id"]:
            return InvalidGroupIdError.code
        st = req["session_timeout_ms"]
        if not self.min_session <= st <= self.max_session:
            return InvalidSessionTimeoutError.code
        if not req["protocol_type"] or not req["protocols"]:  # Kafka's supportsProtocols: any kind, not none
            return InconsistentGroupProtocolError.code
        return 0

    @staticmethod
    def _subscription(req) -> list[str]:
        topics: set[str] = set()
        for p in req["protocols"]:
            if p["name"] in ASSIGNORS:
                topics.update(protocol.decode_subscription(bytes(p["metadata"] or b""))["topics"])
        return sorted(topics)

    def _join_error(self, header, code: int, member_id: str):
        return protocol.encode_response(11, header.api_version, header.correlation_id, {
            "throttle_time_ms": 0, "error_code": code, "generation_id": -1,
            "protocol_name": None if header.api_version >= 7 else "", "leader": "",
            "member_id": member_id, "members": []})

    @staticmethod
    def new_member_id(client_id: str | None) -> str:
        """KIP-394: the broker names a member (client id + a UUID, as Kafka does)."""
        return f"{client_id or 'consumer'}-{uuid.uuid4()}".replace("/", "_")

    async def await_join(self, fut, rebalance_timeout_ms: int, member_id: str, header):
        """The JoinGroup answer once the join phase sets ``fut`` (a response body, or an error code)."""
        try:
            result = await asyncio.wait_for(asyncio.shield(fut), rebalance_timeout_ms / 1000.0 + 5.0)
        except TimeoutError:
            result = RebalanceInProgressError.code
        if isinstance(result, int):
            return self._join_error(header, result, member_id)
        return protocol.encode_response(11, header.api_version, header.correlation_id, result)

    async def _join_phase(self, g: WireGroup) -> None:
        """Answer the pending joins of ``g`` together, as Kafka's join phase does. A phase that changes the membership
        (``g.preparing``: a new member, a new subscription) completes once every wire member of the group joined
        again and no KIP-394 member id handed out is still to come (Kafka's hasAllMembersJoined), or after the
        rebalance timeout (who did not join is removed); in an empty group once ``group.initial.rebalance.delay.ms``
        passed with no new member (Kafka's InitialDelayedJoin, extended up to the rebalance timeout). A phase that
        changes nothing waits for the wire members the current generation has not reached yet. Either way the
        group is written once (state.json: the joins, the removals, one new generation, the members answered
        marked synced) and every join is answered with the one generation."""
        while True:
            await asyncio.sleep(POLL_S)
            waiting = [m for m in g.members.values() if m.join_waiter is not None and not m.join_waiter.done()]
            if not waiting and not g.departed:
                g.phase = None
                g.preparing = g.initial = False
                return
            now = time.monotonic()
            timeout = max(m.rebalance_timeout_ms for m in waiting or g.members.values() or g.departed.values()) / 1000.0
            expired = now - g.phase_started >= timeout
            if g.initial and not expired:
                if now < g.initial_until:
                    continue
                if g.new_member_added:
                    g.new_member_added = False
                    g.initial_until = now + self.initial_delay_s
                    continue
            lead = waiting[0].gm
            lead.refresh()
            state = lead.state
            if g.preparing:
                laggards = [mid for mid, m in g.members.items() if m.join_waiter is None or m.join_waiter.done()]
                coming = any(t >= now for t in g.pending_ids.values())
                if (laggards or coming) and not g.initial and not expired:
                    continue
            else:
                # wire members not told about this generation yet (they learn it from a heartbeat)
                laggards = [mid for mid, m in g.members.items() if mid in state["members"]
                            and (m.join_waiter is None or m.join_waiter.done())
                            and m.joined_generation < state["generation"]]
                if laggards and not expired:
                    continue
            state = self._complete_phase(g, waiting, laggards)
            if state is not None:
                g.preparing = g.initial = g.new_member_added = False
                self._answer_joins(g, state)

    def _complete_phase(self, g: WireGroup, waiting: list, laggards: list) -> dict | None:
        """The joins of a phase written in one go under the group lock: the members that did not join again
        removed, dead ones evicted, the new and changed members in, one new generation when anything changed (or
        a partition count did), and the members answered marked synced (an eager client revoked all it owned
        before it joined, so the embedded members need not wait for their SyncGroups). The state written, or None
        when the joins were answered an error."""
        lead = (waiting or list(g.members.values()) or list(g.departed.values()))[0].gm
        departed = list(g.departed)
        try:
            _make_group_dir(lead.path, g.group_id)
            with lead._locked():
                for m in waiting:
                    m.gm._hold_member_file_locked()
                state = lead._load_locked()
                changed = False
                for mid in laggards + departed:
                    if state["members"].pop(mid, None) is not None:
                        state["assignment"].pop(mid, None)
                        changed = True
                changed |= lead._evict_dead_locked(state)
                for m in waiting:
                    mid = m.gm.member_id
                    if m.dirty or mid not in state["members"]:
                        before = state["members"].get(mid)
                        state["members"][mid] = {
                            "client_id": m.gm.client_id, "pid": os.getpid(), "topics": m.topics,
                            "strategies": m.strategies, "joined": before["joined"] if before else m.joined_wall,
                            "session_timeout_s": m.session_timeout_ms / 1000.0}
                        changed = True
                parts = self._topic_partitions(lead._all_topics(state))
                if changed or parts != state["partitions"]:
                    _rebalance(state, parts)
                    changed = True
                synced = set(state["synced"])
                for m in waiting:
                    mid = m.gm.member_id
                    if mid in state["members"] and mid not in synced:
                        state["synced"].append(mid)
                        synced.add(mid)
                        changed = True
                state["stable"] = synced >= set(state["members"])
                if changed:
                    lead._save_locked(state)
        except InconsistentGroupProtocolError as e:
            # an embedded member came meanwhile with assignors none of the joining members offer: they are refused
            log.warning("group %s: joins refused: %s", g.group_id, e)
            lead._stat = None
            lead.refresh()
            for m in waiting:
                if m.dirty:
                    m.join_waiter.set_result(InconsistentGroupProtocolError.code)
                    self._count_pending(g, m, -1)
                    m.dirty = False
                    if m.gm.member_id not in lead.state["members"]:
                        self._forget_member(g, m.gm.member_id)
            return None
        except (KafkaError, OSError) as e:
            log.error("group %s: writing the group's joins failed: %s", g.group_id, e)
            lead._stat = None
            lead.refresh()
            for m in waiting:
                m.join_waiter.set_result(write_error_code(e))
            return None
        for mid in laggards:
            self._forget_member(g, mid, "did not join again within the rebalance timeout")
        for mid in departed:
            m = g.departed.pop(mid)
            m.gm._release_member_file()
            m.gm.close()
        for m in g.members.values():
            m.dirty = False
        g.pending_counts.clear()
        g.pending_n = 0
        if departed and not lead.state["members"]:  # the last ones left: stored Empty, as Kafka stores it
            self.state.write_model(g.group_id, lead.state, None)
        return lead.state

    def _forget_member(self, g: WireGroup, member_id: str, why: str | None = None) -> None:
        """A wire member gone from the group's state (written already): its member file released."""
        m = self._detach(g, member_id)
        if m is None:
            return
        m.gm._release_member_file()
        m.gm.close()
        if why:
            log.info("group %s: member %s removed (%s)", g.group_id, member_id, why)

    def _answer_joins(self, g: WireGroup, state: dict) -> None:
        generation = state["generation"]
        protocol_name = state["protocol"] or ""
        ours = [m for m in g.members.values() if m.gm.member_id in state["members"]]
        if not ours:
            return
        leader = g.leader = min(ours, key=lambda m: (m.joined_at, m.gm.member_id)).gm.member_id
        members = []
        for m in ours:
            meta = next((md for name, md in m.protocols if name == protocol_name), m.protocols[0][1])
            members.append({"member_id": m.gm.member_id, "group_instance_id": None, "metadata": meta})
        for m in list(g.members.values()):
            fut = m.join_waiter
            if fut is None or fut.done():
                continue
            if m.gm.member_id not in state["members"]:
                fut.set_result(UnknownMemberIdError.code)
                continue
            m.joined_generation = generation
            fut.set_result({"throttle_time_ms": 0, "error_code": 0, "generation_id": generation,
                            "protocol_type": "consumer", "protocol_name": protocol_name, "leader": leader,
                            "skip_assignment": False, "member_id": m.gm.member_id,
                            "members": members if m.gm.member_id == leader else []})
        log.info("group %s: generation %d (%s), %d members (%d over the wire), leader %s", g.group_id, generation,
                 protocol_name, len(state["members"]), len(ours), leader)

    # -- SyncGroup ------------------------------------------------------------------------------------------------

    def sync(self, ctx, header, req):
        kg = self.consumer.groups.get(req["group_id"])
        if kg is not None:
            return self.migration.sync(header, req, kg)
        cg = self.classic.groups.get(req["group_id"])
        if cg is not None:
            return self.classic.sync(header, req, cg)
        m = self._member(req["group_id"], req["member_id"])
        if m is None:
            return self._sync_answer(header, UnknownMemberIdError.code, b"")
        return self._sync_wait(m, header, req["generation_id"])

    def _sync_answer(self, header, code: int, assignment: bytes, protocol_type: str | None = None,
                     protocol_name: str | None = None):
        return protocol.encode_response(14, header.api_version, header.correlation_id, {
            "throttle_time_ms": 0, "error_code": code, "protocol_type": protocol_type,
            "protocol_name": protocol_name, "assignment": assignment})

    async def _sync_wait(self, m: WireMember, header, generation: int):
        gm = m.gm
        m.last_seen = time.monotonic()
        g = self.groups.get(gm.group)
        if g is not None and g.preparing:
            return self._sync_answer(header, RebalanceInProgressError.code, b"")  # Kafka's PreparingRebalance
        gm.refresh()
        state = gm.state
        if not (state["generation"] == generation and gm.member_id in state["synced"]):
            # (the join phase marked the members it answered synced: nothing to write for them)
            try:
                gm.sync(generation)
            except UnknownMemberIdError:
                return self._sync_answer(header, UnknownMemberIdError.code, b"")
        deadline = time.monotonic() + m.rebalance_timeout_ms / 1000.0
        while True:
            gm.refresh()
            state = gm.state
            if gm.member_id not in state["members"]:
                return self._sync_answer(header, UnknownMemberIdError.code, b"")
            if state["generation"] != generation or (g is not None and g.preparing):
                code = RebalanceInProgressError.code if state["generation"] >= generation else \
                    IllegalGenerationError.code
                return self._sync_answer(header, code, b"")
            if state["stable"] or self._revoked_by_all(gm.group, state, generation):
                m.synced_generation = generation
                m.last_seen = time.monotonic()
                assigned: dict[str, list[int]] = {}
                for t, p in state["assignment"].get(gm.member_id, []):
                    assigned.setdefault(t, []).append(p)
                # user_data written the way this member writes it in its subscription (an empty value, as
                # kafka-python and aiokafka send, or null, as the Java client does): what a client-side leader of
                # its own kind would have sent
                try:
                    empty = protocol.decode_subscription(m.metadata(state.get("protocol")))["user_data"] == b""
                except Exception:  # noqa: BLE001  (a subscription we cannot read: null user data)
                    empty = False
                m.assignment = protocol.encode_assignment(assigned, b"" if empty else None)
                # answered once the generation's GroupMetadata record is durable (one write per generation)
                try:
                    await self.state.write_model(gm.group, state, self.groups.get(gm.group))
                except Exception as e:  # noqa: BLE001  (a failed write: the member retries)
                    log.error("group %s: storing generation %d failed: %s", gm.group, generation, e)
                    return self._sync_answer(header, write_error_code(e), b"")
                return self._sync_answer(header, 0, m.assignment, "consumer", state.get("protocol"))
            if time.monotonic() > deadline:
                return self._sync_answer(header, RebalanceInProgressError.code, b"")
            gm.heartbeat()
            gm.check()  # a dead embedded member must not hold the generation back
            await asyncio.sleep(POLL_S)

    def _revoked_by_all(self, group_id: str, state: dict, generation: int) -> bool:
        """Whether every member of ``generation`` has given up its old partitions: synced (an embedded member revokes
        before it syncs), or a wire member whose JoinGroup for it was answered (an eager client revokes everything
        before it joins). Then a wire member's SyncGroup is answered at once, as Kafka answers a leader's, instead of
        waiting for every other member's SyncGroup: a client that polls its consumers from one thread (kafka-python
        pauses its heartbeats meanwhile) would otherwise stall until a session timeout."""
        g = self.groups.get(group_id)
        synced = set(state["synced"])
        for mid in state["members"]:
            if mid in synced:
                continue
            wm = g.members.get(mid) if g is not None else None
            if wm is None or wm.joined_generation != generation:
                return False
        return True

    # -- Heartbeat / LeaveGroup / commits -------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None = None) -> int:
        kg = self.consumer.groups.get(group_id)
        if kg is not None:
            return self.migration.heartbeat(kg, member_id, generation, instance_id)
        cg = self.classic.groups.get(group_id)
        if cg is not None:
            return self.classic.heartbeat(cg, member_id, generation, instance_id)
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if m is None:
            return UnknownMemberIdError.code
        m.last_seen = time.monotonic()
        gm = m.gm
        gm.heartbeat()
        gm.check()
        gm.refresh()
        state = gm.state
        if member_id not in state["members"]:
            if m.join_waiter is not None and not m.join_waiter.done():
                return RebalanceInProgressError.code  # its join is not written yet
            self._drop(g, member_id, False, "evicted from the group")
            return UnknownMemberIdError.code
        if state["generation"] != generation:
            return RebalanceInProgressError.code if state["generation"] > generation else IllegalGenerationError.code
        if g.preparing:
            return RebalanceInProgressError.code  # Kafka's PreparingRebalance: join again
        return 0

    def leave(self, group_id: str, asked: list) -> tuple:
        """A LeaveGroup (v3+ batches members, each {member_id, group_instance_id, reason}): each member's error code,
        and a write to wait for before answering (a consumer group's, whose batch is one operation) or None."""
        kg = self.consumer.groups.get(group_id)
        if kg is not None:
            return self.migration.leave(kg, asked)
        return [self._leave_one(group_id, a["member_id"], a.get("group_instance_id"), a.get("reason"))
                for a in asked], None

    def _leave_one(self, group_id: str, member_id: str, instance_id: str | None, reason: str | None) -> int:
        cg = self.classic.groups.get(group_id)
        if cg is not None:
            return self.classic.leave(cg, member_id, instance_id, reason)
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return UnknownMemberIdError.code  # (static members live in classic groups only)
        self._depart(g, member_id, "left the group" + (f" ({reason})" if reason else ""))
        return 0

    def check_commit(self, group_id: str, member_id: str, generation: int, instance_id: str | None = None,
                     api_version: int | None = None):
        """An error code, or a check of each partition (a KIP-848 member committing at an older epoch:
        ConsumerGroups.check_commit). ``api_version``: OffsetCommit's (a KIP-848 member must use v9+), None for
        TxnOffsetCommit."""
        kg = self.consumer.groups.get(group_id)
        if kg is not None:
            return self.consumer.check_commit(kg, member_id, generation, api_version)
        if generation < 0 and not member_id and instance_id is None:
            # a commit from outside the group (admin, a consumer without group management): Kafka takes it while the
            # group is empty and answers UNKNOWN_MEMBER_ID while it has members (their positions are theirs)
            cg = self.classic.groups.get(group_id)
            if (cg is not None and cg.members) or (group_id and self._has_members(group_id)):
                return UnknownMemberIdError.code
            return 0
        if not group_id:
            return InvalidGroupIdError.code
        cg = self.classic.groups.get(group_id)
        if cg is not None:
            return self.classic.check_commit(cg, member_id, generation, instance_id)
        m = self._member(group_id, member_id)
        if m is None:
            return UnknownMemberIdError.code
        m.last_seen = time.monotonic()
        gm = m.gm
        gm.refresh()
        state = gm.state
        if member_id not in state["members"]:
            return UnknownMemberIdError.code
        if state["generation"] == generation:
            return 0
        if generation == m.synced_generation and m.joined_generation < state["generation"]:
            # Kafka's PreparingRebalance rule: a member still at the generation being replaced commits what it is
            # revoking (eager clients commit on revoke, before re-joining); it still owns those partitions, since
            # the new generation is not stable until this member syncs
            return 0
        return IllegalGenerationError.code

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+'s member id and epoch: checked for a KIP-848 consumer group, ignored for a classic one
        (as Kafka 4.4 does)."""
        kg = self.consumer.groups.get(group_id)
        if kg is None:
            return 0
        return self.consumer.check_fetch(kg, member_id, member_epoch)

    def sweep(self) -> None:
        self.classic.sweep()
        self.consumer.sweep()
        now = time.monotonic()
        for g in list(self.groups.values()):
            for mid in [k for k, t in g.pending_ids.items() if t < now]:
                del g.pending_ids[mid]
            for mid, m in list(g.members.items()):
                if m.join_waiter is not None and not m.join_waiter.done():
                    continue
                if now - m.last_seen > m.session_timeout_ms / 1000.0:
                    self._depart(g, mid, f"no heartbeat for {m.session_timeout_ms} ms (session timeout)")
            if not g.members and not g.pending_ids and not g.departed and (g.phase is None or g.phase.done()):
                del self.groups[g.group_id]
