#!/usr/bin/env python3
"""kafkalog's benchmark: kafkalog and the peers a Python user would pick, measured side by side in one run.

    python bench/run.py [--quick] [--json out.json] [--only REGEX] [--dir DIR]

Prints machine facts, a goal table (our number, the baseline's number, the ratio, the target, PASS/MISS) and the
absolute number behind every row. Benchmarks are not tests (DESIGN.md rule 10): the exit status does not depend
on PASS/MISS, and nothing in tests/ looks at a time.

Goals (the issue's, all ratios unless marked absolute)
  g1  append_batch(1000 records) + flush() per batch, exclusive store, against
        lmdb (1 write txn of 1000 puts per commit, sync on)                         >= 1.5x
        aiokafka's Cython DefaultRecordBatchBuilder, build only, no I/O             >= 1.0x
        persist-queue SQLiteQueue (defaults: a commit + WAL fsync per put)          >= 100x
        diskcache.Deque (defaults, one append per record)                           >= 100x
        raw sequential write of 1 MiB chunks + one fsync, payload MB/s              >= 0.5x
  g2  append() per record (exclusive store), one flush() at the end, against a
      per-record f.write(struct.pack(...) + key + value) loop + one fsync            >= 1.0x
  g3  append() + flush() per record, p50 latency, against os.write + os.fdatasync    <= 1.2x
  g4  log.records() (CRC-checked record objects) against aiokafka's
      DefaultRecordBatch(bytes).validate_crc() + iterate key/value                   >= 1.5x
      log.read_columns()                                                  absolute >= 20 M records/s
  g5  append_batch(..., compression="lz4") against aiokafka's lz4 build               >= 2x
      offset_for_time(T) p50 over 1 M records against np.searchsorted on a
      numpy.memmap of 1 M int64 timestamps, per call, in an exclusive, a shared
      (the default) and a read-only store (g5.time_seek, .shared, .read_only)         <= 3x
      (1000-record batches), and the same over the records written in Kafka's
      16 KiB batches (g5.time_seek.16k, .16k.shared, .16k.read_only: issue 25's
      definition, "1 M records, 16 KiB batches")                                     <= 3x
  g6  delete_records_before on an 8 GB log against the same call on a 1 GB log
      (--quick: 4 GB vs 0.5 GB), 64 MiB segments                                     <= 1.5x
      unclean open (kill -9 of the writer) of a 1 GB log with a recent recovery
      point: LogStore(path) + log(topic, 0)                                absolute <= 0.2 s
      RSS of a process appending, at 10x the log size against 1x                   within +-20%
  g7  KafkaProducer.send(value, key, timestamp_ms) x N + flush() (linger_ms=5,
      batch_size=1 MiB, acks=1) against append_batch(1000) of the same records,
      runs alternating                                                              >= 0.8x
  g8  DurableQueue cycles (put_many(100), fsynced, then 100 x get + ack) against
      the same cycle, fsynced once per 100 puts, on
        persist-queue SQLiteQueue (get + task_done)                                 >= 20x
        persist-queue SQLiteAckQueue (get + ack: the same semantics)                >= 20x
        diskcache.Deque (popleft)                                                   >= 20x
        litequeue (pop + done, prune per cycle)                                     >= 20x

Data: N distinct 100-byte JSON-ish values, 8-byte big-endian keys, timestamps increasing by 1 ms from a day ago
(every case uses the same records). Payload = key + value = 108 bytes per record; MB = 1e6 bytes.
Each row states how it was aggregated: best of R for CPU-bound work, median of R where every unit ends in an
fsync, percentiles of individually timed calls for latencies; one warm-up run is always discarded.
All files go under --dir (default: a fresh directory in the system temp dir), so every case uses the same disk.

This file holds the goals and drives them; the measurements live in bench/engine/ (one module per family), the
timing, the goal table's judging and printing and the JSON in bench/harness.py.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from importlib import metadata

from engine import biglogs, common, consumer, producer, queues, reads, seek, writes
from engine.common import REC_BYTES, VALUE_BYTES, Ctx, Params, load_kafkalog, rmtree
from harness import (
    GB,
    ROOT,
    Goal,
    Unavailable,
    judge,
    perf,
    print_goals,
    print_measurements,
    progress,
    snapshot_kafkalog,
    write_json,
)

# ------------------------------------------------------------------------------------------------ goals

MEASUREMENTS = {
    "kafkalog.append_batch+flush": writes.m_ours_batch_fsync,
    "kafkalog.append_batch": writes.m_ours_batch_fsync,
    "lmdb.txn_of_1000": writes.m_lmdb_txn1000,
    "aiokafka.build": writes.m_aiokafka_build,
    "persistqueue.SQLiteQueue.put": writes.m_pq_sqlite,
    "diskcache.Deque.append": writes.m_diskcache_deque,
    "raw.seq_write+fsync": writes.m_raw_seq_write,
    "raw.write_batch+fdatasync": writes.m_raw_seq_write,
    "kafkalog.append": writes.m_ours_single_append,
    "file.write_loop": writes.m_file_write_loop,
    "kafkalog.append+flush": writes.m_fsync_each,
    "file.write+fdatasync": writes.m_fsync_each,
    "kafkalog.records": reads.m_ours_records,
    "aiokafka.parse+crc": reads.m_aiokafka_parse,
    "kafkalog.read_columns": reads.m_ours_read_columns,
    "kafkalog.append_batch_lz4": writes.m_ours_lz4,
    "aiokafka.build_lz4": writes.m_aiokafka_build_lz4,
    "kafkalog.offset_for_time": seek.m_time_seek,
    "kafkalog.offset_for_time[16KiB]": seek.m_time_seek,
    "kafkalog.offset_for_time[shared]": seek.m_time_seek,
    "kafkalog.offset_for_time[read_only]": seek.m_time_seek,
    "kafkalog.offset_for_time[16KiB,shared]": seek.m_time_seek,
    "kafkalog.offset_for_time[16KiB,read_only]": seek.m_time_seek,
    "numpy.searchsorted_memmap": seek.m_time_seek,
    "kafkalog.delete_records_before[small]": biglogs.m_delete_before,
    "kafkalog.delete_records_before[big]": biglogs.m_delete_before,
    "kafkalog.unclean_open": biglogs.m_unclean_open,
    "kafkalog.rss[1x]": biglogs.m_rss,
    "kafkalog.rss[10x]": biglogs.m_rss,
    "kafkalog.KafkaProducer.send": producer.m_producer_send,
    "kafkalog.append_batch[paired]": producer.m_producer_send,
    "kafkalog.KafkaProducer.send[value]": producer.m_producer_send,
    "kafkalog.DurableQueue": queues.m_queue_ours,
    "kafkalog.DurableQueue[messages]": queues.m_queue_ours,
    "raw.queue_cycle+fdatasync": queues.m_queue_ours,
    "persistqueue.SQLiteQueue[cycle]": queues.m_queue_pq,
    "persistqueue.SQLiteAckQueue[cycle]": queues.m_queue_pq_ack,
    "diskcache.Deque[cycle]": queues.m_queue_diskcache,
    "litequeue.LiteQueue[cycle]": queues.m_queue_litequeue,
    "kafkalog.KafkaConsumer.poll": consumer.m_consumer_poll,
    "kafkalog.records[shared]": consumer.m_consumer_poll_modes,
    "kafkalog.KafkaConsumer.poll[shared]": consumer.m_consumer_poll_modes,
    "kafkalog.records[read_only]": consumer.m_consumer_poll_modes,
    "kafkalog.KafkaConsumer.poll[read_only]": consumer.m_consumer_poll_modes,
    "kafkalog.wakeup_cross_process": consumer.m_wakeup,
}



GOALS = [
    Goal("g1.lmdb", "append_batch(1000)+flush vs lmdb txn(1000 puts) sync",
         "kafkalog.append_batch+flush", "lmdb.txn_of_1000", "rec_s", ">=", 1.5),
    Goal("g1.aiokafka", "append_batch(1000)+flush vs aiokafka build only",
         "kafkalog.append_batch+flush", "aiokafka.build", "rec_s", ">=", 1.0),
    Goal("g1.persistqueue", "append_batch(1000)+flush vs SQLiteQueue.put",
         "kafkalog.append_batch+flush", "persistqueue.SQLiteQueue.put", "rec_s", ">=", 100),
    Goal("g1.diskcache", "append_batch(1000)+flush vs diskcache.Deque.append",
         "kafkalog.append_batch+flush", "diskcache.Deque.append", "rec_s", ">=", 100),
    Goal("g1.rawdisk", "append_batch(1000)+flush payload vs raw write+fsync",
         "kafkalog.append_batch+flush", "raw.seq_write+fsync", "mb_s", ">=", 0.5),
    Goal("g2.single_append", "append() x N + flush vs f.write loop + fsync",
         "kafkalog.append", "file.write_loop", "rec_s", ">=", 1.0),
    Goal("g3.fsync_latency", "append()+flush() p50 vs os.write+fdatasync p50",
         "kafkalog.append+flush", "file.write+fdatasync", "p50_us", "<=", 1.2),
    Goal("g4.records", "records() vs aiokafka parse+validate_crc",
         "kafkalog.records", "aiokafka.parse+crc", "rec_s", ">=", 1.5),
    Goal("g4.read_columns", "read_columns() records/s (absolute)",
         "kafkalog.read_columns", None, "rec_s", ">=", 20e6),
    Goal("g5.lz4", "append_batch(lz4) vs aiokafka lz4 build",
         "kafkalog.append_batch_lz4", "aiokafka.build_lz4", "rec_s", ">=", 2.0),
    Goal("g5.time_seek", "offset_for_time p50 vs searchsorted(memmap) p50",
         "kafkalog.offset_for_time", "numpy.searchsorted_memmap", "p50_us", "<=", 3.0),
    Goal("g5.time_seek.shared", "offset_for_time p50, shared (default) store, vs searchsorted",
         "kafkalog.offset_for_time[shared]", "numpy.searchsorted_memmap", "p50_us", "<=", 3.0),
    Goal("g5.time_seek.read_only", "offset_for_time p50, read-only store, vs searchsorted",
         "kafkalog.offset_for_time[read_only]", "numpy.searchsorted_memmap", "p50_us", "<=", 3.0),
    Goal("g5.time_seek.16k", "offset_for_time p50, 16 KiB batches (issue 25's rows), vs searchsorted",
         "kafkalog.offset_for_time[16KiB]", "numpy.searchsorted_memmap", "p50_us", "<=", 3.0),
    Goal("g5.time_seek.16k.shared", "the same, shared (default) store",
         "kafkalog.offset_for_time[16KiB,shared]", "numpy.searchsorted_memmap", "p50_us", "<=", 3.0),
    Goal("g5.time_seek.16k.read_only", "the same, read-only store",
         "kafkalog.offset_for_time[16KiB,read_only]", "numpy.searchsorted_memmap", "p50_us", "<=", 3.0),
    Goal("g6.delete_before", "delete-before on big log vs on 1/8-size log",
         "kafkalog.delete_records_before[big]", "kafkalog.delete_records_before[small]", "seconds", "<=", 1.5),
    Goal("g6.unclean_open", "unclean open of 1 GB log, s (absolute)",
         "kafkalog.unclean_open", None, "seconds", "<=", 0.2),
    Goal("g6.rss", "RSS at 10x log size vs at 1x",
         "kafkalog.rss[10x]", "kafkalog.rss[1x]", "value", "within", (0.8, 1.2)),
    Goal("g7.producer", "KafkaProducer.send x N + flush vs append_batch(1000)",
         "kafkalog.KafkaProducer.send", "kafkalog.append_batch[paired]", "rec_s", ">=", 0.8),
    Goal("g8.queue.persistqueue", "DurableQueue cycles vs persist-queue SQLiteQueue",
         "kafkalog.DurableQueue", "persistqueue.SQLiteQueue[cycle]", "cyc_s", ">=", 20),
    Goal("g8.queue.persistqueue_ack", "DurableQueue cycles vs persist-queue SQLiteAckQueue",
         "kafkalog.DurableQueue", "persistqueue.SQLiteAckQueue[cycle]", "cyc_s", ">=", 20),
    Goal("g8.queue.diskcache", "DurableQueue cycles vs diskcache.Deque",
         "kafkalog.DurableQueue", "diskcache.Deque[cycle]", "cyc_s", ">=", 20),
    Goal("g8.queue.litequeue", "DurableQueue cycles vs litequeue",
         "kafkalog.DurableQueue", "litequeue.LiteQueue[cycle]", "cyc_s", ">=", 20),
    Goal("g9.consumer", "KafkaConsumer.poll x N vs records() of the same log",
         "kafkalog.KafkaConsumer.poll", "kafkalog.records", "rec_s", ">=", 0.8),
    Goal("g9.consumer.shared", "the same, both through a shared store (the default mode)",
         "kafkalog.KafkaConsumer.poll[shared]", "kafkalog.records[shared]", "rec_s", ">=", 0.8),
    Goal("g9.consumer.read_only", "the same, both through a read-only store",
         "kafkalog.KafkaConsumer.poll[read_only]", "kafkalog.records[read_only]", "rec_s", ">=", 0.8),
    Goal("g10.wakeup", "poll() woken by another process's append, p50 us (absolute)",
         "kafkalog.wakeup_cross_process", None, "p50_us", "<=", 10_000),
]


# ------------------------------------------------------------------------------------------------ machine facts

def machine_facts(scratch):
    facts = {"python": platform.python_version(), "implementation": platform.python_implementation(),
             "kernel": platform.release(), "machine": platform.machine(), "cpus": os.cpu_count(),
             "cpu_model": platform.processor() or None}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    facts["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        facts["mem_gib"] = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    real = os.path.realpath(scratch)
    try:  # the mount holding the scratch dir: longest mount point that prefixes it
        best = None
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype, opts = line.split()[:4]
                mnt = mnt.replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and (best is None or len(mnt) >= len(best[1])):
                    best = (dev, mnt, fstype, opts)
        if best:
            facts.update(fs=best[2], device=best[0], mount=best[1], mount_options=best[3])
            blk = os.path.basename(os.path.realpath(best[0]))
            for key, f in (("rotational", "rotational"), ("write_cache", "write_cache")):
                p = f"/sys/class/block/{blk}/queue/{f}"
                if os.path.exists(p):
                    facts[key] = open(p).read().strip()
    except OSError:
        pass
    du = shutil.disk_usage(scratch)
    facts["disk_free_gb"] = round(du.free / GB, 1)
    facts["scratch"] = real
    pkgs = {}
    for p in ("numpy", "lmdb", "persist-queue", "diskcache", "aiokafka", "cramjam", "crc32c", "lz4", "psutil"):
        try:
            pkgs[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    facts["packages"] = pkgs
    try:
        facts["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    kafkalog = common.kafkalog
    facts["kafkalog"] = (os.path.dirname(kafkalog.__file__) if kafkalog else common.KAFKALOG_ERROR)
    if kafkalog and not os.path.dirname(kafkalog.__file__).startswith(ROOT):
        facts["kafkalog"] = f"{ROOT}/kafkalog (snapshot copied at start)"
    facts["engine_build"] = engine_build_state()
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True)
        facts["kafkalog_git"] = (rev.stdout.strip() or "no commit") + (" (+ local changes)" if dirty.stdout else "")
    except OSError:
        pass
    return facts


def engine_build_state() -> str:
    """Whether the compiled engine this run imports is older than its sources (then numbers describe old code)."""
    import glob
    eng = os.path.join(ROOT, "kafkalog", "_engine")
    shared = glob.glob(os.path.join(eng, "*.pxd")) + glob.glob(os.path.join(ROOT, "include", "kafkalog", "*.h"))
    stale = []
    for pyx in glob.glob(os.path.join(eng, "*.pyx")):
        mod = os.path.basename(pyx)[:-4]
        sos = glob.glob(os.path.join(eng, mod + ".*.so")) + glob.glob(os.path.join(eng, mod + ".*.pyd"))
        if not sos:
            stale.append(f"{mod}: not built")
            continue
        built = max(os.path.getmtime(x) for x in sos)
        newer = [os.path.basename(x) for x in [pyx] + shared if os.path.getmtime(x) > built]
        if newer:
            stale.append(f"{mod}.so older than {', '.join(sorted(newer)[:3])}")
    return "STALE (" + "; ".join(stale) + ")" if stale else "built from the current sources"


def print_facts(f, params):
    print(f"machine: {f.get('cpu_model')}, {f.get('cpus')} cpus, {f.get('mem_gib')} GiB RAM, "
          f"{f.get('implementation')} {f.get('machine')}, Linux {f.get('kernel')}, Python {f.get('python')}")
    print(f"disk:    {f.get('fs')} on {f.get('device')} ({f.get('mount_options')}, mounted at {f.get('mount')}, "
          f"rotational={f.get('rotational', '?')}, write_cache={f.get('write_cache', '?')}), "
          f"{f.get('disk_free_gb')} GB free; scratch {f.get('scratch')}")
    print("peers:   " + ", ".join(f"{k} {v}" for k, v in f["packages"].items()))
    print(f"kafkalog: {f.get('kafkalog')}, git {f.get('kafkalog_git', '?')}, engine {f.get('engine_build')}")
    print(f"load:    {f.get('loadavg_start')} (1/5/15 min load average at start; other work on the machine "
          "skews the CPU-bound rows)")
    print(f"run:     {'--quick' if params.quick else 'full'}; N={params.n:,} records of {REC_BYTES} B payload "
          f"(key 8 + value {VALUE_BYTES}); {params.reps} timed reps after a warm-up")


# ------------------------------------------------------------------------------------------------ main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions (about 2 minutes)")
    ap.add_argument("--json", help="also write machine facts, parameters, measurements and goals here")
    ap.add_argument("--only", help="regex on goal names, e.g. 'g1|g4.records' (see the goal table)")
    ap.add_argument("--dir", help="scratch directory on the disk to measure (default: a new one in the temp dir)")
    ap.add_argument("--in-place", action="store_true",
                    help="import kafkalog from the checkout itself instead of a snapshot copied at start "
                         "(an in-place rebuild during the run then crashes it)")
    ap.add_argument("--list", action="store_true", help="list the goals and exit")
    args = ap.parse_args(argv)

    if args.list:
        for g in GOALS:
            print(f"{g.case:18} {g.check}")
        return 0
    goals = [g for g in GOALS if not args.only or re.search(args.only, g.case)]
    if not goals:
        ap.error(f"--only {args.only!r} matches no goal (see --list)")
    params = Params(args.quick)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    args.dir = tempfile.mkdtemp(prefix="kafkalog-bench-", dir=args.dir)
    needed = []
    for g in goals:
        for m in g.measurements():
            if m not in needed:
                needed.append(m)
    data_n = max(params.n, biglogs.POOL_BATCH * 8)
    if any(MEASUREMENTS[m] is seek.m_time_seek for m in needed):
        data_n = max(data_n, params.seek_records)
    ctx = Ctx(args, params, data_n)
    if args.in_place:
        ctx.code = ROOT
    else:
        ctx.code = os.path.join(args.dir, "code")
        try:
            snapshot_kafkalog(ctx.code)
        except Unavailable:  # nothing to copy: the import below fails and says so in every row of ours
            pass
    load_kafkalog(ctx.code)
    facts = machine_facts(args.dir)
    print_facts(facts, params)
    if common.KAFKALOG_ERROR:
        progress(common.KAFKALOG_ERROR + ": measuring the peers only")

    results, errors, rows = {}, {}, []
    done = set()
    t_start = perf()
    try:
        for name in needed:
            fn = MEASUREMENTS[name]
            if fn in done:
                continue
            done.add(fn)
            t = perf()
            try:
                out = fn(ctx)
            except Unavailable as e:
                err = str(e)
            except Exception as e:  # keep going; the goal row says what broke
                err = f"FAILED {type(e).__name__}: {e}"
                traceback.print_exc(file=sys.stdout)
            else:
                err = None
                for r in out if isinstance(out, list) else [out]:
                    results[r["name"]] = r
                    rows.append(r)
            for m, f in MEASUREMENTS.items():
                if f is fn and m not in results:
                    errors[m] = err or "not produced"
            progress(f"{fn.__name__[2:]:<22} {perf() - t:6.1f}s" + (f"  ({err})" if err else ""))
    finally:
        ctx.close()
        rmtree(args.dir)  # the run's own directory (inside --dir when given)
    total = perf() - t_start
    try:
        facts["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    judged = [judge(g, results, errors) for g in goals]
    print()
    print_goals(judged)
    print()
    print_measurements(rows)
    gen = ctx._data.gen_s if ctx._data else 0.0
    print(f"\ntotal {total:.1f}s (data generation {gen:.1f}s); load average at the end {facts.get('loadavg_end')}")
    if args.json:
        write_json(args.json, {"machine": facts, "params": params.as_dict(), "total_s": total, "goals": judged,
                               "measurements": rows, "errors": errors}, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--_child":  # writer processes of the g6 cases
        load_kafkalog(sys.argv[2])
        if common.KAFKALOG_ERROR:
            sys.exit(common.KAFKALOG_ERROR)
        kind, rest = sys.argv[3], sys.argv[4:]
        if kind == "unclean":
            biglogs.child_unclean(rest[0], int(rest[1]), rest[2] == "1")
        elif kind == "rss":
            biglogs.child_rss(rest[0], int(rest[1]), int(rest[2]))
        sys.exit(0)
    sys.exit(main())
