"""The first law for transactions on the broker: ``kafkalog serve`` killed (SIGKILL, through the named failpoints) in
the middle of a transaction's end, then started again on the same data dir.

A transaction whose EndTxn wrote its PrepareCommit (fsynced) is decided: whatever step the kill interrupts
(``txn:after-prepare``, ``txn:after-marker``: after the first marker's append, before its fsync,
``txn:before-complete``: after the answer, the markers fsynced behind it), the restarted coordinator completes it,
and a read_committed consumer sees every record of it exactly once on every partition, the group's offsets sent
with it are committed, every partition's last stable offset is its high watermark, and the transactional id takes a
new producer and a further transaction. The same for an abort: its records never show to read_committed, the
group's offsets stay as they were. A transaction only Ongoing when the broker is killed (records acknowledged, no
EndTxn) stays invisible and holds the LSO at its first offset until the restarted coordinator aborts it on its
timeout.

Bounded by counts (polls), not wall time; the brokers listen on 127.0.0.1 on a port they pick and die with the test
run (tests/children.py through conftest's Serve).
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

try:
    from confluent_kafka import ConsumerGroupTopicPartitions
except ImportError:  # older confluent-kafka
    from confluent_kafka.admin import ConsumerGroupTopicPartitions

from .conftest import Serve

pytestmark = pytest.mark.usefixtures("deadline")

FAILPOINTS = ["txn:after-prepare", "txn:after-marker", "txn:before-complete"]
N_PER_PARTITION = 7  # records of the killed transaction on each partition
POLLS = 150  # bound of every polling loop (each 0.1-0.3 s)


@pytest.fixture
def brokers(child_env):
    """brokers(data, *args, failpoint=None) -> a running ``kafkalog serve`` (killed at the end of the test)."""
    started = []

    def _start(data, *args, failpoint=None):
        env = {k: v for k, v in child_env.items() if k != "KAFKALOG_FAILPOINTS"}
        if failpoint:
            env["KAFKALOG_FAILPOINTS"] = f"{failpoint}=kill"
        s = Serve(["--data-dir", data, "--listen", "127.0.0.1:0", "--override", "group.initial.rebalance.delay.ms=0",
                   *args], env)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.kill()


class Scenario:
    """Names of one test: two topics (2 + 1 partitions: the transaction's), a source topic whose offsets the
    transaction commits for a group, a transactional id."""

    def __init__(self):
        u = uuid.uuid4().hex[:8]
        self.ta, self.tb, self.src = f"txa-{u}", f"txb-{u}", f"src-{u}"
        self.group, self.txn_id = f"grp-{u}", f"tid-{u}"
        self.parts = [TopicPartition(self.ta, 0), TopicPartition(self.ta, 1), TopicPartition(self.tb, 0)]
        self.src_parts = [TopicPartition(self.src, 0), TopicPartition(self.src, 1)]

    def create_topics(self, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
        futures = admin.create_topics([NewTopic(self.ta, 2, 1), NewTopic(self.tb, 1, 1), NewTopic(self.src, 2, 1)])
        for f in futures.values():
            f.result(30)


def key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


def producer(bootstrap, txn_id, timeout_ms=10000) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "transactional.id": txn_id,
                     "acks": "all", "enable.idempotence": True, "linger.ms": 2,
                     "transaction.timeout.ms": timeout_ms, "message.timeout.ms": min(9000, timeout_ms),
                     "socket.connection.setup.timeout.ms": 3000})


def group_metadata(bootstrap, group):
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": group,
                  "enable.auto.commit": False})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()


def write_txn(p: Producer, sc: Scenario, tag: str, n: int, offsets: list[int], bootstrap: str) -> dict:
    """begin, n records on each partition of the scenario, the group's offsets; flushed (every record acknowledged).
    Returns {(topic, partition): [(offset, value)]} from the delivery reports."""
    got: dict = {key(tp): [] for tp in sc.parts}
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            got[(msg.topic(), msg.partition())].append((msg.offset(), msg.value()))

    p.begin_transaction()
    for i in range(n):
        for tp in sc.parts:
            p.produce(tp.topic, value=f"{tag}-{tp.topic}-{tp.partition}-{i}".encode(), key=b"k%d" % i,
                      partition=tp.partition, on_delivery=report)
    p.send_offsets_to_transaction([TopicPartition(t.topic, t.partition, o) for t, o in zip(sc.src_parts, offsets)],
                                  group_metadata(bootstrap, sc.group), 30)
    assert p.flush(30) == 0
    assert not errors, errors
    assert all(len(v) == n for v in got.values()), got
    return got


def read_partitions(bootstrap, parts, isolation, expect: int) -> dict:
    """Every record of ``parts`` from the start as a consumer of ``isolation`` sees it: {(topic, partition):
    [(offset, value)]}. Polls until ``expect`` records came, then a few more times (a duplicate or an extra record
    would come then)."""
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": f"reader-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": isolation, "fetch.wait.max.ms": 50,
                  "enable.partition.eof": False})
    out: dict = {key(tp): [] for tp in parts}
    try:
        c.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in parts])
        extra = 0
        for _ in range(POLLS):
            for m in c.consume(num_messages=500, timeout=0.2):
                assert m.error() is None, m.error()
                out[(m.topic(), m.partition())].append((m.offset(), m.value()))
            if sum(map(len, out.values())) >= expect:
                extra += 1
                if extra >= 4:
                    break
        return out
    finally:
        c.close()


def watermarks(bootstrap, parts) -> tuple[dict, dict]:
    """({(topic, partition): LSO} by ListOffsets read_committed, {...: high watermark} by read_uncommitted)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    out = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts}, isolation_level=level,
                                     request_timeout=15)
        out.append({key(tp): f.result(30).offset for tp, f in futures.items()})
    return out[0], out[1]


def committed_offsets(bootstrap, sc: Scenario) -> dict:
    """The group's committed offsets of the source partitions (OffsetFetch with RequireStable: a pending
    transactional commit would be an error here, UNSTABLE_OFFSET_COMMIT)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    req = ConsumerGroupTopicPartitions(sc.group, [TopicPartition(tp.topic, tp.partition) for tp in sc.src_parts])
    res = admin.list_consumer_group_offsets([req], require_stable=True, request_timeout=15)[sc.group].result(30)
    for tp in res.topic_partitions:
        assert tp.error is None, tp.error
    return {key(tp): tp.offset for tp in res.topic_partitions}


def values_of(records: dict) -> dict:
    return {k: sorted(v for _, v in recs) for k, recs in records.items()}


def merge(*parts: dict) -> dict:
    out: dict = {}
    for d in parts:
        for k, recs in d.items():
            out.setdefault(k, []).extend(recs)
    return {k: sorted(v) for k, v in out.items()}


def check_visible(bootstrap, sc: Scenario, committed: dict, not_visible: dict) -> None:
    """read_committed shows exactly ``committed`` (each record once, at its acknowledged offset) and nothing of
    ``not_visible``; read_uncommitted shows both."""
    want = merge(committed)
    got = read_partitions(bootstrap, sc.parts, "read_committed", sum(map(len, want.values())))
    hidden = {v for recs in not_visible.values() for _, v in recs}
    shown = sorted(v for recs in got.values() for _, v in recs if v in hidden)
    assert not shown, f"read_committed shows records of an aborted transaction: {shown[:5]}"
    for k in want:
        assert sorted(got[k]) == want[k], (f"{k}: read_committed saw {sorted(got[k])}, the committed records "
                                           f"are {want[k]}")
    everything = merge(committed, not_visible)
    raw = read_partitions(bootstrap, sc.parts, "read_uncommitted", sum(map(len, everything.values())))
    for k in everything:
        assert sorted(raw[k]) == everything[k], f"{k}: read_uncommitted saw {sorted(raw[k])}"


def check_stable(bootstrap, sc: Scenario) -> None:
    lso, hwm = watermarks(bootstrap, sc.parts)
    assert lso == hwm, f"last stable offsets {lso} are not the high watermarks {hwm}"


def further_transaction(bootstrap, sc: Scenario, committed: dict, hidden: dict) -> dict:
    """A new producer of the same transactional id initializes (the coordinator gives it the id) and commits one
    more transaction, which read_committed then shows beside the rest."""
    p = producer(bootstrap, sc.txn_id)
    p.init_transactions(30)
    more = write_txn(p, sc, "after", 2, [500, 600], bootstrap)
    p.commit_transaction(30)
    check_visible(bootstrap, sc, merge(committed, more), hidden)
    assert committed_offsets(bootstrap, sc) == {key(sc.src_parts[0]): 500, key(sc.src_parts[1]): 600}
    check_stable(bootstrap, sc)
    return more


def baseline(brokers, data, sc: Scenario, extra_args=()) -> dict:
    """A first broker (no failpoint): the topics, one committed transaction (offsets 10 and 20 for the group)."""
    b0 = brokers(data, *extra_args)
    sc.create_topics(b0.bootstrap_servers)
    p = producer(b0.bootstrap_servers, sc.txn_id)
    p.init_transactions(30)
    first = write_txn(p, sc, "base", 3, [10, 20], b0.bootstrap_servers)
    p.commit_transaction(30)
    del p
    rc, _, err = b0.stop()
    assert rc == 0, err[-3000:]
    return first


# the default suite kills at one of the six (failpoint, result) points; the others are slow (about 10 s
# each: two broker starts and a kill), run before a stop with `pytest -m slow`
_DEFAULT_CASES = {("txn:after-prepare", True)}
END_TXN_CASES = [pytest.param(f, c, id=f"{f}-{'commit' if c else 'abort'}",
                              marks=() if (f, c) in _DEFAULT_CASES else pytest.mark.slow)
                 for f in FAILPOINTS for c in (True, False)]


@pytest.mark.parametrize(("failpoint", "commit"), END_TXN_CASES)
def test_end_txn_killed_then_completed_on_restart(brokers, tmp_path, failpoint, commit):
    data = tmp_path / "data"
    sc = Scenario()
    first = baseline(brokers, data, sc)

    b1 = brokers(data, failpoint=failpoint)
    p = producer(b1.bootstrap_servers, sc.txn_id)
    p.init_transactions(30)
    txn = write_txn(p, sc, "killed", N_PER_PARTITION, [110, 120], b1.bootstrap_servers)
    end = p.commit_transaction if commit else p.abort_transaction
    if failpoint == "txn:before-complete":
        end(30)  # answered (decision fsynced, markers appended): the kill comes with the markers' fsync behind it
    else:
        with pytest.raises(KafkaException):  # the broker dies under the EndTxn
            end(3)
    assert b1.proc.wait(timeout=30) == -signal.SIGKILL, f"the failpoint {failpoint} did not fire: " + \
        b1.stderr()[-3000:]
    del p

    b2 = brokers(data)  # the coordinator completes the PrepareX before it serves anything
    if commit:
        check_visible(b2.bootstrap_servers, sc, merge(first, txn), {})
        assert committed_offsets(b2.bootstrap_servers, sc) == {key(sc.src_parts[0]): 110, key(sc.src_parts[1]): 120}
    else:
        check_visible(b2.bootstrap_servers, sc, first, txn)
        assert committed_offsets(b2.bootstrap_servers, sc) == {key(sc.src_parts[0]): 10, key(sc.src_parts[1]): 20}
    check_stable(b2.bootstrap_servers, sc)
    further_transaction(b2.bootstrap_servers, sc, merge(first, txn) if commit else first, {} if commit else txn)
    rc, _, err = b2.stop()
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]


@pytest.mark.slow  # 14 s of waiting for the transaction timeout; the kill points of EndTxn stay in the default suite
def test_ongoing_transaction_killed_is_aborted_on_its_timeout(brokers, tmp_path):
    """kill -9 with a transaction Ongoing (records acknowledged, offsets sent, no EndTxn): after the restart
    read_committed does not show it, the LSO of each partition stays at the transaction's first offset there until
    the coordinator aborts it on its timeout; then the LSO reaches the high watermark, read_committed still does not
    show it, the group's offsets are the earlier ones and the id takes a new producer."""
    data = tmp_path / "data"
    sc = Scenario()
    # no timeout scan on this first broker: the transaction must still be Ongoing when it is killed
    no_scan = ("--override", "transaction.abort.timed.out.transaction.cleanup.interval.ms=3600000")
    first = baseline(brokers, data, sc, no_scan)
    timeout_ms = 5000
    b1 = brokers(data, *no_scan)
    p = producer(b1.bootstrap_servers, sc.txn_id, timeout_ms=timeout_ms)
    p.init_transactions(30)
    txn = write_txn(p, sc, "ongoing", N_PER_PARTITION, [110, 120], b1.bootstrap_servers)
    written = time.monotonic()
    b1.kill()
    assert b1.proc.returncode == -signal.SIGKILL
    del p

    b2 = brokers(data, "--override", "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
    bs = b2.bootstrap_servers
    txn_first = {k: min(o for o, _ in recs) for k, recs in txn.items()}
    seen_open = False
    fresh = time.monotonic() - written < timeout_ms / 1000 - 1.0  # at the first look it cannot have timed out yet
    for _ in range(POLLS):
        lso, hwm = watermarks(bs, sc.parts)
        if lso == hwm:
            break
        assert lso == txn_first, (f"with the transaction open, the last stable offsets are {lso}: not its first "
                                  f"offsets {txn_first} (high watermarks {hwm})")
        if not seen_open:
            seen_open = True
            # nothing of it shows while it is open
            got = read_partitions(bs, sc.parts, "read_committed", sum(map(len, first.values())))
            assert values_of(got) == values_of(first), f"read_committed with the transaction open: {got}"
        time.sleep(0.2)
    else:
        raise AssertionError(f"the timed-out transaction was not aborted after {POLLS} polls: LSO {lso}, "
                             f"high watermarks {hwm}")
    assert seen_open or not fresh, "the transaction was aborted before its timeout"
    check_visible(bs, sc, first, txn)
    check_stable(bs, sc)
    assert committed_offsets(bs, sc) == {key(sc.src_parts[0]): 10, key(sc.src_parts[1]): 20}
    further_transaction(bs, sc, first, txn)
    rc, _, err = b2.stop()
    assert rc == 0, err[-3000:]


# -- transactions v2 (KIP-890 part 2): the same kills under an EndTxn v5, over raw frames ------------------------
# (librdkafka takes the v1 paths; Java and franz-go take these only where transaction.version 2 is advertised)

def _tv2_wire(port):
    from .wire import Wire
    return Wire(port, timeout=30)


def _tv2_produce(w, txn, topic, partition, values, pid, epoch, seq) -> int:
    from .wire import batch
    r = w.call(0, 12, {"transactional_id": txn, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch(
            values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def _tv2_end(w, txn, pid, epoch, commit) -> tuple:
    r = w.call(26, 5, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": commit})
    return r["error_code"], r["producer_id"], r["producer_epoch"]


def _tv2_log(port, topic, partition) -> list:
    """(producer id, epoch, control, values) of every batch of the partition, read_uncommitted."""
    from kafkalog._engine.batch import iter_batches
    out, offset = [], 0
    with _tv2_wire(port) as w:
        for _ in range(POLLS):
            p = w.fetch(topic, partition, offset)
            got = list(iter_batches(bytes(p["records"] or b"")))
            out += [(b.producer_id, b.producer_epoch, b.is_control, [bytes(r.value) for r in b] if not b.is_control
                     else None) for b in got]
            if not got:
                return out
            offset = got[-1].base_offset + got[-1].last_offset_delta + 1
    raise AssertionError("the log did not end")


_TV2_DEFAULT = {("txn:after-marker", True)}
TV2_CASES = [pytest.param(f, c, id=f"tv2-{f}-{'commit' if c else 'abort'}",
                          marks=() if (f, c) in _TV2_DEFAULT else pytest.mark.slow)
             for f in FAILPOINTS for c in (True, False)]


@pytest.mark.parametrize(("failpoint", "commit"), TV2_CASES)
def test_tv2_end_txn_killed_then_completed_on_restart(brokers, tmp_path, failpoint, commit):
    """Produce v12 (implicit adds) on three partitions, EndTxn v5, the broker killed at ``failpoint``: after the
    restart the transaction is complete (read_committed shows it whole, or nothing of it), its markers carry the
    bumped epoch on every partition, the producer's retried EndTxn is recognised as a retry (answered with the
    bumped epoch), the old epoch is refused, and the producer goes on with the bumped one."""
    data = tmp_path / "data"
    txn, ta, tb = f"tv2-{uuid.uuid4().hex[:8]}", f"tv2a-{uuid.uuid4().hex[:8]}", f"tv2b-{uuid.uuid4().hex[:8]}"
    parts = [(ta, 0), (ta, 1), (tb, 0)]
    b1 = brokers(data, failpoint=failpoint)
    with _tv2_wire(b1.port) as w:
        assert w.create_topic(ta, 2)["error_code"] == 0 and w.create_topic(tb, 1)["error_code"] == 0
        r = w.call(22, 5, {"transactional_id": txn, "transaction_timeout_ms": 60000, "producer_id": -1,
                           "producer_epoch": -1})
        pid, epoch = r["producer_id"], r["producer_epoch"]
        for topic, partition in parts:
            values = [f"{topic}-{partition}-{i}".encode() for i in range(N_PER_PARTITION)]
            assert _tv2_produce(w, txn, topic, partition, values, pid, epoch, 0) == 0
        w.send(26, 5, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": commit})
        answer = w.recv_frame()
        if failpoint == "txn:before-complete":  # answered; the kill comes with the markers' fsync behind it
            assert answer is not None
        else:
            assert answer is None  # the broker died under the EndTxn
    assert b1.proc.wait(timeout=30) == -signal.SIGKILL, f"the failpoint {failpoint} did not fire: " + \
        b1.stderr()[-3000:]

    b2 = brokers(data)
    for topic, partition in parts:
        log = _tv2_log(b2.port, topic, partition)
        assert [b[3] for b in log if not b[2]] == [[f"{topic}-{partition}-{i}".encode()
                                                    for i in range(N_PER_PARTITION)]]
        # one marker (a crash before the completion may leave a second, identical one), with the bumped epoch
        markers = [b[:2] for b in log if b[2]]
        assert markers and set(markers) == {(pid, epoch + 1)}, markers
    with _tv2_wire(b2.port) as w:
        for topic, partition in parts:
            fetched = w.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                     "isolation_level": 1, "session_id": 0, "session_epoch": -1, "topics": [
                                         {"topic": topic, "partitions": [
                                             {"partition": partition, "current_leader_epoch": -1, "fetch_offset": 0,
                                              "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                     "forgotten_topics_data": [], "rack_id": ""})["responses"][0]["partitions"][0]
            assert fetched["last_stable_offset"] == fetched["high_watermark"]
            aborted = [(a["producer_id"], a["first_offset"]) for a in fetched["aborted_transactions"] or []]
            assert aborted == ([] if commit else [(pid, 0)])
        # the producer's EndTxn again, its answer lost to the kill: a retry, answered with the bumped epoch
        assert _tv2_end(w, txn, pid, epoch, commit) == (0, pid, epoch + 1)
        assert _tv2_end(w, txn, pid, epoch, not commit)[0] == 48  # the opposite result: INVALID_TXN_STATE
        assert _tv2_produce(w, txn, ta, 0, [b"zombie"], pid, epoch, N_PER_PARTITION) == 47  # the old epoch
        assert _tv2_produce(w, txn, ta, 0, [b"next"], pid, epoch + 1, 0) == 0
        assert _tv2_end(w, txn, pid, epoch + 1, True) == (0, pid, epoch + 2)
    rc, _, err = b2.stop()
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
