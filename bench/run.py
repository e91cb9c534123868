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
      numpy.memmap of 1 M int64 timestamps, per call                                 <= 3x
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
        diskcache.Deque (popleft)                                                   >= 20x
        litequeue (pop + done, prune per cycle)                                     >= 20x

Data: N distinct 100-byte JSON-ish values, 8-byte big-endian keys, timestamps increasing by 1 ms from a day ago
(every case uses the same records). Payload = key + value = 108 bytes per record; MB = 1e6 bytes.
Each row states how it was aggregated: best of R for CPU-bound work, median of R where every unit ends in an
fsync, percentiles of individually timed calls for latencies; one warm-up run is always discarded.
All files go under --dir (default: a fresh directory in the system temp dir), so every case uses the same disk.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from importlib import metadata

perf = time.perf_counter
MB = 1e6
MiB = 1 << 20
GB = 1e9
VALUE_BYTES = 100
REC_BYTES = 8 + VALUE_BYTES        # payload per record: 8-byte key + value
BATCH = 1000                       # records per batch in the batched cases (the 1000 x 100 B)
TOPIC = "bench"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kafkalog = LogStore = build_batch = None
KAFKALOG_ERROR = "kafkalog not loaded"


def snapshot_kafkalog(dest: str) -> str:
    """Copy this checkout's kafkalog package (Python files and the built engine) to dest and return the directory
    to import it from: the run measures the build as it was when it started, and an in-place rebuild meanwhile
    (which rewrites the .so files under a running process and crashes it) cannot touch it."""
    spec = importlib.util.find_spec("kafkalog")  # the installed package when there is one (CI), else the checkout
    src = os.path.dirname(spec.origin) if spec is not None and spec.origin else os.path.join(ROOT, "kafkalog")
    if os.path.isdir(src):
        shutil.copytree(src, os.path.join(dest, "kafkalog"),
                        ignore=shutil.ignore_patterns("*.c", "*.html", "__pycache__", "*.o"))
    return dest


def load_kafkalog(path: str) -> None:
    """Import kafkalog from `path` (a snapshot, or the checkout itself with --in-place); on failure the harness
    still runs the peers and every goal row says why our side is missing."""
    global kafkalog, LogStore, build_batch, KAFKALOG_ERROR
    sys.path.insert(0, path)
    try:
        kafkalog = importlib.import_module("kafkalog")
        LogStore = kafkalog.LogStore
        build_batch = importlib.import_module("kafkalog._engine.batch").build_batch
        KAFKALOG_ERROR = None
    except Exception as e:
        kafkalog = LogStore = build_batch = None
        KAFKALOG_ERROR = f"kafkalog not importable ({type(e).__name__}: {e})"


class Unavailable(Exception):
    """A side of a comparison cannot run here (missing package or codec): the goal row says n/a and why."""


def need_kafkalog():
    if KAFKALOG_ERROR:
        raise Unavailable(KAFKALOG_ERROR)


# ------------------------------------------------------------------------------------------------ parameters

class Params:
    """Sizes for one run. --quick keeps the same cases on smaller sizes (and fewer repetitions)."""

    def __init__(self, quick: bool):
        self.quick = quick
        self.n = 200_000 if quick else 1_000_000            # records in the bulk cases (a multiple of BATCH)
        self.reps = 3 if quick else 5                       # timed repetitions after the warm-up
        self.pq_n = 500 if quick else 3_000                 # persist-queue SQLiteQueue: one fsync per put
        self.deque_n = 10_000 if quick else 50_000          # diskcache.Deque: one SQLite transaction per append
        self.slow_reps = 1 if quick else 3
        self.raw_mib = 256 if quick else 1024               # raw sequential write size
        self.fsync_n = 1_000 if quick else 5_000            # g3: records per side
        self.seek_records = 1_000_000                       # g5: the 1 M records, in --quick too
        self.seek_queries = 20_000 if quick else 100_000
        self.delete_sizes = (int(0.5 * GB), int(4 * GB)) if quick else (int(1 * GB), int(8 * GB))
        self.delete_segment = 64 * MiB
        self.delete_steps = 5 if quick else 9
        self.unclean_bytes = int(1 * GB)
        self.unclean_reps = 3 if quick else 5
        self.rss_sizes = (int(50 * MB), int(500 * MB)) if quick else (int(100 * MB), int(1 * GB))
        self.queue_cycles = 50 if quick else 300            # g8: put_many(100) + 100 x (get + ack) cycles

    def as_dict(self):
        return dict(vars(self))


# ------------------------------------------------------------------------------------------------ data

KINDS = ("page_view", "click", "cart_add", "checkout", "login", "search", "refund", "share")
REGIONS = (b"eu-w", b"us-e", b"ap-s", b"sa-e", b"af-s", b"us-w", b"eu-c")
NOISE_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def make_records(n: int, seed: int = 20240917, ts0: int | None = None):
    """n distinct JSON-ish values of exactly VALUE_BYTES bytes, 8-byte big-endian keys 0..n-1 and timestamps
    increasing by 1 ms starting a day ago (inside retention.ms and message.timestamp.*.max.ms defaults).

    A value: {"id":"00000042","sid":"9f3a01c2","ev":"checkout","at":1731000000042,"qty":37,"geo":"ap-s","x":"..."}
    with random session ids, quantities, regions and padding; built column-wise with numpy (a Python-level
    f-string per record costs seconds per million)."""
    import numpy as np
    if n >= 10**8:
        raise ValueError("ids are 8 digits")
    if ts0 is None:
        ts0 = (time.time_ns() // 1_000_000 // 1000) * 1000 - 86_400_000
    rnd = np.random.default_rng(seed)
    out = np.empty((n, VALUE_BYTES), np.uint8)
    alphabet = np.frombuffer(NOISE_ALPHABET, np.uint8)
    idx = np.arange(n, dtype=np.int64)
    cols = {"I": (idx, 8, 10), "S": (rnd.integers(0, 1 << 32, n, dtype=np.int64), 8, 16),
            "T": (ts0 + idx, 13, 10), "Q": (rnd.integers(10, 100, n, dtype=np.int64), 2, 10)}
    geo = np.frombuffer(b"".join(REGIONS), np.uint8).reshape(len(REGIONS), 4)[rnd.integers(0, len(REGIONS), n)]
    hexdigits = np.frombuffer(b"0123456789abcdef", np.uint8)
    for k, kind in enumerate(KINDS):
        head = '{"id":"IIIIIIII","sid":"SSSSSSSS","ev":"' + kind + '","at":TTTTTTTTTTTTT,"qty":QQ,"geo":"GGGG","x":"'
        rows = out[k::len(KINDS)]
        rows[:, :len(head)] = np.frombuffer(head.encode(), np.uint8)
        rows[:, len(head):VALUE_BYTES - 2] = alphabet[
            rnd.integers(0, len(alphabet), (len(rows), VALUE_BYTES - 2 - len(head)), dtype=np.uint8)]
        rows[:, VALUE_BYTES - 2:] = np.frombuffer(b'"}', np.uint8)
        for ch, (arr, width, base) in cols.items():
            at = head.index(ch * width)
            powers = base ** np.arange(width - 1, -1, -1, dtype=np.int64)
            rows[:, at:at + width] = hexdigits[(arr[k::len(KINDS), None] // powers) % base]
        at = head.index("GGGG")
        rows[:, at:at + 4] = geo[k::len(KINDS)]
    big = out.tobytes()
    del out
    values = [big[o:o + VALUE_BYTES] for o in range(0, n * VALUE_BYTES, VALUE_BYTES)]
    keys = [i.to_bytes(8, "big") for i in range(n)]
    ts = list(range(ts0, ts0 + n))
    return keys, values, ts


class Data:
    def __init__(self, n: int):
        t = perf()
        self.n = n
        self.keys, self.values, self.ts = make_records(n)
        assert all(len(v) == VALUE_BYTES for v in self.values[:1000])
        self.gen_s = perf() - t
        self._chunks = None

    def chunks(self, n: int):
        """[(values, keys, timestamps)] of BATCH records each, covering the first n records (sliced once, outside
        every timed region, and shared by every side)."""
        if self._chunks is None:
            self._chunks = [(self.values[s:s + BATCH], self.keys[s:s + BATCH], self.ts[s:s + BATCH])
                            for s in range(0, self.n - BATCH + 1, BATCH)]
        return self._chunks[: n // BATCH]


# ------------------------------------------------------------------------------------------------ harness

class Ctx:
    def __init__(self, args, params: Params, data_n: int):
        self.args = args
        self.p = params
        self.scratch = args.dir
        self.data_n = data_n
        self._data = None
        self._fixtures = {}
        self._closers = []
        self.code = ROOT  # where kafkalog is imported from (a snapshot unless --in-place)

    @property
    def data(self) -> Data:
        if self._data is None:
            self._data = Data(self.data_n)
            progress(f"data: {self.data_n:,} records generated in {self._data.gen_s:.1f}s")
        return self._data

    def tmpdir(self, name: str) -> str:
        return tempfile.mkdtemp(prefix=name + "-", dir=self.scratch)

    def fixture(self, name, make):
        if name not in self._fixtures:
            value, closer = make()
            self._fixtures[name] = value
            if closer is not None:
                self._closers.append(closer)
        return self._fixtures[name]

    def close(self):
        for c in reversed(self._closers):
            try:
                c()
            except Exception as e:  # a cleanup failure must not hide the results
                progress(f"cleanup failed: {type(e).__name__}: {e}")
        self._closers.clear()


def progress(msg: str):
    print("# " + msg, flush=True)


def row(name, side, what, *, n=None, seconds=None, nbytes=None, method="", note="", **extra):
    """One absolute measurement. side: 'kafkalog', 'peer' or 'floor' (a physical limit)."""
    r = {"name": name, "side": side, "what": what, "n": n, "seconds": seconds,
         "rec_s": n / seconds if (n and seconds) else None,
         "mb_s": nbytes / seconds / MB if (nbytes and seconds) else None,
         "method": method, "note": note}
    r.update(extra)
    return r


def repeat(ctx, run, n, agg, *, reps=None, warm_n=None):
    """Time run(n) -> seconds (run does its own setup and teardown outside its timed region): one warm-up run on
    warm_n records, discarded, then `reps` runs aggregated by 'best' (min) or 'median'."""
    reps = reps or ctx.p.reps
    warm_n = warm_n if warm_n is not None else max(BATCH, (n // 10) // BATCH * BATCH)
    gc.collect()
    run(warm_n)
    times = []
    for _ in range(reps):
        gc.collect()
        times.append(run(n))
    sec = min(times) if agg == "best" else statistics.median(times)
    method = (f"{agg} of {reps}" if reps > 1 else "1 run") + f" (warm-up of {warm_n:,} discarded)"
    return sec, times, method


def latency_stats(lat_s):
    lat = sorted(lat_s)
    k = len(lat)
    return {"p50_us": lat[k // 2] * 1e6, "p99_us": lat[min(k - 1, int(k * 0.99))] * 1e6,
            "mean_us": sum(lat) / k * 1e6, "samples": k}


def rmtree(path):
    shutil.rmtree(path, ignore_errors=True)


def new_store(path, topic_config=None, **store_kw):
    store = LogStore(path, exclusive=True, **store_kw)
    store.create_topic(TOPIC, 1, topic_config)
    return store, store.log(TOPIC, 0)


# ------------------------------------------------------------------------------------------------ g1: batched append

def m_ours_batch_fsync(ctx):
    need_kafkalog()
    n = ctx.p.n
    chunks = ctx.data.chunks(n)

    def run(n, fsync=True):
        d = ctx.tmpdir("kl-batch")
        store, log = new_store(d)
        append_batch, flush = log.append_batch, log.flush
        t0 = perf()
        if fsync:
            for vals, keys, ts in chunks[: n // BATCH]:
                append_batch(vals, keys, ts)
                flush()
        else:
            for vals, keys, ts in chunks[: n // BATCH]:
                append_batch(vals, keys, ts)
        el = perf() - t0
        assert log.log_end_offset == n // BATCH * BATCH
        store.close()
        rmtree(d)
        return el

    sec, times, method = repeat(ctx, run, n, "median")
    sec2, times2, method2 = repeat(ctx, lambda n: run(n, False), n, "best")
    return [row("kafkalog.append_batch+flush", "kafkalog", "append_batch(1000) + flush() per batch", n=n,
                seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
                note="exclusive store, default config: fsync per 1000 records"),
            row("kafkalog.append_batch", "kafkalog", "append_batch(1000), no flush (info: the part that is not fsync)",
                n=n, seconds=sec2, nbytes=n * REC_BYTES, method=method2, runs=times2,
                note="to the page cache; fsync cost = the row above minus this one")]


def m_lmdb_txn1000(ctx):
    try:
        import lmdb
    except ImportError as e:
        raise Unavailable(f"lmdb missing: {e}") from None
    n = ctx.p.n
    chunks = ctx.data.chunks(n)

    def run(n):
        d = ctx.tmpdir("lmdb")
        env = lmdb.open(os.path.join(d, "db"), map_size=max(1 << 30, n * 1024))  # sync=True, metasync=True
        t0 = perf()
        for vals, keys, _ in chunks[: n // BATCH]:
            with env.begin(write=True) as txn:
                put = txn.put
                for k, v in zip(keys, vals):
                    put(k, v, append=True)
        el = perf() - t0
        with env.begin() as txn:
            assert txn.stat()["entries"] == n // BATCH * BATCH
        env.close()
        rmtree(d)
        return el

    sec, times, method = repeat(ctx, run, n, "median")
    return row("lmdb.txn_of_1000", "peer", "1 write txn of 1000 put(append=True), commit", n=n, seconds=sec,
               nbytes=n * REC_BYTES, method=method, runs=times,
               note=f"lmdb {metadata.version('lmdb')} defaults: sync=True, metasync=True (fsync per commit)")


def _aiokafka_builder():
    try:
        from aiokafka.record._crecords.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError as e:
        raise Unavailable(f"aiokafka's Cython records missing: {e}") from None
    return DefaultRecordBatchBuilder, DefaultRecordBatch


def aiokafka_build(chunks, codec):
    """aiokafka's producer path: one DefaultRecordBatchBuilder per BATCH records, append() per record, build()."""
    Builder, _ = _aiokafka_builder()
    out = []
    for vals, keys, ts in chunks:
        b = Builder(2, codec, 0, -1, -1, -1, 4 * MiB)
        append = b.append
        off = 0
        for k, v, t in zip(keys, vals, ts):
            if append(off, t, k, v, []) is None:
                raise RuntimeError("aiokafka builder refused a record (batch_size too small)")
            off += 1
        out.append(b.build())
    return out


def m_aiokafka_build(ctx, codec=0):
    _aiokafka_builder()
    n = ctx.p.n
    chunks = ctx.data.chunks(n)
    wire = []

    def run(n):
        t0 = perf()
        built = aiokafka_build(chunks[: n // BATCH], codec)
        el = perf() - t0
        wire[:] = [sum(map(len, built))]
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    name = "aiokafka.build" + ("_lz4" if codec == 3 else "")
    what = "DefaultRecordBatchBuilder(1000) build" + (", lz4" if codec == 3 else "") + ", no I/O"
    note = f"aiokafka {metadata.version('aiokafka')} Cython; {wire[0] / n:.1f} wire B/record"
    if codec == 3:
        note += f"; lz4 level 9 via cramjam {metadata.version('cramjam')}"
    return row(name, "peer", what, n=n, seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
               note=note, wire_bytes_per_record=wire[0] / n)


def m_aiokafka_build_lz4(ctx):
    _aiokafka_builder()
    from aiokafka import codec
    if not codec.has_lz4():
        raise Unavailable("aiokafka has no lz4 codec here (it needs cramjam)")
    return m_aiokafka_build(ctx, codec=3)


def m_pq_sqlite(ctx):
    try:
        import persistqueue
    except ImportError as e:
        raise Unavailable(f"persist-queue missing: {e}") from None
    values = ctx.data.values
    info = {}

    def run(n):
        d = ctx.tmpdir("pq")
        q = persistqueue.SQLiteQueue(os.path.join(d, "q"))  # defaults: auto_commit=True
        put = q.put
        t0 = perf()
        for v in values[:n]:
            put(v)
        el = perf() - t0
        info["mode"] = (q._putter.execute("PRAGMA journal_mode").fetchone()[0],
                        q._putter.execute("PRAGMA synchronous").fetchone()[0])
        assert q.qsize() == n
        q.close()
        rmtree(d)
        return el

    n = ctx.p.pq_n
    sec, times, method = repeat(ctx, run, n, "median", reps=ctx.p.slow_reps, warm_n=50)
    return row("persistqueue.SQLiteQueue.put", "peer", "put() per record (defaults)", n=n, seconds=sec,
               nbytes=n * REC_BYTES, method=method, runs=times,
               note=f"persist-queue {metadata.version('persist-queue')}: journal_mode={info['mode'][0]}, "
                    f"synchronous={info['mode'][1]} (2=FULL): a commit + fsync per put; N capped")


def m_diskcache_deque(ctx):
    try:
        import diskcache
    except ImportError as e:
        raise Unavailable(f"diskcache missing: {e}") from None
    values = ctx.data.values
    info = {}

    def run(n):
        d = ctx.tmpdir("dq")
        dq = diskcache.Deque(directory=os.path.join(d, "dq"))
        append = dq.append
        t0 = perf()
        for v in values[:n]:
            append(v)
        el = perf() - t0
        info["sync"] = dq._cache.sqlite_synchronous
        assert len(dq) == n
        dq._cache.close()
        rmtree(d)
        return el

    n = ctx.p.deque_n
    sec, times, method = repeat(ctx, run, n, "median", reps=ctx.p.slow_reps, warm_n=500)
    return row("diskcache.Deque.append", "peer", "append() per record (defaults)", n=n, seconds=sec,
               nbytes=n * REC_BYTES, method=method, runs=times,
               note=f"diskcache {metadata.version('diskcache')}: WAL, sqlite_synchronous={info['sync']} (1=NORMAL, "
                    "no fsync per append); N capped")


def m_raw_seq_write(ctx):
    chunk = os.urandom(MiB)

    def run(mib):
        d = ctx.tmpdir("raw")
        path = os.path.join(d, "f")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        t0 = perf()
        for _ in range(mib):
            os.write(fd, chunk)
        os.fsync(fd)
        el = perf() - t0
        os.close(fd)
        rmtree(d)
        return el

    mib = ctx.p.raw_mib
    sec, times, method = repeat(ctx, run, mib, "best", warm_n=32)
    method = method.replace("warm-up of 32", "warm-up of 32 MiB")
    rows = [row("raw.seq_write+fsync", "floor", f"os.write 1 MiB x {mib} + one fsync", seconds=sec,
                nbytes=mib * MiB, method=method, runs=times, note="the disk's sequential bandwidth (physical floor)")]

    # info: the same durability pattern as kafkalog.append_batch+flush with no encoding at all
    n = ctx.p.n
    blobs = [b"".join(k + v for k, v in zip(keys, vals)) for vals, keys, _ in ctx.data.chunks(n)]

    def run_batches(n):
        d = ctx.tmpdir("raw-b")
        fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        t0 = perf()
        for blob in blobs[: n // BATCH]:
            os.write(fd, blob)
            os.fdatasync(fd)
        el = perf() - t0
        os.close(fd)
        rmtree(d)
        return el

    sec, times, method = repeat(ctx, run_batches, n, "median")
    rows.append(row("raw.write_batch+fdatasync", "floor",
                    "os.write of 1000 keys+values (108 KB) + fdatasync per batch",
                    n=n, seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
                    note="info: the physical ceiling of g1's durability pattern (fsync per 1000 records)"))
    return rows


# ------------------------------------------------------------------------------------------------ g2: single append

REC_HDR = struct.Struct(">qHI")  # timestamp, key length, value length: the naive file's record framing


def m_ours_single_append(ctx):
    need_kafkalog()
    n = ctx.p.n
    data = ctx.data
    keys, values, ts = data.keys[:n], data.values[:n], data.ts[:n]

    def run(n):
        d = ctx.tmpdir("kl-single")
        store, log = new_store(d)
        append = log.append
        t0 = perf()
        for k, v, t in zip(keys[:n], values[:n], ts[:n]):
            append(v, k, t)
        log.flush()
        el = perf() - t0
        assert log.log_end_offset == n
        store.close()
        rmtree(d)
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    return row("kafkalog.append", "kafkalog", "append(value, key, ts) per record + one flush()", n=n, seconds=sec,
               nbytes=n * REC_BYTES, method=method, runs=times, note="exclusive store: staged into 16 KiB batches")


def m_file_write_loop(ctx):
    n = ctx.p.n
    data = ctx.data
    keys, values, ts = data.keys[:n], data.values[:n], data.ts[:n]

    def run(n):
        d = ctx.tmpdir("naive")
        f = open(os.path.join(d, "log"), "wb")
        write, pack = f.write, REC_HDR.pack
        t0 = perf()
        for k, v, t in zip(keys[:n], values[:n], ts[:n]):
            write(pack(t, len(k), len(v)) + k + v)
        f.flush()
        os.fsync(f.fileno())
        el = perf() - t0
        f.close()
        rmtree(d)
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    return row("file.write_loop", "peer", "f.write(struct.pack(ts, klen, vlen) + key + value) per record + fsync",
               n=n, seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
               note="buffered binary file (8 KiB buffer), no CRC, no index, no offsets")


# ------------------------------------------------------------------------------------------------ g3: fsync per record

def m_fsync_each(ctx):
    """Both sides in one function, interleaved in blocks of 100 (alternating which goes first), so drift in the
    device's fsync latency hits both the same."""
    need_kafkalog()
    n = ctx.p.fsync_n
    data = ctx.data
    keys, values, ts = data.keys, data.values, data.ts
    d = ctx.tmpdir("fsync")
    store, log = new_store(os.path.join(d, "kl"))
    fd = os.open(os.path.join(d, "naive"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    append, flush, write, fdatasync, pack = log.append, log.flush, os.write, os.fdatasync, REC_HDR.pack

    def ours(i, lat):
        t0 = perf()
        append(values[i], keys[i], ts[i])
        flush()
        lat.append(perf() - t0)

    def peer(i, lat):
        t0 = perf()
        k, v = keys[i], values[i]
        write(fd, pack(ts[i], len(k), len(v)) + k + v)
        fdatasync(fd)
        lat.append(perf() - t0)

    try:
        scratch = []
        for i in range(50):  # warm-up
            ours(i, scratch)
            peer(i, scratch)
        lo, lp = [], []
        block = 100
        for b, s in enumerate(range(50, 50 + n, block)):
            idx = range(s, min(50 + n, s + block))
            first, second = ((ours, lo), (peer, lp)) if b % 2 == 0 else ((peer, lp), (ours, lo))
            for i in idx:
                first[0](i, first[1])
            for i in idx:
                second[0](i, second[1])
        assert log.log_end_offset == 50 + n
    finally:
        os.close(fd)
        store.close()
        rmtree(d)
    method = f"p50 of {n} individually timed calls, interleaved with the peer in blocks of 100 (50 warm-up)"
    so, sp = latency_stats(lo), latency_stats(lp)
    return [row("kafkalog.append+flush", "kafkalog", "append() + flush() per record", n=n, seconds=sum(lo),
                method=method, note="flush() = fsync of the segment .log", **so),
            row("file.write+fdatasync", "peer", "os.write(O_APPEND) + os.fdatasync per record", n=n,
                seconds=sum(lp), method=method, note="the device's durable-append floor", **sp)]


# ------------------------------------------------------------------------------------------------ g4: reads

def read_log_fixture(ctx):
    """A log of N records written with append_batch(1000), flushed, kept open for the read cases."""
    def make():
        need_kafkalog()
        n = ctx.p.n
        d = ctx.tmpdir("kl-read")
        store, log = new_store(d)
        for vals, keys, ts in ctx.data.chunks(n):
            log.append_batch(vals, keys, ts)
        log.flush()
        ctx._fixtures["read_log_store"] = store  # the consumer case reads the same log through KafkaConsumer

        def close():
            store.close()
            rmtree(d)
        return (log, n), close
    return ctx.fixture("read_log", make)


def m_ours_records(ctx):
    log, n = read_log_fixture(ctx)
    data = ctx.data
    first = next(iter(log.records(0, 1)))
    assert (first.key, first.value) == (data.keys[0], data.values[0]), "records() returned other data"

    def run(m):
        cnt = 0
        t0 = perf()
        for rec in log.records(0, m):
            _k, _v = rec.key, rec.value
            cnt += 1
        el = perf() - t0
        assert cnt == m, (cnt, m)
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    return row("kafkalog.records", "kafkalog", "for rec in log.records(): rec.key, rec.value", n=n, seconds=sec,
               nbytes=n * REC_BYTES, method=method, runs=times,
               note="1000-record batches, each CRC-checked; segment pages in the page cache")


def m_aiokafka_parse(ctx):
    _, Batch = _aiokafka_builder()
    n = ctx.p.n
    batches = [bytes(b) for b in aiokafka_build(ctx.data.chunks(n), 0)]  # not timed: the peer's own batches

    def run(m):
        cnt = 0
        t0 = perf()
        for buf in batches[: m // BATCH]:
            batch = Batch(buf)
            if not batch.validate_crc():
                raise RuntimeError("aiokafka: CRC mismatch")
            for rec in batch:
                _k, _v = rec.key, rec.value
                cnt += 1
        el = perf() - t0
        assert cnt == m // BATCH * BATCH
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    return row("aiokafka.parse+crc", "peer", "DefaultRecordBatch(bytes).validate_crc() + iterate key/value", n=n,
               seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
               note="its own 1000-record batches, from bytes objects in memory")


def m_ours_read_columns(ctx):
    log, n = read_log_fixture(ctx)
    data = ctx.data
    cols = log.read_columns()
    assert len(cols["offset"]) == n and int(cols["timestamp"][-1]) == data.ts[n - 1]
    vo = cols["value_offsets"]
    assert bytes(cols["values"][int(vo[n - 1]):int(vo[n])]) == data.values[n - 1], "read_columns: other data"
    del cols

    def run(m):
        t0 = perf()
        c = log.read_columns(0, m)
        el = perf() - t0
        assert len(c["offset"]) == m
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    return row("kafkalog.read_columns", "kafkalog", "log.read_columns() -> numpy columns", n=n, seconds=sec,
               nbytes=n * REC_BYTES, method=method, runs=times, note="same log as kafkalog.records")


# ------------------------------------------------------------------------------------------------ g5: lz4, time seek

def m_ours_lz4(ctx):
    need_kafkalog()
    n = ctx.p.n
    chunks = ctx.data.chunks(n)
    size = []

    def run(n):
        d = ctx.tmpdir("kl-lz4")
        store, log = new_store(d)
        append_batch = log.append_batch
        t0 = perf()
        for vals, keys, ts in chunks[: n // BATCH]:
            append_batch(vals, keys, ts, None, "lz4")
        el = perf() - t0
        size[:] = [log.size_in_bytes]
        store.close()
        rmtree(d)
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    return row("kafkalog.append_batch_lz4", "kafkalog", 'append_batch(1000, compression="lz4")', n=n, seconds=sec,
               nbytes=n * REC_BYTES, method=method, runs=times,
               note=f"written to the page cache (no flush); {size[0] / n:.1f} B/record on disk",
               wire_bytes_per_record=size[0] / n)


def seek_fixture(ctx):
    def make():
        need_kafkalog()
        n = ctx.p.seek_records
        data = ctx.data
        d = ctx.tmpdir("kl-seek")
        store, log = new_store(d)
        for vals, keys, ts in data.chunks(n):
            log.append_batch(vals, keys, ts)
        log.flush()

        def close():
            store.close()
            rmtree(d)
        return (log, n, d), close
    return ctx.fixture("seek_log", make)


def m_time_seek(ctx):
    import numpy as np
    log, n, d = seek_fixture(ctx)
    ts = ctx.data.ts[:n]
    path = os.path.join(d, "timestamps.i64")
    np.asarray(ts, dtype=np.int64).tofile(path)
    mm = np.memmap(path, dtype=np.int64, mode="r")
    rnd = random.Random(11)
    targets = [rnd.randrange(ts[0], ts[-1] + 1) for _ in range(ctx.p.seek_queries)]
    oft, ss = log.offset_for_time, np.searchsorted
    for T in targets[:200]:  # both answer the same question (offsets are 0..n-1, one record per ms)
        got = oft(T)
        assert got is not None and got[0] == int(ss(mm, T)) and got[1] == T, (T, got)

    def timed(fn):
        lat = []
        for T in targets[:1000]:  # warm-up
            fn(T)
        gc.collect()
        for T in targets:
            t0 = perf()
            fn(T)
            lat.append(perf() - t0)
        return lat

    lo = timed(oft)
    lp = timed(lambda T: ss(mm, T))
    # info: the same records staged by append() into Kafka-sized 16 KiB batches (~140 records each): the in-batch
    # scan that follows the index lookup is ~7x shorter than in the 1000-record batches above
    d16 = ctx.tmpdir("kl-seek16")
    store16, log16 = new_store(d16)
    ap = log16.append
    for vals, keys, tss in ctx.data.chunks(n):
        for i in range(len(vals)):
            ap(vals[i], keys[i], tss[i])
    log16.flush()
    l16 = timed(log16.offset_for_time)
    store16.close()
    rmtree(d16)
    k = len(targets)
    method = f"p50 of {k:,} individually timed calls, uniform random targets (1,000 warm-up)"
    return [row("kafkalog.offset_for_time", "kafkalog", f"log.offset_for_time(T) over {n:,} records", n=k,
                seconds=sum(lo), method=method, note="default segment/index config; page cache hot; "
                "1000-record batches", **latency_stats(lo)),
            row("kafkalog.offset_for_time[16KiB]", "kafkalog", f"log.offset_for_time(T) over {n:,} records", n=k,
                seconds=sum(l16), method=method, note="info: same records written by append() in 16 KiB batches "
                "(Kafka's batch.size)", **latency_stats(l16)),
            row("numpy.searchsorted_memmap", "peer", f"np.searchsorted(memmap of {n:,} int64, T)", n=k,
                seconds=sum(lp), method=method, note=f"numpy {np.__version__}; page cache hot", **latency_stats(lp))]


# ------------------------------------------------------------------------------------------------ g6: big logs

POOL_BATCH = 7_000   # records per batch of the bulk pool (~0.8 MB: under max.message.bytes' default 1 MB)


def bulk_pool(keys, values, ts, batches=8) -> bytes:
    """`batches` v2 batches of POOL_BATCH records each, concatenated: appended again and again (append_records
    rewrites base offsets) to build multi-GB logs at disk speed."""
    parts = []
    for b in range(batches):
        s = slice(b * POOL_BATCH, (b + 1) * POOL_BATCH)
        parts.append(bytes(build_batch(values[s], keys[s], ts[s], None)))
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


def _child_unclean(path, nbytes, first):
    """Writer process for the unclean-open case: (first time) a 1 GB log; then flush, checkpoint the recovery point
    (run_maintenance), append a little more, report, and wait for kill -9."""
    keys, values, ts = make_records(POOL_BATCH * 8)
    store = LogStore(path, exclusive=True, maintenance=False)
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
            child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_child", ctx.code, "unclean", path,
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
            store = LogStore(path)
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


def _child_rss(path, small, big):
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
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_child", ctx.code, "rss", path, str(small),
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


# ------------------------------------------------------------------------------------------------ g7: producer

PRODUCER_CONFIG = {"linger_ms": 5, "batch_size": MiB, "acks": 1}


def m_producer_send(ctx):
    """KafkaProducer.send of every record (value, key, timestamp_ms: the records append_batch gets), batching on,
    against append_batch of the same records in chunks of 1000. The two alternate run by run (send first, then
    append_batch), so drift of the machine hits both; the goal compares their bests."""
    need_kafkalog()
    n = ctx.p.n
    data = ctx.data
    keys, values, ts = data.keys[:n], data.values[:n], data.ts[:n]
    chunks = data.chunks(n)
    producer_cls = kafkalog.KafkaProducer

    def run_send(m, keyed=True):
        d = ctx.tmpdir("kl-send")
        store, log = new_store(d)
        producer = producer_cls(store, **PRODUCER_CONFIG)
        send = producer.send
        ks, vs, tss = (keys, values, ts) if m == n else (keys[:m], values[:m], ts[:m])  # sliced before the clock
        t0 = perf()
        if keyed:
            for k, v, t in zip(ks, vs, tss):
                send(TOPIC, v, k, timestamp_ms=t)
        else:
            for v in vs:
                send(TOPIC, v)
        producer.flush()
        el = perf() - t0
        assert log.log_end_offset == m
        producer.close()
        store.close()
        rmtree(d)
        return el

    def run_batch(m):
        d = ctx.tmpdir("kl-batch")
        store, log = new_store(d)
        append_batch = log.append_batch
        t0 = perf()
        for vals, ks, t in chunks[: m // BATCH]:
            append_batch(vals, ks, t)
        el = perf() - t0
        assert log.log_end_offset == m // BATCH * BATCH
        store.close()
        rmtree(d)
        return el

    warm = max(BATCH, (n // 10) // BATCH * BATCH)
    gc.collect()
    run_send(warm)
    run_batch(warm)
    t_send, t_batch = [], []
    reps = 2 * ctx.p.reps  # cheap runs, and the best of more of them is steadier on a busy machine
    for _ in range(reps):
        gc.collect()
        t_send.append(run_send(n))
        gc.collect()
        t_batch.append(run_batch(n))
    method = f"best of {reps}, alternating send/append_batch runs (warm-up of {warm:,} discarded)"
    plain, plain_method = repeat(ctx, lambda m: run_send(m, keyed=False), n, "best")[::2]
    cfg = ", ".join(f"{k}={v}" for k, v in PRODUCER_CONFIG.items())
    return [row("kafkalog.KafkaProducer.send", "kafkalog", "send(topic, value, key, timestamp_ms=ts) per record + "
                "flush()", n=n, seconds=min(t_send), nbytes=n * REC_BYTES, method=method, runs=t_send,
                note=f"KafkaProducer({cfg}) on an exclusive store; page cache, no fsync"),
            row("kafkalog.append_batch[paired]", "kafkalog", "append_batch(1000), run beside the send runs",
                n=n, seconds=min(t_batch), nbytes=n * REC_BYTES, method=method, runs=t_batch,
                note="the same measurement as kafkalog.append_batch (g1), taken in turn with the send runs"),
            row("kafkalog.KafkaProducer.send[value]", "kafkalog", "send(topic, value) per record + flush() (info)",
                n=n, seconds=plain, nbytes=n * VALUE_BYTES, method=plain_method,
                note="no key, the producer's clock for timestamps: kafka-python's most common call")]


# ------------------------------------------------------------------------------------------------ g8: durable queue

QUEUE_BATCH = 100  # messages per put_many and per fsync: a cycle is put_many(100), then 100 x get + ack


def _queue_run(ctx, make, cycle, finish, cycles, prepare):
    """Time `cycles` cycles of one queue (made fresh in a scratch dir, not timed); returns seconds."""
    d = ctx.tmpdir("queue")
    q = make(d)
    values = ctx.data.values
    batches = [prepare(values[i * QUEUE_BATCH:(i + 1) * QUEUE_BATCH]) for i in range(cycles)]
    try:
        t0 = perf()
        for vals in batches:
            cycle(q, vals)
        el = perf() - t0
        finish(q)
    finally:
        rmtree(d)
    return el


def _queue_rows(ctx, name, side, what, make, cycle, finish, note, msgs_row=False, prepare=list):
    cycles = ctx.p.queue_cycles
    sec, times, method = repeat(ctx, lambda c: _queue_run(ctx, make, cycle, finish, c, prepare), cycles, "median",
                                reps=ctx.p.slow_reps, warm_n=max(5, cycles // 10))
    method = method.replace(" discarded)", " cycles discarded)")
    rows = [row(name, side, what, n=cycles, seconds=sec, nbytes=cycles * QUEUE_BATCH * VALUE_BYTES, method=method,
                runs=times, note=note, cyc_s=cycles / sec)]
    if msgs_row:
        rows.append(row(name + "[messages]", side, what + ": messages/s (info)", n=cycles * QUEUE_BATCH,
                        seconds=sec, nbytes=cycles * QUEUE_BATCH * VALUE_BYTES, method=method, note=note))
    return rows


def m_queue_ours(ctx):
    need_kafkalog()
    DurableQueue = getattr(kafkalog, "DurableQueue", None)
    if DurableQueue is None:
        raise Unavailable("kafkalog.DurableQueue does not exist in this build")

    def make(d):
        return DurableQueue(os.path.join(d, "data"), name="queue", group="workers")

    def cycle(q, vals):
        q.put_many(vals)
        get, ack = q.get, q.ack
        for _ in range(len(vals)):
            ack(get(timeout=10))

    def finish(q):
        assert q.qsize() == 0
        q.close()

    return _queue_rows(ctx, "kafkalog.DurableQueue", "kafkalog", "put_many(100) + 100 x (get + ack) per cycle",
                       make, cycle, finish, "durable=True: put_many fsyncs before it returns; ack is journaled "
                       "in the page cache (survives kill -9, not a power loss)", msgs_row=True)


def _sqlite_sync(conn, level):
    conn.execute(f"PRAGMA synchronous={level}")


def m_queue_pq(ctx):
    try:
        import persistqueue
    except ImportError as e:
        raise Unavailable(f"persist-queue missing: {e}") from None

    def make(d):
        # auto_commit=False: get() leaves rows in place and task_done() deletes what was read, in one commit.
        return persistqueue.SQLiteQueue(os.path.join(d, "q"), auto_commit=False, multithreading=False)

    def cycle(q, vals):
        # put() commits every time whatever auto_commit says (persist-queue 1.1 runs it in `with conn:`), so the
        # per-100 fsync is: 99 commits with synchronous=NORMAL (WAL in the page cache), the 100th with FULL (its
        # fsync of the WAL covers the 99 before it)
        conn = q._putter
        put = q.put
        _sqlite_sync(conn, "NORMAL")
        for v in vals[:-1]:
            put(v)
        _sqlite_sync(conn, "FULL")
        put(vals[-1])
        _sqlite_sync(conn, "NORMAL")  # consumption commits like kafkalog's acks: no fsync
        get = q.get
        for _ in range(len(vals)):
            get(timeout=10)
        q.task_done()

    def finish(q):
        assert q.qsize() == 0
        q.close()

    return _queue_rows(ctx, "persistqueue.SQLiteQueue[cycle]", "peer",
                       "100 x put (fsync with the 100th) + 100 x get + task_done() per cycle", make, cycle, finish,
                       f"persist-queue {metadata.version('persist-queue')}: WAL; auto_commit=False, "
                       "multithreading=False; pickled values")


def m_queue_diskcache(ctx):
    try:
        import diskcache
    except ImportError as e:
        raise Unavailable(f"diskcache missing: {e}") from None

    def make(d):
        cache = diskcache.Cache(os.path.join(d, "dq"))
        return diskcache.Deque.fromcache(cache)

    def cycle(dq, vals):
        con = dq.cache._con
        _sqlite_sync(con, "FULL")
        with dq.transact():  # one commit (one WAL fsync under FULL) for the 100 appends
            dq.extend(vals)
        _sqlite_sync(con, "NORMAL")
        popleft = dq.popleft
        for _ in range(len(vals)):
            popleft()  # get and ack in one: a commit each, no fsync (NORMAL)

    def finish(dq):
        assert len(dq) == 0
        dq.cache.close()

    return _queue_rows(ctx, "diskcache.Deque[cycle]", "peer",
                       "extend(100) in one transact() (FULL: one fsync) + 100 x popleft per cycle", make, cycle,
                       finish, f"diskcache {metadata.version('diskcache')}: by default every op is its own commit "
                       "into the WAL with synchronous=NORMAL, i.e. no fsync at all (kill -9 safe, not power-loss "
                       "safe); FULL for the appends gives the per-100 fsync; popleft is get+ack")


def m_queue_litequeue(ctx):
    try:
        import litequeue
    except ImportError as e:
        raise Unavailable(f"litequeue missing: {e}") from None

    def make(d):
        return litequeue.LiteQueue(os.path.join(d, "q.db"))

    def cycle(q, svals):
        con = q.conn
        _sqlite_sync(con, "FULL")
        with q.transaction():  # one commit (one WAL fsync under FULL) for the 100 puts
            for v in svals:
                q.put(v)
        _sqlite_sync(con, "NORMAL")
        pop, done = q.pop, q.done
        for _ in range(len(svals)):
            done(pop().message_id)
        q.prune()  # delete the DONE rows, so that pop() (O(rows)) sees a realistic depth

    def finish(q):
        assert q.qsize() == 0
        q.close()

    return _queue_rows(ctx, "litequeue.LiteQueue[cycle]", "peer",
                       "100 x put in one transaction (FULL: one fsync) + 100 x (pop + done) + prune() per cycle",
                       make, cycle, finish, f"litequeue {metadata.version('litequeue')}: WAL, synchronous=NORMAL by "
                       "default; TEXT values; pop() cost grows with the rows in the table, hence prune() per cycle",
                       prepare=lambda vals: [v.decode() for v in vals])


# ------------------------------------------------------------------------------------------------ g8: consumer

def m_consumer_poll(ctx):
    """KafkaConsumer.poll over the same log as kafkalog.records (fixture read_log): ConsumerRecord tuples built in C,
    default max_poll_records=500, key and value touched as the engine case does."""
    log, n = read_log_fixture(ctx)
    from kafkalog import KafkaConsumer
    from kafkalog.structs import TopicPartition
    store = ctx._fixtures["read_log_store"]
    tp = TopicPartition(TOPIC, 0)

    def run(m):
        c = KafkaConsumer(store=store)
        c.assign([tp])
        c.seek(tp, 0)
        cnt = 0
        t0 = perf()
        while cnt < m:
            for recs in c.poll(timeout_ms=1000, max_records=min(500, m - cnt)).values():
                for rec in recs:
                    _k, _v = rec.key, rec.value
                cnt += len(recs)
        el = perf() - t0
        c.close()
        assert cnt == m, (cnt, m)
        return el

    sec, times, method = repeat(ctx, run, n, "best")
    return row("kafkalog.KafkaConsumer.poll", "kafkalog", "poll(max_records=500), rec.key, rec.value", n=n,
               seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
               note="same log as kafkalog.records")


_WAKE_CHILD = r"""
import sys, time, kafkalog
s = kafkalog.LogStore(sys.argv[1], maintenance=False)
log = s.log(sys.argv[2], 0)
for line in sys.stdin:
    time.sleep(float(line))
    log.append_batch([repr(time.time()).encode()])
s.close()
"""


def m_wakeup(ctx):
    """Cross-process wake-up: a consumer blocked in poll(), another process appends one record after a random
    pause of 10-50 ms; latency = time the record comes out of poll() minus the time the appender wrote it."""
    need_kafkalog()
    import random
    import subprocess

    from kafkalog import KafkaConsumer
    from kafkalog.structs import TopicPartition
    d = ctx.tmpdir("kl-wake")
    with LogStore(d) as s:
        s.create_topic(TOPIC, 1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", _WAKE_CHILD, d, TOPIC], stdin=subprocess.PIPE, text=True, env=env)
    c = KafkaConsumer(store=d)
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek_to_end(tp)
    rnd = random.Random(7)
    lat = []
    samples = 40 if ctx.p.quick else 200
    try:
        for _ in range(samples):
            child.stdin.write(f"{rnd.uniform(0.01, 0.05)}\n")
            child.stdin.flush()
            got = c.poll(timeout_ms=10_000)
            now = time.time()
            lat.extend(now - float(r.value) for rs in got.values() for r in rs)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        c.close()
        rmtree(d)
    st = latency_stats(lat)
    return row("kafkalog.wakeup_cross_process", "kafkalog", "poll() blocked, append from another process",
               n=len(lat), method=f"{len(lat)} appends 10-50 ms apart", **st)


# ------------------------------------------------------------------------------------------------ goals

MEASUREMENTS = {
    "kafkalog.append_batch+flush": m_ours_batch_fsync,
    "kafkalog.append_batch": m_ours_batch_fsync,
    "lmdb.txn_of_1000": m_lmdb_txn1000,
    "aiokafka.build": m_aiokafka_build,
    "persistqueue.SQLiteQueue.put": m_pq_sqlite,
    "diskcache.Deque.append": m_diskcache_deque,
    "raw.seq_write+fsync": m_raw_seq_write,
    "raw.write_batch+fdatasync": m_raw_seq_write,
    "kafkalog.append": m_ours_single_append,
    "file.write_loop": m_file_write_loop,
    "kafkalog.append+flush": m_fsync_each,
    "file.write+fdatasync": m_fsync_each,
    "kafkalog.records": m_ours_records,
    "aiokafka.parse+crc": m_aiokafka_parse,
    "kafkalog.read_columns": m_ours_read_columns,
    "kafkalog.append_batch_lz4": m_ours_lz4,
    "aiokafka.build_lz4": m_aiokafka_build_lz4,
    "kafkalog.offset_for_time": m_time_seek,
    "kafkalog.offset_for_time[16KiB]": m_time_seek,
    "numpy.searchsorted_memmap": m_time_seek,
    "kafkalog.delete_records_before[small]": m_delete_before,
    "kafkalog.delete_records_before[big]": m_delete_before,
    "kafkalog.unclean_open": m_unclean_open,
    "kafkalog.rss[1x]": m_rss,
    "kafkalog.rss[10x]": m_rss,
    "kafkalog.KafkaProducer.send": m_producer_send,
    "kafkalog.append_batch[paired]": m_producer_send,
    "kafkalog.KafkaProducer.send[value]": m_producer_send,
    "kafkalog.DurableQueue": m_queue_ours,
    "kafkalog.DurableQueue[messages]": m_queue_ours,
    "persistqueue.SQLiteQueue[cycle]": m_queue_pq,
    "diskcache.Deque[cycle]": m_queue_diskcache,
    "litequeue.LiteQueue[cycle]": m_queue_litequeue,
    "kafkalog.KafkaConsumer.poll": m_consumer_poll,
    "kafkalog.wakeup_cross_process": m_wakeup,
}


class Goal:
    """ours/baseline measured on `metric`; cmp '>=' or '<=' against `target` (a ratio), or an absolute bar when
    baseline is None; 'within' takes target=(lo, hi)."""

    def __init__(self, case, check, ours, baseline, metric, cmp, target):
        self.case, self.check, self.ours, self.baseline = case, check, ours, baseline
        self.metric, self.cmp, self.target = metric, cmp, target

    def measurements(self):
        return [m for m in (self.ours, self.baseline) if m]


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
    Goal("g8.queue.diskcache", "DurableQueue cycles vs diskcache.Deque",
         "kafkalog.DurableQueue", "diskcache.Deque[cycle]", "cyc_s", ">=", 20),
    Goal("g8.queue.litequeue", "DurableQueue cycles vs litequeue",
         "kafkalog.DurableQueue", "litequeue.LiteQueue[cycle]", "cyc_s", ">=", 20),
    Goal("g9.consumer", "KafkaConsumer.poll x N vs records() of the same log",
         "kafkalog.KafkaConsumer.poll", "kafkalog.records", "rec_s", ">=", 0.8),
    Goal("g10.wakeup", "poll() woken by another process's append, p50 us (absolute)",
         "kafkalog.wakeup_cross_process", None, "p50_us", "<=", 10_000),
]

UNITS = {"rec_s": "rec/s", "mb_s": "MB/s", "p50_us": "us", "seconds": "s", "value": "MiB", "cyc_s": "cycles/s"}


def fmt_metric(metric, v):
    if v is None:
        return "-"
    if metric == "rec_s":
        return f"{v / 1e6:.2f} M rec/s" if v >= 1e6 else f"{v / 1e3:.1f} k rec/s" if v >= 1e3 else f"{v:.0f} rec/s"
    if metric == "mb_s":
        return f"{v:,.0f} MB/s"
    if metric == "cyc_s":
        return f"{v:,.0f} cycles/s"
    if metric == "p50_us":
        return f"{v:.2f} us"
    if metric == "seconds":
        return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"
    if metric == "value":
        return f"{v / MiB:.1f} MiB"
    return f"{v:g}"


def judge(goal: Goal, results: dict, errors: dict) -> dict:
    out = {"case": goal.case, "check": goal.check, "metric": goal.metric, "cmp": goal.cmp, "target": goal.target,
           "ours_name": goal.ours, "baseline_name": goal.baseline, "ours": None, "baseline": None, "ratio": None}
    missing = [m for m in goal.measurements() if m not in results]
    if missing:
        out["result"] = "n/a"
        out["why"] = "; ".join(f"{m}: {errors.get(m, 'not run')}" for m in missing)
        return out
    ours = results[goal.ours][goal.metric]
    out["ours"] = ours
    if goal.baseline is None:
        ok = ours >= goal.target if goal.cmp == ">=" else ours <= goal.target
    else:
        base = results[goal.baseline][goal.metric]
        out["baseline"] = base
        ratio = ours / base
        out["ratio"] = ratio
        if goal.cmp == ">=":
            ok = ratio >= goal.target
        elif goal.cmp == "<=":
            ok = ratio <= goal.target
        else:
            ok = goal.target[0] <= ratio <= goal.target[1]
    out["result"] = "PASS" if ok else "MISS"
    return out


def fmt_target(g: dict) -> str:
    t = g["target"]
    if g["baseline_name"] is None:
        return ("≥ " if g["cmp"] == ">=" else "≤ ") + fmt_metric(g["metric"], t)
    if g["cmp"] == "within":
        return f"{t[0]:g}-{t[1]:g}x"
    return ("≥ " if g["cmp"] == ">=" else "≤ ") + f"{t:g}x"


GOAL_LINE = "{:<18} {:<54} {:>16} {:>16} {:>9} {:>11}  {}"
MEAS_LINE = "{:<40} {:<8} {:>11} {:>9} {:>13} {:>9} {:>10} {:>10}  {}"


def print_goals(goals):
    hdr = GOAL_LINE.format("goal", "check", "ours", "baseline", "ratio", "target", "result")
    print(hdr)
    print("-" * len(hdr))
    for g in goals:
        ratio = "-" if g["ratio"] is None else (f"{g['ratio']:.2f}x" if g["ratio"] < 100 else f"{g['ratio']:,.0f}x")
        base = fmt_metric(g["metric"], g["baseline"]) if g["baseline_name"] else "(absolute)"
        line = GOAL_LINE.format(
            g["case"], g["check"][:54], fmt_metric(g["metric"], g["ours"]), base, ratio, fmt_target(g), g["result"])
        if g["result"] == "n/a":
            line += "  (" + g["why"][:200] + ")"
        print(line)


def print_measurements(rows):
    hdr = MEAS_LINE.format(
        "measurement", "side", "n", "time s", "rec/s", "MB/s", "p50 us", "p99 us", "aggregation; notes")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        def f(v, spec):
            return "" if v is None else format(v, spec)
        extra = f"{r['value'] / MiB:.1f} MiB; " if r.get("value") is not None else ""
        print(MEAS_LINE.format(
            r["name"][:40], r["side"], f(r["n"], ",d"), f(r["seconds"], ".4f"), f(r["rec_s"], ",.0f"),
            f(r["mb_s"], ",.1f"), f(r.get("p50_us"), ".2f"), f(r.get("p99_us"), ".2f"),
            extra + r["method"] + ("; " + r["what"]) + ("; " + r["note"] if r["note"] else "")))


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
    facts["kafkalog"] = (os.path.dirname(kafkalog.__file__) if kafkalog else KAFKALOG_ERROR)
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
    data_n = max(params.n, POOL_BATCH * 8)
    if any(MEASUREMENTS[m] is m_time_seek for m in needed):
        data_n = max(data_n, params.seek_records)
    ctx = Ctx(args, params, data_n)
    ctx.code = ROOT if args.in_place else snapshot_kafkalog(os.path.join(args.dir, "code"))
    load_kafkalog(ctx.code)
    facts = machine_facts(args.dir)
    print_facts(facts, params)
    if KAFKALOG_ERROR:
        progress(KAFKALOG_ERROR + ": measuring the peers only")

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
                import traceback
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
        with open(args.json, "w") as f:
            json.dump({"machine": facts, "params": params.as_dict(), "total_s": total, "goals": judged,
                       "measurements": rows, "errors": errors}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--_child":  # writer processes of the g6 cases
        load_kafkalog(sys.argv[2])
        if KAFKALOG_ERROR:
            sys.exit(KAFKALOG_ERROR)
        kind, rest = sys.argv[3], sys.argv[4:]
        if kind == "unclean":
            _child_unclean(rest[0], int(rest[1]), rest[2] == "1")
        elif kind == "rss":
            _child_rss(rest[0], int(rest[1]), int(rest[2]))
        sys.exit(0)
    sys.exit(main())
