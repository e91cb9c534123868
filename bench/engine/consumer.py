"""bench/run.py's consumer: g9 (KafkaConsumer.poll against records() of the same log, in each open mode: the read
fixture's exclusive store, a shared store, a read-only store), g10 (a poll() woken by another process's append)."""

from __future__ import annotations

import os
import sys
import time

from harness import latency_stats, perf, row

from . import common
from .common import REC_BYTES, TOPIC, need_kafkalog, repeat, rmtree
from .reads import read_log_fixture

# ------------------------------------------------------------------------------------------------ g9: consumer

def _poll_run(store, tp, m):
    """Seconds to poll m records from offset 0 (max_records=500), touching key and value as the records() case."""
    from kafkalog import KafkaConsumer
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


def _records_run(log, m):
    cnt = 0
    t0 = perf()
    for rec in log.records(0, m):
        _k, _v = rec.key, rec.value
        cnt += 1
    el = perf() - t0
    assert cnt == m, (cnt, m)
    return el


def m_consumer_poll(ctx):
    """KafkaConsumer.poll over the same log as kafkalog.records (fixture read_log): ConsumerRecord tuples built in C,
    default max_poll_records=500, key and value touched as the engine case does."""
    log, n = read_log_fixture(ctx)
    from kafkalog.structs import TopicPartition
    store = ctx._fixtures["read_log_store"]
    tp = TopicPartition(TOPIC, 0)
    sec, times, method = repeat(ctx, lambda m: _poll_run(store, tp, m), n, "best")
    return row("kafkalog.KafkaConsumer.poll", "kafkalog", "poll(max_records=500), rec.key, rec.value", n=n,
               seconds=sec, nbytes=n * REC_BYTES, method=method, runs=times,
               note="same log as kafkalog.records")


def m_consumer_poll_modes(ctx):
    """g9 in the other open modes: one log written through a shared store (the default mode), then read by
    records() and by KafkaConsumer.poll through that shared store and through a read-only store of the same data
    dir. A shared or read-only view looks for other processes' changes; these rows show what that costs each."""
    need_kafkalog()
    from kafkalog.structs import TopicPartition
    n = ctx.p.n
    d = ctx.tmpdir("kl-modes")
    shared = common.LogStore(d)
    rows = []
    try:
        shared.create_topic(TOPIC, 1)
        log = shared.log(TOPIC, 0)
        for vals, keys, ts in ctx.data.chunks(n):
            log.append_batch(vals, keys, ts)
        log.flush()
        tp = TopicPartition(TOPIC, 0)
        reader = common.LogStore(d, read_only=True)
        try:
            for mode, store in (("shared", shared), ("read_only", reader)):
                rlog = store.log(TOPIC, 0)
                cases = ((f"kafkalog.records[{mode}]", f"for rec in log.records(): rec.key, rec.value ({mode} store)",
                          lambda m, rlog=rlog: _records_run(rlog, m)),
                         (f"kafkalog.KafkaConsumer.poll[{mode}]",
                          f"poll(max_records=500), rec.key, rec.value ({mode} store)",
                          lambda m, store=store: _poll_run(store, tp, m)))
                # the two cases take turns, run by run (a machine whose speed drifts over seconds, as a shared VM's
                # does, would otherwise favour whichever ran in its faster moment)
                timed = [repeat(ctx, run, n, "best") for _, _, run in cases] if ctx.p.reps <= 1 else \
                    _turns(ctx, [run for _, _, run in cases], n)
                for (name, what, _), (sec, times, method) in zip(cases, timed):
                    rows.append(row(name, "kafkalog", what, n=n, seconds=sec, nbytes=n * REC_BYTES, method=method,
                                    runs=times, note=f"one log written through a shared store, read through a "
                                    f"{mode.replace('_', '-')} one; records() and poll() runs taking turns"))
        finally:
            reader.close()
    finally:
        shared.close()
        rmtree(d)
    return rows


def _turns(ctx, runs, n):
    """Each of ``runs`` (run(m) -> seconds) warmed up once, then timed ``ctx.p.reps`` times, the runs taking turns:
    [(best seconds, times, method)] per run."""
    import gc
    warm = max(common.BATCH, (n // 10) // common.BATCH * common.BATCH)
    for run in runs:
        run(warm)
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(ctx.p.reps):
        for i, run in enumerate(runs):
            gc.collect()
            times[i].append(run(n))
    method = f"best of {ctx.p.reps}, taking turns (warm-up of {warm:,} discarded)"
    return [(min(t), t, method) for t in times]


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
    with common.LogStore(d) as s:
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
