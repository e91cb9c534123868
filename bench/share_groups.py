#!/usr/bin/env python3
"""Share groups (KIP-932, issue 27): records per second through one share group of 1, 4 and 16 Java
KafkaShareConsumers, Apache Kafka 4.4 against kafkalog serve on the same machine, one broker at a time.

    python bench/share_groups.py [--records 200000] [--consumers 1 --consumers 4 --consumers 16] [--partitions 16]

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
    args = ap.parse_args(argv)
    counts = args.consumers or [1, 4, 16]
    lab, _ = kafka_libs()
    results: dict = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-share-") as scratch:
        snapshot = snapshot_kafkalog(str(Path(scratch) / "snapshot"))
        for name, broker in each_broker(scratch, snapshot, notes, names=tuple(args.brokers.split(",")),
                                        kafkalog_overrides=("share.auto.offset.reset=earliest",)):
            topic = f"share-bench-{uuid.uuid4().hex[:6]}"
            progress(f"{name}: {args.records:,} records into {topic}")
            load(broker.bootstrap, topic, args.partitions, args.records, args.value_bytes)
            for c in counts:
                progress(f"{name}: {c} share consumer(s)")
                res = read(lab, broker, topic, c, args.records, args.max_poll)
                results[(name, c)] = res
                if "error" in res:
                    notes.append(f"{name}, {c} consumers: {res['error']}")
    print(f"\n{args.records:,} records of {args.value_bytes} bytes in {args.partitions} partitions, one share group a "
          f"row, implicit acknowledgement (records/s; ratio = kafkalog / Kafka, goal >= 1.0)")
    print(f"{'consumers':>9} {'kafka rec/s':>12} {'kafkalog rec/s':>15} {'ratio':>7}   deliveries (kafka / kafkalog), "
          f"broker CPU s (kafka / kafkalog)")
    for c in counts:
        k, m = results.get(("kafka", c), {}), results.get(("kafkalog", c), {})

        def rate(x):
            return args.records / x["seconds"] if x.get("seconds", -1) > 0 and "error" not in x else None
        kr, mr = rate(k), rate(m)
        ratio = f"{mr / kr:.2f}x" if kr and mr else "-"
        print(f"{c:>9} {kr or 0:>12,.0f} {mr or 0:>15,.0f} {ratio:>7}   {k.get('deliveries', '-')} / "
              f"{m.get('deliveries', '-')}, {k.get('broker_cpu_s', 0):.1f} / {m.get('broker_cpu_s', 0):.1f}")
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
