"""bench/broker.py's perf tools (k2): Kafka's own kafka-producer-perf-test and kafka-consumer-perf-test (from the
compatibility lab's jars) against each broker, the brokers alternating, best of R; their summary lines parsed."""

from __future__ import annotations

import re
import uuid

from harness import Unavailable, best_by_rate, compat_lab

from .clients import DEADLINE_S, VALUE_BYTES, create_topic, delete_topics, end_offsets
from .procs import KAFKA_JVM_FLAGS, BrokerProcess

PERF_TOOL_JVM_OPTS = ["-Xmx256m", *KAFKA_JVM_FLAGS]

PRODUCER_PERF_LINE = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max "
    r"latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th", re.M)


def parse_producer_perf(out: str, n: int) -> dict:
    """kafka-producer-perf-test's summary line (the one with percentiles; MB there is 2^20 bytes)."""
    m = PRODUCER_PERF_LINE.search(out)
    if m is None or int(m.group(1)) != n:
        raise RuntimeError(f"no summary line for {n} records in: {out[-600:]!r}")
    return {"records": n, "msg_s": float(m.group(2)), "tool_mb_s": float(m.group(3)),
            "avg_ms": float(m.group(4)), "max_ms": float(m.group(5)), "p50_ms": int(m.group(6)),
            "p99_ms": int(m.group(8)), "summary": m.group(0)}


def parse_consumer_perf(out: str, n: int) -> dict:
    """kafka-consumer-perf-test's header and values lines. msg_s is the tool's fetch.nMsg.sec (the group join, in
    rebalance.time.ms, left out); its nMsg.sec over the whole run is kept as overall_msg_s."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    for i, ln in enumerate(lines[:-1]):
        if ln.startswith("start.time,"):
            row = dict(zip([k.strip() for k in ln.split(",")], [v.strip() for v in lines[i + 1].split(",")]))
            break
    else:
        raise RuntimeError(f"no summary lines in: {out[-600:]!r}")
    got = int(row["data.consumed.in.nMsg"])
    if got != n:
        raise RuntimeError(f"consumed {got} of {n} records: {out[-600:]!r}")
    return {"records": n, "msg_s": float(row["fetch.nMsg.sec"]), "tool_mb_s": float(row["fetch.MB.sec"]),
            "overall_msg_s": float(row["nMsg.sec"]), "overall_tool_mb_s": float(row["MB.sec"]),
            "rebalance_ms": float(row["rebalance.time.ms"]), "fetch_ms": float(row["fetch.time.ms"]),
            "summary": f"{ln} / {lines[i + 1]}"}


def perf_test_run(broker: BrokerProcess, n: int, runs: dict) -> None:
    """kafka-producer-perf-test puts n x 100-byte records on a fresh topic (acks=1, linger.ms 5, batch.size 65536),
    the partition's end offset is checked, then kafka-consumer-perf-test reads the n records back in a fresh group;
    each phase's parsed summary is appended to runs[phase] as it completes (broker CPU over the tool's whole run,
    its JVM start included)."""
    lab = compat_lab()
    topic = f"perf-test-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    try:
        cpu0 = broker.cpu()
        r = lab.run_java(lab.KAFKA_TOOLS["kafka-producer-perf-test"],
                         ["--topic", topic, "--num-records", n, "--record-size", VALUE_BYTES, "--throughput", -1,
                          "--command-property", f"bootstrap.servers={broker.bootstrap}", "acks=1", "linger.ms=5",
                          "batch.size=65536"], timeout=DEADLINE_S, jvm_opts=PERF_TOOL_JVM_OPTS)
        cpu = broker.cpu() - cpu0
        if r.returncode != 0:
            raise RuntimeError(f"kafka-producer-perf-test exited {r.returncode}: {(r.stdout + r.stderr)[-600:]!r}")
        produced = dict(parse_producer_perf(r.stdout, n), broker_cpu_s=cpu)
        stored = end_offsets(broker.bootstrap, topic, 1)
        if stored != n:
            raise RuntimeError(f"kafka-producer-perf-test sent {n} records, the partition ends at {stored}")
        runs["produce"].append(produced)
        cpu0 = broker.cpu()
        r = lab.run_java(lab.KAFKA_TOOLS["kafka-consumer-perf-test"],
                         ["--bootstrap-server", broker.bootstrap, "--topic", topic, "--num-records", n,
                          "--group", f"perf-{topic}", "--timeout", 60_000], timeout=DEADLINE_S,
                         jvm_opts=PERF_TOOL_JVM_OPTS)
        cpu = broker.cpu() - cpu0
        if r.returncode != 0:
            raise RuntimeError(f"kafka-consumer-perf-test exited {r.returncode}: {(r.stdout + r.stderr)[-600:]!r}")
        runs["consume"].append(dict(parse_consumer_perf(r.stdout, n), broker_cpu_s=cpu))
    finally:
        if broker.alive():
            try:
                delete_topics(broker.bootstrap, [topic])
            except Exception:  # best effort
                pass



def perf_test_probe(broker: BrokerProcess) -> None:
    """A short kafka-producer-perf-test (1,000 records, 5 s delivery timeout) on a broker no goal needs (Tansu):
    Unavailable, with the reason, when the Java client's records are not acknowledged (the full runs would each wait
    out the producer's 120 s delivery timeout)."""
    lab = compat_lab()
    topic = f"perf-probe-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    r = lab.run_java(lab.KAFKA_TOOLS["kafka-producer-perf-test"],
                     ["--topic", topic, "--num-records", 1000, "--record-size", VALUE_BYTES, "--throughput", -1,
                      "--command-property", f"bootstrap.servers={broker.bootstrap}", "acks=1", "linger.ms=5",
                      "batch.size=65536", "request.timeout.ms=3000", "delivery.timeout.ms=5000"],
                     timeout=120, jvm_opts=PERF_TOOL_JVM_OPTS)
    try:
        parse_producer_perf(r.stdout, 1000)
    except RuntimeError:
        errors = [ln.strip() for ln in r.stderr.splitlines() if "Exception" in ln]
        m = re.search(r"^(\d+) records sent", r.stdout, re.M)
        raise Unavailable(f"kafka-producer-perf-test against {broker.name}: "
                          f"{m.group(1) if m else 'no summary line:'} of 1,000 records acknowledged "
                          f"({errors[0][:200] if errors else 'exit ' + str(r.returncode)}); "
                          f"{broker.name}'s log ends: {broker.log_tail(160)!r}") from None
    finally:
        try:
            delete_topics(broker.bootstrap, [topic])
        except Exception:  # best effort
            pass



def best_per_phase(runs: dict) -> dict:
    """runs: phase -> list of results; per phase, the one with the highest rate, and every run's rate."""
    return {phase: best_by_rate(rs) for phase, rs in runs.items() if rs}


def run_perf_tests(brokers: dict, n: int, repeat: int, report: dict) -> None:
    """k2: Kafka's perf tools against each broker, the brokers alternating, best of ``repeat`` per phase."""
    res, notes, perf_why = report["results"], report["notes"], report["perf_test_why"]
    targets = {}
    for name, b in brokers.items():
        if not b.alive():
            continue
        if name == "tansu":  # no goal needs it: run it only when it works (Tansu 0.6.0 does not)
            print(f"  kafka-producer-perf-test probe on {name} ...", flush=True)
            try:
                perf_test_probe(b)
            except Exception as e:
                perf_why[name] = str(e)
                print(f"  {name}: {e}", flush=True)
                continue
        targets[name] = b
    runs = {name: {"produce": [], "consume": []} for name in targets}
    for r in range(repeat):
        for name, b in targets.items():
            if not b.alive():
                continue
            print(f"  kafka-producer/consumer-perf-test x {n:,} on {name} (run {r + 1}/{repeat}) ...", flush=True)
            try:
                perf_test_run(b, n, runs[name])
            except Exception as e:  # one run failing must not end the others
                notes.append(b.failure(f"perf tools on {name}", e))
    for name, rs in runs.items():
        if any(rs.values()):
            res[f"perf-test/{name}"] = best_per_phase(rs)
