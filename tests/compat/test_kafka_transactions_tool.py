"""Apache Kafka 4.4.0's ``kafka-transactions`` tool (TransactionsCommand) against Kafka and `kafkalog serve` (issue 23):
a hanging transaction, looked at and then aborted with the tool, and each answer compared column by column.

The scenario, per broker (the session's brokers, ``target``):

1. a topic of one partition; an idempotent (not transactional) producer writes 2 records (offsets 0-1);
2. a transactional producer (confluent-kafka in a child process, ``transaction.timeout.ms=600000``) begins, writes 3
   records (offsets 2-4), flushes and is killed with SIGKILL: its transaction stays open (the coordinator would
   abort it only after 10 minutes);
3. ``list``, ``describe --transactional-id``, ``describe-producers --topic --partition``, ``find-hanging --broker-id``
   (with ``--max-transaction-timeout 0``, so the open transaction is a candidate at once, and with the default 15
   minutes): the coordinator tracks the transaction as Ongoing with the partition, so find-hanging reports nothing
   (it cross-checks the partition's open transactions with ListTransactions and DescribeTransactions);
4. ``abort --topic --partition --start-offset 2`` (Admin.abortTransaction: WriteTxnMarkers with the producer's id,
   epoch and coordinator epoch from DescribeProducers): a read_committed consumer's end offset (the LSO) reaches the
   high watermark (6: the abort marker at 5), read_committed reads the 2 plain records only, read_uncommitted all 5;
5. the same four looks again (describe-producers: no open transaction; the coordinator, which wrote no marker
   itself, still says Ongoing).

Each tool's table is parsed into rows of {column: value} and, on kafkalog, compared with Kafka's column by column;
producer ids, timestamps and durations are left out (and the coordinator/broker ids, which are the node ids of two
different brokers). Every wait is a bounded number of polls.

Run: ``pytest -q tests/compat/test_kafka_transactions_tool.py`` (Kafka only: ``-k "not kafkalog"``).
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import uuid

import pytest

from .lab import Target, assert_same, children

# about 30 s with its broker start (the suite's 20-minute budget): run with -m slow; DescribeProducers,
# Describe/ListTransactions and WriteTxnMarkers are checked by default in tests/broker/test_transactions.py
pytestmark = pytest.mark.slow
LAB_TEST_DEADLINE_S = 150
RUN = uuid.uuid4().hex[:6]   # the same names on both brokers (so the tables compare verbatim)
TXN_TIMEOUT_MS = 600_000
# columns whose values differ by nature between two brokers or two runs
VOLATILE = {"ProducerId", "LastTimestamp", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "Duration(min)",
            "Coordinator", "CoordinatorId"}
# checked on its own (test_describe_producers_coordinator_epoch): -1 until a marker for the producer is on the
# partition, then that marker's coordinator epoch (Kafka's ProducerStateEntry)
APART = {"LatestCoordinatorEpoch"}

HANGING_PRODUCER = r"""
import json, sys, time
from confluent_kafka import Producer

bootstrap, txn_id, topic, timeout_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "transactional.id": txn_id,
              "transaction.timeout.ms": timeout_ms, "linger.ms": 0, "message.timeout.ms": 20000})
p.init_transactions(20)
p.begin_transaction()
offsets, errors = [], []
def done(err, msg):
    (errors.append(err.str()) if err is not None else offsets.append(msg.offset()))
for i in range(3):
    p.produce(topic, f"hang-{i}".encode(), partition=0, on_delivery=done)
left = p.flush(20)
print(json.dumps({"offsets": sorted(offsets), "errors": errors, "left": left}), flush=True)
for _ in range(600):  # never ends its transaction; killed long before this loop ends
    time.sleep(1)
"""


def conf(bootstrap: str, **kw) -> dict:
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", **kw}


def table(stdout: str) -> list[dict]:
    """The tool's table (a header line, then rows; cells padded and each followed by a tab) as a list of dicts."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines, f"no table in {stdout!r}"
    header = [c.strip() for c in lines[0].rstrip("\t").split("\t")]
    rows = []
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.rstrip("\t").split("\t")]
        assert len(cells) == len(header), f"row {ln!r} does not match the header {header}"
        rows.append(dict(zip(header, cells)))
    return [{"_header": header}, *rows]


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE and k not in APART} for r in rows]


def broker_id(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient
    md = AdminClient(conf(bootstrap)).list_topics(timeout=10)
    assert len(md.brokers) == 1, md.brokers
    return next(iter(md.brokers))


def produce_plain(bootstrap: str, topic: str, values) -> list[int]:
    from confluent_kafka import Producer
    offsets, errors = [], []
    p = Producer(conf(bootstrap, **{"linger.ms": 0, "enable.idempotence": True}))
    for v in values:
        p.produce(topic, v.encode(), partition=0,
                  on_delivery=lambda err, msg: errors.append(err.str()) if err else offsets.append(msg.offset()))
        p.flush(20)
    assert p.flush(20) == 0 and not errors, f"plain produce to {topic} failed: {errors}"
    return sorted(offsets)


def start_hanging_producer(bootstrap: str, txn_id: str, topic: str):
    """The child process with the open transaction, once it has flushed: (process, its JSON line)."""
    proc = children.popen([sys.executable, "-c", HANGING_PRODUCER, bootstrap, txn_id, topic, str(TXN_TIMEOUT_MS)],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("{"):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"the hanging producer printed no line: {line!r}\n{err.decode(errors='replace')[-3000:]}")
    return proc, json.loads(line)


def reads(bootstrap: str, topic: str) -> dict:
    """Per isolation level: the end offset (ListOffsets LATEST), what a consumer reads from the beginning, and its
    position at the end (at most 100 polls)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    out = {}
    for iso in ("read_committed", "read_uncommitted"):
        c = Consumer(conf(bootstrap, **{"group.id": f"txtool-read-{uuid.uuid4().hex[:8]}", "isolation.level": iso,
                                        "enable.auto.commit": False}))
        try:
            tp = TopicPartition(topic, 0)
            end = c.get_watermark_offsets(tp, timeout=10, cached=False)[1]
            c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            values, offsets = [], []
            for _ in range(100):
                pos = c.position([tp])[0].offset
                if pos >= end:
                    break
                for m in c.consume(100, 0.2):
                    if m.error() is None:
                        values.append(m.value().decode())
                        offsets.append(m.offset())
            out[iso] = {"end": end, "values": values, "offsets": offsets, "position": c.position([tp])[0].offset}
        finally:
            c.close()
    return out


def looks(target: Target, txn_id: str, topic: str, node: int) -> dict:
    """list, describe, describe-producers and find-hanging (two ways): the parsed tables."""
    b = ("--bootstrap-server", target.bootstrap)
    listed = table(target.tool("kafka-transactions", *b, "list").stdout)
    ours = [listed[0], *[r for r in listed[1:] if r["TransactionalId"] == txn_id]]
    return {
        "list": ours,
        "list_coordinator_is_broker": all(r["Coordinator"] == str(node) for r in ours[1:]),
        "describe": table(target.tool("kafka-transactions", *b, "describe", "--transactional-id", txn_id).stdout),
        "describe_producers": sorted(
            table(target.tool("kafka-transactions", *b, "describe-producers", "--topic", topic,
                              "--partition", 0).stdout),
            key=lambda r: (0, "", "") if "_header" in r else (1, r["CurrentTransactionStartOffset"],
                                                               r["LastSequence"])),
        # the broker's every partition; only this topic's rows are compared (other tests' topics live there too)
        "find_hanging_0": [r for r in table(target.tool("kafka-transactions", *b, "find-hanging", "--broker-id", node,
                                                        "--max-transaction-timeout", 0).stdout)
                           if "_header" in r or r["Topic"] == topic],
        "find_hanging_default": table(target.tool("kafka-transactions", *b, "find-hanging", "--broker-id",
                                                  node).stdout)[:1],
        "find_hanging_topic": table(target.tool("kafka-transactions", *b, "find-hanging", "--topic", topic,
                                                "--partition", 0, "--max-transaction-timeout", 0).stdout),
    }


def scenario(target: Target) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic
    topic, txn_id = f"txtool-{RUN}", f"txtool-{RUN}-hang"
    admin = AdminClient(conf(target.bootstrap))
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=15)[topic].result(timeout=20)
    node = broker_id(target.bootstrap)
    ans: dict = {"plain": produce_plain(target.bootstrap, topic, ["plain-0", "plain-1"])}
    proc, ans["hanging"] = start_hanging_producer(target.bootstrap, txn_id, topic)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    ans["hanging_exit"] = proc.returncode
    ans["before"] = looks(target, txn_id, topic, node)
    ans["reads_before"] = reads(target.bootstrap, topic)
    start = ans["hanging"]["offsets"][0] if ans["hanging"]["offsets"] else -1
    r = target.tool("kafka-transactions", "--bootstrap-server", target.bootstrap, "abort", "--topic", topic,
                    "--partition", 0, "--start-offset", start, check=False)
    ans["abort"] = {"exit": r.returncode, "stdout": r.stdout.strip(), "stderr_tail": r.stderr.strip()[-500:]}
    # the marker lands at once (the Admin's WriteTxnMarkers answer comes after the append); looked at up to 20 times
    for _ in range(20):
        ans["reads_after"] = reads(target.bootstrap, topic)
        if ans["reads_after"]["read_committed"]["end"] == ans["reads_after"]["read_uncommitted"]["end"]:
            break
    ans["after"] = looks(target, txn_id, topic, node)
    return ans


def check(ans: dict, name: str) -> None:
    problems = []

    def want(path: str, got, expected):
        if got != expected:
            problems.append(f"{path}: {got!r}, expected {expected!r}")

    topic, txn_id = f"txtool-{RUN}", f"txtool-{RUN}-hang"
    want("plain", ans["plain"], [0, 1])
    want("hanging", ans["hanging"], {"offsets": [2, 3, 4], "errors": [], "left": 0})
    want("hanging_exit", ans["hanging_exit"], -signal.SIGKILL)
    for when in ("before", "after"):
        lk = ans[when]
        want(f"{when}.list", comparable(lk["list"]),
             [{"_header": ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]},
              {"TransactionalId": txn_id, "TransactionState": "Ongoing"}])
        want(f"{when}.list_coordinator_is_broker", lk["list_coordinator_is_broker"], True)
        d = lk["describe"]
        want(f"{when}.describe.header", d[0]["_header"],
             ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
              "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"])
        want(f"{when}.describe", comparable(d[1:]),
             [{"TransactionalId": txn_id, "ProducerEpoch": "0", "TransactionState": "Ongoing",
               "TransactionTimeoutMs": str(TXN_TIMEOUT_MS), "TopicPartitions": f"{topic}-0"}])
        if len(d) > 1 and d[1]["ProducerId"] != lk["list"][-1].get("ProducerId"):
            problems.append(f"{when}: describe's ProducerId {d[1]['ProducerId']} is not list's")
        dp = lk["describe_producers"]
        want(f"{when}.describe_producers.header", dp[0]["_header"],
             ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
              "CurrentTransactionStartOffset"])
        open_start = "2" if when == "before" else "None"
        want(f"{when}.describe_producers.rows", sorted(r["CurrentTransactionStartOffset"] for r in dp[1:]),
             sorted(["None", open_start]))
        for r in dp[1:]:
            want(f"{when}.describe_producers[{r['ProducerId']}].LastSequence", r["LastSequence"], "1" if
                 r["ProducerId"] != d[1]["ProducerId"] else "2")
        # the coordinator tracks the transaction (Ongoing, with the partition): nothing is hanging
        for k in ("find_hanging_0", "find_hanging_topic", "find_hanging_default"):
            want(f"{when}.{k}", lk[k], [{"_header": ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                                                       "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                                                       "Duration(min)"]}])
    want("abort", {k: ans["abort"][k] for k in ("exit", "stdout")}, {"exit": 0, "stdout": ""})
    rb, ra = ans["reads_before"], ans["reads_after"]
    want("reads_before.read_committed", rb["read_committed"],
         {"end": 2, "values": ["plain-0", "plain-1"], "offsets": [0, 1], "position": 2})
    want("reads_before.read_uncommitted.end", rb["read_uncommitted"]["end"], 5)
    want("reads_after.read_committed", ra["read_committed"],
         {"end": 6, "values": ["plain-0", "plain-1"], "offsets": [0, 1], "position": 6})
    want("reads_after.read_uncommitted", ra["read_uncommitted"],
         {"end": 6, "values": ["plain-0", "plain-1", "hang-0", "hang-1", "hang-2"], "offsets": [0, 1, 2, 3, 4],
          "position": 6})
    assert not problems, "\n  ".join([f"[{name}] {len(problems)} problem(s):", *problems]) + \
        f"\nabort: {ans['abort']}\n{json.dumps(ans, indent=1)[:6000]}"


@pytest.fixture(scope="module")
def answers():
    return {}


def answer(answers: dict, target: Target) -> dict:
    if target.name not in answers:
        try:
            answers[target.name] = scenario(target)
        except BaseException as e:
            answers[target.name] = e
            raise
    got = answers[target.name]
    if isinstance(got, BaseException):
        raise AssertionError(f"the scenario failed earlier on {target.name}: {got}")
    return got


def strip_volatile(ans: dict) -> dict:
    out = {}
    for k, v in ans.items():
        if k in ("before", "after"):
            out[k] = {kk: comparable(vv) if isinstance(vv, list) else vv for kk, vv in v.items()}
        elif k == "abort":
            out[k] = {"exit": v["exit"], "stdout": v["stdout"]}
        else:
            out[k] = v
    return out


def reference(answers: dict, request) -> dict:
    kafka = request.getfixturevalue("kafka")
    return answer(answers, Target("kafka", kafka.bootstrap, kafka))


def test_kafka_transactions_tool_hanging_transaction(target: Target, answers, request):
    ans = answer(answers, target)
    print(json.dumps(ans, indent=1))
    check(ans, target.name)
    if target.name == "kafkalog":
        assert_same(strip_volatile(reference(answers, request)), strip_volatile(ans),
                    what="kafka-transactions on a hanging transaction")


def coordinator_epochs(ans: dict) -> dict:
    """describe-producers' LatestCoordinatorEpoch by (when, which producer)."""
    txn_last_seq = "2"
    return {f"{when}.{'transactional' if r['LastSequence'] == txn_last_seq else 'idempotent'}":
            r["LatestCoordinatorEpoch"] for when in ("before", "after") for r in ans[when]["describe_producers"][1:]}


@pytest.mark.parametrize("target", ["kafka", "kafkalog"], indirect=True)
def test_describe_producers_coordinator_epoch(target: Target, answers, request):
    """LatestCoordinatorEpoch: -1 until a marker is written for the producer on the partition, then the marker's."""
    ans = answer(answers, target)
    got = coordinator_epochs(ans)
    assert got == {"before.transactional": "-1", "before.idempotent": "-1",
                   "after.transactional": "0", "after.idempotent": "-1"}, f"[{target.name}] {got}"
    if target.name == "kafkalog":
        assert_same(coordinator_epochs(reference(answers, request)), got, what="LatestCoordinatorEpoch")
