"""The classic group coordinator for every protocol type and KIP-345 static membership, differential: the same raw
JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit / DescribeGroups exchange (at Kafka 4.4's newest
versions and at older ones) against Apache Kafka 4.4 and kafkalog, the answers compared field by field.

Member ids are the brokers' own (client id + a UUID): the transcripts name them by role ("A", "S1", "S1'") so the
comparison sees who is who, not the random part. Bounded by the steps of the scenario; the brokers answer each
request at once (one member per group per join phase, group.initial.rebalance.delay.ms 0 in the lab).
"""

from __future__ import annotations

import time

from kafkalog.broker import protocol
from tests.broker.wire import Wire

SESSION_MS = 10000


def _port(target) -> int:
    return int(target.bootstrap.rsplit(":", 1)[1])


def _coordinator_ready(w: Wire, group: str) -> None:
    """FindCoordinator until the broker answers 0 (Apache Kafka creates __consumer_offsets on first use)."""
    for _ in range(100):
        r = w.call(10, 2, {"key": group, "key_type": 0})
        if r["error_code"] == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"FindCoordinator for {group} never answered 0: {r}")


class Names:
    """Member ids to role names, so two brokers' random ids compare."""

    def __init__(self):
        self.roles: dict[str, str] = {"": ""}

    def name(self, member_id: str, role: str) -> str:
        if member_id:
            self.roles[member_id] = role
        return member_id

    def __call__(self, value):
        if isinstance(value, str):
            return self.roles.get(value, "<unnamed member>" if "-" in value and len(value) > 30 else value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items() if k not in ("throttle_time_ms", "correlation_id")}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


def _join(w, version, group, member_id, protocol_type, protocols, instance_id=None):
    """JoinGroup, again while Apache Kafka's coordinator is still loading the group's __consumer_offsets partition
    (COORDINATOR_LOAD_IN_PROGRESS 14, or NOT_COORDINATOR 16 before the partition's coordinator is up; at most 100
    times): its first answers after __consumer_offsets is created."""
    for _ in range(100):
        r = _join_once(w, version, group, member_id, protocol_type, protocols, instance_id)
        if r["error_code"] not in (14, 16):
            return r
        time.sleep(0.2)
    return r


def _join_once(w, version, group, member_id, protocol_type, protocols, instance_id=None):
    return w.call(11, version, {"group_id": group, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": SESSION_MS,
                                "member_id": member_id, "group_instance_id": instance_id,
                                "protocol_type": protocol_type, "reason": None,
                                "protocols": [{"name": n, "metadata": md} for n, md in protocols]})


def _sync(w, version, group, generation, member_id, assignments=(), instance_id=None, protocol_type=None,
          protocol_name=None):
    return w.call(14, version, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                "group_instance_id": instance_id, "protocol_type": protocol_type,
                                "protocol_name": protocol_name,
                                "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]})


def _heartbeat(w, version, group, generation, member_id, instance_id=None):
    return w.call(12, version, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                "group_instance_id": instance_id})


def _describe(w, group):
    r = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
    r.pop("authorized_operations", None)
    return r


def connect_scenario(target, group: str) -> list:
    """A group of Kafka Connect's kind ("connect", protocols sessioned/compatible, opaque metadata), as a Connect
    worker drives it, plus the refusals: another kind joining, a SyncGroup naming another protocol, no kind at all."""
    n = Names()
    out = []
    with Wire(_port(target), client_id="worker") as a, Wire(_port(target), client_id="other") as b:
        _coordinator_ready(a, group)
        protocols = [("sessioned", b"worker-a:sessioned"), ("compatible", b"worker-a:compatible")]
        for version in (9, 5):  # the newest and the version Connect's 4.4 client sends first to an older broker
            g = f"{group}-v{version}"
            r = _join(a, version, g, "", "connect", protocols)
            out.append(("join, no member id", version, n(dict(r, member_id=n.name(r["member_id"], f"A{version}")))))
            r = _join(a, version, g, r["member_id"], "connect", protocols)
            out.append(("join", version, n(r)))
            gen = r["generation_id"]
            me = r["member_id"]
            sync_v = 5 if version == 9 else 3
            out.append(("sync, leader", sync_v, n(_sync(a, sync_v, g, gen, me, [(me, b"assignment-a")],
                                                        protocol_type="connect" if sync_v >= 5 else None,
                                                        protocol_name="sessioned" if sync_v >= 5 else None))))
            out.append(("heartbeat", 4, n(_heartbeat(a, 4, g, gen, me))))
            out.append(("describe", 5, n(_describe(a, g))))
            r = _join(b, version, g, "", "consumer", [("range", protocol.encode_subscription(["t"]))])
            out.append(("a consumer joins a connect group", version, n(dict(r, member_id=n.name(r["member_id"], "B")))))
            if sync_v >= 5:
                out.append(("sync naming another protocol", 5, n(_sync(a, 5, g, gen, me, protocol_type="connect",
                                                                      protocol_name="compatible"))))
                out.append(("sync naming another kind", 5, n(_sync(a, 5, g, gen, me, protocol_type="consumer",
                                                                  protocol_name="sessioned"))))
            r = a.call(13, 0 if version == 5 else 5, {"group_id": g, "member_id": me, "members": [
                {"member_id": me, "group_instance_id": None, "reason": "test"}]})
            out.append(("leave", version, n(r)))
            out.append(("describe after leave", 5, n(_describe(a, g))))
        r = _join(a, 9, f"{group}-nokind", "", "", protocols)
        out.append(("join without a protocol type", 9, n(r)))
    return out


def static_scenario(target, group: str) -> list:
    """KIP-345: a static member joins at once (no MEMBER_ID_REQUIRED round trip), restarts under a new member id and
    keeps its assignment and the generation (SkipAssignment for a leader at v9), fences its old incarnation
    (FENCED_INSTANCE_ID on heartbeat, commit, leave), and leaves by instance id."""
    n = Names()
    out = []
    sub = protocol.encode_subscription(["static-topic"])
    assignment = protocol.encode_assignment({"static-topic": [0]})
    with Wire(_port(target), client_id="static") as w:
        _coordinator_ready(w, group)
        r = _join(w, 9, group, "", "consumer", [("range", sub)], instance_id="i-1")
        first = n.name(r["member_id"], "S1")
        out.append(("static join", 9, n(r)))
        gen = r["generation_id"]
        out.append(("sync", 5, n(_sync(w, 5, group, gen, first, [(first, assignment)], instance_id="i-1",
                                       protocol_type="consumer", protocol_name="range"))))
        r = _join(w, 9, group, "", "consumer", [("range", sub)], instance_id="i-1")
        second = n.name(r["member_id"], "S1'")
        out.append(("static restart", 9, n(r)))
        out.append(("old incarnation heartbeat", 4, n(_heartbeat(w, 4, group, gen, first, "i-1"))))
        out.append(("old id without instance id", 4, n(_heartbeat(w, 4, group, gen, first))))
        out.append(("new incarnation sync", 5, n(_sync(w, 5, group, gen, second, instance_id="i-1",
                                                       protocol_type="consumer", protocol_name="range"))))
        out.append(("new incarnation heartbeat", 4, n(_heartbeat(w, 4, group, gen, second, "i-1"))))
        out.append(("describe", 5, n(_describe(w, group))))
        commit = {"group_id": group, "generation_id_or_member_epoch": gen, "member_id": first,
                  "group_instance_id": "i-1", "retention_time_ms": -1, "topics": []}
        out.append(("old incarnation commits", 8, n(w.call(8, 8, commit))))
        out.append(("restart at v5", 5, n(dict(_join(w, 5, group, "", "consumer", [("range", sub)], "i-1"),
                                               member_id="<S1'' at v5>", leader="<S1''>"))))
        leave = {"group_id": group, "members": [
            {"member_id": "", "group_instance_id": "i-unknown", "reason": None},
            {"member_id": first, "group_instance_id": "i-1", "reason": None},
            {"member_id": "", "group_instance_id": "i-1", "reason": "removed by a test"}]}
        out.append(("leave by instance ids", 5, n(w.call(13, 5, leave))))
        out.append(("describe after leave", 5, n(_describe(w, group))))
    return out


def test_a_connect_group_as_kafka_runs_it(targets, topic_name, compare):
    group = topic_name("connect")
    answers = {name: connect_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="a group of protocol type connect")


def test_static_membership_as_kafka_runs_it(targets, topic_name, compare):
    group = topic_name("static")
    answers = {name: static_scenario(t, group) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what="KIP-345 static membership")


def _static_consumer(bootstrap: str, group: str, instance: str, assigned: list):
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                  "session.timeout.ms": 10000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "broker.address.family": "v4"})
    return c


def _poll_until(consumers, done, polls: int = 150) -> None:
    for _ in range(polls):
        for c in consumers:
            c.poll(0.1)
        if done():
            return
    raise AssertionError("the group did not reach the expected assignment")


def restart_scenario(target, topic: str, group: str) -> dict:
    """Two static confluent-kafka (librdkafka) consumers share 4 partitions; one closes (a static member sends no
    LeaveGroup) and a new process-like incarnation with the same instance id takes its place: it gets the same
    partitions and the other member sees no rebalance."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": target.bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    events: dict[str, list] = {"a": [], "b": [], "b2": []}

    def subscribe(c, name):
        c.subscribe([topic], on_assign=lambda _c, ps: events[name].append(sorted(p.partition for p in ps)),
                    on_revoke=lambda _c, ps: events[name].append(("revoked", sorted(p.partition for p in ps))))
        return c

    a = subscribe(_static_consumer(target.bootstrap, group, "a", events["a"]), "a")
    b = subscribe(_static_consumer(target.bootstrap, group, "b", events["b"]), "b")
    try:
        _poll_until([a, b], lambda: sum(len(x.assignment()) for x in (a, b)) == 4
                    and len(a.assignment()) == 2)
        before_a = sorted(p.partition for p in a.assignment())
        before_b = sorted(p.partition for p in b.assignment())
        assigns_a = len(events["a"])
        b.close()
        b = None
        b2 = subscribe(_static_consumer(target.bootstrap, group, "b", events["b2"]), "b2")
        try:
            _poll_until([a, b2], lambda: len(b2.assignment()) == 2)
            for _ in range(20):  # a few heartbeats of a: a rebalance would reach it as a revoke and an assign
                a.poll(0.1)
            return {"a": before_a, "b": before_b, "b restarted": sorted(p.partition for p in b2.assignment()),
                    "a's callbacks after the restart": events["a"][assigns_a:]}
        finally:
            b2.close()
    finally:
        a.close()
        if b is not None:
            b.close()


def test_a_restarted_static_member_keeps_its_partitions_without_a_rebalance(targets, topic_name, compare):
    answers = {name: restart_scenario(t, topic_name("t"), topic_name("g")) for name, t in targets.items()}
    assert answers["kafka"]["b restarted"] == answers["kafka"]["b"], answers
    compare(answers["kafka"], answers["kafkalog"], what="a static member restarted (librdkafka)")
