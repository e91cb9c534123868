"""KIP-848's online migration over raw frames (migration.py): a classic group upgraded by a ConsumerGroupHeartbeat,
its classic member told REBALANCE_IN_PROGRESS, joining again into the consumer group (the generation is its member
epoch) and syncing its share of the server's assignment, commits by generation, the group described with each
member's type; the downgrade when the consumer-protocol member leaves; Kafka's refusals per
``group.consumer.migration.policy``; a restart in the middle (the group reloads as what it became).

Both of kafkalog's classic coordinators are converted: a member offering ``range`` runs in the group model
(groups.py), one offering only ``cooperative-sticky`` in classic.py. In-process brokers (about 0.3 s a start), wire
round trips only: bounded by the steps of each scenario.
"""

from __future__ import annotations

import time

import pytest

from kafkalog import LogStore
from kafkalog.broker import protocol
from kafkalog.storage import groupformat as gf

from .conftest import RestartableBroker
from .wire import Wire

pytestmark = pytest.mark.usefixtures("deadline")

JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, COMMIT, HB, CG_DESCRIBE = 11, 12, 13, 14, 15, 16, 8, 68, 69
REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, MEMBER_ID_REQUIRED, INCONSISTENT = 27, 22, 79, 23
GROUP_ID_NOT_FOUND = 69
B = "consumer-b-" + "0" * 12


@pytest.fixture
def broker(tmp_path):
    """broker.start(**config) -> a started in-process Broker on tmp_path/data (stopping the one before: a restart
    on the same data dir); ``broker.b`` is the current one."""
    h = RestartableBroker(tmp_path / "data")
    yield h
    h.stop()


def create(w, topic: str, partitions: int):
    r = w.call(19, 7, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                   "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    assert r["topics"][0]["error_code"] == 0, r
    return r["topics"][0]["topic_id"]


def join(w, group, member_id, assignor="range", topics=("t",), owned=None, version=9, instance=None,
         protocol_type="consumer", metadata=None, session_ms=10000, rebalance_ms=10000):
    sub = metadata if metadata is not None else (
        protocol.encode_subscription(list(topics)) if owned is None else
        protocol.encode_subscription(list(topics), version=1, owned_partitions=owned))
    return w.call(JOIN, version, {"group_id": group, "session_timeout_ms": session_ms,
                                  "rebalance_timeout_ms": rebalance_ms, "member_id": member_id,
                                  "group_instance_id": instance, "protocol_type": protocol_type, "reason": None,
                                  "protocols": [{"name": assignor, "metadata": sub}]})


def sync(w, group, generation, member_id, assignments=(), version=5, assignor="range"):
    return w.call(SYNC, version, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                  "group_instance_id": None, "protocol_type": "consumer", "protocol_name": assignor,
                                  "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]})


def heartbeat(w, group, generation, member_id) -> int:
    return w.call(HEARTBEAT, 4, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                 "group_instance_id": None})["error_code"]


def hb(w, group, member, epoch, topics=None, owned=None):
    return w.call(HB, 1, {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None,
                          "rack_id": None, "rebalance_timeout_ms": 10000 if epoch == 0 else -1,
                          "subscribed_topic_names": topics, "subscribed_topic_regex": None, "server_assignor": None,
                          "topic_partitions": None if owned is None else
                          [{"topic_id": t, "partitions": ps} for t, ps in owned]})


def cg_describe(w, group) -> dict:
    r = w.call(CG_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    r["members"].sort(key=lambda m: m["member_id"])
    return r


def assigned(r) -> list:
    """A SyncGroup's assignment: [(topic, partition)]."""
    a = protocol.decode_assignment(r["assignment"])["assigned_partitions"]
    return sorted((t, p) for t, ps in a.items() for p in ps)


def classic_member(w, group, assignor, partitions=4, rebalance_ms=10000):
    """A classic member alone in ``group``, holding every partition of ``t``: its member id and generation."""
    r = join(w, group, "", assignor, rebalance_ms=rebalance_ms)
    assert r["error_code"] == MEMBER_ID_REQUIRED, r
    a = r["member_id"]
    r = join(w, group, a, assignor, rebalance_ms=rebalance_ms)
    assert r["error_code"] == 0 and r["leader"] == a, r
    gen = r["generation_id"]
    mine = protocol.encode_assignment({"t": list(range(partitions))})
    r = sync(w, group, gen, a, [(a, mine)], assignor=assignor)
    assert r["error_code"] == 0 and assigned(r) == [("t", p) for p in range(partitions)], r
    return a, gen


def upgraded(w, group, assignor, rebalance_ms=10000):
    """A classic member A (all 4 partitions of t), then B joins with ConsumerGroupHeartbeat: the group is a
    consumer group. (A's id and generation, B's answer, t's id.)"""
    a, gen = classic_member(w, group, assignor, rebalance_ms=rebalance_ms)
    r = hb(w, group, B, 0, topics=["t"], owned=[])
    assert r["error_code"] == 0, r
    return a, gen, r


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_classic_group_upgrades_and_downgrades(broker, assignor, tmp_path):
    b = broker.start()
    group = f"g-{assignor}"
    with Wire(b.port) as w:
        create(w, "t", 4)
        a, gen, r = upgraded(w, group, assignor)
        # the conversion keeps A at its generation (the group's epochs too); B is a new member: one epoch more, and
        # nothing for it until A gave up its half
        assert r["member_epoch"] == gen + 1 and r["assignment"]["topic_partitions"] == [], r
        d = cg_describe(w, group)
        assert d["error_code"] == 0 and d["group_epoch"] == gen + 1, d
        types = {m["member_id"]: (m["member_type"], m["member_epoch"]) for m in d["members"]}
        assert types == {a: (0, gen), B: (1, gen + 1)}, d
        # A is told to join again; at the old generation SyncGroup says so too
        assert heartbeat(w, group, gen, a) == REBALANCE_IN_PROGRESS
        assert sync(w, group, gen, a, assignor=assignor)["error_code"] == REBALANCE_IN_PROGRESS
        assert heartbeat(w, group, gen + 5, a) == ILLEGAL_GENERATION
        # A joins again (an eager member owns nothing any more): the generation is its new member epoch
        r = join(w, group, a, assignor)
        assert (r["error_code"], r["generation_id"], r["protocol_type"], r["protocol_name"], r["leader"],
                r["members"], r["skip_assignment"]) == (0, gen + 1, "consumer", assignor, "", [], False), r
        r = sync(w, group, gen + 1, a, assignor=assignor)
        assert r["error_code"] == 0 and (r["protocol_type"], r["protocol_name"]) == ("consumer", assignor), r
        mine = assigned(r)
        assert len(mine) == 2, r
        assert heartbeat(w, group, gen + 1, a) == 0
        # B gets the other half once A released it
        r = hb(w, group, B, gen + 1, owned=[])
        theirs = sorted(("t", p) for tp in r["assignment"]["topic_partitions"] for p in tp["partitions"])
        assert r["error_code"] == 0 and len(theirs) == 2 and not set(theirs) & set(mine), r
        d = cg_describe(w, group)
        assert d["group_state"] == "Stable", d
        # commits: the classic member's generation is its member epoch; at an older one, a partition it has held
        # since then (Kafka 4.4's per-partition check), at a newer one nothing
        assert commit(w, group, a, gen + 1) == 0
        assert [commit(w, group, a, gen, p) for p in range(4)] == [0 if ("t", p) in mine else ILLEGAL_GENERATION
                                                                   for p in range(4)]
        assert commit(w, group, a, gen + 2) == ILLEGAL_GENERATION
        # the other doors: ListGroups says consumer, DescribeGroups knows no classic group
        listed = [x for x in w.call(LIST, 5, {"states_filter": [], "types_filter": []})["groups"]
                  if x["group_id"] == group]
        assert listed == [{"group_id": group, "protocol_type": "consumer", "group_state": "Stable",
                           "group_type": "consumer"}], listed
        d = w.call(DESCRIBE, 6, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        assert d["error_code"] == GROUP_ID_NOT_FOUND, d
        # a member of another kind is refused
        r = join(w, group, "", "sessioned", protocol_type="connect", metadata=b"x")
        assert r["error_code"] == INCONSISTENT, r
        # B leaves: A alone uses the classic protocol, the group is a classic one again, rebalancing
        r = hb(w, group, B, -1)
        assert r["error_code"] == 0, r
        d = cg_describe(w, group)
        assert (d["error_code"], d["error_message"]) == (GROUP_ID_NOT_FOUND,
                                                         f"Group {group} is not a consumer group."), d
        assert heartbeat(w, group, gen + 1, a) == REBALANCE_IN_PROGRESS
        r = join(w, group, a, assignor)
        assert r["error_code"] == 0 and r["generation_id"] == gen + 2 and r["leader"] == a, r
        r = sync(w, group, gen + 2, a, [(a, protocol.encode_assignment({"t": [0, 1, 2, 3]}))], assignor=assignor)
        assert r["error_code"] == 0 and len(assigned(r)) == 4, r
        d = w.call(DESCRIBE, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        assert (d["group_state"], d["protocol_type"], d["protocol_data"], [m["member_id"] for m in d["members"]]) \
            == ("Stable", "consumer", assignor, [a]), d
    b.stop()
    broker.b = None
    # what __consumer_offsets holds: the classic group's record, no consumer group record
    with LogStore(tmp_path / "data") as store:
        types = sorted(gf.decode_group_key(k).type for k in store.offsets.group_records(group))
    assert types == [gf.GROUP_METADATA], types


def commit(w, group, member, generation, partition=0) -> int:
    r = w.call(COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                           "group_instance_id": None, "retention_time_ms": -1, "topics": [
                               {"name": "t", "partitions": [{"partition_index": partition, "committed_offset": 1,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def test_the_upgraded_group_reloads_as_what_it_became(broker):
    """A restart while the group is a consumer group with a classic member: both go on at their epochs; a restart
    after the downgrade: a classic group."""
    b = broker.start()
    group = "g-restart"
    with Wire(b.port) as w:
        create(w, "t", 4)
        a, gen, r = upgraded(w, group, "cooperative-sticky")
        r = join(w, group, a, "cooperative-sticky")
        assert r["generation_id"] == gen + 1, r
        before = cg_describe(w, group)
    b = broker.start()
    with Wire(b.port) as w:
        after = cg_describe(w, group)
        for m in before["members"] + after["members"]:
            m.pop("client_host")
        assert after == before, f"\n{before}\n{after}"
        assert heartbeat(w, group, gen + 1, a) == 0
        r = sync(w, group, gen + 1, a, assignor="cooperative-sticky")
        assert r["error_code"] == 0 and len(assigned(r)) == 2, r
        assert hb(w, group, B, gen + 1, owned=[])["error_code"] == 0
        assert hb(w, group, B, -1)["error_code"] == 0
    b = broker.start()
    with Wire(b.port) as w:
        d = w.call(DESCRIBE, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        assert (d["group_state"], d["protocol_type"], [m["member_id"] for m in d["members"]]) == \
            ("Stable", "consumer", [a]), d
        assert cg_describe(w, group)["error_code"] == GROUP_ID_NOT_FOUND
        assert heartbeat(w, group, gen + 1, a) == 0  # loaded Stable at the generation of the conversion


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_no_upgrade_unless_the_policy_allows_it(broker, policy):
    b = broker.start(**{"group.consumer.migration.policy": policy})
    with Wire(b.port) as w:
        create(w, "t", 4)
        a, gen = classic_member(w, "g", "range")
        r = hb(w, "g", B, 0, topics=["t"], owned=[])
        assert (r["error_code"], r["error_message"]) == (GROUP_ID_NOT_FOUND, "Cannot upgrade classic group g to "
                                                         "consumer group because online upgrade is disabled."), r
        assert heartbeat(w, "g", gen, a) == 0  # the classic group goes on
        # a classic consumer joining a consumer group: refused only when the migration is disabled (Kafka 4.4's
        # throwIfClassicMemberCannotJoinConsumerGroup: INCONSISTENT_GROUP_PROTOCOL)
        assert hb(w, "k", B, 0, topics=["t"], owned=[])["error_code"] == 0
        r = join(w, "k", "", "range")
        assert r["error_code"] == (INCONSISTENT if policy == "disabled" else MEMBER_ID_REQUIRED), r


def test_no_downgrade_unless_the_policy_allows_it(broker):
    b = broker.start(**{"group.consumer.migration.policy": "upgrade"})
    with Wire(b.port) as w:
        create(w, "t", 4)
        a, gen, r = upgraded(w, "g", "range")
        assert hb(w, "g", B, -1)["error_code"] == 0
        d = cg_describe(w, "g")  # still a consumer group, of one classic member
        assert d["error_code"] == 0 and [(m["member_id"], m["member_type"]) for m in d["members"]] == [(a, 0)], d


def refused(w, group):
    r = hb(w, group, B, 0, topics=["t"], owned=[])
    return r["error_code"], r["error_message"].removeprefix(f"Cannot upgrade classic group {group} to consumer group "
                                                            "because ")


def test_upgrade_refusals(broker):
    """Kafka's refusals (GROUP_ID_NOT_FOUND and its message): a group of another kind, a member's metadata that is
    not the consumer protocol, a custom assignor's user data in an assignment."""
    b = broker.start()
    with Wire(b.port) as w:
        create(w, "t", 4)
        r = join(w, "connect", "", "sessioned", protocol_type="connect", metadata=b"x")
        r = join(w, "connect", r["member_id"], "sessioned", protocol_type="connect", metadata=b"x")
        assert r["error_code"] == 0, r
        assert refused(w, "connect") == (GROUP_ID_NOT_FOUND, "the group does not use the consumer embedded protocol.")
        r = join(w, "bad", "", "cooperative-sticky", metadata=b"\x00\x00garbage")
        r = join(w, "bad", r["member_id"], "cooperative-sticky", metadata=b"\x00\x00garbage")
        assert r["error_code"] == 0, r
        assert refused(w, "bad") == (GROUP_ID_NOT_FOUND, "the embedded consumer protocol is malformed.")
        a = join(w, "custom", "", "cooperative-sticky")["member_id"]
        gen = join(w, "custom", a, "cooperative-sticky")["generation_id"]
        r = sync(w, "custom", gen, a, [(a, protocol.encode_assignment({"t": [0]}, b"user data"))],
                 assignor="cooperative-sticky")
        assert r["error_code"] == 0, r
        code, message = refused(w, "custom")
        assert code == GROUP_ID_NOT_FOUND and message.startswith("an unsupported custom assignor is in use."), message


def test_no_upgrade_past_the_consumer_groups_size_limit(broker):
    """Two classic members (joining together: the group's initial delay holds the first join for the second), at
    most one in a consumer group (group.consumer.max.size)."""
    b = broker.start(**{"group.consumer.max.size": 1, "group.initial.rebalance.delay.ms": 300})
    with Wire(b.port) as w, Wire(b.port) as w2:
        create(w, "t", 4)
        ids = [join(x, "two", "", "cooperative-sticky")["member_id"] for x in (w, w2)]
        for x, m in zip((w, w2), ids):
            x.send(JOIN, 9, {"group_id": "two", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                             "member_id": m, "group_instance_id": None, "protocol_type": "consumer", "reason": None,
                             "protocols": [{"name": "cooperative-sticky",
                                            "metadata": protocol.encode_subscription(["t"])}]})
        for x in (w, w2):
            assert protocol.decode_response(JOIN, 9, x.recv_frame())[1]["error_code"] == 0
        assert refused(w, "two") == (GROUP_ID_NOT_FOUND, "the group size exceeds the consumer group maximum size.")


def test_a_classic_member_joins_a_consumer_group(broker):
    """A consumer group of one consumer-protocol member: a classic consumer joins (MEMBER_ID_REQUIRED first, then
    at once with a generation: no join phase), syncs its share; LeaveGroup removes it (the group stays a consumer
    group); a JoinGroup with no protocol of the classic members is refused."""
    b = broker.start()
    with Wire(b.port) as w:
        t = create(w, "t", 4)
        r = hb(w, "g", B, 0, topics=["t"], owned=[])
        eb = r["member_epoch"]
        r = join(w, "g", "", "range")
        assert r["error_code"] == MEMBER_ID_REQUIRED and len(r["member_id"]) == 22, r  # Kafka's Uuid, base64
        a = r["member_id"]
        r = join(w, "g", a, "range")
        assert r["error_code"] == 0 and r["generation_id"] == eb + 1 and r["members"] == [], r
        gen = r["generation_id"]
        r = sync(w, "g", gen, a)
        assert r["error_code"] == 0 and assigned(r) == [], r  # B still holds all
        assert heartbeat(w, "g", gen, a) == 0  # waiting on partitions B holds
        r = hb(w, "g", B, eb, owned=[(t, [0, 1, 2, 3])])
        kept = [p for tp in r["assignment"]["topic_partitions"] for p in tp["partitions"]]
        assert r["error_code"] == 0 and len(kept) == 2, r
        r = hb(w, "g", B, eb, owned=[(t, kept)])  # B gave up the other half
        assert r["error_code"] == 0, r
        assert heartbeat(w, "g", gen, a) == REBALANCE_IN_PROGRESS  # what it waited for is free: join again
        r = join(w, "g", a, "range")
        r = sync(w, "g", r["generation_id"], a)
        assert len(assigned(r)) == 2, r
        assert join(w, "g", "", "roundrobin")["error_code"] == INCONSISTENT
        r = w.call(LEAVE, 5, {"group_id": "g", "members": [{"member_id": a, "group_instance_id": None,
                                                             "reason": None}]})
        assert r["error_code"] == 0 and r["members"][0]["error_code"] == 0, r
        d = cg_describe(w, "g")
        assert [m["member_id"] for m in d["members"]] == [B], d



def test_members_fenced_by_their_timers(broker):
    """The broker's sweep (every 0.5 s) fences a consumer-protocol member silent for group.consumer.session.timeout.ms
    (the last one: the group becomes classic again), and a classic member told to join again that does not within
    its rebalance timeout (Kafka's join timer). Bounded by heartbeat counts (each 0.1 s apart, at most 50): about
    2.5 s (the two timeouts and the sweep's period)."""
    b = broker.start(**{"group.consumer.session.timeout.ms": 1000})
    with Wire(b.port) as w:
        create(w, "t", 4)
        a, gen, _ = upgraded(w, "silent-b", "range")
        for _ in range(50):  # A heartbeats (told to join again, its join timer is 10 s); B says nothing
            code = heartbeat(w, "silent-b", gen, a)
            if cg_describe(w, "silent-b")["error_code"] == GROUP_ID_NOT_FOUND:
                break
            assert code == REBALANCE_IN_PROGRESS
            time.sleep(0.1)
        assert cg_describe(w, "silent-b")["error_code"] == GROUP_ID_NOT_FOUND  # a classic group again
        # A's generation was its member epoch, the classic group's is the group epoch
        assert heartbeat(w, "silent-b", gen, a) == ILLEGAL_GENERATION
        assert join(w, "silent-b", a)["generation_id"] == gen + 2
        # a classic member (rebalance timeout 600 ms) told to join again that does not: fenced, B goes on
        a, gen, r = upgraded(w, "lazy-a", "range", rebalance_ms=600)
        eb = r["member_epoch"]
        assert heartbeat(w, "lazy-a", gen, a) == REBALANCE_IN_PROGRESS
        for _ in range(50):
            r = hb(w, "lazy-a", B, eb, owned=[])
            assert r["error_code"] == 0, r
            eb = r["member_epoch"]
            if [m["member_id"] for m in cg_describe(w, "lazy-a")["members"]] == [B]:
                break
            time.sleep(0.1)
        assert [m["member_id"] for m in cg_describe(w, "lazy-a")["members"]] == [B]
        assert heartbeat(w, "lazy-a", gen, a) == 25  # UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_conversion_whose_write_fails_is_taken_back(broker, assignor):
    """The disk refuses the write of a conversion (failpoint groups:before-store, an EIO): the heartbeat that would
    upgrade the group is answered NOT_COORDINATOR and the classic group goes on as before (its member heartbeats at
    its generation); the heartbeat that would downgrade it likewise, the consumer group with both members back. Once
    the disk takes writes again, both conversions go through."""
    from kafkalog.storage import failpoints
    b = broker.start()
    group = f"fail-{assignor}"
    with Wire(b.port) as w:
        create(w, "t", 4)
        a, gen = classic_member(w, group, assignor)
        failpoints.enable("groups:before-store", "raise")
        try:
            r = hb(w, group, B, 0, topics=["t"], owned=[])
        finally:
            failpoints.disable("groups:before-store")
        assert r["error_code"] == 16, r  # NOT_COORDINATOR
        assert heartbeat(w, group, gen, a) == 0
        d = w.call(DESCRIBE, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        assert (d["group_state"], [m["member_id"] for m in d["members"]]) == ("Stable", [a]), d
        assert cg_describe(w, group)["error_code"] == GROUP_ID_NOT_FOUND
        r = hb(w, group, B, 0, topics=["t"], owned=[])
        assert r["error_code"] == 0 and r["member_epoch"] == gen + 1, r
        assert heartbeat(w, group, gen, a) == REBALANCE_IN_PROGRESS
        r = join(w, group, a, assignor)
        assert r["generation_id"] == gen + 1, r
        before = cg_describe(w, group)
        failpoints.enable("groups:before-store", "raise")
        try:
            r = hb(w, group, B, -1)
        finally:
            failpoints.disable("groups:before-store")
        assert r["error_code"] == 16, r
        assert cg_describe(w, group) == before  # still a consumer group of both
        assert heartbeat(w, group, gen + 1, a) == 0
        assert hb(w, group, B, -1)["error_code"] == 0
        assert heartbeat(w, group, gen + 1, a) == REBALANCE_IN_PROGRESS  # the classic group's rebalance
        assert cg_describe(w, group)["error_code"] == GROUP_ID_NOT_FOUND
