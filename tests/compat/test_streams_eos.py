"""Kafka Streams 4.4 ``exactly_once_v2`` word count against Apache Kafka 4.4.0 and `kafkalog serve` (issue 23).

The app (tests/compat/java/streams/StreamsWordCount.java, in a folder of its own: it needs kafka-streams, which the
other programs' classpath has not) counts the words of an input topic of 3 partitions through a repartition topic
and an in-memory store with a changelog, with no record cache (one output record per input word), and writes
(word, count) to an output topic of 2 partitions; commit.interval.ms=100, a 6 s session, transaction.timeout.ms=5000.
kafka-streams 4.4.0 and its dependencies (rocksdbjni among them) are fetched once from Maven Central with ``mvn``
into the lab's folder (``kafka-streams-4.4.0/libs``), as .ci/lab-kafka fetches Kafka's own jars.

The test, per broker: two instances A and B (one application.id, a state dir each) share the 6 tasks; a fixed input
of 20,000 words over a 12-word vocabulary (2,000 lines of 10 words, produced in 20 chunks of 100 lines) goes in;
once A and B both own tasks and the output moves, A is killed with SIGKILL right after a chunk is produced, as soon
as one of A's own changelog partitions shows an open transaction (its LSO below its end; input still flowing: 11
more chunks follow; the answer tells whether the kill caught one, and how many aborted records the output holds); B
takes the group over (the classic protocol: after A's session expires) and, once A's open transaction is aborted by
the coordinator's timeout, goes on from the last committed offsets and the changelog. A read_committed consumer of
the output then must see, for every word, the counts 1, 2, ..., N in order (N its number of occurrences in the
input): the last count exact, never a count twice, never one going down or past N. Every wait is a bounded number of
polls. Kafka's and kafkalog's final counts and the per-word sequences are compared (both must be the truth).

The brokers: by default the compat session's own (conftest.py's ``kafkalog`` and, under ``-m slow``, ``kafka``),
both at their default ``transaction.version`` 2, so the Streams producers take KIP-890 part 2's paths (partitions
added by Produce v12, the epoch bumped at every EndTxn v5): each run also checks from ``__transaction_state`` that
every transaction of the app ended that way. Under ``-m slow`` the same app runs once more on the transaction tests'
pair (conftest.py's ``txn_servers``: Kafka downgraded to ``transaction.version=0``, kafkalog started at 0, their
timeout scans every 500 ms), the pre-KIP-890-part-2 paths, on both brokers, compared.

By default only kafkalog's run is checked (against the truth); ``-m slow`` adds Apache Kafka's runs and the
comparisons. Run: ``pytest -q -m "slow or not slow" tests/compat/test_streams_eos.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from .lab import (
    KAFKA_VERSION,
    LAB_DIR,
    TOOL_JVM_OPTS,
    LabError,
    Target,
    _jvm_command,
    assert_same,
    children,
    java_classpath,
    kafka_libs,
)
from .test_transactions_v2_java import _assert_tv2

LAB_TEST_DEADLINE_S = 300
JAVA_DIR = Path(__file__).resolve().parent / "java"
STREAMS_SOURCE = JAVA_DIR / "streams" / "StreamsWordCount.java"
STREAMS_DIR = LAB_DIR / f"kafka-streams-{KAFKA_VERSION}"
RUN = uuid.uuid4().hex[:6]

VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
LINES, WORDS_PER_LINE, CHUNKS = 2000, 10, 20
KILL_AFTER_CHUNK = 8          # A is killed right after chunk 8 (0-based) is produced; chunks 9..19 follow
INPUT_PARTITIONS, OUTPUT_PARTITIONS = 3, 2
TASKS = {f"{s}_{p}" for s in (0, 1) for p in range(INPUT_PARTITIONS)}
POLL_S = 0.2


# -- kafka-streams' jars and the app -----------------------------------------------------------------------------

_fetch_lock = threading.Lock()


def streams_libs() -> Path:
    """The folder of kafka-streams 4.4.0 and its runtime dependencies that Kafka's own libs lack (rocksdbjni), fetched
    from Maven Central with ``mvn`` the first time (a ``.complete`` marker; an interrupted fetch leaves nothing)."""
    libs = STREAMS_DIR / "libs"
    with _fetch_lock:
        if (STREAMS_DIR / ".complete").is_file():
            return libs
        if shutil.which("mvn") is None:
            raise LabError("the Streams test needs `mvn` on PATH to fetch kafka-streams (apt-get install maven)")
        have = {p.name for p in kafka_libs().glob("*.jar")}
        LAB_DIR.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".kafka-streams-{KAFKA_VERSION}.", dir=LAB_DIR))
        try:
            (tmp / "pom.xml").write_text(
                '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
                "<groupId>kafkalog.lab</groupId><artifactId>kafka-streams-lab</artifactId><version>1</version>"
                "<packaging>pom</packaging><dependencies><dependency><groupId>org.apache.kafka</groupId>"
                f"<artifactId>kafka-streams</artifactId><version>{KAFKA_VERSION}</version></dependency>"
                "</dependencies></project>")
            r = children.run(["mvn", "-q", "-B", "-Dstyle.color=never", "dependency:copy-dependencies",
                              "-DincludeScope=runtime", f"-DoutputDirectory={tmp / 'dist' / 'libs'}"],
                             cwd=tmp, capture_output=True, text=True, timeout=900)
            got = tmp / "dist" / "libs"
            if r.returncode != 0 or not (got / f"kafka-streams-{KAFKA_VERSION}.jar").is_file():
                raise LabError(f"mvn could not fetch kafka-streams {KAFKA_VERSION} ({r.returncode}):\n"
                               f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            for jar in got.glob("*.jar"):
                if jar.name in have:  # kafka-clients, lz4, zstd ...: Kafka's own copy is on the classpath already
                    jar.unlink()
            (tmp / "dist" / ".complete").touch()
            shutil.rmtree(STREAMS_DIR, ignore_errors=True)
            try:
                os.rename(tmp / "dist", STREAMS_DIR)
            except OSError:
                if not (STREAMS_DIR / ".complete").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return libs


def compile_app() -> Path:
    """javac StreamsWordCount.java with Out.java against Kafka's jars and kafka-streams' into
    LAB_DIR/classes/streams-wordcount-HASH, once."""
    sources = [JAVA_DIR / "Out.java", STREAMS_SOURCE]
    h = hashlib.sha256(KAFKA_VERSION.encode())
    for p in sources:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    out = LAB_DIR / "classes" / f"streams-wordcount-{h.hexdigest()[:16]}"
    if (out / ".complete").is_file():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise LabError("the Streams test needs `javac` (JDK 17+) on PATH")
    cp = java_classpath([streams_libs() / "*"])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".streams-wordcount.", dir=out.parent))
    try:
        r = children.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", cp, "-d", str(tmp), *map(str, sources)],
                         capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise LabError(f"javac failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        (tmp / ".complete").touch()
        try:
            os.rename(tmp, out)
        except OSError:
            if not (out / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@pytest.fixture(scope="module")
def app_classes():
    try:
        return compile_app()
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


class Instance:
    """One StreamsWordCount JVM: its JSON lines gathered by a thread, its log (WARN and up) in ``log``."""

    def __init__(self, classes: Path, bootstrap: str, app_id: str, workdir: Path, name: str, topics,
                 env: dict | None = None):
        self.name = name
        self.workdir = workdir / name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / "streams.log"
        cmd = _jvm_command("StreamsWordCount",
                           [bootstrap, app_id, self.workdir / "state", *topics, name],
                           TOOL_JVM_OPTS, classpath_extra=[classes, streams_libs() / "*"], log_file=str(self.log))
        self.stderr = open(self.workdir / "stderr", "wb")
        self.proc = children.popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr,
                                   cwd=self.workdir, env=dict(os.environ, **env) if env else None)
        self.lines: list[dict] = []
        self.junk: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("{"):
                self.lines.append(json.loads(line))
            elif line:
                self.junk.append(line)

    def latest_tasks(self) -> tuple[str, set[str]]:
        for d in reversed(self.lines):
            if d["event"] == "tasks":
                return d["state"], set(d["active"])
        return "", set()

    def errors(self) -> list[dict]:
        return [d for d in self.lines if d["event"] == "error"]

    def kill(self):
        """SIGKILL the JVM (the Popen child is the java process itself)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)
        self.stderr.close()

    def log_text(self, chars: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.is_file() else ""
        err = (self.workdir / "stderr").read_text(errors="replace")
        return f"--- {self.name} streams.log ---\n{text[-chars:]}\n--- {self.name} stderr ---\n{err[-1500:]}"


def make_input() -> tuple[list[str], dict[str, int]]:
    rnd = random.Random(23)
    lines = [" ".join(rnd.choice(VOCAB) for _ in range(WORDS_PER_LINE)) for _ in range(LINES)]
    truth: dict[str, int] = {}
    for line in lines:
        for w in line.split(" "):
            truth[w] = truth.get(w, 0) + 1
    return lines, truth


class OutputReader:
    """A read_committed consumer of every output partition from the beginning: records in offset order per
    partition, gathered by ``poll()``."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_committed"):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        self.topic = topic
        self.c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4",
                           "group.id": f"reader-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                           "isolation.level": isolation, "socket.timeout.ms": 10000})
        self.c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(OUTPUT_PARTITIONS)])
        self.records: list[tuple[int, int, str, int]] = []  # (partition, offset, word, count)

    def poll(self, timeout: float = POLL_S) -> int:
        import struct
        got = 0
        for m in self.c.consume(5000, timeout):
            if m.error() is None:
                self.records.append((m.partition(), m.offset(), m.key().decode(), struct.unpack(">q", m.value())[0]))
                got += 1
        return got

    def latest(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, _, w, n in self.records:
            out[w] = n
        return out

    def ends(self) -> list[int]:
        from confluent_kafka import TopicPartition
        return [self.c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
                for p in range(OUTPUT_PARTITIONS)]

    def positions(self) -> list[int]:
        from confluent_kafka import TopicPartition
        return [tp.offset for tp in self.c.position([TopicPartition(self.topic, p) for p in range(OUTPUT_PARTITIONS)])]

    def close(self):
        self.c.close()


def watermarks(bootstrap: str, topic: str, partitions, consumers: dict) -> list[tuple[int, int]]:
    """(LSO, end offset) of each partition: ListOffsets LATEST with read_committed and read_uncommitted (the two
    consumers are made on first use and kept in ``consumers``)."""
    from confluent_kafka import Consumer, TopicPartition
    for iso in ("read_committed", "read_uncommitted"):
        if iso not in consumers:
            consumers[iso] = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4",
                                       "group.id": f"look-{uuid.uuid4().hex[:8]}", "isolation.level": iso,
                                       "socket.timeout.ms": 10000})
    out = []
    for p in partitions:
        tp = TopicPartition(topic, p)
        out.append((consumers["read_committed"].get_watermark_offsets(tp, timeout=10, cached=False)[1],
                    consumers["read_uncommitted"].get_watermark_offsets(tp, timeout=10, cached=False)[1]))
    return out


def sequences(records) -> dict[str, list[int]]:
    seq: dict[str, list[int]] = {}
    for _, _, w, n in sorted(records):
        seq.setdefault(w, []).append(n)
    return seq


def run_word_count(target: Target, classes: Path, workdir: Path) -> dict:
    """The scenario on one broker: the answer (everything the checks and the comparison need)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    lines, truth = make_input()
    prefix = f"wc-{RUN}"
    app_id, inp, outp = f"{prefix}-app", f"{prefix}-in", f"{prefix}-out"
    admin = AdminClient({"bootstrap.servers": target.bootstrap, "broker.address.family": "v4"})
    for f in admin.create_topics([NewTopic(inp, INPUT_PARTITIONS, 1), NewTopic(outp, OUTPUT_PARTITIONS, 1)],
                                 operation_timeout=15).values():
        f.result(timeout=20)
    producer = Producer({"bootstrap.servers": target.bootstrap, "broker.address.family": "v4", "linger.ms": 5,
                         "enable.idempotence": True})
    per_chunk = LINES // CHUNKS
    produced = 0

    def produce_chunk(i: int):
        nonlocal produced
        for j in range(i * per_chunk, (i + 1) * per_chunk):
            producer.produce(inp, lines[j].encode(), key=f"line-{j}".encode())
        left = producer.flush(30)
        assert left == 0, f"[{target.name}] {left} input records not delivered"
        produced = (i + 1) * per_chunk

    ans: dict = {"broker": target.name, "app_id": app_id}
    a = b = reader = None
    look: dict = {}
    t0 = time.monotonic()
    try:
        a = Instance(classes, target.bootstrap, app_id, workdir, "A", (inp, outp))
        b = Instance(classes, target.bootstrap, app_id, workdir, "B", (inp, outp))
        reader = OutputReader(target.bootstrap, outp)

        def fail(what: str):
            raise AssertionError(f"[{target.name}] {what}\nA: {a.lines[-12:]}\nB: {b.lines[-12:]}\n"
                                 f"{a.log_text()}\n{b.log_text()}\n{target.server.log_tail(3000)}")

        # 1. both instances RUNNING, each with tasks, all 6 tasks owned (at most 600 looks)
        for _ in range(600):
            (sa, ta), (sb, tb) = a.latest_tasks(), b.latest_tasks()
            if sa == sb == "RUNNING" and ta and tb and ta | tb == TASKS and not ta & tb:
                break
            if a.errors() or b.errors() or a.proc.poll() is not None or b.proc.poll() is not None:
                fail("an instance failed before both were running")
            time.sleep(POLL_S)
        else:
            fail(f"A and B did not share the tasks: A={a.latest_tasks()} B={b.latest_tasks()}")
        ans["tasks_before"] = {"A": sorted(ta), "B": sorted(tb)}
        ans["both_running_s"] = round(time.monotonic() - t0, 1)

        # 2. the first chunks; the output must move (at most 300 polls)
        for i in range(KILL_AFTER_CHUNK):
            produce_chunk(i)
            reader.poll(0)
        for _ in range(300):
            if len(reader.records) >= 1000:
                break
            if a.errors() or b.errors():
                fail("an instance failed while processing the first chunks")
            reader.poll()
        else:
            fail(f"the output did not move: {len(reader.records)} committed records")

        # 3. one more chunk, then A dies mid-stream, with a transaction open when we can catch one (its store's
        # changelog partitions, written by A alone, have an LSO below their end: at most 200 looks); the rest of the
        # input keeps coming
        produce_chunk(KILL_AFTER_CHUNK)
        changelog = f"{app_id}-counts-changelog"
        mine = [int(t.split("_")[1]) for t in sorted(ta) if t.startswith("1_")]
        open_at_kill = False
        for _ in range(200 if mine else 0):
            if any(lso < end for lso, end in watermarks(target.bootstrap, changelog, mine, look)):
                open_at_kill = True
                break
        seen_at_kill = len(reader.records)
        a.kill()
        ans["a_transaction_open_at_kill"] = open_at_kill
        ans["killed"] = {"instance": "A", "exit": a.proc.returncode, "tasks": sorted(ta)}
        ans["committed_seen_at_kill"] = seen_at_kill
        t_kill = time.monotonic()
        for i in range(KILL_AFTER_CHUNK + 1, CHUNKS):
            produce_chunk(i)
            reader.poll(0)
        assert produced == LINES

        # 4. B owns all 6 tasks and the counts reach the truth (at most 1000 polls, each up to 0.2 s)
        polls = 0
        for n in range(1, 1001):
            polls = n
            reader.poll()
            if b.errors() or b.proc.poll() is not None:
                fail("the survivor failed")
            if reader.latest() == truth:
                break
        else:
            latest = reader.latest()
            fail(f"the counts did not reach the truth after {polls} polls: "
                 f"{ {w: (latest.get(w), n) for w, n in truth.items() if latest.get(w) != n} }; "
                 f"B: {b.latest_tasks()}")
        ans["takeover_polls"] = polls
        ans["kill_to_exact_s"] = round(time.monotonic() - t_kill, 1)
        # a few more polls: nothing may come after the truth (a double count would show here)
        for _ in range(10):
            reader.poll()
        sb, tb = b.latest_tasks()
        ans["survivor"] = {"state": sb, "tasks": sorted(tb)}
        b.stop()
        ans["survivor_exit"] = b.proc.returncode
        ans["survivor_events"] = [d for d in b.lines if d["event"] in ("state", "error", "closed")]

        # 5. everything committed, read to the end by a fresh read_committed consumer; and read_uncommitted's count
        final = OutputReader(target.bootstrap, outp)
        unc = OutputReader(target.bootstrap, outp, "read_uncommitted")
        try:
            ends = final.ends()
            for _ in range(300):
                if final.poll() == 0 and all(p >= e for p, e in zip(final.positions(), ends)):
                    break
            for _ in range(300):
                if unc.poll() == 0 and all(p >= e for p, e in zip(unc.positions(), unc.ends())):
                    break
            ans["output_end_offsets"] = ends
            ans["read_committed_records"] = len(final.records)
            ans["read_uncommitted_records"] = len(unc.records)
            ans["aborted_output_records"] = len(unc.records) - len(final.records)
            ans["final_sequences"] = sequences(final.records)
        finally:
            final.close()
            unc.close()
        ans["live_sequences"] = sequences(reader.records)
        ans["truth"] = truth
        ans["errors"] = a.errors() + b.errors()
        ans["seconds"] = round(time.monotonic() - t0, 1)
        return ans
    finally:
        for inst in (a, b):
            if inst is not None:
                inst.stop()
        if reader is not None:
            reader.close()
        producer.flush(5)
        for c in look.values():
            c.close()


@pytest.fixture(scope="module")
def answers():
    return {}


def answer(answers: dict, servers, name: str, classes: Path, tmp_path_factory, level: str = "tv0") -> dict:
    """The word count's answer on broker ``name`` of ``servers`` (``target(name)``), run once per module."""
    key = f"{name}-{level}"
    if key not in answers:
        target = servers.target(name)
        try:
            answers[key] = run_word_count(target, classes, tmp_path_factory.mktemp(f"streams-{key}"))
        except BaseException as e:
            answers[key] = e
            raise
    got = answers[key]
    if isinstance(got, BaseException):
        raise AssertionError(f"the word count failed earlier on {key}: {got}")
    return got


class _SessionPair:
    """The compat session's own brokers (conftest.py's ``kafka`` and ``kafkalog``: both at their default
    transaction.version, 2), as ``answer`` asks for them."""

    def __init__(self, **servers):
        self.servers = servers

    def target(self, name: str) -> Target:
        return Target(name, self.servers[name].bootstrap, self.servers[name])


def check_exact(ans: dict) -> None:
    truth = ans["truth"]
    problems = []
    for where in ("live_sequences", "final_sequences"):
        seq = ans[where]
        if set(seq) != set(truth):
            problems.append(f"{where}: words {sorted(seq)}, expected {sorted(truth)}")
        for w, n in truth.items():
            got = seq.get(w, [])
            if not got or got[-1] != n:
                problems.append(f"{where}[{w}]: last count {got[-1] if got else None}, expected {n}")
            if any(y < x for x, y in zip(got, got[1:])):
                problems.append(f"{where}[{w}]: a count goes down: {got[:5]}...")
            if any(x > n for x in got):
                problems.append(f"{where}[{w}]: a count past the true total {n}: {max(got)}")
            if got != list(range(1, n + 1)):  # no record cache: exactly one output record per input word
                dup = len(got) - len(set(got))
                problems.append(f"{where}[{w}]: not 1..{n} in order ({len(got)} records, {dup} repeated)")
    if ans["read_committed_records"] != sum(truth.values()):
        problems.append(f"read_committed_records: {ans['read_committed_records']}, expected {sum(truth.values())}")
    if ans["errors"]:
        problems.append(f"uncaught Streams errors: {ans['errors']}")
    if ans["survivor"] != {"state": "RUNNING", "tasks": sorted(TASKS)}:
        problems.append(f"the survivor: {ans['survivor']}, expected RUNNING with all of {sorted(TASKS)}")
    assert not problems, "\n  ".join([f"[{ans['broker']}] {len(problems)} problem(s):", *problems[:40]])


def summary(ans: dict) -> dict:
    """What must be the same on both brokers."""
    return {"final_counts": {w: s[-1] for w, s in ans["final_sequences"].items()},
            "final_sequences": ans["final_sequences"], "read_committed_records": ans["read_committed_records"],
            "survivor": ans["survivor"], "errors": ans["errors"]}


def report(ans: dict) -> None:
    keep = {k: v for k, v in ans.items() if k not in ("final_sequences", "live_sequences", "survivor_events")}
    print(json.dumps(keep, sort_keys=True))


def test_streams_exactly_once_word_count_kafkalog(kafkalog, app_classes, answers, tmp_path_factory):
    """What a Kafka Streams 4.4 app meets on a kafkalog started with its defaults: transactions v2 (KIP-890 part
    2: partitions added by Produce v12, the epoch bumped at every EndTxn v5); checked from __transaction_state."""
    pair = _SessionPair(kafkalog=kafkalog)
    ans = answer(answers, pair, "kafkalog", app_classes, tmp_path_factory, "tv2")
    report(ans)
    check_exact(ans)  # the truth: every word's counts 1..N in order, none twice, none lost
    _assert_tv2(pair.target("kafkalog"), ans["app_id"])


@pytest.mark.slow  # Apache Kafka's run of the same scenario (~35 s), for the default suite's 20-minute budget
def test_streams_exactly_once_word_count_kafka_beside_kafkalog(kafka, kafkalog, app_classes, answers,
                                                               tmp_path_factory):
    pair = _SessionPair(kafka=kafka, kafkalog=kafkalog)
    ans = answer(answers, pair, "kafka", app_classes, tmp_path_factory, "tv2")
    report(ans)
    check_exact(ans)
    _assert_tv2(pair.target("kafka"), ans["app_id"])
    ref = answer(answers, pair, "kafkalog", app_classes, tmp_path_factory, "tv2")
    assert_same(summary(ans), summary(ref), what="Streams exactly_once_v2 word count (transactions v2)")


@pytest.mark.slow  # the same app on the pre-KIP-890-part-2 paths (both brokers at transaction.version=0), ~60 s
def test_streams_exactly_once_word_count_transactions_v0(txn_servers, app_classes, answers, tmp_path_factory):
    ref = answer(answers, txn_servers, "kafkalog", app_classes, tmp_path_factory)
    report(ref)
    check_exact(ref)
    ans = answer(answers, txn_servers, "kafka", app_classes, tmp_path_factory)
    check_exact(ans)
    assert_same(summary(ans), summary(ref), what="Streams exactly_once_v2 word count (transaction.version=0)")
