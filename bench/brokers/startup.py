"""bench/broker.py's start-up (k3) and idle RSS of the brokers k1, k2 and k4 use: each broker spawned in turn until
a confluent-kafka producer's first record is acknowledged; the first broker of each kind stays up for the runs."""

from __future__ import annotations

import time
import uuid

from harness import Unavailable, perf

from .procs import BrokerProcess, make_broker

IDLE_SETTLE_S = 2.0       # the idle RSS sample: this long after the first round of start-ups
STARTUP_TIMEOUT_S = 180

def timed_start(broker: BrokerProcess, timeout: float) -> float:
    """Spawn ``broker``; seconds from the spawn until a confluent-kafka producer's first record, to a topic the broker
    auto-creates, is acknowledged (acks=1). The producer exists and holds the record before the spawn, retrying its
    connection and the topic's metadata every 10 ms, so the client's own set-up and back-off add at most ~10 ms."""
    from confluent_kafka import Producer
    acked: list = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "acks": 1, "linger.ms": 0,
                  "reconnect.backoff.ms": 5, "reconnect.backoff.max.ms": 10, "retry.backoff.ms": 10,
                  "retry.backoff.max.ms": 10, "topic.metadata.refresh.fast.interval.ms": 10,
                  "message.timeout.ms": int(timeout * 1000), "log_level": 0, "error_cb": lambda e: None})
    try:
        p.produce(f"startup-{uuid.uuid4().hex[:6]}", b"first record",
                  on_delivery=lambda err, msg: acked.append((perf(), err)))
        broker.spawn()
        end = broker.spawned_at + timeout
        while not acked:
            p.poll(0.01)
            if broker.proc.poll() is not None:
                raise Unavailable(f"{broker.name} exited with {broker.proc.returncode} while starting; "
                                  f"its log ends: {broker.log_tail(400)!r}")
            if perf() > end:
                raise Unavailable(f"{broker.name}: no record acknowledged within {timeout:.0f} s of the spawn; "
                                  f"its log ends: {broker.log_tail(400)!r}")
        at, err = acked[0]
        if err is not None:
            raise Unavailable(f"{broker.name}: the first record failed: {err}")
    finally:
        p.purge()
        p.flush(0)
    broker.wait_ready()  # kafkalog: its ready line names the port; Kafka: Metadata lists it (both true by now)
    return at - broker.spawned_at


def run_startup(scratch: str, pythonpath: str | None, names, args, report: dict, why: dict, timed: bool) -> dict:
    """k3 and k4 (idle): start-up trials, the brokers interleaved (round r starts each broker in turn, Kafka only in
    its first --kafka-startup-runs rounds). The first broker of each kind that starts is kept running (the throughput
    runs use it; its idle RSS is sampled IDLE_SETTLE_S after the first round), the other trials' brokers are stopped
    at once. ``timed`` False: one round only (the brokers are still started, and timed, this way)."""
    res, notes = report["results"], report["notes"]
    kept: dict[str, BrokerProcess] = {}
    runs: dict[str, list] = {name: [] for name in names}
    limit = {name: (args.kafka_startup_runs if name == "kafka" else args.startup_runs) if timed else 1
             for name in names}
    try:
        for r in range(max(limit.values(), default=0)):
            for name in names:
                if name in why or r >= limit[name]:
                    continue
                try:
                    b = make_broker(name, scratch, pythonpath, args)
                except Unavailable as e:
                    why[name] = str(e)
                    continue
                try:
                    seconds = timed_start(b, STARTUP_TIMEOUT_S)
                except BaseException as e:
                    b.stop()
                    if not isinstance(e, Exception):  # Ctrl-C: the broker being timed is stopped too
                        raise
                    msg = f"start-up of {name} (run {r + 1}) failed: {type(e).__name__}: {e}"
                    print("  " + msg, flush=True)
                    notes.append(msg)
                    continue
                fmt = "" if b.format_s is None else f" (storage format before it: {b.format_s:.2f} s)"
                print(f"  start-up of {name} (run {r + 1}/{limit[name]}): first record acknowledged "
                      f"{seconds:.3f} s after the spawn{fmt}", flush=True)
                runs[name].append({"seconds": seconds, "format_s": b.format_s})
                if name not in kept:
                    kept[name] = b
                else:
                    rc = b.stop()
                    if name == "kafkalog" and rc not in (0, None):
                        notes.append(f"kafkalog serve exited with {rc} on SIGTERM")
            if r == 0 and kept:
                time.sleep(IDLE_SETTLE_S)
                for name, b in kept.items():
                    if b.alive():
                        res[f"rss-idle/{name}"] = b.memory()
    except BaseException:
        for b in kept.values():
            b.stop()
        raise
    for name, rs in runs.items():
        if rs:
            best = min(rs, key=lambda x: x["seconds"])
            res[f"startup/{name}"] = dict(best, runs=[round(x["seconds"], 3) for x in rs],
                                          format_runs=[round(x["format_s"], 2) for x in rs if x["format_s"]])
    missing = [name for name in names if name not in kept and name not in why]
    for name in missing:
        why[name] = f"{name} did not start (see the notes)"
    return kept
