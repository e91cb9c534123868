"""A consumer group of range members rebalancing when many join at once, raw frames against Apache Kafka 4.4 and
kafkalog, the answers compared field by field (issue 24: the joins that arrive together are one join phase and one
generation, as Kafka's PreparingRebalance holds them, instead of a generation and a write of the group each).

The scenario is ordered so that both brokers must answer the same: a member alone is Stable at generation 1; seven
more get their KIP-394 member ids (MEMBER_ID_REQUIRED); six of them join with their ids, all sent before any answer
is read; the group is then PreparingRebalance (DescribeGroups lists the members), the first member's Heartbeat and
SyncGroup are answered REBALANCE_IN_PROGRESS, its commit at generation 1 is taken; it joins again and the phase still
waits for the seventh member id handed out (Kafka's hasAllMembersJoined); the seventh joins and all eight are
answered generation 2 with one leader, the member that led generation 1. Then SyncGroup and Heartbeat at generation 2,
DescribeGroups of the Stable group, and a member's restart (LeaveGroup, a new member, the others joining again):
generation 3 for all. Member ids are named by role, and assignments are compared as "what the member
got is what the leader planned for it" (the two brokers' random ids sort differently).

Cost: a few dozen round trips per broker, no client library (the lab's session brokers).
"""

from __future__ import annotations

import time

import pytest

from kafkalog.broker import protocol
from tests.broker.wire import Wire

from .test_group_protocols import Names, _coordinator_ready, _heartbeat, _join, _port, _sync

N = 8
SESSION_MS = 10000
POLLS = 200  # a failure guard on the loop that waits for the broker to have taken the pipelined joins
WAITING_DESCRIBES = 10


def _join_request(group: str, member_id: str, sub: bytes, assignor: str) -> dict:
    return {"group_id": group, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": SESSION_MS,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": assignor, "metadata": sub}]}


def _answer(w: Wire, key: int, version: int) -> dict:
    return protocol.decode_response(key, version, w.recv_frame())[1]


def _describe(w: Wire, group: str, n: Names, plan: dict | None = None) -> dict:
    r = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
    r.pop("authorized_operations", None)
    members = []
    for m in r["members"]:
        m = dict(m)
        m.pop("client_host", None)
        got = bytes(m.pop("member_assignment"))
        m["assignment"] = (protocol.decode_assignment(got)["assigned_partitions"] == plan.get(m["member_id"])
                           if plan is not None and got else got)
        members.append(n(m))
    r["members"] = sorted(members, key=lambda m: m["member_id"])
    return n(r)


def _range_plan(members: list[str], topic: str, partitions: int) -> dict:
    """The leader's range assignment (members sorted by id, as kafkalog's group model assigns too)."""
    per, extra = divmod(partitions, len(members))
    out, start = {}, 0
    for k, m in enumerate(sorted(members)):
        count = per + (1 if k < extra else 0)
        out[m] = {topic: list(range(start, start + count))} if count else {}
        start += count
    return out


def formation_scenario(target, topic: str, group: str, assignor: str) -> list:
    n = Names()
    out = []
    ws = [Wire(_port(target), client_id=f"member-{i}") for i in range(N)]
    try:
        a = ws[0]
        assert a.create_topic(topic, 16)["error_code"] == 0
        _coordinator_ready(a, group)
        sub = protocol.encode_subscription([topic])
        r = _join(a, 9, group, "", "consumer", [(assignor, sub)])
        out.append(("A: join, no member id", n(dict(r, member_id=n.name(r["member_id"], "A")))))
        ida = r["member_id"]
        r = _join(a, 9, group, ida, "consumer", [(assignor, sub)])
        out.append(("A: join, alone", n(r)))
        gen = r["generation_id"]
        plan = _range_plan([ida], topic, 16)
        r = _sync(a, 5, group, gen, ida, [(ida, protocol.encode_assignment(plan[ida]))], protocol_type="consumer",
                  protocol_name=assignor)
        out.append(("A: sync", n(dict(r, assignment=protocol.decode_assignment(r["assignment"])))))
        out.append(("A: heartbeat", n(_heartbeat(a, 4, group, gen, ida))))

        ids = [ida]
        for w in ws[1:]:  # seven member ids handed out (pending members: no rebalance yet)
            w.send(11, 9, _join_request(group, "", sub, assignor))
        for i, w in enumerate(ws[1:], 1):
            r = _answer(w, 11, 9)
            ids.append(n.name(r["member_id"], chr(ord("A") + i)))
            out.append((f"{chr(ord('A') + i)}: join, no member id", n(r)))
        out.append(("A: heartbeat, member ids handed out", n(_heartbeat(a, 4, group, gen, ida))))

        for i, w in enumerate(ws[1:-1], 1):  # six join with their ids, all sent before any answer is read
            w.send(11, 9, _join_request(group, ids[i], sub, assignor))
        for _ in range(POLLS):  # until the broker took the six (Kafka's DescribeGroups lists them at once)
            d = _describe(a, group, n)
            if d["group_state"] == "PreparingRebalance" and len(d["members"]) == N - 1:
                break
            time.sleep(0.05)
        out.append(("describe, joins waiting", d))
        out.append(("A: heartbeat while preparing", n(_heartbeat(a, 4, group, gen, ida))))
        out.append(("A: sync while preparing", n(_sync(a, 5, group, gen, ida, protocol_type="consumer",
                                                       protocol_name=assignor))))
        r = a.call(8, 9, {"group_id": group, "generation_id_or_member_epoch": gen, "member_id": ida,
                          "group_instance_id": None, "retention_time_ms": -1, "topics": [
                              {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                              "committed_leader_epoch": -1,
                                                              "committed_metadata": ""}]}]})
        out.append(("A: commit on revoke while preparing", n(r)))
        a.send(11, 9, _join_request(group, ida, sub, assignor))  # every member joined, one member id still to come
        for _ in range(WAITING_DESCRIBES):  # the phase goes on waiting for it (a broker that did not would be
            d = _describe(ws[-1], group, n)  # CompletingRebalance within a few of these)
            time.sleep(0.02)
        out.append(("describe, the last member id still to come", d))
        ws[-1].send(11, 9, _join_request(group, ids[-1], sub, assignor))
        answers = [_answer(w, 11, 9) for w in ws]
        gen = answers[0]["generation_id"]
        for i, r in enumerate(answers):
            r = dict(r)
            r["members"] = sorted(n(r["members"]), key=lambda m: m["member_id"])
            out.append((f"{chr(ord('A') + i)}: join answered", n(r)))
        leader = answers[0]["leader"]
        leader_answer = next(r for r in answers if r["member_id"] == leader)
        plan = _range_plan([m["member_id"] for m in leader_answer["members"]], topic, 16)
        assignments = [(m, protocol.encode_assignment(p)) for m, p in plan.items()]
        for w, r in zip(ws, answers):
            me = r["member_id"]
            w.send(14, 5, {"group_id": group, "generation_id": gen, "member_id": me, "group_instance_id": None,
                           "protocol_type": "consumer", "protocol_name": assignor,
                           "assignments": [{"member_id": m, "assignment": x} for m, x in assignments]
                           if me == leader else []})
        for w, r in zip(ws, answers):
            s = _answer(w, 14, 5)
            got = protocol.decode_assignment(s["assignment"])["assigned_partitions"] if s["assignment"] else None
            out.append((f"{n(r['member_id'])}: sync", n(dict(s, assignment=got == plan.get(r["member_id"])))))
        for w, r in zip(ws, answers):
            out.append((f"{n(r['member_id'])}: heartbeat", n(_heartbeat(w, 4, group, gen, r["member_id"]))))
        out.append(("describe, stable", _describe(a, group, n, plan)))

        # a member restarts (it leaves, a new one comes): one rebalance, one generation
        r = ws[1].call(13, 5, {"group_id": group, "members": [{"member_id": answers[1]["member_id"],
                                                                "group_instance_id": None, "reason": "restart"}]})
        out.append(("B: leave", n(r)))
        out.append(("A: heartbeat after a leave", n(_heartbeat(a, 4, group, gen, ida))))
        ws[1].close()
        ws[1] = Wire(_port(target), client_id="member-1")
        r = _join(ws[1], 9, group, "", "consumer", [(assignor, sub)])
        out.append(("B': join, no member id", n(dict(r, member_id=n.name(r["member_id"], "B'")))))
        ws[1].send(11, 9, _join_request(group, r["member_id"], sub, assignor))
        for i, w in enumerate(ws):
            if i != 1:
                w.send(11, 9, _join_request(group, answers[i]["member_id"], sub, assignor))
        for w in ws:
            r = _answer(w, 11, 9)
            r["members"] = sorted(n(r["members"]), key=lambda m: m["member_id"])
            out.append((f"{n(r['member_id'])}: join answered after the restart", n(r)))
    finally:
        for w in ws:
            w.close()
    return out


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_joins_that_arrive_together_are_one_generation_as_on_kafka(targets, topic_name, compare, assignor):
    """range: kafkalog's group model (state.json, shared with embedded consumers); cooperative-sticky: its classic
    coordinator (the leader's assignments passed through)."""
    topic, group = topic_name("formation"), topic_name("g")
    answers = {name: formation_scenario(t, topic, group, assignor) for name, t in targets.items()}
    compare(answers["kafka"], answers["kafkalog"], what=f"eight {assignor} members rebalancing at once")
