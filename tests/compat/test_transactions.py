"""Kafka transactions end to end: Apache Kafka 4.4.0 and `kafkalog serve`, answers compared field by field.

Clients: Apache Kafka's Java client 4.4.0 (tests/compat/java/TxnScenarios.java, one run per scenario) and
confluent-kafka (librdkafka; the TV0 request versions: AddPartitionsToTxn v0, EndTxn v1, TxnOffsetCommit <= 3).

Scenarios (Java), each asserted on its own on both brokers, then kafkalog's answer compared with Kafka's (timings,
producer ids and exception message texts aside):

- fencing: producer A has an open transaction (2 records) when producer B with the same transactional.id calls
  initTransactions: A is fenced (its open transaction aborted), its next send and its commit fail (the exception
  classes are compared), B commits; then C (open, 1 record) is fenced by D the same way and C's very next call is
  the commit (EndTxn, no Produce before it). read_committed sees B's and D's records only.
- ctp: consume-transform-produce with a read_committed consumer in a group: sendOffsetsToTransaction(offsets,
  consumer.groupMetadata()) + commit puts the group's committed offset at the input's end; an aborted second round
  leaves it there; read_committed shows the committed output only.
- open: an open transaction followed by a plain record: read_uncommitted sees everything, read_committed stops at
  the LSO (the open transaction's first offset), and endOffsets / ListOffsets LATEST answer the LSO for
  read_committed and the log end for read_uncommitted; after the commit both see all of it.
- timeout: transaction.timeout.ms=3000 and a producer that then does nothing: the broker's timeout scan aborts the
  transaction (watched through ListOffsets, at most 60 looks 500 ms apart), the producer's commit fails, a new
  producer with the same id commits.
- stable: a transaction holding sendOffsetsToTransaction offsets stays open: the group's consumers (kafka-clients
  4.4 always sends OffsetFetch RequireStable=true, whatever the isolation level) keep getting
  UNSTABLE_OFFSET_COMMIT and their committed()/position() time out, the Admin without RequireStable sees the last
  committed offset and with RequireStable skips the partition; after the commit all see the new offset.

And confluent-kafka: init_transactions, commit, abort, send_offsets_to_transaction with a consumer group, fencing by
a second producer with the same transactional.id, read_committed / read_uncommitted output.

The brokers: a pair of this module's own (started when a test first needs one, stopped at the module's end), not the
session's: the session's Kafka finalizes ``transaction.version=2`` (the default of a 4.4 cluster), which makes the
Java client take the KIP-890 part 2 paths (no AddPartitionsToTxn, EndTxn v5, an epoch bump per transaction), while
kafkalog does not advertise that feature; this module's Kafka is downgraded to ``transaction.version=0`` right
after its start, so both brokers see the same requests. Both also get
``transaction.abort.timed.out.transaction.cleanup.interval.ms=500`` for the timeout scenario.

Run: ``pytest -q tests/compat/test_transactions.py`` (Kafka only: ``-k "not kafkalog"``).
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from .lab import LabError, Target, assert_same, run_java
from .test_java_clients import Answer, compile_programs

LAB_TEST_DEADLINE_S = 150
RUN = uuid.uuid4().hex[:6]  # names are the same on both brokers (so answers compare verbatim)
FENCED = {"ProducerFencedException", "InvalidProducerEpochException"}
# what may differ between the brokers in a step's line: timings, texts (they carry producer ids and epochs)
IGNORE = ("*.elapsed_ms", "*.message", "*.causes", "*.error_message")


# -- the broker pair (conftest.TxnServers, one per session: its txn_servers fixture) ----------------------------------

@pytest.fixture(params=["kafka", "kafkalog"], ids=["kafka", "kafkalog"])
def txn_target(request, txn_servers) -> Target:
    """This module's broker under test; on kafkalog Kafka is started too (the reference), in the set-up."""
    if request.param == "kafkalog":
        txn_servers.get("kafka")
    return txn_servers.target(request.param)


# -- the Java scenarios ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def java_classes():
    try:
        return compile_programs()
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def scenarios(java_classes, txn_servers):
    return Scenarios(java_classes, txn_servers)


class Scenarios:
    """Each (scenario, broker) run once per module (a failure is remembered too)."""

    def __init__(self, classes, servers, prefix: str | None = None):
        self.classes = classes
        self.servers = servers
        self.prefix = prefix or f"tx-{RUN}"  # the names TxnScenarios makes start with it
        self.cache: dict = {}

    def answer(self, scenario: str, broker: str) -> Answer:
        key = (scenario, broker)
        if key not in self.cache:
            target = self.servers.target(broker)
            try:
                self.cache[key] = self._run(scenario, target)
            except BaseException as e:
                self.cache[key] = e
                raise
        got = self.cache[key]
        if isinstance(got, BaseException):
            raise AssertionError(f"the {scenario} scenario failed earlier on {broker}: {got}")
        return got

    def _run(self, scenario: str, target: Target) -> Answer:
        t0 = time.monotonic()
        try:
            proc = run_java("TxnScenarios", [target.bootstrap, self.prefix, scenario], timeout=120,
                            classpath_extra=[self.classes])
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"TxnScenarios {scenario} on {target.name} ran over 120 s\n"
                                 f"stdout: {e.stdout!r:.3000}\nstderr: {e.stderr!r:.3000}") from None
        ans = Answer("TxnScenarios " + scenario, target.name, proc, time.monotonic() - t0)
        print(f"[java] TxnScenarios {scenario} on {target.name}: exit {ans.returncode} in {ans.seconds:.1f} s")
        return ans


def steps_of(ans: Answer) -> dict[str, dict]:
    """The scenario's lines by step (a read step per isolation level: ``read_final/read_committed``)."""
    out = {}
    for d in ans.lines:
        key = d["step"] + (f"/{d['isolation']}" if "isolation" in d else "")
        assert key not in out, f"step {key} twice\n{ans.where()}"
        out[key] = {k: v for k, v in d.items() if k not in ("scenario", "step")}
    return out


def describe(d: dict | None) -> str:
    if d is None:
        return "<no line: the scenario stopped before it>"
    if d.get("ok"):
        return "ok"
    return f"{d.get('error')}: {d.get('message')}"


class Check:
    """Collects every unmet expectation of one scenario's answer, reported together with the program's stderr."""

    def __init__(self, ans: Answer):
        self.ans = ans
        self.steps = steps_of(ans)
        self.problems: list[str] = []

    def ok(self, step: str, **fields) -> dict:
        d = self.steps.get(step)
        if d is None or not d.get("ok"):
            self.problems.append(f"{step}: expected to succeed, got {describe(d)}")
            return {}
        for k, v in fields.items():
            if d.get(k) != v:
                self.problems.append(f"{step}.{k}: {d.get(k)!r}, expected {v!r}")
        return d

    def fails(self, step: str, errors, retriable: bool = False) -> dict:
        d = self.steps.get(step)
        if d is None or d.get("ok") or d.get("error") not in errors:
            self.problems.append(f"{step}: expected to fail with one of {sorted(errors)}, got {describe(d)}")
            return {}
        if d.get("retriable") != retriable:
            self.problems.append(f"{step}: {d['error']} with retriable={d.get('retriable')}, expected {retriable}")
        return d

    def read(self, step: str, isolation: str, values, offsets, end: int) -> None:
        self.ok(f"{step}/{isolation}", values=values, offsets=offsets, end_offset=end, position=end)

    def done(self) -> None:
        self.ok("done")
        assert not self.problems, "\n  ".join([f"{len(self.problems)} problem(s):", *self.problems]) + \
            f"\n{self.ans.where()}"


def compare_with_kafka(scenarios: Scenarios, scenario: str, ans: Answer, ignore=()) -> None:
    ref = scenarios.answer(scenario, "kafka")
    assert_same(steps_of(ref), steps_of(ans), ignore=(*IGNORE, *ignore), what=f"the {scenario} scenario")


def run_checked(scenarios: Scenarios, target: Target, scenario: str, expect) -> Answer:
    ans = scenarios.answer(scenario, target.name)
    check = Check(ans)
    expect(check)
    for line in ans.lines:
        print(line)
    check.done()
    if target.name == "kafkalog":
        compare_with_kafka(scenarios, scenario, ans)
    return ans


def test_fencing(scenarios, txn_target):
    def expect(c: Check):
        c.ok("create")
        c.ok("a_init")
        c.ok("a_open", offsets=[0, 1])
        c.ok("b_init")  # aborts A's open transaction: the marker takes offset 2
        c.fails("a_send", FENCED)
        c.fails("a_commit", FENCED)
        c.ok("b_commit", offsets=[3, 4])
        c.ok("c_open", offset=6)
        c.ok("d_init")
        c.fails("c_commit", {"ProducerFencedException"})  # EndTxn with the old epoch: PRODUCER_FENCED
        c.ok("d_commit", offset=8)
        c.ok("settle_final", settled=True, end=10)
        c.read("read_final", "read_committed", ["b-0", "b-1", "d-0"], [3, 4, 8], 10)
        c.read("read_final", "read_uncommitted", ["a-0", "a-1", "b-0", "b-1", "c-0", "d-0"], [0, 1, 3, 4, 6, 8], 10)
    run_checked(scenarios, txn_target, "fencing", expect)


def test_consume_transform_produce(scenarios, txn_target):
    inp = f"tx-{RUN}-ctp-in-0"

    def expect(c: Check):
        c.ok("input1", offsets=[0, 1, 2, 3, 4])
        c.ok("consume1", values=[f"in-{i}" for i in range(5)], offsets=[0, 1, 2, 3, 4])
        c.ok("init")
        c.ok("commit1", group_generation_positive=True, member_id_set=True)
        c.ok("offsets1", consumer_committed=5, admin={inp: 5})
        c.ok("input2", offsets=[5, 6, 7])
        c.ok("consume2", values=["in-5", "in-6", "in-7"], offsets=[5, 6, 7])
        c.ok("abort2")
        c.ok("offsets2", consumer_committed=5, admin={inp: 5})  # the aborted round's offsets are discarded
        c.ok("settle_out", settled=True, end=10)
        c.read("read_out", "read_committed", [f"OUT-in-{i}" for i in range(5)], [0, 1, 2, 3, 4], 10)
        c.read("read_out", "read_uncommitted", [f"OUT-in-{i}" for i in range(8)], [0, 1, 2, 3, 4, 6, 7, 8], 10)
    run_checked(scenarios, txn_target, "ctp", expect)


def test_open_transaction_lso(scenarios, txn_target):
    def ends(lso, end):
        return {"consumer_end_read_committed": lso, "consumer_end_read_uncommitted": end,
                "consumer_beginning_read_committed": 0, "consumer_beginning_read_uncommitted": 0,
                "admin_latest_read_committed": lso, "admin_latest_read_uncommitted": end}

    def expect(c: Check):
        c.ok("commit1", offsets=[0, 1])
        c.ok("settle1", settled=True, end=3)
        c.ok("open", offsets=[3, 4, 5])
        c.ok("plain", offsets=[6])
        c.ok("ends_open", **ends(3, 7))  # LSO = the open transaction's first offset; the log end after p-0
        c.read("read_open", "read_committed", ["c-0", "c-1"], [0, 1], 3)
        c.read("read_open", "read_uncommitted", ["c-0", "c-1", "o-0", "o-1", "o-2", "p-0"], [0, 1, 3, 4, 5, 6], 7)
        c.ok("commit2")
        c.ok("settle2", settled=True, end=8)
        c.ok("ends_committed", **ends(8, 8))
        everything = (["c-0", "c-1", "o-0", "o-1", "o-2", "p-0"], [0, 1, 3, 4, 5, 6], 8)
        c.read("read_committed_txn", "read_committed", *everything)
        c.read("read_committed_txn", "read_uncommitted", *everything)
    run_checked(scenarios, txn_target, "open", expect)


@pytest.mark.slow  # about 15 s a broker (the suite's 20-minute budget); the wire test covers it by default
def test_timeout_abort(scenarios, txn_target):
    def expect(c: Check):
        c.ok("init")
        c.ok("open", offsets=[0, 1])
        c.ok("ends_open", read_committed=0, read_uncommitted=2)
        c.ok("wait_abort", aborted=True, read_committed=3, read_uncommitted=3)  # abort marker at 2
        c.read("read_after_abort", "read_committed", [], [], 3)
        c.fails("commit", FENCED)
        c.ok("reinit_commit", offset=3)
        c.ok("settle_final", settled=True, end=5)
        c.read("read_final", "read_committed", ["t-after"], [3], 5)
        c.read("read_final", "read_uncommitted", ["t-0", "t-1", "t-after"], [0, 1, 3], 5)
    run_checked(scenarios, txn_target, "timeout", expect)


@pytest.mark.slow  # about 15 s a broker (the suite's 20-minute budget); the wire test covers it by default
def test_offset_fetch_require_stable(scenarios, txn_target):
    tp = f"tx-{RUN}-stable-0"

    def expect(c: Check):
        c.ok("input", offsets=[0, 1, 2])
        c.ok("commit_plain")
        c.ok("init")
        c.ok("open")
        for iso in ("read_committed", "read_uncommitted"):
            # UNSTABLE_OFFSET_COMMIT again and again (retriable): the client waits until its timeout
            c.fails(f"pending_committed_{iso}", {"TimeoutException"}, retriable=True)
            c.fails(f"pending_position_{iso}", {"TimeoutException"}, retriable=True)
        c.ok("pending_admin", offsets={tp: 1})  # no RequireStable: the last committed offset
        c.ok("pending_admin_require_stable", offsets={})  # the Admin leaves out a partition answered with an error
        c.ok("commit")
        for iso in ("read_committed", "read_uncommitted"):
            c.ok(f"after_commit_committed_{iso}", offset=3)
            c.ok(f"after_commit_position_{iso}", position=3)
        c.ok("after_commit_admin", offsets={tp: 3})
        c.ok("after_commit_admin_require_stable", offsets={tp: 3})
    run_checked(scenarios, txn_target, "stable", expect)


# -- confluent-kafka (librdkafka) --------------------------------------------------------------------------------

def ck_scenario(bootstrap: str, prefix: str) -> dict[str, dict]:
    """The librdkafka transactional scenario; {step: {"ok": ..., fields or error fields}}. Stops at the first failed
    step it needs. Every call has a timeout; every wait is a bounded number of polls."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    out_topic, in_topic, group, txn_id = f"{prefix}-out", f"{prefix}-in", f"{prefix}-g", f"{prefix}-txn"
    base = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "socket.timeout.ms": 10000}
    steps: dict[str, dict] = {}

    class Stop(Exception):
        pass

    def step(name, fn, required=True):
        t0 = time.monotonic()
        try:
            got = fn() or {}
            steps[name] = {"ok": True, **got}
        except KafkaException as e:
            err = e.args[0]
            steps[name] = {"ok": False, "error": err.name(), "fatal": err.fatal(), "retriable": err.retriable(),
                           "txn_requires_abort": err.txn_requires_abort(), "error_message": err.str()}
        except Exception as e:  # noqa: BLE001 — the error is the answer
            steps[name] = {"ok": False, "error": type(e).__name__, "error_message": str(e)}
        steps[name]["elapsed_ms"] = int((time.monotonic() - t0) * 1000)
        if required and not steps[name]["ok"]:
            raise Stop(name)

    def producer(**kw):
        return Producer({**base, "transactional.id": txn_id, "message.timeout.ms": 20000, "linger.ms": 0, **kw})

    def consumer(isolation, **kw):
        return Consumer({**base, "group.id": kw.pop("group", f"{prefix}-reader-{isolation}"),
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000, **kw})

    def produce(p, topic, values):
        offsets, errors = [], []

        def cb(err, msg):
            if err is not None:
                errors.append(err.name())
            else:
                offsets.append(msg.offset())
        for v in values:
            p.produce(topic, v.encode(), partition=0, on_delivery=cb)
        left = p.flush(15)
        if errors or left:
            raise RuntimeError(f"delivery failed: {errors}, {left} left")
        return sorted(offsets)

    def read(isolation):
        c = consumer(isolation)
        try:
            tp = TopicPartition(out_topic, 0, OFFSET_BEGINNING)
            c.assign([tp])
            end = c.get_watermark_offsets(TopicPartition(out_topic, 0), timeout=10)[1]
            values, offsets = [], []
            for _ in range(75):
                pos = c.position([TopicPartition(out_topic, 0)])[0].offset
                if pos >= end:
                    break
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    values.append(m.value().decode())
                    offsets.append(m.offset())
            return {"values": values, "offsets": offsets, "end_offset": end,
                    "position": c.position([TopicPartition(out_topic, 0)])[0].offset}
        finally:
            c.close()

    def settle():
        rc, ru = consumer("read_committed"), consumer("read_uncommitted")
        try:
            for _ in range(50):
                lso = rc.get_watermark_offsets(TopicPartition(out_topic, 0), timeout=10, cached=False)[1]
                end = ru.get_watermark_offsets(TopicPartition(out_topic, 0), timeout=10, cached=False)[1]
                if lso == end:
                    break
                time.sleep(0.1)
            return {"settled": lso == end, "end": end}
        finally:
            rc.close()
            ru.close()

    admin = AdminClient(base)
    p1 = p2 = c = None
    try:
        def create():
            for f in admin.create_topics([NewTopic(t, 1, 1) for t in (out_topic, in_topic)],
                                         operation_timeout=15).values():
                f.result(timeout=20)
        step("create", create)
        p1 = producer(**{"client.id": "ck-p1"})
        step("init", lambda: p1.init_transactions(15))

        def commit1():
            p1.begin_transaction()
            offsets = produce(p1, out_topic, ["c1-0", "c1-1", "c1-2"])
            p1.commit_transaction(15)
            return {"offsets": offsets}
        step("commit1", commit1)

        def abort():
            p1.begin_transaction()
            offsets = produce(p1, out_topic, ["ab-0", "ab-1"])
            p1.abort_transaction(15)
            return {"offsets": offsets}
        step("abort", abort)

        def inputs():
            p = Producer({**base, "linger.ms": 0, "acks": "all"})
            return {"offsets": produce(p, in_topic, [f"in-{i}" for i in range(4)])}
        step("input", inputs)
        c = consumer("read_committed", group=group, **{"client.id": "ck-ctp"})
        c.subscribe([in_topic])
        got = []

        def consume():
            for _ in range(75):
                if len(got) >= 4:
                    break
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m)
            if len(got) != 4:
                raise RuntimeError(f"wanted 4 records, got {len(got)}")
            return {"values": [m.value().decode() for m in got], "offsets": [m.offset() for m in got]}
        step("consume", consume)

        def send_offsets():
            p1.begin_transaction()
            offsets = produce(p1, out_topic, [f"OUT-{m.value().decode()}" for m in got])
            positions = c.position(c.assignment())
            p1.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 15)
            p1.commit_transaction(15)
            return {"offsets": offsets, "sent": [(t.topic, t.partition, t.offset) for t in positions]}
        step("send_offsets", send_offsets)

        def committed():
            from confluent_kafka import ConsumerGroupTopicPartitions
            mine = c.committed([TopicPartition(in_topic, 0)], timeout=15)[0]
            res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], require_stable=True)
            listed = res[group].result(timeout=20)
            return {"consumer_committed": mine.offset,
                    "admin": {f"{t.topic}-{t.partition}": t.offset for t in listed.topic_partitions}}
        step("committed", committed)
        c.close()
        c = None

        def open_fenced():
            p1.begin_transaction()
            return {"offsets": produce(p1, out_topic, ["f-0"])}
        step("open_fenced", open_fenced)
        p2 = producer(**{"client.id": "ck-p2"})
        step("fence_init", lambda: p2.init_transactions(15))
        step("fenced_commit", lambda: p1.commit_transaction(15), required=False)

        def p2_commit():
            p2.begin_transaction()
            offsets = produce(p2, out_topic, ["p2-0"])
            p2.commit_transaction(15)
            return {"offsets": offsets}
        step("p2_commit", p2_commit)
        step("settle", settle)
        step("read_committed", lambda: read("read_committed"))
        step("read_uncommitted", lambda: read("read_uncommitted"))
    except Stop:
        pass
    finally:
        if c is not None:
            c.close()
    return steps


@pytest.fixture(scope="module")
def ck_answers():
    return {}


def ck_answer(answers: dict, target: Target) -> dict:
    """The librdkafka scenario's answer on this broker, run once per module."""
    if target.name not in answers:
        answers[target.name] = ck_scenario(target.bootstrap, f"tx-{RUN}-ck")
    return answers[target.name]


def test_confluent_kafka_transactions(txn_servers, txn_target, ck_answers):
    got = ck_answer(ck_answers, txn_target)
    for k, v in got.items():
        print(k, v)
    problems = []

    def want(step, **fields):
        d = got.get(step)
        if d is None or not d["ok"]:
            problems.append(f"{step}: expected to succeed, got {d}")
            return
        problems.extend(f"{step}.{k}: {d.get(k)!r}, expected {v!r}" for k, v in fields.items() if d.get(k) != v)

    want("create")
    want("init")
    want("commit1", offsets=[0, 1, 2])
    want("abort", offsets=[4, 5])
    want("input", offsets=[0, 1, 2, 3])
    want("consume", values=["in-0", "in-1", "in-2", "in-3"], offsets=[0, 1, 2, 3])
    want("send_offsets", offsets=[7, 8, 9, 10], sent=[(f"tx-{RUN}-ck-in", 0, 4)])
    want("committed", consumer_committed=4, admin={f"tx-{RUN}-ck-in-0": 4})
    want("open_fenced", offsets=[12])
    want("fence_init")
    fenced = got.get("fenced_commit")
    if fenced is None or fenced["ok"] or not fenced.get("fatal") or \
            fenced.get("error") not in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"):
        problems.append(f"fenced_commit: expected a fatal _FENCED / PRODUCER_FENCED error, got {fenced}")
    want("p2_commit", offsets=[14])
    want("settle", settled=True, end=16)
    committed_values = ["c1-0", "c1-1", "c1-2", "OUT-in-0", "OUT-in-1", "OUT-in-2", "OUT-in-3", "p2-0"]
    want("read_committed", values=committed_values, offsets=[0, 1, 2, 7, 8, 9, 10, 14], end_offset=16, position=16)
    want("read_uncommitted", values=["c1-0", "c1-1", "c1-2", "ab-0", "ab-1", "OUT-in-0", "OUT-in-1", "OUT-in-2",
                                     "OUT-in-3", "f-0", "p2-0"],
         offsets=[0, 1, 2, 4, 5, 7, 8, 9, 10, 12, 14], end_offset=16, position=16)
    assert not problems, "\n  ".join([f"{len(problems)} problem(s):", *problems])
    if txn_target.name == "kafkalog":
        ref = ck_answer(ck_answers, txn_servers.target("kafka"))
        assert_same(ref, got, ignore=IGNORE, what="confluent-kafka transactions")
