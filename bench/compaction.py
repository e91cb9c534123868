#!/usr/bin/env python3
"""Log compaction: one cleaner round over a 1 GB log of 1 M distinct keys, beside plain sequential reads of it.

    python bench/compaction.py [--gb 1] [--keys 1000000] [--value-bytes 100] [--codec none|lz4]
                               [--segment-bytes 134217728] [--config KEY=VALUE ...] [--quick] [--cold]
                               [--profile [FILE]] [--dir DIR] [--json FILE] [--in-place]

    --quick: 64 MB, 50,000 keys, 16 MiB segments (a few seconds); the full default run takes ~30 s (lz4 ~90 s)
    and writes ~1.2 GB under --dir (deleted at the end). kafkalog is imported from a snapshot of the checkout
    copied at start (--in-place: from the checkout).

The issue's words: "compacting a 1 GB log with 1 M distinct keys, MB/s and peak RSS, beside a plain sequential
read of the same log". One run:

1. **Build** (not timed as a goal): an exclusive store, topic ``c`` with ``cleanup.policy=compact``,
   ``retention.ms=-1`` and ``segment.bytes`` 128 MiB by default (Kafka's default is 1 GiB, which would put the
   whole 1 GB log in one segment and one cleaning group; 128 MiB gives several segments, groups and swaps, close
   to ``__consumer_offsets``' 100 MiB; ``--segment-bytes 1073741824`` for Kafka's default). ``append_batch`` of
   1000 records (8-byte big-endian keys; values of --value-bytes JSON-ish bytes, ~40% random characters) until
   the log holds --gb x 10^9 bytes on disk; the first KEYS records are a permutation of the key space (so exactly
   KEYS distinct keys), the rest pick keys uniformly (each key's latest record lands anywhere, as in real
   traffic). Then ``roll()`` (everything below the active segment) and ``flush()``. With --codec lz4 every batch
   is lz4-compressed, the log still holds --gb on disk (so more records).
2. **Sequential reads** of that log, before cleaning, in this process (best of --reps, log bytes on disk per
   second): ``file.read`` (readinto of 1 MiB over the segment files: the machine's page-cache limit),
   ``kafkalog.read+copy`` (``log.read(offset, 1 MiB)`` loop, every byte copied out of the view once, as file.read
   copies), ``kafkalog.read`` (the same views, untouched: locating only), ``kafkalog.read_columns`` (one call
   per segment: a call decodes to the end of every segment it touches, so smaller ranges would charge it for
   records it does not return) and ``kafkalog.records`` (per-record objects, ``rec.key`` and ``rec.value`` read).
   The cleaner's MB/s is ``CleanerStats.mb_per_s``: bytes of the segments it cleaned / the round's seconds (the
   map pass and the copy pass both read the dirty part); the ratio lines divide it by these reads' MB/s.
3. **Cleaning**, in a child process (its own RSS): ``log.run_cleaner(force=True)`` (round 1), then again at once
   (round 2a: nothing dirty), then after ``roll()`` of what the appender wrote meanwhile (round 2b: an
   already-clean log plus a small dirty tail; the whole clean part is rewritten, as Kafka's cleaner does).
   Meanwhile three threads of that process run: an appender (``append_batch`` of one record of the key space,
   paced at one per ms), a reader (``log.read`` of 64 KiB at the log end, as a consumer that caught up, and every
   16th one at a random offset of the log, in segments being cleaned and swapped; one per ms) and an RSS sampler
   (/proc/self/status every 10 ms). Latencies are given three ways: ``call`` (the call alone), ``sched`` (from the
   time the call was due on the 1 ms schedule: a thread that could not wake up, because the cleaner held the GIL
   or a lock, is charged for it, and a backlog adds up: coordinated omission corrected) and ``stall`` (the longest
   time between two completed calls: how long the thread got nothing done). An idle window before round 1 gives
   the floor. The swap (``Log._swap_in_cleaned``, under the log's lock), the copy of each group
   (``cleaner._clean_group``) and every compiled call cleaner.py makes (``OffsetMap.add_batches``,
   ``filter_batches``, the cleaned segment's append/flush/close, fsyncs) are timed by rebinding those names to
   thin wrappers at run time (each missing name is skipped): the longest compiled call is the longest time the
   cleaner holds the GIL, during which no other thread of the process runs. ``--profile`` adds cProfile.

RSS: the child resets its peak (``echo 5 > /proc/self/clear_refs``) just before each round and reads ``VmHWM``
after it: "peak RSS" is that peak minus the RSS right before the round. The segments are mmapped, so RSS counts the
page-cache pages the round touched through its mappings (``RssFile``: shared, clean, reclaimable, not memory of
ours in the malloc sense) beside private memory (``RssAnon``: the offset map, buffers); both are given, from the
sampler's peaks (the sampler misses what lives shorter than 10 ms or while the GIL is held; VmHWM does not). The
child's ``ru_maxrss`` is not used: Linux charges it the parent's peak when the child execs (the vforked mm's).
The reader's random reads map pages too (the kernel maps 64 KiB around each fault): at most ~128 KiB per random
read, one read in 16.

Page cache: the log was just written and read, so every read and the cleaning run **warm** (from the page cache)
unless --cold: the log's own files are then evicted (posix_fadvise DONTNEED, no root needed, nothing else on the
machine is touched) before each read run and before round 1.

Benchmarks are not tests (DESIGN.md rule 10): nothing here asserts a time; the exit status is 1 only when the
cleaned log is wrong (a key missing or kept twice) or a step failed.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from harness import GB, MB, ROOT, MiB, perf, progress, snapshot_kafkalog

BATCH = 1000
TOPIC = "c"


def use_kafkalog(code: str) -> None:
    """Import kafkalog from `code`: a snapshot of the checkout copied at start (so an in-place rebuild of the
    engine during the run cannot change or crash what is measured), or the checkout itself with --in-place."""
    sys.path.insert(0, code)


def code_state(code: str) -> str:
    newest = max((os.path.getmtime(p), p) for p in glob.glob(os.path.join(code, "kafkalog", "**", "*.*"),
                                                             recursive=True))
    return (f"{os.path.join(code, 'kafkalog')} (newest file {os.path.relpath(newest[1], code)}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(newest[0]))})")


# ------------------------------------------------------------------------------------------------ data

KINDS = ("page_view", "click", "cart_add", "checkout", "login", "search", "refund", "share")
REGIONS = ("eu-w", "us-e", "ap-s", "sa-e", "af-s", "us-w", "eu-c")
NOISE = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def value_pool(n: int, size: int, seed: int = 20240917) -> list[bytes]:
    """n distinct values of exactly `size` bytes: a JSON-ish head, random characters for the rest (~40% of a
    100-byte value), so lz4 finds the head's repeats within a batch and not much else."""
    import numpy as np
    rnd = np.random.default_rng(seed)
    noise = np.frombuffer(NOISE, np.uint8)[rnd.integers(0, len(NOISE), (n, size), dtype=np.uint8)].tobytes()
    out = []
    for i in range(n):
        head = (f'{{"id":"{i:08d}","ev":"{KINDS[i % 8]}","geo":"{REGIONS[i % 7]}","qty":{10 + i % 90},"x":"'
                ).encode()
        v = head[:size - 2] + noise[i * size: i * size + max(0, size - 2 - len(head))] + b'"}'
        out.append(v[:size] if len(v) >= size else v + noise[i * size: i * size + size - len(v)])
    return out


def key_bytes(k: int) -> bytes:
    return k.to_bytes(8, "big")


# ------------------------------------------------------------------------------------------------ helpers

def status() -> dict:
    """VmRSS, VmHWM, RssAnon, RssFile of this process, bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:", "RssAnon:", "RssFile:", "RssShmem:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def evict(paths) -> int:
    """Drop these files' clean pages from the page cache (only ours; mapped pages stay). Returns bytes advised."""
    n = 0
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            n += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return n


def seg_files(pdir, exts=(".log",)):
    return sorted(p for ext in exts for p in glob.glob(os.path.join(pdir, "*" + ext)))


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def lat_summary(samples, a, b):
    """samples: (due, start, end) of calls due in [a, b) -> call/sched latency figures (ms)."""
    idx = [i for i, s in enumerate(samples) if a <= s[0] < b]
    if not idx:
        return {"n": 0}
    sel = [samples[i] for i in idx]
    call = [(e - s) * 1e3 for _, s, e in sel]
    sched = [(e - d) * 1e3 for d, _, e in sel]
    # stall: the longest time between two completed calls (the thread got nothing done), less the pacing interval
    ends = [samples[idx[0] - 1][2]] if idx[0] > 0 else []
    ends += [e for _, _, e in sel]
    gaps = [(y - x) * 1e3 for x, y in zip(ends, ends[1:])]
    return {"n": len(sel), "call_p50": pct(call, 0.5), "call_p99": pct(call, 0.99), "call_p999": pct(call, 0.999),
            "call_max": max(call), "sched_p50": pct(sched, 0.5), "sched_p99": pct(sched, 0.99),
            "sched_p999": pct(sched, 0.999), "sched_max": max(sched), "over_5ms": sum(1 for x in sched if x > 5),
            "over_20ms": sum(1 for x in sched if x > 20), "stall_max": max(gaps) if gaps else None,
            "stalls_over_5ms": sum(1 for x in gaps if x > 6)}


class Paced(threading.Thread):
    """Calls op() once per `interval` seconds on a fixed schedule; keeps (due, start, end) per call."""

    def __init__(self, name, op, interval):
        super().__init__(name=name, daemon=True)
        self.op, self.interval = op, interval
        self.samples = []
        self.errors = []
        self.halt = threading.Event()

    def run(self):
        t0 = perf()
        k = 0
        while not self.halt.is_set():
            due = t0 + k * self.interval
            k += 1
            now = perf()
            if due > now:
                time.sleep(due - now)
            s = perf()
            try:
                self.op()
            except Exception as e:  # reported; the thread goes on
                self.errors.append(f"{type(e).__name__}: {e}")
                if len(self.errors) > 100:
                    return
            self.samples.append((due, s, perf()))


class Sampler(threading.Thread):
    def __init__(self, interval=0.01):
        super().__init__(name="rss-sampler", daemon=True)
        self.interval = interval
        self.samples = []  # (t, VmRSS, RssAnon, RssFile)
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            s = status()
            self.samples.append((perf(), s["VmRSS"], s.get("RssAnon", 0), s.get("RssFile", 0)))
            time.sleep(self.interval)

    def peak(self, a, b):
        sel = [x for x in self.samples if a <= x[0] <= b]
        if not sel:
            return {}
        return {"rss": max(x[1] for x in sel), "anon": max(x[2] for x in sel), "file": max(x[3] for x in sel),
                "samples": len(sel)}


# ------------------------------------------------------------------------------------------------ build

def build(args, path):
    import numpy as np

    from kafkalog.storage.store import LogStore
    store = LogStore(path, exclusive=True, maintenance=False)
    cfg = {"cleanup.policy": "compact", "segment.bytes": args.segment_bytes, "retention.ms": "-1"}
    cfg.update(kv.split("=", 1) for kv in args.config)
    store.create_topic(TOPIC, 1, cfg)
    log = store.log(TOPIC, 0)
    pool = value_pool(min(65536, max(BATCH, args.keys)), args.value_bytes)
    keys = [key_bytes(k) for k in range(args.keys)]
    rnd = np.random.default_rng(7)
    perm = rnd.permutation(args.keys)
    target = int(args.gb * GB)
    comp = None if args.codec == "none" else args.codec
    n = 0
    t = perf()
    while log.size_in_bytes < target:
        if n < args.keys:
            idx = perm[n:n + BATCH].tolist()
            if len(idx) < BATCH:
                idx += rnd.integers(0, args.keys, BATCH - len(idx)).tolist()
        else:
            idx = rnd.integers(0, args.keys, BATCH).tolist()
        s = n % len(pool)
        vals = pool[s:s + BATCH]
        if len(vals) < BATCH:
            vals = vals + pool[:BATCH - len(vals)]
        log.append_batch(vals, [keys[i] for i in idx], compression=comp)
        n += BATCH
    log.roll()
    log.flush()
    el = perf() - t
    info = {"records": n, "bytes": log.size_in_bytes, "segments": len(log.segments()) - 1, "seconds": el,
            "end_offset": log.log_end_offset, "dir": str(log.dir), "payload": n * (8 + args.value_bytes)}
    store.close()
    return info


# ------------------------------------------------------------------------------------------------ sequential reads

def best_of(reps, fn, before=None):
    times, out = [], None
    for _ in range(reps):
        if before:
            before()
        gc.collect()
        t = perf()
        out = fn()
        times.append(perf() - t)
    return min(times), times, out


def reads(args, path, info):
    from kafkalog._engine.batch import next_offset_after
    from kafkalog.storage.store import LogStore
    pdir = info["dir"]
    files = [p for p in seg_files(pdir) if os.path.getsize(p) > 0]
    before = (lambda: evict(seg_files(pdir, (".log", ".index", ".timeindex")))) if args.cold else None
    rows = []
    total = sum(os.path.getsize(p) for p in files)

    def file_read():
        buf = bytearray(MiB)
        n = 0
        for p in files:
            with open(p, "rb", buffering=0) as f:
                while True:
                    k = f.readinto(buf)
                    if not k:
                        break
                    n += k
        return n

    sec, times, n = best_of(args.reps, file_read, before)
    rows.append(("file.read", "readinto(1 MiB) of the .log files", n, None, sec, times))

    store = LogStore(path, exclusive=True, maintenance=False)
    log = store.log(TOPIC, 0)
    end = log.log_end_offset

    def log_read(copy):
        def run():
            buf = bytearray(2 * MiB)
            off, n = log.log_start_offset, 0
            while off < end:
                v = log.read(off, MiB)
                k = len(v)
                if not k:
                    break
                if copy:
                    buf[:k] = v
                n += k
                off = next_offset_after(v, off + 1)
            return n
        return run

    sec, times, n = best_of(args.reps, log_read(True), before)
    rows.append(("kafkalog.read+copy", "log.read(off, 1 MiB) loop, bytes copied out", n, None, sec, times))
    sec, times, n = best_of(args.reps, log_read(False), before)
    rows.append(("kafkalog.read", "the same views, untouched (locate only)", n, None, sec, times))

    # one call per segment: read_columns(start, end) decodes from start to the end of each segment it touches
    # (then slices), so ranges that cut segments would charge it for records it does not return
    bounds = [(sg.base_offset, sg.next_offset) for sg in log.segments() if sg.next_offset > sg.base_offset]

    def columns():
        recs = 0
        for a, b in bounds:
            cols = log.read_columns(a, b)
            recs += len(cols["offset"])
            del cols
        return recs

    sec, times, recs = best_of(args.reps, columns, before)
    rows.append(("kafkalog.read_columns", "read_columns(base, next) of one segment per call", total, recs, sec,
                 times))

    def records():
        recs = 0
        for r in log.records():
            _ = r.key, r.value
            recs += 1
        return recs

    sec, times, recs = best_of(args.reps, records, before)
    rows.append(("kafkalog.records", "for r in log.records(): r.key, r.value", total, recs, sec, times))
    store.close()
    out = []
    for name, what, nbytes, recs, sec, times in rows:
        out.append({"name": name, "what": what, "bytes": nbytes, "records": recs if recs is not None else
                    info["records"], "seconds": sec, "runs": times, "mb_s": nbytes / sec / MB,
                    "rec_s": (recs if recs is not None else info["records"]) / sec})
    return out


# ------------------------------------------------------------------------------------------------ cleaning (child)

def install_call_timers(cleaner_mod) -> dict:
    """Time the compiled calls the cleaner makes (each one holds the GIL for its whole duration: the longest one is
    the longest time no other thread of the process runs), by rebinding the names cleaner.py looks up at call time
    to thin Python wrappers (cProfile does not see Cython functions). Names that moved are skipped."""
    calls: dict[str, list] = {}

    def timed(name, fn):
        rec = calls.setdefault(name, [])

        def w(*a, **kw):
            t = perf()
            try:
                return fn(*a, **kw)
            finally:
                rec.append(perf() - t)
        return w

    for name in ("count_records", "filter_batches", "producer_last_offsets", "_fsync_file", "fsync_dir"):
        fn = getattr(cleaner_mod, name, None)
        if fn is not None:
            setattr(cleaner_mod, name, timed(name, fn))
    it = getattr(cleaner_mod, "iter_batches", None)
    if it is not None:
        rec = calls.setdefault("iter_batches (pid pass, per view)", [])

        def timed_iter(*a, **kw):
            t = perf()
            yield from it(*a, **kw)
            rec.append(perf() - t)
        cleaner_mod.iter_batches = timed_iter
    om = getattr(cleaner_mod, "OffsetMap", None)
    if om is not None:
        try:
            add = timed("OffsetMap.add_batches", om.add_batches)
            alloc = calls.setdefault("OffsetMap() (calloc)", [])

            class TimedOffsetMap(om):
                def __new__(cls, *a, **kw):
                    t = perf()
                    try:
                        return om.__new__(cls, *a, **kw)
                    finally:
                        alloc.append(perf() - t)

                def add_batches(self, *a, **kw):
                    return add(self, *a, **kw)
            cleaner_mod.OffsetMap = TimedOffsetMap
        except TypeError:  # not subclassable
            pass
    seg = getattr(cleaner_mod, "LogSegment", None)
    if seg is not None:
        try:
            app = timed("LogSegment.append (cleaned)", seg.append)
            fl = timed("LogSegment.flush (cleaned)", seg.flush)
            cl = timed("LogSegment.close (cleaned)", seg.close)

            class TimedSegment(seg):
                def append(self, *a, **kw):
                    return app(self, *a, **kw)

                def flush(self, *a, **kw):
                    return fl(self, *a, **kw)

                def close(self, *a, **kw):
                    return cl(self, *a, **kw)
            cleaner_mod.LogSegment = TimedSegment
        except TypeError:
            pass
    return calls


def child_clean(cfg):
    from kafkalog.storage import cleaner as cleaner_mod
    from kafkalog.storage.store import LogStore
    store = LogStore(cfg["path"], exclusive=True, maintenance=False)
    log = store.log(TOPIC, 0)
    pdir = str(log.dir)
    comp = None if cfg["codec"] == "none" else cfg["codec"]
    rnd = random.Random(11)
    ak = [key_bytes(rnd.randrange(cfg["keys"])) for _ in range(100_000)]
    aval = value_pool(1, cfg["value_bytes"])[0]
    leo0 = log.log_end_offset
    roffs = [rnd.randrange(leo0) if i % 16 == 0 else -1 for i in range(100_000)]
    ai = [0]
    ri = [0]

    def append():
        i = ai[0] = ai[0] + 1
        log.append_batch([aval], [ak[i % len(ak)]], compression=comp)

    def read():  # a consumer at the tail; every 16th read at a random offset of the log (segments being swapped)
        i = ri[0] = ri[0] + 1
        off = roffs[i % len(roffs)]
        v = log.read(off if off >= 0 else max(0, log.log_end_offset - 1), 65536)
        len(v)

    # timing wrappers (the breakdown is skipped when these internals move)
    swaps, groups = [], []
    orig_swap = getattr(log, "_swap_in_cleaned", None)
    if orig_swap is not None:
        def timed_swap(*a, **kw):
            t = perf()
            try:
                return orig_swap(*a, **kw)
            finally:
                swaps.append((t, perf() - t))
        log._swap_in_cleaned = timed_swap
    orig_group = getattr(cleaner_mod, "_clean_group", None)
    if orig_group is not None:
        def timed_group(*a, **kw):
            t = perf()
            try:
                return orig_group(*a, **kw)
            finally:
                groups.append((t, perf() - t))
        cleaner_mod._clean_group = timed_group

    calls = install_call_timers(cleaner_mod)
    sampler = Sampler()
    appender = Paced("appender", append, 0.001)
    reader = Paced("reader", read, 0.001)
    for th in (sampler, appender, reader):
        th.start()
    out = {"switch_interval_ms": sys.getswitchinterval() * 1e3, "rounds": {}}
    time.sleep(0.3)  # threads running
    a = perf()
    time.sleep(cfg["idle_s"])
    out["idle"] = {"append": lat_summary(appender.samples, a, perf()), "read": lat_summary(reader.samples, a, perf())}

    def one_round(name, prof=None, before=None):
        if before:
            before()
        gc.collect()
        st0 = status()
        peak_ok = reset_peak()
        ns, ng = len(swaps), len(groups)
        for v in calls.values():
            v.clear()
        pending = len(glob.glob(os.path.join(pdir, "*.deleted")))
        t = perf()
        if prof is not None:
            prof.enable()
        stats = log.run_cleaner(force=True)
        if prof is not None:
            prof.disable()
        wall = perf() - t
        t_end = perf()
        st1 = status()
        time.sleep(0.05)  # calls due during the round finish
        r = {"wall": wall, "stats": None, "rss_before": st0, "rss_after": st1, "peak_reset": peak_ok,
             "sampled_peak": sampler.peak(t, t_end),
             "append": lat_summary(appender.samples, t, t_end), "read": lat_summary(reader.samples, t, t_end),
             "swaps": [d for _, d in swaps[ns:]], "groups": [d for _, d in groups[ng:]],
             "pending_deleted": pending, "calls": {k: list(v) for k, v in calls.items() if v},
             "hwm_prior": st0.get("VmHWM")}  # the peak since the previous reset (what ran before this round)
        if stats is not None:
            d = {k: getattr(stats, k) for k in ("first_dirty", "end_offset", "groups", "segments_in", "bytes_read",
                                                 "bytes_written", "records_kept", "records_removed", "map_entries",
                                                 "map_bytes", "seconds", "aborted")}
            d["mb_per_s"] = stats.mb_per_s
            r["stats"] = d
        out["rounds"][name] = r
        progress(f"{name}: {'nothing to clean' if stats is None else f'{stats.mb_per_s:,.0f} MB/s'} "
                 f"in {wall:.3f}s")
        return stats

    prof = None
    if cfg["profile"] is not None:
        import cProfile
        prof = cProfile.Profile()
    before = (lambda: evict(seg_files(pdir, (".log", ".index", ".timeindex")))) if cfg["cold"] else None
    one_round("round1", prof, before)
    one_round("round2a")
    time.sleep(0.2)
    t = perf()
    log.roll()
    out["roll_s"] = perf() - t
    one_round("round2b")
    for th in (appender, reader, sampler):
        th.halt.set()
    for th in (appender, reader, sampler):
        th.join()
    out["appended"] = ai[0]
    out["reads"] = ri[0]
    out["thread_errors"] = appender.errors[:5] + reader.errors[:5]
    out["end_offset"] = log.log_end_offset
    if prof is not None:
        import io
        import pstats
        if cfg["profile"]:
            prof.dump_stats(cfg["profile"])
        s = io.StringIO()
        ps = pstats.Stats(prof, stream=s)
        ps.sort_stats("tottime").print_stats(18)
        ps.sort_stats("cumulative").print_stats(14)
        out["profile"] = s.getvalue()
    t = perf()
    store.close()
    out["close_s"] = perf() - t
    gc.collect()
    out["hwm_after_close"] = status().get("VmHWM")  # peak over round 2b, stopping the threads and close()
    print("RESULT " + json.dumps(out), flush=True)


def run_child(args, path):
    cfg = {"path": path, "code": args.code, "keys": args.keys, "value_bytes": args.value_bytes, "codec": args.codec,
           "idle_s": 1.0 if args.quick else 2.0, "cold": args.cold,
           "profile": (args.profile if args.profile is not None else None)}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_child", json.dumps(cfg)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    result = None
    for line in proc.stdout:
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        else:
            print(line, end="", flush=True)
    _, status_, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status_)
    if proc.returncode != 0 or result is None:
        raise SystemExit(f"cleaning child failed (exit {proc.returncode})")
    result["child_maxrss"] = ru.ru_maxrss * 1024
    result["child_cpu_s"] = ru.ru_utime + ru.ru_stime
    return result


def verify(path, end):
    """The cleaned part [0, end) holds every key once (every key exists: the first pass wrote them all)."""
    import numpy as np

    from kafkalog.storage.store import LogStore
    store = LogStore(path, exclusive=True, maintenance=False)
    try:
        log = store.log(TOPIC, 0)
        cols = log.read_columns(0, end)
        n = len(cols["offset"])
        ko = cols["key_offsets"]
        lens = np.diff(ko)
        if n and (lens == 8).all():
            keys = np.frombuffer(cols["keys"][ko[0]:ko[-1]], dtype=">u8")
            distinct = len(np.unique(keys))
        else:
            distinct = len({bytes(cols["keys"][ko[i]:ko[i + 1]]) for i in range(n)})
        size = log.size_in_bytes
        segs = len(log.segments())
    finally:
        store.close()
    return {"records": n, "distinct": distinct, "bytes": size, "segments": segs}


# ------------------------------------------------------------------------------------------------ report

def machine():
    m = {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()}
    try:
        with open("/proc/cpuinfo") as f:
            m["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f if ln.lower().startswith("model name"))
    except (OSError, StopIteration):
        m["cpu"] = platform.processor()
    m["mem_gib"] = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1)
    return m


def mount_of(path):
    real = os.path.realpath(path)
    best = None
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, fs, opts = line.split()[:4]
            if real == mnt or real.startswith(mnt.rstrip("/") + "/"):
                if best is None or len(mnt) >= len(best[1]):
                    best = (dev, mnt, fs, opts)
    return best


def loadavg():
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def fmt_ms(v):
    return "" if v is None else f"{v:.2f}"


def report(args, info, rows, res, check, facts):
    mib = lambda b: f"{b / MiB:,.1f} MiB"  # noqa: E731
    print()
    print(f"log: {info['bytes'] / MB:,.1f} MB on disk in {info['segments']} segments of <= {args.segment_bytes:,} B "
          f"(segment.bytes) + the empty active one; {info['records']:,} records ({args.keys:,} distinct 8-byte keys, "
          f"{info['records'] / args.keys:.1f} writes per key), {args.value_bytes} B values, codec {args.codec}; "
          f"built by append_batch(1000) in {info['seconds']:.1f}s ({info['bytes'] / info['seconds'] / MB:,.0f} MB/s"
          f" on disk). Page cache: {'COLD (own files evicted before each run)' if args.cold else 'warm'}.")
    print()
    hdr = f"{'measurement':<26}{'MB/s':>9}{'rec/s':>14}{'seconds':>9}  {'how; note'}"
    print(hdr)
    print("-" * 110)
    for r in rows:
        print(f"{r['name']:<26}{r['mb_s']:>9,.0f}{r['rec_s']:>14,.0f}{r['seconds']:>9.3f}  "
              f"best of {len(r['runs'])}; {r['what']}")
    rounds = res["rounds"]
    for name, label in (("round1", "cleaner round 1"), ("round2a", "round 2a (nothing new)"),
                        ("round2b", "round 2b (clean + tail)")):
        r = rounds[name]
        s = r["stats"]
        if s is None:
            print(f"{label:<26}{'':>9}{'':>14}{r['wall']:>9.4f}  run_cleaner(force=True) returned None "
                  "(nothing dirty below the active segment)")
            continue
        recs = s["records_kept"] + s["records_removed"]
        print(f"{label:<26}{s['mb_per_s']:>9,.0f}{recs / s['seconds']:>14,.0f}{s['seconds']:>9.3f}  "
              f"1 run; CleanerStats: read {s['bytes_read'] / MB:,.1f} MB -> wrote {s['bytes_written'] / MB:,.1f} MB, "
              f"kept {s['records_kept']:,}, removed {s['records_removed']:,}, {s['groups']} groups from "
              f"{s['segments_in']} segments" + (f", ABORTED: {s['aborted']}" if s["aborted"] else ""))
    print()
    r1 = rounds["round1"]["stats"]
    by = {r["name"]: r for r in rows}
    if r1:
        print("ratios (cleaner round 1 MB/s of input / sequential read MB/s of the same log, same run):")
        for name in ("file.read", "kafkalog.read+copy", "kafkalog.read_columns", "kafkalog.records"):
            if name in by:
                print(f"  cleaner / {name:<22} = {r1['mb_per_s'] / by[name]['mb_s']:.3f}x "
                      f"({r1['mb_per_s']:,.0f} / {by[name]['mb_s']:,.0f} MB/s)")
        r2 = rounds["round2b"]["stats"]
        if r2:
            new = r2["records_kept"] + r2["records_removed"] - r1["records_kept"]
            print(f"  round 2b / round 1 (MB/s)          = {r2['mb_per_s'] / r1['mb_per_s']:.3f}x; round 2b rewrote "
                  f"{r2['bytes_written'] / MB:,.1f} MB to take in {new:,} new records")
        print()
    print("memory of the cleaning child (peak = VmHWM after the round, reset just before it; delta = peak - RSS "
          "right before):")
    print(f"  {'round':<10}{'RSS before':>14}{'peak':>14}{'peak delta':>14}{'anon delta*':>14}{'file delta*':>14}"
          f"{'map_bytes':>14}{'map entries':>13}")
    for name in ("round1", "round2b"):
        r = rounds[name]
        b, a, sp = r["rss_before"], r["rss_after"], r["sampled_peak"]
        peak = a["VmHWM"] if r["peak_reset"] else sp.get("rss", a["VmRSS"])
        s = r["stats"] or {}
        print(f"  {name:<10}{mib(b['VmRSS']):>14}{mib(peak):>14}{mib(peak - b['VmRSS']):>14}"
              f"{mib(sp.get('anon', 0) - b.get('RssAnon', 0)):>14}{mib(sp.get('file', 0) - b.get('RssFile', 0)):>14}"
              f"{mib(s.get('map_bytes', 0)):>14}{s.get('map_entries', 0):>13,}")
    hp = [("open + idle", rounds["round1"].get("hwm_prior")), ("round 1", rounds["round2a"].get("hwm_prior")),
          ("round 2a + roll", rounds["round2b"].get("hwm_prior")), ("round 2b + close", res.get("hwm_after_close"))]
    print("  peak RSS by phase (VmHWM between resets): " + ", ".join(f"{k} {mib(v)}" for k, v in hp if v))
    print("  * sampled every 10 ms (max of RssAnon / RssFile minus their values before). RssFile = page-cache pages "
          f"of the mmapped segments touched by the round (shared, reclaimable). Child CPU {res['child_cpu_s']:.1f}s.")
    print()
    print(f"append / read blocking (threads of the cleaning process, 1 call per ms each; ms; GIL switch interval "
          f"{res['switch_interval_ms']:.0f} ms):")
    print(f"  {'window':<22}{'op':<8}{'calls':>7}{'call p50':>10}{'call p99':>10}{'call max':>10}"
          f"{'sched p99':>11}{'sched max':>11}{'>5ms':>6}{'>20ms':>7}{'stall max':>11}{'stalls>5ms':>11}")
    windows = [("idle (no cleaning)", res["idle"])] + [
        (n, rounds[n]) for n in ("round1", "round2b") if rounds[n]["stats"]]
    for wname, w in windows:
        for op in ("append", "read"):
            x = w[op]
            if not x.get("n"):
                continue
            print(f"  {wname:<22}{op:<8}{x['n']:>7}{fmt_ms(x['call_p50']):>10}{fmt_ms(x['call_p99']):>10}"
                  f"{fmt_ms(x['call_max']):>10}{fmt_ms(x['sched_p99']):>11}"
                  f"{fmt_ms(x['sched_max']):>11}{x['over_5ms']:>6}{x['over_20ms']:>7}{fmt_ms(x['stall_max']):>11}"
                  f"{x['stalls_over_5ms']:>11}")
    print("  call = the call alone; sched = completion minus the time it was due on the 1 ms schedule (a thread that "
          "could not run is charged;\n  backlogs add up); stall = longest time between two completed calls; "
          ">5ms/>20ms count sched latencies, stalls>5ms the gaps over 6 ms.")
    for name in ("round1", "round2b"):
        r = rounds[name]
        if r["swaps"]:
            sw = [d * 1e3 for d in r["swaps"]]
            gr = r["groups"]
            s = r["stats"]
            copy = sum(gr) - sum(r["swaps"])
            print(f"  {name}: {len(sw)} swaps under the log's lock: max {max(sw):.2f} ms, total {sum(sw):.1f} ms; "
                  f"time split: map + scans {s['seconds'] - sum(gr):.2f}s, copy {copy:.2f}s, swaps {sum(sw) / 1e3:.3f}s"
                  f" (of {s['seconds']:.2f}s); {r['pending_deleted']} .deleted files pending (file.delete.delay.ms) "
                  "at its start")
    for name in ("round1", "round2b"):
        r = rounds[name]
        if r.get("calls") and r["stats"]:
            tot = r["stats"]["seconds"]
            print(f"  {name}, where the time goes (compiled calls the cleaner makes, timed one by one; each holds the "
                  "GIL throughout unless it does I/O):")
            print(f"    {'call':<36}{'calls':>7}{'total s':>9}{'share':>7}{'max ms':>9}{'MB/s':>8}")
            for k, v in sorted(r["calls"].items(), key=lambda kv: -sum(kv[1])):
                mbs = ""
                if k == "OffsetMap.add_batches":
                    mbs = f"{info['bytes'] / MB / sum(v):,.0f}" if name == "round1" else ""
                elif k == "filter_batches":
                    mbs = f"{r['stats']['bytes_read'] / MB / sum(v):,.0f}"
                print(f"    {k:<36}{len(v):>7}{sum(v):>9.3f}{sum(v) / tot:>7.0%}{max(v) * 1e3:>9.1f}{mbs:>8}")
    if res["thread_errors"]:
        print("  thread errors: " + "; ".join(res["thread_errors"]))
    print(f"  appended {res['appended']:,} records and made {res['reads']:,} reads meanwhile; roll() before round 2b "
          f"{res['roll_s'] * 1e3:.2f} ms; store.close() {res['close_s'] * 1e3:.1f} ms")
    print()
    ok = check["ok"]
    print(f"check: cleaned log [0, {check['end']:,}) holds {check['records']:,} records, {check['distinct']:,} "
          f"distinct keys (want {args.keys:,} each) -> {'OK' if ok else 'WRONG'}; log now "
          f"{check['bytes'] / MB:,.1f} MB in {check['segments']} segments")
    print(f"machine: {facts['cpu']}, {facts['cpus']} cpus, {facts['mem_gib']} GiB, Linux {facts['kernel']}, "
          f"Python {facts['python']}; scratch {facts['scratch']} ({facts['fs']}); load average "
          f"{facts['load_start']} at start, {facts['load_end']} at the end")
    print(f"kafkalog: {facts['code']}")
    if res.get("profile"):
        print()
        print("cProfile of round 1 (main thread only; C calls of Cython functions appear when they are "
              "called from Python):")
        print(res["profile"])


# ------------------------------------------------------------------------------------------------ main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0, help="log size on disk, 10^9 bytes (default 1)")
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct keys (default 1,000,000)")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--codec", choices=("none", "lz4", "gzip", "snappy", "zstd"), default="none")
    ap.add_argument("--segment-bytes", type=int, default=1 << 27,
                    help="the topic's segment.bytes (default 128 MiB; Kafka's default is 1 GiB)")
    ap.add_argument("--reps", type=int, default=None, help="runs per sequential read (best of; default 3, quick 2)")
    ap.add_argument("--quick", action="store_true", help="64 MB, 50,000 keys, 16 MiB segments: a few seconds")
    ap.add_argument("--cold", action="store_true", help="evict the log's own pages (posix_fadvise) before each run")
    ap.add_argument("--profile", nargs="?", const="", default=None, metavar="FILE",
                    help="cProfile round 1 (printed; FILE: also dump the stats there)")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="more topic config, e.g. file.delete.delay.ms=0 (repeatable)")
    ap.add_argument("--dir", help="scratch directory (default: the system temp dir)")
    ap.add_argument("--json", help="also write every figure here")
    ap.add_argument("--in-place", action="store_true", help="import kafkalog from the checkout, not a snapshot "
                    "copied at start (an in-place rebuild during the run then changes or crashes it)")
    args = ap.parse_args(argv)
    if args.quick:
        args.gb = min(args.gb, 0.064)
        args.keys = min(args.keys, 50_000)
        args.segment_bytes = min(args.segment_bytes, 16 << 20)
    args.reps = args.reps or (2 if args.quick else 3)
    if args.value_bytes < 8:
        ap.error("--value-bytes must be at least 8")
    base = args.dir or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    need = int(args.gb * GB * 1.25) + 256 * MiB
    free = shutil.disk_usage(base).free
    if free < need:
        raise SystemExit(f"{base}: {free / GB:.1f} GB free, this run needs about {need / GB:.1f} GB")
    work = tempfile.mkdtemp(prefix="kafkalog-compaction-", dir=base)
    path = os.path.join(work, "store")
    args.code = ROOT if args.in_place else snapshot_kafkalog(os.path.join(work, "code"))
    use_kafkalog(args.code)
    mnt = mount_of(work)
    facts = dict(machine(), scratch=work, fs=f"{mnt[2]} on {mnt[0]}" if mnt else "?", load_start=loadavg(),
                 code=code_state(args.code) + ("" if args.in_place else f", snapshot of {ROOT}/kafkalog"))
    progress(f"{facts['cpu']}, {facts['cpus']} cpus; load {facts['load_start']}; {free / GB:.0f} GB free under "
             f"{base}")
    rc = 0
    try:
        t = perf()
        info = build(args, path)
        progress(f"built {info['bytes'] / MB:,.0f} MB, {info['records']:,} records, {info['segments']} segments in "
                 f"{perf() - t:.1f}s")
        rows = reads(args, path, info)
        for r in rows:
            progress(f"{r['name']}: {r['mb_s']:,.0f} MB/s")
        res = run_child(args, path)
        end = res["rounds"]["round2b"]["stats"]["end_offset"] if res["rounds"]["round2b"]["stats"] else \
            res["rounds"]["round1"]["stats"]["end_offset"]
        check = verify(path, end)
        check["end"] = end
        check["ok"] = check["records"] == args.keys == check["distinct"]
        rc = 0 if check["ok"] else 1
        facts["load_end"] = loadavg()
        report(args, info, rows, res, check, facts)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "machine": facts, "log": info, "reads": rows, "cleaning": res,
                           "check": check}, f, indent=1, default=str)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--_child":
        cfg = json.loads(sys.argv[2])
        use_kafkalog(cfg["code"])
        child_clean(cfg)
        sys.exit(0)
    sys.exit(main())
