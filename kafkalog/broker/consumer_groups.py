"""KIP-848's consumer group protocol (``group.protocol=consumer``): ConsumerGroupHeartbeat and ConsumerGroupDescribe,
with the assignment computed here, on the broker, as Kafka's group coordinator does.

Messages (flexible from v0, no tagged field is needed in the answers)::

    ConsumerGroupHeartbeat Request (Version: 0-1) => GroupId MemberId MemberEpoch InstanceId RackId RebalanceTimeoutMs
        [SubscribedTopicNames] SubscribedTopicRegex(v1) ServerAssignor [TopicPartitions => TopicId [Partitions]]
    ConsumerGroupHeartbeat Response => ThrottleTimeMs ErrorCode ErrorMessage MemberId MemberEpoch HeartbeatIntervalMs
        Assignment => [TopicPartitions => TopicId [Partitions]]   (null: unchanged)

Epochs, as Kafka's ``GroupMetadataManager``:

- the **group epoch** goes up when a member joins, leaves, changes its subscription, or the subscribed topics'
  metadata (partition counts, a regex's matches) change;
- the **assignment epoch** is the group epoch the target assignment was computed for (the assignor ``uniform`` or
  ``range`` runs in the heartbeat that sees group epoch > assignment epoch);
- a **member epoch** reaches the assignment epoch when the member is reconciled: partitions it must give up are
  pending revocation (its epoch stays until its owned partitions no longer list them, state UNREVOKED_PARTITIONS,
  fenced after its rebalance timeout), partitions another member still holds are withheld (UNRELEASED_PARTITIONS).

A request's epoch: 0 joins (or rejoins after FENCED_MEMBER_EPOCH), > 0 heartbeats, -1 leaves, -2 is a static
member's temporary leave (its instance id and assignment kept until its session times out; a new member with the
same instance id replaces it). A heartbeat at the previous epoch whose owned partitions are a subset of the
assignment is taken (the answer that bumped the epoch was lost); any other epoch mismatch is FENCED_MEMBER_EPOCH.

Regex subscriptions (v1 ``SubscribedTopicRegex``) are Kafka's RE2/J syntax, evaluated here with Python's ``re``
(``fullmatch`` against topic names, internal topics excluded): RE2/J refuses look-around and back-references, which
``re`` accepts; such a pattern is refused here too (INVALID_REGULAR_EXPRESSION), the other differences of the two
engines (Unicode classes, possessive quantifiers) are not checked. Matches are refreshed at each heartbeat of the
group at most once a second (Kafka: when its metadata image changes).

Group state is written to ``__consumer_offsets`` as Kafka writes it (ConsumerGroupMetadata, MemberMetadata,
TargetAssignment, CurrentMemberAssignment records: groupstate.py): each change marks its members ``dirty`` (or
``removed``) and a heartbeat is answered once their records are durable; the broker loads the groups when it
starts. An operation (a heartbeat, a leave, the expiry of silent members) and the write of its records are one
unit, as in Kafka's coordinator runtime: if the write fails, the group goes back to what it was before the
operation (``Undo``: its fields and the members the operation touched), the writes of the group queued behind the
failed one are refused unwritten (``WriteChain``: they were computed from the state taken back), an answer that
changed nothing waits for the group's pending write, and the member is answered NOT_COORDINATOR (Kafka's answer
to an append that failed with a storage error), so nothing answered disagrees with what a restart loads.

KIP-848's online migration (``group.consumer.migration.policy``, migration.py): the first heartbeat (epoch 0) to a
classic group with members converts it when the policy allows, its classic members staying in the consumer group
as members that use the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup: their ``classic`` is set);
when the last member that uses the consumer protocol leaves (or is fenced) and the policy allows, the group goes
back to a classic one. An empty group of the other kind is replaced, as Kafka does.

Loop thread only.
"""

from __future__ import annotations

import base64
import logging
import re
import time
import uuid

from ..errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    NotCoordinatorError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
)

log = logging.getLogger("kafkalog.broker")

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
STABLE, UNREVOKED, UNRELEASED = "STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"
METADATA_REFRESH_S = 1.0
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_RE2_REFUSES = re.compile(r"\(\?[=!<]|\(\?P=|\\[1-9]")  # look-around, back-references: not RE2


class HeartbeatError(Exception):
    """A heartbeat refused with a Kafka error code and message."""

    def __init__(self, code: int, message: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message


def write_error_code(e: BaseException) -> int:
    """The error a member gets when its group's records could not be written: Kafka's mapping of a failed append
    (appendGroupMetadataErrorToResponseError, handleOperationException: KAFKA_STORAGE_ERROR -> NOT_COORDINATOR; a
    timeout or a missing partition -> COORDINATOR_NOT_AVAILABLE). A write refused because an earlier one of its
    group failed is NOT_COORDINATOR too."""
    if isinstance(e, (OSError, NotCoordinatorError)):
        return NotCoordinatorError.code
    return CoordinatorNotAvailableError.code


def topic_uuid(topic_id: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


Assignment = dict  # {topic id (uuid.UUID): set of partitions}


def _copy(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items() if ps}


def _count(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


class ConsumerMember:
    __slots__ = ("member_id", "instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "topic_names", "topic_regex", "server_assignor", "epoch", "previous_epoch", "state", "assigned",
                 "pending_revocation", "assigned_at", "last_seen", "revoke_deadline", "classic", "join_deadline",
                 "sync_deadline")

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.instance_id: str | None = None
        self.rack_id: str | None = None
        self.client_id = ""
        self.client_host = ""
        self.rebalance_timeout_ms = 300000
        self.topic_names: list[str] = []
        self.topic_regex: str | None = None
        self.server_assignor: str | None = None
        self.epoch = 0
        self.previous_epoch = -1
        self.state = STABLE
        self.assigned: Assignment = {}
        self.pending_revocation: Assignment = {}
        self.assigned_at: dict[tuple, int] = {}  # (topic id, partition) -> member epoch it was assigned at
        self.last_seen = time.monotonic()
        self.revoke_deadline: float | None = None
        # a member that uses the classic protocol (migration.py): (session timeout ms, ((protocol, metadata), ...)),
        # as Kafka's ClassicMemberMetadata; None for a member that heartbeats with ConsumerGroupHeartbeat
        self.classic: tuple | None = None
        # a classic member's timers (Kafka's join and sync timeouts): it must join again once told to rebalance,
        # and sync after its join, each within its rebalance timeout, or it is fenced
        self.join_deadline: float | None = None
        self.sync_deadline: float | None = None

    def session_timeout_ms(self, default: int) -> int:
        return self.classic[0] if self.classic is not None else default

    def subscription(self) -> tuple:
        return tuple(sorted(self.topic_names)), self.topic_regex


def _fingerprint(m: ConsumerMember) -> tuple:
    """What a member's records hold (a heartbeat that changes none of it writes nothing)."""
    return (m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(m.topic_names), m.topic_regex,
            m.rebalance_timeout_ms, m.server_assignor, m.classic, m.epoch, m.previous_epoch, m.state,
            frozenset((t, frozenset(ps)) for t, ps in m.assigned.items()),
            frozenset((t, frozenset(ps)) for t, ps in m.pending_revocation.items()))


class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.instances: dict[str, str] = {}  # static members: instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        self.owners: dict[tuple, str] = {}  # (topic id, partition) -> the member holding it (assigned or revoking)
        self.metadata: dict[str, tuple] | None = None  # subscribed topic name -> (topic id, partitions)
        self.metadata_checked = 0.0
        self.regex_topics: dict[str, frozenset] = {}
        self.assignor = ""
        self.assigned_ms = 0  # when the target assignment was last computed (AssignmentTimestamp)
        # changed since the group's records were last written (groupstate.py): members whose records to write,
        # members whose records to tombstone
        self.dirty: set[str] = set()
        self.removed: set[str] = set()
        # the writes of the group's records not yet known durable (groupstate.py's ordered worker): the latest one,
        # and the chain they belong to (the first that fails breaks it: the ones after it write nothing)
        self.pending = None
        self.chain = WriteChain()
        # migration.py: the operation at hand made the group from a classic one (its GroupMetadata is tombstoned by
        # the write of its records), or turned it into this classic group (the write is the classic group's record
        # and tombstones of every record of this one)
        self.from_classic = False
        self.converted = None

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        for m in self.members.values():
            if m.epoch != self.assignment_epoch or m.state != STABLE:
                return "Reconciling"
        return "Stable"

    def set_current(self, m: ConsumerMember, assigned: Assignment, pending: Assignment) -> None:
        for tid, ps in list(m.assigned.items()) + list(m.pending_revocation.items()):
            for p in ps:
                if self.owners.get((tid, p)) == m.member_id:
                    del self.owners[(tid, p)]
        m.assigned, m.pending_revocation = assigned, pending
        for tid, ps in list(assigned.items()) + list(pending.items()):
            for p in ps:
                self.owners[(tid, p)] = m.member_id


class WriteChain:
    """The group's writes since its last failed one: ``failed`` is set by the worker thread when one of them fails,
    and every later write of the chain is then refused without writing (they were computed from a state that is
    being taken back), as Kafka's coordinator fails the writes after a failed append and reverts to what is
    committed."""

    __slots__ = ("failed",)

    def __init__(self):
        self.failed = False


_MEMBER_SLOTS = tuple(s for s in ConsumerMember.__slots__)


def _member_state(m: ConsumerMember) -> tuple:
    out = []
    for slot in _MEMBER_SLOTS:
        v = getattr(m, slot)
        if slot in ("assigned", "pending_revocation"):
            v = {t: set(ps) for t, ps in v.items()}
        elif isinstance(v, (dict, list)):
            v = v.copy()
        out.append(v)
    return tuple(out)


class Undo:
    """A consumer group as it was before one operation (a heartbeat, a leave, an expiry): what a failed write of
    the operation's records puts back, so the group in memory is again what ``__consumer_offsets`` holds. The
    group's own fields are kept at once, its containers (members, instances, targets, owners) when the operation
    first changes one of them (``keep``: shallow copies, the assignors and reconciliation replace what they change;
    a steady heartbeat changes none), each member the operation changes when it is first touched (``touch``)."""

    __slots__ = ("g", "created", "chain", "scalars", "kept", "members", "instances", "target", "owners", "dirty",
                 "removed", "saved", "hosts", "on_durable", "on_restore")

    def __init__(self, g: ConsumerGroup, created: bool, hosts: dict):
        self.g = g
        self.created = created  # the operation made the group: taking it back removes it
        self.chain = g.chain
        self.scalars = (g.group_epoch, g.assignment_epoch, g.metadata, g.metadata_checked, g.regex_topics,
                        g.assignor, g.assigned_ms)
        self.kept = False
        self.dirty, self.removed = set(g.dirty), set(g.removed)
        self.saved: dict[int, tuple] = {}
        self.hosts = hosts
        # what an operation that converted the group does once its write is durable, or when it is taken back
        # (migration.py: the classic group's member files released, or the classic group put back)
        self.on_durable: list = []
        self.on_restore: list = []

    def keep(self) -> None:
        if not self.kept:
            g = self.g
            self.members, self.instances, self.target, self.owners = (dict(g.members), dict(g.instances),
                                                                      dict(g.target), dict(g.owners))
            self.kept = True

    def touch(self, m: ConsumerMember) -> None:
        if id(m) not in self.saved:
            self.saved[id(m)] = (m, _member_state(m), self.hosts.get(m.member_id))

    def restore(self, groups: dict) -> None:
        g = self.g
        (g.group_epoch, g.assignment_epoch, g.metadata, g.metadata_checked, g.regex_topics, g.assignor,
         g.assigned_ms) = self.scalars
        if self.kept:
            g.members, g.instances, g.target, g.owners = self.members, self.instances, self.target, self.owners
        g.dirty, g.removed = self.dirty, self.removed
        for m, state, host in self.saved.values():
            for slot, v in zip(_MEMBER_SLOTS, state):
                setattr(m, slot, v)
            if host is not None and m.member_id in g.members:
                self.hosts[m.member_id] = host
        g.pending = None
        g.chain = WriteChain()
        g.from_classic, g.converted = False, None
        if self.created and groups.get(g.group_id) is g:
            del groups[g.group_id]
        for fn in reversed(self.on_restore):
            fn()


# -- assignors ------------------------------------------------------------------------------------------------------

def uniform_assign(members: dict, subscriptions: dict, partitions: dict, current: dict) -> dict:
    """Kafka's UniformAssignor: balanced (member counts differ by at most one among members of one subscription) and
    sticky (a member keeps what it had, up to its quota). ``subscriptions``: member -> set of topic ids;
    ``partitions``: topic id -> count; ``current``: member -> its target assignment so far. Members are taken in id
    order and partitions in topic-name order (Kafka iterates hash sets: which member gets which new partition may
    differ; the counts and what stays do not)."""
    order = sorted(members)
    out: dict[str, Assignment] = {m: {} for m in order}
    if not order:
        return out
    homogeneous = len({frozenset(subscriptions[m]) for m in order}) == 1
    topics = sorted(set().union(*(subscriptions[m] for m in order)), key=lambda t: members[order[0]].get(t, str(t)))
    if homogeneous:
        total = sum(partitions.get(t, 0) for t in topics)
        quota_min, extra = divmod(total, len(order))
        taken = set()
        unfilled = []
        for m in order:
            quota = quota_min + (1 if extra > 0 else 0)
            if extra > 0:
                extra -= 1
            for tid in sorted(current.get(m, {}), key=str):
                if tid not in subscriptions[m]:
                    continue
                for p in sorted(current[m][tid]):
                    if p < partitions.get(tid, 0) and quota > 0 and (tid, p) not in taken:
                        out[m].setdefault(tid, set()).add(p)
                        taken.add((tid, p))
                        quota -= 1
            if quota > 0:
                unfilled.append([m, quota])
        free = [(t, p) for t in topics for p in range(partitions.get(t, 0)) if (t, p) not in taken]
        i = 0
        for entry in unfilled:
            m, quota = entry
            while quota > 0 and i < len(free):
                t, p = free[i]
                out[m].setdefault(t, set()).add(p)
                i += 1
                quota -= 1
        for t, p in free[i:]:  # more members got an extra partition than were free: the rest go to the least loaded
            m = min(order, key=lambda x: (_count(out[x]), x))
            out[m].setdefault(t, set()).add(p)
        return out
    # heterogeneous subscriptions: keep what each member had (while it stays balanced), then the rest to the least
    # loaded subscriber of each partition
    taken = set()
    for t in topics:
        subs = [m for m in order if t in subscriptions[m]]
        n = partitions.get(t, 0)
        if not subs:
            continue
        for m in subs:
            for p in sorted(current.get(m, {}).get(t, ())):
                if p < n and (t, p) not in taken:
                    out[m].setdefault(t, set()).add(p)
                    taken.add((t, p))
    for t in topics:
        subs = [m for m in order if t in subscriptions[m]]
        for p in range(partitions.get(t, 0)):
            if (t, p) in taken or not subs:
                continue
            m = min(subs, key=lambda x: (_count(out[x]), x))
            out[m].setdefault(t, set()).add(p)
            taken.add((t, p))
    # balance: move partitions from the most to the least loaded member that subscribes to the topic
    for _ in range(sum(partitions.values())):
        moved = False
        for hi in sorted(order, key=lambda x: -_count(out[x])):
            for t in sorted(out[hi], key=str):
                for p in sorted(out[hi][t]):
                    lo = min((m for m in order if t in subscriptions[m]), key=lambda x: (_count(out[x]), x))
                    if _count(out[hi]) - _count(out[lo]) > 1:
                        out[hi][t].discard(p)
                        out[lo].setdefault(t, set()).add(p)
                        moved = True
                        break
                if moved:
                    break
            if moved:
                break
        if not moved:
            break
    return {m: {t: ps for t, ps in a.items() if ps} for m, a in out.items()}


def range_assign(members: dict, subscriptions: dict, partitions: dict, current: dict) -> dict:
    """Kafka's server-side RangeAssignor: per topic, its subscribers in member id order each take a contiguous
    range, the first ``count % members`` one more."""
    out: dict[str, Assignment] = {m: {} for m in members}
    for t in sorted({t for s in subscriptions.values() for t in s}, key=str):
        subs = sorted(m for m in members if t in subscriptions[m])
        n = partitions.get(t, 0)
        if not subs or not n:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            k = per + (1 if i < extra else 0)
            if k:
                out[m][t] = set(range(start, start + k))
            start += k
    return out


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}


class ConsumerGroups:
    """The broker's KIP-848 consumer groups. Loop thread only."""

    def __init__(self, coordinator):
        self.c = coordinator
        cfg = coordinator.s.config
        self.groups: dict[str, ConsumerGroup] = {}
        self._undo: Undo | None = None  # the operation at hand's (loop thread)
        self.max_size = cfg["group.consumer.max.size"]
        self.assignors = [a.strip() for a in cfg["group.consumer.assignors"].split(",") if a.strip()]
        policy = cfg["group.consumer.migration.policy"].strip().lower()
        self.upgrade_enabled = policy in ("bidirectional", "upgrade")
        self.downgrade_enabled = policy in ("bidirectional", "downgrade")
        self.migration_disabled = policy == "disabled"

    # -- topics ---------------------------------------------------------------------------------------------------

    def _topic_meta(self, name: str):
        n = self.c.s.partitions(name)
        if not n:
            return None
        try:
            return topic_uuid(self.c.s.store.topic_id(name)), n
        except Exception:  # noqa: BLE001  (deleted meanwhile)
            return None

    def _resolve(self, g: ConsumerGroup, force: bool) -> bool:
        """The subscribed topics' metadata (and regex matches), refreshed at most once a second; True when changed."""
        now = time.monotonic()
        if not force and now - g.metadata_checked < METADATA_REFRESH_S:
            return False
        g.metadata_checked = now
        names = set()
        regexes = {m.topic_regex for m in g.members.values() if m.topic_regex}
        all_topics = None
        if regexes:
            all_topics = [t for t in self.c.s.store.topics() if t not in INTERNAL_TOPICS]
        new_regex = {}
        for rx in regexes:
            try:
                pat = re.compile(rx)
                new_regex[rx] = frozenset(t for t in all_topics if pat.fullmatch(t))
            except re.error:
                new_regex[rx] = frozenset()
        g.regex_topics = new_regex
        for m in g.members.values():
            names.update(m.topic_names)
            if m.topic_regex:
                names.update(new_regex.get(m.topic_regex, ()))
        meta = {}
        for name in sorted(names):
            tm = self._topic_meta(name)
            if tm is not None:
                meta[name] = tm
        changed = meta != g.metadata
        g.metadata = meta
        return changed

    def _member_topics(self, g: ConsumerGroup, m: ConsumerMember) -> set:
        names = set(m.topic_names)
        if m.topic_regex:
            names |= g.regex_topics.get(m.topic_regex, frozenset())
        meta = g.metadata or {}
        return {meta[n][0] for n in names if n in meta}

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------------------------

    def validate(self, req, version: int) -> None:
        def empty(value, text):
            if value is not None and not value.strip():
                raise HeartbeatError(InvalidRequestError.code, text)
        empty(req["group_id"], "GroupId can't be empty.")
        empty(req["instance_id"], "InstanceId can't be empty.")
        empty(req["rack_id"], "RackId can't be empty.")
        epoch = req["member_epoch"]
        if version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH:
            empty(req["member_id"], "MemberId can't be empty.")
        if epoch == 0:
            if req["rebalance_timeout_ms"] == -1:
                raise HeartbeatError(InvalidRequestError.code, "RebalanceTimeoutMs must be provided in first request.")
            if req["topic_partitions"] is None or req["topic_partitions"]:
                raise HeartbeatError(InvalidRequestError.code, "TopicPartitions must be empty when (re-)joining.")
            if req["subscribed_topic_names"] is None and req.get("subscribed_topic_regex") is None:
                raise HeartbeatError(InvalidRequestError.code, "Either SubscribedTopicNames or SubscribedTopicRegex "
                                     "must be non-null when (re-)joining.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if req["instance_id"] is None:
                raise HeartbeatError(InvalidRequestError.code, "InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatError(InvalidRequestError.code, "MemberEpoch is invalid.")
        assignor = req["server_assignor"]
        if assignor is not None and assignor not in self.assignors:
            raise HeartbeatError(UnsupportedAssignorError.code, f"ServerAssignor {assignor} is not supported. "
                                 f"Supported assignors: {', '.join(self.assignors)}.")
        rx = req.get("subscribed_topic_regex")
        if rx:
            try:
                if _RE2_REFUSES.search(rx):
                    raise re.error("not in RE2 syntax (look-around or back-reference)")
                re.compile(rx)
            except re.error as e:
                raise HeartbeatError(InvalidRegularExpressionError.code,
                                     f"SubscribedTopicRegex `{rx}` is not a valid regular expression: {e}.") from None

    def _begin(self, g: ConsumerGroup, created: bool = False) -> Undo:
        """The operation at hand changes ``g`` (loop thread: one operation at a time)."""
        self._undo = Undo(g, created, self.c.hosts)
        return self._undo

    def _mutating(self) -> None:
        """The operation at hand is about to change the group's containers (members, instances, targets, owners)."""
        if self._undo is not None:
            self._undo.keep()

    def _touch(self, m: ConsumerMember) -> None:
        """``m`` is about to change: its state goes into the operation's undo record."""
        if self._undo is not None:
            self._undo.touch(m)

    def _commit(self, undo: Undo | None):
        """End of an operation: write what it changed (a future, done once durable) and take it back if that write
        fails; an operation that changed nothing durable is answered once the group's pending writes are (a future,
        or None when there is none): no answer rests on a state a failed write takes back."""
        self._undo = None
        if undo is None:
            return None
        g = undo.g
        if g.converted is not None:  # the group became a classic one (migration.py): its records go, the classic
            # group's record comes, in one write
            g.dirty, g.removed = set(), set()
            fut = self.c.state.write_downgrade(g.group_id, g.converted, chain=g.chain)
        elif not g.dirty and not g.removed:
            return g.pending
        else:
            dirty, removed = g.dirty, g.removed
            g.dirty, g.removed = set(), set()
            fut = self.c.state.write_consumer(g, sorted(dirty), sorted(removed), chain=g.chain,
                                              drop_classic=g.from_classic)
            g.from_classic = False
        g.pending = fut

        def written(f):
            if not f.cancelled() and f.exception() is None:
                if g.pending is f:
                    g.pending = None
                for fn in undo.on_durable:
                    fn()
                return
            if undo.chain is g.chain:  # the first failed write of its chain: the group goes back to before it
                log.error("group %s: its records could not be written (%s): the group goes back to its state "
                          "before the operation", g.group_id, "cancelled" if f.cancelled() else f.exception())
                undo.restore(self.groups)
        fut.add_done_callback(written)
        return fut

    def heartbeat(self, ctx, header, req) -> tuple:
        """ConsumerGroupHeartbeat: (the answer, a future the answer waits for or None). When the future fails (the
        group's records could not be written) the group is back as it was before the request and the answer is
        ``write_failed(error)``."""
        base = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None,
                "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}
        self._undo = None
        try:
            self.validate(req, header.api_version)
            if req["member_epoch"] in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                base.update(self._leave(req))
            else:
                base.update(self._heartbeat(ctx, req))
        except HeartbeatError as e:
            base.update(error_code=e.code, error_message=e.message)
            undo, self._undo = self._undo, None
            if undo is not None:  # refused before it changed anything durable
                if undo.created:
                    undo.restore(self.groups)
                return base, undo.g.pending
            return base, None
        return base, self._commit(self._undo)

    @staticmethod
    def write_failed(base: dict, e: BaseException) -> dict:
        """The heartbeat's answer when the write it waited for failed: Kafka's (a storage error is NOT_COORDINATOR,
        as its coordinator maps KAFKA_STORAGE_ERROR; anything else COORDINATOR_NOT_AVAILABLE), no member fields."""
        code = write_error_code(e)
        return dict(base, error_code=code, error_message=None, member_id=None, member_epoch=0,
                    heartbeat_interval_ms=0, assignment=None)

    def _group(self, gid: str, create: bool) -> ConsumerGroup:
        g = self.groups.get(gid)
        if g is not None:
            self._begin(g)
            return g
        if self.c.classic_has_members(gid):
            if create:  # KIP-848's online upgrade (migration.py), or Kafka's refusal of it
                return self.c.migration.upgrade(gid)
            raise HeartbeatError(GroupIdNotFoundError.code, f"Group {gid} is not a consumer group.")
        if not create:
            raise HeartbeatError(GroupIdNotFoundError.code, f"Consumer group {gid} not found.")
        self.c.forget_empty_classic(gid)
        g = self.groups[gid] = ConsumerGroup(gid)
        self._begin(g, created=True)
        return g

    @staticmethod
    def _check_epoch(m: ConsumerMember, epoch: int, owned) -> None:
        if epoch > m.epoch:
            raise HeartbeatError(FencedMemberEpochError.code, f"The consumer group member has a greater member epoch "
                                 f"({epoch}) than the one known by the group coordinator ({m.epoch}). The member "
                                 f"must abandon all its partitions and rejoin.")
        if epoch < m.epoch:
            subset = owned is not None and all(set(tp["partitions"]) <= m.assigned.get(tp["topic_id"], set())
                                               for tp in owned)
            if epoch != m.previous_epoch or not subset:
                raise HeartbeatError(FencedMemberEpochError.code, f"The consumer group member has a smaller member "
                                     f"epoch ({epoch}) than the one known by the group coordinator ({m.epoch}). The "
                                     f"member must abandon all its partitions and rejoin.")

    def _heartbeat(self, ctx, req) -> dict:
        gid, member_id, epoch = req["group_id"], req["member_id"], req["member_epoch"]
        instance_id, owned = req["instance_id"], req["topic_partitions"]
        g = self._group(gid, epoch == 0)
        if len(g.members) >= self.max_size and (not member_id or member_id not in g.members):
            raise HeartbeatError(GroupMaxSizeReachedError.code, f"The consumer group has reached its maximum "
                                 f"capacity of {self.max_size} members.")
        if not member_id:
            member_id = str(uuid.uuid4())  # v0: the coordinator names the member (v1 clients name themselves)
        replaced = None
        if instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                if epoch != 0:
                    raise HeartbeatError(UnknownMemberIdError.code, f"Member {member_id} is not a member of group "
                                         f"{gid}.")
                m = ConsumerMember(member_id)
                log.info("group %s: member %s joins the consumer group", gid, member_id)
            else:
                self._check_epoch(m, epoch, owned)
                self._touch(m)
        else:
            existing = g.members.get(g.instances.get(instance_id, ""))
            if epoch == 0:
                if existing is None:
                    m = g.members.get(member_id) or ConsumerMember(member_id)
                    self._touch(m)
                else:
                    if existing.epoch != STATIC_LEAVE_EPOCH:
                        raise HeartbeatError(UnreleasedInstanceIdError.code, f"Static member {member_id} with "
                                             f"instance id {instance_id} cannot join the group because the instance "
                                             f"id is owned by {existing.member_id} member.")
                    self._touch(existing)
                    m = self._replacement(existing, member_id)
                    replaced = existing
            else:
                if existing is None:
                    raise HeartbeatError(UnknownMemberIdError.code, f"Instance id {instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise HeartbeatError(FencedInstanceIdError.code, f"Static member {member_id} with instance id "
                                         f"{instance_id} was fenced by member {existing.member_id}.")
                self._check_epoch(existing, epoch, owned)
                m = existing
                self._touch(m)
        new = member_id not in g.members
        before = None if new else _fingerprint(m)
        old_sub = None if new else m.subscription()
        old_assigned = _copy(m.assigned)
        if instance_id is not None:
            m.instance_id = instance_id
        if req["rack_id"] is not None:
            m.rack_id = req["rack_id"]
        if req["rebalance_timeout_ms"] != -1:
            m.rebalance_timeout_ms = req["rebalance_timeout_ms"]
        if req["server_assignor"] is not None:
            m.server_assignor = req["server_assignor"]
        if req["subscribed_topic_names"] is not None:
            m.topic_names = list(req["subscribed_topic_names"])
        if req.get("subscribed_topic_regex") is not None:
            m.topic_regex = req["subscribed_topic_regex"] or None
        m.client_id = ctx.client_id or ""
        m.client_host = "/" + ctx.connection.peer_host
        m.last_seen = time.monotonic()
        m.classic = m.join_deadline = m.sync_deadline = None  # it heartbeats with the consumer protocol now
        if replaced is not None:
            self._mutating()
            g.removed.add(replaced.member_id)
            del g.members[replaced.member_id]
            g.target[member_id] = g.target.pop(replaced.member_id, {})
            g.set_current(replaced, {}, {})
            self.c.hosts.pop(replaced.member_id, None)
            log.info("group %s: static member with instance id %s re-joins the consumer group: member %s replaces %s",
                     gid, instance_id, member_id, replaced.member_id)
        if g.members.get(member_id) is not m or (m.instance_id is not None
                                                  and g.instances.get(m.instance_id) != member_id):
            self._mutating()
            g.members[member_id] = m
            if m.instance_id is not None:
                g.instances[m.instance_id] = member_id
        if replaced is not None:  # the replacement's assignment is its predecessor's
            g.set_current(m, _copy(replaced.assigned), {})
        # Kafka 4.4 bumps the group epoch once for a new member or subscription, and once more when the subscribed
        # topics' metadata changed (from nothing, for a new group's first member: its first epoch is 2)
        bump = (new and replaced is None) or (old_sub is not None and old_sub != m.subscription())
        if bump:
            g.group_epoch += 1
        if self._resolve(g, force=bump):
            g.group_epoch += 1
        if g.group_epoch > g.assignment_epoch:
            log.info("group %s: group epoch %d", gid, g.group_epoch)
        if g.group_epoch > g.assignment_epoch:
            self._assign(g)
        self._reconcile(g, m, owned)
        if before is None or _fingerprint(m) != before:
            g.dirty.add(member_id)
        full = epoch == 0 or (req["rebalance_timeout_ms"] != -1 and req["subscribed_topic_names"] is not None
                              and owned is not None)
        answer = {"member_id": member_id, "member_epoch": m.epoch,
                  "heartbeat_interval_ms": self.c.s.group_configs.value(gid, "consumer.heartbeat.interval.ms")}
        if full or m.assigned != old_assigned:
            answer["assignment"] = {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                                         for t, ps in sorted(m.assigned.items(), key=str)]}
        return answer

    @staticmethod
    def _replacement(old: ConsumerMember, member_id: str) -> ConsumerMember:
        m = ConsumerMember(member_id)
        for a in ("instance_id", "rack_id", "rebalance_timeout_ms", "topic_names", "topic_regex",
                  "server_assignor"):
            setattr(m, a, getattr(old, a))
        m.assigned_at = dict(old.assigned_at)
        return m

    def assignor_for(self, g: ConsumerGroup) -> str:
        """The assignor the members' ServerAssignor votes choose (most votes; none: the first configured)."""
        votes: dict[str, int] = {}
        for m in g.members.values():
            if m.server_assignor in self.assignors:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        return max(votes, key=lambda a: (votes[a], -self.assignors.index(a))) if votes else self.assignors[0]

    def _assign(self, g: ConsumerGroup) -> None:
        self._mutating()
        name = g.assignor = self.assignor_for(g)
        partitions = {tid: n for tid, n in (g.metadata or {}).values()}
        order = {tid: name for name, (tid, _) in (g.metadata or {}).items()}
        members = {mid: order for mid in g.members}
        subs = {mid: self._member_topics(g, m) for mid, m in g.members.items()}
        g.target = ASSIGNORS[name](members, subs, partitions, {mid: g.target.get(mid, {}) for mid in g.members})
        g.assignment_epoch = g.group_epoch
        g.assigned_ms = time.time_ns() // 1_000_000
        g.dirty.update(g.members)
        log.info("group %s: target assignment at epoch %d (%s) for %d members", g.group_id, g.assignment_epoch, name,
                 len(g.members))

    def _reconcile(self, g: ConsumerGroup, m: ConsumerMember, owned) -> None:
        """Kafka's CurrentAssignmentBuilder: move ``m`` toward its target assignment."""
        target = g.target.get(m.member_id, {})

        def owns_revoked(pending):
            if owned is None:
                return True
            return any(p in pending.get(tp["topic_id"], ()) for tp in owned for p in tp["partitions"])

        if m.epoch == STATIC_LEAVE_EPOCH:
            m.epoch = 0
        if m.state == STABLE:
            if m.epoch == g.assignment_epoch:
                return
            self._next(g, m, m.epoch, target, owns_revoked)
        elif m.state == UNREVOKED:
            if owns_revoked(m.pending_revocation):
                return
            self._next(g, m, m.epoch + 1, target, owns_revoked)
        else:
            self._next(g, m, m.epoch, target, owns_revoked)

    def _next(self, g: ConsumerGroup, m: ConsumerMember, epoch: int, target: Assignment, owns_revoked) -> None:
        assigned, pending, to_assign = {}, {}, {}
        unreleased = False
        for tid in set(target) | set(m.assigned):
            want, have = target.get(tid, set()), m.assigned.get(tid, set())
            keep = have & want
            revoke = have - keep
            add = {p for p in want - keep if g.owners.get((tid, p), m.member_id) == m.member_id}
            if len(add) < len(want - keep):
                unreleased = True
            if keep:
                assigned[tid] = keep
            if revoke:
                pending[tid] = revoke
            if add:
                to_assign[tid] = add
        self._mutating()
        if pending and owns_revoked(pending):
            self._set_epoch(m, epoch)
            m.state = UNREVOKED
            g.set_current(m, assigned, pending)
            m.revoke_deadline = time.monotonic() + m.rebalance_timeout_ms / 1000.0
            return
        for tid, ps in to_assign.items():
            assigned.setdefault(tid, set()).update(ps)
        self._set_epoch(m, g.assignment_epoch)
        for tid, ps in to_assign.items():
            for p in ps:
                m.assigned_at[(tid, p)] = g.assignment_epoch
        m.state = UNRELEASED if unreleased else STABLE
        g.set_current(m, assigned, {})
        m.revoke_deadline = None

    @staticmethod
    def _set_epoch(m: ConsumerMember, epoch: int) -> None:
        """Kafka's ConsumerGroupMember.Builder.updateMemberEpoch: every new assignment state of a member moves its
        epoch, the one it had becoming the previous one (the same epoch too: a member whose withheld partitions came
        free is STABLE at its epoch, its previous epoch that epoch)."""
        m.previous_epoch = m.epoch
        m.epoch = epoch

    def _leave(self, req) -> dict:
        gid, member_id, epoch, instance_id = (req["group_id"], req["member_id"], req["member_epoch"],
                                              req["instance_id"])
        g = self.groups.get(gid)
        if g is None:
            if self.c.classic_has_members(gid):
                raise HeartbeatError(GroupIdNotFoundError.code, f"Group {gid} is not a consumer group.")
            raise HeartbeatError(GroupIdNotFoundError.code, f"Group {gid} not found.")
        self._begin(g)
        if instance_id is None:
            if member_id not in g.members:
                raise HeartbeatError(UnknownMemberIdError.code, f"Member {member_id} is not a member of group {gid}.")
            self.remove(g, member_id, "left the consumer group")
            return {"member_id": member_id, "member_epoch": epoch}
        m = g.members.get(g.instances.get(instance_id, ""))
        if m is None:
            raise HeartbeatError(UnknownMemberIdError.code, f"Instance id {instance_id} is unknown.")
        if m.member_id != member_id:
            raise HeartbeatError(FencedInstanceIdError.code, f"Static member {member_id} with instance id "
                                 f"{instance_id} was fenced by member {m.member_id}.")
        if epoch == STATIC_LEAVE_EPOCH:
            log.info("group %s: static member %s (instance id %s) temporarily left", gid, member_id, instance_id)
            self._touch(m)
            self._mutating()
            g.dirty.add(member_id)
            m.epoch = STATIC_LEAVE_EPOCH
            g.set_current(m, m.assigned, {})
            m.revoke_deadline = None
            return {"member_id": member_id, "member_epoch": STATIC_LEAVE_EPOCH}
        self.remove(g, member_id, "left the consumer group")
        return {"member_id": member_id, "member_epoch": epoch}

    def remove(self, g: ConsumerGroup, member_id: str, why: str, last: bool = True) -> None:
        """A member leaves or is fenced: its partitions are free and the group epoch goes up; or, when it was the
        last member that uses the consumer protocol and the others use the classic one, the group becomes a classic
        group (KIP-848's online downgrade, migration.py). ``last`` False: one of several members the operation
        removes (a batched LeaveGroup), not its last: the epoch and the downgrade wait for the last one."""
        m = g.members.get(member_id)
        if m is None or g.converted is not None:
            return
        if last and self.c.migration.downgrade(g, member_id, why):
            return
        self._touch(m)
        self._mutating()
        del g.members[member_id]
        g.removed.add(member_id)
        g.dirty.discard(member_id)
        g.set_current(m, {}, {})
        g.target.pop(member_id, None)
        if m.instance_id is not None and g.instances.get(m.instance_id) == member_id:
            del g.instances[m.instance_id]
        self.c.hosts.pop(member_id, None)
        self._resolve(g, force=True)
        if not last:
            log.info("group %s: member %s removed (%s)", g.group_id, member_id, why)
            return
        g.group_epoch += 1
        # Kafka 4.4's consumerGroupFenceMembers: the target assignment is computed by the next heartbeat (the group
        # is Assigning meanwhile), except in a group left empty, whose assignment epoch follows its group epoch
        if not g.members:
            self._assign(g)
        log.info("group %s: member %s removed (%s), group epoch %d", g.group_id, member_id, why, g.group_epoch)

    def sweep(self) -> None:
        """Members silent for the session timeout, or revoking past their rebalance timeout, are removed (one
        operation per group: taken back if its write fails; the next sweep tries again)."""
        now = time.monotonic()
        for g in list(self.groups.values()):
            expired = []
            # the group's own consumer.session.timeout.ms (a group config) or the broker's
            timeout_ms = self.c.s.group_configs.value(g.group_id, "consumer.session.timeout.ms")
            for mid, m in g.members.items():
                session_ms = m.session_timeout_ms(timeout_ms)
                if now - m.last_seen > session_ms / 1000.0:
                    expired.append((mid, f"no heartbeat for {session_ms} ms (session timeout)"))
                elif m.classic is not None:  # Kafka's timers of a classic member: no rebalance timeout
                    if m.join_deadline is not None and now > m.join_deadline:
                        expired.append((mid, "the classic member failed to join within the rebalance timeout"))
                    elif m.sync_deadline is not None and now > m.sync_deadline:
                        expired.append((mid, "the member failed to sync within timeout"))
                elif m.revoke_deadline is not None and now > m.revoke_deadline and m.state == UNREVOKED:
                    expired.append((mid, f"failed to transition from epoch {m.epoch} within "
                                         f"{m.rebalance_timeout_ms}ms"))
            if not expired:
                continue
            undo = self._begin(g)
            for mid, why in expired:
                if g.converted is not None:  # became a classic group: its coordinator times the others now
                    break
                self.remove(g, mid, why)
            self._commit(undo)

    # -- describe, commits ----------------------------------------------------------------------------------------

    def describe(self, gid: str, names: dict) -> dict:
        """ConsumerGroupDescribe's group (``names``: topic id -> name)."""
        g = self.groups.get(gid)

        def assignment(a):
            return {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                                         for t, ps in sorted(a.items(), key=lambda x: names.get(x[0], ""))]}
        members = []
        for m in g.members.values():
            members.append({"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                            "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                            "subscribed_topic_names": sorted(m.topic_names),
                            "subscribed_topic_regex": m.topic_regex or "",
                            "assignment": assignment(m.assigned),
                            "target_assignment": assignment(g.target.get(m.member_id, {})),
                            "member_type": 0 if m.classic is not None else 1})
        return {"error_code": 0, "error_message": None, "group_id": gid, "group_state": g.state(),
                "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.assignor or self.assignors[0], "members": members}

    def check_commit(self, g: ConsumerGroup, member_id: str, epoch: int, api_version: int | None):
        """Kafka 4.4's ConsumerGroup.validateOffsetCommit (``api_version`` None: TxnOffsetCommit): an error code, or,
        for a commit at an older epoch than the member's, a check of each partition (topic name, partition) -> code:
        the partition must be the member's (assigned or pending revocation) since that epoch or before. A member
        that uses the classic protocol commits with its generation (its member epoch) and is answered
        ILLEGAL_GENERATION where a consumer-protocol member is answered STALE_MEMBER_EPOCH."""
        if epoch < 0 and not member_id:
            return UnknownMemberIdError.code if g.members else 0
        m = g.members.get(member_id)
        if m is None:
            return UnknownMemberIdError.code
        if m.classic is None and api_version is not None and api_version < 9:
            return UnsupportedVersionError.code
        bad = IllegalGenerationError.code if m.classic is not None else StaleMemberEpochError.code
        if epoch == m.epoch:
            return 0
        if epoch > m.epoch:
            return bad

        def partition_check(topic: str, partition: int) -> int:
            meta = (g.metadata or {}).get(topic) or self._topic_meta(topic)
            if meta is None:
                return bad
            tid = meta[0]
            if partition not in m.assigned.get(tid, ()) and partition not in m.pending_revocation.get(tid, ()):
                return bad
            return 0 if m.assigned_at.get((tid, partition), -1) <= epoch else bad
        return partition_check

    def check_fetch(self, g: ConsumerGroup, member_id: str | None, epoch: int) -> int:
        """OffsetFetch v9+'s member check (Kafka's ConsumerGroup.validateOffsetFetch)."""
        if member_id is None or (epoch < 0 and not member_id):
            return 0
        m = g.members.get(member_id)
        if m is None:
            return UnknownMemberIdError.code
        if epoch == m.epoch:
            return 0
        # Kafka's validateMemberEpoch: a member that uses the classic protocol sent its generation
        return IllegalGenerationError.code if m.classic is not None else StaleMemberEpochError.code

    def close(self) -> None:
        self.groups.clear()


__all__ = ["ASSIGNORS", "ConsumerGroups", "range_assign", "uniform_assign"]
