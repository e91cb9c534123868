"""bench/broker.py's acks=all against acks=1 (a1): 1, 8 and 32 confluent-kafka producer processes against one
kafkalog serve, the two settings alternating; what a group commit is measured by."""

from __future__ import annotations

import multiprocessing
import time
import uuid

from harness import MB, Unavailable, median_by_rate, perf

from .clients import DEADLINE_S, VALUE_BYTES, create_topic, delete_topics, end_offsets, values
from .procs import KafkalogBroker

ACKS_PRODUCERS = (1, 8, 32)
ACKS_GOAL = 0.7  # acks=all rec/s / acks=1 rec/s, with 8 producers or more
ACKS_QUEUE = 20_000  # unacknowledged records a producer may hold
ACKS_WARMUP = 1_000

def acks_producer(bootstrap: str, topic: str, partition: int, acks: str, seconds: float, index: int, go, out) -> None:
    """One producer process (spawned): warm up, say ("ready", index), wait for go, produce for `seconds`, then
    ("done", index, counts) — or ("error", index, why) at any point."""
    try:
        from confluent_kafka import Producer
        failed: list[str] = []
        errors: list[str] = []

        def on_delivery(err, msg):  # failures only (delivery.report.only.error)
            if err is not None:
                failed.append(str(err))

        p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 5,
                      "batch.size": 65536, "acks": acks, "enable.idempotence": False, "compression.type": "none",
                      "queue.buffering.max.messages": ACKS_QUEUE, "delivery.report.only.error": True,
                      "on_delivery": on_delivery, "error_cb": lambda e: errors.append(str(e))})
        p.list_topics(topic, timeout=30)
        vals = values(ACKS_WARMUP)
        produce, poll = p.produce, p.poll
        for v in vals:
            produce(topic, v, partition=partition)
        if p.flush(60) or failed:
            raise RuntimeError(f"warm-up not delivered: {failed[:3] or errors[:3]}")
        out.put(("ready", index))
        go.wait()
        t0 = perf()
        end, sent = t0 + seconds, 0
        while perf() < end:
            for v in vals:
                while True:
                    try:
                        produce(topic, v, partition=partition)
                        sent += 1
                        break
                    except BufferError:  # ACKS_QUEUE records unacknowledged: wait for acknowledgements
                        poll(0.001)
                        if perf() >= end:
                            break
                if not sent % 500:
                    poll(0)
                if perf() >= end:
                    break
        poll(0)
        pending = len(p)  # queued or in flight: not acknowledged within the window
        window = perf() - t0
        delivered = sent - pending - len(failed)
        left = p.flush(DEADLINE_S)
        out.put(("done", index, {"sent": sent, "delivered": delivered, "window_s": window, "left": left,
                                 "failed": failed[:3], "errors": errors[:3]}))
    except Exception as e:  # reported to the parent, which notes it
        out.put(("error", index, f"{type(e).__name__}: {e}"))



def acks_run(broker: KafkalogBroker, producers: int, acks: str, seconds: float, partitions: int) -> dict:
    """One run of `producers` producer processes for `seconds` with `acks`, on a fresh topic."""
    import queue
    ctx = multiprocessing.get_context("spawn")
    topic = f"acks-{acks}-{producers}-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions)
    out, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=acks_producer, args=(broker.bootstrap, topic, i % partitions, acks, seconds, i, go,
                                                     out), daemon=True) for i in range(producers)]

    def collect(kind: str, timeout: float) -> dict:
        got, end = {}, time.monotonic() + timeout
        while len(got) < producers:
            try:
                msg = out.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{producers - len(got)} of {producers} producers not {kind} within "
                                   f"{timeout:.0f} s") from None
            if msg[0] == "error":
                raise RuntimeError(f"producer {msg[1]}: {msg[2]}")
            got[msg[1]] = msg[2] if len(msg) > 2 else None
        return got

    try:
        for pr in procs:
            pr.start()
        collect("ready", 120 + producers)
        cpu0 = broker.cpu()
        go.set()
        time.sleep(seconds)
        broker_cpu = broker.cpu() - cpu0
        done = collect("done", seconds + DEADLINE_S)
        problems = [f"producer {i}: {r['left']} not delivered, {r['failed'] or r['errors']}"
                    for i, r in sorted(done.items()) if r["left"] or r["failed"]]
        if problems:
            raise RuntimeError("; ".join(problems[:3]))
        sent = sum(r["sent"] for r in done.values()) + producers * ACKS_WARMUP
        stored = end_offsets(broker.bootstrap, topic, partitions)
        if stored != sent:  # every record sent is stored, once
            raise RuntimeError(f"{sent} records sent (warm-up included), the partitions end at {stored}")
        rate = sum(r["delivered"] / r["window_s"] for r in done.values())
        return {"producers": producers, "acks": acks, "records": sum(r["delivered"] for r in done.values()),
                "sent": sent - producers * ACKS_WARMUP, "seconds": seconds, "msg_s": rate,
                "mb_s": rate * VALUE_BYTES / MB, "broker_cpu_s": broker_cpu}
    finally:
        go.set()  # a producer still waiting (another failed first) produces its window and ends
        for pr in procs:
            if pr.pid is not None:
                pr.join(timeout=seconds + 30)
                if pr.is_alive():
                    pr.kill()
                    pr.join(timeout=10)
        out.close()
        if broker.alive():
            try:
                delete_topics(broker.bootstrap, [topic])
            except Exception:  # best effort
                pass



def run_acks(scratch: str, pythonpath: str | None, args, report: dict, why: dict) -> None:
    """a1: the acks=1 and acks=all runs of each producer count, alternating, on one kafkalog serve."""
    res, notes = report["results"], report["notes"]
    if pythonpath is None:
        return
    try:
        broker = KafkalogBroker(scratch, pythonpath, args.override or ()).start()
    except Unavailable as e:
        why["kafkalog"] = str(e)
        return
    try:
        for n in ACKS_PRODUCERS:
            runs: dict[str, list] = {"1": [], "all": []}
            for r in range(args.repeat):
                for acks in ("1", "all"):
                    if not broker.alive():
                        continue
                    print(f"  {n} producer(s), acks={acks} (run {r + 1}/{args.repeat}) ...", flush=True)
                    try:
                        runs[acks].append(acks_run(broker, n, acks, args.acks_seconds, args.acks_partitions))
                    except Exception as e:  # one cell failing must not end the run
                        notes.append(broker.failure(f"acks={acks} with {n} producers", e,
                                                    "; the remaining runs are skipped"))
            for acks, rs in runs.items():
                if rs:
                    res[f"acks/{n}/{acks}"] = median_by_rate(rs)
        if broker.alive():
            res["after-load/kafkalog"] = broker.memory()
    finally:
        rc = broker.stop()
        if rc not in (0, None):
            notes.append(f"kafkalog serve exited with {rc} on SIGTERM")
