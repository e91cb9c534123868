"""bench/run.py's durable queue: g8 (DurableQueue cycles against persist-queue's SQLiteQueue and SQLiteAckQueue,
diskcache and litequeue, each fsynced once per 100 puts), all of them and the device's floor timed taking turns
(``_turns``)."""

from __future__ import annotations

import os
from importlib import metadata

from harness import Unavailable, need_module, perf, row

from . import common
from .common import VALUE_BYTES, need_kafkalog, rmtree

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


class _Case:
    """One queue of the g8 rows: ``run(cycles) -> seconds`` and ``rows(seconds, runs, method)``."""

    def __init__(self, name, run, rows):
        self.name, self.run, self.rows = name, run, rows


def _queue_case(ctx, name, side, what, make, cycle, finish, note, msgs_row=False, prepare=list) -> _Case:
    cycles = ctx.p.queue_cycles

    def rows(sec, times, method):
        out = [row(name, side, what, n=cycles, seconds=sec, nbytes=cycles * QUEUE_BATCH * VALUE_BYTES,
                   method=method, runs=times, note=note, cyc_s=cycles / sec)]
        if msgs_row:
            out.append(row(name + "[messages]", side, what + ": messages/s (info)", n=cycles * QUEUE_BATCH,
                           seconds=sec, nbytes=cycles * QUEUE_BATCH * VALUE_BYTES, method=method, note=note))
        return out
    return _Case(name, lambda c: _queue_run(ctx, make, cycle, finish, c, prepare), rows)


def _turns(ctx) -> dict:
    """Every g8 queue (ours, the device's floor, each peer installed), timed taking turns: a warm-up run of each,
    then ``slow_reps`` rounds in which each runs once, the median kept. The disk's fsync speed drifts over minutes on
    a shared machine (2x on this project's VM); run one after the other, a queue would get whichever moment it ran
    in. {case function: rows, or the Unavailable that left it out}, measured once per run."""
    if "queue_turns" in ctx._fixtures:
        return ctx._fixtures["queue_turns"]
    import gc
    import statistics
    out: dict = {}
    cases: list[tuple] = []
    for fn in _CASES:
        try:
            cases.extend((fn, c) for c in fn(ctx))
        except Unavailable as e:
            out[fn] = e
    cycles, reps = ctx.p.queue_cycles, ctx.p.slow_reps
    warm = max(5, cycles // 10)
    for _, c in cases:
        gc.collect()
        c.run(warm)
    times = {c.name: [] for _, c in cases}
    for _ in range(reps):
        for _, c in cases:
            gc.collect()
            times[c.name].append(c.run(cycles))
    method = (f"median of {reps}, the queues taking turns" if reps > 1 else "1 run") + \
        f" (warm-up of {warm:,} cycles discarded)"
    for fn, c in cases:
        t = times[c.name]
        out.setdefault(fn, []).extend(c.rows(statistics.median(t), t, method))
    ctx._fixtures["queue_turns"] = out
    return out


def _rows_of(ctx, fn) -> list:
    got = _turns(ctx)[fn]
    if isinstance(got, Exception):
        raise got
    return got


def _case_ours(ctx):
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

    return [_queue_case(ctx, "kafkalog.DurableQueue", "kafkalog", "put_many(100) + 100 x (get + ack) per cycle",
                       make, cycle, finish, "durable=True: put_many fsyncs before it returns; ack is journaled "
                       "in the page cache (survives kill -9, not a power loss)", msgs_row=True), _queue_floor(ctx)]


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

    nbytes = len(build_batch(values[:QUEUE_BATCH]))

    def rows(sec, times, method):
        return [row("raw.queue_cycle+fdatasync", "floor", f"os.write of one cycle's record batch ({nbytes:,} B) + "
                    "fdatasync per cycle", n=cycles, seconds=sec, nbytes=cycles * QUEUE_BATCH * VALUE_BYTES,
                    method=method, runs=times, cyc_s=cycles / sec,
                    note="info: the device's floor under a DurableQueue cycle; a g8 ratio cannot exceed peer "
                         "cycles/s divided by this row's cycles/s")]
    return _Case("raw.queue_cycle+fdatasync", run, rows)


def _sqlite_sync(conn, level):
    conn.execute(f"PRAGMA synchronous={level}")


def _case_pq(ctx):
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

    return [_queue_case(ctx, "persistqueue.SQLiteQueue[cycle]", "peer",
                       "100 x put (fsync with the 100th) + 100 x get + task_done() per cycle", make, cycle, finish,
                       f"persist-queue {metadata.version('persist-queue')}: WAL; auto_commit=False, "
                       "multithreading=False; pickled values")]


def _case_pq_ack(ctx):
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

    return [_queue_case(ctx, "persistqueue.SQLiteAckQueue[cycle]", "peer",
                       "100 x put (fsync with the 100th) + 100 x (get + ack) + clear_acked_data() per cycle", make,
                       cycle, finish, f"persist-queue {metadata.version('persist-queue')}: WAL; auto_commit, "
                       "multithreading=False; pickled values; at-least-once like DurableQueue")]


def _case_diskcache(ctx):
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

    return [_queue_case(ctx, "diskcache.Deque[cycle]", "peer",
                       "extend(100) in one transact() (FULL: one fsync) + 100 x popleft per cycle", make, cycle,
                       finish, f"diskcache {metadata.version('diskcache')}: by default every op is its own commit "
                       "into the WAL with synchronous=NORMAL, i.e. no fsync at all (kill -9 safe, not power-loss "
                       "safe); FULL for the appends gives the per-100 fsync; popleft is get+ack")]


def _case_litequeue(ctx):
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

    return [_queue_case(ctx, "litequeue.LiteQueue[cycle]", "peer",
                       "100 x put in one transaction (FULL: one fsync) + 100 x (pop + done) + prune() per cycle",
                       make, cycle, finish, f"litequeue {metadata.version('litequeue')}: WAL, synchronous=NORMAL by "
                       "default; TEXT values; pop() cost grows with the rows in the table, hence prune() per cycle",
                       prepare=lambda vals: [v.decode() for v in vals])]


_CASES = (_case_ours, _case_pq, _case_pq_ack, _case_diskcache, _case_litequeue)


def m_queue_ours(ctx):
    return _rows_of(ctx, _case_ours)


def m_queue_pq(ctx):
    return _rows_of(ctx, _case_pq)


def m_queue_pq_ack(ctx):
    return _rows_of(ctx, _case_pq_ack)


def m_queue_diskcache(ctx):
    return _rows_of(ctx, _case_diskcache)


def m_queue_litequeue(ctx):
    return _rows_of(ctx, _case_litequeue)
