"""KIP-848 consumer groups, differential: the same raw ConsumerGroupHeartbeat / ConsumerGroupDescribe / OffsetCommit
v9 / ListGroups v5 / DescribeGroups exchange against Apache Kafka 4.4 and kafkalog, the answers compared field by
field.

ConsumerGroupHeartbeat v1 members name themselves (KIP-1082), so the scenario's member ids are the same on both
brokers; topic ids are the brokers' own and are compared by the topic they name. Bounded by the steps of the
scenario: every heartbeat is answered at once.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.broker.wire import Wire
from tests.compat.test_group_protocols import _coordinator_ready, _join, _port

HB, DESCRIBE = 68, 69


class Ids:
    """Topic ids to names (each broker has its own ids)."""

    def __init__(self):
        self.names: dict[uuid.UUID, str] = {}

    def __call__(self, value):
        if isinstance(value, uuid.UUID):
            return self.names.get(value, "<unknown topic id>")
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items() if k not in ("throttle_time_ms", "client_host")}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        return value


def _create(w: Wire, ids: Ids, topic: str, partitions: int) -> uuid.UUID:
    r = w.call(19, 7, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                   "assignments": [], "configs": []}], "timeout_ms": 30000, "validate_only": False})
    assert r["topics"][0]["error_code"] == 0, r
    tid = r["topics"][0]["topic_id"]
    ids.names[tid] = topic
    return tid


def _seen_by_coordinator(w, group: str, topic: str) -> None:
    """Until a throwaway group is assigned ``topic``'s partitions (at most 50 heartbeats): Apache Kafka's coordinator
    sees a topic once its metadata image has it, a moment after CreateTopics answered."""
    probe = f"{group}-probe"
    r = join(w, probe, "probe-member-0000000000", [topic])
    for _ in range(50):
        if _assigned(r):
            break
        time.sleep(0.1)
        r = hb(w, probe, "probe-member-0000000000", r["member_epoch"], owned=[])
    hb(w, probe, "probe-member-0000000000", -1)


def hb(w, group, member, epoch, *, version=1, topics=None, regex=None, owned=None, rebalance_ms=-1,
       instance=None, assignor=None, rack=None):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance,
            "rack_id": rack, "rebalance_timeout_ms": rebalance_ms, "subscribed_topic_names": topics,
            "subscribed_topic_regex": regex, "server_assignor": assignor,
            "topic_partitions": None if owned is None else [{"topic_id": t, "partitions": ps} for t, ps in owned]}
    for _ in range(100):
        r = w.call(HB, version, body)
        if r["error_code"] not in (14, 15):  # Kafka's coordinator loading __consumer_offsets
            return r
        time.sleep(0.2)
    return r


def join(w, group, member, topics, **kw):
    return hb(w, group, member, 0, topics=topics, owned=[], rebalance_ms=kw.pop("rebalance_ms", 30000), **kw)


def _assigned(r) -> list:
    a = r.get("assignment")
    return [] if a is None else [(t["topic_id"], t["partitions"]) for t in a["topic_partitions"]]


def _describe(w, group):
    r = w.call(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    r.pop("authorized_operations", None)
    for m in r["members"]:
        m.pop("client_host", None)
    return r


def _commit(w, version, group, member, epoch, topic, partition, offset=5):
    r = w.call(8, version, {"group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member,
                            "group_instance_id": None, "retention_time_ms": -1, "topics": [
                                {"name": topic, "partitions": [{"partition_index": partition,
                                                                "committed_offset": offset,
                                                                "committed_leader_epoch": -1,
                                                                "committed_metadata": ""}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def errors_scenario(target, group: str) -> list:
    """The request checks (INVALID_REQUEST texts, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION's code) and the
    answers for unknown members and groups."""
    ids = Ids()
    out = []
    with Wire(_port(target), client_id="kip848") as w:
        _coordinator_ready(w, group)
        t = _create(w, ids, f"{group}-t", 2)
        del t
        cases = [
            ("empty group id", dict(group="", member="m1", epoch=0, topics=["x"], owned=[], rebalance_ms=1000)),
            ("empty member id (v1)", dict(group=group, member="", epoch=0, topics=["x"], owned=[],
                                          rebalance_ms=1000)),
            ("no rebalance timeout", dict(group=group, member="m1", epoch=0, topics=["x"], owned=[])),
            ("owned partitions on join", dict(group=group, member="m1", epoch=0, topics=["x"],
                                              owned=[(uuid.uuid4(), [0])], rebalance_ms=1000)),
            ("owned partitions null on join", dict(group=group, member="m1", epoch=0, topics=["x"],
                                                   rebalance_ms=1000)),
            ("no subscription", dict(group=group, member="m1", epoch=0, owned=[], rebalance_ms=1000)),
            ("empty instance id", dict(group=group, member="m1", epoch=0, topics=["x"], owned=[],
                                       rebalance_ms=1000, instance="")),
            ("empty rack id", dict(group=group, member="m1", epoch=0, topics=["x"], owned=[],
                                   rebalance_ms=1000, rack=" ")),
            ("epoch -2 without instance id", dict(group=group, member="m1", epoch=-2)),
            ("epoch -3", dict(group=group, member="m1", epoch=-3)),
            ("unsupported assignor", dict(group=group, member="m1", epoch=0, topics=["x"], owned=[],
                                          rebalance_ms=1000, assignor="sticky")),
            ("unknown member, epoch 3", dict(group=group, member="nobody", epoch=3)),
            ("leave of an unknown group", dict(group=f"{group}-none", member="nobody", epoch=-1)),
        ]
        for what, kw in cases:
            g, m, e = kw.pop("group"), kw.pop("member"), kw.pop("epoch")
            out.append((what, ids(hb(w, g, m, e, **kw))))
        r = hb(w, group, "m1", 0, regex="(?<=a)b", owned=[], rebalance_ms=1000)
        out.append(("a look-behind regex (not RE2)", r["error_code"], r["member_epoch"]))
        r = hb(w, group, "m1", 0, regex="[a-", owned=[], rebalance_ms=1000)
        out.append(("a malformed regex", r["error_code"], r["member_epoch"]))
        r = hb(w, group, "", 0, version=0, topics=["x"], owned=[], rebalance_ms=1000)
        out.append(("v0 join without member id: the coordinator names it", r["error_code"],
                    len(r["member_id"] or "") > 0, r["member_epoch"]))
        hb(w, group, r["member_id"], -1, version=0)
        describe = w.call(DESCRIBE, 1, {"group_ids": ["", f"{group}-none"], "include_authorized_operations": False})
        out.append(("describe: empty id, unknown group", ids(describe["groups"])))
    return out


def rebalance_scenario(target, group: str) -> list:
    """Two members share 4 partitions: A joins alone and takes all; B joins, gets nothing until A released what it
    gives up (A's answer keeps its epoch and shrinks its assignment; A's next heartbeat, owning only its half, moves
    it to the new epoch); then the fencing rules, the lost-response tolerance, commits by member epoch, the group as
    ConsumerGroupDescribe, ListGroups v5 and DescribeGroups show it, a classic JoinGroup asked for a member id
    (KIP-848's online migration), A leaving."""
    ids = Ids()
    out = []
    a, b = "member-a-" + "0" * 14, "member-b-" + "0" * 14
    with Wire(_port(target), client_id="kip848") as w:
        _coordinator_ready(w, group)
        topic = f"{group}-t"
        t = _create(w, ids, topic, 4)
        _seen_by_coordinator(w, group, topic)
        r = join(w, group, a, [topic])
        out.append(("A joins", ids(r)))
        ea = r["member_epoch"]
        for _ in range(20):  # Kafka may answer a first heartbeat before its assignment is computed
            if _assigned(r):
                break
            time.sleep(0.2)
            r = hb(w, group, a, ea, owned=[])
            ea = r["member_epoch"]
        out.append(("A's assignment", ids(_assigned(r)), ea))
        r = hb(w, group, a, ea, owned=[(t, [0, 1, 2, 3])])
        out.append(("A heartbeats", ids(r)))
        r = join(w, group, b, [topic])
        eb = r["member_epoch"]
        out.append(("B joins: partitions withheld until A releases them", ids(r)))
        r = hb(w, group, a, ea, owned=[(t, [0, 1, 2, 3])])
        out.append(("A is asked to revoke", ids(r)))
        kept = _assigned(r)[0][1] if _assigned(r) else []
        r = hb(w, group, b, eb, owned=[])
        out.append(("B before A released", ids(r)))
        r = hb(w, group, a, ea, owned=[(t, kept)])
        out.append(("A released", ids(r)))
        prev, ea = ea, r["member_epoch"]
        r = hb(w, group, b, eb, owned=[])
        eb = r["member_epoch"]
        out.append(("B gets the released partitions", ids(r)))
        out.append(("A at a greater epoch", ids(hb(w, group, a, ea + 5, owned=[(t, kept)]))))
        out.append(("A at the previous epoch, a subset owned (a lost answer)",
                    ids(hb(w, group, a, prev, owned=[(t, kept)]))))
        out.append(("describe", ids(_describe(w, group))))
        out.append(("commit v9 at A's epoch", _commit(w, 9, group, a, ea, topic, kept[0])))
        out.append(("commit v9 at a greater epoch", _commit(w, 9, group, a, ea + 1, topic, kept[0])))
        out.append(("commit v9 by an unknown member", _commit(w, 9, group, "nobody", ea, topic, kept[0])))
        out.append(("commit v8 by a member", _commit(w, 8, group, a, ea, topic, kept[0])))
        out.append(("commit v9 from outside the group", _commit(w, 9, group, "", -1, topic, kept[0])))
        listed = w.call(16, 5, {"states_filter": [], "types_filter": ["consumer"]})["groups"]
        out.append(("ListGroups v5 consumer", [x for x in listed if x["group_id"] == group]))
        listed = w.call(16, 5, {"states_filter": [], "types_filter": ["classic"]})["groups"]
        out.append(("ListGroups v5 classic", [x for x in listed if x["group_id"] == group]))
        d = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        d.pop("authorized_operations", None)
        for m in d["members"]:
            m.pop("client_host", None)
        d["members"].sort(key=lambda m: m["member_id"])
        out.append(("DescribeGroups v5", ids(d)))
        from kafkalog.broker import protocol
        r = _join(w, 9, group, "", "consumer", [("range", protocol.encode_subscription([topic]))])
        # a classic consumer joins a consumer group (KIP-848's online migration: MEMBER_ID_REQUIRED first)
        out.append(("a classic JoinGroup", r["error_code"], r["generation_id"]))
        r = _join(w, 9, group, "", "connect", [("sessioned", b"x")])
        out.append(("a connect JoinGroup", r["error_code"]))
        out.append(("A leaves", ids(hb(w, group, a, -1))))
        out.append(("A after leaving", ids(hb(w, group, a, ea, owned=[(t, kept)]))))
        r = hb(w, group, b, eb, owned=[(t, _assigned(r)[0][1] if _assigned(r) else [])])
        out.append(("B takes everything", ids(r)))
        out.append(("A rejoins with its id", ids(join(w, group, a, [topic]))))
    return out


def static_scenario(target, group: str) -> list:
    """Static members: an instance id held by an active member (UNRELEASED_INSTANCE_ID), a temporary leave (-2), its
    replacement keeping the assignment, the old member id fenced (FENCED_INSTANCE_ID)."""
    ids = Ids()
    out = []
    s1, s2 = "static-1-" + "0" * 14, "static-2-" + "0" * 14
    with Wire(_port(target), client_id="kip848") as w:
        _coordinator_ready(w, group)
        topic = f"{group}-t"
        t = _create(w, ids, topic, 2)
        _seen_by_coordinator(w, group, topic)
        r = join(w, group, s1, [topic], instance="i-1")
        e1 = r["member_epoch"]
        for _ in range(20):
            if _assigned(r):
                break
            time.sleep(0.2)
            r = hb(w, group, s1, e1, owned=[], instance="i-1")
            e1 = r["member_epoch"]
        out.append(("S1 joins", ids(r)))
        out.append(("S2 takes the instance id while S1 is active", ids(join(w, group, s2, [topic], instance="i-1"))))
        out.append(("S1 leaves for a while (-2)", ids(hb(w, group, s1, -2, instance="i-1"))))
        out.append(("describe while away", ids(_describe(w, group))))
        r = join(w, group, s2, [topic], instance="i-1")
        out.append(("S2 replaces S1", ids(r)))
        out.append(("S1 heartbeats", ids(hb(w, group, s1, e1, owned=[(t, [0, 1])], instance="i-1"))))
        out.append(("S1 leaves", ids(hb(w, group, s1, -1, instance="i-1"))))
        out.append(("describe", ids(_describe(w, group))))
        out.append(("S2 leaves", ids(hb(w, group, s2, -1, instance="i-1"))))
        out.append(("describe, empty", ids(_describe(w, group))))
    return out


def test_heartbeat_validation_as_kafka(targets, topic_name, compare):
    group = topic_name("g")
    answers = {name: errors_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="ConsumerGroupHeartbeat's checks")


def test_two_members_rebalance_as_kafka(targets, topic_name, compare):
    group = topic_name("g")
    answers = {name: rebalance_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="KIP-848 join, revocation, epochs and fencing")


def test_static_members_as_kafka(targets, topic_name, compare):
    group = topic_name("g")
    answers = {name: static_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="KIP-848 static members")


def _kip848_consumer(bootstrap: str, group: str, topic: str, events: list):
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "broker.address.family": "v4"})
    c.subscribe([topic], on_assign=lambda _c, ps: events.append(("assigned", sorted(p.partition for p in ps))),
                on_revoke=lambda _c, ps: events.append(("revoked", sorted(p.partition for p in ps))))
    return c


def _poll(consumers, done, polls: int = 300) -> None:
    for _ in range(polls):
        for c in consumers:
            c.poll(0.1)
        if done():
            return
    raise AssertionError("the group did not reach the expected assignment")


def librdkafka_scenario(target, topic: str, group: str) -> dict:
    """Two librdkafka consumers with group.protocol=consumer split 4 partitions (incrementally: the first gives up
    two, the second gets them after); the first closes (a leave, epoch -1) and the second gets all four."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": target.bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    ea, eb = [], []
    a = _kip848_consumer(target.bootstrap, group, topic, ea)
    b = None
    try:
        _poll([a], lambda: len(a.assignment()) == 4)
        b = _kip848_consumer(target.bootstrap, group, topic, eb)
        _poll([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        split = (sorted(p.partition for p in a.assignment()), sorted(p.partition for p in b.assignment()))
        a.close()
        a = None
        _poll([b], lambda: len(b.assignment()) == 4)
        return {"split": [len(x) for x in split], "disjoint": not set(split[0]) & set(split[1]),
                "a's callbacks": [(k, len(ps)) for k, ps in ea],
                "b's callbacks": [(k, len(ps)) for k, ps in eb], "b at the end": sorted(p.partition for p in
                                                                                    b.assignment())}
    finally:
        for c in (a, b):
            if c is not None:
                c.close()


@pytest.mark.slow
def test_librdkafka_kip848_consumers_as_kafka(targets, topic_name, compare):
    """librdkafka 2.16's KIP-848 consumer (confluent-kafka, group.protocol=consumer): about 10-20 s per broker
    (heartbeats every 5 s while nothing changes)."""
    answers = {name: librdkafka_scenario(t, topic_name("t"), topic_name("g")) for name, t in targets.items()}
    assert answers["kafka"]["b at the end"] == [0, 1, 2, 3], answers
    compare(answers["kafka"], answers["kafkalog"], what="librdkafka's KIP-848 consumers")
