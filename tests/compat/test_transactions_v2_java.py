"""Transactions v2 (KIP-890 part 2) with Apache Kafka's Java client 4.4.0 (and franz-go), end to end on both brokers at
``transaction.version=2`` (the lab's session pair: a new Kafka 4.4 cluster's level, and kafkalog's default): the
TxnScenarios programs of tests/compat/test_transactions.py (there run at transaction.version=0) again, so the client
takes the v2 paths (no AddPartitionsToTxn / AddOffsetsToTxn; Produce v12+, TxnOffsetCommit v5+, EndTxn v5 with an
epoch bump per transaction):

- fencing: A's open transaction is aborted by B's initTransactions; A's send and commit fail as fenced; B commits;
  C is fenced by D the same way; read_committed shows B's and D's records only;
- ctp: consume-transform-produce with sendOffsetsToTransaction (TxnOffsetCommit v5's implicit offsets add), commit
  then abort; the group's offsets and read_committed output;
- open: an open transaction's last stable offset per isolation level, then the commit.

Each scenario's answer on kafkalog is compared step by step with Kafka's; then both brokers' ``__transaction_state``
records of the scenario's transactional ids must show that the client really used transactions v2: every
PrepareCommit/PrepareAbort that a client's EndTxn wrote carries ClientTransactionVersion 2 and the epoch one above
the transaction's own, as Kafka writes them.

franz-go v1.22 (tests/compat/go/franz txn, the scenario of test_transactions_clients.py) takes the v2 paths at
level 2 as well: its answers on both brokers, and both brokers' records, the same way.

Cost: one Java run per scenario and broker, 3.6-5.1 s each (about 10 s a scenario, 20 s the module, on the session's
pair): both marked slow; the same requests are compared by default over raw frames (test_transactions_v2.py).
"""

from __future__ import annotations

import uuid

import pytest

from kafkalog._engine.batch import iter_batches
from kafkalog.storage.txnformat import decode_txn_log_key, decode_txn_log_value
from tests.broker.wire import Wire

from .lab import LabError, Target, assert_same
from .test_go_js_clients import client_commands  # noqa: F401 — the fixture: builds the Go client
from .test_java_clients import compile_programs
from .test_transactions import Check, Scenarios, compare_with_kafka

LAB_TEST_DEADLINE_S = 150
PREFIX = f"tx-v2{uuid.uuid4().hex[:6]}"  # the names of this module's scenarios (TxnScenarios' prefix)
FENCED = {"ProducerFencedException", "InvalidProducerEpochException"}


class _Pair:
    """The session's two brokers, as TxnServers' ``target`` gives them (Scenarios runs through it)."""

    def __init__(self, kafka, kafkalog):
        self.targets = {"kafka": Target("kafka", kafka.bootstrap, kafka),
                        "kafkalog": Target("kafkalog", kafkalog.bootstrap, kafkalog)}

    def target(self, name):
        return self.targets[name]


@pytest.fixture(scope="module")
def java_classes():
    try:
        return compile_programs()
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def scenarios(java_classes, kafka, kafkalog):
    return Scenarios(java_classes, _Pair(kafka, kafkalog), prefix=PREFIX)


def _txn_records(target, prefix: str) -> dict:
    """{transactional id: [decoded TransactionLogValue, ...]} of __transaction_state's records for ids starting
    with ``prefix`` (every partition: Kafka's session broker has one)."""
    out: dict = {}
    with Wire(int(target.bootstrap.rsplit(":", 1)[1]), timeout=30) as w:
        md = w.call(3, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": "__transaction_state"}],
                            "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})["topics"][0]
        for p in md["partitions"]:
            offset = 0
            for _ in range(1000):
                part = w.fetch("__transaction_state", p["partition_index"], offset)
                batches = list(iter_batches(bytes(part["records"] or b"")))
                if not batches:
                    break
                for b in batches:
                    for rec in b:
                        txn = decode_txn_log_key(bytes(rec.key))
                        if txn and txn.startswith(prefix) and rec.value is not None:
                            out.setdefault(txn, []).append(decode_txn_log_value(bytes(rec.value)))
                offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1
    return out


def _assert_tv2(target, prefix: str) -> None:
    records = _txn_records(target, prefix)
    assert records, f"{target.name}: no __transaction_state record for {prefix}*"
    ends = 0
    for txn, values in records.items():
        for before, v in zip(values, values[1:]):
            if v.state_name in ("PrepareCommit", "PrepareAbort") and before.state_name == "Ongoing":
                ends += 1
                assert v.client_tv == 2, f"{target.name}: {txn} ended without transactions v2: {v}"
                assert v.producer_epoch == before.producer_epoch + 1, (target.name, txn, before, v)
            if v.state_name == "Ongoing":
                assert v.client_tv == 2, f"{target.name}: {txn} added partitions without transactions v2: {v}"
    assert ends, f"{target.name}: no transaction of {prefix}* ended: {records}"


def _check_and_compare(scenarios, scenario, expect):
    for broker in ("kafka", "kafkalog"):
        ans = scenarios.answer(scenario, broker)
        check = Check(ans)
        expect(check)
        for line in ans.lines:
            print(broker, line)
        check.done()
    compare_with_kafka(scenarios, scenario, scenarios.answer(scenario, "kafkalog"))
    for broker in ("kafka", "kafkalog"):
        _assert_tv2(scenarios.servers.target(broker), f"{PREFIX}-{'fence' if scenario == 'fencing' else scenario}")


@pytest.mark.slow  # about 9 s for both brokers (two Java runs)
def test_fencing_tv2(scenarios):
    def expect(c: Check):
        c.ok("create")
        c.ok("a_init")
        c.ok("a_open", offsets=[0, 1])
        c.ok("b_init")
        c.fails("a_send", FENCED)
        c.fails("a_commit", FENCED)
        c.ok("b_commit", offsets=[3, 4])
        c.ok("c_open", offset=6)
        c.ok("d_init")
        c.ok("settle_final", settled=True, end=10)
        c.read("read_final", "read_committed", ["b-0", "b-1", "d-0"], [3, 4, 8], 10)
    _check_and_compare(scenarios, "fencing", expect)


@pytest.mark.slow  # about 9 s for both brokers (two Java runs)
def test_consume_transform_produce_tv2(scenarios):
    inp = f"{PREFIX}-ctp-in-0"

    def expect(c: Check):
        c.ok("input1", offsets=[0, 1, 2, 3, 4])
        c.ok("init")
        c.ok("commit1", group_generation_positive=True, member_id_set=True)
        c.ok("offsets1", consumer_committed=5, admin={inp: 5})
        c.ok("abort2")
        c.ok("offsets2", consumer_committed=5, admin={inp: 5})
        c.read("read_out", "read_committed", [f"OUT-in-{i}" for i in range(5)], [0, 1, 2, 3, 4], 10)
    _check_and_compare(scenarios, "ctp", expect)


# -- franz-go (v1.22 reads the finalized transaction.version: at 2 it takes the KIP-890 part 2 paths) ------------

@pytest.mark.slow  # one Go run per broker, about 5-8 s each
def test_franz_go_tv2(request, kafka, kafkalog):
    from .test_transactions_clients import check, run_program
    argv = request.getfixturevalue("client_commands")["franz"]
    topic, group = f"{PREFIX}-franz", f"{PREFIX}-franz-g"
    answers = {}
    for name, server in (("kafka", kafka), ("kafkalog", kafkalog)):
        answers[name] = run_program("franz", argv, name, server, topic, group)
        for k, v in answers[name].steps.items():
            print(name, k, v)
        check(answers[name])
    assert_same(answers["kafka"].normalized(), answers["kafkalog"].normalized(), ignore=("*.error", "*.elapsed_ms"),
                what="franz-go's transactions at transaction.version=2")
    for name, server in (("kafka", kafka), ("kafkalog", kafkalog)):
        _assert_tv2(Target(name, server.bootstrap, server), f"{group}-txn")
