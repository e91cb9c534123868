"""The kafkalog command, run as a real subprocess (python -m kafkalog) on real data dirs."""

import io
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

import kafkalog
from kafkalog.cli import Progress, render_progress
from kafkalog.client.partitioner import hash_partition

T0 = 1_700_000_000_000


def run(args, env, check=True, input=None):
    r = subprocess.run([sys.executable, "-m", "kafkalog", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=120, input=input)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture
def filled(data_dir):
    with kafkalog.LogStore(data_dir, {"segment.bytes": 4000}, exclusive=True, maintenance=False) as store:
        store.create_topic("events", 2, {"retention.ms": -1, "index.interval.bytes": 300})
        for p in range(2):
            log = store.log("events", p)
            for i in range(20):
                log.append_batch([b"e%d-%d" % (p, i * 10 + j) for j in range(10)],
                                 keys=[b"k"] * 10, timestamps=[T0 + (i * 10 + j) * 1000 for j in range(10)])
    return data_dir


def test_offsets_by_epoch_ms_iso_and_json(filled, child_env):
    r = run(["offsets", filled, "events", "--time", T0 + 42_500, "--partition", 0], child_env)
    assert r.stdout.split()[:4] == ["events", "0", "43", str(T0 + 43_000)]
    iso = "2023-11-14T22:13:27Z"  # T0 + 7 s
    r = run(["offsets", filled, "events", "--time", iso, "--json"], child_env)
    rows = json.loads(r.stdout)
    assert [(x["partition"], x["offset"], x["timestamp"]) for x in rows] == [(0, 7, T0 + 7000), (1, 7, T0 + 7000)]
    r = run(["offsets", filled, "events", "--time", "latest", "--partition", 1, "--json"], child_env)
    assert json.loads(r.stdout)[0]["offset"] == 200
    r = run(["offsets", filled, "events", "--time", T0 + 10**9, "--partition", 0], child_env)
    assert "no record" in r.stdout


def test_topics_and_delete_records(filled, child_env):
    r = run(["topics", filled, "--json"], child_env)
    rows = json.loads(r.stdout)
    assert [(x["topic"], x["partition"], x["log_end_offset"]) for x in rows] == [("events", 0, 200),
                                                                               ("events", 1, 200)]
    r = run(["delete-records", filled, "events", "--partition", 1, "--offset", 55], child_env)
    assert "log_start_offset=55" in r.stdout
    rows = json.loads(run(["topics", filled, "--json"], child_env).stdout)
    assert rows[1]["log_start_offset"] == 55


def test_dump_batches_records_and_indexes(filled, child_env):
    seg = filled / "events-0" / ("%020d.log" % 0)
    r = run(["dump", seg, "--deep", "--max-records", 3], child_env)
    assert "baseOffset: 0 lastOffset: 9 count: 10" in r.stdout
    assert "| offset: 2 CreateTime: %d" % (T0 + 2000) in r.stdout and "payload: e0-2" in r.stdout
    r = run(["dump", filled / "events-0"], child_env)
    assert ".timeindex" in r.stdout and "isvalid: True" in r.stdout


def test_check_ok_then_names_corruption(filled, child_env):
    r = run(["check", filled], child_env)
    assert r.stdout.startswith("ok:")
    seg = filled / "events-1" / ("%020d.log" % 0)
    with open(seg, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    r = run(["check", filled], child_env, check=False)
    assert r.returncode == 1
    assert str(seg) in r.stdout and "position 0" in r.stdout
    assert "Traceback" not in r.stderr


def test_check_names_bad_index(filled, child_env):
    idx = sorted((filled / "events-0").glob("*.index"))[0]
    data = bytearray(idx.read_bytes())
    assert len(data) >= 8
    data[4:8] = (123).to_bytes(4, "big")  # position that is not a batch start
    idx.write_bytes(bytes(data))
    r = run(["check", filled], child_env, check=False)
    assert r.returncode == 1 and str(idx) in r.stdout


def test_errors_are_one_line(tmp_path, child_env):
    r = run(["offsets", tmp_path / "nope", "t", "--time", "0"], child_env, check=False)
    assert r.returncode == 1 and r.stderr.startswith("kafkalog: error:") and "Traceback" not in r.stderr
    r = run(["offsets", tmp_path, "t", "--time", "yesterday-ish"], child_env, check=False)
    assert r.returncode == 1 and "ISO-8601" in r.stderr
    r = run(["topics", tmp_path / "d", "--create", "bad/name"], child_env, check=False)
    assert r.returncode == 1 and "INVALID" not in r.stderr and "bad/name" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_demo_runs(tmp_path, child_env):
    r = run(["demo", tmp_path / "demo"], child_env)
    assert "time seek" in r.stdout and "OFFSET_OUT_OF_RANGE" in r.stdout
    assert os.path.isdir(tmp_path / "demo" / "events-0")
    r = run(["demo", tmp_path / "demo"], child_env)  # the README's command, run twice: its own dir is fine
    assert "time seek" in r.stdout


def test_demo_never_touches_user_data(data_dir, child_env):
    """Issue 10, defect 10: the demo on an existing data dir refuses, naming it, and changes nothing."""
    with kafkalog.LogStore(data_dir, exclusive=True) as store:
        store.create_topic("events", 1)
        store.log("events", 0).append_batch([b"mine-%d" % i for i in range(100)])
    before = sorted((p.name, p.stat().st_size) for p in (data_dir / "events-0").iterdir())
    r = run(["demo", data_dir], child_env, check=False)
    assert r.returncode == 1 and str(data_dir) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted((p.name, p.stat().st_size) for p in (data_dir / "events-0").iterdir()) == before
    with kafkalog.LogStore(data_dir, read_only=True) as store:
        log = store.log("events", 0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 100)


# ---------------------------------------------------------------------------------------------------- produce/consume

def test_produce_consume_round_trip_with_keys(data_dir, child_env):
    lines = [f"user-{i % 7}:payload {i} é" for i in range(300)]
    r = run(["produce", data_dir, "clicks", "--create", "--partitions", 3, "--key-separator", ":",
             "--compression", "zstd"], child_env, input="\n".join(lines) + "\n")
    assert r.stderr == "produced 300 records to clicks\n"  # stderr is a pipe: no progress line
    r = run(["consume", data_dir, "clicks", "--from-beginning", "--key-separator", ":"], child_env)
    assert sorted(r.stdout.splitlines()) == sorted(lines)
    assert r.stderr == "consumed 300 records from clicks\n"
    r = run(["consume", data_dir, "clicks", "--from-beginning", "--format", "json"], child_env)
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(rows) == 300
    for row in rows:  # Kafka's default partitioner: murmur2 of the key
        assert row["partition"] == hash_partition(row["key"].encode(), 3)
        assert row["value"].startswith("payload ") and row["headers"] == []
    per_part = {}
    for row in rows:
        per_part.setdefault(row["partition"], []).append(row["offset"])
    assert all(offs == list(range(len(offs))) for offs in per_part.values())
    for part in per_part:
        r = run(["dump", data_dir / f"clicks-{part}"], child_env)
        assert "compresscodec: zstd" in r.stdout and "compresscodec: none" not in r.stdout
    # default start is the log end: nothing new, nothing printed
    r = run(["consume", data_dir, "clicks"], child_env)
    assert r.stdout == "" and r.stderr == "consumed 0 records from clicks\n"


@pytest.mark.parametrize("codec", ["gzip", "lz4", "snappy", "none"])
def test_produce_codecs_round_trip(data_dir, child_env, codec):
    data = "".join(f"line {i}\n" for i in range(1000)) + "\nlast line without newline"
    run(["produce", data_dir, "t", "--create", "--compression", codec, "-q"], child_env, input=data)
    r = run(["consume", data_dir, "t", "--from-beginning", "-q"], child_env)
    assert r.stdout == data + "\n"  # an empty line is an empty record; the last line gets its newline
    r = run(["dump", data_dir / "t-0"], child_env)
    assert f"compresscodec: {codec}" in r.stdout


def test_produce_to_one_partition_and_base64_json(data_dir, child_env):
    run(["topics", data_dir, "--create", "t", "--partitions", 2], child_env)
    run(["produce", data_dir, "t", "--partition", 1], child_env, input="a\nb\n")
    r = run(["consume", data_dir, "t", "--from-beginning", "--format", "json", "--base64"], child_env)
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["partition"], x["offset"], x["key"], x["value"]) for x in rows] == [(1, 0, None, "YQ=="),
                                                                                 (1, 1, None, "Yg==")]


def test_consume_from_time_iso_and_epoch(filled, child_env):
    r = run(["consume", filled, "events", "--from-time", T0 + 42_500, "--partition", 0], child_env)
    assert r.stdout.splitlines() == [f"e0-{i}" for i in range(43, 200)]
    iso = "2023-11-14T22:13:27Z"  # T0 + 7 s
    r = run(["consume", filled, "events", "--from-time", iso], child_env)
    assert sorted(r.stdout.splitlines()) == sorted(f"e{p}-{i}" for p in range(2) for i in range(7, 200))
    r = run(["consume", filled, "events", "--from-time", T0 + 10**9], child_env)
    assert r.stdout == ""


def test_consume_offset_partition_and_max_messages(filled, child_env):
    r = run(["consume", filled, "events", "--offset", 195, "--partition", 1, "--print-key"], child_env)
    assert r.stdout.splitlines() == [f"k\te1-{i}" for i in range(195, 200)]
    r = run(["consume", filled, "events", "--offset", 17, "--partition", 0, "--max-messages", 3], child_env)
    assert r.stdout.splitlines() == ["e0-17", "e0-18", "e0-19"]
    r = run(["consume", filled, "events", "--offset", 500, "--partition", 0], child_env, check=False)
    assert r.returncode == 1 and "out of range" in r.stderr and r.stdout == ""
    r = run(["consume", filled, "events", "--offset", 5], child_env, check=False)
    assert r.returncode == 2 and "--partition" in r.stderr


def test_group_resumes_and_groups_shows_lag(filled, child_env):
    r = run(["consume", filled, "events", "--group", "g", "--from-beginning", "--max-messages", 150], child_env)
    first = r.stdout.splitlines()
    assert len(first) == 150
    r = run(["groups", filled, "g", "--json"], child_env)
    (row,) = json.loads(r.stdout)
    parts = {(x["topic"], x["partition"]): (x["committed"], x["log_end_offset"], x["lag"]) for x in row["partitions"]}
    assert parts == {("events", 0): (150, 200, 50), ("events", 1): (0, 200, 200)}
    r = run(["groups", filled], child_env)
    assert r.stdout.split("\n")[1].split()[:6] == ["g", "events", "0", "150", "200", "50"]
    # the second run starts where the first one stopped (and --from-beginning does not override a commit)
    r = run(["consume", filled, "events", "--group", "g", "--from-beginning"], child_env)
    second = r.stdout.splitlines()
    assert sorted(first + second) == sorted(f"e{p}-{i}" for p in range(2) for i in range(200))
    r = run(["consume", filled, "events", "--group", "g"], child_env)
    assert r.stdout == ""
    rows = json.loads(run(["groups", filled, "--json"], child_env).stdout)
    assert [(x["group"], [(y["committed"], y["lag"]) for y in x["partitions"]]) for x in rows] == \
        [("g", [(200, 0), (200, 0)])]
    r = run(["groups", filled, "nope"], child_env, check=False)
    assert r.returncode == 1 and "nope" in r.stderr


def _read_line(proc, timeout=60.0) -> bytes:
    """One line of the child's stdout, or fail after ``timeout`` seconds (a guard, not a measurement)."""
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            proc.kill()
            raise AssertionError(f"no line from the consumer; got {buf!r}")
        chunk = os.read(fd, 1)
        if not chunk:
            raise AssertionError(f"consumer exited: {buf!r} {proc.stderr.read()!r}")
        buf += chunk
    return buf


def test_follow_sees_another_process_and_stops_on_sigterm(data_dir, child_env, spawn):
    run(["produce", data_dir, "live", "--create"], child_env, input="first\n")
    proc = spawn([sys.executable, "-m", "kafkalog", "consume", str(data_dir), "live", "--follow",
                             "--from-beginning", "--group", "tail"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=child_env, bufsize=0)
    try:
        assert _read_line(proc) == b"first\n"
        run(["produce", data_dir, "live"], child_env, input="second\n")  # another process, another store
        assert _read_line(proc) == b"second\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read().decode()
        assert "consumed 2 records from live" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with kafkalog.LogStore(data_dir, read_only=True) as store:
        assert store.offsets.committed("tail", kafkalog.TopicPartition("live", 0)).offset == 2


# ---------------------------------------------------------------------------------------------------- delete-records

def test_delete_records_before_and_before_time(filled, child_env):
    r = run(["delete-records", filled, "events", "--before", 55, "--partition", 1], child_env)
    assert r.stdout == "events 1 log_start_offset=55\n"
    r = run(["delete-records", filled, "events", "--before", 300], child_env, check=False)
    assert r.returncode == 1 and "nothing was deleted" in r.stderr
    r = run(["delete-records", filled, "events", "--before-time", T0 + 100_500], child_env)
    assert r.stdout.splitlines() == ["events 0 log_start_offset=101", "events 1 log_start_offset=101"]
    r = run(["consume", filled, "events", "--from-beginning", "--partition", 0, "--max-messages", 1], child_env)
    assert r.stdout == "e0-101\n"
    r = run(["delete-records", filled, "events", "--before-time", "2023-11-14T22:13:20Z", "--partition", 0],
            child_env)  # T0: nothing older than the log start
    assert r.stdout == "events 0 log_start_offset=101\n"
    r = run(["delete-records", filled, "events", "--before-time", T0 + 10**9], child_env)  # every record is older
    assert r.stdout.splitlines() == ["events 0 log_start_offset=200", "events 1 log_start_offset=200"]
    r = run(["delete-records", filled, "events", "--before", 1, "--before-time", 0], child_env, check=False)
    assert r.returncode == 2


# ---------------------------------------------------------------------------------------------------- bad input

def test_produce_stops_at_a_line_without_separator(data_dir, child_env):
    r = run(["produce", data_dir, "t", "--create", "--key-separator", "="], child_env, check=False,
            input="a=1\nb=2\nno separator here\nc=3\n")
    assert r.returncode == 1 and "line 3" in r.stderr and "'='" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = run(["consume", data_dir, "t", "--from-beginning", "--print-key"], child_env)
    assert r.stdout.splitlines() == ["a\t1", "b\t2"]  # the lines before it were written, none after


def test_bad_input_errors_are_one_line(filled, tmp_path, child_env):
    cases = [
        (["produce", filled, "nope"], 1, "'nope'"),
        (["consume", filled, "nope"], 1, "'nope'"),
        (["consume", filled, "events", "--partition", 5], 1, "partition 5"),
        (["consume", filled, "events", "--from-time", "last tuesday"], 1, "ISO-8601"),
        (["consume", filled, "events", "--from-time", "earliest"], 1, "ISO-8601"),
        (["consume", tmp_path / "missing", "events"], 1, "missing"),
        (["delete-records", filled, "events", "--before-time", "soon"], 1, "ISO-8601"),
        (["delete-records", tmp_path / "missing", "events", "--before", 1], 1, "missing"),
        (["produce", filled, "events", "--key-separator", ""], 2, "separator"),
        (["produce", filled, "events", "--compression", "brotli"], 2, "brotli"),
        (["consume", filled, "events", "--offset", "-3", "--partition", 0], 2, "-3"),
    ]
    for args, code, needle in cases:
        r = run(args, child_env, check=False, input="x\n")
        assert r.returncode == code, (args, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        if code == 1:
            assert r.stderr.startswith("kafkalog: error:") and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing").exists()
    r = run(["consume", filled, "events", "--from-beginning", "--partition", 0], child_env)
    assert len(r.stdout.splitlines()) == 200  # the refused produce wrote nothing


# ---------------------------------------------------------------------------------------------------- progress

def test_render_progress():
    assert render_progress("produced", 1_234_567, 2.0) == "produced 1,234,567 records | 617,284 records/s | 2.0 s"
    assert render_progress("consumed", 0, 0.0) == "consumed 0 records | - records/s | 0.0 s"


def test_progress_redraws_at_most_every_interval_and_clears():
    out = io.StringIO()
    times = iter([100.0, 100.05, 100.2, 100.25, 101.2])
    bar = Progress("consumed", enabled=True, stream=out, clock=lambda: next(times), interval=0.1)
    bar.update(10)  # 0.05 s after the start: too early, nothing drawn
    assert out.getvalue() == ""
    bar.update(20)
    assert out.getvalue() == "\rconsumed 20 records | 100 records/s | 0.2 s"
    bar.update(30)  # 0.05 s after the last draw: skipped
    assert "30 records" not in out.getvalue()
    bar.update(4000)
    assert out.getvalue().endswith("| 1.2 s") and "\rconsumed 4,000 records | " in out.getvalue()
    bar.clear()
    assert out.getvalue().endswith("\r" + " " * len(render_progress("consumed", 4000, 1.2)) + "\r")
    quiet = io.StringIO()
    off = Progress("consumed", enabled=False, stream=quiet, clock=lambda: 1 / 0)
    off.update(5)
    off.clear()
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_produce_stops_cleanly_on_a_signal(data_dir, child_env, sig):
    """Issue 10, defect 11: SIGTERM/SIGINT while produce waits on stdin: it stops reading, writes and fsyncs every
    line read, says how many, and exits 128 + the signal number."""
    p = subprocess.Popen([sys.executable, "-m", "kafkalog", "produce", str(data_dir), "t", "--create"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env)
    try:
        p.stdin.write(b"".join(b"line-%d\n" % i for i in range(5000)))
        p.stdin.flush()
        deadline = time.monotonic() + 30
        while not (data_dir / "t-0").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the lines are read; produce waits on stdin for more
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert f"produced 5000 records to t (stopped by {signal.Signals(sig).name}" in err.decode(), err
    with kafkalog.LogStore(data_dir, read_only=True) as store:
        assert [r.value for r in store.log("t", 0).records()] == [b"line-%d" % i for i in range(5000)]
        assert store.had_clean_shutdown
