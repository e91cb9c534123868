"""``preallocate=true`` (Kafka's topic config; DurableQueue topics have it): the active segment keeps zero-written
room past its last batch, so a durable append overwrites blocks the file has and its fdatasync commits no size
change. What must hold (the crash, multi-process and power-loss tests run the same workloads with it too:
tests/storage/test_crash.py's ``room`` parameters, tests/powerloss's ``preallocated-writers`` and
``durable-queue``): the room is never taken for records nor for a torn write, a roll and an exclusive close trim it,
readers of other processes see every batch written into it, and the tools say what it is."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kafkalog
from kafkalog import LogStore
from kafkalog.client.queue import TOPIC_CONFIG
from kafkalog.storage.log import PREALLOCATE_BYTES

TOPIC = "pa"
CONFIG = {"preallocate": True, "segment.bytes": 4 << 20, "index.interval.bytes": 512}


def _active(data, topic=TOPIC):
    d = data / f"{topic}-0"
    return sorted(d.glob("*.log"))[-1]


def _zeros_after(path, pos: int) -> int:
    raw = path.read_bytes()
    assert not any(raw[pos:]), f"{path.name}: bytes past the last batch at {pos} are not zeros"
    return len(raw) - pos


def test_appends_overwrite_zero_written_room_and_a_roll_trims_it(tmp_path):
    data = tmp_path / "data"
    with LogStore(data, maintenance=False) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.log(TOPIC, 0)
        for i in range(30):
            log.append_batch([b"r%d-%d" % (i, k) for k in range(20)])
            log.flush()
            seg = log.segments()[-1]
            room = _zeros_after(_active(data), seg.size)
            assert PREALLOCATE_BYTES // 2 <= room <= PREALLOCATE_BYTES, room
        assert log.size_in_bytes == seg.size < _active(data).stat().st_size
        first = _active(data)
        log.roll()
        assert first.stat().st_size == log.segments()[0].size, "the sealed segment still has its room"
        log.append_batch([b"after-roll"])
        log.flush()
        assert _zeros_after(_active(data), log.segments()[-1].size) > 0
        assert [r.value for r in log.records(600)] == [b"after-roll"]
        assert log.log_end_offset == 601


def test_room_never_goes_past_segment_bytes(tmp_path):
    data = tmp_path / "data"
    with LogStore(data, maintenance=False) as store:
        store.create_topic(TOPIC, 1, {"preallocate": True, "segment.bytes": 20000})
        log = store.log(TOPIC, 0)
        for _ in range(100):
            log.append_batch([b"x" * 500])
            for seg, path in zip(log.segments(), sorted((data / f"{TOPIC}-0").glob("*.log"))):
                assert path.stat().st_size <= max(20000, seg.size), (path.name, path.stat().st_size)
        assert len(log.segments()) > 2


def test_a_second_opener_reads_through_the_room_and_the_last_clean_close_trims_it(tmp_path):
    data = tmp_path / "data"
    with LogStore(data, maintenance=False) as a:
        a.create_topic(TOPIC, 1, CONFIG)
        la = a.log(TOPIC, 0)
        la.append_batch([b"a", b"b", b"c"])
        la.flush()
        assert _zeros_after(_active(data), la.segments()[-1].size) > 0
        with LogStore(data, maintenance=False) as b:  # another shared opener: the room is no torn write
            lb = b.log(TOPIC, 0)
            assert lb.segments()[-1].torn_bytes == 0
            assert [r.value for r in lb.records()] == [b"a", b"b", b"c"]
            assert lb.append(b"d") == 3
            lb.flush()
            assert la.has_data_after(3) and [r.value for r in la.records(3)] == [b"d"]
            assert la.append(b"e") == 4
            la.flush()
            assert [r.value for r in lb.records(4)] == [b"e"]
        size = la.segments()[-1].size
        assert _active(data).stat().st_size > size
    assert _active(data).stat().st_size == size, "the last clean close left the room"
    with LogStore(data, read_only=True) as store:
        assert [r.value for r in store.log(TOPIC, 0).records()] == [b"a", b"b", b"c", b"d", b"e"]


def _batch_size_of_one(value: bytes) -> int:
    from kafkalog._engine.batch import build_batch
    return len(build_batch([value]))


def test_another_process_appends_into_the_room_and_a_waiting_reader_sees_every_record(tmp_path, spawn, child_env):
    """A reader in this process (shared store) waits on has_data_after while another process appends batch after
    batch into the room: the reader must see each one (a reader that took the zeros for "nothing new" would wait
    for ever: bounded here by a count of looks, never by time)."""
    data = tmp_path / "data"
    n_batches = 60
    with LogStore(data, maintenance=False) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.log(TOPIC, 0)
        log.append(b"first")
        log.flush()
        go = tmp_path / "go"
        writer = spawn([sys.executable, "-c", f"""
import os, sys, time
from kafkalog import LogStore
with LogStore({str(data)!r}, maintenance=False) as store:
    log = store.log({TOPIC!r}, 0)
    for i in range({n_batches}):
        while not os.path.exists({str(go)!r} + str(i)):
            time.sleep(0.001)
        log.append_batch([b"w%d-%d" % (i, k) for k in range(1 + i % 7)])
        log.flush()
"""], env=child_env)
        try:
            at, got = 1, []
            for i in range(n_batches):
                (tmp_path / f"go{i}").touch()
                looks = 0
                while not log.has_data_after(at):
                    looks += 1
                    assert looks < 200_000, f"batch {i} of the other process never seen: the room hid it"
                    assert writer.poll() is None or log.has_data_after(at), "the writer exited, its batch unseen"
                recs = list(log.records(at))
                assert recs, f"has_data_after({at}) said yes, records() gave nothing"
                got.extend(r.value for r in recs)
                at = recs[-1].offset + 1
            assert writer.wait(60) == 0
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        assert got == [b"w%d-%d" % (i, k) for i in range(n_batches) for k in range(1 + i % 7)]
        assert log.log_end_offset == at


def test_tools_report_the_room(tmp_path, child_env):
    data = tmp_path / "data"
    with LogStore(data, maintenance=False) as store:  # open: its active segment has its room
        store.create_topic(TOPIC, 1, CONFIG)
        store.log(TOPIC, 0).append_batch([b"x", b"y"])
        store.log(TOPIC, 0).flush()
        dump = subprocess.run([sys.executable, "-m", "kafkalog", "dump", str(_active(data))], capture_output=True,
                              text=True, env=child_env, timeout=60)
        assert dump.returncode == 0, dump.stdout + dump.stderr
        assert "lastOffset: 1 count: 2" in dump.stdout and "preallocated zeros to the end of the file" in dump.stdout
        check = subprocess.run([sys.executable, "-m", "kafkalog", "check", str(data)], capture_output=True,
                               text=True, env=child_env, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


def test_a_durable_queue_topic_is_preallocated(tmp_path):
    assert TOPIC_CONFIG["preallocate"] is True
    data = tmp_path / "data"
    with kafkalog.DurableQueue(data, name="jobs", group="g") as q:
        q.put_many([b"m%d" % i for i in range(50)])
        assert [q.get(timeout=5) for _ in range(50)][-1].value == b"m49"
    with LogStore(data, read_only=True) as store:
        assert store.topic_config("jobs")["preallocate"] is True
        assert store.log("jobs", 0).log_end_offset == 50


@pytest.mark.parametrize("clean", [True, False])
def test_bytes_past_zeros_are_cut_by_recovery_after_an_unclean_stop(tmp_path, clean):
    """A power loss can keep a later page of a never-fsynced batch while an earlier one is zeros: after an unclean
    stop the recovery cuts everything past the last valid batch, room and remnants alike; after a clean one the room
    stays (no power loss wrote there)."""
    data = tmp_path / "data"
    with LogStore(data, exclusive=True, maintenance=False) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.log(TOPIC, 0)
        log.append_batch([b"kept-%d" % i for i in range(10)])
        log.flush()
        end = log.segments()[-1].size
        path = _active(data)
        # keep the room: write it back as the segment had it before the exclusive close trims it
        room = path.stat().st_size - end
    if clean:
        with open(path, "r+b") as f:
            f.truncate(end + 8192)
    else:
        with open(path, "r+b") as f:  # a remnant 4 KiB past the end, zeros before it: a torn power loss
            f.truncate(end + 8192)
            f.seek(end + 4096)
            f.write(os.urandom(512))
        os.unlink(data / ".kafka_cleanshutdown")
    assert room > 0
    with LogStore(data, maintenance=False) as store:
        assert store.had_clean_shutdown is clean
        log = store.log(TOPIC, 0)
        assert [r.value for r in log.records()] == [b"kept-%d" % i for i in range(10)]
        assert log.append(b"next") == 10
        log.flush()
    if not clean:
        raw = path.read_bytes()
        assert not any(raw[end + _batch_size_of_one(b"next"):]), "a remnant of the power loss survived recovery"
    with LogStore(data, read_only=True) as store:
        assert [r.value for r in store.log(TOPIC, 0).records()][-2:] == [b"kept-9", b"next"]


def test_room_that_cannot_be_written_leaves_appends_working(tmp_path, child_env):
    """Writing the room fails (here: a file size limit, EFBIG, as a full disk fails with ENOSPC): the append that
    triggered it is done and acknowledged, the file is as it was, and appends go on without room."""
    data = tmp_path / "data"
    code = f"""
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
from kafkalog import LogStore
with LogStore({str(data)!r}, exclusive=True, maintenance=False) as store:
    store.create_topic({TOPIC!r}, 1, {{"preallocate": True, "segment.bytes": 4 << 20,
                                        "segment.index.bytes": 65536}})
    log = store.log({TOPIC!r}, 0)
    for i in range(20):
        assert log.append_batch([b"%d-" % i + b"x" * 1000]) == i
        log.flush()
    print("appended", log.log_end_offset, log.segments()[-1].size)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("appended 20 "), p.stdout
    assert p.stderr.count("preallocating room in segment 0 failed") == 1, p.stderr  # not tried at every append
    with LogStore(data, read_only=True) as store:
        assert [r.value[:3] for r in store.log(TOPIC, 0).records()] == [b"%d-" % i + b"x" for i in range(10)] + \
            [b"%d-" % i for i in range(10, 20)]


@pytest.mark.parametrize("opener", ["read_only", "shared"])
def test_a_batch_being_written_into_the_room_is_not_taken_in_by_an_opener(tmp_path, opener):
    """A writer in the middle of its pwrite (or killed there) has written the first page of its batch into the room
    and not the rest, which reads as zeros: the batch's header gives a length the file holds, so its length alone
    proves nothing. A store opened then must end its view before that batch (its CRC fails), never hand it out,
    and take it in once it is whole."""
    from kafkalog._engine.batch import build_batch
    data = tmp_path / "data"
    with LogStore(data, maintenance=False) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.log(TOPIC, 0)
        log.append_batch([b"whole-%d" % i for i in range(5)])
        log.flush()
        end = log.segments()[-1].size
        batch = bytearray(build_batch([b"x" * 3000 for _ in range(4)]))
        batch[0:8] = (5).to_bytes(8, "big")  # the next batch's base offset, as its writer assigns it
        path = _active(data)
        with open(path, "r+b") as f:  # its first 4 KiB page only, the rest still the room's zeros
            f.seek(end)
            f.write(batch[:4096 - end % 4096])
        with LogStore(data, read_only=opener == "read_only", maintenance=False) as other:
            olog = other.log(TOPIC, 0)
            assert olog.log_end_offset == 5, "a batch not yet written whole was taken in"
            assert [r.value for r in olog.records()] == [b"whole-%d" % i for i in range(5)]
            with open(path, "r+b") as f:  # the writer finishes it, then bumps the partition's change counter
                f.seek(end)
                f.write(batch)
            log._changed(current=False)
            assert olog.has_data_after(5)
            assert [r.value for r in olog.records(5)] == [b"x" * 3000] * 4
