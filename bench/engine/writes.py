"""bench/run.py's write paths: g1 (append_batch + flush against lmdb, aiokafka's builder, persist-queue,
diskcache and the raw disk), g2 (append per record against a write loop), g3 (fsync per record), g5.lz4."""

from __future__ import annotations

import os
import struct
from importlib import metadata

from harness import MiB, Unavailable, latency_stats, need_module, perf, row

from .common import BATCH, REC_BYTES, need_kafkalog, new_store, repeat, rmtree

# ------------------------------------------------------------------------------------------------ g1: batched append

def time_append_batch(ctx, chunks, n, fsync=True):
    """Seconds to append_batch the first n // BATCH chunks to a fresh exclusive store, with a flush() after each batch
    when fsync (g1) or none (g1's info row, g7's baseline)."""
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


def m_ours_batch_fsync(ctx):
    need_kafkalog()
    n = ctx.p.n
    chunks = ctx.data.chunks(n)

    def run(n, fsync=True):
        return time_append_batch(ctx, chunks, n, fsync)

    sec, times, method = repeat(ctx, run, n, "median")
    sec2, times2, method2 = repeat(ctx, lambda n: run(n, False), n, "best")
    return [row("kafkalog.append_batch+flush", "kafkalog", "append_batch(1000) + flush() per batch", n=n,
                seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
                note="exclusive store, default config: fsync per 1000 records"),
            row("kafkalog.append_batch", "kafkalog", "append_batch(1000), no flush (info: the part that is not fsync)",
                n=n, seconds=sec2, nbytes=n * REC_BYTES, method=method2, runs=times2,
                note="to the page cache; fsync cost = the row above minus this one")]


def m_lmdb_txn1000(ctx):
    lmdb = need_module("lmdb")
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


def aiokafka_classes():
    try:
        from aiokafka.record._crecords.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError as e:
        raise Unavailable(f"aiokafka's Cython records missing: {e}") from None
    return DefaultRecordBatchBuilder, DefaultRecordBatch


def aiokafka_build(chunks, codec):
    """aiokafka's producer path: one DefaultRecordBatchBuilder per BATCH records, append() per record, build()."""
    Builder, _ = aiokafka_classes()
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
    aiokafka_classes()
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
    aiokafka_classes()
    from aiokafka import codec
    if not codec.has_lz4():
        raise Unavailable("aiokafka has no lz4 codec here (it needs cramjam)")
    return m_aiokafka_build(ctx, codec=3)


def m_pq_sqlite(ctx):
    persistqueue = need_module("persistqueue", "persist-queue")
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
    diskcache = need_module("diskcache")
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
