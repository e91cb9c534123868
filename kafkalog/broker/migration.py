"""KIP-848's online migration between classic and consumer groups, as Kafka 4.4's GroupMetadataManager serves it
(``group.consumer.migration.policy``: bidirectional by default, upgrade, downgrade, disabled).

- **Upgrade**: the first ConsumerGroupHeartbeat (epoch 0) to a classic group with members converts it, when the
  policy allows, the group's protocol type is ``consumer``, it has at most ``group.consumer.max.size`` members and
  every member's subscription (the metadata of the group's protocol) and assignment parse as the consumer protocol,
  with no user data in an assignment (a custom assignor's, which the conversion would lose). Each classic member
  becomes a member of the consumer group that uses the classic protocol: its epoch (and the group's epochs) the
  classic generation, its current and target assignment what it was assigned, its JoinGroup's protocols and
  session timeout kept as ClassicMemberMetadata. The joining member then goes on as any heartbeat does (a new
  member: the group epoch goes up and the target assignment is computed again). Otherwise the heartbeat is refused
  with GROUP_ID_NOT_FOUND and Kafka's message ("Cannot upgrade classic group %s to consumer group because ...").
  Both of kafkalog's classic coordinators are converted: ``classic.py``'s groups and the group model's wire members
  (groups.py); a group-model group with members embedded in other processes is refused ("Group %s is not a consumer
  group.", as before KIP-848's migration: those members do not speak the wire protocol).
- **Classic members inside a consumer group**: JoinGroup (v4+: MEMBER_ID_REQUIRED first, with a UUID as Kafka
  names them) updates the member from its ConsumerProtocolSubscription (topics, rack, owned partitions) and answers
  at once with the member epoch as the generation, no leader and no members; SyncGroup answers the partitions the
  coordinator assigned it (ConsumerProtocolAssignment, of the subscription's version); Heartbeat answers
  REBALANCE_IN_PROGRESS when the group epoch moved past the member, while it has partitions to revoke, or when
  partitions it waits for are free; ILLEGAL_GENERATION for another generation; LeaveGroup removes it. Its session
  timeout is its JoinGroup's; it must join again within its rebalance timeout once told to, and sync within it
  after a join, or it is fenced (Kafka's join and sync timers). Commits carry its member epoch as the generation.
- **Downgrade**: when the last member that uses the consumer protocol leaves or is fenced and the members left use
  the classic protocol, and the policy allows, the group becomes a classic group (``classic.py``) at the group
  epoch as its generation, Stable with each member's target assignment, its records replaced by a GroupMetadata
  in one write, and a rebalance starts at once (the members are told REBALANCE_IN_PROGRESS and join again). So
  too when a classic static member's JoinGroup takes the instance id of the last consumer-protocol member: it
  takes that member's place and assignment, and the classic group rebalances only if the subscription changed.

Each conversion is part of the operation that caused it: if its write fails, the group goes back to what it was
(the classic group put back in its coordinator, or the consumer group back in its place).

Loop thread only.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid

from ..client.group import GroupMember, describe_group
from ..errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownServerError,
)
from . import protocol
from .classic import ClassicGroup, ClassicMember
from .consumer_groups import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    ConsumerGroups,
    ConsumerMember,
    HeartbeatError,
    _copy,
    _fingerprint,
    write_error_code,
)

log = logging.getLogger("kafkalog.broker")

# a classic member (one row of a classic group as the upgrade takes it)
#   (member id, instance id, client id, client host, rebalance timeout ms, session timeout ms, [(protocol, metadata)],
#    assignment bytes)


def kafka_uuid() -> str:
    """A new id as Kafka's Uuid.randomUuid().toString() writes it: 16 random bytes in URL-safe base64, unpadded, never
    starting with "-" (Kafka draws again)."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not s.startswith("-"):
            return s


def _version(metadata: bytes) -> int:
    """The ConsumerProtocol version of a member's subscription: its assignment is written in the same (at most 3, the
    newest ConsumerProtocolAssignment), as Kafka's ConsumerProtocol.serializeAssignment does."""
    try:
        return min(protocol.decode_subscription(metadata)["version"], 3)
    except Exception:  # noqa: BLE001  (checked when the member joined)
        return 0


class Migration:
    """Conversions between a group id's classic group and its KIP-848 consumer group, and the classic protocol's
    requests to a consumer group. Loop thread only."""

    def __init__(self, coordinator):
        self.c = coordinator

    @property
    def k(self) -> ConsumerGroups:
        return self.c.consumer

    # -- upgrade -------------------------------------------------------------------------------------------------

    def _refuse_upgrade(self, gid: str, why: str):
        log.info("group %s: cannot upgrade the classic group to a consumer group because %s", gid, why)
        raise HeartbeatError(GroupIdNotFoundError.code,
                             f"Cannot upgrade classic group {gid} to consumer group because {why}.")

    def _classic_rows(self, gid: str):
        """The classic group of ``gid`` as the upgrade takes it: (kind, group, generation, protocol type, protocol,
        rows), or None when it has no member (a KIP-394 member id handed out only: an empty group)."""
        c = self.c
        cg = c.classic.groups.get(gid)
        if cg is not None:
            if not cg.members:
                return None
            rows = [(m.member_id, m.instance_id, m.client_id, c.hosts.get(m.member_id, ""), m.rebalance_timeout_ms,
                     m.session_timeout_ms, list(m.protocols), m.assignment) for m in cg.members.values()]
            return "classic", cg, cg.generation, cg.protocol_type, cg.protocol, rows
        wg = c.groups.get(gid)
        live = {m["member_id"] for m in describe_group(c.s.store, gid)["members"]}
        if wg is None or not wg.members or not live <= set(wg.members):
            # members of the group model in other processes (embedded consumers): not the wire's to move
            log.info("group %s: cannot upgrade the classic group: members of it run embedded in other processes",
                     gid)
            raise HeartbeatError(GroupIdNotFoundError.code, f"Group {gid} is not a consumer group.")
        gm = next(iter(wg.members.values())).gm
        gm.refresh()
        state = gm.state
        rows = []
        for mid, wm in wg.members.items():
            synced = wm.synced_generation == state["generation"]
            rows.append((mid, None, wm.gm.client_id or "", c.hosts.get(mid, ""), wm.rebalance_timeout_ms,
                         wm.session_timeout_ms, list(wm.protocols), wm.assignment if synced else b""))
        return "model", wg, state["generation"], "consumer", state.get("protocol"), rows

    def upgrade(self, gid: str) -> ConsumerGroup:
        """A ConsumerGroupHeartbeat joins ``gid``, a classic group with members: the consumer group it becomes (the
        operation at hand made it: taken back with the classic group restored if its write fails), or Kafka's
        refusal (HeartbeatError)."""
        k = self.k
        if not k.upgrade_enabled:
            self._refuse_upgrade(gid, "online upgrade is disabled")
        taken = self._classic_rows(gid)
        if taken is None:  # an empty classic group: replaced, as Kafka does
            self.c.forget_empty_classic(gid)
            g = k.groups[gid] = ConsumerGroup(gid)
            k._begin(g, created=True)
            return g
        kind, old, generation, protocol_type, selected, rows = taken
        if protocol_type != "consumer":
            self._refuse_upgrade(gid, "the group does not use the consumer embedded protocol")
        if len(rows) > k.max_size:
            self._refuse_upgrade(gid, "the group size exceeds the consumer group maximum size")
        parsed = []
        for row in rows:
            protocols, assignment = row[6], row[7]
            metadata = next((md for n, md in protocols if n == selected), protocols[0][1] if protocols else b"")
            try:
                subscription = protocol.decode_subscription(metadata)
                assigned = protocol.decode_assignment(assignment) if assignment else None
            except Exception as e:  # noqa: BLE001  (bytes a member sent)
                log.warning("group %s: cannot upgrade the classic group: member %s: %s", gid, row[0], e)
                raise HeartbeatError(GroupIdNotFoundError.code, f"Cannot upgrade classic group {gid} to consumer "
                                     "group because the embedded consumer protocol is malformed.") from None
            if assigned is not None and assigned["user_data"]:
                raise HeartbeatError(GroupIdNotFoundError.code, f"Cannot upgrade classic group {gid} to consumer "
                                     "group because an unsupported custom assignor is in use. Please refer to the "
                                     "documentation or switch to a default assignor before re-attempting the "
                                     "upgrade.")
            parsed.append((row, subscription, assigned["assigned_partitions"] if assigned else {}))
        g = ConsumerGroup(gid)
        g.group_epoch = g.assignment_epoch = generation
        now = time.monotonic()
        for row, subscription, assigned_names in parsed:
            mid, instance_id, client_id, host, rebalance_ms, session_ms, protocols, _ = row
            m = ConsumerMember(mid)
            m.epoch = m.previous_epoch = generation
            m.state = STABLE
            m.instance_id = instance_id
            m.rack_id = subscription.get("rack_id")
            m.rebalance_timeout_ms = rebalance_ms
            m.client_id, m.client_host = client_id, host
            m.topic_names = list(subscription["topics"])
            m.classic = (session_ms, tuple(protocols))
            m.last_seen = now
            assigned = {}
            for name, partitions in assigned_names.items():
                meta = k._topic_meta(name)
                if meta is None:
                    continue
                tid, n = meta
                ps = {p for p in partitions if 0 <= p < n}
                if ps:
                    assigned[tid] = ps
            g.members[mid] = m
            if instance_id is not None:
                g.instances[instance_id] = mid
            g.target[mid] = _copy(assigned)
            g.set_current(m, assigned, {})
            m.assigned_at = {(t, p): generation for t, ps in assigned.items() for p in ps}
        k._resolve(g, force=True)
        g.assignor = k.assignor_for(g)
        g.from_classic = True
        g.dirty = set(g.members)
        k.groups[gid] = g
        undo = k._begin(g, created=True)
        durable, restore = self._retire(kind, old)
        undo.on_durable.append(durable)
        undo.on_restore.append(restore)
        log.info("group %s: converted the classic group (generation %d, %d members) to a consumer group", gid,
                 generation, len(g.members))
        return g

    def _retire(self, kind: str, old) -> tuple:
        """Take the classic group ``old`` out of its coordinator (its waiting JoinGroups and SyncGroups answered
        REBALANCE_IN_PROGRESS, as Kafka's conversion answers them): (what to do once the conversion is durable: its
        member files released; what puts it back if the conversion is taken back)."""
        c = self.c
        gid = old.group_id
        if kind == "classic":
            del c.classic.groups[gid]
            if old.phase is not None:
                old.phase.cancel()
            before = old.state
            for m in old.members.values():
                if m.join_fut is not None and not m.join_fut.done():
                    m.join_fut.set_result(RebalanceInProgressError.code)
            old.pending_ids.clear()
            old.state = "Dead"  # a SyncGroup waiting for the generation is answered REBALANCE_IN_PROGRESS
            old.synced.set()

            def durable():
                for m in old.members.values():
                    m.gm._release_member_file()
                    m.gm.close()

            def restore():
                if gid in c.classic.groups or gid in c.consumer.groups:
                    return
                c.classic.groups[gid] = old
                if before == "Stable":
                    old.state = "Stable"
                else:
                    old.state = "Empty"  # (prepare_rebalance goes on from a state other than PreparingRebalance)
                    old.prepare_rebalance()
            return durable, restore
        del c.groups[gid]
        if old.phase is not None:
            old.phase.cancel()
            old.phase = None
        for m in old.members.values():
            if m.join_waiter is not None and not m.join_waiter.done():
                m.join_waiter.set_result(RebalanceInProgressError.code)
        preparing = old.preparing
        old.preparing = True  # a SyncGroup waiting for the generation is answered REBALANCE_IN_PROGRESS

        def durable():
            for m in (*old.members.values(), *old.departed.values()):
                try:
                    m.gm.leave()  # out of state.json, its member file released
                except Exception as e:  # noqa: BLE001  (the file view only)
                    log.warning("group %s: member %s: %s", gid, m.gm.member_id, e)
                    m.gm.close()

        def restore():
            if gid in c.groups or gid in c.consumer.groups:
                return
            c.groups[gid] = old
            old.preparing = preparing
        return durable, restore

    # -- downgrade -----------------------------------------------------------------------------------------------

    def downgrade(self, g: ConsumerGroup, member_id: str, why: str) -> bool:
        """``member_id`` leaves ``g`` or is fenced (the operation at hand): when it is the last member that uses the
        consumer protocol, the others use the classic one and the policy allows, ``g`` becomes a classic group
        and True is returned (its write is the operation's: ``g.converted``)."""
        k = self.k
        leaving = g.members[member_id]
        others = [m for mid, m in g.members.items() if mid != member_id]
        if leaving.classic is not None or not others or any(m.classic is None for m in others):
            return False
        gid = g.group_id
        if not k.downgrade_enabled:
            log.info("group %s: cannot downgrade the consumer group to a classic group because the online "
                     "downgrade is disabled", gid)
            return False
        return self._convert(g, others, True, member_id, f"member {member_id} {why}: downgraded from consumer to "
                             "classic for member leaving")

    def _convert(self, g: ConsumerGroup, members: list, rebalance: bool, left: str | None, why: str) -> bool:
        """``g`` becomes the classic group of ``members`` (the operation at hand's write: ``g.converted``), which
        rebalances at once when ``rebalance``; False when it cannot (no protocol in common: it stays as it is)."""
        k = self.k
        gid = g.group_id
        try:
            cg = self._classic_group(g, members)
        except Exception as e:  # noqa: BLE001  (no protocol in common: it stays a consumer group)
            log.warning("group %s: cannot downgrade the consumer group: %s", gid, e)
            return False
        k._mutating()
        del k.groups[gid]
        hosts = self.c.hosts
        left_host = hosts.pop(left, None) if left is not None else None
        g.converted = cg
        self.c.classic.groups[gid] = cg
        if rebalance:
            cg.prepare_rebalance()
        log.info("group %s: %s (generation %d, %d members)", gid, why, cg.generation, len(cg.members))

        def durable():
            cg.publish()

        def restore():
            if self.c.classic.groups.get(gid) is cg:
                del self.c.classic.groups[gid]
            if cg.phase is not None:
                cg.phase.cancel()
            for m in cg.members.values():
                if m.join_fut is not None and not m.join_fut.done():
                    m.join_fut.set_result(RebalanceInProgressError.code)
                m.gm.close()
            for m in g.members.values():
                hosts[m.member_id] = m.client_host
            if left_host is not None:
                hosts[left] = left_host
            k.groups[gid] = g
        k._undo.on_durable.append(durable)
        k._undo.on_restore.append(restore)
        return True

    def _classic_group(self, g: ConsumerGroup, members: list) -> ClassicGroup:
        """Kafka's ClassicGroup.fromConsumerGroup: Stable at the group epoch, the members in their order (the first
        leads), each with its target assignment in the consumer protocol, the protocol every member supports that
        most prefer."""
        c = self.c
        gid = g.group_id
        cg = ClassicGroup(c, gid)
        cg.generation = g.group_epoch
        cg.protocol_type = "consumer"
        cg.state = "Stable"
        now = time.monotonic()
        for i, m in enumerate(members):
            session_ms, protocols = m.classic
            gm = GroupMember(c.s.store, gid, client_id=m.client_id, strategies=[n for n, _ in protocols],
                             session_timeout_ms=session_ms, topic_partitions=c._topic_partitions)
            gm.member_id = m.member_id
            cm = ClassicMember(m.member_id, gm, m.client_id, m.instance_id)
            cm.protocols = list(protocols)
            cm.session_timeout_ms = session_ms
            cm.rebalance_timeout_ms = m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else session_ms
            cm.last_seen = now
            cm.joined_at = now - len(members) + i
            cm.topics = sorted(m.topic_names)
            cg.members[m.member_id] = cm
            if m.instance_id is not None:
                cg.instances[m.instance_id] = m.member_id
            c.hosts[m.member_id] = m.client_host
        cg.protocol = cg.select_protocol(list(cg.members.values()))
        if cg.protocol is None:
            raise ValueError("its members have no protocol in common")
        cg.leader = members[0].member_id
        names = {tid: name for name, (tid, _) in (g.metadata or {}).items()}
        for cm in cg.members.values():
            target = g.target.get(cm.member_id, {})
            metadata = next((md for n, md in cm.protocols if n == cg.protocol), b"")
            cm.assignment = protocol.encode_assignment(
                {names[t]: sorted(ps) for t, ps in sorted(target.items(), key=lambda x: names.get(x[0], ""))
                 if t in names}, None, _version(metadata))
        cg.synced.set()
        return cg

    # -- the classic protocol's requests to a consumer group ------------------------------------------------------

    @staticmethod
    def _member(g: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember."""
        if instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                raise HeartbeatError(UnknownMemberIdError.code,
                                     f"Member {member_id} is not a member of group {g.group_id}.")
            return m
        m = g.members.get(g.instances.get(instance_id, ""))
        if m is None:
            raise HeartbeatError(UnknownMemberIdError.code,
                                 f"Member with instance id {instance_id} is not a member of group {g.group_id}.")
        if m.member_id != member_id:
            raise HeartbeatError(FencedInstanceIdError.code, f"Static member {member_id} with instance id "
                                 f"{instance_id} was fenced by member {m.member_id}.")
        return m

    @staticmethod
    def _classic_member(g: ConsumerGroup, member_id: str, instance_id: str | None, generation: int):
        m = Migration._member(g, member_id, instance_id)
        if m.classic is None:
            raise HeartbeatError(UnknownMemberIdError.code, f"Member {m.member_id} does not use the classic "
                                 "protocol.")
        if generation != m.epoch:
            raise HeartbeatError(IllegalGenerationError.code, f"The request generation id {generation} is not "
                                 f"equal to the member epoch {m.epoch} of member {m.member_id}.")
        return m

    @staticmethod
    def _supports(g: ConsumerGroup, protocol_type: str, names) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: a consumer, offering a protocol every classic member
        offers."""
        if protocol_type != "consumer":
            return False
        if not g.members:
            return bool(names)
        classic = [m for m in g.members.values() if m.classic is not None]
        return any(all(any(n == x for x, _ in m.classic[1]) for m in classic) for n in names)

    def _owned(self, g: ConsumerGroup, subscription: dict) -> list:
        """The owned partitions of a ConsumerProtocolSubscription (v1+; v0: none) by topic id."""
        out = []
        for tp in subscription.get("owned_partitions") or ():
            meta = (g.metadata or {}).get(tp["topic"]) or self.k._topic_meta(tp["topic"])
            if meta is not None:
                out.append({"topic_id": meta[0], "partitions": list(tp["partitions"])})
        return out

    def join(self, ctx, header, req, g: ConsumerGroup):
        """JoinGroup of a classic member to the consumer group ``g`` (Kafka's classicGroupJoinToConsumerGroup):
        answered once its records are durable."""
        c, k = self.c, self.k
        request_id = req["member_id"] or ""
        instance_id = req.get("group_instance_id")
        unknown = not request_id
        member_id = request_id or kafka_uuid()
        if k.migration_disabled:
            log.info("group %s: cannot join the consumer group with the classic protocol because the group "
                     "migration is disabled", g.group_id)
            return c._join_error(header, InconsistentGroupProtocolError.code, request_id)
        if len(g.members) >= k.max_size and member_id not in g.members:
            return c._join_error(header, GroupMaxSizeReachedError.code, request_id)
        protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in req["protocols"]]
        if not self._supports(g, req["protocol_type"], [n for n, _ in protocols]):
            log.info("group %s: member %s's protocols are not supported", g.group_id, member_id)
            return c._join_error(header, InconsistentGroupProtocolError.code, request_id)
        if unknown and instance_id is None and header.api_version >= 4:
            log.info("group %s: dynamic member with unknown member id joins the consumer group: member id %s",
                     g.group_id, member_id)
            return c._join_error(header, MemberIdRequiredError.code, member_id)
        try:
            subscription = protocol.decode_subscription(protocols[0][1])
        except Exception as e:  # noqa: BLE001  (Kafka: an IllegalStateException, UNKNOWN_SERVER_ERROR)
            log.warning("group %s: JoinGroup from %s: %s", g.group_id, member_id, e)
            return c._join_error(header, UnknownServerError.code, request_id)
        k._undo = None
        undo = k._begin(g)
        try:
            answer = self._join(ctx, req, g, member_id, unknown, instance_id, protocols, subscription)
        except HeartbeatError as e:
            k._undo = None
            return c._join_error(header, e.code, request_id)
        fut = k._commit(undo)
        return self._answer_join(header, answer, fut, request_id)

    async def _answer_join(self, header, answer: dict, fut, request_id: str):
        if fut is not None:
            try:
                await fut
            except Exception as e:  # noqa: BLE001  (a failed write: the group is back as before; the client retries)
                log.error("group %s: JoinGroup: %s", answer["member_id"], e)
                return self.c._join_error(header, write_error_code(e), request_id)
        return protocol.encode_response(11, header.api_version, header.correlation_id, answer)

    def _join(self, ctx, req, g: ConsumerGroup, member_id: str, unknown: bool, instance_id, protocols,
              subscription) -> dict:
        k = self.k
        gid = g.group_id
        replaced = None
        if instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                m = ConsumerMember(member_id)
                log.info("group %s: member %s joins the consumer group with the classic protocol", gid, member_id)
            else:
                k._touch(m)
        else:
            existing = g.members.get(g.instances.get(instance_id, ""))
            if existing is None:
                m = g.members.get(member_id) or ConsumerMember(member_id)
                k._touch(m)
            elif unknown:  # a static member that restarted: the new member id takes its place and assignment
                k._touch(existing)
                m = ConsumerGroups._replacement(existing, member_id)
                replaced = existing
            elif existing.member_id != member_id:
                raise HeartbeatError(FencedInstanceIdError.code, f"Static member {member_id} with instance id "
                                     f"{instance_id} was fenced by member {existing.member_id}.")
            else:
                m = existing
                k._touch(m)
        new = member_id not in g.members
        before = None if new else _fingerprint(m)
        old_sub = None if new else m.subscription()
        if instance_id is not None:
            m.instance_id = instance_id
        if subscription.get("rack_id") is not None:
            m.rack_id = subscription["rack_id"]
        rebalance_ms = req.get("rebalance_timeout_ms", -1)
        if rebalance_ms is not None and rebalance_ms != -1:
            m.rebalance_timeout_ms = rebalance_ms
        m.topic_names = list(subscription["topics"])
        m.client_id = ctx.client_id or ""
        m.client_host = "/" + ctx.connection.peer_host
        m.classic = (req["session_timeout_ms"], tuple(protocols))
        m.last_seen = time.monotonic()
        if replaced is not None:
            k._mutating()
            g.removed.add(replaced.member_id)
            del g.members[replaced.member_id]
            g.target[member_id] = g.target.pop(replaced.member_id, {})
            g.set_current(replaced, {}, {})
            self.c.hosts.pop(replaced.member_id, None)
            log.info("group %s: static member with instance id %s joins again with the classic protocol: member %s "
                     "replaces %s", gid, instance_id, member_id, replaced.member_id)
        if g.members.get(member_id) is not m or (m.instance_id is not None
                                                  and g.instances.get(m.instance_id) != member_id):
            k._mutating()
            g.members[member_id] = m
            if m.instance_id is not None:
                g.instances[m.instance_id] = member_id
        if replaced is not None:
            g.set_current(m, _copy(replaced.assigned), {})
            m.epoch, m.previous_epoch, m.state = replaced.epoch, replaced.previous_epoch, replaced.state
        bump = (new and replaced is None) or (old_sub is not None and old_sub != m.subscription())
        if bump:
            g.group_epoch += 1
        if k._resolve(g, force=bump):
            g.group_epoch += 1
        # Kafka's validateOnlineDowngradeWithReplacedMember: the static member replaced was the last one that uses
        # the consumer protocol: the group becomes a classic one, rebalancing only if the subscription changed
        downgrade = (replaced is not None and replaced.classic is None and k.downgrade_enabled
                     and all(x.classic is not None for x in g.members.values()))
        if not downgrade and g.group_epoch > g.assignment_epoch:
            k._assign(g)
        if not (downgrade and bump):
            k._reconcile(g, m, self._owned(g, subscription))
        if before is None or _fingerprint(m) != before:
            g.dirty.add(member_id)
        if downgrade and self._convert(g, list(g.members.values()), bump, None, f"static member {member_id} "
                                       f"replaced {replaced.member_id}: downgraded from consumer to classic"):
            self.c.hosts[member_id] = m.client_host
            return {"throttle_time_ms": 0, "error_code": 0, "generation_id": m.epoch, "protocol_type": "consumer",
                    "protocol_name": protocols[0][0], "leader": "", "skip_assignment": False,
                    "member_id": member_id, "members": []}
        m.join_deadline = None
        timeout_ms = rebalance_ms if rebalance_ms is not None and rebalance_ms > 0 else req["session_timeout_ms"]
        m.sync_deadline = time.monotonic() + timeout_ms / 1000.0
        self.c.hosts[member_id] = m.client_host
        return {"throttle_time_ms": 0, "error_code": 0, "generation_id": m.epoch, "protocol_type": "consumer",
                "protocol_name": protocols[0][0], "leader": "", "skip_assignment": False, "member_id": member_id,
                "members": []}

    def sync(self, header, req, g: ConsumerGroup):
        """SyncGroup of a classic member of the consumer group ``g``: the partitions assigned to it, once the
        group's pending writes are durable (Kafka's classicGroupSyncToConsumerGroup)."""
        c = self.c
        try:
            m = self._classic_member(g, req["member_id"], req.get("group_instance_id"), req["generation_id"])
            ptype, pname = req.get("protocol_type"), req.get("protocol_name")
            if ptype is not None and ptype != "consumer":
                raise HeartbeatError(InconsistentGroupProtocolError.code)
            if pname is not None and pname != m.classic[1][0][0]:
                raise HeartbeatError(InconsistentGroupProtocolError.code)
            self._rebalance_check(g, m)
        except HeartbeatError as e:
            return c._sync_answer(header, e.code, b"")
        m.sync_deadline = None
        m.last_seen = time.monotonic()
        names = {tid: name for name, (tid, _) in (g.metadata or {}).items()}
        assignment = protocol.encode_assignment(
            {names[t]: sorted(ps) for t, ps in sorted(m.assigned.items(), key=lambda x: names.get(x[0], ""))
             if t in names}, None, _version(m.classic[1][0][1]))
        return self._answer_sync(header, g.pending, assignment, ptype, pname)

    async def _answer_sync(self, header, fut, assignment: bytes, ptype, pname):
        if fut is not None:
            try:
                await fut
            except Exception as e:  # noqa: BLE001  (a failed write of the group: the member joins again)
                return self.c._sync_answer(header, write_error_code(e), b"")
        return self.c._sync_answer(header, 0, assignment, ptype, pname)

    @staticmethod
    def _waiting_on_unreleased(g: ConsumerGroup, m: ConsumerMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: a partition of its target that another member still holds."""
        if m.state != UNRELEASED:
            return False
        for tid, ps in g.target.get(m.member_id, {}).items():
            have = m.assigned.get(tid, ())
            for p in ps:
                if p not in have and g.owners.get((tid, p), m.member_id) != m.member_id:
                    return True
        return False

    def _rebalance_check(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        """Kafka's throwIfRebalanceInProgress (SyncGroup): the group epoch moved past the member, which is not
        revoking: it must join again (within its rebalance timeout)."""
        if g.group_epoch > m.epoch and m.state != UNREVOKED:
            self._join_timer(m)
            raise HeartbeatError(RebalanceInProgressError.code, f"A new rebalance is triggered in group "
                                 f"{g.group_id} and member {m.member_id} should rejoin to catch up.")

    @staticmethod
    def _join_timer(m: ConsumerMember) -> None:
        if m.join_deadline is None:
            m.join_deadline = time.monotonic() + m.rebalance_timeout_ms / 1000.0

    def heartbeat(self, g: ConsumerGroup, member_id: str, generation: int, instance_id: str | None) -> int:
        """Heartbeat of a classic member of ``g`` (Kafka's classicGroupHeartbeatToConsumerGroup): REBALANCE_IN_PROGRESS
        when it must join again (the group epoch moved past it, it has partitions to revoke, or partitions it
        waits for are free)."""
        try:
            m = self._classic_member(g, member_id, instance_id, generation)
        except HeartbeatError as e:
            return e.code
        m.last_seen = time.monotonic()
        if m.epoch < g.group_epoch or m.state == UNREVOKED or (m.state == UNRELEASED
                                                               and not self._waiting_on_unreleased(g, m)):
            self._join_timer(m)
            return RebalanceInProgressError.code
        return 0

    def leave(self, g: ConsumerGroup, asked: list) -> tuple:
        """A LeaveGroup to ``g`` (Kafka's classicGroupLeaveToConsumerGroup: any member, by member id or a static
        member's instance id): each asked member's error code, and the write to wait for (or None). The members
        found leave in one operation, as on Kafka: the group epoch goes up once for the batch, and the downgrade to
        a classic group is decided by the members that stay."""
        k = self.k
        codes, leaving = [], {}
        for a in asked:
            member_id, instance_id = a["member_id"], a.get("group_instance_id")
            if instance_id is None:
                m = g.members.get(member_id)
            else:
                m = g.members.get(g.instances.get(instance_id, ""))
                if m is not None and member_id and member_id != m.member_id:
                    codes.append(FencedInstanceIdError.code)
                    continue
            if m is None:
                codes.append(UnknownMemberIdError.code)
                continue
            codes.append(0)
            reason = a.get("reason")
            leaving[m.member_id] = (m, "left the group through LeaveGroup" + (f" ({reason})" if reason else ""))
        if not leaving:
            return codes, None
        k._undo = None
        undo = k._begin(g)
        # a member that uses the consumer protocol last: the downgrade is decided when it goes, by those that stay
        order = sorted(leaving.values(), key=lambda x: x[0].classic is None)
        for i, (m, why) in enumerate(order):
            k.remove(g, m.member_id, why, last=i == len(order) - 1)
        return codes, k._commit(undo)


__all__ = ["Migration"]
