"""The plugin's fixtures and helpers, each in a real inner pytest run (about 1 s a run: an interpreter, pytest,
kafkalog's import and a broker that starts in ~20 ms in a thread, ~0.3 s as a process)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = r'''
import sys
import pytest

TOPICS = []


def test_broker_and_bootstrap(kafka_broker, kafka_bootstrap, kafka_admin):
    assert kafka_bootstrap == kafka_broker.bootstrap_servers
    assert kafka_bootstrap.startswith("127.0.0.1:") and kafka_broker.port > 0
    assert kafka_broker.mode == MODE
    assert (kafka_broker.pid == __import__("os").getpid()) == (MODE == "thread")
    assert kafka_admin.metadata() is not None


def test_topic_factory(kafka_topic, kafka_admin):
    a = kafka_topic(partitions=3, config={"retention.ms": 3600000})
    b = kafka_topic()
    assert a != b and a.startswith("test_topic_factory-")
    assert kafka_admin.partitions(a) == 3 and kafka_admin.partitions(b) == 1
    TOPICS.extend([a, b])


def test_topics_deleted_after_their_test(kafka_admin):
    assert len(TOPICS) == 2
    assert not set(TOPICS) & set(kafka_admin.topics())


def test_produce_and_consume_all(kafka_broker, kafka_topic):
    t = kafka_topic(partitions=2)
    assert kafka_broker.produce(t, [b"a", ("k", "v"), {"value": b"h", "headers": {"trace": "1"}, "partition": 1}]) \
        == [(0, 0), (0, 1), (1, 0)]
    recs = kafka_broker.consume_all(t, count=3)
    assert [(r.partition, r.offset, r.key, r.value) for r in recs] == \
        [(0, 0, None, b"a"), (0, 1, b"k", b"v"), (1, 0, None, b"h")]
    assert recs[2].headers == [("trace", b"1")]


def test_consume_all_waits_for_count_then_fails(kafka_broker, kafka_topic):
    t = kafka_topic()
    kafka_broker.produce(t, [b"only"])
    with pytest.raises(TimeoutError, match="it has 1"):
        kafka_broker.consume_all(t, timeout=0.3, count=2)


def test_timed_records_for_offsets_for_times(kafka_broker, kafka_topic, kafka_admin):
    from kafkalog.testing import timed
    t = kafka_topic()
    kafka_broker.produce(t, timed([b"a", b"b", b"c"], start_ms=1_700_000_000_000, step_ms=60_000))
    assert [r.timestamp for r in kafka_broker.consume_all(t)] == [1_700_000_000_000, 1_700_000_060_000,
                                                                  1_700_000_120_000]
    assert kafka_admin.list_offsets(t, 1_700_000_030_000) == {0: 1}
    assert kafka_admin.list_offsets(t, 1_700_000_200_000) == {0: -1}


def test_wait_for(kafka_broker):
    from kafkalog.testing import wait_for
    calls = []
    assert wait_for(lambda: calls.append(1) or len(calls) >= 3) is True
    with pytest.raises(TimeoutError, match="never"):
        wait_for(lambda: False, timeout=0.05, what="never")


def test_fresh_broker_is_empty_and_its_own(kafka_broker, kafka_broker_fresh):
    kafka_broker.produce("shared-topic", [b"x"])
    assert kafka_broker_fresh.port != kafka_broker.port
    assert kafka_broker_fresh.data_dir != kafka_broker.data_dir
    with kafka_broker_fresh.admin() as a:
        assert a.topics() == []
    FRESH.append(kafka_broker_fresh.data_dir)


def test_fresh_broker_removed_after_its_test(kafka_broker):
    assert FRESH and not FRESH[0].exists()


def test_config_fixture_reaches_the_broker(kafka_broker):
    kafka_broker.produce("auto-made", [b"x"])
    with kafka_broker.admin() as a:
        assert a.partitions("auto-made") == 3


FRESH = []
'''

CONFTEST = '''
import pytest

@pytest.fixture(scope="session")
def kafkalog_config():
    return {"num.partitions": 3}
'''


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_fixtures_and_helpers(inner, pytester, mode):
    pytester.makeconftest(CONFTEST)
    r = inner(f"MODE = {mode!r}\n" + FIXTURES, f"--kafkalog-mode={mode}")
    r.assert_outcomes(passed=10)


def test_mode_from_ini_and_config_option(inner):
    r = inner('''
def test_it(kafka_broker):
    assert kafka_broker.mode == "process" and kafka_broker.pid != __import__("os").getpid()
    kafka_broker.produce("t", [b"x"])
    with kafka_broker.admin() as a:
        assert a.partitions("t") == 2
''', "--kafkalog-config", "num.partitions=2", ini="[pytest]\nkafkalog_mode = process\n")
    r.assert_outcomes(passed=1)


def test_inert_unless_a_fixture_is_used(inner):
    """Registered in every run of an environment where kafkalog is installed: a run whose tests use none of its
    fixtures imports kafkalog's lazy package and the plugin alone (no numpy, no compiled engine, no storage or
    broker), starts no thread, process or folder."""
    r = inner('''
import sys, threading, os, glob, tempfile

def test_nothing_started():
    assert "kafkalog.testing.pytest_plugin" in sys.modules
    loaded = {m for m in sys.modules if m == "kafkalog" or m.startswith("kafkalog.")}
    assert loaded <= {"kafkalog", "kafkalog.testing", "kafkalog.testing.pytest_plugin",
                      "kafkalog.testing._pytest_asyncio"}, loaded
    assert "numpy" not in sys.modules
    assert threading.active_count() == 1
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"kafkalog-test-{os.getpid()}-*"))
''')
    r.assert_outcomes(passed=1)


def test_kafkalog_is_imported_as_itself_not_rewritten_by_pytest(inner):
    """pytest marks every module of a plugin's distribution for assert rewriting; the plugin takes kafkalog off that
    list (~70 ms of a broker's first start): the engine and broker a test imports are Python's own bytecode, while
    the test file's asserts are still rewritten."""
    r = inner('''
import sys

def test_broker_modules(kafka_broker):
    kafka_broker.produce("t", [b"x"])
    for name in ("kafkalog.broker.server", "kafkalog.storage.log", "kafkalog.testing.broker"):
        loader = type(sys.modules[name].__loader__).__name__
        assert loader == "SourceFileLoader", (name, loader)

def test_own_asserts_rewritten():
    assert [1, 2] == [1, 3]
''')
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["*At index 1 diff: 2 != 3*"])


def test_client_fixture_skips_without_its_client(inner):
    r = inner('''
import sys
sys.modules["confluent_kafka"] = None  # as if not installed

def test_uses_it(confluent_producer):
    raise AssertionError("not reached")
''', "-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*confluent-kafka is not installed (pip install confluent-kafka)*"])


def test_readme_examples_run(inner):
    """The README's "Testing your Kafka code" examples, as written (Spark's needs a session with Spark's Kafka
    connector: left out here)."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()  # the checkout's, installed or not
    section = readme[readme.index("## Testing your Kafka code"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    r = inner(code, "-k", "not spark")
    r.assert_outcomes(passed=3, deselected=1)


WHERE = r'''
import os

def test_where(kafka_broker):
    kafka_broker.produce("t", [b"x"])
    d = kafka_broker.data_dir
    index = d / "t-0" / ("%020d.index" % 0)
    print("DATA", d, index.stat().st_size)
'''


@pytest.mark.parametrize("choice", ["auto", "disk", "folder", "env"])
def test_data_dirs_go_where_kafkalog_tmp_says(inner, pytester, monkeypatch, tmp_path, choice):
    """A test broker's data are thrown away: by default they go to a memory file system (/dev/shm, when it has room),
    where the fsyncs that make a topic's creation durable cost nothing; --kafkalog-tmp (or $KAFKALOG_TEST_TMP) says
    disk (the temp folder) or a folder. Index files are 1 MiB, not Kafka's 10 (each segment preallocates two)."""
    import tempfile

    from kafkalog.testing.broker import TMPFS, scratch_base
    folder = tmp_path / "scratch"
    folder.mkdir()
    args = {"auto": [], "disk": ["--kafkalog-tmp=disk"], "folder": [f"--kafkalog-tmp={folder}"], "env": []}[choice]
    if choice == "env":
        monkeypatch.setenv("KAFKALOG_TEST_TMP", str(folder))
    r = inner(WHERE, "-s", *args)
    r.assert_outcomes(passed=1)
    line = next(x for x in r.outlines if "DATA " in x)
    data_dir, index_size = line.split("DATA ", 1)[1].split()
    want = {"auto": scratch_base("auto"), "disk": tempfile.gettempdir(), "folder": str(folder),
            "env": str(folder)}[choice]
    assert os.path.dirname(os.path.dirname(os.path.dirname(data_dir))) == want
    if choice == "auto" and os.path.isdir(TMPFS) and os.statvfs(TMPFS).f_bavail * os.statvfs(TMPFS).f_frsize >= 2 << 30:
        assert want == TMPFS
    assert int(index_size) == 1 << 16
    assert not os.path.exists(data_dir)  # removed at the end of the run, wherever it was


def test_scratch_base_falls_back_to_the_temp_folder(monkeypatch, tmp_path):
    import tempfile

    from kafkalog.testing import broker
    monkeypatch.delenv("KAFKALOG_TEST_TMP", raising=False)
    monkeypatch.setattr(broker, "TMPFS", str(tmp_path / "no-such-tmpfs"))
    assert broker.scratch_base() == tempfile.gettempdir()
    monkeypatch.setattr(broker, "TMPFS", str(tmp_path))
    monkeypatch.setattr(broker, "TMPFS_MIN_FREE", 1 << 62)  # too little room
    assert broker.scratch_base() == tempfile.gettempdir()
    monkeypatch.setattr(broker, "TMPFS_MIN_FREE", 1)
    assert broker.scratch_base() == str(tmp_path)
    with pytest.raises(ValueError, match="not a folder"):
        broker.scratch_base(str(tmp_path / "missing"))
