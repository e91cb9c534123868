"""Group rebalances: kafkalog serve beside Apache Kafka 4.4, the same librdkafka consumers, as ratios (issue 24).

    python bench/rebalance.py [--members 32] [--partitions 64] [--reps 3]

Per broker (each alone on the machine's 2 cores, group.initial.rebalance.delay.ms 0 on both) and per protocol:

- ``form``: MEMBERS confluent-kafka consumers subscribe at once; seconds until every one holds its share and the
  shares cover the topic's partitions exactly once;
- ``join``: MEMBERS - 1 members are stable; one more subscribes; seconds until the group is stable again with it;
- ``restart``: a member closes and a new one takes its place (a static member: the same group.instance.id, which
  Kafka and kafkalog answer without a rebalance; dynamic ones: a leave and a join); seconds until it holds
  partitions again with the group stable.

Protocols: ``eager`` (range), ``cooperative`` (cooperative-sticky, KIP-429), ``static`` (range with
group.instance.id, KIP-345), ``kip848`` (group.protocol=consumer: the broker's uniform assignor). All consumers live
in this process and are polled round-robin (poll(0) each, then 5 ms of sleep), so the times include the clients' own
steps; both brokers get the same clients. Median of ``--reps`` runs (a fresh group each). Ratio = kafkalog / Kafka
(≤ 1 is the goal: no slower than Kafka).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers.procs import each_broker  # noqa: E402
from harness import progress, snapshot_kafkalog  # noqa: E402

PROTOCOLS = {
    "eager": {"partition.assignment.strategy": "range"},
    "cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
    "static": {"partition.assignment.strategy": "range"},
    "kip848": {"group.protocol": "consumer"},  # the broker assigns (uniform by default); no client-side settings
}
STABLE_TIMEOUT_S = 180.0  # a failure guard only: a run that does not settle is reported, not timed


def consumer(bootstrap: str, group: str, topic: str, proto: str, index: int):
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "broker.address.family": "v4", "auto.offset.reset": "latest", "client.id": f"bench-{index}",
            **PROTOCOLS[proto]}
    if proto != "kip848":  # KIP-848 takes its session and heartbeat interval from the broker
        conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    if proto == "static":
        conf["group.instance.id"] = f"member-{index}"
    c = Consumer(conf)
    c.subscribe([topic])
    return c


def stable(members, partitions: int) -> bool:
    seen = []
    for c in members:
        a = c.assignment()
        if not a:
            return False
        seen.extend(p.partition for p in a)
    return len(seen) == partitions and len(set(seen)) == partitions


def settle(members, partitions: int) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < STABLE_TIMEOUT_S:
        for c in members:
            c.poll(0)
        if stable(members, partitions):
            return time.perf_counter() - t0
        time.sleep(0.005)
    raise RuntimeError(f"the group of {len(members)} did not settle in {STABLE_TIMEOUT_S} s")


def one_run(bootstrap: str, topic: str, partitions: int, n: int, proto: str) -> dict:
    group = f"bench-{proto}-{uuid.uuid4().hex[:8]}"
    out = {}
    members = [consumer(bootstrap, group, topic, proto, i) for i in range(n)]
    try:
        out["form"] = settle(members, partitions)
        extra = members.pop()  # join: n-1 stable, one more
        extra.close()
        settle(members, partitions)
        t0 = time.perf_counter()
        members.append(consumer(bootstrap, group, topic, proto, n - 1))
        settle(members, partitions)
        out["join"] = time.perf_counter() - t0
        leaving = members.pop(0)  # restart: close one, a new one (the same instance id when static) comes
        leaving.close()
        t0 = time.perf_counter()
        members.insert(0, consumer(bootstrap, group, topic, proto, 0))
        settle(members, partitions)
        out["restart"] = time.perf_counter() - t0
    finally:
        for c in members:
            c.close()
    return out


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def measure(broker, args) -> dict:
    topic = f"rebalance-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, args.partitions)
    res = {}
    for proto in args.protocols:
        runs = []
        for r in range(args.reps):
            progress(f"{broker.name}: {proto} run {r + 1}/{args.reps}")
            runs.append(one_run(broker.bootstrap, topic, args.partitions, args.members, proto))
        res[proto] = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
        res[proto]["cpu_s"] = broker.cpu()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=32)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="a comma-separated subset of " +
                    ", ".join(PROTOCOLS))
    args = ap.parse_args(argv)
    args.protocols = [p for p in args.protocols.split(",") if p]
    unknown = sorted(set(args.protocols) - set(PROTOCOLS))
    if unknown:
        ap.error(f"unknown protocols {unknown}")
    results, notes = {}, []
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-rebalance-") as scratch:
        snapshot = snapshot_kafkalog(str(Path(scratch) / "snapshot"))
        for name, broker in each_broker(scratch, snapshot, notes):
            results[name] = measure(broker, args)
    print(f"\n{args.members} members, {args.partitions} partitions, median of {args.reps} (seconds; ratio = "
          f"kafkalog / Kafka, goal <= 1)")
    print(f"{'protocol':<12} {'step':<8} {'kafka':>8} {'kafkalog':>9} {'ratio':>7}")
    for proto in args.protocols:
        for step in ("form", "join", "restart"):
            k = results.get("kafka", {}).get(proto, {}).get(step)
            m = results.get("kafkalog", {}).get(proto, {}).get(step)
            ratio = f"{m / k:.2f}x" if k and m else "-"
            print(f"{proto:<12} {step:<8} {k if k is None else f'{k:.2f}':>8} "
                  f"{m if m is None else f'{m:.2f}':>9} {ratio:>7}")
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
