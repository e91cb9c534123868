"""One store, two doors (issue 4, item 5): groups and offsets committed over the wire are what the embedded
KafkaConsumer sees and the reverse; a group can mix wire members and embedded members; read-only tools and
embedded consumers work beside a running broker."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import types

import pytest

import kafkalog
from kafkalog.broker import Broker
from kafkalog.structs import OffsetAndMetadata, TopicPartition

from .wire import Wire

kafka = pytest.importorskip("kafka")

CONFIG = {"group.initial.rebalance.delay.ms": 0, "auto.create.topics.enable": False}
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "max_poll_interval_ms": 30000,
        "request_timeout_ms": 31000}


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data", listen="127.0.0.1:0", config=CONFIG)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _produce(b, topic, partitions, per_partition):
    with Wire(b.port) as w:
        assert w.create_topic(topic, partitions)["error_code"] == 0
    from .wire import batch
    with Wire(b.port) as w:
        for p in range(partitions):
            assert w.produce(topic, p, batch([b"%s-%d-%d" % (topic.encode(), p, i) for i in range(per_partition)]))[
                "error_code"] == 0


def test_offsets_committed_over_the_wire_are_seen_embedded_and_back(broker, child_env):
    _produce(broker, "t", 2, 5)
    c = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id="g", enable_auto_commit=False,
                            **FAST)
    try:
        c.assign([kafka.TopicPartition("t", 0), kafka.TopicPartition("t", 1)])
        c.commit({kafka.TopicPartition("t", 0): kafka.structs.OffsetAndMetadata(3, "wire", -1)})
        # the embedded door, in another process's view of the same data dir
        emb = kafkalog.KafkaConsumer(store=broker.data_dir, group_id="g", enable_auto_commit=False)
        try:
            assert emb.committed(TopicPartition("t", 0)) == 3
            assert emb.committed(TopicPartition("t", 0), metadata=True).metadata == "wire"
            emb.assign([TopicPartition("t", 1)])
            emb.commit({TopicPartition("t", 1): OffsetAndMetadata(4, "embedded", None)})
        finally:
            emb.close()
        got = c.committed(kafka.TopicPartition("t", 1), metadata=True)
        assert (got.offset, got.metadata) == (4, "embedded")
    finally:
        c.close()
    out = subprocess.run([sys.executable, "-m", "kafkalog", "groups", str(broker.data_dir), "g", "--json"],
                         capture_output=True, text=True, timeout=60, env=child_env)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    committed = {(p["topic"], p["partition"]): p["committed"] for p in row["partitions"]}
    assert committed == {("t", 0): 3, ("t", 1): 4}


def test_a_group_mixes_wire_and_embedded_members(broker, wait_for):
    _produce(broker, "mix", 4, 3)
    stop = threading.Event()
    seen_embedded: list = []
    errors: list = []

    def embedded_member():
        try:
            emb = kafkalog.KafkaConsumer("mix", store=broker.data_dir, group_id="mixed", auto_offset_reset="earliest",
                                         session_timeout_ms=6000, heartbeat_interval_ms=300)
            try:
                while not stop.is_set():
                    emb.poll(timeout_ms=100)
                    seen_embedded.append(sorted(tp.partition for tp in emb.assignment()))
            finally:
                emb.close()
        except Exception as e:  # surfaced by the assertions below
            errors.append(e)

    wire = kafka.KafkaConsumer("mix", bootstrap_servers=broker.bootstrap_servers, group_id="mixed",
                               auto_offset_reset="earliest", **FAST)
    t = threading.Thread(target=embedded_member, daemon=True)
    try:
        wait_for(lambda: (wire.poll(timeout_ms=100), wire.assignment())[1], timeout=30,
                 what="wire member assignment")
        assert sorted(tp.partition for tp in wire.assignment()) == [0, 1, 2, 3]
        t.start()

        def split():
            wire.poll(timeout_ms=100)
            mine = sorted(tp.partition for tp in wire.assignment())
            theirs = seen_embedded[-1] if seen_embedded else []
            return len(mine) == 2 and len(theirs) == 2 and sorted(mine + theirs) == [0, 1, 2, 3]
        wait_for(split, timeout=30, what="the two doors to split 4 partitions 2/2")
        state = kafkalog.client.group.describe_group(kafkalog.LogStore(broker.data_dir, read_only=True), "mixed")
        assert state["state"] == "Stable" and len(state["members"]) == 2
    finally:
        wire.close()  # LeaveGroup: the embedded member takes everything
    try:
        wait_for(lambda: seen_embedded and seen_embedded[-1] == [0, 1, 2, 3], timeout=30,
                 what="embedded member to take all")
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors


def test_two_wire_members_split_and_rebalance_on_leave(broker, wait_for):
    _produce(broker, "two", 4, 2)
    a = kafka.KafkaConsumer("two", bootstrap_servers=broker.bootstrap_servers, group_id="g2",
                            auto_offset_reset="earliest", **FAST)
    b = kafka.KafkaConsumer("two", bootstrap_servers=broker.bootstrap_servers, group_id="g2",
                            auto_offset_reset="earliest", **FAST)
    try:
        def split():
            a.poll(timeout_ms=50)
            b.poll(timeout_ms=50)
            pa = {tp.partition for tp in a.assignment()}
            pb = {tp.partition for tp in b.assignment()}
            return len(pa) == 2 and len(pb) == 2 and pa | pb == {0, 1, 2, 3}
        wait_for(split, timeout=30, what="2/2 split")
    finally:
        b.close()
    try:
        wait_for(lambda: (a.poll(timeout_ms=50), {tp.partition for tp in a.assignment()} == {0, 1, 2, 3})[1],
                 timeout=30, what="the remaining member to take all partitions")
    finally:
        a.close()


def test_wire_member_refused_without_a_common_assignor(broker):
    _produce(broker, "st", 1, 1)
    # the group runs on the group model (an embedded range member): a cooperative-sticky-only member has no
    # assignor in common with it
    emb = kafkalog.KafkaConsumer("st", store=broker.data_dir, group_id="gs", session_timeout_ms=10000)
    emb.poll(timeout_ms=100)
    assert emb.assignment()
    with emb, Wire(broker.port) as w:
        from kafkalog.broker import protocol
        meta = protocol.encode_subscription(["st"])
        r = w.call(11, 5, {"group_id": "gs", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                           "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                           "protocols": [{"name": "cooperative-sticky", "metadata": meta}]})
        assert r["error_code"] == 79  # KIP-394 first
        r = w.call(11, 5, {"group_id": "gs", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                           "member_id": r["member_id"], "group_instance_id": None, "protocol_type": "consumer",
                           "protocols": [{"name": "cooperative-sticky", "metadata": meta}]})
        assert r["error_code"] == 23
        r = w.call(11, 5, {"group_id": "gs", "session_timeout_ms": 10, "rebalance_timeout_ms": 10000,
                           "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                           "protocols": [{"name": "range", "metadata": meta}]})
        assert r["error_code"] == 26  # session timeout below group.min.session.timeout.ms
        hb = w.call(12, 3, {"group_id": "gs", "generation_id": 1, "member_id": "nobody", "group_instance_id": None})
        assert hb["error_code"] == 25
        oc = w.call(8, 3, {"group_id": "gs", "generation_id_or_member_epoch": 5, "member_id": "nobody",
                           "retention_time_ms": -1, "topics": [{"name": "st", "partitions": [
                               {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
        assert oc["topics"][0]["partitions"][0]["error_code"] == 25


def test_read_only_tools_beside_the_running_broker(broker, child_env, wait_for):
    _produce(broker, "ro", 1, 4)
    data = str(broker.data_dir)
    out = subprocess.run([sys.executable, "-m", "kafkalog", "consume", data, "ro", "--from-beginning"],
                         capture_output=True, text=True, timeout=60, env=child_env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"ro-0-{i}" for i in range(4)]
    out = subprocess.run([sys.executable, "-m", "kafkalog", "offsets", data, "ro", "--time", "latest", "--json"],
                         capture_output=True, text=True, timeout=60, env=child_env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"topic": "ro", "partition": 0, "offset": 4, "timestamp": -1}]
    out = subprocess.run([sys.executable, "-m", "kafkalog", "dump", str(broker.data_dir / "ro-0")],
                         capture_output=True, text=True, timeout=60, env=child_env)
    assert out.returncode == 0, out.stderr
    emb = kafkalog.KafkaConsumer("ro", store=broker.data_dir, auto_offset_reset="earliest")
    try:
        got = []
        def four():
            got.extend(r.value for rs in emb.poll(timeout_ms=100).values() for r in rs)
            return len(got) == 4
        wait_for(four, timeout=30, what="4 records")
        assert got == [b"ro-0-%d" % i for i in range(4)]
    finally:
        emb.close()


def _bench_heartbeats():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "bench" / "heartbeats.py"
    bench_dir = str(path.parent)
    if bench_dir not in sys.path:
        sys.path.insert(0, bench_dir)
    spec = importlib.util.spec_from_file_location("bench_heartbeats", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("members", [40, 120])
def test_a_wire_groups_liveness_costs_no_file_probe_for_the_brokers_own_members(broker, monkeypatch, members):
    """The broker holds every wire member of a classic consumer group as a member of the store's group (the one the
    embedded consumers join): each member's periodic check probed every member's lock file, members² opens and
    flocks a tenth of a second (1,000 members: 1,166 us of broker CPU a heartbeat). The broker's own members are
    judged by their heartbeats in memory and one look a period serves every member: a group formed and heartbeating
    (bench/heartbeats.py's raw clients) costs no probe at all, and state.json is parsed once a change, not once a
    member."""
    import asyncio
    import time

    from kafkalog.broker import protocol
    from kafkalog.client import group as groupmod
    hb = _bench_heartbeats()
    probes, parses = [], []
    real_probe, real_read = groupmod.lock_holder_alive, groupmod.read_state
    monkeypatch.setattr(groupmod, "lock_holder_alive", lambda *a, **k: probes.append(a[0]) or real_probe(*a, **k))
    monkeypatch.setattr(groupmod, "read_state", lambda *a: parses.append(1) or real_read(*a))
    rounds = 6

    async def run():
        await hb.create_topic(broker.port, protocol, "live", 8)
        return await hb.classic(broker.port, protocol, "live", 8, members, rounds, time.process_time)

    res = asyncio.run(run())
    assert res["assigned"] == 8
    assert probes == []  # the old code: each member's check opened every member's lock file
    # each join and sync reads the state fresh under the group lock (a few a member); the members' own refreshes
    # share one parse a change (the old code: each member parsed every change, members² for the group to form)
    assert len(parses) <= 6 * members, (len(parses), res["join_rounds"])


@pytest.mark.parametrize("members", [60, 150])
def test_members_joining_together_are_one_generation_and_one_write_of_the_group(broker, monkeypatch, members):
    """Issue 24: a consumer group of raw wire members forming (bench/heartbeats.py's clients: every member joins at
    once, the KIP-394 round included). Each JoinGroup and each SyncGroup was a locked read-modify-write of the
    group's state.json (O(members) each) and each join a new generation: N generations and 2N writes to form
    (1,000 members: 39 s, Apache Kafka 1.1 s). The joins that arrive together are one join phase, written once with
    one new generation, and a SyncGroup writes nothing (the phase marked its members synced): a handful of
    generations and as many writes, whatever the group's size. Counted, not timed."""
    import asyncio
    import time

    from kafkalog.broker import protocol
    from kafkalog.client import group as groupmod
    hb = _bench_heartbeats()
    writes = []
    real_write = groupmod._write_state
    monkeypatch.setattr(groupmod, "_write_state",
                        lambda path, state: writes.append(state["generation"]) or real_write(path, state))

    async def run():
        await hb.create_topic(broker.port, protocol, "together", 8)
        return await hb.classic(broker.port, protocol, "together", 8, members, 1, time.process_time)

    res = asyncio.run(run())
    assert res["assigned"] == 8
    # one generation when every join comes within the initial delay's extension; a member late by a poll of the
    # join phase (a loaded machine) makes a second phase; the old code: one generation a member
    assert res["generation"] <= 4, res
    assert len(writes) <= res["generation"] + 2, (writes, res)
    state = groupmod.read_state(groupmod.group_dir(broker.data_dir, next(
        g for g in groupmod.known_groups(broker.data_dir) if g.startswith("hbc-"))))
    assert len(state["members"]) == members and state["stable"] and state["generation"] == res["generation"]


LINES = 8  # the embedded member's assignments after the wire members come: revoked, then its share (an
# intermediate generation adds two)


def _line(child, guard_s: float = 30.0) -> str:
    """The child's next line (a failure guard, not a bound: it prints within a poll of each change)."""
    import select
    if not select.select([child.stdout], [], [], guard_s)[0]:
        raise TimeoutError("the embedded member printed nothing")
    return child.stdout.readline().strip()


_EMBEDDED_MEMBER = """
import sys, kafkalog
c = kafkalog.KafkaConsumer(sys.argv[3], store=sys.argv[1], group_id=sys.argv[2], session_timeout_ms=6000,
                           heartbeat_interval_ms=200)
last = None
while True:
    c.poll(timeout_ms=50)
    mine = sorted(tp.partition for tp in c.assignment())
    if mine != last:
        print(" ".join(map(str, mine)) or "-", flush=True)
        last = mine
"""


def test_wire_members_joining_together_beside_an_embedded_member_of_another_process(broker, child_env, monkeypatch,
                                                                                     wait_for):
    """The phase's one write goes through the shared state.json under the group lock: an embedded consumer in
    another process, already a member, keeps its place; it rebalances with the forty wire members that join at once
    (it revokes and syncs itself, the wire members' SyncGroups wait for it), and the generation's assignment covers
    every partition once, its share included."""
    import asyncio
    import time

    from kafkalog.broker import protocol
    from kafkalog.client import group as groupmod
    hb = _bench_heartbeats()
    with Wire(broker.port) as w:
        assert w.create_topic("beside", 64)["error_code"] == 0
    child = subprocess.Popen([sys.executable, "-c", _EMBEDDED_MEMBER, str(broker.data_dir), "hbc-beside", "beside"],
                             stdout=subprocess.PIPE, text=True, env=child_env)
    try:
        assert _line(child) == " ".join(str(p) for p in range(64))  # alone: all 64
        path = groupmod.group_dir(broker.data_dir, "hbc-beside")
        before = groupmod.read_state(path)["generation"]
        writes = []
        real_write = groupmod._write_state
        monkeypatch.setattr(groupmod, "_write_state",
                            lambda p, state: writes.append(state["generation"]) or real_write(p, state))
        monkeypatch.setattr(hb, "uuid", types.SimpleNamespace(uuid4=lambda: types.SimpleNamespace(hex="beside")))

        async def run():
            return await hb.classic(broker.port, protocol, "beside", 64, 40, 1, time.process_time)

        res = asyncio.run(run())
        state = wait_for(lambda: (s := groupmod.read_state(path))["stable"] and s, timeout=30, what="a stable group")
        assert len(state["members"]) == 41 and state["generation"] == res["generation"]
        owned = sorted((t, p) for tps in state["assignment"].values() for t, p in tps)
        assert owned == [("beside", p) for p in range(64)]
        embedded = [m for m, info in state["members"].items() if info["pid"] == child.pid]
        assert len(embedded) == 1 and state["assignment"][embedded[0]]
        share = " ".join(str(p) for _, p in sorted(state["assignment"][embedded[0]]))
        seen: list[str] = []  # what it held at each change (revoked: "-"), up to its share of this generation
        while share not in seen and len(seen) < LINES:
            seen.append(_line(child))
        assert share in seen, (share, seen)
        assert res["generation"] - before <= 4 and len(writes) <= res["generation"] - before + 2, (before, res, writes)
    finally:
        child.kill()
        child.wait(30)


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_members_leaving_together_are_one_generation_and_one_write_of_the_group(tmp_path, monkeypatch, assignor):
    """Thirty members of a formed group, twenty-nine of them leave at once (LeaveGroup v5, pipelined): the leaves
    are Kafka's PreparingRebalance (the remaining member's Heartbeat answers REBALANCE_IN_PROGRESS, it joins again)
    and one write of state.json with one new generation removes them all; the old code wrote the group (O(members))
    and made a generation for each leave (range: the group model), or wrote it for each leave (cooperative-sticky:
    the classic coordinator's published view). Counted, not timed; the initial delay (0.3 s) gathers the formation
    into one phase."""
    from kafkalog.broker import classic as classicmod
    from kafkalog.broker import protocol
    from kafkalog.client import group as groupmod
    b = Broker(tmp_path / "data", listen="127.0.0.1:0", config=dict(CONFIG, **{
        "group.initial.rebalance.delay.ms": 300}))
    b.start()
    n = 30
    ws = [Wire(b.port, client_id=f"leaver-{i}") for i in range(n)]
    try:
        assert ws[0].create_topic("apart", 8)["error_code"] == 0
        sub = protocol.encode_subscription(["apart"])

        def join(member_id):
            return {"group_id": "apart", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                    "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer", "reason": None,
                    "protocols": [{"name": assignor, "metadata": sub}]}

        def answers(key, version):
            return [protocol.decode_response(key, version, w.recv_frame())[1] for w in ws]
        for w in ws:
            w.send(11, 9, join(""))
        ids = [r["member_id"] for r in answers(11, 9)]
        for w, mid in zip(ws, ids):
            w.send(11, 9, join(mid))
        joined = answers(11, 9)
        assert {r["error_code"] for r in joined} == {0} and len({r["generation_id"] for r in joined}) == 1
        gen = joined[0]["generation_id"]
        writes = []
        real_write = groupmod._write_state
        for module in (groupmod, classicmod):
            monkeypatch.setattr(module, "_write_state",
                                lambda p, state: writes.append(state["generation"]) or real_write(p, state))
        for w, mid in zip(ws[1:], ids[1:]):
            w.send(13, 5, {"group_id": "apart", "members": [{"member_id": mid, "group_instance_id": None,
                                                             "reason": "done"}]})
        for w in ws[1:]:
            assert protocol.decode_response(13, 5, w.recv_frame())[1]["error_code"] == 0
        hb = ws[0].call(12, 4, {"group_id": "apart", "generation_id": gen, "member_id": ids[0],
                                "group_instance_id": None})
        assert hb["error_code"] == 27  # PreparingRebalance: join again
        r = ws[0].call(11, 9, join(ids[0]))
        assert (r["error_code"], r["generation_id"], [m["member_id"] for m in r["members"]]) == (0, gen + 1, [ids[0]])
        state = groupmod.read_state(groupmod.group_dir(b.data_dir, "apart"))
        assert list(state["members"]) == [ids[0]] and state["generation"] == gen + 1
        assert writes == [gen + 1]
    finally:
        for w in ws:
            w.close()
        b.stop()
