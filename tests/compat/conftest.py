"""The differential compatibility lab's fixtures: the same workload against Apache Kafka 4.4.0 and `kafkalog serve`.

Fixtures:

- ``kafka`` (session): one ``lab.KafkaBroker``, a real Kafka 4.4.0 KRaft node (broker + controller) on 127.0.0.1,
  started once per session (jars fetched by ``.ci/lab-kafka`` into ``$KAFKALOG_LAB_DIR`` or
  ``~/.cache/kafkalog-lab`` when missing). Broker keys: num.partitions=1, auto.create.topics.enable=true,
  group.initial.rebalance.delay.ms=0, replication factors 1, offsets.topic.num.partitions=1. If it cannot start,
  every test using it fails with the broker's log tail in the message.
- ``kafkalog`` (session): one ``lab.KafkalogServer`` (``python -m kafkalog serve`` subprocess) with the same three keys.
- ``target`` (function): parametrized ``["kafka", "kafkalog"]`` (test ids ``test_x[kafka]``, ``test_x[kafkalog]``);
  a ``lab.Target`` with ``.name``, ``.bootstrap`` ("127.0.0.1:PORT"), ``.server`` (the KafkaBroker/KafkalogServer)
  and ``.tool(name, *args, timeout=60, input=None, check=True)`` running a Kafka tool (``lab.kafka_tool``; with
  ``check`` a non-zero exit fails the test with the tool's output; ``--bootstrap-server`` is NOT added for you).
- ``targets`` (function): ``{"kafka": Target, "kafkalog": Target}``, both brokers at once, for tests that run a
  workload on each and compare the answers.
- ``topic_name`` (function): ``topic_name(tag="") -> str``, a topic (or group) name unique to this test and call
  (letters, digits and '-' only).
- ``compare`` (function): ``compare(kafka_answer, kafkalog_answer, ignore=(), what="")`` asserts the two answers
  (nested dicts/lists/tuples/scalars) are equal field by field; on a difference it fails with one line per differing
  field (``partitions[0].offset: kafka=3 kafkalog=4``). ``ignore`` lists field paths to skip, fnmatch patterns
  (``"*.timestamp"``, ``"nodes[*].id"``). Also importable: ``from .lab import assert_same, diff_answers``.
- a per-test deadline (a ``pytest_runtest_call`` hook, for every test under tests/compat): a test body still running
  after ``LAB_TEST_DEADLINE_S`` seconds (a module-level variable of the test module, default 120) fails with
  TimeoutError instead of hanging the suite; fixture set-up (the brokers' start) is not counted.

Modules import the lab itself with ``from .lab import ...`` (kafka_tool, run_java, run_java_source, KafkaBroker,
KafkalogServer, ...), e.g. to start a broker pair of their own with extra keys (an authorizer) in a module fixture.
"""

from __future__ import annotations

import re
import shutil
import signal
import threading
import uuid
from pathlib import Path

import pytest

from .lab import KafkaBroker, KafkalogServer, LabError, Target, assert_same, run_java

DEFAULT_TEST_DEADLINE_S = 120


def _start_or_fail(server, workdir):
    try:
        return server.start(workdir)
    except (LabError, OSError) as e:
        server.stop()
        pytest.fail(f"the lab's {server.name} broker did not start: {e}\n{server.log_tail()}", pytrace=False)


def _stop_and_clean(server, workdir):
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


# The session's two brokers, stopped as soon as the last test of tests/compat is done (``pytest_runtest_teardown``
# below): Apache Kafka's JVM holds about 500 MB that the Spark tests after it need more (issue 21: the suite stays
# under 4 GB). A compat test that comes later after all (an unusual order on the command line) starts them again.
_SESSION_SERVERS: dict[str, tuple] = {}   # fixture name -> (server, workdir)
_PAUSED: set[str] = set()


def _session_server(name, server, workdir):
    _start_or_fail(server, workdir)
    _SESSION_SERVERS[name] = (server, workdir)
    try:
        yield server
    finally:
        _SESSION_SERVERS.pop(name, None)
        _PAUSED.discard(name)
        _stop_and_clean(server, workdir)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """Apache Kafka 4.4.0, one KRaft node, for the session's compat tests."""
    yield from _session_server("kafka", KafkaBroker(), tmp_path_factory.mktemp("kafka"))


@pytest.fixture(scope="session")
def kafkalog(tmp_path_factory):
    """`kafkalog serve` over a fresh data dir, for the session's compat tests."""
    yield from _session_server("kafkalog", KafkalogServer(), tmp_path_factory.mktemp("kafkalog"))


def _is_compat(item) -> bool:
    return item is not None and Path(str(item.path)).resolve().is_relative_to(Path(__file__).resolve().parent)


# -- the transaction tests' broker pair ---------------------------------------------------------------------------
# Kafka with transaction.version=0 and kafkalog at 0 too (a new 4.4 cluster, and kafkalog, have 2: Java 4.4 and
# franz-go then take KIP-890 part 2's paths, which tests/compat/test_transactions_v2*.py compare on the session's
# pair), both with TXN_SERVER_KEYS: the transactions v0/v1 paths; shared by test_transactions.py,
# test_transactions_clients.py and test_streams_eos.py through conftest.py's session fixture ``txn_servers``.

TXN_SERVER_KEYS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    "transaction.max.timeout.ms": 900_000,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
}


class TxnServers:
    """Kafka (transaction.version=0) and kafkalog with TXN_SERVER_KEYS, each started on first use; a start that
    failed is remembered (each later test fails at once with the same account)."""

    def __init__(self, tmp_path_factory):
        self.tmp = tmp_path_factory
        self.servers: dict[str, object] = {}
        self.failed: dict[str, str] = {}
        self.workdirs = []

    def get(self, name: str):
        if name in self.failed:
            pytest.fail(self.failed[name], pytrace=False)
        server = self.servers.get(name)
        if server is not None:
            if not server.running():
                pytest.fail(f"the transaction tests' {name} broker is no longer running:\n{server.log_tail()}",
                            pytrace=False)
            return server
        workdir = self.tmp.mktemp(f"txn-{name}")
        self.workdirs.append(workdir)
        # both at transaction.version=0: Kafka downgraded below, kafkalog by its server key of that name
        server = KafkaBroker(TXN_SERVER_KEYS) if name == "kafka" else \
            KafkalogServer({**TXN_SERVER_KEYS, "transaction.version": 0})
        try:
            server.start(workdir)
            if name == "kafka":
                disable_transaction_version(server.bootstrap)
        except (LabError, OSError, AssertionError) as e:
            server.stop()
            self.failed[name] = f"the transaction tests' {name} broker did not start: {e}\n{server.log_tail()}"
            pytest.fail(self.failed[name], pytrace=False)
        self.servers[name] = server
        return server

    def target(self, name: str) -> Target:
        server = self.get(name)
        return Target(name, server.bootstrap, server)

    def stop(self):
        """Stop both and forget them: a later ``get`` starts them again."""
        for server in self.servers.values():
            server.stop()
        for workdir in self.workdirs:
            shutil.rmtree(workdir, ignore_errors=True)
        self.servers, self.workdirs, self.failed = {}, [], {}


def disable_transaction_version(bootstrap: str) -> None:
    """kafka-features downgrade --feature transaction.version=0, checked with describe."""
    tool = "org.apache.kafka.tools.FeatureCommand"
    r = run_java(tool, ["--bootstrap-server", bootstrap, "downgrade", "--feature", "transaction.version=0"])
    d = run_java(tool, ["--bootstrap-server", bootstrap, "describe"])
    m = re.search(r"Feature: transaction\.version\s.*FinalizedVersionLevel: (\d+)", d.stdout)
    if r.returncode != 0 or m is None or m.group(1) != "0":
        raise LabError(f"could not set transaction.version=0 on Kafka: {r.stdout[-1000:]}{r.stderr[-2000:]}\n"
                       f"describe: {d.stdout[-2000:]}")


_TXN_SERVERS: list = []  # the session's TxnServers, once made


@pytest.fixture(scope="session")
def txn_servers(tmp_path_factory):
    """The transaction tests' broker pair (TxnServers: Kafka at transaction.version=0, and kafkalog), shared by
    the modules that use it (one JVM start, not one per module) and stopped after the last test that uses it."""
    servers = TxnServers(tmp_path_factory)
    _TXN_SERVERS.append(servers)
    try:
        yield servers
    finally:
        _TXN_SERVERS.remove(servers)
        servers.stop()


def pytest_runtest_teardown(item, nextitem):
    if _TXN_SERVERS and (nextitem is None or "txn_servers" not in getattr(nextitem, "fixturenames", ())):
        _TXN_SERVERS[0].stop()  # started again by the next test that needs it
    if not _is_compat(nextitem):
        for name, (server, workdir) in list(_SESSION_SERVERS.items()):
            if server.running():
                server.stop()
                shutil.rmtree(workdir, ignore_errors=True)
                _PAUSED.add(name)


@pytest.fixture(autouse=True)
def _resume_session_servers():
    """Start again what the teardown hook stopped, for a compat test that comes after other packages' tests."""
    for name in list(_PAUSED):
        server, workdir = _SESSION_SERVERS[name]
        _PAUSED.discard(name)
        _start_or_fail(server, workdir)
    yield


def _target(server) -> Target:
    if not server.running():
        pytest.fail(f"the lab's {server.name} broker is no longer running:\n{server.log_tail()}", pytrace=False)
    return Target(server.name, server.bootstrap, server)


@pytest.fixture(params=["kafka", "kafkalog"], ids=["kafka", "kafkalog"])
def target(request):
    """The broker under test, once per broker: ``.name``, ``.bootstrap``, ``.server``, ``.tool(...)``."""
    return _target(request.getfixturevalue(request.param))


@pytest.fixture
def targets(kafka, kafkalog):
    """Both brokers: ``{"kafka": Target, "kafkalog": Target}``."""
    return {"kafka": _target(kafka), "kafkalog": _target(kafkalog)}


@pytest.fixture
def topic_name(request):
    """topic_name(tag="") -> a topic (or group) name unique to this test and call."""
    # letters, digits and '-' only: Kafka warns about (and its tools print a WARNING for) '.' and '_' in names
    base = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name)[:60].strip("-")

    def _name(tag: str = "") -> str:
        return f"{base}{'-' + tag if tag else ''}-{uuid.uuid4().hex[:8]}"
    return _name


@pytest.fixture
def compare():
    """compare(kafka_answer, kafkalog_answer, ignore=(), what="") -> None; fails with a field-by-field diff."""
    return assert_same


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """The per-test deadline: the test body (not the session's broker start-up) gets LAB_TEST_DEADLINE_S seconds
    (its module's variable, default 120), then fails with TimeoutError instead of hanging the suite."""
    seconds = getattr(item.module, "LAB_TEST_DEADLINE_S", DEFAULT_TEST_DEADLINE_S)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return (yield)

    def _expired(signum, frame):
        raise TimeoutError(f"test still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
