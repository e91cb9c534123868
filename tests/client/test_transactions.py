"""Embedded transactions (issue 23): KafkaProducer(transactional_id=...) and KafkaConsumer(isolation_level=...) over
real data dirs, fencing between real processes, the CLI's --isolation-level, and the same transactions seen across
the wire: an embedded transaction read by librdkafka's read_committed consumer through a broker started over the
data dir, and librdkafka's transactions (through the broker) read by the embedded read_committed consumer.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import kafkalog
from kafkalog import KafkaConsumer, KafkaProducer, TopicPartition
from kafkalog._engine.batch import iter_batches
from kafkalog.errors import (
    IllegalStateError,
    InvalidConfigError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortedError,
    UnstableOffsetCommitError,
)

REPO = Path(__file__).resolve().parents[2]


def _children():
    name = "kafkalog_test_children"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "children.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


children = _children()
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _store(data_dir, mode):
    return kafkalog.LogStore(data_dir, exclusive=mode == "exclusive", maintenance=False)


def _consume(store, isolation, tps=(TP0, TP1), group=None, **kw):
    """Every record a fresh consumer of ``isolation`` reads from the start: {partition: [values]}."""
    c = KafkaConsumer(store=store, isolation_level=isolation, auto_offset_reset="earliest", group_id=group,
                      enable_auto_commit=False, **kw)
    c.assign(list(tps))
    got: dict[int, list] = {tp.partition: [] for tp in tps}
    while True:
        polled = c.poll(timeout_ms=50)
        if not polled:
            break
        for tp, recs in polled.items():
            got[tp.partition] += [r.value for r in recs]
    ends = c.end_offsets(list(tps))
    positions = {tp.partition: c.position(tp) for tp in tps}
    c.close()
    return got, {tp.partition: ends[tp] for tp in tps}, positions


def _markers(log) -> list[int]:
    return [b.base_offset for b in iter_batches(log.read(log.log_start_offset, 1 << 24)) if b.is_control]


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
@pytest.mark.parametrize("linger_ms", [0, 20])
def test_commit_abort_and_read_committed(data_dir, mode, linger_ms):
    store = _store(data_dir, mode)
    store.create_topic("t", 2)
    p = KafkaProducer(store, transactional_id="tx-" + mode, linger_ms=linger_ms)
    p.init_transactions()
    p.begin_transaction()
    committed = [p.send("t", b"c%d" % i, partition=i % 2) for i in range(6)]
    p.commit_transaction()
    # commit_transaction() returned: every record is acknowledged (written and fsynced)
    assert all(f.is_done and f.succeeded() for f in committed)
    assert [f.get().offset for f in committed] == [0, 0, 1, 1, 2, 2]
    p.begin_transaction()
    for i in range(4):
        p.send("t", b"a%d" % i, partition=i % 2)
    p.flush()  # written: the ABORT marker hides them
    p.abort_transaction()
    p.begin_transaction()
    p.send("t", b"open", partition=0)
    p.flush()

    log0, log1 = store.log("t", 0), store.log("t", 1)
    # partition 0: c0 c2 c4 COMMIT a0 a2 ABORT open ; partition 1: c1 c3 c5 COMMIT a1 a3 ABORT
    assert _markers(log0) == [3, 6] and _markers(log1) == [3, 6]
    assert (log0.last_stable_offset, log0.high_watermark) == (7, 8)
    assert (log1.last_stable_offset, log1.high_watermark) == (7, 7)
    # batches: transactional, of the producer's id; transactions v2 (the data dir's transaction.version 2, as
    # Java's client on a Kafka 4.4 cluster): each transaction's epoch one above the last's, its markers carrying the
    # next, sequences from 0 per partition in each epoch
    batches = list(iter_batches(log0.read(0, 1 << 20)))
    data = [b for b in batches if not b.is_control]
    assert all(b.is_transactional and b.producer_id == data[0].producer_id for b in batches)
    assert [(b.is_control, b.producer_epoch) for b in batches][:1] + \
        [(b.is_control, b.producer_epoch) for b in batches if b.is_control] == [(False, 0), (True, 1), (True, 2)]
    for epoch in (0, 1, 2):
        seqs = [(b.base_sequence, b.record_count) for b in data if b.producer_epoch == epoch]
        assert seqs and seqs[0][0] == 0, (epoch, seqs)
        assert all(s + n == s2 for (s, n), (s2, _) in zip(seqs, seqs[1:], strict=False)), seqs

    got, ends, positions = _consume(store, "read_committed")
    assert got == {0: [b"c0", b"c2", b"c4"], 1: [b"c1", b"c3", b"c5"]}
    assert ends == {0: 7, 1: 7} and positions == {0: 7, 1: 7}  # read past the ABORT marker, stopped at the LSO
    got, ends, positions = _consume(store, "read_uncommitted")
    assert got == {0: [b"c0", b"c2", b"c4", b"a0", b"a2", b"open"], 1: [b"c1", b"c3", b"c5", b"a1", b"a3"]}
    assert ends == {0: 8, 1: 7} and positions == {0: 8, 1: 7}

    # Log.records / read_columns: the same two views; a control batch is never a record in either
    assert [r.value for r in log0.records(isolation_level="read_committed")] == [b"c0", b"c2", b"c4"]
    assert [r.offset for r in log0.records()] == [0, 1, 2, 4, 5, 7]
    assert list(log0.read_columns(isolation_level="read_committed")["offset"]) == [0, 1, 2]
    assert list(log0.read_columns()["offset"]) == [0, 1, 2, 4, 5, 7]
    assert [r.offset for r in log0.records(1, 6, isolation_level="read_committed")] == [1, 2]
    with pytest.raises(InvalidConfigError, match="read_committed"):
        log0.records(isolation_level="serializable")

    # seek_to_end and 'latest' are the LSO for read_committed
    c = KafkaConsumer(store=store, isolation_level="read_committed", auto_offset_reset="latest")
    c.assign([TP0])
    assert c.position(TP0) == 7
    c.seek_to_beginning(TP0)
    c.seek_to_end(TP0)
    assert c.position(TP0) == 7 and c.poll(timeout_ms=20) == {}
    p.commit_transaction()  # the open transaction commits: the LSO moves past it and the consumer sees it
    assert [r.value for recs in c.poll(timeout_ms=1000).values() for r in recs] == [b"open"]
    assert c.end_offsets([TP0]) == {TP0: 9}
    c.close()
    p.close()
    store.close()


def test_state_machine_errors_name_the_problem(open_store):
    store = open_store()
    store.create_topic("t", 1)
    with pytest.raises(InvalidConfigError, match="acks"):
        KafkaProducer(store, transactional_id="x", acks=1)
    plain = KafkaProducer(store)
    with pytest.raises(IllegalStateError, match="non-transactional"):
        plain.init_transactions()
    with pytest.raises(IllegalStateError, match="non-transactional"):
        plain.begin_transaction()
    plain.close()

    p = KafkaProducer(store, transactional_id="x")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        p.send("t", b"v")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        p.begin_transaction()
    p.init_transactions()
    with pytest.raises(IllegalStateError, match="already initialized"):
        p.init_transactions()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        p.send("t", b"v")
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        p.commit_transaction()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        p.abort_transaction()
    p.begin_transaction()
    with pytest.raises(IllegalStateError, match="IN_TRANSACTION"):
        p.begin_transaction()
    p.commit_transaction()  # an empty transaction: nothing reaches the log
    assert store.log("t", 0).high_watermark == 0
    # a failed send makes the transaction abortable: commit refuses, abort recovers
    p.begin_transaction()
    p.send("t", b"x" * 2_000_000)  # larger than max_request_size
    with pytest.raises(KafkaError, match="abort_transaction"):
        p.commit_transaction()
    with pytest.raises(IllegalStateError, match="abort_transaction"):
        p.send("t", b"v")
    p.abort_transaction()
    p.begin_transaction()
    p.send("t", b"ok")
    p.commit_transaction()
    assert [r.value for r in store.log("t", 0).records(isolation_level="read_committed")] == [b"ok"]
    # fencing in one process too: the older instance's next call raises ProducerFencedError, for good
    p.begin_transaction()
    p.send("t", b"zombie")
    newer = KafkaProducer(store, transactional_id="x")
    newer.init_transactions()
    for call in (p.commit_transaction, lambda: p.send("t", b"v"), p.abort_transaction, p.begin_transaction):
        with pytest.raises(ProducerFencedError):
            call()
    assert [r.value for r in store.log("t", 0).records(isolation_level="read_committed")] == [b"ok"]
    p.close()
    newer.close()


def test_abort_discards_what_is_still_buffered(open_store):
    store = open_store()
    store.create_topic("t", 1)
    p = KafkaProducer(store, transactional_id="buffered", linger_ms=60_000)
    p.init_transactions()
    p.begin_transaction()
    futures = [p.send("t", b"never-%d" % i) for i in range(3)]
    p.abort_transaction()
    for f in futures:
        assert f.is_done and isinstance(f.exception, TransactionAbortedError)
    assert store.log("t", 0).high_watermark == 0  # nothing written, no partition joined: not even a marker
    p.begin_transaction()
    p.send("t", b"kept")
    p.close()  # an open transaction is aborted on close: its written records are hidden, never committed
    log = store.log("t", 0)
    assert [r.value for r in log.records()] == []
    assert log.last_stable_offset == log.high_watermark


FENCED_CHILD = r"""
import sys
from kafkalog import KafkaProducer
from kafkalog.errors import ProducerFencedError
path, txn, how = sys.argv[1], sys.argv[2], sys.argv[3]
p = KafkaProducer(path, transactional_id=txn)
p.init_transactions()
p.begin_transaction()
p.send("t", b"zombie-1", partition=0).get()
print("ready", flush=True)
sys.stdin.readline()

def attempt(name, fn):
    try:
        fn()
        print(name, "ok", flush=True)
    except ProducerFencedError:
        print(name, "fenced", flush=True)

if how == "commit":
    attempt("commit", p.commit_transaction)
else:
    attempt("send", lambda: p.send("t", b"zombie-2", partition=0))
attempt("send", lambda: p.send("t", b"zombie-3", partition=0))
attempt("commit", p.commit_transaction)
p.close()
"""


@pytest.mark.parametrize("how", ["commit", "send"])
def test_two_processes_with_one_transactional_id_the_older_is_fenced(data_dir, child_env, how):
    with kafkalog.LogStore(data_dir, maintenance=False) as store:
        store.create_topic("t", 1)
    child = children.popen([sys.executable, "-c", FENCED_CHILD, str(data_dir), "shared-id", how], env=child_env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        store = kafkalog.LogStore(data_dir, maintenance=False)
        log = store.log("t", 0)
        assert log.last_stable_offset == 0 and log.high_watermark == 1  # the child's transaction is open
        newer = KafkaProducer(store, transactional_id="shared-id")
        newer.init_transactions()  # aborts the child's open transaction and bumps the epoch: the child is fenced
        assert log.last_stable_offset == log.high_watermark == 2  # zombie-1, ABORT
        newer.begin_transaction()
        newer.send("t", b"fresh", partition=0)
        newer.commit_transaction()
        before = log.high_watermark
        out, _ = child.communicate("go\n", timeout=60)
        assert child.returncode == 0
        assert out.split("\n")[:3] == [f"{how} fenced", "send fenced", "commit fenced"], out
        assert log.high_watermark == before  # a fenced producer never writes
        assert [r.value for r in log.records(isolation_level="read_committed")] == [b"fresh"]
        assert [r.value for r in log.records()] == [b"zombie-1", b"fresh"]
        newer.close()
        store.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_send_offsets_to_transaction_with_a_consumer_group(data_dir):
    store = kafkalog.LogStore(data_dir, maintenance=False)
    store.create_topic("in", 1)
    store.create_topic("t", 1)
    src = TopicPartition("in", 0)
    store.log("in", 0).append_batch([b"m%d" % i for i in range(10)])
    group = "etl"
    store.offsets.commit(group, {src: 2})

    p = KafkaProducer(store, transactional_id="etl-1")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"out")
    p.send_offsets_to_transaction({src: 5}, group)
    assert store.offsets.pending(group) == {src}

    rc = KafkaConsumer(store=store, group_id=group, isolation_level="read_committed", enable_auto_commit=False)
    ru = KafkaConsumer(store=store, group_id=group, enable_auto_commit=False)
    with pytest.raises(UnstableOffsetCommitError):
        rc.committed(src, timeout_ms=0)
    assert ru.committed(src) == 2  # the stable offset: the pending one takes effect only with the COMMIT marker
    rc.assign([src])
    assert rc.poll(timeout_ms=30) == {}  # the position waits for the transaction (Kafka's RequireStable)

    waited = {}

    def wait_committed():
        waited["offset"] = rc.committed(src, timeout_ms=30_000)

    t = threading.Thread(target=wait_committed)
    t.start()
    time.sleep(0.2)
    assert t.is_alive()
    p.commit_transaction()
    t.join(30)
    assert waited == {"offset": 5}
    assert [r.value for recs in rc.poll(timeout_ms=1000).values() for r in recs][:1] == [b"m5"]
    assert store.offsets.pending(group) == set()

    # an aborted round's offsets never take effect
    p.begin_transaction()
    p.send_offsets_to_transaction({src: 9}, group)
    p.abort_transaction()
    assert rc.committed(src) == 5 and ru.committed(src) == 5
    # Java's ConsumerGroupMetadata works too (anything with group_id)
    p.begin_transaction()
    p.send_offsets_to_transaction({src: 7}, type("Meta", (), {"group_id": group})())
    p.commit_transaction()
    assert ru.committed(src) == 7
    for c in (rc, ru):
        c.close()
    p.close()
    store.close()


def _txn_setup(store):
    store.create_topic("t", 2)
    p = KafkaProducer(store, transactional_id="cli")
    p.init_transactions()
    p.begin_transaction()
    for i in range(4):
        p.send("t", b"c%d" % i, partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()
    p.send("t", b"aborted", partition=0)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    p.send("t", b"open", partition=1)
    p.flush()
    return p


def test_cli_consume_isolation_level(data_dir, child_env):
    store = kafkalog.LogStore(data_dir, maintenance=False)
    p = _txn_setup(store)

    def consume(*extra):
        r = children.run([sys.executable, "-m", "kafkalog", "consume", str(data_dir), "t", "--from-beginning", "-q",
                          *extra], env=child_env, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return sorted(r.stdout.split())

    assert consume("--isolation-level", "read_committed") == [b"c0", b"c1", b"c2", b"c3"]
    assert consume("--isolation-level", "read_uncommitted") == [b"aborted", b"c0", b"c1", b"c2", b"c3", b"open"]
    assert consume() == consume("--isolation-level", "read_uncommitted")
    r = children.run([sys.executable, "-m", "kafkalog", "consume", str(data_dir), "t", "--isolation-level", "x"],
                     env=child_env, capture_output=True, timeout=60)
    assert r.returncode == 2 and b"isolation-level" in r.stderr
    p.commit_transaction()
    assert b"open" in consume("--isolation-level", "read_committed")
    p.close()
    store.close()


# ------------------------------------------------------------------------------------------------ across the wire

BROKER_CONFIG = {"auto.create.topics.enable": True, "num.partitions": 1, "group.initial.rebalance.delay.ms": 0}


def _broker(data_dir):
    from kafkalog.broker import Broker
    b = Broker(data_dir, listen="127.0.0.1:0", config=BROKER_CONFIG)
    b.start()
    return b


def _ck_read(ck, bootstrap, topic, partitions, isolation):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "r-" + uuid.uuid4().hex[:6],
                     "isolation.level": isolation, "enable.partition.eof": True, "log_level": 0})
    c.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
    got, eof = [], set()
    deadline = time.monotonic() + 60
    while len(eof) < len(partitions) and time.monotonic() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
            eof.add(m.partition())
            continue
        got.append(m.value())
    ends = [c.get_watermark_offsets(ck.TopicPartition(topic, p), cached=False) for p in partitions]
    c.close()
    return sorted(got), ends


def test_embedded_transactions_read_by_librdkafka_read_committed_through_the_broker(data_dir):
    ck = pytest.importorskip("confluent_kafka")
    with kafkalog.LogStore(data_dir, maintenance=False) as store:
        p = _txn_setup(store)
        p.commit_transaction()  # the broker completes nothing of ours: every transaction ended before it starts
        p.close()
    broker = _broker(data_dir)
    try:
        bs = f"127.0.0.1:{broker.port}"
        committed, ends = _ck_read(ck, bs, "t", [0, 1], "read_committed")
        assert committed == [b"c0", b"c1", b"c2", b"c3", b"open"]
        uncommitted, _ = _ck_read(ck, bs, "t", [0, 1], "read_uncommitted")
        assert uncommitted == sorted(committed + [b"aborted"])
        # partition 0: c0 c2 COMMIT aborted ABORT; partition 1: c1 c3 COMMIT open COMMIT
        assert ends == [(0, 5), (0, 5)]
        # and the broker's coordinator knows the embedded producer's transactional id
        p2 = ck.Producer({"bootstrap.servers": bs, "transactional.id": "cli", "log_level": 0})
        p2.init_transactions(30)
        p2.begin_transaction()
        p2.produce("t", b"after", partition=0)
        p2.commit_transaction(30)
        p2.flush(10)
        del p2
    finally:
        broker.stop()
    with kafkalog.LogStore(data_dir, maintenance=False) as store:
        got, _, _ = _consume(store, "read_committed")
        assert got == {0: [b"c0", b"c2", b"after"], 1: [b"c1", b"c3", b"open"]}


def test_librdkafka_transactions_through_the_broker_read_embedded_read_committed(data_dir):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = _broker(data_dir)
    try:
        bs = f"127.0.0.1:{broker.port}"
        admin = AdminClient({"bootstrap.servers": bs})  # held: a collected client cancels its futures
        admin.create_topics([NewTopic("t", 2, 1)])["t"].result(10)
        p = ck.Producer({"bootstrap.servers": bs, "transactional.id": "wire-tx", "log_level": 0})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(6):
            p.produce("t", b"c%d" % i, partition=i % 2)
        p.commit_transaction(30)
        p.begin_transaction()
        for i in range(4):
            p.produce("t", b"a%d" % i, partition=i % 2)
        p.flush(10)
        p.abort_transaction(30)
        p.flush(10)
        del p, admin  # before the broker goes: no reconnect attempts
    finally:
        broker.stop()
    with kafkalog.LogStore(data_dir, maintenance=False) as store:
        got, ends, _ = _consume(store, "read_committed")
        assert got == {0: [b"c0", b"c2", b"c4"], 1: [b"c1", b"c3", b"c5"]}
        assert ends == {0: 7, 1: 7}  # c c c COMMIT a a ABORT on each partition
        got, _, _ = _consume(store, "read_uncommitted")
        assert got == {0: [b"c0", b"c2", b"c4", b"a0", b"a2"], 1: [b"c1", b"c3", b"c5", b"a1", b"a3"]}
        log = store.log("t", 0)
        assert [r.value for r in log.records(isolation_level="read_committed")] == [b"c0", b"c2", b"c4"]
        assert len(log.read_columns(isolation_level="read_committed")["offset"]) == 3
        # the embedded producer takes the wire producer's transactional id over (one coordinator, one format)
        ep = KafkaProducer(store, transactional_id="wire-tx")
        ep.init_transactions()
        ep.begin_transaction()
        ep.send("t", b"embedded", partition=1)
        ep.commit_transaction()
        ep.close()
        got, _, _ = _consume(store, "read_committed")
        assert got[1] == [b"c1", b"c3", b"c5", b"embedded"]
