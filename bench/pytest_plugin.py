"""The pytest plugin (issue 26) beside its peers, same machine, same run:

- start: seconds from spawning ``python -m pytest`` to the first record a test's broker acknowledged, and the
  broker's RSS then: kafkalog's plugin in a thread (the RSS is the whole pytest process's) and as a process (the
  ``kafkalog serve`` child's), Apache Kafka 4.4 KRaft from the compatibility lab (tests/compat/lab.py, started by a
  session fixture the same way; its JVM's RSS), pytest-kafka-broker when it can run here; and the floor: pytest
  alone to its first (empty) test, which no plugin can start under;
- a suite of 100 tests, each making its topic, producing 10 records and reading them back through the plugin,
  against the same suite on an in-memory fake (the mocks people write): wall time of each ``pytest`` run.

    python bench/pytest_plugin.py [--runs 3] [--tests 100] [--no-kafka]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FIRST = r'''
import json, os, time

def test_first(kafka_broker):
    kafka_broker.produce("first", [b"x"])
    at = time.time()
    pid = kafka_broker.pid
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    with open(os.environ["OUT"], "w") as f:
        json.dump({"acked_at": at, "rss": rss}, f)
'''

FLOOR = r'''
import json, os, time

def test_first():
    with open(os.environ["OUT"], "w") as f:
        json.dump({"acked_at": time.time(), "rss": 0}, f)
'''

KAFKA_CONFTEST = r'''
import sys, pytest
sys.path.insert(0, {compat!r})
from lab import KafkaBroker

class _Kafka:
    def __init__(self, b):
        self.b = b
        self.pid = b.pid
    def produce(self, topic, values):
        from confluent_kafka import Producer
        p = Producer({{"bootstrap.servers": self.b.bootstrap, "acks": -1}})
        for v in values:
            p.produce(topic, v)
        assert p.flush(60) == 0

@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    b = KafkaBroker().start(tmp_path_factory.mktemp("kafka"))
    yield _Kafka(b)
    b.stop()
'''

SUITE = r'''
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_roundtrip(kafka_broker, kafka_topic, i):
    t = kafka_topic()
    kafka_broker.produce(t, [b"record-%d" % j for j in range(10)])
    assert [r.value for r in kafka_broker.consume_all(t)] == [b"record-%d" % j for j in range(10)]
'''

MOCK_SUITE = r'''
import itertools, pytest

class FakeBroker:
    def __init__(self):
        self.topics = {{}}
    def produce(self, topic, values):
        self.topics.setdefault(topic, []).extend(values)
    def consume_all(self, topic):
        return list(self.topics.get(topic, []))

_ids = itertools.count()

@pytest.fixture(scope="session")
def fake_broker():
    return FakeBroker()

@pytest.fixture
def fake_topic(fake_broker):
    return f"t-{{next(_ids)}}"

@pytest.mark.parametrize("i", range({n}))
def test_roundtrip(fake_broker, fake_topic, i):
    fake_broker.produce(fake_topic, [b"record-%d" % j for j in range(10)])
    assert fake_broker.consume_all(fake_topic) == [b"record-%d" % j for j in range(10)]
'''


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["PYTHONSAFEPATH"] = "1"
    # as installed: pip writes every module's bytecode at install; a PYTHONDONTWRITEBYTECODE in the caller's
    # environment would make each run compile the changed modules again (~50 ms of the broker's import here)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _compile_package() -> None:
    import compileall
    compileall.compile_dir(str(ROOT / "kafkalog"), quiet=1)


def _plugin_args() -> list[str]:
    import importlib.metadata
    plugin = "kafkalog.testing.pytest_plugin"
    registered = any(ep.value == plugin for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if registered else ["-p", plugin]


def _pytest(workdir: Path, *args, env=None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=workdir,
                       env=env or _env(), capture_output=True, text=True, timeout=600)
    return t0, r


def start_run(kind: str, scratch: Path) -> dict:
    d = Path(tempfile.mkdtemp(dir=scratch, prefix=kind + "-"))
    (d / "test_first.py").write_text(FLOOR if kind == "floor" else FIRST)
    out = d / "out.json"
    env = dict(_env(), OUT=str(out))
    if kind == "floor":
        t0, r = _pytest(d, "-p", "no:kafkalog", "test_first.py", env=env)
    elif kind == "kafka":
        (d / "conftest.py").write_text(KAFKA_CONFTEST.format(compat=str(ROOT / "tests" / "compat")))
        t0, r = _pytest(d, "-p", "no:kafkalog", "test_first.py", env=env)
    else:
        t0, r = _pytest(d, *_plugin_args(), f"--kafkalog-mode={kind.split('-')[1]}", "test_first.py", env=env)
    if r.returncode != 0 or not out.exists():
        raise RuntimeError(f"{kind}: pytest failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    got = json.loads(out.read_text())
    return {"start_s": got["acked_at"] - t0, "rss": got["rss"]}


def suite_run(kind: str, scratch: Path, n: int) -> float:
    d = Path(tempfile.mkdtemp(dir=scratch, prefix=f"suite-{kind}-"))
    (d / "test_suite.py").write_text((MOCK_SUITE if kind == "mocks" else SUITE).format(n=n))
    args = ["-p", "no:kafkalog"] if kind == "mocks" else [*_plugin_args(), f"--kafkalog-mode={kind}"]
    t0, r = _pytest(d, *args, "test_suite.py")
    wall = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"suite {kind}: pytest failed:\n{r.stdout[-2000:]}")
    return wall


def pytest_kafka_broker_status() -> str:
    try:
        import pytest_kafka_broker  # noqa: F401
    except ImportError:
        return ("not installed. `pip download pytest-kafka-broker` (1.0.0) works, but its kafka_home fixture "
                "downloads Kafka 4.3.1's tarball from archive.apache.org at run time (astropy's download cache) "
                "and this machine reaches no such host; it then runs kafka-storage format and kafka-server-start "
                "with a 1 GiB heap: the same JVM broker as the Kafka row, started the same way")
    return "installed but not run by this script (needs Kafka's tarball at run time)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tests", type=int, default=100)
    ap.add_argument("--no-kafka", action="store_true")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-plugin-"))
    _compile_package()
    # floor: pytest alone to its first (empty) test, no broker: what no plugin can start under
    kinds = ["floor", "kafkalog-thread", "kafkalog-process"] + ([] if args.no_kafka else ["kafka"])
    res: dict[str, list] = {k: [] for k in kinds}
    for i in range(args.runs):
        for k in kinds:
            if k == "kafka" and i >= max(1, args.runs // 2 + 1):
                continue
            try:
                res[k].append(start_run(k, scratch))
            except Exception as e:  # noqa: BLE001
                print(f"# {k}: {e}", file=sys.stderr)
    print("## pytest start to first acknowledged record (median of runs), RSS of the broker then")
    print("| peer | runs | start s | RSS MiB |")
    print("|---|---|---|---|")
    best = {}
    for k, rows in res.items():
        if not rows:
            print(f"| {k} | 0 | n/a | n/a |")
            continue
        rows.sort(key=lambda r: r["start_s"])
        med = rows[len(rows) // 2]
        best[k] = med
        rss = "-" if k == "floor" else f"{med['rss'] / 2**20:.0f}"
        print(f"| {k} | {len(rows)} | {med['start_s']:.2f} | {rss} |")
    print(f"| pytest-kafka-broker | 0 | n/a | n/a |  ({pytest_kafka_broker_status()})")
    if "kafka" in best:
        for k in ("floor", "kafkalog-thread", "kafkalog-process"):
            if k == "floor" and k in best:
                print(f"floor (pytest alone) vs Kafka: start {best[k]['start_s'] / best['kafka']['start_s']:.3f}x")
            elif k in best:
                print(f"{k} vs Kafka: start {best[k]['start_s'] / best['kafka']['start_s']:.3f}x, "
                      f"RSS {best[k]['rss'] / best['kafka']['rss']:.3f}x")
    print(f"\n## a suite of {args.tests} tests, a topic each, 10 records produced and read back (wall s of pytest, "
          f"median of {args.runs} runs, the three kinds taking turns)")
    runs: dict[str, list] = {"mocks": [], "thread": [], "process": []}
    for _ in range(args.runs):
        for k in runs:
            runs[k].append(suite_run(k, scratch, args.tests))
    walls = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in runs.items():
        each = ", ".join(f"{x:.2f}" for x in v)
        print(f"| {k} | {walls[k]:.2f} s | {walls[k] / walls['mocks']:.2f}x mocks | runs {each} |")
    subprocess.run(["rm", "-rf", str(scratch)])


if __name__ == "__main__":
    main()
