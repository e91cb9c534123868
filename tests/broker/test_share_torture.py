"""A share group torture across processes: one group, three kinds of holders on one data dir — DurableQueue worker
processes, a wire share-group member of a ``kafkalog serve`` child (raw ShareFetch / ShareAcknowledge frames) — and
SIGKILL for the workers (at a random count of their deliveries) and for the broker (holding acquired records).

What must hold (the first law for queues, README's durability table):

- every message put is accepted by someone (or was in the hands of a killed worker that may have acked it before
  its log line: such a message is never delivered again, or it is delivered again and accepted);
- an accepted message never comes back: no delivery of it with a higher delivery count than the accepted one;
- delivery counts never go back: no message is delivered twice with the same count;
- what a dead holder held comes back, with a higher count.

Bounded by counts: 3 rounds of 200 messages (and at most 1,000 more while a victim waits for work, 1,950 more
while the member looks for something to hold), 3 worker kills, 1 broker kill, at most POLLS member fetches and two
more per message put.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict

import pytest

from .conftest import Serve, children
from .test_share_groups import ACCEPT, Member, acquired, part
from .wire import Wire, batch

pytestmark = pytest.mark.usefixtures("deadline")

ROUNDS, PER_ROUND = 3, 200
POLLS = 400
HOLD_TRIES = 40  # fetches for something to hold at the broker's kill, 50 more messages before each but the first
WAITS = 1000  # looks at a victim's progress (10 ms apart) before its kill: a hang guard, not a bound on work
SEED = 20261127

WORKER = r"""
import os, queue, sys, time
from kafkalog import DurableQueue
data, out, stop, prefetch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
q = DurableQueue(data, name="t", group="g", prefetch=prefetch)
os.write(fd, b"started\n")
while True:
    try:
        m = q.get(timeout=0.05)
    except queue.Empty:
        if os.path.exists(stop):
            break
        continue
    os.write(fd, b"got %d %d\n" % (m.offset, m.delivery_count))
    time.sleep(0.001)  # slow enough for a kill to land between a delivery and its ack
    q.ack(m)
    os.write(fd, b"acked %d\n" % m.offset)
q.close()
os.write(fd, b"closed\n")
"""


class Workers:
    def __init__(self, tmp_path, data, env):
        self.tmp, self.data, self.env = tmp_path, data, env
        self.script = tmp_path / "worker.py"
        self.script.write_text(WORKER)
        self.stop = tmp_path / "stop"
        self.procs: dict[str, tuple[subprocess.Popen, object]] = {}
        self.killed: set[str] = set()

    def start(self, name, prefetch):
        out = self.tmp / f"{name}.out"
        p = children.popen([sys.executable, str(self.script), str(self.data), str(out), str(self.stop),
                              str(prefetch)], env=self.env, stderr=subprocess.PIPE, text=True)
        self.procs[name] = (p, out)

    def lines(self, name):
        out = self.procs[name][1]
        return out.read_text().splitlines() if out.exists() else []

    def gets(self, name):
        return sum(1 for line in self.lines(name) if line.startswith("got"))

    def kill(self, name):
        p = self.procs[name][0]
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        self.killed.add(name)

    def finish(self):
        self.stop.touch()
        for name, (p, _) in self.procs.items():
            if name not in self.killed:
                _, err = p.communicate(timeout=120)
                assert p.returncode == 0, err[-3000:]

    def close(self):
        for p, _ in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)


def test_share_group_torture_queue_workers_wire_member_and_kills(tmp_path, child_env):
    rng = random.Random(SEED)
    data = tmp_path / "data"
    args = ["--data-dir", data, "--listen", "127.0.0.1:0", "--override", "share.auto.offset.reset=earliest"]
    deliveries = defaultdict(list)  # offset -> [(delivery count, holder, accepted)]
    accepted_at: dict[int, list[int]] = defaultdict(list)  # offset -> the delivery counts it was accepted at
    uncertain: set[int] = set()  # got by a killed worker, no "acked" line: acked or not, unknown
    s = Serve(args, child_env)
    workers = Workers(tmp_path, data, child_env)
    member = None
    put = 0
    polls = 0

    def member_step(accept=True):
        """One ShareFetch of the wire member; accept what it acquired (one ShareAcknowledge) unless told not to."""
        nonlocal polls
        polls += 1
        # a hang guard: POLLS for the rounds and the hold, two more per message put for the drain (each of its
        # fetches that acquires anything accepts at least one message never accepted before; empty ones between):
        # the workers, whose gets time out at 50 ms, can leave almost all to the member on a busy machine (CI: 401)
        assert polls <= POLLS + 2 * put, f"the member ran out of polls ({polls} for {put} messages)"
        r = member.fetch(max_records=rng.choice([1, 7, 20]), wait=50)
        assert r["error_code"] == 0, r
        got = acquired(r)
        for first, last, dc in got:
            for o in range(first, last + 1):
                deliveries[o].append((dc, "member", False))
        if got and accept:
            resp = member.acknowledge({0: [(first, last, (ACCEPT,)) for first, last, _ in got]})
            assert resp["error_code"] == 0 and part(resp)["error_code"] == 0, resp
            for first, last, dc in got:
                for o in range(first, last + 1):
                    accepted_at[o].append(dc)
        return got

    def produce(n):
        nonlocal put
        with Wire(s.port) as w:
            assert w.produce("t", 0, batch([b"m%05d" % (put + k) for k in range(n)]))["error_code"] == 0
        put += n

    def new_member():
        m = Member(s.port, "g", "t", member_id=str(uuid.uuid4()))
        m.join()
        assert m.heartbeat()["error_code"] == 0  # the assignment (topic id) with the second heartbeat at the latest
        return m

    try:
        with Wire(s.port) as w:
            assert w.create_topic("t", 1)["error_code"] == 0
        member = new_member()
        for i in range(2):
            workers.start(f"w{i}", rng.choice([1, 5, 20]))
        n_workers = 2
        for rnd in range(ROUNDS):
            for _ in range(PER_ROUND // 50):
                produce(50)
            for _ in range(5):
                member_step()
            # a worker killed at a random count of its deliveries, and replaced
            alive = [n for n in workers.procs if n not in workers.killed]
            victim = rng.choice(alive)
            goal = workers.gets(victim) + 1 + rng.randrange(15)
            for i in range(WAITS):
                if workers.gets(victim) >= goal or workers.procs[victim][0].poll() is not None:
                    break
                if i % 50 == 49:  # the others took everything first: more work (at most WAITS / 50 x 50 more)
                    produce(50)
                time.sleep(0.01)
            else:
                raise AssertionError(f"{victim} never reached {goal} deliveries")
            assert workers.procs[victim][0].poll() is None, workers.procs[victim][0].stderr.read()[-2000:]
            workers.kill(victim)
            workers.start(f"w{n_workers}", rng.choice([1, 5, 20]))
            n_workers += 1
            if rnd == 1:
                # the broker killed while its member holds acquired records (never acknowledged)
                held = []
                for i in range(HOLD_TRIES):
                    if i:  # the workers took everything first (a busy machine): more work, fetched at once
                        produce(50)
                    held = member_step(accept=False)
                    if held:
                        break
                assert held, f"the member acquired nothing to hold in {HOLD_TRIES} fetches"
                s.proc.send_signal(signal.SIGKILL)
                assert s.proc.wait(30) == -signal.SIGKILL
                member.close()
                s.kill()
                s = Serve(args, child_env)
                member = new_member()
        workers.finish()
        # the member takes whatever is left (a dead holder's records come back to whoever claims them)
        empty = 0
        while empty < 30 and len(accepted_at) + len(uncertain) < put:
            got = member_step()
            empty = 0 if got else empty + 1
            uncertain -= set(accepted_at)
    finally:
        workers.close()
        if member is not None:
            member.close()
        s.kill()

    for name in workers.procs:
        got, acked = {}, set()
        for line in workers.lines(name):
            parts = line.split()
            if parts[0] == "got":
                got[int(parts[1])] = int(parts[2])
                deliveries[int(parts[1])].append((int(parts[2]), name, False))
            elif parts[0] == "acked":
                acked.add(int(parts[1]))
                accepted_at[int(parts[1])].append(got[int(parts[1])])
        if name in workers.killed:
            uncertain |= set(got) - acked
    assert workers.killed and len(workers.killed) == ROUNDS
    # every message accepted, or in a killed worker's hands when it died (it may have acked it unlogged)
    missing = set(range(put)) - set(accepted_at) - uncertain
    assert not missing, f"{len(missing)} messages never accepted, e.g. {sorted(missing)[:10]}"
    for o, dcs in deliveries.items():
        counts = [dc for dc, _, _ in dcs]
        assert len(counts) == len(set(counts)), f"offset {o} delivered twice with one count: {dcs}"
        if o in accepted_at:
            assert len(accepted_at[o]) == 1, f"offset {o} accepted twice: {accepted_at[o]}"
            assert max(counts) == accepted_at[o][0], f"offset {o} delivered again after its acceptance: {dcs}"
    redelivered = [o for o, dcs in deliveries.items() if len(dcs) > 1]
    assert redelivered, "no kill left a message to deliver again: the torture tested nothing"
