"""Groups whose members assign partitions themselves (sticky, cooperative-sticky, any assignor the group model
does not run): Kafka's classic coordinator, with the leader's SyncGroup assignments passed through untouched.

A group takes this path when its first member offers neither range nor roundrobin (the group model's assignors);
confluent-kafka with ``partition.assignment.strategy=cooperative-sticky`` is the common case. The broker side of
KIP-429's cooperative protocol is the classic one: the incremental logic lives in the clients. States as Kafka's::

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> (join/leave/expiry) PreparingRebalance ...

- JoinGroup: a new member, or a known member with new metadata, or any join while Stable starts a rebalance; the
  join phase ends when every member re-joined (or its rebalance timeout removed it), after
  ``group.initial.rebalance.delay.ms`` for an empty group. The generation goes up, the protocol is the first of the
  leader's that every member offers, and the leader (the longest-standing member) gets every member's metadata.
- SyncGroup: the leader's assignments are stored and sent to every member; a follower waits for them.
- Heartbeat: REBALANCE_IN_PROGRESS (27) while a rebalance is under way, so members re-join; 25 / 22 for an unknown
  member or another generation. Silence for the session timeout removes a member.
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
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from . import protocol

log = logging.getLogger("kafkalog.broker")

POLL_S = 0.01


class ClassicMember:
    __slots__ = ("member_id", "gm", "protocols", "session_timeout_ms", "rebalance_timeout_ms", "last_seen",
                 "join_fut", "joined_at", "assignment", "client_id", "topics")

    def __init__(self, member_id: str, gm: GroupMember, client_id: str):
        self.member_id = member_id
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
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.pending_ids: dict[str, float] = {}
        self.phase: asyncio.Task | None = None
        self.phase_started = 0.0
        self.initial = False
        self.synced = asyncio.Event()

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
                state = {"generation": self.generation, "protocol": self.protocol, "leader": self.leader,
                         "members": {m.member_id: {"client_id": m.client_id, "pid": os.getpid(), "topics": m.topics,
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
        for m in self.members.values():
            try:
                a = protocol.decode_assignment(m.assignment) if m.assignment else {"assigned_partitions": {}}
                out[m.member_id] = [[t, p] for t, ps in a["assigned_partitions"].items() for p in ps]
            except Exception:
                out[m.member_id] = []
        return out

    # -- membership -----------------------------------------------------------------------------------------------

    def remove(self, member_id: str, why: str) -> None:
        m = self.members.pop(member_id, None)
        self.c.hosts.pop(member_id, None)
        if m is None:
            return
        if m.join_fut is not None and not m.join_fut.done():
            m.join_fut.set_result(UnknownMemberIdError.code)
        m.gm._release_member_file()
        m.gm.close()
        log.info("group %s: member %s removed (%s)", self.group_id, member_id, why)
        if self.members:
            self.prepare_rebalance()
        else:
            self.state = "Empty"
            self.generation += 1
            self.leader = self.protocol = None
        self.publish()

    def prepare_rebalance(self) -> None:
        if self.state != "PreparingRebalance":
            self.state = "PreparingRebalance"
            self.synced.clear()
            self.phase_started = time.monotonic()
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
            if self.initial and now - self.phase_started < min(self.c.initial_delay_s, timeout):
                continue
            lagging = [mid for mid, m in self.members.items() if m.join_fut is None or m.join_fut.done()]
            if lagging and now - self.phase_started < timeout:
                continue
            for mid in lagging:
                m = self.members.pop(mid)
                m.gm._release_member_file()
                m.gm.close()
                log.info("group %s: member %s did not re-join within the rebalance timeout", self.group_id, mid)
            if not waiting:
                return
            self.initial = False
            self._complete_join()
            return

    def _complete_join(self) -> None:
        members = list(self.members.values())
        leader = min(members, key=lambda m: (m.joined_at, m.member_id))
        names = [n for n, _ in leader.protocols]
        common = [n for n in names if all(n in [x for x, _ in m.protocols] for m in members)]
        if not common:  # cannot happen: joins without a protocol in common are refused
            for m in members:
                m.join_fut.set_result(InconsistentGroupProtocolError.code)
            return
        self.generation += 1
        self.protocol = common[0]
        self.leader = leader.member_id
        self.state = "CompletingRebalance"
        for m in members:
            m.assignment = b""
        meta = [{"member_id": m.member_id, "group_instance_id": None,
                 "metadata": next(md for n, md in m.protocols if n == self.protocol)} for m in members]
        for m in members:
            m.join_fut.set_result({"throttle_time_ms": 0, "error_code": 0, "generation_id": self.generation,
                                   "protocol_name": self.protocol, "leader": self.leader, "member_id": m.member_id,
                                   "members": meta if m.member_id == self.leader else []})
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
        return not any(p["name"] in ASSIGNORS for p in req["protocols"])

    def join(self, ctx, header, req, g: ClassicGroup):
        member_id = req["member_id"] or ""
        if not member_id:
            member_id = self.c.new_member_id(ctx.client_id)
            if header.api_version >= 4:
                g.pending_ids[member_id] = time.monotonic() + 300.0
                return self.c._join_error(header, 79, member_id)
        elif member_id not in g.members and member_id not in g.pending_ids:
            return self.c._join_error(header, UnknownMemberIdError.code, member_id)
        protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in req["protocols"]]
        others = [m for mid, m in g.members.items() if mid != member_id]
        if others and not any(all(n in [x for x, _ in m.protocols] for m in others) for n, _ in protocols):
            log.warning("group %s: member %s offers %s, none in common with the group's members", g.group_id,
                        member_id, [n for n, _ in protocols])
            return self.c._join_error(header, InconsistentGroupProtocolError.code, member_id)
        g.pending_ids.pop(member_id, None)
        m = g.members.get(member_id)
        if m is None:
            gm = GroupMember(self.c.s.store, g.group_id, client_id=ctx.client_id or "",
                             strategies=[n for n, _ in protocols], session_timeout_ms=req["session_timeout_ms"],
                             topic_partitions=self.c._topic_partitions)
            gm.member_id = member_id
            m = ClassicMember(member_id, gm, ctx.client_id or "")
            if not g.members:
                g.initial = True
            g.members[member_id] = m
            self.c.hosts[member_id] = "/" + ctx.connection.peer_host
            changed = True
        else:
            changed = m.protocols != protocols
        m.protocols = protocols
        try:
            m.topics = sorted({t for n, md in protocols for t in protocol.decode_subscription(md)["topics"]})
        except Exception:
            m.topics = []
        m.session_timeout_ms = req["session_timeout_ms"]
        m.rebalance_timeout_ms = req.get("rebalance_timeout_ms") or m.session_timeout_ms
        m.last_seen = time.monotonic()
        if m.join_fut is not None and not m.join_fut.done():
            m.join_fut.set_result(RebalanceInProgressError.code)
        m.join_fut = self.c.s.loop.create_future()
        if changed or g.state in ("Stable", "CompletingRebalance", "Empty"):
            g.prepare_rebalance()
        elif g.phase is None or g.phase.done():
            g.prepare_rebalance()
        return self.c.await_join(m.join_fut, m.rebalance_timeout_ms, m.member_id, header)

    async def sync(self, header, req, g: ClassicGroup):
        m = g.members.get(req["member_id"])
        if m is None:
            return self.c._sync_answer(header, UnknownMemberIdError.code, b"")
        gen = req["generation_id"]
        if gen != g.generation:
            return self.c._sync_answer(header, IllegalGenerationError.code, b"")
        if g.state == "PreparingRebalance":
            return self.c._sync_answer(header, RebalanceInProgressError.code, b"")
        m.last_seen = time.monotonic()
        if m.member_id == g.leader and g.state == "CompletingRebalance":
            given = {a["member_id"]: bytes(a["assignment"] or b"") for a in req["assignments"]}
            for mid, mm in g.members.items():
                mm.assignment = given.get(mid, b"")
            g.state = "Stable"
            g.synced.set()
            g.publish()
        deadline = time.monotonic() + m.rebalance_timeout_ms / 1000.0
        while g.state == "CompletingRebalance" and g.generation == gen:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(g.synced.wait(), min(remaining, 0.5))
            except TimeoutError:
                pass
        if g.generation != gen or g.state != "Stable" or m.member_id not in g.members:
            return self.c._sync_answer(header, RebalanceInProgressError.code, b"")
        return self.c._sync_answer(header, 0, m.assignment)

    @staticmethod
    def heartbeat(g: ClassicGroup, member_id: str, generation: int) -> int:
        m = g.members.get(member_id)
        if m is None:
            return UnknownMemberIdError.code
        m.last_seen = time.monotonic()
        m.gm.heartbeat()
        if g.state == "PreparingRebalance":
            return RebalanceInProgressError.code
        if generation != g.generation:
            return IllegalGenerationError.code
        return 0

    @staticmethod
    def check_commit(g: ClassicGroup, member_id: str, generation: int) -> int:
        m = g.members.get(member_id)
        if m is None:
            return UnknownMemberIdError.code
        if generation != g.generation:
            return IllegalGenerationError.code
        if g.state == "CompletingRebalance":
            return RebalanceInProgressError.code
        return 0  # Stable, or PreparingRebalance at the current generation (commit on revoke)

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
