"""Crash tests of the storage layer: real files, real fsync, real SIGKILL.

1. random-point kills of writers that append, flush, delete-before and roll, each followed by a reopen that must
   keep every acknowledged record and delete;
2. kills at exact steps through the named failpoints (KAFKALOG_FAILPOINTS in a fresh interpreter);
3. torn and garbage tails written into the active .log after a kill;
4. two shared writers and a reader in three processes, one writer killed mid-stream.

The writers are tests/storage/crash_writer.py. Kill rounds use its fork server (one interpreter start-up, one fork
per writer); failpoint scenarios start a fresh interpreter so that the failpoint comes from the environment.
``KAFKALOG_CRASH_SEED`` replays a run (the seed is in every failure message), ``KAFKALOG_CRASH_ROUNDS`` sets the
number of random kills.

Every test here is bounded by counts and bytes, never by how long it runs: writers write a fixed number of operations
and are killed when their journal reaches a random count, so a slower or busier machine makes a test slower, never
bigger. What processes saw is checked streaming against a compact model (``Model``: numpy arrays of what each offset
was acknowledged to hold), never kept record by record. Every process started here dies with the test run
(tests/children.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import kafkalog
from kafkalog import LogStore
from kafkalog.errors import CorruptRecordError, OffsetOutOfRangeError

ROOT = Path(kafkalog.__file__).resolve().parents[1]
WRITER = Path(__file__).resolve().with_name("crash_writer.py")

_spec = importlib.util.spec_from_file_location("kafkalog_crash_writer", WRITER)
cw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cw)
children = cw.children  # tests/children.py: popen()/run() whose children die with this process

TOPIC = cw.TOPIC
value_for = cw.value_for
SEED = int(os.environ.get("KAFKALOG_CRASH_SEED", str(random.SystemRandom().randrange(2**31))))
ROUNDS = int(os.environ.get("KAFKALOG_CRASH_ROUNDS", "56"))
PARENT_CONFIG = {"lock.timeout.ms": 10000}
CLEAN_MARKER = ".kafka_cleanshutdown"
LSO_CHECKPOINT = "log-start-offset-checkpoint"


def _env(failpoints: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KAFKALOG_FAILPOINTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if failpoints:
        env["KAFKALOG_FAILPOINTS"] = failpoints
    return env


# ---------------------------------------------------------------------------------------------------- processes

class Zygote:
    """Client of ``crash_writer.py serve``: forks writer processes that the test kills with SIGKILL."""

    def __init__(self):
        self.proc = children.popen([sys.executable, str(WRITER), "serve"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, cwd=ROOT, env=_env(), text=True, bufsize=1)
        self._lock = threading.Lock()

    def _call(self, **req) -> dict:
        with self._lock:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"crash_writer fork server died (exit {self.proc.poll()})")
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
def zygote():
    z = Zygote()
    yield z
    z.close()


def _text(path) -> str:
    try:
        return Path(path).read_text(errors="replace")[-4000:]
    except FileNotFoundError:
        return ""


def make_spec(tmp: Path, name: str, data: Path, ops: list) -> dict:
    return {"dir": str(data), "journal": str(tmp / f"{name}.journal"), "log": str(tmp / f"{name}.out"), "ops": ops}


def run_fresh(spec: dict, failpoint: str | None = None, timeout: float = 60) -> int:
    """Run a scenario in a fresh interpreter, the failpoint (if any) set to kill through KAFKALOG_FAILPOINTS."""
    p = children.run([sys.executable, str(WRITER), "run", json.dumps(spec)], cwd=ROOT,
                     env=_env(f"{failpoint}=kill" if failpoint else None), capture_output=True, text=True,
                     timeout=timeout)
    Path(spec["log"]).write_text(p.stdout + p.stderr)
    return p.returncode


class Journal:
    """A writer's journal, parsed (see crash_writer.py)."""

    def __init__(self, path):
        self.lines = cw.read_journal(path)
        self.path = path

    def values(self, tag: str) -> list[int]:
        return [int(ln[1]) for ln in self.lines if ln[0] == tag]

    def max(self, tag: str, default: int = 0) -> int:
        return max(self.values(tag), default=default)

    def has(self, tag: str) -> bool:
        return any(ln[0] == tag for ln in self.lines)

    def errors(self) -> list[str]:
        return [" ".join(ln[1:]) for ln in self.lines if ln[0] == "E"]

    def last_step(self) -> str | None:
        steps = [ln[2] for ln in self.lines if ln[0] == "S"]
        return steps[-1] if steps else None


def assert_killed(status, spec, what="the writer") -> Journal:
    j = Journal(spec["journal"])
    assert not j.errors(), f"{what} saw broken invariants: {j.errors()} (seed {SEED})"
    assert status == -signal.SIGKILL, (f"{what} exited with {status}, expected SIGKILL (seed {SEED}); its output:\n"
                                       f"{_text(spec['log'])}")
    return j


def wait_for_tag(journal_path, tag: str, pid: int, zygote: Zygote, log_path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(ln[0] == tag for ln in cw.read_journal(journal_path)):
            return
        st = zygote.wait(pid, timeout=0)
        if st is not None:
            pytest.fail(f"writer {pid} ended ({st}) before {tag!r}: {cw.read_journal(journal_path)[-5:]}\n"
                        f"{_text(log_path)}")
        time.sleep(0.002)
    pytest.fail(f"writer {pid}: no {tag!r} line in {timeout}s")


def wait_for_lines(tail: JournalTail, count: int, pid: int, zygote: Zygote, log_path, done=lambda ln: False,
                   timeout: float = 300.0) -> None:
    """Until the journal has ``count`` lines or a line for which ``done(words)`` (the writer's ops are over): a kill
    at a random count of journal lines, not after a random while, so that a busier machine makes the writer no
    bigger. ``timeout`` only catches a writer that hangs."""
    deadline = time.monotonic() + timeout
    while True:
        for ln in tail.lines():
            if done(ln):
                return
        if tail.count >= count:
            return
        st = zygote.wait(pid, timeout=0)
        if st is not None:
            pytest.fail(f"writer {pid} ended ({st}) before {count} journal lines (seed {SEED})\n{_text(log_path)}")
        if time.monotonic() > deadline:
            pytest.fail(f"writer {pid}: {tail.count} journal lines after {timeout} s, waiting for {count}")
        time.sleep(0.002)


# ---------------------------------------------------------------------------------------------------- compact model

class JournalTail:
    """The lines a growing journal got since the last call, split in words, read 1 MiB at a time (never the whole
    journal in memory); a torn last line waits for its newline."""

    def __init__(self, path):
        self.path = path
        self.pos = 0
        self.rest = b""
        self.count = 0  # complete lines read so far

    def lines(self):
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return
        with f:
            f.seek(self.pos)
            while chunk := f.read(1 << 20):
                self.pos += len(chunk)
                data = self.rest + chunk
                cut = data.rfind(b"\n") + 1
                self.rest = data[cut:]
                for ln in data[:cut].split(b"\n")[:-1]:
                    if ln:
                        self.count += 1
                        yield ln.decode().split(" ")


class Seen:
    """Records some process saw, as runs ``(offset, wid, seq0, n)`` (offsets and one writer's sequence numbers going
    up by one), expanded into numpy arrays ``CHUNK`` records at a time and handed to ``check(offsets, wids, seqs)``:
    memory bounded by the chunk, whatever was read."""

    CHUNK = 1 << 16

    def __init__(self, check):
        self.check = check
        self.runs: list[tuple[int, int, int, int]] = []
        self.pending = 0
        self.total = 0

    def add(self, offset: int, wid: int, seq: int, n: int = 1) -> None:
        if self.runs and self.runs[-1][0] + self.runs[-1][3] == offset and self.runs[-1][1] == wid and \
                self.runs[-1][2] + self.runs[-1][3] == seq:
            o, w, q, k = self.runs[-1]
            self.runs[-1] = (o, w, q, k + n)
        else:
            self.runs.append((offset, wid, seq, n))
        self.pending += n
        if self.pending >= self.CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self.runs:
            return
        runs = np.array(self.runs, dtype=np.int64)
        ns = runs[:, 3]
        step = np.arange(int(ns.sum()), dtype=np.int64) - np.repeat(np.cumsum(ns) - ns, ns)
        self.check(np.repeat(runs[:, 0], ns) + step, np.repeat(runs[:, 1], ns), np.repeat(runs[:, 2], ns) + step)
        self.total += self.pending
        self.runs, self.pending = [], 0


class Model:
    """What the shared writers' journals say each offset holds: two numpy arrays (writer id, sequence number; -1 =
    no journal names it: a killed writer's last append), 12 bytes an offset, filled as the journals grow (``refresh``).
    Two appends told the same offset, or a writer's broken invariant (an ``E`` line), fail at once."""

    def __init__(self):
        self.wid = np.full(1 << 16, -1, np.int32)
        self.seq = np.full(1 << 16, -1, np.int64)
        self.top = 0  # one past the highest offset a journal names
        self.tails: dict[int, JournalTail] = {}
        self.appends: dict[int, int] = {}  # wid -> A lines
        self.done: set[int] = set()  # wids whose ops are done (Z)
        self.max_delete = 0  # the highest log start a returned delete-before gave

    def follow(self, wid: int, journal) -> None:
        self.tails[wid] = JournalTail(journal)
        self.appends[wid] = 0

    def refresh(self) -> Model:
        for wid, tail in self.tails.items():
            for ln in tail.lines():
                if ln[0] == "A":
                    base, n, w, seq0 = map(int, ln[1:])
                    assert w == wid, f"writer {wid}'s journal names writer {w}"
                    self._put(base, n, wid, seq0)
                    self.appends[wid] += 1
                elif ln[0] == "D":
                    self.max_delete = max(self.max_delete, int(ln[1]))
                elif ln[0] == "Z":
                    self.done.add(wid)
                elif ln[0] == "E":
                    pytest.fail(f"writer {wid} saw a broken invariant: {' '.join(ln[1:])} (seed {SEED})")
        return self

    def _put(self, base: int, n: int, wid: int, seq0: int) -> None:
        end = base + n
        if end > len(self.wid):
            size = max(end, 2 * len(self.wid))
            self.wid = np.concatenate([self.wid, np.full(size - len(self.wid), -1, np.int32)])
            self.seq = np.concatenate([self.seq, np.full(size - len(self.seq), -1, np.int64)])
        seqs = np.arange(seq0, seq0 + n, dtype=np.int64)
        w, q = self.wid[base:end], self.seq[base:end]
        clash = (w != -1) & ((w != wid) | (q != seqs))
        assert not clash.any(), (
            f"offset {base + int(clash.argmax())} was given to writer {wid}'s record {seq0 + int(clash.argmax())} "
            f"and to writer {w[clash.argmax()]}'s record {q[clash.argmax()]} (seed {SEED})")
        w[:], q[:] = wid, seqs
        self.top = max(self.top, end)

    def unknown(self, offsets, wids, seqs, what: str):
        """Records seen (offsets, writer ids, sequence numbers as arrays): each one a journal names must be what the
        writer was told is there. Returns the mask of those no journal names (to be checked otherwise)."""
        known = np.zeros(len(offsets), bool)
        inside = offsets < self.top
        known[inside] = self.wid[offsets[inside]] != -1
        at = offsets[known]
        bad = (self.wid[at] != wids[known]) | (self.seq[at] != seqs[known])
        if bad.any():
            i = int(bad.argmax())
            pytest.fail(f"{what} saw writer {wids[known][i]}'s record {seqs[known][i]} at offset {at[i]}; writer "
                        f"{self.wid[at[i]]} was told its record {self.seq[at[i]]} went there (seed {SEED})")
        return ~known


class LogImage:
    """The records of a closed log from its start to its end as two numpy arrays (writer id, sequence number),
    read streaming from a read-only store: every record a valid payload, at consecutive offsets, no payload twice,
    and every record a journal names where the journal says (nothing lost, moved or torn)."""

    def __init__(self, data: Path, model: Model):
        model.refresh()
        with LogStore(data, read_only=True) as store:
            log = store.log(TOPIC, 0)
            self.lso, self.leo = log.log_start_offset, log.log_end_offset
            n = self.leo - self.lso
            self.wid, self.seq = np.empty(n, np.int32), np.empty(n, np.int64)
            i = 0
            for rec in log.records():
                assert rec.offset == self.lso + i, f"offset {rec.offset}, {self.lso + i} expected (seed {SEED})"
                got = cw.parse_payload(rec.value)
                assert got is not None, f"corrupt record at {rec.offset}: {rec.value[:40]!r} (seed {SEED})"
                self.wid[i], self.seq[i] = got
                i += 1
            assert i == n, f"records end at {self.lso + i}, the log end offset is {self.leo} (seed {SEED})"
        keys = (self.wid.astype(np.int64) << 40) | self.seq
        uniq, counts = np.unique(keys, return_counts=True)
        if len(uniq) != n:
            dup = int(uniq[counts.argmax()])
            pytest.fail(f"writer {dup >> 40}'s record {dup & ((1 << 40) - 1)} is in the log {counts.max()} times "
                        f"(seed {SEED})")
        assert self.lso >= model.max_delete, f"log start {self.lso} below an acknowledged delete-before " \
                                             f"{model.max_delete} (seed {SEED})"
        assert model.top <= self.leo, f"acknowledged records lost: journals name offsets up to {model.top - 1}, " \
                                      f"the log ends at {self.leo} (seed {SEED})"
        model.unknown(np.arange(self.lso, self.leo, dtype=np.int64), self.wid, self.seq, "the final log")

    def same_as(self, log, where: str) -> None:
        """``log`` (another view of the same data) holds exactly these records."""
        assert (log.log_start_offset, log.log_end_offset) == (self.lso, self.leo), where
        i = 0
        for rec in log.records():
            assert rec.offset == self.lso + i and cw.parse_payload(rec.value) == (self.wid[i], self.seq[i]), \
                f"{where}: offset {rec.offset} differs (seed {SEED})"
            i += 1
        assert i == self.leo - self.lso, f"{where}: {i} records (seed {SEED})"

    def check_seen(self, model: Model, what: str):
        """A check for Seen: what a process saw matches the journals, and the log where no journal names it (records
        below the log start that no journal names, a killed writer's last append since deleted, cannot be checked)."""
        def check(offsets, wids, seqs):
            unk = model.unknown(offsets, wids, seqs, what)
            off, w, q = offsets[unk], wids[unk], seqs[unk]
            keep = off >= self.lso
            off, w, q = off[keep] - self.lso, w[keep], q[keep]
            assert (off < len(self.wid)).all(), f"{what} saw an offset past the log end {self.leo} (seed {SEED})"
            bad = (self.wid[off] != w) | (self.seq[off] != q)
            if bad.any():
                i = int(bad.argmax())
                pytest.fail(f"{what} saw writer {w[i]}'s record {q[i]} at offset {off[i] + self.lso}; the log holds "
                            f"writer {self.wid[off[i]]}'s record {self.seq[off[i]]} (seed {SEED})")
        return check


def read_seen(journal, seen: Seen, start: int = 0, image: LogImage | None = None) -> None:
    """Feed a reader's ``O`` runs to ``seen``; fail on its ``E`` lines and on offsets that do not follow each other
    from ``start`` (but for a jump to the log start a delete-before moved, a ``J`` line). ``image``: the log once
    every writer was gone; the reader's last look (``L``, made after that) must show that log and have read it to
    its end: a view that missed another process's change (an append, a delete-before) fails here."""
    expect = jumped = start
    last = None
    for ln in JournalTail(journal).lines():
        if ln[0] == "L":
            last = tuple(map(int, ln[1:]))
        if ln[0] == "O":
            off, wid, seq, n = map(int, ln[1:])
            assert off == expect or off == jumped > expect, \
                f"a reader saw offset {off} after {expect - 1} (seed {SEED}; {journal})"
            seen.add(off, wid, seq, n)
            expect = off + n
        elif ln[0] == "J":
            jumped = int(ln[1])
        elif ln[0] == "E":
            pytest.fail(f"a reader saw: {' '.join(ln[1:])} (seed {SEED})")
    seen.flush()
    if image is not None:
        assert last == (image.leo, image.lso, image.leo), \
            f"a reader's last look (next offset, log start, log end) was {last}, the log is [{image.lso}, " \
            f"{image.leo}) (seed {SEED}; {journal})"


def consume_json(data: Path, topic: str = TOPIC):
    """(offset, value) of each record ``kafkalog consume --from-beginning --format json`` prints, as it prints them
    (never its whole output in memory); a non-zero exit fails."""
    with tempfile.TemporaryFile() as err:
        p = children.popen([sys.executable, "-m", "kafkalog", "consume", str(data), topic, "--from-beginning",
                            "--format", "json"], stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=_env())
        try:
            for line in p.stdout:
                r = json.loads(line)
                yield r["offset"], r["value"]
            rc = p.wait(timeout=300)
            err.seek(0)
            assert rc == 0, f"kafkalog consume exited {rc}: {err.read()[-3000:]!r}"
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
            p.stdout.close()


# ---------------------------------------------------------------------------------------------------- checks

def partition_dir(data: Path) -> Path:
    return data / f"{TOPIC}-0"


def log_files(data: Path) -> list[str]:
    return sorted(p.name for p in partition_dir(data).iterdir() if p.name.endswith(".log"))


def leftovers(data: Path) -> list[str]:
    return sorted(p.name for p in partition_dir(data).iterdir() if p.name.endswith((".deleted", ".tmp", ".swap")))


def verify_log(log, *, min_leo: int = 0, min_lso: int = 0, where: str = "") -> tuple[int, int]:
    """Every record from the log start to the log end present once, in order, intact; nothing readable below the
    start. Returns (log start offset, log end offset)."""
    lso, leo = log.log_start_offset, log.log_end_offset
    ctx = f"{where} (lso={lso}, leo={leo}, seed {SEED})"
    assert lso <= leo, f"log start above log end {ctx}"
    assert leo >= min_leo, f"acknowledged records lost: log end {leo} < {min_leo} {ctx}"
    assert lso >= min_lso, f"acknowledged delete-before undone: log start {lso} < {min_lso} {ctx}"
    expected = lso
    for rec in log.records():
        assert rec.offset == expected, f"offset {rec.offset} where {expected} was expected {ctx}"
        assert rec.value == value_for(rec.offset), f"corrupt record at {rec.offset}: {rec.value[:60]!r} {ctx}"
        expected += 1
    assert expected == leo, f"records end at {expected}, log end offset is {leo} {ctx}"
    if lso > 0:
        with pytest.raises(OffsetOutOfRangeError):
            log.read(lso - 1)
        with pytest.raises(OffsetOutOfRangeError):
            next(iter(log.records(lso - 1)))
    if leo > lso:
        first = next(iter(log.records(lso)))
        assert first.offset == lso and first.value == value_for(lso), ctx
    cols = log.read_columns()
    assert list(cols["offset"]) == list(range(lso, leo)), f"read_columns offsets differ from records() {ctx}"
    assert log.offset_for_time(-2).offset == lso and log.offset_for_time(-1).offset == leo, ctx
    return lso, leo


def check_cli(data: Path, zygote: Zygote | None = None, tmp: Path | None = None) -> None:
    """``kafkalog check DATA_DIR`` exits 0: in a fresh ``python -m kafkalog`` or, faster, in a forked process that
    runs the same ``kafkalog.cli.main``."""
    if zygote is None:
        p = children.run([sys.executable, "-m", "kafkalog", "check", str(data)], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"kafkalog check {data} exited {p.returncode} (seed {SEED}):\n{p.stdout}{p.stderr}"
        return
    out = tmp / f"check-{time.monotonic_ns()}.out"
    pid = zygote.spawn({"check": str(data), "log": str(out)})
    rc = zygote.wait(pid, timeout=120)
    assert rc == 0, f"kafkalog check {data} exited {rc} (seed {SEED}):\n{_text(out)}"


def make_store(data: Path, n: int, topic_config: dict | None = None, delete_before: int | None = None,
               roll_at_end: bool = False, per: int = 5) -> None:
    """A cleanly closed store holding value_for(0..n-1) (and a log start offset, when asked)."""
    with LogStore(data, exclusive=True, maintenance=False) as store:
        if TOPIC not in store.topics():
            store.create_topic(TOPIC, 1, topic_config or {})
        log = store.log(TOPIC, 0)
        while log.log_end_offset < n:
            leo = log.log_end_offset
            log.append_batch([value_for(leo + i) for i in range(min(per, n - leo))])
        if delete_before is not None:
            assert log.delete_records_before(delete_before) == delete_before
        if roll_at_end:
            log.roll()
        log.flush()


def reopen_verify(data: Path, mode: str = "exclusive", **kw) -> tuple[int, int, bool]:
    with LogStore(data, PARENT_CONFIG, exclusive=mode == "exclusive", maintenance=False) as store:
        lso, leo = verify_log(store.log(TOPIC, 0), **kw)
        return lso, leo, store.had_clean_shutdown


def append_more_and_verify(data: Path, n: int = 40, mode: str = "exclusive") -> int:
    """The log keeps working after the crash: appends continue at the log end and survive a clean reopen."""
    with LogStore(data, PARENT_CONFIG, exclusive=mode == "exclusive", maintenance=False) as store:
        log = store.log(TOPIC, 0)
        lso0, leo0 = verify_log(log, where="before appending after the crash")
        for i in range(0, n, 4):
            leo = log.log_end_offset
            assert log.append_batch([value_for(leo + k) for k in range(4)]) == leo == leo0 + i
    lso, leo, clean = reopen_verify(data, min_leo=leo0 + n, where="clean reopen after appending")
    assert clean and leo == leo0 + n and lso == lso0
    assert not leftovers(data), f"leftover files after a clean close: {leftovers(data)}"
    return leo


# ---------------------------------------------------------------------------------------------------- batch bytes

def batches_of(path: Path) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of each complete batch at the start of a .log file, parsed here
    (the oracle does not use the engine): BaseOffset Int64, Length Int32, ..., LastOffsetDelta Int32 at 23."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 61 <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if length < 49 or pos + 12 + length > len(data) or data[pos + 16] != 2:
            break
        delta = int.from_bytes(data[pos + 23:pos + 27], "big", signed=True)
        out.append((pos, 12 + length, base, base + delta))
        pos += 12 + length
    return out


def active_log(data: Path) -> Path:
    return partition_dir(data) / log_files(data)[-1]


def corrupt_copy_of_last_batch(path: Path, next_offset: int) -> bytes:
    """The last batch of ``path`` re-addressed to ``next_offset`` with one record byte flipped: a complete batch
    whose header is well-formed and whose CRC does not match (only a CRC check can reject it)."""
    pos, size, _, _ = batches_of(path)[-1]
    raw = bytearray(path.read_bytes()[pos:pos + size])
    raw[0:8] = next_offset.to_bytes(8, "big")
    raw[size - 2] ^= 0x5A
    return bytes(raw)


# ==================================================================================================== 1. random kills

RANDOM_TOPIC_CONFIG = {"segment.bytes": 3000, "index.interval.bytes": 200, "segment.index.bytes": 96}
# a kill round's writer does at most RANDOM_STEPS random ops (at most 25 records of at most 110 bytes each: 7,500
# records, 0.9 MB a round at the very most; delete-befores keep the log small), then sleeps until killed; it is killed
# when its journal has a random count of lines below RANDOM_KILL_LINES (about one an op)
RANDOM_STEPS = 300
RANDOM_KILL_LINES = 100


def _kill_round(zygote, tmp, data, rnd, rng, state) -> None:
    writer_mode = rng.choice(["exclusive", "shared"])
    spec = make_spec(tmp, f"r{rnd}", data, [
        ["open", {"mode": writer_mode, "maintenance": rng.random() < 0.3}],
        ["random", {"seed": rng.randrange(2**32), "steps": RANDOM_STEPS}],
        ["sleep", {"s": 600}],
    ])
    where = f"round {rnd} (writer {writer_mode})"
    pid = zygote.spawn(spec)
    if rng.random() < (0.5 if state["unrecovered"] else 0.12):
        time.sleep(rng.uniform(0, 0.03))  # during start-up: the open, the recovery of the previous crash
    else:
        wait_for_tag(spec["journal"], "R", pid, zygote, spec["log"])
        # at a random count of journal lines (about one an op), a random moment of the op it is in
        wait_for_lines(JournalTail(spec["journal"]), rng.randrange(RANDOM_KILL_LINES), pid, zygote, spec["log"],
                       done=lambda ln: ln[0] == "S" and ln[2] == "sleep")
        time.sleep(rng.uniform(0, 0.01))
    os.kill(pid, signal.SIGKILL)
    j = assert_killed(zygote.wait(pid), spec, where)
    state["kills"] += 1
    opened = j.has("R")
    min_leo = max(state["leo"], j.max("W"), j.max("F"))
    min_lso = max(state["lso"], j.max("D"))
    # a delete-before that was running may or may not be in effect; nothing else may move the start
    allowed_lso = {min_lso} | {x for x in j.values("d") if x > min_lso}

    if rng.random() < 0.3:
        # a reader looks at the crashed store before any writer recovered it
        with LogStore(data, read_only=True) as ro:
            ro_lso, ro_leo = verify_log(ro.log(TOPIC, 0), min_leo=min_leo, min_lso=min_lso,
                                        where=f"{where}, read-only before recovery")
        assert ro_lso in allowed_lso, f"{where}: read-only log start {ro_lso} not in {sorted(allowed_lso)}"
        if rng.random() < 0.5:
            # leave the recovery to the next writer (which may be killed while it recovers)
            state["leo"], state["lso"], state["unrecovered"] = ro_leo, ro_lso, True
            return

    reopen_mode = rng.choice(["exclusive", "shared"])
    where += f", reopened {reopen_mode}"
    with LogStore(data, PARENT_CONFIG, exclusive=reopen_mode == "exclusive", maintenance=False) as store:
        if opened:
            assert not store.had_clean_shutdown, f"{where}: a killed writer's store was reported clean"
        lso, leo = verify_log(store.log(TOPIC, 0), min_leo=min_leo, min_lso=min_lso, where=where)
    assert lso in allowed_lso, f"{where}: log start {lso} is not an acknowledged or attempted one {sorted(allowed_lso)}"
    assert not leftovers(data), f"{where}: leftovers after reopen and close: {leftovers(data)}"
    check_cli(data, zygote, tmp)
    state["leo"], state["lso"], state["unrecovered"] = leo, lso, False


def _random_kills(zygote, tmp_path, rounds, seed):
    rng = random.Random(seed)
    data = tmp_path / "data"
    make_store(data, 0, RANDOM_TOPIC_CONFIG)
    state = {"leo": 0, "lso": 0, "kills": 0, "unrecovered": False}
    for rnd in range(rounds):
        _kill_round(zygote, tmp_path, data, rnd, rng, state)
    # a last reopen by a writer, and the real command line
    lso, leo, _ = reopen_verify(data, min_leo=state["leo"], min_lso=state["lso"], where="final reopen")
    check_cli(data)
    return state


def test_random_kills(zygote, tmp_path):
    state = _random_kills(zygote, tmp_path, ROUNDS, SEED)
    assert state["kills"] >= min(50, ROUNDS)
    assert state["leo"] > 0, "the writers never got anything acknowledged: the kill rounds tested nothing"


@pytest.mark.slow
def test_random_kills_soak(zygote, tmp_path):
    state = _random_kills(zygote, tmp_path, 10 * ROUNDS, SEED + 1)
    assert state["kills"] >= 10 * ROUNDS


# ==================================================================================================== 2. failpoints

SMALL_SEGMENTS = {"segment.bytes": 1024, "index.interval.bytes": 128}


def _run_to_failpoint(tmp, data, failpoint, ops, step) -> Journal:
    spec = make_spec(tmp, "fp", data, ops)
    j = assert_killed(run_fresh(spec, failpoint), spec, f"writer with {failpoint}=kill")
    assert j.last_step() == step, f"killed in step {j.last_step()!r}, expected in {step!r}: {j.lines[-4:]}"
    return j


def fp_append_before_write(tmp, data, z):
    make_store(data, 50)
    _run_to_failpoint(tmp, data, "append:before-write",
                      [["open", {}], ["append", {"n": 10, "how": "batch", "per": 10}]], "append")
    _, leo, clean = reopen_verify(data, min_leo=50)
    assert not clean and leo == 50, f"nothing was written before the kill, yet log end is {leo}"
    append_more_and_verify(data)


def fp_append_after_write(tmp, data, z):
    make_store(data, 50)
    _run_to_failpoint(tmp, data, "append:after-write",
                      [["open", {"mode": "shared"}], ["append", {"n": 10, "how": "batch", "per": 10}]], "append")
    _, leo, clean = reopen_verify(data, min_leo=50)
    # the batch was completely written (page cache) before the kill: recovery keeps valid batches
    assert not clean and leo == 60, f"a complete, valid batch was dropped by recovery: log end {leo}, expected 60"
    append_more_and_verify(data)


def fp_flush_after_fsync(tmp, data, z):
    make_store(data, 50)
    j = _run_to_failpoint(tmp, data, "flush:after-fsync",
                          [["open", {}], ["append", {"n": 30, "how": "single"}], ["flush", {}]], "flush")
    assert not j.has("F")
    _, leo, clean = reopen_verify(data, min_leo=80)
    assert not clean and leo == 80
    append_more_and_verify(data)


def fp_roll_after_trim(tmp, data, z):
    make_store(data, 40, SMALL_SEGMENTS)
    before = log_files(data)
    j = _run_to_failpoint(tmp, data, "roll:after-trim",
                          [["open", {}], ["append", {"n": 400, "how": "batch", "per": 3}]], "append")
    assert log_files(data) == before, "the kill was to happen before the new segment was created"
    index = active_log(data).with_suffix(".index")
    assert index.stat().st_size < 10485760, "the active segment's index was to be trimmed before the kill"
    acked = max(40, j.max("W"))
    _, leo, clean = reopen_verify(data, min_leo=acked)
    assert not clean and leo == acked, f"log end {leo}: the batch that triggered the roll was never written ({acked})"
    append_more_and_verify(data, n=120)  # rolls again, through the segment whose indexes were trimmed
    check_cli(data, z, tmp)


def fp_delete_records_after_checkpoint(tmp, data, z):
    make_store(data, 300, SMALL_SEGMENTS)
    before = log_files(data)
    bases = [int(n[:20]) for n in before]
    assert len(bases) >= 4
    x = bases[2] + 2
    _run_to_failpoint(tmp, data, "delete-records:after-checkpoint", [["open", {}], ["delete", {"to": x}]], "delete")
    assert f"{TOPIC} 0 {x}" in (data / LSO_CHECKPOINT).read_text()
    assert log_files(data) == before, "no segment was to be removed before the kill"
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        lso, leo = verify_log(log, min_leo=300, min_lso=x, where="after kill at delete-records:after-checkpoint")
        assert lso == x and leo == 300
        # the loader removes the segments the killed delete left wholly below the log start (they are garbage: a
        # later delete by another writer would otherwise leave them behind a gap)
        assert [s.base_offset for s in log.segments()][0] == bases[2]
        assert log.run_retention() == 0
    assert not leftovers(data)
    assert log_files(data) == before[2:]
    append_more_and_verify(data)
    check_cli(data, z, tmp)


def fp_delete_after_rename(tmp, data, z):
    make_store(data, 300, SMALL_SEGMENTS)
    bases = [int(n[:20]) for n in log_files(data)]
    x = bases[3] + 1
    _run_to_failpoint(tmp, data, "delete:after-rename", [["open", {}], ["delete", {"to": x}]], "delete")
    assert any(p.endswith(".deleted") for p in leftovers(data)), "the kill was to leave .deleted files behind"
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        assert not [p for p in leftovers(data) if p.endswith(".deleted")], \
            f"the loader left .deleted files after an unclean open: {leftovers(data)}"
        lso, leo = verify_log(store.log(TOPIC, 0), min_leo=300, min_lso=x, where="after kill at delete:after-rename")
        assert lso == x and leo == 300
    assert not leftovers(data)
    assert int(log_files(data)[0][:20]) <= x
    append_more_and_verify(data)
    check_cli(data, z, tmp)


def fp_recover_after_segment(tmp, data, z):
    make_store(data, 100)  # one segment: the recovery that is killed is the one that truncates the tail
    spec = make_spec(tmp, "w1", data, [["open", {}], ["append", {"n": 60, "how": "batch", "per": 5}], ["flush", {}],
                                       ["append", {"n": 20, "how": "batch", "per": 5}], ["selfkill", {}]])
    j = assert_killed(z.wait(z.spawn(spec)), spec)
    assert j.max("W") == 180 and j.max("F") == 160
    with open(active_log(data), "ab") as f:
        f.write(random.Random(SEED).randbytes(777))
    _run_to_failpoint(tmp, data, "recover:after-segment", [["open", {}]], "open")
    assert not (data / CLEAN_MARKER).exists()
    _, leo, clean = reopen_verify(data, min_leo=180, where="after a kill during recovery")
    assert not clean and leo == 180
    append_more_and_verify(data)
    check_cli(data, z, tmp)


def _checkpoint_kill(tmp, data, z, failpoint):
    make_store(data, 300, SMALL_SEGMENTS, delete_before=100)
    j = _run_to_failpoint(tmp, data, failpoint,
                          [["open", {}], ["append", {"n": 20, "how": "batch", "per": 5}], ["flush", {}],
                           ["delete", {"to": 200}]], "delete")
    assert j.max("F") == 320 and not j.has("D")
    assert (data / (LSO_CHECKPOINT + ".tmp")).exists(), "the kill was to leave the checkpoint's .tmp behind"
    assert f"{TOPIC} 0 100" in (data / LSO_CHECKPOINT).read_text()
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        lso, leo = verify_log(log, min_leo=320, min_lso=100, where=f"after kill at {failpoint}")
        assert lso == 100 and leo == 320, "the old checkpoint (log start 100) must still be the one in effect"
        assert log.delete_records_before(200) == 200
    lso, _, _ = reopen_verify(data, min_leo=320, min_lso=200)
    assert lso == 200
    append_more_and_verify(data)
    check_cli(data, z, tmp)


def fp_checkpoint_before_fsync(tmp, data, z):
    _checkpoint_kill(tmp, data, z, "checkpoint:before-fsync")


def fp_checkpoint_before_rename(tmp, data, z):
    _checkpoint_kill(tmp, data, z, "checkpoint:before-rename")


def fp_checkpoint_at_close(tmp, data, z):
    """checkpoint:before-rename while close() writes the recovery-point checkpoint (the first checkpoint write of
    that process): the old checkpoint stays in effect, the store is unclean and recovers from the old point."""
    make_store(data, 50)
    _run_to_failpoint(tmp, data, "checkpoint:before-rename",
                      [["open", {}], ["append", {"n": 30, "how": "batch", "per": 5}], ["close", {}]], "close")
    assert (data / "recovery-point-offset-checkpoint.tmp").exists()
    assert f"{TOPIC} 0 50" in (data / "recovery-point-offset-checkpoint").read_text()
    assert not (data / CLEAN_MARKER).exists()
    path = active_log(data)
    with open(path, "ab") as f:
        f.write(corrupt_copy_of_last_batch(path, 80))
    _, leo, clean = reopen_verify(data, min_leo=80, where="after kill writing the recovery-point checkpoint")
    assert not clean and leo == 80, f"log end {leo}: a recovery from the recovery point 50 removes the bad batch"
    append_more_and_verify(data)
    check_cli(data, z, tmp)


def fp_close_before_marker(tmp, data, z):
    make_store(data, 50)
    j = _run_to_failpoint(tmp, data, "close:before-marker",
                          [["open", {}], ["append", {"n": 30, "how": "single"}], ["close", {}]], "close")
    assert not j.has("C")
    assert not (data / CLEAN_MARKER).exists()
    # a well-formed batch with a bad CRC after the end: only a recovery (CRC check) removes it, a clean open would not
    path = active_log(data)
    with open(path, "ab") as f:
        f.write(corrupt_copy_of_last_batch(path, 80))
    _, leo, clean = reopen_verify(data, min_leo=80, where="after kill at close:before-marker")
    assert not clean, "the store was killed before its clean-shutdown marker: the next open must be unclean"
    assert leo == 80, f"the open did not recover: log end {leo} includes a batch with a bad CRC"
    append_more_and_verify(data)
    check_cli(data)


FAILPOINT_CASES = {
    "append:before-write": fp_append_before_write,
    "append:after-write": fp_append_after_write,
    "flush:after-fsync": fp_flush_after_fsync,
    "roll:after-trim": fp_roll_after_trim,
    "delete-records:after-checkpoint": fp_delete_records_after_checkpoint,
    "delete:after-rename": fp_delete_after_rename,
    "recover:after-segment": fp_recover_after_segment,
    "checkpoint:before-fsync": fp_checkpoint_before_fsync,
    "checkpoint:before-rename": fp_checkpoint_before_rename,
    "close:before-marker": fp_close_before_marker,
    "checkpoint:before-rename@close": fp_checkpoint_at_close,
}


@pytest.mark.parametrize("failpoint", list(FAILPOINT_CASES))
def test_failpoint_kill(failpoint, tmp_path, zygote):
    """A kill at the named step (``name@where``: a second place that hits the same failpoint)."""
    FAILPOINT_CASES[failpoint](tmp_path, tmp_path / "data", zygote)


def test_recovery_killed_after_truncating_a_sealed_segment_keeps_later_segments(tmp_path, zygote):
    """Recovery truncates a sealed segment at a bad batch (never-fsynced data) and keeps every later segment: each
    is validated on its own and a valid segment above the log start is never dropped for a gap. Killed between
    segments (recover:after-segment), the next recovery ends in the same state: the bad batch's records gone, the
    later segments' records all there at their offsets, a gap between."""
    data = tmp_path / "data"
    make_store(data, 100, SMALL_SEGMENTS, roll_at_end=True)  # recovery point 100 = base of an empty segment
    spec = make_spec(tmp_path, "w1", data, [["open", {}], ["append", {"n": 150, "how": "batch", "per": 3}],
                                            ["selfkill", {}]])
    j = assert_killed(zygote.wait(zygote.spawn(spec)), spec)
    assert j.max("W") == 250
    seg = partition_dir(data) / "00000000000000000100.log"
    batches = batches_of(seg)
    assert len(log_files(data)) >= 3 and len(batches) >= 3
    later = sorted(int(n[:20]) for n in log_files(data) if n.endswith(".log") and int(n[:20]) > 100)
    # a lost page in never-fsynced data (above the recovery point): the second batch of segment 100 goes bad
    pos, size, bad_base, _ = batches[1]
    raw = bytearray(seg.read_bytes())
    raw[pos + size - 3] ^= 0xFF
    seg.write_bytes(bytes(raw))
    _run_to_failpoint(tmp_path, data, "recover:after-segment", [["open", {}]], "open")
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        assert log.log_end_offset == 250, "the later segments' records must all stay"
        offsets = [r.offset for r in log.records()]
        assert offsets == list(range(0, bad_base)) + list(range(later[0], 250)), \
            f"expected [0, {bad_base}) and [{later[0]}, 250) around the gap"
        log.append_batch([b"after"])
        assert [r.value for r in log.records(250)] == [b"after"]
    check_cli(data, zygote, tmp_path)


# ==================================================================================================== 3. torn tails

def _garbage(path, rng, last):
    return rng.randbytes(rng.randint(1, 5000))


def _zeros(path, rng, last):
    return bytes(rng.randint(1, 8192))


def _truncated_copy(path, rng, last):
    pos, size, _, _ = batches_of(path)[-1]
    raw = bytearray(path.read_bytes()[pos:pos + size])
    raw[0:8] = last.to_bytes(8, "big")  # as the next batch would have started
    return bytes(raw[:rng.randint(1, size - 1)])


TAILS = {"garbage": _garbage, "zeros": _zeros, "truncated-copy": _truncated_copy,
         "flipped-crc": None, "flipped-payload": None, "bad-crc-copy": None}


@pytest.mark.parametrize("room", ["none", "preallocated"])
@pytest.mark.parametrize("reopen_mode", ["exclusive", "shared"])
@pytest.mark.parametrize("tail", list(TAILS))
def test_torn_tail(tail, reopen_mode, room, zygote, tmp_path):
    """A writer killed after flushing part of what it appended; its active segment then gets a damaged tail (torn
    bytes, zeros, a partial copy, a flipped CRC or payload bit) where its next batch would go: past the end of the
    file, or (room "preallocated": a ``preallocate`` topic) over the zero-written room past its last batch, with the
    rest of the room still zeros after it. A reader never hands out a damaged record; the recovery keeps every
    flushed record and the valid prefix, and the store takes appends again."""
    rng = random.Random(f"{SEED}-{tail}-{reopen_mode}-{room}")
    data = tmp_path / "data"
    config = {"segment.bytes": 4096, "index.interval.bytes": 256}
    if room == "preallocated":
        config.update({"preallocate": True, "segment.bytes": 65536})
    make_store(data, 200, config)  # clean close: recovery point 200
    spec = make_spec(tmp_path, "w", data, [
        ["open", {"mode": rng.choice(["exclusive", "shared"])}],
        ["append", {"n": 150, "how": "batch", "per": 7}], ["flush", {}],
        ["append", {"n": 40, "how": "single"}],
        ["append", {"n": 20, "how": "batch", "per": 4}], ["selfkill", {}]])
    pid = zygote.spawn(spec)
    j = assert_killed(zygote.wait(pid), spec)
    written = j.max("W")
    assert written == 410 and j.max("F") == 350
    path = active_log(data)
    batches = batches_of(path)
    assert batches and batches[-1][3] + 1 == written
    last_pos, last_size, last_base, _ = batches[-1]
    end = last_pos + last_size
    raw_end = path.stat().st_size
    if room == "preallocated":
        assert raw_end > end and not any(path.read_bytes()[end:]), "the killed writer left zero-written room"
    else:
        assert end == raw_end

    def put_tail(tail_bytes):  # where the writer's next batch would have gone
        with open(path, "r+b") as f:
            f.seek(end)
            f.write(tail_bytes)

    if TAILS[tail] is not None:
        put_tail(TAILS[tail](path, rng, written))
        expected = written
    elif tail == "bad-crc-copy":
        put_tail(corrupt_copy_of_last_batch(path, written))
        expected = written
    else:
        raw = bytearray(path.read_bytes())
        if tail == "flipped-crc":
            raw[last_pos + 17 + rng.randrange(4)] ^= 1 << rng.randrange(8)  # Crc => Uint32 at byte 17
        else:
            raw[last_pos + 61 + rng.randrange(last_size - 61)] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(raw))
        expected = last_base  # the last batch is no longer valid: the valid prefix ends before it
    assert expected >= j.max("F"), "the test may only damage data that was never fsynced"

    # a reader before any recovery: it may stop at the damage, never hand out a damaged record
    with LogStore(data, read_only=True) as ro:
        log = ro.log(TOPIC, 0)
        n = 0
        try:
            for rec in log.records():
                assert rec.value == value_for(rec.offset) and rec.offset == n, f"reader got {rec!r} (seed {SEED})"
                n += 1
        except CorruptRecordError:
            pass
        assert n >= expected - 20

    with LogStore(data, PARENT_CONFIG, exclusive=reopen_mode == "exclusive", maintenance=False) as store:
        assert not store.had_clean_shutdown
        log = store.log(TOPIC, 0)
        lso, leo = verify_log(log, min_leo=j.max("F"), where=f"after a {tail} tail")
        assert leo == expected, f"recovered log end {leo}, the valid prefix ends at {expected} (seed {SEED})"
        assert log.append_batch([value_for(expected + k) for k in range(5)]) == expected
        assert log.append(value_for(expected + 5)) == expected + 5
        log.flush()
    _, leo, clean = reopen_verify(data, min_leo=expected + 6, where=f"reopen after repairing a {tail} tail")
    assert clean and leo == expected + 6
    check_cli(data, zygote, tmp_path)


# ==================================================================================================== 4. processes

MP_TOPIC_CONFIG = {"segment.bytes": 8192, "index.interval.bytes": 512}
# a shared writer of these tests: at most MP_WRITER_OPS appends of at most 6 small records (about 0.6 MB, 24,000
# records), then it waits for the stop file
MP_WRITER_OPS = 4000


class MultiProcess:
    """Shared writers and readers on one store, all forked by the zygote; ``model`` follows the writers' journals."""

    def __init__(self, zygote, tmp, data):
        self.z, self.tmp, self.data = zygote, tmp, data
        self.stop = tmp / "stop"
        self.final = tmp / "writers-gone"  # the readers' last look comes after every writer exited
        self.writers: dict[int, tuple[int, dict]] = {}  # wid -> (pid, spec)
        self.killed: set[int] = set()
        self.readers: list[tuple[int, dict]] = []
        self.model = Model()
        self._reader_tail: JournalTail | None = None
        self._reader_max = -1

    def start_writer(self, wid, extra_ops=(), **kw):
        kw = {"wid": wid, "seed": SEED + wid, "ops": MP_WRITER_OPS, "stop_file": str(self.stop), **kw}
        spec = make_spec(self.tmp, f"w{wid}", self.data, [
            ["open", {"mode": "shared"}], *extra_ops, ["shared_writer", kw], ["close", {}]])
        pid = self.z.spawn(spec)
        self.writers[wid] = (pid, spec)
        self.model.follow(wid, spec["journal"])
        wait_for_tag(spec["journal"], "R", pid, self.z, spec["log"])
        return pid

    def start_reader(self, **kw):
        spec = make_spec(self.tmp, f"reader{len(self.readers)}", self.data, [
            ["open", {"mode": "read"}], ["reader", {"stop_file": str(self.stop), "final_file": str(self.final),
                                                    **kw}]])
        pid = self.z.spawn(spec)
        self.readers.append((pid, spec))
        wait_for_tag(spec["journal"], "R", pid, self.z, spec["log"])

    def appended(self, wid) -> int:
        return self.model.refresh().appends[wid]

    def done(self, wid) -> bool:
        return wid in self.model.refresh().done

    def reader_max(self) -> int:
        """The highest offset the first reader reported."""
        if self._reader_tail is None:
            self._reader_tail = JournalTail(self.readers[0][1]["journal"])
        for ln in self._reader_tail.lines():
            if ln[0] == "O":
                self._reader_max = max(self._reader_max, int(ln[1]) + int(ln[4]) - 1)
        return self._reader_max

    def reader_caught_up(self) -> bool:
        """The reader has seen every record a journal names (the writers may all be done: no more to see)."""
        return self.reader_max() >= self.model.refresh().top - 1

    def wait_progress(self, fn, floor, what, enough=lambda: False, pid=None, spec=None, timeout=300.0):
        """Until fn() > floor, or enough() (a writer whose ops are done, a reader with nothing left to read); fails
        at once when process ``pid`` ends. ``timeout`` only catches a process that hangs."""
        deadline = time.monotonic() + timeout
        while fn() <= floor and not enough():
            if pid is not None and (st := self.z.wait(pid, timeout=0)) is not None:
                pytest.fail(f"{what} exited {st} (seed {SEED}):\n{_text(spec['log'])}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} made no progress in {timeout}s (seed {SEED})")
            time.sleep(0.005)

    def wait_appends(self, wid, count):
        """Until writer ``wid`` journaled ``count`` appends or its ops are done."""
        pid, spec = self.writers[wid]
        self.wait_progress(lambda: self.appended(wid), count - 1, f"writer {wid}", enough=lambda: self.done(wid),
                           pid=pid, spec=spec)

    def kill(self, wid):
        pid, spec = self.writers[wid]
        os.kill(pid, signal.SIGKILL)
        assert_killed(self.z.wait(pid), spec, f"writer {wid}")
        self.killed.add(wid)

    def finish(self):
        """Stop file: every writer still alive finishes its ops, closes and exits 0; so do the readers."""
        self.stop.touch()
        for wid, (pid, spec) in self.writers.items():
            if wid in self.killed:
                continue
            st = self.z.wait(pid, timeout=300)
            assert st == 0, f"writer {wid} exited {st} (seed {SEED}):\n{_text(spec['log'])}"
        self.final.touch()
        for pid, spec in self.readers:
            st = self.z.wait(pid, timeout=300)
            assert st == 0, f"reader exited {st} (seed {SEED}):\n{_text(spec['log'])}"
        self.model.refresh()

    def verify(self) -> tuple[LogImage, int]:
        """The log: every offset holds one intact record, each payload once, every acknowledged append where its
        writer was told, the same after an exclusive (recovering) open; the readers: never a torn or corrupt record,
        offsets in order, what they saw is what the log holds. Returns (the log's image, records the readers saw)."""
        image = LogImage(self.data, self.model)
        with LogStore(self.data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
            image.same_as(store.log(TOPIC, 0), "an exclusive open after the run")
        seen = 0
        for r, (_, spec) in enumerate(self.readers):
            s = Seen(image.check_seen(self.model, f"reader {r}"))
            read_seen(spec["journal"], s, image=image)
            seen += s.total
        return image, seen


@pytest.mark.parametrize("room", ["none", "preallocated"])
def test_two_shared_writers_and_a_reader_with_kills(room, zygote, tmp_path):
    """Shared writers (at most MP_WRITER_OPS appends each, 5 writers) and a reader; three writers killed at a random
    count of appends: the survivor and the reader go on, nothing acknowledged is lost, moved or torn. Room
    "preallocated": a ``preallocate`` topic, every append overwriting zero-written room that readers must tell from
    batches and killed writers leave behind."""
    rng = random.Random(f"{SEED}-{room}")
    data = tmp_path / "data"
    make_store(data, 0, dict(MP_TOPIC_CONFIG, preallocate=True) if room == "preallocated" else MP_TOPIC_CONFIG)
    mp = MultiProcess(zygote, tmp_path, data)
    mp.start_reader()
    mp.start_writer(1)
    mp.start_writer(2)
    for w in (1, 2):
        mp.wait_appends(w, 21)
    live, next_wid = [1, 2], 3
    for _ in range(3):
        victim = rng.choice(live)
        mp.wait_appends(victim, mp.appended(victim) + rng.randint(20, 300))
        time.sleep(rng.uniform(0, 0.005))
        mp.kill(victim)
        live.remove(victim)
        survivor = live[0]
        # the survivor keeps appending, the reader keeps reading past what it had when the writer died
        mp.wait_appends(survivor, mp.appended(survivor) + 31)
        mp.wait_progress(mp.reader_max, mp.reader_max() + 30, "the reader after a kill", enough=mp.reader_caught_up,
                         pid=mp.readers[0][0], spec=mp.readers[0][1])
        mp.start_writer(next_wid)
        live.append(next_wid)
        next_wid += 1
    mp.finish()
    image, seen = mp.verify()
    assert image.lso == 0
    check_cli(data)
    assert image.leo > 200 and seen > 100


def _second_writer_killed_at(zygote, tmp_path, failpoint: str, what: str) -> None:
    """Writer 1 appends, a reader reads; writer 2 joins armed with ``failpoint`` and dies there (kill -9); writer 1
    goes on for 200 more appends and the reader must follow: everything verified, `kafkalog check` clean."""
    data = tmp_path / "data"
    make_store(data, 0, MP_TOPIC_CONFIG)
    mp = MultiProcess(zygote, tmp_path, data)
    mp.start_reader()
    mp.start_writer(1)
    mp.wait_appends(1, 21)
    mp.start_writer(2, extra_ops=[["arm", {"name": failpoint}]])
    pid2, spec2 = mp.writers[2]
    st = mp.z.wait(pid2, timeout=30)
    assert_killed(st, spec2, f"writer 2 (killed by {failpoint})")
    mp.killed.add(2)
    mp.wait_appends(1, mp.appended(1) + 200)
    mp.wait_progress(mp.reader_max, mp.reader_max() + 100, f"the reader after writer 2 died {what}",
                     enough=mp.reader_caught_up, pid=mp.readers[0][0], spec=mp.readers[0][1])
    mp.finish()
    image, _ = mp.verify()
    assert image.lso == 0
    check_cli(data)


def test_shared_writer_killed_mid_roll_while_another_appends(zygote, tmp_path):
    """A shared writer dies between sealing the active segment (its indexes trimmed) and creating the next one
    (roll:after-trim); the other writer, which still has that segment open, must keep appending to it safely."""
    _second_writer_killed_at(zygote, tmp_path, "roll:after-trim", "mid-roll")


def test_shared_writer_killed_after_creating_the_next_segment(zygote, tmp_path):
    """A shared writer dies after it created the next segment and before it counted the roll (roll:after-create):
    the other writer's view is unchanged by the change counter, yet it must append to the new segment, never past
    its base in the sealed one."""
    _second_writer_killed_at(zygote, tmp_path, "roll:after-create", "having created a segment")


# ============================================================================================ 5. issue 10 regressions

def test_damaged_index_hint_never_shortens_a_shared_writers_view(tmp_path):
    """A shared opener loads the active segment's tail from the last offset-index entry. An entry that does not
    name a batch start (damaged index) must not end the view there: the first append would cut everything past
    it as a torn tail, flushed records included."""
    data = tmp_path / "data"
    make_store(data, 400, {"index.interval.bytes": 128})
    idx = partition_dir(data) / ("%020d.index" % 0)
    raw = bytearray(idx.read_bytes())
    assert len(raw) >= 16, "the segment needs index entries"
    prev = int.from_bytes(raw[-12:-8], "big")
    raw[-4:] = (prev + 7).to_bytes(4, "big")  # the last entry's position: ordered, but not a batch start
    idx.write_bytes(bytes(raw))
    size = (partition_dir(data) / ("%020d.log" % 0)).stat().st_size
    with LogStore(data, PARENT_CONFIG, maintenance=False) as store:  # shared, clean: no recovery
        log = store.log(TOPIC, 0)
        assert log.log_end_offset == 400
        assert log.append_batch([value_for(400)]) == 400
        assert (partition_dir(data) / ("%020d.log" % 0)).stat().st_size > size, "the .log was cut"
        verify_log(log, min_leo=401, where="after a shared append over a damaged index")


def test_sealed_segment_with_damaged_indexes_is_rebuilt_not_cut(tmp_path, unclean):
    """Index files that disagree with their .log are rebuilt from the .log; the .log is never truncated to what a
    damaged index covers (a bad batch in a sealed, fsynced segment stays, and a read of it fails naming it)."""
    data = tmp_path / "data"
    make_store(data, 300, SMALL_SEGMENTS)
    sealed = partition_dir(data) / log_files(data)[1]
    before = sealed.read_bytes()
    for suffix in (".index", ".timeindex"):
        f = sealed.with_suffix(suffix)
        f.write_bytes(bytes(f.stat().st_size or 24))  # zeroed
    raw = bytearray(before)
    pos, size, bad_base, _ = batches_of(sealed)[-1]
    raw[pos + size - 2] ^= 0x5A
    sealed.write_bytes(bytes(raw))
    unclean(data)
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        assert log.log_end_offset == 300
        assert len(sealed.read_bytes()) == len(before), "the sealed segment's .log was cut"
        with pytest.raises(CorruptRecordError):
            list(log.records())
        after = int(log_files(data)[2][:20])
        assert [r.offset for r in log.records(after)] == list(range(after, 300))


def test_unflushed_damage_with_zeroed_indexes_keeps_every_flushed_record(tmp_path, zygote):
    """A corrupt byte in the never-flushed tail of the active segment, its index files zeroed: recovery cuts at
    the damaged batch, never below what flush() made durable."""
    data = tmp_path / "data"
    make_store(data, 0)
    spec = make_spec(tmp_path, "w", data, [["open", {}], ["append", {"n": 200, "how": "batch", "per": 5}],
                                           ["flush", {}], ["append", {"n": 60, "how": "batch", "per": 5}],
                                           ["selfkill", {}]])
    j = assert_killed(zygote.wait(zygote.spawn(spec)), spec)
    flushed = j.max("F")
    assert flushed == 200
    seg = active_log(data)
    pos, size, bad_base, _ = batches_of(seg)[-3]
    assert bad_base >= flushed
    raw = bytearray(seg.read_bytes())
    raw[pos + size - 2] ^= 0xFF
    seg.write_bytes(bytes(raw))
    for suffix in (".index", ".timeindex"):
        f = seg.with_suffix(suffix)
        f.write_bytes(bytes(f.stat().st_size))
    _, leo, clean = reopen_verify(data, min_leo=flushed)
    assert not clean and leo == bad_base
    check_cli(data, zygote, tmp_path)


def test_killed_delete_leaves_no_gap_when_another_writer_deletes(tmp_path, zygote, unclean):
    """kill -9 between the log-start checkpoint and the segment deletes leaves segments below the log start; a
    later delete by another shared writer (whose view has dropped them) must not leave them behind a gap, and
    recovery must remove them as garbage and keep every segment above the log start."""
    data = tmp_path / "data"
    make_store(data, 300, SMALL_SEGMENTS)
    bases = [int(n[:20]) for n in log_files(data)]
    assert len(bases) >= 8
    x, y = bases[2] + 2, bases[5] + 1
    with LogStore(data, PARENT_CONFIG, maintenance=False) as other:  # a shared writer running all along
        log = other.log(TOPIC, 0)
        assert log.log_end_offset == 300
        _run_to_failpoint(tmp_path, data, "delete-records:after-checkpoint",
                          [["open", {"mode": "shared"}], ["delete", {"to": x}]], "delete")
        assert log.delete_records_before(y) == y
        on_disk = [int(n[:20]) for n in log_files(data)]
        assert on_disk[0] == bases[5], f"segments below the log start left on disk: {on_disk}"
    check_cli(data, zygote, tmp_path)
    unclean(data)
    lso, leo, _ = reopen_verify(data, min_leo=300, min_lso=y)
    assert (lso, leo) == (y, 300)


def test_recovery_removes_leftovers_below_the_start_and_keeps_segments_across_a_gap(tmp_path, zygote, unclean):
    """Segments wholly below the checkpointed log start are garbage to remove; a gap above the log start (here:
    a middle segment's files gone) is reported and every valid segment after it kept."""
    data = tmp_path / "data"
    make_store(data, 300, SMALL_SEGMENTS)
    bases = [int(n[:20]) for n in log_files(data)]
    x = bases[3] + 1
    (data / LSO_CHECKPOINT).write_text(f"0\n1\n{TOPIC} 0 {x}\n")
    gone = bases[5]
    for suffix in (".log", ".index", ".timeindex"):
        (partition_dir(data) / ("%020d%s" % (gone, suffix))).unlink()
    unclean(data)
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        log = store.log(TOPIC, 0)
        assert log.log_start_offset == x and log.log_end_offset == 300
        offsets = [r.offset for r in log.records()]
        assert offsets == list(range(x, gone)) + list(range(bases[6], 300))
        assert all(r.value == value_for(r.offset) for r in log.records())
    assert [int(n[:20]) for n in log_files(data)] == bases[3:5] + bases[6:]
    check_cli(data, zygote, tmp_path)


def test_second_shared_writer_starts_from_the_checkpointed_recovery_point(tmp_path):
    """A non-first shared opener cannot know what others appended and never flushed: its recovery point is the
    checkpointed one (what some process really fsynced), never the log end, so its flush() fsyncs those too."""
    data = tmp_path / "data"
    make_store(data, 50)
    with LogStore(data, PARENT_CONFIG, maintenance=False) as first:
        a = first.log(TOPIC, 0)
        a.append_batch([value_for(50 + i) for i in range(50)])  # page cache only
        with LogStore(data, PARENT_CONFIG, maintenance=False) as second:
            b = second.log(TOPIC, 0)
            assert b.log_end_offset == 100
            assert b.recovery_point <= 50, f"the second writer took {b.recovery_point} for fsynced"
            b.flush()
            assert b.recovery_point == 100


def test_flush_makes_the_directory_entry_of_another_writers_segment_durable(tmp_path, monkeypatch):
    """flush() fsyncs the partition directory when it covers a segment this process did not create (another
    process's roll, or an earlier run's): without it a power loss loses the whole segment."""
    import kafkalog.storage.log as logmod
    data = tmp_path / "data"
    make_store(data, 20, SMALL_SEGMENTS)
    synced = []
    real = logmod.fsync_dir
    monkeypatch.setattr(logmod, "fsync_dir", lambda p: (synced.append(Path(p)), real(p)))
    with LogStore(data, PARENT_CONFIG, maintenance=False) as a, LogStore(data, PARENT_CONFIG, maintenance=False) as b:
        la, lb = a.log(TOPIC, 0), b.log(TOPIC, 0)
        la.flush()
        assert partition_dir(data) in synced, "the first flush after open must cover segments made by others"
        synced.clear()
        la.flush()
        assert not synced, "nothing new: no directory fsync"
        n = len(lb.segments())
        while len(lb.segments()) == n:  # b rolls into a new segment
            lb.append_batch([value_for(lb.log_end_offset)])
        la.append_batch([value_for(la.log_end_offset)])
        la.flush()
        assert partition_dir(data) in synced, "a segment rolled by another writer: flush must fsync the directory"


def test_a_topic_created_again_starts_at_zero_after_a_cut_off_delete(tmp_path):
    """delete_topic cut off after its directories were gone but before the checkpoints forgot the topic: a topic
    created with the same name starts empty at offset 0, not at the old log start."""
    data = tmp_path / "data"
    make_store(data, 30, delete_before=10)
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        store.delete_topic(TOPIC)
    (data / LSO_CHECKPOINT).write_text(f"0\n1\n{TOPIC} 0 10\n")  # the forget never reached the disk
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        store.create_topic(TOPIC, 1)
        log = store.log(TOPIC, 0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
        assert log.append_batch([b"new"]) == 0
    with LogStore(data, PARENT_CONFIG, read_only=True) as store:
        assert [r.value for r in store.log(TOPIC, 0).records()] == [b"new"]


# ============================================================================================ 6. multi-process torture

def _cli(args, timeout=300) -> subprocess.CompletedProcess:
    """A kafkalog command whose output is small (topics, offsets, one record): for a whole log, consume_json()."""
    return children.run([sys.executable, "-m", "kafkalog", *map(str, args)], cwd=ROOT, env=_env(),
                        capture_output=True, text=True, timeout=timeout)


def tools_agree(data: Path, topic: str = TOPIC, expect_end: int | None = None, on_record=None) -> tuple[int, int]:
    """Every tool and a read-only store see the same log start and end, and consume prints every record between
    (read as it prints them; ``on_record(offset, value)`` sees each); ``kafkalog check`` exits 0. Returns
    (log start, log end)."""
    rows = json.loads(_cli(["topics", data, "--json"]).stdout)
    row = next(r for r in rows if r["topic"] == topic and r["partition"] == 0)
    latest = json.loads(_cli(["offsets", data, topic, "--time", "latest", "--json"]).stdout)
    earliest = json.loads(_cli(["offsets", data, topic, "--time", "earliest", "--json"]).stdout)
    with LogStore(data, read_only=True) as store:
        log = store.log(topic, 0)
        lso, leo = log.log_start_offset, log.log_end_offset
        size = log.size_in_bytes
        n_records = sum(1 for _ in log.records())
    on_disk = sum(p.stat().st_size for p in (data / f"{topic}-0").glob("*.log"))
    printed = lso
    for offset, value in consume_json(data, topic):
        assert offset == printed, f"consume printed offset {offset} where {printed} was expected (seed {SEED})"
        if on_record is not None:
            on_record(offset, value)
        printed += 1
    facts = {"topics start": row["log_start_offset"], "topics end": row["log_end_offset"],
             "offsets earliest": earliest[0]["offset"], "offsets latest": latest[0]["offset"],
             "reader start": lso, "reader end": leo}
    assert len({facts["topics start"], facts["offsets earliest"], facts["reader start"]}) == 1, facts
    assert len({facts["topics end"], facts["offsets latest"], facts["reader end"]}) == 1, facts
    if expect_end is not None:
        assert leo == expect_end, facts
    assert printed == leo and n_records == leo - lso, \
        f"consume printed {printed - lso} records, the log holds {leo - lso} from {lso} ({facts})"
    assert row["size_bytes"] == size and size >= on_disk - (1 << 20), (row["size_bytes"], size, on_disk)
    check_cli(data)
    return lso, leo


def test_a_shared_writer_keeps_another_processes_megabytes(tmp_path, child_env):
    """Issue 10, defect 1: a shared writer whose view is older than another process's append of more than 4 MiB
    must take it all in (not stop at a read chunk and cut the rest as a torn tail)."""
    data = tmp_path / "data"
    with LogStore(data, PARENT_CONFIG, maintenance=False) as store:
        store.create_topic(TOPIC, 1)
        log = store.log(TOPIC, 0)
        log.append(b"first")
        log.flush()
        seg = partition_dir(data) / ("%020d.log" % 0)
        p = children.run([sys.executable, "-m", "kafkalog", "produce", data, TOPIC], input="".join(
            f"{i}\n" for i in range(1, 600_001)), capture_output=True, text=True, env=child_env, timeout=300)
        assert p.returncode == 0 and "produced 600000 records" in p.stderr, p.stderr
        size = seg.stat().st_size
        assert size > 5 << 20
        assert log.log_end_offset == 600_001
        assert seg.stat().st_size == size, "the .log shrank"
        assert log.append(b"last") == 600_001
    lso, leo = tools_agree(data, expect_end=600_002)
    with LogStore(data, read_only=True) as store:
        values = [r.value for r in store.log(TOPIC, 0).records()]
    assert values == [b"first"] + [b"%d" % i for i in range(1, 600_001)] + [b"last"]


def test_readers_and_tools_see_every_batch_after_a_writer_is_killed(tmp_path, zygote):
    """Issue 10, defect 2: after a writer appended megabytes and was killed (no clean shutdown, nobody recovered
    yet), a read-only store and every CLI tool see every complete batch up to the true end, and agree."""
    data = tmp_path / "data"
    make_store(data, 0, {"segment.bytes": 3 << 20})
    spec = make_spec(tmp_path, "w", data, [["open", {"mode": "shared"}],
                                           ["append", {"n": 90_000, "how": "batch", "per": 500}],
                                           ["selfkill", {}]])
    j = assert_killed(zygote.wait(zygote.spawn(spec)), spec)
    assert j.max("W") == 90_000
    assert sum(p.stat().st_size for p in partition_dir(data).glob("*.log")) > 5 << 20
    assert len(log_files(data)) >= 2
    tools_agree(data, expect_end=90_000)
    c = _cli(["consume", data, TOPIC, "--offset", 45_000, "--partition", 0, "--max-messages", 1, "--format", "json"])
    assert json.loads(c.stdout)["offset"] == 45_000, c.stdout


# The torture's writers: TORTURE_OPS operations each, TORTURE_BURSTS of them bursts of 1/4 to 1 times
# TORTURE_BURST_BYTES of 2 KiB records; 3 writers, and one more for each kill
TORTURE_OPS = 400
TORTURE_BURSTS = 4
TORTURE_BURST_BYTES = 6 << 20


def _consume_beside(data: Path, model: Model, late: list) -> int:
    """``kafkalog consume`` while the writers write, read as it prints: every record intact, in order from the log
    start but for a delete-before that moved the start past it while it read, and where its writer was told (the
    few no journal names yet go to ``late``, to be checked against the final log). Returns how many it printed."""
    def check(offsets, wids, seqs):
        unk = model.refresh().unknown(offsets, wids, seqs, "kafkalog consume beside the writers")
        late.extend(zip(offsets[unk].tolist(), wids[unk].tolist(), seqs[unk].tolist()))

    seen = Seen(check)
    prev, jumps = None, []
    for offset, value in consume_json(data):
        got = cw.parse_payload(value.encode())
        assert got is not None, f"consume printed a bad record at {offset}: {value[:60]!r} (seed {SEED})"
        if prev is not None and offset != prev + 1:
            jumps.append((prev, offset))
        prev = offset
        seen.add(offset, *got)
    seen.flush()
    with LogStore(data, read_only=True) as store:
        lso_now = store.log(TOPIC, 0).log_start_offset
    assert all(a < b <= lso_now for a, b in jumps), f"consume skipped {jumps[:5]} (log start {lso_now}, seed {SEED})"
    return seen.total


def _torture(zygote, tmp_path, kills, room="none"):
    """The bound: 3 + ``kills`` writers, each at most TORTURE_OPS appends of at most 6 small records and
    TORTURE_BURSTS bursts of at most TORTURE_BURST_BYTES (3,100 records of 2 KiB): at most 25 MiB and 15,000 records
    a writer, so at most 150 MiB / 90,000 records with kills=3 and 1.1 GB / 650,000 records with kills=40, on disk
    and in total (delete-befores only lower it). Memory: the test process holds 24 bytes an offset at most (Model
    and LogImage: 2.2 MB with kills=3, 16 MB with kills=40) and chunks of 65,536 records (Seen), never a record's
    value or a process's whole output; the writers hold one call's records (64 of 2 KiB), readers and consume one
    read chunk. Measured (issue 21): the test process peaks near 90 MB and its whole process tree near 450 MB (sum
    of RSS), alone or beside four busy CPUs; it was 5.3 GB when the writers wrote until the test ended."""
    rng = random.Random(SEED)
    data = tmp_path / "data"
    # deleted segments wait file.delete.delay.ms before their files go: 5 s keeps the delay (and the readers' open
    # views across it) in play without piling the removed files up
    make_store(data, 0, {"segment.bytes": 16 << 20, "index.interval.bytes": 4096, "file.delete.delay.ms": 5000,
                         "preallocate": room == "preallocated"})
    mp = MultiProcess(zygote, tmp_path, data)

    def writer(wid):
        mp.start_writer(wid, ops=TORTURE_OPS, bursts=TORTURE_BURSTS, burst_bytes=TORTURE_BURST_BYTES, pause_s=0.3,
                        deletes=wid % 3 == 0)

    for r in range(2):
        mp.start_reader(pause_s=0.4, seed=SEED + r)
    live, next_wid = [], 1
    for _ in range(3):
        writer(next_wid)
        live.append(next_wid)
        next_wid += 1
    late: list[tuple[int, int, int]] = []  # records consume printed that no journal named yet
    for _ in range(kills):
        victim = rng.choice([w for w in live if not mp.done(w)] or live)
        # at a random count of its appends (a burst journals a line every 8-64 big records), a moment later
        mp.wait_appends(victim, mp.appended(victim) + rng.randint(1, 150))
        time.sleep(rng.uniform(0, 0.02))
        mp.kill(victim)
        live.remove(victim)
        writer(next_wid)
        live.append(next_wid)
        next_wid += 1
        # a CLI tool beside the writers
        _consume_beside(data, mp.model, late)
    mp.finish()
    image = LogImage(data, mp.model)
    for r, (_, spec) in enumerate(mp.readers):
        read_seen(spec["journal"], Seen(image.check_seen(mp.model, f"reader {r}")), image=image)
    late_seen = Seen(image.check_seen(mp.model, "kafkalog consume beside the writers"))
    for offset, wid, seq in late:
        late_seen.add(offset, wid, seq)
    late_seen.flush()

    def same(offset, value):
        i = offset - image.lso
        assert cw.parse_payload(value.encode()) == (image.wid[i], image.seq[i]), \
            f"consume printed {value[:40]!r} at {offset} (seed {SEED})"

    lso, leo = tools_agree(data, on_record=same)
    assert (lso, leo) == (image.lso, image.leo)
    with LogStore(data, PARENT_CONFIG, exclusive=True, maintenance=False) as store:
        image.same_as(store.log(TOPIC, 0), "an exclusive open after the torture")
    # counts, not luck: the 3 writers alive at the end did all their ops (4 bursts of at least 1.5 MiB each)
    assert mp.model.top > 10_000, mp.model.top


@pytest.mark.parametrize("room", ["none", "preallocated"])
def test_multiprocess_torture(room, zygote, tmp_path):
    """Shared writers appending megabyte bursts (more than 4 MiB while others do not look) and deleting, readers
    that pause, CLI tools beside them, writers killed at random: nothing appended is lost, hidden or moved.
    Bounded by counts (see _torture): 6 writers, at most 150 MiB and 90,000 records written. Room "preallocated":
    the topic's active segment keeps up to 1 MiB of zero-written room past its last batch (``preallocate``)."""
    _torture(zygote, tmp_path, kills=3, room=room)


@pytest.mark.slow
@pytest.mark.parametrize("room", ["none", "preallocated"])
def test_multiprocess_torture_soak(room, zygote, tmp_path):
    """The torture with 40 kills (KAFKALOG_TORTURE_KILLS): 43 writers, at most 1.1 GB and 650,000 records written
    (25 MiB and 15,000 records more a kill)."""
    _torture(zygote, tmp_path, kills=int(os.environ.get("KAFKALOG_TORTURE_KILLS", "40")), room=room)
