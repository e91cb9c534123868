"""A real Spark standalone cluster on test hosts, and kafkalog's broker beside its master.

- The **broker host** is this machine's root network namespace, at ``net.broker_ip`` (10.213.N.1): `kafkalog serve`
  (advertising that address), the Spark master, and the driver (a process of its own, ``driver.py``) run there.
  Its files live under ``broker-host/``.
- Two **worker hosts**, network namespaces of their own (``netlab.TestNet``), each run a Spark Worker from pyspark's
  own jars (``spark-class org.apache.spark.deploy.worker.Worker``) and launch that worker's executor. Each worker
  runs in a mount namespace where ``broker-host/`` is an empty tmpfs: the executors cannot read the data dir, as on
  a cluster whose workers do not mount it.
- Spark's Kafka connector (``spark-sql-kafka-0-10_2.13`` of pyspark's exact version, with kafka-clients) comes from
  Maven Central by ``.ci/lab-spark`` and goes to the executors with ``spark.jars``.

One cluster per module (about 15 s to start); jobs are sent to the driver one at a time (``Cluster.job``).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import kafkalog

from .netlab import NetLabError, TestNet

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
PKG_ROOT = Path(kafkalog.__file__).resolve().parents[1]
LAB_DIR = Path(os.environ.get("KAFKALOG_LAB_DIR") or Path.home() / ".cache" / "kafkalog-lab")
MARK = "@@job "

_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafkalog.cluster.log:-/dev/null}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


class ClusterError(AssertionError):
    pass


def connector_jars() -> list[str]:
    """Spark's Kafka connector jars for the installed pyspark (``.ci/lab-spark <version>`` fetches them once)."""
    import pyspark
    version = pyspark.__version__
    jars = LAB_DIR / f"spark-kafka-{version}" / "jars"
    if not (jars.parent / ".complete").is_file():
        r = subprocess.run(["bash", str(REPO / ".ci" / "lab-spark"), version], capture_output=True, text=True,
                           env=dict(os.environ, KAFKALOG_LAB_DIR=str(LAB_DIR)), timeout=900)
        if r.returncode != 0:
            raise ClusterError(f".ci/lab-spark {version} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    found = sorted(str(p) for p in jars.glob("*.jar"))
    if not any("spark-sql-kafka-0-10" in j for j in found):
        raise ClusterError(f"no spark-sql-kafka-0-10 jar in {jars}")
    return found


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{what} exited ({proc.returncode}):\n{_tail(log)}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise ClusterError(f"{what} is not listening on {host}:{port} after {timeout} s:\n{_tail(log)}")


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


class Broker:
    """`kafkalog serve` on the broker host, advertising the address the workers reach; Prometheus metrics on it."""

    def __init__(self, net: TestNet, data: Path, log: Path, protocol: str = "PLAINTEXT",
                 overrides: dict | None = None):
        self.metrics_port = free_port(net.broker_ip)
        port = free_port(net.broker_ip)
        # as on a real cluster: listen on the broker host's interface and tell clients the address they reach it by
        args = [sys.executable, "-m", "kafkalog", "serve", "--data-dir", str(data),
                "--listen", f"{protocol}://{net.broker_ip}:{port}",
                "--override", f"advertised.listeners={protocol}://{net.broker_ip}:{port}",
                "--metrics", f"{net.broker_ip}:{self.metrics_port}",
                "--parent-pid", str(os.getpid())]  # stops when this test process goes, however it goes
        for k, v in (overrides or {}).items():
            args += ["--override", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=str(PKG_ROOT), PYTHONSAFEPATH="1")
        self.log = log
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=open(log, "ab"), env=env, cwd=data.parent)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().decode() if ready else ""
        m = re.match(r"kafkalog broker listening on ([\d.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise ClusterError(f"kafkalog serve did not start: {line!r}\n{_tail(log)}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.data = data

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def metrics(self) -> dict[str, float]:
        """The broker's Prometheus metrics: {'name{labels}': value}."""
        text = urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/metrics", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Cluster:
    """The Spark standalone master (broker host), two workers (worker hosts), and a driver process."""

    def __init__(self, net: TestNet, base: Path):
        import pyspark
        self.net, self.base = net, base
        self.hidden = base / "broker-host"        # what the worker hosts cannot see
        self.hidden.mkdir(parents=True, exist_ok=True)
        self.logs = base / "logs"
        self.logs.mkdir(exist_ok=True)
        (base / "log4j2.properties").write_text(_LOG4J)
        self.spark_home = Path(pyspark.__file__).resolve().parent
        self.jars = connector_jars()
        self.procs: list[subprocess.Popen] = []
        self.driver: subprocess.Popen | None = None
        self._out: list[str] = []
        self._lock = threading.Condition()
        java_opts = f"-Dlog4j.configurationFile=file:{base / 'log4j2.properties'} -XX:+UseSerialGC"
        self.env = dict(os.environ, SPARK_HOME=str(self.spark_home), SPARK_DAEMON_MEMORY="256m",
                        SPARK_NO_DAEMONIZE="1", PYSPARK_PYTHON=sys.executable,
                        PYTHONPATH=str(PKG_ROOT), PYTHONSAFEPATH="1")
        self.java_opts = java_opts
        self.master_port = free_port(net.broker_ip)
        self.master_url = f"spark://{net.broker_ip}:{self.master_port}"
        spark_class = str(self.spark_home / "bin" / "spark-class")
        mlog = self.logs / "master.log"
        menv = dict(self.env, SPARK_LOCAL_IP=net.broker_ip,
                    SPARK_DAEMON_JAVA_OPTS=f"{java_opts} -Dkafkalog.cluster.log={mlog}")
        master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", net.broker_ip,
                                   "--port", str(self.master_port), "--webui-port", "0"],
                                  env=menv, stdin=subprocess.DEVNULL, stdout=open(mlog, "ab"),
                                  stderr=subprocess.STDOUT, cwd=self.hidden, start_new_session=True)
        self.procs.append(master)
        wait_port(net.broker_ip, self.master_port, 60, master, "the Spark master", mlog)
        for i in (1, 2):
            wdir = base / f"worker-{i}"
            wdir.mkdir(exist_ok=True)
            wlog = self.logs / f"worker-{i}.log"
            wenv = dict(self.env, SPARK_LOCAL_IP=net.ip(i), SPARK_LOCAL_HOSTNAME=net.ip(i),
                        SPARK_DAEMON_JAVA_OPTS=f"{java_opts} -Dkafkalog.cluster.log={wlog}",
                        SPARK_WORKER_DIR=str(wdir))
            w = net.popen(i, [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", net.ip(i),
                              "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "1g",
                              "--work-dir", str(wdir), self.master_url],
                          hide=[str(self.hidden)], env=wenv, stdin=subprocess.DEVNULL, stdout=open(wlog, "ab"),
                          stderr=subprocess.STDOUT, cwd=wdir, start_new_session=True)
            self.procs.append(w)

    # -- the driver -----------------------------------------------------------------------------------------------

    def start_driver(self, timeout: float = 180) -> None:
        dlog = self.logs / "driver.log"
        ddir = self.hidden / "driver"
        ddir.mkdir(exist_ok=True)
        conf = {
            "spark.driver.host": self.net.broker_ip,
            "spark.driver.bindAddress": self.net.broker_ip,
            "spark.jars": ",".join(self.jars),
            "spark.executor.memory": "640m",
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(PKG_ROOT),
            "spark.executorEnv.PYTHONSAFEPATH": "1",
            "spark.driver.extraJavaOptions": f"{self.java_opts} -Dkafkalog.cluster.log={dlog}",
            "spark.executor.extraJavaOptions": f"{self.java_opts} -XX:TieredStopAtLevel=1 "
                                               f"-Dkafkalog.cluster.log={self.logs / 'executors.log'}",
            "spark.sql.streaming.stopTimeout": "30s",
        }
        args = [sys.executable, str(HERE / "driver.py"), "--master", self.master_url, "--host", self.net.broker_ip]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        env = dict(self.env, SPARK_LOCAL_IP=self.net.broker_ip)
        self.driver = subprocess.Popen(args, env=env, cwd=ddir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=open(dlog, "ab"), text=True, start_new_session=True)
        self._out = []  # this driver's answers: a killed driver's reader still appends to the list it was given
        threading.Thread(target=self._read, args=(self.driver, self._out), daemon=True).start()
        got = self._answer(timeout)
        if got.get("ok") != "ready":
            raise ClusterError(f"the driver did not start: {got}\n{_tail(dlog)}")

    def _read(self, proc, out: list) -> None:
        for line in proc.stdout:
            if line.startswith(MARK):
                with self._lock:
                    out.append(line[len(MARK):])
                    self._lock.notify_all()
        with self._lock:
            out.append(None)
            self._lock.notify_all()

    def _answer(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._out:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClusterError(f"no answer from the driver in {timeout} s\n{self.log_tails()}")
                self._lock.wait(left)
            line = self._out.pop(0)
        if line is None:
            raise ClusterError(f"the driver exited ({self.driver.poll()})\n{self.log_tails()}")
        return json.loads(line)

    def job(self, name: str, timeout: float = 300, **kwargs):
        """Run a job of driver.py; its result, or ClusterError for a failed one (``.error`` holds the details)."""
        got = self.call(name, timeout, **kwargs)
        if "error" in got:
            e = ClusterError(f"job {name} failed: {got['error']['type']}: {got['error']['message'][:3000]}\n"
                             f"{got['error'].get('traceback', '')}")
            e.error = got["error"]
            raise e
        return got["ok"]

    def call(self, name: str, timeout: float = 300, **kwargs) -> dict:
        """Run a job; its answer as sent: {"ok": result} or {"error": {...}}."""
        self.send(name, **kwargs)
        return self._answer(timeout)

    def send(self, name: str, **kwargs) -> None:
        """Start a job and return at once (``kill_driver`` may follow; ``call`` waits for the answer)."""
        if self.driver is None or self.driver.poll() is not None:
            self.start_driver()
        self.driver.stdin.write(json.dumps({"job": name, "kwargs": kwargs}) + "\n")
        self.driver.stdin.flush()

    def kill_driver(self) -> None:
        """kill -9 of the driver process (its executors are let go by the workers)."""
        if self.driver is not None and self.driver.poll() is None:
            os.killpg(self.driver.pid, signal.SIGKILL)
            self.driver.wait(10)
        self.driver = None

    def log_tails(self) -> str:
        return "\n".join(f"--- {p.name}\n{_tail(p, 2500)}" for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        if self.driver is not None and self.driver.poll() is None:
            try:
                self.driver.stdin.close()
                self.driver.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill_driver()
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait(10)


@pytest.fixture(scope="module")
def net():
    for tool in ("ip", "unshare", "java"):
        if shutil.which(tool) is None:
            raise ClusterError(f"the cluster tests need `{tool}` on PATH (iproute2, util-linux, Java 17)")
    try:
        n = TestNet.create(hosts=2)
    except NetLabError as e:
        # never a silent skip: the fallback (127.0.0.x, the path hidden by permissions) is not built
        raise ClusterError(f"could not make the test hosts: {e}") from None
    yield n
    n.destroy()


@pytest.fixture(scope="module")
def cluster(net, tmp_path_factory):
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    base = tmp_path_factory.mktemp("cluster")
    c = Cluster(net, base)
    try:
        c.start_driver()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def broker(net, cluster):
    """kafkalog's broker on the broker host, its data dir hidden from the workers."""
    b = Broker(net, cluster.hidden / "data", cluster.logs / "broker.log")
    yield b
    b.stop()


SCRAM_USER, SCRAM_PASSWORD = "spark", "spark-secret"


@pytest.fixture(scope="module")
def sasl_broker(net, cluster):
    """A second broker (its own data dir) whose only listener is SASL_PLAINTEXT; user ``spark`` has SCRAM
    credentials (made with ``kafkalog users``, as a user would)."""
    data = cluster.hidden / "data-sasl"
    data.mkdir()
    r = subprocess.run([sys.executable, "-m", "kafkalog", "users", str(data), "add", SCRAM_USER,
                        "--password-stdin"], input=SCRAM_PASSWORD + "\n", capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(PKG_ROOT), PYTHONSAFEPATH="1"), cwd=data, timeout=60)
    assert r.returncode == 0, r.stderr
    b = Broker(net, data, cluster.logs / "broker-sasl.log", protocol="SASL_PLAINTEXT")
    yield b
    b.stop()
