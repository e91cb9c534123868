"""pytest-xdist (a broker per worker) and a killed inner run leaving no process, port or folder behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO, plugin_args

XDIST = r'''
import os, json, pytest

@pytest.mark.parametrize("i", range(6))
def test_each(kafka_broker, kafka_topic, i):
    t = kafka_topic()
    kafka_broker.produce(t, [b"%d" % i])
    assert [r.value for r in kafka_broker.consume_all(t)] == [b"%d" % i]
    with open(os.environ["SEEN"], "a") as f:
        f.write(json.dumps([os.environ.get("PYTEST_XDIST_WORKER"), os.getpid(), kafka_broker.port,
                            str(kafka_broker.data_dir)]) + "\n")
'''


def test_xdist_one_broker_per_worker(inner, pytester, monkeypatch):
    seen = pytester.path / "seen.jsonl"
    monkeypatch.setenv("SEEN", str(seen))
    r = inner(XDIST, "-n", "2", "-p", "xdist")
    r.assert_outcomes(passed=6)
    rows = [json.loads(line) for line in seen.read_text().splitlines()]
    workers = {w: (pid, port, d) for w, pid, port, d in rows}
    assert set(workers) == {"gw0", "gw1"}
    assert len({port for _pid, port, _d in workers.values()}) == 2
    assert len({d for _p, _port, d in workers.values()}) == 2
    for w, pid, port, d in rows:
        assert workers[w] == (pid, port, d)  # one broker for all of a worker's tests
        assert not Path(d).exists()


HANGS = r'''
import json, os, time

def test_hangs(kafka_broker, kafka_broker_fresh):
    with open(os.environ["INFO"] + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "brokers": [[b.pid, b.port, str(b.data_dir)]
                                                   for b in (kafka_broker, kafka_broker_fresh)]}, f)
    os.rename(os.environ["INFO"] + ".tmp", os.environ["INFO"])
    time.sleep(120)  # killed long before
'''


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_killed_run_leaves_nothing_behind(pytester, mode, child_env):
    """SIGKILL of the inner pytest while its brokers serve: every broker process, listening port and data dir is
    gone soon after (the reaper, and in process mode `kafkalog serve --parent-pid`)."""
    pytester.makepyfile(test_hangs=HANGS)
    info = pytester.path / "info.json"
    env = dict(child_env, INFO=str(info), PYTHONPATH=os.pathsep.join([str(REPO), child_env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_args(),
                             f"--kafkalog-mode={mode}", "test_hangs.py"], cwd=pytester.path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(600):  # until the inner test says where its brokers are (a 60 s guard)
            if info.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert info.exists(), f"the inner run ended ({proc.returncode}) before its test ran"
        got = json.loads(info.read_text())
        assert got["pid"] == proc.pid
        for pid, port, data_dir in got["brokers"]:
            assert _alive(pid) and _listening(port) and Path(data_dir).is_dir()
            assert (pid == proc.pid) == (mode == "thread")
        root = Path(got["brokers"][0][2]).parents[1]
        assert root.name.startswith(f"kafkalog-test-{proc.pid}-")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    left = None
    for _ in range(300):  # 30 s guard
        left = [what for pid, port, data_dir in got["brokers"]
                for what in ([f"process {pid}"] if _alive(pid) else []) + ([f"port {port}"] if _listening(port)
                                                                           else [])]
        if root.exists():
            left.append(f"folder {root}")
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"left behind by a killed run: {left}"
