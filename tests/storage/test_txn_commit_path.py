"""What a transaction's end fsyncs before it returns, and the load's sweep for hanging transactions.

EndTxn returns once its PrepareX is durable and its markers are appended (visible to every reader); the markers'
fsyncs and then CompleteX run behind the answer. AddPartitionsToTxn / AddOffsetsToTxn records are not fsynced before
their answer: a power loss can keep a partition's transactional batch and lose the record that put the partition in
the transaction, and the coordinator's load aborts such a hanging transaction. A power loss is played by cutting
``__transaction_state`` back to what was fsynced (its size after the last fsync), the store closed first."""

from __future__ import annotations

import os
import struct
import threading

import pytest

import kafkalog
from kafkalog._engine.batch import build_batch
from kafkalog.errors import ProducerFencedError
from kafkalog.storage.transactions import COMPLETE_ABORT, COMPLETE_COMMIT, PREPARE_COMMIT, TXN_TOPIC
from kafkalog.storage.txnformat import decode_txn_log_key, decode_txn_log_value
from kafkalog.structs import TopicPartition

TP = TopicPartition("t", 0)
TP2 = TopicPartition("t", 1)


def _txn_states(store, txn_id):
    """The states of ``txn_id``'s records in __transaction_state, in log order (what a reload replays)."""
    lg = store.log(TXN_TOPIC, 0)
    return [decode_txn_log_value(r.value).state for r in lg.records(lg.log_start_offset, lg.log_end_offset)
            if r.key is not None and r.value is not None and decode_txn_log_key(r.key) == txn_id]


def _segment(path):
    d = path / f"{TXN_TOPIC}-0"
    return max(d.glob("*.log"))


def _lose_power(path, durable):
    """After the store's close: __transaction_state cut back to ``durable`` bytes, and no clean-shutdown mark."""
    with open(_segment(path), "r+b") as f:
        f.truncate(durable)
        os.fsync(f.fileno())
    os.unlink(path / ".kafka_cleanshutdown")


def _bytes_below(segment, offset: int) -> int:
    """The length of the segment's leading batches that end below ``offset`` (Kafka's batch header: base offset
    at 0, length at 8, last offset delta at 23)."""
    data = segment.read_bytes()
    pos = 0
    while pos + 27 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        if base + delta >= offset:
            break
        pos += 12 + length
    return pos


def _batch(pid, epoch, seq, values):
    return build_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def test_commit_returns_with_markers_appended_and_completes_after_their_fsync(tmp_path, monkeypatch):
    """Commit returns visible (another store sees the records read_committed) before the marker's fsync; CompleteX
    is written only once it is done."""
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 1)
    coord = store.transactions
    lg = store.log("t", 0)
    pid, epoch = coord.init_producer_id("a", 60000)
    coord.add_partitions("a", pid, epoch, [TP])
    lg.append_records(_batch(pid, epoch, 0, [b"v1", b"v2"]))
    lg.flush()  # acks=all: the data is durable before EndTxn
    gate, entered = threading.Event(), threading.Event()
    real_sync = type(lg).sync

    def sync(self):
        if self is lg:
            entered.set()
            assert gate.wait(30)
        return real_sync(self)

    monkeypatch.setattr(type(lg), "sync", sync)
    coord.end_txn("a", pid, epoch, True)
    assert entered.wait(30), "the marker's fsync never started"
    # returned with the marker's fsync held: visible, decided, not complete
    with kafkalog.LogStore(tmp_path, read_only=True) as view:
        other = view.log("t", 0)
        assert other.last_stable_offset == other.log_end_offset == 3
        assert [r.value for r in other.records(0, 3, isolation_level="read_committed")] == [b"v1", b"v2"]
    assert lg.recovery_point < 3  # the marker is not fsynced yet
    assert _txn_states(store, "a")[-1] == PREPARE_COMMIT  # so no CompleteX: a power loss now leaves PrepareX
    gate.set()
    coord.wait_behind()
    assert lg.recovery_point == 3
    assert _txn_states(store, "a")[-1] == COMPLETE_COMMIT
    store.close()


def test_next_transaction_waits_for_the_last_ones_completion(tmp_path):
    """An embedded producer's next transaction starts at once; its records follow the last one's CompleteX in
    __transaction_state (a reload replays them in order), whichever store mode."""
    for exclusive in (True, False):
        d = tmp_path / str(exclusive)
        with kafkalog.LogStore(d, exclusive=exclusive) as store:
            store.create_topic("t", 1)
            p = kafkalog.KafkaProducer(store, transactional_id="a")
            p.init_transactions()
            for i in range(5):
                p.begin_transaction()
                p.send("t", b"%d" % i, partition=0)
                p.commit_transaction()
            lg = store.log("t", 0)
            assert lg.recovery_point >= lg.log_end_offset - 1  # every record fsynced before commit returned
            p.close()
        with kafkalog.LogStore(d) as store:
            states = _txn_states(store, "a")
        # Ongoing, PrepareCommit, CompleteCommit per transaction, in that order
        assert states[-3:] == [1, PREPARE_COMMIT, COMPLETE_COMMIT], states
        assert [s for s in states if s in (1, 2, 4)] == [1, 2, 4] * 5, states
        with kafkalog.LogStore(d) as store:
            assert store.transactions.describe("a").state == COMPLETE_COMMIT
            lg = store.log("t", 0)
            assert [r.value for r in lg.records(0, lg.log_end_offset, isolation_level="read_committed")] == \
                [b"%d" % i for i in range(5)]


@pytest.mark.parametrize("known", ["ongoing", "complete", "unknown"])
def test_load_aborts_a_transaction_whose_add_was_lost(tmp_path, known):
    """Power lost after a transactional batch was fsynced but before its AddPartitionsToTxn record was: the
    coordinator's load aborts what the partition holds (the LSO moves to the log end), fences the producer, and
    keeps what was committed. ``known``: what the durable coordinator state says of the producer: its transaction
    Ongoing with another partition, its last transaction complete, or nothing (an id the lost records alone
    named)."""
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 2)
    coord = store.transactions
    lg = store.log("t", 0)
    pid, epoch = coord.init_producer_id("a", 60000)
    if known == "complete":  # a committed transaction first: it must stay visible
        coord.add_partitions("a", pid, epoch, [TP])
        lg.append_records(_batch(pid, epoch, 0, [b"kept"]))
        lg.flush()
        pid, epoch = coord.end_txn("a", pid, epoch, True, 2)
        coord.wait_behind()
    if known == "ongoing":
        coord.add_partitions("a", pid, epoch, [TP2])
    store.log(TXN_TOPIC, 0).flush()
    durable = _segment(tmp_path).stat().st_size
    coord.add_partitions("a", pid, epoch, [TP])  # not fsynced
    before = lg.log_end_offset
    lg.append_records(_batch(pid, epoch, 0, [b"lost-1", b"lost-2"]))
    lg.flush()
    store.close()
    if known == "unknown":  # the id's every record lost: a fresh data dir's coordinator log, emptied
        durable = 0
    _lose_power(tmp_path, durable)
    with kafkalog.LogStore(tmp_path, maintenance=False) as store:
        lg = store.log("t", 0)
        assert lg.last_stable_offset == before  # stuck on the hanging transaction until the coordinator loads
        coord = store.transactions
        assert lg.open_transactions() == {}
        assert lg.last_stable_offset == lg.log_end_offset == before + 3  # its ABORT marker
        got = [r.value for r in lg.records(0, lg.log_end_offset, isolation_level="read_committed")]
        assert got == ([b"kept"] if known == "complete" else [])
        if known != "unknown":
            meta = coord.describe("a")
            assert meta.state == COMPLETE_ABORT and meta.epoch > epoch
            with pytest.raises(ProducerFencedError):
                coord.add_partitions("a", pid, epoch, [TP])
        if known == "ongoing":  # the partition it knew is aborted too
            assert store.log("t", 1).last_stable_offset == store.log("t", 1).log_end_offset


@pytest.mark.parametrize("behind_first", [False, True], ids=["add-first", "complete-first"])
@pytest.mark.parametrize("tv", [0, 2])
@pytest.mark.parametrize("exclusive", [False, True])
def test_a_lost_complete_never_ends_the_next_transaction(tmp_path, tv, exclusive, behind_first):
    """Power lost with the last transaction's PrepareCommit durable, the next transaction's batch durable, and of
    what is between (CompleteCommit, the next AddPartitionsToTxn) only what was fsynced: the load commits the last
    transaction, and the next one (same producer id, and same epoch: v0 keeps it, v2 goes on with PrepareX's) stays
    invisible."""
    from kafkalog.storage import failpoints
    store = kafkalog.LogStore(tmp_path, maintenance=False, exclusive=exclusive)
    store.create_topic("t", 1)
    coord = store.transactions
    lg = store.log("t", 0)
    pid, epoch = coord.init_producer_id("a", 60000)
    coord.add_partitions("a", pid, epoch, [TP], tv)
    lg.append_records(_batch(pid, epoch, 0, [b"committed"]))
    lg.flush()
    sizes = []
    failpoints.enable("txn:after-prepare", lambda: sizes.append(_segment(tmp_path).stat().st_size))
    try:
        pid, epoch = coord.end_txn("a", pid, epoch, True, tv)
    finally:
        failpoints.disable("txn:after-prepare")
    if behind_first:  # the background step's CompleteCommit (and its fsync, v0) before the next add
        coord.wait_behind()
    coord.add_partitions("a", pid, epoch, [TP], tv)
    seq = 1 if tv == 0 else 0
    lg.append_records(_batch(pid, epoch, seq, [b"next"]))
    lg.flush()
    # __transaction_state as its fsyncs so far left it: what is below its recovery point (the background step's
    # CompleteCommit when it ran before the add, the add itself when the add made CompleteCommit durable), and
    # PrepareCommit at least. (A look at recovery point == log end right after the add missed the first case: the
    # add, unfsynced, sat above a durable CompleteCommit, and the test cut the file back to PrepareCommit, which
    # no power loss does. CI, once in an exclusive store, v0.)
    durable = max(sizes[-1], _bytes_below(_segment(tmp_path), store.log(TXN_TOPIC, 0).recovery_point))
    store.close()
    _lose_power(tmp_path, durable)
    with kafkalog.LogStore(tmp_path, maintenance=False) as store:
        coord = store.transactions  # the load
        lg = store.log("t", 0)
        assert [r.value for r in lg.records(0, lg.log_end_offset, isolation_level="read_committed")] == \
            [b"committed"]
        if tv == 0:  # its AddPartitionsToTxn was fsynced with the CompleteCommit: open, until its timeout
            coord.expire(now_ms=coord.describe("a").start_ms + 60001)
        assert lg.last_stable_offset == lg.log_end_offset
        assert [r.value for r in lg.records(0, lg.log_end_offset, isolation_level="read_committed")] == \
            [b"committed"]


def test_embedded_commit_returns_with_its_records_fsynced(tmp_path, monkeypatch):
    """An embedded producer's commit_transaction() returns with its records fsynced (the markers' fsyncs held back
    here, so that nothing but the commit itself can have fsynced them) and its marker appended."""
    from kafkalog.storage.transactions import TransactionCoordinator
    held = []
    monkeypatch.setattr(TransactionCoordinator, "_behind_submit", lambda self, behind: held.append(behind))
    with kafkalog.LogStore(tmp_path, exclusive=True) as store:
        store.create_topic("t", 2)
        p = kafkalog.KafkaProducer(store, transactional_id="a", linger_ms=1000)
        p.init_transactions()
        for i in range(3):
            p.begin_transaction()
            for part in (0, 1):
                for j in range(100):
                    p.send("t", b"%d-%d" % (i, j), partition=part)
            p.commit_transaction()
            for part in (0, 1):
                lg = store.log("t", part)
                assert lg.recovery_point >= lg.log_end_offset - 1, (i, part)  # all but the marker
                assert lg.last_stable_offset == lg.log_end_offset
        assert len(held) == 3
        p.close()
        store.transactions.settle()


def test_a_clean_restart_opens_no_partition_for_the_sweep(tmp_path):
    """The sweep runs after an unclean shutdown only (and then opens only partitions that held transactional
    batches): a clean restart's coordinator load opens none."""
    with kafkalog.LogStore(tmp_path, maintenance=False) as store:
        store.create_topic("t", 2)
        store.create_topic("plain", 3)
        for part in range(3):
            store.log("plain", part).append_batch([b"x"])
        p = kafkalog.KafkaProducer(store, transactional_id="a")
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"v", partition=0)
        p.commit_transaction()
        p.close()
    with kafkalog.LogStore(tmp_path, maintenance=False) as store:
        store.transactions  # noqa: B018  (the load)
        assert [k for k in store._logs if k[0] != TXN_TOPIC] == []
    os.unlink(tmp_path / ".kafka_cleanshutdown")  # as a kill -9 or a power loss leaves it
    with kafkalog.LogStore(tmp_path, maintenance=False) as store:
        store.transactions  # noqa: B018
        assert sorted(k for k in store._logs if k[0] != TXN_TOPIC and not k[0].startswith("__")) == [("t", 0)]
        assert not (tmp_path / ".kafkalog-txn-sweep").exists()
