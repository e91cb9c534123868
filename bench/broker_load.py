"""The broker under load: many client processes mixing produce, fetch (with KIP-227 sessions) and quotas.

    python bench/broker_load.py [--clients 50] [--duration 60] [--quota 200K]

One `kafkalog serve` subprocess on disk; CLIENTS processes on 127.0.0.1, for DURATION seconds:
  * producers (confluent-kafka, acks=all, idempotent) writing keyed records to a 12-partition topic; each keeps the
    (partition, offset, value) of every acknowledged record;
  * consumers (kafka-python, incremental fetch sessions on) in one group reading that topic, counting records;
  * capped producers and capped consumers (client ids with a --quota override) pushing as fast as they can.
Then: every acknowledged record is looked up in the data dir (read-only, beside the broker) — none may be missing
or different; client errors are counted (must be 0); capped clients' rates over the last half of the run are
compared with their quota; the broker's RSS and CPU are reported.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPIC = "load"
FEED = "feed"
PARTITIONS = 12


def _producer(idx: int, bs: str, start_at: float, stop_at: float, out: str, capped: bool) -> None:
    from confluent_kafka import Producer
    acked, errors = [], []
    cid = f"capped-producer-{idx}" if capped else f"producer-{idx}"

    def done(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value().decode(), time.time()))
    # a bounded local queue: a producer over its quota waits for the broker instead of piling up requests that
    # would time out in the muted connection's socket buffer
    p = Producer({"bootstrap.servers": bs, "client.id": cid, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.size": 16384, "queue.buffering.max.kbytes": 1024,
                  "error_cb": lambda e: errors.append(str(e))})
    p.list_topics(timeout=30)  # connected before the clock starts
    time.sleep(max(0.0, start_at - time.time()))
    n = 0
    while time.time() < stop_at:
        v = f"{cid}-{n}" + ("." * 4000 if capped else "")  # capped: payload ~ the bytes the quota counts
        try:
            p.produce(TOPIC if not capped else FEED, v.encode(), key=str(n % 97).encode(), on_delivery=done)
            n += 1
        except BufferError:
            p.poll(0.01)
            continue
        if not capped and n % 50 == 0:
            p.poll(0.002)  # an app's pace, not a flood: the capped clients are the flood
        else:
            p.poll(0)
    p.flush(60)
    Path(out).write_text(json.dumps({"kind": "producer", "capped": capped, "client_id": cid, "acked": acked,
                                     "errors": errors}))


def _consumer(idx: int, bs: str, start_at: float, stop_at: float, out: str, capped: bool) -> None:
    from kafka import KafkaConsumer
    cid = f"capped-consumer-{idx}" if capped else f"consumer-{idx}"
    c = KafkaConsumer(bootstrap_servers=bs, client_id=cid, group_id=None if capped else "load-group",
                      auto_offset_reset="earliest", enable_incremental_fetch_sessions=True,
                      max_partition_fetch_bytes=65536)
    if capped:
        from kafka import TopicPartition
        c.assign([TopicPartition(FEED, p) for p in range(PARTITIONS)])
    else:
        c.subscribe([TOPIC])
    count, nbytes, errors, timeline = 0, 0, [], []
    while time.time() < start_at:  # join the group (and stay in it) before the clock starts
        c.poll(timeout_ms=200)
    while time.time() < stop_at:
        try:
            for recs in c.poll(timeout_ms=200).values():
                count += len(recs)
                b = sum(len(r.value) for r in recs)
                nbytes += b
                timeline.append((time.time(), b))
        except Exception as e:  # counted, reported
            errors.append(repr(e))
    c.close()
    Path(out).write_text(json.dumps({"kind": "consumer", "capped": capped, "client_id": cid, "count": count,
                                     "bytes": nbytes, "errors": errors, "timeline": timeline}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--quota", default="200K", help="bytes/s of each capped client (producers and consumers)")
    ap.add_argument("--grace", type=float, default=None, help="seconds for the clients to start and the group to "
                    "form before the clock starts (default: 1 s per client)")
    args = ap.parse_args(argv)
    import psutil

    from kafkalog.broker.quotas import parse_rate
    quota = parse_rate(args.quota, "--quota")
    if args.grace is None:
        args.grace = float(args.clients)
    n = args.clients
    kinds = (["producer"] * (n * 2 // 5) + ["consumer"] * (n * 2 // 5))
    kinds += ["capped-producer", "capped-consumer"] * ((n - len(kinds)) // 2)
    kinds += ["producer"] * (n - len(kinds))
    capped_ids = [f"capped-producer-{i}" for i, k in enumerate(kinds) if k == "capped-producer"]
    capped_cons = [f"capped-consumer-{i}" for i, k in enumerate(kinds) if k == "capped-consumer"]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        overrides = [f"quota.producer.override={','.join(f'{c}:{int(quota)}' for c in capped_ids)}",
                     f"quota.consumer.override={','.join(f'{c}:{int(quota)}' for c in capped_cons)}",
                     "group.initial.rebalance.delay.ms=1000", f"num.partitions={PARTITIONS}"]
        cmd = [sys.executable, "-m", "kafkalog", "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0"]
        for o in overrides:
            cmd += ["--override", o]
        broker = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(Path(tmp) / "broker.log", "w"),
                                  text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        line = broker.stdout.readline()
        m = re.search(r"listening on (\S+)", line)
        if not m:
            print("broker did not start:", line, (Path(tmp) / "broker.log").read_text()[-2000:])
            return 1
        bs = m.group(1)
        from kafka.admin import KafkaAdminClient, NewTopic
        adm = KafkaAdminClient(bootstrap_servers=bs)
        adm.create_topics([NewTopic(TOPIC, PARTITIONS, 1), NewTopic(FEED, PARTITIONS, 1)])
        adm.close()
        bp = psutil.Process(broker.pid)
        cpu0 = None
        # 50 Python processes take a while to start on 2 cores: everyone connects (and the group forms) during a
        # grace period; the measured run starts at the same instant for all
        t_start = time.time() + args.grace
        stop_at = t_start + args.duration
        procs = []
        ctx = mp.get_context("spawn")
        for i, kind in enumerate(kinds):
            out = str(Path(tmp) / f"client-{i}.json")
            target = _producer if kind.endswith("producer") else _consumer
            pr = ctx.Process(target=target, args=(i, bs, t_start, stop_at, out, kind.startswith("capped")))
            pr.start()
            procs.append((pr, out))
        rss_peak = 0
        while any(pr.is_alive() for pr, _ in procs):
            rss_peak = max(rss_peak, bp.memory_info().rss)
            if cpu0 is None and time.time() >= t_start:
                cpu0 = sum(bp.cpu_times()[:2])
            time.sleep(0.5)
            if time.time() > stop_at + 180:
                break
        wall = time.time() - t_start
        cpu = sum(bp.cpu_times()[:2]) - (cpu0 or 0.0)
        results = []
        for pr, out in procs:
            pr.join(timeout=5)
            try:
                results.append(json.loads(Path(out).read_text()))
            except (OSError, ValueError):
                results.append({"kind": "lost", "errors": ["client process left no result"], "client_id": out})
        # every acknowledged record, looked up beside the running broker
        from kafkalog import LogStore
        missing = 0
        acked_total = 0
        with LogStore(data, read_only=True) as store:
            wanted: dict[tuple[str, int], dict[int, str]] = {}
            for r in results:
                if r["kind"] == "producer":
                    topic = FEED if r["capped"] else TOPIC
                    for p, off, v, _t in r["acked"]:
                        wanted.setdefault((topic, p), {})[off] = v
                        acked_total += 1
            for (topic, p), offs in wanted.items():
                log = store.log(topic, p)
                lo, hi = min(offs), max(offs) + 1
                seen = {rec.offset: rec.value.decode() for rec in log.records(lo, hi)}
                missing += sum(1 for off, v in offs.items() if seen.get(off) != v)
        broker.terminate()
        broker.wait(timeout=60)
        log_tail = (Path(tmp) / "broker.log").read_text().splitlines()[-15:]
    errors = [(r["client_id"], e) for r in results for e in r.get("errors", [])]
    half = t_start + args.duration / 2
    print(f"{n} clients for {args.duration:.0f} s ({kinds.count('producer')} producers, {kinds.count('consumer')} "
          f"consumers in one group, {len(capped_ids)} capped producers, {len(capped_cons)} capped consumers, "
          f"quota {quota:.0f} B/s each)")
    print(f"acknowledged records: {acked_total}, missing or different in the log: {missing}")
    consumed = sum(r.get("count", 0) for r in results if r["kind"] == "consumer" and not r["capped"])
    print(f"records consumed by the group: {consumed}")
    print(f"client errors: {len(errors)}" + "".join(f"\n  {c}: {e[:160]}" for c, e in errors[:10]))
    for r in results:
        if r["kind"] == "consumer" and r["capped"]:
            late = sum(b for t, b in r["timeline"] if half <= t < stop_at) / (stop_at - half)
            print(f"  {r['client_id']}: {late:.0f} B/s over the second half = {late / quota:.2f} x quota")
    for r in results:
        if r["kind"] == "producer" and r["capped"]:
            late = sum(len(v) for _p, _o, v, t in r["acked"] if half <= t < stop_at) / (stop_at - half)
            print(f"  {r['client_id']}: {late:.0f} B/s acknowledged over the second half = {late / quota:.2f} x quota")
    print(f"broker: peak RSS {rss_peak / 1e6:.0f} MB, CPU {cpu:.1f} s over {wall:.0f} s wall")
    if missing or errors or not consumed:
        print("broker log (tail):", *log_tail, sep="\n  ")
    return 0 if not missing and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
