"""What a transaction's end fsyncs before it returns.

EndTxn returns once its PrepareX is durable and its markers are appended (visible to every reader); the markers'
fsyncs and then CompleteX run behind the answer."""

from __future__ import annotations

import threading


import kafkalog
from kafkalog._engine.batch import build_batch
from kafkalog.storage.transactions import COMPLETE_COMMIT, PREPARE_COMMIT, TXN_TOPIC
from kafkalog.storage.txnformat import decode_txn_log_key, decode_txn_log_value
from kafkalog.structs import TopicPartition

TP = TopicPartition("t", 0)


def _txn_states(store, txn_id):
    """The states of ``txn_id``'s records in __transaction_state, in log order (what a reload replays)."""
    lg = store.log(TXN_TOPIC, 0)
    return [decode_txn_log_value(r.value).state for r in lg.records(lg.log_start_offset, lg.log_end_offset)
            if r.key is not None and r.value is not None and decode_txn_log_key(r.key) == txn_id]


def _segment(path):
    d = path / f"{TXN_TOPIC}-0"
    return max(d.glob("*.log"))


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
