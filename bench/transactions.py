#!/usr/bin/env python3
"""Transactional produce through `kafkalog serve` against Apache Kafka 4.4 on the same machine (issue 23).

    python bench/transactions.py                  # the full run: 100,000 records per producer, median of 3 (a
                                                  # few times --quick's R x 5 records: ~20-30 min on 2 cores)
    python bench/transactions.py --quick          # ~4-5 min: 20,000 per producer, one run per case
    python bench/transactions.py --json tx.json --dir /mnt/nvme/tmp --kafka-heap 512m
    python bench/transactions.py --brokers kafkalog --producers 8 --every 100   # a part of it

The brokers run as bench/broker.py runs them (bench/brokers/procs.py: `python -m kafkalog serve` on a snapshot of
the package, Apache Kafka 4.4.0 as tests/compat/lab.py's KafkaBroker, one KRaft node, -Xmx512m -Xms512m, Kafka's
defaults but for what one node on loopback needs: replication factors 1 and transaction.state.log.min.isr 1;
__transaction_state keeps Kafka's 50 partitions, kafkalog has one), **each alone, one after the other**, their data
on the same disk (under --dir). Everything runs against kafkalog first, then against Kafka.

Goals
  t1  records/s of P transactional confluent-kafka producers (P in 1, 8, 32; one OS process each, spawned, so the
      GIL does not cap them), each committing every C records (C in 100, 1000), R records per producer:
                                                                              kafkalog >= 1.0x Kafka rec/s
  t2  commit_transaction() latency, p50 and p99 of every commit of the case:  kafkalog <= 1.0x Kafka
  t3  read_committed against read_uncommitted: a confluent-kafka Consumer reading the same committed records
      (one partition, written in transactions of 1000), kafkalog's read_committed rec/s against its own
      read_uncommitted rec/s:                                                 >= 0.9x (at most 10% slower)
  t4  embedded: kafkalog.KafkaProducer(store, transactional_id=...) committing every 1000 records (send per
      record) against append_batch(1000) + flush() per batch on the same records:   >= 0.7x rec/s
      (measured only when KafkaProducer accepts transactional_id when the script runs; n/a with the reason
      otherwise)

Method
  - Topics: one fresh topic per case with P partitions; producer i writes partition i only (its records, its
    transactions, one partition per transaction), created before the producers start.
  - Records: bench/README's data (engine/common.py make_records: 100-byte JSON-ish values, 8-byte keys, timestamps
    1 ms apart); producer i uses seed i, so both brokers get the same records.
  - A producer (linger.ms 5, batch.size 65536, no compression; transactional.id implies acks=all and idempotence)
    calls init_transactions() and commits one warm-up transaction of C records, then says it is ready; the timed
    region starts when every producer is ready (one event releases them all) and ends when the last one's last
    commit returns. Per transaction: begin_transaction(), produce() C records, flush() (timed: the transaction's
    records acknowledged), commit_transaction() (timed: EndTxn, the records already acknowledged). rec/s = P x R /
    (last end - first start); the latency goals are over the commit_transaction() calls alone (flush and
    flush + commit percentiles are printed beside them).
  - Before the timed cases each broker gets one discarded warm-up case (8 producers x 2,000 records, C = 100).
  - Every case is checked: each partition's end offset is its records plus one commit marker per transaction
    (Kafka writes its markers after EndTxn answers: the check waits up to 30 s for them).
  - t3: N records (500,000; --quick 200,000) written by one transactional producer, C = 1000 (setup, not timed),
    then consumers assigned at offset 0 until the N-th record, read_committed and read_uncommitted alternating,
    one warm-up each on N/10 discarded, best of 5 (--quick 3); each run checks the count and the last offset.
  - Broker CPU seconds (psutil) over each timed region are printed with the rows.
  - kafkalog serve fsyncs an acks=all produce and the transaction markers before it answers; Kafka, with its flush
    defaults, fsyncs neither. No setting of either is changed to make them alike.

Benchmarks are not tests: the exit status never depends on PASS/MISS. A case that fails (a producer error, a wrong
end offset, a stall past its deadline) leaves its cells n/a and prints the broker's last log lines.
"""

from __future__ import annotations

import argparse
import inspect
import multiprocessing
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
import uuid

from broker import java_version, versions
from brokers.clients import DEADLINE_S, create_topic, delete_topics, end_offsets
from brokers.procs import KafkaBroker, KafkalogBroker, free_port
from engine.common import BATCH, REC_BYTES, TOPIC, make_records
from harness import (
    Goal,
    Unavailable,
    judge,
    perf,
    print_goals,
    print_measurements,
    progress,
    row,
    snapshot_kafkalog,
    write_json,
)

PRODUCERS = (1, 8, 32)
COMMIT_EVERY = (100, 1000)
BROKERS = ("kafkalog", "kafka")
WARM_CASE = (8, 2_000, 100)          # producers, records each, commit every: one discarded case per broker
CONSUME_EVERY = 1000                 # the t3 data's records per transaction
CONSUME_SEED = 20240917
MARKER_WAIT_S = 30.0                 # Kafka writes commit markers after EndTxn answers


class Params:
    def __init__(self, args):
        self.quick = args.quick
        self.records = args.records or (20_000 if args.quick else 100_000)   # per producer
        self.reps = args.repeat or (1 if args.quick else 3)
        self.consume_n = args.consume_records or (200_000 if args.quick else 500_000)
        self.consume_reps = 3 if args.quick else 5
        self.embedded_n = 50_000 if args.quick else 200_000
        self.embedded_reps = 3 if args.quick else 5
        self.producers = tuple(args.producers or PRODUCERS)
        self.every = tuple(args.every or COMMIT_EVERY)
        for c in self.every:
            if self.records % c:
                raise SystemExit(f"--records {self.records} is not a multiple of --every {c}")

    def as_dict(self):
        return dict(vars(self))


# ------------------------------------------------------------------------------------------------ producers

def producer_config(bootstrap: str, txn_id: str, failed: list, errors: list) -> dict:
    def on_delivery(err, msg):  # failures only (delivery.report.only.error)
        if err is not None:
            failed.append(str(err))
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "transactional.id": txn_id,
            "linger.ms": 5, "batch.size": 65536, "compression.type": "none", "delivery.report.only.error": True,
            "on_delivery": on_delivery, "error_cb": lambda e: errors.append(str(e))}


def run_transactions(p, topic: str, partition: int, keys, vals, ts, every: int, flush_lat=None,
                     commit_lat=None) -> None:
    """Commit len(vals) // every transactions of `every` records each to topic/partition; with lists given, the
    flush() and commit_transaction() latencies of each."""
    produce, flush, begin, commit = p.produce, p.flush, p.begin_transaction, p.commit_transaction
    for s in range(0, len(vals) - every + 1, every):
        begin()
        for i in range(s, s + every):
            try:
                produce(topic, vals[i], keys[i], partition=partition, timestamp=ts[i])
            except BufferError:
                p.poll(0.01)
                produce(topic, vals[i], keys[i], partition=partition, timestamp=ts[i])
        t0 = perf()
        left = flush(DEADLINE_S)
        t1 = perf()
        if left:
            raise RuntimeError(f"{left} records not acknowledged within {DEADLINE_S} s")
        commit(DEADLINE_S)
        t2 = perf()
        if flush_lat is not None:
            flush_lat.append(t1 - t0)
            commit_lat.append(t2 - t1)


def txn_producer(bootstrap: str, topic: str, partition: int, txn_id: str, n: int, every: int, index: int,
                 go, out) -> None:
    """One producer process (spawned): init_transactions, one warm-up transaction, ("ready", index), wait for go,
    commit n // every transactions, then ("done", index, result) — or ("error", index, why) at any point."""
    try:
        from confluent_kafka import Producer
        keys, vals, ts = make_records(n, seed=index)
        failed: list[str] = []
        errors: list[str] = []
        p = Producer(producer_config(bootstrap, txn_id, failed, errors))
        p.init_transactions(120)
        run_transactions(p, topic, partition, keys[:every], vals[:every], ts[:every], every)  # warm-up
        if failed:
            raise RuntimeError(f"warm-up transaction: {failed[:3]}")
        out.put(("ready", index))
        go.wait()
        flush_lat: list[float] = []
        commit_lat: list[float] = []
        t0 = perf()
        run_transactions(p, topic, partition, keys, vals, ts, every, flush_lat, commit_lat)
        t1 = perf()
        out.put(("done", index, {"t0": t0, "t1": t1, "flush": flush_lat, "commit": commit_lat,
                                 "failed": failed[:3], "errors": errors[:3]}))
    except Exception as e:  # reported to the parent, which notes it
        out.put(("error", index, f"{type(e).__name__}: {e}"))


def wait_end_offsets(bootstrap: str, topic: str, partitions: int, expect: int) -> int:
    end = time.monotonic() + MARKER_WAIT_S
    while True:
        got = end_offsets(bootstrap, topic, partitions)
        if got == expect or time.monotonic() > end:
            return got
        time.sleep(0.2)


def txn_case(broker, producers: int, n: int, every: int, tag: str) -> dict:
    """One run: `producers` processes on a fresh topic of `producers` partitions, n records each, a commit every
    `every`."""
    ctx = multiprocessing.get_context("spawn")
    topic = f"tx-{producers}p-c{every}-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, producers)
    out, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=txn_producer, daemon=True,
                         args=(broker.bootstrap, topic, i, f"bench-{tag}-{topic}-{i}", n, every, i, go, out))
             for i in range(producers)]

    def collect(kind: str, timeout: float) -> dict:
        got, end = {}, time.monotonic() + timeout
        while len(got) < producers:
            try:
                msg = out.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{producers - len(got)} of {producers} producers not {kind} within "
                                   f"{timeout:.0f} s (stalled?)") from None
            if msg[0] == "error":
                raise RuntimeError(f"producer {msg[1]}: {msg[2]}")
            got[msg[1]] = msg[2] if len(msg) > 2 else None
        return got

    try:
        for pr in procs:
            pr.start()
        collect("ready", 120 + 3 * producers)
        cpu0 = broker.cpu()
        go.set()
        done = collect("done", DEADLINE_S + 60)
        broker_cpu = broker.cpu() - cpu0
        problems = [f"producer {i}: {r['failed'] or r['errors']}" for i, r in sorted(done.items()) if r["failed"]]
        if problems:
            raise RuntimeError("; ".join(problems[:3]))
        t0 = min(r["t0"] for r in done.values())
        t1 = max(r["t1"] for r in done.values())
        txns = n // every
        expect = producers * (n + every + txns + 1)  # the warm-up transaction, then n records; a marker each
        stored = wait_end_offsets(broker.bootstrap, topic, producers, expect)
        if stored != expect:
            raise RuntimeError(f"the partitions end at {stored}, not {expect} ({producers} x ({n} + {every} "
                               f"records + {txns + 1} commit markers))")
        commit = [x for r in done.values() for x in r["commit"]]
        flush = [x for r in done.values() for x in r["flush"]]
        both = [f + c for r in done.values() for f, c in zip(r["flush"], r["commit"])]
        records = producers * n
        return {"producers": producers, "every": every, "records": records, "seconds": t1 - t0,
                "msg_s": records / (t1 - t0), "broker_cpu_s": broker_cpu, "commits": len(commit),
                "commit": pcts(commit), "flush": pcts(flush), "flush_commit": pcts(both),
                "errors": sorted({e for r in done.values() for e in r["errors"]})[:5]}
    finally:
        go.set()
        for pr in procs:
            if pr.pid is not None:
                pr.join(timeout=30)
                if pr.is_alive():
                    pr.kill()
                    pr.join(timeout=10)
        out.close()
        if broker.alive():
            try:
                delete_topics(broker.bootstrap, [topic])
            except Exception:  # best effort: it only frees disk
                pass


def pcts(lat: list[float]) -> dict:
    s = sorted(lat)
    k = len(s)
    return {"p50_s": s[k // 2], "p99_s": s[min(k - 1, int(k * 0.99))], "max_s": s[-1], "n": k}


# ------------------------------------------------------------------------------------------------ read_committed

def write_consume_data(bootstrap: str, topic: str, n: int) -> float:
    """The t3 records: one transactional producer, CONSUME_EVERY per transaction (setup: not a goal). Seconds."""
    from confluent_kafka import Producer
    keys, vals, ts = make_records(n, seed=CONSUME_SEED)
    failed: list[str] = []
    errors: list[str] = []
    p = Producer(producer_config(bootstrap, f"bench-consume-{topic}", failed, errors))
    p.init_transactions(120)
    t0 = perf()
    run_transactions(p, topic, 0, keys, vals, ts, CONSUME_EVERY)
    el = perf() - t0
    if failed:
        raise RuntimeError(f"writing the read_committed data: {failed[:3]}")
    expect = n + n // CONSUME_EVERY
    stored = wait_end_offsets(bootstrap, topic, 1, expect)
    if stored != expect:
        raise RuntimeError(f"the read_committed data ends at {stored}, not {expect}")
    return el


def consume(bootstrap: str, topic: str, n: int, isolation: str, hwm: int) -> float:
    """Seconds from assign to the n-th record with a fresh consumer (b1's settings: a local queue that holds the
    run); the last record must be the one before the last marker when n is all of it."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4",
                  "group.id": f"bench-{isolation}-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "queued.min.messages": max(n, 100_000), "queued.max.messages.kbytes": 2_097_151})
    try:
        c.list_topics(topic, timeout=30)
        got, last, end = 0, -1, time.monotonic() + DEADLINE_S
        t0 = perf()
        c.assign([TopicPartition(topic, 0, 0)])
        while got < n:
            if time.monotonic() > end:
                raise RuntimeError(f"{isolation}: consumed {got} of {n} within {DEADLINE_S} s (stalled?)")
            for m in c.consume(num_messages=10_000, timeout=1.0):
                if m.error() is not None:
                    raise RuntimeError(f"{isolation}: {m.error()}")
                got += 1
                last = m.offset()
        el = perf() - t0
    finally:
        c.close()
    if hwm is not None and last != hwm - 2:  # the last record sits just before the last commit marker
        raise RuntimeError(f"{isolation}: the {n}th record has offset {last}, not {hwm - 2}")
    return el


def consume_case(broker, n: int, reps: int) -> dict:
    topic = f"rc-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1)
    write_s = write_consume_data(broker.bootstrap, topic, n)
    hwm = n + n // CONSUME_EVERY
    out = {"write_s": write_s, "write_msg_s": n / write_s}
    runs: dict[str, list] = {"read_committed": [], "read_uncommitted": []}
    cpu: dict[str, list] = {k: [] for k in runs}
    for iso in runs:  # warm-up on a tenth, discarded
        consume(broker.bootstrap, topic, n // 10, iso, None)
    for _ in range(reps):
        for iso in runs:
            c0 = broker.cpu()
            runs[iso].append(consume(broker.bootstrap, topic, n, iso, hwm))
            cpu[iso].append(broker.cpu() - c0)
    for iso, times in runs.items():
        i = min(range(len(times)), key=times.__getitem__)
        out[iso] = {"records": n, "seconds": times[i], "msg_s": n / times[i], "broker_cpu_s": cpu[iso][i],
                    "runs": [round(n / t) for t in times]}
    try:
        delete_topics(broker.bootstrap, [topic])
    except Exception:
        pass
    return out


# ------------------------------------------------------------------------------------------------ one broker

def run_broker(name: str, scratch: str, pythonpath: str | None, params: Params, args, res: dict,
               notes: list) -> None:
    """Every case against one broker, alone: start it, warm it up, the t1/t2 cases, t3, stop it."""
    try:
        if name == "kafkalog":
            if pythonpath is None:
                raise Unavailable("kafkalog not available")
            broker = KafkalogBroker(scratch, pythonpath, port=free_port())
        else:
            broker = KafkaBroker(scratch, args.kafka_heap)
        broker.start()
    except Unavailable as e:
        notes.append(f"{name}: {e}")
        progress(f"{name}: {e}")
        return
    progress(f"{name} serving on {broker.bootstrap}")

    def attempt(what: str, f, *a):
        if not broker.alive():
            return None
        try:
            return f(*a)
        except Exception as e:
            msg = broker.failure(f"{name}: {what}", e)
            if broker.alive():
                msg += f"; {name}'s log ends: {broker.log_tail(1500)!r}"
                print("  its log ends:\n" + broker.log_tail(1500), flush=True)
            notes.append(msg)
            return None

    try:
        p, m, c = WARM_CASE
        progress(f"{name}: warm-up case, {p} producers x {m:,} records, commit every {c} (discarded)")
        attempt("warm-up case", txn_case, broker, p, m, c, name)
        for every in params.every:
            for producers in params.producers:
                runs = []
                for r in range(params.reps):
                    progress(f"{name}: {producers} producer(s) x {params.records:,} records, commit every {every}"
                             f" (run {r + 1}/{params.reps})")
                    got = attempt(f"{producers} producers, commit every {every}",
                                  txn_case, broker, producers, params.records, every, name)
                    if got is None:
                        break
                    runs.append(got)
                    progress(f"  {got['msg_s']:,.0f} rec/s, commit p50 {got['commit']['p50_s'] * 1e3:.2f} ms "
                             f"p99 {got['commit']['p99_s'] * 1e3:.2f} ms, broker CPU {got['broker_cpu_s']:.1f} s")
                if runs:
                    ordered = sorted(runs, key=lambda x: x["msg_s"])
                    med = dict(ordered[(len(ordered) - 1) // 2], runs=[round(x["msg_s"]) for x in runs])
                    res[f"{name}/tx/{producers}/{every}"] = med
        if not args.no_consume:
            progress(f"{name}: read_committed vs read_uncommitted, {params.consume_n:,} records")
            got = attempt("read_committed/read_uncommitted consume",
                          consume_case, broker, params.consume_n, params.consume_reps)
            if got is not None:
                res[f"{name}/consume"] = got
        if broker.alive():
            res[f"{name}/memory"] = broker.memory()
    finally:
        rc = broker.stop()
        if name == "kafkalog" and rc not in (0, None):
            notes.append(f"kafkalog serve exited with {rc} on SIGTERM; its log ends: {broker.log_tail(1500)!r}")
        warnings = log_warnings(broker.log_path)
        if warnings:
            notes.append(f"{name}'s log has {len(warnings)} WARN/ERROR lines, the first: "
                         + " | ".join(w[:300] for w in warnings[:5]))
        res[f"{name}/log_warnings"] = warnings[:50]


def log_warnings(path: str) -> list[str]:
    """The WARN/ERROR lines of a broker's log (kafkalog's stderr, Kafka's server.log), for the notes."""
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip() for line in f if any(w in line for w in (" WARN", " ERROR", " CRITICAL"))]
    except OSError:
        return []


# ------------------------------------------------------------------------------------------------ embedded

def embedded_unavailable(kafkalog, scratch: str) -> str | None:
    """Why kafkalog.KafkaProducer cannot run transactions here, or None when it can."""
    cls = kafkalog.KafkaProducer
    missing = [m for m in ("init_transactions", "begin_transaction", "commit_transaction") if not hasattr(cls, m)]
    if missing:
        return f"kafkalog.KafkaProducer has no {', '.join(missing)}"
    params = inspect.signature(cls).parameters
    if "transactional_id" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return "kafkalog.KafkaProducer takes no transactional_id"
    d = tempfile.mkdtemp(prefix="kl-txn-probe-", dir=scratch)
    try:
        store = kafkalog.LogStore(d)
        try:
            kafkalog.KafkaProducer(store, transactional_id="bench-probe").close()
        finally:
            store.close()
    except Exception as e:
        return f"KafkaProducer(store, transactional_id=...) refused: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return None


def run_embedded(scratch: str, snapshot: str | None, params: Params, res: dict, errors: dict) -> None:
    """t4: KafkaProducer(transactional_id) committing every BATCH records against append_batch(BATCH) + flush()
    per batch (g1's method, engine/writes.py's time_append_batch), alternating run by run, median of R."""
    if snapshot is None:
        errors["embedded"] = "kafkalog not available"
        return
    from engine import common
    from engine.producer import PRODUCER_CONFIG
    from engine.writes import time_append_batch
    common.load_kafkalog(snapshot)
    if common.KAFKALOG_ERROR:
        errors["embedded"] = common.KAFKALOG_ERROR
        return
    kafkalog = common.kafkalog
    why = embedded_unavailable(kafkalog, scratch)
    if why:
        errors["embedded"] = why
        return
    n = params.embedded_n
    # g7's batching (linger_ms 5, batch_size 1 MiB); acks stays 'all', which a transactional producer needs
    config = {k: v for k, v in PRODUCER_CONFIG.items() if k != "acks"}
    ctx = common.Ctx(argparse.Namespace(dir=scratch), common.Params(params.quick), n)
    data = ctx.data
    chunks = data.chunks(n)

    def run_txn(m: int) -> float:
        d = ctx.tmpdir("kl-txn")
        store, log = common.new_store(d)
        producer = kafkalog.KafkaProducer(store, transactional_id=f"bench-embedded-{uuid.uuid4().hex[:6]}",
                                          **config)
        producer.init_transactions()
        send, begin, commit = producer.send, producer.begin_transaction, producer.commit_transaction
        t0 = perf()
        for vals, keys, ts in chunks[: m // BATCH]:
            begin()
            for v, k, t in zip(vals, keys, ts):
                send(TOPIC, v, k, timestamp_ms=t)
            commit()
        el = perf() - t0
        expect = m + m // BATCH
        if log.log_end_offset != expect:
            raise RuntimeError(f"the embedded log ends at {log.log_end_offset}, not {expect}")
        producer.close()
        store.close()
        shutil.rmtree(d, ignore_errors=True)
        return el

    try:
        warm = max(BATCH, n // 10 // BATCH * BATCH)
        run_txn(warm)
        time_append_batch(ctx, chunks, warm, fsync=True)
        t_txn, t_batch = [], []
        for _ in range(params.embedded_reps):
            t_txn.append(run_txn(n))
            t_batch.append(time_append_batch(ctx, chunks, n, fsync=True))
        res["embedded"] = {"n": n, "txn_s": statistics.median(t_txn), "batch_s": statistics.median(t_batch),
                           "txn_runs": t_txn, "batch_runs": t_batch, "config": config}
    except Exception as e:
        errors["embedded"] = f"{type(e).__name__}: {e}"
    finally:
        ctx.close()


# ------------------------------------------------------------------------------------------------ report

def case_name(producers: int, every: int) -> str:
    return f"p{producers}.c{every}"


def build_report(params: Params, res: dict, errors: dict):
    """(goals judged, measurement rows, results by name) from the raw results."""
    results: dict[str, dict] = {}
    rows: list[dict] = []
    goals: list[Goal] = []
    for every in params.every:
        for producers in params.producers:
            case = case_name(producers, every)
            for b in BROKERS:
                r = res.get(f"{b}/tx/{producers}/{every}")
                key = f"{b}.tx.{case}"
                if r is None:
                    errors[key] = errors.get(b) or "failed or not run (see the notes)"
                    for k in ("commit_p50", "commit_p99"):
                        errors[f"{key}.{k}"] = errors[key]
                    continue
                results[key] = {"rec_s": r["msg_s"]}
                results[f"{key}.commit_p50"] = {"seconds": r["commit"]["p50_s"]}
                results[f"{key}.commit_p99"] = {"seconds": r["commit"]["p99_s"]}
                f, fc = r["flush"], r["flush_commit"]
                rows.append(row(key, "kafkalog" if b == "kafkalog" else "peer",
                                f"{producers} transactional producer(s), commit every {every}", n=r["records"],
                                seconds=r["seconds"], nbytes=r["records"] * REC_BYTES,
                                method=(f"median of {len(r['runs'])}" if len(r["runs"]) > 1 else "1 run")
                                + f" {r['runs']}",
                                note=(f"p50/p99 = commit_transaction() over {r['commits']} commits, "
                                      f"max {r['commit']['max_s'] * 1e3:.1f} ms; flush() p50/p99 "
                                      f"{f['p50_s'] * 1e3:.2f}/{f['p99_s'] * 1e3:.2f} ms; flush+commit "
                                      f"{fc['p50_s'] * 1e3:.2f}/{fc['p99_s'] * 1e3:.2f} ms; broker CPU "
                                      f"{r['broker_cpu_s']:.1f} s" + (f"; client errors {r['errors']}"
                                                                      if r["errors"] else "")),
                                p50_us=r["commit"]["p50_s"] * 1e6, p99_us=r["commit"]["p99_s"] * 1e6,
                                broker_cpu_s=r["broker_cpu_s"], flush=f, flush_commit=fc, runs=r["runs"]))
            goals.append(Goal(f"t1.{case}", f"{producers} txn producer(s), commit every {every}: rec/s",
                              f"kafkalog.tx.{case}", f"kafka.tx.{case}", "rec_s", ">=", 1.0))
    for every in params.every:
        for producers in params.producers:
            case = case_name(producers, every)
            for k in ("p50", "p99"):
                goals.append(Goal(f"t2.{case}.{k}", f"commit_transaction() {k}, {producers} producer(s), "
                                  f"every {every}", f"kafkalog.tx.{case}.commit_{k}", f"kafka.tx.{case}.commit_{k}",
                                  "seconds", "<=", 1.0))
    for b in BROKERS:
        r = res.get(f"{b}/consume")
        for iso in ("read_committed", "read_uncommitted"):
            key = f"{b}.consume.{iso}"
            if r is None:
                errors[key] = errors.get(b) or "failed or not run (see the notes)"
                continue
            x = r[iso]
            results[key] = {"rec_s": x["msg_s"]}
            rows.append(row(key, "kafkalog" if b == "kafkalog" else "peer",
                            f"confluent Consumer, isolation.level={iso}, one partition", n=x["records"],
                            seconds=x["seconds"], nbytes=x["records"] * REC_BYTES,
                            method=f"best of {len(x['runs'])} {x['runs']} (warm-up of a tenth discarded)",
                            note=f"broker CPU {x['broker_cpu_s']:.2f} s", runs=x["runs"]))
        if r is not None:
            rows.append(row(f"{b}.consume.write[setup]", "kafkalog" if b == "kafkalog" else "peer",
                            f"the t3 data: 1 txn producer, commit every {CONSUME_EVERY} (setup, info)",
                            n=params.consume_n, seconds=r["write_s"], nbytes=params.consume_n * REC_BYTES,
                            method="1 run"))
    goals.append(Goal("t3.read_committed", "read_committed rec/s vs read_uncommitted, kafkalog",
                      "kafkalog.consume.read_committed", "kafkalog.consume.read_uncommitted", "rec_s", ">=", 0.9))
    e = res.get("embedded")
    if e is None:
        errors["embedded.txn"] = errors.get("embedded", "not run")
    else:
        results["embedded.txn"] = {"rec_s": e["n"] / e["txn_s"]}
        results["embedded.append_batch+flush"] = {"rec_s": e["n"] / e["batch_s"]}
        cfg = ", ".join(f"{k}={v}" for k, v in e["config"].items())
        rows.append(row("embedded.txn", "kafkalog", f"KafkaProducer(transactional_id, {cfg}): begin, {BATCH} x "
                        "send(topic, value, key, timestamp_ms), commit_transaction()", n=e["n"], seconds=e["txn_s"],
                        nbytes=e["n"] * REC_BYTES, method=f"median of {len(e['txn_runs'])}, alternating "
                        "(warm-up discarded)", runs=e["txn_runs"], note="exclusive store, acks='all'"))
        rows.append(row("embedded.append_batch+flush", "kafkalog", f"append_batch({BATCH}) + flush() per batch",
                        n=e["n"], seconds=e["batch_s"], nbytes=e["n"] * REC_BYTES,
                        method=f"median of {len(e['batch_runs'])}, alternating", runs=e["batch_runs"]))
    goals.append(Goal("t4.embedded", f"txn commit every {BATCH} vs append_batch+flush",
                      "embedded.txn", "embedded.append_batch+flush", "rec_s", ">=", 0.7))
    return [judge(g, results, errors) for g in goals], rows, results


def print_info(res: dict) -> None:
    rc = {b: res.get(f"{b}/consume") for b in BROKERS}
    parts = []
    for b, r in rc.items():
        if r is not None:
            parts.append(f"{b} read_committed/read_uncommitted "
                         f"{r['read_committed']['msg_s'] / r['read_uncommitted']['msg_s']:.2f}x")
    if rc["kafkalog"] and rc["kafka"]:
        for iso in ("read_committed", "read_uncommitted"):
            parts.append(f"{iso} kafkalog/kafka {rc['kafkalog'][iso]['msg_s'] / rc['kafka'][iso]['msg_s']:.2f}x")
    if parts:
        print("info: " + "; ".join(parts))
    for b in BROKERS:
        if f"{b}/memory" in res:
            m = res[f"{b}/memory"]
            print(f"info: {b} RSS after its runs {m['rss_mb']:.0f} MB")


# ------------------------------------------------------------------------------------------------ main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20,000 records per producer, one run per case (~4-5 min)")
    ap.add_argument("--records", type=int, default=None, help="records per producer (a multiple of every --every)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per case (median), default 3 (--quick 1)")
    ap.add_argument("--producers", type=int, action="append", help="producer count (repeatable; default 1, 8, 32)")
    ap.add_argument("--every", type=int, action="append", help="records per transaction (repeatable; 100, 1000)")
    ap.add_argument("--consume-records", type=int, default=None, help="t3 records (500,000; --quick 200,000)")
    ap.add_argument("--no-consume", action="store_true", help="leave t3 out")
    ap.add_argument("--no-embedded", action="store_true", help="leave t4 out")
    ap.add_argument("--brokers", default=",".join(BROKERS), help="which brokers, in order (default kafkalog,kafka)")
    ap.add_argument("--kafka-heap", default="512m", help="Kafka's -Xmx and -Xms (default 512m)")
    ap.add_argument("--dir", default=None, help="scratch dir for both brokers' data (default: a new temp dir)")
    ap.add_argument("--json", default=None, help="write goals and measurements to this file")
    args = ap.parse_args(argv)
    params = Params(args)
    names = [b for b in args.brokers.split(",") if b]
    if unknown := set(names) - set(BROKERS):
        ap.error(f"unknown broker(s) {sorted(unknown)}")
    try:
        import confluent_kafka  # noqa: F401
        import psutil  # noqa: F401
    except ImportError as e:
        print(f"needs confluent-kafka and psutil: {e}")
        return 2

    t_start = perf()
    machine = dict(versions(), java=java_version(), load_start=os.getloadavg())
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items() if v is not None))
    print(f"params: {params.as_dict()}", flush=True)
    scratch = tempfile.mkdtemp(prefix="kafkalog-txn-bench-", dir=args.dir)
    res: dict = {}
    notes: list[str] = []
    errors: dict[str, str] = {}
    try:
        try:
            snapshot = snapshot_kafkalog(os.path.join(scratch, "snapshot"))
        except Unavailable as e:
            snapshot, errors["kafkalog"] = None, str(e)
        for name in BROKERS:
            if name not in names:
                errors[name] = "left out (--brokers)"
                continue
            run_broker(name, scratch, snapshot, params, args, res, notes)
            for n in notes:
                if n.startswith(f"{name}: ") and "failed" not in n:
                    errors.setdefault(name, n)
        if args.no_embedded:
            errors["embedded"] = "left out (--no-embedded)"
        else:
            progress("embedded: KafkaProducer(transactional_id) vs append_batch + flush")
            run_embedded(scratch, snapshot, params, res, errors)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    goals, rows, _ = build_report(params, res, errors)
    print()
    print_goals(goals)
    print()
    print_measurements(rows)
    print()
    print_info(res)
    if "embedded" in errors:
        print(f"t4 embedded: unavailable: {errors['embedded']}")
    for n in notes:
        print("note: " + n)
    machine["load_end"] = os.getloadavg()
    print(f"\ntotal {perf() - t_start:.1f}s; load average at the end {[round(x, 2) for x in machine['load_end']]}")
    if args.json:
        write_json(args.json, {"machine": machine, "params": params.as_dict(), "goals": goals,
                               "measurements": rows, "results": res, "notes": notes,
                               "errors": errors}, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
