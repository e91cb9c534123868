"""The group coordinator's state survives ``kafkalog serve`` being killed (SIGKILL, between requests and at the named
failpoints around the write of a group's records): the groups come back from ``__consumer_offsets`` as Kafka loads
them. A classic group is Stable at its last completed generation with each member's assignment (a static member's
restart keeps its assignment without a rebalance; a dynamic member heartbeats on), members that never return are
removed by their session timeout counted from the load; a KIP-848 group keeps its epochs and assignments (a member
heartbeating at its epoch continues at it). No committed offset goes back and no group comes back at a generation
lower than one a member saw acknowledged (a SyncGroup answered).

Each test starts ``kafkalog serve`` two or three times (about a second each on two cores) and is bounded by the
steps of its scenario; polls are bounded by counts. The module costs about 40 s of the default suite on 2 cores
(each test 1.5-4.5 s).
"""

from __future__ import annotations

import time
import uuid

import pytest

from kafkalog import LogStore
from kafkalog.broker import protocol
from kafkalog.storage import groupformat as gf

from .conftest import Serve, free_port
from .wire import Wire, batch

pytestmark = pytest.mark.usefixtures("deadline")

JOIN, SYNC, HEARTBEAT, LEAVE, DESCRIBE, COMMIT, FETCH, HB848, DESCRIBE848 = 11, 14, 12, 13, 15, 8, 9, 68, 69
POLLS = 100  # bound of every polling loop (0.05 s each)


@pytest.fixture
def brokers(child_env):
    """brokers(data, failpoint=None, port=0, overrides=()) -> a running ``kafkalog serve`` on ``data`` (killed at
    the end of the test; ``overrides``: more "key=value" broker configs)."""
    started = []

    def _start(data, failpoint=None, port=0, overrides=()):
        env = {k: v for k, v in child_env.items() if k != "KAFKALOG_FAILPOINTS"}
        if failpoint:
            env["KAFKALOG_FAILPOINTS"] = f"{failpoint}=kill"
        s = Serve(["--data-dir", data, "--listen", f"127.0.0.1:{port}",
                   "--override", "group.initial.rebalance.delay.ms=300",
                   "--override", "group.min.session.timeout.ms=500",
                   *[a for o in overrides for a in ("--override", o)]], env)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.kill()


def _join_body(group, instance, member_id="", session_ms=30000, topics=("t",)):
    return {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": 10000,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "cooperative-sticky", "metadata": protocol.encode_subscription(list(topics))}],
            "reason": None}


def join_all(conns: dict, group: str, session_ms: int = 30000, member_ids: dict | None = None) -> dict:
    """JoinGroup v9 from each static member (instance id -> Wire) at once: the answers by instance id."""
    corr = {}
    for inst, w in conns.items():
        corr[inst] = w.send(JOIN, 9, _join_body(group, inst, (member_ids or {}).get(inst, ""), session_ms))
    out = {}
    for inst, w in conns.items():
        got_corr, out[inst] = protocol.decode_response(JOIN, 9, w.recv_frame())
        assert got_corr == corr[inst]
    return out


def sync_all(conns: dict, group: str, joined: dict, assignments: dict) -> dict:
    """SyncGroup v5 from each member (the leader sends ``assignments``, instance id -> bytes)."""
    ids = {inst: r["member_id"] for inst, r in joined.items()}
    corr = {}
    for inst, w in conns.items():
        r = joined[inst]
        leader = r["leader"] == r["member_id"]
        corr[inst] = w.send(SYNC, 5, {
            "group_id": group, "generation_id": r["generation_id"], "member_id": r["member_id"],
            "group_instance_id": inst, "protocol_type": "consumer", "protocol_name": "cooperative-sticky",
            "assignments": [{"member_id": ids[i], "assignment": a} for i, a in assignments.items()] if leader else []})
    out = {}
    for inst, w in conns.items():
        got_corr, out[inst] = protocol.decode_response(SYNC, 5, w.recv_frame())
        assert got_corr == corr[inst]
    return out


def describe(w, group) -> dict:
    return w.call(DESCRIBE, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]


def heartbeat(w, group, member_id, generation, instance) -> int:
    return w.call(HEARTBEAT, 4, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                 "group_instance_id": instance})["error_code"]


def commit(w, group, member_id, generation, instance, offsets: dict) -> list:
    r = w.call(COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                           "group_instance_id": instance, "topics": [
                               {"name": "t", "partitions": [{"partition_index": p, "committed_offset": o,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}
                                                            for p, o in offsets.items()]}]})
    return [p["error_code"] for t in r["topics"] for p in t["partitions"]]


def fetched(w, group) -> dict:
    r = w.call(FETCH, 7, {"group_id": group, "topics": None, "require_stable": False})
    return {p["partition_index"]: p["committed_offset"] for t in r["topics"] for p in t["partitions"]}


def _assignment(parts) -> bytes:
    return protocol.encode_assignment({"t": list(parts)})


def _stable_pair(b, group, session_ms=30000):
    """Two static members i1, i2 in a Stable generation, each with two partitions of t; (conns, joined, synced)."""
    with Wire(b.port) as w:
        assert w.create_topic("t", 4)["error_code"] in (0, 36)
    conns = {"i1": Wire(b.port, client_id="c1"), "i2": Wire(b.port, client_id="c2")}
    joined = join_all(conns, group, session_ms)
    assert [r["error_code"] for r in joined.values()] == [0, 0], joined
    assert len({r["generation_id"] for r in joined.values()}) == 1
    synced = sync_all(conns, group, joined, {"i1": _assignment([0, 1]), "i2": _assignment([2, 3])})
    assert [r["error_code"] for r in synced.values()] == [0, 0], synced
    return conns, joined, synced


def _close(conns):
    for w in conns.values():
        w.close()


def test_classic_static_group_comes_back_after_kill9_and_a_returning_member_keeps_its_assignment(brokers, tmp_path):
    data = tmp_path / "data"
    b1 = brokers(data)
    conns, joined, synced = _stable_pair(b1, "sg")
    gen = joined["i1"]["generation_id"]
    ids = {i: r["member_id"] for i, r in joined.items()}
    assert commit(conns["i1"], "sg", ids["i1"], gen, "i1", {0: 11, 1: 12}) == [0, 0]
    assert commit(conns["i2"], "sg", ids["i2"], gen, "i2", {2: 13, 3: 14}) == [0, 0]
    before = describe(conns["i1"], "sg")
    assert before["group_state"] == "Stable" and len(before["members"]) == 2
    _close(conns)
    b1.kill()

    b2 = brokers(data)
    with Wire(b2.port) as w:
        after = describe(w, "sg")
        assert after == before  # state, protocol, every member's ids, client id and host, metadata, assignment
        assert fetched(w, "sg") == {0: 11, 1: 12, 2: 13, 3: 14}
    # i2 was never gone for its client: it heartbeats on at its member id and generation
    with Wire(b2.port, client_id="c2") as w2:
        assert heartbeat(w2, "sg", ids["i2"], gen, "i2") == 0
    # i1 restarts (an empty member id, its instance id): its old assignment, no rebalance
    conns = {"i1": Wire(b2.port, client_id="c1")}
    again = join_all(conns, "sg")["i1"]
    assert again["error_code"] == 0 and again["generation_id"] == gen
    assert again["member_id"] != ids["i1"]
    if again["leader"] == again["member_id"]:
        assert again["skip_assignment"] is True  # v9: the leader must not assign again
    r = conns["i1"].call(SYNC, 5, {"group_id": "sg", "generation_id": gen, "member_id": again["member_id"],
                                   "group_instance_id": "i1", "protocol_type": "consumer",
                                   "protocol_name": "cooperative-sticky", "assignments": []})
    assert r["error_code"] == 0 and r["assignment"] == _assignment([0, 1])
    # the old member id is fenced; the replacement was stored before the JoinGroup was answered
    assert heartbeat(conns["i1"], "sg", ids["i1"], gen, "i1") == 82
    _close(conns)
    b2.kill()

    b3 = brokers(data)
    with Wire(b3.port) as w:
        d = describe(w, "sg")
        assert d["group_state"] == "Stable"
        assert {m["group_instance_id"]: m["member_id"] for m in d["members"]} == {"i1": again["member_id"],
                                                                                  "i2": ids["i2"]}
        assert heartbeat(w, "sg", again["member_id"], gen, "i1") == 0


def test_classic_members_that_never_return_expire_by_their_session_timeout_after_load(brokers, tmp_path):
    data = tmp_path / "data"
    b1 = brokers(data)
    conns, joined, _ = _stable_pair(b1, "gone", session_ms=1500)
    gen = joined["i1"]["generation_id"]
    # the members keep themselves alive until the kill
    for inst, r in joined.items():
        assert heartbeat(conns[inst], "gone", r["member_id"], gen, inst) == 0
    _close(conns)
    b1.kill()
    b2 = brokers(data)
    with Wire(b2.port) as w:
        assert describe(w, "gone")["group_state"] == "Stable"  # loaded: the timers start now
        states = []
        for _ in range(POLLS):
            states.append(describe(w, "gone")["group_state"])
            if states[-1] == "Empty":
                break
            time.sleep(0.05)
        assert states[-1] == "Empty", states
    b2.kill()
    # Empty was stored, with a generation past the last one
    with LogStore(data, read_only=True) as store:
        rec = gf.decode_group_metadata_value(store.offsets.group_metadata("gone"))
    assert rec.members == [] and rec.generation > gen and rec.protocol is None


def test_kill9_mid_rebalance_comes_back_at_the_last_completed_generation(brokers, tmp_path):
    data = tmp_path / "data"
    b1 = brokers(data)
    conns, joined, _ = _stable_pair(b1, "mid")
    gen = joined["i1"]["generation_id"]
    # a third member joins: the others are told to re-join (27), the join phase completes, nobody syncs yet
    conns["i3"] = Wire(b1.port, client_id="c3")
    corr = conns["i3"].send(JOIN, 9, _join_body("mid", "i3"))
    for inst in ("i1", "i2"):
        for _ in range(POLLS):
            code = heartbeat(conns[inst], "mid", joined[inst]["member_id"], gen, inst)
            if code == 27:
                break
            time.sleep(0.05)
        assert code == 27
    rejoined = join_all({i: conns[i] for i in ("i1", "i2")}, "mid",
                        member_ids={i: joined[i]["member_id"] for i in ("i1", "i2")})
    got_corr, third = protocol.decode_response(JOIN, 9, conns["i3"].recv_frame())
    assert got_corr == corr and third["error_code"] == 0
    assert {r["generation_id"] for r in rejoined.values()} == {gen + 1}
    _close(conns)
    b1.kill()  # generation gen + 1 was never acknowledged (no SyncGroup answered)

    b2 = brokers(data)
    with Wire(b2.port) as w:
        d = describe(w, "mid")
        assert d["group_state"] == "Stable"
        assert sorted(m["group_instance_id"] for m in d["members"]) == ["i1", "i2"]
        assert {m["member_assignment"] for m in d["members"]} == {_assignment([0, 1]), _assignment([2, 3])}
    conns = {i: Wire(b2.port, client_id=i) for i in ("i1", "i2", "i3")}
    r = conns["i1"].call(SYNC, 5, {"group_id": "mid", "generation_id": gen + 1, "member_id": joined["i1"]["member_id"],
                                   "group_instance_id": "i1", "protocol_type": "consumer",
                                   "protocol_name": "cooperative-sticky", "assignments": []})
    assert r["error_code"] == 22  # ILLEGAL_GENERATION: that generation never completed
    # everyone joins again (i1, i2 with their member ids; i3 anew): a generation past every acknowledged one
    again = join_all(conns, "mid", member_ids={i: joined[i]["member_id"] for i in ("i1", "i2")})
    assert all(r["error_code"] == 0 for r in again.values()), again
    assert {r["generation_id"] for r in again.values()} == {gen + 1}
    _close(conns)


# before-store comes back at the old generation, as the kill between requests mid-rebalance does (default suite):
# slow; after-store stays in the default suite
@pytest.mark.parametrize("failpoint, stored", [pytest.param("groups:before-store", False, marks=pytest.mark.slow),
                                               ("groups:after-store", True)])
def test_kill9_around_the_store_of_a_generation(brokers, tmp_path, failpoint, stored):
    """Killed in the leader's SyncGroup just before / just after the new generation's record is durable: nobody was
    answered either way; the group comes back at the old generation or the new one, never lower."""
    data = tmp_path / "data"
    b1 = brokers(data)
    conns, joined, _ = _stable_pair(b1, "fp")  # generation g stored
    gen = joined["i1"]["generation_id"]
    _close(conns)
    b1.kill()
    b2 = brokers(data, failpoint=failpoint)
    conns = {i: Wire(b2.port, client_id=i) for i in ("i1", "i2")}
    # both re-join with their member ids (a rebalance of the loaded group)
    again = join_all(conns, "fp", member_ids={i: joined[i]["member_id"] for i in ("i1", "i2")})
    assert {r["generation_id"] for r in again.values()} == {gen + 1}
    leader = next(i for i, r in again.items() if r["leader"] == r["member_id"])
    given = {"i1": _assignment([0]), "i2": _assignment([1, 2, 3])}
    conns[leader].send(SYNC, 5, {"group_id": "fp", "generation_id": gen + 1, "member_id": again[leader]["member_id"],
                                 "group_instance_id": leader, "protocol_type": "consumer",
                                 "protocol_name": "cooperative-sticky",
                                 "assignments": [{"member_id": again[i]["member_id"], "assignment": a}
                                                 for i, a in given.items()]})
    assert conns[leader].recv_frame() is None  # killed before answering
    b2.proc.wait(timeout=10)
    _close(conns)
    b3 = brokers(data)
    with Wire(b3.port) as w:
        d = describe(w, "fp")
    assert d["group_state"] == "Stable"
    got = {m["group_instance_id"]: m["member_assignment"] for m in d["members"]}
    if stored:
        assert got == given
    else:
        assert got == {"i1": _assignment([0, 1]), "i2": _assignment([2, 3])}
    with LogStore(data, read_only=True) as store:
        rec = gf.decode_group_metadata_value(store.offsets.group_metadata("fp"))
    assert rec.generation == (gen + 1 if stored else gen)


@pytest.mark.parametrize("lose_state_file", [False, True])
def test_a_dynamic_range_member_heartbeats_on_after_kill9(brokers, tmp_path, lose_state_file):
    """A group of the group model (a range member over the wire): after kill -9 its member heartbeats on at its
    generation, the group Stable with its assignment; also when the group's state.json was lost (a power loss
    before the file system wrote it): restored from the GroupMetadata record."""
    from kafkalog.client.group import group_dir
    data = tmp_path / "data"
    b1 = brokers(data)
    meta = protocol.encode_subscription(["t"])
    body = {"group_id": "rg", "session_timeout_ms": 30000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": meta}]}
    with Wire(b1.port, client_id="r1") as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        j = w.call(JOIN, 9, body)
        assert j["error_code"] == 79
        j = w.call(JOIN, 9, dict(body, member_id=j["member_id"]))
        assert j["error_code"] == 0
        s = w.call(SYNC, 5, {"group_id": "rg", "generation_id": j["generation_id"], "member_id": j["member_id"],
                             "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                             "assignments": []})
        assert s["error_code"] == 0 and s["assignment"] == _assignment([0, 1])
        before = describe(w, "rg")
    b1.kill()
    if lose_state_file:
        (group_dir(data, "rg") / "state.json").unlink()
    b2 = brokers(data)
    with Wire(b2.port, client_id="r1") as w:
        assert heartbeat(w, "rg", j["member_id"], j["generation_id"], None) == 0
        after = describe(w, "rg")
        assert after["group_state"] == "Stable"
        assert [(m["member_id"], m["member_assignment"]) for m in after["members"]] == [
            (j["member_id"], _assignment([0, 1]))]
        if not lose_state_file:
            assert after == before


def test_a_range_group_that_embedded_members_rebalanced_while_the_broker_was_down_is_left_to_them(brokers,
                                                                                                  tmp_path):
    """The group model is shared: an embedded consumer joining while the broker is down evicts the dead wire member
    and moves the group on. The broker's record of the older generation must not bring the wire member back: it is
    told UNKNOWN_MEMBER_ID and joins again, after the embedded member's generation."""
    import kafkalog
    data = tmp_path / "data"
    b1 = brokers(data)
    meta = protocol.encode_subscription(["t"])
    body = {"group_id": "mixed", "session_timeout_ms": 30000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": meta}]}
    with Wire(b1.port, client_id="r1") as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        j = w.call(JOIN, 9, body)
        j = w.call(JOIN, 9, dict(body, member_id=j["member_id"]))
        assert j["error_code"] == 0
        s = w.call(SYNC, 5, {"group_id": "mixed", "generation_id": j["generation_id"], "member_id": j["member_id"],
                             "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                             "assignments": []})
        assert s["error_code"] == 0
    b1.kill()
    emb = kafkalog.KafkaConsumer("t", store=data, group_id="mixed", auto_offset_reset="earliest")
    try:
        for _ in range(POLLS):
            emb.poll(timeout_ms=50)
            if len(emb.assignment()) == 2:
                break
        assert len(emb.assignment()) == 2  # the dead wire member evicted: a generation past the record's
        b2 = brokers(data)
        with Wire(b2.port, client_id="r1") as w:
            assert heartbeat(w, "mixed", j["member_id"], j["generation_id"], None) == 25
            again = w.call(JOIN, 9, dict(body, member_id=""))
            assert again["error_code"] == 79
        emb.poll(timeout_ms=50)
        assert len(emb.assignment()) == 2
    finally:
        emb.close()


# ---------------------------------------------------------------------------------------------------- KIP-848

def hb(w, group, member, epoch, topics=None, owned=None, instance=None):
    return w.call(HB848, 1, {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance,
                             "rack_id": None, "rebalance_timeout_ms": 10000 if epoch == 0 else -1,
                             "subscribed_topic_names": topics, "subscribed_topic_regex": None,
                             "server_assignor": None, "topic_partitions": [] if epoch == 0 else owned})


def _owned(r):
    return [{"topic_id": tp["topic_id"], "partitions": tp["partitions"]}
            for tp in (r["assignment"] or {}).get("topic_partitions", [])]


def test_consumer_group_comes_back_after_kill9_at_its_epochs(brokers, tmp_path):
    data = tmp_path / "data"
    b1 = brokers(data)
    members = {"a": str(uuid.uuid4()), "b": str(uuid.uuid4())}
    with Wire(b1.port, client_id="k1") as w:
        assert w.create_topic("t", 4)["error_code"] == 0
        last = {k: hb(w, "kg", m, 0, topics=["t"], instance="static-b" if k == "b" else None)
                for k, m in members.items()}
        owned = {k: _owned(r) for k, r in last.items()}
        for _ in range(POLLS):  # heartbeat both (owning what they were given) until both are reconciled
            for k, m in members.items():
                r = hb(w, "kg", m, last[k]["member_epoch"], owned=owned[k],
                       instance="static-b" if k == "b" else None)
                assert r["error_code"] == 0, r
                if r["assignment"] is not None:
                    owned[k] = _owned(r)
                last[k] = r
            d = w.call(DESCRIBE848, 1, {"group_ids": ["kg"], "include_authorized_operations": False})["groups"][0]
            if d["group_state"] == "Stable":
                break
        assert d["group_state"] == "Stable", d
        assert sorted(p for k in owned for tp in owned[k] for p in tp["partitions"]) == [0, 1, 2, 3]
        epoch_a = last["a"]["member_epoch"]
        r = w.call(COMMIT, 9, {"group_id": "kg", "generation_id_or_member_epoch": epoch_a, "member_id": members["a"],
                               "group_instance_id": None, "topics": [
                                   {"name": "t", "partitions": [{"partition_index": p, "committed_offset": 7,
                                                                 "committed_leader_epoch": -1,
                                                                 "committed_metadata": ""}
                                                                for tp in owned["a"] for p in tp["partitions"]]}]})
        assert all(p["error_code"] == 0 for t in r["topics"] for p in t["partitions"])
    b1.kill()

    b2 = brokers(data)
    with Wire(b2.port, client_id="k1") as w:
        d2 = w.call(DESCRIBE848, 1, {"group_ids": ["kg"], "include_authorized_operations": False})["groups"][0]
        assert d2 == d  # epochs, assignor, every member's ids, subscriptions, assignment and target
        listed = w.call(16, 5, {"states_filter": [], "types_filter": []})["groups"]
        assert {"group_id": "kg", "protocol_type": "consumer", "group_state": "Stable",
                "group_type": "consumer"} in listed
        for k, m in members.items():  # both continue at their epochs, nothing to reconcile
            r = hb(w, "kg", m, last[k]["member_epoch"], owned=owned[k], instance="static-b" if k == "b" else None)
            assert r["error_code"] == 0 and r["member_epoch"] == last[k]["member_epoch"], r
            assert r["assignment"] is None
        assert hb(w, "kg", members["a"], last["a"]["member_epoch"] + 1, owned=owned["a"])["error_code"] == 110


def test_deleted_and_converted_groups_stay_so_after_kill9(brokers, tmp_path):
    data = tmp_path / "data"
    b1 = brokers(data)
    with Wire(b1.port, client_id="c1") as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        # a classic group emptied and deleted
        j = w.call(JOIN, 9, _join_body("del-c", "i1"))
        assert j["error_code"] == 0
        r = w.call(LEAVE, 5, {"group_id": "del-c", "members": [{"member_id": j["member_id"],
                                                                "group_instance_id": "i1", "reason": None}]})
        assert r["error_code"] == 0 and r["members"][0]["error_code"] == 0
        # a consumer group emptied and deleted
        a = str(uuid.uuid4())
        assert hb(w, "del-k", a, 0, topics=["t"])["error_code"] == 0
        assert hb(w, "del-k", a, -1)["error_code"] == 0
        r = w.call(42, 2, {"groups_names": ["del-c", "del-k"]})
        assert [x["error_code"] for x in r["results"]] == [0, 0], r
        # an empty consumer group taken over by a classic member
        assert hb(w, "conv", a, 0, topics=["t"])["error_code"] == 0
        assert hb(w, "conv", a, -1)["error_code"] == 0
        j = w.call(JOIN, 9, _join_body("conv", "i1"))
        assert j["error_code"] == 0, j
        s = w.call(SYNC, 5, {"group_id": "conv", "generation_id": j["generation_id"], "member_id": j["member_id"],
                             "group_instance_id": "i1", "protocol_type": "consumer",
                             "protocol_name": "cooperative-sticky",
                             "assignments": [{"member_id": j["member_id"], "assignment": _assignment([0, 1])}]})
        assert s["error_code"] == 0
    b1.kill()
    b2 = brokers(data)
    with Wire(b2.port) as w:
        assert describe(w, "del-c")["group_state"] == "Dead"
        cgd = w.call(DESCRIBE848, 1, {"group_ids": ["del-k", "conv"], "include_authorized_operations": False})
        assert [(g["error_code"], g["error_message"]) for g in cgd["groups"]] == [
            (69, "Group del-k not found."), (69, "Group conv is not a consumer group.")]
        d = describe(w, "conv")
        assert d["group_state"] == "Stable" and [m["member_assignment"] for m in d["members"]] == [_assignment([0, 1])]
        listed = {g["group_id"] for g in w.call(16, 5, {"states_filter": [], "types_filter": []})["groups"]}
        assert "del-c" not in listed and "del-k" not in listed and "conv" in listed
    with LogStore(data, read_only=True) as store:
        assert store.offsets.group_records("del-c") == {} and store.offsets.group_records("del-k") == {}
        assert {gf.decode_group_key(k).type for k in store.offsets.group_records("conv")} == {gf.GROUP_METADATA}


def test_consumer_group_killed_mid_reconciliation_goes_on_after_the_load(brokers, tmp_path):
    """Killed while A must give up half its partitions (UNREVOKED_PARTITIONS at its old epoch) and B waits for them
    (UNRELEASED_PARTITIONS), a third member C silent: after the load A revokes and both reach the new epoch, never
    an epoch lower than one they were answered; C is removed by its session timeout counted from the load and its
    partitions go to the others."""
    data = tmp_path / "data"
    session = ["group.consumer.session.timeout.ms=2000"]
    b1 = brokers(data, overrides=session)
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    seen = {a: 0, b: 0, c: 0}  # the highest epoch each member was answered

    def beat(w, m, epoch, owned=None, topics=None):
        r = hb(w, "rk", m, epoch, topics=topics, owned=owned)
        assert r["error_code"] == 0, r
        assert r["member_epoch"] >= seen[m], (r, seen[m])
        seen[m] = r["member_epoch"]
        return r
    with Wire(b1.port) as w:
        assert w.create_topic("t", 6)["error_code"] == 0
        r = beat(w, a, 0, topics=["t"])
        r = beat(w, a, r["member_epoch"], owned=_owned(r))
        rc = beat(w, c, 0, topics=["t"])
        r = beat(w, a, r["member_epoch"], owned=_owned(r))  # A gives up C's share
        a_owned = _owned(r)
        rc = beat(w, c, rc["member_epoch"], owned=[])
        c_owned = _owned(rc)
        assert sum(len(tp["partitions"]) for tp in a_owned + c_owned) == 6
        rb = beat(w, b, 0, topics=["t"])
        r = beat(w, a, r["member_epoch"], owned=a_owned)  # told to revoke: its epoch stays
        d = w.call(DESCRIBE848, 1, {"group_ids": ["rk"], "include_authorized_operations": False})["groups"][0]
        states = {m["member_id"]: m for m in d["members"]}
        assert d["group_state"] == "Reconciling" and states[a]["member_epoch"] < d["group_epoch"]
    b1.kill()

    b2 = brokers(data, overrides=session)
    with Wire(b2.port) as w:
        d2 = w.call(DESCRIBE848, 1, {"group_ids": ["rk"], "include_authorized_operations": False})["groups"][0]
        assert d2 == d
        kept = [{"topic_id": tp["topic_id"], "partitions": tp["partitions"]} for tp in _owned(r)]
        r = beat(w, a, r["member_epoch"], owned=kept)  # revoked: A reaches the group's epoch
        assert r["member_epoch"] == d["assignment_epoch"]
        a_owned = _owned(r) or kept
        rb = beat(w, b, rb["member_epoch"], owned=[])
        for _ in range(POLLS):  # A and B heartbeat on; C never comes back
            r = beat(w, a, r["member_epoch"], owned=a_owned)
            if r["assignment"] is not None:
                a_owned = _owned(r)
            rb = beat(w, b, rb["member_epoch"], owned=_owned(rb))
            d3 = w.call(DESCRIBE848, 1, {"group_ids": ["rk"], "include_authorized_operations": False})["groups"][0]
            if d3["group_state"] == "Stable" and len(d3["members"]) == 2:
                break
            time.sleep(0.05)
        assert d3["group_state"] == "Stable" and {m["member_id"] for m in d3["members"]} == {a, b}, d3
        assert sorted(p for m in d3["members"] for tp in m["assignment"]["topic_partitions"]
                      for p in tp["partitions"]) == list(range(6))


# Records as Apache Kafka 4.4.0 wrote them (tests/storage/test_groupformat.py has them decoded field by field): a
# static member's cooperative-sticky group at generation 1, and a KIP-848 group at epoch 2 with one member holding
# partitions 0 and 1 of a topic this data dir does not have
KAFKA_CLASSIC = bytes.fromhex(
    "00030008636f6e73756d6572000000010012636f6f70657261746976652d737469636b79002b696e73742d312d31663038646439392d"
    "646464322d343333362d386133332d313166326631633935616666000001a21b1d88bb00000001002b696e73742d312d3166303864"
    "6439392d646464322d343333362d386133332d3131663266316339356166660006696e73742d3100077265636f726473000a2f3132"
    "372e302e302e3100002710000027100000001f0000000000010013746573742d6462672d742d3830306634386331ffffffff000000"
    "2b0000000000010013746573742d6462672d742d3830306634386331000000020000000000000001ffffffff")
KAFKA_CONSUMER = {
    gf.CONSUMER_GROUP_MEMBER_METADATA: "00000000087265636f7264730b2f3132372e302e302e310214746573742d6462672d742d"
                                       "383030663438633101000075300001000100",
    gf.CONSUMER_GROUP_METADATA: "000000000002010008ab602c898e553ffa",
    gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: "0000026fd36ae28d90418285f5a81abbb0e10d0300000000000000010000",
    gf.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: "000000000002010008000001a21b1d8956",
    gf.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: "0000000000020000000000026fd36ae28d90418285f5a81abbb0e10d0300000000"
                                                 "000000010100090300000002000000020100",
}


def test_groups_that_apache_kafka_wrote_are_loaded(tmp_path):
    """A data dir whose __consumer_offsets holds Kafka 4.4's own records: the broker loads both groups as Kafka
    would (the classic one Stable at generation 1 with its static member and assignment; the consumer group at
    epoch 2, its member at epoch 2 with its partitions)."""
    from kafkalog.broker import Broker
    member = "inst-1-1f08dd99-ddd2-4336-8a33-11f2f1c95aff"
    k848 = "d79f8753-f7d7-4e43-be13-69a015401645"
    with LogStore(tmp_path / "data") as store:
        store.offsets.put_group_records("kc", [(gf.encode_group_key(gf.GROUP_METADATA, "kc"), KAFKA_CLASSIC)])
        store.offsets.put_group_records("kk", [
            (gf.encode_group_key(t, "kk", k848 if t in (5, 7, 8) else None), bytes.fromhex(v))
            for t, v in KAFKA_CONSUMER.items()])
    b = Broker(tmp_path / "data", listen="127.0.0.1:0")
    b.start()
    try:
        with Wire(b.port) as w:
            d = describe(w, "kc")
            assert (d["group_state"], d["protocol_type"], d["protocol_data"]) == ("Stable", "consumer",
                                                                               "cooperative-sticky")
            [m] = d["members"]
            assert (m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"]) == (
                member, "inst-1", "records", "/127.0.0.1")
            assert protocol.decode_assignment(m["member_assignment"])["assigned_partitions"] == {
                "test-dbg-t-800f48c1": [0, 1]}
            g = w.call(DESCRIBE848, 1, {"group_ids": ["kk"], "include_authorized_operations": False})["groups"][0]
            assert (g["error_code"], g["group_epoch"], g["assignment_epoch"]) == (0, 2, 2)
            [m] = g["members"]
            assert (m["member_id"], m["member_epoch"], m["client_id"]) == (k848, 2, "records")
            assert [tp["partitions"] for tp in m["assignment"]["topic_partitions"]] == [[0, 1]]
    finally:
        b.stop()


# ---------------------------------------------------------------------------------------------------- real clients

@pytest.mark.parametrize("group_protocol", ["classic", "consumer", "range"])
def test_librdkafka_member_reads_on_across_a_broker_kill9_without_a_rebalance(brokers, tmp_path, group_protocol):
    """confluent-kafka: a static member (group.instance.id; classic: cooperative-sticky, the classic coordinator;
    KIP-848: group.protocol=consumer) and a dynamic range member (the group model): the broker is killed and started
    again on the same port; the consumer keeps its partitions (no revocation, no new assignment) and reads the
    records produced after the restart, each once."""
    ck = pytest.importorskip("confluent_kafka")
    data, port = tmp_path / "data", free_port()
    b1 = brokers(data, port=port)
    with Wire(b1.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        for p in range(2):
            w.produce("t", p, batch([b"a%d-%d" % (p, i) for i in range(5)]))
    events = []
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"rd-{group_protocol}",
            "group.instance.id": "rd-1", "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "broker.address.family": "v4", "group.protocol": group_protocol}
    if group_protocol == "classic":
        conf.update({"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 30000,
                     "heartbeat.interval.ms": 300})
    elif group_protocol == "range":
        del conf["group.instance.id"]
        conf.update({"group.protocol": "classic", "partition.assignment.strategy": "range",
                     "session.timeout.ms": 30000, "heartbeat.interval.ms": 300})
    c = ck.Consumer(conf)
    got = []

    def poll(until, what):
        for _ in range(400):
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m.value())
            if until():
                return
        raise AssertionError(f"not reached after 400 polls: {what}; got {sorted(got)}, events {events}")
    try:
        c.subscribe(["t"], on_assign=lambda _c, ps: events.append(("assign", sorted(p.partition for p in ps))),
                    on_revoke=lambda _c, ps: events.append(("revoke", sorted(p.partition for p in ps))))
        poll(lambda: len(got) == 10, "the first 10 records")
        c.commit(asynchronous=False)
        before = list(events)
        b1.kill()
        b2 = brokers(data, port=port)
        with Wire(b2.port) as w:
            for p in range(2):
                w.produce("t", p, batch([b"b%d-%d" % (p, i) for i in range(5)]))
        poll(lambda: len(got) == 20, "the 10 records produced after the restart")
        for _ in range(10):  # a few more polls: a late rebalance would show here
            c.poll(0.1)
        assert events == before, f"a rebalance after the restart: {events}"
        assert sorted(got) == sorted(b"%s%d-%d" % (k, p, i) for k in (b"a", b"b") for p in range(2)
                                     for i in range(5))
        assignment = sorted(tp.partition for tp in c.assignment())
        assert assignment == [0, 1]
    finally:
        c.close()


def test_a_failed_store_of_a_generation_is_answered_and_the_group_rebalances(tmp_path):
    """The record of a generation cannot be written (failpoint: EIO): nobody gets an assignment of it (the leader's
    SyncGroup is answered NOT_COORDINATOR, as Kafka answers an append that failed with a storage error), the group
    prepares another rebalance, and the next generation is stored and served once the disk is back."""
    from kafkalog.broker import Broker
    from kafkalog.storage import failpoints
    b = Broker(tmp_path / "data", listen="127.0.0.1:0", config={"group.initial.rebalance.delay.ms": 0})
    b.start()
    try:
        with Wire(b.port, client_id="c1") as w:
            assert w.create_topic("t", 2)["error_code"] == 0
            j = w.call(JOIN, 9, _join_body("ff", "i1"))
            assert j["error_code"] == 0
            body = {"group_id": "ff", "generation_id": j["generation_id"], "member_id": j["member_id"],
                    "group_instance_id": "i1", "protocol_type": "consumer", "protocol_name": "cooperative-sticky",
                    "assignments": [{"member_id": j["member_id"], "assignment": _assignment([0, 1])}]}
            failpoints.enable("groups:before-store", "raise")
            try:
                assert w.call(SYNC, 5, body)["error_code"] == 16
            finally:
                failpoints.disable("groups:before-store")
            assert heartbeat(w, "ff", j["member_id"], j["generation_id"], "i1") == 27  # re-join
            j2 = w.call(JOIN, 9, _join_body("ff", "i1", j["member_id"]))
            assert j2["error_code"] == 0 and j2["generation_id"] == j["generation_id"] + 1
            body.update(generation_id=j2["generation_id"])
            s = w.call(SYNC, 5, body)
            assert s["error_code"] == 0 and s["assignment"] == _assignment([0, 1])
        rec = gf.decode_group_metadata_value(b.store.offsets.group_metadata("ff"))
        assert rec.generation == j2["generation_id"] and rec.members[0].assignment == _assignment([0, 1])
    finally:
        b.stop()
