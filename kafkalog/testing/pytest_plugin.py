"""kafkalog's pytest plugin: a real Kafka-compatible broker for a test suite (registered through the ``pytest11``
entry point ``kafkalog``; ``-p no:kafkalog`` turns it off).

pytest imports it in every run of an environment where kafkalog is installed, so registering it costs nothing:
``kafkalog`` and ``kafkalog.testing`` load their names lazily, and this module imports only pytest and them; the
compiled engine and numpy load the first time a test asks for one of the fixtures. The machinery is
``kafkalog.testing``.

Fixtures:

- ``kafka_broker`` (session): a ``kafkalog.testing.LocalBroker`` on 127.0.0.1 over a temp data dir; in this process
  (``--kafkalog-mode=thread``, the default) or a ``kafkalog serve`` child (``process``). Server keys from
  ``--kafkalog-config KEY=VALUE`` and the ``kafkalog_config`` fixture (override it in a conftest.py).
- ``kafka_bootstrap``: its "host:port"; ``kafka_admin``: ``kafkalog.testing.Admin`` on it.
- ``kafka_topic``: a factory, ``kafka_topic(partitions=1, config=None, prefix=None) -> name``: a topic made for
  this test under a name no other test uses, deleted after it.
- ``kafka_broker_fresh`` (function): an empty broker of the test's own. ``kafka_broker_sasl`` (session):
  SASL_PLAINTEXT with users (``kafkalog_sasl_users``), an authorizer, ``User:admin`` a super user.
- ``confluent_producer``, ``confluent_consumer``, ``confluent_admin``, ``kafka_python_producer``,
  ``kafka_python_consumer``, ``kafka_python_admin``, ``aiokafka_producer``, ``aiokafka_consumer`` (async, with
  pytest-asyncio): ready clients of the Python Kafka clients, each skipping its test when that client (or
  pytest-asyncio) is not installed; consumers start from the earliest offset in a group of the test's own.
"""

from __future__ import annotations

import re

import pytest

_OPT_MODE = "--kafkalog-mode"


def _leave_kafkalog_unrewritten() -> None:
    """pytest rewrites the asserts of every module of a distribution that registers a plugin, here all of
    ``kafkalog`` and ``pyspark_kafkalog``, at the first import of each in a run: ~70 ms more before a test's broker
    answers (pytest's own bytecode of each module, read back or made) and bytecode files of pytest's beside ours.
    kafkalog is not test code (its few asserts are invariants, not a test's assertions), so its packages come off
    the import hook's list before anything imports them. The list is a private attribute of pytest's hook: a pytest
    without it keeps rewriting, nothing else changes. A module named on the command line, a conftest or a test file
    is still rewritten (the hook's other rules)."""
    import sys
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if isinstance(marked, set) and ("kafkalog" in marked or "pyspark_kafkalog" in marked):
            marked.difference_update(("kafkalog", "pyspark_kafkalog"))
            cache = getattr(finder, "_marked_for_rewrite_cache", None)
            if isinstance(cache, dict):
                cache.clear()


_leave_kafkalog_unrewritten()


def pytest_addoption(parser):
    g = parser.getgroup("kafkalog", "kafkalog's Kafka broker for tests")
    g.addoption(_OPT_MODE, choices=("thread", "process"), default=None,
                help="run kafka_broker in this process (thread, default) or as a `kafkalog serve` child (process)")
    g.addoption("--kafkalog-config", action="append", default=[], metavar="KEY=VALUE",
                help="a Kafka server key for the test brokers (repeatable), e.g. num.partitions=3")
    g.addoption("--kafkalog-keep-data", action="store_true", default=False,
                help="keep the brokers' data dirs after the run (their paths are printed)")
    g.addoption("--kafkalog-tmp", default=None, metavar="auto|disk|FOLDER",
                help="where the brokers' data dirs go: auto (default, $KAFKALOG_TEST_TMP wins: /dev/shm when it has "
                     "2 GiB free, else the temp folder), disk (the temp folder) or a folder")
    parser.addini("kafkalog_mode", "thread or process: how kafka_broker runs (--kafkalog-mode wins)", default="thread")
    parser.addini("kafkalog_config", "Kafka server keys for the test brokers, one KEY=VALUE a line", type="linelist",
                  default=[])


def pytest_configure(config):
    if config.pluginmanager.has_plugin("asyncio"):
        from . import _pytest_asyncio
        config.pluginmanager.register(_pytest_asyncio, "kafkalog-asyncio")


def _settings(config) -> tuple[str, dict, bool]:
    mode = config.getoption(_OPT_MODE) or config.getini("kafkalog_mode") or "thread"
    server = {}
    for kv in [*config.getini("kafkalog_config"), *config.getoption("--kafkalog-config")]:
        key, sep, value = kv.partition("=")
        if not sep:
            raise pytest.UsageError(f"kafkalog config {kv!r}: expected KEY=VALUE")
        server[key.strip()] = value.strip()
    return mode, server, config.getoption("--kafkalog-keep-data")


def _start(config, overrides: dict, name: str, **kw):
    from .broker import ROOT, LocalBroker
    mode, server, keep = _settings(config)
    ROOT.keep = ROOT.keep or keep
    ROOT.tmp = ROOT.tmp or config.getoption("--kafkalog-tmp")
    broker = LocalBroker(mode, {**server, **overrides}, name=name, keep_data=keep, **kw)
    broker.start()
    if keep:
        print(f"\nkafkalog: {name} data dir {broker.data_dir}")
    return broker


@pytest.fixture(scope="session")
def kafkalog_config() -> dict:
    """Kafka server keys for the test brokers (override in a conftest.py: return {"num.partitions": 3, ...})."""
    return {}


@pytest.fixture(scope="session")
def kafkalog_sasl_users() -> dict:
    """{user: password} made on ``kafka_broker_sasl`` before it starts (override in a conftest.py)."""
    from .broker import SASL_USERS
    return dict(SASL_USERS)


@pytest.fixture(scope="session")
def kafka_broker(pytestconfig, kafkalog_config):
    """A kafkalog broker for the session (one per xdist worker): ``.bootstrap_servers``, ``.produce()``,
    ``.consume_all()``, ``.fail_produce()``, ``.stall()``, ``.restart()`` ... (``kafkalog.testing.LocalBroker``)."""
    broker = _start(pytestconfig, kafkalog_config, "broker")
    yield broker
    broker.stop()


@pytest.fixture
def kafka_broker_fresh(pytestconfig, kafkalog_config):
    """An empty broker of this test alone (stopped and removed after it)."""
    broker = _start(pytestconfig, kafkalog_config, "fresh")
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_broker_sasl(pytestconfig, kafkalog_config, kafkalog_sasl_users):
    """A SASL_PLAINTEXT broker (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with ``kafkalog_sasl_users``, ACLs checked
    (``.add_acl()``; a resource without ACLs is open), ``User:admin`` a super user. ``.client_config(client,
    user=...)`` gives a client's settings."""
    broker = _start(pytestconfig, kafkalog_config, "sasl", sasl=True, users=kafkalog_sasl_users)
    yield broker
    broker.stop()


@pytest.fixture
def kafka_bootstrap(kafka_broker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def kafka_admin(kafka_broker):
    """``kafkalog.testing.Admin`` on ``kafka_broker``: create/delete topics, produce, read, list offsets, groups."""
    with kafka_broker.admin() as admin:
        yield admin


def _unique(request) -> str:
    import uuid
    return f"{_test_name(request)}-{uuid.uuid4().hex[:10]}"


def _test_name(request) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80].strip("-.") or "test"


@pytest.fixture
def kafka_topic(request, kafka_broker):
    """``kafka_topic(partitions=1, config=None, prefix=None) -> name``: a new topic under a name no other test
    (nor xdist worker) uses, made now and deleted after the test."""
    made = []

    def make(partitions: int = 1, config: dict | None = None, prefix: str | None = None) -> str:
        import uuid
        name = f"{prefix or _test_name(request)}-{uuid.uuid4().hex[:10]}"
        kafka_broker.create_topic(name, partitions, config)  # on the broker's one shared connection
        made.append(name)
        return name

    yield make
    if kafka_broker.running:
        for name in made:
            kafka_broker.delete_topic(name)


@pytest.fixture
def kafka_group(request) -> str:
    """A consumer group id no other test uses."""
    return _unique(request)


# The clients' fixtures ask for kafka_topic first, so the topics a test makes are deleted after its clients closed
# (a consumer closing commits its offsets: a topic deleted under it makes kafka-python and aiokafka retry that commit)

def _need(module: str, pip_name: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        pytest.skip(f"{pip_name} is not installed (pip install {pip_name})")


# -- confluent-kafka ----------------------------------------------------------------------------------------------

@pytest.fixture
def confluent_producer(kafka_topic, kafka_broker):
    """A ``confluent_kafka.Producer`` on kafka_broker (flushed and closed after the test)."""
    ck = _need("confluent_kafka", "confluent-kafka")
    p = ck.Producer(kafka_broker.client_config("confluent"))
    yield p
    p.flush(10)


@pytest.fixture
def confluent_consumer(kafka_topic, kafka_broker, kafka_group):
    """A ``confluent_kafka.Consumer`` in a group of this test, reading from the earliest offset (closed after)."""
    ck = _need("confluent_kafka", "confluent-kafka")
    c = ck.Consumer({**kafka_broker.client_config("confluent"), "group.id": kafka_group,
                     "auto.offset.reset": "earliest"})
    yield c
    c.close()


@pytest.fixture
def confluent_admin(kafka_broker):
    """A ``confluent_kafka.admin.AdminClient`` on kafka_broker."""
    _need("confluent_kafka", "confluent-kafka")
    from confluent_kafka.admin import AdminClient
    return AdminClient(kafka_broker.client_config("confluent"))


# -- kafka-python -------------------------------------------------------------------------------------------------

@pytest.fixture
def kafka_python_producer(kafka_topic, kafka_broker):
    """A ``kafka.KafkaProducer`` on kafka_broker (closed after the test)."""
    kp = _need("kafka", "kafka-python")
    p = kp.KafkaProducer(**kafka_broker.client_config("kafka-python"))
    yield p
    p.close(10)


@pytest.fixture
def kafka_python_consumer(kafka_topic, kafka_broker, kafka_group):
    """A ``kafka.KafkaConsumer`` in a group of this test from the earliest offset, not subscribed yet."""
    kp = _need("kafka", "kafka-python")
    c = kp.KafkaConsumer(**kafka_broker.client_config("kafka-python"), group_id=kafka_group,
                         auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    yield c
    c.close()


@pytest.fixture
def kafka_python_admin(kafka_broker):
    """A ``kafka.KafkaAdminClient`` on kafka_broker."""
    kp = _need("kafka", "kafka-python")
    a = kp.KafkaAdminClient(**kafka_broker.client_config("kafka-python"))
    yield a
    a.close()


# -- aiokafka: async fixtures when pytest-asyncio is installed (_pytest_asyncio.py), else these skip -------------

@pytest.fixture
def aiokafka_producer():
    pytest.skip("aiokafka_producer is an async fixture: it needs pytest-asyncio (pip install pytest-asyncio)")


@pytest.fixture
def aiokafka_consumer():
    pytest.skip("aiokafka_consumer is an async fixture: it needs pytest-asyncio (pip install pytest-asyncio)")
