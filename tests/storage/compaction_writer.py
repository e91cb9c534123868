"""Processes for tests/storage/test_compaction_crash.py: they build compacted logs, clean them, append keyed records
and read them until they are killed with SIGKILL (by the test, or by a cleaner failpoint).

Two ways to run it (always with the test's interpreter, cwd outside the repository, the repository on PYTHONPATH):

    python compaction_writer.py run SPEC_JSON    run one scenario in this (fresh) interpreter; failpoints may come
                                                 from KAFKALOG_FAILPOINTS
    python compaction_writer.py serve            fork server: imports kafkalog once, then answers JSON lines on stdin
                                                 (spawn / wait), so that many kills do not each pay a start-up

A SPEC is ``{"dir": data dir, "journal": path, "log": path, "ops": [[op, {args}], ...]}``. Every op writes an
``S <i> <op>`` step line to the journal before it starts. Acknowledgements are journal lines written only after the
call that makes them true returned:

    R <lso> <leo>                  the store is open (after any recovery)
    K <offset> <key> <tomb> <wid> <seq>   an append returned: record (wid, seq) with this key (tomb 1: a tombstone,
                                   value None) has this offset
    F <leo>                        flush() returned: everything below <leo> is fsynced (journal line fsynced too)
    G <base> <end>                 the cleaner is about to swap in the cleaned group of offsets [base, end)
    W <base> <end>                 ... the swap of that group returned True (swapped in)
    N <base> <end>                 ... the swap returned False (the segments changed under the copy; nothing done)
    C                              a cleaning round starts
    X <groups> <removed> <end> <aborted>   run_cleaner returned stats (``Z`` when it returned None)
    T <offset>...                  the offsets of the tombstones the log showed (op ``tombstones``)
    P <n> <records> <leo> <first> <lso>   (reader) pass n read <records> records up to log end <leo>, the first
                                   at offset <first>; the log start offset was <lso> after it
    U <offset> <wid> <seq> <tomb>  (reader) a record it saw that no journal had acknowledged when its pass began
    E <message>                    a broken invariant seen by this process (the test fails on it)
    Q                              the scenario ended normally

Values are ``payload(wid, seq, key)``: self-checking and unique, so a value at a wrong offset or under a wrong key is
seen on its own; tombstones carry no value and are checked through the journals.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys
import time
import traceback

TOPIC = "c"
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS

# the failpoints of one cleaning round, in the order a round hits them (cleaner.py)
CLEANER_FAILPOINTS = ["clean:during-copy", "clean:after-cleaned", "clean:before-commit", "clean:after-commit",
                      "clean:after-old-deleted", "clean:after-index-renamed", "clean:after-swap",
                      "clean:before-checkpoint"]
BEFORE_SWAP = {"clean:during-copy", "clean:after-cleaned"}  # hit for a group before its swap begins


def key_for(i: int) -> bytes:
    return b"k%02d" % i


def payload(wid: int, seq: int, key: bytes) -> bytes:
    body = b"w%d:%d:%s" % (wid, seq, key)
    return body + b"|" + hashlib.sha1(body).hexdigest()[:16].encode()


def parse_payload(value: bytes):
    """(wid, seq, key) of a payload() value, or None when it is not one (corrupt)."""
    try:
        body, _, digest = value.rpartition(b"|")
        if hashlib.sha1(body).hexdigest()[:16].encode() != digest or not body.startswith(b"w"):
            return None
        wid, seq, key = body[1:].split(b":")
        return int(wid), int(seq), key
    except (ValueError, AttributeError):
        return None


# ---------------------------------------------------------------------------------------------------- journal

class Journal:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(self, *parts, sync: bool = False) -> None:
        os.write(self.fd, (" ".join(str(p) for p in parts) + "\n").encode())
        if sync:
            os.fsync(self.fd)

    def notes(self, lines) -> None:
        if lines:
            os.write(self.fd, "".join(" ".join(str(p) for p in ln) + "\n" for ln in lines).encode())


def read_journal(path) -> list[list[str]]:
    """Lines of a journal split in words; a torn last line (no newline) is dropped."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode()
    except FileNotFoundError:
        return []
    return [ln.split(" ") for ln in data.split("\n")[:-1] if ln]


class JournalTail:
    """Reads a journal that another process is appending to, a complete line at a time."""

    def __init__(self, path):
        self.path = path
        self.pos = 0
        self.rest = b""

    def new_lines(self) -> list[list[str]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self.pos += len(data)
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        return [ln.decode().split(" ") for ln in lines if ln]


# ---------------------------------------------------------------------------------------------------- scenarios

class Ctx:
    def __init__(self, spec):
        self.spec = spec
        self.dir = spec["dir"]
        self.journal = Journal(spec["journal"])
        self.store = None
        self.log = None
        self.mode = None
        self.seq = 0
        self.groups_started = 0
        self.group_segments = 0

    def fail(self, msg: str) -> None:
        self.journal.note("E", msg.replace("\n", " "), sync=True)
        os._exit(3)


def op_open(ctx, mode="exclusive", topic_config=None, config=None):
    from kafkalog import LogStore
    ctx.mode = mode
    cfg = {"lock.timeout.ms": 60000}
    cfg.update(config or {})
    ctx.store = LogStore(ctx.dir, cfg, exclusive=mode == "exclusive", read_only=mode == "read", maintenance=False)
    if TOPIC not in ctx.store.topics():
        if mode == "read":
            ctx.fail("read-only open: topic missing")
        ctx.store.create_topic(TOPIC, 1, dict({"cleanup.policy": "compact"}, **(topic_config or {})))
    ctx.log = ctx.store.log(TOPIC, 0)
    ctx.journal.note("R", ctx.log.log_start_offset, ctx.log.log_end_offset, sync=True)


def op_fill(ctx, n, keys, seed, tombstones=0.08, age_ms=None, wid=0, per=(1, 6)):
    """n keyed records over ``keys`` keys, single appends and batches, some tombstones; ``age_ms``: timestamps that
    old, else the append time."""
    rng = random.Random(seed)
    log, j = ctx.log, ctx.journal
    now = int(time.time() * 1000)
    done = 0
    while done < n:
        k = min(n - done, rng.randint(*per))
        recs = []
        for _ in range(k):
            key = key_for(rng.randrange(keys))
            tomb = rng.random() < tombstones
            recs.append((key, None if tomb else payload(wid, ctx.seq, key), ctx.seq))
            ctx.seq += 1
        ts = None if age_ms is None else [now - age_ms + done + i for i in range(k)]
        if k == 1 and rng.random() < 0.5:
            key, value, seq = recs[0]
            offs = [log.append(value, key=key, timestamp=None if ts is None else ts[0])]
        else:
            base = log.append_batch([r[1] for r in recs], keys=[r[0] for r in recs], timestamps=ts)
            offs = [base + i for i in range(k)]
        j.notes([("K", off, key.decode(), int(value is None), wid, seq) for off, (key, value, seq) in zip(offs, recs)])
        done += k


def op_flush(ctx):
    ctx.log.flush()
    ctx.journal.note("F", ctx.log.log_end_offset, sync=True)


def op_roll(ctx):
    ctx.log.roll()


def _stats_line(ctx, stats):
    if stats is None:
        ctx.journal.note("Z", sync=True)
    else:
        ctx.journal.note("X", stats.groups, stats.records_removed, stats.end_offset,
                         (stats.aborted or "-").replace(" ", "_"), sync=True)


def op_clean(ctx):
    ctx.journal.note("C", sync=True)
    _stats_line(ctx, ctx.log.run_cleaner(force=True))


def op_tombstones(ctx):
    """Journal the offsets of the tombstones the log shows now (``T <offset>...``)."""
    ctx.journal.note("T", *[r.offset for r in ctx.log.records() if r.value is None], sync=True)


def op_watch_swaps(ctx):
    """Journal every group the cleaner swaps in (G before, W/N after), from this process's Log objects."""
    from kafkalog.storage.log import Log
    orig = Log._swap_in_cleaned

    def swap(log, group, names):
        ctx.groups_started += 1
        ctx.group_segments = len(group)
        end = group[-1].end  # the next segment's base (a segment cleaned before may end below it)
        ctx.journal.note("G", group[0].base, end, sync=True)
        ok = orig(log, group, names)
        ctx.journal.note("W" if ok else "N", group[0].base, end, sync=True)
        return ok

    Log._swap_in_cleaned = swap


def op_arm(ctx, name, group=1, hit=None, min_segments=1):
    """SIGKILL this process at failpoint ``name``: in the ``group``-th group this process cleans from now on
    (``hit``: at the hit-th hit instead, counting for the swap's failpoints only groups that merge at least
    ``min_segments`` segments; needs watch_swaps)."""
    from kafkalog.storage import failpoints
    started0 = ctx.groups_started
    hits = [0]

    def action():
        if name not in BEFORE_SWAP and name != "clean:before-checkpoint" and ctx.group_segments < min_segments:
            return
        hits[0] += 1
        if hit is not None:
            due = hits[0] >= hit
        elif name in BEFORE_SWAP:
            due = ctx.groups_started - started0 == group - 1
        else:
            due = ctx.groups_started - started0 >= group
        if due:
            os.kill(os.getpid(), signal.SIGKILL)

    failpoints.enable(name, action)


def op_close(ctx):
    ctx.store.close()
    ctx.journal.note("Q", sync=True)


def op_cleaner_loop(ctx, stop_file, seed, roll=0.3, pause_s=0.02):
    """Clean (force) over and over, rolling now and then, until ``stop_file`` exists."""
    rng = random.Random(seed)
    log = ctx.log
    while not os.path.exists(stop_file):
        if rng.random() < roll:
            log.roll()
        ctx.journal.note("C")
        _stats_line(ctx, log.run_cleaner(force=True))
        time.sleep(rng.random() * pause_s)


def op_writer_loop(ctx, wid, keys, stop_file, seed, tombstones=0.05, max_batch=5, flush=0.05, cold=0, frozen=0,
                   pace=0.0):
    """A shared writer: first one record for each of ``frozen`` keys of its own (never written again: their records
    stay the latest in the oldest segments), then keyed records over ``keys`` hot keys (single appends and
    batches) and, one record in ten, over ``cold`` cold keys (latest records in old, cleaned segments too) until
    ``stop_file`` exists; ``pace``: a pause of up to that long after each append."""
    rng = random.Random(seed)
    log, j = ctx.log, ctx.journal
    for i in range(frozen):
        key = b"f%d-%02d" % (wid, i)
        j.notes([("K", log.append(payload(wid, ctx.seq, key), key=key), key.decode(), 0, wid, ctx.seq)])
        ctx.seq += 1
    while not os.path.exists(stop_file):
        r = rng.random()
        if r < flush:
            op_flush(ctx)
            continue
        k = 1 if r < 0.5 else rng.randint(2, max_batch)
        recs = []
        for _ in range(k):
            key = b"c%03d" % rng.randrange(cold) if cold and rng.random() < 0.1 else key_for(rng.randrange(keys))
            recs.append((key, None if rng.random() < tombstones else payload(wid, ctx.seq, key), ctx.seq))
            ctx.seq += 1
        if k == 1:
            offs = [log.append(recs[0][1], key=recs[0][0])]
        else:
            base = log.append_batch([x[1] for x in recs], keys=[x[0] for x in recs])
            offs = [base + i for i in range(k)]
        j.notes([("K", off, key.decode(), int(value is None), wid, seq) for off, (key, value, seq) in zip(offs, recs)])
        if rng.random() < 0.3:
            time.sleep(rng.random() * 0.002)
        if pace:
            time.sleep(rng.random() * pace)


def op_reader_loop(ctx, journals, stop_file, seed, reopen_every=5, cleaner_journals=None):
    """A read-only process reading the whole log over and over. Each pass first takes in what the cleaners' and
    then the writers' journals acknowledged so far, then checks what it reads: offsets strictly increase; a record
    at an acknowledged offset is that record (key, value, tombstone); every other value is well formed; the latest
    acknowledged record of every key (as of the pass's start) is found, or a later record of that key; an offset
    found missing (removed by the cleaner) in an earlier pass never comes back; a record that a cleaning round
    which returned before the pass began removed (a later acknowledged record of its key below the round's end)
    is not shown. Every ``reopen_every`` passes the store is opened again. ``cleaner_journals``: a glob pattern."""
    import bisect
    import glob

    from kafkalog import LogStore
    rng = random.Random(seed)
    j = ctx.journal
    tails = [JournalTail(p) for p in journals]
    ctails: dict[str, JournalTail] = {}
    acked: dict[int, tuple] = {}      # offset -> (wid, seq, key, tomb)
    latest: dict[bytes, int] = {}     # key -> latest acknowledged offset
    by_key: dict[bytes, list] = {}    # key -> its acknowledged offsets, ascending
    cleaned_to = 0                    # the end of the last cleaning round that returned complete
    gone = bytearray()                # gone[o] == 1: an earlier pass read past offset o and did not find it
    passes = 0
    while True:
        stopping = os.path.exists(stop_file)
        for path in sorted(glob.glob(cleaner_journals)) if cleaner_journals else []:
            for ln in ctails.setdefault(path, JournalTail(path)).new_lines():
                if ln[0] == "X" and ln[4] == "-":
                    cleaned_to = max(cleaned_to, int(ln[3]))
        clean_end = cleaned_to  # (read before the writers' journals: every record below it is acknowledged there)
        for t in tails:
            for ln in t.new_lines():
                if ln[0] == "K":
                    off, key, tomb, wid, seq = int(ln[1]), ln[2].encode(), ln[3] == "1", int(ln[4]), int(ln[5])
                    acked[off] = (wid, seq, key, tomb)
                    if off > latest.get(key, -1):
                        latest[key] = off
                    bisect.insort(by_key.setdefault(key, []), off)
        snapshot = dict(latest)
        log = ctx.log
        leo0 = log.log_end_offset
        found: dict[bytes, int] = {}
        prev = first = -1
        n = 0
        unknown = []
        try:
            for rec in log.records():
                o = rec.offset
                if o <= prev:
                    j.note("E", f"pass {passes}: offset {o} after {prev}")
                if first < 0:
                    first = o
                if o < len(gone) and gone[o]:
                    j.note("E", f"pass {passes}: offset {o} is back (an earlier pass found it removed)")
                if rec.value is None:
                    got = None
                else:
                    got = parse_payload(rec.value)
                    if got is None:
                        j.note("E", f"pass {passes}: corrupt value at offset {o}: {rec.value[:40]!r}")
                    elif got[2] != rec.key:
                        j.note("E", f"pass {passes}: offset {o} has key {rec.key!r}, its value is for {got[2]!r}")
                a = acked.get(o)
                if a is not None:
                    if a[2] != rec.key or a[3] != (rec.value is None) or (got is not None and got[:2] != a[:2]):
                        j.note("E", f"pass {passes}: offset {o} holds key {rec.key!r} {got}, acknowledged {a}")
                elif got is not None:
                    unknown.append(("U", o, got[0], got[1], 0))
                else:
                    unknown.append(("U", o, -1, -1, 1))
                if rec.key is not None and o > found.get(rec.key, -1):
                    found[rec.key] = o
                if o < clean_end and rec.key is not None:
                    later = by_key.get(rec.key, [])
                    i = bisect.bisect_right(later, o)
                    if i < len(later) and later[i] < clean_end:
                        j.note("E", f"pass {passes}: offset {o} ({rec.key!r}) is shown, a cleaning that returned "
                                    f"before the pass (up to {clean_end}) removed it (a later record at {later[i]})")
                if len(gone) < leo0:
                    gone.extend(bytes(leo0 - len(gone)))
                for x in range(prev + 1, min(o, leo0)):
                    gone[x] = 1  # below the log end when the pass began, read past and not there: removed
                prev = o
                n += 1
            if len(gone) < leo0:
                gone.extend(bytes(leo0 - len(gone)))
            for x in range(prev + 1, leo0):
                gone[x] = 1
        except Exception as e:  # noqa: BLE001  (any read error is a finding)
            j.note("E", f"pass {passes}: reading raised {type(e).__name__}: {e}")
        for key, off in snapshot.items():
            if found.get(key, -1) < off:
                j.note("E", f"pass {passes}: key {key!r}: acknowledged at offset {off} before the pass, the pass "
                            f"found it last at {found.get(key)} (hidden or lost)")
        j.notes(unknown)
        j.note("P", passes, n, leo0, first, ctx.log.log_start_offset)
        passes += 1
        if stopping:
            return
        if reopen_every and passes % reopen_every == 0:
            ctx.store.close()
            ctx.store = LogStore(ctx.dir, read_only=True)
            ctx.log = ctx.store.log(TOPIC, 0)
        time.sleep(rng.random() * 0.01)


def op_selfkill(ctx):
    os.kill(os.getpid(), signal.SIGKILL)


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def run_spec(spec) -> None:
    ctx = Ctx(spec)
    for i, (name, args) in enumerate(spec["ops"]):
        ctx.journal.note("S", i, name)
        OPS[name](ctx, **args)
    ctx.journal.note("Q", sync=True)


# ---------------------------------------------------------------------------------------------------- fork server

def _child(spec) -> None:
    """In a forked child: redirect output to the spec's log, run, and never return."""
    code = 0
    try:
        fd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if "check" in spec:
            from kafkalog import cli
            code = cli.main(["check", spec["check"]])
        else:
            run_spec(spec)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    import kafkalog  # noqa: F401  (imported once, before any fork)
    import kafkalog.storage.log  # noqa: F401
    from kafkalog import cli  # noqa: F401

    children: set[int] = set()

    def reply(obj) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        if cmd == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(req["spec"])
            children.add(pid)
            reply({"pid": pid})
        elif cmd == "wait":
            pid = req["pid"]
            deadline = time.monotonic() + req.get("timeout", 60)
            status = None
            while True:
                got, st = os.waitpid(pid, os.WNOHANG)
                if got == pid:
                    status = os.waitstatus_to_exitcode(st)
                    children.discard(pid)
                    break
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.001)
            reply({"status": status})
        else:
            reply({"error": f"unknown command {cmd!r}"})
    for pid in children:  # the test is gone: leave no process behind
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def main(argv) -> int:
    if len(argv) >= 2 and argv[1] == "serve":
        serve()
        return 0
    if len(argv) == 3 and argv[1] == "run":
        run_spec(json.loads(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
