"""A Java 4.4 consumer with ``group.protocol=consumer`` across a broker kill -9 (the broker started again on the
same data dir and port): how it resumes, from its own log (log4j2 at DEBUG for NetworkClient: every
ConsumerGroupHeartbeat request and answer) and its records.

Plain module (no pytest in it): test_kip848_resume.py runs ``resume_run`` on both brokers and compares the counts;
``python -m tests.compat.kip848_resume [RUNS]`` prints the measured resume times of both brokers.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.compat.lab import (
    JVM_LOG_OPTS,
    TOOL_JVM_OPTS,
    KafkaBroker,
    KafkalogServer,
    children,
    compile_java,
    java_exe,
    kafka_libs,
)

PROGRAM = Path(__file__).resolve().parent / "java" / "resume" / "Kip848Resume.java"
LOG_CONFIG = """Configuration:
  status: error
  Appenders:
    File:
      name: file
      fileName: "${sys:kafkalog.lab.log:-/dev/null}"
      append: true
      PatternLayout:
        pattern: "%d{UNIX_MILLIS} %p %m (%c)%n"
  Loggers:
    Logger:
      - name: org.apache.kafka.clients.NetworkClient
        level: debug
    Root:
      level: warn
      AppenderRef:
        - ref: file
"""

_SENT = re.compile(r"^(\d+) DEBUG .*Sending CONSUMER_GROUP_HEARTBEAT request .*?ConsumerGroupHeartbeatRequestData\("
                   r".*?memberEpoch=(-?\d+)")
_GOT = re.compile(r"^(\d+) DEBUG .*Received CONSUMER_GROUP_HEARTBEAT response .*?ConsumerGroupHeartbeatResponseData\("
                  r".*?errorCode=(-?\d+).*?memberEpoch=(-?\d+), heartbeatIntervalMs=(-?\d+), assignment=(null|\S)")
_FETCH = re.compile(r"^(\d+) DEBUG .*Sending FETCH request ")


class Consumer:
    """Kip848Resume as a child process: its stdout lines as (ms, words) as they come."""

    def __init__(self, bootstrap: str, topic: str, group: str, workdir: Path, env: dict | None = None,
                 instance_id: str | None = None):
        classes, main = compile_java(PROGRAM)
        config = workdir / "resume-log4j2.yaml"
        config.write_text(LOG_CONFIG)
        self.log = workdir / "resume-client.log"
        cp = f"{classes}:{kafka_libs() / '*'}"
        cmd = [java_exe(), *TOOL_JVM_OPTS, *JVM_LOG_OPTS, f"-Dlog4j2.configurationFile={config}",
               f"-Dkafkalog.lab.log={self.log}", "-cp", cp, main, bootstrap, topic, group,
               *([instance_id] if instance_id else [])]
        self.events: list[tuple[int, list[str]]] = []
        self.proc = children.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            ms, _, rest = line.rstrip("\n").partition(" ")
            self.events.append((int(ms), rest.split(" ")))

    def records(self) -> list[tuple[int, str]]:
        return [(ms, w[3]) for ms, w in list(self.events) if w[0] == "record"]

    def wait_for(self, values: set, guard_s: float = 90) -> dict:
        """Until each of ``values`` was consumed: {value: ms} (a guard, not a measure: AssertionError past it)."""
        deadline = time.monotonic() + guard_s
        while True:
            seen = {v: ms for ms, v in self.records() if v in values}
            if len(seen) == len(values):
                return seen
            assert self.proc.poll() is None, f"the consumer exited ({self.proc.returncode}): {self.events[-5:]}"
            assert time.monotonic() < deadline, f"consumed only {sorted(seen)} of {sorted(values)}: " \
                                                f"{self.events[-10:]}"
            time.sleep(0.02)

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines() if self.log.is_file() else []

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def heartbeats(lines: list[str], since_ms: int, until_ms: int) -> list[dict]:
    """The ConsumerGroupHeartbeat exchange between two instants, from the client's log: each request's epoch and
    each answer's error code, epoch, heartbeat interval and whether it carried an assignment."""
    out = []
    for line in lines:
        m = _SENT.match(line)
        if m and since_ms <= int(m.group(1)) <= until_ms:
            out.append({"ms": int(m.group(1)), "sent_epoch": int(m.group(2))})
            continue
        m = _GOT.match(line)
        if m and since_ms <= int(m.group(1)) <= until_ms:
            out.append({"ms": int(m.group(1)), "error_code": int(m.group(2)), "epoch": int(m.group(3)),
                        "interval_ms": int(m.group(4)), "assignment": m.group(5) != "null"})
    return out


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 0})
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % 2)
    assert p.flush(30) == 0


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)


def kill9_and_start_again(server, down_s: float = 0.0) -> float:
    """SIGKILL, ``down_s`` seconds down, then the same broker on the same data dir and port; the monotonic time it
    answers again."""
    proc = server.proc
    proc.kill()
    proc.wait(30)
    time.sleep(down_s)
    if isinstance(server, KafkaBroker):
        server.spawn()
        server.wait_ready(120)
    else:
        port = server.port
        server.proc = None
        server.start(server.workdir, port=port)
    return time.monotonic()


def resume_run(server, workdir: Path, tag: str, env: dict | None = None, down_s: float = 0.0,
               instance_id: str | None = None, settle_s: float = 1.0, consumers: int = 1) -> dict:
    """One run on a started ``server``: ``consumers`` consumers of one group (2 partitions) read the records
    produced before, the broker is killed (``down_s`` seconds down) and started again, one more record per
    partition is produced; how the consumers got to read them and the first consumer back to a confirmed member
    (a heartbeat answered at an epoch > 0): its heartbeats and every consumer's rebalance callbacks until both."""
    topic, group = f"resume-{tag}", f"resume-g-{tag}"
    _create_topic(server.bootstrap, topic)
    _produce(server.bootstrap, topic, ["a0", "a1"])
    cs = []
    try:
        for i in range(consumers):
            d = workdir / f"consumer-{i}"
            d.mkdir(exist_ok=True)
            cs.append(Consumer(server.bootstrap, topic, group, d, env,
                               f"{instance_id}-{i}" if instance_id else None))
        _wait_all(cs, {"a0", "a1"})
        time.sleep(settle_s)  # past the reconciliation (the assignment acknowledged at the member epoch)
        c = cs[0]
        last_before = [h for h in heartbeats(c.log_lines(), 0, 1 << 62) if "error_code" in h]
        killed_ms = int(time.time() * 1000)
        killed = time.monotonic()
        ready = kill9_and_start_again(server, down_s)
        ready_ms = int(time.time() * 1000)
        _produce(server.bootstrap, topic, ["b0", "b1"])
        first_ms = min(_wait_all(cs, {"b0", "b1"}).values())
        # and until the first consumer's membership is confirmed after the restart (a heartbeat answered without an
        # error at an epoch > 0: a consumer may read on before the coordinator told it anything)
        settled_ms = _wait_confirmed(c, ready_ms)
        end_ms = max(first_ms, settled_ms)
        after = heartbeats(c.log_lines(), killed_ms, end_ms)
        fetches_before = sum(1 for line in c.log_lines() if (m := _FETCH.match(line))
                             and killed_ms <= int(m.group(1)) <= first_ms)
        return {
            "broker": server.name,
            "resume_s": (first_ms - ready_ms) / 1000.0,
            "confirmed_s": (settled_ms - ready_ms) / 1000.0,
            "restart_s": round(ready - killed - down_s, 3),
            "epoch_before": last_before[-1]["epoch"] if last_before else None,
            "heartbeats": after,
            "requests": sum(1 for h in after if "sent_epoch" in h),
            "rejoins": sum(1 for h in after if h.get("sent_epoch") == 0),
            "errors": [h["error_code"] for h in after if h.get("error_code")],
            "fetches": fetches_before,
            "callbacks": [f"{i}:" + " ".join(w) for i, x in enumerate(cs) for ms, w in list(x.events)
                          if killed_ms <= ms <= end_ms and w[0] in ("assigned", "revoked", "lost", "error")],
            "first_answer": next((h for h in after if "error_code" in h), None),
        }
    finally:
        for c in cs:
            c.close()


def _wait_confirmed(c: Consumer, since_ms: int, guard_s: float = 90) -> int:
    """When ``c`` first got a heartbeat answer without an error at an epoch > 0 after ``since_ms`` (a guard, not a
    measure: its heartbeat interval is 5 s)."""
    deadline = time.monotonic() + guard_s
    while True:
        for h in heartbeats(c.log_lines(), since_ms, 1 << 62):
            if h.get("error_code") == 0 and h["epoch"] > 0:
                return h["ms"]
        assert c.proc.poll() is None, f"the consumer exited ({c.proc.returncode}): {c.events[-5:]}"
        assert time.monotonic() < deadline, f"no heartbeat answered after the restart: {c.events[-10:]}"
        time.sleep(0.05)


def _wait_all(cs: list, values: set, guard_s: float = 90) -> dict:
    """Until the consumers between them read each of ``values``: {value: first ms} (a guard, not a measure)."""
    deadline = time.monotonic() + guard_s
    while True:
        seen = {}
        for c in cs:
            for ms, v in c.records():
                if v in values:
                    seen[v] = min(ms, seen.get(v, ms))
        if len(seen) == len(values):
            return seen
        for c in cs:
            assert c.proc.poll() is None, f"a consumer exited ({c.proc.returncode}): {c.events[-5:]}"
        assert time.monotonic() < deadline, f"consumed only {sorted(seen)} of {sorted(values)}: " \
                                            f"{[c.events[-6:] for c in cs]}"
        time.sleep(0.02)


def main(runs: int = 3, down_s: float = 0.0) -> None:
    """``runs`` runs on each broker (a fresh one per run): each run's counts and times, one line each."""
    import tempfile
    for cls in (KafkaBroker, KafkalogServer):
        for i in range(runs):
            with tempfile.TemporaryDirectory(prefix="resume-") as d:
                server = cls()
                server.start(Path(d) / "broker")
                try:
                    r = resume_run(server, Path(d), f"{i}", down_s=down_s)
                finally:
                    server.stop()
                r.pop("heartbeats")
                print(r, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
