"""bench/run.py's big logs: g6 (delete-before on a big log against a small one, the unclean open after kill -9,
RSS while a log grows). The writer processes run as ``run.py --_child CODE unclean|rss ...``."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

from harness import GB, MB, MiB, perf, progress, row

from . import common
from .common import BATCH, TOPIC, make_records, need_kafkalog, new_store, rmtree

RUN_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run.py")

# ------------------------------------------------------------------------------------------------ g6: big logs

POOL_BATCH = 7_000   # records per batch of the bulk pool (~0.8 MB: under max.message.bytes' default 1 MB)


def bulk_pool(keys, values, ts, batches=8) -> bytes:
    """`batches` v2 batches of POOL_BATCH records each, concatenated: appended again and again (append_records
    rewrites base offsets) to build multi-GB logs at disk speed."""
    parts = []
    for b in range(batches):
        s = slice(b * POOL_BATCH, (b + 1) * POOL_BATCH)
        parts.append(bytes(common.build_batch(values[s], keys[s], ts[s], None)))
    return b"".join(parts)


def fill(log, pool: bytes, nbytes: int) -> float:
    t0 = perf()
    written = 0
    append_records = log.append_records
    while written < nbytes:
        append_records(pool)
        written += len(pool)
    return perf() - t0


def disk_free(path) -> int:
    return shutil.disk_usage(path).free


def m_delete_before(ctx):
    need_kafkalog()
    small, big = ctx.p.delete_sizes
    seg = ctx.p.delete_segment
    note = []
    free = disk_free(ctx.scratch)
    need = int((small + big) * 1.05) + 2 * 1024**3
    if free < need:
        f = max(0.05, (free - 2 * 1024**3) / ((small + big) * 1.05))
        small, big = int(small * f), int(big * f)
        note.append(f"scaled down: only {free / GB:.1f} GB free")
    d = ctx.data
    pool = bulk_pool(d.keys, d.values, d.ts)
    rows = []
    logs = {}
    try:
        for label, size in (("small", small), ("big", big)):
            path = ctx.tmpdir(f"kl-del-{label}")
            store, log = new_store(path, {"segment.bytes": seg})
            logs[label] = (store, log, path)
            el = fill(log, pool, size)
            t0 = perf()
            log.flush()
            fl = perf() - t0
            progress(f"g6: built a {log.size_in_bytes / GB:.2f} GB log ({len(log.segments())} segments) in "
                     f"{el:.1f}s + flush {fl:.1f}s")
            rows.append(row(f"kafkalog.append_records_bulk[{label}]", "kafkalog",
                            f"append_records of {len(pool) / MB:.1f} MB (8 batches of {POOL_BATCH:,})",
                            n=log.log_end_offset, seconds=el, nbytes=log.size_in_bytes,
                            method="one run (building the g6 log)", note="page cache + disk writeback; no fsync"))
        steps = {"small": [], "big": []}
        nseg = min(len(logs[k][1].segments()) for k in logs)
        k = min(ctx.p.delete_steps, nseg - 3)
        if k < 1:
            raise RuntimeError(f"only {nseg} segments: too few for delete-before steps")
        bases = {lb: [s.base_offset for s in logs[lb][1].segments()] for lb in logs}
        built = {lb: (logs[lb][1].size_in_bytes, len(bases[lb])) for lb in logs}
        for j in range(1, k + 1):  # each call moves the start into the middle of segment j: removes one segment
            for lb in (("small", "big") if j % 2 else ("big", "small")):
                log = logs[lb][1]
                b = bases[lb]
                off = (b[j] + b[j + 1]) // 2
                t0 = perf()
                log.delete_records_before(off)
                steps[lb].append(perf() - t0)
                assert log.log_start_offset == off
        method = f"median of {k} calls, alternating small/big"
        for lb in ("small", "big"):
            sz, nsegs = built[lb]
            rows.append(row(f"kafkalog.delete_records_before[{lb}]", "kafkalog",
                            f"delete_records_before: start moves by one segment, on {sz / GB:.2f} GB "
                            f"({nsegs} x {seg // MiB} MiB segments)",
                            seconds=statistics.median(steps[lb]), method=method, runs=steps[lb],
                            note="; ".join(note + ["file.delete.delay.ms=60000 (default): files renamed to "
                                                   ".deleted, unlinked later"]), log_bytes=sz))
        for lb in ("small", "big"):  # for the record: one call that drops half of the remaining segments
            store, log, _ = logs[lb]
            segs = log.segments()
            off = segs[len(segs) // 2].base_offset + 1
            t0 = perf()
            log.delete_records_before(off)
            el = perf() - t0
            rows.append(row(f"kafkalog.delete_half[{lb}]", "kafkalog",
                            f"delete_records_before removing {len(segs) // 2} of {len(segs)} segments at once",
                            seconds=el,
                            method="one call", note="info: cost grows with the number of segments removed"))
    finally:
        for store, _log, path in logs.values():
            store.close()
            rmtree(path)
    return rows


def child_unclean(path, nbytes, first):
    """Writer process for the unclean-open case: (first time) a 1 GB log; then flush, checkpoint the recovery point
    (run_maintenance), append a little more, report, and wait for kill -9."""
    keys, values, ts = make_records(POOL_BATCH * 8)
    store = common.LogStore(path, exclusive=True, maintenance=False)
    if first:
        store.create_topic(TOPIC, 1)
    log = store.log(TOPIC, 0)
    if first:
        fill(log, bulk_pool(keys, values, ts), nbytes)
    log.flush()
    store.run_maintenance()
    rp = log.recovery_point
    now = time.time_ns() // 1_000_000 - 60_000
    for s in range(0, 10 * BATCH, BATCH):  # the unflushed tail: 10 batches after the checkpointed recovery point
        log.append_batch(values[s:s + BATCH], keys[s:s + BATCH], [now] * BATCH)
    print(json.dumps({"leo": log.log_end_offset, "recovery_point": rp, "bytes": log.size_in_bytes}), flush=True)
    time.sleep(3600)


def m_unclean_open(ctx):
    need_kafkalog()
    nbytes = ctx.p.unclean_bytes
    note = []
    free = disk_free(ctx.scratch)
    if free < nbytes + 2 * 1024**3:
        nbytes = max(int(0.1 * GB), free - 2 * 1024**3)
        note.append(f"scaled down to {nbytes / GB:.2f} GB: disk nearly full")
    path = ctx.tmpdir("kl-unclean")
    times, info = [], {}
    try:
        for i in range(ctx.p.unclean_reps + 1):  # run 0 is the warm-up
            child = subprocess.Popen([sys.executable, RUN_PY, "--_child", ctx.code, "unclean", path,
                                      str(nbytes), "1" if i == 0 else "0"], stdout=subprocess.PIPE, text=True)
            line = child.stdout.readline()
            if not line:
                child.wait()
                raise RuntimeError(f"unclean-open writer exited with {child.returncode} before it was ready")
            info = json.loads(line)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            child.stdout.close()
            assert not os.path.exists(os.path.join(path, ".kafka_cleanshutdown"))
            gc.collect()
            t0 = perf()
            store = common.LogStore(path)
            log = store.log(TOPIC, 0)
            el = perf() - t0
            leo = log.log_end_offset
            store.close()
            assert leo == info["leo"], f"unclean open lost records: {leo} != {info['leo']}"
            if i:
                times.append(el)
    finally:
        rmtree(path)
    method = f"median of {len(times)} crashes (1 warm-up crash discarded)"
    return row("kafkalog.unclean_open", "kafkalog", "LogStore(path) + log(topic, 0) after kill -9 of the writer",
               seconds=statistics.median(times), method=method, runs=times,
               note="; ".join(note + [f"{info['bytes'] / GB:.2f} GB, 1 segment (segment.bytes default 1 GiB), "
                                      f"{info['leo'] - info['recovery_point']:,} records after the checkpointed "
                                      "recovery point; page cache warm"]))


def _rss():
    """(rss, anon, file) bytes of this process."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "RssAnon:", "RssFile:")):
                    k, v = line.split(":")
                    out[k] = int(v.split()[0]) * 1024
        return out["VmRSS"], out.get("RssAnon"), out.get("RssFile")
    except (OSError, KeyError):
        import psutil
        return psutil.Process().memory_info().rss, None, None


def child_rss(path, small, big):
    """Append 1000-record batches (append_batch) until the log is `big` bytes; report RSS at small/10 (warm-up),
    at small, and at each further small step."""
    keys, values, ts = make_records(100_000)
    store, log = new_store(path)
    ts0 = ts[0]
    samples = []
    marks = [small // 10] + list(range(small, big + 1, small))
    i = 0
    while marks:
        s = (i * BATCH) % len(values)
        ks = [(i * BATCH + j).to_bytes(8, "big") for j in range(BATCH)]
        log.append_batch(values[s:s + BATCH], ks, list(range(ts0 + i * BATCH, ts0 + (i + 1) * BATCH)))
        i += 1
        if i % 10 == 0 and log.size_in_bytes >= marks[0]:
            marks.pop(0)
            gc.collect()
            rss, anon, fil = _rss()
            samples.append({"log_bytes": log.size_in_bytes, "rss": rss, "anon": anon, "file": fil})
    store.close()
    print(json.dumps(samples), flush=True)


def m_rss(ctx):
    need_kafkalog()
    small, big = ctx.p.rss_sizes
    path = ctx.tmpdir("kl-rss")
    try:
        t0 = perf()
        out = subprocess.run([sys.executable, RUN_PY, "--_child", ctx.code, "rss", path, str(small),
                              str(big)], capture_output=True, text=True, check=True)
        el = perf() - t0
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"RSS writer failed: {e.stderr.strip()[-500:]}") from None
    finally:
        rmtree(path)
    samples = json.loads(out.stdout.strip().splitlines()[-1])
    s1 = next(s for s in samples if s["log_bytes"] >= small)
    s10 = samples[-1]
    after = [s["rss"] for s in samples if s["log_bytes"] >= small]

    def fmt(s):
        return f"{s['rss'] / MiB:.1f} MiB (anon {(s['anon'] or 0) / MiB:.1f}, file {(s['file'] or 0) / MiB:.1f})"
    method = "one writer process (append_batch of 1000), RSS read from /proc after gc.collect()"
    return [row("kafkalog.rss[1x]", "kafkalog", f"RSS with a {s1['log_bytes'] / MB:,.0f} MB log", value=s1["rss"],
                method=method, note=fmt(s1) + f"; warm-up sample at {samples[0]['log_bytes'] / MB:,.0f} MB: "
                                              f"{samples[0]['rss'] / MiB:.1f} MiB"),
            row("kafkalog.rss[10x]", "kafkalog", f"RSS with a {s10['log_bytes'] / MB:,.0f} MB log", value=s10["rss"],
                method=method, note=fmt(s10) + f"; min/max from 1x on: {min(after) / MiB:.1f}/{max(after) / MiB:.1f} "
                                               f"MiB; {el:.1f}s")]
