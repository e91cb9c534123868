"""KIP-932's admin surface on Apache Kafka 4.4 and on kafkalog, over raw frames: GROUP configs (DescribeConfigs,
IncrementalAlterConfigs, AlterConfigs on resource type 32), AlterShareGroupOffsets, DeleteShareGroupOffsets and a
share group at ``share.isolation.level=read_committed`` (aborted transactions never delivered, nothing past the
last stable offset), compared step by step; ``kafka-share-groups --reset-offsets / --delete-offsets`` (slow: the
tool's JVM).

Each scenario runs on the session's brokers (``kafka``, ``kafkalog``) with its own topic and group names; answers
carry no member ids, topic ids or epochs (they differ by construction).
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.broker.wire import Wire, batch

RUN = uuid.uuid4().hex[:6]
GROUP_RESOURCE = 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
GROUP_CONFIG_SOURCE = 8  # DescribeConfigs' ConfigSource of a group's own value
LAB_STATIC = ("consumer.assignment.interval.ms", "consumer.assignor.offload.enable")


def _zero():
    return uuid.UUID(int=0)


class Side:
    """One broker over raw frames, with the waits Kafka needs (coordinators loading, new partitions' leaders)."""

    def __init__(self, srv):
        self.name = srv.name
        self.w = Wire(srv.port, timeout=30)

    def close(self):
        self.w.close()

    def call(self, key, version, body):
        return self.w.call(key, version, body)

    def create(self, topic, partitions=1):
        r = self.w.create_topic(topic, partitions)
        assert r["error_code"] == 0, (self.name, r)
        for _ in range(100):
            md = self.call(3, 12, {"topics": [{"topic_id": _zero(), "name": topic}],
                                   "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})["topics"][0]
            if md["error_code"] == 0 and all(p["leader_id"] >= 0 for p in md["partitions"]):
                return md["topic_id"]
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: {topic} has no leader")

    def produce(self, topic, partition, values, **kw):
        for _ in range(100):
            code = self.w.produce(topic, partition, batch(values, **kw))["error_code"]
            if code != 6:
                break
            time.sleep(0.1)
        assert code == 0, (self.name, code)

    def ready(self, key_type, key):
        for _ in range(150):
            r = self.call(10, 4, {"key_type": key_type, "coordinator_keys": [key]})["coordinators"][0]
            if r["error_code"] == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no coordinator for {key}: {r}")

    # -- configs ---------------------------------------------------------------------------------------------------

    def alter(self, group, configs, validate_only=False, incremental=True):
        if incremental:
            body = {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
                {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}],
                "validate_only": validate_only}
            r = self.call(44, 1, body)
        else:
            body = {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
                {"name": k, "value": v} for k, v in configs]}], "validate_only": validate_only}
            r = self.call(33, 2, body)
        x = r["responses"][0]
        if not x["error_code"] and not validate_only:
            self._until_visible(group, configs if incremental else [(k, SET, v) for k, v in configs])
        return {"error_code": x["error_code"], "error_message": x["error_message"] and
                x["error_message"].replace(group, "G"), "resource_type": x["resource_type"]}

    def _until_visible(self, group, configs, polls=100):
        """Kafka answers an alteration once its record is in the metadata log; its broker applies it a moment
        later, and a DescribeConfigs in between shows the old values (a busy CI run did): wait, by polls, until the
        set keys show their values as the group's own and the deleted ones do not (kafkalog: at once)."""
        for _ in range(polls):
            now = {c["name"]: c for c in self.describe(group)["configs"]}
            if all(k not in now or (now[k]["value"] == v and now[k].get("config_source") == GROUP_CONFIG_SOURCE
                                    if op == SET else now[k].get("config_source") != GROUP_CONFIG_SOURCE)
                   for k, op, v in configs if op in (SET, DELETE)):
                return
            time.sleep(0.05)

    def describe(self, group, keys=None, synonyms=False, docs=False, version=4):
        r = self.call(32, version, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group,
                                                   "configuration_keys": keys}],
                                    "include_synonyms": synonyms, "include_documentation": docs})["results"][0]
        r = dict(r, resource_name=r["resource_name"].replace(group, "G") if group else r["resource_name"],
                 error_message=r["error_message"] and r["error_message"].replace(group, "G"))
        if docs:  # the texts are Kafka's own: compared apart, by whether there is one
            r["configs"] = [dict(c, documentation=bool(c["documentation"])) for c in r["configs"]]
        # the lab's Kafka sets these two in server.properties to what kafkalog does (an assignment at once, on the
        # request's thread): the same value, from another source
        r["configs"] = [{k: v for k, v in c.items() if k not in ("config_source", "synonyms")}
                        if c["name"] in LAB_STATIC else c for c in r["configs"]]
        return r

    # -- share groups ----------------------------------------------------------------------------------------------

    def join(self, group, member, topics):
        for _ in range(100):  # Kafka: COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR while it loads
            r = self.call(76, 1, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                                  "subscribed_topic_names": list(topics)})
            if r["error_code"] not in (14, 15, 16):
                break
            time.sleep(0.1)
        assert r["error_code"] == 0, (self.name, r)
        return r

    def leave(self, group, member):
        r = self.call(76, 1, {"group_id": group, "member_id": member, "member_epoch": -1, "rack_id": None,
                              "subscribed_topic_names": None})
        assert r["error_code"] == 0, (self.name, r)

    def fetch(self, group, member, epoch, tid, partitions=(0,), acks=None, wait=500, max_records=500):
        acks = acks or {}
        r = self.call(78, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                              "max_wait_ms": wait, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
                              "batch_size": max_records, "topics": [{"topic_id": tid, "partitions": [
                                  {"partition_index": p, "acknowledgement_batches": [
                                      {"first_offset": a, "last_offset": b, "acknowledge_types": [t]}
                                      for a, b, t in acks.get(p, ())]} for p in partitions]}],
                              "forgotten_topics_data": []})
        assert r["error_code"] == 0, (self.name, r)
        out = {}
        for t in r["responses"]:
            for p in t["partitions"]:
                assert p["acknowledge_error_code"] == 0, (self.name, p)
                if p["error_code"] == 0:  # Kafka: UNKNOWN_SERVER_ERROR while a share-partition initializes
                    out[p["partition_index"]] = [(a["first_offset"], a["last_offset"], a["delivery_count"])
                                                 for a in p["acquired_records"]]
        return out

    def fetch_until(self, group, member, tid, partitions=(0,), tries=150):
        """The first ShareFetch that acquires something (Kafka initializes a share-partition on its first fetch)
        in a new session; (acquired, the session's next epoch). A hang guard of ``tries`` fetches (each waits up to
        500 ms): Kafka acquired nothing in 30 of them once, in CI beside the other tests."""
        epoch = 0
        for _ in range(tries):
            got = self.fetch(group, member, epoch, tid, partitions)
            epoch += 1
            if any(got.values()):
                return got, epoch
            time.sleep(0.2)
        return {}, epoch

    def close_session(self, group, member):
        self.call(79, 1, {"group_id": group, "member_id": member, "share_session_epoch": -1, "topics": []})

    def offsets(self, group, topics=None):
        r = self.call(90, 1, {"groups": [{"group_id": group, "topics": topics}]})["groups"][0]
        return {"error_code": r["error_code"], "error_message": r["error_message"] and
                r["error_message"].replace(group, "G"),
                "topics": sorted((t["topic_name"], [(p["partition_index"], p["start_offset"], p["lag"],
                                                     p["error_code"]) for p in t["partitions"]])
                                 for t in r["topics"])}

    def alter_offsets(self, group, topics: dict):
        r = self.call(91, 0, {"group_id": group, "topics": [
            {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in parts]}
            for t, parts in topics.items()]})
        return {"error_code": r["error_code"], "error_message": _msg(r["error_message"], group),
                "responses": sorted((t["topic_name"], t["topic_id"] != _zero(),
                                     [(p["partition_index"], p["error_code"], _msg(p["error_message"], group))
                                      for p in t["partitions"]]) for t in r["responses"])}

    def delete_offsets(self, group, topics):
        r = self.call(92, 0, {"group_id": group, "topics": [{"topic_name": t} for t in topics]})
        # sorted: Kafka 4.4 answers the topics in a hash map's order
        return {"error_code": r["error_code"], "error_message": _msg(r["error_message"], group),
                "responses": sorted((t["topic_name"], t["topic_id"] != _zero(), t["error_code"],
                                     _msg(t["error_message"], group)) for t in r["responses"])}


def _msg(text, group):
    return text and text.replace(group, "G")


# ---------------------------------------------------------------------------------------------------- scenarios

def config_scenario(srv, tag: str) -> list:
    """Group configs: describe before and after, each invalid value's answer, AlterConfigs, DELETE, validate_only,
    and what DeleteGroups leaves."""
    group, topic = f"cfg-{tag}-{RUN}", f"cfg-{tag}-{RUN}-t"
    out = []
    s = Side(srv)
    try:
        s.create(topic)
        s.ready(0, group)
        out.append(("describe new", s.describe(group)))
        out.append(("describe new synonyms", s.describe(group, synonyms=True, docs=True)))
        out.append(("set two", s.alter(group, [("share.auto.offset.reset", SET, "earliest"),
                                               ("share.record.lock.duration.ms", SET, "15000")])))
        out.append(("describe set", s.describe(group, synonyms=True)))
        out.append(("describe keys", s.describe(group, keys=["share.auto.offset.reset", "share.isolation.level",
                                                             "no.such.key"])))
        bad = [("share.record.lock.duration.ms", "1000"), ("share.record.lock.duration.ms", "100000"),
               ("share.record.lock.duration.ms", "abc"), ("share.auto.offset.reset", "foo"),
               ("share.auto.offset.reset", "by_duration:PT1H"), ("share.auto.offset.reset", "by_duration:-PT1H"),
               ("share.isolation.level", "foo"), ("share.isolation.level", "read_committed"),
               ("share.delivery.count.limit", "1"), ("share.delivery.count.limit", "11"),
               ("share.delivery.count.limit", "3"),
               ("share.partition.max.record.locks", "50"), ("share.partition.max.record.locks", "5000"),
               ("share.session.timeout.ms", "1000"), ("share.session.timeout.ms", "50000"),
               ("share.heartbeat.interval.ms", "1000"), ("share.heartbeat.interval.ms", "6000"),
               ("consumer.session.timeout.ms", "1000"), ("consumer.session.timeout.ms", "50000"),
               ("consumer.heartbeat.interval.ms", "100"), ("consumer.heartbeat.interval.ms", "100000"),
               ("share.renew.acknowledge.enable", "maybe"), ("share.renew.acknowledge.enable", "false"),
               ("no.such.key", "1"), ("segment.bytes", "1000000"),
               ("errors.deadletterqueue.topic.name", "__dlq"), ("streams.num.standby.replicas", "1")]
        for k, v in bad:
            out.append((f"set {k}={v}", s.alter(group, [(k, SET, v)])))
        out.append(("set null", s.alter(group, [("share.auto.offset.reset", SET, None)])))
        out.append(("append", s.alter(group, [("share.auto.offset.reset", APPEND, "latest")])))
        out.append(("subtract", s.alter(group, [("share.isolation.level", SUBTRACT, "read_committed")])))
        out.append(("twice", s.alter(group, [("share.isolation.level", SET, "read_committed"),
                                             ("share.isolation.level", SET, "read_uncommitted")])))
        out.append(("delete unset", s.alter(group, [("share.session.timeout.ms", DELETE, None)])))
        out.append(("delete set", s.alter(group, [("share.delivery.count.limit", DELETE, None)])))
        out.append(("validate only", s.alter(group, [("share.isolation.level", SET, "read_uncommitted")],
                                             validate_only=True)))
        out.append(("describe after", s.describe(group)))
        out.append(("alter configs", s.alter(group, [("share.auto.offset.reset", "latest")], incremental=False)))
        out.append(("alter configs bad", s.alter(group, [("share.auto.offset.reset", "x")], incremental=False)))
        out.append(("describe after alter configs", s.describe(group)))
        out.append(("describe empty name", s.describe("")))
        out.append(("set empty name", s.alter("", [("share.auto.offset.reset", SET, "earliest")])))
        out.append(("describe v1", s.describe(group, version=1)))
        # the group exists as a share group, then is deleted: are its configs?
        m = str(uuid.uuid4())
        s.join(group, m, [topic])
        s.leave(group, m)
        out.append(("delete group", s.call(42, 2, {"groups_names": [group]})["results"][0]["error_code"]))
        out.append(("describe after delete", s.describe(group)))
        # a group that never existed, with configs only
        lonely = group + "-configs-only"
        out.append(("set lonely", s.alter(lonely, [("share.isolation.level", SET, "read_committed")])))
        out.append(("delete lonely", s.call(42, 2, {"groups_names": [lonely]})["results"][0]["error_code"]))
        out.append(("describe lonely", s.describe(lonely, keys=["share.isolation.level"])))
    finally:
        s.close()
    return out


def offsets_scenario(srv, tag: str) -> list:
    """AlterShareGroupOffsets / DeleteShareGroupOffsets: a group nobody joined, a group with a member, unknown topics
    and partitions, a new start offset and what the next fetch acquires, a deleted state and where it starts again,
    a classic group's id."""
    group, topic, other = f"off-{tag}-{RUN}", f"off-{tag}-{RUN}-t", f"off-{tag}-{RUN}-u"
    out = []
    s = Side(srv)
    try:
        tid = s.create(topic, 2)
        s.create(other, 1)
        s.produce(topic, 0, [b"a", b"b", b"c"])
        s.produce(topic, 0, [b"d", b"e"])
        s.produce(topic, 1, [b"x"])
        fresh = group + "-fresh"
        s.ready(0, fresh)
        out.append(("alter a new group", s.alter_offsets(fresh, {topic: [(0, 1)]})))
        out.append(("describe the new group", s.offsets(fresh)))  # the partition altered alone
        out.append(("delete a new group's", s.delete_offsets(fresh, [topic, other])))
        out.append(("describe after", s.offsets(fresh)))
        s.ready(0, group)
        assert s.alter(group, [("share.auto.offset.reset", SET, "earliest")])["error_code"] == 0
        m1 = str(uuid.uuid4())
        s.join(group, m1, [topic])
        got, epoch = s.fetch_until(group, m1, tid, partitions=(0,))
        out.append(("first fetch", got))
        out.append(("alter with member", s.alter_offsets(group, {topic: [(0, 1)]})))
        out.append(("delete with member", s.delete_offsets(group, [topic])))
        s.fetch(group, m1, epoch, tid, partitions=(0,), acks={0: [(a, b, 1) for a, b, _ in got.get(0, ())]},
                wait=0)
        s.close_session(group, m1)
        s.leave(group, m1)
        # the lag (Kafka 4.4 describes the start offset it persisted, which it writes after the answer)
        d = s.offsets(group, [{"topic_name": topic, "partitions": [0]}])
        out.append(("describe after accept", [(t, [(p, lag, e) for p, _start, lag, e in ps]) for t, ps in d["topics"]]))
        out.append(("alter", s.alter_offsets(group, {topic: [(0, 2), (1, 0), (7, 0)], "no-such-topic": [(0, 0)],
                                                     other: [(0, 0)]})))
        out.append(("describe after alter", s.offsets(group)))
        if srv.name == "kafkalog":
            # the next member starts at the new start offset, every record at delivery count 1 (Kafka 4.4's broker
            # keeps delivering from the share-partition it has loaded until it reloads it: checked in the lab, it
            # delivered offsets 0-4 again at delivery count 2 after a start offset of 3; not compared)
            m2 = str(uuid.uuid4())
            s.join(group, m2, [topic])
            got, _ = s.fetch_until(group, m2, tid, partitions=(0,))
            assert got == {0: [(2, 4, 1)]}, got
            s.close_session(group, m2)
            s.leave(group, m2)
        out.append(("alter empty", s.alter_offsets(group, {})))
        out.append(("delete", s.delete_offsets(group, [topic, "no-such-topic", other])))
        out.append(("describe after delete", s.offsets(group)))
        out.append(("delete empty", s.delete_offsets(group, [])))
        if srv.name == "kafkalog":
            # the state starts again at share.auto.offset.reset (earliest): everything again, delivery count 1
            # (Kafka 4.4: the same once its broker reloads the share-partition, which it does at its own time)
            m3 = str(uuid.uuid4())
            s.join(group, m3, [topic])
            got, _ = s.fetch_until(group, m3, tid, partitions=(0,))
            assert got == {0: [(0, 4, 1)]}, got
            s.close_session(group, m3)
            s.leave(group, m3)
        # taken as they are (what a start offset outside the log then means differs: Kafka 4.4 describes -5 with
        # a lag of 10, and 10 past a log end of 1 with a lag of -9; kafkalog starts at the log start, and at 10)
        out.append(("alter negative", s.alter_offsets(group, {topic: [(0, -5)]})))
        out.append(("alter past end", s.alter_offsets(group, {topic: [(1, 10)]})))
        # a classic group's id
        classic = group + "-classic"
        s.call(8, 8, {"group_id": classic, "generation_id_or_member_epoch": -1, "member_id": "",
                      "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                          {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                           "committed_metadata": ""}]}]})
        out.append(("alter classic group", s.alter_offsets(classic, {topic: [(0, 1)]})))
        out.append(("delete classic group", s.delete_offsets(classic, [topic])))
    finally:
        s.close()
    return out


def committed_scenario(srv, tag: str) -> list:
    """share.isolation.level=read_committed: a committed transaction, an aborted one, plain records and an open
    transaction: what a share consumer acquires, and what read_uncommitted acquires of the same log."""
    from .test_transactions_v2 import Side as TxnSide
    group, topic = f"rc-{tag}-{RUN}", f"rc-{tag}-{RUN}-t"
    out = []
    s = Side(srv)

    class _T:
        name, bootstrap = srv.name, srv.bootstrap
    t = TxnSide(_T)
    try:
        tid = s.create(topic)
        t.ready(1, f"rc-{tag}-{RUN}-txn")
        s.produce(topic, 0, [b"plain-0", b"plain-1"])                              # 0, 1
        txn = f"rc-{tag}-{RUN}-txn"
        assert t.init(txn)["error_code"] == 0
        pid, epoch = t.pid, t.epoch0
        assert t.produce(txn, topic, 0, [b"c-0", b"c-1"], pid, epoch, 0) == 0      # 2, 3
        r = t.end(txn, pid, epoch, True)                                             # marker 4
        assert r["error_code"] == 0, r
        t.settle(txn)
        epoch += 1
        assert t.produce(txn, topic, 0, [b"a-0", b"a-1", b"a-2"], pid, epoch, 0) == 0  # 5, 6, 7
        s.produce(topic, 0, [b"plain-2"])                                           # 8
        r = t.end(txn, pid, epoch, False)                                            # marker 9
        assert r["error_code"] == 0, r
        t.settle(txn)
        epoch += 1
        s.produce(topic, 0, [b"plain-3"])                                           # 10
        assert t.produce(txn, topic, 0, [b"o-0"], pid, epoch, 0) == 0                # 11, open
        s.produce(topic, 0, [b"plain-4"])                                           # 12
        for level in ("read_committed", "read_uncommitted"):
            g = f"{group}-{level}"
            r = s.alter(g, [("share.auto.offset.reset", SET, "earliest"), ("share.isolation.level", SET, level)])
            assert r["error_code"] == 0, r
            s.ready(0, g)
            m = str(uuid.uuid4())
            s.join(g, m, [topic])
            got, ep = s.fetch_until(g, m, tid)
            more = s.fetch(g, m, ep, tid, wait=200)
            ranges = got.get(0, []) + more.get(0, [])
            # which fetch acquires what differs (Kafka 4.4's first fetch here stops before the COMMIT marker): the
            # offsets acquired by the two, with their delivery counts, do not
            out.append((level, sorted((o, c) for a, b, c in ranges for o in range(a, b + 1))))
            s.fetch(g, m, ep + 1, tid, acks={0: [(a, b, 1) for a, b, _ in ranges]}, wait=0)
            # the lag (Kafka 4.4 describes the start offset it persisted, which it writes after the answer)
            out.append((level + " lag", [(t, [lag for _p, _start, lag, _e in ps]) for t, ps in s.offsets(g)["topics"]]))
            s.close_session(g, m)
            s.leave(g, m)
        # the open transaction commits: read_committed goes on past it
        r = t.end(txn, pid, epoch, True)                                             # marker 13
        assert r["error_code"] == 0, r
        t.settle(txn)
        g = f"{group}-read_committed"
        m = str(uuid.uuid4())
        s.join(g, m, [topic])
        got, ep = s.fetch_until(g, m, tid)
        out.append(("after commit", got))
        s.close_session(g, m)
        s.leave(g, m)
    finally:
        s.close()
        t.close()
    return out


def tool_scenario(srv, tag: str) -> list:
    """``kafka-share-groups --reset-offsets`` (--to-earliest dry run, --to-latest, --to-offset on one partition,
    a group with a member, an unknown group) and ``--delete-offsets``, with ``--describe`` between, then
    ``kafka-configs --entity-type groups`` (--alter --add-config / --delete-config, --describe [--all]): [(step,
    (exit status, output lines))], the group's name and the coordinator's address left out."""
    from .lab import kafka_tool
    group, topic = f"tool-{tag}-{RUN}", f"tool-{tag}-{RUN}-t"
    out = []
    s = Side(srv)

    def tool(step, *args):
        r = kafka_tool("kafka-share-groups", ["--bootstrap-server", srv.bootstrap, *args], timeout=120)
        text = (r.stdout + r.stderr).replace(group, "G").replace(topic, "T").replace(srv.bootstrap, "B")
        lines = [line.split() for line in text.splitlines() if line.strip() and not line.startswith(("WARN",
                                                                                                     "SLF4J"))]
        out.append((step, (r.returncode, lines)))

    def configs(step, *args):
        r = kafka_tool("kafka-configs", ["--bootstrap-server", srv.bootstrap, "--entity-type", "groups",
                                         "--entity-name", group, *args], timeout=120)
        text = (r.stdout + r.stderr).replace(group, "G").replace(srv.bootstrap, "B")
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(("WARN", "SLF4J"))]
        # LAB_STATIC's two keys: the same value, Kafka's from its server.properties
        out.append((step, (r.returncode, [line.split(" synonyms=")[0] if line.startswith(LAB_STATIC) else line
                                          for line in lines])))
    try:
        tid = s.create(topic, 2)
        s.produce(topic, 0, [b"a", b"b", b"c"])
        s.produce(topic, 1, [b"x", b"y"])
        s.ready(0, group)
        assert s.alter(group, [("share.auto.offset.reset", SET, "earliest")])["error_code"] == 0
        m = str(uuid.uuid4())
        s.join(group, m, [topic])
        epoch, done, acks = 0, set(), {}
        for _ in range(30):  # every record of both partitions acquired and accepted
            got = s.fetch(group, m, epoch, tid, partitions=(0, 1), acks=acks, wait=500)
            epoch += 1
            acks = {p: [(a, b, 1) for a, b, _ in r] for p, r in got.items() if r}
            done |= {p for p, r in got.items() if r}
            if done == {0, 1} and not acks:
                break
            time.sleep(0.1)
        assert done == {0, 1}, (srv.name, done)
        tool("reset with a member", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
             "--execute")
        s.close_session(group, m)
        s.leave(group, m)
        tool("describe", "--describe", "--group", group)
        # START-OFFSET aside: Kafka 4.4 shows the start offset it persisted, which it writes after the answer
        out[-1] = (out[-1][0], (out[-1][1][0], [row[:3] + row[4:] for row in out[-1][1][1]]))
        tool("reset earliest dry run", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
             "--dry-run")
        tool("reset latest", "--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute")
        tool("reset to offset", "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "1",
             "--execute")
        tool("describe after reset", "--describe", "--group", group)
        tool("reset unknown group", "--reset-offsets", "--group", group + "-nope", "--topic", topic,
             "--to-earliest", "--execute")
        tool("delete offsets", "--delete-offsets", "--group", group, "--topic", topic)
        tool("describe after delete", "--describe", "--group", group)
        tool("delete offsets unknown topic", "--delete-offsets", "--group", group, "--topic", topic + "-nope")
        configs("add config", "--alter", "--add-config", "share.record.lock.duration.ms=20000")
        configs("add bad config", "--alter", "--add-config", "share.record.lock.duration.ms=2000")
        configs("describe configs", "--describe")
        configs("describe all configs", "--describe", "--all")
        configs("delete config", "--alter", "--delete-config", "share.record.lock.duration.ms")
        configs("describe configs after delete", "--describe")
    finally:
        s.close()
    return out


SCENARIOS = {"configs": config_scenario, "offsets": offsets_scenario, "read_committed": committed_scenario,
             "tool": tool_scenario}


def _same(kafka, kafkalog, compare, name):
    fn = SCENARIOS[name]
    answers = {srv.name: fn(srv, srv.name[:2]) for srv in (kafka, kafkalog)}
    for (step, k), (step2, ours) in zip(answers["kafka"], answers["kafkalog"]):
        assert step == step2
        compare(k, ours, what=f"{name}: {step}")
    assert len(answers["kafka"]) == len(answers["kafkalog"])


@pytest.mark.parametrize("name", ["configs", "offsets", "read_committed"])
def test_share_admin_matches_kafka(kafka, kafkalog, compare, name):
    """Each scenario's answers, step by step, from Kafka 4.4 and kafkalog (raw frames: a few seconds each, most of
    them Kafka's share-partition initialization and transaction markers)."""
    _same(kafka, kafkalog, compare, name)


@pytest.mark.slow
def test_kafka_share_groups_reset_and_delete_offsets(kafka, kafkalog, compare):
    """kafka-share-groups --reset-offsets / --delete-offsets / --describe and kafka-configs --entity-type groups
    print the same on both brokers (slow: fifteen runs of a tool's JVM per broker)."""
    _same(kafka, kafkalog, compare, "tool")
