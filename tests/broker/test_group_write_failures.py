"""A group write that fails (the disk refuses it: failpoint ``groups:before-store`` for the coordinators' records,
``offsets:before-append`` for an OffsetCommit, both an EIO) leaves the group in memory as it was: the member is
answered Kafka's error (a storage error is NOT_COORDINATOR, as Kafka's coordinator maps KAFKA_STORAGE_ERROR), and
what the broker answers next (ConsumerGroupDescribe, DescribeGroups, OffsetFetch, the members' heartbeats) is what
it answered before the failed request and what it answers after a restart on the same data dir (what
``__consumer_offsets`` holds).

Each test runs an in-process broker, started twice (about 0.3 s each); wire round trips only (the expiry under a
failing disk waits for a session timeout: slow).
"""

from __future__ import annotations

import pytest

from kafkalog.broker import protocol
from kafkalog.storage import failpoints
from kafkalog.storage import groupformat as gf

from .conftest import RestartableBroker
from .wire import Wire

pytestmark = pytest.mark.usefixtures("deadline")

JOIN, SYNC, HEARTBEAT, DESCRIBE, COMMIT, FETCH, HB848, DESCRIBE848 = 11, 14, 12, 15, 8, 9, 68, 69
NOT_COORDINATOR = 16
STORE = "groups:before-store"


@pytest.fixture
def broker(tmp_path):
    """broker() -> a started in-process Broker on tmp_path/data; broker.restart() stops it and starts a new one on
    the same data dir (the attribute ``b`` is the current one)."""
    h = RestartableBroker(tmp_path / "data")
    h.start()
    yield h
    failpoints.disable()
    h.stop()


def failing(name):
    """Within: the failpoint ``name`` raises EIO."""
    class _Failing:
        def __enter__(self):
            failpoints.enable(name, "raise")

        def __exit__(self, *exc):
            failpoints.disable(name)
    return _Failing()


# -- KIP-848 ---------------------------------------------------------------------------------------------------------

def hb(w, member, epoch, *, topics=None, owned=None, rebalance_ms=-1, instance=None, group="g"):
    return w.call(HB848, 1, {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance,
                             "rack_id": None, "rebalance_timeout_ms": rebalance_ms, "subscribed_topic_names": topics,
                             "subscribed_topic_regex": None, "server_assignor": None,
                             "topic_partitions": None if owned is None else
                             [{"topic_id": t, "partitions": ps} for t, ps in owned]})


def join(w, member, instance=None, group="g"):
    return hb(w, member, 0, topics=["t"], owned=[], rebalance_ms=30000, instance=instance, group=group)


def owned(r) -> list:
    a = r.get("assignment")
    return [] if a is None else [(t["topic_id"], t["partitions"]) for t in a["topic_partitions"]]


def describe848(w, group="g") -> dict:
    r = w.call(DESCRIBE848, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    r.pop("authorized_operations", None)
    r["members"] = sorted(r["members"], key=lambda m: m["member_id"])
    return r


def _member(n: int) -> str:
    return f"member-{n}-" + "0" * 14


def stable(w, member, r, instance=None) -> dict:
    """Heartbeats until ``member`` is at the assignment epoch with what it was given (bounded: 20)."""
    mine = owned(r)
    for _ in range(20):
        r = hb(w, member, r["member_epoch"], owned=mine, instance=instance)
        assert r["error_code"] == 0, r
        if r.get("assignment") is not None:
            mine = owned(r)
        d = describe848(w)
        if d["group_state"] == "Stable" or all(m["member_epoch"] == d["assignment_epoch"] for m in d["members"]
                                               if m["member_id"] == member):
            return dict(r, assignment={"topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in mine]})
    raise AssertionError(f"{member} not reconciled: {describe848(w)}")


def _assert_failed_and_unchanged(broker, w, request, what: str):
    """``request()`` under a failing group write: NOT_COORDINATOR, and the group described as before it; after a
    restart, as before it too. Returns the description."""
    before = describe848(w)
    with failing(STORE):
        r = request()
    assert r["error_code"] == NOT_COORDINATOR, (what, r)
    assert r["member_epoch"] == 0 and r["assignment"] is None and r["member_id"] is None, (what, r)
    after = describe848(w)
    assert after == before, f"{what}: the failed write changed the group in memory:\n{before}\n{after}"
    return before


def _after_restart(broker, before) -> dict:
    b = broker.restart()
    with Wire(b.port) as w:
        loaded = describe848(w)
    for m in loaded["members"] + before["members"]:
        m.pop("client_host")
    assert loaded == before, f"a restart loads another group than the one in memory:\n{before}\n{loaded}"
    return loaded


def test_a_kip848_join_whose_write_fails_leaves_no_member_and_no_group(broker):
    """The group's first member: its records cannot be written; the member is answered NOT_COORDINATOR, the group
    does not exist (GROUP_ID_NOT_FOUND, as after a restart), and the same join goes through once the disk is
    back."""
    with Wire(broker.b.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        with failing(STORE):
            r = join(w, _member(1))
        assert r["error_code"] == NOT_COORDINATOR, r
        assert describe848(w)["error_code"] == 69  # GROUP_ID_NOT_FOUND
        r = join(w, _member(1))
        assert r["error_code"] == 0 and r["member_epoch"] == 2, r  # a new group: member and topics, two bumps
    b = broker.restart()
    with Wire(b.port) as w:
        d = describe848(w)
        assert d["group_epoch"] == 2 and [m["member_id"] for m in d["members"]] == [_member(1)], d


def test_a_kip848_epoch_bump_whose_write_fails_is_taken_back(broker):
    """A second member joins (group epoch bump, a new target assignment: the first member must give up a
    partition), and its write fails: the group (epochs, members, targets) is as before, as after a restart; then
    the first member's heartbeat that would move it to the new epoch fails too and is taken back."""
    with Wire(broker.b.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        a = stable(w, _member(1), join(w, _member(1)))
        assert len(owned(a)[0][1]) == 2, a
        # the join of a second member: group epoch, target assignment
        before = _assert_failed_and_unchanged(broker, w, lambda: join(w, _member(2)), "a second member's join")
        assert hb(w, _member(1), a["member_epoch"], owned=owned(a))["error_code"] == 0  # A heartbeats on
        r2 = join(w, _member(2))
        assert r2["error_code"] == 0, r2
        # A's heartbeat that reconciles it (revokes a partition: a new epoch, current assignment records)
        _assert_failed_and_unchanged(broker, w, lambda: hb(w, _member(1), a["member_epoch"], owned=owned(a)),
                                     "the first member's reconciliation")
        before = describe848(w)
    _after_restart(broker, before)


def test_a_kip848_static_replacement_whose_write_fails_keeps_the_old_member(broker):
    """A static member leaves for a while (epoch -2), a new incarnation with its instance id joins and its write
    fails: the old member is still the one holding the instance id and its assignment (as after a restart); then
    the new incarnation's join goes through."""
    with Wire(broker.b.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        a = stable(w, _member(1), join(w, _member(1), instance="i1"), instance="i1")
        assert hb(w, _member(1), -2, instance="i1")["error_code"] == 0
        _assert_failed_and_unchanged(broker, w, lambda: join(w, _member(9), instance="i1"), "a static replacement")
        before = describe848(w)
        assert [m["member_id"] for m in before["members"]] == [_member(1)], before
    _after_restart(broker, before)
    with Wire(broker.b.port) as w:
        r = join(w, _member(9), instance="i1")
        assert r["error_code"] == 0 and owned(r) == owned(a), (r, a)


def test_a_kip848_leave_whose_write_fails_keeps_the_member(broker):
    with Wire(broker.b.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        a = stable(w, _member(1), join(w, _member(1)))
        stable(w, _member(2), join(w, _member(2)))
        a = stable(w, _member(1), hb(w, _member(1), a["member_epoch"], owned=owned(a)))
        before = _assert_failed_and_unchanged(broker, w, lambda: hb(w, _member(2), -1), "a leave")
        assert len(before["members"]) == 2
    _after_restart(broker, before)


def test_writes_after_a_failed_one_in_flight_fail_with_it(broker):
    """Two joins back to back; the first one's write fails once the second one's is queued behind it. The second
    was computed from the first's state, so it is refused without being written (the disk would take it) and the
    group is as before both, as a restart loads it."""
    import time
    worker = broker.b.services.groups.state._worker
    calls = []

    def fail_first_once_the_second_is_queued():
        calls.append(1)
        if len(calls) > 1:
            return  # the disk is back: a later write that gets here is written
        for _ in range(400):  # bounded: 400 looks (the second join is queued within milliseconds)
            if worker._work_queue.qsize() > 0:
                break
            time.sleep(0.005)
        raise OSError(5, "failpoint")
    with Wire(broker.b.port) as w1, Wire(broker.b.port) as w2:
        assert w1.create_topic("t", 2)["error_code"] == 0
        stable(w1, _member(1), join(w1, _member(1)))
        before = describe848(w1)
        body = {"group_id": "g", "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": []}
        failpoints.enable(STORE, fail_first_once_the_second_is_queued)
        try:
            w1.send(HB848, 1, dict(body, member_id=_member(2)))
            w2.send(HB848, 1, dict(body, member_id=_member(3)))
            r2 = protocol.decode_response(HB848, 1, w1.recv_frame())[1]
            r3 = protocol.decode_response(HB848, 1, w2.recv_frame())[1]
        finally:
            failpoints.disable(STORE)
        assert r2["error_code"] == NOT_COORDINATOR and r3["error_code"] == NOT_COORDINATOR, (r2, r3)
        assert describe848(w1) == before
    _after_restart(broker, before)


@pytest.mark.slow
def test_a_kip848_expiry_whose_write_fails_keeps_the_member_until_it_is_written(broker):
    """A silent member's session times out (2 s here) while the disk refuses the group's records: the sweep's
    removal is taken back (the member stays, as the store has it and a restart loads it) and tried again at the
    next sweep, which removes it once the disk is back. Slow: waits for a session timeout (about 4 s)."""
    import time
    b = broker.start(**{"group.consumer.session.timeout.ms": 2000})
    state = b.services.groups.state
    with Wire(b.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        stable(w, _member(1), join(w, _member(1)))
        before = describe848(w)
        failed = state.failed
        with failing(STORE):
            for _ in range(200):  # bounded: the sweep runs every 0.5 s, the session is 2 s
                if state.failed >= failed + 2:  # two sweeps' removals refused
                    break
                time.sleep(0.05)
            assert state.failed >= failed + 2, "the member's session never timed out"
            assert describe848(w) == before
        for _ in range(200):
            if not describe848(w)["members"]:
                break
            time.sleep(0.05)
        assert describe848(w)["members"] == []
    b = broker.restart()
    with Wire(b.port) as w:
        assert describe848(w)["members"] == []


# -- classic groups --------------------------------------------------------------------------------------------------

def _join_body(instance, member_id=""):
    return {"group_id": "c", "session_timeout_ms": 30000, "rebalance_timeout_ms": 10000, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "cooperative-sticky", "metadata": protocol.encode_subscription(["t"])}]}


def describe(w) -> dict:
    r = w.call(DESCRIBE, 5, {"groups": ["c"], "include_authorized_operations": False})["groups"][0]
    r.pop("authorized_operations", None)
    return r


def _static_group(w) -> dict:
    j = w.call(JOIN, 9, _join_body("i1"))
    assert j["error_code"] == 0, j
    s = w.call(SYNC, 5, {"group_id": "c", "generation_id": j["generation_id"], "member_id": j["member_id"],
                         "group_instance_id": "i1", "protocol_type": "consumer",
                         "protocol_name": "cooperative-sticky",
                         "assignments": [{"member_id": j["member_id"],
                                          "assignment": protocol.encode_assignment({"t": [0, 1]})}]})
    assert s["error_code"] == 0, s
    return j


def test_a_classic_static_replacement_whose_write_fails_reverts_to_the_old_member_id(broker):
    """A static member restarts (JoinGroup with an empty member id, its instance id) into a Stable group, and the
    group with its new member id cannot be written: answered NOT_COORDINATOR with an empty member id (Kafka:
    "Reverting to old member id"), the old member id holds the instance id again (its heartbeat is answered), the
    group described as before and as after a restart."""
    with Wire(broker.b.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        j = _static_group(w)
        before = describe(w)
        with failing(STORE):
            r = w.call(JOIN, 9, _join_body("i1"))
        assert r["error_code"] == NOT_COORDINATOR and r["member_id"] == "", r
        assert r["generation_id"] == j["generation_id"] and r["leader"] == j["member_id"], r
        assert describe(w) == before
        assert w.call(HEARTBEAT, 4, {"group_id": "c", "generation_id": j["generation_id"],
                                     "member_id": j["member_id"], "group_instance_id": "i1"})["error_code"] == 0
    b = broker.restart()
    with Wire(b.port) as w:
        assert describe(w) == before
        r = w.call(JOIN, 9, _join_body("i1"))  # the restart goes through once the disk is back
        assert r["error_code"] == 0 and r["generation_id"] == j["generation_id"] and r["skip_assignment"], r


def test_a_classic_sync_whose_write_fails_answers_every_member_and_gives_no_assignment(broker):
    """The leader's SyncGroup of a new generation cannot be stored: leader and follower are answered NOT_COORDINATOR
    (Kafka completes every pending SyncGroup with the error), no member holds an assignment of that generation, and
    the stored group (what a restart loads) is still the previous generation."""
    with Wire(broker.b.port) as w1, Wire(broker.b.port) as w2:
        assert w1.create_topic("t", 2)["error_code"] == 0
        j = _static_group(w1)
        # a second static member: a rebalance, both re-join
        c2 = w2.send(JOIN, 9, _join_body("i2"))
        assert w1.call(HEARTBEAT, 4, {"group_id": "c", "generation_id": j["generation_id"],
                                      "member_id": j["member_id"], "group_instance_id": "i1"})["error_code"] == 27
        j1 = w1.call(JOIN, 9, _join_body("i1", j["member_id"]))
        corr, j2 = protocol.decode_response(JOIN, 9, w2.recv_frame())
        assert corr == c2 and j1["error_code"] == 0 and j2["error_code"] == 0, (j1, j2)
        gen = j1["generation_id"]
        leader, follower = (w1, j1), (w2, j2)
        if j2["member_id"] == j1["leader"]:
            leader, follower = follower, leader

        def sync_body(r, inst, assignments):
            return {"group_id": "c", "generation_id": gen, "member_id": r["member_id"], "group_instance_id": inst,
                    "protocol_type": "consumer", "protocol_name": "cooperative-sticky", "assignments": assignments}
        inst = {j1["member_id"]: "i1", j2["member_id"]: "i2"}
        cf = follower[0].send(SYNC, 5, sync_body(follower[1], inst[follower[1]["member_id"]], []))
        with failing(STORE):
            sl = leader[0].call(SYNC, 5, sync_body(leader[1], inst[leader[1]["member_id"]], [
                {"member_id": j1["member_id"], "assignment": protocol.encode_assignment({"t": [0]})},
                {"member_id": j2["member_id"], "assignment": protocol.encode_assignment({"t": [1]})}]))
        corr, sf = protocol.decode_response(SYNC, 5, follower[0].recv_frame())
        assert corr == cf
        assert sl["error_code"] == NOT_COORDINATOR and sf["error_code"] == NOT_COORDINATOR, (sl, sf)
        d = describe(w1)
        assert d["group_state"] == "PreparingRebalance" and all(m["member_assignment"] == b""
                                                                 for m in d["members"]), d
    rec = gf.decode_group_metadata_value(broker.b.store.offsets.group_metadata("c"))
    assert rec.generation == gen - 1, rec
    b = broker.restart()
    with Wire(b.port) as w:
        d = describe(w)
        assert d["group_state"] == "Stable" and len(d["members"]) == 1, d


# -- OffsetCommit ----------------------------------------------------------------------------------------------------

def test_an_offset_commit_whose_write_fails_changes_no_offset(broker):
    """A commit of two partitions cannot be appended: both answered NOT_COORDINATOR, OffsetFetch answers the
    offsets committed before, as after a restart."""
    def commit(w, offsets):
        r = w.call(COMMIT, 8, {"group_id": "o", "generation_id_or_member_epoch": -1, "member_id": "",
                               "group_instance_id": None, "topics": [
                                   {"name": "t", "partitions": [{"partition_index": p, "committed_offset": o,
                                                                 "committed_leader_epoch": -1,
                                                                 "committed_metadata": "m"}
                                                                for p, o in offsets.items()]}]})
        return [p["error_code"] for t in r["topics"] for p in t["partitions"]]

    def fetched(w):
        r = w.call(FETCH, 7, {"group_id": "o", "topics": None, "require_stable": False})
        return {p["partition_index"]: p["committed_offset"] for t in r["topics"] for p in t["partitions"]}
    with Wire(broker.b.port) as w:
        assert w.create_topic("t", 2)["error_code"] == 0
        assert commit(w, {0: 3, 1: 4}) == [0, 0]
        with failing("offsets:before-append"):
            assert commit(w, {0: 7, 1: 8}) == [NOT_COORDINATOR, NOT_COORDINATOR]
        assert fetched(w) == {0: 3, 1: 4}
    b = broker.restart()
    with Wire(b.port) as w:
        assert fetched(w) == {0: 3, 1: 4}
