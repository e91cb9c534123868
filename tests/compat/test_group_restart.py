"""Groups across a broker kill -9, differential: a classic group with a static member (cooperative-sticky, a commit),
a KIP-848 group with a static member and a dynamic range group are made on Apache Kafka 4.4 and on kafkalog, each
broker is killed (SIGKILL) and started again on the same log dir, and what each answers after its coordinator loaded
the groups is compared field by field: DescribeGroups, ConsumerGroupDescribe, ListGroups, OffsetFetch,
``kafka-consumer-groups --describe --members --verbose``, the static member's rejoin (same generation,
SkipAssignment, its old assignment, the old member id fenced), the range member's heartbeat at its generation and
the KIP-848 member's at its epoch.

Slow (a pair of brokers of its own, restarted: about 20-30 s on 2 cores, most of it Kafka's two starts).
"""

from __future__ import annotations

import time

import pytest

from kafkalog.broker import protocol
from tests.broker.wire import Wire
from tests.compat.lab import KafkaBroker, KafkalogServer, Target
from tests.compat.test_consumer_groups import _assigned, _seen_by_coordinator, hb, join
from tests.compat.test_group_protocols import Names, _coordinator_ready, _join, _port, _sync
from tests.compat.test_kafka_tools import table

pytestmark = pytest.mark.slow

SESSION_MS = 45000
LOADING = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    started = []
    try:
        for server in (KafkaBroker(), KafkalogServer()):
            started.append(server)
            server.start(tmp_path_factory.mktemp(server.name))
        yield {s.name: s for s in started}
    finally:
        for s in started:
            s.stop()


def kill9_and_start_again(server) -> None:
    """SIGKILL, then the same broker on the same log dir (Kafka: its ports and properties; kafkalog: a new port)."""
    proc = server.proc
    proc.kill()
    proc.wait(30)
    if isinstance(server, KafkaBroker):
        server.spawn()
        server.wait_ready(120)
    else:
        server.proc = None
        server.start(server.workdir)


def _retry(fn, code_of=lambda r: r["error_code"]):
    """``fn()`` again while the coordinator is loading (bounded: 100 times)."""
    for _ in range(100):
        r = fn()
        if code_of(r) not in LOADING:
            return r
        time.sleep(0.2)
    return r


def _join9(w, group, member_id, instance, topic):
    return w.call(11, 9, {"group_id": group, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": SESSION_MS,
                          "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
                          "reason": None, "protocols": [{"name": "cooperative-sticky",
                                                         "metadata": protocol.encode_subscription([topic])}]})


def before(target, classic, consumer, topic, names, state) -> None:
    with Wire(_port(target), client_id="restart") as w:
        _coordinator_ready(w, classic)
        _coordinator_ready(w, consumer)
        r = w.call(19, 7, {"topics": [{"name": topic, "num_partitions": 2, "replication_factor": 1,
                                       "assignments": [], "configs": []}], "timeout_ms": 30000,
                           "validate_only": False})
        assert r["topics"][0]["error_code"] == 0, r
        j = _retry(lambda: _join9(w, classic, "", "inst-1", topic))
        assert j["error_code"] == 0, j
        names.name(j["member_id"], "S1")
        state["s1"], state["generation"] = j["member_id"], j["generation_id"]
        s = _sync(w, 5, classic, j["generation_id"], j["member_id"],
                  [(j["member_id"], protocol.encode_assignment({topic: [0, 1]}))], instance_id="inst-1",
                  protocol_type="consumer", protocol_name="cooperative-sticky")
        assert s["error_code"] == 0, s
        c = w.call(8, 8, {"group_id": classic, "generation_id_or_member_epoch": j["generation_id"],
                          "member_id": j["member_id"], "group_instance_id": "inst-1", "topics": [
                              {"name": topic, "partitions": [{"partition_index": 1, "committed_offset": 3,
                                                              "committed_leader_epoch": -1,
                                                              "committed_metadata": "m"}]}]})
        assert c["topics"][0]["partitions"][0]["error_code"] == 0, c
        # a dynamic range member (kafkalog's group model), its own leader
        ranged = classic + "-r"
        _coordinator_ready(w, ranged)
        sub = [("range", protocol.encode_subscription([topic]))]
        j = _retry(lambda: _join(w, 9, ranged, "", "consumer", sub))
        j = _join(w, 9, ranged, j["member_id"], "consumer", sub)
        assert j["error_code"] == 0, j
        names.name(j["member_id"], "R1")
        state["r1"], state["r_generation"] = j["member_id"], j["generation_id"]
        s = _sync(w, 5, ranged, j["generation_id"], j["member_id"],
                  [(j["member_id"], protocol.encode_assignment({topic: [0, 1]}))], protocol_type="consumer",
                  protocol_name="range")
        assert s["error_code"] == 0, s
        _seen_by_coordinator(w, consumer, topic)
        a = "kip848-member-" + "0" * 12
        names.name(a, "A")
        r = join(w, consumer, a, [topic], instance="k-1")
        for _ in range(50):
            if _assigned(r) and r["member_epoch"] > 0:
                break
            time.sleep(0.1)
            r = hb(w, consumer, a, r["member_epoch"], owned=[], instance="k-1")
        owned = _assigned(r)
        assert owned, r
        r = hb(w, consumer, a, r["member_epoch"], owned=owned, instance="k-1")
        assert r["error_code"] == 0, r
        state["a"], state["epoch"], state["owned"] = a, r["member_epoch"], owned


def after(target, classic, consumer, topic, names, state) -> list:
    out = []
    with Wire(_port(target), client_id="restart") as w:
        d = _retry(lambda: w.call(15, 5, {"groups": [classic], "include_authorized_operations": False})["groups"][0])
        d.pop("authorized_operations", None)
        out.append(("DescribeGroups after the restart", names(d)))
        cgd = _retry(lambda: w.call(69, 1, {"group_ids": [consumer], "include_authorized_operations": False})[
            "groups"][0])
        for m in cgd["members"]:
            m.pop("client_host", None)
            for k in ("assignment", "target_assignment"):
                for tp in m[k]["topic_partitions"]:
                    tp.pop("topic_id")
        out.append(("ConsumerGroupDescribe after the restart", names(cgd)))
        listed = w.call(16, 5, {"states_filter": [], "types_filter": []})["groups"]
        out.append(("ListGroups", sorted((g["group_id"], g["group_state"], g["group_type"]) for g in listed
                                         if g["group_id"] in (classic, consumer))))
        f = w.call(9, 7, {"group_id": classic, "topics": None, "require_stable": False})
        out.append(("OffsetFetch", names(f)))
        ranged = classic + "-r"
        r = _retry(lambda: w.call(12, 4, {"group_id": ranged, "generation_id": state["r_generation"],
                                          "member_id": state["r1"], "group_instance_id": None}))
        out.append(("R1 heartbeats on", r["error_code"]))
        d = w.call(15, 5, {"groups": [ranged], "include_authorized_operations": False})["groups"][0]
        d.pop("authorized_operations", None)
        out.append(("DescribeGroups of the range group", names(d)))
        r = hb(w, consumer, state["a"], state["epoch"], owned=state["owned"], instance="k-1")
        out.append(("A heartbeats at its epoch", names({k: v for k, v in r.items() if k != "member_id"})))
        j = _join9(w, classic, "", "inst-1", topic)
        names.name(j["member_id"], "S1'")
        out.append(("S1 restarts", names(j)))
        s = _sync(w, 5, classic, j["generation_id"], j["member_id"], instance_id="inst-1", protocol_type="consumer",
                  protocol_name="cooperative-sticky")
        out.append(("S1' syncs", names(s)))
        r = w.call(12, 4, {"group_id": classic, "generation_id": j["generation_id"], "member_id": state["s1"],
                           "group_instance_id": "inst-1"})
        out.append(("the old incarnation heartbeats", r["error_code"]))
        out.append(("generation kept", j["generation_id"] == state["generation"]))
    r = target.tool("kafka-consumer-groups", "--bootstrap-server", target.bootstrap, "--describe", "--members",
                    "--verbose", "--group", classic)
    rows = table(r.stdout)
    for row in rows:
        row["CONSUMER-ID"] = names(row["CONSUMER-ID"])
    out.append(("kafka-consumer-groups --describe --members --verbose", rows))
    return out


def test_groups_after_kill9_as_kafka(pair, topic_name, compare):
    classic, consumer, topic = topic_name("classic"), topic_name("kip848"), topic_name("t")
    answers = {}
    for name, server in pair.items():
        target = Target(name, server.bootstrap, server)
        names, state = Names(), {}
        before(target, classic, consumer, topic, names, state)
        kill9_and_start_again(server)
        target = Target(name, server.bootstrap, server)
        answers[name] = after(target, classic, consumer, topic, names, state)
    compare(answers["kafka"], answers["kafkalog"], what="groups after a kill -9 and a restart")
    assert dict(answers["kafkalog"])["generation kept"] is True
