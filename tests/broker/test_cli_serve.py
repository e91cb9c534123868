"""`kafkalog serve` as a real subprocess (python -m kafkalog): the one ready line with the port, a real client producing
and consuming through it, SIGTERM/SIGINT ending it with exit 0 and the clean-shutdown marker written, and the same from
a Kafka server.properties (listeners=, log.dirs=, num.partitions=)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

import kafkalog
from kafkalog.storage.files import CLEAN_SHUTDOWN_FILE

from .conftest import Serve

pytestmark = pytest.mark.usefixtures("deadline")

T0 = (int(time.time()) - 600) * 1000


def produce(bootstrap, topic, n, partition=0):
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 5,
                  "message.timeout.ms": 15000})
    reports = []
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("i", b"%d" % i)], timestamp=T0 + i,
                  partition=partition, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(15) == 0
    assert reports == [(None, i) for i in range(n)]


def consume(bootstrap, topic, n, partition=0):
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "cli-serve-test",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out = []
        end = time.monotonic() + 15
        while len(out) < n and time.monotonic() < end:
            for m in c.consume(num_messages=n - len(out), timeout=0.3):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]))
        return out
    finally:
        c.close()


def expected(n):
    return [(i, b"k%d" % i, b"v%d" % i, [("i", b"%d" % i)], T0 + i) for i in range(n)]


def partitions_of(bootstrap, topic):
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    return sorted(p.list_topics(topic, timeout=10).topics[topic].partitions)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_port_zero_produce_consume_and_clean_stop(serve, tmp_path, sig):
    data = tmp_path / "data"
    s = serve("--data-dir", data, "--listen", "127.0.0.1:0")
    assert s.port > 0
    produce(s.bootstrap_servers, "events", 25)  # auto-created (Kafka's default auto.create.topics.enable=true)
    assert consume(s.bootstrap_servers, "events", 25) == expected(25)
    assert not (data / CLEAN_SHUTDOWN_FILE).exists()  # written at a clean stop, not while serving
    code, out, err = s.stop(sig)
    assert code == 0, err[-3000:]
    assert out == "", out  # the ready line is the only stdout line
    assert "Traceback" not in err, err[-3000:]
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    # what the broker wrote is a plain kafkalog data dir: the embedded reader sees the same records
    with kafkalog.LogStore(data) as store:
        got = [(r.offset, r.key, r.value, r.timestamp) for r in store.log("events", 0).records()]
    assert got == [(i, k, v, ts) for i, k, v, _, ts in expected(25)]
    # and a new broker on the same dir serves them again
    s2 = serve("--data-dir", data, "--listen", "127.0.0.1:0")
    assert consume(s2.bootstrap_servers, "events", 25) == expected(25)
    assert s2.stop()[0] == 0


def test_serve_from_server_properties(serve, tmp_path):
    data = tmp_path / "kafka-logs"
    props = tmp_path / "server.properties"
    props.write_text("# a Kafka server.properties\n"
                     "listeners=PLAINTEXT://127.0.0.1:0\n"
                     f"log.dirs={data}\n"
                     "num.partitions=3\n"
                     "auto.create.topics.enable=true\n"
                     "group.initial.rebalance.delay.ms=0\n")
    s = serve("--config", props)
    produce(s.bootstrap_servers, "from-props", 5, partition=2)
    assert partitions_of(s.bootstrap_servers, "from-props") == [0, 1, 2]  # num.partitions from the file
    assert consume(s.bootstrap_servers, "from-props", 5, partition=2) == expected(5)
    code, _, err = s.stop()
    assert code == 0, err[-3000:]
    assert (data / CLEAN_SHUTDOWN_FILE).exists()  # log.dirs is the data dir
    assert sorted(p.name for p in data.glob("from-props-*")) == ["from-props-0", "from-props-1", "from-props-2"]


def test_serve_fixed_port_from_listen(serve, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s = serve("--data-dir", tmp_path / "data", "--listen", f"127.0.0.1:{port}")
    assert s.port == port
    produce(s.bootstrap_servers, "fixed", 3)
    assert consume(s.bootstrap_servers, "fixed", 3) == expected(3)
    assert s.stop()[0] == 0


def test_serve_metrics_without_prometheus_client_is_one_line(tmp_path, child_env):
    """Without the broker extra, --metrics fails with one line naming the extra, not a traceback."""
    env = dict(child_env)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "prometheus_client.py").write_text("raise ImportError('prometheus_client is not installed')\n")
    env["PYTHONPATH"] = str(shadow) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "kafkalog", "serve", "--data-dir", str(tmp_path / "d"), "--listen",
                        "127.0.0.1:0", "--metrics", "127.0.0.1:0"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 1
    assert "kafkalog[broker]" in r.stderr and "Traceback" not in r.stderr


def test_a_second_broker_or_an_exclusive_store_on_a_held_data_dir_fails_at_once(serve, tmp_path, child_env):
    """Issue 10, defect 8: Kafka locks its log dir. A second broker on the data dir, or an exclusive store, fails at
    once with one line naming the broker that holds it; shared and read-only embedded use beside it stays allowed."""
    data = tmp_path / "data"
    first = serve("--data-dir", data, "--listen", "127.0.0.1:0")
    started = time.monotonic()
    second = subprocess.run([sys.executable, "-m", "kafkalog", "serve", "--data-dir", str(data), "--listen",
                             "127.0.0.1:0"], capture_output=True, text=True, env=child_env, timeout=60)
    assert second.returncode == 1, second
    line = second.stderr.strip()
    assert len(line.splitlines()) == 1 and str(data) in line and f"pid {first.proc.pid}" in line, line
    assert f"127.0.0.1:{first.port}" in line, line
    with pytest.raises(kafkalog.errors.LockTimeoutError, match=f"pid {first.proc.pid}"):
        kafkalog.LogStore(data, exclusive=True)
    assert time.monotonic() - started < 20, "the refusals must not wait for a lock timeout"
    with kafkalog.LogStore(data) as shared:  # embedded shared writers and readers beside a broker: allowed
        shared.create_topic("side", 1)
        assert shared.log("side", 0).append_batch([b"x"]) == 0
    with kafkalog.LogStore(data, read_only=True) as ro:
        assert ro.log("side", 0).log_end_offset == 1
    produce(first.bootstrap_servers, "after", 3)  # the first broker is untouched
    rc, _, err = first.stop()
    assert rc == 0, err
    second = Serve(["--data-dir", data, "--listen", "127.0.0.1:0"], child_env)  # free again once it stopped
    second.kill()


def test_a_failing_shutdown_still_exits_and_says_so(tmp_path, child_env):
    """Issue 10, defect 9: an error while shutting down (here: the store's close fails) must not leave the broker
    running: every other step runs, one line names the failure, the exit status is non-zero."""
    env = dict(child_env, KAFKALOG_FAILPOINTS="close:before-marker=raise")
    s = Serve(["--data-dir", tmp_path / "data", "--listen", "127.0.0.1:0"], env)
    try:
        rc, _, err = s.stop(signal.SIGTERM)
    finally:
        s.kill()
    assert rc == 1, err
    assert "failpoint close:before-marker" in err and "Task exception was never retrieved" not in err, err
    assert [ln for ln in err.splitlines() if ln.startswith("kafkalog: error:")], err
