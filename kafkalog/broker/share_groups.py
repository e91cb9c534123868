"""KIP-932 share groups on the wire: membership (ShareGroupHeartbeat, ShareGroupDescribe), share sessions and the
share-partitions (ShareFetch, ShareAcknowledge), on the DurableQueue's state (kafkalog/client/share.py).

Membership (Kafka 4.4's rules): a member names itself (a UUID, ShareGroupHeartbeat v1), joins with epoch 0 and
the topics it subscribes to, leaves with epoch -1; the ``simple`` assignor gives every member subscribed to a topic
all of its partitions (share groups let members overlap: the share-partition splits the records); a membership or
subscription change bumps the group epoch, and a member's epoch follows when it is sent its new assignment. An
epoch above the member's, or below it and not its previous one, is FENCED_MEMBER_EPOCH. A member silent for
``group.share.session.timeout.ms`` is removed. Membership lives in the broker's memory (kafkalog writes no
share-group records to ``__consumer_offsets``): after a restart members are UNKNOWN_MEMBER_ID and join again, as
Kafka's clients do on that error; the share-partition state is durable.

Share sessions (per broker, key = (group, member)): ShareFetch/ShareAcknowledge epoch 0 opens one (replacing the
member's old one; acknowledgements are refused in it), each next request carries the next epoch
(INVALID_SHARE_SESSION_EPOCH otherwise, SHARE_SESSION_NOT_FOUND with no session), -1 closes it after its
acknowledgements and releases what the member holds; so does the end of the connection of its last request (as
Kafka 4.4: a killed consumer's records are delivered again at once, not after their lock). A ShareFetch's
partitions join the session's set; ForgottenTopicsData leaves it. A ShareFetch acquires up to MaxRecords over the
session's partitions, answered with whole record batches and the acquired ranges; with nothing to acquire it waits
up to MaxWaitMs for new records.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid

from ..client.share import SharePartition
from ..errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRecordStateError,
    InvalidRequestError,
    InvalidShareSessionEpochError,
    KafkaError,
    NonEmptyGroupError,
    ShareSessionLimitReachedError,
    ShareSessionNotFoundError,
    UnknownMemberIdError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from .group_configs import DURATION
from .handling import allowed, error_code, not_allowed, request_body, respond

log = logging.getLogger("kafkalog.broker")

GROUP_DENIED, TOPIC_DENIED = 30, 29
SHARE = "share"
ASSIGNOR = "simple"

VERSIONS = {
    76: (1, 1),   # ShareGroupHeartbeat (KIP-932; v0 was the early-access form, which 4.4 refuses too)
    77: (1, 1),   # ShareGroupDescribe
    78: (1, 2),   # ShareFetch (2: ShareAcquireMode, KIP-1206; IsRenewAck, KIP-1222)
    79: (1, 2),   # ShareAcknowledge (2: IsRenewAck, AcquisitionLockTimeoutMs)
    90: (0, 1),   # DescribeShareGroupOffsets (1: Lag, KIP-1226)
    91: (0, 0),   # AlterShareGroupOffsets
    92: (0, 0),   # DeleteShareGroupOffsets
}


def _uuid(topic_id: str) -> uuid.UUID:
    import base64
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


class ShareMember:
    __slots__ = ("member_id", "epoch", "previous_epoch", "rack_id", "client_id", "client_host", "topics",
                 "last_seen", "assignment")

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.epoch = 0
        self.previous_epoch = 0
        self.rack_id = None
        self.client_id = ""
        self.client_host = ""
        self.topics: list[str] = []
        self.last_seen = time.monotonic()
        self.assignment: dict[str, list[int]] = {}


class ShareGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


class ShareSession:
    __slots__ = ("epoch", "partitions", "turn", "conn")

    def __init__(self, conn=None):
        self.epoch = 1  # the epoch the next request must carry
        self.partitions: set[tuple[str, int]] = set()
        self.turn = 0  # where the next ShareFetch starts in the partitions: each gets to be first in turn
        self.conn = conn  # the connection of its last request: the session ends with it, as Kafka's


def _simple_assignment(n: int, had: list) -> list[list[int]]:
    """Kafka 4.4's simple assignment of one topic's ``n`` partitions to members ``0 .. len(had) - 1`` (``had``: the
    partitions each had): each member's partitions, ascending (see ShareCoordinator._assign)."""
    members = len(had)
    sharing = -(-members // n)  # members per partition
    sharers: list[list[int]] = [[] for _ in range(n)]
    owned: list[list[int]] = [[] for _ in range(members)]
    for i, parts in enumerate(had):
        for p in sorted(parts):
            if p < n:
                sharers[p].append(i)
                owned[i].append(p)
    # sharing * n places, as even as can be: the ones left over go to the members that have the most now (Kafka
    # spreads them by member order), so that a member joining or leaving moves no partition between the others
    base, extra = divmod(sharing * n, members)
    desired = [base] * members
    for i in sorted(range(members), key=lambda i: -len(owned[i]))[:extra]:
        desired[i] += 1
    over = {i for i in range(members) if len(owned[i]) > desired[i]}
    for p in range(n):  # partitions shared by too many: taken from members with too many first
        for pick_over in (True, False):
            for i in list(sharers[p]):
                if len(sharers[p]) <= sharing:
                    break
                if (i in over) == pick_over:
                    sharers[p].remove(i)
                    owned[i].remove(p)
    for i in range(members):  # members with too many give up their last partitions
        while len(owned[i]) > desired[i]:
            sharers[owned[i].pop()].remove(i)
    unfilled = [i for i in range(members) if len(owned[i]) < desired[i]]
    k = 0
    for p in range(n):
        if not unfilled:
            break
        tried = 0  # one round over the members short of partitions without one that can take p: p stays short
        while len(sharers[p]) < sharing and unfilled and tried < len(unfilled):
            k %= len(unfilled)
            i = unfilled[k]
            if i in sharers[p]:
                k += 1
                tried += 1
                continue
            sharers[p].append(i)
            owned[i].append(p)
            tried = 0
            if len(owned[i]) >= desired[i]:
                unfilled.pop(k)
            else:
                k += 1
    return [sorted(parts) for parts in owned]


class ShareCoordinator:
    """Share groups of one broker: members, sessions and the open share-partitions. Loop thread, except the
    share-partitions' own methods (thread-safe, called from worker threads)."""

    def __init__(self, services):
        self.s = services
        cfg = services.config
        self.max_size = cfg["group.share.max.size"]
        self.max_sessions = cfg["group.share.max.share.sessions"]
        # a group's own configs (group_configs.py) win over the server keys (group.share.*, share.auto.offset.reset)
        self.configs = services.group_configs
        self.groups: dict[str, ShareGroup] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}
        self._opening = threading.Lock()
        self._warming: set[tuple[str, str, int]] = set()  # share-partitions open_later is opening
        self.adopt(self.stored())

    def adopt(self, gids) -> None:
        """(loop) Take in, as share groups without members, the groups whose share-partition states are on disk but
        which this broker does not hold: every share group after a restart (Kafka keeps a share group across its
        broker's restarts), and a DurableQueue's group nobody joined over the wire (a queue group is a share group).
        Listed, described, altered and deleted as share groups, not as the classic group their committed offsets
        (a DurableQueue commits its acked prefix) would otherwise make of them. An id in use by a live classic or
        consumer group stays that group's."""
        for gid in gids:
            if gid not in self.groups and not self._other_type(gid):
                self.groups[gid] = ShareGroup(gid)

    def stored(self) -> set[str]:
        """The ids of the groups with a share-partition state in some partition (the wire's or a DurableQueue's): one
        listing of each partition's queue directory, no log opened. Worker thread, or the broker's start."""
        from ..client.queue import QUEUES_DIR
        s = self.s
        out: set[str] = set()
        for name in s.store.topics():
            for p in range(s.partitions(name)):
                try:
                    with os.scandir(s.store.partition_dir(name, p) / QUEUES_DIR) as entries:
                        out.update(e.name for e in entries if e.is_dir())
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as e:
                    log.warning("share groups: could not list %s-%d's queue states: %s", name, p, e)
        return out

    def group_of(self, gid: str):
        """Whether ``gid`` is a share group of this broker, one whose share-partition states are on disk taken in
        (``adopt``); a generator (the disk is looked at off the loop): ``yield from`` it in a handler."""
        if gid and gid not in self.groups and not self._other_type(gid) and \
                (yield self.s.loop.run_in_executor(None, _has_state, self.s, gid)):
            self.adopt((gid,))
        return gid in self.groups

    # -- a group's configs ------------------------------------------------------------------------------------------

    def lock_ms_of(self, gid: str) -> int:
        return self.configs.value(gid, "share.record.lock.duration.ms")

    def limit_of(self, gid: str) -> int:
        return self.configs.value(gid, "share.delivery.count.limit")

    def max_locks_of(self, gid: str) -> int:
        return self.configs.value(gid, "share.partition.max.record.locks")

    def read_committed(self, gid: str) -> bool:
        return self.configs.value(gid, "share.isolation.level") == "read_committed"

    def renew_ok(self, gid: str) -> bool:
        return bool(self.configs.value(gid, "share.renew.acknowledge.enable"))

    def start_of(self, gid: str, log) -> int | str:
        """Where a share-partition of ``gid`` with no state starts: "latest", "earliest", or the offset of
        by_duration's time (the log end when no record is that recent)."""
        reset = str(self.configs.value(gid, "share.auto.offset.reset")).strip().lower()
        if not reset.startswith("by_duration:"):
            return reset
        m = DURATION.match(reset[len("by_duration:"):].strip())
        days, hours, minutes, seconds = (float(x) if x else 0.0 for x in m.groups())
        ms = int(((days * 24 + hours) * 60 + minutes) * 60000 + seconds * 1000)
        found = log.offset_for_time(max(0, int(time.time() * 1000) - ms))
        return log.log_end_offset if found is None else found.offset

    # -- share-partitions (worker threads) -------------------------------------------------------------------------

    def partition(self, group: str, topic: str, p: int) -> SharePartition:
        key = (group, topic, p)
        sp = self.partitions.get(key)
        if sp is None or sp.log.closed:
            with self._opening:  # one share-partition (one worker) per group and partition in this process
                sp = self.partitions.get(key)
                if sp is None or sp.log.closed:
                    lg = self.s.store.log(topic, p)
                    sp = self.partitions[key] = SharePartition(lg, group, self.start_of(group, lg),
                                                               self.s.store.config["lock.timeout.ms"] / 1000.0)
        return sp

    def release_later(self, group: str, member: str) -> None:
        """``release`` off the loop (it reads and writes share-partition states under their file locks) of what the
        member acquired until now: not what it acquires meanwhile (a new session, a member that joins again)."""
        fut = self.s.loop.run_in_executor(None, self.release, group, member, time.monotonic())
        fut.add_done_callback(lambda f: f.cancelled() or f.exception() is None or log.warning(
            "share group %s: releasing member %s's records failed: %s", group, member, f.exception()))

    def open_later(self, group: str, keys) -> None:
        """Open, off the loop and one after the other, the share-partitions of ``group`` in ``keys`` [(topic,
        partition)] not open yet (a session's partitions, at its first ShareFetch, as Kafka initializes every
        partition a ShareFetch names): opening one creates and fsyncs its directories and state, which would
        otherwise fall on the ShareFetch that first reaches it, one partition per fetch."""
        todo = [(t, p) for t, p in keys if (group, t, p) not in self._warming and
                ((sp := self.partitions.get((group, t, p))) is None or sp.log.closed)]
        if not todo:
            return
        self._warming.update((group, t, p) for t, p in todo)

        def run():
            try:
                for t, p in todo:
                    self.partition(group, t, p)
            finally:
                self._warming.difference_update((group, t, p) for t, p in todo)
        fut = self.s.loop.run_in_executor(None, run)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception() is None or log.warning(
            "share group %s: opening its share-partitions failed: %s", group, f.exception()))

    def sync_later(self, group: str, keys) -> None:
        """fsync, off the loop and while the answer is on its way, the states that ``group``'s acquisitions in
        ``keys`` [(topic, partition)] wrote without fsyncing (SharePartition.sync_behind): the acknowledgement
        that follows them then waits for one fsync, not two."""
        sps = [sp for sp in (self.partitions.get((group, t, p)) for t, p in keys) if sp is not None]
        if not sps:
            return

        def run():
            for sp in sps:
                sp.sync_behind()
        fut = self.s.loop.run_in_executor(None, run)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception() is None or log.warning(
            "share group %s: fsyncing acquisitions failed: %s", group, f.exception()))

    def release(self, group: str, member: str, before: float | None = None) -> None:
        for (g, _t, _p), sp in list(self.partitions.items()):
            if g == group:
                sp.release_member(member, self.limit_of(group), before)

    def expire_locks(self) -> None:
        for sp in list(self.partitions.values()):
            try:
                sp.expire(self.limit_of(sp.group))
            except KafkaError as e:
                log.warning("share group %s: expiring acquisition locks failed: %s", sp.group, e)

    def close(self) -> None:
        for sp in self.partitions.values():
            try:
                sp.close(self.limit_of(sp.group))
            except Exception as e:  # noqa: BLE001  (every partition gets its turn)
                log.warning("share group %s: close failed: %s", sp.group, e)
        self.partitions.clear()

    def delete_states(self, group: str) -> None:
        """DeleteGroups of an empty share group (worker thread): its share-partition states go, as Kafka's
        DeleteShareGroupState; a state a live DurableQueue worker still uses stays."""
        from ..client.queue import QUEUES_DIR
        for topic in self.s.store.topics():
            for p in range(self.s.partitions(topic)):
                try:
                    if not (self.s.store.log(topic, p).dir / QUEUES_DIR / group).is_dir():
                        continue
                    self.delete_state(group, topic, p)
                except NonEmptyGroupError:
                    continue
                except KafkaError as e:
                    log.warning("share group %s: its state of %s-%d stays: %s", group, topic, p, e)
        with self._opening:
            for key in [k for k in self.partitions if k[0] == group]:
                self.partitions.pop(key).close(self.limit_of(group))

    def delete_state(self, group: str, topic: str, p: int) -> None:
        """Worker thread: the group's share-partition state of ``topic``-``p`` goes (renamed away under state.lock,
        then removed: never half deleted); NonEmptyGroupError while a DurableQueue worker of the group is alive."""
        with self._opening:
            sp = self.partitions.pop((group, topic, p), None)
        if sp is None or sp.log.closed:
            sp = SharePartition(self.s.store.log(topic, p), group, "latest",
                                self.s.store.config["lock.timeout.ms"] / 1000.0)
        try:
            sp.delete()
        except BaseException:
            sp.close(self.limit_of(group))
            raise

    # -- membership (loop) -----------------------------------------------------------------------------------------

    def _assign(self, g: ShareGroup) -> None:
        """The simple assignor (Kafka 4.4's SimpleAssignor for members of one subscription), topic by topic over the
        members subscribed to it, sorted by member id (Kafka takes them in its hash map's order): balance first
        (each partition shared by ceil(members / partitions) members, each member's count within one of the
        others', the larger counts to the members that hold the most), then stickiness: a member keeps what it had
        up to its count, gives up its last partitions past it, and partitions short of sharers go round the members
        short of partitions, lowest partition first. As members join one by one this gives what Kafka's answers
        show: two members and three partitions [0, 1] and [2]; two partitions and four members one each, each
        partition twice. A member that joins takes partitions from the others and no partition moves between
        members that stay (a partition moved between two members sat idle until both had heartbeated: the holder
        told first stopped fetching it)."""
        old = {mid: m.assignment for mid, m in g.members.items()}
        for m in g.members.values():
            m.assignment = {}
        by_topic: dict[str, list[str]] = {}
        for mid in sorted(g.members):
            for t in g.members[mid].topics:
                by_topic.setdefault(t, []).append(mid)
        for t, mids in by_topic.items():
            n = self.s.partitions(t)
            if not n:
                continue
            for mid, parts in zip(mids, _simple_assignment(n, [old[mid].get(t, ()) for mid in mids])):
                g.members[mid].assignment[t] = parts
        g.assignment_epoch = g.epoch

    def heartbeat(self, ctx, req) -> tuple[dict, dict | None]:
        """(response body, assignment to initialize or None)."""
        gid, mid, epoch = req["group_id"], req["member_id"], req["member_epoch"]
        topics = req["subscribed_topic_names"]
        body = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None,
                "member_id": mid, "member_epoch": 0,
                "heartbeat_interval_ms": self.configs.value(gid, "share.heartbeat.interval.ms"),
                "assignment": None}

        def fail(code, message=None):
            body.update(error_code=code, error_message=message, member_id=None, member_epoch=0,
                        heartbeat_interval_ms=0)
            return body, None
        if not mid or len(mid) > 36:  # Kafka 4.4 answers these without a message (a client's id is a UUID)
            return fail(InvalidRequestError.code)
        if not gid:
            return fail(InvalidRequestError.code, "GroupId can't be empty.")
        if not mid.strip():
            return fail(InvalidRequestError.code, "MemberId can't be empty.")
        if epoch < -1:
            return fail(InvalidRequestError.code, "MemberEpoch is invalid.")
        if epoch == 0 and not topics:
            return fail(InvalidRequestError.code, "SubscribedTopicNames must be set in first request.")
        if self._other_type(gid):
            return fail(GroupIdNotFoundError.code, f"Group {gid} is not a share group.")
        g = self.groups.get(gid)
        if epoch == -1:
            if g is None or mid not in g.members:
                return fail(UnknownMemberIdError.code, f"Member {mid} is not a member of group {gid}.")
            del g.members[mid]
            self.sessions.pop((gid, mid), None)  # a member that leaves before closing its share session
            g.epoch += 1
            self._assign(g)
            self.release_later(gid, mid)
            body.update(member_epoch=-1, heartbeat_interval_ms=0)
            return body, None
        if g is None:
            if epoch != 0:
                return fail(UnknownMemberIdError.code, f"Member {mid} is not a member of group {gid}.")
            g = self.groups[gid] = ShareGroup(gid)
        m = g.members.get(mid)
        if m is None:
            if epoch != 0:
                return fail(UnknownMemberIdError.code, f"Member {mid} is not a member of group {gid}.")
            if len(g.members) >= self.max_size:
                return fail(GroupMaxSizeReachedError.code,
                            f"The share group has reached its maximum capacity of {self.max_size} members.")
            m = g.members[mid] = ShareMember(mid)
            m.client_id = ctx.client_id or ""
            m.client_host = "/" + ctx.connection.peer_host
            changed = True
        elif epoch > m.epoch:
            return fail(FencedMemberEpochError.code,
                        f"The share group member has a greater member epoch ({epoch}) than the one known by the group "
                        f"coordinator ({m.epoch}). The member must abandon all its partitions and rejoin.")
        elif epoch < m.epoch and epoch != m.previous_epoch and epoch != 0:
            return fail(FencedMemberEpochError.code,
                        f"The share group member has a smaller member epoch ({epoch}) than the one known by the group "
                        f"coordinator ({m.epoch}), and it does not match the previous member epoch "
                        f"({m.previous_epoch}). The member must abandon all its partitions and rejoin.")
        else:
            changed = False
        m.last_seen = time.monotonic()
        if req["rack_id"] is not None:
            m.rack_id = req["rack_id"]
        if topics is not None and list(topics) != m.topics:
            m.topics = list(topics)
            changed = True
        if changed:
            g.epoch += 1
            self._assign(g)
        send = epoch == 0 or m.epoch != g.assignment_epoch
        if send:
            m.previous_epoch, m.epoch = m.epoch, g.assignment_epoch
            body["assignment"] = {"topic_partitions": self._wire_assignment(m.assignment)}
        body["member_epoch"] = m.epoch
        return body, (m.assignment if send else None)

    def _wire_assignment(self, a: dict[str, list[int]]) -> list:
        out = []
        for t, parts in sorted(a.items()):
            try:
                out.append({"topic_id": _uuid(self.s.store.topic_id(t)), "partitions": parts})
            except KafkaError:
                continue
        return out

    def _other_type(self, gid: str) -> bool:
        groups = self.s.groups
        return gid in groups.consumer.groups or groups.classic_has_members(gid)

    def sweep(self) -> None:
        now = time.monotonic()
        for g in list(self.groups.values()):
            timeout_ms = self.configs.value(g.group_id, "share.session.timeout.ms")
            gone = [mid for mid, m in g.members.items() if now - m.last_seen > timeout_ms / 1000.0]
            for mid in gone:
                log.info("share group %s: member %s removed: no heartbeat for %d ms", g.group_id, mid, timeout_ms)
                del g.members[mid]
                self.sessions.pop((g.group_id, mid), None)
            if gone:
                g.epoch += 1
                self._assign(g)
                for mid in gone:
                    self.release_later(g.group_id, mid)

    def describe(self, gid: str) -> dict:
        g = self.groups[gid]
        members = []
        for m in g.members.values():
            members.append({"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                            "client_id": m.client_id, "client_host": m.client_host,
                            "subscribed_topic_names": list(m.topics),
                            "assignment": {"topic_partitions": [
                                {"topic_id": _uuid(self.s.store.topic_id(t)), "topic_name": t, "partitions": ps}
                                for t, ps in sorted(m.assignment.items())]}})
        return {"group_state": g.state, "group_epoch": g.epoch, "assignment_epoch": g.assignment_epoch,
                "assignor_name": ASSIGNOR, "members": members}

    # -- sessions (loop) -------------------------------------------------------------------------------------------

    def session(self, gid: str, mid: str, epoch: int, has_acks: bool, conn=None) -> ShareSession | None:
        """The session a request with ``epoch`` works in (None: -1, the session closes); raises Kafka's errors."""
        key = (gid, mid)
        if epoch == 0:
            if has_acks:
                raise InvalidRequestError("Acknowledge data present in the initial share fetch request")
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                raise ShareSessionLimitReachedError("The limit of share sessions has been reached.")
            if key in self.sessions:
                self.release_later(gid, mid)
            sess = self.sessions[key] = ShareSession(conn)
            return sess
        sess = self.sessions.get(key)
        if sess is None:
            raise ShareSessionNotFoundError("The share session was not found.")
        if epoch == -1:
            return None
        if epoch != sess.epoch:
            raise InvalidShareSessionEpochError("The share session epoch is invalid.")
        sess.epoch = 1 if sess.epoch == 0x7FFFFFFF else sess.epoch + 1
        sess.conn = conn
        return sess

    def connection_closed(self, conn) -> None:
        """A client's connection ended: its share sessions end with it and what their members acquired goes back at
        once, not at its lock's end (Kafka 4.4 does the same: a killed consumer's records are delivered again within
        a moment)."""
        for key in [k for k, sess in self.sessions.items() if sess.conn is conn]:
            del self.sessions[key]
            self.release_later(*key)


# ---------------------------------------------------------------------------------------------------- handlers

def _empty_hb(ctx, code, message=None):
    return {"throttle_time_ms": ctx.throttle_time_ms, "error_code": code, "error_message": message,
            "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


def _off(s) -> bool:
    """share.version 0 (server key or kafka-features): Kafka 4.4 keeps the share APIs listed and answers each with
    UNSUPPORTED_VERSION and nothing else (checked in the lab)."""
    return s.features.levels["share.version"] < 1


def share_group_heartbeat(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if _off(s):
        return respond(header, _empty_hb(ctx, UnsupportedVersionError.code))
    if not_allowed(s, ctx, "READ", "GROUP", req["group_id"]):
        return respond(header, _empty_hb(ctx, GROUP_DENIED))
    denied = [t for t in req["subscribed_topic_names"] or () if not_allowed(s, ctx, "DESCRIBE", "TOPIC", t)]
    if denied:
        return respond(header, _empty_hb(ctx, TOPIC_DENIED, "The member is not authorized to access topics: "
                                                            f"[{', '.join(sorted(denied))}]."))
    # a share-partition's state starts (at share.auto.offset.reset) when a ShareFetch first reads it, as Kafka's
    # share-partition leader resolves the start offset of a state that has none
    body, _assignment = s.shares.heartbeat(ctx, req)
    return respond(header, body)


def share_group_describe(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    for gid in req["group_ids"]:
        r = {"error_code": 0, "error_message": None, "group_id": gid, "group_state": "", "group_epoch": 0,
             "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": -2**31}
        if _off(s):
            r["error_code"] = UnsupportedVersionError.code
        elif not_allowed(s, ctx, "DESCRIBE", "GROUP", gid):
            r["error_code"] = GROUP_DENIED
        elif not gid:
            r["error_code"] = 24  # INVALID_GROUP_ID
        elif not (yield from s.shares.group_of(gid)):
            known = s.shares._other_type(gid) or gid in s.store.offsets.groups()
            r.update(error_code=GroupIdNotFoundError.code,
                     error_message=f"Group {gid} is not a share group." if known else f"Group {gid} not found.")
        else:
            r.update(s.shares.describe(gid))
            if req["include_authorized_operations"]:
                from . import admin as _admin
                r["authorized_operations"] = _admin._operations(s, ctx, "GROUP", gid, _admin.GROUP_OPERATIONS)
        out.append(r)
    # Kafka answers the ids it refuses before asking the coordinator first, then the coordinator's answers
    out.sort(key=lambda r: r["error_code"] not in (24, GROUP_DENIED))
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "groups": out})


def _names_by_id(s) -> dict:
    out = {}
    for name in s.store.topics():
        try:
            out[_uuid(s.store.topic_id(name))] = name
        except KafkaError:
            continue
    return out


def _ack_batches(p) -> list:
    return [(b["first_offset"], b["last_offset"], list(b["acknowledge_types"])) for b in p["acknowledgement_batches"]]


def _acknowledge(s, gid, mid, acks, renew_ok: bool) -> dict:
    """Worker thread: {(topic, partition): (error code, message)} for each partition's acknowledgements."""
    out = {}
    co = s.shares
    for (topic, p), batches in acks.items():
        try:
            co.partition(gid, topic, p).acknowledge(mid, batches, co.limit_of(gid), renew_ok, co.lock_ms_of(gid))
            out[(topic, p)] = (0, None)
        except (InvalidRecordStateError, InvalidRequestError) as e:
            out[(topic, p)] = (error_code(e), str(e))
        except KafkaError as e:
            out[(topic, p)] = (error_code(e), str(e))
    return out


def _acquire(s, gid, mid, parts, max_records: int, record_limit: bool, max_bytes: int = 0x7FFFFFFF, acks=None,
             renew_ok: bool = False) -> tuple[dict, dict]:
    """Worker thread: ({(topic, partition): (records bytes, [(first, last, count)])} acquired for the member, up to
    ``max_records`` and, past the first partition that has records, ``max_bytes`` (Kafka's soft limits);
    {(topic, partition): (error code, message)} of the piggy-backed ``acks``). A partition's acknowledgements and
    its acquisition are one state write (SharePartition.acknowledge_and_acquire); those of partitions the
    acquisition does not reach are applied after it, as ``_acknowledge`` applies them."""
    out, done = {}, {}
    acks = dict(acks or {})
    co = s.shares
    left = max_records
    size = 0
    lock_ms, limit, max_locks = co.lock_ms_of(gid), co.limit_of(gid), co.max_locks_of(gid)
    committed = co.read_committed(gid)
    for topic, p in parts:
        if left <= 0 or (out and size >= max_bytes):
            break
        batches = acks.pop((topic, p), None)
        try:
            sp = co.partition(gid, topic, p)
            if batches is None:
                got = sp.acquire(mid, left, lock_ms, limit, record_limit, max_locks, committed)
            else:
                err, got = sp.acknowledge_and_acquire(mid, batches, limit, renew_ok, lock_ms, left, record_limit,
                                                      max_locks, committed)
                done[(topic, p)] = (0, None) if err is None else (error_code(err), str(err))
        except KafkaError as e:
            if batches is not None:
                done[(topic, p)] = (error_code(e), str(e))
            log.warning("share group %s: acquiring from %s-%d: %s", gid, topic, p, e)
            continue
        if got:
            left -= sum(last - first + 1 for first, last, _ in got)
            data = b"".join(sp.records(first, last) for first, last, _ in _merged(got))
            out[(topic, p)] = (data, got)
            size += len(data)
    if acks:
        done.update(_acknowledge(s, gid, mid, acks, renew_ok))
    return out, done


def _merged(got):
    """Acquired ranges joined where they touch (one read of the batches they share)."""
    out = []
    for first, last, c in sorted(got):
        if out and first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], last)
        else:
            out.append([first, last, c])
    return out


def _leader(s):
    # set only with NOT_LEADER_OR_FOLLOWER, which one node never answers: the generated defaults, as Kafka's
    return {"leader_id": 0, "leader_epoch": 0}


def _session_answer(s, ctx, gid, mid, renew: bool) -> dict:
    """ShareFetch's and ShareAcknowledge's top level, with the checks both make first (share groups on, a group and
    a member named, READ on the group; a renew acknowledgement (v2 IsRenewAck) in a group whose
    share.renew.acknowledge.enable is false: Kafka 4.4 refuses the whole request): an error is answered with no lock
    timeout, as Kafka answers it."""
    top = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None,
           "acquisition_lock_timeout_ms": s.shares.lock_ms_of(gid), "responses": [], "node_endpoints": []}
    code = UnsupportedVersionError.code if _off(s) else InvalidRequestError.code if not gid or not mid else \
        GROUP_DENIED if not_allowed(s, ctx, "READ", "GROUP", gid) else \
        InvalidRequestError.code if renew and not s.shares.renew_ok(gid) else 0
    if code:
        top.update(error_code=code, acquisition_lock_timeout_ms=0)
    return top


def share_fetch(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    co = s.shares
    gid, mid, epoch = req["group_id"], req["member_id"], req["share_session_epoch"]
    top = _session_answer(s, ctx, gid, mid, v >= 2 and req["is_renew_ack"])
    if top["error_code"]:
        return respond(header, top)
    has_acks = any(p["acknowledgement_batches"] for t in req["topics"] for p in t["partitions"])
    try:
        sess = co.session(gid, mid, epoch, has_acks, ctx.connection)
    except KafkaError as e:  # Kafka answers these with no message and no lock timeout
        top.update(error_code=error_code(e), acquisition_lock_timeout_ms=0)
        return respond(header, top)
    names = s.store.topics_by_id()  # the registry's map: one stat while no topic changed
    if any(t["topic_id"] not in names for t in req["topics"]):
        names = yield s.loop.run_in_executor(None, _names_by_id, s)  # a topic without its id on record yet
    results: dict[tuple[uuid.UUID, int], dict] = {}

    def part(tid, p):
        r = results.get((tid, p))
        if r is None:
            r = results[(tid, p)] = {"partition_index": p, "error_code": 0, "error_message": None,
                                     "acknowledge_error_code": 0, "acknowledge_error_message": None,
                                     "current_leader": _leader(s), "records": b"", "acquired_records": []}
        return r
    acks = {}
    wanted = []
    for t in req["topics"]:
        name = names.get(t["topic_id"])
        for p in t["partitions"]:
            idx = p["partition_index"]
            if name is None:
                part(t["topic_id"], idx)["error_code"] = UnknownTopicIdError.code
                continue
            if not_allowed(s, ctx, "READ", "TOPIC", name):
                part(t["topic_id"], idx)["error_code"] = TOPIC_DENIED
                continue
            if not 0 <= idx < s.partitions(name):
                part(t["topic_id"], idx)["error_code"] = UnknownTopicOrPartitionError.code
                continue
            if p["acknowledgement_batches"]:
                acks[(name, idx)] = _ack_batches(p)
                part(t["topic_id"], idx)
            wanted.append((name, idx))
    renew_ok = v >= 2 and req["is_renew_ack"] and co.renew_ok(gid)
    done: dict = {}
    if sess is not None:
        sess.partitions.update(wanted)
        for t in req["forgotten_topics_data"]:
            name = names.get(t["topic_id"])
            for idx in t["partitions"]:
                sess.partitions.discard((name, idx))
    parts = sorted(sess.partitions) if sess is not None and req["max_wait_ms"] >= 0 else []
    if acks and not parts:  # no acquisition: the acknowledgements alone
        done = yield s.loop.run_in_executor(None, _acknowledge, s, gid, mid, acks, renew_ok)
    got = {}
    if sess is None:  # epoch -1: the session ends after its acknowledgements
        co.sessions.pop((gid, mid), None)
        yield s.loop.run_in_executor(None, co.release, gid, mid)
    elif parts:
        co.open_later(gid, parts)
        k = sess.turn % len(parts)
        parts = parts[k:] + parts[:k]
        sess.turn += 1
        max_records = req["max_records"] if req["max_records"] > 0 else 500
        record_limit = v >= 2 and req["share_acquire_mode"] == 1
        seen = _freed(co, gid, parts)
        got, done = yield s.loop.run_in_executor(None, _acquire, s, gid, mid, parts, max_records, record_limit,
                                                 req["max_bytes"], acks, renew_ok)
        deadline = time.monotonic() + req["max_wait_ms"] / 1000.0
        while not got and not acks and time.monotonic() < deadline:
            if (gid, mid) not in co.sessions or co.sessions[(gid, mid)] is not sess:
                break
            yield _wait_for_data(s, co, gid, parts, deadline, seen)
            seen = _freed(co, gid, parts)
            got, _ = yield s.loop.run_in_executor(None, _acquire, s, gid, mid, parts, max_records, record_limit,
                                                  req["max_bytes"])
        if got:
            co.sync_later(gid, got)
    for (name, idx), (code, message) in done.items():
        r = part(_uuid(s.store.topic_id(name)), idx)
        r["acknowledge_error_code"], r["acknowledge_error_message"] = code, message
    for (name, idx), (data, ranges) in got.items():
        r = part(_uuid(s.store.topic_id(name)), idx)
        r["records"] = data
        r["acquired_records"] = [{"first_offset": a, "last_offset": b, "delivery_count": c} for a, b, c in ranges]
    by_topic: dict[uuid.UUID, list] = {}
    for (tid, _p), r in sorted(results.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        by_topic.setdefault(tid, []).append(r)
    top["responses"] = [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()]
    return respond(header, top)


def _freed(co, gid, parts) -> dict:
    """Each share-partition's ``freed`` count (None: not open yet), taken before an acquisition."""
    out = {}
    for topic, p in parts:
        sp = co.partitions.get((gid, topic, p))
        out[(topic, p)] = None if sp is None else sp.freed
    return out


async def _wait_for_data(s, co, gid, parts, deadline, seen):
    """Until one of ``parts`` has something to acquire (records past what was acquired, while it has room for more
    acquisition locks; offsets settled or given back since ``seen`` was taken, before the acquisition that found
    nothing) or 100 ms passed (expired locks and other processes' releases are looked for again then), or the
    deadline. A partition at its limit of locks is not tried again until some are settled: no spinning."""
    end = min(deadline, time.monotonic() + 0.1)
    committed = co.read_committed(gid)  # records past the last stable offset are not there yet
    max_locks = co.max_locks_of(gid)
    while time.monotonic() < end:
        for topic, p in parts:
            sp = co.partitions.get((gid, topic, p))
            if sp is None:
                continue
            if sp.freed != seen.get((topic, p)):
                return
            if (sp.log.last_stable_offset if committed else sp.log.log_end_offset) > sp.next_offset and \
                    sp.acquired.n < max_locks:
                return
        await asyncio.sleep(min(0.005, max(0.0, end - time.monotonic())))


def share_acknowledge(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    co = s.shares
    gid, mid, epoch = req["group_id"], req["member_id"], req["share_session_epoch"]
    top = _session_answer(s, ctx, gid, mid, v >= 2 and req["is_renew_ack"])
    if top["error_code"]:
        return respond(header, top)
    try:
        if epoch == 0:
            raise InvalidShareSessionEpochError("The share session epoch is invalid.")
        sess = co.session(gid, mid, epoch, False, ctx.connection)
    except KafkaError as e:
        top.update(error_code=error_code(e), acquisition_lock_timeout_ms=0)
        return respond(header, top)
    names = s.store.topics_by_id()  # the registry's map: one stat while no topic changed
    if any(t["topic_id"] not in names for t in req["topics"]):
        names = yield s.loop.run_in_executor(None, _names_by_id, s)  # a topic without its id on record yet
    acks = {}
    out: dict[uuid.UUID, list] = {}
    for t in req["topics"]:
        name = names.get(t["topic_id"])
        for p in t["partitions"]:
            idx = p["partition_index"]
            r = {"partition_index": idx, "error_code": 0, "error_message": None, "current_leader": _leader(s)}
            out.setdefault(t["topic_id"], []).append(r)
            if name is None:
                r["error_code"] = UnknownTopicIdError.code
            elif not_allowed(s, ctx, "READ", "TOPIC", name):
                r["error_code"] = TOPIC_DENIED
            elif not 0 <= idx < s.partitions(name):
                r["error_code"] = UnknownTopicOrPartitionError.code
            else:
                acks[(name, idx)] = (_ack_batches(p), r)
    if acks:
        done = yield s.loop.run_in_executor(None, _acknowledge, s, gid, mid, {k: b for k, (b, _) in acks.items()},
                                            v >= 2 and req["is_renew_ack"] and co.renew_ok(gid))
        for k, (code, message) in done.items():
            r = acks[k][1]
            r["error_code"], r["error_message"] = code, message
    if sess is None:
        co.sessions.pop((gid, mid), None)
        yield s.loop.run_in_executor(None, co.release, gid, mid)
    top["responses"] = [{"topic_id": tid, "partitions": ps} for tid, ps in out.items()]
    return respond(header, top)


def _share_offsets(s, gid: str, topics) -> list:
    """Worker thread: DescribeShareGroupOffsets' topics of one group. ``topics`` None: every partition that has a
    state of the group (the wire's or a DurableQueue's)."""
    from ..client.queue import QUEUES_DIR
    co = s.shares
    if topics is None:  # the topics the members subscribe to (every partition: assigned), and the partitions
        # with a state of the group (Kafka 4.4 lists the ones it initialized: a partition altered alone, say)
        g = co.groups.get(gid)
        subscribed = {t for m in g.members.values() for t in m.topics} if g is not None else set()
        wanted = []
        for name in sorted(set(s.store.topics()) | subscribed):
            n = s.partitions(name)
            parts = list(range(n)) if name in subscribed else \
                [p for p in range(n) if (s.store.log(name, p).dir / QUEUES_DIR / gid).is_dir()]
            if parts:
                wanted.append((name, parts))
    else:
        wanted = [(t["topic_name"], list(t["partitions"])) for t in topics]
    out = []
    for name, parts in wanted:
        try:
            tid = _uuid(s.store.topic_id(name))
        except KafkaError:
            tid = uuid.UUID(int=0)
        rows = []
        for p in parts:
            # a share-partition without a state yet (never fetched): no start offset, no lag, as Kafka answers
            r = {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1, "error_code": 0,
                 "error_message": None}
            if not 0 <= p < s.partitions(name):
                r.update(error_code=UnknownTopicOrPartitionError.code,
                         error_message="The topic-partition is not known.")
            elif (s.store.log(name, p).dir / QUEUES_DIR / gid).is_dir():
                try:
                    start, lag = co.partition(gid, name, p).summary()
                    r.update(start_offset=start, lag=lag)
                except KafkaError as e:
                    r.update(error_code=error_code(e), error_message=str(e))
            rows.append(r)
        out.append({"topic_name": name, "topic_id": tid, "partitions": rows})
    return out


def describe_share_group_offsets(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    for g in req["groups"]:
        gid = g["group_id"]
        r = {"group_id": gid, "topics": [], "error_code": 0, "error_message": None}
        if _off(s):
            r["error_code"] = UnsupportedVersionError.code
        elif not_allowed(s, ctx, "DESCRIBE", "GROUP", gid):
            r["error_code"] = GROUP_DENIED
        elif s.shares._other_type(gid):
            r.update(error_code=GroupIdNotFoundError.code, error_message=f"Group {gid} is not a share group.")
        else:
            topics = g["topics"]
            if topics is not None:
                topics = [t for t in topics if allowed(s, ctx, "DESCRIBE", "TOPIC", t["topic_name"])]
            r["topics"] = yield s.loop.run_in_executor(None, _share_offsets, s, gid, topics)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "groups": out})


def _has_state(s, gid: str) -> bool:
    """Worker thread: whether any partition holds a share-partition state of ``gid`` (the wire's or a
    DurableQueue's)."""
    return gid in s.shares.stored()


def _admin_check(s, ctx, gid: str):
    """The group-level answer of AlterShareGroupOffsets / DeleteShareGroupOffsets before any topic is looked at:
    (error code, message) or None to go on (a generator: a group with committed offsets is looked at off the loop).
    A group nobody joined is altered (its states made) as Kafka 4.4 does; a classic or consumer group's id is
    not a share group's (committed offsets alone make a classic group, unless it has share-partition states: a
    DurableQueue's group commits its acked prefix)."""
    if _off(s):
        return UnsupportedVersionError.code, None
    if not_allowed(s, ctx, "READ", "GROUP", gid):
        return GROUP_DENIED, None
    g = s.shares.groups.get(gid)
    if s.shares._other_type(gid) or (g is None and gid in s.store.offsets.groups() and
                                     not (yield s.loop.run_in_executor(None, _has_state, s, gid))):
        return GroupIdNotFoundError.code, f"Group {gid} is not a share group."
    if g is not None and g.members:
        return NonEmptyGroupError.code, "The group is not empty."
    return None


def _alter_offsets(s, gid: str, wanted) -> list:
    """Worker thread: AlterShareGroupOffsets' topics: each partition's state starts again at its offset."""
    out, unknown = [], []
    co = s.shares
    for name, parts in wanted:
        n = s.partitions(name)
        try:
            tid = _uuid(s.store.topic_id(name)) if n else uuid.UUID(int=0)
        except KafkaError:
            tid, n = uuid.UUID(int=0), 0
        rows = []
        for p, start in parts:
            r = {"partition_index": p, "error_code": 0, "error_message": None}
            if not n or not 0 <= p < n:
                r.update(error_code=UnknownTopicOrPartitionError.code,
                         error_message="This server does not host this topic-partition.")
            else:
                try:
                    co.partition(gid, name, p).reset(start)
                    log.info("share group %s: %s-%d starts at %d (AlterShareGroupOffsets)", gid, name, p, start)
                except KafkaError as e:
                    r.update(error_code=error_code(e), error_message=str(e))
            rows.append(r)
        rows.sort(key=lambda r: r["partition_index"])  # as Kafka 4.4 answers them
        (out if n else unknown).append({"topic_name": name, "topic_id": tid, "partitions": rows})
    return unknown + out  # Kafka 4.4 answers the unknown topics first


def _delete_offsets(s, gid: str, names) -> list:
    """Worker thread: DeleteShareGroupOffsets' topics: every partition's state of the group goes. As Kafka 4.4
    answers: a topic the group has no state of is UNKNOWN_TOPIC_OR_PARTITION (but every topic of a group that has
    no state at all and no member is deleted), and the topics in error come last."""
    from ..client.queue import QUEUES_DIR
    out, failed = [], []
    co = s.shares
    exists = gid in co.groups or _has_state(s, gid)
    for name in names:
        n = s.partitions(name)
        r = {"topic_name": name, "topic_id": uuid.UUID(int=0), "error_code": 0, "error_message": None}
        try:
            if not n:
                raise UnknownTopicOrPartitionError("This server does not host this topic-partition.")
            held = [p for p in range(n) if (s.store.log(name, p).dir / QUEUES_DIR / gid).is_dir()]
            if exists and not held:
                raise UnknownTopicOrPartitionError("There is no offset information to delete.")
            r["topic_id"] = _uuid(s.store.topic_id(name))
            for p in held:
                co.delete_state(gid, name, p)
            if held:
                log.info("share group %s: its state of %s deleted (DeleteShareGroupOffsets)", gid, name)
        except UnknownTopicOrPartitionError as e:
            r.update(error_code=error_code(e), error_message=str(e))
            failed.append(r)
            continue
        except KafkaError as e:
            r.update(error_code=error_code(e), error_message=str(e))
        out.append(r)
    return out + failed


def alter_share_group_offsets(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    gid = req["group_id"]
    top = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None, "responses": []}
    refused = yield from _admin_check(s, ctx, gid)
    if refused is not None:
        top["error_code"], top["error_message"] = refused
        return respond(header, top)
    wanted, denied = [], []
    for t in req["topics"]:
        parts = [(p["partition_index"], p["start_offset"]) for p in t["partitions"]]
        if not_allowed(s, ctx, "READ", "TOPIC", t["topic_name"]):
            denied.append({"topic_name": t["topic_name"], "topic_id": uuid.UUID(int=0), "partitions": [
                {"partition_index": p, "error_code": TOPIC_DENIED, "error_message": None} for p, _ in parts]})
        else:
            wanted.append((t["topic_name"], parts))
    done = yield s.loop.run_in_executor(None, _alter_offsets, s, gid, wanted)
    top["responses"] = denied + done
    return respond(header, top)


def delete_share_group_offsets(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    gid = req["group_id"]
    top = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None, "responses": []}
    refused = yield from _admin_check(s, ctx, gid)
    if refused is not None:
        top["error_code"], top["error_message"] = refused
        return respond(header, top)
    names, denied = [], []
    for t in req["topics"]:
        if not_allowed(s, ctx, "READ", "TOPIC", t["topic_name"]):
            denied.append({"topic_name": t["topic_name"], "topic_id": uuid.UUID(int=0), "error_code": TOPIC_DENIED,
                           "error_message": None})
        else:
            names.append(t["topic_name"])
    done = yield s.loop.run_in_executor(None, _delete_offsets, s, gid, names)
    top["responses"] = denied + done
    return respond(header, top)


HANDLERS = {76: share_group_heartbeat, 77: share_group_describe, 78: share_fetch, 79: share_acknowledge,
            90: describe_share_group_offsets, 91: alter_share_group_offsets, 92: delete_share_group_offsets}

__all__ = ["HANDLERS", "VERSIONS", "ShareCoordinator"]
