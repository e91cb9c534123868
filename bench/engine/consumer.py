"""bench/run.py's consumer: g9 (KafkaConsumer.poll against records() of the same log), g10 (a poll() woken by
another process's append)."""

from __future__ import annotations

import os
import sys
import time

from harness import latency_stats, perf, row

from . import common
from .common import REC_BYTES, TOPIC, need_kafkalog, repeat, rmtree
from .reads import read_log_fixture

# ------------------------------------------------------------------------------------------------ g9: consumer

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
