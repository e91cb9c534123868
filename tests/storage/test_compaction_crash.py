"""Crash tests of the log cleaner (cleanup.policy=compact): real files, real fsync, real SIGKILL.

1. kill -9 at every cleaner failpoint, in the first group of a round (several earlier-cleaned segments merged into
   one) and in a later one (after a whole group was swapped in by the same round), in exclusive and shared mode;
   the data dir then reopened read-only, shared and exclusive and held to an exact model of what the log must
   show: the committed groups cleaned, everything else untouched, nothing lost, hidden or resurrected;
2. a long-lived shared process (a service's store) cleaning after another process's cleaner died in the middle of
   a swap, before it told the other views;
3. a cleaner process cleaning over and over while two shared writers append keyed records and a read-only process
   reads the whole log again and again, the cleaner killed (at random moments and at failpoints) and restarted,
   each swap it died in finished by a shared writer's open and checked.

The processes are tests/storage/compaction_writer.py, forked by its fork server (one interpreter start-up); one test
arms its failpoint through KAFKALOG_FAILPOINTS in a fresh interpreter. ``KAFKALOG_COMPACTION_SEED`` replays a run
(the seed is in every failure message).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kafkalog
from kafkalog import LogStore

ROOT = Path(kafkalog.__file__).resolve().parents[1]
WRITER = Path(__file__).resolve().with_name("compaction_writer.py")

_spec = importlib.util.spec_from_file_location("kafkalog_compaction_writer", WRITER)
cw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cw)

TOPIC = cw.TOPIC
KEYS = 40
SEED = int(os.environ.get("KAFKALOG_COMPACTION_SEED", str(random.SystemRandom().randrange(2**31))))
PARENT_CONFIG = {"lock.timeout.ms": 30000}
POST_COMMIT = {"clean:after-commit", "clean:after-old-deleted", "clean:after-index-renamed", "clean:after-swap",
               "clean:before-checkpoint"}
LEFTOVER_SUFFIXES = (".swap", ".cleaned", ".deleted", ".swap-end")


def timeout(seconds: int):
    """Fail the test (TimeoutError in its main thread, SIGALRM) when it runs longer than ``seconds``."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            def expired(signum, frame):
                raise TimeoutError(f"{fn.__name__} ran longer than {seconds} s (seed {SEED})")
            old = signal.signal(signal.SIGALRM, expired)
            signal.alarm(seconds)
            try:
                return fn(*args, **kwargs)
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old)
        return wrapper
    return deco


def _env(failpoints: str | None = None) -> dict:
    """The children's environment: this kafkalog importable (as tests/conftest.py's subprocess_env), never the
    source tree of the cwd; no failpoint unless asked."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKALOG_FAILPOINTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONSAFEPATH"] = "1"
    if failpoints:
        env["KAFKALOG_FAILPOINTS"] = failpoints
    return env


# ---------------------------------------------------------------------------------------------------- processes

class Zygote:
    """Client of ``compaction_writer.py serve``: forks the processes that the tests kill with SIGKILL."""

    def __init__(self, cwd: Path):
        self.proc = subprocess.Popen([sys.executable, str(WRITER), "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd=cwd, env=_env(), text=True, bufsize=1)
        self._lock = threading.Lock()

    def _call(self, **req) -> dict:
        with self._lock:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"compaction_writer fork server died (exit {self.proc.poll()})")
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(out["error"])
        return out

    def spawn(self, spec: dict) -> int:
        return self._call(cmd="spawn", spec=spec)["pid"]

    def wait(self, pid: int, timeout: float = 60.0):
        """Exit code as subprocess reports it (-9 = SIGKILL), or None while it still runs after ``timeout``."""
        return self._call(cmd="wait", pid=pid, timeout=timeout)["status"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("compaction-zygote"))
    yield z
    z.close()


def _text(path) -> str:
    try:
        return Path(path).read_text(errors="replace")[-4000:]
    except FileNotFoundError:
        return ""


def make_spec(tmp: Path, name: str, data: Path, ops: list) -> dict:
    return {"dir": str(data), "journal": str(tmp / f"{name}.journal"), "log": str(tmp / f"{name}.out"), "ops": ops}


def journal_errors(spec) -> list[str]:
    return [" ".join(ln[1:]) for ln in cw.read_journal(spec["journal"]) if ln[0] == "E"]


def assert_exit(status, spec, expected, what):
    errors = journal_errors(spec)
    assert not errors, f"{what} saw broken invariants: {errors[:5]} (seed {SEED})"
    assert status == expected, (f"{what} exited with {status}, expected {expected} (seed {SEED}); its output:\n"
                                f"{_text(spec['log'])}\nits journal ends: {cw.read_journal(spec['journal'])[-6:]}")


def check_cli(zygote: Zygote, data: Path, tmp: Path, fresh: bool = False) -> None:
    """``kafkalog check DATA_DIR`` exits 0: the real command line (``fresh``) or, faster, ``kafkalog.cli.main``
    in a process forked by the zygote."""
    if fresh:
        p = subprocess.run([sys.executable, "-m", "kafkalog", "check", str(data)], cwd=tmp, env=_env(),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"kafkalog check {data} exited {p.returncode} (seed {SEED}):\n{p.stdout}{p.stderr}"
        return
    out = tmp / f"check-{time.monotonic_ns()}.out"
    rc = zygote.wait(zygote.spawn({"check": str(data), "log": str(out)}), timeout=120)
    assert rc == 0, f"kafkalog check {data} exited {rc} (seed {SEED}):\n{_text(out)}"


def partition_dir(data: Path) -> Path:
    return data / f"{TOPIC}-0"


def leftovers(data: Path) -> list[str]:
    return sorted(p.name for p in partition_dir(data).iterdir() if p.name.endswith(LEFTOVER_SUFFIXES))


# ---------------------------------------------------------------------------------------------------- the model

class Model:
    """Every record appended: offset -> (key, tombstone, wid, seq, phase), from the journals' K lines."""

    def __init__(self):
        self.recs: dict[int, tuple] = {}

    def add(self, off: int, key: bytes, tomb: bool, wid: int, seq: int, phase: str) -> None:
        assert off not in self.recs, f"offset {off} handed out twice: {self.recs[off]} and {(key, wid, seq)}"
        self.recs[off] = (key, tomb, wid, seq, phase)

    def add_journal(self, path, phases: dict | None = None) -> None:
        """K lines of a journal; ``phases``: step index -> phase name for the records of that step."""
        step = -1
        for ln in cw.read_journal(path):
            if ln[0] == "S":
                step = int(ln[1])
            elif ln[0] == "K":
                self.add(int(ln[1]), ln[2].encode(), ln[3] == "1", int(ln[4]), int(ln[5]),
                         (phases or {}).get(step, "-"))

    def value(self, off: int):
        key, tomb, wid, seq, _ = self.recs[off]
        return None if tomb else cw.payload(wid, seq, key)

    def latest(self, below: int | None = None) -> dict[bytes, int]:
        out: dict[bytes, int] = {}
        for off in sorted(self.recs):
            if below is not None and off >= below:
                break
            out[self.recs[off][0]] = off
        return out

    def is_tomb(self, off: int) -> bool:
        return self.recs[off][1]

    def cleaned(self, below: int, tombstones_seen: set | None = None) -> Expect:
        """What a complete cleaning of everything below ``below`` shows there: the latest record of each key. When
        a tombstone goes is the cleaner's choice (delete.retention.ms, KIP-534's delete horizon): a latest
        tombstone may be there or not, but one removed before (not in ``tombstones_seen``, when given) stays gone."""
        latest = set(self.latest(below).values())
        return Expect({o for o in latest if not self.is_tomb(o)}, set(),
                      {o for o in latest if self.is_tomb(o) and (tombstones_seen is None or o in tombstones_seen)})

    def appended(self, lo: int, hi: int) -> Expect:
        """Offsets [lo, hi) as appended (never cleaned): every record there, tombstones included."""
        offs = {o for o in self.recs if lo <= o < hi}
        tombs = {o for o in offs if self.is_tomb(o)}
        return Expect(offs - tombs, tombs, set(tombs))


class Expect:
    """What the log must show: exactly the records ``exact`` (not tombstones), and tombstones T with
    ``tombs_required`` <= T <= ``tombs_allowed``."""

    def __init__(self, exact: set, tombs_required: set, tombs_allowed: set):
        self.exact, self.tombs_required, self.tombs_allowed = set(exact), set(tombs_required), set(tombs_allowed)

    def __or__(self, other: Expect) -> Expect:
        return Expect(self.exact | other.exact, self.tombs_required | other.tombs_required,
                      self.tombs_allowed | other.tombs_allowed)

    def within(self, ranges) -> Expect:
        def keep(offs):
            return {o for o in offs if any(b <= o < e for b, e in ranges)}
        return Expect(keep(self.exact), keep(self.tombs_required), keep(self.tombs_allowed))

    def outside(self, ranges) -> Expect:
        def keep(offs):
            return {o for o in offs if not any(b <= o < e for b, e in ranges)}
        return Expect(keep(self.exact), keep(self.tombs_required), keep(self.tombs_allowed))


def read_log(log, model: Model, where: str, partial: bool = False) -> dict[int, tuple]:
    """Every record of the log: no two segments overlap; offsets strictly increase (c); each is the record appended
    at its offset, key, value and tombstone alike (b). Returns offset -> (key, value). ``partial``: the model does
    not hold every record yet (writers still appending): records at offsets it does not know are left out."""
    segs = [(s.base_offset, s.next_offset) for s in log.segments()]
    overlaps = [(a, b) for a, b in zip(segs, segs[1:]) if a[1] > b[0]]
    assert not overlaps, f"{where}: segments overlap: {overlaps[:4]} (seed {SEED})"
    seen: dict[int, tuple] = {}
    prev = -1
    for rec in log.records():
        o = rec.offset
        assert o > prev, f"{where}: offset {o} after {prev} (seed {SEED})"
        prev = o
        if partial and o not in model.recs:
            continue
        assert o in model.recs, f"{where}: offset {o} holds {rec.key!r}={rec.value!r}, nothing was appended there " \
                                f"(seed {SEED})"
        want_key, want_value = model.recs[o][0], model.value(o)
        assert (rec.key, rec.value) == (want_key, want_value), (
            f"{where}: offset {o} holds {rec.key!r}={rec.value!r}, {want_key!r}={want_value!r} was appended there "
            f"(seed {SEED})")
        seen[o] = (rec.key, rec.value)
    return seen


def check_latest(seen: dict, model: Model, where: str) -> None:
    """(a): every key's latest record is there at its offset and is the last record of that key; a key whose
    latest record is a tombstone the cleaner removed shows no record at all (nothing older comes back)."""
    last: dict[bytes, int] = {}
    for o, (key, _) in seen.items():
        last[key] = max(last.get(key, -1), o)
    for key, off in model.latest().items():
        if model.is_tomb(off) and off not in seen:
            assert key not in last, f"{where}: key {key!r} was deleted (tombstone at {off}, removed since), yet " \
                                    f"offset {last.get(key)} shows a value of it (resurrected) (seed {SEED})"
            continue
        assert off in seen, f"{where}: key {key!r}: its latest record (offset {off}) is gone; last seen " \
                            f"{last.get(key)} (seed {SEED})"
        assert last[key] == off, f"{where}: key {key!r}: a record at {last[key]} after its latest {off} (seed {SEED})"


def check_expect(seen: dict, expect: Expect, where: str, model: Model) -> None:
    """The records shown are exactly the expected ones (tombstones: within their bounds)."""
    got = {o for o in seen if not model.is_tomb(o)}
    tombs = {o for o in seen if model.is_tomb(o)}
    extra = sorted((got - expect.exact) | (tombs - expect.tombs_allowed))
    missing = sorted((expect.exact - got) | (expect.tombs_required - tombs))
    assert not extra and not missing, (
        f"{where}: {len(extra)} records shown that must be gone (first {[(o, model.recs[o]) for o in extra[:4]]}), "
        f"{len(missing)} missing that must be there (first {[(o, model.recs[o]) for o in missing[:4]]}) (seed {SEED})")


# ==================================================================================================== 1. failpoints

# delete.retention.ms 0: tombstones go as soon as the cleaner may drop them (under KIP-534: at the first cleaning
# after the one that stamped their delete horizon), so keys are deleted for good within the test
FP_TOPIC_CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 256, "delete.retention.ms": 0}
N_OLD, N_NEW, N_MORE = 600, 900, 300


def _build_ops(mode, failpoint, group, seed):
    """Phase A (timestamps two days old; ten keys only there, whose latest records stay in the first group), a
    complete round, the tombstones it left, phase B, the armed round.
    Step indexes: 2 = phase A fill, 7 = phase B fill, 11 (10 unarmed) = the second round."""
    return [["open", {"mode": mode, "topic_config": FP_TOPIC_CONFIG}], ["watch_swaps", {}],
            ["fill", {"n": N_OLD, "keys": KEYS + 10, "seed": seed, "age_ms": 2 * cw.DAY_MS}], ["flush", {}],
            ["roll", {}],
            ["clean", {}], ["tombstones", {}],
            ["fill", {"n": N_NEW, "keys": KEYS, "seed": seed + 1}], ["flush", {}], ["roll", {}],
            *([["arm", {"name": failpoint, "group": group}]] if failpoint else []),
            ["clean", {}]]


PHASES = {2: "A", 7: "B"}


class Rounds:
    """The cleaning rounds of a journal: for each, the groups it began (G) and swapped in (W), and how it ended;
    ``tombstones``: the offsets of the last T line."""

    def __init__(self, path):
        self.rounds = []
        self.tombstones = None
        for ln in cw.read_journal(path):
            if ln[0] == "C":
                self.rounds.append({"began": [], "swapped": [], "end": None})
            elif ln[0] == "G":
                self.rounds[-1]["began"].append((int(ln[1]), int(ln[2])))
            elif ln[0] == "W":
                self.rounds[-1]["swapped"].append((int(ln[1]), int(ln[2])))
            elif ln[0] == "N":
                raise AssertionError(f"a swap was refused (nothing changed the log): {ln}")
            elif ln[0] == "X":
                self.rounds[-1]["end"] = (int(ln[1]), int(ln[2]), int(ln[3]), ln[4])
            elif ln[0] == "T":
                self.tombstones = {int(x) for x in ln[1:]}


def _assert_kill_point(data, failpoint, rnd, end1, end2):
    """The files on disk show the process died at the failpoint, not before, not after."""
    names = set(os.listdir(partition_dir(data)))
    swaps = sorted(n for n in names if n.endswith(".swap"))
    cleaned = sorted(n for n in names if n.endswith(".cleaned"))
    if failpoint in ("clean:during-copy", "clean:after-cleaned"):
        assert rnd["began"] == rnd["swapped"], rnd
        assert not swaps, f"{failpoint}: {swaps} exist: the kill came after the copy"
        logs = [n for n in names if n.endswith(".log.cleaned")]
        assert len(logs) == 1, f"{failpoint}: .log.cleaned files {logs}: the kill was to come during the copy"
        f = logs[0][:20]
        if rnd["swapped"]:  # the group in progress begins where the last one ended
            assert int(f) == rnd["swapped"][-1][1], (f, rnd)
        if failpoint == "clean:after-cleaned":
            assert {f + ".index.cleaned", f + ".timeindex.cleaned"} <= names, cleaned
        return
    if failpoint == "clean:before-checkpoint":
        assert rnd["began"] == rnd["swapped"] and rnd["swapped"][-1][1] == end2, rnd
        assert not swaps and not cleaned, swaps + cleaned
        ckpt = (data / "cleaner-offset-checkpoint").read_text().split("\n")
        assert f"{TOPIC} 0 {end1}" in ckpt, f"the checkpoint was to hold the first round's end {end1}: {ckpt}"
        return
    b, e = rnd["began"][-1]
    assert rnd["began"][-1] not in rnd["swapped"], f"{failpoint}: the group's swap returned: {rnd}"
    f = "%020d" % b
    # from before the commit point to the last rename, the swap's end (the next segment's base) is on disk
    assert (partition_dir(data) / (f + ".swap-end")).read_text() == f"{e}\n", (failpoint, sorted(names))
    if failpoint == "clean:before-commit":
        assert {f + ".index.swap", f + ".timeindex.swap", f + ".log.cleaned"} <= names and \
            f + ".log.swap" not in names, sorted(names)
    elif failpoint == "clean:after-commit":
        assert {f + ".log.swap", f + ".log"} <= names, sorted(names)
    elif failpoint == "clean:after-old-deleted":
        assert f + ".log.swap" in names and f + ".log" not in names and f + ".log.deleted" in names, sorted(names)
    elif failpoint == "clean:after-index-renamed":
        assert f + ".log.swap" in names and f + ".index.swap" not in names and f + ".index" in names, sorted(names)
    elif failpoint == "clean:after-swap":
        assert not swaps and not cleaned and f + ".log" in names, swaps + cleaned
    else:
        raise AssertionError(failpoint)


def _verify_open(data, mode, model, expect, where, end, groups=()):
    """Open the data dir in ``mode`` and hold the log to ``expect``; ``groups``: swapped-in groups [base, end),
    each of which must be one cleaned segment at ``base`` ending at or below ``end`` and followed by the segment at
    ``end``: no old segment of the group left beside it (that would bring removed records back)."""
    kw = {"read_only": mode == "read", "exclusive": mode == "exclusive"}
    with LogStore(data, PARENT_CONFIG, maintenance=False, **kw) as store:
        log = store.log(TOPIC, 0)
        ends = {s.base_offset: s.next_offset for s in log.segments()}
        bases = sorted(ends)
        for b, e in groups:
            after = bases[bases.index(b) + 1] if b in ends and bases.index(b) + 1 < len(bases) else None
            assert b in ends and ends[b] <= e and after == e, \
                f"{where}: the cleaned group [{b}, {e}) is a segment ending at {ends.get(b)}, followed by the " \
                f"segment at {after} (seed {SEED})"
        if mode != "read":
            # (e) a writer's open finished or undid the killed swap and removed what it left
            assert not [n for n in leftovers(data) if n.endswith((".swap", ".cleaned"))], \
                f"{where}: leftovers with a writer open: {leftovers(data)} (seed {SEED})"
        assert (log.log_start_offset, log.log_end_offset) == (0, end), \
            f"{where}: log start/end {(log.log_start_offset, log.log_end_offset)}, expected (0, {end}) (seed {SEED})"
        seen = read_log(log, model, where)
        check_latest(seen, model, where)
        check_expect(seen, expect, where, model)
        had_clean = store.had_clean_shutdown
    if mode != "read":
        assert not leftovers(data), f"{where}: leftovers after a writer's close: {leftovers(data)} (seed {SEED})"
    return had_clean, seen


def _failpoint_case(zygote, tmp_path, failpoint, mode, group, env_failpoint=False):
    data = tmp_path / "data"
    seed = SEED + group * 7 + cw.CLEANER_FAILPOINTS.index(failpoint) * 131 + (mode == "shared")
    where = f"{failpoint} in group {group} ({mode})"
    if env_failpoint:
        # build in one process, clean in a fresh interpreter whose failpoint comes from KAFKALOG_FAILPOINTS
        spec = make_spec(tmp_path, "build", data, _build_ops(mode, None, group, seed)[:-1])
        assert_exit(zygote.wait(zygote.spawn(spec)), spec, 0, "the builder")
        spec2 = make_spec(tmp_path, "clean", data, [["open", {"mode": mode}], ["watch_swaps", {}], ["clean", {}]])
        p = subprocess.run([sys.executable, str(WRITER), "run", json.dumps(spec2)], cwd=tmp_path,
                           env=_env(f"{failpoint}=kill"), capture_output=True, text=True, timeout=120)
        Path(spec2["log"]).write_text(p.stdout + p.stderr)
        assert_exit(p.returncode, spec2, -signal.SIGKILL, f"the cleaner with {failpoint}=kill in its environment")
        journal = Rounds(spec["journal"])
        rounds = journal.rounds + Rounds(spec2["journal"]).rounds
    else:
        spec = make_spec(tmp_path, "w", data, _build_ops(mode, failpoint, group, seed))
        assert_exit(zygote.wait(zygote.spawn(spec)), spec, -signal.SIGKILL, f"the cleaner armed at {where}")
        steps = [ln for ln in cw.read_journal(spec["journal"]) if ln[0] == "S"]
        assert steps[-1][2] == "clean" and int(steps[-1][1]) == 11, f"killed in step {steps[-1]}, not the 2nd round"
        journal = Rounds(spec["journal"])
        rounds = journal.rounds
    model = Model()
    model.add_journal(spec["journal"], PHASES)
    end2 = max(model.recs) + 1
    end1 = max(o for o, r in model.recs.items() if r[4] == "A") + 1
    assert len(model.recs) == N_OLD + N_NEW and end2 == N_OLD + N_NEW
    assert len(rounds) == 2 and rounds[0]["end"] is not None and rounds[1]["end"] is None, rounds
    _, removed1, ckpt1, aborted1 = rounds[0]["end"]
    assert ckpt1 == end1 and aborted1 == "-" and removed1 > 0, rounds[0]["end"]
    rnd = rounds[1]
    if failpoint == "clean:before-checkpoint":
        assert len(rnd["swapped"]) >= 3, f"the round was to clean several groups: {rnd}"
    else:
        assert len(rnd["swapped"]) == group - 1, f"{where}: the kill was to come in group {group}: {rnd}"
    _assert_kill_point(data, failpoint, rnd, end1, end2)

    # the model of what the log must show: as the first round left it, but the groups of the second round that
    # were committed (swapped in, or the one in progress when the kill came at or after its commit point)
    tombs1 = journal.tombstones
    assert tombs1 is not None and tombs1 <= {o for o in model.recs if o < end1 and model.is_tomb(o)}
    before = model.cleaned(end1, tombs1) | model.appended(end1, end2)
    committed = list(rnd["swapped"])
    in_progress = [g for g in rnd["began"] if g not in rnd["swapped"]]
    if failpoint in POST_COMMIT and failpoint != "clean:before-checkpoint":
        assert len(in_progress) == 1, f"the kill at {failpoint} was to be inside a swap: {rnd}"
        committed += in_progress
    assert committed or failpoint not in POST_COMMIT
    after = model.cleaned(end2, tombs1 | set(range(end1, end2)))
    expect = before.outside(committed) | after.within(committed)
    # (d) the committed groups, and the one the kill cut at or after its commit point, removed records (else a
    # resurrection there would go unseen)
    cut = [committed[-1]] if in_progress and failpoint in POST_COMMIT else []
    for gs in [cut] * bool(cut) + [committed] * bool(committed):
        assert before.within(gs).exact - after.within(gs).exact, \
            f"{where}: the committed group(s) {gs} removed nothing: the test cannot see a resurrection"

    # reopen: read-only first (nobody finished the swap yet), then writers of both kinds, then read-only again
    other = "shared" if mode == "exclusive" else "exclusive"
    for i, m in enumerate(["read", mode, other, "read"]):
        clean, seen = _verify_open(data, m, model, expect, f"{where}, reopen {i} ({m})", end2, committed)
        if i == 0:
            first_seen = set(seen)
        else:
            assert set(seen) == first_seen, f"{where}: reopen {i} ({m}) shows other records than the first did"
        if i == 1:
            assert not clean, f"{where}: the killed cleaner's store was reported clean (seed {SEED})"
    check_cli(zygote, data, tmp_path, fresh=env_failpoint)
    if group == 1 and rnd["began"]:  # (the case is what it claims to be)
        b, e = rnd["began"][0]
        n_in = sum(1 for r in rounds[0]["swapped"] if b <= r[0] < e)
        assert b == 0 and n_in >= 2, f"the first group was to merge several cleaned segments: {rnd}, {rounds[0]}"

    # (g) a second cleaning after the reopen completes and leaves exactly the latest record of each key
    with LogStore(data, PARENT_CONFIG, exclusive=mode == "exclusive", maintenance=False) as store:
        log = store.log(TOPIC, 0)
        rng = random.Random(seed + 3)
        for i in range(N_MORE):
            key = cw.key_for(rng.randrange(KEYS))
            tomb = rng.random() < 0.08
            off = log.append(None if tomb else cw.payload(9, i, key), key=key)
            model.add(off, key, tomb, 9, i, "C")
        log.flush()
        log.roll()
        end3 = log.log_end_offset
        stats = log.run_cleaner(force=True)
        assert stats is not None and not stats.aborted and stats.end_offset == end3 and stats.groups >= 1, stats
        final = model.cleaned(end3, {o for o in first_seen if model.is_tomb(o)} | set(range(end2, end3)))
        where3 = f"{where}, after a second cleaning"
        seen = read_log(log, model, where3)
        check_latest(seen, model, where3)
        check_expect(seen, final, where3, model)
    assert not leftovers(data), leftovers(data)
    _verify_open(data, "read", model, final, f"{where}, read-only after the second cleaning", end3)
    check_cli(zygote, data, tmp_path)


def _cases(slow: bool):
    """(failpoint, mode, group): the first group of the round in both modes, the second in shared mode (default);
    the second in exclusive mode and the third in both (slow). clean:before-checkpoint comes once per round."""
    out = []
    for fp in cw.CLEANER_FAILPOINTS:
        combos = [("exclusive", 2), ("exclusive", 3), ("shared", 3)] if slow else \
            [("exclusive", 1), ("shared", 1), ("shared", 2)]
        for mode, group in combos:
            if fp != "clean:before-checkpoint" or group == 1:
                out.append(pytest.param(fp, mode, group, id=f"{fp}-{mode}-group{group}"))
    return out


@timeout(120)
@pytest.mark.parametrize("failpoint, mode, group", _cases(slow=False))
def test_cleaner_killed_at_failpoint(failpoint, mode, group, zygote, tmp_path):
    """kill -9 at the failpoint in the round's first group (merging several cleaned segments) or a later one (the
    earlier ones swapped in by the same round); then every reopen shows exactly the committed groups cleaned."""
    _failpoint_case(zygote, tmp_path, failpoint, mode, group)


@pytest.mark.slow
@timeout(120)
@pytest.mark.parametrize("failpoint, mode, group", _cases(slow=True))
def test_cleaner_killed_at_failpoint_later_groups(failpoint, mode, group, zygote, tmp_path):
    _failpoint_case(zygote, tmp_path, failpoint, mode, group)


@timeout(120)
@pytest.mark.parametrize("failpoint", ["clean:before-commit", "clean:after-old-deleted"])
def test_cleaner_killed_by_failpoint_from_the_environment(failpoint, zygote, tmp_path):
    """The same, with the failpoint set the documented way (KAFKALOG_FAILPOINTS) in a fresh interpreter, and the
    real ``python -m kafkalog check``."""
    _failpoint_case(zygote, tmp_path, failpoint, "shared", 1, env_failpoint=True)


_EARLY_END_CLEAN = """
import sys
from kafkalog import LogStore
with LogStore(sys.argv[1], {"lock.timeout.ms": 30000}, exclusive=sys.argv[2] == "exclusive",
              maintenance=False) as st:
    st.log(sys.argv[3], 0).run_cleaner(force=True)
print("the cleaner was not killed")
"""


@timeout(120)
@pytest.mark.parametrize("failpoint", ["clean:before-commit", "clean:after-commit", "clean:after-old-deleted",
                                       "clean:after-index-renamed", "clean:after-swap"])
def test_a_swap_whose_cleaned_segment_ends_below_its_group_end_is_finished_whole(failpoint, tmp_path):
    """A group whose last segment loses every record: its cleaned segment ends below the next segment's base, so
    only the swap's end file says where the old group ended. Killed (SIGKILL, KAFKALOG_FAILPOINTS) at each step of
    the swap, the partition then shows, to a reader before any writer and to every writer mode, exactly the latest
    record per key: the emptied segment's records never come back beside the cleaned one."""
    data = tmp_path / "data"
    ts = 1_700_000_000_000
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as st:
        st.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": 1200, "file.delete.delay.ms": 0})
        log = st.log(TOPIC, 0)
        log.append_batch([b"a%d" % i for i in range(5)], keys=[b"a%d" % i for i in range(5)], timestamps=[ts] * 5)
        log.roll()   # [0, 5): the a's
        log.append_batch([b"x%d" % i for i in range(5)], keys=[b"x%d" % i for i in range(5)], timestamps=[ts] * 5)
        log.roll()   # [5, 10): the x's, all written again next: the group [0, 10)'s last segment empties
        log.append_batch([b"X" * 200] * 5, keys=[b"x%d" % i for i in range(5)], timestamps=[ts] * 5)
        log.roll()   # [10, 15): with the two before it over 1200 bytes: a group of its own
        log.append(b"z", key=b"z", timestamp=ts)
        sizes = [(s.base_offset, s.size) for s in log.segments()]
    assert [b for b, _ in sizes] == [0, 5, 10, 15] and sizes[0][1] + sizes[1][1] + sizes[2][1] > 1200, sizes
    want = [(i, b"a%d" % i) for i in range(5)] + [(10 + i, b"X" * 200) for i in range(5)] + [(15, b"z")]
    p = subprocess.run([sys.executable, "-c", _EARLY_END_CLEAN, str(data), "exclusive", TOPIC], cwd=tmp_path,
                       env=_env(f"{failpoint}=kill"), capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr[-2000:])
    names = sorted(os.listdir(partition_dir(data)))
    f0 = "%020d" % 0
    if failpoint != "clean:after-swap":
        assert (partition_dir(data) / (f0 + ".swap-end")).read_text() == "10\n", names
    for mode in ("read", "shared", "exclusive", "read"):
        kw = {"read_only": mode == "read", "exclusive": mode == "exclusive"}
        with LogStore(data, PARENT_CONFIG, maintenance=False, **kw) as st:
            log = st.log(TOPIC, 0)
            got = [(r.offset, r.value) for r in log.records()]
            segs = [(s.base_offset, s.next_offset) for s in log.segments()]
        if failpoint == "clean:before-commit":  # not committed: the old segments, every record
            assert [o for o, _ in got] == list(range(16)), (mode, got, segs, names)
        else:
            assert got == want, f"{failpoint}, opened {mode}: {got} (segments {segs}; files {names})"
            assert [b for b, _ in segs] == [0, 10, 15] and segs[0][1] == 5, (mode, segs)
    assert not leftovers(data), leftovers(data)


# ==================================================================================================== 2. a stale view

@timeout(120)
@pytest.mark.parametrize("failpoint", ["clean:after-commit", "clean:after-old-deleted", "clean:after-index-renamed",
                                       "clean:after-swap"])
def test_a_long_lived_shared_view_cleans_after_another_cleaner_died_mid_swap(failpoint, zygote, tmp_path):
    """A shared process (the store of a service whose maintenance thread cleans) has its view of the partition
    loaded; another process's cleaner dies after the commit point of a swap, before it told the other views (its
    generation bump). The long-lived process then cleans: it must not fail, must not be stuck (a round completes
    within two calls), and nothing may be lost, hidden or resurrected, in its view or in a fresh one."""
    data = tmp_path / "data"
    seed = SEED + cw.CLEANER_FAILPOINTS.index(failpoint)
    ops = _build_ops("shared", None, 1, seed)[:-1] + [["close", {}]]
    spec = make_spec(tmp_path, "build", data, ops)
    assert_exit(zygote.wait(zygote.spawn(spec)), spec, 0, "the builder")
    model = Model()
    model.add_journal(spec["journal"], PHASES)
    end2 = max(model.recs) + 1
    where = f"a long-lived view after a cleaner died at {failpoint}"
    with LogStore(data, PARENT_CONFIG, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        read_log(log, model, f"{where}, before")  # the view is loaded
        spec2 = make_spec(tmp_path, "cleaner", data, [["open", {"mode": "shared"}], ["watch_swaps", {}],
                                                      ["arm", {"name": failpoint, "group": 1}], ["clean", {}]])
        assert_exit(zygote.wait(zygote.spawn(spec2)), spec2, -signal.SIGKILL, f"the cleaner armed at {failpoint}")
        rounds = []
        for _ in range(2):
            try:
                stats = log.run_cleaner(force=True)
            except Exception as e:  # noqa: BLE001  (the finding is the exception itself)
                pytest.fail(f"{where}: run_cleaner raised {type(e).__name__}: {e} (seed {SEED})")
            rounds.append(stats)
            seen = read_log(log, model, f"{where}, its view after cleaning")
            check_latest(seen, model, f"{where}, its view after cleaning")
            if stats is not None and not stats.aborted:
                break
        assert rounds[-1] is not None and not rounds[-1].aborted, \
            f"{where}: its cleaner is stuck: {[r and r.aborted for r in rounds]} (seed {SEED})"
        assert rounds[-1].end_offset == end2, rounds[-1]
    final = model.cleaned(end2)
    for m in ("read", "exclusive"):
        _verify_open(data, m, model, final, f"{where}, reopened {m}", end2)
    check_cli(zygote, data, tmp_path)


# ==================================================================================================== 3. processes

MP_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 4096, "index.interval.bytes": 256,
                   "file.delete.delay.ms": 0}


class Torture:
    """A cleaner, two shared writers and a read-only reader on one compacted partition, forked by the zygote."""

    def __init__(self, zygote, tmp, data, rng):
        self.z, self.tmp, self.data, self.rng = zygote, tmp, data, rng
        self.stop = tmp / "stop"
        self.writers: dict[int, tuple[int, dict]] = {}
        self.cleaners: list[tuple[int, dict, str]] = []  # (pid, spec, how it is to end)
        self.ended: set[int] = set()  # cleaners reaped
        self.reader = None

    def _wait_open(self, pid, spec):
        deadline = time.monotonic() + 30
        while not any(ln[0] == "R" for ln in cw.read_journal(spec["journal"])):
            st = self.z.wait(pid, timeout=0)
            if st is not None:
                pytest.fail(f"process {pid} ended ({st}) before it opened (seed {SEED}):\n{_text(spec['log'])}")
            assert time.monotonic() < deadline, f"process {pid} did not open in 30 s (seed {SEED})"
            time.sleep(0.005)

    def start_writer(self, wid):
        spec = make_spec(self.tmp, f"w{wid}", self.data, [
            ["open", {"mode": "shared"}],
            ["writer_loop", {"wid": wid, "keys": 12, "cold": 200, "frozen": 10, "stop_file": str(self.stop),
                             "seed": SEED + wid, "pace": 0.004}],
            ["close", {}]])
        pid = self.z.spawn(spec)
        self.writers[wid] = (pid, spec)
        self._wait_open(pid, spec)

    def start_reader(self):
        spec = make_spec(self.tmp, "reader", self.data, [
            ["open", {"mode": "read"}],
            ["reader_loop", {"journals": [s["journal"] for _, s in self.writers.values()],
                             "cleaner_journals": str(self.tmp / "cleaner*.journal"),
                             "stop_file": str(self.stop), "seed": SEED}]])
        pid = self.z.spawn(spec)
        self.reader = (pid, spec)
        self._wait_open(pid, spec)

    def start_cleaner(self, failpoint=None, hit=1, min_segments=1):
        n = len(self.cleaners)
        ops = [["open", {"mode": "shared"}], ["watch_swaps", {}]]
        if failpoint:
            ops.append(["arm", {"name": failpoint, "hit": hit, "min_segments": min_segments}])
        ops += [["cleaner_loop", {"stop_file": str(self.stop), "seed": SEED + 100 + n}], ["close", {}]]
        spec = make_spec(self.tmp, f"cleaner{n}", self.data, ops)
        pid = self.z.spawn(spec)
        self.cleaners.append((pid, spec, failpoint or "sigkill"))
        return pid, spec

    def complete_rounds(self, spec) -> int:
        return sum(1 for ln in cw.read_journal(spec["journal"]) if ln[0] == "X" and ln[4] == "-")

    def count(self, spec, tag) -> int:
        return sum(1 for ln in cw.read_journal(spec["journal"]) if ln[0] == tag)

    def check_errors(self):
        for _, spec in list(self.writers.values()) + [self.reader] + [(p, s) for p, s, _ in self.cleaners]:
            errors = journal_errors(spec)
            assert not errors, f"{Path(spec['journal']).name}: {errors[:5]} (seed {SEED})"

    def wait_progress(self, fn, floor, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        while fn() <= floor:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} made no progress in {timeout}s (seed {SEED})")
            self.check_errors()
            self.check_alive()
            time.sleep(0.01)

    def check_alive(self):
        """Every process that is to run until the stop file (writers, reader, the current cleaner unless armed)
        still runs."""
        procs = [*self.writers.values(), self.reader]
        if self.cleaners and self.cleaners[-1][2] == "sigkill" and self.cleaners[-1][0] not in self.ended:
            procs.append(self.cleaners[-1][:2])
        for pid, spec in procs:
            st = self.z.wait(pid, timeout=0)
            if st is not None:
                pytest.fail(f"{Path(spec['journal']).stem} ended ({st}) before the stop file (seed {SEED}):\n"
                            f"{_text(spec['log'])}")

    def kill_cleaner(self):
        """End the running cleaner: SIGKILL now (a random moment), or restart it armed and let it die at its
        failpoint; either way it must have died of SIGKILL."""
        pid, spec, how = self.cleaners[-1]
        if how == "sigkill":
            os.kill(pid, signal.SIGKILL)
            st = self.z.wait(pid, timeout=30)
        else:
            st = self.z.wait(pid, timeout=120)
        self.ended.add(pid)
        assert_exit(st, spec, -signal.SIGKILL, f"cleaner {len(self.cleaners) - 1} ({how})")

    def finish(self):
        self.stop.touch()
        for pid, spec in [*self.writers.values(), self.reader, self.cleaners[-1][:2]]:
            assert_exit(self.z.wait(pid, timeout=120), spec, 0, Path(spec["journal"]).stem)


def _check_committed_group(t, cspec, how):
    """A cleaner died at or after the commit point of a group's swap, the others running: a shared writer's open
    (this process's, beside them) finishes the swap, and the group shows none of the records it removed (a record
    with a later acknowledged record of its key below the group's end), nothing else lost."""
    began = [(int(ln[1]), int(ln[2])) for ln in cw.read_journal(cspec["journal"]) if ln[0] == "G"]
    b, e = began[-1]
    model = Model()
    for _, spec in t.writers.values():
        model.add_journal(spec["journal"])
    later = model.latest(e)  # key -> its last acknowledged record below e: every older one there is superseded
    where = f"after a cleaner died at {how} in the group [{b}, {e})"
    with LogStore(t.data, PARENT_CONFIG, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        assert not [n for n in leftovers(t.data) if n.endswith(".swap")], f"{where}: {leftovers(t.data)}"
        # (the writers go on appending: only what their journals held when this began)
        seen = read_log(log, model, where, partial=True)
    back = sorted(o for o in seen if b <= o < e and later[model.recs[o][0]] > o)
    assert not back, f"{where}: {len(back)} records it removed are back (first {back[:5]}) (seed {SEED})"
    # (no cleaner runs now: the killed one is gone, the next one not started)
    missing = sorted(o for o in model.latest().values() if o not in seen)
    assert not missing, f"{where}: latest records {missing[:5]} are gone (seed {SEED})"


def _torture(zygote, tmp_path, kills, seconds_between=(0.3, 1.5)):
    rng = random.Random(SEED)
    data = tmp_path / "data"
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        store.create_topic(TOPIC, 1, MP_TOPIC_CONFIG)
    t = Torture(zygote, tmp_path, data, rng)
    t.start_writer(1)
    t.start_writer(2)
    t.start_reader()
    t.start_cleaner()
    reader_spec = t.reader[1]
    # the armed restarts: first in the middle of a swap (the committed .swap on disk beside the old segments, then
    # in place of them) while the writers and the reader go on, then the other failpoints in a random order
    # (clean:before-checkpoint, hit once per whole round, comes last: only the soak gets there)
    first, last = ["clean:after-commit", "clean:after-old-deleted"], ["clean:before-checkpoint"]
    fps = [fp for fp in cw.CLEANER_FAILPOINTS if fp not in first + last]
    rng.shuffle(fps)
    fps = first + fps + last
    for k in range(kills):
        _, cspec, how = t.cleaners[-1]
        if how == "sigkill":  # once it completed a round (the checkpoint moves on), at a random moment
            t.wait_progress(lambda s=cspec: t.complete_rounds(s), 0, f"cleaner {len(t.cleaners) - 1}", timeout=120)
            time.sleep(rng.uniform(*seconds_between))
        t.kill_cleaner()  # (an armed one dies at its failpoint by itself)
        # what the killed cleaner left is on disk until the next cleaner's open: the reader reads, and opens its
        # store again (every 5 passes), meanwhile
        t.wait_progress(lambda: t.count(reader_spec, "P"), t.count(reader_spec, "P") + 6, "the reader after a kill")
        for wid, (_, wspec) in t.writers.items():
            t.wait_progress(lambda s=wspec: t.count(s, "K"), t.count(wspec, "K") + 20, f"writer {wid} after a kill")
        if how in POST_COMMIT:
            _check_committed_group(t, cspec, how)
        if k % 2 == 0:
            # the first two in the first group merging several segments (the oldest keys' latest records there)
            fp = fps[(k // 2) % len(fps)]
            t.start_cleaner(fp, hit=1 if k < 4 or fp == "clean:before-checkpoint" else rng.randint(1, 4),
                            min_segments=2 if k < 4 else 1)
        else:
            t.start_cleaner()
    _, cspec, how = t.cleaners[-1]
    if how != "sigkill":  # the last one runs to the end without a failpoint
        t.kill_cleaner()
        t.start_cleaner()
        cspec = t.cleaners[-1][1]
    t.wait_progress(lambda: t.complete_rounds(cspec), 0, "the last cleaner", timeout=120)
    t.wait_progress(lambda: t.count(reader_spec, "P"), t.count(reader_spec, "P") + 2, "the reader at the end")
    t.finish()
    t.check_errors()

    # the model: every record the writers were told they appended, each offset handed out once
    model = Model()
    for _, spec in t.writers.values():
        model.add_journal(spec["journal"])
    rj = cw.read_journal(reader_spec["journal"])
    passes = [ln for ln in rj if ln[0] == "P"]
    for ln in rj:
        if ln[0] == "U":
            o, wid, seq, tomb = int(ln[1]), int(ln[2]), int(ln[3]), ln[4] == "1"
            assert o in model.recs, f"the reader saw offset {o} ({wid}, {seq}), nobody appended it (seed {SEED})"
            r = model.recs[o]
            assert r[1] == tomb and (tomb or (r[2], r[3]) == (wid, seq)), \
                f"the reader saw ({wid}, {seq}, tombstone {tomb}) at {o}; appended there: {r} (seed {SEED})"
    swapped = sum(t.count(s, "W") for _, s, _ in t.cleaners)
    removed = sum(int(ln[2]) for _, s, _ in t.cleaners for ln in cw.read_journal(s["journal"]) if ln[0] == "X")
    end = max(model.recs) + 1
    assert sorted(model.recs) == list(range(end)), "shared appends left a hole in the offsets"
    assert len(passes) >= 10 and swapped >= kills and removed > 500, (len(passes), swapped, removed)

    # full model check: a writer's open (recovery of what the killed cleaners left), then a last complete cleaning
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        assert not [n for n in leftovers(data) if n.endswith((".swap", ".cleaned"))], leftovers(data)
        assert (log.log_start_offset, log.log_end_offset) == (0, end)
        seen = read_log(log, model, "after the torture")
        check_latest(seen, model, "after the torture")
        log.roll()
        stats = log.run_cleaner(force=True)
        assert stats is not None and not stats.aborted and stats.end_offset == end, stats
        # delete.retention.ms is a day: every tombstone that is a key's latest record stays
        final = model.cleaned(end)
        final.tombs_required = set(final.tombs_allowed)
        seen = read_log(log, model, "after a last cleaning")
        check_expect(seen, final, "after a last cleaning", model)
    assert not leftovers(data), leftovers(data)
    with LogStore(data, read_only=True) as store:
        seen = read_log(store.log(TOPIC, 0), model, "read-only at the end")
        check_expect(seen, final, "read-only at the end", model)
    check_cli(zygote, data, tmp_path, fresh=True)
    return len(passes), swapped, removed


@timeout(180)
def test_cleaner_killed_while_shared_writers_append_and_a_reader_reads(zygote, tmp_path):
    """A shared cleaner cleaning and rolling over and over beside two shared writers and a read-only reader that
    checks every pass (nothing unknown, offsets increasing, no key's latest record hidden, nothing removed coming
    back); the cleaner killed at random moments and at failpoints, and restarted."""
    _torture(zygote, tmp_path, kills=6)


@pytest.mark.slow
@timeout(1800)
def test_cleaner_torture_soak(zygote, tmp_path):
    _torture(zygote, tmp_path, kills=int(os.environ.get("KAFKALOG_COMPACTION_KILLS", "40")))
