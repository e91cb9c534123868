"""Differential wire tests of the newest versions of FindCoordinator (0-6), OffsetFetch (1-10), OffsetCommit (10),
Metadata (13), ListOffsets (1-11), DeleteTopics (1-6), ApiVersions (5), OffsetForLeaderEpoch (2-4) and others
(DeleteGroups, DescribeCluster, DeleteRecords, the client quota APIs, DescribeLogDirs): the same request frames,
built with kafkalog's codec, to Apache Kafka 4.4 and to kafkalog over raw sockets (tests/broker/wire.py), the answers
compared field by field.

What truly differs and is not compared: ports and cluster ids; topic ids are compared through what they stand
for (each broker's ids are mapped to their topic names, the null id to "zero", an id neither broker has to
"unknown"). Kafka answers Metadata and DeleteTopics topics in no fixed order (hash sets; DeleteTopics shuffles on
purpose): those lists are sorted before the comparison. Kafka creates its coordinators' topics on first use: the
tests ask FindCoordinator until Kafka answers (a bounded number of times).

A share-partition key (FindCoordinator v6 key type 2) is answered by the node on both (kafkalog keeps every
share-partition's state).

Cost: one pair of brokers for the session (the lab's), then milliseconds per request; about 2 s per module run.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.broker.wire import Wire, batch

from .lab import assert_same

LAB_TEST_DEADLINE_S = 120
ZERO = uuid.UUID(int=0)
IGNORE = ("port", "*.port", "cluster_id")
INVALID_REQUEST_TEXT = ("This most likely occurs because of a request being malformed by the client library or the "
                        "message was sent to an incompatible broker. See the broker logs for more details.")


class Side:
    """One broker over the wire: set-up helpers and the map of its topic ids to names."""

    def __init__(self, target):
        self.name = target.name
        host, port = target.bootstrap.split(":")
        self.w = Wire(int(port), timeout=30)
        self.ids: dict[uuid.UUID, str] = {}

    def close(self):
        self.w.close()

    def call(self, key, version, body):
        return self.w.call(key, version, body)

    def coordinator_ready(self, key_type: int, key: str) -> None:
        for _ in range(100):  # Kafka creates __consumer_offsets / __transaction_state on the first ask
            r = self.call(10, 3, {"key": key, "key_type": key_type})
            if r["error_code"] == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no coordinator for key type {key_type}: {r}")

    def create(self, topic: str, partitions: int = 1) -> uuid.UUID:
        r = self.call(19, 7, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                          "assignments": [], "configs": []}], "timeout_ms": 30000})
        assert r["topics"][0]["error_code"] == 0, (self.name, r)
        tid = r["topics"][0]["topic_id"]
        self.ids[tid] = topic
        for _ in range(100):  # until the new partitions have their leader
            md = self.call(3, 12, {"topics": [{"topic_id": ZERO, "name": topic}], "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})["topics"][0]
            if md["error_code"] == 0 and len(md["partitions"]) == partitions and \
                    all(p["leader_id"] >= 0 for p in md["partitions"]):
                return tid
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: topic {topic} has no leader: {md}")

    def produce(self, topic: str, partition: int, values, base_ts: int) -> None:
        for _ in range(50):
            r = self.w.produce(topic, partition, batch(values, base_ts=base_ts))
            if r["error_code"] == 0:
                return
            time.sleep(0.1)  # NOT_LEADER_OR_FOLLOWER on Kafka right after the topic's creation
        raise AssertionError(f"{self.name}: produce to {topic}-{partition}: {r}")

    def commit(self, group: str, offsets: dict, generation: int = -1, member: str = "") -> None:
        """OffsetCommit v3 of {(topic, partition): (offset, metadata)}."""
        topics: dict[str, list] = {}
        for (t, p), (off, md) in offsets.items():
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off, "committed_metadata": md})
        for _ in range(50):  # COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR from Kafka while it loads the partition
            r = self.call(8, 3, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                                 "retention_time_ms": -1,
                                 "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            if not any(p["error_code"] in (14, 16) for t in r["topics"] for p in t["partitions"]):
                break
            time.sleep(0.1)
        assert all(p["error_code"] == 0 for t in r["topics"] for p in t["partitions"]), (self.name, r)

    def norm(self, answer):
        """The answer with each topic id replaced by the name of its topic ("zero", "unknown")."""
        if isinstance(answer, dict):
            return {k: self.norm(v) for k, v in answer.items()}
        if isinstance(answer, list):
            return [self.norm(v) for v in answer]
        if isinstance(answer, uuid.UUID):
            return "zero" if not answer.int else f"id:{self.ids.get(answer, 'unknown')}"
        return answer


@pytest.fixture
def sides(targets):
    out = {name: Side(t) for name, t in targets.items()}
    yield out
    for side in out.values():
        side.close()


def both(sides, fn):
    """fn(side) on Kafka, then on kafkalog → (kafka's answer, kafkalog's answer)."""
    return fn(sides["kafka"]), fn(sides["kafkalog"])


def same(sides, key, version, body, what="", ignore=(), sort=None):
    """Send one request to both, compare the answers (topic ids normalized); returns kafkalog's."""
    answers = []
    for name in ("kafka", "kafkalog"):
        side = sides[name]
        b = body(side) if callable(body) else body
        a = side.norm(side.call(key, version, b))
        if sort is not None:
            sort(a)
        answers.append(a)
    assert_same(answers[0], answers[1], ignore=IGNORE + tuple(ignore), what=what or f"API {key} v{version}")
    return answers[1]


# ---------------------------------------------------------------------------------------------------- FindCoordinator

def test_find_coordinator_every_version(sides, topic_name):
    group, txn = topic_name("g"), topic_name("tx")
    both(sides, lambda s: s.coordinator_ready(0, group))
    both(sides, lambda s: s.coordinator_ready(1, txn))
    for v in range(0, 4):
        same(sides, 10, v, {"key": group, "key_type": 0}, f"group v{v}")
        if v >= 1:
            same(sides, 10, v, {"key": txn, "key_type": 1}, f"transactional id v{v}")
            # a share key before v6, and an unknown key type: INVALID_REQUEST with Kafka's text
            r = same(sides, 10, v, {"key": f"{group}:AAAAAAAAAAAAAAAAAAAAAA:0", "key_type": 2}, f"share key v{v}")
            assert r["error_code"] == 42 and r["error_message"] == INVALID_REQUEST_TEXT
            same(sides, 10, v, {"key": group, "key_type": 3}, f"key type 3 v{v}")
    for v in range(4, 7):
        r = same(sides, 10, v, {"key_type": 0, "coordinator_keys": [group, topic_name("g2"), group, ""]},
                 f"batched groups v{v}")
        assert [c["error_code"] for c in r["coordinators"]] == [0, 0, 0, 0]
        same(sides, 10, v, {"key_type": 1, "coordinator_keys": [txn]}, f"batched transactional ids v{v}")
        same(sides, 10, v, {"key_type": 0, "coordinator_keys": []}, f"no keys v{v}")
        same(sides, 10, v, {"key_type": 7, "coordinator_keys": [group, txn]}, f"key type 7 v{v}")
        if v < 6:
            same(sides, 10, v, {"key_type": 2, "coordinator_keys": [f"{group}:AAAAAAAAAAAAAAAAAAAAAA:0", "x"]},
                 f"share keys v{v}")
        # malformed share keys are INVALID_REQUEST on both, also at v6
        same(sides, 10, v, {"key_type": 2, "coordinator_keys": ["x", f"{group}:nope", f"{group}:AAAA:x"]},
             f"malformed share keys v{v}")


def test_find_coordinator_v6_share_key(sides, topic_name):
    """A well-formed share-partition key (KIP-932): Kafka 4.4 answers its share coordinator (after
    COORDINATOR_NOT_AVAILABLE while its state topic is created: asked until it answers), kafkalog itself, which keeps
    every share-partition's state."""
    key = f"{topic_name('g')}:AAAAAAAAAAAAAAAAAAAAAA:0"
    for _ in range(100):
        if sides["kafka"].call(10, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"][0][
                "error_code"] == 0:
            break
        time.sleep(0.1)
    r = same(sides, 10, 6, {"key_type": 2, "coordinator_keys": [key, key]}, "share keys v6")
    assert [(c["error_code"], c["node_id"] >= 0) for c in r["coordinators"]] == [(0, True)] * 2


# ---------------------------------------------------------------------------------------------------- OffsetFetch

def _offset_fixture(sides, topic_name):
    topic, other, group = topic_name("t"), topic_name("o"), topic_name("g")
    for side in sides.values():
        side.create(topic, 3)
        side.create(other, 1)
        side.coordinator_ready(0, group)
        side.commit(group, {(topic, 0): (5, "md"), (topic, 2): (7, None), (other, 0): (1, "")})
    return topic, other, group


def test_offset_fetch_v1_to_v7(sides, topic_name):
    topic, other, group = _offset_fixture(sides, topic_name)
    for v in range(1, 8):
        body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1, 2, 9]},
                                              {"name": topic_name("nope"), "partition_indexes": [0]}],
                "require_stable": True}
        same(sides, 9, v, body, f"v{v}")
        if v >= 2:
            same(sides, 9, v, dict(body, topics=None), f"every partition v{v}", sort=_sort_offsets)
            same(sides, 9, v, dict(body, group_id=topic_name("unknown"), topics=None), f"unknown group v{v}")


def test_offset_fetch_v8_v9_batched_groups(sides, topic_name):
    topic, other, group = _offset_fixture(sides, topic_name)
    unknown = topic_name("unknown")
    for v in (8, 9):
        groups = [
            {"group_id": group, "topics": None},
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": [2, 0, 1]},
                                           {"name": topic_name("nope"), "partition_indexes": [3]}]},
            {"group_id": unknown, "topics": None},
            {"group_id": unknown, "topics": [{"name": other, "partition_indexes": [0]}]},
            {"group_id": group, "topics": []},
        ]
        for g in groups:
            g.update(member_id=None, member_epoch=-1)
        for stable in (False, True):
            r = same(sides, 9, v, {"groups": groups, "require_stable": stable}, f"v{v} stable={stable}",
                     sort=_sort_offsets)
            assert r["groups"][1]["topics"][0]["partitions"][0]["committed_offset"] == 7
        same(sides, 9, v, {"groups": [], "require_stable": False}, f"no groups v{v}")


def test_offset_fetch_v9_member_of_a_classic_group(sides, topic_name):
    """v9's member id and epoch are validated for KIP-848 consumer groups only: a classic group's fetch (a live
    member's, a stranger's, an empty group's) ignores them, on Kafka 4.4 as here."""
    topic, other, group = _offset_fixture(sides, topic_name)
    live = topic_name("live")

    def join(side):
        from kafkalog.broker import protocol
        meta = protocol.encode_subscription([topic])
        j = side.call(11, 3, {"group_id": live, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                              "member_id": "", "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": meta}]})
        assert j["error_code"] == 0, (side.name, j)
        s = side.call(14, 3, {"group_id": live, "generation_id": j["generation_id"], "member_id": j["member_id"],
                              "assignments": [{"member_id": j["member_id"],
                                               "assignment": protocol.encode_assignment({topic: [0, 1, 2]})}]})
        assert s["error_code"] == 0, (side.name, s)
        side.commit(live, {(topic, 1): (3, "live")}, j["generation_id"], j["member_id"])
        return j["member_id"], j["generation_id"]
    for side in sides.values():
        side.coordinator_ready(0, live)
    members = dict(zip(("kafka", "kafkalog"), both(sides, join)))
    try:
        for mid, epoch in (("real", "real"), ("stranger", 7), (None, 3), ("", -1)):
            def body(side, mid=mid, epoch=epoch):
                m, gen = members[side.name]
                g = [{"group_id": live, "member_id": m if mid == "real" else mid,
                      "member_epoch": gen if epoch == "real" else epoch, "topics": None},
                     {"group_id": group, "member_id": mid if mid != "real" else m, "member_epoch": 5,
                      "topics": [{"name": topic, "partition_indexes": [0]}]}]
                return {"groups": g, "require_stable": False}
            r = same(sides, 9, 9, body, f"member {mid} epoch {epoch}", sort=_sort_offsets)
            assert r["groups"][0]["error_code"] == 0
            assert r["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 3
    finally:
        for side in sides.values():
            m, _ = members[side.name]
            side.call(13, 1, {"group_id": live, "member_id": m})


def test_offset_fetch_v10_topic_ids(sides, topic_name):
    topic, other, group = _offset_fixture(sides, topic_name)
    stranger = uuid.uuid4()  # an id neither broker has
    unknown = topic_name("unknown")

    def ids(side):
        return {n: i for i, n in side.ids.items()}

    def body(side):
        tid = ids(side)
        return {"groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None},
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": [
                {"topic_id": tid[topic], "partition_indexes": [0, 1, 2]},
                {"topic_id": stranger, "partition_indexes": [0, 4]},
                {"topic_id": ZERO, "partition_indexes": [0]},
                {"topic_id": tid[other], "partition_indexes": [0]}]},
            {"group_id": unknown, "member_id": None, "member_epoch": -1, "topics": [
                {"topic_id": stranger, "partition_indexes": [0]}, {"topic_id": tid[other], "partition_indexes": [0]}]},
        ], "require_stable": True}
    r = same(sides, 9, 10, body, "v10", sort=_sort_all_topics)
    by_topic = {t["topic_id"]: t for t in r["groups"][1]["topics"]}
    assert [p["error_code"] for p in by_topic["id:unknown"]["partitions"]] == [100, 100]
    assert by_topic[f"id:{topic}"]["partitions"][0]["committed_offset"] == 5


def _sort_offsets(answer, groups=(0,)):
    """Every committed partition (topics None) comes in each broker's own order (Kafka's: a hash map's): sorted."""
    for topics in ([g["topics"] for i, g in enumerate(answer["groups"]) if i in groups] if answer.get("groups")
                   else [answer["topics"]]):
        topics.sort(key=lambda t: (t.get("name") or "", str(t.get("topic_id"))))
        for t in topics:
            t["partitions"].sort(key=lambda p: p["partition_index"])


def _sort_all_topics(answer):
    _sort_offsets(answer)


# ---------------------------------------------------------------------------------------------------- Metadata

def _sort_topics(answer):
    answer["topics"].sort(key=lambda t: (t["name"] or "", str(t["topic_id"])))


def test_metadata_v13(sides, topic_name):
    topic, other = topic_name("t"), topic_name("o")
    for side in sides.values():
        side.create(topic, 2)
        side.create(other, 1)
    for v in (12, 13):
        same(sides, 3, v, {"topics": [{"topic_id": ZERO, "name": topic}, {"topic_id": ZERO, "name": other},
                                      {"topic_id": ZERO, "name": topic_name("nope")}],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": True},
             f"by name v{v}", sort=_sort_topics)

        def by_id(side):
            tid = {n: i for i, n in side.ids.items()}
            # a request naming any topic by id is answered for its ids alone (the name-only entry is dropped)
            return {"topics": [{"topic_id": tid[topic], "name": None}, {"topic_id": uuid.uuid4(), "name": None},
                               {"topic_id": ZERO, "name": other}, {"topic_id": tid[topic], "name": None}],
                    "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        r = same(sides, 3, v, by_id, f"by id v{v}", sort=_sort_topics)
        assert [t["error_code"] for t in r["topics"]] == [100, 0]
        if v == 13:
            assert r["error_code"] == 0
    # every topic: the brokers' internal topics differ (Kafka's __consumer_offsets, __share_group_state...)
    k, kl = both(sides, lambda s: s.norm(s.call(3, 13, {"topics": None, "allow_auto_topic_creation": False,
                                                        "include_topic_authorized_operations": False})))
    mine = lambda a: sorted((t for t in a["topics"] if t["name"] in (topic, other)), key=lambda t: t["name"])  # noqa: E731
    assert_same(mine(k), mine(kl), what="every topic v13")
    assert k["error_code"] == kl["error_code"] == 0


# ---------------------------------------------------------------------------------------------------- ListOffsets

T0 = 1_700_000_000_000


def test_list_offsets_every_version_and_special_timestamp(sides, topic_name):
    """-1 latest, -2 earliest, -3 max timestamp (v7+), -4 earliest local (v8+: the log start offset, nothing being
    tiered), -5 latest tiered (v9+) and -6 earliest pending upload (v11+): no offset without tiered storage; a
    timestamp before its version, or no special one, is UNSUPPORTED_VERSION; both isolation levels."""
    topic = topic_name("t")
    for side in sides.values():
        side.create(topic, 2)
        side.produce(topic, 0, [b"a", b"b", b"c"], T0)
        side.produce(topic, 0, [b"d", b"e"], T0 + 10)
    stamps = (-1, -2, -3, -4, -5, -6, -7, -100, T0 + 1, T0 + 11, T0 + 1000)
    for v in range(1, 12):
        for ts in stamps:
            for iso in ((0, 1) if v >= 2 else (0,)):
                for p in (0, 1, 5):  # 5: no such partition (its error comes after the timestamp's check)
                    body = {"replica_id": -1, "isolation_level": iso, "timeout_ms": 1000, "topics": [
                        {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                        "timestamp": ts}]}]}
                    same(sides, 2, v, body, f"v{v} timestamp {ts} isolation {iso} partition {p}")
    # the log start offset after DeleteRecords: earliest and earliest-local agree
    for side in sides.values():
        r = side.call(21, 1, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
                              "timeout_ms": 5000})
        assert r["topics"][0]["partitions"][0]["error_code"] == 0, r
    for ts in (-2, -4):
        r = same(sides, 2, 11, {"replica_id": -1, "isolation_level": 0, "timeout_ms": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]},
            f"after DeleteRecords, timestamp {ts}")
        assert r["topics"][0]["partitions"][0]["offset"] == 2


# ---------------------------------------------------------------------------------------------------- DeleteTopics

def _sort_results(answer):
    answer["responses"].sort(key=lambda r: (r["name"] or "", str(r.get("topic_id")), r["error_code"]))


def test_delete_topics_v6_by_name_and_by_id(sides, topic_name):
    names = {k: topic_name(k) for k in ("byid", "byname", "both", "dupname", "dupid", "twice", "v5", "v4")}
    for side in sides.values():
        for n in names.values():
            side.create(n)

    def tid(side, key):
        return {n: i for i, n in side.ids.items()}[names[key]]
    stranger, nope, x = uuid.uuid4(), topic_name("nope"), topic_name("x")
    same(sides, 20, 6, lambda s: {"timeout_ms": 30000, "topics": [{"name": None, "topic_id": tid(s, "byid")}]},
         "by id")
    same(sides, 20, 6, {"timeout_ms": 30000, "topics": [{"name": names["byname"], "topic_id": ZERO}]}, "by name")
    r = same(sides, 20, 6, lambda s: {"timeout_ms": 30000, "topics": [
        {"name": names["both"], "topic_id": tid(s, "both")},        # both given: INVALID_REQUEST, kept
        {"name": None, "topic_id": stranger},                       # UNKNOWN_TOPIC_ID
        {"name": None, "topic_id": ZERO},                           # neither
        {"name": nope, "topic_id": ZERO},                           # UNKNOWN_TOPIC_OR_PARTITION
        {"name": names["dupname"], "topic_id": ZERO}, {"name": names["dupname"], "topic_id": ZERO},
        {"name": None, "topic_id": tid(s, "dupid")}, {"name": None, "topic_id": tid(s, "dupid")},
        {"name": None, "topic_id": tid(s, "twice")}, {"name": names["twice"], "topic_id": ZERO},
    ]}, "errors", sort=_sort_results)
    assert sorted(x["error_code"] for x in r["responses"]) == [3, 42, 42, 42, 42, 42, 100]
    # none of those was deleted: each deletes now, by name
    for key in ("both", "dupname", "dupid", "twice"):
        same(sides, 20, 6, {"timeout_ms": 30000, "topics": [{"name": names[key], "topic_id": ZERO}]}, f"then {key}")
    # v5: names, Kafka's messages; v4: no messages
    same(sides, 20, 5, {"timeout_ms": 30000, "topic_names": [names["v5"], nope]}, "v5",
         sort=_sort_results)
    same(sides, 20, 4, {"timeout_ms": 30000, "topic_names": [names["v4"], x, x]}, "v4",
         sort=_sort_results)
    for v in (4, 5, 6):  # gone: asked again
        body = {"timeout_ms": 30000, "topic_names": [names["v4"]],
                "topics": [{"name": names["v4"], "topic_id": ZERO}]}
        same(sides, 20, v, body, f"deleted already v{v}")


# ---------------------------------------------------------------------------------------- the newest admin versions

def _sort_groups(answer):
    answer["results"].sort(key=lambda g: (g["group_id"], g["error_code"]))


def _sort_partitions(answer):  # Kafka answers the partitions it refuses first (unknown, unauthorized), then the others
    answer["topics"].sort(key=lambda t: t["name"])
    for t in answer["topics"]:
        t["partitions"].sort(key=lambda p: p["partition_index"])


def test_delete_groups_v0_to_v3(sides, topic_name):
    """v3 (Kafka 4.4) adds a per-group ErrorMessage: what Kafka says for a group that does not exist, one with
    members' offsets only (deleted), and a name asked twice."""
    topic = topic_name("t")
    for v in range(0, 4):
        empty, gone = topic_name(f"e{v}"), topic_name(f"gone{v}")
        for side in sides.values():
            side.create(topic + f"-{v}")
            side.coordinator_ready(0, empty)
            side.commit(empty, {(topic + f"-{v}", 0): (3, "")})
        r = same(sides, 42, v, {"groups_names": [empty, gone, gone]}, f"v{v}",
                 sort=_sort_groups)
        assert sorted(g["error_code"] for g in r["results"]) == [0, 69], r  # the name asked twice: one answer


def test_describe_cluster_v0_to_v2(sides):
    for v in range(0, 3):
        body = {"include_cluster_authorized_operations": True, "endpoint_type": 1, "include_fenced_brokers": True}
        r = same(sides, 60, v, body, f"v{v}", ignore=("brokers.*.host", "brokers.*.rack"))
        if v >= 2:
            assert [b["is_fenced"] for b in r["brokers"]] == [False]
        same(sides, 60, v, dict(body, include_fenced_brokers=False), f"v{v} without fenced",
             ignore=("brokers.*.host", "brokers.*.rack"))


def test_delete_records_v2(sides, topic_name):
    topic = topic_name("t")
    for side in sides.values():
        side.create(topic, 2)
        side.produce(topic, 0, [b"a", b"b", b"c", b"d"], base_ts=1_700_000_000_000)
    for v in (1, 2):
        nope = topic_name("nope")
        r = same(sides, 21, v, {"timeout_ms": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": v}, {"partition_index": 1, "offset": 0},
                                           {"partition_index": 7, "offset": 0}]},
            {"name": nope, "partitions": [{"partition_index": 0, "offset": 0}]}]}, f"v{v}", sort=_sort_partitions)
        mine = next(t for t in r["topics"] if t["name"] == topic)["partitions"]
        assert [(p["partition_index"], p["error_code"], p["low_watermark"]) for p in mine] == \
            [(0, 0, v), (1, 0, 0), (7, 3, -1)]


def test_client_quotas_v0_v1(sides, topic_name):
    """By client id (kafkalog's quotas are per client id: a user entity is refused, README's compatibility table)."""
    user = topic_name("c")
    for v in (0, 1):
        entity = [{"entity_type": "client-id", "entity_name": f"{user}-{v}"}]
        same(sides, 49, v, {"entries": [{"entity": entity, "ops": [
            {"key": "producer_byte_rate", "value": 1024.0 * (v + 1), "remove": False}]}], "validate_only": False},
             f"alter v{v}")
        for _ in range(50):  # Kafka applies a quota through its metadata log: until both describe it
            r = sides["kafka"].call(48, v, {"components": [{"entity_type": "client-id", "match_type": 0,
                                                            "match": f"{user}-{v}"}], "strict": True})
            if r["entries"]:
                break
            time.sleep(0.1)
        same(sides, 48, v, {"components": [{"entity_type": "client-id", "match_type": 0, "match": f"{user}-{v}"}],
                            "strict": True}, f"describe v{v}")


def test_describe_log_dirs_v4_v5(sides, topic_name):
    """v5 adds IsCordoned (KIP-1066): a log dir nobody cordoned says False. Sizes, paths and free bytes are each
    machine's own: only the shape and the flags are compared."""
    topic = topic_name("t")
    for side in sides.values():
        side.create(topic)
    for v in (4, 5):
        answers = {}
        for name, side in sides.items():
            r = side.call(35, v, {"topics": [{"topic": topic, "partitions": [0]}]})
            answers[name] = [{"error_code": d["error_code"], "topics": [t["name"] for t in d["topics"]],
                              "cordoned": d.get("is_cordoned")} for d in r["results"]]
        assert answers["kafka"] == answers["kafkalog"], answers
        if v == 5:
            assert answers["kafkalog"][0]["cordoned"] is False


def test_api_versions_v5_cluster_and_node_checks(sides):
    """KIP-1242: ApiVersions v5 names the cluster and node the client means to reach. Kafka 4.4 answers both or
    neither as usual, one without the other INVALID_REQUEST (42), another cluster's or node's id
    REBOOTSTRAP_REQUIRED (129), either error with no ApiKeys and no features."""
    ids = {}
    for name, side in sides.items():
        md = side.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        ids[name] = (md["cluster_id"], md["brokers"][0]["node_id"])
    cases = {"neither": lambda c, n: (None, -1), "both": lambda c, n: (c, n),
             "another cluster": lambda c, n: ("AAAAAAAAAAAAAAAAAAAAAA", n), "another node": lambda c, n: (c, n + 7),
             "an empty cluster id": lambda c, n: ("", n), "the cluster alone": lambda c, n: (c, -1),
             "the node alone": lambda c, n: (None, n)}
    codes = {}
    for what, pick in cases.items():
        def body(side, pick=pick):
            cluster, node = pick(*ids[side.name])
            return {"client_software_name": "wire-test", "client_software_version": "1", "cluster_id": cluster,
                    "node_id": node}
        r = same(sides, 18, 5, body, f"ApiVersions v5, {what}",
                 ignore=("api_keys", "supported_features", "finalized_features", "finalized_features_epoch"))
        codes[what] = r["error_code"]
        if r["error_code"]:
            assert r["api_keys"] == [] and not r.get("finalized_features"), (what, r)
        else:
            assert any(k["api_key"] == 18 and k["max_version"] == 5 for k in r["api_keys"]), r
    assert codes == {"neither": 0, "both": 0, "another cluster": 129, "another node": 129, "an empty cluster id": 129,
                     "the cluster alone": 42, "the node alone": 42}, codes


def _sort_partitions_only(answer):  # Kafka answers a topic's refused partitions first, then the others
    for t in answer["topics"]:
        t["partitions"].sort(key=lambda p: p["partition_index"])


def test_offset_commit_v10_topic_ids(sides, topic_name):
    """OffsetCommit v10 names topics by id (KIP-848): a known id is committed and answered by id, an id no topic has
    (or the zero id) is UNKNOWN_TOPIC_ID for each of its partitions, a partition past the topic's end
    UNKNOWN_TOPIC_OR_PARTITION; what was committed reads back through OffsetFetch v10 on both brokers alike."""
    topic, other, group = _offset_fixture(sides, topic_name)
    stranger = uuid.uuid4()

    def ids(side):
        return {n: i for i, n in side.ids.items()}

    def body(side, generation=-1, member=""):
        tid = ids(side)
        return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                "group_instance_id": None, "topics": [
                    {"topic_id": tid[topic], "partitions": [
                        {"partition_index": 1, "committed_offset": 11, "committed_leader_epoch": -1,
                         "committed_metadata": "v10"},
                        {"partition_index": 9, "committed_offset": 3, "committed_leader_epoch": -1,
                         "committed_metadata": None}]},
                    {"topic_id": stranger, "partitions": [
                        {"partition_index": 0, "committed_offset": 4, "committed_leader_epoch": -1,
                         "committed_metadata": ""}]},
                    {"topic_id": ZERO, "partitions": [
                        {"partition_index": 0, "committed_offset": 4, "committed_leader_epoch": -1,
                         "committed_metadata": ""}]},
                    {"topic_id": tid[other], "partitions": [
                        {"partition_index": 0, "committed_offset": 2, "committed_leader_epoch": 3,
                         "committed_metadata": "o"}]}]}
    r = same(sides, 8, 10, body, "v10", sort=_sort_partitions_only)
    codes = {t["topic_id"]: [p["error_code"] for p in t["partitions"]] for t in r["topics"]}
    assert codes == {f"id:{topic}": [0, 3], "id:unknown": [100], "zero": [100], f"id:{other}": [0]}, codes
    # a member of no generation committing with a generation: the group's error for the partitions that exist,
    # the topic's or partition's own error for the others (Kafka checks them first)
    r = same(sides, 8, 10, lambda side: body(side, generation=4, member="nobody"), "v10, not a member",
             sort=_sort_partitions_only)
    codes = {t["topic_id"]: [p["error_code"] for p in t["partitions"]] for t in r["topics"]}
    assert codes == {f"id:{topic}": [25, 3], "id:unknown": [100], "zero": [100], f"id:{other}": [25]}, codes
    named = {"group_id": group, "generation_id_or_member_epoch": 4, "member_id": "nobody", "group_instance_id": None,
             "topics": [{"name": n, "partitions": [
                 {"partition_index": i, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""}
                 for i in (0, 7)]} for n in (topic, topic_name("nope"))]}
    for v in (3, 9):
        same(sides, 8, v, named, f"v{v}, not a member, an unknown topic and partition", sort=_sort_partitions_only)

    def fetch(side):
        tid = ids(side)
        return {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": [
            {"topic_id": tid[topic], "partition_indexes": [0, 1, 2]},
            {"topic_id": tid[other], "partition_indexes": [0]}]}], "require_stable": False}
    # the committed leader epoch is not kept (README: OffsetFetch answers -1, so clients skip an epoch validation
    # through OffsetForLeaderEpoch, which kafkalog does not serve)
    f = same(sides, 9, 10, fetch, "OffsetFetch v10 after OffsetCommit v10", sort=_sort_all_topics,
             ignore=("*.committed_leader_epoch",))
    got = {(t["topic_id"], p["partition_index"]): (p["committed_offset"], p["metadata"])
           for t in f["groups"][0]["topics"] for p in t["partitions"]}
    assert got[(f"id:{topic}", 1)] == (11, "v10") and got[(f"id:{other}", 0)] == (2, "o"), got


def test_offset_for_leader_epoch_v2_to_v4(sides, topic_name):
    """OffsetForLeaderEpoch on one node: epoch 0 ends at the log end offset, an epoch above it or -1 is unknown
    (-1, -1), one below -1 comes before the first epoch (answered with epoch 0's start: the log start offset, also
    after DeleteRecords moved it); the client's current epoch other than 0 is fenced (below) or unknown (above); a
    partition or topic the broker does not have is UNKNOWN_TOPIC_OR_PARTITION."""
    topic, empty = topic_name("t"), topic_name("e")
    for side in sides.values():
        side.create(topic, 2)
        side.create(empty, 1)
        side.produce(topic, 0, [b"a", b"b", b"c"], 1_000)
        side.produce(topic, 0, [b"d", b"e"], 2_000)
        side.produce(topic, 1, [b"x"], 3_000)
    asks = [(p, cur, want) for p in (0, 1, 5) for cur, want in
            ((-1, 0), (-1, -1), (-1, 1), (-1, 7), (-1, -3), (0, 0), (1, 0), (-5, 0), (0, 2))]

    def body(v):
        return {"replica_id": -1, "topics": [
            {"topic": topic, "partitions": [{"partition": p, "current_leader_epoch": cur, "leader_epoch": want}
                                            for p, cur, want in asks]},
            {"topic": empty, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0},
                                            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": -2}]},
            {"topic": topic_name("nope"), "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                          "leader_epoch": 0}]}]}
    for v in (2, 3, 4):
        r = same(sides, 23, v, body(v), f"v{v}")
    ends = {(p["partition"], a[1], a[2]): (p["error_code"], p["leader_epoch"], p["end_offset"])
            for p, a in zip(r["topics"][0]["partitions"], asks)}
    assert ends[(0, -1, 0)] == (0, 0, 5) and ends[(1, -1, 0)] == (0, 0, 1), ends
    assert ends[(0, -1, 7)] == (0, -1, -1) and ends[(0, 1, 0)][0] == 75 and ends[(0, -5, 0)][0] == 74, ends
    assert ends[(5, -1, 0)][0] == 3, ends
    for side in sides.values():  # the log start moves: epoch 0 starts there now
        r = side.call(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
                              "timeout_ms": 30000})
        assert r["topics"][0]["partitions"][0]["error_code"] == 0, (side.name, r)
    r = same(sides, 23, 4, body(4), "v4 after DeleteRecords")
    assert r["topics"][0]["partitions"][4] == {"error_code": 0, "partition": 0, "leader_epoch": -3, "end_offset": 2}, r


def test_elect_leaders_and_partition_reassignments_on_one_node(sides, topic_name):
    """ElectLeaders v0-2 (preferred and unclean): ELECTION_NOT_NEEDED for each partition there is, Kafka's messages
    for a partition or topic it does not have; ListPartitionReassignments: none in progress; AlterPartitionReassignments
    v0-1: to the partition's own broker is done already, a cancel finds nothing (NO_REASSIGNMENT_IN_PROGRESS), an
    empty list, a broker twice or a broker that is not registered is INVALID_REPLICA_ASSIGNMENT with Kafka's text."""
    topic, nope = topic_name("t"), topic_name("nope")
    node = {}
    for name, side in sides.items():
        side.create(topic, 2)
        node[name] = side.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})["brokers"][0]["node_id"]
    for v in (0, 1, 2):
        for election in ((0,) if v == 0 else (0, 1)):
            r = same(sides, 43, v, {"election_type": election, "timeout_ms": 5000, "topic_partitions": [
                {"topic": topic, "partitions": [0, 1, 7]}, {"topic": nope, "partitions": [0]}]}, f"ElectLeaders v{v}")
            assert [p["error_code"] for p in r["replica_election_results"][0]["partition_result"]] == [84, 84, 3]
    everything = sides["kafkalog"].call(43, 2, {"election_type": 0, "timeout_ms": 5000, "topic_partitions": None})
    listed = {t["topic"]: t["partition_result"] for t in everything["replica_election_results"]}
    assert everything["error_code"] == 0 and listed[topic] == [] and not any(listed.values()), everything
    same(sides, 46, 0, {"timeout_ms": 5000, "topics": None}, "ListPartitionReassignments, all")
    same(sides, 46, 0, {"timeout_ms": 5000, "topics": [{"name": topic, "partition_indexes": [0, 9]}]},
         "ListPartitionReassignments, some")
    for v in (0, 1):
        def alter(side, v=v):
            n = node[side.name]
            return {"timeout_ms": 5000, "allow_replication_factor_change": v == 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "replicas": [n]},
                                               {"partition_index": 1, "replicas": None},
                                               {"partition_index": 5, "replicas": [n]}]},
                {"name": nope, "partitions": [{"partition_index": 0, "replicas": [n]}]}]}
        r = same(sides, 45, v, alter, f"AlterPartitionReassignments v{v}")
        assert [p["error_code"] for p in r["responses"][0]["partitions"]] == [0, 85, 3], r
    for replicas in (lambda n: [], lambda n: [n, n], lambda n: [n + 5], lambda n: [n, n + 5], lambda n: [n + 5, n + 5]):
        def bad(side, replicas=replicas):
            return {"timeout_ms": 5000, "allow_replication_factor_change": False, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "replicas": replicas(node[side.name])}]}]}
        r = sides["kafka"].call(45, 1, bad(sides["kafka"]))
        assert r["responses"][0]["partitions"][0]["error_code"] == 39, r
        if node["kafka"] == node["kafkalog"]:  # the texts name broker ids
            same(sides, 45, 1, bad, "AlterPartitionReassignments v1, an invalid assignment")
