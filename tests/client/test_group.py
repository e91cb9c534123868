"""Consumer groups across threads and processes (client/group.py through KafkaConsumer).

Assignors are checked against kafka-python 3.0.12's own assignors (real ClusterMetadata and JoinGroup members as
their inputs). Membership is checked with real processes: workers are scripts that consume, log every record they
got to a line-buffered file (so the log survives SIGKILL) and commit after each poll; the tests kill them with
SIGKILL, stop them with SIGSTOP or let them stop polling, and compare what was consumed with what was produced.
Nothing waits on a clock for an assertion: waits loop on a condition with a generous cap and fail naming it.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.cluster import ClusterMetadata
from kafka.coordinator.assignors.range import RangePartitionAssignor as KafkaRange
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as KafkaRoundRobin
from kafka.protocol.consumer.group import JoinGroupResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata.metadata import MetadataResponse

from kafkalog import ConsumerRebalanceListener, KafkaConsumer, LogStore, OffsetAndMetadata, TopicPartition
from kafkalog.client.group import (
    RangePartitionAssignor,
    RoundRobinPartitionAssignor,
    assignor_name,
    describe_group,
    group_dir,
)
from kafkalog.errors import CommitFailedError, InconsistentGroupProtocolError

GROUP = "g"
TOPIC = "t"
N_PARTS = 6
ALL = {TopicPartition(TOPIC, p) for p in range(N_PARTS)}
WAIT_S = 30.0


# ---------------------------------------------------------------------------------------------------- helpers

def wait_for(cond, what, timeout=WAIT_S, step=0.02):
    """Loop until cond() is truthy (returns it); fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def produce(store, per_partition, start=0):
    """Append ``per_partition`` records to each partition of TOPIC; value b"<partition>-<n>" with n from start."""
    for p in range(N_PARTS):
        store.log(TOPIC, p).append_batch([b"%d-%d" % (p, n) for n in range(start, start + per_partition)])


def on_disk(store):
    """{(partition, offset): value} of every record in TOPIC."""
    return {(p, r.offset): r.value.decode() for p in range(N_PARTS) for r in store.log(TOPIC, p).records()}


def all_committed(store, group=GROUP):
    """True when the group's committed offset of every partition is its log end offset."""
    for p in range(N_PARTS):
        c = store.offsets.committed(group, TopicPartition(TOPIC, p))
        if c is None or c.offset != store.log(TOPIC, p).log_end_offset:
            return False
    return True


def consumer(store, **kw):
    kw.setdefault("group_id", GROUP)
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("enable_auto_commit", False)
    return KafkaConsumer(TOPIC, store=store, **kw)


def poll_until(consumers, cond, what, timeout=WAIT_S, sink=None):
    """Poll every consumer in turn (a rebalance completes only inside poll) until cond(); with a sink, the records
    go to sink[consumer] and each poll that returned some is committed."""
    def step():
        for c in consumers:
            got = c.poll(timeout_ms=10, max_records=7)
            if sink is not None:
                for tp, recs in got.items():
                    sink.setdefault(c, []).extend((tp.partition, r.offset) for r in recs)
                if got:
                    c.commit()
        return cond()
    return wait_for(step, what, timeout, step=0)


def members_by_pid(store, group=GROUP):
    return {m["pid"]: set(m["assignment"]) for m in describe_group(store, group)["members"]}


# ---------------------------------------------------------------------------------------------------- assignors

def _kafka_python_assign(assignor, subscriptions: dict, partitions: dict) -> dict:
    """kafka-python's assignor run on a real ClusterMetadata and real JoinGroup members -> {member: {tp}}."""
    v = 1
    part = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
    meta = MetadataResponse(
        version=v, controller_id=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host="h", port=9092, rack=None, version=v)],
        topics=[MetadataResponse.MetadataResponseTopic(
            error_code=0, name=t, is_internal=False, version=v,
            partitions=[part(error_code=0, partition_index=p, leader_id=0, replica_nodes=[0], isr_nodes=[0],
                             version=v) for p in range(n)]) for t, n in partitions.items()])
    cluster = ClusterMetadata()
    cluster.update_metadata(meta)
    members = [JoinGroupResponse.JoinGroupResponseMember(
        member_id=m, group_instance_id=None, version=5,
        metadata=ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=b""))
        for m, topics in subscriptions.items()]
    out = assignor.assign(cluster, members)
    return {m: {TopicPartition(t, p) for t, ps in a.assigned_partitions for p in ps} for m, a in out.items()}


def _ours(assignor, subscriptions, partitions) -> dict:
    got = assignor.assign(subscriptions, {t: n for t, n in partitions.items()
                                          if any(t in s for s in subscriptions.values())})
    return {m: set(tps) for m, tps in got.items()}


T = TopicPartition


@pytest.mark.parametrize("assignor,expected", [
    # Kafka's documented examples (RangeAssignor / RoundRobinAssignor javadoc, kafka-python's docstrings)
    (RangePartitionAssignor, {"C0": [T("t0", 0), T("t0", 1), T("t1", 0), T("t1", 1)], "C1": [T("t0", 2), T("t1", 2)]}),
    (RoundRobinPartitionAssignor, {"C0": [T("t0", 0), T("t0", 2), T("t1", 1)], "C1": [T("t0", 1), T("t1", 0),
                                                                                      T("t1", 2)]}),
])
def test_assignor_golden_two_members_two_topics(assignor, expected):
    got = assignor.assign({"C1": ["t0", "t1"], "C0": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert {m: sorted(v) for m, v in got.items()} == {m: sorted(v) for m, v in expected.items()}


def test_roundrobin_golden_unequal_subscriptions():
    # kafka-python's / Kafka's docstring: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2
    got = RoundRobinPartitionAssignor.assign({"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]},
                                             {"t0": 1, "t1": 2, "t2": 3})
    assert {m: sorted(v) for m, v in got.items()} == {
        "C0": [T("t0", 0)], "C1": [T("t1", 0)], "C2": [T("t1", 1), T("t2", 0), T("t2", 1), T("t2", 2)]}


_member_ids = st.lists(st.text("abcXYZ-019", min_size=1, max_size=6), min_size=1, max_size=6, unique=True)
_topics = ["a", "b", "c", "d"]


@settings(max_examples=300, deadline=None)
@given(ids=_member_ids, data=st.data())
def test_assignors_match_kafka_python(ids, data):
    subscriptions = {m: data.draw(st.lists(st.sampled_from(_topics), min_size=1, max_size=4, unique=True))
                     for m in ids}
    subscribed = sorted({t for s in subscriptions.values() for t in s})
    partitions = {t: data.draw(st.integers(1, 9)) for t in subscribed}
    got = _ours(RangePartitionAssignor, subscriptions, partitions)
    expected = _kafka_python_assign(KafkaRange, subscriptions, partitions)
    assert got == {m: expected.get(m, set()) for m in ids}
    # kafka-python 3.0.12's round robin raises KeyError when subscriptions differ (it compares a (instance id,
    # member id) pair with member ids): use it as the oracle for equal subscriptions only
    same = {m: subscribed for m in ids}
    got = _ours(RoundRobinPartitionAssignor, same, partitions)
    expected = _kafka_python_assign(KafkaRoundRobin, same, partitions)
    assert got == {m: expected.get(m, set()) for m in ids}
    # unequal subscriptions: every subscribed partition exactly once, to a member subscribed to its topic
    got = RoundRobinPartitionAssignor.assign(subscriptions, partitions)
    owners = [tp for tps in got.values() for tp in tps]
    assert sorted(owners) == sorted(TopicPartition(t, p) for t, n in partitions.items() for p in range(n))
    assert all(tp.topic in subscriptions[m] for m, tps in got.items() for tp in tps)


def test_assignor_names_accept_kafka_python_classes():
    assert assignor_name(KafkaRange) == "range" and assignor_name(KafkaRoundRobin) == "roundrobin"
    assert assignor_name("range") == "range" and assignor_name(RoundRobinPartitionAssignor) == "roundrobin"
    with pytest.raises(ValueError, match="sticky"):
        assignor_name("sticky")


# ---------------------------------------------------------------------------------------------------- in-process groups

@pytest.fixture
def store(data_dir):
    s = LogStore(data_dir, maintenance=False)
    s.create_topic(TOPIC, N_PARTS)
    yield s
    s.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_two_consumers_in_one_process_split_then_one_takes_all(store, strategy):
    produce(store, 20)
    a = consumer(store, partition_assignment_strategy=[strategy])
    b = None
    try:
        got: dict = {}
        poll_until([a], lambda: a.assignment() == ALL, "a to hold all partitions", sink=got)
        b = consumer(store, partition_assignment_strategy=[strategy])
        # eager: nobody takes a partition before its owner gave it up in a poll
        for _ in range(5):
            assert not b.poll(timeout_ms=10)
        assert not b.assignment() and a.assignment() == ALL, "b took partitions a still owns"
        assert describe_group(store, GROUP)["state"] == "PreparingRebalance"
        poll_until([a, b], lambda: a.assignment() and b.assignment() and a.assignment() | b.assignment() == ALL,
                   "both consumers to hold partitions", sink=got)
        assert not a.assignment() & b.assignment()
        assert len(a.assignment()) == len(b.assignment()) == 3
        d = describe_group(store, GROUP)
        assert d["state"] == "Stable" and d["protocol"] == strategy and len(d["members"]) == 2
        b.close()
        poll_until([a], lambda: a.assignment() == ALL, "the remaining consumer to take all 6 partitions", sink=got)
        assert [m["assignment"] for m in describe_group(store, GROUP)["members"]] == [sorted(ALL)]
        poll_until([a], lambda: sum(len(v) for v in got.values()) >= 120, "the rest of the records", sink=got)
        # with a commit after each poll nothing was read twice
        both = got.get(a, []) + got.get(b, [])
        assert sorted(both) == sorted((p, o) for p in range(N_PARTS) for o in range(20))
        assert got.get(b), "b consumed nothing"
    finally:
        a.close()
        if b is not None:
            b.close()


def test_protocol_is_the_first_common_strategy_of_the_oldest_member(store):
    a = consumer(store, partition_assignment_strategy=["roundrobin", "range"])
    b = consumer(store, partition_assignment_strategy=["range", "roundrobin"])
    try:
        poll_until([a, b], lambda: a.assignment() and b.assignment(), "both to hold partitions")
        assert describe_group(store, GROUP)["protocol"] == "roundrobin"
        # roundrobin over 6 partitions and 2 members: the even and the odd partitions
        assert {frozenset(tp.partition % 2 for tp in c.assignment()) for c in (a, b)} == {frozenset({0}),
                                                                                         frozenset({1})}
        c = consumer(store, partition_assignment_strategy=["range"])
        try:
            poll_until([a, b, c], lambda: a.assignment() and b.assignment() and c.assignment(), "three members")
            assert describe_group(store, GROUP)["protocol"] == "range"
        finally:
            c.close()
        a.close()
        # left: b (range, roundrobin); a roundrobin-only member can join, then a range-only one cannot
        d = consumer(store, partition_assignment_strategy=["roundrobin"])
        try:
            with pytest.raises(InconsistentGroupProtocolError):
                consumer(store, partition_assignment_strategy=["range"])
            # the refused member left nothing behind: one lock file per member
            files = sorted(f.name for f in group_dir(store.path, GROUP).glob("member-*.lock"))
            assert files == sorted(f"member-{c._member.member_id}.lock" for c in (b, d))
            poll_until([b, d], lambda: b.assignment() and d.assignment(), "b and d to share the partitions")
            assert [m["member_id"] for m in describe_group(store, GROUP)["members"]] == sorted(
                [b._member.member_id, d._member.member_id])
        finally:
            d.close()
    finally:
        a.close()
        b.close()


def test_commit_of_a_partition_lost_in_a_rebalance_is_fenced(store):
    produce(store, 10)
    a = consumer(store)
    try:
        poll_until([a], lambda: a.assignment() == ALL, "a to hold all partitions")
        a.commit({TopicPartition(TOPIC, 5): OffsetAndMetadata(3, "", None)})
        b = consumer(store)
        try:
            poll_until([a, b], lambda: a.assignment() and b.assignment() and a.assignment() | b.assignment() == ALL,
                       "the rebalance to give b partitions")
            lost = sorted(ALL - a.assignment())
            assert lost and set(lost) == b.assignment()
            for tp in lost:
                before = store.offsets.committed(GROUP, tp)
                with pytest.raises(CommitFailedError):
                    a.commit({tp: OffsetAndMetadata(5, "", None)})
                assert store.offsets.committed(GROUP, tp) == before
            # a mixed commit is all or nothing
            kept = min(a.assignment())
            with pytest.raises(CommitFailedError):
                a.commit({kept: OffsetAndMetadata(7, "", None), lost[0]: OffsetAndMetadata(7, "", None)})
            assert store.offsets.committed(GROUP, kept) is None or store.offsets.committed(GROUP, kept).offset != 7
            # the owners commit what they own
            a.commit({kept: OffsetAndMetadata(4, "", None)})
            b.commit({lost[0]: OffsetAndMetadata(6, "", None)})
            assert store.offsets.committed(GROUP, kept).offset == 4
            assert store.offsets.committed(GROUP, lost[0]).offset == 6
        finally:
            b.close()
        # b left: a gets everything back and may commit it again
        poll_until([a], lambda: a.assignment() == ALL, "a to take all partitions back")
        a.commit({lost[0]: OffsetAndMetadata(8, "", None)})
        assert a.committed(lost[0]) == 8
    finally:
        a.close()


class Recorder(ConsumerRebalanceListener):
    def __init__(self, name, events):
        self.name = name
        self.events = events
        self.consumer = None

    def on_partitions_revoked(self, revoked):
        self.events.append((self.name, "revoked", frozenset(revoked)))
        if revoked:
            # Kafka's usual use: commit in the callback, while the partitions are still this member's
            c = self.consumer
            positions = {tp: c.position(tp) for tp in revoked}
            try:
                c.commit()
            except CommitFailedError:
                self.events.append((self.name, "commit failed", frozenset()))
                return
            ok = all(c.committed(tp) == positions[tp] for tp in revoked)
            self.events.append((self.name, "committed" if ok else "commit lost", frozenset()))

    def on_partitions_lost(self, lost):
        self.events.append((self.name, "lost", frozenset(lost)))

    def on_partitions_assigned(self, assigned):
        # the callback sees the new assignment in place
        assert self.consumer.assignment() == set(assigned)
        self.events.append((self.name, "assigned", frozenset(assigned)))


def _listening_consumer(store, name, events, **kw):
    kw.setdefault("group_id", GROUP)
    c = KafkaConsumer(store=store, auto_offset_reset="earliest", enable_auto_commit=False, **kw)
    listener = Recorder(name, events)
    listener.consumer = c
    c.subscribe([TOPIC], listener=listener)
    return c


def _listener_scenario(store, events):
    """a alone, then b joins, then b closes: returns (a's share, b's share) while both were in."""
    a = _listening_consumer(store, "a", events)
    b = None
    try:
        poll_until([a], lambda: a.assignment() == ALL, "a to hold all partitions")
        b = _listening_consumer(store, "b", events)
        for _ in range(5):
            assert not b.poll(timeout_ms=10)
        assert not b.assignment() and a.assignment() == ALL, "b took partitions before a revoked them"
        poll_until([a, b], lambda: a.assignment() and b.assignment(), "b to get partitions")
        shares = frozenset(a.assignment()), frozenset(b.assignment())
        events.append(("test", "closing b", frozenset()))
        b.close()
        b = None
        poll_until([a], lambda: a.assignment() == ALL, "a to take all back")
        events.append(("test", "done", frozenset()))  # a's close comes next
        return shares
    finally:
        a.close()
        if b is not None:
            b.close()


def test_rebalance_listener_order(store):
    produce(store, 5)
    events: list = []
    a_new, b_new = _listener_scenario(store, events)
    closing = events.index(("test", "closing b", frozenset()))
    done = events.index(("test", "done", frozenset()))
    # leave out what the tests below cover: eager revokes of nothing and the revokes on close
    seen = [e for i, e in enumerate(events[:done]) if e[2] and not (e[0] == "b" and i > closing) and e[0] != "test"]
    assert a_new | b_new == ALL and not a_new & b_new and a_new and b_new
    assert seen[:2] == [("a", "assigned", frozenset(ALL)),
                        ("a", "revoked", frozenset(ALL))]  # a stops and commits before anyone takes a partition
    assert sorted(seen[2:4]) == [("a", "assigned", a_new), ("b", "assigned", b_new)]
    assert seen[4:] == [("a", "revoked", a_new), ("a", "assigned", frozenset(ALL))]
    # the commits made inside on_partitions_revoked went in
    assert [e[1] for e in events[:done] if e[0] == "a" and "commit" in e[1]] == ["committed"] * 2


def test_rebalance_listener_revoked_on_close(store):
    events: list = []
    a_new, b_new = _listener_scenario(store, events)
    closing = events.index(("test", "closing b", frozenset()))
    assert [e for e in events[closing:] if e[0] == "b"] == [("b", "revoked", b_new), ("b", "committed", frozenset())]


def test_rebalance_listener_revoked_is_called_with_nothing_on_first_join(store):
    events: list = []
    a = _listening_consumer(store, "a", events)
    try:
        poll_until([a], lambda: a.assignment() == ALL, "a to hold all partitions")
        assert events == [("a", "revoked", frozenset()), ("a", "assigned", frozenset(ALL))]
    finally:
        a.close()


def _evict_in_process(store, events, **kw):
    """a stops calling poll; b keeps polling and, once a's heartbeat stops (max_poll_interval_ms) and its session
    times out, takes all partitions."""
    a = _listening_consumer(store, "a", events, **kw)
    b = _listening_consumer(store, "b", events, **kw)
    poll_until([a, b], lambda: a.assignment() and b.assignment(), "both to hold partitions")
    held = set(a.assignment())
    poll_until([b], lambda: b.assignment() == ALL, "b to take a's partitions after a stopped polling")
    return a, b, held


HUNG = dict(session_timeout_ms=1500, heartbeat_interval_ms=300, max_poll_interval_ms=1000)


def test_evicted_member_is_fenced_and_rejoins_at_its_next_poll(store):
    produce(store, 5)
    events: list = []
    a, b, held = _evict_in_process(store, events, **HUNG)
    try:
        assert [m["member_id"] for m in describe_group(store, GROUP)["members"]] == [b._member.member_id]
        with pytest.raises(CommitFailedError):
            a.commit({min(held): OffsetAndMetadata(1, "", None)})
        poll_until([a, b], lambda: a.assignment() and b.assignment() and len(describe_group(store, GROUP)["members"])
                   == 2 and describe_group(store, GROUP)["state"] == "Stable", "a to rejoin and get partitions")
        assert a.assignment() | b.assignment() == ALL and not a.assignment() & b.assignment()
        # and it stays in: a few more rounds of polling do not evict it again
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            a.poll(10)
            b.poll(10)
        assert a.assignment() and b.assignment() and len(describe_group(store, GROUP)["members"]) == 2
    finally:
        a.close()
        b.close()


def test_evicted_member_listener_hears_of_lost_partitions(store):
    events: list = []
    a, b, held = _evict_in_process(store, events, **HUNG)
    try:
        poll_until([a, b], lambda: a.assignment() and b.assignment(), "a to rejoin")
        mine = [e for e in events if e[0] == "a" and e[2]]
        assert mine[1][1] in ("lost", "revoked") and mine[1][2] == frozenset(held), mine
    finally:
        a.close()
        b.close()


def test_member_sees_a_state_change_that_keeps_inode_size_and_mtime(store):
    """state.json is replaced by rename, and the new file can get the inode number of the one it replaced: two
    writes within one tick of the file system clock, of the same size, look unchanged to a stat. A member must
    still see the change (here made in place, keeping inode, size and mtime)."""
    a = consumer(store)
    try:
        poll_until([a], lambda: a.assignment() == ALL, "a to hold all partitions")
        member = a._member
        path = member.path / "state.json"
        st = os.stat(path)
        state = json.loads(path.read_bytes())
        state["generation"] += 1  # a rebalance a missed would leave a's poll waiting on a stale generation
        state["synced"] = []
        state["stable"] = False
        raw = json.dumps(state, separators=(",", ":"), sort_keys=True).encode()
        pad = st.st_size - len(raw)  # the synced member id is gone: pad the list with blanks to the old size
        assert pad >= 0
        raw = raw.replace(b'"synced":[]', b'"synced":[' + b" " * pad + b"]", 1)
        assert len(raw) == st.st_size
        with open(path, "r+b") as f:
            f.write(raw)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_ino == st.st_ino
        # the new generation makes a revoke and sync; then it is stable again with a holding everything
        poll_until([a], lambda: describe_group(store, GROUP)["generation"] == state["generation"]
                   and describe_group(store, GROUP)["state"] == "Stable" and a.assignment() == ALL,
                   "a to notice the new generation and sync to it", timeout=10)
    finally:
        a.close()


# ---------------------------------------------------------------------------------------------------- processes

_WORKER = r"""
import json, os, sys, time
from kafkalog import KafkaConsumer
from kafkalog.errors import CommitFailedError

path, out, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ctl, name = cfg["ctl"], cfg["name"]
log = open(out, "w", buffering=1)  # line-buffered: every line is in the file before the next step
c = KafkaConsumer("t", store=path, group_id=cfg["group"], client_id=name, auto_offset_reset="earliest",
                  enable_auto_commit=False, **cfg["consumer"])

def flag(f):
    return os.path.exists(os.path.join(ctl, f))

def park():
    # holds its partitions without calling poll until the test says so (or kills it)
    open(os.path.join(ctl, name + ".parked"), "w").close()
    while not flag(name + ".wake"):
        time.sleep(0.01)
    log.write("W\n")

deadline = time.monotonic() + cfg.get("limit", 60)
polls = 0
while not flag("stop"):
    if time.monotonic() > deadline:
        log.write("TIMEOUT\n")
        sys.exit(3)
    recs = c.poll(timeout_ms=50)
    if not recs:
        continue
    for tp, rs in sorted(recs.items()):
        for r in rs:
            log.write("R %d %d %s\n" % (r.partition, r.offset, r.value.decode()))
    polls += 1
    time.sleep(cfg.get("work_ms", 0) / 1000.0)  # the app's work on the records, before it commits them
    if polls == cfg.get("park_before_commit"):
        park()
    try:
        c.commit()
        log.write("C\n")
    except CommitFailedError as e:
        log.write("F %s\n" % str(e).replace("\n", " "))
    if polls == cfg.get("park_after_commit"):
        park()
        try:
            c.commit()
            log.write("C\n")
        except CommitFailedError as e:
            log.write("F %s\n" % str(e).replace("\n", " "))
    if polls == cfg.get("leave_after") or flag(name + ".leave"):
        log.write("L\n")
        break
c.close()
log.write("E\n")
"""


class Worker:
    def __init__(self, tmp_path, data_dir, env, name, **cfg):
        self.name = name
        self.out = tmp_path / f"{name}.log"
        self.err = tmp_path / f"{name}.err"
        self.ctl = tmp_path / "ctl"
        self.ctl.mkdir(exist_ok=True)
        script = tmp_path / "worker.py"
        if not script.exists():
            script.write_text(_WORKER)
        cfg.setdefault("consumer", {})
        cfg.update(ctl=str(self.ctl), name=name, group=GROUP)
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, str(script), str(data_dir), str(self.out), json.dumps(cfg)],
                                         env=env, stdout=subprocess.DEVNULL, stderr=err)
        self.pid = self.proc.pid

    def lines(self):
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        lines = text.split("\n")
        return lines[:-1]  # the last piece has no newline yet (or is empty)

    def records(self):
        """[(partition, offset, value)] in the order consumed."""
        return [(int(p), int(o), v) for kind, p, o, v in (ln.split(" ", 3) for ln in self.lines()
                                                          if ln.startswith("R "))]

    def committed_records(self):
        """Records logged before this worker's last successful commit (all of them were committed)."""
        lines = self.lines()
        last = max((i for i, ln in enumerate(lines) if ln == "C"), default=-1)
        return [(int(p), int(o), v) for kind, p, o, v in (ln.split(" ", 3) for ln in lines[:last]
                                                          if ln.startswith("R "))]

    def parked(self):
        return (self.ctl / f"{self.name}.parked").exists()

    def wake(self):
        (self.ctl / f"{self.name}.wake").touch()

    def finish(self, timeout=WAIT_S):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {self.name} did not exit: {self.lines()[-5:]} {self.err.read_text()[-2000:]}")
        return self.proc.returncode

    def stderr(self):
        return self.err.read_text()[-3000:]

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def workers(tmp_path, data_dir, child_env):
    started = []

    def start(name, **cfg):
        w = Worker(tmp_path, data_dir, child_env, name, **cfg)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


def stop_all(tmp_path, live):
    (tmp_path / "ctl" / "stop").touch()
    for w in live:
        rc = w.finish()
        assert rc == 0, f"worker {w.name} exited {rc}: {w.lines()[-3:]}\n{w.stderr()}"
        assert w.lines()[-1] == "E", w.lines()[-3:]


def check_values(store, consumed):
    expected = on_disk(store)
    for p, o, v in consumed:
        assert expected[(p, o)] == v, f"record {p}/{o} was read as {v!r}, the log has {expected[(p, o)]!r}"
    return expected


def test_three_processes_share_partitions_exactly_once(store, workers, tmp_path):
    """Workers join one by one, then one leaves, while records keep coming faster than they are consumed (so every
    rebalance catches a member between a poll and its commit): with a commit after each poll and eager rebalancing,
    every record is consumed by exactly one worker."""
    for i in range(40):
        produce(store, 1, i)  # one-record batches: with max_partition_fetch_bytes=1 a poll takes one per partition
    work = {"consumer": {"max_poll_records": 6, "max_partition_fetch_bytes": 1}, "work_ms": 25}
    ws = [workers("w0", **work)]
    wait_for(lambda: ws[0].records(), "w0 to consume")
    ws.append(workers("w1", **work))
    ws.append(workers("w2", **work))
    n, rounds, phase = 40, 0, "joining"
    deadline = time.monotonic() + WAIT_S
    while phase != "done":
        produce(store, 1, n)
        n += 1
        rounds += 1
        time.sleep(0.02)
        if phase == "joining":
            by_pid = members_by_pid(store)
            if len(by_pid) == 3 and all(by_pid.values()):
                phase, rounds = "three", 0
        elif phase == "three" and rounds == 10:
            (tmp_path / "ctl" / "w2.leave").touch()
            phase = "leaving"
        elif phase == "leaving" and "L" in ws[2].lines():
            phase, rounds = "two", 0
        elif phase == "two" and rounds == 10:
            phase = "done"
        if time.monotonic() > deadline:
            pytest.fail(f"stuck in phase {phase}: {describe_group(store, GROUP)}")
    wait_for(lambda: all_committed(store), "the group to commit every partition's log end")
    stop_all(tmp_path, ws[:2])
    assert ws[2].finish() == 0 and ws[2].lines()[-2:] == ["L", "E"], ws[2].stderr()
    consumed = [r for w in ws for r in w.records()]
    expected = check_values(store, consumed)
    keys = [(p, o) for p, o, _ in consumed]
    dupes = {k for k in keys if keys.count(k) > 1}
    assert not dupes, f"consumed twice: {sorted(dupes)[:20]}"
    assert set(keys) == set(expected) and len(expected) == N_PARTS * n
    assert all(w.records() for w in ws), "every worker consumed something"


@pytest.mark.parametrize("phase,seed", [("after_commit", 11), ("before_commit", 22), ("anytime", 33),
                                        ("anytime", 44)])
def test_sigkilled_member_partitions_taken_over_without_loss(store, workers, tmp_path, phase, seed):
    """A member is SIGKILLed while holding partitions; its session timeout is 60 s, so the survivors can only be
    finishing within the 30 s cap because they saw its flock go. Everything is consumed at least once, and the only
    records consumed twice are the dead member's after its last commit."""
    rng = random.Random(seed)
    victim = rng.randrange(3)
    cfg = {"consumer": {"max_poll_records": 10, "session_timeout_ms": 60000}, "work_ms": 5}
    park = {"after_commit": "park_after_commit", "before_commit": "park_before_commit"}.get(phase)
    ws = [workers(f"w{i}", **cfg, **({park: rng.randint(1, 4)} if park and i == victim else {}))
          for i in range(3)]
    wait_for(lambda: len(members_by_pid(store)) == 3 and describe_group(store, GROUP)["state"] == "Stable"
             and all(members_by_pid(store).values()), "three workers to hold partitions")
    produce(store, 100)
    v = ws[victim]
    if park:
        wait_for(v.parked, f"{v.name} to reach its kill point")
    else:
        k = rng.randint(5, 60)
        wait_for(lambda: len(v.records()) >= k, f"{v.name} to consume {k} records")
    held = members_by_pid(store).get(v.pid)
    os.kill(v.pid, signal.SIGKILL)
    assert v.proc.wait(timeout=WAIT_S) == -signal.SIGKILL
    assert held, f"{v.name} held no partitions when killed"
    assert v.pid not in members_by_pid(store), "describe_group still lists the killed member"
    survivors = [w for i, w in enumerate(ws) if i != victim]
    wait_for(lambda: all_committed(store), "the survivors to consume and commit the dead member's partitions")
    assert set(members_by_pid(store)) == {w.pid for w in survivors}
    stop_all(tmp_path, survivors)

    theirs = [r for w in survivors for r in w.records()]
    mine = v.records()
    expected = check_values(store, theirs + mine)
    keys = [(p, o) for p, o, _ in theirs]
    assert len(keys) == len(set(keys)), "survivors consumed a record twice"
    assert set(keys) | {(p, o) for p, o, _ in mine} == set(expected), "records lost"
    committed = {(p, o) for p, o, _ in v.committed_records()}
    assert not committed & set(keys), "survivors re-read records the dead member had committed"
    uncommitted = {(p, o) for p, o, _ in mine} - committed
    if phase == "before_commit":
        assert uncommitted, "the victim died before committing its last poll"
        assert uncommitted <= set(keys), "the dead member's uncommitted records were not consumed again"
    if phase == "after_commit":
        assert not uncommitted
    assert {(p, o) for p, o in expected} - {(p, o) for p, o, _ in mine} <= set(keys)


@pytest.mark.parametrize("how", ["stops_polling", "sigstop"])
def test_hung_member_is_evicted_and_rejoins(store, workers, tmp_path, how):
    """A member stops polling (its heartbeat thread stops after max_poll_interval_ms) or is SIGSTOPped: after the
    session timeout the others take its partitions. Woken, its commit is fenced and its next poll joins again."""
    consumer_cfg = {"max_poll_records": 10, "session_timeout_ms": 2500, "heartbeat_interval_ms": 250}
    if how == "stops_polling":
        consumer_cfg["max_poll_interval_ms"] = 1500
    ws = [workers(f"w{i}", consumer=consumer_cfg, **({"park_after_commit": 1} if i == 2 else {}))
          for i in range(3)]
    hung = ws[2]
    wait_for(lambda: len(members_by_pid(store)) == 3 and describe_group(store, GROUP)["state"] == "Stable"
             and all(members_by_pid(store).values()), "three workers to hold partitions")
    produce(store, 40)
    wait_for(hung.parked, "the hung worker to take records and park")
    held = members_by_pid(store).get(hung.pid)
    assert held
    if how == "sigstop":
        os.kill(hung.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: set(members_by_pid(store)) == {ws[0].pid, ws[1].pid}, "the hung member to be evicted")
        wait_for(lambda: all_committed(store), "the others to consume the hung member's partitions")
        by_pid = members_by_pid(store)
        assert by_pid[ws[0].pid] | by_pid[ws[1].pid] == ALL
    finally:
        if how == "sigstop":
            os.kill(hung.pid, signal.SIGCONT)
    hung.wake()
    wait_for(lambda: "W" in hung.lines() and hung.lines()[-1] != "W", "the woken worker to try its commit")
    after = hung.lines()[hung.lines().index("W") + 1]
    assert after.startswith("F "), f"an evicted member's commit went through: {after!r}"
    wait_for(lambda: len(members_by_pid(store)) == 3 and describe_group(store, GROUP)["state"] == "Stable"
             and all(members_by_pid(store).values()), "the woken worker to rejoin and get partitions")
    got_before = len(hung.records())
    produce(store, 40, 40)
    wait_for(lambda: all_committed(store), "the group to consume the second round")
    assert hung.pid in members_by_pid(store)
    stop_all(tmp_path, ws)
    consumed = [r for w in ws for r in w.records()]
    expected = check_values(store, consumed)
    keys = [(p, o) for p, o, _ in consumed]
    assert set(keys) == set(expected), "records lost"
    assert len(keys) == len(set(keys)), "a record was consumed twice (the hung member had committed its poll)"
    assert len(hung.records()) > got_before, "the rejoined worker consumed nothing"


def test_committed_offsets_survive_all_consumers_closing(data_dir, workers, tmp_path):
    with LogStore(data_dir, maintenance=False) as s:
        s.create_topic(TOPIC, N_PARTS)
        produce(s, 25)
    w = workers("first", consumer={"max_poll_records": 9}, leave_after=5)
    assert w.finish() == 0, w.stderr()
    first = {(p, o) for p, o, _ in w.records()}
    assert len(first) == 45 and w.lines()[-2:] == ["L", "E"]
    # a new store object and a new consumer: positions come from __consumer_offsets alone
    with LogStore(data_dir, maintenance=False) as s:
        c = consumer(s)
        try:
            for p in range(N_PARTS):
                done = [o for q, o in first if q == p]
                assert c.committed(TopicPartition(TOPIC, p)) == (max(done) + 1 if done else None)
            got: dict = {}
            poll_until([c], lambda: sum(len(v) for v in got.values()) >= 6 * 25 - 45, "the rest of the records",
                       sink=got)
            for _ in range(5):
                assert not c.poll(timeout_ms=20), "records beyond the log end"
            second = got.get(c, [])
            assert len(second) == len(set(second)) and not set(second) & first
            assert set(second) | first == set(on_disk(s))
        finally:
            c.close()


def test_describe_group_members_assignment_and_a_killed_member(store, workers):
    a = consumer(store, client_id="here")
    try:
        w = workers("there")
        poll_until([a], lambda: len(describe_group(store, GROUP)["members"]) == 2 and a.assignment()
                   and describe_group(store, GROUP)["state"] == "Stable", "two members, stable")
        d = describe_group(store, GROUP)
        assert d["group_id"] == GROUP and d["protocol"] == "range"
        ids = [m["member_id"] for m in d["members"]]
        assert d["leader"] in ids and len(set(ids)) == 2
        by_pid = {m["pid"]: m for m in d["members"]}
        assert set(by_pid) == {os.getpid(), w.pid}
        assert by_pid[os.getpid()]["client_id"] == "here" and by_pid[w.pid]["client_id"] == "there"
        assert all(m["topics"] == [TOPIC] for m in d["members"])
        mine, theirs = set(by_pid[os.getpid()]["assignment"]), set(by_pid[w.pid]["assignment"])
        assert mine == a.assignment() and mine | theirs == ALL and not mine & theirs and len(mine) == 3
        generation = d["generation"]
        w.kill()
        # nobody has polled since: describe_group itself sees the freed flock
        d = describe_group(store, GROUP)
        assert [m["pid"] for m in d["members"]] == [os.getpid()]
        poll_until([a], lambda: a.assignment() == ALL, "the survivor to take all partitions")
        d = describe_group(store, GROUP)
        assert d["state"] == "Stable" and d["generation"] > generation
        assert [sorted(m["assignment"]) for m in d["members"]] == [sorted(ALL)]
    finally:
        a.close()
    d = describe_group(store, GROUP)
    assert d["state"] == "Empty" and d["members"] == []
