"""Writer/reader processes for tests/storage/test_crash.py: they append, flush, delete-before and read a kafkalog
store until they are killed with SIGKILL (by the test, or by a named failpoint).

Two ways to run it (always with the test's interpreter, cwd = repo root, PYTHONPATH = repo root):

    python tests/storage/crash_writer.py run SPEC_JSON      run one scenario in this (fresh) interpreter; named
                                                            failpoints come from KAFKALOG_FAILPOINTS
    python tests/storage/crash_writer.py serve              fork server: imports kafkalog once, then answers JSON
                                                            lines on stdin (spawn / wait / check), so that many
                                                            kill rounds do not each pay the interpreter start-up

A scenario SPEC is ``{"dir": data dir, "journal": path, "log": path, "ops": [[op, {args}], ...]}`` (and
``"ops_module": path`` for ops defined in another file: ``ops_of``). Every op
writes a ``S <i> <op>`` step line to the journal before it starts; acknowledgements are journal lines too:

    R <lso> <leo>   the store is open (after any recovery)
    W <leo>         an append call returned: records below <leo> are in the page cache (survive kill -9)
    F <leo>         flush() returned: records below <leo> are fsynced (journal line fsynced as well)
    d <x>           about to call delete_records_before(x)
    D <lso>         delete_records_before returned this log start offset (journal line fsynced)
    A <base> <n> <wid> <seq0>   (shared writers) an append of n records wid:seq0.. got offsets base..base+n-1
    Z               (shared writers) its ``ops`` are done: it writes nothing more and waits for the stop file
    O <offset> <wid> <seq0> <n> (reader) records observed at offset.. offset+n-1: wid:seq0.. (one line a run)
    L <next> <lso> <leo>        (reader) its last look, once every writer was gone: the next offset it would read,
                                the log start and end its view showed
    E <message>     a broken invariant seen by this process (the test fails on it)
    X               the scenario ended normally

Record values are a pure function of the offset (``value_for``) that carries its own checksum, so any record can
be checked on its own: a record whose value is not ``value_for(offset)`` is corrupt or at a wrong offset.

Every writer is bounded by counts, never by how long the test runs (a busier machine must not make it write more):
``random`` by ``steps``, ``shared_writer`` by ``ops`` and ``bursts``; after them a writer that is to be killed sleeps.
Forked children die with the fork server (``children.die_with_parent``), which dies with the test.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path

TOPIC = "t"


def _load_children():
    """tests/children.py (children that die with their parent), one copy per process (see its docstring)."""
    name = "kafkalog_test_children"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "children.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


children = _load_children()


# ---------------------------------------------------------------------------------------------------- payloads

def value_for(offset: int) -> bytes:
    """The one value a single-writer scenario ever writes at ``offset``: ``offset|padding|sha1(offset|padding)``."""
    pad = b"." * ((offset * 7919) % 61)
    body = b"%d|%s" % (offset, pad)
    return body + b"|" + hashlib.sha1(body).hexdigest().encode()


def payload_for(wid: int, seq: int, pad: int = 0) -> bytes:
    """Value of a shared writer's record: unique per (writer id, sequence) and self-checking; ``pad`` bytes of
    filler make big records (bursts of megabytes)."""
    body = b"w%d:%d" % (wid, seq)
    if pad:
        body += b"#" + b"%x" % (seq * 2654435761 % 2**32) * (pad // 8 + 1)
    return body + b"|" + hashlib.sha1(body).hexdigest()[:16].encode()


def parse_payload(value: bytes):
    """(wid, seq) of a payload_for() value, or None when the value is not one (corrupt)."""
    try:
        body, _, digest = value.rpartition(b"|")
        if hashlib.sha1(body).hexdigest()[:16].encode() != digest or not body.startswith(b"w"):
            return None
        wid, seq = body[1:].split(b"#")[0].split(b":")
        return int(wid), int(seq)
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


def read_journal(path) -> list[list[str]]:
    """Lines of a journal split in words; a torn last line (no newline) is dropped."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode()
    except FileNotFoundError:
        return []
    lines = data.split("\n")
    return [ln.split(" ") for ln in lines[:-1] if ln]


# ---------------------------------------------------------------------------------------------------- scenarios

class Ctx:
    def __init__(self, spec):
        self.spec = spec
        self.dir = spec["dir"]
        self.journal = Journal(spec["journal"])
        self.store = None
        self.log = None
        self.mode = None

    def fail(self, msg: str) -> None:
        self.journal.note("E", msg.replace("\n", " "), sync=True)
        os._exit(3)


def op_open(ctx, mode="exclusive", maintenance=False, config=None, topic_config=None):
    from kafkalog import LogStore
    ctx.mode = mode
    kw = {"exclusive": mode == "exclusive", "read_only": mode == "read", "maintenance": maintenance}
    ctx.store = LogStore(ctx.dir, config, **kw)
    if TOPIC not in ctx.store.topics():
        if mode == "read":
            ctx.fail("read-only open: topic missing")
        ctx.store.create_topic(TOPIC, 1, topic_config or {})
    ctx.log = ctx.store.log(TOPIC, 0)
    ctx.journal.note("R", ctx.log.log_start_offset, ctx.log.log_end_offset, sync=True)


def op_append(ctx, n=1, how="batch", per=1):
    """n records of value_for(offset): ``batch`` = append_batch of ``per`` records, ``single`` = append()."""
    log = ctx.log
    done = 0
    while done < n:
        leo = log.log_end_offset
        if how == "batch":
            k = min(per, n - done)
            base = log.append_batch([value_for(leo + i) for i in range(k)])
            if base != leo:
                ctx.fail(f"append_batch returned base {base}, log end was {leo}")
            ctx.journal.note("W", base + k)
            done += k
        else:
            off = log.append(value_for(leo))
            if off != leo:
                ctx.fail(f"append returned offset {off}, log end was {leo}")
            if ctx.mode != "exclusive":
                ctx.journal.note("W", off + 1)  # not staged in shared mode: in the page cache now
            done += 1


def op_flush(ctx):
    leo = ctx.log.log_end_offset
    ctx.log.flush()
    ctx.journal.note("F", leo, sync=True)


def op_delete(ctx, to):
    ctx.journal.note("d", to, sync=True)
    got = ctx.log.delete_records_before(to)
    ctx.journal.note("D", got, sync=True)


def op_roll(ctx):
    ctx.log.roll()


def op_close(ctx):
    ctx.store.close()
    ctx.journal.note("C", sync=True)


def op_selfkill(ctx):
    os.kill(os.getpid(), signal.SIGKILL)


def op_arm(ctx, name, action="kill"):
    """Turn a named failpoint on from here on (for a forked child, which imported kafkalog before the fork)."""
    from kafkalog.storage import failpoints
    failpoints.enable(name, action)


def op_sleep(ctx, s):
    time.sleep(s)


def op_random(ctx, seed, steps, max_batch=25):
    """``steps`` random appends (single and batch), flushes, delete-befores and rolls, or fewer when killed:
    at most ``steps * max_batch`` records."""
    rng = random.Random(seed)
    log, j = ctx.log, ctx.journal
    for _ in range(steps):
        r = rng.random()
        if r < 0.40:
            leo = log.log_end_offset
            n = rng.randint(1, max_batch)
            base = log.append_batch([value_for(leo + k) for k in range(n)])
            if base != leo:
                ctx.fail(f"append_batch returned base {base}, log end was {leo}")
            j.note("W", base + n)
        elif r < 0.72:
            leo = log.log_end_offset
            off = log.append(value_for(leo))
            if off != leo:
                ctx.fail(f"append returned offset {off}, log end was {leo}")
            if ctx.mode != "exclusive":
                j.note("W", off + 1)
        elif r < 0.82:
            op_flush(ctx)
        elif r < 0.90:
            lso, leo = log.log_start_offset, log.log_end_offset
            x = leo if rng.random() < 0.15 else rng.randint(max(lso, leo - 400), leo)
            op_delete(ctx, x)
        elif r < 0.95:
            log.roll()
        else:
            time.sleep(rng.random() * 0.002)


def op_shared_writer(ctx, wid, seed, ops, stop_file, max_batch=6, burst_bytes=0, bursts=0, pause_s=0.0,
                     deletes=False):
    """A shared-mode writer: ``ops`` operations (an append of payload_for(wid, seq) records, a flush, now and then a
    pause or a delete-before), ``bursts`` of them (at random places) a burst of big records: many calls, up to
    ``burst_bytes`` bytes, while the other processes may not look. Then ``Z`` in the journal and it waits, writing
    nothing, until ``stop_file`` exists (it may be killed meanwhile). So it writes at most ``ops * max_batch`` small
    records and ``bursts * burst_bytes`` bytes of big ones, however long the test runs.

    ``pause_s``: now and then it does not look for up to that long; ``deletes``: now and then a delete-before
    (journaled as ``D <new log start>`` once it returned)."""
    rng = random.Random(seed)
    log, j = ctx.log, ctx.journal
    seq = 0
    burst_at = set(rng.sample(range(ops), min(bursts, ops))) if burst_bytes else set()
    for i in range(ops):
        if i in burst_at:
            goal, done = rng.randint(burst_bytes // 4, burst_bytes), 0
            while done < goal:
                n = rng.randint(8, 64)
                vals = [payload_for(wid, seq + k, 2048) for k in range(n)]
                base = log.append_batch(vals)
                j.note("A", base, n, wid, seq)
                seq += n
                done += sum(map(len, vals))
            continue
        r = rng.random()
        if pause_s and r < 0.04:
            time.sleep(rng.random() * pause_s)
            continue
        if deletes and r < 0.05:
            # anywhere up to the last 100 records, but never keeping more than the newest 300,000, and the removed
            # files purged once due, as the maintenance thread does (without the purge, 40 GB of .deleted files
            # piled up in 5 minutes when writers were unbounded)
            lso, leo = log.log_start_offset, log.log_end_offset
            low = max(lso, leo - 300_000)
            j.note("D", log.delete_records_before(rng.randint(low, max(low, leo - 100))), sync=True)
            log.purge_deleted()
            continue
        if r < 0.55:
            n = rng.randint(1, max_batch)
            base = log.append_batch([payload_for(wid, seq + k) for k in range(n)])
        elif r < 0.93:
            n = 1
            base = log.append(payload_for(wid, seq))
        else:
            log.flush()
            continue
        j.note("A", base, n, wid, seq)
        seq += n
        if rng.random() < 0.3:
            time.sleep(rng.random() * 0.001)
    j.note("Z")
    while not os.path.exists(stop_file):
        time.sleep(0.005)


def op_reader(ctx, stop_file, poll_s=0.0005, pause_s=0.0, seed=0, final_file=None):
    """Read every record as it appears until ``stop_file`` exists; report what it saw (one ``O`` line a run of
    records whose offsets and one writer's sequence numbers both go up by one) and anything out of order or corrupt.
    Records deleted before it read them are skipped (``J <log start>``), the log start never going back.
    ``pause_s``: now and then it does not look for up to that long (other processes append megabytes meanwhile).
    ``final_file``: once stopping, it waits for that file (the test makes it when every writer is gone), reads once
    more with the same view and journals ``L``: a view that missed a change another process made before it looked
    shows here."""
    from kafkalog.errors import KafkaError, OffsetOutOfRangeError
    log, j = ctx.log, ctx.journal
    rng = random.Random(seed)
    pos = log.log_start_offset
    last_leo = last_lso = 0
    run = None  # [offset, wid, seq0, n]: observed, not yet journaled

    def flush_run():
        nonlocal run
        if run is not None:
            j.note("O", *run)
            run = None

    def note(*parts):
        flush_run()
        j.note(*parts)

    while True:
        stopping = os.path.exists(stop_file)
        leo = log.log_end_offset
        if leo < last_leo:
            note("E", f"log end offset went back from {last_leo} to {leo}")
        last_leo = max(last_leo, leo)
        try:
            lso = log.log_start_offset
            if lso < last_lso:
                note("E", f"log start offset went back from {last_lso} to {lso}")
            last_lso = max(last_lso, lso)
            if pos < lso:
                note("J", lso)
                pos = lso
            for rec in log.records(pos):
                if rec.offset != pos:
                    if pos < rec.offset <= log.last_known_log_start_offset:
                        note("J", rec.offset)  # a delete-before moved the start past pos while reading
                    else:
                        note("E", f"expected offset {pos}, got {rec.offset}")
                got = parse_payload(rec.value)
                if got is None:
                    note("E", f"corrupt value at offset {rec.offset}: {rec.value[:40]!r}")
                    continue
                if (run is not None and rec.offset == run[0] + run[3] and got[0] == run[1]
                        and got[1] == run[2] + run[3]):
                    run[3] += 1
                else:
                    flush_run()
                    run = [rec.offset, got[0], got[1], 1]
                pos = rec.offset + 1
        except OffsetOutOfRangeError:
            continue  # deleted while reading: the next round starts at the new log start
        except KafkaError as e:
            note("E", f"read from {pos} raised {type(e).__name__}: {e}")
        flush_run()
        if stopping and final_file is not None:
            while not os.path.exists(final_file):
                time.sleep(0.005)
            final_file = None
            continue  # one more round: everything every writer did is in the files now
        if stopping:
            j.note("L", pos, log.log_start_offset, log.log_end_offset)
            return
        time.sleep(rng.random() * pause_s if pause_s and rng.random() < 0.05 else poll_s)


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def ops_of(spec) -> dict:
    """The ops a spec may name: this file's, and those of the module at ``spec["ops_module"]`` (a path; its ``OPS``
    dict), so that other tests' children run through the same fork server (test_txn_torture.py's txn_writer.py)."""
    path = spec.get("ops_module")
    if not path:
        return OPS
    name = "kafkalog_crash_ops_" + Path(path).stem
    if name not in sys.modules:
        mod_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        mod_spec.loader.exec_module(module)
    return {**OPS, **sys.modules[name].OPS}


def run_spec(spec) -> None:
    ctx = Ctx(spec)
    ops = ops_of(spec)
    for i, (name, args) in enumerate(spec["ops"]):
        ctx.journal.note("S", i, name)
        ops[name](ctx, **args)
    ctx.journal.note("X", sync=True)


# ---------------------------------------------------------------------------------------------------- fork server

def _child(spec, parent: int) -> None:
    """In a forked child: die with the fork server, redirect output to the spec's log, run, and never return."""
    code = 0
    try:
        children.die_with_parent(parent)
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
    from kafkalog import cli  # noqa: F401

    forked: set[int] = set()

    def reply(obj) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    try:
        for line in sys.stdin:
            req = json.loads(line)
            cmd = req["cmd"]
            if cmd == "spawn":
                parent = os.getpid()
                pid = os.fork()
                if pid == 0:
                    _child(req["spec"], parent)
                forked.add(pid)
                reply({"pid": pid})
            elif cmd == "wait":
                pid = req["pid"]
                deadline = time.monotonic() + req.get("timeout", 60)
                status = None
                while True:
                    got, st = os.waitpid(pid, os.WNOHANG)
                    if got == pid:
                        status = os.waitstatus_to_exitcode(st)
                        forked.discard(pid)
                        break
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.001)
                reply({"status": status})
            else:
                reply({"error": f"unknown command {cmd!r}"})
    finally:
        for pid in forked:  # the test is gone (or its pipe broke): leave no writer behind
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
