"""The differential compatibility lab: a real Apache Kafka (KRaft, one node) and `kafkalog serve`, side by side.

Plain module (no pytest in it), imported by tests/compat's conftest and tests as ``from .lab import ...`` (the
house way under ``--import-mode=importlib``, as tests/broker imports ``wire.py``). Offers:

- ``LAB_DIR``, ``KAFKA_VERSION``, ``kafka_libs()`` (fetches Kafka's jars with ``.ci/lab-kafka`` when the cache is
  missing), ``java_classpath()``;
- ``run_java(main, args, ...)``, ``run_java_source(path, args, ...)``, ``kafka_tool(name, args, ...)``: Java on
  Kafka's classpath, each a subprocess with a timeout, answered as a ``subprocess.CompletedProcess`` (text);
- ``KafkaBroker`` and ``KafkalogServer``: the same surface (``start(workdir)``, ``stop()``, ``bootstrap``, ``port``,
  ``log_dir``, ``pid``, ``rss()``, ``startup_s``, ``log_tail()``).

Every process the lab starts dies with the process that started it, however that one ends (tests/children.py): a
test run killed by the OOM killer or a CI timeout leaves no Kafka broker or ``kafkalog serve`` behind.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB_SCRIPT = REPO / ".ci" / "lab-kafka"
LAB_DIR = Path(os.environ.get("KAFKALOG_LAB_DIR") or Path.home() / ".cache" / "kafkalog-lab")
KAFKA_VERSION = "4.4.0"
KAFKA_HOME = LAB_DIR / f"kafka-{KAFKA_VERSION}"
LOG4J2_CONFIG = KAFKA_HOME / "log4j2.yaml"

# Which class each of Kafka's bin/<name>.sh scripts runs (read from apache/kafka's bin/*.sh; in 4.4.0 the configs,
# acls and dump-log tools live in kafka-tools under org.apache.kafka.tools, checked against the jars)
KAFKA_TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server-start": "kafka.Kafka",
}

# Short-lived JVMs (tools, test programs): a small heap, one GC thread, the C1 compiler only (starts ~30% faster)
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
BROKER_HEAP = ["-Xmx768m", "-Xms256m"]
BROKER_JVM_FLAGS = ["-XX:+UseG1GC", "-Djava.awt.headless=true"]


def _load_children():
    """tests/children.py (children that die with their parent), one copy per process (see its docstring)."""
    name = "kafkalog_test_children"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "children.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


children = _load_children()


class LabError(RuntimeError):
    """The lab itself could not do its part (no mvn, no java, a broker that would not start)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


# -- Kafka's jars and the JVM ------------------------------------------------------------------------------------

_libs_lock = threading.Lock()


def kafka_libs() -> Path:
    """The folder of Kafka's jars; runs ``.ci/lab-kafka`` (Maven Central) first when the cache is not complete."""
    libs = KAFKA_HOME / "libs"
    with _libs_lock:
        if (KAFKA_HOME / ".complete").is_file():
            return libs
        for tool in ("mvn", "java"):
            if shutil.which(tool) is None:
                raise LabError(f"the compatibility lab needs `{tool}` on PATH to fetch and run Apache Kafka "
                               f"{KAFKA_VERSION} (Debian: apt-get install maven openjdk-17-jdk-headless)")
        env = dict(os.environ, KAFKALOG_LAB_DIR=str(LAB_DIR), KAFKALOG_LAB_KAFKA_VERSION=KAFKA_VERSION)
        r = children.run(["bash", str(LAB_SCRIPT)], capture_output=True, text=True, env=env, timeout=900)
        if r.returncode != 0 or not (KAFKA_HOME / ".complete").is_file():
            raise LabError(f"{LAB_SCRIPT} failed ({r.returncode}) fetching Kafka {KAFKA_VERSION}:\n"
                           f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        return libs


def java_classpath(extra=()) -> str:
    """Kafka's classpath (every jar of kafka_libs()), after the given extra entries."""
    libs = kafka_libs()
    jars = sorted(str(p) for p in libs.glob("*.jar"))
    return os.pathsep.join([*map(str, extra), *jars])


def java_exe() -> str:
    java = shutil.which("java")
    if java is None:
        raise LabError("the compatibility lab needs `java` (17+) on PATH "
                       "(Debian: apt-get install openjdk-17-jdk-headless)")
    return java


# JVM unified logging (CDS notes, GC warnings) never on stdout, where the tools print their answers
JVM_LOG_OPTS = ["-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds*=off:stderr"]


def _jvm_command(main: str, args, jvm_opts, classpath_extra=(), log_file: str = "/dev/stderr") -> list[str]:
    # the JVM's own wildcard keeps command lines (and CompletedProcess reprs) short; same jars as java_classpath()
    cp = os.pathsep.join([*map(str, classpath_extra), str(kafka_libs() / "*")])
    return [java_exe(), *jvm_opts, *JVM_LOG_OPTS, f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Dkafkalog.lab.log={log_file}", "-cp", cp, main, *map(str, args)]


_cds_key: str | None = None


def _cds_archive(main: str) -> Path:
    """Where the class-data-sharing archive of ``main`` lives: keyed by the JVM and the jars (names, sizes, mtimes),
    so an archive never meets a classpath it was not made for (the JVM would ignore it anyway)."""
    global _cds_key
    if _cds_key is None:
        h = hashlib.sha256()
        java = os.path.realpath(java_exe())
        h.update(f"{java}:{os.stat(java).st_mtime_ns}".encode())
        for jar in sorted(kafka_libs().glob("*.jar")):
            st = jar.stat()
            h.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}".encode())
        _cds_key = h.hexdigest()[:16]
    return KAFKA_HOME / "cds" / f"{main}-{_cds_key}.jsa"


def run_java(main: str, args=(), timeout: float = 60, input: str | None = None, env: dict | None = None,
             classpath_extra=(), jvm_opts=None) -> subprocess.CompletedProcess:
    """Run ``main`` (a class with a main method) on Kafka's classpath and wait: a CompletedProcess with text
    stdout/stderr (Kafka's own log lines, WARN and up, go to stderr). subprocess.TimeoutExpired past ``timeout``
    (the JVM is killed).

    With the default JVM options and no extra classpath, each main class gets a dynamic class-data-sharing archive
    (made by its first successful run, kept under KAFKA_HOME/cds): later runs start about twice as fast."""
    opts = list(TOOL_JVM_OPTS if jvm_opts is None else jvm_opts)
    archive = dump = None
    if jvm_opts is None and not classpath_extra:
        archive = _cds_archive(main)
        if archive.is_file():
            opts.append(f"-XX:SharedArchiveFile={archive}")
        else:
            archive.parent.mkdir(parents=True, exist_ok=True)
            dump = archive.with_name(f".{archive.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
            opts.append(f"-XX:ArchiveClassesAtExit={dump}")
    cmd = _jvm_command(main, args, opts, classpath_extra)
    try:
        r = children.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                         env=None if env is None else dict(os.environ, **env),
                         stdin=subprocess.DEVNULL if input is None else None)
        if dump is not None and r.returncode == 0 and dump.is_file() and dump.stat().st_size > 0:
            os.replace(dump, archive)
        return r
    finally:
        if dump is not None and dump.exists():
            dump.unlink()


_compile_lock = threading.Lock()


def compile_java(path) -> tuple[Path, str]:
    """javac ``path`` against Kafka's classpath into a cache keyed by the source's hash: (classes dir, main class)."""
    path = Path(path)
    source = path.read_bytes()
    key = hashlib.sha256(source + KAFKA_VERSION.encode()).hexdigest()[:16]
    out = LAB_DIR / "classes" / f"{path.stem}-{key}"
    m = re.search(rb"^\s*package\s+([\w.]+)\s*;", source, re.M)
    main = (m.group(1).decode() + "." if m else "") + path.stem
    with _compile_lock:
        if (out / ".complete").is_file():
            return out, main
        javac = shutil.which("javac")
        if javac is None:
            raise LabError("the compatibility lab needs `javac` (JDK 17+) on PATH")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.stem}.", dir=out.parent))
        try:
            r = children.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", java_classpath(), "-d", str(tmp),
                              str(path)], capture_output=True, text=True, timeout=180)
            if r.returncode != 0:
                raise LabError(f"javac {path} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            (tmp / ".complete").touch()
            try:
                os.rename(tmp, out)
            except OSError:  # another process compiled the same source first
                if not (out / ".complete").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out, main


def run_java_source(path, args=(), timeout: float = 60, input: str | None = None, env: dict | None = None,
                    jvm_opts=None) -> subprocess.CompletedProcess:
    """Compile (cached) and run a single Java source file against Kafka's jars; its public class is its main."""
    classes, main = compile_java(path)
    return run_java(main, args, timeout=timeout, input=input, env=env, classpath_extra=[classes], jvm_opts=jvm_opts)


def kafka_tool(name: str, args=(), timeout: float = 60, input: str | None = None,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools by its script name (``kafka-topics``, ``kafka-console-consumer`` ...,
    with or without ``.sh``) from the jars, as its bin/ script would; see KAFKA_TOOLS."""
    name = name.removesuffix(".sh")
    if name not in KAFKA_TOOLS:
        raise ValueError(f"unknown Kafka tool {name!r}; known: {', '.join(sorted(KAFKA_TOOLS))}")
    return run_java(KAFKA_TOOLS[name], args, timeout=timeout, input=input, env=env)


# -- the brokers -------------------------------------------------------------------------------------------------

def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise LabError(f"no VmRSS for pid {pid}")


def kafka_cluster_id() -> str:
    """A random cluster id as Kafka writes them: 16 bytes, URL-safe base64 without padding, never starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _metadata_brokers(bootstrap: str, timeout: float) -> int:
    """How many brokers a Metadata request lists (0 when it fails): a KRaft broker lists itself once unfenced."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": int(timeout * 1000),
                         "broker.address.family": "v4"})
    try:
        md = admin.list_topics(timeout=timeout)
        return len(md.brokers)
    except Exception:
        return 0


class KafkaBroker:
    """Apache Kafka, one KRaft node (broker + controller) on 127.0.0.1: ``start(workdir)`` formats
    ``workdir/logs`` with the storage tool (``--standalone``) and runs ``kafka.Kafka workdir/server.properties``;
    it returns once the broker lists itself in a Metadata answer. ``extra`` adds or replaces server.properties keys
    (a key given as None is left out: Kafka's own default holds); ``heap`` and ``jvm_flags`` are the JVM's options.
    Its log (WARN and up) is ``workdir/server.log``, its stdout/stderr ``workdir/kafka.out``.

    ``start()`` is ``prepare()`` (ports, server.properties, the storage format), ``spawn()`` and ``wait_ready()``,
    again on new ports when one was taken meanwhile; a caller that times the start-up from the spawn (bench/broker.py)
    calls the three itself."""

    name = "kafka"

    def __init__(self, extra: dict | None = None, heap=BROKER_HEAP, jvm_flags=BROKER_JVM_FLAGS):
        self.extra = dict(extra or {})
        self.heap = list(heap)
        self.jvm_flags = list(jvm_flags)
        self.proc: subprocess.Popen | None = None
        self.workdir: Path | None = None
        self.port = 0
        self.controller_port = 0
        self.cluster_id = ""
        self.startup_s = 0.0   # kafka.Kafka launched -> Metadata lists the broker
        self.format_s = 0.0    # the storage tool's format
        self._spawned_at = 0.0

    # the same surface as KafkalogServer
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    bootstrap_servers = bootstrap

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        """Resident set size of the broker's JVM now, in bytes."""
        return _rss(self.proc.pid)

    def properties(self) -> dict:
        props = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.log_dir),
            "num.partitions": 1,
            "auto.create.topics.enable": "true",
            "group.initial.rebalance.delay.ms": 0,
            # KIP-848 groups: the target assignment computed in the heartbeat that needs it, as kafkalog does (4.3+
            # waits up to 1 s and may compute it on a background thread: answers then depend on timing)
            "group.consumer.assignment.interval.ms": 0,
            "group.consumer.assignor.offload.enable": "false",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            # one partition (default 50): the first share group on a busy 2-core machine otherwise waits for 50
            "share.coordinator.state.topic.num.partitions": 1,
            # a small machine: few threads
            "num.network.threads": 2,
            "num.io.threads": 4,
            "background.threads": 4,
            "num.recovery.threads.per.data.dir": 1,
            "num.replica.fetchers": 1,
        }
        props.update(self.extra)
        return {k: v for k, v in props.items() if v is not None}

    def _write_properties(self) -> Path:
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        return path

    def start(self, workdir, timeout: float = 90) -> KafkaBroker:
        for attempt in range(3):  # a free port may be taken between our probe and Kafka's bind: new ports, again
            try:
                self.prepare(workdir)
                self.spawn()
                self.wait_ready(timeout)
                return self
            except LabError:
                tail = self.log_tail()
                self.stop()
                if attempt == 2 or "Address already in use" not in tail:
                    raise
        return self

    def prepare(self, workdir) -> KafkaBroker:
        """New ports, ``workdir/server.properties`` and a freshly formatted ``workdir/logs`` (``format_s``); Kafka
        itself is not started yet."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = free_port(), free_port()
        shutil.rmtree(self.log_dir, ignore_errors=True)
        props = self._write_properties()
        self.cluster_id = kafka_cluster_id()
        t0 = time.monotonic()
        r = run_java("kafka.tools.StorageTool", ["format", "-t", self.cluster_id, "-c", props, "--standalone"],
                     timeout=120)
        self.format_s = time.monotonic() - t0
        if r.returncode != 0:
            raise LabError(f"kafka-storage format failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return self

    def spawn(self) -> None:
        """Launch ``kafka.Kafka`` on the prepared work dir and return at once (``wait_ready()`` waits)."""
        out = open(self.workdir / "kafka.out", "ab")
        cmd = _jvm_command("kafka.Kafka", [self.workdir / "server.properties"], [*self.heap, *self.jvm_flags],
                           log_file=str(self.workdir / "server.log"))
        self._spawned_at = time.monotonic()
        try:
            self.proc = children.popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       cwd=self.workdir, start_new_session=True)
        finally:
            out.close()

    def wait_ready(self, timeout: float = 90) -> None:
        """Until the broker lists itself in a Metadata answer (a KRaft broker does once it is unfenced), at most
        ``timeout`` seconds from the spawn; sets ``startup_s``."""
        deadline = self._spawned_at + timeout
        while True:
            if self.proc.poll() is not None:
                raise LabError(f"Kafka exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            if _port_open(self.port) and _metadata_brokers(self.bootstrap, 2.0) > 0:
                break
            if time.monotonic() > deadline:
                raise LabError(f"Kafka did not answer Metadata on {self.bootstrap} within {timeout} s:\n"
                               f"{self.log_tail()}")
            time.sleep(0.2)
        self.startup_s = time.monotonic() - self._spawned_at

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the broker's log and of its stdout/stderr (for failure messages)."""
        parts = []
        for name in ("server.log", "kafka.out"):
            p = self.workdir / name if self.workdir else None
            if p is not None and p.is_file():
                text = p.read_text(errors="replace")
                parts.append(f"--- {p} ---\n{text[-chars:]}")
        return "\n".join(parts) or "(no Kafka log written)"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (Kafka's controlled shutdown), then SIGKILL after ``timeout``; the exit status."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        return proc.returncode


def _kafkalog_env() -> dict:
    """The environment for `python -m kafkalog`: the kafkalog the tests import, never the source tree in the cwd
    (as tests/conftest.py's subprocess_env)."""
    import kafkalog
    env = dict(os.environ)
    root = str(Path(kafkalog.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONSAFEPATH"] = "1"
    return env


KAFKALOG_READY = re.compile(r"^kafkalog broker listening on 127\.0\.0\.1:(\d+)$")
KAFKALOG_DEFAULTS = {"auto.create.topics.enable": "true", "num.partitions": 1, "group.initial.rebalance.delay.ms": 0}


class KafkalogServer:
    """`python -m kafkalog serve --data-dir workdir/data --listen 127.0.0.1:0 --override ...` as a subprocess (the
    same surface as KafkaBroker). ``overrides`` add to or replace KAFKALOG_DEFAULTS. Its stderr is drained by a
    thread as it comes (``log_tail()``), so a chatty broker never blocks on a full pipe."""

    name = "kafkalog"

    def __init__(self, overrides: dict | None = None):
        self.overrides = dict(KAFKALOG_DEFAULTS, **(overrides or {}))
        self.proc: subprocess.Popen | None = None
        self.workdir: Path | None = None
        self.port = 0
        self.startup_s = 0.0
        self._err: list[bytes] = []
        self._drain: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    bootstrap_servers = bootstrap

    @property
    def log_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        return _rss(self.proc.pid)

    def start(self, workdir, timeout: float = 30, port: int = 0) -> KafkalogServer:
        """``port`` 0: a free port the broker picks; a restart on the same data dir may ask for its old ``port``
        again (a client that knows only that address reconnects, as to a restarted Kafka)."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = ["serve", "--data-dir", str(self.log_dir), "--listen", f"127.0.0.1:{port}"]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        t0 = time.monotonic()
        self.proc = children.popen([sys.executable, "-m", "kafkalog", *args], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_kafkalog_env(),
                                   cwd=self.workdir, start_new_session=True)
        self._err = []
        self._drain = threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True)
        self._drain.start()
        poller = select.poll()  # not select(): it refuses descriptors numbered 1,024 or more
        poller.register(self.proc.stdout, select.POLLIN | select.POLLPRI)
        ready = poller.poll(max(0, int(timeout * 1000)))
        line = self.proc.stdout.readline().decode(errors="replace").rstrip("\n") if ready else ""
        m = KAFKALOG_READY.match(line)
        if not m:
            self.stop()
            raise LabError(f"kafkalog serve printed no ready line within {timeout} s (got {line!r}):\n"
                           f"{self.log_tail()}")
        self.port = int(m.group(1))
        self.startup_s = time.monotonic() - t0
        return self

    def _read_stderr(self, proc):
        for line in proc.stderr:
            self._err.append(line)

    def log_tail(self, chars: int = 6000) -> str:
        text = b"".join(self._err).decode(errors="replace")
        return f"--- kafkalog serve stderr ---\n{text[-chars:]}" if text else "(kafkalog serve wrote nothing on stderr)"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._drain is not None:
            self._drain.join(10)
        proc.stdout.close()
        proc.stderr.close()
        return proc.returncode


# -- comparing the two brokers' answers --------------------------------------------------------------------------

class Target:
    """One broker under test: ``name`` ("kafka" or "kafkalog"), ``bootstrap`` ("127.0.0.1:PORT"), ``server``."""

    def __init__(self, name: str, bootstrap: str, server):
        self.name = name
        self.bootstrap = bootstrap
        self.server = server

    def __repr__(self) -> str:
        return f"Target({self.name!r}, {self.bootstrap!r})"

    def tool(self, name: str, *args, timeout: float = 60, input: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
        """kafka_tool(name, args) (``--bootstrap-server`` is not added); with ``check``, a non-zero exit raises
        AssertionError with the tool's stdout/stderr."""
        r = kafka_tool(name, [str(a) for a in args], timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise AssertionError(f"[{self.name}] {name} {' '.join(map(str, args))} -> exit {r.returncode}\n"
                                 f"stdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}")
        return r


def _fmt(v) -> str:
    s = repr(v)
    return s if len(s) <= 200 else s[:197] + "..."


def diff_answers(kafka_answer, kafkalog_answer, ignore=(), path: str = "") -> list[str]:
    """Field-by-field differences between two answers (dicts, lists, tuples, sets, scalars), one line each:
    ``path: kafka=X kafkalog=Y``. ``ignore``: field paths (fnmatch patterns: ``"*.timestamp"``, ``"brokers[*]"``;
    a ``[`` is literal, so ``[*]`` matches any index)."""
    ignore = tuple(pat.replace("[", "[[]") for pat in ignore if "[[]" not in pat) + tuple(
        pat for pat in ignore if "[[]" in pat)
    return _diff(kafka_answer, kafkalog_answer, ignore, path)


def _diff(kafka_answer, kafkalog_answer, ignore, path: str) -> list[str]:
    import fnmatch
    if path and any(fnmatch.fnmatchcase(path, pat) for pat in ignore):
        return []
    a, b = kafka_answer, kafkalog_answer
    where = path or "<answer>"
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in b:
                if not any(fnmatch.fnmatchcase(sub, pat) for pat in ignore):
                    out.append(f"{sub}: kafka={_fmt(a[k])} kafkalog=<missing>")
            elif k not in a:
                if not any(fnmatch.fnmatchcase(sub, pat) for pat in ignore):
                    out.append(f"{sub}: kafka=<missing> kafkalog={_fmt(b[k])}")
            else:
                out += _diff(a[k], b[k], ignore, sub)
        return out
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        out = []
        for i in range(max(len(a), len(b))):
            sub = f"{path}[{i}]"
            if i >= len(b):
                out.append(f"{sub}: kafka={_fmt(a[i])} kafkalog=<missing>")
            elif i >= len(a):
                out.append(f"{sub}: kafka=<missing> kafkalog={_fmt(b[i])}")
            else:
                out += _diff(a[i], b[i], ignore, sub)
        if len(a) != len(b):
            out.insert(0, f"{where}: kafka has {len(a)} items, kafkalog {len(b)}")
        return out
    if isinstance(a, (set, frozenset)) and isinstance(b, (set, frozenset)):
        out = []
        if a - b:
            out.append(f"{where}: only kafka has {_fmt(sorted(a - b, key=repr))}")
        if b - a:
            out.append(f"{where}: only kafkalog has {_fmt(sorted(b - a, key=repr))}")
        return out
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                       and not isinstance(a, bool) and not isinstance(b, bool)):
        return [f"{where}: kafka={_fmt(a)} ({type(a).__name__}) kafkalog={_fmt(b)} ({type(b).__name__})"]
    return [] if a == b else [f"{where}: kafka={_fmt(a)} kafkalog={_fmt(b)}"]


def assert_same(kafka_answer, kafkalog_answer, ignore=(), what: str = "") -> None:
    """Fail with a readable field-by-field diff unless the two answers agree (see diff_answers)."""
    diffs = diff_answers(kafka_answer, kafkalog_answer, ignore)
    if diffs:
        head = f"kafka and kafkalog answer differently{' (' + what + ')' if what else ''}: {len(diffs)} field(s)"
        raise AssertionError("\n  ".join([head, *diffs[:60]]) + ("\n  ..." if len(diffs) > 60 else ""))


# -- the Go and JavaScript clients ------------------------------------------------------------------------------------

LAB_CLIENTS_SCRIPT = REPO / ".ci" / "lab-clients"


def lab_client_commands() -> dict:
    """{client: argv prefix} of the lab's Go programs (franz-go, sarama) and kafkajs, built and installed by
    .ci/lab-clients into LAB_DIR (quick when done). LabError names what is missing or what failed."""
    missing = [tool for tool in ("go", "node", "npm") if shutil.which(tool) is None]
    if missing:
        raise LabError(f"the Go/JavaScript compatibility tests need {', '.join(missing)} on PATH (Go 1.26+ from "
                       f"go.dev, Node 18+ and npm: apt-get install nodejs npm)")
    env = dict(os.environ, KAFKALOG_LAB_DIR=str(LAB_DIR))
    try:
        r = subprocess.run(["bash", str(LAB_CLIENTS_SCRIPT)], capture_output=True, text=True, env=env, timeout=900,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise LabError(f"{LAB_CLIENTS_SCRIPT} ran over 900 s:\n{e.stdout}\n{e.stderr}") from None
    if r.returncode != 0:
        raise LabError(f"{LAB_CLIENTS_SCRIPT} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    lines = r.stdout.split()
    if len(lines) != 2:
        raise LabError(f"{LAB_CLIENTS_SCRIPT} printed {r.stdout!r}, not the bin and kafkajs paths")
    bin_dir, js_dir = lines
    return {
        "franz": [os.path.join(bin_dir, "franz")],
        "sarama": [os.path.join(bin_dir, "sarama")],
        "kafkajs": [shutil.which("node"), os.path.join(js_dir, "client.js")],
    }
