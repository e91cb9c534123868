"""bench/run.py's producer: g7 (KafkaProducer.send per record against append_batch of the same records)."""

from __future__ import annotations

import gc

from harness import MiB, perf, row

from . import common
from .common import BATCH, REC_BYTES, TOPIC, VALUE_BYTES, need_kafkalog, new_store, repeat, rmtree
from .writes import time_append_batch

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
    producer_cls = common.kafkalog.KafkaProducer

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
        return time_append_batch(ctx, chunks, m, fsync=False)

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
