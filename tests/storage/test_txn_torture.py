"""The multi-process kill -9 torture of transactions (issue 23): embedded transactional producers in several
processes on one shared store, killed with SIGKILL at random moments and inside commits, beside read_committed
readers, delete-before and rolls; then every promise of a returned commit_transaction()/abort_transaction() is held
against the store (README, "Transactions and isolation levels" and "What is durable when").

The processes (tests/storage/txn_writer.py, forked by test_crash.py's zygote): ``SLOTS`` writer processes at a time,
each with two threads and four transactional ids, two of its own (one with a short transaction timeout, so that
timeouts fence too) and two shared with the neighbouring slots (a new instance in one process fences the other
process's); transactions of 1-8 records over 3 partitions of ``ta`` and 2 of ``tb`` (8 KiB segments: rolls all the
time), some flushed midway, half with the id's group's offsets (send_offsets_to_transaction), committed or aborted at
random. A writer is killed at a random count of its transaction ends, or kills itself at a failpoint inside the end
(``txn:after-prepare``, ``txn:after-marker``, ``txn:before-complete``, armed after a random count of transactions);
a new writer takes its slot (its ids: the dead instance is fenced, its open transaction aborted, its PrepareX
completed by the new process's coordinator). Beside them: a reader through Log.records and one through KafkaConsumer,
both read_committed, and a deleter process (delete-before on ``tb``, rolls, the coordinator's expiry). At the end one
more writer is killed by ``txn:after-prepare`` and not replaced.

Checks (after a fresh store's coordinator completed every PrepareX and aborted what was still open, as the timeout
would): txncheck.check_txn_outcomes (the power-loss tests' checks: a returned commit is visible whole at its offsets,
an interrupted one all or nothing, an aborted or unfinished one never; groups' offsets from committed transactions;
the last stable offset is the high watermark once nothing is open and never below one seen after an end returned),
with the records below a delete-before's log start excused; besides: a fenced transaction is never visible; a
decided commit whose writer died has every record written (but for a prefix below the log start); every record in
the log is one a journal intended, at its partition, once; what the readers saw (at any time) is only committed
transactions' records, at the offsets the log holds them, without skipping one that is visible at the end, and their
last stable offsets never went back; Log.records(read_committed) and a client-like reader agree; an exclusive open
sees the same; ``kafkalog check`` passes.

Bounded by counts, never by time: each writer does ``TXNS`` transactions (at most 8 records of at most 1.5 KiB each);
``SLOTS`` + ``kills`` + 1 writers in all: with kills=4 at most 8 x 120 x 8 = 7,680 records (12 MiB), with kills=40 at
most 44 x 120 x 8 = 42,240 records (62 MiB). The readers and the deleter act on what the writers wrote. The test
process holds the journals' lines and the final log's records (a few MB). ``KAFKALOG_CRASH_SEED`` replays a run,
``KAFKALOG_TORTURE_KILLS`` sets the soak's kills.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import importlib.util
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from kafkalog import LogStore, TopicPartition

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


tc = _load("kafkalog_test_crash", HERE / "test_crash.py")  # the zygote, journals and kafkalog check helpers
txncheck = _load("kafkalog_test_txncheck", HERE.parent / "txncheck.py")  # shared with the power-loss tests
tw = _load("kafkalog_crash_ops_txn_writer", HERE / "txn_writer.py")  # the children's ops (constants here)
zygote = tc.zygote  # the module-scoped fork server fixture

SEED = tc.SEED
WRITER_OPS = str(HERE / "txn_writer.py")
SLOTS = 3
TXNS = 120  # transactions a writer does (2 threads x 60)
SHORT_TIMEOUT_MS = 3000
FAILPOINTS = ["txn:after-prepare", "txn:after-marker", "txn:before-complete"]
STORE_CONFIG = {"lock.timeout.ms": 60000}
TOPIC_CONFIG = {"segment.bytes": 8192, "index.interval.bytes": 512, "file.delete.delay.ms": 500}
FAR = 700_000  # ms past now: every transaction timeout (at most 600 s) is over


def slot_ids(slot: int) -> list:
    """[transactional id, timeout ms, shared] of a writer slot: thread 0 gets its own two, thread 1 the shared two."""
    return [[f"s{slot}a", 600_000, False], [f"x{slot}", 600_000, True],
            [f"s{slot}b", SHORT_TIMEOUT_MS, False], [f"x{(slot + SLOTS - 1) % SLOTS}", 600_000, True]]


class Writer:
    def __init__(self, wid, slot, pid, spec, failpoint):
        self.wid, self.slot, self.pid, self.spec, self.failpoint = wid, slot, pid, spec, failpoint
        self.tail = tc.JournalTail(spec["journal"])
        self.ends = 0  # XD and XF lines
        self.done = False

    def refresh(self) -> int:
        for ln in self.tail.lines():
            if ln[0] in ("XD", "XF"):
                self.ends += 1
            elif ln[0] == "Z":
                self.done = True
            elif ln[0] == "E":
                pytest.fail(f"writer {self.wid}: {' '.join(ln[1:])} (seed {SEED})")
        return self.ends


class TxnRun:
    def __init__(self, zygote, tmp: Path, data: Path, rng: random.Random):
        self.z, self.tmp, self.data, self.rng = zygote, tmp, data, rng
        self.stop = tmp / "stop"
        self.writers: list[Writer] = []
        self.live: dict[int, Writer] = {}  # slot -> its writer
        self.others: list[tuple[str, int, dict]] = []  # (what, pid, spec): readers and the deleter
        self.next_wid = 1

    def _spawn(self, name, ops):
        spec = tc.make_spec(self.tmp, name, self.data, [["txn_open", {"config": STORE_CONFIG}], *ops])
        spec["ops_module"] = WRITER_OPS
        pid = self.z.spawn(spec)
        tc.wait_for_tag(spec["journal"], "R", pid, self.z, spec["log"])
        return pid, spec

    def start_writer(self, slot, failpoint=None, ids=None, failpoint_after=None):
        wid, self.next_wid = self.next_wid, self.next_wid + 1
        kw = {"wid": wid, "seed": SEED * 1000 + wid, "ids": ids or slot_ids(slot), "txns": TXNS,
              "stop_file": str(self.stop)}
        if failpoint:
            kw.update(failpoint=failpoint, failpoint_after=self.rng.randrange(TXNS // 3) if failpoint_after is None
                      else failpoint_after)
        pid, spec = self._spawn(f"w{wid}", [["txn_writer", kw]])
        w = Writer(wid, slot, pid, spec, failpoint)
        self.writers.append(w)
        self.live[slot] = w
        return w

    def start_other(self, what, op, kw):
        pid, spec = self._spawn(what, [[op, {"stop_file": str(self.stop), "seed": SEED + len(self.others), **kw}]])
        self.others.append((what, pid, spec))

    def died(self, w: Writer, how: str, st="wait") -> None:
        """``w`` is dead (``st``: its exit status, when the zygote already gave it)."""
        if st == "wait":
            st = self.z.wait(w.pid, timeout=60)
        tc.assert_killed(st, w.spec, f"writer {w.wid} ({how})")
        if w.failpoint and how == "its failpoint":
            assert any(ln[0] == "K" for ln in tc.cw.read_journal(w.spec["journal"])), \
                f"writer {w.wid} died before arming {w.failpoint} (seed {SEED}):\n{tc._text(w.spec['log'])}"
        del self.live[w.slot]

    def finish(self) -> None:
        self.stop.touch()
        for w in list(self.live.values()):
            st = self.z.wait(w.pid, timeout=300)
            w.refresh()
            ok = st == 0 or (w.failpoint and st == -signal.SIGKILL)  # an armed writer may hit its failpoint
            assert ok, f"writer {w.wid} exited {st} (seed {SEED}):\n{tc._text(w.spec['log'])}"
        for what, pid, spec in self.others:
            st = self.z.wait(pid, timeout=300)
            assert st == 0, f"{what} exited {st} (seed {SEED}):\n{tc._text(spec['log'])}"


def _run(zygote, tmp_path: Path, kills: int, live_store=None) -> TxnRun:
    rng = random.Random(SEED)
    run = TxnRun(zygote, tmp_path, tmp_path / "data", rng)
    run.start_other("reader-log", "txn_reader", {"kind": "log"})
    run.start_other("reader-consumer", "txn_reader", {"kind": "consumer"})
    run.start_other("deleter", "txn_deleter", {})
    for slot in range(SLOTS):
        run.start_writer(slot)
    deaths, victim, target = 0, None, 0

    def replace(slot):
        # an armed writer is one of the kills: never more armed than kills left, so all of them die in the loop
        armed = sum(1 for w in run.live.values() if w.failpoint)
        arm = deaths + armed < kills and rng.random() < 0.4
        run.start_writer(slot, failpoint=rng.choice(FAILPOINTS) if arm else None)

    deadline = time.monotonic() + 600  # catches a hang only: the run is bounded by counts
    while deaths < kills:
        assert time.monotonic() < deadline, f"no progress in 600 s (seed {SEED})"
        for w in list(run.live.values()):  # writers that killed themselves at their failpoint
            if w.failpoint and (st := run.z.wait(w.pid, timeout=0)) is not None:
                run.died(w, "its failpoint", st)
                deaths += 1
                if w is victim:
                    victim = None
                replace(w.slot)
        if deaths >= kills:
            break
        if victim is None:
            plain = [w for w in run.live.values() if not w.failpoint]
            if not plain or deaths + len(run.live) - len(plain) >= kills:
                time.sleep(0.005)  # the armed writers are the kills left
                continue
            victim = rng.choice(plain)
            target = victim.refresh() + rng.randint(1, 12)  # at a random count of its transaction ends
        if victim.refresh() >= target or victim.done:
            time.sleep(rng.uniform(0, 0.01))
            os.kill(victim.pid, signal.SIGKILL)
            run.died(victim, "SIGKILL")
            deaths += 1
            replace(victim.slot)
            victim = None
        else:
            if run.z.wait(victim.pid, timeout=0) is not None:
                pytest.fail(f"writer {victim.wid} ended by itself (seed {SEED}):\n{tc._text(victim.spec['log'])}")
            time.sleep(0.003)
    # one more writer with an id of its own dies right after the decision of its first transaction, not replaced:
    # its PrepareX is left to whoever opens the coordinator next
    last = run.start_writer(SLOTS, failpoint="txn:after-prepare", ids=[["last", 600_000, False]],
                            failpoint_after=0)
    run.died(last, "its failpoint")
    run.finish()
    return run


def _journal_facts(run: TxnRun):
    """The writers' X lines as txncheck.parse_txn_acks takes them (XO lines in the order of their XT times), the
    intended partitions of each transaction's records, the fenced transactions, the deleter's log starts."""
    lines, xo, when, intents, fenced = [], [], {}, {}, set()
    for w in run.writers:
        for ln in tc.cw.read_journal(w.spec["journal"]):
            if ln[0] == "E":
                pytest.fail(f"writer {w.wid}: {' '.join(ln[1:])} (seed {SEED})")
            if ln[0] == "P":
                intents[ln[1]] = [(t, int(p)) for t, p in (x.split(":") for x in ln[3:])]
            elif ln[0] == "XT":
                when[ln[1]] = int(ln[2])
            elif ln[0] == "XF":
                fenced.add(ln[1])
            elif ln[0] == "XO":
                xo.append(" ".join(ln))
            elif ln[0].startswith("X"):
                lines.append(" ".join(ln))
    xo.sort(key=lambda line: when[line.split()[1]])
    txns, stable, group_order = txncheck.parse_txn_acks(lines + xo)
    deleted = collections.defaultdict(int)
    for what, _, spec in run.others:
        if what == "deleter":
            for ln in tc.cw.read_journal(spec["journal"]):
                if ln[0] == "D":
                    deleted[(ln[1], int(ln[2]))] = max(deleted[(ln[1], int(ln[2]))], int(ln[3]))
    return txns, stable, group_order, intents, fenced, deleted


def _view(store) -> dict:
    """Per partition: log start, high watermark, last stable offset, read_committed records (Log.records), every
    record (read_uncommitted); the groups' committed offsets."""
    out = {}
    for t, p in tw.PARTITIONS:
        log = store.log(t, p)
        out[(t, p)] = (log.log_start_offset, log.high_watermark, log.last_stable_offset,
                       [(r.offset, bytes(r.value)) for r in log.records(isolation_level="read_committed")],
                       [(r.offset, bytes(r.value)) for r in log.records()])
    out["groups"] = {g: store.offsets.committed(g, TopicPartition(*tw.OFFSETS_TP))
                     for g in sorted(store.offsets.groups()) if g.startswith("g-")}
    return out


def check(run: TxnRun, store) -> tuple[list[str], dict]:
    """Every check of the module docstring against ``store`` (its coordinator completes what the dead left and
    aborts what is still open); returns the problems and counts."""
    txns, stable, group_order, intents, fenced, deleted = _journal_facts(run)
    problems = []
    raw, starts = {}, {}
    for t, p in tw.PARTITIONS:
        log = store.log(t, p)
        starts[(t, p)] = log.log_start_offset
        raw[(t, p)] = [(r.offset, bytes(r.value)) for r in log.records()]
        stable[(t, p)] = stable[(t, p)]  # every partition's last stable offset is checked
        if starts[(t, p)] < deleted[(t, p)]:
            problems.append(f"{t}-{p}: log start {starts[(t, p)]} below a returned delete-before {deleted[(t, p)]}")
        if t == tw.KEEP and starts[(t, p)] != 0:
            problems.append(f"{t}-{p}: log start {starts[(t, p)]}, nothing deleted there")
    # every record in the log: one a writer intended, at its partition, once
    present = collections.defaultdict(dict)  # txn -> {i: (t, p, offset)}
    for (t, p), recs in raw.items():
        for o, v in recs:
            name, i = txncheck.txn_of(v), tw.index_of(v)
            if name not in intents or i is None or i >= len(intents[name]) or intents[name][i] != (t, p):
                problems.append(f"{t}-{p}: offset {o} holds {v[:40]!r}, no writer intended it there")
            elif i in present[name]:
                problems.append(f"{t}-{p}: record {i} of transaction {name} is in the log twice "
                                f"({present[name][i]} and offset {o})")
            else:
                present[name][i] = (t, p, o)
    shas = {(t, p, o): hashlib.sha1(v).hexdigest() for (t, p), recs in raw.items() for o, v in recs}
    for name, x in txns.items():
        if "commit" in (x["returned"], x["called"]):
            # a delete-before may have taken the records below its log start: a returned commit's, and those an
            # interrupted commit flushed midway (acknowledged on tb, then deleted: not "partly visible")
            x["records"] = {k: s for k, s in x["records"].items() if k[2] >= starts[(k[0], k[1])]}
        if x["returned"] != "commit" and x["called"] == "commit":
            for k in present.get(name, {}).values():  # killed (or fenced) inside the commit: what reached the log
                x["records"][k] = shas[k]
    problems += txncheck.check_txn_outcomes(store, txns, stable, group_order)
    view = _view(store)
    visible = collections.defaultdict(dict)  # txn -> {i: (t, p, offset)}
    committed_at = {}  # (t, p) -> sorted offsets read_committed returns
    for t, p in tw.PARTITIONS:
        log = store.log(t, p)
        client, _ = txncheck.read_committed(log)
        engine = view[(t, p)][3]
        if client != engine:
            problems.append(f"{t}-{p}: Log.records(read_committed) and a client's read_committed differ "
                            f"({len(engine)} and {len(client)} records)")
        for o, v in engine:
            visible[txncheck.txn_of(v)][tw.index_of(v)] = (t, p, o)
        committed_at[(t, p)] = [o for o, _ in engine]
    for name in sorted(fenced & set(visible)):
        problems.append(f"transaction {name} was fenced, yet {len(visible[name])} of its records are visible")
    # a decided commit whose writer died: every record written (a delete-before may have taken a prefix on tb)
    for name, x in txns.items():
        if x["returned"] == "commit" or name not in visible:
            continue
        for t, p in set(intents[name]):
            want = [i for i, tp in enumerate(intents[name]) if tp == (t, p)]
            got = [i for i in want if i in present[name]]
            missing = [i for i in want if i not in present[name]]
            if missing and (t == tw.KEEP or starts[(t, p)] == 0 or (got and max(missing) > min(got))):
                problems.append(f"transaction {name} (committed, its writer died in the commit): records {missing} "
                                f"for {t}-{p} are not in the log (log start {starts[(t, p)]})")
    committed = ({n for n, x in txns.items() if x["returned"] == "commit"} | set(visible)) - fenced
    # what the readers saw while the writers ran
    seen_total = 0
    for what, _, spec in run.others:
        if not what.startswith("reader"):
            continue
        last = collections.defaultdict(lambda: None)  # (t, p) -> the last offset it saw
        lsos = collections.defaultdict(int)
        for ln in tc.cw.read_journal(spec["journal"]):
            if ln[0] == "E":
                problems.append(f"{what}: {' '.join(ln[1:])}")
            elif ln[0] == "L":
                lsos[(ln[1], int(ln[2]))] = int(ln[3])
            elif ln[0] == "V":
                t, p, o, name, i = ln[1], int(ln[2]), int(ln[3]), ln[4], int(ln[5])
                seen_total += 1
                if name not in committed:
                    why = "fenced" if name in fenced else txns[name]["returned"] or txns[name]["called"] or \
                        "never ended"
                    problems.append(f"{what} saw record {i} of transaction {name} ({why}) at {t}-{p} {o}")
                elif name not in intents or i >= len(intents[name]) or intents[name][i] != (t, p):
                    problems.append(f"{what} saw record {i} of {name} at {t}-{p}, not where it was sent")
                elif o >= starts[(t, p)] and present[name].get(i) != (t, p, o):
                    problems.append(f"{what} saw record {i} of {name} at {t}-{p} {o}; the log has it at "
                                    f"{present[name].get(i)}")
                offs = committed_at[(t, p)]
                lo = starts[(t, p)] if last[(t, p)] is None else max(starts[(t, p)], last[(t, p)] + 1)
                k = bisect.bisect_left(offs, lo)
                if k < len(offs) and offs[k] < o:
                    problems.append(f"{what} read {t}-{p} {o} after {last[(t, p)]}, skipping {offs[k]}, which "
                                    f"read_committed returns at the end")
                last[(t, p)] = o
        for (t, p), lso in lsos.items():
            if lso > view[(t, p)][1]:
                problems.append(f"{what} saw last stable offset {lso} on {t}-{p}, past its end {view[(t, p)][1]}")
    counts = {"committed": sum(1 for x in txns.values() if x["returned"] == "commit"),
              "aborted": sum(1 for x in txns.values() if x["returned"] == "abort"), "fenced": len(fenced),
              "seen": seen_total, "records": sum(len(r) for r in raw.values())}
    return problems, {"view": view, **counts}


def _torture(zygote, tmp_path, kills, live: bool = False) -> dict:
    """The run and its checks. ``live``: checked through a store (and its coordinator) that the test process opened
    before the writers started, as a broker is, rather than through a fresh one."""
    data = tmp_path / "data"
    with LogStore(data, STORE_CONFIG) as store:
        for t, n in tw.TOPICS.items():
            store.create_topic(t, n, TOPIC_CONFIG)
    live_store = LogStore(data, STORE_CONFIG, maintenance=False) if live else None
    try:
        if live_store is not None:
            live_store.transactions  # noqa: B018 (the coordinator, opened before any writer)
        run = _run(zygote, tmp_path, kills)
        # a fresh store: its coordinator completes every PrepareX the dead left; check_txn_outcomes aborts the rest
        with live_store or LogStore(data, STORE_CONFIG, maintenance=False) as store:
            store.expire_transactions(now_ms=int(time.time() * 1000) + FAR)
            problems, got = check(run, store)
    finally:
        if live_store is not None:
            live_store.close()
    assert not problems, f"seed {SEED}:\n" + "\n".join(problems[:40])
    with LogStore(data, STORE_CONFIG, exclusive=True, maintenance=False) as store:
        assert _view(store) == got["view"], f"an exclusive open sees another store (seed {SEED})"
    tc.check_cli(data, zygote, tmp_path)
    return got


def test_multiprocess_transaction_torture(zygote, tmp_path):
    """Transactional writers in 3 processes at a time, 4 of them killed (by SIGKILL or a failpoint inside a commit)
    and one more at the end, beside read_committed readers and delete-before: nothing committed lost, half visible
    or moved, nothing aborted or fenced ever visible. Bounded by counts (module docstring): 8 writers, at most 7,680
    records (12 MiB)."""
    got = _torture(zygote, tmp_path, kills=4)
    # counts, not luck: the writers alive at the end did all their transactions
    assert got["committed"] > 100 and got["aborted"] > 30 and got["seen"] > 200, got


@pytest.mark.slow
def test_multiprocess_transaction_torture_soak(zygote, tmp_path):
    """The torture with 40 kills (KAFKALOG_TORTURE_KILLS): 44 writers, at most 42,240 records (62 MiB)."""
    got = _torture(zygote, tmp_path, kills=int(os.environ.get("KAFKALOG_TORTURE_KILLS", "40")))
    assert got["committed"] > 100 and got["seen"] > 200, got


def test_transaction_torture_checked_by_a_coordinator_opened_before(zygote, tmp_path):
    """The torture (2 kills, then the writer killed by txn:after-prepare) checked through the test process's own
    store, opened (with its coordinator) before the writers started, as a broker's is: its expiry must end what the
    dead left, as a fresh coordinator's opening does. Bounded as the torture: 6 writers, at most 5,760 records."""
    _torture(zygote, tmp_path, kills=2, live=True)
