"""Parallel rebalance (seed 003) with real SIGKILLs: the seed's example, a crash of the gap consumer, a further
crash of the primary, and random kill sequences where no offset of a gap may ever be skipped."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import kafkalog
from kafkalog import KafkaConsumer, TopicPartition
from kafkalog.client.parallel import child_group, merge_ranges, trim_ranges
from kafkalog.errors import InvalidConfigError

TP = TopicPartition("t", 0)

# A consumer process: consumes with parallel rebalance, logs every offset it got (before committing it) to OUT,
# commits what it consumed when it reaches each offset listed in COMMIT_AT (or every poll with 'each'), writes
# READY when its position reached STOP_AT, then waits to be killed.
_WORKER = r"""
import json, os, sys, time, kafkalog
from kafkalog import TopicPartition
path, out, commit_at, stop_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
each = commit_at == "each"
commit_at = set() if each else {int(x) for x in commit_at.split(",") if x}
tp = TopicPartition("t", 0)
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
c = kafkalog.KafkaConsumer("t", store=path, group_id="g", enable_parallel_rebalance=True,
                           auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=5)
ready = False
while True:
    batch = c.poll(timeout_ms=50)
    offs = [r.offset for rs in batch.values() for r in rs]
    if offs:
        os.write(fd, ("".join("%d\n" % o for o in offs)).encode())
    if each and offs:
        c.commit()
    elif c.assignment() and c.position(tp) in commit_at:
        commit_at.discard(c.position(tp))
        c.commit()
    if not ready and c.assignment() and c.position(tp) >= stop_at and not c._parallel.has_work():
        with open(out + ".ready", "w") as f:
            json.dump({"position": c.position(tp), "alive": c.child_consumer_is_alive(),
                       "committed": c.committed(tp)}, f)
        ready = True
"""


def consumed(path):
    try:
        return [int(x) for x in open(path).read().split()]
    except FileNotFoundError:
        return []


def wait_for(pred, what, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def env(data_dir, child_env, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    with kafkalog.LogStore(data_dir, maintenance=False) as s:
        s.create_topic("t", 1)
    procs = []

    def start(name, commit_at, stop_at):
        out = tmp_path / f"{name}.txt"
        p = subprocess.Popen([sys.executable, str(script), str(data_dir), str(out), commit_at, str(stop_at)],
                             env=child_env, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p, out

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def append(data_dir, n):
    with kafkalog.LogStore(data_dir, maintenance=False) as s:
        log = s.log("t", 0)
        log.append_batch([b"%d" % i for i in range(log.log_end_offset, log.log_end_offset + n)])
        return log.log_end_offset


def kill(p, out):
    wait_for(lambda: os.path.exists(str(out) + ".ready") or p.poll() is not None, "worker ready")
    assert p.poll() is None, p.stderr.read()[-3000:]
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)


def test_ranges_helpers():
    assert merge_ranges([[5, 9], [0, 3], [3, 4], [8, 12], [20, 20]]) == [[0, 4], [5, 12]]
    assert trim_ranges([[0, 4], [5, 12]], 6) == [[6, 12]]
    assert trim_ranges([[0, 4], [5, 12]], 12) == []


def test_needs_a_group(data_dir):
    with pytest.raises(InvalidConfigError, match="group_id"):
        KafkaConsumer(store=data_dir, enable_parallel_rebalance=True)


def test_seed_example_crash_at_100_committed_70_log_end_120(env, data_dir):
    """The seed's example: the first consumer crashes at 100 with 70 committed; at recovery the log ends at 120.
    The recovered consumer starts at 120 at once; the child processes [70, 120) in parallel; committed() is the
    child's offset until its range is done, then the primary's."""
    append(data_dir, 100)
    p, out = env("first", "70", 100)
    kill(p, out)
    assert max(consumed(out)) == 99
    append(data_dir, 20)  # the log grew to 120 while the consumer was down
    c = KafkaConsumer("t", store=data_dir, group_id="g", enable_parallel_rebalance=True,
                      auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=10)
    first = c.poll(timeout_ms=5000)  # joins, detects the crash, splits the work
    assert c.position(TP) >= 120 and c.child_consumer_is_alive()
    assert c.committed(TP) == 70  # the child's: everything below it is checkpointed
    got = [r.offset for rs in first.values() for r in rs]
    append(data_dir, 10)
    end = time.monotonic() + 30
    while len(got) < 60 and time.monotonic() < end:
        got += [r.offset for rs in c.poll(timeout_ms=100).values() for r in rs]
    assert sorted(got) == list(range(70, 130))  # each once: 70..119 from the child, 120.. from the primary
    assert got != sorted(got) or got[0] == 70  # interleaved records are allowed (no order guarantee)
    c.commit()
    assert c.committed(TP) == 130  # child done: the primary's offset
    assert c.child_consumer_is_alive()  # on standby
    c.close()
    with kafkalog.LogStore(data_dir, maintenance=False) as s:
        token = s.offsets.committed(child_group("g"), TP)
        assert json.loads(token.metadata)["ranges"] == []


def test_child_crash_resumes_inside_its_range_and_second_primary_crash_adds_a_range(env, data_dir):
    append(data_dir, 100)
    p, out = env("a", "40", 100)
    kill(p, out)  # committed 40, crashed at 100
    append(data_dir, 50)  # log end 150 at recovery: gap [40, 150)
    # b takes over: commits after each poll, so both the child's token and the primary's offset move
    p, out_b = env("b", "each", 170)
    wait_for(lambda: len(set(consumed(out_b)) & set(range(40, 150))) >= 30, "child progress")
    append(data_dir, 30)  # 150..179 for b's primary
    wait_for(lambda: max(consumed(out_b), default=0) >= 160, "primary progress")
    os.kill(p.pid, signal.SIGKILL)  # both of b's consumers crash mid-way
    p.wait(timeout=30)
    with kafkalog.LogStore(data_dir, maintenance=False) as s:
        token = s.offsets.committed(child_group("g"), TP)
        primary = s.offsets.committed("g", TP).offset
    ranges = json.loads(token.metadata)["ranges"]
    append(data_dir, 20)  # log end 200
    c = KafkaConsumer("t", store=data_dir, group_id="g", enable_parallel_rebalance=True,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    got = [r.offset for rs in c.poll(timeout_ms=5000).values() for r in rs]
    assert c.position(TP) >= 200 - (0 if primary < 200 else 0)
    expect = set()
    for lo, hi in merge_ranges([*ranges, [primary, 200]]):
        expect |= set(range(lo, hi))
    end = time.monotonic() + 30
    while not expect <= set(got) and time.monotonic() < end:
        got += [r.offset for rs in c.poll(timeout_ms=100).values() for r in rs]
    assert expect <= set(got)
    # nothing below the child's committed offset was re-read: the child resumed inside its range
    if ranges:
        assert min(got) >= ranges[0][0]
    all_seen = set(consumed(out)) | set(consumed(out_b)) | set(got)
    assert all_seen >= set(range(0, 200))
    c.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_kills_never_skip_an_offset(env, data_dir, seed):
    """Workers are SIGKILLed at random points while the log grows; a final consumer catches up. Every offset of the
    log was delivered at least once in total (at-least-once across any sequence of crashes)."""
    rnd = random.Random(seed)
    append(data_dir, 50)
    outs = []
    for round_ in range(4):
        p, out = env(f"w{round_}", "each", 0)
        outs.append(out)
        wait_for(lambda: os.path.exists(str(out) + ".ready"), "worker took the partition")  # noqa: B023
        time.sleep(rnd.uniform(0.05, 0.6))
        append(data_dir, rnd.randint(5, 60))
        time.sleep(rnd.uniform(0.0, 0.3))
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    leo = append(data_dir, 10)
    c = KafkaConsumer("t", store=data_dir, group_id="g", enable_parallel_rebalance=True,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    got = set()
    seen = set().union(*(set(consumed(o)) for o in outs))
    end = time.monotonic() + 60
    while not (seen | got) >= set(range(leo)) and time.monotonic() < end:
        got |= {r.offset for rs in c.poll(timeout_ms=100).values() for r in rs}
    assert c.child_consumer_is_alive()  # the last worker died with offsets behind the log end: a gap was split off
    missing = sorted(set(range(leo)) - seen - got)
    assert not missing, f"offsets never delivered: {missing[:20]}"
    c.commit()
    c.close()


# A consumer that takes over after a crash and then, with its child still draining the gap, does what an app does:
# commits its position explicitly, auto-commits, or pauses and resumes; it writes READY and waits to be killed.
_TAKEOVER = r"""
import json, os, sys, time, kafkalog
from kafkalog import TopicPartition
from kafkalog.structs import OffsetAndMetadata
path, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
tp = TopicPartition("t", 0)
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
c = kafkalog.KafkaConsumer("t", store=path, group_id="g", enable_parallel_rebalance=True, max_poll_records=1,
                           auto_offset_reset="earliest", enable_auto_commit=mode == "auto-commit",
                           auto_commit_interval_ms=20)
def poll():
    offs = [r.offset for rs in c.poll(timeout_ms=50).values() for r in rs]
    if offs:
        os.write(fd, ("".join("%d\n" % o for o in offs)).encode())
while not c.assignment():
    poll()
assert c.child_consumer_is_alive()
if mode == "commit-position":
    c.commit({tp: OffsetAndMetadata(c.position(tp), "", None)})  # the primary's position: L, the gap's upper bound
elif mode == "auto-commit":
    for _ in range(5):
        poll()
        time.sleep(0.03)
elif mode == "pause-resume":
    c.pause(tp)
    for _ in range(3):
        poll()
    c.resume(tp)
    poll()
    c.commit()
open(out + ".ready", "w").write(json.dumps({"position": c.position(tp)}))
time.sleep(600)
"""


@pytest.mark.parametrize("mode", ["commit-position", "auto-commit", "pause-resume"])
def test_a_takeover_that_commits_with_its_child_running_never_loses_the_gap(env, data_dir, tmp_path, child_env,
                                                                            mode):
    """Issue 10, defect 12: right after a takeover the primary's position is the gap's upper bound L; committing it
    (explicitly, by auto-commit, or around a pause) must not empty the child's token, so a crash before the child
    is done still delivers the rest of [committed, L)."""
    append(data_dir, 120)
    p, out = env("first", "70", 120)
    kill(p, out)  # committed 70, crashed with the log at 120: the gap is [70, 120)
    script = tmp_path / "takeover.py"
    script.write_text(_TAKEOVER)
    out_b = tmp_path / "b.txt"
    b = subprocess.Popen([sys.executable, str(script), str(data_dir), str(out_b), mode], env=child_env,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: os.path.exists(str(out_b) + ".ready") or b.poll() is not None, "takeover ready")
        assert b.poll() is None, b.stderr.read()[-3000:]
        os.kill(b.pid, signal.SIGKILL)  # before its child drained the gap
        b.wait(timeout=30)
    finally:
        if b.poll() is None:
            b.kill()
            b.wait(timeout=30)
    assert set(range(70, 120)) - set(consumed(out_b)), "the child finished the gap: the test proves nothing"
    c = KafkaConsumer("t", store=data_dir, group_id="g", enable_parallel_rebalance=True,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    got = set()
    end = time.monotonic() + 30
    # what the first consumer got past its commit (70) it never finished: the gap's offsets must come again
    seen = set(consumed(out_b))
    while not (seen | got) >= set(range(70, 120)) and time.monotonic() < end:
        got |= {r.offset for rs in c.poll(timeout_ms=100).values() for r in rs}
    c.close()
    missing = sorted(set(range(70, 120)) - seen - got)
    assert not missing, f"offsets of the gap never delivered after the takeover's crash: {missing}"


def test_a_member_evicted_for_stalling_is_taken_over_with_a_child(data_dir, tmp_path, child_env):
    """The seed's other trigger: a member evicted for stalling (no poll for max_poll_interval_ms) while its process
    still runs; its successor takes over with the child/gap mechanism (position at the log end, the child drains
    [committed, log end)), and the stalled member can no longer commit."""
    with kafkalog.LogStore(data_dir, maintenance=False) as s:
        s.create_topic("t", 1)
    append(data_dir, 100)
    a = KafkaConsumer("t", store=data_dir, group_id="g", enable_parallel_rebalance=True, max_poll_records=30,
                      auto_offset_reset="earliest", enable_auto_commit=False, max_poll_interval_ms=1000,
                      session_timeout_ms=6000, heartbeat_interval_ms=100)
    got_a = []
    while len(got_a) < 30:
        got_a += [r.offset for rs in a.poll(timeout_ms=200).values() for r in rs]
    a.commit()  # committed 30; then a stalls (no poll) while it keeps running
    b = KafkaConsumer("t", store=data_dir, group_id="g", enable_parallel_rebalance=True, max_poll_records=100,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got_b = []
        end = time.monotonic() + 30
        while not b.assignment() and time.monotonic() < end:
            got_b += [r.offset for rs in b.poll(timeout_ms=100).values() for r in rs]
        assert b.assignment() == {TP}, "the stalled member was never evicted"
        assert b.position(TP) == 100 and b.child_consumer_is_alive(), "no gap mechanism for an evicted member"
        while len(set(got_b)) < 70 and time.monotonic() < end:
            got_b += [r.offset for rs in b.poll(timeout_ms=100).values() for r in rs]
        assert set(got_b) == set(range(30, 100))
        with pytest.raises(kafkalog.errors.CommitFailedError):
            a.commit({TP: kafkalog.structs.OffsetAndMetadata(60, "", None)})
        b.commit()
        assert b.committed(TP) == 100
    finally:
        b.close()
        a.close()
