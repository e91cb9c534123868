"""A partition's transactions (storage/txnstate.py): derived from batch headers, rebuilt on open from the newest
producer snapshot plus the .txnindex entries below it, or from the log start when no snapshot is usable. Each test
compares what an open computes with what a full scan of the same log computes."""

from __future__ import annotations

import random

import pytest

import kafkalog
from kafkalog._engine.batch import build_batch
from kafkalog.errors import InvalidProducerEpochError
from kafkalog.storage import failpoints
from kafkalog.storage.txnformat import TxnIndex, snapshot_path, txn_index_path
from kafkalog.storage.txnstate import PartitionTxns


def _txn(values, pid, epoch=0):
    return build_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)


def _full_scan(log) -> PartitionTxns:
    t = PartitionTxns()
    t.reset(log.log_start_offset)
    for view, _start, _stop in log._chunks(log.log_start_offset, log.log_end_offset):
        t.observe(view, t.scanned)
    return t


def _state(t: PartitionTxns):
    return dict(t.ongoing), dict(t.epochs), [(a.producer_id, a.first_offset, a.last_offset) for a in t.aborted]


def _workload(log, rng, steps):
    """Interleaved producers: transactions open, commit or abort, with plain batches and rolls between."""
    open_pids = set()
    for _ in range(steps):
        pid = rng.randrange(1, 6)
        r = rng.random()
        if r < 0.45:
            log.append_records(_txn([b"v%d" % rng.randrange(100)], pid))
            open_pids.add(pid)
        elif r < 0.7 and open_pids:
            p = rng.choice(sorted(open_pids))
            log.append_marker(p, 0, rng.random() < 0.5)
            open_pids.discard(p)
        elif r < 0.85:
            log.append_records(build_batch([b"plain"]))
        else:
            log.roll()
    return open_pids


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_open_from_a_snapshot_equals_a_full_scan(tmp_path, seed):
    rng = random.Random(seed)
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 1)
    log = store.log("t", 0)
    _workload(log, rng, 400)
    expected = _state(_full_scan(log))
    assert _state(log._txn_state()) == expected
    lso = log.last_stable_offset
    store.close()
    snaps = sorted(tmp_path.glob("t-0/*.snapshot"))
    assert 1 <= len(snaps) <= 2, snaps  # written at rolls, the two newest kept
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    log = store.log("t", 0)
    t = log._txn_state()
    assert _state(t) == expected and log.last_stable_offset == lso
    # the open started from the newest snapshot, not from the log start
    assert int(snaps[-1].name[:20]) > 0
    store.close()


def test_a_damaged_or_stale_snapshot_falls_back_to_the_full_scan(tmp_path):
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append_records(_txn([b"a"], 1))
    log.roll()
    log.append_records(_txn([b"b"], 2))
    log.append_marker(1, 0, False)
    log.roll()
    expected = _state(_full_scan(log))
    store.close()
    newest = sorted((tmp_path / "t-0").glob("*.snapshot"))[-1]
    raw = bytearray(newest.read_bytes())
    raw[-1] ^= 0xFF  # CRC mismatch
    newest.write_bytes(bytes(raw))
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    log = store.log("t", 0)
    assert _state(log._txn_state()) == expected
    # a snapshot that lies (claims no open transaction) is not used when it is beyond the log end
    log.roll()
    store.close()
    far = snapshot_path(tmp_path / "t-0", 10_000)
    far.write_bytes(sorted((tmp_path / "t-0").glob("*.snapshot"))[0].read_bytes())
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    log = store.log("t", 0)
    assert _state(log._txn_state()) == expected
    store.close()


def test_a_fenced_epoch_is_refused_by_the_partition(tmp_path):
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append_records(_txn([b"a"], 1, epoch=0))
    log.append_marker(1, 1, False)  # the coordinator fenced epoch 0 and aborted with epoch 1
    with pytest.raises(InvalidProducerEpochError):
        log.append_records(_txn([b"zombie"], 1, epoch=0))
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(1, 0, True)
    assert log.last_stable_offset == log.log_end_offset == 2
    log.append_records(_txn([b"next"], 1, epoch=1))
    assert log.last_stable_offset == 2
    store.close()


def test_a_recovery_that_cuts_the_log_removes_the_snapshots(tmp_path, child_env):
    """A snapshot may describe batches a power loss took: after a recovery that cut anything, none is trusted."""
    import subprocess
    import sys
    script = f"""
import os, kafkalog
from kafkalog._engine.batch import build_batch
store = kafkalog.LogStore({str(tmp_path)!r}, maintenance=False)
store.create_topic("t", 1)
log = store.log("t", 0)
for i in range(3):
    log.append_records(build_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=i, is_transactional=True))
    log.roll()
log.append_marker(1, 0, False)
log.flush()
os._exit(0)  # no close: an unclean shutdown
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, env=child_env)
    d = tmp_path / "t-0"
    assert list(d.glob("*.snapshot"))
    active = sorted(d.glob("*.log"))[-1]
    with open(active, "r+b") as f:  # a torn batch after the last valid one
        f.seek(0, 2)
        end = f.tell()
        f.seek(0)
        data = f.read()
        valid = len(data.rstrip(b"\0"))
        f.seek(valid)
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x40garbage")
        assert f.tell() <= max(end, valid + 19)
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    log = store.log("t", 0)
    assert not list(d.glob("*.snapshot"))
    t = log._txn_state()
    assert _state(t) == _state(_full_scan(log)) and log.last_stable_offset == log.log_end_offset == 4
    store.close()


def test_a_txnindex_entry_whose_marker_a_power_loss_took_goes_at_recovery(tmp_path, child_env):
    """The .txnindex entry of an ABORT marker is fsynced before the marker's segment: a power loss can keep the entry
    and lose the marker. Recovery drops entries past the recovered end, so the coordinator can write that marker
    again (found by the power-loss soak: the append refused a last offset not above the stale entry's)."""
    import subprocess
    import sys
    script = f"""
import os, kafkalog
from kafkalog._engine.batch import build_batch
store = kafkalog.LogStore({str(tmp_path)!r}, maintenance=False)
store.create_topic("t", 1)
log = store.log("t", 0)
log.append_records(build_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True))
log.flush()
print(log.log_end_offset, flush=True)
log.append_marker(1, 0, False)
os._exit(0)
"""
    out = subprocess.run([sys.executable, "-c", script], check=True, timeout=120, capture_output=True, text=True,
                         env=child_env)
    marker_at = int(out.stdout.split()[0])
    d = tmp_path / "t-0"
    seg = sorted(d.glob("*.log"))[0]
    data = seg.read_bytes()
    first = 12 + int.from_bytes(data[8:12], "big")  # the data batch; the 78-byte marker follows it
    with open(seg, "r+b") as f:  # the marker's bytes never reached the disk: zeros where it was
        f.seek(first)
        f.write(b"\0" * 78)
    assert [e.last_offset for e in TxnIndex(txn_index_path(d, 0)).entries()] == [marker_at]
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    log = store.log("t", 0)
    assert log.log_end_offset == marker_at and log.open_transactions() == {1: 0}
    assert TxnIndex(txn_index_path(d, 0)).entries() == []
    assert log.append_marker(1, 0, False) == marker_at  # what the coordinator's completion does
    assert [e.last_offset for e in TxnIndex(txn_index_path(d, 0)).entries()] == [marker_at]
    assert list(log.records(isolation_level="read_committed")) == [] and log.last_stable_offset == marker_at + 1
    store.close()


def _index(d, base):
    return [(e.producer_id, e.first_offset, e.last_offset) for e in TxnIndex(txn_index_path(d, base)).entries()]


def _committed(log):
    return [bytes(r.value) for r in log.records(isolation_level="read_committed")]


def test_an_abort_whose_writer_died_before_its_txnindex_entry_stays_aborted_for_an_open_from_a_snapshot(tmp_path):
    """A shared writer killed between appending an ABORT marker and writing its .txnindex entry (the transaction
    torture, seed 1232143914 under load): every other process's scan sees the marker, and the coordinator's retry
    finds the transaction ended and writes no entry; a roll then wrote a producer snapshot above the marker, and an
    open from it took the aborted transactions below it from the .txnindex files only: the aborted record was
    visible. The roll that writes a snapshot completes those files from its scan first. Two shared stores in one
    process; the failpoint ends A's append where the SIGKILL did: the marker's bytes in the segment, no entry."""
    d = tmp_path / "t-0"
    a = kafkalog.LogStore(tmp_path, maintenance=False)
    a.create_topic("t", 1)
    b = kafkalog.LogStore(tmp_path, maintenance=False)
    la, lb = a.log("t", 0), b.log("t", 0)
    la.append_records(_txn([b"aborted-1"], 1))  # 0
    la.append_records(_txn([b"aborted-2"], 2))  # 1
    failpoints.enable("append:after-write", "raise")
    try:
        with pytest.raises(OSError):
            la.append_marker(1, 0, False)  # 2: in the log, A "dies" before its entry
    finally:
        failpoints.disable("append:after-write")
    assert _index(d, 0) == []
    assert _committed(lb) == [] and lb.open_transactions() == {2: 1}  # B's scan sees the marker
    assert lb.append_marker(1, 0, False) == 3  # the coordinator's retry: the transaction ended already, no entry
    assert lb.append_marker(2, 0, False) == 4  # another abort in the same segment: its entry follows
    assert _index(d, 0) == [(2, 1, 4)]
    lb.append_records(build_batch([b"plain"]))  # 5
    lb.roll()  # the producer snapshot at 6 vouches for the .txnindex files below it
    assert sorted(x.name for x in d.glob("*.snapshot")) == ["00000000000000000006.snapshot"]
    assert _index(d, 0) == [(1, 0, 2), (2, 1, 4)]  # completed from B's scan, in increasing last offset
    expected = _state(_full_scan(lb))
    b.close()
    a.close()
    c = kafkalog.LogStore(tmp_path, maintenance=False)
    log = c.log("t", 0)
    assert _state(log._txn_state()) == expected
    assert _committed(log) == [b"plain"] and log.last_stable_offset == 6
    c.close()


def test_an_abort_behind_records_another_thread_staged_meanwhile_gets_its_txnindex_entry(tmp_path):
    """Exclusive mode: append() stages without the log's lock, so records can be staged between append_marker's
    catch-up and its claim of an offset, which writes them first: the marker lands past what the state had taken
    in, and its .txnindex entry was not written; a snapshot above it then hid the abort from the next open."""
    d = tmp_path / "t-0"
    store = kafkalog.LogStore(tmp_path, exclusive=True, maintenance=False)
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append_records(_txn([b"aborted"], 1))  # 0
    failpoints.enable("marker:before-claim", lambda: log.append(b"plain"))  # another thread's append(), staged
    try:
        assert log.append_marker(1, 0, False) == 2  # behind the staged record (1)
    finally:
        failpoints.disable("marker:before-claim")
    assert _index(d, 0) == [(1, 0, 2)]
    assert _committed(log) == [b"plain"]
    log.roll()
    store.close()
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    log = store.log("t", 0)
    assert list(d.glob("*.snapshot")) and _committed(log) == [b"plain"] and log.last_stable_offset == 3
    store.close()
