"""The kafkalog command, run as a real subprocess (python -m kafkalog) on real data dirs."""

import json
import os
import subprocess
import sys

import pytest

import kafkalog

T0 = 1_700_000_000_000


def run(args, env, check=True):
    r = subprocess.run([sys.executable, "-m", "kafkalog", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=120)
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
