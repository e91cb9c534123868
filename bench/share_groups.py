#!/usr/bin/env python3
"""Share groups (KIP-932, issue 27): records per second through one share group of 1, 4 and 16 Java
KafkaShareConsumers, Apache Kafka 4.4 against kafkalog serve on the same machine, one broker at a time, the brokers
taking turns for --rounds rounds (kafka, kafkalog, kafka, kafkalog, ...; the median of each's rounds is its row: on a
shared machine the disk's and the CPU's speed drift over minutes, and brokers run one after the other would each
get their own moment).

    python bench/share_groups.py [--records 200000] [--consumers 1 --consumers 4 --consumers 16] [--partitions 16]
                                 [--rounds 3]

Method: per broker (bench/brokers/procs.py's each_broker: fresh, alone), a topic of --partitions partitions gets
--records records of --value-bytes bytes (confluent-kafka, acks=all, before any timing). Then, per consumer count C,
a new share group reads them: one JVM (bench/brokers/ShareBench.java) runs C KafkaShareConsumers, one thread each,
implicit acknowledgement, max.poll.records --max-poll; the group's share.auto.offset.reset is earliest (a group
config on Kafka; kafkalog's server key of that name). Time: from the first record any consumer got to the last of
the --records distinct records delivered (the consumers' start-up and the final commitSync are outside it).
records/s = records / time; the ratio is kafkalog / Kafka (goal >= 1.0). Deliveries above the record count are
redeliveries (a lock that expired). Broker CPU seconds over each read are printed beside.

Benchmarks are not tests: the exit status never depends on the goal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers.procs import each_broker  # noqa: E402
from harness import kafka_libs, progress, snapshot_kafkalog  # noqa: E402

JAVA = Path(__file__).resolve().parent / "brokers" / "ShareBench.java"


def load(bootstrap: str, topic: str, partitions: int, n: int, value_bytes: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
        f.result(timeout=60)
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "acks": "all", "linger.ms": 5,
                  "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
    value = b"v" * value_bytes
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0, "records left unsent"


def read(lab, broker, topic: str, consumers: int, n: int, max_poll: int) -> dict:
    group = f"bench-share-{consumers}-{uuid.uuid4().hex[:6]}"
    cpu0 = broker.cpu()
    r = lab.run_java_source(JAVA, [broker.bootstrap, topic, group, str(consumers), str(n), str(max_poll), "600000"],
                            timeout=700, jvm_opts=["-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true"])
    cpu = broker.cpu() - cpu0
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": f"ShareBench exited {r.returncode}: {r.stdout[-800:]} {r.stderr[-1500:]}"}
    out = json.loads(lines[-1])
    out["broker_cpu_s"] = cpu
    if out["timed_out"] or out["records"] < n:
        out["error"] = f"{out['records']} of {n} records within the deadline"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--consumers", type=int, action="append", help="consumer counts (repeatable; 1, 4, 16)")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--max-poll", type=int, default=500)
    ap.add_argument("--brokers", default="kafka,kafkalog")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the brokers taking turns (median kept)")
    args = ap.parse_args(argv)
    counts = args.consumers or [1, 4, 16]
    lab, _ = kafka_libs()
    results: dict = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-share-") as scratch:
        snapshot = snapshot_kafkalog(str(Path(scratch) / "snapshot"))
        for rnd in range(args.rounds):
            for name, broker in each_broker(scratch, snapshot, notes, names=tuple(args.brokers.split(",")),
                                            kafkalog_overrides=("share.auto.offset.reset=earliest",)):
                topic = f"share-bench-{uuid.uuid4().hex[:6]}"
                progress(f"round {rnd + 1}/{args.rounds}, {name}: {args.records:,} records into {topic}")
                load(broker.bootstrap, topic, args.partitions, args.records, args.value_bytes)
                for c in counts:
                    progress(f"round {rnd + 1}/{args.rounds}, {name}: {c} share consumer(s)")
                    res = read(lab, broker, topic, c, args.records, args.max_poll)
                    results.setdefault((name, c), []).append(res)
                    if "error" in res:
                        notes.append(f"round {rnd + 1}, {name}, {c} consumers: {res['error']}")
    print(f"\n{args.records:,} records of {args.value_bytes} bytes in {args.partitions} partitions, one share group a "
          f"row, implicit acknowledgement (records/s, median of {args.rounds} rounds taking turns; ratio = kafkalog / "
          f"Kafka, goal >= 1.0)")
    print(f"{'consumers':>9} {'kafka rec/s':>12} {'kafkalog rec/s':>15} {'ratio':>7}   deliveries (kafka / kafkalog), "
          f"mean broker CPU s (kafka / kafkalog)")

    def rates(runs):
        return [args.records / x["seconds"] for x in runs if x.get("seconds", -1) > 0 and "error" not in x]

    for c in counts:
        k, m = results.get(("kafka", c), []), results.get(("kafkalog", c), [])
        kr, mr = rates(k), rates(m)
        km, mm = (statistics.median(kr) if kr else None), (statistics.median(mr) if mr else None)
        ratio = f"{mm / km:.2f}x" if km and mm else "-"
        each = " | ".join(f"{x:,.0f}" for x in kr) + " ; " + " | ".join(f"{x:,.0f}" for x in mr)
        print(f"{c:>9} {km or 0:>12,.0f} {mm or 0:>15,.0f} {ratio:>7}   "
              f"{[x.get('deliveries', '-') for x in k]} / {[x.get('deliveries', '-') for x in m]}, "
              f"{sum(x.get('broker_cpu_s', 0) for x in k) / max(1, len(k)):.1f} / "
              f"{sum(x.get('broker_cpu_s', 0) for x in m) / max(1, len(m)):.1f}   rounds (kafka ; kafkalog): {each}")
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
