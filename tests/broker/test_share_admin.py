"""KIP-932's admin surface over raw frames: group configs (resource type GROUP in DescribeConfigs,
IncrementalAlterConfigs, AlterConfigs) and what share groups take from them, AlterShareGroupOffsets,
DeleteShareGroupOffsets, share.isolation.level=read_committed, their ACLs, and their durability (a restart, a
failed write, kill -9 of ``kafkalog serve``).

Each test is a handful of round trips on a broker of its own; the kill -9 test runs ``kafkalog serve`` as a child.
"""

from __future__ import annotations

import json
import signal
import uuid

import pytest

from kafkalog.broker import Broker

from .conftest import Serve
from .test_share_groups import ACCEPT, Member, acquired, part, setup_topic
from .test_transactions import _add, _end, _init, _produce, _txn_batch
from .wire import Wire, batch

pytestmark = pytest.mark.usefixtures("deadline")

GROUP = 32
SET, DELETE = 0, 1
INVALID_CONFIG, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, UNKNOWN_TOPIC = 40, 68, 69, 3
GROUP_DENIED, TOPIC_DENIED = 30, 29


@pytest.fixture
def make_broker(tmp_path):
    started = []

    def _make(data=None, **config):
        b = Broker(data or tmp_path / f"data{len(started)}", "127.0.0.1:0", config).start()
        started.append(b)
        return b
    yield _make
    for b in started:
        b.stop()


def alter(w, group, configs, version=1, validate_only=False):
    r = w.call(44, version, {"resources": [{"resource_type": GROUP, "resource_name": group, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}], "validate_only": validate_only})
    x = r["responses"][0]
    return x["error_code"], x["error_message"]


def described(w, group, keys=None):
    r = w.call(32, 4, {"resources": [{"resource_type": GROUP, "resource_name": group, "configuration_keys": keys}],
                       "include_synonyms": False, "include_documentation": False})["results"][0]
    assert r["error_code"] == 0, r
    return {c["name"]: (c["value"], c["config_source"]) for c in r["configs"]}


# ---------------------------------------------------------------------------------------------------- configs

def test_group_configs_are_checked_kept_and_survive_a_restart(make_broker, tmp_path):
    data = tmp_path / "cfg"
    b = make_broker(data)
    with Wire(b.port) as w:
        before = described(w, "g")
        assert before["share.auto.offset.reset"] == ("latest", 5)
        assert before["share.record.lock.duration.ms"] == ("30000", 5)
        assert len(before) == 22 and "share.assignor.offload.enable" not in before  # Kafka's internal keys: not
        assert alter(w, "g", [("share.auto.offset.reset", SET, "earliest"),
                              ("share.record.lock.duration.ms", SET, "20000")]) == (0, None)
        # refused, and nothing of the request changes: a value out of the broker's bounds, an unknown key
        for k, v in (("share.record.lock.duration.ms", "1000"), ("share.record.lock.duration.ms", "70000"),
                     ("share.isolation.level", "serializable"), ("no.such.key", "1"),
                     ("share.delivery.count.limit", "x")):
            code, message = alter(w, "g", [("share.auto.offset.reset", SET, "latest"), (k, SET, v)])
            assert code == INVALID_CONFIG and k in message, (k, v, code, message)
        # Kafka 4.4's texts: the broker's bounds, then ConfigDef's own
        assert alter(w, "g", [("share.record.lock.duration.ms", SET, "70000")]) == (
            INVALID_CONFIG, "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.")
        assert alter(w, "g", [("share.delivery.count.limit", SET, "1")]) == (
            INVALID_CONFIG, "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2")
        assert alter(w, "g", [("share.isolation.level", SET, "read_committed")], validate_only=True) == (0, None)
        assert described(w, "g", ["share.auto.offset.reset", "share.record.lock.duration.ms",
                                  "share.isolation.level"]) == {
            "share.auto.offset.reset": ("earliest", 8), "share.record.lock.duration.ms": ("20000", 8),
            "share.isolation.level": ("read_uncommitted", 5)}
        assert alter(w, "g", [("share.record.lock.duration.ms", DELETE, None)]) == (0, None)
    saved = json.loads((data / ".kafkalog-broker" / "group-configs.json").read_text())
    assert saved == {"version": 1, "groups": {"g": {"share.auto.offset.reset": "earliest"}}}
    b.stop()
    b2 = make_broker(data)
    with Wire(b2.port) as w:
        assert described(w, "g", ["share.auto.offset.reset"]) == {"share.auto.offset.reset": ("earliest", 8)}
        # AlterConfigs replaces the group's configs as a whole
        r = w.call(33, 2, {"resources": [{"resource_type": GROUP, "resource_name": "g", "configs": [
            {"name": "share.isolation.level", "value": "read_committed"}]}], "validate_only": False})
        assert r["responses"][0]["error_code"] == 0, r
        assert described(w, "g", ["share.auto.offset.reset", "share.isolation.level"]) == {
            "share.auto.offset.reset": ("latest", 5), "share.isolation.level": ("read_committed", 8)}


def test_a_failed_config_write_answers_an_error_and_changes_nothing(make_broker, tmp_path):
    b = make_broker(tmp_path / "d")
    with Wire(b.port) as w:
        assert alter(w, "g", [("share.auto.offset.reset", SET, "earliest")]) == (0, None)
        # the temp file's name taken by a directory: the write fails
        (tmp_path / "d" / ".kafkalog-broker" / "group-configs.json.tmp").mkdir()
        code, _ = alter(w, "g", [("share.auto.offset.reset", SET, "latest")])
        assert code != 0
        assert described(w, "g", ["share.auto.offset.reset"]) == {"share.auto.offset.reset": ("earliest", 8)}


def test_share_groups_take_their_configs(make_broker):
    b = make_broker(**{"group.share.record.lock.duration.ms": 30000})
    setup_topic(b.port, "t", [(0, [b"a", b"b", b"c"])])
    with Wire(b.port) as w:
        assert alter(w, "mine", [("share.auto.offset.reset", SET, "earliest"),
                                 ("share.record.lock.duration.ms", SET, "15000"),
                                 ("share.heartbeat.interval.ms", SET, "6000")]) == (0, None)
    mine, other = Member(b.port, "mine", "t"), Member(b.port, "other", "t")
    assert mine.join()["heartbeat_interval_ms"] == 6000
    assert other.join()["heartbeat_interval_ms"] == 5000
    r = mine.fetch()
    assert acquired(r) == [(0, 2, 1)] and r["acquisition_lock_timeout_ms"] == 15000
    r = other.fetch()  # share.auto.offset.reset=latest (the broker's): nothing yet
    assert acquired(r) == [] and r["acquisition_lock_timeout_ms"] == 30000


def test_renew_disabled_by_the_group_refuses_renew_requests(make_broker):
    """share.renew.acknowledge.enable=false: a ShareFetch or ShareAcknowledge with IsRenewAck is INVALID_REQUEST as a
    whole, without a lock timeout (Kafka 4.4's answer in the lab); the session goes on."""
    b = make_broker(**{"share.auto.offset.reset": "earliest"})
    setup_topic(b.port, "t", [(0, [b"a", b"b"])])
    with Wire(b.port) as w:
        assert alter(w, "g", [("share.renew.acknowledge.enable", SET, "false")]) == (0, None)
    m = Member(b.port, "g", "t")
    m.join()
    assert acquired(m.fetch()) == [(0, 1, 1)]
    for r in (m.fetch(acks={0: [(0, 1, (4,))]}, renew=True, epoch=m.session),
              m.acknowledge({0: [(0, 1, (4,))]}, renew=True, epoch=m.session)):
        assert (r["error_code"], r["acquisition_lock_timeout_ms"], r["responses"]) == (42, 0, []), r
    assert part(m.acknowledge({0: [(0, 1, (ACCEPT,))]}))["error_code"] == 0


def test_consumer_groups_take_their_heartbeat_interval(make_broker):
    b = make_broker()
    setup_topic(b.port, "t", [])
    with Wire(b.port) as w:
        assert alter(w, "cg", [("consumer.heartbeat.interval.ms", SET, "7000")]) == (0, None)
        r = w.call(68, 1, {"group_id": "cg", "member_id": str(uuid.uuid4()), "member_epoch": 0,
                           "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
                           "subscribed_topic_names": ["t"], "subscribed_topic_regex": None, "server_assignor": None,
                           "topic_partitions": []})
        assert r["error_code"] == 0 and r["heartbeat_interval_ms"] == 7000, r


def test_session_timeouts_are_the_groups(make_broker):
    """A share group's share.session.timeout.ms and a KIP-848 group's consumer.session.timeout.ms (group configs,
    inside bounds the broker lowered) remove a silent member; the broker's keys (45 s) hold for the others."""
    import time
    b = make_broker(**{"share.auto.offset.reset": "earliest", "group.share.min.session.timeout.ms": 300,
                       "group.share.min.heartbeat.interval.ms": 100, "group.consumer.min.session.timeout.ms": 300,
                       "group.consumer.min.heartbeat.interval.ms": 100})
    setup_topic(b.port, "t", [(0, [b"a"])])
    with Wire(b.port) as w:
        for g in ("short", "cg-short"):
            kind = "share" if g == "short" else "consumer"
            assert alter(w, g, [(f"{kind}.session.timeout.ms", SET, "300"),
                                (f"{kind}.heartbeat.interval.ms", SET, "100")]) == (0, None)
        members = {}
        for g in ("cg-short", "cg-long"):
            members[g] = str(uuid.uuid4())
            r = w.call(68, 1, {"group_id": g, "member_id": members[g], "member_epoch": 0, "instance_id": None,
                               "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"],
                               "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
            assert r["error_code"] == 0, r
    short, long_ = Member(b.port, "short", "t"), Member(b.port, "long", "t")
    short.join()
    long_.join()
    gone = False
    for _ in range(40):  # the sweep runs every 0.5 s
        time.sleep(0.1)
        gone = "short" not in b.services.shares.groups or not b.services.shares.groups["short"].members
        kg = b.services.groups.consumer.groups.get("cg-short")
        if gone and (kg is None or not kg.members):
            break
    assert gone and not b.services.groups.consumer.groups["cg-short"].members
    assert b.services.shares.groups["long"].members and b.services.groups.consumer.groups["cg-long"].members


def test_share_group_offsets_acls(make_broker, tmp_path):
    """AlterShareGroupOffsets / DeleteShareGroupOffsets: READ on the group, READ on each topic."""
    from kafkalog.broker import security
    data = tmp_path / "acl2"
    data.mkdir()
    security.Authorizer(security.default_paths(data)[1]).add(
        security.AclBinding("User:ANONYMOUS", "*", "ALL", "TOPIC", "t", "LITERAL", "ALLOW"),
        security.AclBinding("User:ANONYMOUS", "*", "CREATE", "CLUSTER", "kafka-cluster", "LITERAL", "ALLOW"),
        security.AclBinding("User:ANONYMOUS", "*", "READ", "GROUP", "ok", "LITERAL", "ALLOW"))
    b = make_broker(data, **{"authorizer.class.name": "kafkalog"})
    setup_topic(b.port, "t", [(0, [b"a"])])
    with Wire(b.port) as w:
        assert w.create_topic("secret", 1)["error_code"] == 0  # created (CREATE on the cluster), not readable
        assert alter_offsets(w, "denied", {"t": [(0, 0)]}) == (GROUP_DENIED, {})
        assert delete_offsets(w, "denied", ["t"]) == (GROUP_DENIED, {})
        assert alter_offsets(w, "ok", {"t": [(0, 0)], "secret": [(0, 0)]}) == (
            0, {("t", 0): 0, ("secret", 0): TOPIC_DENIED})
        assert delete_offsets(w, "ok", ["t", "secret"]) == (0, {"t": 0, "secret": TOPIC_DENIED})


def test_group_configs_acls(make_broker, tmp_path):
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the GROUP resource, as Kafka checks them."""
    from kafkalog.broker import security
    data = tmp_path / "acl"
    data.mkdir()
    security.Authorizer(security.default_paths(data)[1]).add(
        security.AclBinding("User:ANONYMOUS", "*", "DESCRIBE_CONFIGS", "GROUP", "readable", "LITERAL", "ALLOW"),
        security.AclBinding("User:ANONYMOUS", "*", "ALTER_CONFIGS", "GROUP", "writable", "LITERAL", "ALLOW"))
    b = make_broker(data, **{"authorizer.class.name": "kafkalog"})
    with Wire(b.port) as w:
        r = w.call(32, 4, {"resources": [{"resource_type": GROUP, "resource_name": n, "configuration_keys": None}
                                         for n in ("readable", "writable", "secret")],
                           "include_synonyms": False, "include_documentation": False})
        # ALTER_CONFIGS implies DESCRIBE_CONFIGS, as in Kafka
        assert [(x["error_code"], bool(x["configs"])) for x in r["results"]] == [(0, True), (0, True),
                                                                                 (GROUP_DENIED, False)]
        assert alter(w, "readable", [("share.auto.offset.reset", SET, "earliest")])[0] == GROUP_DENIED
        assert alter(w, "writable", [("share.auto.offset.reset", SET, "earliest")]) == (0, None)


# ---------------------------------------------------------------------------------------------------- offsets

def offsets(w, group):
    g = w.call(90, 1, {"groups": [{"group_id": group, "topics": None}]})["groups"][0]
    return {(t["topic_name"], p["partition_index"]): (p["start_offset"], p["lag"])
            for t in g["topics"] for p in t["partitions"]}


def alter_offsets(w, group, topics):
    r = w.call(91, 0, {"group_id": group, "topics": [
        {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in parts]}
        for t, parts in topics.items()]})
    return r["error_code"], {(t["topic_name"], p["partition_index"]): p["error_code"]
                             for t in r["responses"] for p in t["partitions"]}


def delete_offsets(w, group, topics):
    r = w.call(92, 0, {"group_id": group, "topics": [{"topic_name": t} for t in topics]})
    return r["error_code"], {t["topic_name"]: t["error_code"] for t in r["responses"]}


def test_alter_and_delete_share_group_offsets(make_broker):
    b = make_broker(**{"share.auto.offset.reset": "earliest"})
    setup_topic(b.port, "t", [(0, [b"a", b"b", b"c"]), (0, [b"d", b"e"])], partitions=2)
    with Wire(b.port) as w:
        # a group nobody joined: its state is made (as Kafka 4.4 does), and deleted
        assert alter_offsets(w, "fresh", {"t": [(0, 1)]}) == (0, {("t", 0): 0})
        assert offsets(w, "fresh")[("t", 0)] == (1, 4)
        assert delete_offsets(w, "fresh", ["t"]) == (0, {"t": 0})
        assert offsets(w, "fresh") == {}
        m = Member(b.port, "g", "t")
        m.join()
        assert acquired(m.fetch(partitions=(0, 1))) == [(0, 4, 1)]
        assert alter_offsets(w, "g", {"t": [(0, 1)]}) == (NON_EMPTY_GROUP, {})
        assert delete_offsets(w, "g", ["t"]) == (NON_EMPTY_GROUP, {})
        assert part(m.acknowledge({0: [(0, 0, (ACCEPT,))]}))["error_code"] == 0
        assert m.heartbeat(-1)["error_code"] == 0
        m.close()
        # 1-4 were acquired (in flight), 0 accepted: from 3 on everything is available again, count 0
        assert alter_offsets(w, "g", {"t": [(0, 3), (5, 0)], "nope": [(0, 0)]}) == (
            0, {("t", 0): 0, ("t", 5): UNKNOWN_TOPIC, ("nope", 0): UNKNOWN_TOPIC})
        assert offsets(w, "g")[("t", 0)] == (3, 2)
        m2 = Member(b.port, "g", "t")
        m2.join()
        assert acquired(m2.fetch()) == [(3, 4, 1)]
        assert part(m2.acknowledge({0: [(3, 4, (ACCEPT,))]}))["error_code"] == 0
        assert m2.heartbeat(-1)["error_code"] == 0
        m2.close()
        assert offsets(w, "g")[("t", 0)] == (5, 0)
        assert delete_offsets(w, "g", ["t", "nope"]) == (0, {"t": 0, "nope": UNKNOWN_TOPIC})
        assert offsets(w, "g") == {}
        # no state: the next member starts at share.auto.offset.reset again, every record at count 1
        m3 = Member(b.port, "g", "t")
        m3.join()
        assert acquired(m3.fetch()) == [(0, 4, 1)]
        m3.close()


def test_alter_offsets_refused_while_a_durable_queue_worker_holds_records(make_broker):
    from kafkalog.client.queue import DurableQueue
    b = make_broker(**{"share.auto.offset.reset": "earliest"})
    q = DurableQueue(b.services.store, name="q", group="g", prefetch=2)
    try:
        q.put_many([b"a", b"b", b"c"])
        m = q.get(timeout=5)
        with Wire(b.port) as w:
            assert alter_offsets(w, "g", {"q": [(0, 2)]}) == (0, {("q", 0): NON_EMPTY_GROUP})
            assert delete_offsets(w, "g", ["q"]) == (0, {"q": NON_EMPTY_GROUP})
            q.ack(m)
    finally:
        q.close()
    with Wire(b.port) as w:
        assert alter_offsets(w, "g", {"q": [(0, 2)]}) == (0, {("q", 0): 0})
        assert offsets(w, "g")[("q", 0)] == (2, 1)


# ---------------------------------------------------------------------------------------------------- isolation

def _transactions(port, topic):
    """plain 0-1 | committed 2-3, COMMIT 4 | aborted 5-7, plain 8, ABORT 9 | plain 10 | open 11 | plain 12."""
    with Wire(port) as w:
        assert w.create_topic(topic, 1)["error_code"] == 0
        assert w.produce(topic, 0, batch([b"p0", b"p1"]))["error_code"] == 0
        r = _init(w, "tx")
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add(w, "tx", pid, epoch, {topic: [0]}) == {(topic, 0): 0}
        assert _produce(w, "tx", topic, 0, _txn_batch([b"c0", b"c1"], pid, epoch, 0))["error_code"] == 0
        assert _end(w, "tx", pid, epoch, True) == 0
        assert _add(w, "tx", pid, epoch, {topic: [0]}) == {(topic, 0): 0}
        assert _produce(w, "tx", topic, 0, _txn_batch([b"a0", b"a1", b"a2"], pid, epoch, 2))["error_code"] == 0
        assert w.produce(topic, 0, batch([b"p2"]))["error_code"] == 0
        assert _end(w, "tx", pid, epoch, False) == 0
        assert w.produce(topic, 0, batch([b"p3"]))["error_code"] == 0
        assert _add(w, "tx", pid, epoch, {topic: [0]}) == {(topic, 0): 0}
        assert _produce(w, "tx", topic, 0, _txn_batch([b"o0"], pid, epoch, 5))["error_code"] == 0
        assert w.produce(topic, 0, batch([b"p4"]))["error_code"] == 0
    return pid, epoch


def test_read_committed_share_group(make_broker):
    b = make_broker(**{"share.auto.offset.reset": "earliest"})
    pid, epoch = _transactions(b.port, "t")
    with Wire(b.port) as w:
        assert alter(w, "rc", [("share.isolation.level", SET, "read_committed")]) == (0, None)
    rc, ru = Member(b.port, "rc", "t"), Member(b.port, "ru", "t")
    rc.join()
    ru.join()
    # up to the last stable offset (11, the open transaction's first), the aborted records (5-7) archived
    assert acquired(rc.fetch()) == [(0, 4, 1), (8, 10, 1)]
    assert acquired(rc.fetch(wait=50)) == []
    assert acquired(ru.fetch()) == [(0, 12, 1)]
    with Wire(b.port) as w:
        assert _end(w, "tx", pid, epoch, True) == 0
    assert acquired(rc.fetch(wait=2000)) == [(11, 13, 1)]
    with Wire(b.port) as w:
        g = w.call(90, 1, {"groups": [{"group_id": "rc", "topics": None}]})["groups"][0]
        assert [(p["start_offset"]) for p in g["topics"][0]["partitions"]] == [0]


# ---------------------------------------------------------------------------------------------------- kill -9

def test_kill9_configs_and_offsets_answered_survive(tmp_path, child_env):
    """kill -9 of ``kafkalog serve`` right after it answered a group config change, an AlterShareGroupOffsets and a
    DeleteShareGroupOffsets: each is there after the restart."""
    data = tmp_path / "data"
    args = ["--data-dir", data, "--listen", "127.0.0.1:0", "--override", "share.auto.offset.reset=earliest"]
    s1 = Serve(args, child_env)
    try:
        setup_topic(s1.port, "t", [(0, [b"%d" % i for i in range(10)])])
        setup_topic(s1.port, "u", [(0, [b"x", b"y"])])
        for topic in ("t", "u"):
            m = Member(s1.port, "g", topic)
            m.join()
            assert acquired(m.fetch())
            assert m.heartbeat(-1)["error_code"] == 0
            m.close()
        with Wire(s1.port) as w:
            assert alter(w, "g", [("share.record.lock.duration.ms", SET, "16000")]) == (0, None)
            assert alter_offsets(w, "g", {"t": [(0, 6)]}) == (0, {("t", 0): 0})
            assert delete_offsets(w, "g", ["u"]) == (0, {"u": 0})
        s1.proc.send_signal(signal.SIGKILL)
        assert s1.proc.wait(30) == -signal.SIGKILL
    finally:
        s1.kill()
    s2 = Serve(args, child_env)
    try:
        with Wire(s2.port) as w:
            assert described(w, "g", ["share.record.lock.duration.ms"]) == {
                "share.record.lock.duration.ms": ("16000", 8)}
            assert offsets(w, "g") == {("t", 0): (6, 4)}
        m = Member(s2.port, "g", "t")
        m.join()
        r = m.fetch()
        assert acquired(r) == [(6, 9, 1)] and r["acquisition_lock_timeout_ms"] == 16000
        m.close()
        u = Member(s2.port, "g", "u")
        u.join()
        assert acquired(u.fetch()) == [(0, 1, 1)]  # deleted: from the earliest again, count 1
        u.close()
    finally:
        s2.kill()
