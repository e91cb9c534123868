"""A test run that dies takes every process it started with it (tests/children.py, issue 21).

An inner pytest run (a test file written into tmp_path) starts the long-lived processes the suite's fixtures start —
the lab's ``kafkalog serve`` (one of them from a thread that has ended since), tests/broker's ``Serve``,
crash_writer.py's fork server and a writer it forked, and the lab's Apache Kafka broker when the lab is installed —
prints their pids and blocks. The outer test SIGKILLs the inner pytest, as the OOM killer did, and every one of
those processes must be gone within a bounded number of looks at /proc.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


children = _load("kafkalog_test_children", REPO / "tests" / "children.py")

START_LOOKS = 3000  # 0.1 s apart: the inner run's processes start (Kafka's JVM takes the longest)
GONE_LOOKS = 200    # 0.05 s apart: after the kill, every process is gone

INNER = '''
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(os.environ["KAFKALOG_REPO"])
PIDS = Path(os.environ["KAFKALOG_PIDS"])


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_start_then_block(tmp_path):
    lab = load("inner_lab", REPO / "tests" / "compat" / "lab.py")
    broker = load("inner_broker_conftest", REPO / "tests" / "broker" / "conftest.py")
    children = sys.modules["kafkalog_test_children"]
    pids = {}
    pids["lab KafkalogServer"] = lab.KafkalogServer().start(tmp_path / "kafkalog").pid
    started = {}
    t = threading.Thread(target=lambda: started.update(s=lab.KafkalogServer().start(tmp_path / "by-thread")))
    t.start()
    t.join()
    pids["lab KafkalogServer started by a thread that has ended"] = started["s"].pid
    serve = broker.Serve(["--data-dir", tmp_path / "serve", "--listen", "127.0.0.1:0"], dict(os.environ))
    pids["tests/broker Serve"] = serve.pid
    zygote = children.popen([sys.executable, str(REPO / "tests" / "storage" / "crash_writer.py"), "serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    spec = {"dir": str(tmp_path / "data"), "journal": str(tmp_path / "w.journal"), "log": str(tmp_path / "w.out"),
            "ops": [["sleep", {"s": 3600}]]}
    zygote.stdin.write(json.dumps({"cmd": "spawn", "spec": spec}) + "\\n")
    pids["crash_writer.py fork server"] = zygote.pid
    pids["a writer the fork server forked"] = json.loads(zygote.stdout.readline())["pid"]
    if os.environ.get("KAFKALOG_WITH_KAFKA") == "1":
        pids["lab KafkaBroker (java)"] = lab.KafkaBroker().start(tmp_path / "kafka").pid
    PIDS.with_suffix(".tmp").write_text(json.dumps(pids))
    os.replace(PIDS.with_suffix(".tmp"), PIDS)
    time.sleep(3600)
'''


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None when it is gone or a zombie (dead, not reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime field 22
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _kafka_available() -> bool:
    """The lab's Kafka is installed (this test never fetches it: without it, the rest is still checked)."""
    lab = _load("kafkalog_test_lab", REPO / "tests" / "compat" / "lab.py")
    try:
        lab.java_exe()
    except lab.LabError:
        return False
    return (lab.KAFKA_HOME / ".complete").is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_test_run_leaves_no_process_behind(tmp_path, child_env):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text("[pytest]\n")
    (inner / "test_inner.py").write_text(INNER)
    pids_file = tmp_path / "pids.json"
    with_kafka = _kafka_available()
    env = dict(child_env, KAFKALOG_REPO=str(REPO), KAFKALOG_PIDS=str(pids_file),
               KAFKALOG_WITH_KAFKA="1" if with_kafka else "0")
    env.pop("PYTEST_ADDOPTS", None)  # the outer run's options (a --basetemp above the inner cwd) are not the inner's
    out = tmp_path / "inner.out"
    with open(out, "wb") as f:
        run = children.popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-c",
                              str(inner / "pytest.ini"), "--rootdir", str(inner), str(inner / "test_inner.py")],
                             cwd=inner, env=env, stdout=f, stderr=subprocess.STDOUT)
    pids: dict[str, int] = {}
    started: dict[str, int | None] = {}
    try:
        for _ in range(START_LOOKS):
            if pids_file.exists() or run.poll() is not None:
                break
            time.sleep(0.1)
        assert pids_file.exists(), f"the inner run started nothing (exit {run.poll()}):\n" \
                                   f"{out.read_text(errors='replace')[-4000:]}"
        pids = json.loads(pids_file.read_text())
        started = {name: _start_time(pid) for name, pid in pids.items()}
        assert all(started.values()), f"not running before the kill: {started}"
        assert ("lab KafkaBroker (java)" in pids) == with_kafka

        os.kill(run.pid, signal.SIGKILL)  # as the OOM killer does: no cleanup code runs
        run.wait(timeout=30)
        alive = dict(pids)
        for _ in range(GONE_LOOKS):
            alive = {name: pid for name, pid in pids.items() if _start_time(pid) == started[name]}
            if not alive:
                break
            time.sleep(0.05)
        assert not alive, f"still running after the test run that started them was killed: {alive}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
        for name, pid in pids.items():  # whatever survived (the assertion failed): ours to end
            if started.get(name) is not None and _start_time(pid) == started[name]:
                os.kill(pid, signal.SIGKILL)
