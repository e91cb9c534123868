"""KIP-848's online migration between classic and consumer groups, differential: the same raw exchange against Apache
Kafka 4.4 and kafkalog, the answers compared field by field (member ids by role, topic ids by the topic they name,
assignments as partition counts where the two assignors may pick other partitions of the same share).

- upgrade: a classic consumer A holds every partition; B joins with ConsumerGroupHeartbeat (the group becomes a
  consumer group); A is told REBALANCE_IN_PROGRESS (Heartbeat, SyncGroup), joins again (its generation is its member
  epoch; no leader, no members), syncs its half; B gets the other half; commits by generation; the group as
  ConsumerGroupDescribe (member types), ListGroups and DescribeGroups show it; JoinGroups of another kind or with
  a protocol the classic members lack are refused; a new classic member C is asked for a member id;
- downgrade: B leaves; A is told to join again into the classic group it became, leads it;
- refusals: the upgrade of a group of another kind, of a group whose member's metadata is not the consumer
  protocol, of a group whose assignment carries a custom assignor's user data.

Run for both kinds of kafkalog's classic groups: ``range`` (the group model) and ``cooperative-sticky``
(classic.py). Bounded by the steps of each scenario: each request is answered at once (the lab's brokers have
group.initial.rebalance.delay.ms 0).

Under ``-m slow``, real Java 4.4 consumers (java/migration/MigrationRun.java): a running classic consumer, a
``group.protocol=consumer`` consumer joining it (upgrade), then leaving (downgrade); every record of each phase read,
none lost, on both brokers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkalog.broker import protocol
from tests.broker.wire import Wire
from tests.compat.lab import run_java_source
from tests.compat.test_consumer_groups import Ids, _create, _seen_by_coordinator, hb, join
from tests.compat.test_group_protocols import _coordinator_ready, _heartbeat, _join, _port, _sync
from tests.compat.test_kafka_tools import table

CG_DESCRIBE = 69
B = "migration-b-" + "0" * 12


class Roles(Ids):
    """Topic ids to names, and member ids the brokers made to role names."""

    def __init__(self):
        super().__init__()
        self.roles: dict[str, str] = {}

    def __call__(self, value):
        if isinstance(value, str) and value in self.roles:
            return self.roles[value]
        return super().__call__(value)


def _assigned(r) -> list:
    if r["error_code"] or not r["assignment"]:
        return []
    a = protocol.decode_assignment(r["assignment"])
    return sorted((t, p) for t, ps in a["assigned_partitions"].items() for p in ps)


def _sync_view(r) -> dict:
    """A SyncGroup answer with its assignment as the number of partitions (the version too)."""
    a = bytes(r.get("assignment") or b"")
    version = protocol.decode_assignment(a)["version"] if a else None
    return dict(r, assignment=(version, len(_assigned(r))))


def _cg(w, ids, group) -> dict:
    r = w.call(CG_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    r.pop("authorized_operations", None)
    for m in r["members"]:
        m.pop("client_host", None)
        for k in ("assignment", "target_assignment"):
            m[k] = sum(len(tp["partitions"]) for tp in m[k]["topic_partitions"])
    r["members"].sort(key=lambda m: m["member_type"])
    return ids(r)


def _commit(w, group, member, generation, topic, partition=0, version=8) -> int:
    r = w.call(8, version, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                            "group_instance_id": None, "retention_time_ms": -1, "topics": [
                          {"name": topic, "partitions": [{"partition_index": partition, "committed_offset": 1,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def _ready(w, ids, group: str, topic: str, partitions: int) -> None:
    """The group's coordinator up, ``topic`` made with ``partitions`` partitions and known to the coordinator."""
    _coordinator_ready(w, group)
    _create(w, ids, topic, partitions)
    _seen_by_coordinator(w, group, topic)


def migration_scenario(target, group: str, assignor: str) -> list:
    ids = Roles()
    out = []
    topic = f"{group}-t"
    with Wire(_port(target), client_id="migration") as w:
        _ready(w, ids, group, topic, 4)
        sub = protocol.encode_subscription([topic])
        r = _join(w, 9, group, "", "consumer", [(assignor, sub)])
        a = r["member_id"]
        ids.roles[a] = "A"
        r = _join(w, 9, group, a, "consumer", [(assignor, sub)])
        out.append(("A joins the classic group", ids(r)))
        gen = r["generation_id"]
        r = _sync(w, 5, group, gen, a, [(a, protocol.encode_assignment({topic: [0, 1, 2, 3]}))], None, "consumer",
                  assignor)
        out.append(("A syncs", _sync_view(ids(r))))
        r = join(w, group, B, [topic])
        given = [p for tp in (r["assignment"] or {"topic_partitions": []})["topic_partitions"]
                 for p in tp["partitions"]]
        out.append(("B joins with ConsumerGroupHeartbeat: the upgrade", ids(dict(r, assignment=len(given)))))
        eb = r["member_epoch"]
        out.append(("described after the upgrade", _cg(w, ids, group)))
        out.append(("A heartbeats at its generation", ids(_heartbeat(w, 4, group, gen, a))))
        out.append(("A syncs at its generation", _sync_view(ids(_sync(w, 5, group, gen, a, (), None, "consumer",
                                                                         assignor)))))
        out.append(("A heartbeats at another generation", ids(_heartbeat(w, 4, group, gen + 7, a))))
        out.append(("A syncs naming another protocol", _sync_view(ids(_sync(w, 5, group, gen, a, (), None, "consumer",
                                                                            "roundrobin")))))
        r = _join(w, 9, group, a, "consumer", [(assignor, sub)])
        out.append(("A joins again", ids(r)))
        gen_a = r["generation_id"]
        r = _sync(w, 5, group, gen_a, a, (), None, "consumer", assignor)
        out.append(("A syncs its share", _sync_view(ids(r))))
        mine = [p for _, p in _assigned(r)]
        out.append(("A heartbeats", ids(_heartbeat(w, 4, group, gen_a, a))))
        r = hb(w, group, B, eb, owned=[])
        out.append(("B heartbeats", ids(dict(r, assignment=sorted(
            p for tp in (r["assignment"] or {"topic_partitions": []})["topic_partitions"] for p in tp["partitions"])
            if r["assignment"] else None))))
        theirs = [p for tp in (r["assignment"] or {"topic_partitions": []})["topic_partitions"]
                  for p in tp["partitions"]]
        out.append(("A's and B's shares are disjoint and cover the topic", sorted(mine + theirs)))
        out.append(("A heartbeats", ids(_heartbeat(w, 4, group, gen_a, a))))
        out.append(("described", _cg(w, ids, group)))
        out.append(("A commits at its generation", _commit(w, group, a, gen_a, topic)))
        # Kafka 4.4: a commit at an older epoch is checked per partition (held since that epoch or before)
        for p in range(4):
            out.append(("A commits at the generation before", p in mine, _commit(w, group, a, gen, topic, p)))
            out.append(("B commits at its epoch before", p in theirs, _commit(w, group, B, eb - 1, topic, p, 9)))
        out.append(("A commits at a newer generation", _commit(w, group, a, gen_a + 1, topic)))
        for what, epoch in (("its generation", gen_a), ("the generation before", gen)):
            r = w.call(9, 9, {"groups": [{"group_id": group, "member_id": a, "member_epoch": epoch,
                                          "topics": [{"name": topic, "partition_indexes": [0]}]}],
                              "require_stable": False})
            out.append((f"A's OffsetFetch v9 at {what}", r["groups"][0]["error_code"]))
        listed = w.call(16, 5, {"states_filter": [], "types_filter": []})["groups"]
        out.append(("ListGroups", [x for x in listed if x["group_id"] == group]))
        d = w.call(15, 6, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        d.pop("authorized_operations", None)
        out.append(("DescribeGroups v6", d))
        d = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        d.pop("authorized_operations", None)
        out.append(("DescribeGroups v5", d))
        out.append(("a connect member", _join(w, 9, group, "", "connect", [("sessioned", b"x")])["error_code"]))
        out.append(("a member without the classic members' protocol",
                    _join(w, 9, group, "", "consumer", [("other", sub)])["error_code"]))
        r = _join(w, 9, group, "", "consumer", [(assignor, sub)])
        out.append(("C asks for a member id", r["error_code"], len(r["member_id"]), r["generation_id"]))
        out.append(("C's id is not a member yet", _heartbeat(w, 4, group, 1, r["member_id"])["error_code"]))
        r = hb(w, group, B, -1)
        out.append(("B leaves: the downgrade", ids(r)))
        out.append(("ConsumerGroupDescribe after it", _cg(w, ids, group)))
        d = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        d.pop("authorized_operations", None)
        for m in d["members"]:
            m.pop("client_host", None)
            m["member_assignment"] = len(_assigned({"error_code": 0, "assignment": m["member_assignment"]}))
        out.append(("DescribeGroups after it", ids(d)))
        out.append(("A heartbeats", ids(_heartbeat(w, 4, group, gen_a, a))))
        r = _join(w, 9, group, a, "consumer", [(assignor, sub)])
        for m in r["members"]:
            m["metadata"] = protocol.decode_subscription(m["metadata"])["topics"]
        out.append(("A joins the classic group again", ids(r)))
        gen2 = r["generation_id"]
        out.append(("A syncs", _sync_view(ids(_sync(w, 5, group, gen2, a, [
            (a, protocol.encode_assignment({topic: [0, 1, 2, 3]}))], None, "consumer", assignor)))))
        out.append(("A heartbeats", ids(_heartbeat(w, 4, group, gen2, a))))
        listed = w.call(16, 5, {"states_filter": [], "types_filter": []})["groups"]
        out.append(("ListGroups", [x for x in listed if x["group_id"] == group]))
    return out


def static_scenario(target, group: str) -> list:
    """A static classic member (group.instance.id) in a group that is upgraded: it restarts (JoinGroup with no member
    id and its instance id) and takes its old incarnation's place; the old member id is fenced; it leaves by
    instance id, which downgrades nothing (the consumer-protocol member stays)."""
    ids = Roles()
    out = []
    topic = f"{group}-t"
    with Wire(_port(target), client_id="migration") as w:
        _ready(w, ids, group, topic, 4)
        sub = protocol.encode_subscription([topic])
        r = _join(w, 9, group, "", "consumer", [("range", sub)], instance_id="i-1")
        s1 = r["member_id"]
        ids.roles[s1] = "S1"
        out.append(("S1 joins", ids(r)))
        gen = r["generation_id"]
        out.append(("S1 syncs", _sync_view(ids(_sync(w, 5, group, gen, s1, [
            (s1, protocol.encode_assignment({topic: [0, 1, 2, 3]}))], "i-1", "consumer", "range")))))
        r = join(w, group, B, [topic])
        out.append(("B joins: the upgrade", r["error_code"], r["member_epoch"]))
        out.append(("described", _cg(w, ids, group)))
        r = _join(w, 9, group, "", "consumer", [("range", sub)], instance_id="i-1")
        s2 = r["member_id"]
        ids.roles[s2] = "S2"
        out.append(("S1 restarts as S2", ids(r)))
        out.append(("described after it", _cg(w, ids, group)))
        out.append(("S1's heartbeat", ids(_heartbeat(w, 4, group, gen, s1, "i-1"))))
        out.append(("S2's heartbeat", ids(_heartbeat(w, 4, group, r["generation_id"], s2, "i-1"))))
        r = w.call(13, 5, {"group_id": group, "members": [{"member_id": "", "group_instance_id": "i-1",
                                                           "reason": None}]})
        out.append(("S2 removed by instance id", ids(r)))
        out.append(("described after it", _cg(w, ids, group)))
    return out


def static_replacement_scenario(target, group: str) -> list:
    """A static consumer-protocol member B (instance i-1) and a classic member A: a classic JoinGroup with B's
    instance id replaces B, the last consumer-protocol member: the group becomes a classic one at once, Stable (the
    subscription did not change: no rebalance), each member with the partitions it had as its target."""
    ids = Roles()
    out = []
    topic = f"{group}-t"
    with Wire(_port(target), client_id="migration") as w:
        _ready(w, ids, group, topic, 4)
        sub = protocol.encode_subscription([topic])
        r = join(w, group, "static-b-" + "0" * 14, [topic], instance="i-1")
        out.append(("B joins, static", r["error_code"], r["member_epoch"]))
        r = _join(w, 9, group, "", "consumer", [("range", sub)])
        r = _join(w, 9, group, r["member_id"], "consumer", [("range", sub)])
        a = r["member_id"]
        ids.roles[a] = "A"
        out.append(("A joins with the classic protocol", ids(r)))
        r = _join(w, 9, group, "", "consumer", [("range", sub)], instance_id="i-1")
        s = r["member_id"]
        ids.roles[s] = "S"
        out.append(("S joins with B's instance id", ids(r)))
        gen = r["generation_id"]
        out.append(("ConsumerGroupDescribe", _cg(w, ids, group)))
        d = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        d.pop("authorized_operations", None)
        for m in d["members"]:
            m.pop("client_host", None)
            m["member_assignment"] = _assigned({"error_code": 0, "assignment": m["member_assignment"]})
        d = ids(d)
        d["members"] = sorted(d["members"], key=lambda m: m["member_id"])  # Kafka lists them from a hash map
        out.append(("DescribeGroups", d))
        out.append(("S syncs", _sync_view(ids(_sync(w, 5, group, gen, s, (), "i-1", "consumer", "range")))))
        out.append(("A heartbeats", ids(_heartbeat(w, 4, group, gen, a))))
    return out


def refusals_scenario(target, group: str) -> list:
    """Upgrades Kafka refuses (GROUP_ID_NOT_FOUND and its message)."""
    ids = Roles()
    out = []
    topic = f"{group}-t"
    with Wire(_port(target), client_id="migration") as w:
        _ready(w, ids, group, topic, 2)
        for kind, protocols, assignment in [
                ("connect", [("sessioned", b"worker")], b"opaque"),
                ("consumer", [("cooperative-sticky", b"\x00\x00garbage")], b""),
                ("consumer", [("cooperative-sticky", protocol.encode_subscription([topic]))],
                 protocol.encode_assignment({topic: [0, 1]}, b"custom user data"))]:
            g = f"{group}-{len(out)}"
            r = _join(w, 9, g, "", kind, protocols)
            r = _join(w, 9, g, r["member_id"], kind, protocols)
            m = r["member_id"]
            s = _sync(w, 5, g, r["generation_id"], m, [(m, assignment)], None, kind, protocols[0][0])
            r = join(w, g, B, [topic])
            out.append((kind, s["error_code"], r["error_code"], (r["error_message"] or "").replace(g, "<group>"),
                        r["member_epoch"]))
            out.append(("the classic group goes on", _heartbeat(w, 4, g, 1, m)["error_code"]))
    return out


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_online_migration_as_kafka(targets, topic_name, compare, assignor):
    group = topic_name("g")
    answers = {name: migration_scenario(t, group, assignor) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what=f"KIP-848 online migration ({assignor})")


def test_static_classic_member_in_a_consumer_group_as_kafka(targets, topic_name, compare):
    group = topic_name("g")
    answers = {name: static_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="a static classic member of a consumer group")


def test_a_static_replacement_downgrades_as_kafka(targets, topic_name, compare):
    group = topic_name("g")
    answers = {name: static_replacement_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="a static classic member replacing the last consumer member")


def test_upgrade_refusals_as_kafka(targets, topic_name, compare):
    group = topic_name("g")
    answers = {name: refusals_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="refused upgrades")


MIGRATION_RUN = Path(__file__).resolve().parent / "java" / "migration" / "MigrationRun.java"


def _java_run(target, topic: str, group: str) -> list:
    r = run_java_source(MIGRATION_RUN, [target.bootstrap, topic, group], timeout=240)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0 and len(lines) >= 3, (target.name, r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    return lines


@pytest.mark.slow
def test_java_consumers_migrate_a_running_group_as_on_kafka(kafka, kafkalog, topic_name):
    """A classic Java consumer reading, a KIP-848 Java consumer joining (the group upgraded) and leaving (downgraded):
    each phase's 40 records read, none missing, on Kafka and on kafkalog; both consumers hold partitions while both
    are in the group, the classic one all of them after. One JVM per broker, about 20-40 s each (the consumers'
    heartbeat intervals pace the rebalances)."""
    runs = {}
    for target in (kafka, kafkalog):
        runs[target.name] = _java_run(target, topic_name("t"), topic_name("g"))
    for name, lines in runs.items():
        phases = {x["phase"]: x for x in lines if "phase" in x}
        assert [phases[n]["missing"] for n in (1, 2, 3)] == [0, 0, 0], (name, lines)
        assert all(not phases[n]["errors"] for n in (1, 2, 3)), (name, lines)
        assert phases[1]["read"]["C"] == 40 and phases[3]["read"]["C"] == 40, (name, lines)
        assert phases[2]["assigned"]["C"] and phases[2]["assigned"]["K"], (name, lines)
        assert sorted(phases[2]["assigned"]["C"] + phases[2]["assigned"]["K"]) == [0, 1, 2, 3], (name, lines)
        assert phases[3]["assigned"]["C"] == [0, 1, 2, 3], (name, lines)
        assert not [x for x in lines if "k_errors" in x], (name, lines)
    shape = {name: [(x["missing"], bool(x["read"]["C"]), len(x["assigned"]["C"]) > 0, len(x["assigned"]["K"]) > 0)
                    for x in lines if "phase" in x] for name, lines in runs.items()}
    assert shape["kafka"] == shape["kafkalog"], runs


def batched_leave_scenario(target, group: str) -> list:
    """A consumer group of B (consumer protocol) and classic members A and C. One LeaveGroup v5 names A, C and an
    unknown member: Kafka answers each and removes A and C in one operation (the group epoch goes up once). A and C
    join again; one LeaveGroup names B and A: C, the member that stays, uses the classic protocol: the group becomes
    a classic group."""
    ids = Roles()
    out = []
    topic = f"{group}-t"
    sub = protocol.encode_subscription([topic])

    def classic_join(role):
        r = _join(w, 9, group, "", "consumer", [("range", sub)])
        r = _join(w, 9, group, r["member_id"], "consumer", [("range", sub)])
        ids.roles[r["member_id"]] = role
        out.append((f"{role} joins with the classic protocol", r["error_code"]))
        return r["member_id"]

    def described(what):
        d = _cg(w, ids, group)
        d["members"].sort(key=lambda m: (m["member_type"], m["member_id"]))  # Kafka's from a hash map
        out.append((what, d))
        return d

    def leave(what, *members):
        r = w.call(13, 5, {"group_id": group, "members": [
            {"member_id": m, "group_instance_id": None, "reason": "batch"} for m in members]})
        out.append((what, ids(r)))

    with Wire(_port(target), client_id="migration") as w:
        _ready(w, ids, group, topic, 6)  # shares even for 3 or 2 members (ids are random)
        r = join(w, group, B, [topic])
        out.append(("B joins", r["error_code"], r["member_epoch"]))
        a, c = classic_join("A"), classic_join("C")
        before = described("described")
        leave("A, C and nobody leave in one LeaveGroup", a, c, "nobody-" + "0" * 16)
        after = described("described after it")
        out.append(("the group epoch went up by", after["group_epoch"] - before["group_epoch"]))
        r = hb(w, group, B, next(m["member_epoch"] for m in after["members"] if m["member_id"] == B))
        out.append(("B heartbeats", r["error_code"], r["member_epoch"]))
        a, c = classic_join("A"), classic_join("C")
        described("A and C are back")
        leave("B and A leave in one LeaveGroup", B, a)
        out.append(("ConsumerGroupDescribe after it", _cg(w, ids, group)))
        d = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
        d.pop("authorized_operations", None)
        for m in d["members"]:
            m.pop("client_host", None)
            m["member_assignment"] = len(_assigned({"error_code": 0, "assignment": m["member_assignment"]}))
            m["member_metadata"] = len(m["member_metadata"])
        out.append(("DescribeGroups after it", ids(d)))
        listed = w.call(16, 5, {"states_filter": [], "types_filter": []})["groups"]
        out.append(("ListGroups", [x for x in listed if x["group_id"] == group]))
    return out


def test_a_batched_leave_is_one_operation_as_kafka(targets, topic_name, compare):
    group = topic_name("g")
    answers = {name: batched_leave_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="a LeaveGroup naming several members of a consumer group")


def _groups_of_each_type(target, prefix: str) -> None:
    """One group of each kind Kafka 4.4 has, each with a member that stays: a classic consumer group, a classic group
    of another protocol type (Kafka Connect's), a KIP-848 consumer group, a share group; and a group with committed
    offsets and no member."""
    topic = f"{prefix}-t"
    ids = Roles()
    with Wire(_port(target), client_id="groups") as w:
        _ready(w, ids, f"{prefix}-classic", topic, 2)
        sub = protocol.encode_subscription([topic])
        for group, kind, protocols in ((f"{prefix}-classic", "consumer", [("range", sub)]),
                                       (f"{prefix}-connect", "connect", [("sessioned", b"worker")])):
            r = _join(w, 9, group, "", kind, protocols)
            r = _join(w, 9, group, r["member_id"], kind, protocols)
            m = r["member_id"]
            assert _sync(w, 5, group, r["generation_id"], m, [(m, b"")], None, kind,
                         protocols[0][0])["error_code"] == 0, target.name
        assert join(w, f"{prefix}-kip848", B, [topic])["error_code"] == 0, target.name
        for _ in range(100):  # Kafka: COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR while it loads
            r = w.call(76, 1, {"group_id": f"{prefix}-share", "member_id": "share-member-" + "0" * 10,
                               "member_epoch": 0, "rack_id": None, "subscribed_topic_names": [topic]})
            if r["error_code"] not in (14, 15, 16):
                break
        assert r["error_code"] == 0, (target.name, r)
        assert _commit(w, f"{prefix}-simple", "", -1, topic) == 0, target.name


def test_kafka_groups_tool_lists_every_group_type_as_on_kafka(targets, topic_name, compare):
    """``kafka-groups --list`` (KIP-1043: GROUP, TYPE, PROTOCOL) over one group of each kind: the same rows on both
    brokers (and with ``--share``, a type filter); ``kafka-consumer-groups --describe --members --verbose`` of the
    KIP-848 group. Three tool runs per broker (a JVM each, ~1.5 s)."""
    prefix = topic_name("kinds")
    answers = {}
    for name, t in targets.items():
        _groups_of_each_type(t, prefix)
        runs = []
        for flags in ((), ("--share",)):
            r = t.tool("kafka-groups", "--bootstrap-server", t.bootstrap, "--list", *flags)
            rows = sorted(line.split() for line in r.stdout.splitlines()
                          if line.startswith(prefix) or line.startswith("GROUP"))
            runs.append((flags, rows))
        # the KIP-848 group's one member (epoch, assignment, target assignment: ConsumerGroupDescribe)
        r = t.tool("kafka-consumer-groups", "--bootstrap-server", t.bootstrap, "--describe", "--members",
                   "--verbose", "--group", f"{prefix}-kip848")
        runs.append(("kafka-consumer-groups --describe --members --verbose", [
            {k: v for k, v in row.items() if k != "HOST"} for row in table(r.stdout)]))
        answers[name] = runs
    compare(answers["kafka"], answers["kafkalog"], what="kafka-groups --list")
    kinds = {row[0]: row[1:] for row in answers["kafka"][0][1] if row[0] != "GROUP"}
    assert {f"{prefix}-{k}" for k in ("classic", "connect", "kip848", "share", "simple")} <= set(kinds), kinds
    assert [row["CONSUMER-ID"] for row in answers["kafka"][-1][1]] == [B], answers["kafka"][-1]
