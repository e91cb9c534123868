"""Kafka Connect 4.4 distributed workers against Apache Kafka 4.4.0 and `kafkalog serve` (issue 24).

The workers are Kafka's own ``org.apache.kafka.connect.cli.ConnectDistributed`` from the lab's jars (connect-runtime,
Jetty and Jersey are in Kafka's libs: nothing more to fetch); the connectors are ours (tests/compat/java/connect,
compiled once into a plugin folder, found by ``plugin.discovery=service_load`` through the META-INF/services files
the compile step writes):

- ``NumberSource``: task ``t`` writes the numbers 0, 1, 2 ... to partition ``t`` of a topic, value ``"n start run"``
  (``start``: where this run of the task began, ``run``: a random id per task run); its position is a Connect source
  offset (partition ``{"task": t}``, offset ``{"n": last, "run": run}``), read back from the offsets topic when a
  task starts.
- ``FileSink``: each task run appends every record it gets to a file of its own, ``topic partition offset key
  value`` a line, so the test counts exactly what arrived.

Each worker: a unique group and unique config/offset/status topics per test (replication factor 1), the REST listener
on 127.0.0.1 and a free port, String converters, source offsets flushed every 200 ms, a departed worker's work held
for it 5 s. Workers die with the test (the lab's children: PR_SET_PDEATHSIG), are stopped by the test itself (the
conftest may stop the session's brokers before a fixture's teardown) and their logs (Connect's runtime at INFO) are
in every failure message. Every wait is a bounded number of looks.

- ``test_connect_worker`` (default): one worker; a source (2 tasks x 1,000 numbers) and a sink (2 tasks) created
  through the REST API; every number arrives at the sink exactly once; the offsets topic ends at each task's last
  number; both connectors and all tasks RUNNING on the worker; the three internal topics compacted (DescribeConfigs)
  with Connect's partition counts (config 1, offsets 25, status 5); ListGroups and DescribeGroups show the workers'
  group as Kafka does (protocol type ``connect``, protocol ``sessioned``, the worker's metadata and assignment as
  sent) and the sink's consumer group. Then the worker is stopped (SIGTERM) and started again, the source given
  2,000 numbers per task: each task goes on from its committed 999, every number arrives once.
- ``test_connect_rebalance_and_restart`` (slow): an endless source; a second worker joins (the tasks spread over both
  worker ids); the worker holding source task 0 is stopped with SIGTERM and started again on its port: its source
  tasks run again (there or on the other worker). For every task, its runs in the order they wrote: the first
  starts at 0, each later one right after its predecessor's last committed offset (duplicates only past a commit),
  no number missing, the sink got every record of the topic.
- ``test_connect_exactly_once_source`` (slow): the default scenario on a worker with KIP-618 exactly-once source
  support (transactional source tasks and their offsets, zombie fencing, the config topic written transactionally)
  and a read_committed sink: every number once, a commit marker after each poll's batch.

Costs (2 cores, the session's brokers already up): the default test about 7 s on Kafka and 10 s on kafkalog (a worker
starts in 1.5-2.5 s with its class-data-sharing archive, 4 s without; a worker stops in about 1 s on Kafka and 3 s on
kafkalog, whose Fetch without partitions waits its max_wait_ms); the slow ones 12-25 s each per broker.

Run: ``pytest -q tests/compat/test_connect.py`` (``-m slow`` for the other two; Kafka only: ``-k "not kafkalog"``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest

from .lab import (
    KAFKA_VERSION,
    LAB_DIR,
    TOOL_JVM_OPTS,
    LabError,
    Target,
    _cds_archive,
    _jvm_command,
    children,
    diff_answers,
    free_port,
    java_classpath,
)

LAB_TEST_DEADLINE_S = 180
JAVA_DIR = Path(__file__).resolve().parent / "java" / "connect"
CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
SOURCES = ("NumberSource.java", "FileSink.java")
PACKAGE = "kafkalog.lab.connect"
SOURCE_CLASS, SINK_CLASS = f"{PACKAGE}.NumberSource", f"{PACKAGE}.FileSink"
TASKS = 2          # source tasks = sink tasks = data topic partitions
RECORDS = 1000     # per source task, in the default test
POLL_S = 0.1
WORKER_HEAP = ["-Xmx384m"]

# Connect's runtime at INFO (joins, assignments, task starts: what a failure needs), everything else WARN and up
LOG4J2 = """Configuration:
  status: error
  Appenders:
    File:
      name: file
      fileName: "${sys:kafkalog.lab.log:-/dev/null}"
      append: true
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: warn
      AppenderRef:
        - ref: file
    Logger:
      - name: org.apache.kafka.connect.runtime.distributed
        level: info
      - name: org.apache.kafka.connect.runtime.Worker
        level: info
"""


# -- the connectors ------------------------------------------------------------------------------------------------

_compile_lock = threading.Lock()


def connect_plugins() -> Path:
    """javac NumberSource.java and FileSink.java against Kafka's jars into a plugin folder with their
    META-INF/services files, once (keyed by the sources' hash): the ``plugin.path`` (its one plugin: ``lab``)."""
    h = hashlib.sha256(KAFKA_VERSION.encode())
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (JAVA_DIR / name).read_bytes() + b"\0")
    root = LAB_DIR / "classes" / f"connect-plugins-{h.hexdigest()[:16]}"
    with _compile_lock:
        if (root / ".complete").is_file():
            return root
        javac = shutil.which("javac")
        if javac is None:
            raise LabError("the Connect test needs `javac` (JDK 17+) on PATH")
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".connect-plugins.", dir=root.parent))
        try:
            classes = tmp / "lab"
            r = children.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", java_classpath(), "-d", str(classes),
                              *(str(JAVA_DIR / n) for n in SOURCES)], capture_output=True, text=True, timeout=180)
            if r.returncode != 0:
                raise LabError(f"javac failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            services = classes / "META-INF" / "services"
            services.mkdir(parents=True)
            (services / "org.apache.kafka.connect.source.SourceConnector").write_text(SOURCE_CLASS + "\n")
            (services / "org.apache.kafka.connect.sink.SinkConnector").write_text(SINK_CLASS + "\n")
            (tmp / ".complete").touch()
            try:
                os.rename(tmp, root)
            except OSError:  # another process compiled the same sources first
                if not (root / ".complete").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root


@pytest.fixture(scope="module")
def plugins():
    try:
        return connect_plugins()
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


# -- a worker ------------------------------------------------------------------------------------------------------

class Worker:
    """One ConnectDistributed JVM on its own REST port (``worker_id`` "127.0.0.1:PORT"), its log in ``workdir``.

    The JVM gets a dynamic class-data-sharing archive as the lab's other programs do (lab._cds_archive: made by a
    run that ends cleanly, SIGTERM included, and used by the later ones): a worker then starts faster."""

    def __init__(self, name: str, workdir: Path, props: dict, port: int | None = None):
        self.name = name
        self.workdir = workdir / name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.props = dict(props, listeners=f"http://127.0.0.1:{self.port}", **{
            "rest.advertised.host.name": "127.0.0.1", "rest.advertised.port": self.port})
        self.log = self.workdir / "connect.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log_from = 0
        self.herder_died = False  # then the JVM takes ~45 s to stop (Connect's herder executor times out): SIGKILL
        self._dump: Path | None = None
        self.start_s = 0.0  # the last start: spawn -> GET /health answered 200
        self.start_times: list[float] = []  # every start's
        self.stop_s = 0.0   # the last stop: SIGTERM -> exit

    @property
    def worker_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Worker:
        (self.workdir / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        (self.workdir / "log4j2.yaml").write_text(LOG4J2)
        opts = [*WORKER_HEAP, *TOOL_JVM_OPTS]
        archive = _cds_archive(CONNECT_MAIN)
        self._dump = None
        if archive.is_file():
            opts.append(f"-XX:SharedArchiveFile={archive}")
        else:
            archive.parent.mkdir(parents=True, exist_ok=True)
            self._dump = archive.with_name(f".{archive.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
            opts.append(f"-XX:ArchiveClassesAtExit={self._dump}")
        cmd = _jvm_command(CONNECT_MAIN, [self.workdir / "worker.properties"], opts, log_file=str(self.log))
        log4j = f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}"
        cmd = [log4j if c.startswith("-Dlog4j2.configurationFile=") else c for c in cmd]
        self.starts += 1
        self.herder_died = False
        self._log_from = self.log.stat().st_size if self.log.is_file() else 0
        with open(self.workdir / "stdout", "ab") as out:
            self.proc = children.popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       cwd=self.workdir)
        self._spawned = time.monotonic()
        return self

    def wait_ready(self, looks: int = 600) -> None:
        """Until GET /health answers 200 (KIP-1017: the herder's tick thread has joined the group and serves
        requests; 503 while it starts): at most ``looks`` tries."""
        for _ in range(looks):
            self.check_alive()
            code, answer = rest(self.url, "GET", "/health", timeout=2)  # a dead herder never answers
            if code == 200:
                self.start_s = time.monotonic() - self._spawned
                self.start_times.append(round(self.start_s, 1))
                return
            time.sleep(POLL_S)
        raise AssertionError(f"worker {self.name}: GET /health did not answer 200 after {looks} tries: "
                             f"{code} {answer}")

    def check_alive(self) -> None:
        """AssertionError when the JVM has exited or its herder thread has died (the JVM and its REST server stay
        up then, answering nothing that needs the herder)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"worker {self.name} exited with {self.proc.returncode}")
        if self.log.is_file():
            with open(self.log, "rb") as f:
                f.seek(self._log_from)
                if b"Uncaught exception in herder work thread" in f.read():
                    self.herder_died = True
                    raise AssertionError(f"worker {self.name}'s herder thread died (its log says why)")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM (Connect's graceful stop: tasks stopped, source offsets committed, LeaveGroup), then SIGKILL after
        ``timeout``; the exit status. A clean first run leaves the JVM's class-data-sharing archive behind."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None and self.herder_died:
            proc.kill()
            proc.wait(10)
        elif proc.poll() is None:
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
                self.stop_s = time.monotonic() - t0
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        dump, self._dump = self._dump, None
        if dump is not None:
            if dump.is_file() and dump.stat().st_size > 0 and proc.returncode in (0, 128 + signal.SIGTERM):
                os.replace(dump, _cds_archive(CONNECT_MAIN))
            elif dump.exists():
                dump.unlink()
        return proc.returncode

    def log_text(self, chars: int = 8000) -> str:
        text = self.log.read_text(errors="replace") if self.log.is_file() else ""
        out = self.workdir / "stdout"
        err = out.read_text(errors="replace") if out.is_file() else ""
        return (f"--- worker {self.name} connect.log ---\n{text[-chars:]}\n"
                f"--- worker {self.name} stdout ---\n{err[-1500:]}")


def rest(base: str, method: str, path: str, body=None, timeout: float = 30) -> tuple[int, object]:
    """One REST call (urllib): (HTTP status, the decoded JSON answer or the raw text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except OSError as e:  # refused, reset, timed out: no HTTP answer
        return 0, repr(e)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def rest_ok(base: str, method: str, path: str, body=None, tries: int = 100):
    """A REST call that must succeed (2xx); 409 (a rebalance in progress) and 5xx are tried again, ``tries`` times."""
    status, answer = 0, None
    for _ in range(tries):
        status, answer = rest(base, method, path, body)
        if 200 <= status < 300:
            return answer
        if status != 409 and status < 500:
            break
        time.sleep(0.2)
    raise AssertionError(f"{method} {base}{path} -> {status}: {answer}")


def create_connector(worker: Worker, name: str, config: dict) -> None:
    rest_ok(worker.url, "POST", "/connectors", {"name": name, "config": {k: str(v) for k, v in config.items()}})


def status(worker: Worker, name: str) -> dict:
    """GET /connectors/NAME/status, or {} while the worker does not know it yet."""
    code, answer = rest(worker.url, "GET", f"/connectors/{name}/status", timeout=10)
    return answer if code == 200 else {}


def placement(st: dict) -> dict[str, tuple[str, str]]:
    """{"connector" or task id: (state, worker id)} of a status answer."""
    out = {}
    if st:
        out["connector"] = (st["connector"]["state"], st["connector"]["worker_id"])
        for t in st.get("tasks", []):
            out[str(t["id"])] = (t["state"], t["worker_id"])
    return out


# -- what arrived --------------------------------------------------------------------------------------------------

class Sink:
    """The sink's files: every line read once (files grow; only whole lines), as (partition, offset, task, n, start,
    run) records; ``distinct`` maps (partition, offset) to its record."""

    def __init__(self, folder: Path, topic: str):
        self.folder = folder
        self.topic = topic
        self.read_to: dict[Path, int] = {}
        self.lines = 0
        self.distinct: dict[tuple[int, int], tuple] = {}
        self.bad: list[str] = []

    def poll(self) -> None:
        for f in sorted(self.folder.glob("sink-*.txt")):
            with open(f, "rb") as fh:
                fh.seek(self.read_to.get(f, 0))
                data = fh.read()
            end = data.rfind(b"\n") + 1
            self.read_to[f] = self.read_to.get(f, 0) + end
            for line in data[:end].decode().splitlines():
                self.lines += 1
                parts = line.split(" ")
                if len(parts) != 7 or parts[0] != self.topic:
                    self.bad.append(line)
                    continue
                p, off, task, n, start = map(int, parts[1:6])
                rec = (p, off, task, n, start, parts[6])
                if self.distinct.setdefault((p, off), rec) != rec:
                    self.bad.append(f"offset {p}/{off} arrived twice with different records: "
                                    f"{self.distinct[(p, off)]} and {rec}")

    def numbers(self, task: int) -> list[int]:
        return sorted(r[3] for r in self.distinct.values() if r[2] == task)

    def runs(self) -> dict[str, tuple[int, int, int, int]]:
        """{run id: (task, start, partition, first offset)}."""
        out: dict[str, tuple[int, int, int, int]] = {}
        for (p, off), (_, _, task, _, start, run) in sorted(self.distinct.items()):
            out.setdefault(run, (task, start, p, off))
        return out


def committed_offsets(bootstrap: str, topic: str, connector: str) -> dict[int, list[tuple[int, str]]]:
    """The offsets topic read from the start to its end: {task: [every commit of ``connector``'s task as (n, run),
    in the order written]} (keys ``["connector",{"task":t}]``, values ``{"n":x,"run":id}``: Connect's JSON without
    schemas)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": f"look-{uuid.uuid4()}",
                  "enable.auto.commit": False, "socket.timeout.ms": 10000})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        ends = {}
        for p in md.partitions:
            ends[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
        todo = {p for p, e in ends.items() if e > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        per: dict[int, list[tuple[int, int, int]]] = {}
        for _ in range(200):
            if not todo:
                break
            for m in c.consume(1000, 0.2):
                if m.error() is not None:
                    continue
                key = json.loads(m.key())
                if key[0] != connector or m.value() is None:
                    continue
                value = json.loads(m.value())
                per.setdefault(key[1]["task"], []).append((m.partition(), m.offset(), value["n"], value["run"]))
            # done with a partition once the position reaches its end (a transaction marker may be the last offset)
            for tp in c.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
        if todo:
            raise AssertionError(f"could not read partitions {sorted(todo)} of {topic} to their end")
        # one source partition's commits all go to one topic partition (by the key): their offsets order them
        return {t: [(n, run) for _, _, n, run in sorted(v)] for t, v in per.items()}
    finally:
        c.close()


def topic_facts(bootstrap: str, topics: list[str]) -> dict[str, dict]:
    """{topic: {"partitions": n, "cleanup.policy": value}} through the AdminClient (Metadata, DescribeConfigs)."""
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    md = admin.list_topics(timeout=10)
    out = {}
    for t in topics:
        res = ConfigResource(ConfigResource.Type.TOPIC, t)
        cfg = admin.describe_configs([res])[res].result(timeout=10)
        out[t] = {"partitions": len(md.topics[t].partitions) if t in md.topics else 0,
                  "cleanup.policy": cfg["cleanup.policy"].value}
    return out


def data_ends(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": f"look-{uuid.uuid4()}"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(TASKS)]
    finally:
        c.close()


# -- the scenario's set-up -----------------------------------------------------------------------------------------

class Setup:
    """Names unique to one test, the data topic (TASKS partitions), the workers' common properties, the workers made
    (every one stopped at the end) and a failure message with all their logs."""

    def __init__(self, target: Target, plugins: Path, workdir: Path, topic_name):
        from confluent_kafka.admin import AdminClient, NewTopic
        self.target = target
        self.workdir = workdir
        self.group = topic_name("group")
        self.data = topic_name("data")
        self.internal = {role: topic_name(role) for role in ("configs", "offsets", "status")}
        self.source, self.sink = topic_name("numbers"), topic_name("files")
        self.sink_dir = workdir / "sink"
        self.sink_dir.mkdir()
        self.workers: list[Worker] = []
        self.waits: list[tuple[str, float]] = []
        self.eos = False
        admin = AdminClient({"bootstrap.servers": target.bootstrap, "broker.address.family": "v4"})
        for f in admin.create_topics([NewTopic(self.data, TASKS, 1)], operation_timeout=15).values():
            f.result(timeout=20)
        self.props = {
            "bootstrap.servers": target.bootstrap,
            "group.id": self.group,
            "config.storage.topic": self.internal["configs"],
            "offset.storage.topic": self.internal["offsets"],
            "status.storage.topic": self.internal["status"],
            "config.storage.replication.factor": 1,
            "offset.storage.replication.factor": 1,
            "status.storage.replication.factor": 1,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms": 200,
            "plugin.path": plugins,
            "plugin.discovery": "service_load",
            # a departed worker's connectors and tasks wait 5 s (not 5 minutes) for it to come back
            "scheduled.rebalance.max.delay.ms": 5000,
            "heartbeat.interval.ms": 1000,
            "session.timeout.ms": 10000,
        }

    def worker(self, name: str, port: int | None = None) -> Worker:
        w = Worker(name, self.workdir, self.props, port)
        self.workers.append(w)
        return w

    def start(self, w: Worker) -> Worker:
        w.start()
        try:
            w.wait_ready()
        except AssertionError as e:
            self.fail(str(e))
        return w

    def exactly_once(self) -> None:
        """KIP-618 exactly-once source support on every worker made from now on: source tasks write through
        transactional producers (their offsets in the same transactions), the leader fences zombies and writes the
        config topic transactionally; the sink reads read_committed."""
        self.eos = True
        self.props.update({"exactly.once.source.support": "enabled", "consumer.isolation.level": "read_committed"})

    def source_config(self, records_per_task: int, batch: int, poll_ms: int) -> dict:
        config = {"connector.class": SOURCE_CLASS, "tasks.max": TASKS, "topic": self.data,
                  "records.per.task": records_per_task, "batch.size": batch, "poll.interval.ms": poll_ms}
        if self.eos:
            config["exactly.once.support"] = "required"
        return {k: str(v) for k, v in config.items()}

    def create_connectors(self, w: Worker, records_per_task: int, batch: int, poll_ms: int) -> None:
        create_connector(w, self.source, self.source_config(records_per_task, batch, poll_ms))
        create_connector(w, self.sink, {"connector.class": SINK_CLASS, "tasks.max": TASKS, "topics": self.data,
                                        "dir": self.sink_dir})

    def failure(self, what: str) -> str:
        """``what``, with the workers' logs and the broker's."""
        logs = "\n".join(w.log_text() for w in self.workers)
        return f"[{self.target.name}] {what}\n{logs}\n{self.target.server.log_tail(3000)}"

    def fail(self, what: str):
        pytest.fail(self.failure(what), pytrace=False)

    def close(self) -> None:
        for w in self.workers:
            w.stop()


@pytest.fixture
def cluster(target, plugins, tmp_path, topic_name):
    """A Setup; the tests stop their workers themselves (the conftest's teardown hook may stop the session's brokers
    before a fixture's teardown: a worker whose broker is gone takes 20 s to stop), this is the safety net."""
    s = Setup(target, plugins, tmp_path, topic_name)
    try:
        yield s
    finally:
        s.close()


def wait_for(s: Setup, what: str, cond, looks: int = 600, detail=None, must: bool = True):
    """Look ``looks`` times, POLL_S apart, until ``cond()`` is truthy (its value is returned); any worker exiting,
    or the looks running out, fails with everyone's logs (and ``detail()``, when given; without ``must``, running out
    returns None). Each wait's duration goes to ``s.waits``."""
    t0 = time.monotonic()
    for _ in range(looks):
        got = cond()
        if got:
            s.waits.append((what, round(time.monotonic() - t0, 1)))
            return got
        for w in s.workers:
            try:
                w.check_alive()
            except AssertionError as e:
                s.fail(f"while waiting for {what}: {e}")
        time.sleep(POLL_S)
    if must:
        s.fail(f"no {what} after {looks} looks{': ' + detail() if detail else ''}")
    return None


def running_status(w: Worker, name: str, workers: set[str]) -> dict | None:
    """The connector's status (from ``w``) when it and its TASKS tasks are RUNNING on ``workers``, else None."""
    st = status(w, name)
    return st if all_running(st, workers) else None


def all_running(st: dict, workers: set[str]) -> bool:
    pl = placement(st)
    return len(pl) == TASKS + 1 and all(state == "RUNNING" and wid in workers for state, wid in pl.values())


# -- the tests -----------------------------------------------------------------------------------------------------

def test_connect_worker(cluster):
    """One worker: connectors created over REST, every number through source, topic and sink exactly once, the
    source offsets in the offsets topic, the internal topics compacted."""
    failure = None
    try:
        _worker(cluster)
    except (AssertionError, OSError) as e:  # the per-test deadline's TimeoutError too: with every log
        failure = cluster.failure(f"{type(e).__name__}: {e}")
    finally:
        cluster.close()
    if failure:
        pytest.fail(failure, pytrace=False)


@pytest.mark.slow
def test_connect_exactly_once_source(cluster):
    """test_connect_worker's scenario with KIP-618 exactly-once source support on the worker (transactional source
    tasks, zombie fencing, the config topic written transactionally) and a read_committed sink."""
    cluster.exactly_once()
    failure = None
    try:
        _worker(cluster)
    except (AssertionError, OSError) as e:
        failure = cluster.failure(f"{type(e).__name__}: {e}")
    finally:
        cluster.close()
    if failure:
        pytest.fail(failure, pytrace=False)


def _worker(s: Setup):
    a = s.start(s.worker("A"))
    s.create_connectors(a, RECORDS, 100, 0)
    sink = Sink(s.sink_dir, s.data)

    # 1. every number of both tasks at the sink, once
    expect_numbers(s, sink, RECORDS)
    ends = data_ends(s.target.bootstrap, s.data)
    if s.eos:  # a commit marker after each poll's batch of 100 takes an offset
        assert ends == [RECORDS + RECORDS // 100] * TASKS, f"the data topic ends at {ends}"
    else:
        assert ends == [RECORDS] * TASKS, f"the data topic ends at {ends}"
    for name in (s.source, s.sink):
        st = wait_for(s, f"{name} RUNNING with {TASKS} tasks on {a.worker_id}",
                      lambda n=name: running_status(a, n, {a.worker_id}))
        assert st["type"] == ("source" if name == s.source else "sink")

    # 2. Connect flushes source offsets every 200 ms: the offsets topic ends at each task's last number
    def flushed():
        got = committed_offsets(s.target.bootstrap, s.internal["offsets"], s.source)
        return got if {t: v[-1][0] for t, v in got.items()} == {t: RECORDS - 1 for t in range(TASKS)} else None
    committed = wait_for(s, "the last source offsets in the offsets topic", flushed, looks=100)
    for t, values in committed.items():
        assert [n for n, _ in values] == sorted(n for n, _ in values), f"task {t} commits {values}"

    # 3. the internal topics, and the groups as the broker describes them
    facts = topic_facts(s.target.bootstrap, list(s.internal.values()))
    assert facts == {s.internal["configs"]: {"partitions": 1, "cleanup.policy": "compact"},
                     s.internal["offsets"]: {"partitions": 25, "cleanup.policy": "compact"},
                     s.internal["status"]: {"partitions": 5, "cleanup.policy": "compact"}}, facts
    check_groups(s, a)

    # 4. the worker stopped (SIGTERM) and started again: it reads the offsets topic from its start; the source, given
    # twice as many numbers, goes on from each task's committed offset (RECORDS), never from 0
    rc = a.stop()
    assert rc in (0, 128 + signal.SIGTERM), f"worker A exited with {rc} on SIGTERM"
    s.start(a)
    wait_for(s, "the source RUNNING again", lambda: all_running(status(a, s.source), {a.worker_id}))
    rest_ok(a.url, "PUT", f"/connectors/{s.source}/config", s.source_config(2 * RECORDS, 100, 0))
    expect_numbers(s, sink, 2 * RECORDS)
    starts = sorted((run[0], run[1]) for run in sink.runs().values())
    assert starts == sorted([(t, 0) for t in range(TASKS)] + [(t, RECORDS) for t in range(TASKS)]), \
        f"(task, start) of every task run: {starts}"
    rc = a.stop()
    assert rc in (0, 128 + signal.SIGTERM), f"worker A exited with {rc} on SIGTERM"
    print(f"[{s.target.name}] worker starts {a.start_times} s, stop {a.stop_s:.1f} s (the last); waits {s.waits}")


def expect_numbers(s: Setup, sink: Sink, n: int) -> None:
    """Until the sink holds n numbers of each source task: then 0..n-1 each exactly once, one sink line per record
    (no redelivery: one worker, stopped only gracefully)."""
    def arrived():
        sink.poll()
        return len(sink.distinct) >= TASKS * n
    def missing() -> str:
        return "; ".join(f"task {t}: {len(set(sink.numbers(t)))} distinct numbers, missing "
                         f"{sorted(set(range(n)) - set(sink.numbers(t)))[:10]}" for t in range(TASKS))
    wait_for(s, f"{TASKS * n} records at the sink", arrived, detail=missing)
    sink.poll()
    if sink.bad:
        s.fail(f"bad sink lines: {sink.bad[:5]}")
    for t in range(TASKS):
        got = sink.numbers(t)
        if got != list(range(n)):
            twice = [k for k, c in Counter(got).items() if c > 1]
            s.fail(f"source task {t}: {len(got)} numbers arrived, not 0..{n - 1} once each: "
                   f"{sorted(set(range(n)) - set(got))[:20]} missing, {twice[:20]} twice")
    if sink.lines != TASKS * n:
        s.fail(f"the sink got {sink.lines} lines for {TASKS * n} records (a redelivery)")
    if {p for p, _ in sink.distinct} != set(range(TASKS)):
        s.fail(f"records arrived from partitions {sorted({p for p, _ in sink.distinct})}")


def wire_call(bootstrap: str, key: int, version: int, body: dict) -> dict:
    """One request on a fresh connection (kafkalog's codec): the decoded answer."""
    import socket
    import struct

    from kafkalog.broker import protocol
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(protocol.encode_request(key, version, 1, "connect-test", body))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, f"the broker closed the connection instead of answering API {key} v{version}"
            buf += chunk
    corr, answer = protocol.decode_response(key, version, buf[4:])
    assert corr == 1
    return answer


def check_groups(s: Setup, a: Worker) -> None:
    """ListGroups v5 and DescribeGroups v5 as Kafka answers them: the workers' group is a classic group of protocol
    type ``connect``, protocol ``sessioned``, its one member the worker (client id ``connect-<host:port>``, metadata
    and assignment in Connect's own layout, opaque to the broker: the bytes the member sent and those the leader
    assigned); the sink's group ``connect-<name>`` a consumer group of TASKS members. Every difference is listed."""
    import struct
    sink_group = f"connect-{s.sink}"

    def answers():
        listed = {g["group_id"]: g for g in wire_call(s.target.bootstrap, 16, 5, {"states_filter": [],
                                                                                 "types_filter": []})["groups"]}
        described = {g["group_id"]: g for g in wire_call(s.target.bootstrap, 15, 5, {
            "groups": [s.group, sink_group], "include_authorized_operations": False})["groups"]}
        return listed, described

    def settled():  # the sink's two consumers may join one after the other: a rebalance, then Stable
        listed, described = answers()
        ok = [(d["group_state"], len(d["members"])) for d in described.values()] == [("Stable", 1), ("Stable", TASKS)]
        ok = ok and all(listed.get(g, {}).get("group_state") == "Stable" for g in described)
        return (listed, described) if ok else None
    listed, described = wait_for(s, "both groups Stable", settled, looks=100, must=False) or answers()
    got, want = {}, {}
    for gid, ptype, protocol, members in ((s.group, "connect", "sessioned", 1), (sink_group, "consumer", "range",
                                                                                   TASKS)):
        g, d = listed.get(gid, {}), described[gid]
        got[gid] = {"listed": (g.get("protocol_type"), g.get("group_state"), g.get("group_type")),
                    "described": (d["error_code"], d["group_state"], d["protocol_type"], d["protocol_data"],
                                  len(d["members"]))}
        want[gid] = {"listed": (ptype, "Stable", "classic"), "described": (0, "Stable", ptype, protocol, members)}
    m = described[s.group]["members"][0] if described[s.group]["members"] else None
    if m is not None:
        meta, assignment = bytes(m["member_metadata"]), bytes(m["member_assignment"])
        # Connect's metadata: version 2 (sessioned), the worker's URL, its config offset ...; its assignment:
        # version 2, error 0, the leader's member id and URL ...
        got["member"] = {"client": (m["client_id"], m["client_host"], m["group_instance_id"]),
                         "metadata": (struct.unpack(">h", meta[:2])[0] if len(meta) >= 2 else None,
                                      f"http://127.0.0.1:{a.port}/".encode() in meta),
                         "assignment": (struct.unpack(">hh", assignment[:4]) if len(assignment) >= 4 else None,
                                        m["member_id"].encode() in assignment)}
        want["member"] = {"client": (f"connect-{a.worker_id}", "/127.0.0.1", None), "metadata": (2, True),
                          "assignment": ((2, 0), True)}
    diffs = diff_answers(want, got)
    assert not diffs, "the groups as Kafka answers (kafka=) and as this broker does (kafkalog=):\n  " + \
        "\n  ".join(diffs)


@pytest.mark.slow
def test_connect_rebalance_and_restart(cluster):
    """Two workers share the tasks; the worker holding source task 0 is stopped (SIGTERM) and started again on its
    port: its source tasks resume from their committed offsets; nothing is lost, duplicates only past a commit."""
    failure = None
    try:
        _rebalance_and_restart(cluster)
    except (AssertionError, OSError) as e:  # the per-test deadline's TimeoutError too: with every log
        failure = cluster.failure(f"{type(e).__name__}: {e}")
    finally:
        cluster.close()
    if failure:
        pytest.fail(failure, pytrace=False)


def _rebalance_and_restart(s: Setup):
    a = s.start(s.worker("A"))
    # an endless source, 20 numbers every 50 ms per task: numbers keep coming across the rebalance and the restart
    s.create_connectors(a, 2**62, 20, 50)
    sink = Sink(s.sink_dir, s.data)

    def numbers_at_least(k):
        def cond():
            sink.poll()
            return all(len(sink.numbers(t)) >= k for t in range(TASKS))
        return cond
    wait_for(s, "200 numbers per source task at the sink", numbers_at_least(200))

    # 1. a second worker: the connectors and tasks spread over both worker ids
    b = s.start(s.worker("B"))
    both = {a.worker_id, b.worker_id}

    def spread():
        sts = {n: status(a, n) for n in (s.source, s.sink)}
        if not all(all_running(st, both) for st in sts.values()):
            return None
        tasks = {wid for st in sts.values() for t in st["tasks"] for wid in [t["worker_id"]]}
        return sts if tasks == both else None
    sts = wait_for(s, "tasks on both workers", spread)
    where = {k: wid for k, (_, wid) in placement(sts[s.source]).items()}
    victim = a if where["0"] == a.worker_id else b
    moved = sorted(int(k) for k, wid in where.items() if k != "connector" and wid == victim.worker_id)
    seen = len(sink.distinct)
    wait_for(s, "numbers still flowing after the rebalance", lambda: (sink.poll(), len(sink.distinct) >= seen + 400)[1])

    # 2. stop the worker holding source task 0 (SIGTERM: its tasks stop and commit their offsets), then start it
    # again. Its runs of the moved tasks: those that wrote the last record of their partition just before the stop
    before = data_ends(s.target.bootstrap, s.data)
    wait_for(s, f"the sink holding every record below {before}", lambda: caught_up(sink, before))
    stopped_runs = {t: sink.distinct[(t, before[t] - 1)][5] for t in moved}
    rc = victim.stop()
    if rc not in (0, 128 + signal.SIGTERM):
        s.fail(f"worker {victim.name} exited with {rc} on SIGTERM")
    s.start(victim)

    # 3. each moved task runs again (a run after the stopped one: on the restarted worker, or on the other one) and
    # has written 200 numbers; then both workers run everything and the sink catches up with the topic
    def resumed():
        sink.poll()
        new = {}
        for run, (task, start, p, off) in sink.runs().items():
            if task in stopped_runs and off >= before[p] and run != stopped_runs[task]:
                new.setdefault(task, []).append(start)
        if all(t in new and max(sink.numbers(t)) >= min(new[t]) + 200 for t in moved):
            return new
        return None
    wait_for(s, f"source tasks {moved} resumed after {victim.name}'s restart", resumed, looks=900)
    other = b if victim is a else a
    sts = wait_for(s, "both workers RUNNING after the restart",
                   lambda: (lambda st: st if all(all_running(x, both) for x in st.values()) else None)(
                       {n: status(other, n) for n in (s.source, s.sink)}))
    ends = data_ends(s.target.bootstrap, s.data)
    wait_for(s, f"the sink holding every record below {ends}", lambda: caught_up(sink, ends))
    for w in s.workers:
        w.stop()
    committed = committed_offsets(s.target.bootstrap, s.internal["offsets"], s.source)
    sink.poll()
    if sink.bad:
        s.fail(f"bad sink lines: {sink.bad[:5]}")

    # 4. each task's runs, in the order they wrote their partition: the first starts at 0, every later one right after
    # the last offset its predecessor committed (where it started itself, if it committed none): nothing lost,
    # numbers written twice only past a commit (at-least-once)
    problems = []
    for t in range(TASKS):
        problems += check_runs(t, sink, committed.get(t, []))
        if t in moved and not any(r[0] == t and r[3] >= before[t] and run != stopped_runs[t]
                                  for run, r in sink.runs().items()):
            problems.append(f"task {t}: no run after the stopped one")
    if problems:
        s.fail("\n".join(problems))
    dup = sum(c - 1 for t in range(TASKS) for c in Counter(sink.numbers(t)).values())
    w0, w1 = s.workers
    print(f"[{s.target.name}] starts: A {w0.start_s:.1f} s, B {w1.start_s:.1f} s (the last); stops: A {w0.stop_s:.1f} "
          f"s, B {w1.stop_s:.1f} s; {victim.name} stopped with source tasks {moved}; numbers written twice: {dup}; "
          f"source placement after the join {where}, at the end {placement(sts[s.source])}; waits {s.waits}")


def caught_up(sink: Sink, ends: list[int]) -> bool:
    sink.poll()
    return all((p, o) in sink.distinct for p in range(TASKS) for o in range(ends[p]))


def check_runs(t: int, sink: Sink, commits: list[tuple[int, str]]) -> list[str]:
    """Source task ``t``'s runs in the order they wrote partition t: the first starts at 0; each later one at the last
    number its predecessor committed + 1 (at its predecessor's own start when that one committed nothing); each run
    writes consecutive numbers; no number below the highest is missing. The problems found, one line each."""
    problems = []
    runs = sorted((first_off, run, start) for run, (task, start, p, first_off) in sink.runs().items() if task == t)
    last_commit = {run: n for n, run in commits}  # commits are in the order written: the last one of each run wins
    prev = None
    for _, run, start in runs:
        if prev is None:
            if start != 0:
                problems.append(f"task {t}: its first run {run} started at {start}, not 0")
        else:
            p_run, p_start = prev
            want = last_commit[p_run] + 1 if p_run in last_commit else p_start
            if start != want:
                problems.append(f"task {t}: run {run} started at {start}; its predecessor {p_run} (from {p_start}) "
                                f"last committed {last_commit.get(p_run)}: it should have started at {want}")
        nums = [r[3] for r in sorted(sink.distinct.values()) if r[5] == run]
        if nums != list(range(start, start + len(nums))):
            problems.append(f"task {t}: run {run} wrote {nums[:5]}... not {start}, {start + 1}, ...")
        prev = (run, start)
    distinct = sorted(set(sink.numbers(t)))
    if distinct != list(range(len(distinct))):
        problems.append(f"task {t}: numbers missing: {sorted(set(range(distinct[-1] + 1)) - set(distinct))[:20]}")
    return problems
