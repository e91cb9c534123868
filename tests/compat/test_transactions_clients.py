"""Transactional producers of franz-go, KafkaJS and kafka-python against Apache Kafka 4.4.0 and `kafkalog serve`.

The same scenario for each client (issue 23; Java and confluent-kafka are in test_transactions.py), in one run per
client and broker (franz-go: ``franz ... txn``, tests/compat/go/franz/txn.go; KafkaJS: ``node client.js ... txn``,
tests/compat/js/client.js; kafka-python: ``kp_scenario`` below, in this process). Topics TOPIC (the output) and
TOPIC-in, one partition each; every step is one line ``{"op": STEP, ...}``, with ``error`` (and the broker's error
as ``error_name``/``error_code`` where the client exposes it) when it failed:

- ``commit``: producer A (transactional id GROUP-txn) commits c-0..c-2 (offsets 0-2; the marker takes 3);
- ``abort``: A aborts a-0, a-1 (4, 5; marker 6);
- fencing: A leaves f-0 (7) open (``fence_open``); producer B with the same transactional id initializes
  (``fence_init``: InitProducerId fences A and aborts its transaction, marker 8); A's commit fails
  (``fenced_commit``: franz-go and kafka-python see PRODUCER_FENCED, KafkaJS INVALID_PRODUCER_EPOCH, the code its
  EndTxn v1 gets); B commits b-0 (``b_commit``: 9; marker 10);
- consume-transform-produce in group GROUP (input in-0..in-5 on TOPIC-in): a read_committed group consumer gets
  in-0..in-3, a transaction produces OUT-in-0..3 (11-14) with the group's offset 4 (franz-go: a
  GroupTransactSession; KafkaJS: ``transaction.sendOffsets({consumerGroupId})``; kafka-python:
  ``send_offsets_to_transaction(offsets, consumer.group_metadata())``) and commits (``ctp_commit``; marker 15): the
  group's committed offset is 4 (``offsets_commit``); then in-4, in-5 → OUT-in-4, OUT-in-5 (16, 17) with offset 6,
  aborted (``ctp_abort``; marker 18);
- ``ends``: the log end and the LSO are 19 (KafkaJS: its admin's ListOffsets is read_committed, the LSO); then the
  group's committed offset is still 4 (``offsets_abort``);

Kafka answers EndTxn once the transaction is prepared and writes its markers right after, so the programs ask a
bounded number of times (50, 100 ms apart) for what settles then: the group's offset after the commit (until the
input partition has one: KafkaJS's and kafka-python's OffsetFetch have no RequireStable and see none for a moment)
and the ends (until the LSO is past the abort's marker).
- ``read``: read_committed readers see exactly c-0..c-2, b-0, OUT-in-0..3 (offsets 0 1 2 9 11 12 13 14), never an
  aborted record; read_uncommitted readers see all 13 data records. Each reader stops at that count (or after 15-20
  s) and then listens 1-1.5 s more: nothing more may come.

Each client's answer is checked on each broker against those absolute expectations, then kafkalog's answer is
compared with Kafka's line by line (``assert_same``; error texts and timings aside, names normalized).

The brokers: the transaction tests' pair (conftest.py's ``txn_servers``: Kafka with ``transaction.version=0``), one
for the session. It matters for franz-go: v1.22 reads the cluster's finalized ``transaction.version`` and at 2 (the
session Kafka's default) takes the KIP-890 part 2 paths (Produce v12+ adds partitions implicitly, EndTxn v5, an
epoch bump per transaction), which kafkalog does not advertise. KafkaJS 2.2.4 (InitProducerId v1, EndTxn v1) and
kafka-python 3.0.12 (AddPartitionsToTxn <= v3, no EndTxn v5) ignore it, and run on the same pair for one set of
brokers.

Run: ``pytest -q tests/compat/test_transactions_clients.py`` (one client: ``-k franz``).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import threading
import time
import uuid

import pytest

from .lab import assert_same
from .test_go_js_clients import client_commands  # noqa: F401 — the fixture: builds/installs the Go and JS clients
from .test_transactions import txn_target  # noqa: F401 — the fixture: the broker under test of the pair

LAB_TEST_DEADLINE_S = 150
RUN = uuid.uuid4().hex[:6]   # names are the same on both brokers
CLIENTS = ("franz", "kafkajs", "kafka-python")
RUN_TIMEOUT_S = 120          # one program run (each program also stops itself after 90 s)
FENCED = {"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}
# what may differ between the brokers: texts (they carry producer ids, epochs, client-side wording), timings
IGNORE = ("*.error", "*.elapsed_ms")

COMMITTED = (["c-0", "c-1", "c-2", "b-0", "OUT-in-0", "OUT-in-1", "OUT-in-2", "OUT-in-3"],
             [0, 1, 2, 9, 11, 12, 13, 14])
EVERYTHING = (["c-0", "c-1", "c-2", "a-0", "a-1", "f-0", "b-0", "OUT-in-0", "OUT-in-1", "OUT-in-2", "OUT-in-3",
               "OUT-in-4", "OUT-in-5"],
              [0, 1, 2, 4, 5, 7, 9, 11, 12, 13, 14, 16, 17])
END = 19
STEPS = {"create", "init", "commit", "abort", "fence_open", "fence_init", "fenced_commit", "b_commit", "input",
         "ctp_init", "ctp_commit", "offsets_commit", "ctp_abort", "offsets_abort", "ends", "read"}


class Answer:
    """One client's run on one broker: its lines by step (a read step per isolation level: ``read/read_committed``)
    plus what the run printed, for failure messages."""

    def __init__(self, client: str, broker: str, names: tuple[str, str], lines: list[dict], returncode=0,
                 stdout: str = "", stderr: str = "", seconds: float = 0.0, broker_log: str = ""):
        self.client, self.broker, self.names = client, broker, names
        self.lines, self.returncode, self.stdout, self.stderr = lines, returncode, stdout, stderr
        self.seconds, self.broker_log = seconds, broker_log
        self.steps: dict[str, dict] = {}
        self.duplicates: list[str] = []
        for d in lines:
            key = d.get("op", "?") + (f"/{d['isolation']}" if "isolation" in d else "")
            if key in self.steps:
                self.duplicates.append(key)
                key = f"{key}#{len(self.duplicates)}"
            self.steps[key] = {k: v for k, v in d.items() if k not in ("op", "isolation")}

    def where(self) -> str:
        out = (f"{self.client} on {self.broker}: exit {self.returncode} after {self.seconds:.1f} s\n"
               f"--- stdout ---\n{self.stdout[-5000:]}\n--- stderr ---\n{self.stderr[-4000:]}")
        if self.broker_log:
            out += f"\n--- the broker's log (this run) ---\n{self.broker_log[-5000:]}"
        return out

    def normalized(self) -> dict:
        """The steps with this run's topic and group names replaced by TOPIC and GROUP."""
        topic, group = self.names

        def norm(v):
            if isinstance(v, str):
                return v.replace(group, "GROUP").replace(topic, "TOPIC")
            if isinstance(v, list):
                return [norm(x) for x in v]
            if isinstance(v, dict):
                return {norm(k): norm(x) for k, x in v.items()}
            return v
        return norm(copy.deepcopy(self.steps))


# -- kafka-python (in this process) ------------------------------------------------------------------------------

def kp_scenario(bootstrap: str, topic: str, group: str) -> list[dict]:
    """The scenario with kafka-python's KafkaProducer(transactional_id=...): the same steps and lines as the Go and
    JS programs. Every call has a timeout, every wait is a bounded number of polls."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    in_topic = f"{topic}-in"
    lines: list[dict] = []
    closers: list = []

    def step(op, fn, **extra) -> bool:
        t0 = time.monotonic()
        try:
            got = fn() or {}
            lines.append({"op": op, **extra, **got})
            return True
        except Exception as e:  # noqa: BLE001 — the error is the answer
            d = {"op": op, **extra, "error": f"{type(e).__name__}: {e}"}
            if isinstance(e, KafkaError) and getattr(e, "errno", None) is not None:
                d.update(error_name=e.message, error_code=e.errno)
            lines.append(d)
            return False
        finally:
            lines[-1]["elapsed_ms"] = int((time.monotonic() - t0) * 1000)

    def producer(**kw):
        p = KafkaProducer(bootstrap_servers=bootstrap, client_id="compat-kafka-python", request_timeout_ms=10000,
                          max_block_ms=15000, linger_ms=0, **kw)
        closers.append(p)
        return p

    def consumer(**kw):
        c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="compat-kafka-python", request_timeout_ms=11000,
                          fetch_max_wait_ms=200, enable_auto_commit=False, auto_offset_reset="earliest", **kw)
        closers.append(c)
        return c

    def bounded(fn, seconds=20):
        """fn() in a daemon thread, at most ``seconds`` (commit_transaction/abort_transaction wait unbounded)."""
        box: dict = {}

        def run():
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 — handed to the caller
                box["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(seconds)
        if t.is_alive():
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} did not return within {seconds} s")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def send_each(p, t, values):
        return [p.send(t, value=v.encode(), partition=0).get(timeout=15).offset for v in values]

    def round_(p, values, end):
        p.begin_transaction()
        offsets = send_each(p, topic, values)
        if end == "commit":
            bounded(p.commit_transaction)
        elif end == "abort":
            bounded(p.abort_transaction)
        return {"offsets": offsets}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000, client_id="compat-kafka-python")
    closers.append(admin)
    try:
        if not step("create", lambda: admin.create_topics([NewTopic(t, 1, 1) for t in (topic, in_topic)],
                                                          timeout_ms=10000) and None):
            return lines
        a = producer(transactional_id=f"{group}-txn", transaction_timeout_ms=60000)
        if step("init", lambda: a.init_transactions()):
            step("commit", lambda: round_(a, ["c-0", "c-1", "c-2"], "commit"))
            step("abort", lambda: round_(a, ["a-0", "a-1"], "abort"))
            if step("fence_open", lambda: round_(a, ["f-0"], "open")):
                b = producer(transactional_id=f"{group}-txn", transaction_timeout_ms=60000)
                if step("fence_init", lambda: b.init_transactions()):
                    step("fenced_commit", lambda: bounded(a.commit_transaction))
                    step("b_commit", lambda: round_(b, ["b-0"], "commit"))

        step("input", lambda: {"offsets": send_each(producer(), in_topic, [f"in-{i}" for i in range(6)])})
        ctp = producer(transactional_id=f"{group}-ctp", transaction_timeout_ms=60000)
        c = consumer(group_id=group, isolation_level="read_committed", session_timeout_ms=30000)
        c.subscribe([in_topic])
        tp_in = TopicPartition(in_topic, 0)

        def ctp_round(n, end):
            got = []
            for _ in range(100):   # at most 100 polls of 200 ms
                if len(got) >= n:
                    break
                for recs in c.poll(timeout_ms=200, max_records=n - len(got)).values():
                    got.extend(recs)
            if len(got) != n:
                raise RuntimeError(f"consumed {len(got)} records, wanted {n}")
            ctp.begin_transaction()
            offsets = send_each(ctp, topic, [f"OUT-{r.value.decode()}" for r in got])
            ctp.send_offsets_to_transaction({tp_in: OffsetAndMetadata(got[-1].offset + 1, "", -1)},
                                            c.group_metadata())
            if end == "commit":
                bounded(ctp.commit_transaction)
            else:
                bounded(ctp.abort_transaction)
            return {"consumed": [r.value.decode() for r in got], "consumed_offsets": [r.offset for r in got],
                    "offsets": offsets}

        # Kafka's EndTxn answers before the markers are written (the coordinator writes them next): what the group
        # and readers see settles a moment later. group_offsets(True) asks again (at most 50 times, 100 ms apart)
        # while the input partition has no committed offset; ends() asks until the LSO is the log end.
        def group_offsets(wait):
            for attempt in range(1, 51):
                got = admin.list_group_offsets({group: None})[group]
                offsets = {f"{tp.topic}-{tp.partition}": om.offset for tp, om in got.items()}
                if not wait or offsets.get(f"{in_topic}-0", -1) >= 0 or attempt == 50:
                    return {"offsets": offsets}
                time.sleep(0.1)

        tp = TopicPartition(topic, 0)

        def ends():
            rc, ru = consumer(isolation_level="read_committed"), consumer(isolation_level="read_uncommitted")
            for attempt in range(1, 51):
                got = {"log_end": ru.end_offsets([tp])[tp], "lso": rc.end_offsets([tp])[tp]}
                if got["log_end"] == got["lso"] or attempt == 50:
                    return got
                time.sleep(0.1)

        if step("ctp_init", lambda: ctp.init_transactions()):
            step("ctp_commit", lambda: ctp_round(4, "commit"))
            step("offsets_commit", lambda: group_offsets(True))
            step("ctp_abort", lambda: ctp_round(2, "abort"))
        c.close()
        step("ends", ends)
        step("offsets_abort", lambda: group_offsets(False))

        def read(isolation, n):
            r = consumer(isolation_level=isolation)
            r.assign([tp])
            r.seek_to_beginning(tp)
            got = []
            for _ in range(75):   # at most 75 polls of 200 ms to get n
                if len(got) >= n:
                    break
                for recs in r.poll(timeout_ms=200).values():
                    got.extend(recs)
            for _ in range(5):    # then 1 s more: nothing else may come
                for recs in r.poll(timeout_ms=200).values():
                    got.extend(recs)
            return {"values": [m.value.decode() for m in got], "offsets": [m.offset for m in got]}
        step("read", lambda: read("read_committed", len(COMMITTED[0])), isolation="read_committed")
        step("read", lambda: read("read_uncommitted", len(EVERYTHING[0])), isolation="read_uncommitted")
    finally:
        for x in reversed(closers):
            try:
                x.close(5) if isinstance(x, KafkaProducer) else x.close()
            except Exception:  # noqa: BLE001 — closing what the scenario left, after it answered
                pass
    return lines


# -- running a client --------------------------------------------------------------------------------------------

def run_program(client: str, argv_prefix: list, broker: str, server, topic: str, group: str) -> Answer:
    log_mark = len(getattr(server, "_err", ()))   # kafkalog: its stderr lines so far (what this run adds is kept)
    t0 = time.monotonic()
    if client == "kafka-python":
        lines = kp_scenario(server.bootstrap, topic, group)
        ans = Answer(client, broker, (topic, group), lines, stdout="\n".join(map(json.dumps, lines)),
                     seconds=time.monotonic() - t0)
    else:
        argv = [*argv_prefix, server.bootstrap, topic, group, "txn"]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL,
                               env=dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1"))
            code, out, err = r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired as e:
            code = -9
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = (e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")) + \
                f"\n(killed after {RUN_TIMEOUT_S} s)"
        lines = []
        for raw in out.splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                lines.append({"op": "unparsed", "error": f"not JSON: {raw!r}"})
        ans = Answer(client, broker, (topic, group), lines, code, out, err, time.monotonic() - t0)
    if broker == "kafkalog":
        ans.broker_log = b"".join(server._err[log_mark:]).decode(errors="replace")
    print(f"[{client}] txn scenario on {broker}: exit {ans.returncode} in {ans.seconds:.1f} s")
    return ans


@pytest.fixture(scope="module")
def answers(txn_servers):  # noqa: F811
    """answer(request, client, broker) -> Answer, each run once per module (a failure is remembered too); the Go and
    JS clients are built (the ``client_commands`` fixture) when a test first needs one, kafka-python needs none."""
    cache: dict = {}
    names = {c: (f"txc-{RUN}-{c}", f"txc-{RUN}-{c}-g") for c in CLIENTS}

    def answer(request, client: str, broker: str) -> Answer:
        key = (client, broker)
        if key not in cache:
            argv = [] if client == "kafka-python" else request.getfixturevalue("client_commands")[client]
            server = txn_servers.get(broker)
            try:
                cache[key] = run_program(client, argv, broker, server, *names[client])
            except BaseException as e:
                cache[key] = e
                raise
        got = cache[key]
        if isinstance(got, BaseException):
            raise AssertionError(f"the {client} scenario failed earlier on {broker}: {got!r}")
        return got
    return answer


# -- Kafka's behaviour, on each broker ---------------------------------------------------------------------------

def check(ans: Answer) -> None:
    """Every unmet expectation of one run, reported together with the run's output and the broker's log."""
    topic, _ = ans.names
    in_tp = f"{topic}-in-0"
    problems = [f"step {k} answered twice" for k in ans.duplicates]

    def ok(step, **fields):
        d = ans.steps.get(step)
        if d is None or "error" in d:
            problems.append(f"{step}: expected to succeed, got {d if d is not None else '<no line>'}")
            return
        problems.extend(f"{step}.{k}: {d.get(k)!r}, expected {v!r}" for k, v in fields.items() if d.get(k) != v)

    ok("create")
    if ans.client == "kafka-python":
        ok("init")
        ok("ctp_init")
    ok("commit", offsets=[0, 1, 2])
    ok("abort", offsets=[4, 5])
    ok("fence_open", offsets=[7])
    ok("fence_init")
    fenced = ans.steps.get("fenced_commit")
    if fenced is None or "error" not in fenced or fenced.get("error_name") not in FENCED:
        problems.append(f"fenced_commit: expected to fail with one of {sorted(FENCED)}, got {fenced}")
    ok("b_commit", offsets=[9])
    ok("input", offsets=[0, 1, 2, 3, 4, 5])
    extra = {"committed": True} if ans.client == "franz" else {}
    ok("ctp_commit", consumed=["in-0", "in-1", "in-2", "in-3"], consumed_offsets=[0, 1, 2, 3],
       offsets=[11, 12, 13, 14], **extra)
    ok("offsets_commit", offsets={in_tp: 4})
    extra = {"committed": False} if ans.client == "franz" else {}
    ok("ctp_abort", consumed=["in-4", "in-5"], consumed_offsets=[4, 5], offsets=[16, 17], **extra)
    ok("offsets_abort", offsets={in_tp: 4})   # the aborted round's offset 6 is discarded
    ok("ends", **({"high": END} if ans.client == "kafkajs" else {"log_end": END, "lso": END}))
    ok("read/read_committed", values=COMMITTED[0], offsets=COMMITTED[1])
    ok("read/read_uncommitted", values=EVERYTHING[0], offsets=EVERYTHING[1])
    # an error line of no step above: a program's own failure ("fatal", "timeout", "client", "unparsed", ...)
    problems.extend(f"error line {k}: {d['error']}" for k, d in ans.steps.items()
                    if "error" in d and k.split("/")[0].split("#")[0] not in STEPS)
    if ans.returncode != 0:
        problems.append(f"the program exited with {ans.returncode}")
    assert not problems, "\n  ".join([f"{len(problems)} problem(s):", *problems]) + f"\n{ans.where()}"


@pytest.mark.parametrize("client", CLIENTS)
def test_transactional_client(request, client, txn_target, answers):  # noqa: F811
    ans = answers(request, client, txn_target.name)
    for k, v in ans.steps.items():
        print(k, v)
    check(ans)


# -- kafkalog's answers against Kafka's --------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_same_answers_as_kafka(request, client, answers):
    ref, got = answers(request, client, "kafka"), answers(request, client, "kafkalog")
    try:
        assert_same(ref.normalized(), got.normalized(), ignore=IGNORE, what=f"{client}'s transactions")
    except AssertionError as e:
        raise AssertionError(f"{e}\n\n{got.where()}") from None
