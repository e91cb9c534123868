"""bench/run.py's reads: g4 (records() against aiokafka's parser, read_columns()) over one log written for them
(the read fixture, which g9's consumer reads too)."""

from __future__ import annotations

from harness import perf, row

from .common import BATCH, REC_BYTES, need_kafkalog, new_store, repeat, rmtree
from .writes import aiokafka_build, aiokafka_classes

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
    _, Batch = aiokafka_classes()
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
