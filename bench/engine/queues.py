"""bench/run.py's durable queue: g8 (DurableQueue cycles against persist-queue's SQLiteQueue and SQLiteAckQueue,
diskcache and litequeue, each fsynced once per 100 puts)."""

from __future__ import annotations

import os
from importlib import metadata

from harness import Unavailable, need_module, perf, row

from . import common
from .common import VALUE_BYTES, need_kafkalog, repeat, rmtree

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
    DurableQueue = getattr(common.kafkalog, "DurableQueue", None)
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
                       "in the page cache (survives kill -9, not a power loss)", msgs_row=True) + [_queue_floor(ctx)]


def _queue_floor(ctx):
    """The device's floor under a DurableQueue cycle: os.write of the very bytes put_many(100) appends (one record
    batch of the cycle's 100 values, built beforehand) to an O_APPEND file + fdatasync, per cycle. A queue whose
    cycle costs only this reaches peer cycle time / this time: the highest ratio any g8 row can show here."""
    from kafkalog._engine.batch import build_batch
    values = ctx.data.values
    cycles = ctx.p.queue_cycles

    def run(c):
        batches = [build_batch(values[i * QUEUE_BATCH:(i + 1) * QUEUE_BATCH]) for i in range(c)]
        d = ctx.tmpdir("queue-floor")
        fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            t0 = perf()
            for b in batches:
                os.write(fd, b)
                os.fdatasync(fd)
            el = perf() - t0
        finally:
            os.close(fd)
            rmtree(d)
        return el

    sec, times, method = repeat(ctx, run, cycles, "median", reps=ctx.p.slow_reps, warm_n=max(5, cycles // 10))
    nbytes = len(build_batch(values[:QUEUE_BATCH]))
    return row("raw.queue_cycle+fdatasync", "floor", f"os.write of one cycle's record batch ({nbytes:,} B) + "
               "fdatasync per cycle", n=cycles, seconds=sec, nbytes=cycles * QUEUE_BATCH * VALUE_BYTES,
               method=method.replace(" discarded)", " cycles discarded)"), runs=times, cyc_s=cycles / sec,
               note="info: the device's floor under a DurableQueue cycle; a g8 ratio cannot exceed peer cycles/s "
                    "divided by this row's cycles/s")


def _sqlite_sync(conn, level):
    conn.execute(f"PRAGMA synchronous={level}")


def m_queue_pq(ctx):
    persistqueue = need_module("persistqueue", "persist-queue")

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


def m_queue_pq_ack(ctx):
    """persist-queue's SQLiteAckQueue: the peer with DurableQueue's semantics (a message got and not acked is
    delivered again), where SQLiteQueue's task_done() acks everything got so far at once."""
    persistqueue = need_module("persistqueue", "persist-queue")

    def make(d):
        return persistqueue.SQLiteAckQueue(os.path.join(d, "q"), multithreading=False)

    def cycle(q, vals):
        # every put, get and ack is its own commit (auto_commit): the 100th put's with synchronous=FULL fsyncs the
        # WAL, covering the 99 before it; gets and acks commit with NORMAL, no fsync, as kafkalog's acks
        conn = q._putter
        put = q.put
        _sqlite_sync(conn, "NORMAL")
        for v in vals[:-1]:
            put(v)
        _sqlite_sync(conn, "FULL")
        put(vals[-1])
        _sqlite_sync(conn, "NORMAL")
        get, ack = q.get, q.ack
        for _ in range(len(vals)):
            ack(get(timeout=10))
        q.clear_acked_data(keep_latest=0)  # the acked rows stay until cleared: keep the table at a realistic depth

    def finish(q):
        assert q.qsize() == 0
        q.close()

    return _queue_rows(ctx, "persistqueue.SQLiteAckQueue[cycle]", "peer",
                       "100 x put (fsync with the 100th) + 100 x (get + ack) + clear_acked_data() per cycle", make,
                       cycle, finish, f"persist-queue {metadata.version('persist-queue')}: WAL; auto_commit, "
                       "multithreading=False; pickled values; at-least-once like DurableQueue")


def m_queue_diskcache(ctx):
    diskcache = need_module("diskcache")

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
    litequeue = need_module("litequeue")

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
